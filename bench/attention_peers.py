"""Peers of minfer's flash attention, same shapes and dtype, one process:

  sdpa_flash / sdpa_cudnn / sdpa_efficient / sdpa_math
                 torch.nn.functional.scaled_dot_product_attention with one
                 backend forced (torch.nn.attention.sdpa_kernel); a backend
                 that refuses the shape is reported as unavailable
  torch_naive    the unfused chain: q k^T * scale -> causal masked_fill ->
                 softmax -> @ v (materialises the scores)
  minfer         minfer.attention(q, k, v, ...) through the Python binding

    MINFER_LIB=build/libminfer.so python3 bench/attention_peers.py [--out docs/results/attention.csv]
    python3 bench/attention_peers.py --cpu     # smoke mode: tiny shapes on the CPU, nothing written

Shapes (issue 8): prefill seq {128 ... 8192} x batch {1, 4, 16, 32} x heads
{8, 16, 32}, head_dim 64 and 128, causal and not (default: the goal shapes,
with one head_dim 256 shape; --full: all), TFLOP/s by 4*B*H*S*S*D (halved when causal); decode batch {1,
8, 32, 64} x cache length {1k, 4k, 16k, 32k}, 32 q heads over 8 KV heads,
d128, one query token, GB/s of K + V read and % of the device-to-device copy
bandwidth measured in the same run. Timing: CUDA events, warm-up, L2 flushed
(256 MB written) before every timed call, p5/p50/p95 of --iters. Each
implementation's output is first checked against float64 (max abs error in
the CSV). Rows carry device, commit and date; a short table is printed last.
"""

import argparse
import csv
import datetime
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from peer_timing import commit, copy_ceiling, make_timer  # noqa: E402

SEQS = [128, 512, 1024, 2048, 4096, 8192]
BATCHES = [1, 4, 16, 32]
HEADS = [8, 16, 32]
DIMS = [64, 128]
GOAL = [(16, 16, 2048, 64), (8, 16, 2048, 64), (4, 32, 4096, 128), (1, 32, 8192, 128), (4, 16, 512, 128),
        (4, 16, 1024, 64), (2, 16, 4096, 256)]  # (batch, heads, seq, d), as `minfer bench attention`
DEC_B = [1, 8, 32, 64]
DEC_L = [1024, 4096, 16384, 32768]
IMPLS = ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math", "torch_naive", "minfer"]
FIELDS = ["case", "impl", "batch", "heads", "kv_heads", "q_len", "k_len", "head_dim", "causal", "dtype", "p5_us",
          "p50_us", "p95_us", "tflops", "gbps", "pct_copy", "max_abs_err", "note", "device", "copy_gbps", "commit",
          "date"]


