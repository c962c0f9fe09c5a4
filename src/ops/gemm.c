// mf_gemm: argument validation, then the backend's GEMM.
#include "kernels/mat_layout.h"
#include "ops/check.h"
#include "ops/overlap.h"

mf_status mf_gemm(mf_backend *be, const mf_gemm_args *p) {
    static const char op[] = "gemm";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->a, op, "a"));
    MF_TRY(mf_check_on(be, &p->b, op, "b"));
    MF_TRY(mf_check_on(be, &p->c, op, "c"));
    MF_TRY(mf_check_float(&p->a, op, "a"));
    MF_TRY(mf_check_float(&p->b, op, "b"));
    MF_TRY(mf_check_float(&p->c, op, "c"));
    int nd = p->c.ndim;
    if (nd != 2 && nd != 3) return mf_fail(MF_ERR_INVALID_ARG, "gemm: c has %d dims (want 2 or 3)", nd);
    MF_TRY(mf_check_ndim(&p->a, nd, op, "a"));
    MF_TRY(mf_check_ndim(&p->b, nd, op, "b"));
    // A 16-bit b (a weight) with f32 a and c: on backends that widen it (the CPU).
    const bool mixed = p->a.dtype == MF_DTYPE_F32 && p->c.dtype == MF_DTYPE_F32 && be->mixed_weights;
    if (p->a.dtype != p->b.dtype && !mixed)
        return mf_fail(MF_ERR_INVALID_ARG, "gemm: a dtype %s != b dtype %s (%s%s%s)", mf_dtype_name(p->a.dtype),
                       mf_dtype_name(p->b.dtype), be->mixed_weights ? "an f16/bf16 b takes f32 a and c" : "the ",
                       be->mixed_weights ? "" : be->name, be->mixed_weights ? "" : " backend needs them equal");
    if (p->c.dtype != p->a.dtype && p->c.dtype != MF_DTYPE_F32)
        return mf_fail(MF_ERR_INVALID_ARG, "gemm: c dtype %s (want %s or f32)", mf_dtype_name(p->c.dtype),
                       mf_dtype_name(p->a.dtype));
    int64_t m = p->c.shape[nd - 2], n = p->c.shape[nd - 1], k = p->a.shape[nd - 1];
    if (p->a.shape[nd - 2] != m)
        return mf_fail(MF_ERR_INVALID_ARG, "gemm: a rows %lld != c rows %lld", (long long)p->a.shape[nd - 2],
                       (long long)m);
    if (p->b.shape[nd - 2] != k)
        return mf_fail(MF_ERR_INVALID_ARG, "gemm: a cols (k) %lld != b rows %lld", (long long)k,
                       (long long)p->b.shape[nd - 2]);
    if (p->b.shape[nd - 1] != n)
        return mf_fail(MF_ERR_INVALID_ARG, "gemm: b cols %lld != c cols %lld", (long long)p->b.shape[nd - 1],
                       (long long)n);
    if (nd == 3) {
        int64_t batch = p->c.shape[0];
        if (p->a.shape[0] != batch && p->a.shape[0] != 1)
            return mf_fail(MF_ERR_INVALID_ARG, "gemm: a batch %lld (want %lld or 1)", (long long)p->a.shape[0],
                           (long long)batch);
        if (p->b.shape[0] != batch && p->b.shape[0] != 1)
            return mf_fail(MF_ERR_INVALID_ARG, "gemm: b batch %lld (want %lld or 1)", (long long)p->b.shape[0],
                           (long long)batch);
        // Batches may interleave (batch stride < one matrix's span, e.g. the
        // heads of attention's output rows) as long as no element is shared.
        if (batch > 1 && !mf_view_no_self_overlap(&p->c))
            return mf_fail(MF_ERR_INVALID_ARG,
                           "gemm: c's batches overlap (batch stride %lld, row stride %lld, %lld x %lld per batch)",
                           (long long)p->c.stride[0], (long long)p->c.stride[1], (long long)m, (long long)n);
    }
    if (p->c.stride[nd - 1] != 1 && n > 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "gemm: c must be row-major (stride[-1]=%lld)",
                       (long long)p->c.stride[nd - 1]);
    if (m > 1 && p->c.stride[nd - 2] < n)
        return mf_fail(MF_ERR_INVALID_ARG, "gemm: c row stride %lld < n %lld", (long long)p->c.stride[nd - 2],
                       (long long)n);
    mf_mat_layout la, lb;
    MF_TRY(mf_mat_layout_of(&p->a, op, "a", &la));
    MF_TRY(mf_mat_layout_of(&p->b, op, "b", &lb));
    MF_TRY(mf_check_disjoint(&p->c, &p->a, op, "c", "a"));
    MF_TRY(mf_check_disjoint(&p->c, &p->b, op, "c", "b"));
    if (p->bias) {
        MF_TRY(mf_check_on(be, p->bias, op, "bias"));
        if (p->bias->ndim != 1 || p->bias->shape[0] != n || !mf_tensor_is_contiguous(p->bias))
            return mf_fail(MF_ERR_INVALID_ARG, "gemm: bias must be contiguous (n=%lld), got %d dims, shape[0]=%lld, stride[0]=%lld",
                           (long long)n, p->bias->ndim, (long long)p->bias->shape[0], (long long)p->bias->stride[0]);
        if (p->bias->dtype != p->c.dtype)
            return mf_fail(MF_ERR_INVALID_ARG, "gemm: bias dtype %s != c dtype %s", mf_dtype_name(p->bias->dtype),
                           mf_dtype_name(p->c.dtype));
        MF_TRY(mf_check_disjoint(&p->c, p->bias, op, "c", "bias"));
    }
    if (p->epilogue != MF_EPILOGUE_NONE && p->epilogue != MF_EPILOGUE_GELU)
        return mf_fail(MF_ERR_INVALID_ARG, "gemm: invalid epilogue %d", (int)p->epilogue);
    if (m == 0 || n == 0 || (nd == 3 && p->c.shape[0] == 0)) return MF_OK;
    return mf_dispatch_gemm(be, p);
}
