// Rotary position embedding cases (mf_rope), HF rotate_half layout, in place.
//
// Reference in double of the op's own formula: angle a = (float)pos * inv_freq[i]
// rounded to f32 (as HF computes it; the rounding is ~ulp(1e5) = 0.008 rad at
// position 1e5, so an implementation that takes the product in double, or
// that uses a fast __sinf/__cosf, fails), then
//     r0 = x0 cos(a) - x1 sin(a),   r1 = x1 cos(a) + x0 sin(a)   in double.
// Tolerance per rotated element, u32 = 2^-24:
//     |got - ref| <= 6 u32 (|x0| + |x1|) + eps_dt |ref| + tiny_dt
// i.e. cos and sin in f32 within 2 ulp (CUDA's sincosf; glibc's cosf/sinf are
// within 1), the two products and the sum rounded in f32, one rounding to the
// storage dtype. Elements of dims >= rot_dim, v's third of a fused QKV buffer,
// the padding between heads and everything outside the views must come back
// bit for bit unchanged (bound 0, checked over the whole buffer).
// Inputs: q, k uniform in [-1, 1) with outliers (1e4; 1e2 for f16); positions
// uniform in [0, max_pos] with max_pos itself and 0 always present.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

typedef enum {
    RL_SEPARATE = 0, // q and k contiguous, each in its own buffer
    RL_FUSED = 1,    // q and k are slices of one (T, H + 2 KVH, D) QKV buffer (row stride (H + 2 KVH) D)
    RL_PADDED = 2,   // separate buffers with gaps between heads and between tokens
} rope_layout;
static const char *const layout_names[] = {"separate", "fused_qkv", "padded"};

typedef struct {
    mf_dtype qt, kt;          // kt == qt for the fused layout
    int64_t tokens, heads, kv_heads; // kv_heads 0: k is NULL
    int64_t head_dim, rot_dim;
    rope_layout layout;
    int off;                  // elements the views start past their buffer's first element
    int64_t max_pos;
    double theta;
} rope_p;

// Random values (with outliers) in every element of b.
static void fill_all(th_ctx *ctx, th_buf *b) {
    mf_tensor flat = th_view(ctx, b, 1, &b->n, NULL);
    th_fill(ctx, b, &flat, NULL);
}

// Whole-buffer reference: every element starts as its uploaded value, bound 0.
static void ref_init(const th_buf *b, double *ref) {
    for (int64_t e = 0; e < b->n; e++) ref[e] = th_get(b, e);
}

// Rotates the reference of one view (element offsets from its buffer's start: base + ...).
static void ref_rotate(const th_buf *b, int64_t base, const mf_tensor *v, const int32_t *pos, const float *inv,
                       int64_t half, double *ref, double *bnd) {
    const double u32 = 0x1.0p-24, ed = th_eps(b->dtype), tiny = th_tiny(b->dtype);
    for (int64_t t = 0; t < v->shape[0]; t++)
        for (int64_t i = 0; i < half; i++) {
            const float a = (float)pos[t] * inv[i]; // f32 product, as the op defines it
            const double c = cos((double)a), s = sin((double)a);
            for (int64_t h = 0; h < v->shape[1]; h++) {
                const int64_t o = base + t * v->stride[0] + h * v->stride[1] + i;
                const double x0 = th_get(b, o), x1 = th_get(b, o + half);
                const double r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s, m = 6 * u32 * (fabs(x0) + fabs(x1));
                ref[o] = r0, bnd[o] = m + ed * fabs(r0) + tiny;
                ref[o + half] = r1, bnd[o + half] = m + ed * fabs(r1) + tiny;
            }
        }
}