def cases(args):
    out = []
    if args.cases in ("prefill", "all"):
        if args.cpu:
            out += [("prefill", 1, 4, 4, 64, 64, 64, c) for c in (False, True)]
        elif args.full:
            out += [("prefill", b, h, h, s, s, d, c) for d in DIMS for s in SEQS for b in BATCHES for h in HEADS
                    for c in (False, True)]
        else:
            out += [("prefill", b, h, h, s, s, d, c) for (b, h, s, d) in GOAL for c in (False, True)]
    if args.cases in ("decode", "all"):
        if args.cpu:
            out.append(("decode", 2, 8, 2, 1, 256, 128, False))
        else:
            out += [("decode", b, 32, 8, 1, l, 128, False) for b in DEC_B for l in DEC_L]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    ap.add_argument("--cases", default="all", choices=["prefill", "decode", "all"])
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "attention.csv"))
    ap.add_argument("--cpu", "--dry-run", dest="cpu", action="store_true",
                    help="smoke mode: tiny shapes on the CPU, wall clock, nothing written")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    if args.cpu:
        torch.set_num_threads(1)
        args.warmup, args.iters = 1, 3
    elif not torch.cuda.is_available():
        sys.exit("attention_peers: no CUDA device (use --cpu for the smoke mode)")
    devname = "cuda" if not args.cpu else "cpu"
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    if args.cpu:
        dt = torch.float32  # CPU SDPA / matmul in bf16 is slow and not what is compared
    try:
        import minfer  # noqa: F401
    except Exception as e:  # noqa: BLE001
        minfer = None
        print(f"# minfer binding unavailable: {e}", file=sys.stderr)
    else:
        import minfer
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
                    "sdpa_math": SDPBackend.MATH}
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            backends["sdpa_cudnn"] = SDPBackend.CUDNN_ATTENTION
    except Exception:  # noqa: BLE001
        backends, sdpa_kernel = {}, None

    device = "cpu" if args.cpu else torch.cuda.get_device_name()
    timed = make_timer(torch, not args.cpu, args.warmup, args.iters)
    copy_gbps = float("nan")
    if not args.cpu:
        copy_gbps = copy_ceiling(torch, timed)
        print(f"# {device}: copy {copy_gbps:.1f} GB/s (read + write)", file=sys.stderr)

    impls = args.impls.split(",")
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    sha = commit()
    rows = []
    for kind, b, h, hk, sq, sk, d, causal in cases(args):
        torch.manual_seed(sq * 131 + sk + b)
        scale = 1.0 / math.sqrt(d)
        # torch layout (B, H, S, D); minfer takes (B, S, H, D) (fixed) or (B, H, D) + cache (cache mode).
        q = torch.randn(b, h, sq, d, device=devname, dtype=torch.float32).to(dt)
        k = torch.randn(b, hk, sk, d, device=devname, dtype=torch.float32).to(dt)
        v = torch.randn(b, hk, sk, d, device=devname, dtype=torch.float32).to(dt)
        grp = h // hk
        ke, ve = (k.repeat_interleave(grp, 1), v.repeat_interleave(grp, 1)) if grp > 1 else (k, v)
        # float64 reference on the first and last (b, h) only (bounded cost)
        ref = {}
        for bi, hi in {(0, 0), (b - 1, h - 1)}:
            s = (q[bi, hi].double() @ ke[bi, hi].double().T) * scale
            if causal:
                s.masked_fill_(torch.ones(sq, sk, dtype=torch.bool, device=devname).triu_(sk - sq + 1), float("-inf"))
            ref[(bi, hi)] = torch.softmax(s, -1) @ ve[bi, hi].double()

        def naive():
            s = (q @ ke.transpose(-1, -2)) * scale
            if causal:
                s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=devname).triu_(sk - sq + 1),
                                  float("-inf"))
            return torch.softmax(s.float(), -1).to(dt) @ ve

        fns = {"torch_naive": naive}
        for name, bk in backends.items():
            def sdpa(bk=bk):
                with sdpa_kernel(bk):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                          enable_gqa=grp > 1)
            fns[name] = sdpa
        if minfer is not None:
            if kind == "prefill":
                qm, km, vm = (t.transpose(1, 2).contiguous() for t in (q, k, v))
                om = torch.empty_like(qm)
                fns["minfer"] = (lambda: minfer.attention(qm, km, vm, causal=causal, scale=scale, out=om),
                                 lambda: om.transpose(1, 2))
            else:
                qm = q[:, :, 0].contiguous()  # (B, H, D): one token per sequence
                kc, vc = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()  # (B, L, Hk, D)
                cu = torch.arange(b + 1, dtype=torch.int32, device=devname)
                kl = torch.full((b,), sk, dtype=torch.int32, device=devname)
                om = torch.empty_like(qm)
                fns["minfer"] = (lambda: minfer.attention(qm, kc, vc, cu_seqlens_q=cu, k_lens=kl, max_q_len=1,
                                                          max_k_len=sk, scale=scale, out=om),
                                 lambda: om[:, :, None, :])
        flop = 4.0 * b * h * sq * sk * d * (0.5 if causal else 1.0)
        kv_bytes = 2.0 * b * sk * hk * d * k.element_size()
        for name in impls:
            if name not in fns:
                continue
            fn, view = fns[name] if isinstance(fns[name], tuple) else (fns[name], None)
            note, err, t = "", float("nan"), (float("nan"),) * 3
            try:
                out = fn()
                out = view() if view is not None else out
                err = max((out[bi, hi].double() - r).abs().max().item() for (bi, hi), r in ref.items())
                t = timed(fn)
            except Exception as e:  # noqa: BLE001
                note = f"unavailable: {str(e).splitlines()[0][:120] if str(e) else type(e).__name__}"
            p50 = t[1]
            rows.append(dict(case=kind, impl=name, batch=b, heads=h, kv_heads=hk, q_len=sq, k_len=sk, head_dim=d,
                             causal=int(causal), dtype=str(dt).replace("torch.", ""), p5_us=f"{t[0]:.1f}",
                             p50_us=f"{p50:.1f}", p95_us=f"{t[2]:.1f}",
                             tflops=f"{flop / (p50 * 1e6):.2f}" if kind == "prefill" else "",
                             gbps=f"{kv_bytes / (p50 * 1e3):.1f}" if kind == "decode" else "",
                             pct_copy=f"{100 * kv_bytes / (p50 * 1e3) / copy_gbps:.1f}" if kind == "decode" else "",
                             max_abs_err=f"{err:.3g}", note=note, device=device, copy_gbps=f"{copy_gbps:.1f}",
                             commit=sha, date=when))
        q = k = v = ke = ve = None
        if not args.cpu:
            torch.cuda.empty_cache()

    if not args.cpu:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
        print(f"# wrote {len(rows)} rows to {args.out}", file=sys.stderr)
    print(f"{'case':8} {'impl':15} {'B':>3} {'H':>3} {'S/L':>6} {'D':>4} {'causal':>6} {'p50_us':>10} "
          f"{'TFLOP/s|GB/s':>12} {'err':>9} note")
    for r in rows:
        perf = r["tflops"] or r["gbps"]
        print(f"{r['case']:8} {r['impl']:15} {r['batch']:>3} {r['heads']:>3} {r['k_len']:>6} {r['head_dim']:>4} "
              f"{r['causal']:>6} {r['p50_us']:>10} {perf:>12} {r['max_abs_err']:>9} {r['note'][:50]}")


if __name__ == "__main__":
    main()
