// Fused scale + mask + softmax cases (mf_softmax).
//
// Inputs. Each row of x is one of: ordinary values uniform in [-6, 6)/scale
// (logits spread over ~12, so many outputs matter); the same with ~1/16 of
// the elements replaced by +-1e4 (outliers: the row's max and sum must not
// overflow, the rest must not lose precision); or a run of -inf of random
// length (a quarter of those: the whole row). The additive bias is uniform
// in [-2, 2) with -inf runs and some all -inf rows; key_lens are drawn from
// {-1, 0, 1, k_len/2, k_len - 1, k_len, k_len + 5}; a NaN case puts one NaN at
// a visible column of one row, and every third row has NaN at all its masked
// keys (which must be ignored). Pointers may be offset by an element from
// 16-byte alignment (x and y by different amounts), rows padded, heads
// interleaved (a (b, q, h, k) layout seen as (b, h, q, k)), y in place.
//
// Reference in double from the stored inputs: u_j = scale x_j + bias_j for
// visible keys (j < lim), p_j = exp(u_j - M) / S. A row with a NaN among its
// visible logits is NaN there; masked keys and rows whose logits are all -inf
// are 0.
//
// Tolerance, per element j of a row, with u32 = 2^-24 and n the visible keys:
//   R_k   = u32 (|s x_k| if scale is not a power of two) + u32 |u_k| (if a bias is added):
//           rounding of the f32 logit (none for s x with s = 2^k and no bias)
//   d_k   = R_k + R_M + 2 u32 |u_k - M| + 4 u32  error of the exponent (M: the max;
//           the difference and its product with log2 e round once each, exp itself ~2 ulp)
//   rel_j = d_j + sum_k p_k d_k + (16 + 2 sqrt(n)) u32 + 4 u32 + eps_y
//           (the sum's error spreads to every element; a length-n f32 sum grows
//           like the random-walk bound; 1 / S and the product; one rounding to y)
//   |y_j - p_j| <= rel_j p_j + 2^-125 + tiny_y   (exp flushes below 2^-126 to 0)
// i.e. f32 math from the stored inputs, one rounding to y's dtype; for
// ordinary rows that is ~1e-6 relative (f32 y), 2^-11 (f16), 2^-8 (bf16).
// A scale or mask applied wrongly, a stale max, a lost rescale of the
// running sum or an off-by-one in the causal limit shows as O(1) errors.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "cuda/cuda_query.h"

enum { M_CAUSAL = 1, M_KL = 2, M_BIAS = 4 };

typedef enum {
    BB_FULL = 0,    // (b, h, q, k)
    BB_QK = 1,      // (1, 1, q, k): broadcast over batch and heads
    BB_BQK = 2,     // (b, 1, q, k): over heads
    BB_ROW = 3,     // (b, h, q, 1): one value per row, broadcast along keys
    BB_STRIDE0 = 4, // (b, h, q, k) with head stride 0
} bias_kind;
static const char *const bias_names[] = {"full", "qk", "bqk", "row", "h0"};

typedef struct {
    mf_dtype xt, yt, bt;
    bool four;                          // 4-D (batch, heads, q_len, k_len); else 2-D (q_len, k_len)
    int64_t batch, heads, q_len, k_len; // 2-D: batch = heads = 1
    int mask;                           // M_* bits
    bias_kind bias;
    float scale;
    int64_t pad;                        // x and y row stride = k_len + pad
    bool bqhk;                          // x's heads interleaved: strides of a (b, q, h, k) tensor
    int xoff, yoff;                     // elements x (and bias) / y start past a 16-byte boundary
    bool inplace;                       // y is x (same view)
    bool want;                          // CUDA: check the plan's variant (rows / cluster; see check_variant)
    bool nan_row;                       // one NaN at a visible column of one row
    int64_t inf_head;                   // x columns [0, inf_head) -inf in every row (nan_row: the NaN goes last)
} sm_p;

// A view's element offset of (b, h, i, j); size-1 dims broadcast.
static int64_t off4(const mf_tensor *t, int64_t b, int64_t h, int64_t i, int64_t j) {
    int64_t idx[4] = {b, h, i, j};
    int64_t off = 0;
    int d0 = 4 - t->ndim; // a 2-D view is (i, j)
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1) off += idx[d + d0] * t->stride[d];
    return off;
}

// A view of `shape`/`stride` starting `off` elements into its own new buffer.
static th_buf *offset_tensor(th_ctx *ctx, mf_dtype dt, int nd, const int64_t *shape, const int64_t *stride, int off,
                             mf_tensor *view) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n += (shape[d] - 1) * stride[d];
    th_buf *b = th_buf_new(ctx, dt, n + off);
    *view = th_view(ctx, b, nd, shape, stride);
    view->data = (char *)view->data + (size_t)off * mf_dtype_size(dt);
    return b;
}

// Strides of a (b, h, q, k) view with row stride ld; bqhk: heads interleaved.
static void strides_of(const sm_p *p, int64_t ld, bool bqhk, int64_t *st) {
    if (!p->four) {
        st[0] = ld, st[1] = 1;
        return;
    }
    st[3] = 1;
    if (bqhk) {
        st[1] = ld, st[2] = p->heads * ld, st[0] = p->q_len * p->heads * ld;
    } else {
        st[2] = ld, st[1] = p->q_len * ld, st[0] = p->heads * p->q_len * ld;
    }
}

