// Skinny GEMM for decode: c = act(alpha * a @ w^T + beta * c + bias) with m = 1..8
// activation rows and a torch Linear weight w (n, k), as mf_gemm sees it when b is
// the transposed view of w (b's column j = w's row j, contiguous along k). At these
// m the GEMM is a stream over w: each weight byte is read once, and the time is
// n * k * 2 bytes at the memory's bandwidth.
//
// Shapes and work split (gemv_kernel):
//   a: (m, k) rows at a + i * lda;  w: (n, k) rows at w + j * ldw;  c: (m, n).
//   A warp owns kMfSkinnyCols = 4 consecutive output columns j (weight rows) and
//   computes their dot products with the m activation rows by mf_skinny_dot
//   (skinny_dot.cuh, shared with the MoE decode kernels: 16 independent 16-byte
//   weight loads in flight per lane, each activation chunk loaded once per
//   iteration for all 4 columns, f32 accumulators, lane row * 4 + col ends up
//   holding (i, j)).
//   Blocks: kWarps warps = kWarps * 4 columns along x; along y, K-splits.
//   Split-K is used only when the columns alone give fewer than
//   kBlocksPerSmTarget blocks per SM (GPT-2's n = 768, k = 3072: 48 blocks on 132
//   SMs, 3 splits; k = 768 is one iteration and is not split):
//   then split s covers its own range of k (whole iterations), writes its f32
//   partial sums to partial[s][i][j], and gemv_finish_kernel adds the splits in
//   order (deterministic, no atomics) and applies the epilogue.
// Epilogue (in the CPU's order, every step in f32, one rounding to c's dtype):
//   v = alpha * sum; v += beta * c (only if beta != 0); v += bias_j; GELU; store.
// Dtypes are run-time arguments (uniform branches), one compiled body: m is a run-time
// bound too (rows >= m are predicated off), so there is one instantiation.
#include "cuda/gemm/gemv.cuh"
#include "cuda/gemm/skinny_dot.cuh"

namespace {

constexpr int kWarps = 4;                      // warps per block
constexpr int kThreads = kWarps * 32;
constexpr int kCols = kMfSkinnyCols;           // output columns (weight rows) per warp
constexpr int kChunk = 8;                      // f16/bf16 elements per 16-byte load
constexpr int kIterK = 32 * kChunk * kMfSkinnyUnroll; // k elements per warp iteration
constexpr int kColsPerBlock = kWarps * kCols;
constexpr int kBlocksPerSmTarget = 2;          // below this many column blocks per SM, split k (a guess: tune on the GPU)
constexpr int kMaxSplits = 16;
constexpr int kMinIterPerSplit = 1;            // each split streams at least this many iterations (kIterK) of k per row
constexpr int kFinishThreads = 256;

static_assert(kMfGemvMaxRows == kMfSkinnyRows, "the skinny dot product takes up to 8 rows");
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");

__device__ __forceinline__ float epilogue(const MfGemvArgs &g, int64_t i, int64_t j, float sum) {
    float v = g.alpha * sum;
    if (g.beta != 0.0f) v += g.beta * mf_ld(g.c, g.c_dt, i * g.ldc + j);
    if (g.bias) v += mf_ld(g.bias, g.c_dt, j);
    if (g.gelu) v = mf_gelu_tanh(v);
    return v;
}

// grid (ceil(n / kColsPerBlock), splits), kThreads threads. k_per_split: a
// multiple of kIterK (the last split takes the remainder).
__global__ void __launch_bounds__(kThreads) gemv_kernel(MfGemvArgs g, int64_t k_per_split, float *partial) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t col0 = ((int64_t)blockIdx.x * kWarps + warp) * kCols;
    if (col0 >= g.n) return; // no block-wide barrier below
    const int64_t k0 = (int64_t)blockIdx.y * k_per_split;
    const int64_t k1 = min(g.k, k0 + k_per_split);
    const int m = (int)g.m;

