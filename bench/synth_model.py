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

`--qwen3-1.7b` writes Qwen3 1.7B's shape (architecture `qwen3`: hidden 2048, ffn 6144, 28
layers, 16 heads / 8 KV heads of 128, per-head q/k norms, RoPE base 1000000, output tied).
`--lfm2-1.2b` writes LFM2 1.2B's (architecture `lfm2`: hidden 2048, ffn 8192, 16 layers, of
which 2, 5, 8, 10, 12 and 14 attend with 32 heads / 8 KV heads and q/k norms and the other ten
are gated short convolutions with a kernel of 3; output tied). Both keep the Qwen vocabulary
(LFM2's own has 65536 tokens, so its embedding here is 2.3 times the real one).

Needs the `gguf` and `numpy` packages (`scripts/test` installs them). The weights are random
(normal, std 0.02; norms 1), so the model's text is noise: it measures speed, not quality.
"""

import argparse
import mmap
import os
import struct

import gguf
import numpy as np

DEFAULT_TOKENIZER = os.path.expanduser(
    "~/.cache/statelm/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
)


# GGUF metadata value types (the GGUF spec): struct formats of the fixed-size ones.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def read_metadata(path):
    """The metadata of the GGUF file at `path`, key -> value (strings as bytes, arrays as lists).

    Our own reader of the header alone: gguf-py's GGUFReader builds a numpy view for every
    array item and takes ~12 s over the Qwen vocabulary's 151936 tokens and 151387 merges
    (this one: well under a second)."""
    with open(path, "rb") as fh:
        head = fh.read(24)
        if head[:4] != b"GGUF":
            raise SystemExit(f"{path}: not a GGUF file")
        _version, _n_tensors, n_kv = struct.unpack_from("<IQQ", head, 4)
        buf = memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
    pos = 24

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        pos += n
        return bytes(buf[pos - n:pos])

    def value(ty):
        if ty == _STRING:
            return string()
        if ty == _ARRAY:
            item, count = take("<I"), take("<Q")
            return [value(item) for _ in range(count)]
        if ty not in _SCALARS:
            raise SystemExit(f"{path}: unknown GGUF value type {ty}")
        return take(_SCALARS[ty])

    meta = {}
    for _ in range(n_kv):
        key = string().decode("utf-8")
        meta[key] = value(take("<I"))
    return meta


def copy_tokenizer(w, path):
    """Copies the tokenizer.* fields of the GGUF file at `path` into writer `w`."""
    f = read_metadata(path)
    w.add_tokenizer_model(f["tokenizer.ggml.model"].decode("utf-8"))
    if "tokenizer.ggml.pre" in f:
        w.add_tokenizer_pre(f["tokenizer.ggml.pre"].decode("utf-8"))
    toks = f["tokenizer.ggml.tokens"]
    w.add_token_list(toks)
    w.add_token_types([int(t) for t in f["tokenizer.ggml.token_type"]])
    w.add_token_merges(f["tokenizer.ggml.merges"])
    ids = {
        "tokenizer.ggml.eos_token_id": w.add_eos_token_id,
        "tokenizer.ggml.bos_token_id": w.add_bos_token_id,
        "tokenizer.ggml.padding_token_id": w.add_pad_token_id,
    }
    for key, add in ids.items():
        if key in f:
            add(int(f[key]))
    if "tokenizer.ggml.add_bos_token" in f:
        w.add_add_bos_token(bool(f["tokenizer.ggml.add_bos_token"]))
    if "tokenizer.chat_template" in f:
        w.add_chat_template(f["tokenizer.chat_template"].decode("utf-8"))
    return len(toks)


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
    p.add_argument("--head-dim", type=int, help="attention head size (default hidden/heads)")
    p.add_argument("--arch", choices=["qwen2", "llama", "qwen3", "lfm2"], default="qwen2",
                   help="llama: no q/k/v biases, RoPE base 500000, output tied to the embedding")
    p.add_argument("--llama-1b", action="store_true",
                   help="Llama 3.2 1B's shape and architecture (overrides the shape options)")
    p.add_argument("--qwen3-1.7b", dest="qwen3", action="store_true",
                   help="Qwen3 1.7B's shape and architecture (overrides the shape options)")
    p.add_argument("--lfm2-1.2b", dest="lfm2", action="store_true",
                   help="LFM2 1.2B's shape and architecture (overrides the shape options)")
    a = p.parse_args()
    if a.llama_1b:
        a.arch, a.hidden, a.ffn, a.layers, a.heads, a.kv_heads = "llama", 2048, 8192, 16, 32, 8
    if a.qwen3:
        a.arch, a.hidden, a.ffn, a.layers, a.heads, a.kv_heads = "qwen3", 2048, 6144, 28, 16, 8
        a.head_dim = 128
    if a.lfm2:
        a.arch, a.hidden, a.ffn, a.layers, a.heads, a.kv_heads = "lfm2", 2048, 8192, 16, 32, 8
    arch = a.arch
    hd = a.head_dim or a.hidden // a.heads
    attn_layers = {2, 5, 8, 10, 12, 14} if arch == "lfm2" else set(range(a.layers))
    biases = arch == "qwen2"
    tied = arch != "qwen2"
    qk_norm = arch in ("qwen3", "lfm2")
    rope_base = 500000.0 if arch == "llama" else 1000000.0

    rng = np.random.default_rng(a.seed)
    w = gguf.GGUFWriter(a.out, arch)
    w.add_name(f"synthetic {arch} (random weights)")
    vocab = copy_tokenizer(w, a.tokenizer_from)
    w.add_context_length(32768)
    w.add_embedding_length(a.hidden)
    w.add_feed_forward_length(a.ffn)
    w.add_block_count(a.layers)
    w.add_head_count(a.heads)
    if arch == "lfm2":
        kv_counts = [a.kv_heads if i in attn_layers else 0 for i in range(a.layers)]
        w.add_array(f"{arch}.attention.head_count_kv", kv_counts)
        w.add_uint32(f"{arch}.shortconv.l_cache", 3)
    else:
        w.add_head_count_kv(a.kv_heads)
    if arch == "qwen3":
        w.add_uint32(f"{arch}.attention.key_length", hd)
        w.add_uint32(f"{arch}.attention.value_length", hd)
    w.add_rope_freq_base(rope_base)
    if arch != "lfm2":
        w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-6 if arch != "lfm2" else 1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    def mat(name, rows, cols):
        m = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(0.02)
        w.add_tensor(name, m.astype(np.float16))

    def vec(name, n, value=None):
        v = np.full(n, value, np.float32) if value is not None else (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02))
        w.add_tensor(name, v)

    h, q, kv = a.hidden, hd * a.heads, hd * a.kv_heads
    mat("token_embd.weight", vocab, h)
    for i in range(a.layers):
        b = f"blk.{i}."
        vec(b + "attn_norm.weight", h, 1.0)
        if i in attn_layers:
            for t, rows in (("q", q), ("k", kv), ("v", kv)):
                mat(b + f"attn_{t}.weight", rows, h)
                if biases:
                    vec(b + f"attn_{t}.bias", rows)
            mat(b + "attn_output.weight", h, q)
            if qk_norm:
                vec(b + "attn_q_norm.weight", hd, 1.0)
                vec(b + "attn_k_norm.weight", hd, 1.0)
        else:
            mat(b + "shortconv.in_proj.weight", 3 * h, h)
            w.add_tensor(b + "shortconv.conv.weight",
                         rng.standard_normal((h, 3), dtype=np.float32) * np.float32(0.5))
            mat(b + "shortconv.out_proj.weight", h, h)
        vec(b + "ffn_norm.weight", h, 1.0)
        mat(b + "ffn_gate.weight", a.ffn, h)
        mat(b + "ffn_up.weight", a.ffn, h)
        mat(b + "ffn_down.weight", h, a.ffn)
    vec("token_embd_norm.weight" if arch == "lfm2" else "output_norm.weight", h, 1.0)
    if not tied:
        mat("output.weight", vocab, h)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()


if __name__ == "__main__":
    main()
