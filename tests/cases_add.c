// Elementwise cases (mf_add): y = alpha * a + beta * b, b optional and
// broadcast over a's leading elements.
//
// Tolerance: |y - ref| <= 2 u32 (|alpha a| + |beta b|) + eps_y |ref| + tiny_y:
// the two products and the sum rounded in f32, then one rounding to y's
// dtype. Inputs uniform in [-1, 1) with outliers (1e4; 1e2 for f16).
#include <math.h>

#include "harness.h"

typedef enum {
    ADD_SCALE,       // b NULL
    ADD_FULL,        // b has a's shape
    ADD_ROW,         // b is one row (cols), added to every row
    ADD_SCALAR,      // b has one element
    ADD_INPLACE_A,   // full, y is a
    ADD_INPLACE_B,   // full, y is b
    ADD_INPLACE_SCALE, // scale, y is a
} add_kind;
static const char *const kind_names[] = {"scale", "full", "row", "scalar", "full,inplace=y=a", "full,inplace=y=b",
                                         "scale,inplace=y=a"};

typedef struct {
    mf_dtype at, bt, yt;
    int64_t rows, cols;
    add_kind kind;
    float alpha, beta;
} add_p;

static th_result run_add(th_ctx *ctx, const void *params) {
    const add_p *p = params;
    int64_t shape[2] = {p->rows, p->cols}, n = p->rows * p->cols;
    mf_add_args args = {.alpha = p->alpha, .beta = p->beta};
    mf_tensor b;
    th_buf *ba = th_tensor(ctx, p->at, 2, shape, NULL, &args.a), *bb = NULL, *by;
    th_fill(ctx, ba, &args.a, NULL);
    bool has_b = p->kind != ADD_SCALE && p->kind != ADD_INPLACE_SCALE;
    if (has_b) {
        if (p->kind == ADD_ROW)
            bb = th_tensor(ctx, p->bt, 1, &p->cols, NULL, &b);
        else if (p->kind == ADD_SCALAR)
            bb = th_tensor(ctx, p->bt, 1, (const int64_t[]){1}, NULL, &b);
        else
            bb = th_tensor(ctx, p->bt, 2, shape, NULL, &b);
        th_fill(ctx, bb, &b, NULL);
        args.b = &b;
    }
    if (p->kind == ADD_INPLACE_A || p->kind == ADD_INPLACE_SCALE)
        by = ba, args.y = args.a;
    else if (p->kind == ADD_INPLACE_B)
        by = bb, args.y = b;
    else
        by = th_tensor(ctx, p->yt, 2, shape, NULL, &args.y);

    double *ref = th_scratch(ctx, (size_t)n * sizeof(double));
    double *bound = th_scratch(ctx, (size_t)n * sizeof(double));
    const double u32 = th_eps(MF_DTYPE_F32), uy = th_eps(by->dtype);
    int64_t nb = bb ? bb->n : 1;
    for (int64_t i = 0; i < n; i++) {
        double x = (double)p->alpha * th_get(ba, i), y = bb ? (double)p->beta * th_get(bb, i % nb) : 0.0;
        ref[i] = x + y;
        bound[i] = 2 * u32 * (fabs(x) + fabs(y)) + uy * fabs(x + y) + th_tiny(by->dtype);
    }
    TH_CALL(ctx, mf_add(ctx->be, &args));
    return th_check(ctx, by, &args.y, ref, bound, "y") ? TH_PASS : TH_FAIL;
}

static void add_add(th_list *l, const add_p *p) {
    th_add(l, run_add, p, sizeof *p, "add(a=%s,b=%s,y=%s,rows=%lld,cols=%lld,b_kind=%s,alpha=%g,beta=%g)",
           mf_dtype_name(p->at), mf_dtype_name(p->bt), mf_dtype_name(p->yt), (long long)p->rows, (long long)p->cols,
           kind_names[p->kind], (double)p->alpha, (double)p->beta);
}

void th_cases_add(th_list *l) {
    static const mf_dtype dts[3] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};
    static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {37, 1000}, {5, 4097}};
    static const float ab[][2] = {{1.0f, 1.0f}, {0.5f, -2.0f}, {-1.0f, 0.25f}};
    int v = 0;
    for (int t = 0; t < 3; t++)
        for (int k = 0; k <= ADD_INPLACE_SCALE; k++)
            for (int s = 0; s < 4; s++, v++) {
                add_p p = {.at = dts[t], .bt = dts[t], .yt = dts[t], .rows = shapes[s][0], .cols = shapes[s][1],
                           .kind = (add_kind)k, .alpha = ab[v % 3][0], .beta = ab[v % 3][1]};
                add_add(l, &p);
            }
    // Mixed dtypes (the CPU computes in f32 whatever the storage).
    static const mf_dtype mixed[][3] = {{MF_DTYPE_F32, MF_DTYPE_BF16, MF_DTYPE_F16},
                                        {MF_DTYPE_BF16, MF_DTYPE_F32, MF_DTYPE_F32},
                                        {MF_DTYPE_F16, MF_DTYPE_BF16, MF_DTYPE_BF16}};
    for (int m = 0; m < 3; m++)
        for (int k = ADD_FULL; k <= ADD_ROW; k++) {
            add_p p = {.at = mixed[m][0], .bt = mixed[m][1], .yt = mixed[m][2], .rows = 37, .cols = 1000,
                       .kind = (add_kind)k, .alpha = 1.0f, .beta = 1.0f};
            add_add(l, &p);
        }
}
