// Embedding lookup cases (mf_embed): y[t, :] = table[ids[t], :].
//
// Tolerance: a copy, so exact when table and y share a dtype; otherwise one
// rounding to y's dtype: |y - ref| <= eps_y |ref| + tiny_y (ref is the stored
// table value; round-to-nearest-even gives at most half that).
// Table values: uniform in [-1, 1) with outliers x1e4 (f32, bf16) or x1e2
// (f16): all within f16 range, so a conversion overflow is never expected.
// The out-of-range id cases expect MF_ERR_INVALID_ARG with "out of range" in
// the message: from mf_embed on the CPU (which then writes nothing: y must
// come back untouched), from the next mf_backend_sync on CUDA.
#include <math.h>
#include <string.h>

#include "harness.h"

typedef enum { IDS_RANDOM, IDS_REPEATED, IDS_SAME, IDS_BAD_HIGH, IDS_BAD_NEG } ids_kind;
static const char *const ids_names[] = {"random", "repeated", "same", "bad_high", "bad_neg"};

typedef struct {
    mf_dtype tt, yt;         // table, y
    int64_t n, vocab, dim;
    int64_t pad_table, pad_y; // extra elements per row
    ids_kind ids;
} embed_p;

static th_result run_embed(th_ctx *ctx, const void *params) {
    const embed_p *p = params;
    int64_t n = p->n, vocab = p->vocab, dim = p->dim;
    mf_embed_args args;
    int64_t tshape[2] = {vocab, dim}, tstride[2] = {dim + p->pad_table, 1};
    int64_t yshape[2] = {n, dim}, ystride[2] = {dim + p->pad_y, 1};
    th_buf *bt = th_tensor(ctx, p->tt, 2, tshape, tstride, &args.table);
    th_fill(ctx, bt, &args.table, NULL);
    th_buf *by = th_tensor(ctx, p->yt, 2, yshape, ystride, &args.y);
    th_buf *bi = th_tensor(ctx, MF_DTYPE_I32, 1, &n, NULL, &args.ids);
    for (int64_t t = 0; t < n; t++) {
        int64_t id = th_rng_int(&ctx->rng, vocab);
        if (p->ids == IDS_REPEATED) id = th_rng_int(&ctx->rng, vocab < 3 ? vocab : 3); // few distinct ids
        if (p->ids == IDS_SAME) id = vocab - 1;
        th_set(bi, t, (double)id);
    }
    if (p->ids == IDS_BAD_HIGH || p->ids == IDS_BAD_NEG) {
        th_set(bi, n / 2, p->ids == IDS_BAD_HIGH ? (double)vocab : -1.0);
        th_upload_all(ctx);
        mf_status st = mf_embed(ctx->be, &args);
        if (st == MF_OK) st = mf_backend_sync(ctx->be);
        if (mf_backend_device(ctx->be) != MF_DEVICE_CPU) by->checked = true; // CUDA writes the other rows
        if (st != MF_ERR_INVALID_ARG)
            return th_fail(ctx, "want MF_ERR_INVALID_ARG for an out-of-range id, got %s (%s)", mf_status_str(st),
                           mf_last_error());
        if (!strstr(mf_last_error(), "out of range"))
            return th_fail(ctx, "message does not say \"out of range\": %s", mf_last_error());
        return TH_PASS;
    }

    double *ref = th_scratch(ctx, (size_t)(n * dim) * sizeof(double));
    double *bound = th_scratch(ctx, (size_t)(n * dim) * sizeof(double));
    const double uy = p->tt == p->yt ? 0.0 : th_eps(p->yt), tiny = p->tt == p->yt ? 0.0 : th_tiny(p->yt);
    for (int64_t t = 0; t < n; t++) {
        int64_t id = (int64_t)th_get(bi, t);
        for (int64_t i = 0; i < dim; i++) {
            double v = th_get(bt, id * (dim + p->pad_table) + i);
            ref[t * dim + i] = v;
            bound[t * dim + i] = uy * fabs(v) + tiny;
        }
    }
    TH_CALL(ctx, mf_embed(ctx->be, &args));
    return th_check(ctx, by, &args.y, ref, bound, "y") ? TH_PASS : TH_FAIL;
}

static void add_embed(th_list *l, const embed_p *p) {
    th_add(l, run_embed, p, sizeof *p,
           "embed(table=%s,y=%s,n=%lld,vocab=%lld,dim=%lld,ld_table=%lld,ld_y=%lld,ids=%s)", mf_dtype_name(p->tt),
           mf_dtype_name(p->yt), (long long)p->n, (long long)p->vocab, (long long)p->dim,
           (long long)(p->dim + p->pad_table), (long long)(p->dim + p->pad_y), ids_names[p->ids]);
}

void th_cases_embed(th_list *l) {
    static const mf_dtype dts[3] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};
    // (n, vocab, dim)
    static const int64_t shapes[][3] = {{1, 1, 7}, {37, 1000, 768}, {5, 3, 1}, {129, 50, 1025}};
    int v = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int s = 0; s < 4; s++, v++) {
                embed_p p = {.tt = dts[a], .yt = dts[b], .n = shapes[s][0], .vocab = shapes[s][1],
                             .dim = shapes[s][2], .ids = (ids_kind)(v % 3)};
                if (v % 4 == 1) p.pad_table = 5;
                if (v % 4 == 2) p.pad_y = 3;
                add_embed(l, &p);
            }
    for (int a = 0; a < 3; a++) { // vocab 1: every id is 0
        embed_p p = {.tt = dts[a], .yt = dts[a], .n = 9, .vocab = 1, .dim = 64, .ids = IDS_SAME};
        add_embed(l, &p);
    }
    for (int k = IDS_BAD_HIGH; k <= IDS_BAD_NEG; k++) {
        embed_p p = {.tt = MF_DTYPE_BF16, .yt = MF_DTYPE_F32, .n = 7, .vocab = 100, .dim = 64, .ids = (ids_kind)k};
        add_embed(l, &p);
    }
}
