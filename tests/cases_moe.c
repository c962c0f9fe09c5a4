// Mixture-of-Experts cases: each part alone (router, permutation, combine)
// and the whole layer mf_moe against a per-token float64 reference.
//
// Router: logits are given; the chosen ids must match the reference exactly
// (the same comparisons on the same stored values: larger first, ties to the
// lower index, NaN below -inf). Weights: f32 math over up to E terms,
//     |w - ref| <= (16 + E) 2^-24 |ref| + 2^-126.
// Permutation: offsets, sorted, inv and the gathered rows exact.
// Combine: f32 sum of k + 2 terms in a fixed order,
//     |out - ref| <= (k + 4) 2^-24 sum|terms| + eps_out |ref| + tiny_out.
// Layer: x and w_router hold multiples of 1/8 (and w_router's of 1/64), so
// every logit is exact in f32 whatever the summation order and the
// reference routes exactly as the op does (ties included). The expert FFNs
// round h (and the activation) and y to x's dtype; the bound follows those
// roundings through the FFN (see layer_ref), times 2 for slack.
// The workspace starts NaN-poisoned: a row no expert wrote (an expert with
// no token, E = 256 with T = 3) would turn an output NaN.
// Expert paths on CUDA: at N = T * k <= MF_MOE_DECODE_MAX_ROWS routed rows
// the decode kernels (f32 gate / up, no rounding of h before the activation:
// a subset of the loop's roundings, so the same bound holds), above it the
// per-expert cuBLASLt loop; every layer and experts case asserts the path
// taken (expect_path) and what mf_moe_capturable answers.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "cuda/cuda_query.h"
#include "ops/moe.h"

static const double kU32 = 0x1.0p-24;
static const char *const score_names[] = {"softmax", "sigmoid"};
static const char *const order_names[] = {"score_topk", "topk_score"};
static const char *const ffn_names[] = {"swiglu", "gelu"};

static double sigmoid_d(double v) {
    const double e = exp(-fabs(v));
    return (v >= 0 ? 1.0 : e) / (1.0 + e);
}
static double rank_d(double v) { return isnan(v) ? -INFINITY : v; }

// Top-k of l[0..E) by the op's rule; weights as the router computes them.
static void route_ref(const double *l, int E, int k, mf_moe_score score, mf_moe_order order, bool renorm, double scale,
                      int *sel, double *w) {
    bool taken[256] = {false};
    for (int j = 0; j < k; j++) {
        int best = -1;
        double bk = 0;
        for (int e = 0; e < E; e++) {
            if (taken[e]) continue;
            if (best < 0 || rank_d(l[e]) > bk) best = e, bk = rank_d(l[e]);
        }
        taken[best] = true;
        sel[j] = best;
    }
    if (score == MF_MOE_SCORE_SOFTMAX) {
        const int n = order == MF_MOE_SCORE_THEN_TOPK ? E : k;
        double m = -INFINITY, z = 0;
        for (int i = 0; i < n; i++) m = fmax(m, l[order == MF_MOE_SCORE_THEN_TOPK ? i : sel[i]]);
        for (int i = 0; i < n; i++) z += m == -INFINITY ? 0 : exp(l[order == MF_MOE_SCORE_THEN_TOPK ? i : sel[i]] - m);
        for (int j = 0; j < k; j++) w[j] = m == -INFINITY ? 0 : exp(l[sel[j]] - m) / z;
    } else {
        for (int j = 0; j < k; j++) w[j] = sigmoid_d(l[sel[j]]);
    }
    if (renorm) {
        double s = 0;
        for (int j = 0; j < k; j++) s += w[j];
        if (s > 0)
            for (int j = 0; j < k; j++) w[j] /= s;
    }
    for (int j = 0; j < k; j++) w[j] *= scale;
}

// The path the expert FFNs must take for N routed rows of dtype dt (every
// shape in this file allows the decode kernels' 16-byte loads and the sm_90a
// GEMMs' 16-byte strides): on CUDA "decode" up to MF_MOE_DECODE_MAX_ROWS, else
// "loop"; MINFER_MOE_GEMM=loop / grouped forces one; MINFER_MOE_GEMM=wgmma
// takes our grouped GEMMs for f16/bf16 on a compute capability 9.0 device
// (where the build must have them: a missing sm_90a image fails here) and
// the default elsewhere. The CPU has one path (the loop): "".
static const char *want_path(th_ctx *ctx, int64_t N, mf_dtype dt) {
#ifdef MF_HAVE_CUDA
    if (mf_backend_device(ctx->be) != MF_DEVICE_CUDA) return "";
    const char *env = getenv("MINFER_MOE_GEMM");
    if (env && !strcmp(env, "grouped")) return "grouped";
    if (env && !strcmp(env, "loop")) return "loop";
    int cc = 0;
    (void)mf_cuda_moe_sm90(ctx->be, &cc);
    if (env && !strcmp(env, "wgmma") && dt != MF_DTYPE_F32 && cc == 90) return "wgmma";
    return N <= MF_MOE_DECODE_MAX_ROWS ? "decode" : "loop";
#else
    (void)ctx, (void)N, (void)dt;
    return "";
#endif
}

static bool expect_path(th_ctx *ctx, int64_t N, mf_dtype dt) {
#ifdef MF_HAVE_CUDA
    const char *want = want_path(ctx, N, dt);
    if (!*want) return true;
    const char *got = mf_cuda_moe_last_path(ctx->be);
    printf("  .. [cuda] %s: experts path %s\n", ctx->case_name, got);
    if (strcmp(got, want) != 0) {
        th_fail(ctx, "experts path %s, want %s (%lld routed rows)", got, want, (long long)N);
        return false;
    }
#else
    (void)ctx, (void)N, (void)dt;
#endif
    return true;
}

// ---- router alone ------------------------------------------------------------------

typedef struct {
    mf_dtype lt;
    int64_t T;
    int E, k;
    mf_moe_score score;
    mf_moe_order order;
    bool renorm, ties, neginf;
    float scale;
} router_p;

static th_result run_router(th_ctx *ctx, const void *params) {
    const router_p *p = params;
    const int64_t T = p->T;
    const int E = p->E, k = p->k;
    mf_tensor lg, ids, w;
    th_buf *bl = th_tensor(ctx, p->lt, 2, (const int64_t[]){T, E}, NULL, &lg);
    th_buf *bi = th_tensor(ctx, MF_DTYPE_I32, 2, (const int64_t[]){T, k}, NULL, &ids);
    th_buf *bw = th_tensor(ctx, MF_DTYPE_F32, 2, (const int64_t[]){T, k}, NULL, &w);
    th_fill_opts o = {.lo = -4, .hi = 4, .outlier = 8, .outlier_every = 64, .neginf_every = p->neginf ? 5 : 0};
    th_fill(ctx, bl, &lg, &o);
    if (p->ties) // values on a coarse grid: many equal logits per row
        for (int64_t i = 0; i < T * E; i++) {
            const double v = th_get(bl, i);
            if (isfinite(v)) th_set(bl, i, floor(v * 2) / 2);
        }
    double *ri = th_scratch(ctx, (size_t)(T * k) * sizeof(double)), *rw = th_scratch(ctx, (size_t)(T * k) * sizeof(double));
    double *bi0 = th_scratch(ctx, (size_t)(T * k) * sizeof(double)), *bw0 = th_scratch(ctx, (size_t)(T * k) * sizeof(double));
    double l[256], wj[8];
    int sel[8];
    for (int64_t t = 0; t < T; t++) {
        double lmax = 0;
        for (int e = 0; e < E; e++) {
            l[e] = th_get(bl, t * E + e);
            if (isfinite(l[e])) lmax = fmax(lmax, fabs(l[e]));
        }
        route_ref(l, E, k, p->score, p->order, p->renorm, p->scale, sel, wj);
        for (int j = 0; j < k; j++) {
            ri[t * k + j] = sel[j], rw[t * k + j] = wj[j];
            // exp(l - m) carries the rounding of l - m: relative |l - m| 2^-24
            bw0[t * k + j] = (16.0 + E + 4 * lmax) * kU32 * fabs(wj[j]) + 0x1.0p-126;
        }
    }
    mf_moe_router_args a = {.logits = lg, .ids = ids, .weights = w, .score = p->score, .order = p->order,
                            .renorm = p->renorm, .routed_scale = p->scale};
    TH_CALL(ctx, mf_moe_router(ctx->be, &a));
    bool ok = th_check(ctx, bi, &ids, ri, bi0, "ids");
    ok &= th_check(ctx, bw, &w, rw, bw0, "weights");
    return ok ? TH_PASS : TH_FAIL;
}

