// Rotary position embedding (mf_rope) on CUDA, in place on q and k, HF
// rotate_half layout, f32 math.
//
// One thread per rotated pair: grid-stride over the n_tokens * (n_heads +
// n_kv_heads) * half pairs, i (the pair within the head) fastest, so that
// consecutive threads touch consecutive elements of both halves of a head
// (coalesced; q and k views may have any token and head strides, e.g. slices
// of one fused QKV GEMM output). Each thread computes its angle as
// __fmul_rn((float)pos[t], inv_freq[i]) - the f32 product, as HF and the CPU
// backend take it, never contracted into anything - and its cos/sin with the
// precise sincosf: angles reach ~1e5 rad at long positions, where __sincosf
// is off by ~1e-2 while sincosf (full range reduction) stays within 2 ulp.
// The (token, i) angle is recomputed for every head: a few dozen FLOPs per 8
// to 16 bytes moved. Indices are int64.
#include "cuda/common.cuh"

namespace {

constexpr int kRopeThreads = 256;

struct RopeParams {
    void *q;               // (n_tokens, n_heads, head_dim): element (t, h, d) at t * q_ts + h * q_hs + d
    void *k;               // (n_tokens, n_kv_heads, head_dim), same rule with k_ts, k_hs; NULL: none
    const int32_t *pos;    // (n_tokens)
    const float *inv_freq; // (half)
    int64_t q_ts, q_hs, k_ts, k_hs;
    int q_dt, k_dt;
    int64_t n_tokens, n_heads, n_kv_heads; // n_kv_heads 0 when k is NULL
    int64_t half;          // rot_dim / 2: pair i is (d = i, d = i + half)
};

__global__ void __launch_bounds__(kRopeThreads) rope_kernel(RopeParams p) {
    const int64_t heads = p.n_heads + p.n_kv_heads;
    const int64_t total = p.n_tokens * heads * p.half;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {
        const int64_t th = idx / p.half, i = idx - th * p.half;
        const int64_t t = th / heads, h = th - t * heads;
        float s, c;
        sincosf(__fmul_rn((float)p.pos[t], p.inv_freq[i]), &s, &c);
        void *v;
        int dt;
        int64_t o;
        if (h < p.n_heads) {
            v = p.q, dt = p.q_dt, o = t * p.q_ts + h * p.q_hs + i;
        } else {
            v = p.k, dt = p.k_dt, o = t * p.k_ts + (h - p.n_heads) * p.k_hs + i;
        }
        const float x0 = mf_ld(v, dt, o), x1 = mf_ld(v, dt, o + p.half);
        float y0, y1;
        mf_rotate(x0, x1, c, s, &y0, &y1);
        mf_st(v, dt, o, y0);
        mf_st(v, dt, o + p.half, y1);
    }
}

} // namespace

extern "C" mf_status mf_cuda_rope(mf_backend *be, const mf_rope_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    RopeParams p;
    p.q = a->q.data, p.q_ts = a->q.stride[0], p.q_hs = a->q.stride[1], p.q_dt = a->q.dtype;
    p.k = a->k ? a->k->data : nullptr;
    p.k_ts = a->k ? a->k->stride[0] : 0;
    p.k_hs = a->k ? a->k->stride[1] : 0;
    p.k_dt = a->k ? (int)a->k->dtype : 0;
    p.pos = static_cast<const int32_t *>(a->pos.data);
    p.inv_freq = static_cast<const float *>(a->inv_freq.data);
    p.n_tokens = a->q.shape[0], p.n_heads = a->q.shape[1];
    p.n_kv_heads = a->k ? a->k->shape[1] : 0;
    p.half = a->inv_freq.shape[0];
    const int64_t total = p.n_tokens * (p.n_heads + p.n_kv_heads) * p.half;
    MF_LAUNCH(rope_kernel, mf_cuda_grid(c, (total + kRopeThreads - 1) / kRopeThreads), kRopeThreads, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("rope");
    return MF_OK;
}
