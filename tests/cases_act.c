// Activation cases (mf_act): y = act(x) (* up) for SiLU, tanh GELU, erf GELU.
//
// Reference in double: silu(x) = x sigmoid(x), gelu_tanh(x) = 0.5 x (1 +
// tanh(u)) = x sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3),
// gelu_erf(x) = 0.5 x erfc(-x / sqrt 2); sigmoid evaluated as
// e / (1 + e) or 1 / (1 + e), e = exp(-|v|), so the reference itself never
// overflows.
// Tolerance, with a = act(x), u32 = 2^-24:
//     |y - ref| <= (A + 1) u32 |a| |up| + eps_y |ref| + 2^-126 (1 + |x|)(1 + |up|) + tiny_y
// where A is act's relative error in f32 from rounding its argument and
// evaluating exp / erfc (within 2 and 4 ulp on CUDA, fewer in glibc):
//     silu      A = 8
//     gelu_tanh A = 8 + 8 |v| (1 - sigmoid(v)),  v = 2u  (v carries up to 7
//               roundings, constants included; sigmoid's relative sensitivity
//               to v is 1 - sigmoid(v))
//     gelu_erf  A = 10 + 2 |z| h(z),  z = -x / sqrt 2, h = |d ln erfc(z) / dz|
//               (~2z in the left tail of gelu, ~0 in the right)
// and the 2^-126 term absorbs f32 subnormal intermediates (exp(-|x|) for
// |x| > 87). A naive 0.5 x (1 + erf(x / sqrt 2)) in f32 cancels for x < -3
// and fails this bound; a sigmoid as exp(x) / (1 + exp(x)) gives NaN at
// x = 1e4: the "specials" cases plant such values (up to +-3e38 in f32 and
// bf16, where x^2 and x^3 overflow f32; +-6e4 in f16) with up = 1.
// Inputs: x uniform in [-6, 6), up in [-2, 2), both with outliers (x1e3 and
// x1e2; x10 when x or y is f16, keeping y in range).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static const double kPi = 3.14159265358979323846;

typedef enum {
    AL_SEPARATE = 0, // x, up, y in their own contiguous buffers
    AL_FUSED = 1,    // x and up are the two halves of one (rows, 2n) gate|up buffer
    AL_INPLACE = 2,  // y is x (gated: x and up fused, y written over the gate half)
    AL_PADDED = 3,   // row strides n + 3 (x), n + 5 (up), n + 1 (y)
    AL_OFFSET = 4,   // separate, each view 1 element past a 16-byte boundary
} act_layout;
static const char *const layout_names[] = {"separate", "fused", "inplace", "padded", "offset"};
static const char *const kind_names[] = {"silu", "gelu_tanh", "gelu_erf"};

typedef struct {
    mf_act_kind kind;
    mf_dtype xt, yt; // up has x's dtype
    bool gated;
    int64_t rows, n;
    act_layout layout;
    bool specials;
} act_p;

static double sigmoid_d(double v) {
    const double e = exp(-fabs(v));
    return (v >= 0 ? 1.0 : e) / (1.0 + e);
}

// act(x) in double and its relative-error factor A (see the top).
static double act_ref(mf_act_kind kind, double x, double *amp) {
    if (kind == MF_ACT_SILU) {
        *amp = 8;
        return x * sigmoid_d(x);
    }
    if (kind == MF_ACT_GELU_TANH) {
        const double v = 2.0 * sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x), s = sigmoid_d(v);
        *amp = 8 + 8 * fabs(v) * (v >= 0 ? sigmoid_d(-v) : 1.0 - s);
        return x * s;
    }
    const double z = -x / sqrt(2.0);
    double h = 0.0;
    if (z > 5)
        h = 2 * z + 2 / z; // Mills ratio bound (erfc(z) underflows double past z ~ 26)
    else
        h = 2 * exp(-z * z) / (sqrt(kPi) * erfc(z));
    *amp = 10 + 2 * fabs(z) * h;
    return 0.5 * x * erfc(z);
}

// Values that break naive formulas (see the top), for x's and y's dtypes.
static int specials_of(mf_dtype xt, mf_dtype yt, const double **out) {
    static const double f32[] = {-1e4, 1e4, -3e38, 3e38, -100, -88.5, -20, 20, -5, 5, -1e-3, 1e-30, 0, -0.0};
    static const double bf16[] = {-1e4, 1e4, -3e38, 3e38, -100, -20, 20, -5, 5, -1e-3, 0};
    static const double f16[] = {-6e4, 6e4, -100, -20, 20, -5, 5, -1e-3, 6e-8, 0};
    if (xt == MF_DTYPE_F16 || yt == MF_DTYPE_F16) {
        *out = f16;
        return (int)(sizeof f16 / sizeof f16[0]);
    }
    if (xt == MF_DTYPE_BF16 || yt == MF_DTYPE_BF16) {
        *out = bf16;
        return (int)(sizeof bf16 / sizeof bf16[0]);
    }
    *out = f32;
    return (int)(sizeof f32 / sizeof f32[0]);
}