// ---- permutation alone ---------------------------------------------------------------

typedef enum { RT_RANDOM = 0, RT_ONE = 1, RT_TIES = 2 } routing;
static const char *const routing_names[] = {"random", "one", "ties"};

typedef struct {
    int64_t T, H;
    int E, k;
    routing rt; // random ids (repeats within a token allowed) or all on expert E - 1
    mf_dtype dt;
    bool odd;   // x and xs start one element into their buffers with row stride H + 1 (16-bit: 2-byte aligned)
} permute_p;

static th_result run_permute(th_ctx *ctx, const void *params) {
    const permute_p *p = params;
    const int64_t T = p->T, N = T * p->k, H = p->H;
    const int E = p->E;
    mf_tensor ids, off, sorted, inv, x, xs;
    th_buf *bi = th_tensor(ctx, MF_DTYPE_I32, 2, (const int64_t[]){T, p->k}, NULL, &ids);
    th_buf *bo = th_tensor(ctx, MF_DTYPE_I32, 1, (const int64_t[]){E + 1}, NULL, &off);
    th_buf *bs = th_tensor(ctx, MF_DTYPE_I32, 1, &N, NULL, &sorted);
    th_buf *bv = th_tensor(ctx, MF_DTYPE_I32, 1, &N, NULL, &inv);
    th_buf *bx, *bxs;
    const int64_t o = p->odd ? 1 : 0, ld = H + o; // x (t, i) is element o + t ld + i of its buffer
    if (p->odd) {
        bx = th_buf_new(ctx, p->dt, T * ld + o);
        x = th_view(ctx, bx, 2, (const int64_t[]){T, H}, (const int64_t[]){ld, 1});
        x.data = (char *)x.data + mf_dtype_size(p->dt);
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < H; i++) th_set(bx, o + t * ld + i, th_rng_unif(&ctx->rng, -1, 1));
        bxs = th_buf_new(ctx, p->dt, N * ld + o);
        xs = th_view(ctx, bxs, 2, (const int64_t[]){N, H}, (const int64_t[]){ld, 1});
        xs.data = (char *)xs.data + mf_dtype_size(p->dt);
    } else {
        bx = th_tensor(ctx, p->dt, 2, (const int64_t[]){T, H}, NULL, &x);
        bxs = th_tensor(ctx, p->dt, 2, (const int64_t[]){N, H}, NULL, &xs);
        th_fill(ctx, bx, &x, NULL);
    }
    // Skewed by default: expert e drawn as floor(E u^2), so low experts are busy and high ones often empty.
    for (int64_t a = 0; a < N; a++) {
        const double u = th_rng_unif(&ctx->rng, 0, 1);
        th_set(bi, a, p->rt == RT_ONE ? E - 1 : (int)floor(E * u * u));
    }
    double *ro = th_scratch(ctx, (size_t)(E + 1) * sizeof(double)), *rs = th_scratch(ctx, (size_t)N * sizeof(double));
    double *rv = th_scratch(ctx, (size_t)N * sizeof(double)), *rx = th_scratch(ctx, (size_t)(N * H) * sizeof(double));
    double *zero = th_scratch(ctx, (size_t)(N * H + E + 1) * sizeof(double));
    int64_t r = 0;
    for (int e = 0; e < E; e++) { // the stable sort, the slow way
        ro[e] = (double)r;
        for (int64_t a = 0; a < N; a++)
            if ((int)th_get(bi, a) == e) {
                rs[r] = (double)a, rv[a] = (double)r;
                for (int64_t i = 0; i < H; i++) rx[r * H + i] = th_get(bx, o + (a / p->k) * ld + i);
                r++;
            }
    }
    ro[E] = (double)r;
    mf_moe_permute_args a = {.ids = ids, .offsets = off, .sorted = sorted, .inv = inv, .x = &x, .xs = &xs,
                             .n_experts = E};
    TH_CALL(ctx, mf_moe_permute(ctx->be, &a));
    bool ok = th_check(ctx, bo, &off, ro, zero, "offsets");
    ok &= th_check(ctx, bs, &sorted, rs, zero, "sorted");
    ok &= th_check(ctx, bv, &inv, rv, zero, "inv");
    if (!p->odd) {
        ok &= th_check(ctx, bxs, &xs, rx, zero, "xs");
        return ok ? TH_PASS : TH_FAIL;
    }
    // Offset view: check the whole buffer (the harness's view check assumes a
    // view at the buffer's start); outside the view it keeps its poison.
    double *rf = th_scratch(ctx, (size_t)bxs->n * sizeof(double)), *zf = th_scratch(ctx, (size_t)bxs->n * sizeof(double));
    for (int64_t e = 0; e < bxs->n; e++) rf[e] = th_get(bxs, e), zf[e] = 0.0;
    for (int64_t rr = 0; rr < N; rr++)
        for (int64_t i = 0; i < H; i++) rf[o + rr * ld + i] = rx[rr * H + i];
    const mf_tensor flat = th_view(ctx, bxs, 1, &bxs->n, NULL);
    ok &= th_check(ctx, bxs, &flat, rf, zf, "xs");
    return ok ? TH_PASS : TH_FAIL;
}

// ---- combine alone ---------------------------------------------------------------------

typedef enum { RES_NONE = 0, RES_SEPARATE = 1, RES_INPLACE = 2 } res_mode;
static const char *const res_names[] = {"none", "separate", "inplace"};

typedef struct {
    int64_t T, H;
    int k;
    mf_dtype dt, ot;
    bool shared, gate;
    res_mode res;
} combine_p;

