// Fused residual add + RMSNorm / LayerNorm (mf_add_norm), f32 math.
//
// Every thread owns chunks of kMfVec = 8 consecutive elements of a row:
// one 16-byte access per chunk for f16/bf16 (two for f32) when every pointer
// and row stride allows it ("vec"), element by element otherwise (odd dims,
// offset views). Three kernels, picked by dim in mf_cuda_add_norm:
//   dim <= 1024            one warp per row, the row in registers
//   dim <= kRegMaxDim      one block per row, the row in registers
//   larger (any dim)       one block per row, the row re-read from global (L2)
// LayerNorm's variance is two-pass (mean first, then sum of (s - mean)^2),
// robust when |mean| >> std. RMSNorm is the same with mean = 0.
//
// Aliasing: x, residual, sum_out and y may be the same view. Each thread
// writes only the chunks it has itself read, and writes only after the row's
// statistics are known (a reduction every thread of the row takes part in),
// so no element is overwritten before it is read.
#include "cuda/common.cuh"

namespace {

constexpr int kWarpRowsPerBlock = 4;      // warp kernel: 4 rows (128 threads) per block
constexpr int kBlockMaxThreads = 512;     // block kernels: at most 512 threads per row
constexpr int kBlockChunks = 4;           // register-held block kernel: chunks per thread
constexpr int64_t kWarpMaxDim = 32 * 4 * kMfVec;                           // 1024
constexpr int64_t kRegMaxDim = kBlockMaxThreads * kBlockChunks * kMfVec;   // 16384
static_assert(kWarpMaxDim == 1024, "the warp kernel holds rows up to 1024 in 4 chunks per lane");

struct NormParams {
    const void *x;                 // (rows, dim), row stride x_rs
    const void *r;                 // residual (rows, dim) or NULL
    void *s;                       // sum_out (rows, dim) or NULL
    void *y;                       // (rows, dim)
    const void *w;                 // weight (dim)
    const void *b;                 // bias (dim) or NULL
    int64_t x_rs, r_rs, s_rs, y_rs; // row strides in elements
    int x_dt, r_dt, s_dt, y_dt, w_dt, b_dt;
    int64_t rows, dim;
    float inv_dim;                 // 1 / dim (a multiply instead of a division per row)
    float eps;
    bool layer;                    // LayerNorm (subtract the mean), else RMSNorm
    bool vec;                      // 16-byte chunk accesses are allowed (see mf_cuda_add_norm)
};

// Chunk c of `row`: v = x + residual for elements [8c, 8c + 8); elements past
// dim read as 0 (they add nothing to the sums).
__device__ __forceinline__ void load_chunk(const NormParams &p, int64_t row, int64_t c, float (&v)[kMfVec]) {
    const int64_t e0 = c * kMfVec;
    if (p.vec) {
        mf_ld8(p.x, p.x_dt, row * p.x_rs + e0, v);
        if (p.r) {
            float t[kMfVec];
            mf_ld8(p.r, p.r_dt, row * p.r_rs + e0, t);
#pragma unroll
            for (int i = 0; i < kMfVec; i++) v[i] += t[i];
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < kMfVec; i++) {
        const int64_t e = e0 + i;
        v[i] = 0.0f;
        if (e < p.dim) {
            v[i] = mf_ld(p.x, p.x_dt, row * p.x_rs + e);
            if (p.r) v[i] += mf_ld(p.r, p.r_dt, row * p.r_rs + e);
        }
    }
}

// Sum of (v - mean)^2 over the chunk's elements that lie inside the row.
__device__ __forceinline__ float chunk_sq(const NormParams &p, int64_t c, const float (&v)[kMfVec], float mean) {
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < kMfVec; i++) {
        float d = v[i] - mean;
        if (c * kMfVec + i < p.dim) q += d * d;
    }
    return q;
}

// Writes sum_out (if any) then y = (v - mean) * inv * w (+ b) for chunk c.
// sum_out first: if it is y's view too, y wins (as on the CPU).
__device__ __forceinline__ void store_chunk(const NormParams &p, int64_t row, int64_t c, const float (&v)[kMfVec],
                                            float mean, float inv) {
    const int64_t e0 = c * kMfVec;
    if (p.vec) {
        float w[kMfVec], o[kMfVec];
        mf_ld8(p.w, p.w_dt, e0, w);
#pragma unroll
        for (int i = 0; i < kMfVec; i++) o[i] = (v[i] - mean) * inv * w[i];
        if (p.b) {
            float b[kMfVec];
            mf_ld8(p.b, p.b_dt, e0, b);
#pragma unroll
            for (int i = 0; i < kMfVec; i++) o[i] += b[i];
        }
        if (p.s) mf_st8(p.s, p.s_dt, row * p.s_rs + e0, v);
        mf_st8(p.y, p.y_dt, row * p.y_rs + e0, o);
        return;
    }
#pragma unroll
    for (int i = 0; i < kMfVec; i++) {
        const int64_t e = e0 + i;
        if (e >= p.dim) break;
        float o = (v[i] - mean) * inv * mf_ld(p.w, p.w_dt, e);
        if (p.b) o += mf_ld(p.b, p.b_dt, e);
        if (p.s) mf_st(p.s, p.s_dt, row * p.s_rs + e, v[i]);
        mf_st(p.y, p.y_dt, row * p.y_rs + e, o);
    }
}

// dim <= 32 * kChunks * 8. One warp per row, kWarpRowsPerBlock rows per block,
// grid-stride over rows. Lane l holds chunks l, l + 32, ... (kChunks of them)
// in registers: consecutive lanes touch consecutive 16-byte pieces.
template <int kChunks>
__global__ void __launch_bounds__(kWarpRowsPerBlock * 32) add_norm_warp_kernel(NormParams p) {
    const int lane = threadIdx.x & 31;
    const int64_t nchunks = (p.dim + kMfVec - 1) / kMfVec;
    const int64_t step = (int64_t)gridDim.x * kWarpRowsPerBlock;
    for (int64_t row = (int64_t)blockIdx.x * kWarpRowsPerBlock + (threadIdx.x >> 5); row < p.rows; row += step) {
        float v[kChunks][kMfVec];
#pragma unroll
        for (int j = 0; j < kChunks; j++) {
            const int64_t c = lane + 32 * j;
            if (c < nchunks) {
                load_chunk(p, row, c, v[j]);
            } else {
#pragma unroll
                for (int i = 0; i < kMfVec; i++) v[j][i] = 0.0f;
            }
        }
        float mean = 0.0f;
        if (p.layer) {
            float t = 0.0f;
#pragma unroll
            for (int j = 0; j < kChunks; j++)
#pragma unroll
                for (int i = 0; i < kMfVec; i++) t += v[j][i];
            mean = mf_warp_sum(t) * p.inv_dim;
        }
        float q = 0.0f;
#pragma unroll
        for (int j = 0; j < kChunks; j++) q += chunk_sq(p, lane + 32 * j, v[j], mean);
        const float inv = rsqrtf(mf_warp_sum(q) * p.inv_dim + p.eps);
#pragma unroll
        for (int j = 0; j < kChunks; j++) {
            const int64_t c = lane + 32 * j;
            if (c < nchunks) store_chunk(p, row, c, v[j], mean, inv);
        }
    }
}

// kWarpMaxDim < dim <= blockDim.x * kBlockChunks * 8. One block per row
// (grid-stride over rows); thread t holds chunks t, t + blockDim.x, ... in
// registers. blockDim.x: a multiple of 32, at most kBlockMaxThreads.
__global__ void __launch_bounds__(kBlockMaxThreads) add_norm_block_kernel(NormParams p) {
    MF_SHARED(float, red, [32]);
    const int64_t nchunks = (p.dim + kMfVec - 1) / kMfVec;
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
        float v[kBlockChunks][kMfVec];
#pragma unroll
        for (int j = 0; j < kBlockChunks; j++) {
            const int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
            if (c < nchunks) {
                load_chunk(p, row, c, v[j]);
            } else {
#pragma unroll
                for (int i = 0; i < kMfVec; i++) v[j][i] = 0.0f;
            }
        }
        float mean = 0.0f;
        if (p.layer) {
            float t = 0.0f;
#pragma unroll
            for (int j = 0; j < kBlockChunks; j++)
#pragma unroll
                for (int i = 0; i < kMfVec; i++) t += v[j][i];
            mean = mf_block_sum(t, red) * p.inv_dim;
        }
        float q = 0.0f;
#pragma unroll
        for (int j = 0; j < kBlockChunks; j++) q += chunk_sq(p, threadIdx.x + (int64_t)j * blockDim.x, v[j], mean);
        const float inv = rsqrtf(mf_block_sum(q, red) * p.inv_dim + p.eps);
#pragma unroll
        for (int j = 0; j < kBlockChunks; j++) {
            const int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
            if (c < nchunks) store_chunk(p, row, c, v[j], mean, inv);
        }
    }
}

