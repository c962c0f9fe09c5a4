// KV-cache write cases (mf_kv_write): scatter of k and v rows to random
// distinct (slot, position) pairs of the caches, RoPE fused on k and
// optionally on q (in place), partial rot_dim, k/v/q as columns of one fused
// q|k|v buffer, mixed input / cache dtypes, bad slots and positions.
//
// Reference in double of the op's formula: angle a = (float)pos * inv_freq[i]
// rounded to f32 (as mf_rope and HF), then
//     r0 = x0 cos a - x1 sin a,   r1 = x1 cos a + x0 sin a
// Tolerance per rotated element (u = 2^-24): 6 u (|x0| + |x1|) + eps_out |r| +
// tiny_out, i.e. cos/sin in f32 within 2 ulp, the products and the sum in
// f32, one rounding to the output dtype (the cache's for k, q's own for q).
// Elements that are only moved (v, k dims >= rot_dim, all of k without
// RoPE) are one conversion: exactly the input rounded to the cache dtype
// (bound 0). Everything else of the caches (random values, not poison: a
// stray write shows) and of the fused buffer must come back bit for bit.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

typedef struct {
    mf_dtype kt, ct, qt;   // k/v input, caches, q (fused: qt == kt)
    int64_t n, H, KVH, D;  // H 0: q NULL
    int64_t rot;           // rot_dim; 0: no RoPE
    bool fused;
    int64_t n_slots, max_len;
    int bad;               // 0: valid; 1: one slot (paged: slot_mapping entry) out of range; 2: one position
    bool paged;            // caches (n_blocks = n_slots, block_size = max_len); rows by slot_mapping, pos
                           // drawn apart (it only rotates)
    int64_t pos_min;       // positions drawn from [pos_min, max_len)
} kv_p;

static void fill_all(th_ctx *ctx, th_buf *b) {
    mf_tensor flat = th_view(ctx, b, 1, &b->n, NULL);
    th_fill(ctx, b, &flat, NULL);
}

