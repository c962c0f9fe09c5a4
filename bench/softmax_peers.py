"""Peers of minfer's fused softmax on the GPU, same shapes and dtype, one process:

  torch_eager    x * scale -> masked_fill(causal, -inf) -> softmax (three kernels)
  torch_softmax  torch.softmax alone on a pre-scaled input (no mask)
  torch_compile  torch.compile of the eager chain (if it compiles here)
  triton         a fused softmax after Triton's public fused-softmax design:
                 one program per row, BLOCK = next_power_of_2(cols), the row
                 in registers, the causal mask from indices (rows <= 32768)
  minfer         minfer.softmax(x, y, scale, causal) through the Python binding,
                 on torch's current stream

    MINFER_LIB=build/libminfer.so python3 bench/softmax_peers.py [--out docs/results/softmax.csv]

Shapes: the attention grid q_len = k_len in {128 ... 8192} x batch x heads
(the subset `minfer bench softmax` runs by default; --full for all) with a
causal mask, and the row-length sweep 128 ... 131072 at 2^27 elements without
a mask. Timing: CUDA events, warm-up, a 256 MB buffer written before every
iteration (L2 flushed), p5/p50/p95 of --iters runs. GB/s counts x read once
and y written once, as `minfer bench` does; the device-to-device copy
bandwidth is measured in the same run. Each implementation's output is first
checked against float64 on a few rows (max abs error reported). One CSV row
per case and implementation, with device, commit and date.
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

KS = [128, 512, 1024, 2048, 4096, 8192]
BATCHES = [1, 4, 16, 32]
HEADS = [12, 16, 32]
SUBSET = [(1, 32), (4, 16), (16, 12)]  # (batch, heads), as `minfer bench softmax`
SWEEP_TOTAL = 1 << 27
TRITON_MAX_COLS = 32768


def make_triton(triton, tl):
    @triton.jit
    def softmax_rows(x_ptr, y_ptr, x_stride, y_stride, n_cols, q_len, scale_log2e,
                     CAUSAL: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        lim = n_cols
        if CAUSAL:  # query i = row % q_len sees keys j <= i + k_len - q_len
            lim = tl.minimum(n_cols, (row % q_len).to(tl.int32) + n_cols - q_len + 1)
        x = tl.load(x_ptr + row * x_stride + cols, mask=cols < lim, other=-float("inf")).to(tl.float32)
        z = x * scale_log2e
        m = tl.max(z, axis=0)
        m = tl.where(m == -float("inf"), 0.0, m)  # a fully masked row: zeros, not NaN
        e = tl.exp2(z - m)
        s = tl.sum(e, axis=0)
        y = e / tl.where(s == 0.0, 1.0, s)
        tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=cols < n_cols)

    def run(x2, y2, q_len, scale, causal):
        rows, cols = x2.shape
        block = triton.next_power_of_2(cols)
        warps = 4 if block <= 2048 else 8 if block <= 8192 else 16
        softmax_rows[(rows,)](x2, y2, x2.stride(0), y2.stride(0), cols, q_len, scale * math.log2(math.e),
                              CAUSAL=causal, BLOCK=block, num_warps=warps)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "softmax.csv"))
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--full", action="store_true", help="the whole batch x heads grid")
    ap.add_argument("--cases", default="all", choices=["grid", "sweep", "all"])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--scale", type=float, default=0.125)
    ap.add_argument("--impls", default="torch_eager,torch_softmax,torch_compile,triton,minfer")
    a = ap.parse_args()

    import torch
    try:
        import triton
        import triton.language as tl
        triton_run = make_triton(triton, tl)
    except Exception as e:  # noqa: BLE001 - report and go on without it
        print(f"triton unavailable: {e}", file=sys.stderr)
        triton_run = None
    import minfer

    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    esize = torch.tensor([], dtype=dt).element_size()
    dev = torch.cuda.get_device_name()
    props = torch.cuda.get_device_properties(0)
    impls = a.impls.split(",")
    timed = make_timer(torch, True, a.warmup, a.iters)

    copy_gbps = copy_ceiling(torch, timed)  # a 1 GiB device-to-device copy, read + write bytes
    print(f"# {dev}: copy {copy_gbps:.1f} GB/s (read + write)", file=sys.stderr)

    cases = []
    if a.cases in ("grid", "all"):
        pairs = [(b, h) for b in BATCHES for h in HEADS] if a.full else SUBSET
        cases += [("grid", b, h, k, k, True) for k in KS for (b, h) in pairs]
    if a.cases in ("sweep", "all"):
        k = 128
        while k <= 131072:
            cases.append(("sweep", 1, 1, SWEEP_TOTAL // k, k, False))
            k *= 2

    free = torch.cuda.mem_get_info()[0]
    rows_out = []
    when = datetime.datetime.utcnow().isoformat(timespec="seconds")
    sha = commit()
    compiled = {}
    for kind, b, h, q, k, causal in cases:
        n = b * h * q * k
        need = 6 * n * esize + q * k  # x, y, the pre-scaled copy, the eager chain's three temporaries, its mask
        if need > 0.8 * free:
            print(f"skip {kind} {b}x{h}x{q}x{k}: needs {need / 1e9:.1f} GB", file=sys.stderr)
            continue
        torch.manual_seed(k)
        x = (torch.randn(b, h, q, k, device="cuda", dtype=torch.float32) * 8).to(dt)
        y = torch.empty_like(x)
        mask = torch.ones(q, k, dtype=torch.bool, device="cuda").triu_(k - q + 1) if causal else None
        xs = (x.float() * a.scale).to(dt)  # pre-scaled input for torch_softmax

        def eager():
            s = x * a.scale
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            return torch.softmax(s, dim=-1)

        fns = {
            "torch_eager": eager,
            "torch_softmax": lambda: torch.softmax(xs, dim=-1),
            "minfer": lambda: minfer.softmax(x, y=y, scale=a.scale, causal=causal),
        }
        if "torch_compile" in impls:
            try:
                if causal not in compiled:
                    compiled[causal] = torch.compile(dynamic=True)(lambda xx, mm: torch.softmax(
                        (xx * a.scale).masked_fill(mm, float("-inf")) if mm is not None else xx * a.scale, dim=-1))
                cf = compiled[causal]
                fns["torch_compile"] = lambda: cf(x, mask)
            except Exception as e:  # noqa: BLE001
                print(f"torch.compile unavailable: {e}", file=sys.stderr)
        if triton_run is not None and k <= TRITON_MAX_COLS:
            x2, y2 = x.view(-1, k), y.view(-1, k)
            fns["triton"] = lambda: triton_run(x2, y2, q, a.scale, causal)

        # Reference on a few rows in float64: the first and last query rows of the first and last (b, h).
        sel = [(0, 0, 0), (0, 0, q - 1), (b - 1, h - 1, q // 2), (b - 1, h - 1, q - 1)]
        ref = []
        for bi, hi, qi in sel:
            r = x[bi, hi, qi].double() * a.scale
            if causal:
                r[qi + k - q + 1:] = float("-inf")
            ref.append(torch.softmax(r, dim=-1))
        eager_p50 = None
        for name in impls:
            if name not in fns:
                continue
            try:
                out = fns[name]()
                out = y if out is None else out
                if name == "torch_softmax":  # no mask and a pre-scaled input: compare with its own reference
                    err = max((out[bi, hi, qi].double() - torch.softmax(xs[bi, hi, qi].double(), -1)).abs().max().item()
                              for bi, hi, qi in sel)
                else:
                    err = max((out[bi, hi, qi].double() - r).abs().max().item() for (bi, hi, qi), r in zip(sel, ref))
                p5, p50, p95 = timed(fns[name])
            except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
                print(f"{name} {kind} {b}x{h}x{q}x{k}: failed: {e}", file=sys.stderr)
                continue
            if name == "torch_eager":
                eager_p50 = p50
            gbps = 2 * n * esize / (p50 * 1e3)
            row = {"device": dev, "sms": props.multi_processor_count, "commit": sha, "date": when, "impl": name,
                   "case": kind, "batch": b, "heads": h, "q_len": q, "k_len": k,
                   "mask": "causal" if causal and name != "torch_softmax" else "none", "dtype": a.dtype,
                   "p5_us": f"{p5:.2f}", "p50_us": f"{p50:.2f}", "p95_us": f"{p95:.2f}", "gbps": f"{gbps:.1f}",
                   "pct_copy": f"{100 * gbps / copy_gbps:.1f}", "copy_gbps": f"{copy_gbps:.1f}",
                   "max_abs_err": f"{err:.3g}",
                   "speedup_vs_eager": f"{eager_p50 / p50:.2f}" if eager_p50 else ""}
            rows_out.append(row)
            print(f"{kind:5s} {b:3d}x{h:3d}x{q:6d}x{k:6d} {name:14s} p50 {p50:9.1f} us  {gbps:7.1f} GB/s "
                  f"({row['pct_copy']:>5s}% copy)  err {err:.2g}  x{row['speedup_vs_eager'] or '-'}")
        x = y = xs = mask = None  # free this case's tensors
        torch.cuda.empty_cache()

    if rows_out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows_out[0].keys()))
            w.writeheader()
            w.writerows(rows_out)
        print(f"wrote {len(rows_out)} rows to {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
