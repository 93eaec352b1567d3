"""What a JSON-schema constraint costs per token: statelm against llama-cpp-python 0.3.36.

    cargo build --release -p statelm-cli
    python3 bench/constraint_compare.py --llama-path /tmp/lcp-avx512 --threads 2 \
        ~/.cache/statelm/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

For each schema (nested ones from crates/server/tests/data/schemas.json by default), one greedy
chat answer on each side, same file, same threads, alternating sides from round to round:
- statelm: `statelm bench --json-schema @FILE --json`, which times each step's mask (and the
  feeding of the sampled token) apart from its forward pass;
- llama.cpp: `create_chat_completion(response_format={"type": "json_object", "schema": ...})`,
  llama-cpp-python's own JSON-schema mode (the schema becomes a GBNF grammar for llama.cpp's
  grammar sampler), streamed, from the first token to the last; and the same prompt without a
  schema for its unconstrained decode rate.

Reports per schema: statelm's mask µs/token and its share of a decode step, and constrained
decode tok/s on both sides with their ratio. The two sides' texts can differ (their grammars
place whitespace differently), so tokens per second, not total time, are compared.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STATELM = os.path.join(HERE, "..", "target", "release", "statelm")
SCHEMAS = os.path.join(HERE, "..", "crates", "server", "tests", "data", "schemas.json")
DEFAULT = ["person_nested", "todo_items", "refs", "code_review", "recursive_tree"]


def run_statelm(model, threads, schema, prompt, tokens):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(schema, f)
    try:
        out = subprocess.run(
            [STATELM, "bench", "-m", model, "--threads", str(threads), "--json",
             "--reps", "1", "--prefill", "16", "--decode", str(tokens), "--no-roofline",
             "--json-schema", "@" + f.name, "--json-prompt", prompt],
            check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    r = json.loads(out)
    c = r["constraint"]
    step = c["forward_per_token_s"]["median"] + c["mask_per_token_s"]["median"]
    return {"mask_us": c["mask_per_token_s"]["median"] * 1e6,
            "share": c["mask_share_of_decode"]["median"],
            "tok_s": 1.0 / step, "tokens": c["tokens"], "valid": c["valid_json"],
            "plain_tok_s": r["decode_tok_s"]["median"], "text": c["text"]}


LLAMA = r"""
import json, sys, time
from llama_cpp import Llama
model, threads, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cases = json.loads(sys.stdin.read())
llm = Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=1024,
            verbose=False)
out = []
for prompt, schema in cases:
    row = {}
    for key, fmt in (("grammar", {"type": "json_object", "schema": schema}), ("plain", None)):
        times, text = [], ""
        kw = {"response_format": fmt} if fmt else {}
        for chunk in llm.create_chat_completion(
                messages=[{"role": "user", "content": prompt}], max_tokens=tokens,
                temperature=0, stream=True, **kw):
            delta = chunk["choices"][0]["delta"].get("content")
            if delta:
                times.append(time.perf_counter())
                text += delta
        n = len(times)
        row[key] = {"tok_s": (n - 1) / (times[-1] - times[0]) if n > 1 else 0.0,
                    "chunks": n, "text": text}
    out.append(row)
print(json.dumps(out))
"""


def run_llama(llama_path, model, threads, cases, tokens):
    env = dict(os.environ)
    if llama_path:
        env["PYTHONPATH"] = llama_path + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", LLAMA, model, str(threads), str(tokens)],
                       input=json.dumps(cases), check=True, capture_output=True, text=True,
                       env=env)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--llama-path", help="a `pip install --target` directory of llama-cpp-python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--schemas", default=",".join(DEFAULT),
                    help="names from crates/server/tests/data/schemas.json")
    a = ap.parse_args()
    table = {c["name"]: c for c in json.load(open(SCHEMAS))}
    chosen = [table[n] for n in a.schemas.split(",")]
    ours = {c["name"]: [] for c in chosen}
    theirs = {c["name"]: [] for c in chosen}
    for r in range(a.rounds):
        def statelm_side():
            for c in chosen:
                ours[c["name"]].append(run_statelm(a.model, a.threads, c["schema"], c["prompt"],
                                                   a.tokens))

        def llama_side():
            rows = run_llama(a.llama_path, a.model, a.threads,
                             [[c["prompt"], c["schema"]] for c in chosen], a.tokens)
            for c, row in zip(chosen, rows):
                theirs[c["name"]].append(row)

        for side in (statelm_side, llama_side) if r % 2 == 0 else (llama_side, statelm_side):
            side()
    med = statistics.median
    print(f"{'schema':<16} {'mask us/tok':>11} {'share':>6} {'statelm tok/s':>14} "
          f"{'llama.cpp tok/s':>16} {'ratio':>6} {'llama.cpp plain':>16}")
    for c in chosen:
        n = c["name"]
        o, t = ours[n], theirs[n]
        s_tok = med([x["tok_s"] for x in o])
        l_tok = med([x["grammar"]["tok_s"] for x in t])
        print(f"{n:<16} {med([x['mask_us'] for x in o]):>11.1f} "
              f"{100 * med([x['share'] for x in o]):>5.2f}% {s_tok:>14.1f} {l_tok:>16.1f} "
              f"{s_tok / l_tok if l_tok else float('nan'):>6.2f} "
              f"{med([x['plain']['tok_s'] for x in t]):>16.1f}")
        print(f"  statelm ({o[-1]['tokens']} tokens, valid {o[-1]['valid']}): {o[-1]['text']}")
        print(f"  llama.cpp: {t[-1]['grammar']['text']}")


if __name__ == "__main__":
    main()
