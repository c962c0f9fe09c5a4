// The bench driver (bench.h): `minfer bench [NAME] [options]` finds NAME's
// record (no NAME: softmax), parses the options, and runs it.
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef MF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "bench.h"
#include "cli.h"
#include "core/error.h"

const mf_bench_def *const mf_benches[] = {&mf_bench_softmax, &mf_bench_attention, &mf_bench_moe, &mf_bench_topk,
                                          &mf_bench_gemv, &mf_bench_gemm_host, &mf_bench_model, &mf_bench_serve, NULL};

// A shared option at argv[*i] that the bench takes (bits `take`): *taken says
// whether it was one (its value consumed).
static mf_args_result common_opt(int argc, char **argv, int *i, mf_bench_common_opts *c, unsigned take, bool *taken,
                                 char *err) {
    static const struct {
        const char *flag;
        unsigned bit;
    } all[] = {{"--backend", MF_BENCH_OPT_BACKEND}, {"--csv", MF_BENCH_OPT_CSV},
               {"--json", MF_BENCH_OPT_JSON},       {"--format", MF_BENCH_OPT_FORMAT},
               {"--warmup", MF_BENCH_OPT_ITERS},    {"--iters", MF_BENCH_OPT_ITERS},
               {"--dtype", MF_BENCH_OPT_DTYPE},     {"--full", MF_BENCH_OPT_FULL},
               {"--max-mb", MF_BENCH_OPT_MAX_MB},   {"--no-gemm-ceiling", MF_BENCH_OPT_NO_GEMM}};
    const char *a = argv[*i], *v;
    unsigned bit = 0;
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        if (!strcmp(a, all[k].flag)) bit = all[k].bit;
    *taken = (bit & take) != 0;
    if (!*taken) return MF_ARGS_OK;
    if (bit == MF_BENCH_OPT_FULL || bit == MF_BENCH_OPT_NO_GEMM) {
        *(bit == MF_BENCH_OPT_FULL ? &c->full : &c->no_gemm) = true;
        return MF_ARGS_OK;
    }
    if (mf_args_value(argc, argv, i, &v, err)) return MF_ARGS_BAD;
    switch (bit) {
    case MF_BENCH_OPT_BACKEND:
        if (!mf_args_backend_ok(v)) return mf_args_bad(err, "--backend %.80s: not auto, cpu or cuda", v);
        c->backend = v;
        return MF_ARGS_OK;
    case MF_BENCH_OPT_CSV: c->csv = v; return MF_ARGS_OK;
    case MF_BENCH_OPT_JSON: c->json = v; return MF_ARGS_OK;
    case MF_BENCH_OPT_FORMAT:
        return mf_args_format(v, &c->fmt) ? MF_ARGS_OK : mf_args_bad(err, "--format %.80s: not table, csv or json", v);
    case MF_BENCH_OPT_ITERS:
        if (!strcmp(a, "--warmup")) return mf_args_int32(a, v, 0, 1000000, &c->warmup, err);
        return mf_args_int32(a, v, 1, 1000000, &c->iters, err);
    case MF_BENCH_OPT_DTYPE:
        if (!mf_args_dtype(v, &c->dt)) return mf_args_bad(err, "--dtype %.80s: not bf16, f16 or f32", v);
        c->dt_given = true;
        return MF_ARGS_OK;
    default: return mf_args_double(a, v, 0.0, INFINITY, &c->max_mb, err); // --max-mb
    }
}

static mf_arg_list *list_of(void *opts, const mf_bench_list_opt *l) { return (mf_arg_list *)((char *)opts + l->off); }

