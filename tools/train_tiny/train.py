#!/usr/bin/env python3
"""Trains minfer's default model: a tiny LlamaForCausalLM on the King James Bible, with its own
tokenizer, on the CPU, and writes the Hugging Face folder models/minfer-kjv-3m/ with the expected
outputs of transformers (expected.json) that tests/test_default_model.c compares minfer against.

Corpus: the KJV text of Debian's bible-kjv-text package (/usr/lib/bible.data, public domain),
read through that package's own reader, /usr/bin/bible from the bible-kjv package:
    apt-get install bible-kjv bible-kjv-text
    pip install torch==2.15.0 transformers==4.57.6 tokenizers==0.22.2 safetensors numpy
    python3 tools/train_tiny/train.py            # about 15 min of CPU time on one thread
The text is not copied into the repository: the script records the SHA-256 of the data file and
of the extracted text, and refuses a different text (--any-text overrides that).

Deterministic: seeded torch and numpy, one thread, torch.use_deterministic_algorithms. The
folder's config.json is written by transformers 4.x (rope_theta, not 5.x's rope_parameters:
see tests/fixtures/make_fixtures.py).
"""
import argparse
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "minfer-kjv-3m"
DATA_FILE = "/usr/lib/bible.data"  # bible-kjv-text
DATA_SHA256 = "6c746c2acc8a34bfded980883ff1701a5d68934a1c853ebf88a07b978fe0ae0e"  # bible-kjv-text 4.38
TEXT_SHA256 = "db8a52b86003a24f0a3592905e29dbabf76c909428f485927f5eb2d27da661e5"  # read_kjv() joined by "\n"
SEED = 1611
VOCAB = 2048
SEQ = 128           # tokens per training sequence
BATCH = 16          # sequences per step
STEPS = 900
LR, LR_MIN, WARMUP = 3e-3, 3e-4, 100
WEIGHT_DECAY = 0.1
VAL_EVERY = 100
PROMPTS = ["In the beginning", "And the LORD said unto Moses,", "Blessed are the",
           "Jesus answered and said unto them,"]
GREEDY_N = 32


