#!/usr/bin/env python3
"""Scores the installed llama.cpp (llama-cpp-python) against a reference logits file, the way
the parity test scores statelm: teacher-forced (the prompt as one batch, then each reference
step's token decoded alone), top-1 agreement and mean |Δlogit| over each step's 20 reference ids.
f32 KV cache and plain attention by default, like the `.f32kv-nofa` files.

    python3 tools/parity/llama_score.py MODEL.gguf reference/logits-X.f32kv-nofa.json
    python3 tools/parity/llama_score.py --one-by-one MODEL.gguf REF.json   # prompt token by token
"""
import json
import sys

import llama_cpp as L
import numpy as np

ONE_BY_ONE = "--one-by-one" in sys.argv


def main():
    model_path, ref_path = [a for a in sys.argv[1:] if not a.startswith("--")]
    refs = json.load(open(ref_path))
    L.llama_backend_init()
    model = L.llama_model_load_from_file(model_path.encode(), L.llama_model_default_params())
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 2048, 2048, 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.type_k = cp.type_v = L.GGML_TYPE_F32
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(2048, 0, 1)

    def feed(tokens, p0):
        batch.n_tokens = len(tokens)
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, p0 + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = int(i == len(tokens) - 1)
        if L.llama_decode(ctx, batch) != 0:
            sys.exit("llama_decode failed")
        return np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))

    steps = agree = 0
    diff_sum = 0.0
    for p in refs:
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        if ONE_BY_ONE:
            for i, tok in enumerate(p["prompt_ids"]):
                logits = feed([tok], i)
        else:
            logits = feed(p["prompt_ids"], 0)
        pos = len(p["prompt_ids"])
        a, d = 0, 0.0
        for k, st in enumerate(p["steps"]):
            if k > 0:
                logits = feed([p["steps"][k - 1]["token"]], pos)
                pos += 1
            a += int(int(logits.argmax()) == st["top"][0][0])
            d += sum(abs(float(logits[i]) - v) for i, v in st["top"]) / len(st["top"])
        n = len(p["steps"])
        print(f"{p['name']:14s} top-1 {a}/{n}  mean |Δ| {d / n:.4f}", flush=True)
        steps, agree, diff_sum = steps + n, agree + a, diff_sum + d
    print(f"overall top-1 {100 * agree / steps:.2f}%  mean |Δ| {diff_sum / steps:.4f}")


if __name__ == "__main__":
    main()