static th_result run_combine(th_ctx *ctx, const void *params) {
    const combine_p *p = params;
    const int64_t T = p->T, H = p->H, k = p->k, N = T * k;
    mf_tensor ys, inv, w, sh, sg, res, out;
    th_buf *by = th_tensor(ctx, p->dt, 2, (const int64_t[]){N, H}, NULL, &ys);
    th_buf *bv = th_tensor(ctx, MF_DTYPE_I32, 1, &N, NULL, &inv);
    th_buf *bw = th_tensor(ctx, MF_DTYPE_F32, 2, (const int64_t[]){T, k}, NULL, &w);
    th_buf *bsh = NULL, *bsg = NULL, *bres = NULL, *bout;
    th_fill(ctx, by, &ys, NULL);
    const th_fill_opts wo = {.lo = 0, .hi = 1, .outlier = 0, .outlier_every = 1};
    th_fill(ctx, bw, &w, &wo);
    for (int64_t a = 0; a < N; a++) th_set(bv, a, (double)a); // then a random permutation
    for (int64_t a = N - 1; a > 0; a--) {
        const int64_t b = th_rng_int(&ctx->rng, a + 1);
        const double t = th_get(bv, a);
        th_set(bv, a, th_get(bv, b)), th_set(bv, b, t);
    }
    if (p->shared) {
        bsh = th_tensor(ctx, p->dt, 2, (const int64_t[]){T, H}, NULL, &sh);
        th_fill(ctx, bsh, &sh, NULL);
        if (p->gate) {
            bsg = th_tensor(ctx, p->dt, 2, (const int64_t[]){T, 1}, NULL, &sg);
            const th_fill_opts go = {.lo = -6, .hi = 6, .outlier = 0, .outlier_every = 1};
            th_fill(ctx, bsg, &sg, &go);
        }
    }
    if (p->res != RES_NONE) {
        bres = th_tensor(ctx, p->ot, 2, (const int64_t[]){T, H}, NULL, &res);
        th_fill(ctx, bres, &res, NULL);
    }
    if (p->res == RES_INPLACE)
        bout = bres, out = res;
    else
        bout = th_tensor(ctx, p->ot, 2, (const int64_t[]){T, H}, NULL, &out);
    double *ref = th_scratch(ctx, (size_t)(T * H) * sizeof(double)), *bnd = th_scratch(ctx, (size_t)(T * H) * sizeof(double));
    const double eo = th_eps(p->ot), tiny = th_tiny(p->ot);
    for (int64_t t = 0; t < T; t++) {
        const double g = bsg ? sigmoid_d(th_get(bsg, t)) : 1.0;
        for (int64_t i = 0; i < H; i++) {
            double s = bres ? th_get(bres, t * H + i) : 0, mag = fabs(s);
            for (int64_t j = 0; j < k; j++) {
                const double term = th_get(bw, t * k + j) * th_get(by, (int64_t)th_get(bv, t * k + j) * H + i);
                s += term, mag += fabs(term);
            }
            if (bsh) {
                const double term = g * th_get(bsh, t * H + i);
                s += term, mag += fabs(term) * 1.000001;
            }
            ref[t * H + i] = s;
            bnd[t * H + i] = (k + 4) * kU32 * mag + eo * fabs(s) + tiny;
        }
    }
    mf_moe_combine_args a = {.ys = ys, .inv = inv, .weights = w, .shared = bsh ? &sh : NULL,
                             .shared_gate = bsg ? &sg : NULL, .residual = bres ? &res : NULL, .out = out};
    TH_CALL(ctx, mf_moe_combine(ctx->be, &a));
    return th_check(ctx, bout, &out, ref, bnd, "out") ? TH_PASS : TH_FAIL;
}

// ---- the whole layer --------------------------------------------------------------------

typedef struct {
    mf_dtype dt;
    int64_t T, H, I;
    int E, k;
    mf_moe_ffn ffn;
    mf_moe_score score;
    mf_moe_order order;
    bool renorm;
    float scale;
    routing rt;
    int64_t Is; // shared expert width, 0: none
    bool gate;
    res_mode res;
    bool mixed;   // the weights in wt, x / residual / out f32 (the CPU's 16-bit checkpoint weights)
    mf_dtype wt;
} layer_p;

// A multiple of 1/q in [-m, m] (exact in every float dtype for small m * q).
static double dyadic(th_ctx *ctx, int m, int q) { return (double)(th_rng_int(&ctx->rng, 2 * m * q + 1) - m * q) / q; }

// One FFN in double on one token: y (H), and its error bound ey (H) from
// rounding h and y to dt, f32 accumulation and the activation's f32 math.
// w1: rows1 x H at w1o, w2: H x I at w2o, in buffers b1, b2.
static void ffn_ref(const th_buf *bx, int64_t xo, const th_buf *b1, int64_t w1o, const th_buf *b2, int64_t w2o,
                    int64_t H, int64_t I, mf_moe_ffn ffn, mf_dtype dt, double *a, double *ea, double *y, double *ey) {
    const double eh = th_eps(dt), th = th_tiny(dt);
    for (int64_t m = 0; m < I; m++) {
        double g = 0, gm = 0, u = 0, um = 0;
        for (int64_t n = 0; n < H; n++) {
            const double xv = th_get(bx, xo + n);
            const double wg = th_get(b1, w1o + m * H + n);
            g += xv * wg, gm += fabs(xv * wg);
            if (ffn == MF_MOE_FFN_SWIGLU) {
                const double wu = th_get(b1, w1o + (I + m) * H + n);
                u += xv * wu, um += fabs(xv * wu);
            }
        }
        const double egg = eh * fabs(g) + H * kU32 * gm + th; // g as stored in h
        if (ffn == MF_MOE_FFN_SWIGLU) {
            const double eu = eh * fabs(u) + H * kU32 * um + th, s = g * sigmoid_d(g);
            a[m] = s * u;
            ea[m] = 1.2 * egg * fabs(u) + fabs(s) * eu + (eh + 10 * kU32) * fabs(a[m]) + th;
        } else {
            const double v = 1.5957691216057308 * g * (1 + 0.044715 * g * g);
            a[m] = g * sigmoid_d(v);
            ea[m] = 1.2 * egg + (eh + 12 * kU32) * fabs(a[m]) + th;
        }
    }
    for (int64_t i = 0; i < H; i++) {
        double s = 0, mag = 0, prop = 0;
        for (int64_t m = 0; m < I; m++) {
            const double w = th_get(b2, w2o + i * I + m);
            s += a[m] * w, mag += fabs(a[m] * w), prop += ea[m] * fabs(w);
        }
        y[i] = s;
        ey[i] = prop + I * kU32 * mag + eh * fabs(s) + th;
    }
}

