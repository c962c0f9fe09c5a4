// Row top-k cases (mf_topk): the k largest values of each row with their
// indices, best first (ties to the lower index; -inf never a candidate,
// missing slots (-1, -inf)), and the row's (max, sum of expf((x - max) *
// scale)); NaN / +inf rows give slot 0 = (first such index, its value),
// stats (NaN, NaN); all -inf rows give (-inf, 0).
//
// Tolerance: ids, vals and max exact (bound 0: the op only compares and
// copies). The sum: each term is the f32 expression the sampler computes,
// s = (x - max) * scale in f32, then exp(s); the reference takes exp(s) in
// double, the backends expf (glibc < 1 ulp, CUDA <= 2 ulp: relative
// 2 * 2^-23 per term, so per sum), summed in double and rounded to f32
// (2^-24): bound 4e-7 * sum.
//
// With specials, row r is of kind r % 8: 0 values on a grid of 1/8 (ties
// everywhere, also across the k-th place) with the maximum planted again,
// 1 NaN (then a +inf after it), 2 +inf (then a NaN after it), 3 all -inf,
// 4 -inf runs (often fewer finite values than k), 5 all negative, 6 a constant
// row with -0.0 and +0.0 (all tied: the lowest k indices win), 7 the maximum in
// the last column. Without specials: random rows with outliers and -inf runs.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct {
    mf_dtype dt;
    int64_t rows, n, pad; // pad: extra elements per row (strided rows)
    int32_t k;
    float scale;
    bool specials;
} topk_p;

static void plant_row(th_ctx *ctx, th_buf *b, int64_t base, int64_t n, int kind) {
    th_rng *g = &ctx->rng;
    switch (kind) {
    case 0:
        for (int64_t i = 0; i < n; i++) {
            const double v = th_get(b, base + i);
            if (isfinite(v)) th_set(b, base + i, round(fmax(fmin(v, 4.0), -4.0) * 8.0) / 8.0);
        }
        break;
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
        for (int64_t i = 0; i + 1 < n; i++) // a long -inf run: fewer finite values than many k's
            if (th_rng_int(g, 4) != 0) th_set(b, base + i, -INFINITY);
        break;
    case 5:
        for (int64_t i = 0; i < n; i++) th_set(b, base + i, -fabs(th_get(b, base + i)) - 0.5);
        break;
    case 6:
        for (int64_t i = 0; i < n; i++) th_set(b, base + i, th_rng_int(g, 2) ? -0.0 : 0.0);
        return;
    case 7:
        th_set(b, base + n - 1, 2e4);
        return;
    default: break;
    }
    double m = -INFINITY; // ties at the top: the row's maximum again at 1-3 places
    for (int64_t i = 0; i < n; i++) m = fmax(m, th_get(b, base + i));
    if (m == -INFINITY) return;
    const int64_t c = 1 + th_rng_int(g, 3);
    for (int64_t j = 0; j < c; j++) th_set(b, base + th_rng_int(g, n), m);
}

