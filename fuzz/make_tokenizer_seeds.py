#!/usr/bin/env python3
"""Writes the seed corpora of fuzz_tokenizer_load and fuzz_tokenizer_encode.

    python3 fuzz/make_tokenizer_seeds.py        (from the repository root)

tokenizer_load/: small tokenizer.json images, each followed by a NUL and a
probe text (fuzz_tokenizer_load encodes what follows the first NUL). Two are
the fixture models' tokenizers (tests/fixtures/models/{gpt2,llama}-tiny)
minified; the rest are trimmed copies of those (ASCII-ish vocabulary, ids
renumbered densely, a few dozen merges) with each component variant of
tests/fixtures/tokenizers/expected.json applied, so that every normalizer,
pre-tokenizer and decoder the loader supports has a seed of ~1-2 KB.

tokenizer_encode/: short texts (a few KB in all): ASCII, whitespace runs,
digits, CJK, emoji, combining marks, U+2581, special tokens, invalid UTF-8.

Regression seeds found by fuzzing (regress_*) are kept as they are.
"""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(ROOT, "fuzz", "corpus")

PROBE = ("Hello world, it's 2024!  123456 x=1.5\t\n\n  end "
         "caf\u00e9 e\u0301 \u65e5\u672c\u8a9e \U0001F642 \u2581x "
         "<s></s><unk><|endoftext|> hello world [MASK] <|user|> ").encode() + b"\xff\xc3 \xe2\x96"


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def dump(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def trim(tok, keep_char, max_merges=40):
    """A copy of tok cut down to the one-character tokens of kept characters,
    a few <0xNN> tokens, the added tokens and the first max_merges merges
    that apply to those; ids renumbered densely in their old order."""
    model = tok["model"]
    added = {a["content"] for a in tok["added_tokens"]}
    keep = set()
    for text in model["vocab"]:
        byte = text.startswith("<0x") and len(text) == 6
        if text in added or (byte and text[3:5] in BYTES) or (not byte and len(text) == 1 and keep_char(text)):
            keep.add(text)
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in keep and b in keep and a + b in model["vocab"]:
            merges.append(m)
            keep.add(a + b)
        if len(merges) == max_merges:
            break
    vocab = {}
    for text, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]):
        if text in keep:
            vocab[text] = len(vocab)
    out = json.loads(json.dumps(tok))
    out["model"]["vocab"] = vocab
    out["model"]["merges"] = merges
    for a in out["added_tokens"]:
        a["id"] = vocab[a["content"]] if a["content"] in vocab else len(vocab)
    return out


BYTES = {"00", "0A", "20", "41", "C3", "A9", "E2", "96", "81", "F0", "9F", "99", "82", "FF"}


def gpt2_char(c):  # printable ASCII and the byte-map characters of space, newline, tab
    return ("!" <= c <= "~") or c in "\u0120\u010a\u0109"


def llama_char(c):
    return ("!" <= c <= "~") or c == "\u2581"


def apply_variant(base, spec):
    """Applies a variant of expected.json ("set", "model_set", "add_tokens",
    "merges_as_pairs") to a trimmed base."""
    t = json.loads(json.dumps(base))
    for k, v in spec.get("set", {}).items():
        t[k] = v
    for k, v in spec.get("model_set", {}).items():
        t["model"][k] = v
    next_id = max(list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]]) + 1
    for a in spec.get("add_tokens", []):
        a = dict(a, id=next_id)
        next_id += 1
        t["added_tokens"].append(a)
    if spec.get("merges_as_pairs"):
        t["model"]["merges"] = [m.split(" ") for m in t["model"]["merges"]]
    return t


def write(dirname, name, data):
    d = os.path.join(OUT, dirname)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    return len(data)


def clear(dirname):
    d = os.path.join(OUT, dirname)
    if os.path.isdir(d):
        for n in os.listdir(d):
            if not n.startswith("regress_"):
                os.remove(os.path.join(d, n))


def main():
    clear("tokenizer_load")
    gpt2 = load(os.path.join(FIX, "models", "gpt2-tiny", "tokenizer.json"))
    llama = load(os.path.join(FIX, "models", "llama-tiny", "tokenizer.json"))
    tiny = load(os.path.join(FIX, "tokenizers", "tiny", "tokenizer.json"))
    total = 0
    total += write("tokenizer_load", "gpt2_tiny.json", dump(gpt2) + b"\0" + PROBE)
    total += write("tokenizer_load", "llama_tiny.json", dump(llama) + b"\0" + PROBE)
    total += write("tokenizer_load", "tiny.json", dump(tiny) + b"\0" + b"abc aaaa \xc3\xa9a <s>bc</s> \xff")
    bases = {"gpt2": trim(gpt2, gpt2_char), "llama2": trim(llama, llama_char)}
    total += write("tokenizer_load", "gpt2_trim.json", dump(bases["gpt2"]) + b"\0" + PROBE)
    total += write("tokenizer_load", "llama2_trim.json", dump(bases["llama2"]) + b"\0" + PROBE)
    for name, spec in load(os.path.join(FIX, "tokenizers", "expected.json"))["tokenizers"].items():
        v = spec.get("variant")
        if not v:
            continue
        t = apply_variant(bases[v["base"]], v)
        total += write("tokenizer_load", name + ".json", dump(t) + b"\0" + PROBE)
    print("tokenizer_load: %d bytes" % total)

    clear("tokenizer_encode")
    texts = {
        "ascii": b"Hello world! The quick brown fox jumps over the lazy dog.",
        "code": b"def f(x):\n    return x**2  # square\n\n\nint main() { return 0; }\r\n",
        "spaces": b"a  b   c    d\t\te \n \n\n  \xc2\xa0x\xe3\x80\x80y   ",
        "digits": b"1 12 123 1234 12345 3.14159 1e-9 0x1F 2024-11-21",
        "contractions": b"I'm sure it's what they've said: we'll, you'd, she's, DON'T",
        "unicode": "caf\u00e9 na\u00efve e\u0301 \u00c5ngstr\u00f6m \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 "
                   "\ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627 \u0928\u092e\u0938\u094d\u0924\u0947 "
                   "\u0394\u03b5\u03bb\u03c4\u03b1".encode(),
        "emoji": "\U0001F642\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \u2764\ufe0f \U0001F1E9\U0001F1EA".encode(),
        "metaspace": "\u2581\u2581a\u2581 b \u2581\u2581\u2581".encode(),
        "special": b"<s>Hi</s> <unk> <|endoftext|>x<s><s> </s>\n<|endoftext|>",
        "invalid_utf8": b"\xff\xfe a\xc3 \xe2\x96 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf \x80\x80 \xf0\x9f\x99",
        "controls": b"\x00\x01\x02 a\x00b \x1b[0m \x7f",
        "repeat": b"ab " * 40 + b"a" * 60 + b" " * 30,
    }
    total = sum(write("tokenizer_encode", k, v) for k, v in texts.items())
    print("tokenizer_encode: %d bytes" % total)


if __name__ == "__main__":
    main()
