// CPU fused scale + mask + softmax: y = softmax(scale * x + bias + mask).
// One row per OpenMP iteration. Rows of at most kRowMax visible columns
// are kept whole in f32, so exp runs once per element:
//   1. u = scale * x + bias per block of kBlk columns, and its max m;
//   2. u = exp(u - m) in place, and their sum s;
//   3. y = u / s, narrowed to y's dtype.
// Longer rows take two passes with blocks of kBlk columns:
//   1. online max/sum: the running sum is rescaled whenever the max grows;
//   2. normalise: recompute u per block, y = exp(u - max) / sum.
// Keys j >= limit (causal, key_lens) are masked: never read, written as 0.
// Blocks are converted to f32 first so that the math loops are plain f32 and
// vectorise (f32 input skips the conversion); exp is a branch-free polynomial.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "cpu/cpu.h"
#include "cpu/vmath.h"
#include "kernels/softmax_geom.h"

// kBlk: columns per block (the f32 scratch, 2 KB, stays in L1). kRowMax:
// the longest row kept whole (1 MB of f32 per thread; the op is compute-bound
// here, so even a row past L2 gains from one exp per element: 131072
// columns took 4.8 ms against the two-pass path's 8.1).
enum { kBlk = 256, kRowMax = 262144 };

static void store_zeros(void *dst, mf_dtype dt, int64_t off, int64_t n) {
    if (n > 0) memset((char *)dst + off * (int64_t)mf_dtype_size(dt), 0, (size_t)n * mf_dtype_size(dt));
}

// One row's pointers and constants.
typedef struct {
    const mf_softmax_args *p;
    int64_t xo, yo, bo; // element offsets of the row in x, y, bias
    bool bias_cols;     // bias varies along keys (stride 1); else a per-row constant c
    float c;            // the per-row constant bias term (0 when it is finite: it cancels)
} row_ctx;

// u[0..n) = scale * x + bias over columns j0 .. j0+n of the row.
MF_CPU_HOT static void row_logits(const row_ctx *rc, int64_t j0, int64_t n, float *u, float *tmp) {
    const mf_softmax_args *p = rc->p;
    const float scale = p->scale;
    mf_cpu_to_f32(u, p->x.data, p->x.dtype, rc->xo + j0, n);
    if (rc->bias_cols) {
        mf_cpu_to_f32(tmp, p->bias->data, p->bias->dtype, rc->bo + j0, n);
        for (int64_t j = 0; j < n; j++) u[j] = u[j] * scale + tmp[j];
    } else {
        const float c = rc->c;
        for (int64_t j = 0; j < n; j++) u[j] = u[j] * scale + c;
    }
}

// Row max of u[0..n) (vectorised: vmath.h's loop inside a clone).
MF_CPU_HOT static float row_max(const float *u, int64_t n) { return mf_row_max(u, n); }