// Rank order for the reference sort: larger value, then lower index.
static const double *g_key;
static int cmp_rank(const void *pa, const void *pb) {
    const int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (g_key[a] != g_key[b]) return g_key[a] > g_key[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

static th_result run_topk(th_ctx *ctx, const void *params) {
    const topk_p *p = params;
    const int64_t rows = p->rows, n = p->n, ld = n + p->pad, k = p->k;
    mf_topk_args args = {.k = p->k, .scale = p->scale};
    const int64_t xs[2] = {rows, n}, xst[2] = {ld, 1}, os[2] = {rows, k}, ss[2] = {rows, 2};
    th_buf *bx = th_tensor(ctx, p->dt, 2, xs, xst, &args.x);
    th_fill_opts fo = th_fill_defaults(p->dt);
    fo.neginf_every = p->specials ? 0 : 3;
    th_fill(ctx, bx, &args.x, &fo);
    for (int64_t r = 0; r < rows; r++)
        if (p->specials) plant_row(ctx, bx, r * ld, n, (int)(r % 8));
    th_buf *bi = th_tensor(ctx, MF_DTYPE_I32, 2, os, NULL, &args.ids);
    th_buf *bv = th_tensor(ctx, MF_DTYPE_F32, 2, os, NULL, &args.vals);
    th_buf *bs = th_tensor(ctx, MF_DTYPE_F32, 2, ss, NULL, &args.stats);

    double *ref_i = th_scratch(ctx, (size_t)(rows * k) * sizeof(double));
    double *ref_v = th_scratch(ctx, (size_t)(rows * k) * sizeof(double));
    double *zero = th_scratch(ctx, (size_t)(rows * k) * sizeof(double));
    double *ref_s = th_scratch(ctx, (size_t)(rows * 2) * sizeof(double));
    double *bound_s = th_scratch(ctx, (size_t)(rows * 2) * sizeof(double));
    double *key = th_scratch(ctx, (size_t)n * sizeof(double));
    int32_t *ord = th_scratch(ctx, (size_t)n * sizeof(int32_t));
    for (int64_t r = 0; r < rows; r++) {
        double *ri = ref_i + r * k, *rv = ref_v + r * k;
        for (int64_t j = 0; j < k; j++) ri[j] = -1, rv[j] = -INFINITY;
        int64_t bad = -1, m = 0;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            const double v = th_get(bx, r * ld + i);
            if (isnan(v) || v == INFINITY) bad = i;
            else if (v > -INFINITY) key[i] = v == 0.0 ? 0.0 : v, ord[m++] = (int32_t)i;
        }
        if (bad >= 0) {
            ri[0] = (double)bad, rv[0] = th_get(bx, r * ld + bad);
            ref_s[2 * r] = ref_s[2 * r + 1] = NAN;
            continue;
        }
        g_key = key;
        qsort(ord, (size_t)m, sizeof *ord, cmp_rank);
        for (int64_t j = 0; j < k && j < m; j++) ri[j] = ord[j], rv[j] = key[ord[j]];
        if (m == 0) {
            ref_s[2 * r] = -INFINITY, ref_s[2 * r + 1] = 0.0;
            continue;
        }
        const float xmax = (float)key[ord[0]];
        double z = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float s = ((float)th_get(bx, r * ld + i) - xmax) * p->scale; // the sampler's f32 expression
            z += exp((double)s);
        }
        ref_s[2 * r] = xmax, ref_s[2 * r + 1] = z, bound_s[2 * r + 1] = 4e-7 * z;
    }
    TH_CALL(ctx, mf_topk(ctx->be, &args));
    bool ok = th_check(ctx, bi, &args.ids, ref_i, zero, "ids");
    ok &= th_check(ctx, bv, &args.vals, ref_v, zero, "vals");
    ok &= th_check(ctx, bs, &args.stats, ref_s, bound_s, "stats");
    return ok ? TH_PASS : TH_FAIL;
}

// ---- argument validation -----------------------------------------------------------

static th_result run_validation(th_ctx *ctx, const void *params) {
    (void)params;
    const int64_t xs[2] = {3, 8}, os[2] = {3, 4}, ss[2] = {3, 2}, bs[2] = {3, 16};
    mf_tensor x, ids, vals, stats, big;
    th_tensor(ctx, MF_DTYPE_BF16, 2, xs, NULL, &x);
    th_tensor(ctx, MF_DTYPE_I32, 2, os, NULL, &ids);
    th_tensor(ctx, MF_DTYPE_F32, 2, os, NULL, &vals);
    th_tensor(ctx, MF_DTYPE_F32, 2, ss, NULL, &stats);
    th_tensor(ctx, MF_DTYPE_F32, 2, bs, NULL, &big);
    th_upload_all(ctx);
    bool ok = true;
    mf_topk_args a = {.x = x, .ids = ids, .vals = vals, .stats = stats, .k = 4, .scale = 1.25f}, t;
#define TRY(mod, want, needle, what)                                 \
    do {                                                             \
        t = a;                                                       \
        mod;                                                         \
        ok &= th_expect(ctx, mf_topk(ctx->be, &t), want, needle, what); \
    } while (0)
    ok &= th_expect(ctx, mf_topk(ctx->be, NULL), MF_ERR_INVALID_ARG, "args is NULL", "NULL args");
    ok &= th_expect(ctx, mf_topk(NULL, &a), MF_ERR_INVALID_ARG, "backend is NULL", "NULL backend");
    TRY(t.x.data = NULL, MF_ERR_INVALID_ARG, "x", "NULL x data");
    TRY(t.stats.data = NULL, MF_ERR_INVALID_ARG, "stats", "NULL stats data");
    TRY(t.x.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "topk: x dtype i32", "i32 x");
    TRY(t.x.ndim = 3; t.x.shape[2] = 1; t.x.stride[2] = 1, MF_ERR_INVALID_ARG, "x has 3 dims", "3-D x");
    TRY(t.x.shape[1] = 0, MF_ERR_INVALID_ARG, "x has 0 columns", "no columns");
    TRY(t.x.stride[1] = 2; t.x.shape[1] = 4, MF_ERR_UNSUPPORTED, "x rows must be contiguous (stride[1]=2)",
        "strided columns");
    TRY(t.k = 0, MF_ERR_INVALID_ARG, "k 0 not in [1, 1024]", "k 0");
    TRY(t.k = MF_TOPK_MAX + 1, MF_ERR_INVALID_ARG, "k 1025 not in [1, 1024]", "k over the cap");
    TRY(t.k = 9, MF_ERR_INVALID_ARG, "k 9 > the 8 columns of x", "k > n");
    TRY(t.scale = 0.0f, MF_ERR_INVALID_ARG, "scale 0 not a finite value > 0", "scale 0");
    TRY(t.scale = -1.0f, MF_ERR_INVALID_ARG, "scale -1 not", "negative scale");
    TRY(t.scale = NAN, MF_ERR_INVALID_ARG, "scale nan not", "NaN scale");
    TRY(t.scale = INFINITY, MF_ERR_INVALID_ARG, "scale inf not", "inf scale");
    TRY(t.ids.dtype = MF_DTYPE_F32, MF_ERR_INVALID_ARG, "ids dtype f32 (want i32)", "f32 ids");
    TRY(t.vals.dtype = MF_DTYPE_BF16, MF_ERR_INVALID_ARG, "vals dtype bf16 (want f32)", "bf16 vals");
    TRY(t.k = 3, MF_ERR_INVALID_ARG, "ids must be (3, 3)", "ids of another k");
    TRY(t.stats.shape[1] = 1, MF_ERR_INVALID_ARG, "stats must be (3, 2)", "stats width");
    TRY(t.vals = big; t.vals.shape[1] = 4, MF_ERR_INVALID_ARG, "vals must be contiguous (strides 16, 1)",
        "strided vals");
    TRY(t.vals = big; t.vals.shape[1] = 4; t.vals.stride[0] = 4; t.stats = big; t.stats.shape[1] = 2;
        t.stats.stride[0] = 2; t.stats.data = (float *)big.data + 10, MF_ERR_INVALID_ARG, "vals and stats overlap",
        "vals over stats");
    TRY(t.vals.data = x.data, MF_ERR_INVALID_ARG, "vals and x overlap", "vals over x");
    TRY(t.x.device = MF_DEVICE_CPU == mf_backend_device(ctx->be) ? MF_DEVICE_CUDA : MF_DEVICE_CPU,
        MF_ERR_INVALID_ARG, "x is on", "x on another device");
    TRY(t.x.shape[0] = 0; t.ids.shape[0] = 0; t.vals.shape[0] = 0; t.stats.shape[0] = 0, MF_OK, NULL, "no rows");
#undef TRY
    return ok ? TH_PASS : TH_FAIL;
}