static th_result run_rope(th_ctx *ctx, const void *params) {
    const rope_p *p = params;
    const int64_t T = p->tokens, H = p->heads, KVH = p->kv_heads, D = p->head_dim, half = p->rot_dim / 2;
    const int64_t qshape[3] = {T, H, D}, kshape[3] = {T, KVH, D};
    mf_rope_args a = {0};
    mf_tensor k;
    th_buf *bq, *bk = NULL;
    int64_t qbase = p->off, kbase = p->off; // element offsets of the views in their buffers
    if (p->layout == RL_FUSED) {
        const int64_t W = H + 2 * KVH, st[3] = {W * D, D, 1};
        bq = th_buf_new(ctx, p->qt, T * W * D + p->off);
        fill_all(ctx, bq); // q, k and v
        a.q = th_view(ctx, bq, 3, qshape, st);
        k = th_view(ctx, bq, 3, kshape, st);
        kbase = p->off + H * D;
        bk = bq;
    } else {
        const bool pad = p->layout == RL_PADDED;
        const int64_t qst[3] = {H * (D + (pad ? 3 : 0)) + (pad ? 5 : 0), D + (pad ? 3 : 0), 1};
        const int64_t kst[3] = {KVH * (D + (pad ? 1 : 0)) + (pad ? 2 : 0), D + (pad ? 1 : 0), 1};
        bq = th_buf_new(ctx, p->qt, (T - 1) * qst[0] + (H - 1) * qst[1] + D + p->off);
        a.q = th_view(ctx, bq, 3, qshape, qst);
        fill_all(ctx, bq); // the padding too: it must survive
        if (KVH) {
            bk = th_buf_new(ctx, p->kt, (T - 1) * kst[0] + (KVH - 1) * kst[1] + D + p->off);
            k = th_view(ctx, bk, 3, kshape, kst);
            fill_all(ctx, bk);
        }
    }
    a.q.data = (char *)a.q.data + (size_t)qbase * mf_dtype_size(p->qt);
    if (KVH) {
        k.data = (char *)bk->dev + (size_t)kbase * mf_dtype_size(bk->dtype);
        a.k = &k;
    }

    // Positions and inverse frequencies (rope_theta ** (-2i / rot_dim), in f32).
    th_buf *bp = th_tensor(ctx, MF_DTYPE_I32, 1, &T, NULL, &a.pos);
    int32_t *pos = th_scratch(ctx, (size_t)T * sizeof *pos);
    for (int64_t t = 0; t < T; t++) {
        pos[t] = (int32_t)th_rng_int(&ctx->rng, p->max_pos + 1);
        if (t == 0) pos[t] = (int32_t)p->max_pos;
        if (t == T / 2 && T > 2) pos[t] = 0;
        th_set(bp, t, pos[t]);
    }
    th_buf *bf = th_tensor(ctx, MF_DTYPE_F32, 1, &half, NULL, &a.inv_freq);
    float *inv = th_scratch(ctx, (size_t)half * sizeof *inv);
    for (int64_t i = 0; i < half; i++) {
        inv[i] = (float)pow(p->theta, -2.0 * (double)i / (double)p->rot_dim);
        th_set(bf, i, inv[i]);
    }

    double *qref = th_scratch(ctx, (size_t)bq->n * sizeof(double)), *qbnd = th_scratch(ctx, (size_t)bq->n * sizeof(double));
    ref_init(bq, qref);
    ref_rotate(bq, qbase, &a.q, pos, inv, half, qref, qbnd);
    double *kref = NULL, *kbnd = NULL;
    if (KVH && bk == bq) {
        ref_rotate(bq, kbase, &k, pos, inv, half, qref, qbnd);
    } else if (KVH) {
        kref = th_scratch(ctx, (size_t)bk->n * sizeof(double)), kbnd = th_scratch(ctx, (size_t)bk->n * sizeof(double));
        ref_init(bk, kref);
        ref_rotate(bk, kbase, &k, pos, inv, half, kref, kbnd);
    }

    TH_CALL(ctx, mf_rope(ctx->be, &a));
    mf_tensor qflat = th_view(ctx, bq, 1, &bq->n, NULL);
    bool ok = th_check(ctx, bq, &qflat, qref, qbnd, p->layout == RL_FUSED ? "qkv" : "q");
    if (kref) {
        mf_tensor kflat = th_view(ctx, bk, 1, &bk->n, NULL);
        ok &= th_check(ctx, bk, &kflat, kref, kbnd, "k");
    }
    return ok ? TH_PASS : TH_FAIL;
}

static void add_rope(th_list *l, const rope_p *p) {
    char dts[32], lay[48] = "";
    if (p->kv_heads && p->kt != p->qt)
        snprintf(dts, sizeof dts, "%s,k=%s", mf_dtype_name(p->qt), mf_dtype_name(p->kt));
    else
        snprintf(dts, sizeof dts, "%s", mf_dtype_name(p->qt));
    if (p->off) snprintf(lay, sizeof lay, ",offset=%d", p->off);
    th_add(l, run_rope, p, sizeof *p,
           "rope(dtype=%s,tokens=%lld,heads=%lld,kv_heads=%lld,head_dim=%lld,rot_dim=%lld,layout=%s%s,max_pos=%lld,"
           "theta=%g)",
           dts, (long long)p->tokens, (long long)p->heads, (long long)p->kv_heads, (long long)p->head_dim,
           (long long)p->rot_dim, layout_names[p->layout], lay, (long long)p->max_pos, p->theta);
}

// ---- argument validation -----------------------------------------------------------

