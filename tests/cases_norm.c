// Fused residual add + RMSNorm / LayerNorm cases (mf_add_norm).
//
// Tolerance, per element i of a row, with s = x + residual, d_i = s_i - mean
// (mean = 0 for RMSNorm), sigma = sqrt(var + eps) and g = 16 + 2 sqrt(dim) the
// growth of a length-dim f32 sum (a random-walk bound; a tree reduction does
// better):
//     delta  = u32 |s_i| + [LayerNorm] g u32 mean|s|   error of d_i in f32
//     rel    = g u32 + [LayerNorm] max_i delta_i / sigma  relative error of 1/sigma
//     |y - ref| <= |w_i| (delta_i + u32 |d_i|) / sigma + rel |ref_i|
//                  + (3 u32 + eps_y) |ref_i| + tiny_y
//     |sum_out - s| <= (u32 + eps_sum) |s_i| + tiny_sum
// i.e. statistics in f32 from the f32 sum (not from a rounded copy of it),
// one rounding to y's dtype. The |x| ~ 1e4 LayerNorm rows sit on a mean of
// 1e4 with a spread of 10 (f32; 1e2 f16, 1e3 bf16), where a one-pass
// E[x^2] - E[x]^2 in f32 loses most digits and fails: two-pass or Welford
// is needed. A divisor of dim - 1
// instead of dim, a missing eps, a missing residual or a wrong row stride
// shows at once at small dims.
// Inputs: x and residual uniform in [-1, 1) with outliers (1e4; 1e2 for f16);
// weight in [-2, 2), bias in [-1, 1) (no outliers: keeps f16 y in range).
#include <math.h>
#include <stdio.h>

#include "harness.h"

typedef enum {
    INPLACE_NONE = 0,
    INPLACE_Y_X = 1,     // y is x
    INPLACE_SUM_RES = 2, // sum_out is residual
    INPLACE_BOTH = 3,
} norm_inplace;
static const char *const inplace_names[] = {"none", "y=x", "sum=res", "y=x+sum=res"};

typedef struct {
    mf_norm_kind kind;
    mf_dtype dt;       // x, residual, sum_out
    mf_dtype yt;       // y, weight, bias
    int64_t rows, dim;
    int64_t pad;       // row stride of x = dim + pad; when pad > 0 the strides of
                       // residual, sum_out and y (unless in place) are 1, 2, 3 more
    bool residual, sum_out, bias;
    norm_inplace inplace;
    int big;           // 0: ordinary values; 1: |x| ~ 1e4 (mean 0 for RMS, mean 1e4 for LayerNorm)
    float eps;
} norm_p;

