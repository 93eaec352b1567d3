#!/usr/bin/env python3
"""Writes a synthetic phone-size model for benchmarks: Qwen2 architecture with random F16
weights, at the shape of Qwen2.5 1.5B by default (hidden 1536, ffn 8960, 28 layers, 12 heads /
2 KV heads, vocab 151936), with the tokenizer and chat template of a real Qwen2 GGUF file so that
llama.cpp loads it too. Quantize it afterwards, e.g.

    python3 bench/synth_model.py /tmp/synth-1.5b-f16.gguf
    ./target/release/statelm quantize /tmp/synth-1.5b-f16.gguf /tmp/synth-1.5b-q4_k_m.gguf --type q4_k_m

`--llama-1b` writes the shape of Llama 3.2 1B instead (architecture `llama`: hidden 2048, ffn
8192, 16 layers, 32 heads / 8 KV heads, no q/k/v biases, RoPE base 500000, output tied to the
token embedding). Its vocabulary is still the Qwen tokenizer's 151936 (Llama's is 128256: the
tokenizer cannot be cut down without remapping its special tokens), so its embedding is 18%
larger than the real model's.

Needs the `gguf` and `numpy` packages (`scripts/test` installs them). The weights are random
(normal, std 0.02; norms 1), so the model's text is noise: it measures speed, not quality.
"""

import argparse
import os

import gguf
import numpy as np

DEFAULT_TOKENIZER = os.path.expanduser(
    "~/.cache/statelm/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
)


def field_str(f):
    """A scalar string field's value."""
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def field_scalar(f):
    """A scalar numeric or bool field's value."""
    return f.parts[f.data[0]].tolist()[0]


def copy_tokenizer(w, path):
    """Copies the tokenizer.* fields of the GGUF file at `path` into writer `w`."""
    r = gguf.GGUFReader(path)
    f = r.fields
    w.add_tokenizer_model(field_str(f["tokenizer.ggml.model"]))
    if "tokenizer.ggml.pre" in f:
        w.add_tokenizer_pre(field_str(f["tokenizer.ggml.pre"]))
    toks = f["tokenizer.ggml.tokens"]
    w.add_token_list([bytes(toks.parts[i]) for i in toks.data])
    types = f["tokenizer.ggml.token_type"]
    w.add_token_types([int(types.parts[i][0]) for i in types.data])
    merges = f["tokenizer.ggml.merges"]
    w.add_token_merges([bytes(merges.parts[i]) for i in merges.data])
    ids = {
        "tokenizer.ggml.eos_token_id": w.add_eos_token_id,
        "tokenizer.ggml.bos_token_id": w.add_bos_token_id,
        "tokenizer.ggml.padding_token_id": w.add_pad_token_id,
    }
    for key, add in ids.items():
        if key in f:
            add(int(field_scalar(f[key])))
    if "tokenizer.ggml.add_bos_token" in f:
        w.add_add_bos_token(bool(field_scalar(f["tokenizer.ggml.add_bos_token"])))
    if "tokenizer.chat_template" in f:
        w.add_chat_template(field_str(f["tokenizer.chat_template"]))
    return len(toks.data)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="output GGUF path (F16 weights)")
    p.add_argument("--tokenizer-from", default=DEFAULT_TOKENIZER, help="Qwen2 GGUF to copy the tokenizer from")
    p.add_argument("--hidden", type=int, default=1536)
    p.add_argument("--ffn", type=int, default=8960)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--arch", choices=["qwen2", "llama"], default="qwen2",
                   help="llama: no q/k/v biases, RoPE base 500000, output tied to the embedding")
    p.add_argument("--llama-1b", action="store_true",
                   help="Llama 3.2 1B's shape and architecture (overrides the shape options)")
    a = p.parse_args()
    if a.llama_1b:
        a.arch, a.hidden, a.ffn, a.layers, a.heads, a.kv_heads = "llama", 2048, 8192, 16, 32, 8
    arch = a.arch
    biases, tied, rope_base = (False, True, 500000.0) if arch == "llama" else (True, False, 1000000.0)

    rng = np.random.default_rng(a.seed)
    w = gguf.GGUFWriter(a.out, arch)
    w.add_name(f"synthetic {arch} (random weights)")
    vocab = copy_tokenizer(w, a.tokenizer_from)
    w.add_context_length(32768)
    w.add_embedding_length(a.hidden)
    w.add_feed_forward_length(a.ffn)
    w.add_block_count(a.layers)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_freq_base(rope_base)
    w.add_rope_dimension_count(a.hidden // a.heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    def mat(name, rows, cols):
        m = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(0.02)
        w.add_tensor(name, m.astype(np.float16))

    def vec(name, n, value=None):
        v = np.full(n, value, np.float32) if value is not None else (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02))
        w.add_tensor(name, v)

    h, kv = a.hidden, a.hidden // a.heads * a.kv_heads
    mat("token_embd.weight", vocab, h)
    for i in range(a.layers):
        b = f"blk.{i}."
        vec(b + "attn_norm.weight", h, 1.0)
        for t, rows in (("q", h), ("k", kv), ("v", kv)):
            mat(b + f"attn_{t}.weight", rows, h)
            if biases:
                vec(b + f"attn_{t}.bias", rows)
        mat(b + "attn_output.weight", h, h)
        vec(b + "ffn_norm.weight", h, 1.0)
        mat(b + "ffn_gate.weight", a.ffn, h)
        mat(b + "ffn_up.weight", a.ffn, h)
        mat(b + "ffn_down.weight", h, a.ffn)
    vec("output_norm.weight", h, 1.0)
    if not tied:
        mat("output.weight", vocab, h)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()


if __name__ == "__main__":
    main()
