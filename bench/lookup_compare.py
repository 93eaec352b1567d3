#!/usr/bin/env python3
"""Prompt-lookup decoding side by side: statelm plain, statelm `--lookup N`, llama-cpp-python
plain and llama-cpp-python's `LlamaPromptLookupDecoding`, on the same chat prompts, file and
threads, greedy, interleaved.

    cargo build --release -p statelm-cli
    python3 bench/lookup_compare.py --llama-path /tmp/lcp-avx512 [--lookup 8] [--rounds 2] \\
        ~/.cache/statelm/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

Every configuration runs as its own process per prompt and round, in an order that rotates
from round to round, so a busy machine slows all alike. Decode tok/s is timed from the answer's
first token to its last on both sides (prompt processing excluded). The table gives, per
prompt (code edits: answers that copy their input; prose: little to copy), each configuration's
median tok/s over the rounds and the medians of three paired ratios: statelm lookup / statelm
plain, llama.cpp lookup / llama.cpp plain, and statelm lookup / llama.cpp lookup. `same` says
whether each side's lookup answer was its plain answer, token for token (statelm's must be).
llama-cpp-python's high-level API (`create_chat_completion`, the one its prompt lookup plugs
into) samples in Python and copies the logits every token, so its plain decode is slower than
llama.cpp's own (`compare.py` drives its C API for that comparison).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STATELM = os.path.join(HERE, "..", "target", "release", "statelm")

CART = '''class Cart:
    def __init__(self):
        self.items = []

    def add(self, name, price, qty=1):
        self.items.append((name, price, qty))

    def get_total(self):
        total = 0
        for name, price, qty in self.items:
            total += price * qty
        return total

    def summary(self):
        lines = [f"{name}: {qty} x {price}" for name, price, qty in self.items]
        lines.append(f"total: {self.get_total()}")
        return "\\n".join(lines)'''

STATS = '''def mean(xs):
    return sum(xs) / len(xs)


def variance(xs):
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)


def median(xs):
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    if n % 2:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2'''

FETCH = '''function loadUser(id) {
  return fetch("/api/users/" + id)
    .then((res) => res.json())
    .then((user) => {
      return fetch("/api/teams/" + user.teamId)
        .then((res) => res.json())
        .then((team) => ({ user, team }));
    })
    .catch((err) => {
      console.error("failed to load user", err);
      throw err;
    });
}'''

CONFIG = '''def parse_config(path):
    with open(path) as f:
        lines = f.readlines()
    config = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, value = line.split("=")
        config[key.strip()] = value.strip()
    return config'''
PROMPTS = [
    ("code edit", "Rename the method `get_total` to `total` everywhere in this class and show "
                  "the whole class:\n```python\n" + CART + "\n```"),
    ("code edit", "Add type hints to every function in this module and show the whole module:\n"
                  "```python\n" + STATS + "\n```"),
    ("code edit", "Rewrite this function with async/await instead of promise chains and show the "
                  "whole function:\n```javascript\n" + FETCH + "\n```"),
    ("code edit", "Add a docstring to every function in this module and show the whole module:\n"
                  "```python\n" + STATS + "\n```"),
    ("code edit", "This function fails on lines whose value contains `=`. Fix it and show the whole "
                  "function:\n```python\n" + CONFIG + "\n```"),
    ("prose", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
    ("prose", "Explain to a new programmer why version control matters."),
]


def run_statelm(model, prompt, lookup, threads, max_tokens):
    out = subprocess.run([STATELM, "run", "-m", model, "--chat", "--temp", "0", "-n",
                          str(max_tokens), "--lookup", str(lookup), "--threads", str(threads),
                          "--json", "--prompt", prompt],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_llama(model, prompt, lookup, threads, max_tokens, path):
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in [path, env.get("PYTHONPATH")] if p)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
    try:
        out = subprocess.run([sys.executable, os.path.join(HERE, "llama_lookup.py"), model,
                              "--prompt-file", f.name, "--lookup", str(lookup),
                              "--threads", str(threads), "--max-tokens", str(max_tokens)],
                             check=True, capture_output=True, text=True, env=env).stdout
    finally:
        os.unlink(f.name)
    return json.loads(out.strip().splitlines()[-1])


def statelm_isa(model):
    out = subprocess.run([STATELM, "bench", "-m", model, "--prefill", "1", "--decode", "1",
                          "--reps", "1", "--no-roofline", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["isa"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--lookup", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--llama-path", help="directory of a llama-cpp-python install to use")
    a = ap.parse_args()
    configs = [("statelm", 0), ("statelm", a.lookup), ("llama.cpp", 0), ("llama.cpp", a.lookup)]
    rates = {}   # (prompt index, config) -> [tok/s], one per round
    same = {}    # (prompt index, side) -> every lookup answer equal to the plain one
    info = None
    for r in range(a.rounds):
        for p, (workload, prompt) in enumerate(PROMPTS):
            texts = {}
            for side, lookup in configs[r % 4:] + configs[:r % 4]:
                if side == "statelm":
                    res = run_statelm(a.model, prompt, lookup, a.threads, a.max_tokens)
                else:
                    res = run_llama(a.model, prompt, lookup, a.threads, a.max_tokens,
                                    a.llama_path)
                    info = res["system_info"]
                texts[(side, lookup)] = res["text"]
                rates.setdefault((p, (side, lookup)), []).append(res["decode_tokens_per_s"])
                print(f"round {r + 1} prompt {p + 1} ({workload}) {side} lookup {lookup}: "
                      f"{res['decode_tokens_per_s']:.1f} tok/s, {res['generated_tokens']} tokens",
                      file=sys.stderr)
            for side in ("statelm", "llama.cpp"):
                equal = texts[(side, 0)] == texts[(side, a.lookup)]
                same[(p, side)] = same.get((p, side), True) and equal
    print(f"statelm: {statelm_isa(a.model)}; llama.cpp: {info}")
    print(f"{a.model}, {a.threads} threads, lookup {a.lookup}, greedy, {a.max_tokens} tokens max, "
          f"{a.rounds} rounds; tok/s are medians over rounds, gains medians of paired ratios")
    print(f"{'prompt':<14} {'statelm':>8} {'+lookup':>8} {'llama':>8} {'+lookup':>8} "
          f"{'s gain':>7} {'l gain':>7} {'s/l lookup':>10}  same (statelm, llama)")
    sp, sl, lp, ll = configs
    for p, (workload, _) in enumerate(PROMPTS):
        med = {c: statistics.median(rates[(p, c)]) for c in configs}
        gain = lambda x, y: statistics.median(a_ / b_ for a_, b_ in zip(rates[(p, x)], rates[(p, y)]))
        print(f"{p + 1} {workload:<12} {med[sp]:8.1f} {med[sl]:8.1f} {med[lp]:8.1f} {med[ll]:8.1f} "
              f"{gain(sl, sp):6.2f}x {gain(ll, lp):6.2f}x {gain(sl, ll):9.2f}x  "
              f"{same[(p, 'statelm')]}, {same[(p, 'llama.cpp')]}")


if __name__ == "__main__":
    main()
