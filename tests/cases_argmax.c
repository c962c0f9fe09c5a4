// Row argmax cases (mf_argmax): ids[r] = lowest index of row r's maximum,
// vals[r] = that maximum; NaN / +inf rows give NaN and the first such index;
// all -inf rows give -1 and -inf.
//
// Tolerance: none. The op only compares and copies, so ids must equal the
// reference's and vals the stored maximum exactly (bound 0; NaN and -inf
// matched exactly by th_check).
// Rows are random (outliers x1e4 / x1e2) with the row's maximum planted again
// at 1-3 other places (ties, checked to go to the lowest index). With
// specials, row r is of kind r % 8: 0 ordinary with ties, 1 NaN (then a +inf
// after it), 2 +inf (then a NaN after it), 3 all -inf, 4 -inf runs and ties,
// 5 all negative, 6 -0.0 then +0.0 as the maximum (equal: the first wins),
// 7 the maximum in the last column.
#include <math.h>
#include <string.h>

#include "harness.h"

typedef struct {
    mf_dtype dt;
    int64_t rows, n, pad; // pad: extra elements per row (strided rows)
    bool specials;
} argmax_p;

static void plant_row(th_ctx *ctx, th_buf *b, int64_t base, int64_t n, int kind) {
    th_rng *g = &ctx->rng;
    switch (kind) {
    case 1:
    case 2: {
        const int64_t at = th_rng_int(g, n);
        th_set(b, base + at, kind == 1 ? NAN : INFINITY);
        if (at + 1 < n) th_set(b, base + at + 1 + th_rng_int(g, n - at - 1), kind == 1 ? INFINITY : NAN);
        return;
    }
    case 3:
        for (int64_t i = 0; i < n; i++) th_set(b, base + i, -INFINITY);
        return;
    case 4:
        for (int64_t i = th_rng_int(g, n); i < n; i += 1 + th_rng_int(g, 3)) th_set(b, base + i, -INFINITY);
        break;
    case 5:
        for (int64_t i = 0; i < n; i++) th_set(b, base + i, -fabs(th_get(b, base + i)) - 0.5);
        break;
    case 6:
        for (int64_t i = 0; i < n; i++) th_set(b, base + i, -1.0);
        if (n >= 2) {
            const int64_t a = th_rng_int(g, n - 1);
            th_set(b, base + a, -0.0);
            th_set(b, base + a + 1 + th_rng_int(g, n - a - 1), 0.0);
        }
        return;
    case 7:
        th_set(b, base + n - 1, 2e4);
        return;
    default: break;
    }
    // ties: the row's maximum again at 1-3 random places
    double m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = fmax(m, th_get(b, base + i));
    if (m == -INFINITY) return;
    const int64_t k = 1 + th_rng_int(g, 3);
    for (int64_t j = 0; j < k; j++) th_set(b, base + th_rng_int(g, n), m);
}

static th_result run_argmax(th_ctx *ctx, const void *params) {
    const argmax_p *p = params;
    const int64_t rows = p->rows, n = p->n, ld = n + p->pad;
    mf_argmax_args args;
    const int64_t xs[2] = {rows, n}, xst[2] = {ld, 1};
    th_buf *bx = th_tensor(ctx, p->dt, 2, xs, xst, &args.x);
    th_fill(ctx, bx, &args.x, NULL);
    for (int64_t r = 0; r < rows; r++) plant_row(ctx, bx, r * ld, n, p->specials ? (int)(r % 8) : 0);
    th_buf *bi = th_tensor(ctx, MF_DTYPE_I32, 1, &rows, NULL, &args.ids);
    th_buf *bv = th_tensor(ctx, MF_DTYPE_F32, 1, &rows, NULL, &args.vals);

    double *ref_i = th_scratch(ctx, (size_t)rows * sizeof(double));
    double *ref_v = th_scratch(ctx, (size_t)rows * sizeof(double));
    double *zero = th_scratch(ctx, (size_t)rows * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        int64_t best = -1;
        double m = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            const double v = th_get(bx, r * ld + i);
            if (isnan(v) || v == INFINITY) {
                best = i, m = NAN;
                break;
            }
            if (v > m) best = i, m = v;
        }
        ref_i[r] = (double)best, ref_v[r] = m;
    }
    TH_CALL(ctx, mf_argmax(ctx->be, &args));
    bool ok = th_check(ctx, bi, &args.ids, ref_i, zero, "ids");
    ok &= th_check(ctx, bv, &args.vals, ref_v, zero, "vals");
    return ok ? TH_PASS : TH_FAIL;
}

// ---- argument validation -----------------------------------------------------------

