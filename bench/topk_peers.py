"""Peers of minfer's device top-k / top-p candidates (mf_topk), same shapes and dtype, one process:

  torch_topk  torch.topk(x, k) + torch.logsumexp(x * scale) per row: the same
              information as mf_topk's (ids, values, max and sum of exp)
  hf_top_p    the Hugging Face top-p warper's work (TopPLogitsWarper): sort the
              whole row descending, softmax, cumsum, mask the tail past
              top_p (0.9); the peer of the top-p case (k = 1024 rows only)
  minfer      minfer.topk(x, k, scale) through the Python binding, on torch's
              current stream; like torch's ops it allocates its outputs per call
              (torch's caching allocator)

    MINFER_LIB=build/libminfer.so python3 bench/topk_peers.py [--out docs/results/topk_peers.csv]
    python3 bench/topk_peers.py --cpu    # smoke mode: tiny shapes on the CPU, wall clock, nothing written

Shapes: as `minfer bench topk`: vocab {32000, 128256, 151936} x batch {1, 8,
64} x k {50, 1024} (--full: vocab + 50257, 256000, batch + 4, 16, 32, 128,
k + 1, 256), f32 logits (the engine's LM head output; --dtype bf16 for the
other), uniform in [-8, 8). Timing: CUDA events, warm-up, a 256 MB buffer
written before every call (L2 flushed), p5/p50/p95 of --iters. GB/s counts
the logits read once (B V esize) as `minfer bench topk` does; the
device-to-device copy bandwidth (read + write) is measured in the same run.
Each implementation's output is first checked against float64 on the first
and last rows (max abs error of the values / logsumexp / probabilities in the
CSV). One CSV row per case and implementation, with device, commit and date.
"""

import argparse
import csv
import datetime
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from peer_timing import commit, copy_ceiling, make_timer  # noqa: E402