// Keys row (b, i) sees: j < limit.
static int64_t limit_of(const sm_p *p, const int32_t *klv, int64_t b, int64_t i) {
    int64_t lim = p->k_len;
    if ((p->mask & M_CAUSAL) && i + p->k_len - p->q_len + 1 < lim) lim = i + p->k_len - p->q_len + 1;
    if (klv && klv[b] < lim) lim = klv[b];
    return lim < 0 ? 0 : lim;
}

#ifdef MF_HAVE_CUDA
// The variant the CUDA plan must pick for a case of section 8 (2-D or 4-D
// contiguous rows, x and y offset alike): "rows" up to 1024 chunks of 8
// columns (one more when rows are not all 16-byte aligned), then "cluster"
// when the GPU's largest cluster holds ceil(chunks / 1024) blocks, else a
// streaming variant ("online" or "split"). An sm_90+ GPU must offer
// clusters of at least 8 blocks to rows without a bias along keys, so that
// the cluster path cannot go untested by quietly planning none.
static bool check_variant(th_ctx *ctx, const sm_p *p, const mf_softmax_args *a) {
    if (mf_backend_device(ctx->be) != MF_DEVICE_CUDA) return true;
    const bool bcol = (p->mask & M_BIAS) && p->bias != BB_ROW;
    int cc = 0;
    const int most = mf_cuda_softmax_clusters(ctx->be, bcol, &cc);
    const char *got = mf_cuda_softmax_variant(ctx->be, a);
    printf("  .. [cuda] %s: variant %s (largest cluster %d blocks, sm_%d)\n", ctx->case_name, got ? got : "none",
           most, cc);
    if (!got) {
        th_fail(ctx, "no variant: %s", mf_last_error());
        return false;
    }
    if (cc >= 90 && !bcol && most < 8) {
        th_fail(ctx, "sm_%d GPU, but the rows kernel gets clusters of %d blocks at most (want >= 8)", cc, most);
        return false;
    }
    const int64_t K = p->k_len;
    bool aligned = p->xoff == 0 && p->yoff == 0 && (K * (int64_t)mf_dtype_size(p->xt)) % 16 == 0 &&
                   (K * (int64_t)mf_dtype_size(p->yt)) % 16 == 0;
    if (bcol) aligned = aligned && (K * (int64_t)mf_dtype_size(p->bt)) % 16 == 0;
    const int64_t chunks = (K + 7) / 8 + (aligned ? 0 : 1), cs = (chunks + 1023) / 1024;
    const bool ok = chunks <= 1024        ? !strcmp(got, "rows")
                    : cs <= (int64_t)most ? !strcmp(got, "cluster")
                                          : !strcmp(got, "online") || !strcmp(got, "split");
    if (!ok) th_fail(ctx, "variant %s for %lld chunks per row (cluster of %lld; the GPU's largest %d)", got,
                     (long long)chunks, (long long)cs, most);
    return ok;
}
#endif

static bool pow2(float s) {
    int e;
    return frexpf(fabsf(s), &e) == 0.5f;
}

