// mf_copy: argument validation, then the backend's strided copy / cast.
#include "ops/check.h"
#include "ops/overlap.h"

static bool is_float(mf_dtype dt) { return dt == MF_DTYPE_F32 || dt == MF_DTYPE_F16 || dt == MF_DTYPE_BF16; }

mf_status mf_copy(mf_backend *be, const mf_copy_args *p) {
    static const char op[] = "copy";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->src, op, "src"));
    MF_TRY(mf_check_on(be, &p->dst, op, "dst"));
    const mf_dtype st = p->src.dtype, dt = p->dst.dtype;
    if (!(is_float(st) && is_float(dt)) && !(st == MF_DTYPE_I32 && dt == MF_DTYPE_I32))
        return mf_fail(MF_ERR_INVALID_ARG, "copy: src dtype %s to dst dtype %s (want f32/f16/bf16 to f32/f16/bf16, or i32 to i32)",
                       mf_dtype_name(st), mf_dtype_name(dt));
    if (p->dst.ndim != p->src.ndim)
        return mf_fail(MF_ERR_INVALID_ARG, "copy: dst has %d dims, src has %d (want the same shape)", p->dst.ndim,
                       p->src.ndim);
    for (int d = 0; d < p->src.ndim; d++)
        if (p->dst.shape[d] != p->src.shape[d])
            return mf_fail(MF_ERR_INVALID_ARG, "copy: dst shape[%d] = %lld != src shape[%d] = %lld", d,
                           (long long)p->dst.shape[d], d, (long long)p->src.shape[d]);
    if (mf_tensor_numel(&p->src) == 0) return MF_OK;
    // src may read one element many times (stride 0 broadcasts); dst may not be written twice.
    MF_TRY(mf_check_no_self_overlap(&p->dst, op, "dst"));
    if (mf_views_same(&p->src, &p->dst)) return MF_OK; // nothing to move
    MF_TRY(mf_check_apart(&p->src, &p->dst, op, "src", "dst"));
    return mf_dispatch_copy_tensor(be, p);
}
