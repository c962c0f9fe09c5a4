"""Peers of minfer's MoE layer, same shapes and weights, one process:

  hf_loop      the HF Mixtral block: router GEMM, softmax, top-k, renorm, then a
               Python loop over experts: gather the expert's tokens, gate/up/down
               matmuls, scale by the routing weight, index_add_ back
  grouped_mm   the same routing, a stable sort by expert, gather, then
               torch._grouped_mm for gate|up and down (one launch each), scale,
               index_add_ back (CUDA only; skipped where torch lacks it)
  dense        one dense GEMM (T*k, H) x (H, 3I): the expert GEMMs' FLOPs
               with no routing, the ceiling the expert GEMMs are quoted against
  minfer       minfer.moe(...) through the Python binding (workspace allocated
               once, outside the timing), on torch's current stream

    MINFER_LIB=build/libminfer.so python3 bench/moe_peers.py [--out docs/results/moe.csv]
    MINFER_LIB=build/libminfer.so python3 bench/moe_peers.py --cpu      # tiny smoke run

Shapes (CUDA): the goal shape hidden 4096, 32 experts, top-2, FFN 7168,
batch 16 x seq 2048 (prefill) and decode batches 1 and 16; --full adds the
brief's grid experts {8,16,32,64} x top-k {2,4,8} x hidden {2048,4096,8192}
(FFN 1.75 x hidden) x batch {1,4,16,32}. Timing: CUDA events, warm-up, a
256 MB buffer written before every iteration (L2 flushed), median of --iters.
TFLOP/s counts the expert GEMMs' FLOPs, 2 * T * k * H * 3I, for every
implementation (so the layer's overheads show as a lower rate). Before
timing, each implementation's output is compared with hf_loop's (max abs
difference reported). One CSV row per shape and implementation, with
device, commit and date.
"""

import argparse
import csv
import datetime
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from peer_timing import commit  # noqa: E402


def route(torch, x, wr, k):
    """Mixtral's router: softmax over E in f32, top-k, renormalised."""
    logits = (x @ wr.t()).float()
    p = torch.softmax(logits, dim=-1)
    w, ids = torch.topk(p, k, dim=-1)
    return (w / w.sum(-1, keepdim=True)).to(x.dtype), ids


def hf_loop(torch, x, wr, w1, w2, k):
    F = torch.nn.functional
    T, H = x.shape
    E, I = w1.shape[0], w2.shape[2]
    w, ids = route(torch, x, wr, k)
    out = torch.zeros_like(x)
    mask = F.one_hot(ids, num_classes=E).permute(2, 1, 0)  # (E, k, T)
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()  # one sync, as HF does
    for e in hit.flatten().tolist():
        idx, top_x = torch.where(mask[e])
        cur = x[top_x]
        h = F.silu(cur @ w1[e, :I].t()) * (cur @ w1[e, I:].t())
        y = (h @ w2[e].t()) * w[top_x, idx, None]
        out.index_add_(0, top_x, y.to(x.dtype))
    return out