static th_result run_validation(th_ctx *ctx, const void *params) {
    (void)params;
    const int64_t xs[2] = {3, 8}, three = 3, six = 6;
    mf_tensor x, ids, vals, big;
    th_tensor(ctx, MF_DTYPE_BF16, 2, xs, NULL, &x);
    th_tensor(ctx, MF_DTYPE_I32, 1, &three, NULL, &ids);
    th_tensor(ctx, MF_DTYPE_F32, 1, &three, NULL, &vals);
    th_tensor(ctx, MF_DTYPE_F32, 1, &six, NULL, &big);
    th_upload_all(ctx);
    bool ok = true;
    mf_argmax_args a = {.x = x, .ids = ids, .vals = vals}, t;
#define TRY(mod, want, needle, what)                                    \
    do {                                                                \
        t = a;                                                          \
        mod;                                                            \
        ok &= th_expect(ctx, mf_argmax(ctx->be, &t), want, needle, what);  \
    } while (0)
    ok &= th_expect(ctx, mf_argmax(ctx->be, NULL), MF_ERR_INVALID_ARG, "args is NULL", "NULL args");
    ok &= th_expect(ctx, mf_argmax(NULL, &a), MF_ERR_INVALID_ARG, "backend is NULL", "NULL backend");
    TRY(t.x.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "argmax: x dtype i32", "i32 x");
    TRY(t.x.ndim = 3; t.x.shape[2] = 1; t.x.stride[2] = 1, MF_ERR_INVALID_ARG, "x has 3 dims", "3-D x");
    TRY(t.x.shape[1] = 0, MF_ERR_INVALID_ARG, "x has 0 columns", "no columns");
    TRY(t.x.stride[1] = 2; t.x.shape[1] = 4, MF_ERR_UNSUPPORTED, "x rows must be contiguous (stride[1]=2)",
        "strided columns");
    TRY(t.ids.dtype = MF_DTYPE_F32, MF_ERR_INVALID_ARG, "ids dtype f32 (want i32)", "f32 ids");
    TRY(t.vals.dtype = MF_DTYPE_BF16, MF_ERR_INVALID_ARG, "vals dtype bf16 (want f32)", "bf16 vals");
    TRY(t.ids.shape[0] = 2, MF_ERR_INVALID_ARG, "ids must be 1-D of x's 3 rows", "ids rows");
    TRY(t.vals = big; t.vals.shape[0] = 3; t.vals.stride[0] = 2, MF_ERR_INVALID_ARG, "vals must be contiguous",
        "strided vals");
    TRY(t.vals = big; t.vals.dtype = MF_DTYPE_I32; t.ids = t.vals; t.vals = vals; t.ids.shape[0] = 3;
        t.ids.data = (int32_t *)big.data; t.vals.data = (float *)big.data + 2, MF_ERR_INVALID_ARG,
        "ids and vals overlap", "ids over vals");
    TRY(t.vals.data = x.data, MF_ERR_INVALID_ARG, "vals and x overlap", "vals over x");
    TRY(t.x.device = MF_DEVICE_CPU == mf_backend_device(ctx->be) ? MF_DEVICE_CUDA : MF_DEVICE_CPU,
        MF_ERR_INVALID_ARG, "x is on", "x on another device");
    TRY(t.x.shape[0] = 0; t.ids.shape[0] = 0; t.vals.shape[0] = 0, MF_OK, NULL, "no rows");
#undef TRY
    return ok ? TH_PASS : TH_FAIL;
}

// ---- the case list -------------------------------------------------------------------

static void add_argmax(th_list *l, const argmax_p *p) {
    th_add(l, run_argmax, p, sizeof *p, "argmax(dtype=%s,rows=%lld,n=%lld,ld=%lld,specials=%d)", mf_dtype_name(p->dt),
           (long long)p->rows, (long long)p->n, (long long)(p->n + p->pad), th_b(p->specials));
}

void th_cases_argmax(th_list *l) {
    static const mf_dtype dts[3] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};
    static const int64_t ns[5] = {1, 7, 4096, 50257, 151936};
    int v = 0;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 5; k++, v++) {
            // specials: 8 rows, one of each kind; plain: a decode batch's rows, some strided
            argmax_p p = {.dt = dts[d], .rows = 8, .n = ns[k], .pad = v % 3 == 1 ? 8 : 0, .specials = true};
            add_argmax(l, &p);
            argmax_p q = {.dt = dts[d], .rows = ns[k] > 4096 ? 3 : 37, .n = ns[k], .pad = v % 2 ? 3 : 0};
            add_argmax(l, &q);
        }
    // One row (batch-1 decode), and many rows of a small vocab.
    for (int d = 0; d < 3; d++) {
        argmax_p p = {.dt = dts[d], .rows = 1, .n = 32000};
        add_argmax(l, &p);
        argmax_p q = {.dt = dts[d], .rows = 1000, .n = 100, .pad = d == 1 ? 4 : 0, .specials = true};
        add_argmax(l, &q);
    }
    // More rows than the CUDA grid has blocks (32 per SM: 4224 on an H100):
    // each block goes round its row loop more than once.
    argmax_p many = {.dt = MF_DTYPE_BF16, .rows = 9000, .n = 100, .specials = true};
    add_argmax(l, &many);
    argmax_p none = {0};
    th_add(l, run_validation, &none, sizeof none, "argmax(validation)");
}