static th_result run_layer(th_ctx *ctx, const void *params) {
    const layer_p *p = params;
    const int64_t T = p->T, H = p->H, I = p->I, E = p->E, k = p->k;
    const bool glu = p->ffn == MF_MOE_FFN_SWIGLU;
    const int64_t rows1 = glu ? 2 * I : I;
    const mf_dtype dt = p->dt, wt = p->mixed ? p->wt : p->dt;
    mf_tensor x, wr, w1, w2, sw1, sw2, sg, res, out;
    th_buf *bx = th_tensor(ctx, dt, 2, (const int64_t[]){T, H}, NULL, &x);
    th_buf *bwr = th_tensor(ctx, wt, 2, (const int64_t[]){E, H}, NULL, &wr);
    th_buf *b1 = th_tensor(ctx, wt, 3, (const int64_t[]){E, rows1, H}, NULL, &w1);
    th_buf *b2 = th_tensor(ctx, wt, 3, (const int64_t[]){E, H, I}, NULL, &w2);
    th_buf *bs1 = NULL, *bs2 = NULL, *bsg = NULL, *bres = NULL, *bout;
    // x: multiples of 1/8 in [-2, 2], one in 64 times 4 (outliers); w_router: multiples of 1/64 in [-1, 1].
    for (int64_t i = 0; i < T * H; i++) th_set(bx, i, dyadic(ctx, 2, 8) * (th_rng_int(&ctx->rng, 64) ? 1 : 4));
    for (int64_t i = 0; i < E * H; i++) th_set(bwr, i, dyadic(ctx, 1, 64));
    if (p->rt == RT_ONE) { // column 0 of x is 2 everywhere and expert E - 1 weighs it by 2^10: it wins every token
        for (int64_t t = 0; t < T; t++) th_set(bx, t * H, 2);
        for (int64_t e = 0; e < E; e++) th_set(bwr, e * H, e == E - 1 ? 1024 : 0);
    } else if (p->rt == RT_TIES) { // experts 2i and 2i + 1 have equal logits
        for (int64_t e = 1; e < E; e += 2)
            for (int64_t i = 0; i < H; i++) th_set(bwr, e * H + i, th_get(bwr, (e - 1) * H + i));
    }
    const th_fill_opts o1 = {.lo = -1.5 / sqrt((double)H), .hi = 1.5 / sqrt((double)H), .outlier = 4, .outlier_every = 256};
    const th_fill_opts o2 = {.lo = -1.5 / sqrt((double)I), .hi = 1.5 / sqrt((double)I), .outlier = 4, .outlier_every = 256};
    th_fill(ctx, b1, &w1, &o1);
    th_fill(ctx, b2, &w2, &o2);
    const int64_t srows1 = glu ? 2 * p->Is : p->Is;
    if (p->Is) {
        bs1 = th_tensor(ctx, wt, 2, (const int64_t[]){srows1, H}, NULL, &sw1);
        bs2 = th_tensor(ctx, wt, 2, (const int64_t[]){H, p->Is}, NULL, &sw2);
        th_fill(ctx, bs1, &sw1, &o1);
        const th_fill_opts os = {.lo = -1.5 / sqrt((double)p->Is), .hi = 1.5 / sqrt((double)p->Is), .outlier = 4,
                                 .outlier_every = 256};
        th_fill(ctx, bs2, &sw2, &os);
        if (p->gate) {
            bsg = th_tensor(ctx, wt, 2, (const int64_t[]){1, H}, NULL, &sg);
            th_fill(ctx, bsg, &sg, &o1);
        }
    }
    if (p->res != RES_NONE) {
        bres = th_tensor(ctx, dt, 2, (const int64_t[]){T, H}, NULL, &res);
        th_fill(ctx, bres, &res, NULL);
    }
    if (p->res == RES_INPLACE)
        bout = bres, out = res;
    else
        bout = th_tensor(ctx, dt, 2, (const int64_t[]){T, H}, NULL, &out);
    mf_moe_args a = {.x = x, .w_router = wr, .w1 = w1, .w2 = w2, .ffn = p->ffn, .top_k = p->k, .score = p->score,
                     .order = p->order, .renorm = p->renorm, .routed_scale = p->scale,
                     .shared_w1 = bs1 ? &sw1 : NULL, .shared_w2 = bs2 ? &sw2 : NULL, .shared_gate = bsg ? &sg : NULL,
                     .residual = bres ? &res : NULL, .out = out};
    size_t ws = 0;
    if (p->mixed && mf_backend_device(ctx->be) != MF_DEVICE_CPU) // 16-bit weights with f32 x: the CPU only
        return th_expect(ctx, mf_moe_workspace(ctx->be, &a, &ws), MF_ERR_INVALID_ARG, "w_router dtype", "mixed")
                   ? TH_PASS
                   : TH_FAIL;
    if (mf_moe_workspace(ctx->be, &a, &ws) != MF_OK) return th_fail(ctx, "mf_moe_workspace: %s", mf_last_error());
    th_buf *bws = th_buf_new(ctx, MF_DTYPE_I32, (int64_t)(ws / 4) + 1); // NaN-poisoned
    bws->checked = true; // scratch: not an input that must come back unchanged
    a.workspace = bws->dev, a.workspace_bytes = ws;

    // Reference, token by token.
    double *ref = th_scratch(ctx, (size_t)(T * H) * sizeof(double)), *bnd = th_scratch(ctx, (size_t)(T * H) * sizeof(double));
    const int64_t Imax = I > p->Is ? I : p->Is;
    double *av = th_scratch(ctx, (size_t)Imax * sizeof(double)), *ea = th_scratch(ctx, (size_t)Imax * sizeof(double));
    double *y = th_scratch(ctx, (size_t)H * sizeof(double)), *ey = th_scratch(ctx, (size_t)H * sizeof(double));
    double l[256], wj[8];
    int sel[8];
    const double eo = th_eps(dt), tiny = th_tiny(dt);
    for (int64_t t = 0; t < T; t++) {
        double lmax = 0;
        for (int64_t e = 0; e < E; e++) {
            double s = 0;
            for (int64_t i = 0; i < H; i++) s += th_get(bx, t * H + i) * th_get(bwr, e * H + i);
            l[e] = s, lmax = fmax(lmax, fabs(s));
        }
        const double ew = (16.0 + E + 4 * lmax) * kU32;
        route_ref(l, (int)E, (int)k, p->score, p->order, p->renorm, p->scale, sel, wj);
        double *acc = ref + t * H, *err = bnd + t * H;
        for (int64_t i = 0; i < H; i++) acc[i] = bres ? th_get(bres, t * H + i) : 0, err[i] = fabs(acc[i]) * kU32;
        for (int64_t j = 0; j < k; j++) {
            ffn_ref(bx, t * H, b1, sel[j] * rows1 * H, b2, sel[j] * H * I, H, I, p->ffn, dt, av, ea, y, ey);
            for (int64_t i = 0; i < H; i++) {
                acc[i] += wj[j] * y[i];
                err[i] += fabs(wj[j]) * ey[i] + ew * fabs(wj[j] * y[i]) + (k + 4) * kU32 * fabs(wj[j] * y[i]);
            }
        }
        if (bs1) {
            ffn_ref(bx, t * H, bs1, 0, bs2, 0, H, p->Is, p->ffn, dt, av, ea, y, ey);
            double g = 1, eg = 0;
            if (bsg) {
                double z = 0, zm = 0;
                for (int64_t i = 0; i < H; i++) {
                    z += th_get(bx, t * H + i) * th_get(bsg, i);
                    zm += fabs(th_get(bx, t * H + i) * th_get(bsg, i));
                }
                g = sigmoid_d(z), eg = 0.25 * (H * kU32 * zm) + 8 * kU32 * g;
            }
            for (int64_t i = 0; i < H; i++) {
                acc[i] += g * y[i];
                err[i] += g * ey[i] + eg * fabs(y[i]) + (k + 4) * kU32 * fabs(g * y[i]);
            }
        }
        for (int64_t i = 0; i < H; i++) err[i] = 2 * (err[i] + eo * fabs(acc[i]) + tiny);
    }
    // Capturable (no host sync) exactly when CUDA takes the decode or the wgmma path.
    const char *path = want_path(ctx, T * k, p->dt);
    const bool want_cap = !strcmp(path, "decode") || !strcmp(path, "wgmma");
    const bool cap = mf_moe_capturable(ctx->be, &a);
    if (cap != want_cap) return th_fail(ctx, "mf_moe_capturable %d, want %d", (int)cap, (int)want_cap);
    TH_CALL(ctx, mf_moe(ctx->be, &a));
    bool ok = th_check(ctx, bout, &out, ref, bnd, "out");
    return ok && expect_path(ctx, T * k, p->dt) ? TH_PASS : TH_FAIL;
}

