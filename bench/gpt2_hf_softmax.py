"""GPT-2 in Hugging Face transformers with minfer's fused softmax as its
attention (python/minfer/hf_attention.py), against the eager attention it
replaces. GPU host only.

    MINFER_LIB=build/libminfer.so python3 bench/gpt2_hf_softmax.py [--out FILE]

1. Logits: a random-initialised GPT-2 (the 124M shape) on a batch with left
   padding (one row padded: the mask becomes a bias) and one without. f32
   model: minfer vs eager max |diff| <= 1e-3 (both f32 math; the kernels'
   exp and summation order differ by ~1e-6 relative, amplified by 12
   layers). bf16/f16 model: minfer's max error against an f32 eager run must
   be at most 2x (+1e-3) that of the eager run in the same dtype.
2. generate(): greedy, use_cache, tokens/s with eager and with
   minfer_softmax (median of --runs after a warm-up), printed and written to
   --out as CSV rows with device, commit and date.
3. prefill: one forward pass over --prefill-batch x --prefill-len tokens,
   eager vs minfer_softmax (median of --runs), same CSV.
"""

import argparse
import csv
import datetime
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from peer_timing import commit  # noqa: E402


def make_model(torch, transformers, impl, dtype, state=None, seed=0):
    cfg = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_positions=1024)
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(cfg)
    if state is not None:
        model.load_state_dict(state)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
    else:
        model.config._attn_implementation = impl
    return model.to(device="cuda", dtype=dtype).eval()


def logits(torch, model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16"], help="model dtype for the timing")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    ap.add_argument("--new", type=int, default=128, help="generated tokens")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prefill-batch", type=int, default=8)
    ap.add_argument("--prefill-len", type=int, default=1024, help="tokens per row of the prefill timing")
    ap.add_argument("--out", default=None, help="CSV file for the results")
    a = ap.parse_args()

    import torch
    import transformers

    import minfer
    import minfer.hf_attention as mha

    mha.register()
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    dev = torch.cuda.get_device_name()
    base = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768))
    state = base.state_dict()
    del base

    # 1. logits
    torch.manual_seed(1)
    ids = torch.randint(0, 50257, (4, 256), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :37] = 0  # left padding in one row
    failures = 0
    ref32 = None
    for name in ["f32", a.dtype] if a.dtype != "f32" else ["f32"]:
        dt = dtypes[name]
        eager = make_model(torch, transformers, "eager", dt, state)
        fused = make_model(torch, transformers, mha.NAME, dt, state)
        for label, m in (("padded", mask), ("unpadded", None)):
            le, lf = logits(torch, eager, ids, m), logits(torch, fused, ids, m)
            keep = (m.bool() if m is not None else torch.ones_like(ids, dtype=torch.bool))[..., None].expand_as(le)
            if name == "f32":
                if label == "padded":
                    ref32 = le
                d = (le - lf).abs()[keep].max().item()
                ok = d <= 1e-3
                print(f"logits f32 {label}: max |minfer - eager| = {d:.3g} (tolerance 1e-3) {'ok' if ok else 'FAIL'}")
            else:
                if label != "padded":
                    continue
                e_eager = (le - ref32).abs()[keep].max().item()
                e_fused = (lf - ref32).abs()[keep].max().item()
                ok = e_fused <= 2 * e_eager + 1e-3
                print(f"logits {name} {label}: max error vs f32 eager: minfer {e_fused:.3g}, eager {e_eager:.3g} "
                      f"(tolerance 2x + 1e-3) {'ok' if ok else 'FAIL'}")
            failures += not ok
        del eager, fused
        torch.cuda.empty_cache()

    # 2. generate() tokens/s
    dt = dtypes[a.dtype]
    prompt = torch.randint(0, 50257, (a.batch, a.prompt), device="cuda")
    rows = []
    for impl in ("eager", mha.NAME):
        model = make_model(torch, transformers, impl, dt, state)
        kw = dict(max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False, use_cache=True,
                  attention_mask=torch.ones_like(prompt), pad_token_id=0)
        with torch.no_grad():
            model.generate(prompt, **kw)  # warm-up
            times = []
            for _ in range(a.runs):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                model.generate(prompt, **kw)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        tps = a.batch * a.new / t
        print(f"generate {impl:15s} {a.dtype}: batch {a.batch}, prompt {a.prompt}, {a.new} new tokens: "
              f"{t * 1e3:.1f} ms, {tps:.0f} tokens/s")
        rows.append({"device": dev, "commit": commit(), "date": datetime.datetime.utcnow().isoformat(timespec="seconds"),
                     "impl": impl, "dtype": a.dtype, "batch": a.batch, "prompt": a.prompt, "new_tokens": a.new,
                     "median_ms": f"{t * 1e3:.2f}", "tokens_per_s": f"{tps:.1f}", "minfer": minfer.version()})
        del model
        torch.cuda.empty_cache()
    if len(rows) == 2:
        print(f"speedup minfer_softmax / eager: {float(rows[1]['tokens_per_s']) / float(rows[0]['tokens_per_s']):.3f}x")

    # 3. prefill: one forward pass over --prefill-batch x --prefill-len tokens
    #    (decode is what generate() above is mostly made of; this is the other half)
    ids = torch.randint(0, 50257, (a.prefill_batch, a.prefill_len), device="cuda")
    pre = {}
    for impl in ("eager", mha.NAME):
        model = make_model(torch, transformers, impl, dt, state)
        with torch.no_grad():
            model(input_ids=ids)  # warm-up
            times = []
            for _ in range(a.runs):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                model(input_ids=ids)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
        pre[impl] = statistics.median(times)
        print(f"prefill {impl:15s} {a.dtype}: batch {a.prefill_batch} x {a.prefill_len} tokens: {pre[impl] * 1e3:.2f} ms")
        rows.append({"device": dev, "commit": commit(), "date": datetime.datetime.utcnow().isoformat(timespec="seconds"),
                     "impl": impl + " (prefill forward)", "dtype": a.dtype, "batch": a.prefill_batch,
                     "prompt": a.prefill_len, "new_tokens": 0, "median_ms": f"{pre[impl] * 1e3:.2f}",
                     "tokens_per_s": f"{a.prefill_batch * a.prefill_len / pre[impl]:.1f}", "minfer": minfer.version()})
        del model
        torch.cuda.empty_cache()
    print(f"prefill speedup minfer_softmax / eager: {pre['eager'] / pre[mha.NAME]:.3f}x")
    if a.out:
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
