// The op test harness: guarded buffers, random fills, checks. See harness.h.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

// ---- random numbers ---------------------------------------------------------------

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void th_rng_seed(th_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t th_rng_u64(th_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double th_rng_unif(th_rng *r, double lo, double hi) {
    return lo + (hi - lo) * ((double)(th_rng_u64(r) >> 11) * 0x1.0p-53);
}

int64_t th_rng_int(th_rng *r, int64_t n) { return n <= 1 ? 0 : (int64_t)(th_rng_u64(r) % (uint64_t)n); }

// ---- dtypes ----------------------------------------------------------------------

double th_eps(mf_dtype dt) {
    switch (dt) {
    case MF_DTYPE_F16: return 0x1.0p-11;
    case MF_DTYPE_BF16: return 0x1.0p-8;
    default: return 0x1.0p-24;
    }
}

double th_tiny(mf_dtype dt) {
    // Half the smallest subnormal, plus room for a GPU flushing f32 subnormals to zero.
    return dt == MF_DTYPE_F16 ? 0x1.0p-25 : 0x1.0p-126;
}

double th_round(mf_dtype dt, double v) {
    char tmp[4];
    mf_store_f32(tmp, dt, 0, (float)v);
    return mf_load_f32(tmp, dt, 0);
}

// ---- messages --------------------------------------------------------------------

th_result th_fail(th_ctx *ctx, const char *fmt, ...) {
    size_t len = strlen(ctx->msg);
    if (len + 4 < sizeof ctx->msg) {
        if (len) {
            strcpy(ctx->msg + len, "; ");
            len += 2;
        }
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->msg + len, sizeof ctx->msg - len, fmt, ap);
        va_end(ap);
    }
    return TH_FAIL;
}

void th_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test harness: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

void *th_scratch(th_ctx *ctx, size_t bytes) {
    if (ctx->nscratch == TH_MAX_BUFS) th_fatal("%s: more than %d scratch blocks", ctx->case_name, TH_MAX_BUFS);
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) th_fatal("out of host memory (%zu bytes)", bytes);
    ctx->scratch[ctx->nscratch++] = p;
    return p;
}

// ---- buffers ---------------------------------------------------------------------

th_buf *th_buf_new(th_ctx *ctx, mf_dtype dt, int64_t n) {
    if (ctx->nbufs == TH_MAX_BUFS) th_fatal("%s: more than %d buffers", ctx->case_name, TH_MAX_BUFS);
    if (n < 0) th_fatal("%s: buffer of %lld elements", ctx->case_name, (long long)n);
    th_buf *b = calloc(1, sizeof *b);
    if (!b) th_fatal("out of host memory");
    b->dtype = dt;
    b->n = n;
    b->bytes = (size_t)n * mf_dtype_size(dt);
    size_t total = b->bytes + 2 * TH_GUARD;
    b->host_base = malloc(total);
    b->init = malloc(b->bytes ? b->bytes : 1);
    if (!b->host_base || !b->init) th_fatal("out of host memory (%zu bytes)", total);
    memset(b->host_base, TH_GUARD_BYTE, total);
    b->host = b->host_base + TH_GUARD;
    memset(b->host, 0xff, b->bytes); // NaN in f32, f16 and bf16; -1 in i32
    mf_status st = mf_backend_alloc(ctx->be, total, &b->dev_base);
    if (st != MF_OK) th_fatal("mf_backend_alloc(%zu): %s: %s", total, mf_status_str(st), mf_last_error());
    b->dev = (char *)b->dev_base + TH_GUARD;
    ctx->bufs[ctx->nbufs++] = b;
    return b;
}