def grouped(torch, x, wr, w1, w2, k):
    F = torch.nn.functional
    T, H = x.shape
    E, I = w1.shape[0], w2.shape[2]
    w, ids = route(torch, x, wr, k)
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=E), 0).to(torch.int32)
    tok = order // k
    xs = x[tok]
    h = torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)
    h = F.silu(h[:, :I]) * h[:, I:]
    y = torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)
    y = y * w.flatten()[order, None]
    out = torch.zeros_like(x)
    out.index_add_(0, tok, y.to(x.dtype))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU (a smoke run; 1 torch thread)")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--out", default=None, help="CSV file (CUDA default docs/results/moe.csv; CPU: none)")
    a = ap.parse_args()
    import torch
    import minfer
    torch.manual_seed(0)
    cuda = not a.cpu
    if cuda and not torch.cuda.is_available():
        sys.exit("moe_peers: no CUDA device (use --cpu for the smoke run)")
    if a.cpu:
        torch.set_num_threads(1)
    dev = "cuda" if cuda else "cpu"
    dt = torch.bfloat16 if cuda else torch.float32
    iters = a.iters or (20 if cuda else 2)
    out_path = a.out or (os.path.join(HERE, "..", "docs", "results", "moe.csv") if cuda else None)

    shapes = []  # (mode, E, k, H, I, batch, T)
    if cuda:
        shapes += [("prefill", 32, 2, 4096, 7168, 16, 16 * 2048), ("decode", 32, 2, 4096, 7168, 1, 1),
                   ("decode", 32, 2, 4096, 7168, 16, 16)]
        if a.full:
            for E in (8, 16, 32, 64):
                for k in (2, 4, 8):
                    for H in (2048, 4096, 8192):
                        for b in (1, 4, 16, 32):
                            shapes.append(("prefill", E, k, H, H * 7 // 4, b, b * 2048))
                            shapes.append(("decode", E, k, H, H * 7 // 4, b, b))
    else:
        shapes += [("prefill", 8, 2, 128, 224, 2, 2 * 16), ("decode", 8, 2, 128, 224, 1, 1)]

    if cuda:
        flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
        devname = torch.cuda.get_device_name()
    else:
        flush = torch.empty(64 << 20, dtype=torch.uint8)
        devname = "cpu (torch %s, 1 thread)" % torch.__version__

    def timeit(fn):
        for _ in range(2):
            fn()
        ts = []
        for _ in range(iters):
            flush.fill_(1)
            if cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e) * 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e6)
        ts.sort()
        return ts[len(ts) // 2]

    rows = []
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for mode, E, k, H, I, b, T in shapes:
        try:
            x = torch.randn(T, H, device=dev, dtype=dt)
            wr = (torch.randn(E, H, device=dev) / H ** 0.5).to(dt)
            w1 = (torch.randn(E, 2 * I, H, device=dev) / H ** 0.5).to(dt)
            w2 = (torch.randn(E, H, I, device=dev) / I ** 0.5).to(dt)
        except RuntimeError as err:  # out of memory
            print(f"moe_peers: skipping {mode} E={E} k={k} H={H} T={T}: {err}", file=sys.stderr)
            continue
        flops = 2.0 * T * k * H * 3 * I
        ref = hf_loop(torch, x, wr, w1, w2, k)
        impls = [("hf_loop", lambda: hf_loop(torch, x, wr, w1, w2, k))]
        if cuda and hasattr(torch, "_grouped_mm"):
            impls.append(("grouped_mm", lambda: grouped(torch, x, wr, w1, w2, k)))
        xd = torch.randn(T * k, H, device=dev, dtype=dt)
        wd = torch.randn(3 * I, H, device=dev, dtype=dt)
        impls.append(("dense", lambda: xd @ wd.t()))
        ws = torch.empty(1, dtype=torch.int32, device=dev)
        try:  # size the workspace once (a too-small one makes minfer name the size it needs)
            minfer.moe(x, wr, w1, w2, k, workspace=ws)
        except minfer.MinferError as err:
            need = int(str(err).split("need ")[1].split()[0])
            ws = torch.empty(need // 4 + 1, dtype=torch.int32, device=dev)
        impls.append(("minfer", lambda: minfer.moe(x, wr, w1, w2, k, workspace=ws)))
        for name, fn in impls:
            try:
                got = fn()
                err = float((got.float() - ref.float()).abs().max()) if name != "dense" else float("nan")
                us = timeit(fn)
            except Exception as ex:  # noqa: BLE001 - a peer that fails here is reported, not fatal
                print(f"moe_peers: {name} failed on {mode} E={E} k={k} H={H} T={T}: {ex}", file=sys.stderr)
                continue
            row = dict(impl=name, mode=mode, experts=E, top_k=k, hidden=H, ffn=I, batch=b, tokens=T,
                       dtype=str(dt).replace("torch.", ""), p50_us=round(us, 1),
                       tflops=round(flops / (us * 1e6), 3), max_abs_diff_vs_hf=err,
                       device=devname, commit=commit(), date=date)
            rows.append(row)
            print(f"{mode:8s} E={E:3d} k={k} H={H:5d} T={T:6d} {name:11s} {us:10.1f} us "
                  f"{row['tflops']:8.3f} TFLOP/s  max|diff| {err:.3g}")
    if out_path and rows:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w", newline="") as f:
            wcsv = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            wcsv.writeheader()
            wcsv.writerows(rows)
        print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