// Uniform values with outliers (and at least one) into rows x n elements of b
// at base + r * ld + i.
static void fill_rows(th_ctx *ctx, th_buf *b, int64_t base, int64_t ld, int64_t rows, int64_t n,
                      const th_fill_opts *o) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            double v = th_rng_unif(&ctx->rng, o->lo, o->hi);
            if (th_rng_int(&ctx->rng, o->outlier_every) == 0) v *= o->outlier;
            th_set(b, base + r * ld + i, v);
        }
    if (rows * n >= 8) {
        const int64_t r = th_rng_int(&ctx->rng, rows), i = th_rng_int(&ctx->rng, n);
        th_set(b, base + r * ld + i, (th_rng_int(&ctx->rng, 2) ? 1 : -1) * th_rng_unif(&ctx->rng, 0.5, 1) * o->outlier * o->hi);
    }
}

// A (rows, n) view with row stride ld starting `base` elements into b.
static mf_tensor view_at(th_ctx *ctx, const th_buf *b, int64_t base, int64_t rows, int64_t n, int64_t ld) {
    mf_tensor t = th_view(ctx, b, 2, (const int64_t[]){rows, n}, (const int64_t[]){ld, 1});
    t.data = (char *)t.data + (size_t)base * mf_dtype_size(b->dtype);
    return t;
}

static th_result run_act(th_ctx *ctx, const void *params) {
    const act_p *p = params;
    const int64_t rows = p->rows, n = p->n;
    const bool fused = p->layout == AL_FUSED || (p->layout == AL_INPLACE && p->gated);
    const int64_t off = p->layout == AL_OFFSET ? 1 : 0;
    const int64_t xld = fused ? 2 * n : p->layout == AL_PADDED ? n + 3 : n;
    const int64_t uld = fused ? 2 * n : p->layout == AL_PADDED ? n + 5 : n;
    const int64_t yld = p->layout == AL_INPLACE ? xld : p->layout == AL_PADDED ? n + 1 : n;
    const bool small = p->xt == MF_DTYPE_F16 || p->yt == MF_DTYPE_F16;
    const th_fill_opts xo = {.lo = -6, .hi = 6, .outlier = small ? 10 : 1e3, .outlier_every = 64};
    const th_fill_opts uo = {.lo = -2, .hi = 2, .outlier = small ? 10 : 1e2, .outlier_every = 64};
    mf_act_args a = {.kind = p->kind};
    mf_tensor up;
    // Buffers and the element offsets of the views in them. Fused: x = columns
    // [0, n) and up = [n, 2n) of one (rows, 2n) buffer.
    th_buf *bx = th_buf_new(ctx, p->xt, (rows - 1) * xld + (fused ? 2 * n : n) + off), *bu = NULL, *by;
    const int64_t xbase = off;
    int64_t ubase = off, ybase = off;
    a.x = view_at(ctx, bx, xbase, rows, n, xld);
    fill_rows(ctx, bx, xbase, xld, rows, n, &xo);
    if (fused) {
        bu = bx, ubase = n;
        fill_rows(ctx, bx, ubase, xld, rows, n, &uo); // filled even when not used: must survive
    } else if (p->gated) {
        bu = th_buf_new(ctx, p->xt, (rows - 1) * uld + n + off);
        fill_rows(ctx, bu, ubase, uld, rows, n, &uo);
    }
    if (p->gated) {
        up = view_at(ctx, bu, ubase, rows, n, uld);
        a.up = &up;
    } else {
        bu = NULL;
    }
    if (p->specials) { // in row 0 and the last row (negated), with up = 1 there
        const double *sv;
        const int ns = specials_of(p->xt, p->yt, &sv);
        for (int64_t k = 0; k < ns && k < n; k++)
            for (int64_t r = 0; r < rows; r += rows > 1 ? rows - 1 : 1) {
                th_set(bx, xbase + r * xld + k, (r ? -1 : 1) * sv[k]);
                if (bu) th_set(bu, ubase + r * uld + k, 1.0);
            }
    }
    if (p->layout == AL_INPLACE) {
        by = bx, a.y = a.x, ybase = xbase;
    } else {
        by = th_buf_new(ctx, p->yt, (rows - 1) * yld + n + off);
        a.y = view_at(ctx, by, ybase, rows, n, yld);
    }

    // Reference over the whole y buffer: what is outside the view keeps its value.
    double *ref = th_scratch(ctx, (size_t)by->n * sizeof(double)), *bnd = th_scratch(ctx, (size_t)by->n * sizeof(double));
    for (int64_t e = 0; e < by->n; e++) ref[e] = th_get(by, e);
    const double u32 = 0x1.0p-24, ey = th_eps(by->dtype), tiny = th_tiny(by->dtype);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            const double x = th_get(bx, xbase + r * xld + i), u = bu ? th_get(bu, ubase + r * uld + i) : 1.0;
            double amp;
            const double av = act_ref(p->kind, x, &amp), y = av * u;
            const int64_t e = ybase + r * yld + i;
            ref[e] = y;
            bnd[e] = (amp + 1) * u32 * fabs(av) * fabs(u) + ey * fabs(y) + 0x1.0p-126 * (1 + fabs(x)) * (1 + fabs(u)) + tiny;
        }

    TH_CALL(ctx, mf_act(ctx->be, &a));
    mf_tensor flat = th_view(ctx, by, 1, &by->n, NULL);
    return th_check(ctx, by, &flat, ref, bnd, "y") ? TH_PASS : TH_FAIL;
}

