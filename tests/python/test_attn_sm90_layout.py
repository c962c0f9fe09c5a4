"""Desk-check of the sm_90a prefill attention's shared-memory layout and
wgmma operand math on the CPU (no GPU here).

src/cuda/attention/attn_prefill_sm90.cu stores Q, K and V as 64-column panels of
128-byte rows with the 128-byte swizzle (panel_off in src/cuda/sm90.cuh), then hands wgmma
shared-memory descriptors (desc_k, desc_mn in src/cuda/sm90.cuh) and, for
O += P V, an A fragment re-packed from the S accumulators. This file models,
independently of the kernel, what wgmma reads for a descriptor — the
canonical layouts of the PTX ISA's "matrix descriptor" section (as cute
writes them, in 16-byte units T = 8 elements):
    K-major,  128B swizzle: ((8, m), (T, 2)) : ((8T, SBO), (1, T))
    MN-major, 128B swizzle: ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))
with the swizzle applied to the final byte address (bits 4-6 ^= bits 7-9) —
and the f32 accumulator / 16-bit A-register fragment layouts, and checks
that the kernel's formulas make wgmma compute S = Q K^T and O = P V.
It mirrors the kernel's formulas: a change there must be mirrored here.
It does not run the kernel; the GPU cases in tests/cases_attention.c do
(ops_attention_wgmma).
"""

import numpy as np
import pytest

BM = 128


def bn_of(d):
    return 128 if d <= 128 else 64


