// `minfer bench softmax`: the fused scale + mask + softmax against the
// unfused chain (scale, masked_fill, softmax: three passes), on the attention
// grid q_len = k_len x batch x heads and on a row-length sweep at fixed total
// bytes. Per case: p5/p50/p95 microseconds, GB/s of the bytes the op needs
// (x read once, y written once), that as a share of the device-to-device copy
// bandwidth measured in the same run, the bytes each variant really moves
// (a causal row reads only its visible prefix; the unfused chain moves six
// tensors plus its mask), and the speedup.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/error.h"
#include "cuda/cuda_query.h"
#ifdef MF_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "../bench/softmax_unfused.h"
#endif

typedef struct {
    const char *kind; // "grid" | "sweep"
    int64_t batch, heads, q_len, k_len;
    bool causal;
} sm_case;

typedef mf_bench_softmax_opts sm_opts; // parsed by mf_bench_parse with the options below

// State of one case for the timed closures.
typedef struct {
    mf_backend *be;
    mf_bench_timer *timer;
    mf_softmax_args fused;          // x -> y
    void *x, *y, *tmp;              // (rows, cols) contiguous
    uint8_t *mask;                  // (q_len, cols) causal mask for the unfused chain, or NULL
    uint8_t *mask_host;
    mf_dtype dt;
    int64_t rows, q_len, cols;
    float scale;
} sm_state;

static mf_status run_fused(void *arg) {
    sm_state *s = arg;
    return mf_softmax(s->be, &s->fused);
}

// -inf as the 16- or 32-bit pattern of dt.
static void store_neginf(void *p, mf_dtype dt, int64_t i) { mf_store_f32(p, dt, i, -INFINITY); }

static mf_status run_unfused(void *arg) {
    sm_state *s = arg;
    if (mf_backend_device(s->be) == MF_DEVICE_CUDA) {
#ifdef MF_HAVE_CUDA
        int e = mf_bench_softmax_unfused(mf_bench_timer_stream(s->timer), (int)s->dt, s->x, s->tmp, s->y, s->mask,
                                         s->rows, s->q_len, s->cols, s->scale);
        if (e) return mf_fail(MF_ERR_CUDA, "bench: unfused softmax: %s", cudaGetErrorString((cudaError_t)e));
        return MF_OK;
#endif
    }
    // CPU: the same three passes with libminfer's elementwise op and softmax.
    const int64_t shape[2] = {s->rows, s->cols};
    mf_add_args add = {.alpha = s->scale, .beta = 0.0f};
    MF_TRY(mf_tensor_make(&add.a, s->x, s->dt, MF_DEVICE_CPU, 2, shape));
    MF_TRY(mf_tensor_make(&add.y, s->tmp, s->dt, MF_DEVICE_CPU, 2, shape));
    MF_TRY(mf_add(s->be, &add));
    if (s->mask) {
        const int64_t rows = s->rows, cols = s->cols, q = s->q_len;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *m = s->mask + (r % q) * cols;
            for (int64_t j = 0; j < cols; j++)
                if (m[j]) store_neginf(s->tmp, s->dt, r * cols + j);
        }
    }
    mf_softmax_args sm = {.x = add.y, .y = add.y, .scale = 1.0f};
    sm.y.data = s->y;
    return mf_softmax(s->be, &sm);
}

static const char *dt_name(mf_dtype dt) { return mf_dtype_name(dt); }

// Bytes of memory one case needs, by variant.
static double case_mb(const sm_case *c, const sm_opts *o, bool unfused) {
    const double n = (double)c->batch * (double)c->heads * (double)c->q_len * (double)c->k_len;
    const double e = (double)mf_dtype_size(o->com.dt);
    double b = 2 * n * e;
    if (unfused) b += n * e + (double)c->q_len * (double)c->k_len;
    return b / 1e6;
}

enum { NCOLS = 19 }; // then the session's: device, commit, date, copy_GB/s, gemm_TFLOP/s
static const char *const col_names[NCOLS] = {
    "case", "batch", "heads", "q_len", "k_len", "mask", "dtype", "kernel", "p5_us", "p50_us", "p95_us",
    "GB/s", "%copy", "MB_req", "MB_moved", "unf_p50_us", "unf_GB/s", "unf_MB_moved", "speedup"};

