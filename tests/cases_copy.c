// Strided copy / cast cases (mf_copy).
//
// A copy is exact: the tolerance is 0. The reference casts each source value
// to dst's dtype in double with its own round-to-nearest-even (a quantum of
// 2^(E - p + 1), E clamped to the format's minimum exponent for subnormals,
// overflow to inf past the last finite value's half-ulp), independent of the
// library's converters. Besides the values (NaN must stay NaN, +-inf exact):
//   - a same-dtype copy must move the bytes unchanged (NaN payloads, -0);
//   - a cast must keep the sign of zero;
//   - every element of dst's buffer outside the view keeps its bytes (the
//     buffer is filled with random values first, the view then poisoned).
// Fills: "random" (uniform [-1, 1) with outliers 1e4, 1e2 for f16), "ties"
// (half the values exactly halfway between two values of dst's dtype, both
// parities), "specials" (NaN, +-inf, -0, f16/bf16 overflow edges and ties,
// subnormals of every format, then random values).
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

typedef enum { FILL_RANDOM = 0, FILL_TIES = 1, FILL_SPECIALS = 2 } copy_fill;
static const char *const fill_names[] = {"random", "ties", "specials"};

typedef struct {
    mf_dtype st, dt;
    int ndim;
    int64_t shape[MF_MAX_DIMS];
    int64_t ss[MF_MAX_DIMS], ds[MF_MAX_DIMS]; // src, dst strides (elements)
    int64_t soff, doff;   // where the views start in their buffers (elements)
    int64_t dn;           // dst buffer elements (0: just what the view needs)
    bool same_buf;        // dst is a view into src's buffer (same dtype)
    copy_fill fill;
    const char *layout;   // names the case's layout
} copy_p;

// ---- the reference cast ----------------------------------------------------------------

// v rounded to nearest even with prec significant bits, exponents >= emin
// (subnormals below), |result| <= maxf (else inf).
static double round_to(double v, int prec, int emin, double maxf) {
    if (v == 0 || !isfinite(v)) return v;
    int ex;
    frexp(v, &ex); // |v| in [2^(ex-1), 2^ex)
    int e = ex - 1 < emin ? emin : ex - 1;
    const double q = ldexp(1.0, e - (prec - 1));
    const double r = nearbyint(v / q) * q; // the default rounding mode: ties to even
    if (fabs(r) > maxf) return copysign(INFINITY, v);
    return r == 0 ? copysign(0.0, v) : r;
}

static double cast_ref(double v, mf_dtype dt) {
    switch (dt) {
    case MF_DTYPE_F16: return round_to(v, 11, -14, 65504.0);
    case MF_DTYPE_BF16: return round_to(v, 8, -126, ldexp(2.0 - ldexp(1.0, -7), 127));
    case MF_DTYPE_F32: return round_to(v, 24, -126, FLT_MAX);
    default: return v; // i32: exact
    }
}

