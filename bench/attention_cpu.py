"""CPU timings of the attention twin (minfer.attention on numpy arrays).

    MINFER_LIB=build/libminfer.so python3 bench/attention_cpu.py [--dtype f32|bf16] [--reps 3]

Prints best-of-reps wall time per shape: causal prefill in fixed mode
(GFLOP/s by 4 B H S^2 D / 2) and one decode step over a KV cache (GB/s of
K and V read). Threads: OMP_NUM_THREADS (default: all cores)."""

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import minfer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    dt = np.float32
    if args.dtype == "bf16":
        import ml_dtypes
        dt = ml_dtypes.bfloat16
    rng = np.random.default_rng(0)

    def rnd(*shape):
        return rng.uniform(-1, 1, size=shape).astype(np.float32).astype(dt)

    def best(fn):
        fn()
        t = math.inf
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn()
            t = min(t, time.perf_counter() - t0)
        return t

    for B, S, H, KVH, D in [(1, 1024, 16, 4, 128), (1, 2048, 8, 8, 64), (4, 512, 16, 16, 64)]:
        q, k, v = rnd(B, S, H, D), rnd(B, S, KVH, D), rnd(B, S, KVH, D)
        t = best(lambda: minfer.attention(q, k, v, causal=True))
        print(f"prefill {args.dtype} B={B} S={S} H={H} KVH={KVH} D={D} causal: {t * 1e3:.1f} ms, "
              f"{4 * B * H * S * S * D / 2 / t * 1e-9:.1f} GFLOP/s")
    B, H, KVH, D, L = 8, 32, 8, 128, 2048
    q, kc, vc = rnd(B, H, D), rnd(B, L, KVH, D), rnd(B, L, KVH, D)
    cq = np.arange(B + 1, dtype=np.int32)
    kl = np.full(B, L, np.int32)
    t = best(lambda: minfer.attention(q, kc, vc, causal=True, cu_seqlens_q=cq, k_lens=kl, max_q_len=1, max_k_len=L))
    print(f"decode {args.dtype} B={B} H={H} KVH={KVH} D={D} cache={L}: {t * 1e3:.2f} ms, "
          f"{2 * B * L * KVH * D * np.dtype(dt).itemsize / t * 1e-9:.1f} GB/s of KV")


if __name__ == "__main__":
    main()