// Runs one case and appends its row; a case that does not fit the budget is
// reported on stderr and skipped.
static mf_status bench_case(mf_bench_session *b, const sm_opts *o, const sm_case *c, int ci, int nc) {
    mf_backend *be = b->be;
    mf_bench_timer *timer = b->timer;
    const double copy_gbps = b->copy_gbps;
    const bool do_unf = o->unfused && case_mb(c, o, true) <= o->com.max_mb;
    if (case_mb(c, o, false) > o->com.max_mb) {
        fprintf(stderr, "bench softmax: skipping %s %lldx%lldx%lldx%lld: needs %.0f MB (budget %.0f MB)\n", c->kind,
                (long long)c->batch, (long long)c->heads, (long long)c->q_len, (long long)c->k_len,
                case_mb(c, o, false), o->com.max_mb);
        return MF_OK;
    }
    sm_state s = {.be = be, .timer = timer, .dt = o->com.dt, .q_len = c->q_len, .cols = c->k_len, .scale = o->scale};
    s.rows = c->batch * c->heads * c->q_len;
    const int64_t n = s.rows * s.cols;
    const size_t bytes = (size_t)n * mf_dtype_size(o->com.dt);
    double *samples = calloc((size_t)o->com.iters, sizeof *samples);
    mf_status st = samples ? MF_OK : mf_fail(MF_ERR_OOM, "bench: out of host memory");
    if (st == MF_OK) st = mf_backend_alloc(be, bytes, &s.x);
    if (st == MF_OK) st = mf_backend_alloc(be, bytes, &s.y);
    if (st == MF_OK) st = mf_bench_upload_random(be, s.x, o->com.dt, n, -8.0f, 8.0f, (uint64_t)n ^ (uint64_t)c->k_len);
    const int64_t shape[4] = {c->batch, c->heads, c->q_len, c->k_len};
    if (st == MF_OK) st = mf_tensor_make(&s.fused.x, s.x, o->com.dt, mf_backend_device(be), 4, shape);
    if (st == MF_OK) st = mf_tensor_make(&s.fused.y, s.y, o->com.dt, mf_backend_device(be), 4, shape);
    s.fused.scale = o->scale;
    s.fused.causal = c->causal;
    mf_bench_stats fs = {0}, us = {0};
    const char *kernel = "cpu";
#ifdef MF_HAVE_CUDA
    if (st == MF_OK && mf_backend_device(be) == MF_DEVICE_CUDA) {
        kernel = mf_cuda_softmax_variant(be, &s.fused);
        if (!kernel) kernel = "unsupported";
    }
#endif
    if (st == MF_OK && o->fused) {
        st = mf_bench_sample(timer, run_fused, &s, o->com.warmup, o->com.iters, samples);
        fs = mf_bench_stats_of(samples, o->com.iters);
    }
    if (st == MF_OK && do_unf) {
        st = mf_backend_alloc(be, bytes, &s.tmp);
        if (st == MF_OK && c->causal) {
            const size_t mb = (size_t)(c->q_len * c->k_len);
            s.mask_host = malloc(mb);
            if (!s.mask_host) st = mf_fail(MF_ERR_OOM, "bench: out of host memory");
            for (int64_t i = 0; st == MF_OK && i < c->q_len; i++)
                for (int64_t j = 0; j < c->k_len; j++)
                    s.mask_host[i * c->k_len + j] = j > i + c->k_len - c->q_len; // masked
            if (st == MF_OK) st = mf_backend_alloc(be, mb, (void **)&s.mask);
            if (st == MF_OK) st = mf_backend_copy(be, s.mask, s.mask_host, mb, MF_COPY_H2D);
        }
        if (st == MF_OK) st = mf_bench_sample(timer, run_unfused, &s, o->com.warmup, o->com.iters, samples);
        if (st == MF_OK) us = mf_bench_stats_of(samples, o->com.iters);
    }
    if (st == MF_OK) {
        // Bytes the op needs: x read once, y written once (index-computed masks cost nothing).
        const double e = (double)mf_dtype_size(o->com.dt), bh = (double)(c->batch * c->heads);
        const double req = 2.0 * (double)n * e;
        double visible = (double)n; // keys a row sees: the fused kernel reads only these
        if (c->causal) {
            visible = 0;
            for (int64_t i = 0; i < c->q_len; i++) {
                int64_t l = i + c->k_len - c->q_len + 1;
                visible += (double)(l < 0 ? 0 : l > c->k_len ? c->k_len : l);
            }
            visible *= bh;
        }
        const double moved = visible * e + (double)n * e;
        // Unfused: scale (read x, write tmp), mask (read + write tmp, read the mask), softmax (read
        // tmp once on CUDA up to 8192 columns, else three times; twice on the CPU, write y).
        const bool cuda = mf_backend_device(be) == MF_DEVICE_CUDA;
        const double passes = (c->causal ? 5.0 : 3.0) + (cuda ? (c->k_len <= 8192 ? 1.0 : 3.0) : 2.0);
        const double unf_moved = passes * (double)n * e + (c->causal ? (double)(c->q_len * c->k_len) : 0.0);
        char cells[NCOLS][192];
        snprintf(cells[0], 192, "%s", c->kind);
        snprintf(cells[1], 192, "%lld", (long long)c->batch);
        snprintf(cells[2], 192, "%lld", (long long)c->heads);
        snprintf(cells[3], 192, "%lld", (long long)c->q_len);
        snprintf(cells[4], 192, "%lld", (long long)c->k_len);
        snprintf(cells[5], 192, "%s", c->causal ? "causal" : "none");
        snprintf(cells[6], 192, "%s", dt_name(o->com.dt));
        snprintf(cells[7], 192, "%s", kernel);
        const double nan = NAN;
        const double f50 = o->fused ? fs.p50 : nan, u50 = do_unf ? us.p50 : nan;
        mf_bench_fmt(cells[8], 192, o->fused ? fs.p5 : nan, 1);
        mf_bench_fmt(cells[9], 192, f50, 1);
        mf_bench_fmt(cells[10], 192, o->fused ? fs.p95 : nan, 1);
        mf_bench_fmt(cells[11], 192, req / (f50 * 1e3), 1);
        mf_bench_fmt(cells[12], 192, 100.0 * req / (f50 * 1e3) / copy_gbps, 1);
        mf_bench_fmt(cells[13], 192, req / 1e6, 1);
        mf_bench_fmt(cells[14], 192, moved / 1e6, 1);
        mf_bench_fmt(cells[15], 192, u50, 1);
        mf_bench_fmt(cells[16], 192, req / (u50 * 1e3), 1);
        mf_bench_fmt(cells[17], 192, do_unf ? unf_moved / 1e6 : nan, 1);
        mf_bench_fmt(cells[18], 192, u50 / f50, 2);
        const char *row[NCOLS];
        for (int i = 0; i < NCOLS; i++) row[i] = cells[i];
        if (!mf_bench_add_row(b, row)) st = mf_fail(MF_ERR_OOM, "bench: out of host memory");
        mf_bench_progress(b, ci, nc, "%s %lldx%lldx%lldx%lld %s: %s us (unfused %s us)", c->kind, (long long)c->batch,
                          (long long)c->heads, (long long)c->q_len, (long long)c->k_len, kernel, cells[9],
                          cells[15]);
    }
    mf_backend_dealloc(be, s.x);
    mf_backend_dealloc(be, s.y);
    mf_backend_dealloc(be, s.tmp);
    mf_backend_dealloc(be, s.mask);
    free(s.mask_host);
    free(samples);
    return st;
}