static th_result run_kv_write(th_ctx *ctx, const void *params) {
    const kv_p *p = params;
    const int64_t n = p->n, H = p->H, KVH = p->KVH, D = p->D, half = p->rot / 2;
    mf_kv_write_args a = {0};
    mf_tensor q, inv;
    th_buf *bq = NULL, *bk, *bv;
    int64_t kb = 0, vb = 0; // element offsets of the views in their buffers
    const int64_t ks[3] = {n, KVH, D}, qs[3] = {n, H, D};
    if (p->fused) {
        const int64_t W = H + 2 * KVH, st[3] = {W * D, D, 1};
        bk = bv = th_buf_new(ctx, p->kt, n * W * D);
        fill_all(ctx, bk);
        a.k = th_view(ctx, bk, 3, ks, st);
        a.v = a.k;
        kb = H * D, vb = (H + KVH) * D;
        a.k.data = (char *)bk->dev + (size_t)kb * mf_dtype_size(p->kt);
        a.v.data = (char *)bk->dev + (size_t)vb * mf_dtype_size(p->kt);
        if (H) {
            q = th_view(ctx, bk, 3, qs, st);
            bq = bk;
        }
    } else {
        const int64_t st[3] = {KVH * (D + 2) + 1, D + 2, 1}; // padded heads and rows
        bk = th_buf_new(ctx, p->kt, (n - 1) * st[0] + (KVH - 1) * st[1] + D);
        bv = th_buf_new(ctx, p->kt, (n - 1) * st[0] + (KVH - 1) * st[1] + D);
        fill_all(ctx, bk);
        fill_all(ctx, bv);
        a.k = th_view(ctx, bk, 3, ks, st);
        a.v = th_view(ctx, bv, 3, ks, st);
        if (H) {
            bq = th_tensor(ctx, p->qt, 3, qs, NULL, &q);
            fill_all(ctx, bq);
        }
    }
    if (H) a.q = &q;
    const int64_t cs[4] = {p->n_slots, p->max_len, KVH, D};
    th_buf *bkc = th_tensor(ctx, p->ct, 4, cs, NULL, &a.k_cache);
    th_buf *bvc = th_tensor(ctx, p->ct, 4, cs, NULL, &a.v_cache);
    fill_all(ctx, bkc);
    fill_all(ctx, bvc);

    // Distinct (slot, pos) pairs: a partial shuffle of all cells (positions >= pos_min).
    const int64_t span = p->max_len - p->pos_min, cells = p->n_slots * span;
    int64_t *perm = th_scratch(ctx, (size_t)cells * sizeof *perm);
    for (int64_t c = 0; c < cells; c++) perm[c] = c;
    mf_tensor map;
    th_buf *bs = th_tensor(ctx, MF_DTYPE_I32, 1, &n, NULL, p->paged ? &map : &a.slot);
    th_buf *bp = th_tensor(ctx, MF_DTYPE_I32, 1, &n, NULL, &a.pos);
    int32_t *slot = th_scratch(ctx, (size_t)n * 4), *row = th_scratch(ctx, (size_t)n * 4);
    int32_t *pos = th_scratch(ctx, (size_t)n * 4);
    for (int64_t t = 0; t < n; t++) {
        const int64_t r = t + th_rng_int(&ctx->rng, cells - t), c = perm[r];
        perm[r] = perm[t], perm[t] = c;
        slot[t] = (int32_t)(c / span), row[t] = (int32_t)(p->pos_min + c % span);
        pos[t] = p->paged ? (int32_t)th_rng_int(&ctx->rng, 5000) : row[t];
    }
    const int64_t bad_t = p->bad ? n / 2 : -1;
    if (p->bad == 1) slot[bad_t] = (int32_t)p->n_slots, row[bad_t] = 0;
    if (p->bad == 2) pos[bad_t] = -1;
    for (int64_t t = 0; t < n; t++) {
        th_set(bs, t, p->paged ? (double)slot[t] * (double)p->max_len + row[t] : slot[t]);
        th_set(bp, t, pos[t]);
    }
    if (p->paged) a.slot_mapping = &map;
    float *invf = NULL;
    if (p->rot) {
        th_buf *bf = th_tensor(ctx, MF_DTYPE_F32, 1, &half, NULL, &inv);
        invf = th_scratch(ctx, (size_t)half * sizeof *invf);
        for (int64_t i = 0; i < half; i++) {
            invf[i] = (float)pow(1e4, -2.0 * (double)i / (double)p->rot);
            th_set(bf, i, invf[i]);
        }
        a.inv_freq = &inv;
    }

    // References over whole buffers: start as uploaded (bound 0).
    th_buf *outs[4] = {bkc, bvc, bq, NULL};
    double *ref[3], *bnd[3];
    for (int o = 0; o < 3; o++) {
        if (!outs[o]) continue;
        ref[o] = th_scratch(ctx, (size_t)outs[o]->n * sizeof(double));
        bnd[o] = th_scratch(ctx, (size_t)outs[o]->n * sizeof(double));
        for (int64_t e = 0; e < outs[o]->n; e++) ref[o][e] = th_get(outs[o], e);
    }
    const bool cpu = mf_backend_device(ctx->be) == MF_DEVICE_CPU;
    const double u = 0x1.0p-24;
    for (int64_t t = 0; t < n; t++) {
        if (t == bad_t || (p->bad && cpu)) continue; // CPU: nothing is written; CUDA: the bad row is skipped
        // which: 0 k -> k_cache, 1 v -> v_cache, 2 q in place
        for (int which = 0; which < 3; which++) {
            const int64_t heads = which == 2 ? H : KVH;
            for (int64_t h = 0; h < heads; h++) {
                const th_buf *src = which == 2 ? bq : which == 0 ? bk : bv;
                const int64_t so = which == 2 ? t * q.stride[0] + h * q.stride[1]
                                              : (which == 0 ? kb : vb) + t * a.k.stride[0] + h * a.k.stride[1];
                double *rf = ref[which], *bd = bnd[which];
                const mf_dtype ot = which == 2 ? p->qt : p->ct;
                const int64_t dst = which == 2 ? so
                                               : (int64_t)slot[t] * a.k_cache.stride[0] +
                                                     (int64_t)row[t] * a.k_cache.stride[1] + h * a.k_cache.stride[2];
                const bool rope = which != 1 && p->rot;
                for (int64_t i = 0; i < (rope ? half : 0); i++) {
                    const float ang = (float)pos[t] * invf[i];
                    const double c = cos((double)ang), s = sin((double)ang);
                    const double x0 = th_get(src, so + i), x1 = th_get(src, so + i + half);
                    const double r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s, m = 6 * u * (fabs(x0) + fabs(x1));
                    rf[dst + i] = r0, bd[dst + i] = m + th_eps(ot) * fabs(r0) + th_tiny(ot);
                    rf[dst + i + half] = r1, bd[dst + i + half] = m + th_eps(ot) * fabs(r1) + th_tiny(ot);
                }
                if (which == 2) continue; // q: dims >= rot_dim stay as they are
                for (int64_t d = rope ? 2 * half : 0; d < D; d++) {
                    rf[dst + d] = th_round(ot, th_get(src, so + d));
                    bd[dst + d] = 0;
                }
            }
        }
    }

    if (p->bad) {
        th_upload_all(ctx);
        mf_status st = mf_kv_write(ctx->be, &a);
        if (st == MF_OK) st = mf_backend_sync(ctx->be);
        const char *want = p->bad == 1 ? (p->paged ? "slot_mapping[" : "slot[") : "pos[";
        if (st != MF_ERR_INVALID_ARG || (cpu && !strstr(mf_last_error(), want)))
            return th_fail(ctx, "bad %s: got %s '%s', want MF_ERR_INVALID_ARG naming %s", p->bad == 1 ? "slot" : "pos",
                           mf_status_str(st), mf_last_error(), want);
    } else {
        TH_CALL(ctx, mf_kv_write(ctx->be, &a));
    }
    bool ok = true;
    static const char *const names[3] = {"k_cache", "v_cache", "q"};
    for (int o = 0; o < 3; o++) {
        if (!outs[o]) continue;
        mf_tensor flat = th_view(ctx, outs[o], 1, &outs[o]->n, NULL);
        ok &= th_check(ctx, outs[o], &flat, ref[o], bnd[o], p->fused && o == 2 ? "qkv" : names[o]);
    }
    if (p->bad) { // the next call works (an empty one: nothing more to check in the buffers)
        mf_kv_write_args e = a;
        e.k.shape[0] = e.v.shape[0] = e.slot.shape[0] = e.pos.shape[0] = 0;
        mf_tensor m0 = map;
        m0.shape[0] = 0;
        if (p->paged) e.slot_mapping = &m0;
        mf_tensor q0 = q;
        q0.shape[0] = 0;
        if (a.q) e.q = &q0;
        mf_status st = mf_kv_write(ctx->be, &e);
        if (st == MF_OK) st = mf_backend_sync(ctx->be);
        if (st != MF_OK) ok &= th_fail(ctx, "empty call after the error: %s", mf_last_error()) == TH_PASS;
    }
    return ok ? TH_PASS : TH_FAIL;
}