# ---- corpus ---------------------------------------------------------------------------------------
def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def read_kjv():
    """The 1189 chapters as plain text (verses joined by spaces, verse numbers and headings
    dropped), in canonical order."""
    raw = subprocess.run(["bible", "-l0", "gen1:1-rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    chapters, cur = [], []
    for line in raw.split("\n"):
        m = re.match(r"^ +[0-9]+ (.*)$", line)
        if m:
            cur.append(m.group(1).strip())
        elif line.strip():  # a heading, "Genesis 1"
            if cur:
                chapters.append(" ".join(cur))
            cur = []
    if cur:
        chapters.append(" ".join(cur))
    return chapters


# ---- tokenizer: SentencePiece-style BPE laid out like Llama-2's (as make_fixtures.py's) ----------
def trained_merges(tok):
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def added_token(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def make_tokenizer(lines):
    """<unk> <s> </s>, the 256 <0xNN> byte-fallback tokens, the merges' products in rank order,
    then the single characters. Normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer."""
    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Training only: split before each ▁ so that no merge spans a word boundary.
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    counts = {}
    for line in lines:
        for ch in "▁" + line.replace(" ", "▁"):
            counts[ch] = counts.get(ch, 0) + 1
    # At most 96 characters (the verse text has 62), sorted so that ties do not depend on hash order.
    alphabet = sorted(counts, key=lambda ch: (-counts[ch], ord(ch)))[:96]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 256, special_tokens=specials, initial_alphabet=alphabet,
                                  limit_alphabet=len(alphabet), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    trained = json.loads(tok.to_str())["model"]["vocab"]
    merges = trained_merges(tok)
    products = {a + b for a, b in merges}
    alphabet = sorted((t for t in trained if t not in specials and t not in products), key=lambda t: trained[t])
    vocab = {s: i for i, s in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for a, b in merges:
        assert a + b not in vocab, f"merge product {a + b!r} twice"
        vocab[a + b] = len(vocab)
    for ch in alphabet:
        vocab[ch] = len(vocab)
    assert len(vocab) == VOCAB, len(vocab)
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added_token(i, s) for i, s in enumerate(specials)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 256,
        "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer",
    }
    return spec, config


# ---- model ----------------------------------------------------------------------------------------
def model_config():
    return LlamaConfig(vocab_size=VOCAB, hidden_size=192, intermediate_size=512, num_hidden_layers=6,
                       num_attention_heads=6, num_key_value_heads=2, head_dim=32, hidden_act="silu",
                       max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-5,
                       tie_word_embeddings=True, initializer_range=0.02, bos_token_id=1, eos_token_id=2)


def lr_at(step, steps):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return LR_MIN + 0.5 * (LR - LR_MIN) * (1 + math.cos(math.pi * t))


@torch.no_grad()
def val_loss(model, val, n=16):
    model.eval()
    x = torch.from_numpy(val[: n * (SEQ + 1)].reshape(n, SEQ + 1).astype(np.int64))
    loss = float(model(x[:, :-1], labels=x[:, :-1].clone()).loss)  # HF shifts the labels itself
    model.train()
    return loss


def train(stream, steps, log):
    """Next-token training on random SEQ-token windows of the token stream (last 2% held out)."""
    torch.manual_seed(SEED)
    config = model_config()
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).to(torch.float32)
    model.train()
    n_val = 16 * (SEQ + 1)
    train_ids, val = stream[: len(stream) - n_val], stream[len(stream) - n_val:]
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.95))
    rng = np.random.default_rng(SEED)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters {n_params} ({n_params / 1e6:.2f} M), train tokens {len(train_ids)}, "
          f"{steps} steps x {BATCH} x {SEQ} tokens", file=log, flush=True)
    log.write("step\twall_s\tcpu_s\tlr\ttrain_loss\tval_loss\n")
    t0, c0, running = time.time(), time.process_time(), None
    for step in range(steps):
        starts = rng.integers(0, len(train_ids) - SEQ - 1, size=BATCH)
        x = torch.from_numpy(np.stack([train_ids[s: s + SEQ + 1] for s in starts]).astype(np.int64))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        logits = model(x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lv = loss.item()
        running = lv if running is None else 0.95 * running + 0.05 * lv
        if (step + 1) % VAL_EVERY == 0 or step == 0 or step + 1 == steps:
            v = val_loss(model, val)
            line = f"{step + 1}\t{time.time() - t0:.1f}\t{time.process_time() - c0:.1f}\t{lr_at(step, steps):.2e}\t{running:.4f}\t{v:.4f}"
            log.write(line + "\n")
            log.flush()
            print(line, flush=True)
    return model.eval(), (time.time() - t0, time.process_time() - c0), running, val_loss(model, val), n_params


# ---- expected outputs -----------------------------------------------------------------------------
def hf_encode(tok, text):
    return [tok.token_to_id("<s>")] + tok.encode(text, add_special_tokens=False).ids


@torch.no_grad()
def greedy(model, ids, n):
    """n greedy tokens by generate() (KV cache, no EOS stop) and by a plain loop that recomputes
    the whole sequence each step; they must agree. Also the smallest top-1 minus top-2 gap."""
    x = torch.tensor([ids])
    gen = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                         min_new_tokens=0, eos_token_id=None, pad_token_id=0, num_beams=1,
                         temperature=None, top_p=None, top_k=None)
    out = gen[0, len(ids):].tolist()
    seq, gaps = list(ids), []
    for _ in range(n):
        row = model(torch.tensor([seq])).logits[0, -1].double()
        top = torch.topk(row, 2).values
        gaps.append(float(top[0] - top[1]))
        seq.append(int(torch.argmax(row)))
    if seq[len(ids):] != out:
        sys.exit(f"generate() and the plain greedy loop disagree: {out} vs {seq[len(ids):]}")
    return out, min(gaps)


@torch.no_grad()
def expected(folder, tok):
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    auto = AutoTokenizer.from_pretrained(folder)
    cases = []
    for p in PROMPTS:
        ids = hf_encode(tok, p)
        if auto(p).input_ids != ids:
            sys.exit(f"AutoTokenizer gives {auto(p).input_ids}, tokenizers {ids} for {p!r}")
        last = model(torch.tensor([ids])).logits[0, -1].to(torch.float32)
        g, gap = greedy(model, ids, GREEDY_N)
        cases.append({"prompt": p, "prompt_ids": ids, "greedy_ids": g,
                      "text": tok.decode(g, skip_special_tokens=False),
                      "full_text": tok.decode(ids + g, skip_special_tokens=True),
                      "min_margin": gap, "last_logits": [float(v) for v in last]})
    return cases