static th_result run_norm(th_ctx *ctx, const void *params) {
    const norm_p *p = params;
    int64_t rows = p->rows, dim = p->dim, ld = dim + p->pad;
    int64_t shape[2] = {rows, dim}, stride[2] = {ld, 1};
    int64_t q = p->pad ? 1 : 0, rstride[2] = {ld + q, 1}, sstride[2] = {ld + 2 * q, 1}, ystride[2] = {ld + 3 * q, 1};
    mf_norm_args args = {.kind = p->kind, .eps = p->eps};
    mf_tensor res, sum, bias;

    th_buf *bx = th_tensor(ctx, p->dt, 2, shape, stride, &args.x);
    th_fill_opts xo = th_fill_defaults(p->dt);
    double spread = p->dt == MF_DTYPE_F32 ? 10 : p->dt == MF_DTYPE_F16 ? 100 : 1000;
    if (p->big) {
        xo.outlier = 0;
        if (p->kind == MF_NORM_LAYER) // mean 1e4, spread as small as the dtype resolves
            xo.lo = 1e4 - spread, xo.hi = 1e4 + spread;
        else
            xo.lo = -1e4, xo.hi = 1e4;
    }
    th_fill(ctx, bx, &args.x, &xo);
    th_buf *bres = NULL, *bsum = NULL, *by;
    if (p->residual) {
        bres = th_tensor(ctx, p->dt, 2, shape, rstride, &res);
        th_fill_opts ro = xo;
        if (p->big) // keeps s = x + residual in f16 range, and the LayerNorm spread small
            ro.lo = p->kind == MF_NORM_LAYER ? -spread : -1e2, ro.hi = -ro.lo;
        th_fill(ctx, bres, &res, &ro);
        args.residual = &res;
    }
    if (p->sum_out) {
        if (p->inplace & INPLACE_SUM_RES) {
            bsum = bres, sum = res;
        } else {
            bsum = th_tensor(ctx, p->dt, 2, shape, sstride, &sum);
        }
        args.sum_out = &sum;
    }
    if (p->inplace & INPLACE_Y_X) {
        by = bx, args.y = args.x;
    } else {
        by = th_tensor(ctx, p->yt, 2, shape, ystride, &args.y);
    }
    th_buf *bw = th_tensor(ctx, p->yt, 1, &dim, NULL, &args.weight), *bb = NULL;
    th_fill_opts wo = {.lo = -2, .hi = 2};
    th_fill(ctx, bw, &args.weight, &wo);
    if (p->bias) {
        bb = th_tensor(ctx, p->yt, 1, &dim, NULL, &bias);
        th_fill_opts bo = {.lo = -1, .hi = 1};
        th_fill(ctx, bb, &bias, &bo);
        args.bias = &bias;
    }

    // Reference in double.
    int64_t total = rows * dim;
    double *yref = th_scratch(ctx, (size_t)total * sizeof(double));
    double *ybnd = th_scratch(ctx, (size_t)total * sizeof(double));
    double *sref = th_scratch(ctx, (size_t)total * sizeof(double));
    double *sbnd = th_scratch(ctx, (size_t)total * sizeof(double));
    double *s = th_scratch(ctx, (size_t)dim * sizeof(double));
    const double u32 = th_eps(MF_DTYPE_F32), uy = th_eps(p->yt), us = th_eps(p->dt);
    const double g = 16.0 + 2.0 * sqrt((double)dim);
    const bool ln = p->kind == MF_NORM_LAYER;
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, mabs = 0, var = 0;
        for (int64_t i = 0; i < dim; i++) {
            s[i] = th_get(bx, r * ld + i) + (bres ? th_get(bres, r * res.stride[0] + i) : 0.0);
            mean += s[i];
            mabs += fabs(s[i]);
        }
        mean = ln ? mean / (double)dim : 0.0;
        mabs /= (double)dim;
        for (int64_t i = 0; i < dim; i++) var += (s[i] - mean) * (s[i] - mean);
        var /= (double)dim;
        double sigma = sqrt(var + (double)p->eps), dmax = 0;
        for (int64_t i = 0; i < dim; i++) {
            double delta = (bres ? u32 * fabs(s[i]) : 0.0) + (ln ? g * u32 * mabs : 0.0);
            if (delta > dmax) dmax = delta;
        }
        double rel = g * u32 + (ln ? dmax / sigma : 0.0);
        for (int64_t i = 0; i < dim; i++) {
            int64_t e = r * dim + i;
            double w = th_get(bw, i), d = s[i] - mean;
            double delta = (bres ? u32 * fabs(s[i]) : 0.0) + (ln ? g * u32 * mabs : 0.0);
            double y = d / sigma * w + (bb ? th_get(bb, i) : 0.0);
            yref[e] = y;
            ybnd[e] = fabs(w) * (delta + u32 * fabs(d)) / sigma + rel * fabs(d / sigma * w) +
                      (3 * u32 + uy) * fabs(y) + th_tiny(p->yt);
            sref[e] = s[i];
            sbnd[e] = (u32 + us) * fabs(s[i]) + th_tiny(p->dt);
        }
    }

    TH_CALL(ctx, mf_add_norm(ctx->be, &args));
    bool ok = th_check(ctx, by, &args.y, yref, ybnd, "y");
    if (p->sum_out) ok &= th_check(ctx, bsum, &sum, sref, sbnd, "sum_out");
    return ok ? TH_PASS : TH_FAIL;
}

static void add_norm(th_list *l, const norm_p *p) {
    char dts[32];
    if (p->yt == p->dt)
        snprintf(dts, sizeof dts, "%s", mf_dtype_name(p->dt));
    else
        snprintf(dts, sizeof dts, "%s,y=%s", mf_dtype_name(p->dt), mf_dtype_name(p->yt));
    th_add(l, run_norm, p, sizeof *p,
           "add_norm(kind=%s,dtype=%s,rows=%lld,dim=%lld,ld_x=%lld,residual=%d,sum_out=%d,bias=%d,inplace=%s%s,eps=%g)",
           p->kind == MF_NORM_RMS ? "rms" : "layer", dts, (long long)p->rows, (long long)p->dim,
           (long long)(p->dim + p->pad), th_b(p->residual), th_b(p->sum_out), th_b(p->bias),
           inplace_names[p->inplace], p->big ? ",big=1" : "", (double)p->eps);
}