// ---- fills ---------------------------------------------------------------------------

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void fill_src(th_ctx *ctx, th_buf *b, copy_fill fill, mf_dtype to) {
    if (b->dtype == MF_DTYPE_I32) {
        for (int64_t e = 0; e < b->n; e++) th_set(b, e, (double)(int32_t)(uint32_t)th_rng_u64(&ctx->rng));
        return;
    }
    mf_tensor flat = th_view(ctx, b, 1, &b->n, NULL);
    th_fill(ctx, b, &flat, NULL);
    if (fill == FILL_TIES && b->dtype == MF_DTYPE_F32) {
        // Halfway between two neighbours in `to`: the bits below its last one are 100...0.
        const int drop = to == MF_DTYPE_BF16 ? 16 : 13;
        const uint32_t low = (1u << drop) - 1, half = 1u << (drop - 1);
        for (int64_t e = 0; e < b->n; e++)
            if (th_rng_int(&ctx->rng, 2)) {
                const uint32_t u = f_bits((float)th_get(b, e));
                th_set(b, e, bits_f((u & ~low) | half));
            }
    }
    if (fill == FILL_SPECIALS) {
        const double sp[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e5,
                             ldexp(1, -14), ldexp(1, -24), ldexp(1, -25), 3 * ldexp(1, -25), ldexp(1, -26),
                             -ldexp(1023, -24), 1e-40, -1e-45, FLT_MAX, -FLT_MAX, ldexp(2 - ldexp(1, -8), 127),
                             ldexp(2 - ldexp(1, -7), 127), 1 + ldexp(1, -8), 1 + 3 * ldexp(1, -8),
                             1 + ldexp(1, -11), 1 + 3 * ldexp(1, -11), 2049, 2051, -2051, 1.0 / 3, -1e38};
        const int64_t ns = (int64_t)(sizeof sp / sizeof sp[0]);
        for (int64_t e = 0; e < b->n; e++) // most of the buffer: specials, scattered
            if (e < ns || th_rng_int(&ctx->rng, 3) == 0) th_set(b, e, sp[e < ns ? e : th_rng_int(&ctx->rng, ns)]);
    }
}

// ---- a case ---------------------------------------------------------------------------

static int64_t extent(const copy_p *p, const int64_t *st) { // elements a view spans (1 + last offset)
    int64_t last = 0;
    for (int d = 0; d < p->ndim; d++) last += (p->shape[d] - 1) * st[d];
    return last + 1;
}

