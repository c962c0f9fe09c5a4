"""Desk-check of the CUDA attention kernels' index math on the CPU (no GPU here).

A line-by-line model in numpy of what src/cuda/attention/attn_prefill.cu and
src/cuda/attention/attn_decode.cu decide per block: the key-tile range [t_lo, t_hi),
which tiles take the mask ("edge"), the online softmax in the exp2 domain
(m_use for blind rows), the split-KV chunking and the log-sum-exp combine.
It checks that (1) every visible key is inside a visited tile, (2) every
non-edge tile visited is fully visible for every real row, (3) the modelled
output matches a float64 softmax attention, blind rows giving 0 / -inf.
It does not run the kernels; the GPU cases in tests/cases_attention.c do.
"""

import math

import numpy as np
import pytest

K_BLOCK_M, K_BLOCK_N = 128, 64  # PrefillTraits
K_MAX_ROWS = 8                  # decode rows per block (R = 8 model)


def visible(i, j, k_len, off, causal, window):
    if j >= k_len:
        return False
    if not causal:
        return True
    d = i + off
    return j <= d and (window <= 0 or j > d - window)


def ref_attention(q, k, v, scale, causal, window):
    q_len, k_len = q.shape[0], k.shape[0]
    off = k_len - q_len
    o = np.zeros_like(q)
    lse = np.full(q_len, -np.inf)
    for i in range(q_len):
        js = [j for j in range(k_len) if visible(i, j, k_len, off, causal, window)]
        if not js:
            continue
        s = scale * (q[i] @ k[js].T)
        mx = s.max()
        p = np.exp(s - mx)
        o[i] = p @ v[js] / p.sum()
        lse[i] = mx + math.log(p.sum())
    return o, lse


def prefill_model(q, k, v, scale, causal, window):
    """attn_prefill_kernel: blocks of K_BLOCK_M rows, tiles of K_BLOCK_N keys."""
    q_len, k_len, D = q.shape[0], k.shape[0], q.shape[1]
    off = k_len - q_len
    o = np.zeros_like(q)
    lse = np.full(q_len, -np.inf)
    sl2 = scale * math.log2(math.e)
    n_mblocks = (q_len + K_BLOCK_M - 1) // K_BLOCK_M
    for mb in range(n_mblocks):
        m0 = mb * K_BLOCK_M
        m_end = min(q_len, m0 + K_BLOCK_M)
        n_lo, n_hi = 0, k_len
        if causal:
            n_hi = max(0, min(n_hi, m_end - 1 + off + 1))
            if window > 0:
                n_lo = max(0, m0 + off - window + 1)
        t_lo = n_lo // K_BLOCK_N
        t_hi = (n_hi + K_BLOCK_N - 1) // K_BLOCK_N if n_hi > n_lo else t_lo
        rows = np.arange(m0, m_end)
        # (1) every visible key of the block lies in [t_lo * N, t_hi * N)
        for i in rows:
            for j in range(k_len):
                if visible(i, j, k_len, off, causal, window):
                    assert t_lo * K_BLOCK_N <= j < t_hi * K_BLOCK_N, (i, j, t_lo, t_hi)
        m = np.full(len(rows), -np.inf)
        l = np.zeros(len(rows))
        acc = np.zeros((len(rows), D))
        for t in range(t_lo, t_hi):
            n0 = t * K_BLOCK_N
            keys = np.arange(n0, n0 + K_BLOCK_N)
            kt = np.where((keys < k_len)[:, None], k[np.minimum(keys, k_len - 1)], 0.0)  # zero-filled rows
            vt = np.where((keys < k_len)[:, None], v[np.minimum(keys, k_len - 1)], 0.0)
            s = (q[rows] @ kt.T) * sl2
            edge = n0 + K_BLOCK_N > k_len or (causal and (n0 + K_BLOCK_N - 1 > m0 + off or (
                window > 0 and n0 <= m_end - 1 + off - window)))
            vis = np.array([[visible(i, j, k_len, off, causal, window) for j in keys] for i in rows])
            if edge:
                s = np.where(vis, s, -np.inf)
            else:  # (2) a tile without the mask must be wholly visible
                assert vis.all(), (m0, n0)
            mx = s.max(axis=1)
            m_new = np.maximum(m, mx)
            m_use = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp2(m - m_use)
            p = np.exp2(s - m_use[:, None])
            l = l * alpha + p.sum(axis=1)
            acc = acc * alpha[:, None] + p @ vt
            m = m_new
        inv = np.where(l > 0, 1.0 / np.where(l > 0, l, 1.0), 0.0)
        o[rows] = acc * inv[:, None]
        lse[rows] = np.where(l > 0, (m + np.log2(np.where(l > 0, l, 1.0))) * math.log(2), -np.inf)
    return o, lse