static void add_layer(th_list *l, const layer_p *p) {
    th_add(l, run_layer, p, sizeof *p,
           "moe(dtype=%s%s%s,T=%lld,H=%lld,I=%lld,E=%d,k=%d,ffn=%s,score=%s,order=%s,renorm=%d,scale=%g,routing=%s,"
           "shared=%lld,gate=%d,residual=%s)",
           mf_dtype_name(p->dt), p->mixed ? ",weights=" : "", p->mixed ? mf_dtype_name(p->wt) : "", (long long)p->T, (long long)p->H, (long long)p->I, p->E, p->k, ffn_names[p->ffn],
           score_names[p->score], order_names[p->order], th_b(p->renorm), (double)p->scale, routing_names[p->rt],
           (long long)p->Is, th_b(p->gate), res_names[p->res]);
}

// ---- experts alone -------------------------------------------------------------------------

typedef struct {
    mf_dtype dt;
    int64_t N, H, I;
    int E;
    mf_moe_ffn ffn;
    bool host;   // host_offsets given (else read back)
    int64_t tail; // rows after offsets[E] that no expert owns (must stay poisoned)
} experts_p;

static th_result run_experts(th_ctx *ctx, const void *params) {
    const experts_p *p = params;
    const int64_t N = p->N, H = p->H, I = p->I, E = p->E;
    const bool glu = p->ffn == MF_MOE_FFN_SWIGLU;
    const int64_t rows1 = glu ? 2 * I : I;
    mf_tensor x, off, w1, w2, h, y;
    th_buf *bx = th_tensor(ctx, p->dt, 2, (const int64_t[]){N, H}, NULL, &x);
    th_buf *bo = th_tensor(ctx, MF_DTYPE_I32, 1, (const int64_t[]){E + 1}, NULL, &off);
    th_buf *b1 = th_tensor(ctx, p->dt, 3, (const int64_t[]){E, rows1, H}, NULL, &w1);
    th_buf *b2 = th_tensor(ctx, p->dt, 3, (const int64_t[]){E, H, I}, NULL, &w2);
    th_buf *bh = th_tensor(ctx, p->dt, 2, (const int64_t[]){N, rows1}, NULL, &h);
    th_buf *by = th_tensor(ctx, p->dt, 2, (const int64_t[]){N, H}, NULL, &y);
    const th_fill_opts xo = {.lo = -2, .hi = 2, .outlier = 4, .outlier_every = 64};
    const th_fill_opts o1 = {.lo = -1.5 / sqrt((double)H), .hi = 1.5 / sqrt((double)H), .outlier = 4, .outlier_every = 256};
    const th_fill_opts o2 = {.lo = -1.5 / sqrt((double)I), .hi = 1.5 / sqrt((double)I), .outlier = 4, .outlier_every = 256};
    th_fill(ctx, bx, &x, &xo);
    th_fill(ctx, b1, &w1, &o1);
    th_fill(ctx, b2, &w2, &o2);
    // Random split of the first N - tail rows; about a third of the experts get none.
    int32_t *o = th_scratch(ctx, (size_t)(E + 1) * sizeof(int32_t));
    const int64_t used = N - p->tail;
    int64_t left = used;
    o[0] = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t n = e == E - 1 ? left : th_rng_int(&ctx->rng, 3) == 0 ? 0 : th_rng_int(&ctx->rng, 2 * used / E + 2);
        if (n > left) n = left;
        o[e + 1] = o[e] + (int32_t)n, left -= n;
    }
    for (int64_t e = 0; e <= E; e++) th_set(bo, e, o[e]);
    double *ref = th_scratch(ctx, (size_t)(N * H) * sizeof(double)), *bnd = th_scratch(ctx, (size_t)(N * H) * sizeof(double));
    double *av = th_scratch(ctx, (size_t)I * sizeof(double)), *ea = th_scratch(ctx, (size_t)I * sizeof(double));
    for (int64_t i = 0; i < N * H; i++) ref[i] = NAN, bnd[i] = 0; // rows of no expert keep their NaN poison
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = o[e]; r < o[e + 1]; r++)
            ffn_ref(bx, r * H, b1, e * rows1 * H, b2, e * H * I, H, I, p->ffn, p->dt, av, ea, ref + r * H, bnd + r * H);
    for (int64_t i = 0; i < used * H; i++) bnd[i] = 2 * bnd[i] + th_tiny(p->dt);
    mf_moe_experts_args a = {.x = x, .offsets = off, .host_offsets = p->host ? o : NULL, .w1 = w1, .w2 = w2, .h = h,
                             .y = y, .ffn = p->ffn};
    TH_CALL(ctx, mf_moe_experts(ctx->be, &a));
    bh->checked = true; // scratch
    bool ok = th_check(ctx, by, &y, ref, bnd, "y");
    return ok && expect_path(ctx, N, p->dt) ? TH_PASS : TH_FAIL;
}

static void add_experts(th_list *l, const experts_p *p) {
    th_add(l, run_experts, p, sizeof *p, "moe(part=experts,dtype=%s,N=%lld,H=%lld,I=%lld,E=%d,ffn=%s,host_offsets=%d,tail=%lld)",
           mf_dtype_name(p->dt), (long long)p->N, (long long)p->H, (long long)p->I, p->E, ffn_names[p->ffn],
           th_b(p->host), (long long)p->tail);
}

// ---- bad input ----------------------------------------------------------------------------

