// Elementwise y = alpha * a + beta * b (mf_add), b broadcast over a's leading
// elements (b[i % nb]); f32 math, any mix of f32/f16/bf16.
#include "cuda/common.cuh"

namespace {

constexpr int kAddThreads = 256;

struct AddParams {
    const void *a;  // (n), contiguous
    const void *b;  // (nb), contiguous, nb divides n; NULL: y = alpha * a
    void *y;        // (n), contiguous; may be a's view (or b's when nb == n)
    int a_dt, b_dt, y_dt;
    int64_t n, nb;
    float alpha, beta;
    bool vec;       // 8-element chunks: n % 8 == 0, nb % 8 == 0, pointers 16-byte aligned
};

// Grid-stride loop over 8-element chunks (vec: 16-byte accesses; a chunk
// never straddles the end of b since nb % 8 == 0) or over single elements.
// Each element is read and then written by the same thread, so y may alias.
__global__ void __launch_bounds__(kAddThreads) add_kernel(AddParams p) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p.vec) {
        const int64_t nchunks = p.n / kMfVec;
        for (int64_t c = tid; c < nchunks; c += stride) {
            float v[kMfVec];
            mf_ld8(p.a, p.a_dt, c * kMfVec, v);
            if (p.b) {
                float w[kMfVec];
                mf_ld8(p.b, p.b_dt, (c * kMfVec) % p.nb, w);
#pragma unroll
                for (int i = 0; i < kMfVec; i++) v[i] = p.alpha * v[i] + p.beta * w[i];
            } else {
#pragma unroll
                for (int i = 0; i < kMfVec; i++) v[i] *= p.alpha;
            }
            mf_st8(p.y, p.y_dt, c * kMfVec, v);
        }
        return;
    }
    for (int64_t i = tid; i < p.n; i += stride) {
        float v = p.alpha * mf_ld(p.a, p.a_dt, i);
        if (p.b) v += p.beta * mf_ld(p.b, p.b_dt, i % p.nb);
        mf_st(p.y, p.y_dt, i, v);
    }
}

} // namespace

extern "C" mf_status mf_cuda_add(mf_backend *be, const mf_add_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    AddParams p;
    p.a = a->a.data, p.a_dt = a->a.dtype;
    p.b = a->b ? a->b->data : nullptr;
    p.b_dt = a->b ? (int)a->b->dtype : 0;
    p.y = a->y.data, p.y_dt = a->y.dtype;
    p.n = mf_tensor_numel(&a->a);
    p.nb = a->b ? mf_tensor_numel(a->b) : 1;
    p.alpha = a->alpha, p.beta = a->beta;
    p.vec = p.n % kMfVec == 0 && mf_aligned16(p.a) && mf_aligned16(p.y) &&
            (!p.b || (p.nb % kMfVec == 0 && mf_aligned16(p.b)));
    const int64_t work = p.vec ? p.n / kMfVec : p.n;
    MF_LAUNCH(add_kernel, mf_cuda_grid(c, (work + kAddThreads - 1) / kAddThreads), kAddThreads, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("add");
    return MF_OK;
}
