#!/usr/bin/env python3
"""A nine-question everyday chat through the OpenAI API, with and without a tight token budget.

Starts `statelm serve` once per configuration (budget, DRY on or off), plays the same
conversation as an OpenAI client does (the whole conversation resent each turn, greedy, up to
120 tokens per answer), and reports per configuration: answers that loop (some run of six
words four or more times), whether the last answer still gives the system prompt's name,
the trims announced, and the stop reasons.

  python3 bench/trimmed_chat.py                       # qwen2.5-coder-0.5b, budgets 384 and 4096
  python3 bench/trimmed_chat.py -m gemma3-270m --budgets 256,4096 --json out.json
  python3 bench/trimmed_chat.py --url http://127.0.0.1:8080 --dry off --json -   # a running server

Only the standard library is needed; the binary is target/release/statelm unless --bin says
otherwise. The test suite plays the same chat (crates/server/tests/server/trimmed_chat.rs).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

NAME = "Juniper"
SYSTEM = f"You are {NAME}, a friendly assistant. Your name is {NAME}."
QUESTIONS = [
    "Hi! What's your name?",
    "What's a good way to start the morning?",
    "How do I keep basil alive on a windowsill?",
    "Can you suggest a quick vegetarian dinner?",
    "Why is the sky blue?",
    "What should I pack for a weekend hiking trip?",
    "How can I sleep better?",
    "What was the first thing I asked you?",
    "Remind me: what is your name?",
]


def loops(text, n=6, times=4):
    """Whether some run of `n` words occurs `times` times or more."""
    words = text.split()
    counts = {}
    for i in range(len(words) - n + 1):
        key = tuple(w.lower().strip(".,!?;:") for w in words[i:i + n])
        counts[key] = counts.get(key, 0) + 1
        if counts[key] >= times:
            return True
    return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, body, key):
    headers = {"content-type": "application/json", "host": "localhost"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers=headers)
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"statelm serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    sys.exit("statelm serve did not become ready")


def converse(args, base, dry):
    """Plays the conversation against the server at `base`; one record per question."""
    messages = [{"role": "system", "content": SYSTEM}]
    turns = []
    for q in QUESTIONS:
        messages.append({"role": "user", "content": q})
        body = {"model": "statelm", "messages": messages, "temperature": 0,
                "max_tokens": args.max_tokens,
                "dry_multiplier": 0.8 if dry else 0.0, "loop_guard": dry}
        reply = post(base, body, args.key)
        choice = reply["choices"][0]
        answer = choice["message"]["content"] or ""
        events = (reply.get("statelm") or {}).get("events", [])
        trims = [e for e in events if e.get("event") == "context_trimmed"]
        turns.append({"question": q, "answer": answer, "finish": choice["finish_reason"],
                      "loops": loops(answer), "trims": trims})
        messages.append({"role": "assistant", "content": answer})
    return turns


def chat(args, budget, dry):
    """One configuration: on the server at --url, or on a server started for it."""
    if args.url:
        return converse(args, args.url.rstrip("/"), dry)
    port = free_port()
    cmd = [args.bin, "serve", "-m", args.model, "--port", str(port), "--budget", str(budget),
           "-t", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        return converse(args, f"http://127.0.0.1:{port}", dry)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "target",
                                                  "release", "statelm"))
    ap.add_argument("--budgets", default="384,4096")
    ap.add_argument("--max-tokens", type=int, default=120)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--dry", choices=["on", "off", "both"], default="both")
    ap.add_argument("--url", help="use the server running here (one configuration: its budget)")
    ap.add_argument("--key", default=os.environ.get("STATELM_API_KEY"), help="its API key")
    ap.add_argument("--json", help="write every answer here (-: standard output)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every answer")
    args = ap.parse_args()
    drys = {"on": [True], "off": [False], "both": [False, True]}[args.dry]
    budgets = ["server's"] if args.url else [int(b) for b in args.budgets.split(",")]
    out = sys.stderr if args.json == "-" else sys.stdout
    print(f"model {args.model}, {len(QUESTIONS)} questions, greedy, max_tokens {args.max_tokens}",
          file=out)
    print("| budget | DRY + loop guard | looping answers | name kept | trims | stops |", file=out)
    print("|---|---|---|---|---|---|", file=out)
    results = []
    for budget in budgets:
        for dry in drys:
            turns = chat(args, budget, dry)
            looping = sum(t["loops"] for t in turns)
            named = NAME.lower() in turns[-1]["answer"].lower()
            trims = sum(len(t["trims"]) for t in turns)
            stops = {}
            for t in turns:
                stops[t["finish"]] = stops.get(t["finish"], 0) + 1
            print(f"| {budget} | {'on' if dry else 'off'} | {looping} of {len(turns)} | "
                  f"{'yes' if named else 'no'} | {trims} | "
                  f"{', '.join(f'{k} {v}' for k, v in sorted(stops.items()))} |", file=out,
                  flush=True)
            if args.verbose:
                for t in turns:
                    print(f"  Q: {t['question']}\n  A: {t['answer']!r}\n", file=out)
            results.append({"budget": budget, "dry": dry, "looping": looping, "named": named,
                            "trims": trims, "turns": turns})
    if args.json == "-":
        print(json.dumps(results))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