static void add_kv(th_list *l, const kv_p *p) {
    char q[48] = "";
    if (p->H) snprintf(q, sizeof q, ",q=%s:%lld", mf_dtype_name(p->qt), (long long)p->H);
    th_add(l, run_kv_write, p, sizeof *p,
           "kv_write(k=%s,cache=%s%s,tokens=%lld,kv_heads=%lld,head_dim=%lld,rot_dim=%lld,layout=%s,slots=%lld,"
           "max_len=%lld,pos_min=%lld%s%s)",
           mf_dtype_name(p->kt), mf_dtype_name(p->ct), q, (long long)p->n, (long long)p->KVH, (long long)p->D,
           (long long)p->rot, p->fused ? "fused_qkv" : "padded", (long long)p->n_slots, (long long)p->max_len,
           (long long)p->pos_min, p->paged ? ",paged=slot_mapping" : "",
           p->bad == 1 ? ",bad=slot" : p->bad == 2 ? ",bad=pos" : "");
}

// ---- argument validation -----------------------------------------------------------

static th_result run_validation(th_ctx *ctx, const void *params) {
    (void)params;
    const int64_t ks[3] = {3, 2, 8}, qs[3] = {3, 4, 8}, cs[4] = {2, 5, 2, 8}, three = 3, four = 4;
    mf_tensor k, v, q, kc, vc, sl, ps, inv, psf;
    th_buf *bk = th_tensor(ctx, MF_DTYPE_BF16, 3, ks, NULL, &k);
    th_buf *bv = th_tensor(ctx, MF_DTYPE_BF16, 3, ks, NULL, &v);
    th_buf *bq = th_tensor(ctx, MF_DTYPE_F32, 3, qs, NULL, &q);
    th_tensor(ctx, MF_DTYPE_BF16, 4, cs, NULL, &kc);
    th_tensor(ctx, MF_DTYPE_BF16, 4, cs, NULL, &vc);
    th_buf *bs = th_tensor(ctx, MF_DTYPE_I32, 1, &three, NULL, &sl);
    th_buf *bp = th_tensor(ctx, MF_DTYPE_I32, 1, &three, NULL, &ps);
    th_tensor(ctx, MF_DTYPE_F32, 1, &three, NULL, &psf);
    th_buf *bf = th_tensor(ctx, MF_DTYPE_F32, 1, &four, NULL, &inv);
    th_fill(ctx, bk, &k, NULL);
    th_fill(ctx, bv, &v, NULL);
    th_fill(ctx, bq, &q, NULL);
    for (int i = 0; i < 3; i++) th_set(bs, i, i % 2), th_set(bp, i, i);
    for (int i = 0; i < 4; i++) th_set(bf, i, 1.0 / (1 << i));
    th_upload_all(ctx);
    bool ok = true;
    const mf_kv_write_args a = {.k = k, .v = v, .k_cache = kc, .v_cache = vc, .slot = sl, .pos = ps, .q = &q,
                                .inv_freq = &inv};
    mf_kv_write_args t;
    mf_tensor x;
#define TRY(mod, want, needle, what)                                            \
    do {                                                                        \
        t = a;                                                                  \
        mod;                                                                    \
        ok &= th_expect(ctx, mf_kv_write(ctx->be, &t), want, needle, what);        \
        ok &= th_expect(ctx, mf_kv_write(ctx->be, &a), MF_OK, NULL, "valid after " what); \
    } while (0)
    ok &= th_expect(ctx, mf_kv_write(ctx->be, NULL), MF_ERR_INVALID_ARG, "args is NULL", "NULL args");
    ok &= th_expect(ctx, mf_kv_write(NULL, &a), MF_ERR_INVALID_ARG, "backend is NULL", "NULL backend");
    ok &= th_expect(ctx, mf_kv_write(ctx->be, &a), MF_OK, NULL, "valid");
    ok &= th_expect(ctx, mf_backend_sync(ctx->be), MF_OK, NULL, "valid sync");
    TRY(t.k.ndim = 2, MF_ERR_INVALID_ARG, "k has 2 dims (want 3", "2-D k");
    TRY(t.v.shape[1] = 1, MF_ERR_INVALID_ARG, "v shape[1] = 1 != k's 2", "v heads");
    TRY(t.k_cache.shape[3] = 4; t.v_cache.shape[3] = 4, MF_ERR_INVALID_ARG, "k_cache head_dim 4 != k's 8",
        "cache head_dim");
    TRY(t.k_cache.shape[2] = 1; t.v_cache.shape[2] = 1, MF_ERR_INVALID_ARG, "k_cache n_kv_heads 1 != k's 2",
        "cache heads");
    TRY(t.v_cache.dtype = MF_DTYPE_F16, MF_ERR_INVALID_ARG, "v_cache dtype f16 != k_cache dtype bf16", "cache dtypes");
    TRY(t.k.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG, "k dtype i32", "i32 k");
    TRY(t.k.stride[2] = 2; t.k.shape[2] = 4, MF_ERR_UNSUPPORTED, "k stride[-1] = 2", "strided head_dim");
    TRY(t.pos = psf, MF_ERR_INVALID_ARG, "pos dtype f32", "f32 pos");
    TRY(t.slot.shape[0] = 2, MF_ERR_INVALID_ARG, "slot has 2 entries (want n_tokens = 3)", "short slot");
    TRY(t.inv_freq = NULL, MF_ERR_INVALID_ARG, "q given without inv_freq", "q without RoPE");
    x = inv, x.shape[0] = 5;
    TRY(t.inv_freq = &x, MF_ERR_INVALID_ARG, "rot_dim 10 (2 x inv_freq's 5 entries) > head_dim 8", "rot_dim > D");
    x = inv, x.dtype = MF_DTYPE_BF16;
    TRY(t.inv_freq = &x, MF_ERR_INVALID_ARG, "inv_freq dtype bf16", "bf16 inv_freq");
    TRY(t.v_cache = t.k_cache, MF_ERR_INVALID_ARG, "k_cache and v_cache overlap", "one cache for both");
    x = q, x.dtype = MF_DTYPE_BF16, x.ndim = 4, x.shape[0] = 2, x.shape[1] = 3, x.shape[2] = 2, x.shape[3] = 8;
    x.stride[0] = 48, x.stride[1] = 16, x.stride[2] = 8, x.stride[3] = 1;
    TRY(t.k_cache = x; t.v_cache.shape[1] = 3, MF_ERR_INVALID_ARG, "q and k_cache overlap", "cache over q");
    mf_tensor q2 = k;
    q2.shape[1] = 2;
    TRY(t.q = &q2, MF_ERR_INVALID_ARG, "q and k overlap", "q is k");
    q2 = q, q2.shape[0] = 2;
    TRY(t.q = &q2, MF_ERR_INVALID_ARG, "q has n_tokens = 2, k has 3", "q tokens");
    TRY(t.q = NULL; t.inv_freq = NULL, MF_OK, NULL, "no RoPE");
    TRY(t.slot_mapping = &sl, MF_ERR_INVALID_ARG, "both slot and slot_mapping given", "slot and slot_mapping");
    TRY(t.slot_mapping = &psf; memset(&t.slot, 0, sizeof t.slot), MF_ERR_INVALID_ARG, "slot_mapping dtype f32",
        "f32 slot_mapping");
    TRY(t.slot_mapping = &sl; memset(&t.slot, 0, sizeof t.slot), MF_OK, NULL, "paged");
    TRY(t.q = NULL, MF_OK, NULL, "RoPE on k only");
    ok &= th_expect(ctx, mf_backend_sync(ctx->be), MF_OK, NULL, "sync");
#undef TRY
    for (int i = 0; i < ctx->nbufs; i++) ctx->bufs[i]->checked = true; // caches and q were written
    return ok ? TH_PASS : TH_FAIL;
}