mf_args_result mf_bench_parse(const mf_bench_def *d, int argc, char **argv, void *opts, char err[MF_ARGS_ERR_CAP]) {
    static const char *const none[] = {NULL};
    static const mf_bench_list_opt no_lists[] = {{NULL, 0, 0, 0}};
    const mf_bench_list_opt *lists = d->lists ? d->lists : no_lists;
    if (d->defaults) memcpy(opts, d->defaults, d->opts_size);
    else memset(opts, 0, d->opts_size);
    mf_bench_common_opts *c = opts;
    *c = (mf_bench_common_opts){.backend = "auto", .dt = MF_DTYPE_BF16, .fmt = MF_BENCH_TABLE, .warmup = -1,
                                .iters = -1, .max_mb = -1};
    err[0] = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (mf_args_is_help(a)) return MF_ARGS_HELP;
        bool taken;
        if (common_opt(argc, argv, &i, c, d->common, &taken, err)) return MF_ARGS_BAD;
        if (taken) continue;
        const mf_bench_list_opt *l = lists;
        while (l->flag && strcmp(a, l->flag)) l++;
        if (l->flag) {
            if (mf_args_value(argc, argv, &i, &v, err) || mf_args_list(a, v, l->lo, l->hi, list_of(opts, l), err))
                return MF_ARGS_BAD;
            continue;
        }
        const bool valued = mf_args_one_of(a, d->valued ? d->valued : none);
        if (!valued && !mf_args_one_of(a, d->flags ? d->flags : none))
            return mf_args_bad(err, "unknown option %.80s (see minfer bench %s --help)", a, d->name);
        if ((valued && mf_args_value(argc, argv, &i, &v, err)) || d->option(opts, a, v, err)) return MF_ARGS_BAD;
    }
    for (const mf_bench_list_opt *l = lists; c->full && !d->full_with_lists && l->flag; l++) // which grid?
        if (list_of(opts, l)->n)
            return mf_args_bad(err, "--full with %s: the whole grid or the listed shapes, not both (see minfer bench %s --help)",
                               l->flag, d->name);
    return d->check ? d->check(opts, err) : MF_ARGS_OK;
}

void mf_bench_list(FILE *f) {
    for (int k = 0; mf_benches[k]; k++) fprintf(f, "  bench %-11s %s\n", mf_benches[k]->name, mf_benches[k]->about);
}

static void help(FILE *f) {
    fprintf(f, "usage: minfer bench [NAME] [options]   (no NAME: softmax)\n");
    mf_bench_list(f);
    fprintf(f, "minfer bench NAME --help: its options\n");
}

int mf_cmd_bench(int argc, char **argv) {
    const mf_bench_def *d = &mf_bench_softmax;
    if (argc > 0 && mf_args_is_help(argv[0])) {
        help(stdout);
        return 0;
    }
    if (argc > 0 && argv[0][0] != '-') {
        int k = 0;
        while (mf_benches[k] && strcmp(argv[0], mf_benches[k]->name)) k++;
        if (!mf_benches[k]) {
            fprintf(stderr, "minfer: error: unknown benchmark '%s' (benchmarks:", argv[0]);
            for (k = 0; mf_benches[k]; k++) fprintf(stderr, "%s %s", k ? "," : "", mf_benches[k]->name);
            fprintf(stderr, ")\n");
            return 2;
        }
        d = mf_benches[k];
        argc--, argv++;
    }
    void *opts = malloc(d->opts_size);
    char err[MF_ARGS_ERR_CAP];
    if (!opts) {
        fprintf(stderr, "minfer: error: bench %s: out of memory\n", d->name);
        return 1;
    }
    char cmd[32];
    snprintf(cmd, sizeof cmd, "bench %s", d->name);
    int rc = mf_cli_parsed(mf_bench_parse(d, argc, argv, opts, err), cmd, err, d->help);
    if (rc < 0) rc = d->run(opts);
    free(opts);
    return rc;
}

// ---- the session of an op bench ---------------------------------------------------------------

enum { SESSION_COLS = 5 };
static const char *const session_cols[SESSION_COLS] = {"device", "commit", "date", "copy_GB/s", "gemm_TFLOP/s"};