static void sm_help(FILE *f) {
    const mf_bench_def *d = &mf_bench_softmax;
    fprintf(f,
            "usage: minfer bench softmax [options]\n"
            "  --backend auto|cpu|cuda   (default auto)\n"
            "  --dtype bf16|f16|f32      x and y dtype (default bf16)\n"
            "  --variant fused|unfused|both   (default both)\n"
            "  --cases grid|sweep|all    attention grid, row-length sweep, or both (default all)\n"
            "  --full                    the whole grid (default: a representative subset)\n"
            "  --batch L --heads L --seq L   comma-separated lists: the grid cases are their product\n"
            "                            (q_len = k_len = seq; defaults batch 1, heads 12, seq 128,512,1024,2048\n"
            "                            [+4096,8192 on CUDA]); with any of them the sweep runs only when --cases asks\n"
            "  --mask causal|none        mask of the grid cases (default causal; the sweep has none)\n"
            "  --scale S                 (default 0.125)\n"
            "  --warmup N --iters N      (default %d/%d on CUDA, %d/%d on the CPU)\n"
            "  --max-mb N                memory budget per case (default: 85%% of free device memory; CPU 1024)\n"
            "  --format table|csv|json   stdout format (default table: markdown)\n"
            "  --csv FILE --json FILE    also write the results there\n",
            d->warmup[1], d->iters[1], d->warmup[0], d->iters[0]);
}