VOCABS, BATCHES, KS = [32000, 128256, 151936], [1, 8, 64], [50, 1024]
MORE_VOCABS, MORE_BATCHES, MORE_KS = [50257, 256000], [4, 16, 32, 128], [1, 256]
IMPLS = ["torch_topk", "hf_top_p", "minfer"]
TOP_P = 0.9
FIELDS = ["impl", "vocab", "batch", "k", "dtype", "scale", "p5_us", "p50_us", "p95_us", "MB_read", "gbps",
          "pct_copy", "max_abs_err", "note", "device", "copy_gbps", "commit", "date"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "topk_peers.csv"))
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    ap.add_argument("--full", action="store_true", help="the larger grid of `minfer bench topk --full`")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--scale", type=float, default=1.0, help="1 / temperature")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--cpu", "--dry-run", dest="cpu", action="store_true",
                    help="smoke mode: tiny shapes on the CPU, wall clock, nothing written")
    a = ap.parse_args()

    import torch

    if a.cpu:
        torch.set_num_threads(1)
        a.warmup, a.iters = 1, 3
    elif not torch.cuda.is_available():
        sys.exit("topk_peers: no CUDA device (use --cpu for the smoke mode)")
    devname = "cpu" if a.cpu else "cuda"
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    esize = torch.tensor([], dtype=dt).element_size()
    try:
        import minfer
    except Exception as e:  # noqa: BLE001
        minfer = None
        print(f"# minfer binding unavailable: {e}", file=sys.stderr)

    device = "cpu (smoke)" if a.cpu else torch.cuda.get_device_name()
    timed = make_timer(torch, not a.cpu, a.warmup, a.iters)
    copy_gbps = float("nan")
    if not a.cpu:
        copy_gbps = copy_ceiling(torch, timed)
        print(f"# {device}: copy {copy_gbps:.1f} GB/s (read + write)", file=sys.stderr)

    if a.cpu:
        grid = [(1000, 2, k) for k in (50, 1000)]
    else:
        vs, bs, ks = VOCABS + (MORE_VOCABS if a.full else []), BATCHES + (MORE_BATCHES if a.full else []), \
            KS + (MORE_KS if a.full else [])
        grid = [(v, b, k) for v in vs for b in bs for k in ks]
    impls = a.impls.split(",")
    scale = a.scale
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    sha = commit()
    rows = []
    for V, B, k in grid:
        torch.manual_seed(V * 131 + B * 17 + k)
        x = (torch.rand(B, V, device=devname, dtype=torch.float32) * 16 - 8).to(dt)
        sel = sorted({0, B - 1})
        xd = x[sel].double()
        ref_vals = torch.topk(xd, k).values
        ref_lse = torch.logsumexp(xd * scale, -1)
        ref_p = torch.softmax(torch.sort(xd * scale, -1, descending=True).values, -1)

        def torch_topk():
            v, i = torch.topk(x, k)
            return v, i, torch.logsumexp(x.float() * scale, -1)

        def hf_top_p():
            s, i = torch.sort(x.float() * scale, -1, descending=True)
            p = torch.softmax(s, -1)
            c = torch.cumsum(p, -1)
            return p.masked_fill(c - p > TOP_P, 0.0), i  # keep the smallest prefix holding top_p

        def err_of(name, out):
            if name == "torch_topk":
                v, _, lse = out
                return max((v[sel].double() - ref_vals).abs().max().item(),
                           (lse[sel].double() - ref_lse).abs().max().item())
            if name == "minfer":
                _, v, st = out
                lse = st[sel, 0].double() * scale + torch.log(st[sel, 1].double())
                return max((v[sel].double() - ref_vals).abs().max().item(), (lse - ref_lse).abs().max().item())
            p, _ = out  # the kept prefix must equal float64's probabilities
            keep = p[sel] > 0
            return (p[sel].double() - ref_p).abs().masked_fill(~keep, 0).max().item()

        fns = {"torch_topk": torch_topk}
        if k == 1024 or (a.cpu and k == max(kk for _, _, kk in grid)):
            fns["hf_top_p"] = hf_top_p
        if minfer is not None:
            fns["minfer"] = lambda: minfer.topk(x, k, scale=scale)
        need = B * V * esize
        for name in impls:
            if name not in fns:
                continue
            note, err, t = "", float("nan"), (float("nan"),) * 3
            try:
                err = err_of(name, fns[name]())
                t = timed(fns[name])
            except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
                note = f"unavailable: {str(e).splitlines()[0][:120] if str(e) else type(e).__name__}"
            gbps = need / (t[1] * 1e3)
            rows.append(dict(impl=name, vocab=V, batch=B, k=k, dtype=a.dtype, scale=scale, p5_us=f"{t[0]:.1f}",
                             p50_us=f"{t[1]:.1f}", p95_us=f"{t[2]:.1f}", MB_read=f"{need / 1e6:.2f}",
                             gbps=f"{gbps:.1f}", pct_copy=f"{100 * gbps / copy_gbps:.1f}",
                             max_abs_err=f"{err:.3g}", note=note, device=device, copy_gbps=f"{copy_gbps:.1f}",
                             commit=sha, date=when))
            print(f"topk_peers: vocab {V} batch {B} k {k} {name}: p50 {t[1]:.1f} us, {gbps:.1f} GB/s, "
                  f"err {err:.2g} {note}", file=sys.stderr)
        x = None
        if not a.cpu:
            torch.cuda.empty_cache()

    if not a.cpu:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
        print(f"# wrote {len(rows)} rows to {a.out}", file=sys.stderr)
    print(f"{'impl':11} {'vocab':>7} {'B':>4} {'k':>5} {'p50_us':>10} {'GB/s':>8} {'%copy':>6} {'err':>9} note")
    for r in rows:
        print(f"{r['impl']:11} {r['vocab']:>7} {r['batch']:>4} {r['k']:>5} {r['p50_us']:>10} {r['gbps']:>8} "
              f"{r['pct_copy']:>6} {r['max_abs_err']:>9} {r['note'][:50]}")
    bad = [r for r in rows if r["impl"] == "minfer" and (r["note"] or not float(r["max_abs_err"]) < 1e-3)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