def decode_model(q, k, v, scale, causal, window, grp, n_splits):
    """attn_decode_kernel + attn_combine_kernel for one sequence and one KV head:
    q (q_len, grp, D) rows r -> (qi = r // grp, head r % grp)."""
    q_len, k_len, D = q.shape[0], k.shape[0], q.shape[2]
    off = k_len - q_len
    sl2 = scale * math.log2(math.e)
    n_rows = q_len * grp
    parts = []  # per split: (m, l, o) for every row
    for split in range(n_splits):
        m_all = np.full(n_rows, -np.inf)
        l_all = np.zeros(n_rows)
        o_all = np.zeros((n_rows, D))
        for r0 in range(0, n_rows, K_MAX_ROWS):
            rows = min(K_MAX_ROWS, n_rows - r0)
            chunk = (k_len + n_splits - 1) // n_splits
            k0, k1 = split * chunk, min(k_len, split * chunk + chunk)
            if causal:
                qi_lo, qi_hi = r0 // grp, (r0 + rows - 1) // grp
                k1 = min(k1, qi_hi + off + 1)
                if window > 0:
                    k0 = max(k0, qi_lo + off - window + 1)
            for r in range(r0, r0 + rows):
                qi, hg = r // grp, r % grp
                m, l, acc = -np.inf, 0.0, np.zeros(D)
                for j in range(k0, k1):
                    sc = (q[qi, hg] * sl2) @ k[j]
                    if not visible(qi, j, k_len, off, causal, window):
                        sc = -np.inf
                    if sc > m:
                        alpha = np.exp2(m - sc)
                        l *= alpha
                        acc *= alpha
                        m = sc
                    p = 0.0 if sc == -np.inf else np.exp2(sc - m)
                    l += p
                    acc = acc + p * v[j]
                m_all[r], l_all[r], o_all[r] = m, l, acc
        parts.append((m_all, l_all, o_all))
    mm = np.max([p[0] for p in parts], axis=0)
    safe = np.where(mm == -np.inf, 0.0, mm)
    ll = sum(np.where(mm == -np.inf, 0.0, p[1] * np.exp2(p[0] - safe)) for p in parts)
    oo = sum(np.where((mm == -np.inf)[:, None], 0.0, p[2] * np.exp2(p[0] - safe)[:, None]) for p in parts)
    o = np.where((ll > 0)[:, None], oo / np.where(ll > 0, ll, 1.0)[:, None], 0.0)
    lse = np.where(ll > 0, (mm + np.log2(np.where(ll > 0, ll, 1.0))) * math.log(2), -np.inf)
    return o.reshape(q_len, grp, D), lse.reshape(q_len, grp)