static th_result run_validation(th_ctx *ctx, const void *params) {
    (void)params;
    const int64_t T = 5, H = 8, I = 4, E = 4;
    mf_tensor x, wr, w1, w2, w1h, out, ws, ids, wts, lg, off, srt, inv;
    th_tensor(ctx, MF_DTYPE_F32, 2, (const int64_t[]){T, H}, NULL, &x);
    th_tensor(ctx, MF_DTYPE_F32, 2, (const int64_t[]){E, H}, NULL, &wr);
    th_tensor(ctx, MF_DTYPE_F32, 3, (const int64_t[]){E, 2 * I, H}, NULL, &w1);
    th_tensor(ctx, MF_DTYPE_F32, 3, (const int64_t[]){E, H, I}, NULL, &w2);
    th_tensor(ctx, MF_DTYPE_F16, 3, (const int64_t[]){E, 2 * I, H}, NULL, &w1h);
    th_tensor(ctx, MF_DTYPE_F32, 2, (const int64_t[]){T, H}, NULL, &out);
    th_tensor(ctx, MF_DTYPE_I32, 1, (const int64_t[]){1 << 14}, NULL, &ws);
    th_tensor(ctx, MF_DTYPE_I32, 2, (const int64_t[]){T, 2}, NULL, &ids);
    th_tensor(ctx, MF_DTYPE_F32, 2, (const int64_t[]){T, 2}, NULL, &wts);
    th_tensor(ctx, MF_DTYPE_F32, 2, (const int64_t[]){T, E}, NULL, &lg);
    th_tensor(ctx, MF_DTYPE_I32, 1, (const int64_t[]){E + 1}, NULL, &off);
    th_tensor(ctx, MF_DTYPE_I32, 1, (const int64_t[]){2 * T}, NULL, &srt);
    th_tensor(ctx, MF_DTYPE_I32, 1, (const int64_t[]){2 * T}, NULL, &inv);
    for (int i = 0; i < ctx->nbufs; i++) // zero inputs: a valid layer (all logits tie)
        memset(ctx->bufs[i]->host, 0, ctx->bufs[i]->bytes), ctx->bufs[i]->uploaded = false;
    th_upload_all(ctx);
    bool ok = true;
    const mf_moe_args base = {.x = x, .w_router = wr, .w1 = w1, .w2 = w2, .ffn = MF_MOE_FFN_SWIGLU, .top_k = 2,
                              .routed_scale = 1.0f, .out = out, .workspace = ws.data, .workspace_bytes = 1 << 16};
    mf_moe_args t;
#define TRY(mod, want, needle, what)                                \
    do {                                                            \
        t = base;                                                   \
        mod;                                                        \
        ok &= th_expect(ctx, mf_moe(ctx->be, &t), want, needle, what); \
    } while (0)
    ok &= th_expect(ctx, mf_moe(ctx->be, NULL), MF_ERR_INVALID_ARG, "args is NULL", "NULL args");
    ok &= th_expect(ctx, mf_moe(NULL, &base), MF_ERR_INVALID_ARG, "backend is NULL", "NULL backend");
    TRY(t.top_k = 5, MF_ERR_INVALID_ARG, "top_k 5 > n_experts 4", "k > E");
    TRY(t.top_k = 9, MF_ERR_INVALID_ARG, "top_k 9 (want 1..8)", "k = 9");
    TRY(t.top_k = 0, MF_ERR_INVALID_ARG, "top_k 0 (want 1..8)", "k = 0");
    TRY(t.w_router.shape[0] = 0, MF_ERR_INVALID_ARG, "n_experts 0 (want 1..256)", "E = 0");
    TRY(t.w_router.shape[0] = 300; t.w1.shape[0] = 300; t.w2.shape[0] = 300, MF_ERR_INVALID_ARG,
        "n_experts 300 (want 1..256)", "E = 300");
    TRY(t.w2.shape[2] = 5, MF_ERR_INVALID_ARG, "w2 shape (4, 8, 5) != (4, 8, 4)", "w2 width");
    TRY(t.w1.shape[0] = 3, MF_ERR_INVALID_ARG, "w1 shape (3, 8, 8) != (4, *, 8)", "w1 experts");
    TRY(t.w1.shape[1] = 7, MF_ERR_INVALID_ARG, "w1 rows 7 (want 2 * I", "odd gate|up");
    TRY(t.w1 = w1h; t.w1.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "w1 dtype i32 (want f32", "w1 dtype");
    if (mf_backend_device(ctx->be) == MF_DEVICE_CUDA) // f16 weights with f32 x: the CPU only
        TRY(t.w1 = w1h, MF_ERR_INVALID_ARG, "w1 dtype f16 (want f32)", "w1 f16 on cuda");
    TRY(t.x.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "x dtype i32", "x dtype");
    TRY(t.out.shape[0] = 4, MF_ERR_INVALID_ARG, "out shape (4, 8) != (5, 8)", "out rows");
    TRY(t.ffn = (mf_moe_ffn)7, MF_ERR_INVALID_ARG, "invalid ffn kind 7", "ffn kind");
    TRY(t.score = (mf_moe_score)3, MF_ERR_INVALID_ARG, "invalid score function 3", "score");
    TRY(t.routed_scale = NAN, MF_ERR_INVALID_ARG, "routed_scale nan is not finite", "NaN scale");
    TRY(t.workspace_bytes = 100, MF_ERR_INVALID_ARG, "workspace of 100 bytes (given), need", "small workspace");
    TRY(t.workspace = NULL, MF_ERR_INVALID_ARG, "(NULL)", "NULL workspace");
    TRY(t.shared_w1 = &w1, MF_ERR_INVALID_ARG, "shared_w1 and shared_w2 must be given together", "half shared");
    TRY(t.out = x, MF_ERR_INVALID_ARG, "out and x overlap", "out over x");
    TRY(t.workspace = x.data, MF_ERR_INVALID_ARG, "workspace and x overlap", "workspace over x");
    TRY((void)0, MF_OK, NULL, "valid call after the errors");
#undef TRY
    // The parts.
    mf_moe_router_args r = {.logits = lg, .ids = ids, .weights = wts, .routed_scale = 1.0f}, rt;
    rt = r, rt.ids.shape[1] = 5, rt.weights.shape[1] = 5;
    ok &= th_expect(ctx, mf_moe_router(ctx->be, &rt), MF_ERR_INVALID_ARG, "top_k 5 > n_experts 4", "router k > E");
    rt = r, rt.weights.dtype = MF_DTYPE_F16;
    ok &= th_expect(ctx, mf_moe_router(ctx->be, &rt), MF_ERR_INVALID_ARG, "weights dtype f16 (want f32)", "router w dtype");
    rt = r, rt.order = (mf_moe_order)2;
    ok &= th_expect(ctx, mf_moe_router(ctx->be, &rt), MF_ERR_INVALID_ARG, "invalid order 2", "router order");
    rt = r, rt.routed_scale = INFINITY;
    ok &= th_expect(ctx, mf_moe_router(ctx->be, &rt), MF_ERR_INVALID_ARG, "routed_scale inf", "router scale");
    ok &= th_expect(ctx, mf_moe_router(ctx->be, &r), MF_OK, NULL, "router valid");
    mf_moe_permute_args pm = {.ids = ids, .offsets = off, .sorted = srt, .inv = inv, .n_experts = (int32_t)E}, pt;
    pt = pm, pt.n_experts = 0;
    ok &= th_expect(ctx, mf_moe_permute(ctx->be, &pt), MF_ERR_INVALID_ARG, "n_experts 0", "permute E = 0");
    pt = pm, pt.x = &x;
    ok &= th_expect(ctx, mf_moe_permute(ctx->be, &pt), MF_ERR_INVALID_ARG, "x and xs must be given together", "permute x");
    pt = pm, pt.sorted.shape[0] = 9;
    ok &= th_expect(ctx, mf_moe_permute(ctx->be, &pt), MF_ERR_INVALID_ARG, "sorted shape (9) != (10)", "permute sorted");
    ok &= th_expect(ctx, mf_moe_permute(ctx->be, &pm), MF_OK, NULL, "permute valid");
    if (ctx->be && strcmp(mf_backend_name(ctx->be), "cpu") == 0) { // ids out of range: CPU refuses (CUDA drops)
        ((int32_t *)ids.data)[7] = 4;
        ok &= th_expect(ctx, mf_moe_permute(ctx->be, &pm), MF_ERR_INVALID_ARG, "ids[7] (token 3, slot 1) = 4 outside [0, 4)",
                     "permute id range");
        ((int32_t *)ids.data)[7] = 0;
    }
    mf_moe_combine_args cb = {.ys = x, .inv = inv, .weights = wts, .out = out}, ct;
    ct = cb, ct.out = x;
    ok &= th_expect(ctx, mf_moe_combine(ctx->be, &ct), MF_ERR_INVALID_ARG, "out and ys overlap in memory", "combine out over ys");
    ct = cb, ct.weights.shape[1] = 9;
    ok &= th_expect(ctx, mf_moe_combine(ctx->be, &ct), MF_ERR_INVALID_ARG, "top_k 9", "combine k");
    ct = cb, ct.shared_gate = &wts;
    ok &= th_expect(ctx, mf_moe_combine(ctx->be, &ct), MF_ERR_INVALID_ARG, "shared_gate without shared", "combine gate");
    mf_moe_experts_args ex = {.x = x, .offsets = off, .w1 = w1, .w2 = w2, .h = lg, .y = out};
    ok &= th_expect(ctx, mf_moe_experts(ctx->be, &ex), MF_ERR_INVALID_ARG, "h shape (5, 4) != (5, 8)", "experts h");
    for (int i = 0; i < ctx->nbufs; i++) ctx->bufs[i]->checked = true; // valid calls wrote outputs
    return ok ? TH_PASS : TH_FAIL;
}