static th_result run_copy(th_ctx *ctx, const void *params) {
    const copy_p *p = params;
    int64_t numel = 1;
    for (int d = 0; d < p->ndim; d++) numel *= p->shape[d];
    const int64_t sn = numel ? p->soff + extent(p, p->ss) : 1;
    const int64_t dneed = numel ? p->doff + extent(p, p->ds) : 1;
    const int64_t dn = p->dn > dneed ? p->dn : dneed;
    th_buf *bs = th_buf_new(ctx, p->st, p->same_buf ? (sn > dn ? sn : dn) : sn);
    fill_src(ctx, bs, p->fill, p->dt);
    th_buf *bd = bs;
    if (!p->same_buf) {
        bd = th_buf_new(ctx, p->dt, dn);
        fill_src(ctx, bd, FILL_RANDOM, p->dt); // random outside the view: stray writes show
    }
    mf_copy_args a;
    a.src = th_view(ctx, bs, p->ndim, p->shape, p->ss);
    a.dst = th_view(ctx, bd, p->ndim, p->shape, p->ds);
    a.src.data = (char *)a.src.data + (size_t)p->soff * mf_dtype_size(p->st);
    a.dst.data = (char *)a.dst.data + (size_t)p->doff * mf_dtype_size(p->dt);

    // Element offsets (in the buffers) of each logical element, row-major.
    int64_t *so = th_scratch(ctx, (size_t)(numel ? numel : 1) * sizeof(int64_t));
    int64_t *dof = th_scratch(ctx, (size_t)(numel ? numel : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < numel; i++) {
        int64_t rem = i, s = p->soff, d = p->doff;
        for (int k = p->ndim - 1; k >= 0; k--) {
            const int64_t idx = rem % p->shape[k];
            rem /= p->shape[k];
            s += idx * p->ss[k], d += idx * p->ds[k];
        }
        so[i] = s, dof[i] = d;
        if (!p->same_buf) th_set(bd, d, bd->dtype == MF_DTYPE_I32 ? -1 : NAN); // poison the view
    }
    double *ref = th_scratch(ctx, (size_t)bd->n * sizeof(double));
    double *bnd = th_scratch(ctx, (size_t)bd->n * sizeof(double)); // all 0: exact
    for (int64_t e = 0; e < bd->n; e++) ref[e] = th_get(bd, e);
    for (int64_t i = 0; i < numel; i++) ref[dof[i]] = cast_ref(th_get(bs, so[i]), p->dt);
    // What the bytes must be afterwards (th_get would lose NaN payloads): the
    // uploaded ones, with the view's elements from src when the dtype is the same.
    const size_t es = mf_dtype_size(p->dt);
    th_upload_all(ctx);
    char *want = th_scratch(ctx, bd->bytes ? bd->bytes : 1);
    memcpy(want, bd->host, bd->bytes);
    unsigned char *in_view = th_scratch(ctx, (size_t)bd->n);
    for (int64_t i = 0; i < numel; i++) {
        in_view[dof[i]] = 1;
        if (p->st == p->dt) memcpy(want + dof[i] * (int64_t)es, bs->host + so[i] * (int64_t)es, es);
    }

    TH_CALL(ctx, mf_copy(ctx->be, &a));
    mf_tensor flat = th_view(ctx, bd, 1, &bd->n, NULL);
    bool ok = th_check(ctx, bd, &flat, ref, bnd, "dst");
    for (int64_t e = 0; e < bd->n && ok; e++) {
        const bool bytes = !in_view[e] || p->st == p->dt;
        if (bytes && memcmp(bd->host + e * (int64_t)es, want + e * (int64_t)es, es) != 0) {
            th_fail(ctx, "dst element %lld: bytes differ from %s (got %g)", (long long)e,
                    in_view[e] ? "src's (a same-dtype copy must move bits)" : "the uploaded ones (outside the view)",
                    th_get(bd, e));
            ok = false;
        } else if (!bytes && ref[e] == 0 && !signbit(th_get(bd, e)) != !signbit(ref[e])) {
            th_fail(ctx, "dst element %lld: zero with the wrong sign (ref %g)", (long long)e, ref[e]);
            ok = false;
        }
    }
    return ok ? TH_PASS : TH_FAIL;
}

static void dims_str(char *out, size_t cap, int nd, const int64_t *v) {
    size_t len = 0;
    for (int d = 0; d < nd && len < cap; d++) len += (size_t)snprintf(out + len, cap - len, "%s%lld", d ? "x" : "", (long long)v[d]);
}

static void add_copy(th_list *l, const copy_p *p) {
    char shp[48], ss[64], ds[64], off[32] = "";
    dims_str(shp, sizeof shp, p->ndim, p->shape);
    dims_str(ss, sizeof ss, p->ndim, p->ss);
    dims_str(ds, sizeof ds, p->ndim, p->ds);
    if (p->soff || p->doff) snprintf(off, sizeof off, ",offsets=%lld/%lld", (long long)p->soff, (long long)p->doff);
    th_add(l, run_copy, p, sizeof *p, "copy(src=%s,dst=%s,shape=%s,src_strides=%s,dst_strides=%s%s,fill=%s,layout=%s)",
           mf_dtype_name(p->st), mf_dtype_name(p->dt), shp, ss, ds, off, fill_names[p->fill], p->layout);
}

// Row-major strides of shape, optionally with the dims laid out in the order
// perm (perm[0] outermost in memory); NULL: the identity.
static void strides_of(int nd, const int64_t *shape, const int *perm, int64_t *st) {
    int64_t s = 1;
    for (int k = nd - 1; k >= 0; k--) {
        const int d = perm ? perm[k] : k;
        st[d] = s;
        s *= shape[d];
    }
}

static copy_p mk(mf_dtype st, mf_dtype dt, int nd, const int64_t *shape, const char *layout) {
    copy_p p = {.st = st, .dt = dt, .ndim = nd, .layout = layout};
    for (int d = 0; d < nd; d++) p.shape[d] = shape[d];
    strides_of(nd, shape, NULL, p.ss);
    strides_of(nd, shape, NULL, p.ds);
    return p;
}

// ---- rows * cols > 2^32 (CUDA only: 8.6 GB of output) ----------------------------------

static th_result run_int64(th_ctx *ctx, const void *params) {
    (void)params;
    if (mf_backend_device(ctx->be) == MF_DEVICE_CPU) {
        snprintf(ctx->msg, sizeof ctx->msg, "8.6 GB case: CUDA only");
        return TH_SKIP;
    }
    // src: one f32 row of 2048 broadcast (row stride 0) over N = 2^21 + 1
    // rows; dst: (N, 2048) bf16, 2^32 + 2048 elements. Checked: rows 0, 2^20,
    // 2^21 - 1, 2^21 (past 2^32 elements).
    const int64_t N = ((int64_t)1 << 21) + 1, C = 2048;
    mf_tensor row;
    th_buf *bs = th_tensor(ctx, MF_DTYPE_F32, 1, &C, NULL, &row);
    for (int64_t j = 0; j < C; j++) th_set(bs, j, th_rng_unif(&ctx->rng, -3, 3));
    const size_t ybytes = (size_t)(N * C) * 2;
    void *yd = NULL;
    if (mf_backend_alloc(ctx->be, ybytes, &yd) != MF_OK) {
        snprintf(ctx->msg, sizeof ctx->msg, "cannot allocate %zu bytes: %s", ybytes, mf_last_error());
        return TH_SKIP;
    }
    th_result res = TH_PASS;
    uint16_t *host = th_scratch(ctx, (size_t)C * 2);
    const int64_t shape[2] = {N, C};
    mf_copy_args a;
    mf_tensor_make(&a.src, row.data, MF_DTYPE_F32, mf_backend_device(ctx->be), 2, shape);
    a.src.stride[0] = 0;
    mf_tensor_make(&a.dst, yd, MF_DTYPE_BF16, mf_backend_device(ctx->be), 2, shape);
    th_upload_all(ctx);
    mf_status st = mf_backend_memset(ctx->be, yd, 0xff, ybytes); // NaN poison
    if (st == MF_OK) st = mf_copy(ctx->be, &a);
    if (st == MF_OK) st = mf_backend_sync(ctx->be);
    if (st != MF_OK) res = th_fail(ctx, "mf_copy: %s: %s", mf_status_str(st), mf_last_error());
    const int64_t check[4] = {0, (int64_t)1 << 20, ((int64_t)1 << 21) - 1, (int64_t)1 << 21};
    for (int c = 0; c < 4 && res == TH_PASS; c++) {
        st = mf_backend_copy(ctx->be, host, (char *)yd + (size_t)(check[c] * C) * 2, (size_t)C * 2, MF_COPY_D2H);
        if (st != MF_OK) {
            res = th_fail(ctx, "download: %s", mf_last_error());
            break;
        }
        for (int64_t j = 0; j < C; j++) {
            const double ref = cast_ref(th_get(bs, j), MF_DTYPE_BF16), got = mf_bf16_to_f32(host[j]);
            if (got != ref) {
                res = th_fail(ctx, "dst[%lld,%lld] = %.6g, ref %.6g", (long long)check[c], (long long)j, got, ref);
                break;
            }
        }
    }
    mf_backend_dealloc(ctx->be, yd);
    return res;
}

// ---- argument validation -----------------------------------------------------------

static th_result run_validation(th_ctx *ctx, const void *params) {
    (void)params;
    const int64_t s[2] = {4, 8}, s3[3] = {4, 8, 1}, wide[2] = {4, 16};
    mf_tensor x, y, xi, yi, y3, w;
    th_tensor(ctx, MF_DTYPE_F32, 2, s, NULL, &x);
    th_tensor(ctx, MF_DTYPE_BF16, 2, s, NULL, &y);
    th_tensor(ctx, MF_DTYPE_I32, 2, s, NULL, &xi);
    th_tensor(ctx, MF_DTYPE_I32, 2, s, NULL, &yi);
    th_tensor(ctx, MF_DTYPE_F16, 3, s3, NULL, &y3);
    th_tensor(ctx, MF_DTYPE_F16, 2, wide, NULL, &w);
    th_upload_all(ctx);
    bool ok = true;
    mf_copy_args a = {.src = x, .dst = y}, t;
#define TRY(mod, want, needle, what)                                  \
    do {                                                              \
        t = a;                                                        \
        mod;                                                          \
        ok &= th_expect(ctx, mf_copy(ctx->be, &t), want, needle, what);  \
    } while (0)
    ok &= th_expect(ctx, mf_copy(ctx->be, NULL), MF_ERR_INVALID_ARG, "args is NULL", "NULL args");
    ok &= th_expect(ctx, mf_copy(NULL, &a), MF_ERR_INVALID_ARG, "backend is NULL", "NULL backend");
    TRY(t.src = xi, MF_ERR_INVALID_ARG, "src dtype i32 to dst dtype bf16", "i32 -> bf16");
    TRY(t.dst = yi, MF_ERR_INVALID_ARG, "src dtype f32 to dst dtype i32", "f32 -> i32");
    TRY(t.dst = y3, MF_ERR_INVALID_ARG, "dst has 3 dims, src has 2", "ndim");
    TRY(t.dst.shape[1] = 7, MF_ERR_INVALID_ARG, "dst shape[1] = 7 != src shape[1] = 8", "shape");
    TRY(t.dst.ndim = 5, MF_ERR_INVALID_ARG, "ndim 5", "5 dims");
    TRY(t.src.stride[0] = -8, MF_ERR_INVALID_ARG, "stride[0]=-8 < 0", "negative stride");
    TRY(t.dst.stride[0] = 0, MF_ERR_INVALID_ARG, "dst's elements overlap", "dst stride 0");
    TRY(t.dst.stride[1] = 2, MF_ERR_INVALID_ARG, "dst's elements overlap", "dst rows overlap");
    TRY(t.dst = t.src; t.dst.data = (float *)t.src.data + 3, MF_ERR_INVALID_ARG,
        "src and dst overlap in memory without being the same view", "dst shifted over src");
    TRY(t.dst.data = t.src.data, MF_ERR_INVALID_ARG, "src and dst overlap", "bf16 dst over f32 src");
    TRY(t.dst = t.src; t.dst.stride[0] = 1; t.dst.stride[1] = 4, MF_ERR_INVALID_ARG, "src and dst overlap",
        "in-place transpose");
    TRY(t.src.stride[0] = 0, MF_OK, NULL, "src stride 0 (broadcast)");
    TRY(t.dst = t.src, MF_OK, NULL, "same view");
    TRY(t.src = xi; t.dst = yi, MF_OK, NULL, "i32 -> i32");
    mf_tensor lo = w, hi = w; // the two halves of one buffer: interleaved, disjoint
    lo.shape[1] = hi.shape[1] = 8, hi.data = (char *)w.data + 8 * 2;
    TRY(t.src = lo; t.dst = hi, MF_OK, NULL, "halves of one buffer");
    hi.data = (char *)w.data + 7 * 2;
    TRY(t.src = lo; t.dst = hi, MF_ERR_INVALID_ARG, "src and dst overlap", "halves sharing a column");
    TRY(t.src.shape[0] = 0; t.dst.shape[0] = 0; t.dst.stride[0] = 0, MF_OK, NULL, "empty");
#undef TRY
    // The valid calls above wrote their dst buffers: outputs, not unchanged inputs.
    for (int i = 0; i < ctx->nbufs; i++) ctx->bufs[i]->checked = true;
    return ok ? TH_PASS : TH_FAIL;
}

// ---- the case list -------------------------------------------------------------------

void th_cases_copy(th_list *l) {
    static const mf_dtype fl[3] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};
    // 1. Contiguous, every dtype pair (one block: memcpy / one row), 1-D to 4-D.
    static const int64_t s1[1] = {100003}, s2[2] = {37, 1000}, s3[3] = {3, 5, 7}, s4[4] = {2, 3, 5, 64};
    static const int64_t *const shapes[4] = {s1, s2, s3, s4};
    int v = 0;
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 3; o++, v++) {
            copy_p p = mk(fl[i], fl[o], 1 + v % 4, shapes[v % 4], "contiguous");
            add_copy(l, &p);
        }
    {
        copy_p p = mk(MF_DTYPE_I32, MF_DTYPE_I32, 2, s2, "contiguous");
        add_copy(l, &p);
        p = mk(MF_DTYPE_BF16, MF_DTYPE_F32, 1, (const int64_t[]){1}, "one_element");
        add_copy(l, &p);
        p = mk(MF_DTYPE_F32, MF_DTYPE_F16, 2, (const int64_t[]){0, 5}, "empty");
        add_copy(l, &p);
    }
    // 2. Casts with ties and special values, every pair (same dtype: bits kept).
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 3; o++) {
            copy_p p = mk(fl[i], fl[o], 2, (const int64_t[]){7, 999}, "contiguous");
            p.fill = FILL_SPECIALS;
            add_copy(l, &p);
            if (i == o || fl[o] == MF_DTYPE_F32 || (fl[i] == MF_DTYPE_BF16 && fl[o] == MF_DTYPE_F16))
                continue; // no ties to make: nothing rounds halfway
            p.fill = FILL_TIES;
            add_copy(l, &p);
        }
    // 3. 2-D transposes (dst = src^T written through strides), both directions.
    for (int i = 0; i < 3; i++) {
        const int64_t sh[2] = {67, 129};
        copy_p p = mk(fl[i], fl[(i + 1) % 3], 2, sh, "transpose_dst");
        p.ds[0] = 1, p.ds[1] = 67;
        add_copy(l, &p);
        p = mk(fl[i], fl[i], 2, sh, "transpose_src");
        p.ss[0] = 1, p.ss[1] = 67;
        add_copy(l, &p);
    }
    {
        copy_p p = mk(MF_DTYPE_I32, MF_DTYPE_I32, 2, (const int64_t[]){33, 65}, "transpose_dst");
        p.ds[0] = 1, p.ds[1] = 33;
        add_copy(l, &p);
    }
    // 4. 4-D permutations: (B, H, S, D) memory read as (B, S, H, D) (rows of D
    //    stay contiguous), and every dim reordered (no unit stride in common).
    static const int perm_bhsd[4] = {0, 2, 1, 3}, perm_rev[4] = {3, 2, 1, 0}, perm_mix[4] = {2, 0, 3, 1};
    for (int i = 0; i < 3; i++) {
        const int64_t sh[4] = {2, 9, 5, 64};
        copy_p p = mk(fl[i], fl[2 - i], 4, sh, "bhsd_to_bshd");
        strides_of(4, sh, perm_bhsd, p.ss);
        add_copy(l, &p);
        p = mk(fl[i], fl[i], 4, sh, "bshd_to_bhsd");
        strides_of(4, sh, perm_bhsd, p.ds);
        add_copy(l, &p);
        const int64_t sh2[4] = {3, 4, 5, 7};
        p = mk(fl[i], fl[(i + 2) % 3], 4, sh2, "reversed_dims");
        strides_of(4, sh2, perm_rev, p.ss);
        add_copy(l, &p);
        p = mk(fl[i], fl[(i + 1) % 3], 4, sh2, "mixed_dims");
        strides_of(4, sh2, perm_mix, p.ss);
        strides_of(4, sh2, perm_rev, p.ds);
        p.soff = 1;
        add_copy(l, &p);
    }
    // 5. Broadcast reads (src stride 0): one row to all rows, one value per row,
    //    one head to all heads.
    for (int i = 0; i < 3; i++) {
        copy_p p = mk(fl[i], fl[(i + 1) % 3], 2, s2, "broadcast_rows");
        p.ss[0] = 0;
        add_copy(l, &p);
        p = mk(fl[i], fl[i], 2, s2, "broadcast_cols");
        p.ss[1] = 0, p.ss[0] = 1;
        add_copy(l, &p);
        p = mk(fl[i], fl[(i + 2) % 3], 4, s4, "broadcast_heads");
        p.ss[1] = 0, p.ss[0] = 5 * 64;
        add_copy(l, &p);
    }
    // 6. KV-cache writes: a (T, KVH, D) slice of a fused QKV output (row stride
    //    (H + 2 KVH) D, at the k or v offset) into a (max_seq, KVH, D) cache at
    //    position pos0, or into a head-major (KVH, max_seq, D) cache.
    static const int64_t kv[][5] = {{1, 8, 128, 32, 100}, {7, 4, 64, 12, 249}, {64, 8, 128, 32, 0},
                                    {5, 1, 80, 7, 3},     {33, 2, 96, 6, 200}};
    static const mf_dtype kvt[][2] = {{MF_DTYPE_BF16, MF_DTYPE_BF16}, {MF_DTYPE_F32, MF_DTYPE_BF16},
                                      {MF_DTYPE_F16, MF_DTYPE_F16},   {MF_DTYPE_F32, MF_DTYPE_F16},
                                      {MF_DTYPE_BF16, MF_DTYPE_F32}};
    const int64_t max_seq = 256;
    for (int c = 0; c < 5; c++)
        for (int hm = 0; hm < 2; hm++) {
            const int64_t T = kv[c][0], KVH = kv[c][1], D = kv[c][2], H = kv[c][3], pos0 = kv[c][4];
            const int64_t sh[3] = {T, KVH, D}, W = H + 2 * KVH;
            copy_p p = mk(kvt[c][0], kvt[c][1], 3, sh, hm ? "kv_cache_head_major" : "kv_cache");
            p.ss[0] = W * D, p.ss[1] = D, p.ss[2] = 1;
            p.soff = (H + (hm ? KVH : 0)) * D; // k's slice; v's for the head-major one
            if (hm) {
                p.ds[0] = D, p.ds[1] = max_seq * D, p.ds[2] = 1;
                p.doff = pos0 * D;
            } else {
                p.ds[0] = KVH * D, p.ds[1] = D, p.ds[2] = 1;
                p.doff = pos0 * KVH * D;
            }
            p.dn = max_seq * KVH * D;
            add_copy(l, &p);
        }
    // 7. Padded rows, unaligned starts, 1-D strides, two halves of one buffer.
    for (int i = 0; i < 3; i++) {
        copy_p p = mk(fl[i], fl[(i + 1) % 3], 2, s2, "padded");
        p.ss[0] = 1003, p.ds[0] = 1005;
        add_copy(l, &p);
        p = mk(fl[i], fl[i], 2, s2, "unaligned");
        p.soff = 1, p.doff = 3;
        add_copy(l, &p);
        p = mk(fl[i], fl[(i + 2) % 3], 2, (const int64_t[]){64, 1024}, "unaligned");
        p.soff = 8, p.doff = 1;
        add_copy(l, &p);
        p = mk(fl[i], fl[(i + 1) % 3], 1, (const int64_t[]){1001}, "strided_1d");
        p.ss[0] = 3, p.ds[0] = 2;
        add_copy(l, &p);
        p = mk(fl[i], fl[i], 2, (const int64_t[]){37, 520}, "halves_of_one_buffer");
        p.ss[0] = p.ds[0] = 1040, p.doff = 520, p.same_buf = true;
        add_copy(l, &p);
    }
    copy_p none = {0};
    th_add(l, run_validation, &none, sizeof none, "copy(validation)");
    th_add(l, run_int64, &none, sizeof none,
           "copy(int64,src=f32,dst=bf16,shape=2097153x2048,src_strides=0x1,dst_strides=2048x1)");
}
