// Activations (mf_act) on CUDA: y = act(x) (* up), f32 math with the formulas
// of src/kernels/act_math.h (shared with the CPU backend: robust sigmoid, erfc
// form of the erf GELU, precise expf / erfcf).
//
// Grid-stride over 8-element chunks of the rows: one 16-byte access per chunk
// for f16/bf16 (two for f32) when n % 8 == 0 and every row of x, up and y
// starts on a 16-byte boundary ("vec"), element by element otherwise. x and
// up may be the two halves of one (rows, 2n) gate|up buffer (row strides
// free). Each element is read, then written, by the same thread, so y may be
// x's or up's view.
#include "cuda/common.cuh"
#include "kernels/act_math.h"

namespace {

constexpr int kActThreads = 256;

struct ActParams {
    const void *x;   // (rows, n), row stride x_rs
    const void *up;  // (rows, n), row stride u_rs; NULL: no gate product
    void *y;         // (rows, n), row stride y_rs
    int64_t x_rs, u_rs, y_rs;
    int x_dt, u_dt, y_dt;
    int64_t rows, n;
    int kind;        // mf_act_kind
    bool vec;        // 16-byte chunks allowed (see mf_cuda_act)
};

__global__ void __launch_bounds__(kActThreads) act_kernel(ActParams p) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p.vec) {
        const int64_t cpr = p.n / kMfVec, total = p.rows * cpr; // chunks per row, in all
        for (int64_t ch = tid; ch < total; ch += step) {
            const int64_t r = ch / cpr, e = (ch - r * cpr) * kMfVec;
            float v[kMfVec];
            mf_ld8(p.x, p.x_dt, r * p.x_rs + e, v);
#pragma unroll
            for (int i = 0; i < kMfVec; i++) v[i] = mf_act_apply(p.kind, v[i]);
            if (p.up) {
                float u[kMfVec];
                mf_ld8(p.up, p.u_dt, r * p.u_rs + e, u);
#pragma unroll
                for (int i = 0; i < kMfVec; i++) v[i] *= u[i];
            }
            mf_st8(p.y, p.y_dt, r * p.y_rs + e, v);
        }
        return;
    }
    const int64_t total = p.rows * p.n;
    for (int64_t idx = tid; idx < total; idx += step) {
        const int64_t r = idx / p.n, e = idx - r * p.n;
        float v = mf_act_apply(p.kind, mf_ld(p.x, p.x_dt, r * p.x_rs + e));
        if (p.up) v *= mf_ld(p.up, p.u_dt, r * p.u_rs + e);
        mf_st(p.y, p.y_dt, r * p.y_rs + e, v);
    }
}

// A (rows, n) view allows 16-byte chunks when its first element is 16-byte
// aligned and so is every row start (the stride is irrelevant for one row).
bool rows_vec_ok(const mf_tensor *t, int64_t rows) {
    if (!t) return true;
    if (!mf_aligned16(t->data)) return false;
    return rows == 1 || (t->stride[0] * (int64_t)mf_dtype_size(t->dtype)) % 16 == 0;
}

} // namespace

extern "C" mf_status mf_cuda_act(mf_backend *be, const mf_act_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    ActParams p;
    p.x = a->x.data, p.x_rs = a->x.stride[0], p.x_dt = a->x.dtype;
    p.up = a->up ? a->up->data : nullptr;
    p.u_rs = a->up ? a->up->stride[0] : 0;
    p.u_dt = a->up ? (int)a->up->dtype : 0;
    p.y = a->y.data, p.y_rs = a->y.stride[0], p.y_dt = a->y.dtype;
    p.rows = a->x.shape[0], p.n = a->x.shape[1];
    p.kind = (int)a->kind;
    p.vec = p.n % kMfVec == 0 && rows_vec_ok(&a->x, p.rows) && rows_vec_ok(a->up, p.rows) &&
            rows_vec_ok(&a->y, p.rows);
    const int64_t work = p.vec ? p.rows * (p.n / kMfVec) : p.rows * p.n;
    MF_LAUNCH(act_kernel, mf_cuda_grid(c, (work + kActThreads - 1) / kActThreads), kActThreads, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("act");
    return MF_OK;
}