// --max-mb when not given: 85% of the device's free memory less mb[1] on CUDA, mb[0] on the CPU.
static double default_max_mb(const mf_backend *be, const double mb[2]) {
#ifdef MF_HAVE_CUDA
    size_t free_b = 0, total_b = 0;
    if (mf_backend_device(be) == MF_DEVICE_CUDA && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        return 0.85 * (double)free_b / 1e6 - mb[1];
#else
    (void)be;
#endif
    return mb[0];
}

static void close_session(mf_bench_session *b) {
    mf_bench_table_free(b->tab);
    mf_bench_timer_free(b->timer);
    mf_backend_free(b->be);
    *b = (mf_bench_session){0};
}

int mf_bench_begin(mf_bench_session *b, const mf_bench_def *d, mf_bench_common_opts *c, size_t cpu_flush, bool gemm,
                   int ncols, const char *const *names) {
    const char *what = d->name;
    *b = (mf_bench_session){.what = what, .ncols = ncols, .gemm_tflops = NAN};
    const char **all = malloc((size_t)(ncols + SESSION_COLS) * sizeof *all);
    if (!all) {
        fprintf(stderr, "minfer bench %s: out of memory\n", what);
        return 1;
    }
    for (int c = 0; c < ncols + SESSION_COLS; c++) all[c] = c < ncols ? names[c] : session_cols[c - ncols];
    b->tab = mf_bench_table_new(ncols + SESSION_COLS, all);
    free(all);
    mf_status st = b->tab ? mf_backend_init(c->backend, &b->be) : mf_fail(MF_ERR_OOM, "out of memory");
    if (st == MF_OK) {
        b->cuda = mf_backend_device(b->be) == MF_DEVICE_CUDA;
        // Flush buffer: several times any L2 (50-60 MB on H100/H200); on the CPU larger than a small LLC.
        st = mf_bench_timer_init(b->be, b->cuda ? ((size_t)256 << 20) : cpu_flush, &b->timer);
    }
    if (st == MF_OK)
        st = mf_bench_copy_gbps(b->timer, b->be, b->cuda ? ((size_t)1 << 30) : ((size_t)128 << 20), b->cuda ? 20 : 5,
                                &b->copy_gbps);
    if (st == MF_OK && gemm) {
        const int64_t n = b->cuda ? 8192 : 1024;
        const mf_dtype dt = b->cuda ? MF_DTYPE_BF16 : MF_DTYPE_F32;
        st = mf_bench_gemm_tflops(b->timer, b->be, n, dt, b->cuda ? 20 : 3, &b->gemm_tflops);
        snprintf(b->gemm_shape, sizeof b->gemm_shape, "%s %lldx%lldx%lld", mf_dtype_name(dt), (long long)n,
                 (long long)n, (long long)n);
    }
    if (st != MF_OK) {
        fprintf(stderr, "minfer bench %s: %s\n", what, mf_last_error());
        close_session(b);
        return 1;
    }
    for (int c = 0; c < SESSION_COLS; c++) mf_bench_table_hide_in_table(b->tab, session_cols[c]);
    mf_bench_device_name(b->timer, b->device, sizeof b->device);
    time_t now = time(NULL);
    strftime(b->date, sizeof b->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (c->warmup < 0) c->warmup = d->warmup[b->cuda];
    if (c->iters < 0) c->iters = d->iters[b->cuda];
    if (c->max_mb < 0 && (d->common & MF_BENCH_OPT_MAX_MB)) c->max_mb = default_max_mb(b->be, d->max_mb);
    return 0;
}

bool mf_bench_add_row(mf_bench_session *b, const char *const *cells) {
    const int n = b->ncols + SESSION_COLS;
    const char **row = malloc((size_t)n * sizeof *row);
    if (!row) return false;
    char copy[32], gemm[32];
    mf_bench_fmt(copy, sizeof copy, b->copy_gbps, 1);
    mf_bench_fmt(gemm, sizeof gemm, b->gemm_tflops, 3);
    const char *own[SESSION_COLS] = {b->device, mf_build_commit, b->date, copy, gemm};
    for (int c = 0; c < n; c++) row[c] = c < b->ncols ? cells[c] : own[c - b->ncols];
    const bool ok = mf_bench_table_add(b->tab, row);
    free(row);
    return ok;
}

void mf_bench_progress(const mf_bench_session *b, int i, int n, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "minfer bench %s: [%d/%d] %s\n", b->what, i, n, msg);
}

int mf_bench_end(mf_bench_session *b, mf_status st, const mf_bench_common_opts *c, const char *note) {
    int rc = 0;
    if (st != MF_OK) {
        fprintf(stderr, "minfer bench %s: %s\n", b->what, mf_last_error());
        rc = 1;
    }
    if (c->fmt == MF_BENCH_TABLE) {
        printf("# %s on %s (%s), commit %s, %s; copy ceiling %.1f GB/s (read + write)", b->what,
               mf_backend_name(b->be), b->device, mf_build_commit, b->date, b->copy_gbps);
        if (b->gemm_tflops == b->gemm_tflops) printf("; GEMM ceiling %.3f TFLOP/s (%s)", b->gemm_tflops, b->gemm_shape);
        printf("; %d iterations, L2 flushed; %s\n", c->iters, note);
    }
    mf_bench_table_print(b->tab, c->fmt, stdout);
    char who[64];
    snprintf(who, sizeof who, "minfer bench %s", b->what);
    if (mf_bench_table_write_files(b->tab, c->csv, c->json, who)) rc = 1;
    close_session(b);
    return rc;
}