static th_result run_softmax(th_ctx *ctx, const void *params) {
    const sm_p *p = params;
    const int nd = p->four ? 4 : 2;
    const int64_t B = p->batch, H = p->heads, Q = p->q_len, K = p->k_len, rows = B * H * Q;
    int64_t shape[4], st[4];
    if (p->four)
        shape[0] = B, shape[1] = H, shape[2] = Q, shape[3] = K;
    else
        shape[0] = Q, shape[1] = K;
    mf_softmax_args a = {.scale = p->scale, .causal = (p->mask & M_CAUSAL) != 0};

    // x (and y when in place)
    strides_of(p, K + p->pad, p->bqhk, st);
    th_buf *bx = offset_tensor(ctx, p->xt, nd, shape, st, p->xoff, &a.x);
    const double span = 6.0 / p->scale;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = r % Q, h = r / Q % H, b = r / Q / H;
        const int kind = (int)th_rng_int(&ctx->rng, 5); // 0, 1, 4: ordinary; 2: outliers; 3: -inf run
        int64_t ninf0 = 0, ninf1 = 0;
        if (kind == 3) {
            int64_t len = th_rng_int(&ctx->rng, 4) == 0 ? K : 1 + th_rng_int(&ctx->rng, K);
            ninf0 = th_rng_int(&ctx->rng, K - len + 1);
            ninf1 = ninf0 + len;
        }
        for (int64_t j = 0; j < K; j++) {
            double v = th_rng_unif(&ctx->rng, -span, span);
            if (kind == 2 && th_rng_int(&ctx->rng, 16) == 0) v += th_rng_int(&ctx->rng, 2) ? 1e4 : -1e4;
            if ((j >= ninf0 && j < ninf1) || j < p->inf_head) v = -INFINITY;
            th_set(bx, p->xoff + off4(&a.x, b, h, i, j), v);
        }
    }

    // bias
    mf_tensor bias, kl;
    th_buf *bb = NULL, *bk = NULL;
    if (p->mask & M_BIAS) {
        int64_t bshape[4], bst[4];
        for (int d = 0; d < nd; d++) bshape[d] = shape[d];
        if (p->bias == BB_QK) {
            for (int d = 0; d < nd - 2; d++) bshape[d] = 1;
            if (!p->four) bshape[0] = 1; // 2-D: one key row for every query
        }
        if (p->bias == BB_BQK && p->four) bshape[1] = 1;
        if (p->bias == BB_ROW) bshape[nd - 1] = 1;
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) bst[d] = s, s *= bshape[d];
        if (p->bias == BB_STRIDE0 && p->four) bst[1] = 0, bst[0] = Q * K;
        bb = offset_tensor(ctx, p->bt, nd, bshape, bst, p->xoff, &bias);
        int64_t brows = 1;
        for (int d = 0; d < nd - 1; d++) brows *= bshape[d];
        const int64_t bcols = bshape[nd - 1];
        for (int64_t r = 0; r < brows; r++) {
            const int kind = (int)th_rng_int(&ctx->rng, 6); // 0: all -inf; 1: a -inf run; else ordinary
            int64_t n0 = 0, n1 = kind == 0 ? bcols : 0;
            if (kind == 1) {
                n0 = th_rng_int(&ctx->rng, bcols);
                n1 = n0 + 1 + th_rng_int(&ctx->rng, bcols - n0);
            }
            for (int64_t j = 0; j < bcols; j++) {
                int64_t off = 0, rr = r;
                for (int d = nd - 2; d >= 0; d--) off += (rr % bshape[d]) * bst[d], rr /= bshape[d];
                th_set(bb, p->xoff + off + j * bst[nd - 1], j >= n0 && j < n1 ? -INFINITY : th_rng_unif(&ctx->rng, -2, 2));
            }
        }
        a.bias = &bias;
    }
    if (p->mask & M_KL) {
        bk = th_tensor(ctx, MF_DTYPE_I32, 1, &B, NULL, &kl);
        const int64_t choice[7] = {-1, 0, 1, K / 2, K - 1, K, K + 5};
        for (int64_t b = 0; b < B; b++) th_set(bk, b, (double)choice[th_rng_int(&ctx->rng, 7)]);
        a.key_lens = &kl;
    }
    const int32_t *klv = bk ? (const int32_t *)bk->host : NULL;

    for (int64_t r = 1; r < rows; r += 3) { // masked keys are ignored: poison them with NaN in every third row
        const int64_t i = r % Q, h = r / Q % H, b = r / Q / H;
        for (int64_t j = limit_of(p, klv, b, i); j < K; j++) th_set(bx, p->xoff + off4(&a.x, b, h, i, j), NAN);
    }
    if (p->nan_row) { // the first row with visible keys, at a random visible column
        for (int64_t r = rows / 2; r < rows + rows / 2; r++) {
            const int64_t rr = r % rows, i = rr % Q, h = rr / Q % H, b = rr / Q / H, lim = limit_of(p, klv, b, i);
            if (lim > 0) {
                th_set(bx, p->xoff + off4(&a.x, b, h, i, p->inf_head ? lim - 1 : th_rng_int(&ctx->rng, lim)), NAN);
                break;
            }
        }
    }

    // y
    th_buf *by;
    if (p->inplace) {
        by = bx;
        a.y = a.x;
    } else {
        strides_of(p, K + p->pad, false, st);
        by = offset_tensor(ctx, p->yt, nd, shape, st, p->yoff, &a.y);
    }
    const int64_t yoff = p->inplace ? p->xoff : p->yoff;

    // Reference over the whole y buffer: elements outside the view keep their
    // initial value (poison, or x's padding when in place).
    double *ref = th_scratch(ctx, (size_t)by->n * sizeof(double));
    double *bnd = th_scratch(ctx, (size_t)by->n * sizeof(double));
    for (int64_t e = 0; e < by->n; e++) ref[e] = th_get(by, e);
    double *u = th_scratch(ctx, (size_t)K * sizeof(double)), *d = th_scratch(ctx, (size_t)K * sizeof(double));
    const double u32 = 0x1.0p-24, ey = th_eps(p->yt), tiny = 0x1.0p-125 + th_tiny(p->yt);
    const bool sp2 = pow2(p->scale);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = r % Q, h = r / Q % H, b = r / Q / H, lim = limit_of(p, klv, b, i);
        double M = -INFINITY;
        bool nan = false;
        int64_t am = -1;
        for (int64_t j = 0; j < lim; j++) {
            const double sx = (double)p->scale * th_get(bx, p->xoff + off4(&a.x, b, h, i, j));
            double uj = sx, R = sp2 ? 0.0 : u32 * fabs(sx);
            if (bb) {
                uj += th_get(bb, p->xoff + off4(&bias, b, h, i, j));
                R += u32 * fabs(uj);
            } else if (!sp2) {
                R = u32 * fabs(uj);
            }
            u[j] = uj;
            d[j] = isfinite(R) ? R : 0.0;
            if (isnan(uj)) nan = true;
            if (uj > M) M = uj, am = j;
        }
        double S = 0.0;
        if (M > -INFINITY && !nan)
            for (int64_t j = 0; j < lim; j++) S += exp(u[j] - M);
        double avg = 0.0; // sum_k p_k d_k
        const double RM = am >= 0 ? d[am] : 0.0;
        if (S > 0)
            for (int64_t j = 0; j < lim; j++) {
                if (u[j] == -INFINITY) continue;
                d[j] += RM + 2 * u32 * fabs(u[j] - M) + 4 * u32;
                avg += exp(u[j] - M) / S * d[j];
            }
        const double g = (16.0 + 2.0 * sqrt((double)lim)) * u32 + 4 * u32 + ey;
        for (int64_t j = 0; j < K; j++) {
            const int64_t e = yoff + off4(&a.y, b, h, i, j);
            double pj = 0.0, bj = tiny;
            if (j < lim) {
                if (nan) {
                    pj = NAN;
                } else if (S > 0 && u[j] > -INFINITY) {
                    pj = exp(u[j] - M) / S;
                    bj = (d[j] + avg + g) * pj + tiny;
                }
            }
            ref[e] = pj;
            bnd[e] = bj;
        }
    }

#ifdef MF_HAVE_CUDA
    if (p->want && !check_variant(ctx, p, &a)) return TH_FAIL;