SHAPES = [(1, 1), (1, 1000), (113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (200, 64),
          (64, 0), (0, 5), (129, 129), (300, 70)]


@pytest.mark.parametrize("q_len,k_len", SHAPES)
@pytest.mark.parametrize("causal,window", [(False, 0), (True, 0), (True, 1), (True, 37), (True, 64), (True, 300)])
def test_prefill_tiles(q_len, k_len, causal, window):
    rng = np.random.default_rng(q_len * 7919 + k_len * 31 + window)
    D = 16
    q, k, v = (rng.standard_normal((n, D)) for n in (q_len, k_len, k_len))
    o, lse = prefill_model(q, k, v, 0.3, causal, window)
    ro, rl = ref_attention(q, k, v, 0.3, causal, window)
    np.testing.assert_allclose(o, ro, atol=1e-10)
    assert np.array_equal(np.isinf(lse), np.isinf(rl))
    np.testing.assert_allclose(lse[~np.isinf(rl)], rl[~np.isinf(rl)], atol=1e-10)


@pytest.mark.parametrize("q_len,k_len", [(1, 1), (1, 1000), (2, 300), (3, 3), (5, 2), (1, 0), (4, 513)])
@pytest.mark.parametrize("grp", [1, 4, 8, 3])
@pytest.mark.parametrize("n_splits", [1, 3, 8])
@pytest.mark.parametrize("causal,window", [(False, 0), (True, 0), (True, 100)])
def test_decode_splits(q_len, k_len, grp, n_splits, causal, window):
    rng = np.random.default_rng(q_len * 13 + k_len + grp * 101 + n_splits)
    D = 8
    q = rng.standard_normal((q_len, grp, D))
    k, v = rng.standard_normal((k_len, D)), rng.standard_normal((k_len, D))
    o, lse = decode_model(q, k, v, 0.5, causal, window, grp, n_splits)
    for hg in range(grp):
        ro, rl = ref_attention(q[:, hg], k, v, 0.5, causal, window)
        np.testing.assert_allclose(o[:, hg], ro, atol=1e-10)
        assert np.array_equal(np.isinf(lse[:, hg]), np.isinf(rl))
        np.testing.assert_allclose(lse[:, hg][~np.isinf(rl)], rl[~np.isinf(rl)], atol=1e-10)


# ---- fragment-level model of one warp of attn_prefill_kernel ------------------------------------
# The PTX ISA's tables for ldmatrix (m8n8, .x4, with and without .trans) and
# mma.m16n8k16 (row.col) drive a per-lane emulation of the lane-address
# formulas, the XOR swizzle and the C -> A re-pack of P used in the kernel.

def swz(row, ch, D):
    return row * D + ((ch ^ (row & 7)) << 3)


def smem_store(tile, D):
    """A (rows, D) tile written chunk by chunk at its swizzled place (as cp.async does)."""
    buf = np.full(tile.shape[0] * D, np.nan)
    for r in range(tile.shape[0]):
        for ch in range(D // 8):
            buf[swz(r, ch, D):swz(r, ch, D) + 8] = tile[r, ch * 8:ch * 8 + 8]
    return buf


def ldmatrix_x4(buf, addrs, trans=False):
    """addrs[lane]: element offset of the row that lane provides; returns regs[lane][4] of 2 values."""
    out = np.zeros((32, 4, 2))
    for i in range(4):
        m = np.array([buf[addrs[8 * i + r]:addrs[8 * i + r] + 8] for r in range(8)])  # 8 x 8
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            out[lane, i] = (m[2 * t, g], m[2 * t + 1, g]) if trans else (m[g, 2 * t], m[g, 2 * t + 1])
    return out


def mma16816(c, a, b0, b1):
    """c[lane][4], a[lane][4][2], b0/b1[lane][2]: c += A (16x16) B (16x8) in the fragment layouts."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        A[g, 2 * t:2 * t + 2], A[g + 8, 2 * t:2 * t + 2] = a[lane][0], a[lane][1]
        A[g, 2 * t + 8:2 * t + 10], A[g + 8, 2 * t + 8:2 * t + 10] = a[lane][2], a[lane][3]
        B[2 * t:2 * t + 2, g], B[2 * t + 8:2 * t + 10, g] = b0[lane], b1[lane]
    C = A @ B
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        c[lane] += (C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1])


@pytest.mark.parametrize("D", [64, 128])
def test_warp_fragments(D):
    rng = np.random.default_rng(D)
    N = K_BLOCK_N
    warp = 3
    Q = rng.standard_normal((K_BLOCK_M, D))
    Kt, Vt = rng.standard_normal((N, D)), rng.standard_normal((N, D))
    sQ, sK, sV = smem_store(Q, D), smem_store(Kt, D), smem_store(Vt, D)
    lanes = range(32)
    # Q fragments: row warp*16 + (lane & 15), chunk kk*2 + (lane >> 4)
    qf = [ldmatrix_x4(sQ, [swz(warp * 16 + (l & 15), kk * 2 + (l >> 4), D) for l in lanes]) for kk in range(D // 16)]
    sc = [np.zeros((32, 4)) for _ in range(N // 8)]
    for kk in range(D // 16):
        for np_ in range(N // 16):
            kb = ldmatrix_x4(sK, [swz(np_ * 16 + (l & 7) + ((l >> 4) << 3), kk * 2 + ((l >> 3) & 1), D) for l in lanes])
            mma16816(sc[2 * np_], qf[kk], kb[:, 0], kb[:, 1])
            mma16816(sc[2 * np_ + 1], qf[kk], kb[:, 2], kb[:, 3])
    S = Q[warp * 16:warp * 16 + 16] @ Kt.T
    for i in range(N // 8):
        for lane in lanes:
            g, t = lane >> 2, lane & 3
            for e in range(4):
                r, j = g + (e >> 1) * 8, i * 8 + 2 * t + (e & 1)
                assert abs(sc[i][lane, e] - S[r, j]) < 1e-9, (i, lane, e)
    # O += P V with P = S (any values): the C fragments re-packed as A fragments
    o = [np.zeros((32, 4)) for _ in range(D // 8)]
    for kk in range(N // 16):
        pa = np.zeros((32, 4, 2))
        for lane in lanes:
            pa[lane] = (sc[2 * kk][lane, 0:2], sc[2 * kk][lane, 2:4], sc[2 * kk + 1][lane, 0:2],
                        sc[2 * kk + 1][lane, 2:4])
        for dp in range(D // 16):
            vb = ldmatrix_x4(sV, [swz(kk * 16 + (l & 7) + (((l >> 3) & 1) << 3), dp * 2 + (l >> 4), D) for l in lanes],
                             trans=True)
            mma16816(o[2 * dp], pa, vb[:, 0], vb[:, 1])
            mma16816(o[2 * dp + 1], pa, vb[:, 2], vb[:, 3])
    O = S @ Vt
    for i in range(D // 8):
        for lane in lanes:
            g, t = lane >> 2, lane & 3
            for e in range(4):
                r, d = g + (e >> 1) * 8, i * 8 + 2 * t + (e & 1)
                assert abs(o[i][lane, e] - O[r, d]) < 1e-8, (i, lane, e)
    # O staging: (row g + 8r, chunk i, word t) at swz(row, i) + 2t; read back by rows
    st = np.full(K_BLOCK_M * D, np.nan)
    for i in range(D // 8):
        for lane in lanes:
            g, t = lane >> 2, lane & 3
            for r in range(2):
                row = warp * 16 + g + 8 * r
                st[swz(row, i, D) + 2 * t:swz(row, i, D) + 2 * t + 2] = o[i][lane, 2 * r:2 * r + 2]
    for rr in range(16):
        row = warp * 16 + rr
        got = np.concatenate([st[swz(row, ch, D):swz(row, ch, D) + 8] for ch in range(D // 8)])
        np.testing.assert_allclose(got, O[rr], atol=1e-8)


@pytest.mark.parametrize("D", [64, 128])
def test_swizzle_banks(D):
    """Each 8-lane phase of an ldmatrix (8 rows, one logical chunk) and of the cp.async
    writes (8 chunks of one row) hits 8 distinct 16-byte bank groups."""
    for base in range(0, 64, 8):
        for ch in range(D // 8):
            groups = {(swz(base + r, ch, D) * 2 // 16) % 8 for r in range(8)}
            assert len(groups) == 8
    for row in range(16):
        for c0 in range(0, D // 8, 8):
            groups = {(swz(row, c0 + c, D) * 2 // 16) % 8 for c in range(8)}
            assert len(groups) == 8