// Any dim (used above kRegMaxDim). One block of kBlockMaxThreads per row
// (grid-stride over rows); the row is read 2 (RMS) or 3 (LayerNorm) times,
// the re-reads mostly from L2. Writes happen only in the last pass, each
// chunk by the thread that has just read it; the reductions' barriers keep
// them after every earlier read of the row.
__global__ void __launch_bounds__(kBlockMaxThreads) add_norm_global_kernel(NormParams p) {
    MF_SHARED(float, red, [32]);
    const int64_t nchunks = (p.dim + kMfVec - 1) / kMfVec;
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
        float v[kMfVec];
        float mean = 0.0f;
        if (p.layer) {
            float t = 0.0f;
            for (int64_t c = threadIdx.x; c < nchunks; c += blockDim.x) {
                load_chunk(p, row, c, v);
#pragma unroll
                for (int i = 0; i < kMfVec; i++) t += v[i];
            }
            mean = mf_block_sum(t, red) * p.inv_dim;
        }
        float q = 0.0f;
        for (int64_t c = threadIdx.x; c < nchunks; c += blockDim.x) {
            load_chunk(p, row, c, v);
            q += chunk_sq(p, c, v, mean);
        }
        const float inv = rsqrtf(mf_block_sum(q, red) * p.inv_dim + p.eps);
        for (int64_t c = threadIdx.x; c < nchunks; c += blockDim.x) {
            load_chunk(p, row, c, v);
            store_chunk(p, row, c, v, mean, inv);
        }
    }
}