// u[0..n) = exp(u - m) in place; returns their sum (eight partial sums, so
// that it vectorises).
MF_CPU_HOT static float exp_sum(float *u, int64_t n, float m) {
    float s[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) s[l] += u[j + l] = mf_exp_nonpos(u[j + l] - m);
    for (; j < n; j++) s[0] += u[j] = mf_exp_nonpos(u[j] - m);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
// u[0..n) *= inv.
MF_CPU_HOT static void scale_row(float *u, int64_t n, float inv) {
    for (int64_t j = 0; j < n; j++) u[j] *= inv;
}

// Row r; whole: kRowMax floats of scratch for the one-exp path (NULL: blocks only).
static void softmax_row(const mf_softmax_args *p, const mf_softmax_geom *g, int64_t r, float *whole) {
    float u[kBlk], tmp[kBlk];
    const int64_t i = r % g->q_len, bh = r / g->q_len, h = bh % g->heads, b = bh / g->heads;
    const int64_t cols = g->k_len;
    row_ctx rc = {p, b * g->xs[0] + h * g->xs[1] + i * g->xs[2], b * g->ys[0] + h * g->ys[1] + i * g->ys[2], 0,
                  false, 0.0f};
    int32_t kl = p->key_lens ? ((const int32_t *)p->key_lens->data)[b * g->kls] : 0;
    const int64_t lim = mf_softmax_limit(g, p->causal, p->key_lens != NULL, i, kl);
    if (p->bias) {
        rc.bo = b * g->bs[0] + h * g->bs[1] + i * g->bs[2];
        rc.bias_cols = g->bs[3] != 0;
        if (!rc.bias_cols) {
            // A constant added to a whole row cancels in the softmax; only -inf
            // (row masked), +inf and NaN (row NaN) change the result.
            float c = mf_load_f32(p->bias->data, p->bias->dtype, rc.bo);
            rc.c = isfinite(c) ? 0.0f : c;
        }
    }
    if (whole && lim <= kRowMax) { // the row in f32, exp once (header)
        float m = -INFINITY;
        for (int64_t j0 = 0; j0 < lim; j0 += kBlk) {
            const int64_t n = lim - j0 < kBlk ? lim - j0 : kBlk;
            row_logits(&rc, j0, n, whole + j0, tmp);
            const float bm = row_max(whole + j0, n);
            m = bm > m ? bm : m;
        }
        // me: m, or 0 when m = -inf, so that a row of -inf and NaN sums to 0 or NaN (never skips a NaN)
        const float s = exp_sum(whole, lim, m == -INFINITY ? 0.0f : m);
        scale_row(whole, lim, s == 0.0f ? 0.0f : 1.0f / s); // all masked: zeros; NaN sum: NaN row
        mf_cpu_from_f32(p->y.data, p->y.dtype, rc.yo, whole, lim);
        store_zeros(p->y.data, p->y.dtype, rc.yo + lim, cols - lim);
        return;
    }
    // Pass 1: running max m and sum s of exp(u - me), me = m or 0 while m = -inf
    // (so that a row of -inf and NaN still sums to 0 or NaN, never skips a NaN).
    // s in double: a row of 2^29 columns adds ~10^6 block sums of ~256 to a
    // total near 3e8, where an f32 ulp is 32; in f32 it came out 0.8% low.
    float m = -INFINITY;
    double s = 0.0;
    for (int64_t j0 = 0; j0 < lim; j0 += kBlk) {
        const int64_t n = lim - j0 < kBlk ? lim - j0 : kBlk;
        row_logits(&rc, j0, n, u, tmp);
        const float bm = mf_row_max(u, n);
        if (bm > m) {
            if (s != 0.0) s *= mf_exp_nonpos((m == -INFINITY ? 0.0f : m) - bm);
            m = bm;
        }
        s += exp_sum(u, n, m == -INFINITY ? 0.0f : m); // u is scratch: recomputed in pass 2
    }
    const float me = m == -INFINITY ? 0.0f : m;
    const float inv = s == 0.0 ? 0.0f : (float)(1.0 / s); // all masked: zeros; NaN sum: NaN row
    // Pass 2: normalise (x re-read per block; in place is safe: a block is read before it is written).
    for (int64_t j0 = 0; j0 < lim; j0 += kBlk) {
        const int64_t n = lim - j0 < kBlk ? lim - j0 : kBlk;
        row_logits(&rc, j0, n, u, tmp);
        exp_sum(u, n, me);
        scale_row(u, n, inv);
        mf_cpu_from_f32(p->y.data, p->y.dtype, rc.yo + j0, u, n);
    }
    store_zeros(p->y.data, p->y.dtype, rc.yo + lim, cols - lim);
}

mf_status mf_cpu_softmax(mf_backend *be, const mf_softmax_args *p) {
    (void)be;
    mf_softmax_geom g;
    mf_softmax_geom_of(p, &g);
    const int64_t rows = g.rows;
    // Threads only pay off with some work per call (decode-sized calls stay
    // serial). Each thread's row scratch: without it (out of memory), rows
    // take the block path, which needs none.
#pragma omp parallel if (rows > 1 && rows * g.k_len >= 32768)
    {
        float *whole = mf_malloc((size_t)(g.k_len < kRowMax ? g.k_len : kRowMax) * sizeof(float) + 1);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) softmax_row(p, &g, r, whole);
        free(whole);
    }
    return MF_OK;
}
