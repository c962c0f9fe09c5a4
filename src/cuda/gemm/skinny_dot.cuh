// Internal: the multi-row dot product of the skinny GEMMs, where a few
// activation rows (m <= 8) meet a weight read once: gemv.cu's decode GEMM and
// the MoE decode kernels (moe/experts_decode.cu). At these m the GEMM is a
// stream over the weight, and the time is its bytes at the memory's bandwidth.
//
// One warp, kMfSkinnyCols weight rows (16-byte aligned, unit stride along k):
// lane l reads the 16-byte chunks l, l + 32, ... of each row, kMfSkinnyUnroll
// chunks per row per iteration, so kMfSkinnyCols * kMfSkinnyUnroll independent
// 16-byte loads are in flight per lane before the first FMA (streaming loads:
// the weight is not read again soon). Each weight chunk is unpacked once and
// multiplied with the same chunk of every activation row (__ldg: the rows
// are small and shared by every warp, L1/L2-resident). acc[row][col] in f32
// registers (8 x 4 = one per lane after the reduction); a butterfly gives
// every lane every sum and lane row * kMfSkinnyCols + col keeps its own.
// Deterministic: a fixed summation order per lane, then the butterfly.
#ifndef MF_CUDA_GEMM_SKINNY_DOT_CUH
#define MF_CUDA_GEMM_SKINNY_DOT_CUH

#include "cuda/common.cuh"

constexpr int kMfSkinnyRows = 8;   // activation rows at most
constexpr int kMfSkinnyCols = 4;   // weight rows per warp
constexpr int kMfSkinnyUnroll = 4; // 16-byte chunks per weight row per iteration
static_assert(kMfSkinnyRows * kMfSkinnyCols == 32, "after the reduction each lane holds exactly one (row, col) sum");

// The 16-byte chunk u as kElems f32 values (4 f32, or 8 f16 / bf16).
template <int kElems> __device__ __forceinline__ void mf_unpack_chunk(const uint4 &u, int dt, float (&v)[kElems]) {
    static_assert(kElems == 4 || kElems == 8, "a 16-byte chunk holds 4 f32 or 8 f16 / bf16");
    if constexpr (kElems == 4) {
        v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y), v[2] = __uint_as_float(u.z),
        v[3] = __uint_as_float(u.w);
    } else {
        const uint32_t q[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 f = mf_unpack2(q[j], dt);
            v[2 * j] = f.x, v[2 * j + 1] = f.y;
        }
    }
}

// The sums over elements [k0, k1) of activation row r (r < m, 1 <= m <= 8)
// times weight row c, for the calling warp (every lane calls it):
//   w[c]  weight row c; x: row r at x + r * ldx elements (16-byte aligned rows);
//   kElems elements per 16-byte chunk (4: f32, 8: f16 / bf16 of dtype dt);
//   k0 a multiple of kElems; k1 - k0 a multiple of kElems, or k1 the row's end.
// Returns the sum of (row lane / kMfSkinnyCols, weight row lane % kMfSkinnyCols)
// in that lane when the row is < m, else 0.
template <int kElems>
__device__ __forceinline__ float mf_skinny_dot(const char *const (&w)[kMfSkinnyCols], const char *x, int64_t ldx,
                                               int m, int64_t k0, int64_t k1, int dt) {
    constexpr int kEsz = 16 / kElems;            // bytes per element
    constexpr int kWarpStep = 32 * kElems;       // elements one load instruction covers per row
    constexpr int kIterK = kWarpStep * kMfSkinnyUnroll;
    const int lane = threadIdx.x & 31;
    float acc[kMfSkinnyRows][kMfSkinnyCols];
#pragma unroll
    for (int r = 0; r < kMfSkinnyRows; r++)
#pragma unroll
        for (int c = 0; c < kMfSkinnyCols; c++) acc[r][c] = 0.0f;

    for (int64_t kk = k0 + (int64_t)lane * kElems; kk < k1; kk += kIterK) {
        uint4 wu[kMfSkinnyUnroll][kMfSkinnyCols];
#pragma unroll
        for (int u = 0; u < kMfSkinnyUnroll; u++) {
            const int64_t k = kk + (int64_t)u * kWarpStep;
#pragma unroll
            for (int c = 0; c < kMfSkinnyCols; c++)
                wu[u][c] = k < k1 ? __ldcs(reinterpret_cast<const uint4 *>(w[c] + k * kEsz)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kMfSkinnyUnroll; u++) {
            const int64_t k = kk + (int64_t)u * kWarpStep;
            if (k >= k1) break;
            float wf[kMfSkinnyCols][kElems];
#pragma unroll
            for (int c = 0; c < kMfSkinnyCols; c++) mf_unpack_chunk<kElems>(wu[u][c], dt, wf[c]);
#pragma unroll
            for (int r = 0; r < kMfSkinnyRows; r++) {
                if (r >= m) break;
                float xv[kElems];
                mf_unpack_chunk<kElems>(__ldg(reinterpret_cast<const uint4 *>(x + (r * ldx + k) * kEsz)), dt, xv);
#pragma unroll
                for (int c = 0; c < kMfSkinnyCols; c++)
#pragma unroll
                    for (int i = 0; i < kElems; i++) acc[r][c] = fmaf(wf[c][i], xv[i], acc[r][c]);
            }
        }
    }

    float mine = 0.0f;
#pragma unroll
    for (int r = 0; r < kMfSkinnyRows; r++) {
        if (r >= m) break;
#pragma unroll
        for (int c = 0; c < kMfSkinnyCols; c++) {
            const float s = mf_warp_sum(acc[r][c]);
            if (lane == r * kMfSkinnyCols + c) mine = s;
        }
    }
    return mine;
}

#endif // MF_CUDA_GEMM_SKINNY_DOT_CUH