// A (rows, dim) view allows 16-byte chunks when its first element is 16-byte
// aligned and so is every row start (the stride is irrelevant for one row).
bool rows_vec_ok(const mf_tensor *t, int64_t rows) {
    if (!t) return true;
    if (!mf_aligned16(t->data)) return false;
    return rows == 1 || (t->stride[0] * (int64_t)mf_dtype_size(t->dtype)) % 16 == 0;
}

} // namespace

extern "C" mf_status mf_cuda_add_norm(mf_backend *be, const mf_norm_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    const int64_t rows = a->x.shape[0], dim = a->x.shape[1];
    NormParams p;
    p.x = a->x.data, p.x_rs = a->x.stride[0], p.x_dt = a->x.dtype;
    p.r = a->residual ? a->residual->data : nullptr;
    p.r_rs = a->residual ? a->residual->stride[0] : 0;
    p.r_dt = a->residual ? (int)a->residual->dtype : 0;
    p.s = a->sum_out ? a->sum_out->data : nullptr;
    p.s_rs = a->sum_out ? a->sum_out->stride[0] : 0;
    p.s_dt = a->sum_out ? (int)a->sum_out->dtype : 0;
    p.y = a->y.data, p.y_rs = a->y.stride[0], p.y_dt = a->y.dtype;
    p.w = a->weight.data, p.w_dt = a->weight.dtype;
    p.b = a->bias ? a->bias->data : nullptr;
    p.b_dt = a->bias ? (int)a->bias->dtype : 0;
    p.rows = rows, p.dim = dim, p.inv_dim = (float)(1.0 / (double)dim), p.eps = a->eps;
    p.layer = a->kind == MF_NORM_LAYER;
    p.vec = dim % kMfVec == 0 && rows_vec_ok(&a->x, rows) && rows_vec_ok(a->residual, rows) &&
            rows_vec_ok(a->sum_out, rows) && rows_vec_ok(&a->y, rows) && mf_aligned16(a->weight.data) &&
            (!a->bias || mf_aligned16(a->bias->data));

    const int64_t nchunks = (dim + kMfVec - 1) / kMfVec;
    if (dim <= kWarpMaxDim) {
        const unsigned grid = mf_cuda_grid(c, (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
        if (dim <= 32 * kMfVec)
            MF_LAUNCH(add_norm_warp_kernel<1>, grid, kWarpRowsPerBlock * 32, 0, c->stream, p);
        else
            MF_LAUNCH(add_norm_warp_kernel<4>, grid, kWarpRowsPerBlock * 32, 0, c->stream, p);
    } else if (dim <= kRegMaxDim) {
        // Enough threads for kBlockChunks chunks each, at least 128 (short rows still get 4 warps).
        int64_t threads = (nchunks + kBlockChunks - 1) / kBlockChunks;
        threads = (threads + 31) / 32 * 32;
        if (threads < 128) threads = 128;
        if (threads > kBlockMaxThreads) threads = kBlockMaxThreads;
        MF_LAUNCH(add_norm_block_kernel, mf_cuda_grid(c, rows), (unsigned)threads, 0, c->stream, p);
    } else {
        MF_LAUNCH(add_norm_global_kernel, mf_cuda_grid(c, rows), kBlockMaxThreads, 0, c->stream, p);
    }
    MF_CUDA_CHECK_LAUNCH("add_norm");
    return MF_OK;
}
