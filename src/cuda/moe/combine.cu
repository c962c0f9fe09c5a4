// The MoE combine on CUDA (mf_moe_combine): each token's weighted expert
// rows, plus the residual and the gated shared expert, in f32, one writer
// per output element.
#include "cuda/moe/moe.cuh"
#include "kernels/act_math.h"

namespace {

struct CombineParams {
    const void *ys;       // (N, H), row stride ys_rs
    const int32_t *inv;   // (T * k)
    const float *w;       // (T, k)
    const void *sh;       // (T, H) or NULL
    const void *sg;       // (T, 1) or NULL
    const void *res;      // (T, H) or NULL; may be out
    void *out;            // (T, H)
    int64_t ys_rs, sh_rs, sg_rs, res_rs, out_rs;
    int ydt, shdt, sgdt, rdt, odt;
    int64_t T, H, N;
    int k;
    bool vec;             // 8-element chunks: H % 8 == 0, every row 16-byte aligned
};

// Grid-stride over (token, 8-element chunk) pairs (single elements when not
// vec): out = residual + sum_j w_j ys[inv[t, j]] + sigmoid(g_t) shared, in
// that order, in f32. Each output element has one writer: no atomics.
__global__ void moe_combine_kernel(CombineParams p) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t width = p.vec ? kMfVec : 1, cpr = p.H / width, total = p.T * cpr;
    for (int64_t i = tid; i < total; i += step) {
        const int64_t t = i / cpr, c = (i - t * cpr) * width;
        float acc[kMfVec], v[kMfVec];
        if (p.vec) {
            if (p.res) {
                mf_ld8(p.res, p.rdt, t * p.res_rs + c, acc);
            } else {
#pragma unroll
                for (int e = 0; e < kMfVec; e++) acc[e] = 0.0f;
            }
        } else {
            acc[0] = p.res ? mf_ld(p.res, p.rdt, t * p.res_rs + c) : 0.0f;
        }
        for (int j = 0; j < p.k; j++) {
            const int32_t r = p.inv[t * p.k + j];
            if (r < 0 || r >= p.N) continue;
            const float wj = p.w[t * p.k + j];
            if (p.vec) {
                mf_ld8(p.ys, p.ydt, r * p.ys_rs + c, v);
#pragma unroll
                for (int e = 0; e < kMfVec; e++) acc[e] += wj * v[e];
            } else {
                acc[0] += wj * mf_ld(p.ys, p.ydt, r * p.ys_rs + c);
            }
        }
        if (p.sh) {
            const float g = p.sg ? mf_act_sigmoid(mf_ld(p.sg, p.sgdt, t * p.sg_rs)) : 1.0f;
            if (p.vec) {
                mf_ld8(p.sh, p.shdt, t * p.sh_rs + c, v);
#pragma unroll
                for (int e = 0; e < kMfVec; e++) acc[e] += g * v[e];
            } else {
                acc[0] += g * mf_ld(p.sh, p.shdt, t * p.sh_rs + c);
            }
        }
        if (p.vec)
            mf_st8(p.out, p.odt, t * p.out_rs + c, acc);
        else
            mf_st(p.out, p.odt, t * p.out_rs + c, acc[0]);
    }
}

} // namespace

extern "C" mf_status mf_cuda_moe_combine(mf_backend *be, const mf_moe_combine_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    CombineParams p = {};
    p.ys = a->ys.data, p.ys_rs = a->ys.stride[0], p.ydt = a->ys.dtype;
    p.inv = static_cast<const int32_t *>(a->inv.data), p.w = static_cast<const float *>(a->weights.data);
    p.out = a->out.data, p.out_rs = a->out.stride[0], p.odt = a->out.dtype;
    p.T = a->out.shape[0], p.H = a->out.shape[1], p.N = a->ys.shape[0], p.k = (int)a->weights.shape[1];
    p.vec = p.H % kMfVec == 0 && mf_moe_rows_aligned16(&a->ys) && mf_moe_rows_aligned16(&a->out);
    if (a->shared) {
        p.sh = a->shared->data, p.sh_rs = a->shared->stride[0], p.shdt = a->shared->dtype;
        p.vec = p.vec && mf_moe_rows_aligned16(a->shared);
    }
    if (a->shared_gate) p.sg = a->shared_gate->data, p.sg_rs = a->shared_gate->stride[0], p.sgdt = a->shared_gate->dtype;
    if (a->residual) {
        p.res = a->residual->data, p.res_rs = a->residual->stride[0], p.rdt = a->residual->dtype;
        p.vec = p.vec && mf_moe_rows_aligned16(a->residual);
    }
    const int64_t items = p.T * (p.vec ? p.H / kMfVec : p.H);
    MF_LAUNCH(moe_combine_kernel, mf_cuda_grid(c, (items + 255) / 256), 256, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("moe_combine_kernel");
    return MF_OK;
}
