"""What the bench/*_peers.py scripts share: the commit they stamp on every row,
the timer (CUDA events with L2 flushed, or the host clock for CPU smoke runs;
p5/p50/p95 in microseconds) and the copy-bandwidth ceiling."""

import math
import os
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def commit():
    try:
        return subprocess.check_output(["git", "-C", HERE, "rev-parse", "--short=12", "HEAD"], text=True).strip()
    except Exception:  # noqa: BLE001 - no git, not a checkout
        return "unknown"


def percentiles(samples):
    """(p5, p50, p95) of the samples (nearest rank)."""
    s = sorted(samples)
    pick = lambda q: s[max(0, math.ceil(q * len(s)) - 1)]  # noqa: E731
    return pick(0.05), pick(0.5), pick(0.95)


def make_timer(torch, cuda, warmup, iters):
    """timed(fn) -> (p5, p50, p95) us. CUDA: events around each call, a 256 MB
    buffer written before it (L2 flushed); else the host clock."""
    if not cuda:
        def timed(fn):
            for _ in range(warmup):
                fn()
            s = []
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                s.append((time.perf_counter() - t0) * 1e6)
            return percentiles(s)
        return timed
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn):
        for _ in range(warmup):
            fn()
        s = []
        for i in range(iters):
            flush.fill_(i & 0x7f)
            ev0.record()
            fn()
            ev1.record()
            ev1.synchronize()
            s.append(ev0.elapsed_time(ev1) * 1e3)
        return percentiles(s)
    return timed


def copy_ceiling(torch, timed):
    """The ceiling: a 1 GiB device-to-device copy, read + write bytes, GB/s at p50."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(0x3c)
    dst = torch.empty_like(src)
    gbps = 2 * src.numel() / (timed(lambda: dst.copy_(src))[1] * 1e3)
    del src, dst
    return gbps