static void add_act(th_list *l, const act_p *p) {
    char dts[32];
    if (p->yt == p->xt)
        snprintf(dts, sizeof dts, "%s", mf_dtype_name(p->xt));
    else
        snprintf(dts, sizeof dts, "%s,y=%s", mf_dtype_name(p->xt), mf_dtype_name(p->yt));
    th_add(l, run_act, p, sizeof *p, "act(kind=%s,dtype=%s,gated=%d,rows=%lld,n=%lld,layout=%s%s)",
           kind_names[p->kind], dts, th_b(p->gated), (long long)p->rows, (long long)p->n, layout_names[p->layout],
           p->specials ? ",specials=1" : "");
}

// ---- argument validation -----------------------------------------------------------

static th_result run_validation(th_ctx *ctx, const void *params) {
    (void)params;
    const int64_t s[2] = {3, 8}, s2[2] = {3, 16};
    mf_tensor x, upv, y, gu;
    th_tensor(ctx, MF_DTYPE_F32, 2, s, NULL, &x);
    th_tensor(ctx, MF_DTYPE_BF16, 2, s, NULL, &upv);
    th_tensor(ctx, MF_DTYPE_F16, 2, s, NULL, &y);
    th_tensor(ctx, MF_DTYPE_BF16, 2, s2, NULL, &gu);
    th_upload_all(ctx);
    bool ok = true;
    mf_act_args a = {.x = x, .up = &upv, .y = y, .kind = MF_ACT_SILU}, t;
    mf_tensor u2;
#define TRY(mod, want, needle, what)                                 \
    do {                                                             \
        t = a;                                                       \
        u2 = upv;                                                    \
        t.up = &u2;                                                  \
        mod;                                                         \
        ok &= th_expect(ctx, mf_act(ctx->be, &t), want, needle, what);  \
    } while (0)
    ok &= th_expect(ctx, mf_act(ctx->be, NULL), MF_ERR_INVALID_ARG, "args is NULL", "NULL args");
    ok &= th_expect(ctx, mf_act(NULL, &a), MF_ERR_INVALID_ARG, "backend is NULL", "NULL backend");
    TRY(t.x.ndim = 3; t.x.shape[2] = 1, MF_ERR_INVALID_ARG, "x has 3 dims", "3-D x");
    TRY(t.x.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "x dtype i32", "i32 x");
    TRY(t.y.shape[1] = 7, MF_ERR_INVALID_ARG, "y shape (3, 7) != x shape (3, 8)", "y shape");
    TRY(u2.shape[0] = 2, MF_ERR_INVALID_ARG, "up shape (2, 8) != x shape (3, 8)", "up shape");
    TRY(u2.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "up dtype i32", "i32 up");
    TRY(t.x.stride[1] = 2; t.x.shape[1] = 4; t.y.shape[1] = 4; u2.shape[1] = 4, MF_ERR_UNSUPPORTED,
        "x rows must be contiguous (stride[1]=2)", "strided x");
    TRY(t.kind = (mf_act_kind)3, MF_ERR_INVALID_ARG, "invalid activation kind 3", "kind 3");
    TRY(t.y.stride[0] = 4, MF_ERR_INVALID_ARG, "y's elements overlap", "y rows overlap");
    TRY(t.y.dtype = MF_DTYPE_F32; t.y.data = (float *)t.x.data + 1, MF_ERR_INVALID_ARG,
        "y and x overlap in memory without being the same view", "y shifted over x");
    TRY(t.y.dtype = MF_DTYPE_BF16; t.y.data = (uint16_t *)u2.data + 1, MF_ERR_INVALID_ARG, "y and up overlap",
        "y shifted over up");
    // The valid shapes: y = x, y = up, and the gate|up halves of one buffer with y over the gate.
    mf_tensor g = gu, h = gu;
    g.shape[1] = 8, h.shape[1] = 8, h.data = (char *)gu.data + 8 * 2;
    TRY(t.y = t.x, MF_OK, NULL, "y is x");
    TRY(t.y = u2, MF_OK, NULL, "y is up");
    TRY(t.x = g; u2 = h; t.y = g, MF_OK, NULL, "fused gate|up, y over gate");
    TRY(t.x = g; u2 = h; t.y = h, MF_OK, NULL, "fused gate|up, y over up");
    TRY(t.x = g; t.up = NULL; t.y = h, MF_OK, NULL, "y over the other half");
    h.data = (char *)gu.data + 4 * 2;
    TRY(t.x = g; u2 = h; t.y = g, MF_ERR_INVALID_ARG, "y and up overlap", "halves overlapping");
    TRY(t.x.shape[0] = 0; t.y.shape[0] = 0; u2.shape[0] = 0, MF_OK, NULL, "no rows");
#undef TRY
    // The valid calls above wrote their y buffers: outputs, not unchanged inputs.
    for (int i = 0; i < ctx->nbufs; i++) ctx->bufs[i]->checked = true;
    return ok ? TH_PASS : TH_FAIL;
}