static th_result run_validation(th_ctx *ctx, const void *params) {
    (void)params;
    const int64_t qs[3] = {2, 3, 8}, ks[3] = {2, 1, 8}, two = 2, four = 4, qkv[3] = {2, 5, 8};
    mf_tensor q, kk, pos, inv, inv_bf, fused;
    th_tensor(ctx, MF_DTYPE_F32, 3, qs, NULL, &q);
    th_tensor(ctx, MF_DTYPE_BF16, 3, ks, NULL, &kk);
    th_buf *bp = th_tensor(ctx, MF_DTYPE_I32, 1, &two, NULL, &pos);
    th_buf *bf = th_tensor(ctx, MF_DTYPE_F32, 1, &four, NULL, &inv);
    th_tensor(ctx, MF_DTYPE_BF16, 1, &four, NULL, &inv_bf);
    th_buf *bqkv = th_tensor(ctx, MF_DTYPE_F16, 3, qkv, NULL, &fused);
    for (int i = 0; i < 2; i++) th_set(bp, i, 7 * i);
    for (int i = 0; i < 4; i++) th_set(bf, i, 1.0 / (1 << i));
    th_fill(ctx, bqkv, &fused, NULL);
    th_upload_all(ctx); // defined contents for the valid calls below
    bool ok = true;
    mf_rope_args a = {.q = q, .k = &kk, .pos = pos, .inv_freq = inv}, t;
    mf_tensor k2;
#define TRY(mod, want, needle, what)                                    \
    do {                                                                \
        t = a;                                                          \
        k2 = kk;                                                        \
        t.k = &k2;                                                      \
        mod;                                                            \
        ok &= th_expect(ctx, mf_rope(ctx->be, &t), want, needle, what);    \
    } while (0)
    ok &= th_expect(ctx, mf_rope(ctx->be, NULL), MF_ERR_INVALID_ARG, "args is NULL", "NULL args");
    ok &= th_expect(ctx, mf_rope(NULL, &a), MF_ERR_INVALID_ARG, "backend is NULL", "NULL backend");
    TRY(t.q.ndim = 2, MF_ERR_INVALID_ARG, "q has 2 dims", "2-D q");
    TRY(t.q.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "q dtype i32", "i32 q");
    TRY(t.q.shape[2] = 7, MF_ERR_INVALID_ARG, "head_dim 7", "odd head_dim");
    TRY(t.q.stride[2] = 2; t.q.shape[2] = 4, MF_ERR_UNSUPPORTED, "q stride[2] = 2", "strided head_dim");
    TRY(t.q.stride[1] = 4, MF_ERR_INVALID_ARG, "q's elements overlap", "heads overlapping");
    TRY(t.inv_freq = inv_bf, MF_ERR_INVALID_ARG, "inv_freq dtype bf16", "bf16 inv_freq");
    TRY(t.inv_freq.ndim = 2; t.inv_freq.shape[1] = 1, MF_ERR_INVALID_ARG, "inv_freq has 2 dims", "2-D inv_freq");
    TRY(t.inv_freq.shape[0] = 0, MF_ERR_INVALID_ARG, "inv_freq is empty", "empty inv_freq");
    TRY(t.inv_freq.stride[0] = 2; t.inv_freq.shape[0] = 2, MF_ERR_UNSUPPORTED, "inv_freq stride[0] = 2", "strided inv_freq");
    TRY(t.q.shape[2] = 6; k2.shape[2] = 6, MF_ERR_INVALID_ARG, "rot_dim 8 (2 x inv_freq's 4 entries) > head_dim 6",
        "rot_dim > head_dim");
    TRY(t.pos.dtype = MF_DTYPE_F32, MF_ERR_INVALID_ARG, "pos dtype f32", "f32 pos");
    TRY(t.pos.shape[0] = 1, MF_ERR_INVALID_ARG, "pos has 1 entries, q has n_tokens = 2", "short pos");
    TRY(t.pos.ndim = 2; t.pos.shape[1] = 1, MF_ERR_INVALID_ARG, "pos has 2 dims", "2-D pos");
    TRY(k2.shape[0] = 1, MF_ERR_INVALID_ARG, "k has n_tokens = 1, q has 2", "k tokens");
    TRY(k2.shape[2] = 4; k2.stride[1] = 4; k2.stride[0] = 4, MF_ERR_INVALID_ARG, "k head_dim 4 != q head_dim 8",
        "k head_dim");
    TRY(k2.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "k dtype i32", "i32 k");
    TRY(k2 = t.q, MF_ERR_INVALID_ARG, "q and k overlap", "k is q");
    TRY(k2.data = (char *)t.q.data + 8 * 4, MF_ERR_INVALID_ARG, "q and k overlap", "k inside q");
    TRY(k2.dtype = MF_DTYPE_F32; t.q.shape[0] = 1; t.pos.shape[0] = 1; k2.shape[0] = 1; k2.data = pos.data,
        MF_ERR_INVALID_ARG, "k and pos overlap", "k over pos");
    TRY(t.q.shape[0] = 1; t.pos.shape[0] = 1; k2.shape[0] = 1; t.q.data = (char *)inv.data + 4,
        MF_ERR_INVALID_ARG, "q and inv_freq overlap", "q over inv_freq");
    TRY(t.k = NULL, MF_OK, NULL, "k NULL");
    TRY(t.q.shape[0] = 0; t.pos.shape[0] = 0; k2.shape[0] = 0, MF_OK, NULL, "no tokens");
    // q and k slices of one QKV buffer: spans overlap, elements do not.
    mf_tensor fq = fused, fk = fused;
    fq.shape[1] = 3, fk.shape[1] = 1, fk.data = (char *)fused.data + 3 * 8 * 2;
    TRY(t.q = fq; k2 = fk, MF_OK, NULL, "fused q and k");
    fk.shape[1] = 2, fk.data = (char *)fused.data + 2 * 8 * 2; // k's first head is q's last
    TRY(t.q = fq; k2 = fk, MF_ERR_INVALID_ARG, "q and k overlap", "fused q and k sharing a head");
#undef TRY
    // The valid calls above rotated q and the QKV buffer in place: outputs,
    // not inputs that must come back unchanged (their values are checked by
    // the other cases).
    for (int i = 0; i < ctx->nbufs; i++) ctx->bufs[i]->checked = true;
    return ok ? TH_PASS : TH_FAIL;
}

