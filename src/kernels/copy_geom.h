// Internal: the geometry of an mf_copy call, shared by src/cpu/copy.c and
// src/cuda/elementwise/copy.cu. Dims of size 1 are dropped and neighbouring dims that are
// contiguous with each other in both src and dst are merged, so that e.g. a
// KV-cache write of a (T, KVH, D) block becomes T rows of KVH * D elements and
// a contiguous copy becomes one row. Dims keep their order (the last is the
// innermost in dst's logical order). Plain C, also compiled as CUDA C++.
#ifndef MF_KERNELS_COPY_GEOM_H
#define MF_KERNELS_COPY_GEOM_H

#include <stdint.h>

#include "minfer/ops.h"

typedef struct {
    int ndim;                  // 1..MF_MAX_DIMS after collapsing
    int64_t shape[MF_MAX_DIMS];
    int64_t ss[MF_MAX_DIMS];   // src strides (elements); may be 0 (broadcast reads)
    int64_t ds[MF_MAX_DIMS];   // dst strides (elements)
    int64_t numel;
} mf_copy_geom;

// Fills g from validated args (same shapes, numel > 0).
static inline void mf_copy_geom_of(const mf_copy_args *p, mf_copy_geom *g) {
    const mf_tensor *s = &p->src, *d = &p->dst;
    int n = 0; // dims kept so far, innermost first in the temporaries below
    int64_t sh[MF_MAX_DIMS], ss[MF_MAX_DIMS], ds[MF_MAX_DIMS];
    g->numel = 1;
    for (int k = s->ndim - 1; k >= 0; k--) {
        const int64_t size = s->shape[k];
        g->numel *= size;
        if (size == 1) continue;
        if (n > 0 && s->stride[k] == sh[n - 1] * ss[n - 1] && d->stride[k] == sh[n - 1] * ds[n - 1]) {
            sh[n - 1] *= size; // dim k continues the dim inside it in both views: merge
            continue;
        }
        sh[n] = size, ss[n] = s->stride[k], ds[n] = d->stride[k];
        n++;
    }
    if (n == 0) { // a single element
        sh[0] = 1, ss[0] = 1, ds[0] = 1;
        n = 1;
    }
    g->ndim = n;
    for (int k = 0; k < MF_MAX_DIMS; k++) {
        const bool used = k < n;
        g->shape[k] = used ? sh[n - 1 - k] : 1;
        g->ss[k] = used ? ss[n - 1 - k] : 0;
        g->ds[k] = used ? ds[n - 1 - k] : 0;
    }
}

// Both views run with unit stride along the innermost collapsed dim.
static inline bool mf_copy_rows_contiguous(const mf_copy_geom *g) {
    return g->ss[g->ndim - 1] == 1 && g->ds[g->ndim - 1] == 1;
}

#endif // MF_KERNELS_COPY_GEOM_H