#endif
    TH_CALL(ctx, mf_softmax(ctx->be, &a));
    mf_tensor flat = th_view(ctx, by, 1, &by->n, NULL);
    return th_check(ctx, by, &flat, ref, bnd, "y") ? TH_PASS : TH_FAIL;
}

static void add_case(th_list *l, const sm_p *p) {
    char dts[32], shp[80], msk[64] = "", lay[64] = "";
    if (p->xt == p->yt)
        snprintf(dts, sizeof dts, "dtype=%s", mf_dtype_name(p->xt));
    else
        snprintf(dts, sizeof dts, "x=%s,y=%s", mf_dtype_name(p->xt), mf_dtype_name(p->yt));
    if (p->four)
        snprintf(shp, sizeof shp, "shape=%lldx%lldx%lldx%lld", (long long)p->batch, (long long)p->heads,
                 (long long)p->q_len, (long long)p->k_len);
    else
        snprintf(shp, sizeof shp, "rows=%lld,cols=%lld", (long long)p->q_len, (long long)p->k_len);
    size_t n = 0;
    if (!p->mask) n += (size_t)snprintf(msk, sizeof msk, "none");
    if (p->mask & M_CAUSAL) n += (size_t)snprintf(msk + n, sizeof msk - n, "causal");
    if (p->mask & M_KL) n += (size_t)snprintf(msk + n, sizeof msk - n, "%skey_lens", n ? "+" : "");
    if (p->mask & M_BIAS)
        n += (size_t)snprintf(msk + n, sizeof msk - n, "%sbias:%s:%s", n ? "+" : "", mf_dtype_name(p->bt),
                              bias_names[p->bias]);
    n = 0;
    if (p->pad) n += (size_t)snprintf(lay + n, sizeof lay - n, ",pad=%lld", (long long)p->pad);
    if (p->bqhk) n += (size_t)snprintf(lay + n, sizeof lay - n, ",order=bqhk");
    if (p->xoff || p->yoff) n += (size_t)snprintf(lay + n, sizeof lay - n, ",offset=%d/%d", p->xoff, p->yoff);
    if (p->inplace) n += (size_t)snprintf(lay + n, sizeof lay - n, ",inplace=1");
    if (p->nan_row) n += (size_t)snprintf(lay + n, sizeof lay - n, ",nan=1");
    if (p->inf_head) n += (size_t)snprintf(lay + n, sizeof lay - n, ",inf_head=%lld", (long long)p->inf_head);
    th_add(l, run_softmax, p, sizeof *p, "softmax(%s,%s,mask=%s,scale=%g%s)", dts, shp, msk, (double)p->scale, lay);
}

static sm_p base_case(mf_dtype t, int64_t rows, int64_t cols) {
    sm_p p = {.xt = t, .yt = t, .bt = MF_DTYPE_F32, .four = false, .batch = 1, .heads = 1, .q_len = rows,
              .k_len = cols, .scale = 1.0f};
    return p;
}

static sm_p four_case(mf_dtype t, int64_t b, int64_t h, int64_t q, int64_t k) {
    sm_p p = base_case(t, q, k);
    p.four = true;
    p.batch = b, p.heads = h;
    return p;
}

// ---- argument validation -----------------------------------------------------------

