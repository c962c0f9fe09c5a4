// Embedding lookup (mf_embed): y[t, :] = table[ids[t], :], converting the
// dtype on the way. An id outside [0, vocab) zero-fills its row and counts
// one error on the context's device counter; mf_backend_sync reports it.
#include "cuda/common.cuh"

namespace {

constexpr int kEmbedThreads = 128;

struct EmbedParams {
    const int32_t *ids;   // (n)
    const void *table;    // (vocab, dim), row stride t_rs
    void *y;              // (n, dim), row stride y_rs
    int64_t t_rs, y_rs;   // row strides in elements
    int t_dt, y_dt;
    int64_t n, vocab, dim;
    unsigned int *err;    // (1) out-of-range ids, summed until the next sync
    bool vec;             // 16-byte chunk accesses allowed (dim % 8 == 0, aligned rows)
};

// One block per token (grid-stride over tokens); the block's threads stride
// over the row's 8-element chunks (16-byte accesses when vec).
__global__ void __launch_bounds__(kEmbedThreads) embed_kernel(EmbedParams p) {
    const int64_t nchunks = (p.dim + kMfVec - 1) / kMfVec;
    for (int64_t t = blockIdx.x; t < p.n; t += gridDim.x) {
        const int32_t id = p.ids[t];
        const bool ok = id >= 0 && (int64_t)id < p.vocab;
        if (!ok && threadIdx.x == 0) atomicAdd(p.err, 1u);
        const int64_t src = ok ? (int64_t)id * p.t_rs : 0, dst = t * p.y_rs;
        for (int64_t c = threadIdx.x; c < nchunks; c += blockDim.x) {
            const int64_t e0 = c * kMfVec;
            float v[kMfVec];
            if (p.vec) {
                if (ok) {
                    mf_ld8(p.table, p.t_dt, src + e0, v);
                } else {
#pragma unroll
                    for (int i = 0; i < kMfVec; i++) v[i] = 0.0f;
                }
                mf_st8(p.y, p.y_dt, dst + e0, v);
            } else {
#pragma unroll
                for (int i = 0; i < kMfVec; i++) {
                    if (e0 + i >= p.dim) break;
                    mf_st(p.y, p.y_dt, dst + e0 + i, ok ? mf_ld(p.table, p.t_dt, src + e0 + i) : 0.0f);
                }
            }
        }
    }
}

} // namespace

extern "C" mf_status mf_cuda_embed(mf_backend *be, const mf_embed_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    EmbedParams p;
    p.ids = static_cast<const int32_t *>(a->ids.data);
    p.table = a->table.data, p.t_rs = a->table.stride[0], p.t_dt = a->table.dtype;
    p.y = a->y.data, p.y_rs = a->y.stride[0], p.y_dt = a->y.dtype;
    p.n = a->ids.shape[0], p.vocab = a->table.shape[0], p.dim = a->table.shape[1];
    p.err = c->err_count + kMfErrEmbed;
    const int64_t tsz = (int64_t)mf_dtype_size(a->table.dtype), ysz = (int64_t)mf_dtype_size(a->y.dtype);
    p.vec = p.dim % kMfVec == 0 && mf_aligned16(p.table) && mf_aligned16(p.y) &&
            (p.vocab == 1 || (p.t_rs * tsz) % 16 == 0) && (p.n == 1 || (p.y_rs * ysz) % 16 == 0);
    MF_LAUNCH(embed_kernel, mf_cuda_grid(c, p.n), kEmbedThreads, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("embed");
    c->err_pending = true;
    c->err_vocab = p.vocab;
    return MF_OK;
}
