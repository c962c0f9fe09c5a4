"""minfer.attention through the binding: numpy on the CPU against a float64
numpy reference (fixed, packed and cache modes, GQA, causal, windows, lse),
errors, and torch CUDA tensors when a GPU is there (skipped otherwise)."""

import math

import numpy as np
import pytest

import minfer

try:
    import torch
    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    torch = None

RNG = np.random.default_rng(1234)


def ref_seq(qb, kb, vb, causal, scale, window=0):
    """float64 attention of one sequence: q (q_len, H, D), k, v (k_len, KVH, D) -> (o, lse)."""
    ql, H, D = qb.shape
    kl, KVH = kb.shape[0], kb.shape[1]
    grp = H // KVH
    o = np.zeros((ql, H, D))
    lse = np.full((ql, H), -np.inf)
    for i in range(ql):
        lo, hi = 0, kl
        if causal:
            last = i + kl - ql
            hi = min(hi, last + 1)
            if window > 0:
                lo = max(lo, last - window + 1)
        if hi <= lo:
            continue
        for h in range(H):
            s = scale * (kb[lo:hi, h // grp, :].astype(np.float64) @ qb[i, h].astype(np.float64))
            m = s.max()
            p = np.exp(s - m)
            o[i, h] = p @ vb[lo:hi, h // grp, :].astype(np.float64) / p.sum()
            lse[i, h] = m + math.log(p.sum())
    return o, lse


def rnd(*shape, lo=-2.0, hi=2.0, dtype=np.float32):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def tol(dtype):
    # f32 math in the CPU twin; one rounding of o to the storage dtype.
    return {np.float32: 2e-5, np.float16: 2e-3}.get(dtype, 1.6e-2)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,S,K,H,KVH,D", [(2, 17, 33, 4, 2, 64), (1, 40, 25, 8, 1, 128), (3, 1, 100, 4, 4, 32)])
def test_fixed(dtype, causal, B, S, K, H, KVH, D):
    q, k, v = rnd(B, S, H, D, dtype=dtype), rnd(B, K, KVH, D, dtype=dtype), rnd(B, K, KVH, D, lo=-1, hi=1, dtype=dtype)
    o, lse = minfer.attention(q, k, v, causal=causal, return_lse=True)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (B, S, H) and lse.dtype == np.float32
    for b in range(B):
        ro, rl = ref_seq(q[b], k[b], v[b], causal, 1 / math.sqrt(D))
        np.testing.assert_allclose(o[b].astype(np.float64), ro, atol=tol(dtype), rtol=tol(dtype))
        np.testing.assert_allclose(lse[b], rl, atol=1e-4, rtol=1e-5)


def test_packed_varlen_zero_lengths_and_window():
    H, KVH, D = 6, 2, 64
    ql, kl = [5, 0, 30, 3, 0], [5, 7, 30, 0, 0]
    q = rnd(sum(ql), H, D)
    k, v = rnd(sum(kl), KVH, D), rnd(sum(kl), KVH, D)
    cq = np.concatenate([[0], np.cumsum(ql)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(kl)]).astype(np.int32)
    for window in (0, 4):
        o, lse = minfer.attention(q, k, v, causal=True, window=window, cu_seqlens_q=cq, cu_seqlens_k=ck,
                                  return_lse=True)
        for b in range(len(ql)):
            ro, rl = ref_seq(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], True, 1 / 8, window)
            np.testing.assert_allclose(o[cq[b]:cq[b + 1]], ro, atol=2e-5, rtol=2e-5)
            np.testing.assert_array_equal(np.isinf(lse[cq[b]:cq[b + 1]]), np.isinf(rl))
            fin = np.isfinite(rl)
            np.testing.assert_allclose(lse[cq[b]:cq[b + 1]][fin], rl[fin], rtol=1e-5, atol=1e-5)
    # sequence 3 sees no key: o == 0, lse == -inf exactly
    assert np.all(o[cq[3]:cq[4]] == 0) and np.all(lse[cq[3]:cq[4]] == -np.inf)


def test_cache_mode_slots_nan_and_max_lens():
    H, KVH, D, n_slots, max_len = 8, 2, 64, 5, 40
    kc = np.full((n_slots, max_len, KVH, D), np.nan, np.float32)
    vc = np.full((n_slots, max_len, KVH, D), np.nan, np.float32)
    k_lens = np.array([1, 37, 12], np.int32)
    slots = np.array([4, 0, 2], np.int32)
    for b in range(3):
        kc[slots[b], :k_lens[b]] = rnd(k_lens[b], KVH, D)
        vc[slots[b], :k_lens[b]] = rnd(k_lens[b], KVH, D)
    ql = [1, 4, 12]
    cq = np.concatenate([[0], np.cumsum(ql)]).astype(np.int32)
    q = rnd(cq[-1], H, D)
    o = minfer.attention(q, kc, vc, causal=True, cu_seqlens_q=cq, k_lens=k_lens, slots=slots, scale=0.2)
    assert np.all(np.isfinite(o))
    for b in range(3):
        s, n = slots[b], k_lens[b]
        ro, _ = ref_seq(q[cq[b]:cq[b + 1]], kc[s, :n], vc[s, :n], True, 0.2)
        np.testing.assert_allclose(o[cq[b]:cq[b + 1]], ro, atol=2e-5, rtol=2e-5)
    # explicit bounds, and too small a bound is an error naming it
    o2 = minfer.attention(q, kc, vc, causal=True, cu_seqlens_q=cq, k_lens=k_lens, slots=slots, scale=0.2,
                          max_q_len=12, max_k_len=40)
    np.testing.assert_array_equal(o, o2)
    with pytest.raises(minfer.MinferError, match="k_lens\\[1\\] = 37 past max_k_len = 36"):
        minfer.attention(q, kc, vc, causal=True, cu_seqlens_q=cq, k_lens=k_lens, slots=slots, max_k_len=36)


def test_paged_cache_shared_blocks():
    """A pool of shuffled blocks (NaN where nothing is written), two sequences
    sharing their first two blocks, one past a block edge, one on it."""
    H, KVH, D, bs, n_blocks = 4, 2, 32, 16, 12
    kc = np.full((n_blocks, bs, KVH, D), np.nan, np.float32)
    vc = np.full((n_blocks, bs, KVH, D), np.nan, np.float32)
    table = np.array([[7, 2, 10, 0], [7, 2, 5, 99]], np.int32)  # 99: past the sequence's blocks, never read
    k_lens = np.array([50, 48], np.int32)
    keys = [rnd(50, KVH, D), None]
    vals = [rnd(50, KVH, D), None]
    keys[1] = np.concatenate([keys[0][:32], rnd(16, KVH, D)])
    vals[1] = np.concatenate([vals[0][:32], rnd(16, KVH, D)])
    for b in range(2):
        for j in range(k_lens[b]):
            kc[table[b, j // bs], j % bs] = keys[b][j]
            vc[table[b, j // bs], j % bs] = vals[b][j]
    ql = [3, 1]
    cq = np.array([0, 3, 4], np.int32)
    q = rnd(4, H, D)
    o, lse = minfer.attention(q, kc, vc, causal=True, cu_seqlens_q=cq, k_lens=k_lens, block_table=table,
                              return_lse=True)
    for b in range(2):
        ro, rl = ref_seq(q[cq[b]:cq[b + 1]], keys[b], vals[b], True, 1 / math.sqrt(D))
        np.testing.assert_allclose(o[cq[b]:cq[b + 1]], ro, atol=2e-5, rtol=2e-5)
        np.testing.assert_allclose(lse[cq[b]:cq[b + 1]], rl, atol=2e-5, rtol=2e-5)
    bad = table.copy()
    bad[1, 2] = 12
    with pytest.raises(minfer.MinferError, match="block_table\\[1, 2\\] = 12 out of range"):
        minfer.attention(q, kc, vc, causal=True, cu_seqlens_q=cq, k_lens=k_lens, block_table=bad)


def test_bf16_and_out():
    bf16 = pytest.importorskip("ml_dtypes").bfloat16
    q, k, v = rnd(1, 20, 4, 128), rnd(1, 20, 1, 128), rnd(1, 20, 1, 128, lo=-1, hi=1)
    qb, kb, vb = q.astype(bf16), k.astype(bf16), v.astype(bf16)
    out = np.empty_like(qb)
    o = minfer.attention(qb, kb, vb, causal=True, out=out)
    assert o is out
    ro, _ = ref_seq(qb[0].astype(np.float64), kb[0].astype(np.float64), vb[0].astype(np.float64), True,
                    1 / math.sqrt(128))
    np.testing.assert_allclose(o[0].astype(np.float64), ro, atol=1.6e-2, rtol=1.6e-2)


def test_errors_name_the_value():
    q, k, v = rnd(1, 4, 3, 8), rnd(1, 4, 2, 8), rnd(1, 4, 2, 8)
    with pytest.raises(minfer.MinferError, match="n_heads 3 not divisible by n_kv_heads 2"):
        minfer.attention(q, k, v)
    q = rnd(1, 4, 4, 8)
    with pytest.raises(minfer.MinferError, match="window 3 without causal"):
        minfer.attention(q, k, v, window=3)
    with pytest.raises(minfer.MinferError, match="scale inf is not finite"):
        minfer.attention(q, k, v, scale=float("inf"))
    with pytest.raises(minfer.MinferError, match="o and q overlap"):
        minfer.attention(q, k, v, out=q)
    with pytest.raises(minfer.MinferError, match="dtypes q f32, k f16"):
        minfer.attention(q, k.astype(np.float16), v)
    with pytest.raises(ValueError, match="num_splits 8589934594 does not fit an int32"):
        minfer.attention(q, k, v, causal=True, num_splits=2**33 + 2)  # ctypes would have wrapped it to 2
    minfer.attention(q, k, v, causal=True)  # the next valid call works


HAVE_CUDA = torch is not None and torch.cuda.is_available() and minfer.cuda_available()


@pytest.mark.skipif(not HAVE_CUDA, reason="needs torch with a CUDA device and a CUDA build")
@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_fixed_and_cache(dt, causal):
    tdt = getattr(torch, dt)
    B, S, H, KVH, D = 2, 300, 8, 2, 128
    q, k, v = (torch.randn(B, S, H, D), torch.randn(B, S, KVH, D), torch.randn(B, S, KVH, D))
    qd, kd, vd = (x.to(tdt).cuda() for x in (q, k, v))
    o, lse = minfer.attention(qd, kd, vd, causal=causal, return_lse=True)
    torch.cuda.synchronize()
    for b in range(B):
        ro, rl = ref_seq(qd[b].double().cpu().numpy(), kd[b].double().cpu().numpy(), vd[b].double().cpu().numpy(),
                         causal, 1 / math.sqrt(D))
        np.testing.assert_allclose(o[b].double().cpu().numpy(), ro, atol=2e-2, rtol=2e-2)
        np.testing.assert_allclose(lse[b].cpu().numpy(), rl, atol=1e-2, rtol=1e-3)
    # decode over a cache made of the same keys, with NaN past each length
    kc = torch.full((3, S + 8, KVH, D), float("nan"), dtype=tdt, device="cuda")
    vc = kc.clone()
    kc[1, :S], vc[1, :S], kc[0, :S - 5], vc[0, :S - 5] = kd[0], vd[0], kd[1, :S - 5], vd[1, :S - 5]
    k_lens = torch.tensor([S, S - 5], dtype=torch.int32, device="cuda")
    slots = torch.tensor([1, 0], dtype=torch.int32, device="cuda")
    cq = torch.tensor([0, 1, 2], dtype=torch.int32, device="cuda")
    qdec = qd[:, -1].contiguous()
    o = minfer.attention(qdec, kc, vc, causal=True, cu_seqlens_q=cq, k_lens=k_lens, slots=slots)
    torch.cuda.synchronize()
    for b, n in ((0, S), (1, S - 5)):
        ro, _ = ref_seq(qdec[b:b + 1].double().cpu().numpy(), kd[b, :n].double().cpu().numpy(),
                        vd[b, :n].double().cpu().numpy(), True, 1 / math.sqrt(D))
        np.testing.assert_allclose(o[b:b + 1].double().cpu().numpy(), ro, atol=2e-2, rtol=2e-2)