mf_tensor th_view(th_ctx *ctx, const th_buf *b, int32_t ndim, const int64_t *shape, const int64_t *stride) {
    mf_tensor t;
    mf_status st = mf_tensor_make(&t, b->dev, b->dtype, mf_backend_device(ctx->be), ndim, shape);
    if (st != MF_OK) th_fatal("%s: mf_tensor_make: %s", ctx->case_name, mf_last_error());
    if (stride)
        for (int i = 0; i < ndim; i++) t.stride[i] = stride[i];
    if (mf_tensor_numel(&t) > 0) {
        int64_t last = 0;
        for (int i = 0; i < ndim; i++) last += (t.shape[i] - 1) * t.stride[i];
        if (last >= b->n)
            th_fatal("%s: view reaches element %lld of a %lld-element buffer", ctx->case_name, (long long)last,
                     (long long)b->n);
    }
    return t;
}

th_buf *th_tensor(th_ctx *ctx, mf_dtype dt, int32_t ndim, const int64_t *shape, const int64_t *stride,
                  mf_tensor *view) {
    int64_t n = 1;
    if (stride) {
        bool empty = false;
        for (int i = 0; i < ndim; i++) {
            n += (shape[i] - 1) * stride[i];
            empty |= shape[i] == 0;
        }
        if (empty) n = 0;
    } else {
        for (int i = 0; i < ndim; i++) n *= shape[i];
    }
    th_buf *b = th_buf_new(ctx, dt, n);
    *view = th_view(ctx, b, ndim, shape, stride);
    return b;
}

int64_t th_lin_off(const mf_tensor *t, int64_t lin) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t s = t->shape[d];
        off += (lin % s) * t->stride[d];
        lin /= s;
    }
    return off;
}

// Walks a view's elements in logical row-major order: off is the element offset.
typedef struct {
    int64_t idx[MF_MAX_DIMS];
    int64_t off;
} view_iter;

static inline void iter_next(view_iter *it, const mf_tensor *t) {
    for (int d = t->ndim - 1; d >= 0; d--) {
        it->off += t->stride[d];
        if (++it->idx[d] < t->shape[d]) return;
        it->off -= t->stride[d] * t->shape[d];
        it->idx[d] = 0;
    }
}

double th_get(const th_buf *b, int64_t off) {
    if (b->dtype == MF_DTYPE_I32) return ((const int32_t *)b->host)[off];
    return mf_load_f32(b->host, b->dtype, off);
}

void th_set(th_buf *b, int64_t off, double v) {
    if (b->dtype == MF_DTYPE_I32)
        ((int32_t *)b->host)[off] = (int32_t)v;
    else
        mf_store_f32(b->host, b->dtype, off, (float)v);
    b->uploaded = false;
}

th_fill_opts th_fill_defaults(mf_dtype dt) {
    th_fill_opts o = {.lo = -1.0, .hi = 1.0, .outlier = dt == MF_DTYPE_F16 ? 1e2 : 1e4, .outlier_every = 64,
                      .neginf_every = 0};
    return o;
}

void th_fill(th_ctx *ctx, th_buf *b, const mf_tensor *t, const th_fill_opts *opts) {
    th_fill_opts o = opts ? *opts : th_fill_defaults(b->dtype);
    int64_t n = mf_tensor_numel(t);
    view_iter it = {{0}, 0};
    for (int64_t i = 0; i < n; i++, iter_next(&it, t)) {
        double v = th_rng_unif(&ctx->rng, o.lo, o.hi);
        if (o.outlier != 0 && o.outlier_every > 0 && th_rng_int(&ctx->rng, o.outlier_every) == 0) v *= o.outlier;
        th_set(b, it.off, v);
    }
    if (o.outlier != 0 && n >= 8) { // at least one, at a random place
        int64_t i = th_rng_int(&ctx->rng, n);
        double v = th_rng_unif(&ctx->rng, 0.5, 1.0) * o.outlier;
        th_set(b, th_lin_off(t, i), th_rng_int(&ctx->rng, 2) ? v : -v);
    }
    if (o.neginf_every > 0) {
        int64_t cols = t->shape[t->ndim - 1], rows = cols ? n / cols : 0;
        for (int64_t r = 0; r < rows; r++) {
            if (th_rng_int(&ctx->rng, o.neginf_every) != 0) continue;
            int64_t len = th_rng_int(&ctx->rng, 4) == 0 ? cols : 1 + th_rng_int(&ctx->rng, cols);
            int64_t start = th_rng_int(&ctx->rng, cols - len + 1);
            for (int64_t c = start; c < start + len; c++) th_set(b, th_lin_off(t, r * cols + c), -INFINITY);
        }
    }
}

