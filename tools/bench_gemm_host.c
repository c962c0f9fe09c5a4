// `minfer bench gemm-host`: host time per mf_gemm call, the cost the GPU
// cannot hide in decode (tens of small GEMMs per token). On CUDA each shape
// is timed twice in one run: with the cuBLASLt plan cache off (descriptors
// and the heuristic on every call, as before the cache) and on. Calls are
// queued in bursts of kBurst between syncs and only the queuing is timed, so
// the GPU's own time (and a full launch queue) stays out of the figure.
// On the CPU backend a call is the whole GEMM: the figure is its wall time.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#ifdef MF_HAVE_CUDA
#include "cuda/cuda_query.h"
#endif

enum { kBurst = 32 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// GPT-2 small's decode GEMMs (x (m, 768) @ W^T, W a Linear weight (n, k)).
typedef struct {
    const char *name;
    int64_t n, k;
    bool bias, gelu;
} shape;
static const shape kShapes[] = {
    {"qkv", 2304, 768, true, false},
    {"attn_out", 768, 768, true, false},
    {"mlp_up", 3072, 768, true, true},
    {"mlp_down", 768, 3072, true, false},
    {"lm_head", 50257, 768, false, false},
};

// Median over `reps` bursts of host microseconds per call.
static mf_status time_calls(mf_backend *be, const mf_gemm_args *a, int reps, double *us) {
    double *s = malloc((size_t)reps * sizeof *s);
    if (!s) return MF_ERR_OOM;
    mf_status st = MF_OK;
    for (int r = 0; r < reps && st == MF_OK; r++) {
        const double t0 = mf_cli_now();
        for (int i = 0; i < kBurst && st == MF_OK; i++) st = mf_gemm(be, a);
        s[r] = 1e6 * (mf_cli_now() - t0) / kBurst;
        if (st == MF_OK) st = mf_backend_sync(be);
    }
    if (st == MF_OK) {
        qsort(s, (size_t)reps, sizeof *s, cmp_double);
        *us = s[reps / 2];
    }
    free(s);
    return st;
}

static void gh_help(FILE *f) {
    fprintf(f, "usage: minfer bench gemm-host [--backend auto|cpu|cuda] [--m N] [--reps N] [--csv FILE]\n"
               "  host microseconds per mf_gemm call on GPT-2 small's decode shapes (bf16 on CUDA, f32 on the\n"
               "  CPU), m rows (default 1); CUDA: plan cache off vs on. --reps bursts of %d calls (default 50).\n",
            kBurst);
}

static int gh_run(void *opts) {
    const mf_bench_gemm_host_opts *o = opts;
    const int64_t m = o->m;
    const int reps = o->reps;
    mf_backend *be = NULL;
    if (mf_backend_init(o->com.backend, &be) != MF_OK) {
        fprintf(stderr, "minfer bench gemm-host: %s\n", mf_last_error());
        return 1;
    }
    const bool cuda = mf_backend_device(be) == MF_DEVICE_CUDA;
    const mf_dtype dt = cuda ? MF_DTYPE_BF16 : MF_DTYPE_F32;
    static const char *const cols[] = {"backend", "gemm", "m", "n", "k", "dtype", "epilogue", "path",
                                       "host_us_uncached", "host_us_cached", "ratio"};
    mf_bench_table *tab = mf_bench_table_new(11, cols);
    int rc = tab ? 0 : 1;
    for (size_t s = 0; s < sizeof kShapes / sizeof kShapes[0] && rc == 0; s++) {
        const shape *sh = &kShapes[s];
        const size_t es = mf_dtype_size(dt);
        void *x = NULL, *w = NULL, *c = NULL, *bias = NULL;
        const size_t xb = (size_t)(m * sh->k) * es, wb = (size_t)(sh->n * sh->k) * es, cb = (size_t)(m * sh->n) * es;
        mf_status st = mf_backend_alloc(be, xb, &x);
        if (st == MF_OK) st = mf_backend_alloc(be, wb, &w);
        if (st == MF_OK) st = mf_backend_alloc(be, cb, &c);
        if (st == MF_OK) st = mf_backend_alloc(be, (size_t)sh->n * es, &bias);
        // Small values (not zeros: no special-cased data); the figure is host time.
        if (st == MF_OK) st = mf_backend_memset(be, x, 0x3c, xb);
        if (st == MF_OK) st = mf_backend_memset(be, w, 0x3c, wb);
        if (st == MF_OK) st = mf_backend_memset(be, bias, 0x3c, (size_t)sh->n * es);
        mf_gemm_args a = {.alpha = 1.0f, .beta = 0.0f, .epilogue = sh->gelu ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE};
        mf_tensor tb;
        const int64_t xs[2] = {m, sh->k}, ws[2] = {sh->n, sh->k}, cs[2] = {m, sh->n};
        const mf_device dev = mf_backend_device(be);
        mf_tensor_make(&a.a, x, dt, dev, 2, xs);
        mf_tensor_make(&a.b, w, dt, dev, 2, ws);
        mf_tensor_transpose(&a.b, 0, 1); // (k, n) view of the (n, k) weight
        mf_tensor_make(&a.c, c, dt, dev, 2, cs);
        mf_tensor_make(&tb, bias, dt, dev, 1, &sh->n);
        if (sh->bias) a.bias = &tb;
        double un = -1, ca = -1;
        const char *path = "cpu";
        if (st == MF_OK) st = mf_gemm(be, &a); // warm-up (plans, scratch)
        if (st == MF_OK) st = mf_backend_sync(be);
#ifdef MF_HAVE_CUDA
        if (cuda && st == MF_OK) {
            path = mf_cuda_gemm_last_path(be);
            mf_cuda_gemm_cache_enable(be, false);
            st = time_calls(be, &a, reps, &un);
            mf_cuda_gemm_cache_enable(be, true);
        }
#endif
        if (st == MF_OK) st = time_calls(be, &a, reps, &ca);
        if (st != MF_OK) {
            fprintf(stderr, "minfer bench gemm-host: %s: %s\n", sh->name, mf_last_error());
            rc = 1;
        } else {
            char cm[24], cn[24], ck[24], cu[32], cc[32], cr[32];
            snprintf(cm, sizeof cm, "%lld", (long long)m);
            snprintf(cn, sizeof cn, "%lld", (long long)sh->n);
            snprintf(ck, sizeof ck, "%lld", (long long)sh->k);
            snprintf(cu, sizeof cu, un >= 0 ? "%.2f" : "NA", un);
            snprintf(cc, sizeof cc, "%.2f", ca);
            snprintf(cr, sizeof cr, un >= 0 ? "%.2f" : "NA", un / ca);
            const char *cells[11] = {mf_backend_name(be), sh->name, cm, cn, ck, mf_dtype_name(dt),
                                     sh->gelu ? "bias+gelu" : sh->bias ? "bias" : "none", path, cu, cc, cr};
            if (!mf_bench_table_add(tab, cells)) rc = 1;
        }
        mf_backend_dealloc(be, x);
        mf_backend_dealloc(be, w);
        mf_backend_dealloc(be, c);
        mf_backend_dealloc(be, bias);
    }
    if (tab) {
        printf("# host us per mf_gemm call (median of %d bursts of %d queued calls)%s\n", reps, kBurst,
               cuda ? "; uncached = plan cache off (descriptors + heuristic per call)" : "; CPU: the whole GEMM");
        mf_bench_table_print(tab, MF_BENCH_TABLE, stdout);
#ifdef MF_HAVE_CUDA
        if (cuda) {
            mf_cuda_gemm_cache_stats cs;
            mf_cuda_gemm_cache_stats_of(be, &cs);
            printf("# plan cache: %llu hits, %llu misses, %llu evictions, %d/%d entries\n",
                   (unsigned long long)cs.hits, (unsigned long long)cs.misses, (unsigned long long)cs.evictions,
                   cs.entries, cs.capacity);
        }
#endif
        if (mf_bench_table_write_files(tab, o->com.csv, NULL, "minfer bench gemm-host")) rc = 1;
    }
    mf_bench_table_free(tab);
    mf_backend_free(be);
    return rc;
}

static mf_args_result gh_option(void *opts, const char *a, const char *v, char *err) {
    mf_bench_gemm_host_opts *o = opts;
    if (!strcmp(a, "--m")) return mf_args_int(a, v, 1, 4096, &o->m, err);
    return mf_args_int32(a, v, 1, 100000, &o->reps, err); // --reps
}

const mf_bench_def mf_bench_gemm_host = {
    .name = "gemm-host", .opts_size = sizeof(mf_bench_gemm_host_opts),
    .about = "host microseconds per GEMM call (CUDA: plan cache off vs on)",
    .common = MF_BENCH_OPT_BACKEND | MF_BENCH_OPT_CSV,
    .defaults = &(const mf_bench_gemm_host_opts){.m = 1, .reps = 50},
    .valued = (const char *const[]){"--m", "--reps", NULL},
    .option = gh_option, .help = gh_help, .run = gh_run,
};