static th_result run_validation(th_ctx *ctx, const void *params) {
    (void)params;
    const int64_t s4[4] = {2, 3, 4, 8}, s2[2] = {4, 8}, s3[3] = {2, 4, 8};
    mf_tensor x, y, y2, x2, x3, bias, kl, klf, z;
    th_buf *bx = th_tensor(ctx, MF_DTYPE_F32, 4, s4, NULL, &x);
    th_tensor(ctx, MF_DTYPE_BF16, 4, s4, NULL, &y);
    th_tensor(ctx, MF_DTYPE_F32, 2, s2, NULL, &x2);
    th_tensor(ctx, MF_DTYPE_F32, 2, s2, NULL, &y2);
    th_tensor(ctx, MF_DTYPE_F32, 3, s3, NULL, &x3);
    const int64_t two = 2, four = 4;
    th_tensor(ctx, MF_DTYPE_I32, 1, &two, NULL, &kl);
    th_tensor(ctx, MF_DTYPE_F32, 1, &two, NULL, &klf);
    bool ok = true;
    mf_softmax_args a = {.x = x, .y = y, .scale = 1.0f};
    mf_softmax_args t;
#define TRY(mod, want, needle, what)                                                 \
    do {                                                                             \
        t = a;                                                                       \
        mod;                                                                         \
        ok &= th_expect(ctx, mf_softmax(ctx->be, &t), want, needle, what);              \
    } while (0)
    ok &= th_expect(ctx, mf_softmax(ctx->be, NULL), MF_ERR_INVALID_ARG, "args is NULL", "NULL args");
    ok &= th_expect(ctx, mf_softmax(NULL, &a), MF_ERR_INVALID_ARG, "backend is NULL", "NULL backend");
    TRY(t.x = x3, MF_ERR_INVALID_ARG, "x has 3 dims", "3-D x");
    TRY(t.y = y2, MF_ERR_INVALID_ARG, "y has 2 dims", "2-D y for 4-D x");
    TRY(t.y.shape[2] = 3, MF_ERR_INVALID_ARG, "y shape[2] (q_len) = 3", "y shape");
    TRY(t.x.stride[3] = 2, MF_ERR_UNSUPPORTED, "x stride[-1] = 2", "x column stride");
    TRY(t.x.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "x dtype i32", "i32 x");
    TRY(t.scale = NAN, MF_ERR_INVALID_ARG, "scale", "NaN scale");
    TRY(t.scale = INFINITY, MF_ERR_INVALID_ARG, "scale", "inf scale");
    TRY(t.y.stride[2] = 4, MF_ERR_INVALID_ARG, "overlap", "y rows overlap");
    TRY(t.y = t.x; t.y.data = (char *)t.x.data + 4, MF_ERR_INVALID_ARG, "overlap", "y partly overlaps x");
    TRY(t.key_lens = &klf, MF_ERR_INVALID_ARG, "key_lens dtype f32", "f32 key_lens");
    mf_tensor kl3 = kl;
    kl3.shape[0] = 3;
    mf_tensor kl2d = kl;
    kl2d.ndim = 2, kl2d.shape[1] = 1, kl2d.stride[1] = 1;
    TRY(t.key_lens = &kl3, MF_ERR_INVALID_ARG, "key_lens has 3 entries (want batch = 2)", "key_lens length");
    TRY(t.key_lens = &kl2d, MF_ERR_INVALID_ARG, "key_lens has 2 dims", "2-D key_lens");
    mf_tensor kl4;
    th_tensor(ctx, MF_DTYPE_I32, 1, &four, NULL, &kl4);
    TRY(t.x = x2; t.y = y2; t.key_lens = &kl4, MF_ERR_INVALID_ARG, "4-D", "key_lens with a 2-D x");
    int64_t bs[4] = {1, 2, 4, 8};
    th_tensor(ctx, MF_DTYPE_BF16, 4, bs, NULL, &bias);
    TRY(t.bias = &bias, MF_ERR_INVALID_ARG, "bias shape[1] (heads) = 2 is not broadcastable", "bias heads 2 vs 3");
    mf_tensor b2 = bias;
    b2.ndim = 2;
    TRY(t.bias = &b2, MF_ERR_INVALID_ARG, "bias has 2 dims", "bias ndim");
    int64_t bs1[4] = {1, 1, 4, 8};
    mf_tensor bias1;
    th_tensor(ctx, MF_DTYPE_BF16, 4, bs1, NULL, &bias1);
    mf_tensor bias_s2 = bias1;
    bias_s2.stride[3] = 2, bias_s2.shape[3] = 4;
    TRY(t.bias = &bias_s2, MF_ERR_INVALID_ARG, "not broadcastable", "bias keys 4 vs 8");
    bias_s2.shape[3] = 8;
    TRY(t.bias = &bias_s2, MF_ERR_UNSUPPORTED, "bias stride[-1] = 2", "bias column stride");
    mf_tensor bi32 = bias1;
    bi32.dtype = MF_DTYPE_I32;
    TRY(t.bias = &bi32, MF_ERR_INVALID_ARG, "bias dtype i32", "i32 bias");
    mf_tensor yb = bias1; // an f32 y over the bias's memory
    yb.dtype = MF_DTYPE_F32;
    TRY(t.bias = &bias1; t.y = yb; t.x.shape[0] = 1; t.x.shape[1] = 1, MF_ERR_INVALID_ARG, "y and bias overlap",
        "y over bias");
    // In place on the same view is fine; so is an empty tensor. The valid
    // call reads all of x: it gets values (uploaded; an initcheck run flagged
    // the kernel's reads of the never-written buffer) and its result is checked.
    th_fill_opts fo = th_fill_defaults(MF_DTYPE_F32);
    fo.lo = -6.0, fo.hi = 6.0, fo.outlier = 0;
    th_fill(ctx, bx, &x, &fo);
    const int64_t nx = 2 * 3 * 4 * 8;
    double *ref = th_scratch(ctx, (size_t)nx * sizeof(double)), *bound = th_scratch(ctx, (size_t)nx * sizeof(double));
    for (int64_t r = 0; r < nx / 8; r++) { // rows of 8, scale 1; the f32 bound of the header, loosely (1e-5)
        double M = -INFINITY, S = 0;
        for (int j = 0; j < 8; j++) M = fmax(M, th_get(bx, r * 8 + j));
        for (int j = 0; j < 8; j++) S += exp(th_get(bx, r * 8 + j) - M);
        for (int j = 0; j < 8; j++) {
            ref[r * 8 + j] = exp(th_get(bx, r * 8 + j) - M) / S;
            bound[r * 8 + j] = 1e-5 * ref[r * 8 + j] + 1e-30;
        }
    }
    th_upload_all(ctx);
    TRY(t.y = t.x, MF_OK, NULL, "in place");
    z = x;
    z.shape[2] = 0;
    TRY(t.x = z; t.y = z, MF_OK, NULL, "empty");
    ok &= th_expect(ctx, mf_backend_sync(ctx->be), MF_OK, NULL, "sync");
    ok &= th_check(ctx, bx, &x, ref, bound, "x (in place)");
#undef TRY
    return ok ? TH_PASS : TH_FAIL;
}

// ---- rows * cols > 2^31 (CUDA only: 4.3 GB of output) --------------------------------