void th_cases_kv_write(th_list *l) {
    static const mf_dtype dts[3] = {MF_DTYPE_BF16, MF_DTYPE_F16, MF_DTYPE_F32};
    // (tokens, H, KVH, D, rot): decode batch, prefill, partial rotary, no RoPE, q off, odd sizes.
    static const int64_t geo[][5] = {{8, 32, 8, 128, 128}, {37, 8, 2, 64, 64},  {5, 6, 2, 80, 32}, {19, 0, 4, 64, 64},
                                     {64, 4, 4, 128, 0},   {3, 0, 1, 40, 0},    {1, 16, 2, 256, 256}, {50, 12, 1, 96, 48}};
    int v = 0;
    for (int g = 0; g < 8; g++)
        for (int f = 0; f < 2; f++, v++) {
            kv_p p = {.kt = dts[v % 3], .ct = dts[v % 3], .qt = dts[v % 3], .n = geo[g][0], .H = geo[g][1],
                      .KVH = geo[g][2], .D = geo[g][3], .rot = geo[g][4], .fused = f == 1, .n_slots = 4,
                      .max_len = geo[g][0] + 20};
            if (p.rot == 0) p.H = 0; // q needs RoPE
            add_kv(l, &p);
        }
    // Mixed dtypes: f32 / f16 activations into a bf16 cache, bf16 into an f32 cache.
    for (int t = 0; t < 3; t++) {
        kv_p p = {.kt = dts[(t + 1) % 3], .ct = dts[t], .qt = dts[(t + 2) % 3], .n = 21, .H = 8, .KVH = 2, .D = 64,
                  .rot = 64, .n_slots = 3, .max_len = 40};
        add_kv(l, &p);
    }
    // Bad slot / position: CPU refuses before writing; CUDA skips the row and reports at sync.
    for (int b = 1; b <= 2; b++) {
        kv_p p = {.kt = MF_DTYPE_BF16, .ct = MF_DTYPE_BF16, .qt = MF_DTYPE_BF16, .n = 9, .H = 4, .KVH = 2, .D = 64,
                  .rot = 64, .n_slots = 2, .max_len = 16, .bad = b};
        add_kv(l, &p);
    }
    // More tokens than the CUDA grid has blocks: each block goes round its
    // token loop more than once.
    kv_p many = {.kt = MF_DTYPE_BF16, .ct = MF_DTYPE_BF16, .qt = MF_DTYPE_BF16, .n = 9000, .H = 2, .KVH = 1, .D = 8,
                 .rot = 8, .n_slots = 2, .max_len = 4600};
    add_kv(l, &many);
    // Positions past 1e5: angles up to 1.3e5 rad, where sincosf takes its
    // slow argument reduction.
    kv_p far = {.kt = MF_DTYPE_F32, .ct = MF_DTYPE_F32, .qt = MF_DTYPE_F32, .n = 64, .H = 2, .KVH = 1, .D = 16,
                .rot = 16, .n_slots = 1, .max_len = 131072, .pos_min = 100000};
    add_kv(l, &far);
    // Paged caches: rows by slot_mapping into (n_blocks, block_size) pools, RoPE
    // positions unrelated to the rows; a bad mapping entry.
    for (int t = 0; t < 3; t++) {
        kv_p p = {.kt = dts[t], .ct = dts[(t + t / 2) % 3], .qt = dts[t], .n = 40 + t, .H = t == 1 ? 0 : 8, .KVH = 2,
                  .D = t == 2 ? 80 : 64, .rot = t == 1 ? 0 : 64, .fused = t == 2, .n_slots = 9, .max_len = 16,
                  .paged = true};
        add_kv(l, &p);
    }
    kv_p bad = {.kt = MF_DTYPE_F32, .ct = MF_DTYPE_F32, .qt = MF_DTYPE_F32, .n = 9, .H = 4, .KVH = 2, .D = 64,
                .rot = 64, .n_slots = 4, .max_len = 16, .bad = 1, .paged = true};
    add_kv(l, &bad);
    kv_p none = {0};
    th_add(l, run_validation, &none, sizeof none, "kv_write(validation)");
}
