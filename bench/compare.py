#!/usr/bin/env python3
"""statelm vs llama.cpp on the same GGUF files, same thread count, interleaved A B A B.

    pip install llama-cpp-python==0.3.36   # once; it compiles llama.cpp (see bench/README.md)
    cargo build --release -p statelm-cli
    python3 bench/compare.py [--threads 2] [--rounds 3] MODEL.gguf [MODEL.gguf ...]

Each round runs one `statelm bench --json` process and one llama.cpp process per file, in
alternating order (A B, then B A), so a busy machine slows both alike. Each round gives its own
ratio; the table prints the median of those paired ratios and their range over the rounds (the
tok/s columns are medians over rounds). Only the ratios are meant to be read. The first lines name
the instruction sets on both sides: statelm's kernel table and llama.cpp's build features (a
build with `GGML_NATIVE=OFF -DGGML_AVX2=ON` has no AVX-512/VNNI; the default, native build uses
what the CPU has). `--llama-path DIR` runs the llama.cpp side from a `pip install --target DIR`
build, to compare several builds of it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STATELM = os.path.join(HERE, "..", "target", "release", "statelm")


def run_statelm(model, threads, decode):
    out = subprocess.run([STATELM, "bench", "-m", model, "--threads", str(threads), "--reps", "1",
                          "--decode", str(decode), "--json", "--no-roofline"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def run_llama(model, threads, decode, path=None):
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in [path, env.get("PYTHONPATH")] if p)
    out = subprocess.run([sys.executable, os.path.join(HERE, "llama_cpp_bench.py"), model,
                          "--threads", str(threads), "--reps", "1", "--decode", str(decode)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--llama-path", help="directory of a llama-cpp-python install to use")
    a = ap.parse_args()
    rows = []
    metrics = [("decode", lambda r: r["decode_tok_s"]["median"]),
               ("pp128", lambda r: r["prefill_tok_s"]["pp128"]["median"]),
               ("pp512", lambda r: r["prefill_tok_s"]["pp512"]["median"]),
               ("peak_rss_mib", lambda r: r["peak_rss_bytes"] / 2**20)]
    for model in a.models:
        s, l = [], []
        for i in range(a.rounds):
            if i % 2 == 0:
                s.append(run_statelm(model, a.threads, a.decode))
                l.append(run_llama(model, a.threads, a.decode, a.llama_path))
            else:
                l.append(run_llama(model, a.threads, a.decode, a.llama_path))
                s.append(run_statelm(model, a.threads, a.decode))
        row = {"model": os.path.basename(model), "statelm_isa": s[0].get("isa", "?"),
               "llama_system_info": l[0].get("system_info", "?")}
        for key, f in metrics:
            ratios = [f(x) / f(y) for x, y in zip(s, l)]
            row[key] = {"statelm": statistics.median(f(x) for x in s),
                        "llama": statistics.median(f(y) for y in l),
                        "ratio": statistics.median(ratios),
                        "ratio_min": min(ratios), "ratio_max": max(ratios)}
        row["llama_python_overhead"] = statistics.median(r["python_overhead_share"] for r in l)
        rows.append(row)
    print(f"statelm kernels: {rows[0]['statelm_isa']}")
    print(f"llama.cpp build: {rows[0]['llama_system_info']}")
    print(f"{'file':<44} {'metric':<13} {'statelm':>9} {'llama.cpp':>9} {'ratio':>6}  range")
    for r in rows:
        for key, _ in metrics:
            m = r[key]
            print(f"{r['model']:<44} {key:<13} {m['statelm']:>9.1f} {m['llama']:>9.1f} "
                  f"{m['ratio']:>6.2f}  {m['ratio_min']:.2f}-{m['ratio_max']:.2f}")
        print(f"{r['model']:<44} python overhead in llama.cpp's decode loop: {100 * r['llama_python_overhead']:.2f}%")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