static th_result run_int64(th_ctx *ctx, const void *params) {
    (void)params;
    if (mf_backend_device(ctx->be) == MF_DEVICE_CPU) {
        snprintf(ctx->msg, sizeof ctx->msg, "4.3 GB case: CUDA only");
        return TH_SKIP;
    }
    // x: one (1024, 1024) bf16 matrix broadcast over 2049 batches (stride 0);
    // y: (2049, 1, 1024, 1024) bf16, 2^31 + 2^20 elements; causal + per-batch
    // key_lens so that batches differ. Checked: batches 0, 1, 1024, 2047, 2048.
    const int64_t B = 2049, Q = 1024, K = 1024;
    const int64_t xs[2] = {Q, K};
    mf_tensor x1, kl;
    th_buf *bx = th_tensor(ctx, MF_DTYPE_BF16, 2, xs, NULL, &x1);
    for (int64_t e = 0; e < Q * K; e++) th_set(bx, e, th_rng_unif(&ctx->rng, -6, 6));
    th_buf *bk = th_tensor(ctx, MF_DTYPE_I32, 1, &B, NULL, &kl);
    for (int64_t b = 0; b < B; b++) th_set(bk, b, (double)(1 + (b * 389) % (K + 64)));
    const size_t ybytes = (size_t)(B * Q * K) * 2;
    void *yd = NULL;
    if (mf_backend_alloc(ctx->be, ybytes, &yd) != MF_OK) {
        snprintf(ctx->msg, sizeof ctx->msg, "cannot allocate %zu bytes: %s", ybytes, mf_last_error());
        return TH_SKIP;
    }
    th_result res = TH_PASS;
    uint16_t *host = th_scratch(ctx, (size_t)Q * K * 2);
    double *u = th_scratch(ctx, (size_t)K * sizeof(double));
    mf_softmax_args a = {.scale = 0.125f, .causal = true, .key_lens = &kl};
    const int64_t shape[4] = {B, 1, Q, K};
    mf_tensor_make(&a.x, x1.data, MF_DTYPE_BF16, mf_backend_device(ctx->be), 4, shape);
    a.x.stride[0] = 0;
    mf_tensor_make(&a.y, yd, MF_DTYPE_BF16, mf_backend_device(ctx->be), 4, shape);
    th_upload_all(ctx);
    mf_status st = mf_backend_memset(ctx->be, yd, 0xff, ybytes); // NaN poison
    if (st == MF_OK) st = mf_softmax(ctx->be, &a);
    if (st == MF_OK) st = mf_backend_sync(ctx->be);
    if (st != MF_OK) res = th_fail(ctx, "mf_softmax: %s: %s", mf_status_str(st), mf_last_error());
    const int64_t check[5] = {0, 1, 1024, 2047, 2048};
    const int32_t *klv = (const int32_t *)bk->host;
    for (int c = 0; c < 5 && res == TH_PASS; c++) {
        const int64_t b = check[c];
        st = mf_backend_copy(ctx->be, host, (char *)yd + (size_t)(b * Q * K) * 2, (size_t)Q * K * 2, MF_COPY_D2H);
        if (st != MF_OK) {
            res = th_fail(ctx, "download: %s", mf_last_error());
            break;
        }
        for (int64_t i = 0; i < Q && res == TH_PASS; i++) {
            int64_t lim = i + 1 < klv[b] ? i + 1 : klv[b];
            double M = -INFINITY, S = 0;
            for (int64_t j = 0; j < lim; j++) {
                u[j] = 0.125 * th_get(bx, i * K + j);
                if (u[j] > M) M = u[j];
            }
            for (int64_t j = 0; j < lim; j++) S += exp(u[j] - M);
            for (int64_t j = 0; j < K; j++) {
                double ref = j < lim ? exp(u[j] - M) / S : 0.0, got = mf_bf16_to_f32(host[i * K + j]);
                if (!(fabs(got - ref) <= 0x1.0p-8 * 1.05 * ref + 1e-30)) {
                    res = th_fail(ctx, "y[%lld,0,%lld,%lld] = %.6g, ref %.6g", (long long)b, (long long)i,
                                  (long long)j, got, ref);
                    break;
                }
            }
        }
    }
    mf_backend_dealloc(ctx->be, yd);
    return res;
}

// ---- one row past 2^29 f32 columns (CUDA only: 2 GiB in, 2 GiB out) -------------------
// Its chunks' byte offsets pass 2^31 (the online / split kernels; they were
// computed in int until a review caught it). key_lens masks the last 5
// columns. Checked: the first and last 4096 columns and every 4099th. On the
// CPU (MF_TEST_BIG_CPU=1) it caught the two-pass path's f32 running sum,
// 0.8% low at this length (now a double).

