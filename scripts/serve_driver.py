#!/usr/bin/env python3
"""Concurrent chats against a running `statelm serve`, through the stock `openai` client, as
an app would talk to it. Shared by `scripts/serve-cgroup` (a server on this host) and
`scripts/kernel-v2` (a server inside a cgroup v2 kernel under qemu, reached through a
forwarded port).

    python3 scripts/serve_driver.py PORT REPORT.json [--chats 6] [--turns 8] [--words 450]
        [--warm-body JSON] [--closing-rounds 1] [--max-tokens 8]
    python3 scripts/serve_driver.py --summary REPORT.json   # ANSWERED=.. TOTAL=.. TRIMS=..

Each chat sends `turns` user messages of `words` random words (the chat resent in full every
turn, as OpenAI clients do); even chats stream, odd ones take JSON replies. Then each chat
sends one short closing turn, one chat after another, and the warm-up body is resent: a
session spilled after its last long turn hears of it there (a spill is announced on the
session's next turn). Closing rounds repeat (up to `--closing-rounds`) while `/metrics` says a
session is still spilled. Every turn is recorded in REPORT.json (status, finish_reason, the
`statelm` extension's stop reason and event names); a failed turn is recorded and its chat
goes on.
"""

import argparse
import json
import random
import sys
import threading
import urllib.request

import openai

VOCAB = ("memory state cache token budget server kernel limit page heap chat turn answer model "
         "weight layer scratch spill trim session prompt reply stream event notice process").split()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("port")
    p.add_argument("report")
    p.add_argument("--chats", type=int, default=6)
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--words", type=int, default=450)
    p.add_argument("--warm-body", help="the warm-up request's JSON body, resent after each closing round")
    p.add_argument("--closing-rounds", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=8)
    return p.parse_args()


class Driver:
    """The chats, their conversations and every turn's record."""

    def __init__(self, args):
        self.args = args
        self.base = f"http://127.0.0.1:{args.port}"
        # statelm's extension fields (`statelm`: events, stop reason) come through as the
        # reply's extra fields.
        self.client = openai.OpenAI(base_url=f"{self.base}/v1", api_key="none", timeout=900,
                                    max_retries=0)
        self.results = []
        self.lock = threading.Lock()
        self.conversations = {}

    def post(self, body, events):
        """One request: (status, text, finish_reason, stop reason); its statelm events go to
        `events` as they come, so that a request failing half-way keeps those it carried."""
        body = dict(body)
        stream = body.pop("stream", False)
        if not stream:
            reply = self.client.chat.completions.create(**body).to_dict()
            ch = reply["choices"][0]
            sl = reply["statelm"]
            events.extend(sl["events"])
            return 200, ch["message"]["content"], ch["finish_reason"], sl["stop_reason"]
        text, finish, stop = "", None, None
        for chunk in self.client.chat.completions.create(stream=True, **body):
            c = chunk.to_dict()
            sl = c.get("statelm")
            if sl and "event" in sl:
                events.append(sl)
            if sl and "stop_reason" in sl:  # the usage chunk: its events were streamed already
                stop = sl["stop_reason"]
            for ch in c.get("choices", []):
                text += (ch.get("delta") or {}).get("content") or ""
                finish = ch.get("finish_reason") or finish
        return 200, text, finish, stop

    def record(self, rec, body):
        """Sends `body`, fills `rec` with the outcome and keeps it; returns the reply text.
        A failed turn keeps the events it carried: those streamed before the error, or the
        error body's `statelm.events`."""
        reply, events = "(no answer)", []
        try:
            status, reply, finish, stop = self.post(body, events)
            rec.update(status=status, finish=finish, stop=stop, chars=len(reply))
        except Exception as e:  # a failed turn is recorded, and the chat goes on
            rec.update(status=getattr(e, "status_code", 0), error=str(e)[:300])
            try:
                events.extend(e.response.json().get("statelm", {}).get("events", []))
            except Exception:  # a streamed error, or no JSON body: nothing more to read
                pass
        rec["events"] = [x.get("event") for x in events]
        with self.lock:
            self.results.append(rec)
            print(f"serve-driver: {rec}", file=sys.stderr, flush=True)
        return reply

    def chat(self, i, closing=None):
        a = self.args
        rng = random.Random(i)
        messages = self.conversations.setdefault(
            i, [{"role": "system", "content": "You answer in one short sentence."}])
        for t in ([a.turns + closing] if closing is not None else range(a.turns)):
            text = "Thanks." if closing is not None else " ".join(rng.choice(VOCAB) for _ in range(a.words))
            messages.append({"role": "user", "content": f"Turn {t} of chat {i}: {text}. Summarize."})
            body = {"model": "statelm", "messages": messages, "max_tokens": a.max_tokens,
                    "temperature": 0, "stream": i % 2 == 0, "user": f"chat-{i}"}
            if body["stream"]:
                body["stream_options"] = {"include_usage": True}
            reply = self.record({"chat": i, "turn": t, "stream": body["stream"]}, body)
            messages.append({"role": "assistant", "content": reply})

    def still_spilled(self):
        try:
            with urllib.request.urlopen(f"{self.base}/metrics", timeout=60) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("statelm_spilled_sessions "):
                        return int(float(line.split()[1]))
        except OSError:
            pass
        return 0

    def run(self):
        a = self.args
        threads = [threading.Thread(target=self.chat, args=(i,)) for i in range(a.chats)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for closing in range(a.closing_rounds):
            for i in range(a.chats):
                self.chat(i, closing=closing)
            if a.warm_body:
                rec = {"chat": "warm", "turn": a.turns + closing, "stream": False}
                self.record(rec, json.loads(a.warm_body))
            if self.still_spilled() == 0:
                break
        with open(a.report, "w") as f:
            json.dump(self.results, f)


def summary(report):
    """Shell assignments of a report's figures, for `eval` in the scripts."""
    try:
        with open(report) as f:
            r = json.load(f)
    except (OSError, ValueError):
        r = None
    def count(event):
        return sum(x.get("events", []).count(event) for x in r)
    figures = {} if r is None else {
        "ANSWERED": sum(1 for x in r if x.get("status") == 200 and x.get("finish")
                        and x.get("stop") not in (None, "evicted")),
        "TOTAL": len(r),
        "TRIMS": count("context_trimmed"),
        "SPILLS": count("spilled"),
        "RESTORES": count("restored"),
        "EVICTS": count("cache_evicted"),
    }
    for name in ("ANSWERED", "TOTAL", "TRIMS", "SPILLS", "RESTORES", "EVICTS"):
        print(f"{name}={figures.get(name, '-')}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        Driver(parse_args()).run()
