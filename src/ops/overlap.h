// Internal: overlap tests for strided views, finer than check.h's span test.
// Ops that write in place through strided views need them: the q and k slices
// of one fused QKV GEMM output, or the gate and up halves of one gate|up
// output, have overlapping spans (first to last byte) but no common element.
#ifndef MF_OPS_OVERLAP_H
#define MF_OPS_OVERLAP_H

#include "core/error.h"
#include "minfer/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// True when no two elements of t share a byte (writes through t cannot race):
// the dims of size > 1, taken by increasing stride, each step over the span of
// the dims inside it. Sufficient, not necessary (some interleaved views fail).
// A stride 0 on a dim of size > 1 is a self-overlap.
bool mf_view_no_self_overlap(const mf_tensor *t);

// True when a and b provably share no byte: their spans are disjoint, or they
// interleave along dim 0 (both advance by the same byte stride R per index of
// dim 0, and each index's bytes of one view lie in the gap that the other view
// leaves inside each R-byte period). Sufficient, not necessary.
bool mf_views_disjoint(const mf_tensor *a, const mf_tensor *b);

// Same data, dtype, shape and strides (strides of size-1 dims ignored).
bool mf_views_same(const mf_tensor *a, const mf_tensor *b);

// MF_OK when a and b are the same view or provably disjoint; else
// MF_ERR_INVALID_ARG "<op>: <na> and <nb> overlap in memory without being the same view".
mf_status mf_check_apart(const mf_tensor *a, const mf_tensor *b, const char *op, const char *na, const char *nb);

// MF_ERR_INVALID_ARG naming the shape and strides unless mf_view_no_self_overlap(t).
mf_status mf_check_no_self_overlap(const mf_tensor *t, const char *op, const char *name);

#ifdef __cplusplus
}
#endif
#endif // MF_OPS_OVERLAP_H