void th_upload_all(th_ctx *ctx) {
    for (int i = 0; i < ctx->nbufs; i++) {
        th_buf *b = ctx->bufs[i];
        if (b->uploaded) continue;
        memcpy(b->init, b->host, b->bytes);
        mf_status st = mf_backend_copy(ctx->be, b->dev_base, b->host_base, b->bytes + 2 * TH_GUARD, MF_COPY_H2D);
        if (st != MF_OK) th_fatal("%s: upload: %s: %s", ctx->case_name, mf_status_str(st), mf_last_error());
        b->uploaded = true;
    }
}

static void download(th_ctx *ctx, th_buf *b) {
    mf_status st = mf_backend_copy(ctx->be, b->host_base, b->dev_base, b->bytes + 2 * TH_GUARD, MF_COPY_D2H);
    if (st != MF_OK) th_fatal("%s: download: %s: %s", ctx->case_name, mf_status_str(st), mf_last_error());
}

th_result th_status(th_ctx *ctx, mf_status st, const char *call) {
    if (st == MF_OK) {
        st = mf_backend_sync(ctx->be);
        call = "mf_backend_sync";
    }
    if (st == MF_OK) return TH_PASS;
    if (st == MF_ERR_UNSUPPORTED && mf_backend_device(ctx->be) != MF_DEVICE_CPU) {
        snprintf(ctx->msg, sizeof ctx->msg, "unsupported: %s", mf_last_error());
        return TH_SKIP;
    }
    return th_fail(ctx, "%s returned %s: %s", call, mf_status_str(st), mf_last_error());
}

// Guards intact? Reports the first bad byte on each side.
static bool check_guards(th_ctx *ctx, const th_buf *b, const char *what) {
    bool ok = true;
    for (int side = 0; side < 2; side++) {
        const unsigned char *g = (const unsigned char *)(side ? b->host + b->bytes : b->host_base);
        for (int i = 0; i < TH_GUARD; i++) {
            if (g[i] != TH_GUARD_BYTE) {
                th_fail(ctx, "%s: guard byte %d %s the buffer overwritten (0x%02x)", what,
                        side ? i : TH_GUARD - i, side ? "after" : "before", g[i]);
                ok = false;
                break;
            }
        }
    }
    return ok;
}