    // Columns past n read row n - 1 (valid memory, results dropped): the loads stay unconditional.
    const char *wrow[kCols];
#pragma unroll
    for (int c = 0; c < kCols; c++)
        wrow[c] = static_cast<const char *>(g.w) + min(col0 + c, g.n - 1) * g.ldw * 2;
    const float mine = mf_skinny_dot<kChunk>(wrow, static_cast<const char *>(g.a), g.lda, m, k0, k1, g.ab_dt);
    const int r = lane / kCols;
    const int64_t j = col0 + lane % kCols;
    if (r >= m || j >= g.n) return;
    if (partial) {
        partial[((int64_t)blockIdx.y * g.m + r) * g.n + j] = mine;
        return;
    }
    mf_st(g.c, g.c_dt, r * g.ldc + j, epilogue(g, r, j, mine));
}

// Split-K second pass: one thread per (i, j), splits added in order.
__global__ void __launch_bounds__(kFinishThreads) gemv_finish_kernel(MfGemvArgs g, int splits,
                                                                      const float *partial) {
    const int64_t total = g.m * g.n;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int p = 0; p < splits; p++) s += partial[p * total + e];
        const int64_t i = e / g.n, j = e % g.n;
        mf_st(g.c, g.c_dt, i * g.ldc + j, epilogue(g, i, j, s));
    }
}

int64_t k_per_split_of(int64_t k, int splits) {
    const int64_t iters = (k + kIterK - 1) / kIterK;
    return (iters + splits - 1) / splits * kIterK;
}

} // namespace

bool mf_gemv_fits(const MfGemvArgs &g) {
    const bool half = g.ab_dt == MF_DTYPE_F16 || g.ab_dt == MF_DTYPE_BF16;
    return half && g.m >= 1 && g.m <= kMfGemvMaxRows && g.n >= 1 && g.n < INT32_MAX && g.k >= kChunk &&
           g.k < INT32_MAX && g.k % kChunk == 0 && (g.m == 1 || g.lda % kChunk == 0) &&
           (g.n == 1 || g.ldw % kChunk == 0) && mf_aligned16(g.a) && mf_aligned16(g.w);
}

int mf_gemv_splits(const mf_cuda_ctx *ctx, const MfGemvArgs &g) {
    const int64_t blocks = (g.n + kColsPerBlock - 1) / kColsPerBlock;
    const int64_t target = (int64_t)ctx->sm_count * kBlocksPerSmTarget;
    if (blocks >= target) return 1;
    int64_t s = target / blocks;
    const int64_t max_by_k = (g.k + kIterK - 1) / kIterK / kMinIterPerSplit;
    if (s > max_by_k) s = max_by_k;
    if (s > kMaxSplits) s = kMaxSplits;
    if (s < 2) return 1;
    // Splits of whole iterations; drop any that would start past k.
    while (s > 1 && (s - 1) * k_per_split_of(g.k, (int)s) >= g.k) s--;
    return (int)s;
}

mf_status mf_gemv_launch(mf_cuda_ctx *ctx, const MfGemvArgs &g, int splits, float *partial) {
    const dim3 grid((unsigned)((g.n + kColsPerBlock - 1) / kColsPerBlock), (unsigned)splits);
    MF_LAUNCH(gemv_kernel, grid, kThreads, 0, ctx->stream, g, k_per_split_of(g.k, splits), splits > 1 ? partial : nullptr);
    MF_CUDA_CHECK_LAUNCH("gemv");
    if (splits > 1) {
        MF_LAUNCH(gemv_finish_kernel, mf_cuda_grid(ctx, (g.m * g.n + kFinishThreads - 1) / kFinishThreads), kFinishThreads, 0, ctx->stream, g, splits, partial);
        MF_CUDA_CHECK_LAUNCH("gemv split-k finish");
    }
    return MF_OK;
}
