// Strided copy / cast (mf_copy) on CUDA, over the collapsed geometry of
// src/kernels/copy_geom.h (size-1 dims dropped, dims contiguous with each other
// in both views merged). Three paths, picked in mf_cuda_copy_tensor:
//   memcpy   same dtype and one contiguous block on both sides: cudaMemcpyAsync.
//   rows     unit stride along the innermost dim on both sides (KV-cache
//            writes, padded rows, permutations that keep head_dim innermost):
//            grid-stride over 8-element chunks of the rows, one 16-byte
//            access per chunk (two for 4-byte dtypes) when every row of both
//            views starts on a 16-byte boundary ("vec"), element by element
//            otherwise. The row's offsets come from one int64 index
//            decomposition per chunk.
//   strided  anything else (a transposed innermost dim, broadcast columns):
//            one thread per element in dst's logical order, int64 index
//            decomposition over up to 4 dims. Reads are not coalesced when the
//            innermost dims disagree (no shared-memory tiling: rare in the
//            forward pass, where layout changes keep head_dim innermost).
// Same dtype (i32 included): the bits move unchanged (NaN payloads, -0).
// Otherwise f32/f16/bf16 go through f32 (exact) and are stored with
// round-to-nearest-even.
#include "cuda/common.cuh"
#include "kernels/copy_geom.h"

namespace {

constexpr int kCopyThreads = 256;

struct CopyParams {
    const void *src;                 // element (i0, .., i3) at sum(i_k * ss[k])
    void *dst;                       // element (i0, .., i3) at sum(i_k * ds[k])
    int s_dt, d_dt;
    int ndim;                        // collapsed dims, 1..4; the last is the innermost
    int64_t shape[MF_MAX_DIMS];
    int64_t ss[MF_MAX_DIMS], ds[MF_MAX_DIMS]; // strides in elements (src may have 0s)
    int64_t numel;
};

// Offsets of the row-major index `lin` over the first nd dims.
__device__ __forceinline__ void offsets_of(const CopyParams &p, int nd, int64_t lin, int64_t &so, int64_t &dof) {
    so = 0, dof = 0;
#pragma unroll
    for (int k = MF_MAX_DIMS - 1; k >= 0; k--) { // unrolled: the param arrays stay statically indexed
        if (k >= nd) continue;
        const int64_t q = lin / p.shape[k], i = lin - q * p.shape[k];
        so += i * p.ss[k], dof += i * p.ds[k];
        lin = q;
    }
}

// One element: same dtype moves bits, otherwise a cast through f32.
__device__ __forceinline__ void move1(const CopyParams &p, int64_t so, int64_t dof) {
    if (p.s_dt == p.d_dt) {
        if (p.s_dt == MF_DTYPE_F32 || p.s_dt == MF_DTYPE_I32)
            static_cast<uint32_t *>(p.dst)[dof] = static_cast<const uint32_t *>(p.src)[so];
        else
            static_cast<uint16_t *>(p.dst)[dof] = static_cast<const uint16_t *>(p.src)[so];
        return;
    }
    mf_st(p.dst, p.d_dt, dof, mf_ld(p.src, p.s_dt, so));
}

// Rows of `inner` elements, unit stride on both sides; the outer dims are
// dims 0 .. ndim - 2. vec: inner % 8 == 0 and every row start 16-byte aligned.
__global__ void __launch_bounds__(kCopyThreads) copy_rows_kernel(CopyParams p, int64_t inner, bool vec) {
    const int64_t cpr = (inner + kMfVec - 1) / kMfVec, total = p.numel / inner * cpr;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    const bool same = p.s_dt == p.d_dt;
    const int64_t es = p.s_dt == MF_DTYPE_F16 || p.s_dt == MF_DTYPE_BF16 ? 2 : 4;
    for (int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ch < total; ch += step) {
        const int64_t r = ch / cpr, e = (ch - r * cpr) * kMfVec;
        int64_t so, dof;
        offsets_of(p, p.ndim - 1, r, so, dof);
        so += e, dof += e;
        if (vec && same) { // 8 elements = 16 or 32 bytes, moved as they are
            const uint4 *s = reinterpret_cast<const uint4 *>(static_cast<const char *>(p.src) + so * es);
            uint4 *d = reinterpret_cast<uint4 *>(static_cast<char *>(p.dst) + dof * es);
            d[0] = s[0];
            if (es == 4) d[1] = s[1];
        } else if (vec) {
            float v[kMfVec];
            mf_ld8(p.src, p.s_dt, so, v);
            mf_st8(p.dst, p.d_dt, dof, v);
        } else {
#pragma unroll
            for (int i = 0; i < kMfVec; i++)
                if (e + i < inner) move1(p, so + i, dof + i);
        }
    }
}

__global__ void __launch_bounds__(kCopyThreads) copy_strided_kernel(CopyParams p) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < p.numel; idx += step) {
        int64_t so, dof;
        offsets_of(p, p.ndim, idx, so, dof);
        move1(p, so, dof);
    }
}

} // namespace

extern "C" mf_status mf_cuda_copy_tensor(mf_backend *be, const mf_copy_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    mf_copy_geom g;
    mf_copy_geom_of(a, &g);
    const int64_t ses = (int64_t)mf_dtype_size(a->src.dtype), des = (int64_t)mf_dtype_size(a->dst.dtype);
    const bool same = a->src.dtype == a->dst.dtype;
    if (same && g.ndim == 1 && g.ss[0] == 1 && g.ds[0] == 1) {
        MF_CUDA_TRY(cudaMemcpyAsync(a->dst.data, a->src.data, (size_t)(g.numel * ses), cudaMemcpyDeviceToDevice,
                                    c->stream));
        return MF_OK;
    }
    CopyParams p;
    p.src = a->src.data, p.dst = a->dst.data;
    p.s_dt = a->src.dtype, p.d_dt = a->dst.dtype;
    p.ndim = g.ndim, p.numel = g.numel;
    for (int k = 0; k < MF_MAX_DIMS; k++) p.shape[k] = g.shape[k], p.ss[k] = g.ss[k], p.ds[k] = g.ds[k];
    if (mf_copy_rows_contiguous(&g)) {
        const int64_t inner = g.shape[g.ndim - 1];
        bool vec = inner % kMfVec == 0 && mf_aligned16(p.src) && mf_aligned16(p.dst);
        for (int k = 0; k < g.ndim - 1; k++) vec = vec && (g.ss[k] * ses) % 16 == 0 && (g.ds[k] * des) % 16 == 0;
        const int64_t chunks = g.numel / inner * ((inner + kMfVec - 1) / kMfVec);
        MF_LAUNCH(copy_rows_kernel, mf_cuda_grid(c, (chunks + kCopyThreads - 1) / kCopyThreads), kCopyThreads, 0, c->stream, p, inner, vec);
        MF_CUDA_CHECK_LAUNCH("copy_rows");
    } else {
        MF_LAUNCH(copy_strided_kernel, mf_cuda_grid(c, (g.numel + kCopyThreads - 1) / kCopyThreads), kCopyThreads, 0, c->stream, p);
        MF_CUDA_CHECK_LAUNCH("copy_strided");
    }
    return MF_OK;
}