// Builds the case list: the grid (the listed shapes; else the subset or the
// full grid) and the sweep.
static int make_cases(const sm_opts *o, bool cuda, sm_case *cases, int cap) {
    int n = 0;
    static const int64_t ks[6] = {128, 512, 1024, 2048, 4096, 8192};
    static const int64_t bs[4] = {1, 4, 16, 32}, hs[3] = {12, 16, 32};
    if (o->grid && (o->batch.n || o->heads.n || o->seq.n)) {
        const mf_arg_list one = {.v = {1}, .n = 1}, twelve = {.v = {12}, .n = 1};
        mf_arg_list seqs = {.n = cuda ? 6 : 4};
        for (int i = 0; i < seqs.n; i++) seqs.v[i] = ks[i];
        const mf_arg_list *B = o->batch.n ? &o->batch : &one, *H = o->heads.n ? &o->heads : &twelve,
                          *S = o->seq.n ? &o->seq : &seqs;
        for (int si = 0; si < S->n; si++)
            for (int bi = 0; bi < B->n; bi++)
                for (int hi = 0; hi < H->n && n < cap; hi++)
                    cases[n++] = (sm_case){"grid", B->v[bi], H->v[hi], S->v[si], S->v[si], o->causal};
    } else if (o->grid) {
        for (int ki = 0; ki < 6; ki++) {
            if (!cuda && !o->com.full && ks[ki] > 2048) continue;
            for (int bi = 0; bi < 4; bi++)
                for (int hi = 0; hi < 3; hi++) {
                    bool pick = o->com.full;
                    if (!pick && cuda) // subset: small, medium and large batch*heads
                        pick = (bi == 0 && hi == 2) || (bi == 1 && hi == 1) || (bi == 2 && hi == 0);
                    if (!pick && !cuda) pick = bi == 0 && hi == 0;
                    if (pick && n < cap)
                        cases[n++] = (sm_case){"grid", bs[bi], hs[hi], ks[ki], ks[ki], o->causal};
                }
        }
    }
    if (o->sweep) {
        const int64_t total = cuda ? ((int64_t)1 << 27) : ((int64_t)1 << 22); // elements: 256 MB / 8 MB of bf16
        for (int64_t k = 128; k <= 131072; k *= 2)
            if (n < cap) cases[n++] = (sm_case){"sweep", 1, 1, total / k, k, false};
    }
    return n;
}

static int sm_run(void *opts) {
    sm_opts *o = opts;
    mf_bench_session b;
    if (mf_bench_begin(&b, &mf_bench_softmax, &o->com, (size_t)64 << 20, false, NCOLS, col_names)) return 1;
    enum { CAP = MF_ARGS_MAX_LIST * MF_ARGS_MAX_LIST * MF_ARGS_MAX_LIST + 16 };
    sm_case *cases = calloc(CAP, sizeof *cases);
    const int n = cases ? make_cases(o, b.cuda, cases, CAP) : 0;
    mf_status st = cases ? MF_OK : mf_fail(MF_ERR_OOM, "bench: out of host memory");
    for (int i = 0; i < n && st == MF_OK; i++) st = bench_case(&b, o, &cases[i], i + 1, n);
    free(cases);
    return mf_bench_end(&b, st, &o->com, "GB/s counts x read once + y written once");
}

// ---- options ---------------------------------------------------------------------------------

static mf_args_result sm_option(void *opts, const char *a, const char *v, char *err) {
    sm_opts *o = opts;
    if (!strcmp(a, "--scale")) return mf_args_float(a, v, -INFINITY, INFINITY, &o->scale, err);
    if (!strcmp(a, "--variant")) return mf_args_either(a, v, "fused", "unfused", "both", &o->fused, &o->unfused, err);
    if (!strcmp(a, "--cases")) {
        o->cases_given = true;
        return mf_args_either(a, v, "grid", "sweep", "all", &o->grid, &o->sweep, err);
    }
    if (strcmp(v, "causal") && strcmp(v, "none")) return mf_args_bad(err, "--mask %.80s: not causal or none", v);
    o->causal = !strcmp(v, "causal");
    return MF_ARGS_OK;
}

static mf_args_result sm_check(void *opts, char *err) {
    sm_opts *o = opts;
    const bool listed = o->batch.n || o->heads.n || o->seq.n;
    if (listed && !o->cases_given) o->sweep = false; // the listed shapes are what was asked for
    if (listed && !o->grid)
        return mf_args_bad(err, "--cases sweep with --batch/--heads/--seq: the lists shape the grid cases");
    return MF_ARGS_OK;
}

const mf_bench_def mf_bench_softmax = {
    .name = "softmax", .opts_size = sizeof(sm_opts),
    .about = "fused scale + mask + softmax vs the unfused chain: us, GB/s, % of copy bandwidth",
    .common = MF_BENCH_OPT_SESSION | MF_BENCH_OPT_DTYPE | MF_BENCH_OPT_FULL | MF_BENCH_OPT_MAX_MB,
    .defaults = &(const sm_opts){.fused = true, .unfused = true, .grid = true, .sweep = true, .causal = true,
                                 .scale = 0.125f},
    .lists = (const mf_bench_list_opt[]){{"--batch", 1, INT32_MAX, offsetof(sm_opts, batch)},
                                         {"--heads", 1, INT32_MAX, offsetof(sm_opts, heads)},
                                         {"--seq", 1, INT32_MAX, offsetof(sm_opts, seq)},
                                         {NULL, 0, 0, 0}},
    .valued = (const char *const[]){"--scale", "--variant", "--cases", "--mask", NULL},
    .option = sm_option, .check = sm_check, .help = sm_help, .run = sm_run,
    .warmup = {1, 10}, .iters = {5, 50}, .max_mb = {1024, 300},
};
