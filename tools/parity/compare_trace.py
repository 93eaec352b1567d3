#!/usr/bin/env python3
"""Compares statelm's trace (crates/model/examples/trace_dump.rs) with llama.cpp's
(llama_trace.py) intermediate by intermediate: share of bit-identical values and max |Δ|.
The first row that is not 100% exact is where the two computations part.

    python3 tools/parity/compare_trace.py OURS_PREFIX LLAMA.npz [max_layer]
"""
import json
import sys

import numpy as np

# statelm trace name -> llama.cpp tensor name ({} = layer).
NAMES = {"embd": "inp_scaled", "attn_norm": "attn_norm-{}", "q_normed": "Qcur_normed-{}",
         "k_normed": "Kcur_normed-{}", "q": "Qcur-{}#2", "k": "Kcur-{}#2", "v": "Vcur-{}",
         "kqv_out": "kqv_out-{}", "attn_post_norm": "attn_post_norm-{}", "attn_out": "sa_out-{}", "ffn_norm": "ffn_norm-{}",
         "ffn_gate": "ffn_gate-{}", "ffn_up": "ffn_up-{}", "ffn_geglu": "ffn_geglu-{}",
         "ffn_out": "ffn_out-{}", "ffn_post_norm": "ffn_post_norm-{}", "l_out": "l_out-{}", "logits_last": "logits_last"}

# Tried in order after NAMES; the last one present wins.
ALIASES = {"q": ["Qcur-{}#3"], "k": ["Kcur-{}#3"], "ffn_geglu": ["ffn_swiglu-{}"],
           "attn_out": ["ffn_inp-{}"]}


def main():
    prefix, llama_path = sys.argv[1], sys.argv[2]
    max_layer = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 30
    index = json.load(open(prefix + ".json"))
    data = np.fromfile(prefix + ".bin", dtype="<f4")
    theirs = np.load(llama_path)
    for r in index:
        if r["layer"] is not None and r["layer"] >= max_layer:
            continue
        key = NAMES[r["name"]].format(r["layer"])
        # Qwen-style graphs name the post-bias/rope tensors differently from Gemma's.
        for alt in ALIASES.get(r["name"], []):
            if key not in theirs or theirs[key].size != r["len"] or alt.format(r["layer"]) in theirs:
                if alt.format(r["layer"]) in theirs:
                    key = alt.format(r["layer"])
        a = data[r["offset"]:r["offset"] + r["len"]]
        if key not in theirs:
            print(f"{r['name']:12s} L{r['layer']}: no llama.cpp tensor {key}")
            continue
        b = theirs[key].reshape(-1)
        if a.size != b.size:
            print(f"{r['name']:12s} L{r['layer']}: sizes {a.size} vs {b.size}")
            continue
        d = np.abs(a - b)
        print(f"{r['name']:12s} L{r['layer']}: exact {100 * (a == b).mean():6.2f}%  max |Δ| {d.max():.3e}")


if __name__ == "__main__":
    main()