// ---- the case list -------------------------------------------------------------------

void th_cases_act(th_list *l) {
    static const mf_dtype dts[3] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};
    static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {37, 1000}, {5, 4096}, {2, 11008}, {4, 8}};
    // 1. Every kind x dtype x gate x shape, cycling through the layouts.
    int v = 0;
    for (int k = 0; k < 3; k++)
        for (int t = 0; t < 3; t++)
            for (int g = 0; g < 2; g++)
                for (int s = 0; s < 6; s++, v++) {
                    act_p p = {.kind = (mf_act_kind)k, .xt = dts[t], .yt = dts[t], .gated = g == 1,
                               .rows = shapes[s][0], .n = shapes[s][1], .layout = (act_layout)(v % 5)};
                    if (!p.gated && p.layout == AL_FUSED) p.layout = AL_SEPARATE;
                    add_act(l, &p);
                }
    // 2. Values that break naive formulas, every kind x dtype, gated and not.
    for (int k = 0; k < 3; k++)
        for (int t = 0; t < 3; t++)
            for (int g = 0; g < 2; g++) {
                act_p p = {.kind = (mf_act_kind)k, .xt = dts[t], .yt = dts[t], .gated = g == 1, .rows = 3, .n = 64,
                           .layout = g ? AL_FUSED : AL_SEPARATE, .specials = true};
                add_act(l, &p);
            }
    // 3. Every layout x kind, gated, at a size with vector chunks (and f16).
    for (int lay = 0; lay < 5; lay++)
        for (int k = 0; k < 3; k++) {
            act_p p = {.kind = (mf_act_kind)k, .xt = dts[(lay + k) % 3], .yt = dts[(lay + k) % 3], .gated = true,
                       .rows = 37, .n = 1024, .layout = (act_layout)lay, .specials = lay == 2};
            add_act(l, &p);
        }
    // 4. Mixed dtypes: bf16 GEMM output into an f32 or f16 y, f32 into bf16.
    static const mf_dtype mixed[][2] = {{MF_DTYPE_BF16, MF_DTYPE_F32}, {MF_DTYPE_F32, MF_DTYPE_BF16},
                                        {MF_DTYPE_BF16, MF_DTYPE_F16}, {MF_DTYPE_F16, MF_DTYPE_F32}};
    for (int m = 0; m < 4; m++)
        for (int g = 0; g < 2; g++) {
            act_p p = {.kind = (mf_act_kind)((m + g) % 3), .xt = mixed[m][0], .yt = mixed[m][1], .gated = g == 1,
                       .rows = 37, .n = 1000 + 24 * m, .layout = g ? AL_FUSED : AL_PADDED, .specials = m == 0};
            add_act(l, &p);
        }
    act_p none = {0};
    th_add(l, run_validation, &none, sizeof none, "act(validation)");
}
