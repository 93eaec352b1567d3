#!/usr/bin/env python3
"""One greedy chat answer from llama-cpp-python, plain or with its prompt-lookup drafter.

    python3 bench/llama_lookup.py MODEL.gguf --prompt-file P.txt [--lookup N] [--threads 2]

Prints one JSON object: decode tok/s, generated tokens, prompt tokens and the text. `--lookup N`
(N > 0) passes `draft_model=LlamaPromptLookupDecoding(num_pred_tokens=N)`, the library's
prompt-lookup decoding; 0 decodes plainly. The answer is streamed and timed from its first
token to its last, so prompt processing is not in the decode rate (as statelm's
`decode_tokens_per_s`); the token count is the answer re-tokenized.
"""
import argparse
import json
import time

import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prompt-file", required=True)
    ap.add_argument("--lookup", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=200)
    a = ap.parse_args()
    with open(a.prompt_file, encoding="utf-8") as f:
        prompt = f.read()
    draft = LlamaPromptLookupDecoding(num_pred_tokens=a.lookup) if a.lookup > 0 else None
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=2048, n_threads=a.threads,
                          n_threads_batch=a.threads, draft_model=draft, verbose=False)
    messages = [{"role": "user", "content": prompt}]
    first = last = None
    pieces = []
    t0 = time.perf_counter()
    for chunk in llm.create_chat_completion(messages=messages, temperature=0.0, top_k=1,
                                            repeat_penalty=1.0, max_tokens=a.max_tokens,
                                            stream=True):
        piece = chunk["choices"][0]["delta"].get("content")
        if piece:
            now = time.perf_counter()
            first = first if first is not None else now
            last = now
            pieces.append(piece)
    text = "".join(pieces)
    n = len(llm.tokenize(text.encode(), add_bos=False, special=True))
    rate = (n - 1) / (last - first) if first is not None and last > first and n > 1 else None
    print(json.dumps({"decode_tokens_per_s": rate, "generated_tokens": n,
                      "time_to_first_token_ms": None if first is None else (first - t0) * 1e3,
                      "text": text, "lookup": a.lookup,
                      "system_info": llama_cpp.llama_print_system_info().decode()}))


if __name__ == "__main__":
    main()
