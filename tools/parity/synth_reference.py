#!/usr/bin/env python3
"""Records llama.cpp's teacher-forced logits on the architecture parity files (random weights,
one per architecture; written by `cargo run -p statelm-model --features testing --example
synth_parity_files -- DIR`). For each DIR/NAME.gguf it writes OUT/NAME.json: the file's sha256
(the test regenerates the file and checks it is the same one), the context size, and per prompt
the prompt ids and 32 greedy steps of llama.cpp, each with its top-20 logits and the spread
(max - min) of all logits. The prompt is decoded as one batch, then each step's token alone;
f32 KV cache, no flash attention, like the `.f32kv-nofa` references.

    PYTHONPATH=/tmp/lcp336 python3 tools/parity/synth_reference.py /tmp/synth reference/synthetic

`--real` scores real model files the same way, on text prompts (tokenized by llama.cpp, BOS as
the file says) instead of random ids; `crates/model/tests/arch_parity.rs` reads the result from
reference/real/:

    PYTHONPATH=/tmp/lcp336 python3 tools/parity/synth_reference.py --real DIR reference/real

llama-cpp-python 0.3.36 (bench/README.md has the build recipe) is the oracle.
"""
import hashlib
import json
import os
import random
import sys

import llama_cpp as L
import numpy as np

N_CTX = 256  # statelm_model::testing::PARITY_CTX
STEPS = 32
PROMPT_LENS = [3, 9, 17, 30]
TEXT_PROMPTS = [
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a village by the mountains, there lived an old clockmaker who "
    "repaired every clock in the valley. Each morning he opened his small shop at seven, "
    "wound the great pendulum clock by the door, and listened to the ticking of a hundred "
    "clocks. One winter day a girl came in carrying a broken pocket watch, and she said",
]


def score_file(path, real=False):
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    if not model:
        sys.exit(f"{path}: llama.cpp could not load it")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = N_CTX, N_CTX, N_CTX
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.type_k = cp.type_v = L.GGML_TYPE_F32
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(N_CTX, 0, 1)

    def feed(tokens, p0):
        batch.n_tokens = len(tokens)
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, p0 + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = int(i == len(tokens) - 1)
        if L.llama_decode(ctx, batch) != 0:
            sys.exit("llama_decode failed")
        return np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()

    rng = random.Random(1234)
    vocab = L.llama_model_get_vocab(model)

    def tokenize(text):
        buf = (L.llama_token * N_CTX)()
        n = L.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, N_CTX, True, True)
        return [int(t) for t in buf[:n]]

    prompts = []
    for n in TEXT_PROMPTS if real else PROMPT_LENS:
        if real:
            ids = tokenize(n)
        else:
            ids = [1] + [rng.randrange(3, n_vocab) for _ in range(n - 1)]
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        logits = feed(ids, 0)
        pos, steps = len(ids), []
        for _ in range(STEPS):
            order = np.argsort(-logits, kind="stable")[:20]
            tok = int(order[0])
            steps.append({
                "token": tok,
                "spread": float(logits.max() - logits.min()),
                "top": [[int(i), float(logits[i])] for i in order],
            })
            logits = feed([tok], pos)
            pos += 1
        entry = {"prompt_ids": ids, "steps": steps}
        if real:
            entry["prompt"] = n
        prompts.append(entry)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return prompts


def main():
    args = [a for a in sys.argv[1:] if a != "--real"]
    real = "--real" in sys.argv[1:]
    src, out = args[0], args[1]
    os.makedirs(out, exist_ok=True)
    L.llama_backend_init()
    for f in sorted(os.listdir(src)):
        if not f.endswith(".gguf"):
            continue
        path = os.path.join(src, f)
        sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
        doc = {
            "file": f,
            "sha256": sha,
            "n_ctx": N_CTX,
            "oracle": f"llama-cpp-python {L.__version__}",
            "prompts": score_file(path, real),
        }
        name = f[: -len(".gguf")]
        with open(os.path.join(out, name + ".json"), "w") as fh:
            json.dump(doc, fh, separators=(",", ":"))
        print(f"{name}: {sum(len(p['steps']) for p in doc['prompts'])} steps")


if __name__ == "__main__":
    main()
