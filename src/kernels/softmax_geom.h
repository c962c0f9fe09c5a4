// Internal: the geometry of an mf_softmax call, shared by src/ops/softmax.c
// (validation), src/cpu/softmax.c and src/cuda/softmax/softmax.cu (kernels).
// A 2-D (rows, cols) call is seen as batch = heads = 1, q_len = rows.
// Row r of the batch*heads*q_len rows is (b, h, i) with
//   r = (b * heads + h) * q_len + i,   its element j at  b*s[0] + h*s[1] + i*s[2] + j.
// Strides of size-1 dims are set to 0 (they are never multiplied by a non-zero
// index), so a broadcast bias dim is simply a stride-0 dim.
// Plain C, also compiled as CUDA C++.
#ifndef MF_KERNELS_SOFTMAX_GEOM_H
#define MF_KERNELS_SOFTMAX_GEOM_H

#include <stdint.h>

#include "minfer/ops.h"

typedef struct {
    int64_t batch, heads, q_len, k_len; // rows = batch * heads * q_len, cols = k_len
    int64_t rows;
    int64_t xs[3], ys[3]; // x, y strides (elements) of the batch, head and query dims
    int64_t bs[4];        // bias strides of batch, head, query, key dims; 0 = broadcast
    int64_t kls;          // key_lens stride (elements)
} mf_softmax_geom;

static inline int64_t mf_softmax_stride_(const mf_tensor *t, int d) {
    return t->shape[d] == 1 ? 0 : t->stride[d];
}

// Fills g from validated args (x and y have ndim 2 or 4 and equal shapes).
static inline void mf_softmax_geom_of(const mf_softmax_args *p, mf_softmax_geom *g) {
    const mf_tensor *x = &p->x, *y = &p->y;
    int nd = x->ndim;
    for (int d = 0; d < 3; d++) g->xs[d] = g->ys[d] = 0;
    for (int d = 0; d < 4; d++) g->bs[d] = 0;
    if (nd == 2) {
        g->batch = g->heads = 1;
        g->q_len = x->shape[0];
        g->k_len = x->shape[1];
        g->xs[2] = mf_softmax_stride_(x, 0);
        g->ys[2] = mf_softmax_stride_(y, 0);
        if (p->bias) {
            g->bs[2] = mf_softmax_stride_(p->bias, 0);
            g->bs[3] = mf_softmax_stride_(p->bias, 1);
        }
    } else {
        g->batch = x->shape[0];
        g->heads = x->shape[1];
        g->q_len = x->shape[2];
        g->k_len = x->shape[3];
        for (int d = 0; d < 3; d++) {
            g->xs[d] = mf_softmax_stride_(x, d);
            g->ys[d] = mf_softmax_stride_(y, d);
        }
        if (p->bias)
            for (int d = 0; d < 4; d++) g->bs[d] = mf_softmax_stride_(p->bias, d);
    }
    g->rows = g->batch * g->heads * g->q_len;
    g->kls = p->key_lens ? mf_softmax_stride_(p->key_lens, 0) : 0;
}

// Number of leading keys row (b, i) may see from the causal and padding masks:
// keys j >= the limit are masked. key_len is key_lens[b] (ignored if !has_kl).
static inline int64_t mf_softmax_limit(const mf_softmax_geom *g, int causal, int has_kl, int64_t i,
                                       int32_t key_len) {
    int64_t lim = g->k_len;
    if (causal) {
        int64_t c = i + g->k_len - g->q_len + 1;
        if (c < lim) lim = c;
    }
    if (has_kl && (int64_t)key_len < lim) lim = key_len;
    return lim < 0 ? 0 : lim;
}

#endif // MF_KERNELS_SOFTMAX_GEOM_H
