"""Records llama.cpp's tokenizations of a fixed text set under each pre-tokenizer name.

The vocabulary is built so that token ids show llama.cpp's word splits directly: besides the
256 byte tokens it holds every substring (2..=12 byte-level characters) of the texts, with a
merge for every split of each, ranked shortest first. BPE then merges each word of up to 12
characters into one token, so a word boundary that differs between two splitters shows up as
different ids. `crates/tokenizer/tests/pretypes.rs` builds the same vocabulary (same order,
same ranks) and compares statelm's ids with these.

    PYTHONPATH=/tmp/lcp336:/tmp/llsrc/gguf-py python3 tools/parity/pretok_reference.py \\
        reference/tokenize-pretypes.json
"""

import json
import os
import random
import sys
import tempfile

import gguf
import llama_cpp

PRES = [
    "qwen2", "deepseek-r1-qwen", "llama-bpe", "lfm2", "smaug-bpe", "gpt-2", "smollm",
    "gpt-4o", "llama4", "tekken", "default",
]

MAX_LEN = 12

TEXTS = [
    "Hello world",
    "helloWorld getHTTPResponseCode XMLHttpRequest iPhone McDonald's",
    "I'M HERE, DON'T you'll we've they'd it's",
    "ÉCOLE Ünïcödé naïve café ÀÉÎ ŒUVRE",
    "ПРИВЕТмир Привет МИР привет",
    "日本語のテキスト 中文文本 한국어",
    "e\u0301te\u0301 cafe\u0301 n\u0303",
    "1234567 3.14159 2026-12-05 ١٢٣ ½ Ⅻ",
    "a/b\n/c path/to//file.rs\r\n//comment",
    "x !!\n/ y ?!\r\n\r\n  z",
    "def f(x):\n    return x**2  # square\n\n\n",
    "   leading and trailing   ",
    "\ttabs\tand\u00a0nbsp\u2028line sep\u3000ideographic",
    "emoji 😀👍🏽 and symbols ©®™ €100 $5",
    "MixedCASEWordsLikeThisOne and ALLCAPS and lowercase",
    "'s 'S 'll 'LL 'd x'y",
    "snake_case_name CONSTANT_VALUE kebab-case-name",
    "https://example.com/path?q=1&r=ÄÖ#frag",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "Ελληνικά ΚΕΦΑΛΑΙΑ μικρά",
    "\u0378 unassigned \U000e0001 tag",
    "ǅungla ǈudi ǋ titlecase",
    "ABCdef GHIjkl mnoPQR",
    "  \n\n\t\n  x",
]

# Random texts over pieces that exercise every alternative of every split: case changes,
# letters outside ASCII, marks, digits of several scripts, contractions, symbol runs with
# newlines and slashes, whitespace of several kinds, unassigned code points.
PIECES = [
    "a", "A", "z", "Z", "hello", "World", "HTTP", "Server", "É", "é", "ß", "Ω", "ω", "ǅ", "ǈ",
    "中", "テ", "\u0301", "\u0378", "0", "7", "42", "12345", "٣", "½", "Ⅻ", " ", "  ", "\n",
    "\r\n", "\n\n", "\t", "\u00a0", "\u3000", "'", "'s", "'LL", "'t", "'Re", "/", "//", "!",
    "?!", ".", "_", "-", "(", "{", "😀", "€", "#", "\u2028",
]


def random_texts(n, seed=20261205):
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(2, 10))) for _ in range(n)]


def byte_chars():
    """GPT-2's byte-to-character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def substring_vocab(texts):
    chars = byte_chars()
    subs = set()
    for t in texts:
        e = "".join(chars[b] for b in t.encode())
        for i in range(len(e)):
            for j in range(i + 2, min(len(e), i + MAX_LEN) + 1):
                subs.add(e[i:j])
    rest = sorted(subs, key=lambda s: (len(s), s))
    merges = [f"{t[:k]} {t[k:]}" for t in rest for k in range(1, len(t))]
    return chars + rest, merges


def write_vocab(path, tokens, merges):
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges(merges)
    w.add_eos_token_id(0)
    w.add_bos_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    texts = TEXTS + random_texts(200)
    tokens, merges = substring_vocab(texts)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "vocab.gguf")
        write_vocab(path, tokens, merges)
        for pre in PRES:
            m = llama_cpp.Llama(
                path, vocab_only=True, verbose=False, kv_overrides={"tokenizer.ggml.pre": pre}
            )
            for text in texts:
                ids = m.tokenize(text.encode(), add_bos=False, special=False)
                rows.append({"pre": pre, "text": text, "ids": ids})
            del m
    head = {
        "source": f"llama-cpp-python {llama_cpp.__version__} (tools/parity/pretok_reference.py)",
        "vocab": f"256 bytes + {len(tokens) - 256} substrings of the texts (<= {MAX_LEN}), "
        f"{len(merges)} merges",
    }
    with open(out, "w") as f:
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "rows": [\n')
        f.write(",\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
        f.write("\n]}\n")
    print(f"{len(rows)} rows -> {out}; {head['vocab']}")


if __name__ == "__main__":
    main()