static void index_str(const mf_tensor *t, int64_t lin, char *out, size_t cap) {
    int64_t idx[MF_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = lin % t->shape[d];
        lin /= t->shape[d];
    }
    size_t len = 0;
    for (int d = 0; d < t->ndim && len < cap; d++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", d ? "," : "", (long long)idx[d]);
}

bool th_expect(th_ctx *ctx, mf_status got, mf_status want, const char *needle, const char *what) {
    if (got == want && (!needle || strstr(mf_last_error(), needle))) return true;
    th_fail(ctx, "%s: got %s '%s', want %s containing '%s'", what, mf_status_str(got), mf_last_error(),
            mf_status_str(want), needle ? needle : "");
    return false;
}

bool th_check(th_ctx *ctx, th_buf *b, const mf_tensor *t, const double *ref, const double *bound,
              const char *what) {
    b->checked = true;
    download(ctx, b);
    bool ok = check_guards(ctx, b, what);
    // Elements outside the view keep what was uploaded.
    size_t es = mf_dtype_size(b->dtype);
    unsigned char *in_view = calloc((size_t)(b->n ? b->n : 1), 1);
    if (!in_view) th_fatal("out of host memory");
    int64_t n = mf_tensor_numel(t);
    view_iter it = {{0}, 0};
    for (int64_t i = 0; i < n; i++, iter_next(&it, t)) in_view[it.off] = 1;
    for (int64_t e = 0; e < b->n; e++) {
        if (!in_view[e] && memcmp(b->host + e * (int64_t)es, b->init + e * (int64_t)es, es) != 0) {
            th_fail(ctx, "%s: element %lld outside the view was overwritten (%g)", what, (long long)e, th_get(b, e));
            ok = false;
            break;
        }
    }
    free(in_view);
    // Values: count the elements out of bound, report the worst.
    int64_t bad = 0, worst_i = -1;
    double worst = 0.0;
    it = (view_iter){{0}, 0};
    for (int64_t i = 0; i < n; i++, iter_next(&it, t)) {
        double got = th_get(b, it.off), r = ref[i], ratio;
        if (isnan(r) || isinf(r)) {
            bool match = isnan(r) ? isnan(got) : got == r;
            ratio = match ? 0.0 : INFINITY;
        } else if (!isfinite(got)) {
            ratio = INFINITY;
        } else {
            double err = fabs(got - r);
            ratio = err == 0.0 ? 0.0 : bound[i] > 0 ? err / bound[i] : INFINITY;
        }
        if (ratio > 1.0) bad++;
        if (ratio > worst || worst_i < 0) worst = ratio, worst_i = i;
    }
    if (worst > ctx->worst) ctx->worst = worst;
    if (bad) {
        char idx[64] = "";
        index_str(t, worst_i, idx, sizeof idx);
        double got = th_get(b, th_lin_off(t, worst_i));
        th_fail(ctx, "%s: %lld of %lld elements out of bound; worst %s[%s] = %.9g, ref %.9g, |err| %.3g > bound %.3g",
                what, (long long)bad, (long long)n, what, idx, got, ref[worst_i], fabs(got - ref[worst_i]),
                bound[worst_i]);
        ok = false;
    }
    return ok;
}

// ---- the case list and the runner (used by test_ops.c) --------------------------

void th_add(th_list *l, th_run_fn run, const void *params, size_t params_size, const char *name_fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->cases = realloc(l->cases, (size_t)l->cap * sizeof *l->cases);
        if (!l->cases) th_fatal("out of host memory");
    }
    th_case *c = &l->cases[l->n++];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(c->name, sizeof c->name, name_fmt, ap);
    va_end(ap);
    c->run = run;
    c->params = malloc(params_size ? params_size : 1);
    if (!c->params) th_fatal("out of host memory");
    memcpy(c->params, params, params_size);
}

void th_list_free(th_list *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->cases[i].params);
    free(l->cases);
    l->cases = NULL;
    l->n = l->cap = 0;
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

th_result th_run_case(const th_case *c, mf_backend *be, uint64_t seed, char *msg, size_t msg_cap, double *worst) {
    th_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.be = be;
    ctx.case_name = c->name;
    th_rng_seed(&ctx.rng, fnv1a(c->name) ^ seed);
    th_result r = c->run(&ctx, c->params);
    // Inputs (buffers never checked as outputs) must come back unchanged.
    if (r == TH_PASS) {
        for (int i = 0; i < ctx.nbufs; i++) {
            th_buf *b = ctx.bufs[i];
            if (b->checked || !b->uploaded) continue;
            download(&ctx, b);
            char what[32];
            snprintf(what, sizeof what, "input buffer %d", i);
            if (!check_guards(&ctx, b, what)) r = TH_FAIL;
            if (memcmp(b->host, b->init, b->bytes) != 0) r = th_fail(&ctx, "%s was modified", what);
        }
    }
    for (int i = 0; i < ctx.nbufs; i++) {
        th_buf *b = ctx.bufs[i];
        mf_backend_dealloc(be, b->dev_base);
        free(b->host_base);
        free(b->init);
        free(b);
    }
    for (int i = 0; i < ctx.nscratch; i++) free(ctx.scratch[i]);
    snprintf(msg, msg_cap, "%s", ctx.msg);
    *worst = ctx.worst;
    return r;
}
