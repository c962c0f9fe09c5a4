// The bench driver (bench.h): `minfer bench [NAME] [options]` finds NAME's
// record (no NAME: softmax), parses the options, and runs it.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

const mf_bench_def *const mf_benches[] = {&mf_bench_softmax, &mf_bench_attention, &mf_bench_moe, &mf_bench_topk,
                                          &mf_bench_gemv, &mf_bench_gemm_host, &mf_bench_model, NULL};

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
    int rc;
    if (!opts) {
        fprintf(stderr, "minfer: error: bench %s: out of memory\n", d->name);
        return 1;
    }
    const mf_args_result r = mf_bench_parse(d, argc, argv, opts, err);
    if (r == MF_ARGS_HELP) {
        d->help(stdout);
        rc = 0;
    } else if (r == MF_ARGS_BAD) {
        fprintf(stderr, "minfer: error: bench %s: %s\n", d->name, err);
        rc = 2;
    } else {
        rc = d->run(opts);
    }
    free(opts);
    return rc;
}

int mf_bench_begin(mf_bench_session *b, const mf_bench_def *d, mf_bench_common_opts *c, size_t cpu_flush, bool gemm,
                   int ncols, const char *const *names) {
    if (mf_bench_open(b, d->name, c->backend, cpu_flush, gemm, ncols, names)) return 1;
    if (c->warmup < 0) c->warmup = d->warmup[b->cuda];
    if (c->iters < 0) c->iters = d->iters[b->cuda];
    if (c->max_mb < 0 && (d->common & MF_BENCH_OPT_MAX_MB))
        c->max_mb = mf_bench_default_max_mb(b->be, d->max_mb[0], d->max_mb[1]);
    return 0;
}

int mf_bench_end(mf_bench_session *b, mf_status st, const mf_bench_common_opts *c, const char *note) {
    int rc = 0;
    if (st != MF_OK) {
        fprintf(stderr, "minfer bench %s: %s\n", b->what, mf_last_error());
        rc = 1;
    }
    if (mf_bench_report(b, c->fmt, c->iters, note, c->csv, c->json)) rc = 1;
    mf_bench_close(b);
    return rc;
}