// The six ways of calling it: plain, + residual, + sum_out, y in place,
// sum_out in place of residual, everything in place.
static void set_variant(norm_p *p, int v) {
    static const struct {
        bool residual, sum_out;
        norm_inplace inplace;
    } vs[6] = {{false, false, INPLACE_NONE}, {true, false, INPLACE_NONE}, {true, true, INPLACE_NONE},
               {false, false, INPLACE_Y_X},  {true, true, INPLACE_SUM_RES}, {true, true, INPLACE_BOTH}};
    p->residual = vs[v].residual;
    p->sum_out = vs[v].sum_out;
    p->inplace = vs[v].inplace;
}

static const mf_dtype dtypes[3] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};

void th_cases_norm(th_list *l) {
    static const int64_t dims[] = {1, 7, 64, 768, 1000, 1024, 1025, 4096, 8191, 16384};
    static const int64_t rowss[] = {1, 3, 37};
    // 1. Every dim x rows x kind x dtype, cycling through the call variants,
    //    padded rows (stride > dim) and LayerNorm bias.
    for (int di = 0; di < 10; di++)
        for (int ri = 0; ri < 3; ri++)
            for (int k = 0; k < 2; k++)
                for (int t = 0; t < 3; t++) {
                    int v = di + ri + 2 * k + t;
                    norm_p p = {.kind = k ? MF_NORM_LAYER : MF_NORM_RMS, .dt = dtypes[t], .yt = dtypes[t],
                                .rows = rowss[ri], .dim = dims[di], .pad = v % 4 == 1 ? 3 : v % 4 == 3 ? 64 : 0,
                                .bias = k == 1 && v % 2 == 0, .eps = k ? 1e-5f : 1e-6f};
                    set_variant(&p, v % 6);
                    add_norm(l, &p);
                }
    // 2. Every variant x kind x dtype at one size, with and without padding.
    for (int v = 0; v < 6; v++)
        for (int k = 0; k < 2; k++)
            for (int t = 0; t < 3; t++) {
                norm_p p = {.kind = k ? MF_NORM_LAYER : MF_NORM_RMS, .dt = dtypes[t], .yt = dtypes[t], .rows = 37,
                            .dim = 2050, .pad = (v + t) % 2 ? 7 : 0, .bias = k == 1, .eps = 1e-5f};
                set_variant(&p, v);
                add_norm(l, &p);
            }
    // 3. Rows with |x| ~ 1e4: f16 near the top of its range (the sum of squares
    //    must be f32), and LayerNorm on a large mean.
    static const int64_t bigdims[] = {1024, 4096, 16384};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 2; k++) {
            norm_p p = {.kind = k ? MF_NORM_LAYER : MF_NORM_RMS, .dt = MF_DTYPE_F16, .yt = MF_DTYPE_F16, .rows = 3,
                        .dim = bigdims[d], .residual = d != 0, .sum_out = d != 0, .bias = k == 1, .big = 1,
                        .eps = 1e-5f};
            add_norm(l, &p);
        }
    for (int t = 0; t < 3; t += 2) {
        norm_p p = {.kind = MF_NORM_LAYER, .dt = dtypes[t], .yt = dtypes[t], .rows = 37, .dim = 4096,
                    .residual = true, .sum_out = true, .bias = true, .big = 1, .eps = 1e-5f};
        add_norm(l, &p);
    }
    // 4. Mixed dtypes: an f32 residual stream with bf16/f16 y, and the reverse.
    static const mf_dtype mixed[][2] = {{MF_DTYPE_F32, MF_DTYPE_BF16}, {MF_DTYPE_F32, MF_DTYPE_F16},
                                        {MF_DTYPE_BF16, MF_DTYPE_F32}};
    for (int m = 0; m < 3; m++)
        for (int k = 0; k < 2; k++) {
            norm_p p = {.kind = k ? MF_NORM_LAYER : MF_NORM_RMS, .dt = mixed[m][0], .yt = mixed[m][1], .rows = 37,
                        .dim = 768, .residual = true, .sum_out = true, .bias = k == 1, .eps = 1e-5f};
            add_norm(l, &p);
        }
}
