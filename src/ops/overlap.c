// Overlap tests for strided views (see overlap.h).
#include <stdint.h>
#include <stdio.h>

#include "ops/overlap.h"

bool mf_view_no_self_overlap(const mf_tensor *t) {
    int idx[MF_MAX_DIMS], n = 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1) idx[n++] = d;
    for (int a = 1; a < n; a++) // insertion sort by stride, n <= 4
        for (int b = a; b > 0 && t->stride[idx[b]] < t->stride[idx[b - 1]]; b--) {
            int tmp = idx[b];
            idx[b] = idx[b - 1];
            idx[b - 1] = tmp;
        }
    int64_t span = 1; // elements covered by the dims already visited
    for (int k = 0; k < n; k++) {
        const int d = idx[k];
        if (t->stride[d] < span) return false;
        span += (t->shape[d] - 1) * t->stride[d];
    }
    return true;
}

bool mf_views_same(const mf_tensor *a, const mf_tensor *b) {
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->stride[i] != b->stride[i])) return false;
    return true;
}

// Bytes one index of dim 0 covers: the span of the view cut to shape[0] = 1.
static int64_t row_extent(const mf_tensor *t) {
    mf_tensor r = *t;
    r.shape[0] = 1;
    return mf_tensor_span_bytes(&r);
}

bool mf_views_disjoint(const mf_tensor *a, const mf_tensor *b) {
    const int64_t na = mf_tensor_span_bytes(a), nb = mf_tensor_span_bytes(b);
    if (na == 0 || nb == 0) return true;
    const intptr_t pa = (intptr_t)a->data, pb = (intptr_t)b->data;
    if (!(pa < pb + nb && pb < pa + na)) return true;
    // Interleaved along dim 0: a's bytes lie in [pa + tR, pa + tR + ea) and
    // b's in [pb + sR, pb + sR + eb) for integers t, s. With d = (pb - pa) mod R,
    // no two such intervals meet iff ea <= d and d + eb <= R.
    const int64_t ra = a->shape[0] > 1 ? a->stride[0] * (int64_t)mf_dtype_size(a->dtype) : 0;
    const int64_t rb = b->shape[0] > 1 ? b->stride[0] * (int64_t)mf_dtype_size(b->dtype) : 0;
    const int64_t R = ra ? ra : rb;
    if (R <= 0 || (ra && ra != R) || (rb && rb != R)) return false;
    const int64_t ea = row_extent(a), eb = row_extent(b);
    if (ea > R || eb > R) return false;
    int64_t d = (int64_t)(pb - pa) % R;
    if (d < 0) d += R;
    return d >= ea && d + eb <= R;
}

mf_status mf_check_apart(const mf_tensor *a, const mf_tensor *b, const char *op, const char *na, const char *nb) {
    if (mf_views_same(a, b) || mf_views_disjoint(a, b)) return MF_OK;
    return mf_fail(MF_ERR_INVALID_ARG, "%s: %s and %s overlap in memory without being the same view", op, na, nb);
}

mf_status mf_check_no_self_overlap(const mf_tensor *t, const char *op, const char *name) {
    if (mf_view_no_self_overlap(t)) return MF_OK;
    char dims[160];
    size_t len = 0;
    for (int d = 0; d < t->ndim && len < sizeof dims; d++)
        len += (size_t)snprintf(dims + len, sizeof dims - len, "%s%lld:%lld", d ? ", " : "", (long long)t->shape[d],
                                (long long)t->stride[d]);
    return mf_fail(MF_ERR_INVALID_ARG,
                   "%s: %s's elements overlap in memory (shape:stride %s), so writes through it would race", op,
                   name, dims);
}