def to_json(v, indent=""):
    inner = indent + "  "
    if isinstance(v, dict):
        items = [f"{inner}{json.dumps(k)}: {to_json(x, inner)}" for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(v, list) and any(isinstance(x, dict) for x in v):
        return "[\n" + ",\n".join(inner + to_json(x, inner) for x in v) + "\n" + indent + "]"
    return json.dumps(v, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "models", NAME))
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--any-text", action="store_true", help="accept a KJV text whose checksum differs")
    args = ap.parse_args()
    if int(transformers.__version__.split(".")[0]) >= 5:
        sys.exit("use transformers 4.x: 5.x writes rope_parameters into config.json")
    if shutil.which("bible") is None or not os.path.exists(DATA_FILE):
        sys.exit("the corpus comes from Debian's packages: apt-get install bible-kjv bible-kjv-text")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    chapters = read_kjv()
    text = "\n".join(chapters)
    data_sha, text_sha = sha256_file(DATA_FILE), hashlib.sha256(text.encode()).hexdigest()
    if data_sha != DATA_SHA256:
        print(f"note: {DATA_FILE} is not bible-kjv-text 4.38's (sha256 {data_sha})")
    print(f"KJV: {len(chapters)} chapters, {len(text)} characters, data sha256 {data_sha}, text sha256 {text_sha}")
    if not args.any_text and text_sha != TEXT_SHA256:
        sys.exit(f"the extracted text's sha256 is {text_sha}, not {TEXT_SHA256} (--any-text to go on)")

    spec, tcfg = make_tokenizer(chapters)
    tok = Tokenizer.from_str(json.dumps(spec))
    eos = tok.token_to_id("</s>")
    stream = []
    for ch in chapters:  # <s> chapter </s>, one after another
        stream += hf_encode(tok, ch) + [eos]
    stream = np.array(stream, dtype=np.int32)
    print(f"tokens {len(stream)} ({len(text) / len(stream):.2f} characters per token)")

    folder = args.out
    if os.path.isdir(folder):
        for f in ("model.safetensors", "expected.json", "training_log.tsv"):
            if os.path.exists(os.path.join(folder, f)):
                os.remove(os.path.join(folder, f))
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "training_log.tsv"), "w") as log:
        model, seconds, train_loss, vloss, n_params = train(stream, args.steps, log)
    print(f"trained in {seconds[0]:.0f} s wall, {seconds[1]:.0f} s CPU, train loss {train_loss:.4f}, val loss {vloss:.4f}")

    model.save_pretrained(folder, safe_serialization=True)
    for name, obj in (("tokenizer.json", spec), ("tokenizer_config.json", tcfg)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=2)
            f.write("\n")
    for f in os.listdir(folder):
        os.chmod(os.path.join(folder, f), 0o644)  # save_pretrained makes the weights 0600
    cfg = json.load(open(os.path.join(folder, "config.json")))
    assert "rope_theta" in cfg and "rope_parameters" not in cfg, cfg

    exp = {
        "schema": 1,
        "model": NAME,
        "reference": "transformers float32 forward pass (eager attention, CPU, one thread) on the float32 "
                     "weights in model.safetensors; greedy_ids from generate() (no EOS stop), checked "
                     "against a full recompute loop; last_logits = next-token logits after prompt_ids",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__,
                     "numpy": np.__version__, "python": sys.version.split()[0]},
        "training": {"seed": SEED, "steps": args.steps, "batch": BATCH, "seq": SEQ, "wall_seconds": round(seconds[0], 1), "cpu_seconds": round(seconds[1], 1),
                     "threads": 1, "train_loss": round(train_loss, 4), "val_loss": round(vloss, 4),
                     "parameters": n_params, "corpus_tokens": int(len(stream)),
                     "corpus": {"package": "bible-kjv-text", "file": DATA_FILE, "sha256": data_sha,
                                "text_sha256": text_sha}},
        "bos_id": 1,
        "eos_id": 2,
        "greedy_n": GREEDY_N,
        "cases": expected(folder, tok),
    }
    with open(os.path.join(folder, "expected.json"), "w", encoding="utf-8") as f:
        f.write(to_json(exp) + "\n")
    for c in exp["cases"]:
        print(f"{c['full_text']!r}  (margin {c['min_margin']:.3g})")
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"{folder}: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