def swizzle(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


# ---- the kernel's side -------------------------------------------------------------------

def panel_off(rows, row, ch):
    """sm90.cuh panel_off<R>(row, ch): byte offset of 16-byte chunk ch."""
    return (ch >> 3) * rows * 128 + row * 128 + (((ch & 7) ^ (row & 7)) << 4)


def store(smem, base, mat):
    """cp_async_panels: chunk ch of row r (8 elements) at base + panel_off; elements 2 bytes."""
    rows, d = mat.shape
    for r in range(rows):
        for ch in range(d // 8):
            a = base + panel_off(rows, r, ch)
            assert a % 16 == 0
            smem[a // 2: a // 2 + 8] = mat[r, 8 * ch: 8 * ch + 8]


# ---- what wgmma reads (the PTX ISA's canonical layouts) ---------------------------------

def read_k_major(smem, start, n_rows, sbo=1024):
    """Operand (n_rows x 16) of a K-major, 128B-swizzled descriptor at `start`."""
    out = np.empty((n_rows, 16), dtype=smem.dtype)
    for n in range(n_rows):
        for k in range(16):
            u = (n % 8) * 8 + (n // 8) * (sbo // 16) + (k // 8)  # 16-byte units
            addr = swizzle(start + 16 * u + 2 * (k % 8))
            out[n, k] = smem[addr // 2]
    return out


def read_mn_major(smem, start, n_cols, lbo, sbo=1024):
    """B operand (16 x n_cols; K = rows) of an MN-major, 128B-swizzled descriptor."""
    out = np.empty((16, n_cols), dtype=smem.dtype)
    for n in range(n_cols):
        for k in range(16):
            u = (n // 8) % 8 + (n // 64) * (lbo // 16) + (k % 8) * 8 + (k // 8) * (sbo // 16)
            addr = swizzle(start + 16 * u + 2 * (n % 8))
            out[k, n] = smem[addr // 2]
    return out


def acc_coord(warp, lane, i):
    """m64nN f32 accumulator register i of (warp, lane): (row, column)."""
    g, t = lane // 4, lane % 4
    return 16 * warp + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)


def a_reg_coord(warp, lane, reg, half):
    """16-bit A fragment (64 x 16) register reg (0..3), half 0 = low 16 bits: (row, k).
    cute: ALayout_64x16 = CLayout_64x16 (values v0 + 2 v1 + 4 v2, packed in pairs)."""
    v = 2 * reg + half
    return acc_coord(warp, lane, v)


# ---- the checks -----------------------------------------------------------------------------

@pytest.mark.parametrize("d", [64, 128, 256])
def test_s_operands(d):
    """S = Q K^T: warpgroup wg's A (Q rows 64 wg..) and B (K) per k step kk."""
    bn = bn_of(d)
    rng = np.random.default_rng(d)
    q = rng.integers(0, 30000, size=(BM, d)).astype(np.int64)
    k = rng.integers(0, 30000, size=(bn, d)).astype(np.int64)
    smem = np.full((BM * d + bn * d) * 2 // 2 + 64, -1, dtype=np.int64)
    s_q, s_k = 0, BM * d * 2  # 1024-aligned, as in the kernel
    assert s_k % 1024 == 0
    store(smem, s_q, q)
    store(smem, s_k, k)
    for wg in range(2):
        q_wg = s_q + wg * 64 * 128
        for kk in range(d // 16):
            a = read_k_major(smem, q_wg + (kk >> 2) * BM * 128 + (kk & 3) * 32, 64)
            b = read_k_major(smem, s_k + (kk >> 2) * bn * 128 + (kk & 3) * 32, bn)
            np.testing.assert_array_equal(a, q[64 * wg: 64 * wg + 64, 16 * kk: 16 * kk + 16])
            np.testing.assert_array_equal(b, k[:, 16 * kk: 16 * kk + 16])


@pytest.mark.parametrize("d", [64, 128, 256])
def test_v_operand_transposed(d):
    """O += P V: B of k step j = V rows 16 j ... 16 j + 15, all D columns (trans-b)."""
    bn = bn_of(d)
    rng = np.random.default_rng(7 + d)
    v = rng.integers(0, 30000, size=(bn, d)).astype(np.int64)
    smem = np.full(bn * d + 64, -1, dtype=np.int64)
    store(smem, 0, v)
    for j in range(bn // 16):
        b = read_mn_major(smem, j * 2048, d, lbo=bn * 128)
        np.testing.assert_array_equal(b, v[16 * j: 16 * j + 16, :])


def test_swapped_lbo_sbo_is_caught():
    """The V check is sharp: LBO and SBO swapped reads the wrong elements."""
    d, bn = 128, 128
    v = np.arange(bn * d, dtype=np.int64).reshape(bn, d)
    smem = np.full(bn * d + 64, -1, dtype=np.int64)
    store(smem, 0, v)
    b = read_mn_major(smem, 0, d, lbo=1024, sbo=bn * 128)
    assert not np.array_equal(b, v[0:16, :])


@pytest.mark.parametrize("bn", [64, 128])
def test_p_fragment_repack(bn):
    """pa[j][e] = pack(sc[8 j + 2 e], sc[8 j + 2 e + 1]) is the A fragment of k step j."""
    for warp in range(4):
        for lane in range(32):
            for j in range(bn // 16):
                for e in range(4):
                    for half in range(2):
                        i = 8 * j + 2 * e + half  # the accumulator register the kernel packs
                        row_s, col_s = acc_coord(warp, lane, i)
                        row_a, k_a = a_reg_coord(warp, lane, e, half)
                        assert row_s == row_a
                        assert col_s == 16 * j + k_a


def test_accumulator_layout_covers_tile():
    """Every (row, column) of a 64 x N accumulator is held exactly once."""
    n = 128
    seen = np.zeros((64, n), dtype=int)
    for warp in range(4):
        for lane in range(32):
            for i in range(n // 2):
                r, c = acc_coord(warp, lane, i)
                seen[r, c] += 1
    assert (seen == 1).all()


def test_mask_indexing_matches_accumulator():
    """The kernel's mask / softmax index formulas for register i (row_a + 8 ((i >> 1) & 1),
    column n0 + 8 (i >> 2) + 2 tq + (i & 1)) are the accumulator layout's."""
    for warp in range(4):
        for lane in range(32):
            g, tq = lane // 4, lane % 4
            for i in range(64):
                r, c = acc_coord(warp, lane, i)
                assert r == 16 * warp + g + ((i >> 1) & 1) * 8
                assert c == (i >> 2) * 8 + 2 * tq + (i & 1)