// ---- the case list -------------------------------------------------------------------

void th_cases_rope(th_list *l) {
    static const mf_dtype dts[3] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};
    // (heads, kv_heads, head_dim, rot_dim): Llama GQA, MHA, odd head counts,
    // q only, partial rotary (NeoX 25%, phi-2's 32 of 80), Gemma's 256, the minimum.
    static const int64_t geo[][4] = {{32, 8, 128, 128}, {12, 12, 64, 64}, {7, 1, 64, 64},  {5, 3, 96, 96},
                                     {9, 0, 64, 64},    {8, 8, 64, 16},   {6, 2, 80, 32},  {4, 1, 256, 256},
                                     {3, 1, 2, 2},      {2, 2, 128, 64}};
    static const int64_t toks[] = {1, 5, 37};
    int v = 0;
    for (int g = 0; g < 10; g++)
        for (int ti = 0; ti < 3; ti++, v++) {
            const mf_dtype dt = dts[v % 3];
            rope_p p = {.qt = dt, .kt = dt, .tokens = toks[ti], .heads = geo[g][0], .kv_heads = geo[g][1],
                        .head_dim = geo[g][2], .rot_dim = geo[g][3], .layout = (rope_layout)(v % 3),
                        .max_pos = ti == 0 ? 100000 : ti == 1 ? 4096 : 100000, .theta = g % 2 ? 1e4 : 5e5};
            if (p.kv_heads == 0 && p.layout == RL_FUSED) p.layout = RL_SEPARATE; // no k: nothing to fuse
            add_rope(l, &p);
        }
    // Every dtype x layout at one Llama-like size, long positions, one unaligned start.
    for (int t = 0; t < 3; t++)
        for (int lay = 0; lay < 3; lay++) {
            rope_p p = {.qt = dts[t], .kt = dts[t], .tokens = 33, .heads = 8, .kv_heads = 2, .head_dim = 128,
                        .rot_dim = 128, .layout = (rope_layout)lay, .off = lay == 1 ? 1 : 0, .max_pos = 100000,
                        .theta = 5e5};
            add_rope(l, &p);
        }
    // Mixed q / k dtypes, a long prefill, positions past 2^20 (angles ~1e6 rad).
    {
        rope_p p = {.qt = MF_DTYPE_F32, .kt = MF_DTYPE_BF16, .tokens = 17, .heads = 4, .kv_heads = 2, .head_dim = 64,
                    .rot_dim = 64, .layout = RL_SEPARATE, .max_pos = 100000, .theta = 1e4};
        add_rope(l, &p);
        p.qt = MF_DTYPE_BF16, p.kt = MF_DTYPE_F16, p.layout = RL_PADDED, p.off = 3;
        add_rope(l, &p);
        rope_p big = {.qt = MF_DTYPE_BF16, .kt = MF_DTYPE_BF16, .tokens = 1024, .heads = 16, .kv_heads = 4,
                      .head_dim = 128, .rot_dim = 128, .layout = RL_FUSED, .max_pos = 131072, .theta = 5e5};
        add_rope(l, &big);
        rope_p far = {.qt = MF_DTYPE_F32, .kt = MF_DTYPE_F32, .tokens = 9, .heads = 3, .kv_heads = 1, .head_dim = 64,
                      .rot_dim = 48, .layout = RL_PADDED, .max_pos = 2000000, .theta = 1e4};
        add_rope(l, &far);
    }
    rope_p none = {0};
    th_add(l, run_validation, &none, sizeof none, "rope(validation)");
}