// ---- the case list ------------------------------------------------------------------------

void th_cases_moe(th_list *l) {
    static const mf_dtype dts[3] = {MF_DTYPE_F32, MF_DTYPE_BF16, MF_DTYPE_F16};
    static const int Es[6] = {1, 8, 60, 64, 128, 256}, ks[3] = {1, 2, 8};
    // 1. Router alone: every E x k <= E, both conventions, both scores, renorm, ties, -inf runs.
    int v = 0;
    for (int ei = 0; ei < 6; ei++)
        for (int ki = 0; ki < 3; ki++) {
            if (ks[ki] > Es[ei]) continue;
            for (int c = 0; c < 4; c++, v++) {
                router_p p = {.lt = dts[v % 3], .T = (int64_t[]){1, 3, 128, 37}[c], .E = Es[ei], .k = ks[ki],
                              .score = (mf_moe_score)(c & 1), .order = (mf_moe_order)((c >> 1) & 1),
                              .renorm = (v % 3) != 0, .ties = (v % 2) == 0, .neginf = c == 3,
                              .scale = v % 4 == 1 ? 2.5f : 1.0f};
                th_add(l, run_router, &p, sizeof p,
                       "moe(part=router,logits=%s,T=%lld,E=%d,k=%d,score=%s,order=%s,renorm=%d,ties=%d,neginf=%d,scale=%g)",
                       mf_dtype_name(p.lt), (long long)p.T, p.E, p.k, score_names[p.score], order_names[p.order],
                       th_b(p.renorm), th_b(p.ties), th_b(p.neginf), (double)p.scale);
            }
        }
    // 2. Permutation alone: skewed and one-expert routing, T up to 4099.
    static const int64_t Ts[4] = {1, 3, 128, 4099};
    for (int ei = 0; ei < 6; ei++)
        for (int ti = 0; ti < 4; ti++) {
            const int k = ks[(ei + ti) % 3] > Es[ei] ? 1 : ks[(ei + ti) % 3];
            permute_p p = {.T = Ts[ti], .H = ti == 3 ? 8 : 24, .E = Es[ei], .k = k, .rt = (ei + ti) % 5 == 0 ? RT_ONE : RT_RANDOM,
                           .dt = dts[(ei + ti) % 3]};
            th_add(l, run_permute, &p, sizeof p, "moe(part=permute,dtype=%s,T=%lld,H=%lld,E=%d,k=%d,routing=%s)",
                   mf_dtype_name(p.dt), (long long)p.T, (long long)p.H, p.E, p.k, routing_names[p.rt]);
        }
    // Views that start at an odd 16-bit element with an odd row stride: the
    // gather must not take 4-byte pieces there (H even: row_bytes % 4 == 0).
    for (int d = 1; d < 3; d++) {
        permute_p p = {.T = 37, .H = 24, .E = 8, .k = 2, .rt = RT_RANDOM, .dt = dts[d], .odd = true};
        th_add(l, run_permute, &p, sizeof p, "moe(part=permute,dtype=%s,T=%lld,H=%lld,E=%d,k=%d,routing=%s,offset=1,ld=%lld)",
               mf_dtype_name(p.dt), (long long)p.T, (long long)p.H, p.E, p.k, routing_names[p.rt], (long long)(p.H + 1));
    }
    // 3. Combine alone: shared on/off, gate, residual none / separate / in place, dtypes.
    for (int c = 0; c < 12; c++) {
        combine_p p = {.T = (int64_t[]){1, 3, 128, 257}[c % 4], .H = (int64_t[]){8, 72, 33}[c % 3], .k = ks[c % 3],
                       .dt = dts[c % 3], .ot = dts[(c / 3) % 3], .shared = c % 2 == 1, .gate = c % 4 == 3,
                       .res = (res_mode)((c / 2) % 3)};
        th_add(l, run_combine, &p, sizeof p, "moe(part=combine,dtype=%s,out=%s,T=%lld,H=%lld,k=%d,shared=%d,gate=%d,residual=%s)",
               mf_dtype_name(p.dt), mf_dtype_name(p.ot), (long long)p.T, (long long)p.H, p.k, th_b(p.shared),
               th_b(p.gate), res_names[p.res]);
    }
    // 4. The layer over the E x k grid (k <= E; k = E at E = 1 and E = 8), T cycling.
    v = 0;
    for (int ei = 0; ei < 6; ei++)
        for (int ki = 0; ki < 3; ki++, v++) {
            if (ks[ki] > Es[ei]) continue;
            layer_p p = {.dt = dts[v % 3], .T = (int64_t[]){1, 3, 128}[v % 3], .H = 72, .I = 40, .E = Es[ei], .k = ks[ki],
                         .ffn = (mf_moe_ffn)(v % 2), .renorm = v % 3 != 1, .scale = 1.0f, .rt = RT_RANDOM,
                         .res = (res_mode)(v % 3)};
            add_layer(l, &p);
        }
    {
        layer_p p = {.dt = MF_DTYPE_F32, .T = 37, .H = 40, .I = 24, .E = 8, .k = 8, .scale = 1.0f, .renorm = true};
        add_layer(l, &p); // k = E
    }
    // 5. Conventions: score x order x renorm, f32 and bf16.
    for (int c = 0; c < 8; c++) {
        layer_p p = {.dt = c % 2 ? MF_DTYPE_BF16 : MF_DTYPE_F32, .T = 128, .H = 64, .I = 48, .E = 8, .k = 2,
                     .score = (mf_moe_score)(c & 1), .order = (mf_moe_order)((c >> 1) & 1), .renorm = (c >> 2) & 1,
                     .scale = c == 5 ? 2.5f : 1.0f, .ffn = (mf_moe_ffn)((c >> 1) & 1)};
        add_layer(l, &p);
    }
    // 6. Routing extremes: all tokens on one expert (k = 1: every other expert empty), ties.
    for (int d = 0; d < 3; d++) {
        layer_p one = {.dt = dts[d], .T = 128, .H = 48, .I = 32, .E = 64, .k = 1 + d % 2, .scale = 1.0f, .rt = RT_ONE,
                       .renorm = true};
        add_layer(l, &one);
        layer_p ties = {.dt = dts[d], .T = 128, .H = 48, .I = 32, .E = 8, .k = 2 + 2 * d, .scale = 1.0f, .rt = RT_TIES,
                        .order = (mf_moe_order)(d % 2), .renorm = d != 1};
        add_layer(l, &ties);
    }
    // 7. Qwen-MoE style: 60 experts, k = 4, shared expert with and without its gate, residual in place.
    for (int c = 0; c < 4; c++) {
        layer_p p = {.dt = dts[c % 3], .T = (int64_t[]){3, 128, 1, 128}[c], .H = 64, .I = 16, .E = 60, .k = 4,
                     .score = MF_MOE_SCORE_SOFTMAX, .renorm = false, .scale = 1.0f, .Is = c == 3 ? 0 : 80,
                     .gate = c != 1, .res = c % 2 ? RES_INPLACE : RES_SEPARATE, .ffn = c == 2 ? MF_MOE_FFN_GELU : MF_MOE_FFN_SWIGLU};
        if (!p.Is) p.gate = false;
        add_layer(l, &p);
    }
    // 8. T = 4099 at small widths (the CPU run stays short): E 8 / 64 / 256, k 2 / 8.
    static const int big[3][2] = {{8, 2}, {64, 8}, {256, 8}};
    for (int c = 0; c < 3; c++) {
        layer_p p = {.dt = dts[c], .T = 4099, .H = 32, .I = 16, .E = big[c][0], .k = big[c][1], .scale = 1.0f,
                     .renorm = c != 1, .ffn = (mf_moe_ffn)(c == 1), .Is = c == 2 ? 32 : 0, .gate = c == 2,
                     .res = (res_mode)c};
        add_layer(l, &p);
    }
    // 9. Experts alone: empty experts, rows past offsets[E] left alone, host or read-back offsets.
    for (int c = 0; c < 6; c++) {
        experts_p p = {.dt = dts[c % 3], .N = (int64_t[]){1, 7, 200}[c % 3], .H = 40, .I = 24, .E = (int[]){1, 8, 60}[c % 3],
                       .ffn = (mf_moe_ffn)(c / 3), .host = c % 2 == 0, .tail = c % 3 == 2 ? 5 : 0};
        add_experts(l, &p);
    }
    // 10. The decode path's edges (MF_MOE_DECODE_MAX_ROWS = 32 routed rows): at the limit and just past it,
    //     one expert with all 32 rows (4 row groups of 8), E > N, k = 8; experts alone with a tail and host offsets.
    const layer_p dec[5] = {
        {.dt = MF_DTYPE_BF16, .T = 16, .H = 64, .I = 48, .E = 8, .k = 2, .renorm = true, .scale = 1.0f},
        {.dt = MF_DTYPE_BF16, .T = 17, .H = 64, .I = 48, .E = 8, .k = 2, .renorm = true, .scale = 1.0f},
        {.dt = MF_DTYPE_F16, .T = 32, .H = 48, .I = 32, .E = 8, .k = 1, .scale = 1.0f, .rt = RT_ONE, .ffn = MF_MOE_FFN_GELU},
        {.dt = MF_DTYPE_F32, .T = 4, .H = 72, .I = 40, .E = 64, .k = 8, .scale = 1.0f, .res = RES_INPLACE},
        {.dt = MF_DTYPE_BF16, .T = 1, .H = 64, .I = 32, .E = 256, .k = 8, .renorm = true, .scale = 1.0f, .Is = 48,
         .gate = true, .res = RES_SEPARATE},
    };
    for (int c = 0; c < 5; c++) add_layer(l, &dec[c]);
    const experts_p dex[6] = {
        {.dt = MF_DTYPE_BF16, .N = 32, .H = 40, .I = 24, .E = 1, .ffn = MF_MOE_FFN_SWIGLU},
        {.dt = MF_DTYPE_F16, .N = 32, .H = 40, .I = 24, .E = 60, .ffn = MF_MOE_FFN_GELU, .host = true, .tail = 5},
        {.dt = MF_DTYPE_F32, .N = 20, .H = 40, .I = 24, .E = 3, .ffn = MF_MOE_FFN_GELU, .tail = 3},
        {.dt = MF_DTYPE_F32, .N = 33, .H = 40, .I = 24, .E = 8, .ffn = MF_MOE_FFN_SWIGLU},
        // K long enough for every unrolled load and a second pass of the decode kernel's
        // K loop (bf16: 1024 elements per pass; f32: 512), with tails (a review's gap)
        {.dt = MF_DTYPE_BF16, .N = 12, .H = 2056, .I = 1032, .E = 4, .ffn = MF_MOE_FFN_SWIGLU},
        {.dt = MF_DTYPE_F32, .N = 9, .H = 1028, .I = 520, .E = 3, .ffn = MF_MOE_FFN_GELU, .host = true},
    };
    for (int c = 0; c < 6; c++) add_experts(l, &dex[c]);
    // 11. Shapes for the sm_90a grouped GEMMs' tiles (128 rows x 256 columns, K steps of 64):
    //     experts with several row tiles, partial column tiles, K tails in both GEMMs
    //     (H = 200, I = 136), two column tiles (H = 264, I = 320), 64 experts, more tiles
    //     than SMs; a whole layer.
    const experts_p gex[4] = {
        {.dt = MF_DTYPE_BF16, .N = 700, .H = 200, .I = 136, .E = 5, .ffn = MF_MOE_FFN_SWIGLU, .tail = 9},
        {.dt = MF_DTYPE_F16, .N = 300, .H = 264, .I = 320, .E = 3, .ffn = MF_MOE_FFN_GELU, .host = true},
        {.dt = MF_DTYPE_BF16, .N = 1000, .H = 64, .I = 64, .E = 64, .ffn = MF_MOE_FFN_SWIGLU, .tail = 1},
        // ~200 tiles in GEMM 1 (2 K steps), ~50 in GEMM 2 (7 K steps): more tiles than an H100 has SMs, so blocks take
        // several tiles and the barrier phases run on across them.
        {.dt = MF_DTYPE_BF16, .N = 3000, .H = 72, .I = 392, .E = 64, .ffn = MF_MOE_FFN_SWIGLU},
    };
    for (int c = 0; c < 4; c++) add_experts(l, &gex[c]);
    const layer_p glayer = {.dt = MF_DTYPE_BF16, .T = 512, .H = 128, .I = 192, .E = 8, .k = 2, .renorm = true,
                            .scale = 1.0f, .res = RES_INPLACE};
    add_layer(l, &glayer);
    // 12. f16 / bf16 weights with f32 x, residual and out (the CPU keeps a 16-bit checkpoint's weights;
    //     CUDA refuses): decode (1 token: the skinny GEMMs) and prefill (experts of > 8 rows: widened
    //     panels), SwiGLU and GELU, a shared expert with its gate, residual in place.
    for (int c = 0; c < 4; c++) {
        layer_p p = {.dt = MF_DTYPE_F32, .mixed = true, .wt = c % 2 ? MF_DTYPE_F16 : MF_DTYPE_BF16,
                     .T = (int64_t[]){1, 128, 3, 200}[c], .H = 64, .I = 40, .E = 8, .k = 2, .renorm = c != 2,
                     .scale = 1.0f, .ffn = (mf_moe_ffn)(c / 2), .Is = c >= 2 ? 48 : 0, .gate = c == 3,
                     .res = (res_mode)(c % 3)};
        add_layer(l, &p);
    }
    layer_p none = {0};
    th_add(l, run_validation, &none, sizeof none, "moe(validation)");
}