static th_result run_long_row(th_ctx *ctx, const void *params) {
    (void)params;
    if (mf_backend_device(ctx->be) == MF_DEVICE_CPU && !getenv("MF_TEST_BIG_CPU")) {
        snprintf(ctx->msg, sizeof ctx->msg, "2 GiB row: CUDA only (MF_TEST_BIG_CPU=1: the CPU too, ~10 GB)");
        return TH_SKIP;
    }
    const int64_t K = ((int64_t)1 << 29) + 24, lim = K - 5;
    const int64_t shape[4] = {1, 1, 1, K}, one = 1;
    mf_tensor x, kl;
    th_buf *bx = th_tensor(ctx, MF_DTYPE_F32, 4, shape, NULL, &x);
    float *hx = (float *)bx->host;
    uint64_t z = 0x9e3779b97f4a7c15ull;
    for (int64_t j = 0; j < K; j++) { // uniform in [-6, 6) by xorshift64: cheap for 5e8 values
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        hx[j] = (float)((double)(z >> 40) * 0x1.0p-24 * 12.0 - 6.0);
    }
    th_buf *bk = th_tensor(ctx, MF_DTYPE_I32, 1, &one, NULL, &kl);
    th_set(bk, 0, (double)lim);
    const size_t ybytes = (size_t)K * 4;
    void *yd = NULL;
    if (mf_backend_alloc(ctx->be, ybytes, &yd) != MF_OK) {
        snprintf(ctx->msg, sizeof ctx->msg, "cannot allocate %zu bytes: %s", ybytes, mf_last_error());
        return TH_SKIP;
    }
    mf_softmax_args a = {.x = x, .scale = 0.125f, .key_lens = &kl};
    mf_tensor_make(&a.y, yd, MF_DTYPE_F32, mf_backend_device(ctx->be), 4, shape);
    th_upload_all(ctx);
    float *host = th_scratch(ctx, ybytes);
    th_result res = TH_PASS;
    mf_status st = mf_backend_memset(ctx->be, yd, 0xff, ybytes); // NaN poison
    if (st == MF_OK) st = mf_softmax(ctx->be, &a);
    if (st == MF_OK) st = mf_backend_sync(ctx->be);
    if (st == MF_OK) st = mf_backend_copy(ctx->be, host, yd, ybytes, MF_COPY_D2H);
    if (st != MF_OK) res = th_fail(ctx, "mf_softmax: %s: %s", mf_status_str(st), mf_last_error());
    // The header's bound with scale 2^-3 (exact logits), |u| <= 0.75: d_k <= 7 u32.
    double M = -INFINITY, S = 0.0;
    for (int64_t j = 0; j < lim; j++) M = fmax(M, 0.125 * hx[j]);
    for (int64_t j = 0; j < lim && res == TH_PASS; j++) S += exp(0.125 * hx[j] - M);
    const double u32 = 0x1.0p-24, rel = 14 * u32 + (16.0 + 2.0 * sqrt((double)lim)) * u32 + 5 * u32;
    for (int64_t j = 0; j < K && res == TH_PASS; j += (j < 4096 || j >= K - 4096) ? 1 : 4099) {
        const double ref = j < lim ? exp(0.125 * hx[j] - M) / S : 0.0, got = host[j];
        if (!(fabs(got - ref) <= rel * ref + 0x1.0p-125))
            res = th_fail(ctx, "y[0,0,0,%lld] = %.9g, ref %.9g (bound %.3g)", (long long)j, got, ref, rel * ref);
    }
    mf_backend_dealloc(ctx->be, yd);
    return res;
}

// ---- the case list -------------------------------------------------------------------

static const mf_dtype dts[3] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};