// ---- the case list -------------------------------------------------------------------

static void add_topk(th_list *l, const topk_p *p) {
    th_add(l, run_topk, p, sizeof *p, "topk(dtype=%s,rows=%lld,n=%lld,ld=%lld,k=%d,scale=%g,specials=%d)",
           mf_dtype_name(p->dt), (long long)p->rows, (long long)p->n, (long long)(p->n + p->pad), (int)p->k,
           (double)p->scale, th_b(p->specials));
}

void th_cases_topk(th_list *l) {
    static const mf_dtype dts[3] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};
    static const int64_t ns[6] = {1, 7, 1000, 4097, 50257, 151936};
    static const float scales[4] = {1.0f, 1.0f / 0.7f, 1.0f / 1.5f, 10.0f};
    int v = 0;
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < 6; i++) {
            const int64_t n = ns[i];
            // k: 1, the whole row where it fits the cap, a typical top_k, the cap.
            const int32_t ks[4] = {1, n <= MF_TOPK_MAX ? (int32_t)n : 50, n >= 40 ? 40 : (int32_t)n,
                                   n >= MF_TOPK_MAX ? MF_TOPK_MAX : (int32_t)n};
            for (int j = 0; j < 4; j++, v++) {
                if (j > 0 && ks[j] == ks[j - 1]) continue;
                topk_p p = {.dt = dts[d], .rows = 8, .n = n, .k = ks[j], .pad = v % 3 == 1 ? 8 : 0,
                            .scale = scales[v % 4], .specials = true};
                add_topk(l, &p);
                topk_p q = {.dt = dts[d], .rows = n > 4097 ? 3 : 37, .n = n, .k = ks[j], .pad = v % 2 ? 3 : 0,
                            .scale = scales[(v + 1) % 4]};
                add_topk(l, &q);
            }
        }
    // Decode batches: one row, and 64 rows of a Llama-2 vocabulary.
    for (int d = 0; d < 3; d++) {
        topk_p p = {.dt = dts[d], .rows = 1, .n = 32000, .k = 50, .scale = 1.0f / 0.8f};
        add_topk(l, &p);
        topk_p q = {.dt = dts[d], .rows = 64, .n = 32000, .k = d == 0 ? MF_TOPK_MAX : 256, .scale = 1.0f,
                    .specials = d == 2};
        add_topk(l, &q);
    }
    // More rows than the CUDA grid has blocks (at most 32 per SM): each block
    // goes round its row loop more than once (per-row resets and barriers).
    topk_p many = {.dt = MF_DTYPE_BF16, .rows = 9000, .n = 64, .k = 8, .scale = 1.0f, .specials = true};
    add_topk(l, &many);
    topk_p none = {0};
    th_add(l, run_validation, &none, sizeof none, "topk(validation)");
}
