#!/usr/bin/env python3
"""Times llama.cpp on a GGUF file through llama-cpp-python's low-level C API.

Prints one JSON object shaped like `statelm bench --json` (the fields compare.py reads).
Python stays out of the timed loops: each decode step is one `llama_decode` call plus a
C-side greedy sampler; the script measures and reports that per-token Python overhead.
"""
import argparse
import ctypes
import json
import resource
import statistics
import time

import llama_cpp as L

TEXT = ("The history of computing is a story of machines that learned to remember. "
        "Early calculators held a single number; later computers kept programs and data side by "
        "side, and every generation since has traded speed for memory and memory for speed. ")


def tokens(model, n):
    vocab = L.llama_model_get_vocab(model)
    raw = TEXT.encode()
    buf = (L.llama_token * 4096)()
    k = L.llama_tokenize(vocab, raw, len(raw), buf, 4096, False, False)
    ids = [buf[i] for i in range(k)]
    out = []
    while len(out) < n:
        out.extend(ids)
    return out[:n]


def fill(batch, toks, pos0, want_last):
    batch.n_tokens = len(toks)
    for i, t in enumerate(toks):
        batch.token[i] = t
        batch.pos[i] = pos0 + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1 if (want_last and i == len(toks) - 1) else 0


def clear(ctx):
    L.llama_memory_clear(L.llama_get_memory(ctx), True)


def stat(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--prefill", default="128,512")
    a = ap.parse_args()

    L.llama_backend_init()
    t0 = time.perf_counter()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 2048, 512, 512
    cp.n_threads = cp.n_threads_batch = a.threads
    ctx = L.llama_init_from_model(model, cp)
    load_s = time.perf_counter() - t0
    batch = L.llama_batch_init(512, 0, 1)
    smpl = L.llama_sampler_init_greedy()

    prefill = {}
    for n in [int(x) for x in a.prefill.split(",")]:
        toks, rates = tokens(model, n), []
        for _ in range(a.reps):
            clear(ctx)
            fill(batch, toks, 0, True)
            t = time.perf_counter()
            L.llama_decode(ctx, batch)
            L.llama_synchronize(ctx)
            rates.append(n / (time.perf_counter() - t))
        prefill[f"pp{n}"] = stat(rates)

    prompt = tokens(model, 16)
    rates, ttfts, overhead = [], [], []
    for _ in range(a.reps):
        clear(ctx)
        fill(batch, prompt, 0, True)
        t = time.perf_counter()
        L.llama_decode(ctx, batch)
        nxt = L.llama_sampler_sample(smpl, ctx, -1)
        ttfts.append(time.perf_counter() - t)
        in_c = 0.0
        t = time.perf_counter()
        for i in range(a.decode):
            fill(batch, [nxt], len(prompt) + i, True)
            c = time.perf_counter()
            L.llama_decode(ctx, batch)
            nxt = L.llama_sampler_sample(smpl, ctx, -1)
            in_c += time.perf_counter() - c
        total = time.perf_counter() - t
        rates.append(a.decode / total)
        overhead.append((total - in_c) / total)
    print(json.dumps({
        "model": a.model, "threads": a.threads, "load_s": load_s,
        "prefill_tok_s": prefill, "decode_tok_s": stat(rates), "time_to_first_token_s": stat(ttfts),
        "python_overhead_share": statistics.median(overhead),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "system_info": L.llama_print_system_info().decode().strip(),
    }))


if __name__ == "__main__":
    main()