void th_cases_softmax(th_list *l) {
    // 1. Every row length x mask kind, cycling dtypes, 2-D and 4-D, row counts
    //    and scales. Long rows get few rows (the 1M-column rows: 1 or 2).
    static const int64_t colss[] = {1, 2, 31, 32, 33, 127, 1000, 1024, 1025, 4097, 16385, 65537, 1048576};
    static const int masks[6] = {0, M_CAUSAL, M_KL, M_BIAS, M_BIAS, M_CAUSAL | M_KL};
    for (int ci = 0; ci < 13; ci++)
        for (int mi = 0; mi < 6; mi++) {
            const int64_t cols = colss[ci];
            const mf_dtype t = dts[(ci + mi) % 3];
            sm_p p;
            const int v = ci + mi;
            if (mi % 2 == 0) { // 2-D
                int64_t rows = cols >= 1048576 ? 1 + v % 2 : cols > 20000 ? 3 : cols > 2000 ? 5 : (v % 3 == 0 ? 1 : v % 3 == 1 ? 3 : 37);
                p = base_case(t, rows, cols);
            } else { // 4-D, q_len != k_len
                int64_t q = cols >= 1048576 ? 2 : cols > 2000 ? 3 : cols > 40 ? 7 : 3 + cols;
                p = four_case(t, cols >= 65537 ? 1 : 2, cols >= 1048576 ? 1 : 3, q, cols);
            }
            p.mask = masks[mi];
            p.bt = mi == 3 ? MF_DTYPE_F32 : MF_DTYPE_BF16;
            p.bias = mi == 4 && p.four ? BB_BQK : BB_FULL;
            p.scale = v % 2 ? 0.125f : 1.0f;
            add_case(l, &p);
        }
    // 2. Every (x, y) dtype pair, causal + bias and no mask, 4-D with q_len < k_len.
    for (int xi = 0; xi < 3; xi++)
        for (int yi = 0; yi < 3; yi++)
            for (int m = 0; m < 2; m++) {
                sm_p p = four_case(dts[xi], 2, 3, 5, 1000);
                p.yt = dts[yi];
                p.mask = m ? M_CAUSAL | M_BIAS : 0;
                p.bt = dts[(xi + yi) % 3];
                p.bias = BB_QK;
                p.scale = 0.125f;
                add_case(l, &p);
            }
    // 3. Bias broadcasts and dtypes (f32/f16/bf16, with -inf runs), with key_lens.
    for (int bk = 0; bk < 5; bk++)
        for (int t = 0; t < 3; t++) {
            sm_p p = four_case(dts[(bk + t) % 3], 3, 2, 9, bk % 2 ? 130 : 2050);
            p.mask = M_BIAS | (t == 1 ? M_KL : 0) | (t == 2 ? M_CAUSAL : 0);
            p.bt = dts[t];
            p.bias = (bias_kind)bk;
            add_case(l, &p);
        }
    {
        sm_p p = base_case(MF_DTYPE_BF16, 37, 1000); // 2-D broadcasts: one key row for all; one value per row
        p.mask = M_BIAS, p.bias = BB_QK;
        add_case(l, &p);
        p.bias = BB_ROW, p.bt = MF_DTYPE_F16;
        add_case(l, &p);
    }
    // 4. Fully masked rows: causal with q_len > k_len (the first rows see nothing).
    for (int t = 0; t < 3; t++) {
        sm_p p = four_case(dts[t], 2, 2, 40, t == 0 ? 33 : t == 1 ? 1025 : 17);
        p.mask = M_CAUSAL | (t == 1 ? M_KL : 0);
        add_case(l, &p);
    }
    // 5. Layouts: in place, unaligned pointers (x and y offset differently:
    //    their 16-byte phases may never meet), padded rows, interleaved heads.
    static const int64_t lcols[] = {33, 127, 1025, 4097, 16385, 40000};
    for (int ci = 0; ci < 6; ci++)
        for (int t = 0; t < 3; t++) {
            const int64_t cols = lcols[ci];
            const int64_t q = cols > 10000 ? 2 : 5;
            sm_p p = four_case(dts[t], 2, 3, q, cols);
            p.mask = (ci + t) % 2 ? M_CAUSAL : M_KL;
            p.scale = 0.125f;
            p.inplace = true;
            p.xoff = t == 0 ? 0 : 1;
            add_case(l, &p); // in place (aligned or offset by one element)
            p.inplace = false;
            p.yt = dts[(t + 1) % 3];
            p.xoff = 1, p.yoff = (int)(1 + ci % 2);
            add_case(l, &p); // unaligned, mixed dtypes
            p.xoff = p.yoff = 0;
            p.pad = 3 + ci;
            p.bqhk = ci % 2 == 0;
            p.mask |= M_BIAS;
            p.bias = BB_STRIDE0;
            p.bt = dts[t];
            add_case(l, &p); // padded rows, (b, q, h, k) order, head-broadcast bias
        }
    // 6. A NaN stays in its row (every kernel variant's length; 300000: the
    //    CPU's two-pass path for rows past 262144 columns).
    static const int64_t ncols[] = {8, 100, 1000, 5000, 70000, 300000};
    for (int ci = 0; ci < 6; ci++) {
        sm_p p = four_case(dts[ci % 3], 1, 3, 3, ncols[ci]);
        p.mask = ci % 2 ? M_CAUSAL : M_BIAS;
        p.nan_row = true;
        add_case(l, &p);
    }
    // ... also when a whole block of a cluster row (sm_90: 8192-column blocks,
    // 3 per row; 70 rows keep the cluster plan) holds only -inf: its output
    // is NaN too, not 0 (the NaN is the row's last column).
    {
        sm_p p = base_case(MF_DTYPE_F32, 70, 20000);
        p.nan_row = true, p.inf_head = 8300, p.want = true;
        add_case(l, &p);
    }
    // ... and in the CPU's two-pass path, whose running max stays -inf over
    // the first 270000 columns: a NaN row, then finite values after the -inf.
    {
        sm_p p = base_case(MF_DTYPE_BF16, 2, 300000);
        p.nan_row = true, p.inf_head = 270000;
        add_case(l, &p);
        p.nan_row = false;
        add_case(l, &p);
    }
    // 7. Long rows with few of them (CUDA splits them over blocks), causal and key_lens.
    {
        sm_p p = four_case(MF_DTYPE_BF16, 1, 1, 2, 300000);
        p.mask = M_CAUSAL, p.scale = 0.125f;
        add_case(l, &p);
        p = four_case(MF_DTYPE_F16, 2, 1, 1, 200001);
        p.mask = M_KL | M_BIAS, p.bt = MF_DTYPE_BF16, p.bias = BB_BQK, p.xoff = 1;
        add_case(l, &p);
    }
    // 8. Row lengths at the CUDA plan's edges: 32 and 1024 chunks (one block
    //    of up to 512 threads holds 2 chunks per thread), just past them, and
    //    rows spread over clusters of 2 ... 16 blocks (sm_90) with enough rows
    //    (rows x blocks per row >= 132 SMs) that the plan keeps the cluster
    //    rather than splitting; a 16-block row offset by one element needs 17
    //    and streams instead. Bias along keys, causal, key_lens and f32 mixed in.
    {
        static const struct { int64_t rows, cols; mf_dtype t; int mask; int xoff; } e[] = {
            {37, 256, MF_DTYPE_BF16, M_CAUSAL, 0},           {37, 257, MF_DTYPE_F16, M_KL, 1},
            {9, 8192, MF_DTYPE_BF16, 0, 0},                  {9, 8185, MF_DTYPE_F32, M_CAUSAL, 1},
            {70, 8193, MF_DTYPE_BF16, M_CAUSAL, 0},          {70, 20000, MF_DTYPE_F16, M_KL | M_BIAS, 1},
            {30, 70000, MF_DTYPE_BF16, M_BIAS, 0},           {30, 70000, MF_DTYPE_F32, M_CAUSAL | M_KL, 0},
            {9, 131072, MF_DTYPE_BF16, M_CAUSAL, 0},         {9, 131072, MF_DTYPE_BF16, 0, 1},
        };
        for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
            sm_p p = (e[i].mask & M_KL) ? four_case(e[i].t, 10, 1, e[i].rows / 10, e[i].cols) // key_lens vary
                                        : base_case(e[i].t, e[i].rows, e[i].cols);
            p.mask = e[i].mask;
            p.bt = MF_DTYPE_BF16;
            p.bias = BB_FULL;
            p.scale = 0.125f;
            p.xoff = p.yoff = e[i].xoff;
            p.want = true;
            add_case(l, &p);
        }
    }
    sm_p none = {0};
    th_add(l, run_validation, &none, sizeof none, "softmax(validation)");
    th_add(l, run_int64, &none, sizeof none, "softmax(int64,dtype=bf16,shape=2049x1x1024x1024,mask=causal+key_lens,scale=0.125)");
    th_add(l, run_long_row, &none, sizeof none, "softmax(long_row,dtype=f32,shape=1x1x1x536870936,mask=key_lens,scale=0.125)");
}
