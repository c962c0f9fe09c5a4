// Option parsing of generate, score, info and bench model, softmax, attention,
// moe, topk and gemv (tools/cli_args.h). Plain C over argv: no library calls, so that
// fuzz/fuzz_cli.c can run it on arbitrary argument vectors.
#include "cli_args.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/ops.h" // MF_TOPK_MAX

// ---- messages and numbers ----------------------------------------------------------------

// Formats the message into err and returns MF_ARGS_BAD. Arguments are shown
// with "%.80s" by the callers; control bytes become '?', so the message is one
// line whatever an argument holds.
static mf_args_result bad(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static mf_args_result bad(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, MF_ARGS_ERR_CAP, fmt, ap);
    va_end(ap);
    for (unsigned char *p = (unsigned char *)err; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = '?';
    return MF_ARGS_BAD;
}

// The whole string is a base-10 integer in [lo, hi].
static bool int_in(const char *s, int64_t lo, int64_t hi, int64_t *v) {
    char *end;
    errno = 0;
    const long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi) return false;
    *v = x;
    return true;
}

// The whole string is a base-10 integer in [0, 2^64) (strtoull would wrap "-1").
static bool u64_of(const char *s, uint64_t *v) {
    const char *p = s;
    while (*p == ' ' || (*p >= '\t' && *p <= '\r')) p++;
    if (*p == '-') return false;
    char *end;
    errno = 0;
    const unsigned long long x = strtoull(s, &end, 10);
    if (end == s || *end || errno) return false;
    *v = x;
    return true;
}

// The whole string is a finite number.
static bool finite_of(const char *s, double *v) {
    char *end;
    errno = 0;
    const double x = strtod(s, &end);
    if (end == s || *end || !isfinite(x)) return false;
    if (errno == ERANGE && fabs(x) >= 1.0) return false; // overflow; underflow to ~0 is a number
    *v = x;
    return true;
}

// An integer option: *v in [lo, hi], or the message naming flag and range.
static mf_args_result int_opt(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *v, char *err) {
    if (int_in(s, lo, hi, v)) return MF_ARGS_OK;
    return bad(err, "%s %.80s: not an integer in [%lld, %lld]", flag, s, (long long)lo, (long long)hi);
}

static mf_args_result int32_opt(const char *flag, const char *s, int64_t lo, int64_t hi, int *v, char *err) {
    int64_t x = 0;
    if (int_opt(flag, s, lo, hi, &x, err)) return MF_ARGS_BAD;
    *v = (int)x;
    return MF_ARGS_OK;
}

// A number option in [lo, hi] (hi = INFINITY: no upper bound).
static mf_args_result double_opt(const char *flag, const char *s, double lo, double hi, double *out, char *err) {
    double x = 0;
    if (!finite_of(s, &x)) return bad(err, "%s %.80s: not a finite number", flag, s);
    if (x < lo || x > hi) {
        if (isinf(hi)) return bad(err, "%s %.80s: not >= %g", flag, s, lo);
        return bad(err, "%s %.80s: not in [%g, %g]", flag, s, lo, hi);
    }
    *out = x;
    return MF_ARGS_OK;
}

// The same for a float: beyond FLT_MAX it would become inf.
static mf_args_result float_opt(const char *flag, const char *s, double lo, double hi, float *out, char *err) {
    double x = 0;
    if (double_opt(flag, s, lo, hi, &x, err)) return MF_ARGS_BAD;
    if (fabs(x) > FLT_MAX) return bad(err, "%s %.80s: beyond the float range", flag, s);
    *out = (float)x;
    return MF_ARGS_OK;
}

static bool dtype_of(const char *s, mf_dtype *dt) {
    if (!strcmp(s, "bf16")) *dt = MF_DTYPE_BF16;
    else if (!strcmp(s, "f16")) *dt = MF_DTYPE_F16;
    else if (!strcmp(s, "f32")) *dt = MF_DTYPE_F32;
    else return false;
    return true;
}

// A model's --dtype: auto, or a float dtype.
static bool model_dtype_of(const char *s, mf_dtype *dt, bool *is_auto) {
    *is_auto = !strcmp(s, "auto");
    return *is_auto || dtype_of(s, dt);
}

static bool format_of(const char *s, mf_bench_format *f) {
    if (!strcmp(s, "table")) *f = MF_BENCH_TABLE;
    else if (!strcmp(s, "csv")) *f = MF_BENCH_CSV;
    else if (!strcmp(s, "json")) *f = MF_BENCH_JSON;
    else return false;
    return true;
}

static bool backend_ok(const char *s) { return !strcmp(s, "auto") || !strcmp(s, "cpu") || !strcmp(s, "cuda"); }

static bool is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

static bool one_of(const char *a, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(a, *names)) return true;
    return false;
}

// ---- generate ----------------------------------------------------------------------------------

mf_args_result mf_parse_generate_args(int argc, char **argv, mf_generate_opts *o, char err[MF_ARGS_ERR_CAP]) {
    *o = (mf_generate_opts){.backend = "auto", .dtype = MF_DTYPE_BF16, .dtype_auto = true, .n = 128,
                            .bos = MF_BOS_AUTO};
    o->sp = (mf_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                .repetition_penalty = 1.0f};
    err[0] = 0;
    static const char *const valued[] = {"-m", "--model", "-p", "--prompt", "-n", "--temp", "--top-k", "--top-p",
                                         "--min-p", "--repeat-penalty", "--seed", "--stop", "--backend", "--dtype",
                                         "--attn", NULL};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) return MF_ARGS_HELP;
        if (!strcmp(a, "--no-bos") || !strcmp(a, "--bos")) {
            o->bos = !strcmp(a, "--bos") ? MF_BOS_ADD : MF_BOS_NONE;
            continue;
        }
        if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
            continue;
        }
        if (!strcmp(a, "--no-graphs")) {
            o->no_graphs = true;
            continue;
        }
        if (!one_of(a, valued)) return bad(err, "unknown option %.80s (see minfer generate --help)", a);
        if (i + 1 >= argc) return bad(err, "%s needs a value", a);
        const char *v = argv[++i];
        mf_args_result r = MF_ARGS_OK;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->dir = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (o->prompt) return bad(err, "one prompt only (%s given twice)", a);
            o->prompt = v;
        } else if (!strcmp(a, "-n")) {
            r = int_opt(a, v, 0, INT32_MAX, &o->n, err);
        } else if (!strcmp(a, "--temp")) {
            r = float_opt(a, v, 0.0, INFINITY, &o->sp.temperature, err);
        } else if (!strcmp(a, "--top-k")) {
            int k = 0;
            r = int32_opt(a, v, 0, INT32_MAX, &k, err);
            if (r == MF_ARGS_OK) o->sp.top_k = k;
        } else if (!strcmp(a, "--top-p")) {
            r = float_opt(a, v, 0.0, 1.0, &o->sp.top_p, err);
        } else if (!strcmp(a, "--min-p")) {
            r = float_opt(a, v, 0.0, 1.0, &o->sp.min_p, err);
        } else if (!strcmp(a, "--repeat-penalty")) {
            r = float_opt(a, v, 0.0, INFINITY, &o->sp.repetition_penalty, err);
        } else if (!strcmp(a, "--seed")) {
            if (!u64_of(v, &o->sp.seed)) return bad(err, "--seed %.80s: not an integer in [0, 2^64)", v);
            o->seed_given = true;
        } else if (!strcmp(a, "--stop")) {
            if (o->n_stop == MF_ARGS_MAX_STOP) return bad(err, "--stop: more than %d stop strings", MF_ARGS_MAX_STOP);
            if (!*v) return bad(err, "--stop wants a non-empty string");
            o->stop[o->n_stop++] = v;
        } else if (!strcmp(a, "--backend")) {
            if (!backend_ok(v)) return bad(err, "--backend %.80s: not auto, cpu or cuda", v);
            o->backend = v;
        } else if (!strcmp(a, "--dtype")) {
            if (!model_dtype_of(v, &o->dtype, &o->dtype_auto))
                return bad(err, "--dtype %.80s: not auto, bf16, f16 or f32", v);
        } else if (!strcmp(a, "--attn")) {
            o->attn = v;
        }
        if (r != MF_ARGS_OK) return r;
    }
    if (!o->dir) return bad(err, "give the model with -m DIR (see minfer generate --help)");
    if (!o->prompt) return bad(err, "give the prompt with -p TEXT (see minfer generate --help)");
    return MF_ARGS_OK;
}

// ---- the model options of score, info and bench model ----------------------------------------------

// Consumes a model option at argv[*i]: MF_ARGS_OK with *taken set, or MF_ARGS_BAD.
static mf_args_result model_opt(int argc, char **argv, int *i, mf_model_args *o, bool *taken, char *err) {
    static const char *const names[] = {"-m", "--model", "--synthetic", "--backend", "--dtype", "--seed", "--attn",
                                        "--topk", NULL};
    const char *a = argv[*i];
    if (!strcmp(a, "--no-graphs")) {
        o->no_graphs = true, *taken = true;
        return MF_ARGS_OK;
    }
    if (!strcmp(a, "--host-argmax")) {
        o->host_argmax = true, *taken = true;
        return MF_ARGS_OK;
    }
    *taken = one_of(a, names);
    if (!*taken) return MF_ARGS_OK;
    if (*i + 1 >= argc) return bad(err, "%s needs a value", a);
    const char *v = argv[++*i];
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        o->dir = v;
    } else if (!strcmp(a, "--synthetic")) {
        o->synthetic = v;
    } else if (!strcmp(a, "--backend")) {
        if (!backend_ok(v)) return bad(err, "--backend %.80s: not auto, cpu or cuda", v);
        o->backend = v;
    } else if (!strcmp(a, "--seed")) {
        if (!u64_of(v, &o->seed)) return bad(err, "--seed %.80s: not an integer in [0, 2^64)", v);
    } else if (!strcmp(a, "--attn")) {
        o->attn = v;
    } else if (!strcmp(a, "--topk")) {
        int64_t k;
        if (!int_in(v, 1, MF_TOPK_MAX, &k)) return bad(err, "--topk %.80s: not an integer in [1, %d]", v, MF_TOPK_MAX);
        o->topk = (int32_t)k;
    } else if (!model_dtype_of(v, &o->dtype, &o->dtype_auto)) {
        return bad(err, "--dtype %.80s: not auto, bf16, f16 or f32", v);
    }
    return MF_ARGS_OK;
}

// ---- score ------------------------------------------------------------------------------------------

// "1,2,3" -> ids in [0, 2^31).
static mf_args_result parse_ids(const char *s, mf_score_opts *o, char *err) {
    int64_t n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    o->ids = malloc((size_t)n * sizeof *o->ids);
    if (!o->ids) return bad(err, "--tokens: out of memory for %lld ids", (long long)n);
    const char *p = s;
    for (int64_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        const long long v = strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end) || errno || v < 0 || v > INT32_MAX) {
            const size_t len = strcspn(p, ",");
            return bad(err, "--tokens: item %lld '%.*s' is not a token id in [0, 2147483647]", (long long)i,
                       (int)(len < 80 ? len : 80), p);
        }
        o->ids[i] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    o->n_ids = n;
    return MF_ARGS_OK;
}

void mf_score_opts_free(mf_score_opts *o) {
    if (!o) return;
    free(o->ids);
    o->ids = NULL;
    o->n_ids = 0;
}

mf_args_result mf_parse_score_args(int argc, char **argv, mf_score_opts *o, char err[MF_ARGS_ERR_CAP]) {
    *o = (mf_score_opts){.model.dtype = MF_DTYPE_BF16, .model.dtype_auto = true, .bos = -1};
    err[0] = 0;
    const char *tokens = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool taken;
        if (model_opt(argc, argv, &i, &o->model, &taken, err)) return MF_ARGS_BAD;
        if (taken) continue;
        if (is_help(a)) return MF_ARGS_HELP;
        if (!strcmp(a, "--bos") || !strcmp(a, "--no-bos")) {
            o->bos = !strcmp(a, "--bos");
            continue;
        }
        if (!strcmp(a, "-p") || !strcmp(a, "--tokens") || !strcmp(a, "--logits-out")) {
            if (i + 1 >= argc) return bad(err, "%s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "-p")) o->text = v;
            else if (!strcmp(a, "--tokens")) tokens = v;
            else o->logits_out = v;
            continue;
        }
        return bad(err, "unknown option %.80s (see minfer score --help)", a);
    }
    if (!o->model.dir && !o->model.synthetic) return bad(err, "give the model with -m DIR (see minfer score --help)");
    if (!o->text == !tokens)
        return bad(err, "give exactly one of -p TEXT and --tokens LIST (see minfer score --help)");
    if (tokens && parse_ids(tokens, o, err)) {
        mf_score_opts_free(o);
        return MF_ARGS_BAD;
    }
    return MF_ARGS_OK;
}

// ---- info -m -----------------------------------------------------------------------------------------

mf_args_result mf_parse_info_args(int argc, char **argv, mf_info_opts *o, char err[MF_ARGS_ERR_CAP]) {
    *o = (mf_info_opts){.model.dtype = MF_DTYPE_BF16, .model.dtype_auto = true, .batch = 1};
    err[0] = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool taken;
        if (model_opt(argc, argv, &i, &o->model, &taken, err)) return MF_ARGS_BAD;
        if (taken) continue;
        if (is_help(a)) return MF_ARGS_HELP;
        if (!strcmp(a, "--batch") || !strcmp(a, "--seq")) {
            if (i + 1 >= argc) return bad(err, "%s needs a value", a);
            if (int_opt(a, argv[++i], 1, INT32_MAX, !strcmp(a, "--batch") ? &o->batch : &o->seq, err))
                return MF_ARGS_BAD;
            continue;
        }
        return bad(err, "unknown option %.80s (see minfer info --help)", a);
    }
    if (!o->model.dir && !o->model.synthetic)
        return bad(err, "give the model with -m DIR or --synthetic PRESET (see minfer info --help)");
    return MF_ARGS_OK;
}

// ---- bench model ------------------------------------------------------------------------------------------

// "1,4,8" -> v[0 .. *n), each in [lo, hi], at most MF_ARGS_MAX_LIST.
static mf_args_result list_opt(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *v, int *n,
                               char *err) {
    *n = 0;
    const char *p = s;
    do {
        char *end;
        errno = 0;
        const long long x = strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end) || errno || x < lo || x > hi || *n == MF_ARGS_MAX_LIST)
            return bad(err, "%s %.80s: want up to %d comma-separated integers in [%lld, %lld]", flag, s,
                       MF_ARGS_MAX_LIST, (long long)lo, (long long)hi);
        v[(*n)++] = x;
        p = *end ? end + 1 : end;
        if (*end && !*p) return bad(err, "%s %.80s: ends with a comma", flag, s);
    } while (*p);
    return MF_ARGS_OK;
}

mf_args_result mf_parse_bench_model_args(int argc, char **argv, mf_bench_model_opts *o, char err[MF_ARGS_ERR_CAP]) {
    *o = (mf_bench_model_opts){.model = {.dtype = MF_DTYPE_BF16, .dtype_auto = true, .seed = 1},
                                .fmt = MF_BENCH_TABLE, .gen = 16};
    err[0] = 0;
    static const char *const valued[] = {"--batch", "--seq", "--format", "--gen", "--iters", NULL};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool taken;
        if (model_opt(argc, argv, &i, &o->model, &taken, err)) return MF_ARGS_BAD;
        if (taken) continue;
        if (is_help(a)) return MF_ARGS_HELP;
        if (!strcmp(a, "--profile")) {
            o->profile = true;
            continue;
        }
        if (!one_of(a, valued)) return bad(err, "unknown option %.80s (see minfer bench model --help)", a);
        if (i + 1 >= argc) return bad(err, "%s needs a value", a);
        const char *v = argv[++i];
        mf_args_result r = MF_ARGS_OK;
        if (!strcmp(a, "--batch")) {
            r = list_opt(a, v, 1, INT32_MAX, o->batches, &o->n_batches, err);
        } else if (!strcmp(a, "--seq")) {
            r = list_opt(a, v, 1, INT32_MAX, o->seqs, &o->n_seqs, err);
        } else if (!strcmp(a, "--format")) {
            if (!format_of(v, &o->fmt)) r = bad(err, "--format %.80s: not table, csv or json", v);
        } else if (!strcmp(a, "--gen")) {
            r = int32_opt(a, v, 1, 4096, &o->gen, err);
        } else {
            r = int32_opt(a, v, 1, 100000, &o->iters, err);
        }
        if (r != MF_ARGS_OK) return r;
    }
    if (!o->model.dir && !o->model.synthetic) o->model.synthetic = "small";
    return MF_ARGS_OK;
}

// ---- op benches: softmax, attention, moe ----------------------------------------------------------------

static void common_defaults(mf_bench_common_opts *c) {
    *c = (mf_bench_common_opts){.backend = "auto", .dt = MF_DTYPE_BF16, .fmt = MF_BENCH_TABLE, .warmup = -1,
                                .iters = -1, .max_mb = -1};
}

// The common options a bench has no use for (bench_arg then calls them unknown).
enum { NO_DTYPE = 1, NO_FULL = 2, NO_MAX_MB = 4, NO_GEMM = 8 };

// Whether common option a is one the bench takes (skip: NO_* bits).
static bool common_taken(const char *a, unsigned skip) {
    static const char *const all[] = {"--backend", "--csv", "--json", "--warmup", "--iters", "--max-mb",
                                      "--dtype", "--format", "--full", "--no-gemm-ceiling", NULL};
    if (!one_of(a, all)) return false;
    return !((skip & NO_DTYPE && !strcmp(a, "--dtype")) || (skip & NO_FULL && !strcmp(a, "--full")) ||
             (skip & NO_MAX_MB && !strcmp(a, "--max-mb")) || (skip & NO_GEMM && !strcmp(a, "--no-gemm-ceiling")));
}

// One option every op bench takes (but those in skip): *taken says whether
// `a` was one (its value, if any, consumed from argv); MF_ARGS_BAD with err
// set when its value is bad.
static mf_args_result common_opt(int argc, char **argv, int *i, mf_bench_common_opts *c, unsigned skip,
                                 bool *taken, char *err) {
    const char *a = argv[*i];
    *taken = common_taken(a, skip);
    if (!*taken) return MF_ARGS_OK;
    if (!strcmp(a, "--full") || !strcmp(a, "--no-gemm-ceiling")) {
        *(a[2] == 'f' ? &c->full : &c->no_gemm) = true;
        return MF_ARGS_OK;
    }
    if (*i + 1 >= argc) return bad(err, "%s needs a value", a);
    const char *v = argv[++*i];
    if (!strcmp(a, "--backend")) {
        c->backend = v;
        if (!backend_ok(v)) return bad(err, "--backend %.80s: not auto, cpu or cuda", v);
    } else if (!strcmp(a, "--csv")) {
        c->csv = v;
    } else if (!strcmp(a, "--json")) {
        c->json = v;
    } else if (!strcmp(a, "--warmup")) {
        return int32_opt(a, v, 0, 1000000, &c->warmup, err);
    } else if (!strcmp(a, "--iters")) {
        return int32_opt(a, v, 1, 1000000, &c->iters, err);
    } else if (!strcmp(a, "--max-mb")) {
        return double_opt(a, v, 0.0, INFINITY, &c->max_mb, err);
    } else if (!strcmp(a, "--dtype")) {
        if (!dtype_of(v, &c->dt)) return bad(err, "--dtype %.80s: not bf16, f16 or f32", v);
        c->dt_given = true;
    } else if (!format_of(v, &c->fmt)) {
        return bad(err, "--format %.80s: not table, csv or json", v);
    }
    return MF_ARGS_OK;
}

// A shape list option of the table (flag, range, destination): *taken says whether `a` was one.
typedef struct {
    const char *flag;
    int64_t lo, hi;
    mf_arg_list *dst;
} shape_opt;

static mf_args_result shape_list(int argc, char **argv, int *i, const shape_opt *opts, bool *taken, char *err) {
    *taken = false;
    for (; opts->flag; opts++) {
        if (strcmp(argv[*i], opts->flag)) continue;
        *taken = true;
        if (*i + 1 >= argc) return bad(err, "%s needs a value", opts->flag);
        const char *v = argv[++*i];
        return list_opt(opts->flag, v, opts->lo, opts->hi, opts->dst->v, &opts->dst->n, err);
    }
    return MF_ARGS_OK;
}

// Whether any shape list was given; --full with one is refused (which grid would it mean?).
static mf_args_result shapes_given(const shape_opt *opts, const mf_bench_common_opts *c, const char *cmd,
                                   bool *given, char *err) {
    *given = false;
    const char *first = NULL;
    for (; opts->flag; opts++)
        if (opts->dst->n && !first) first = opts->flag;
    *given = first != NULL;
    if (first && c->full) return bad(err, "--full with %s: the whole grid or the listed shapes, not both (see minfer bench %s --help)", first, cmd);
    return MF_ARGS_OK;
}

// One step of an op bench's option loop at argv[*i]: -h, a common option, a
// shape list, or one of the bench's own `valued` options, whose flag and value
// come back in *flag and *v (*flag NULL when the argument was taken here).
static mf_args_result bench_arg(int argc, char **argv, int *i, mf_bench_common_opts *c, unsigned skip,
                                const shape_opt *shapes, const char *const *valued, const char *cmd, const char **flag,
                                const char **v, char *err) {
    const char *a = argv[*i];
    *flag = NULL;
    if (is_help(a)) return MF_ARGS_HELP;
    bool taken;
    if (common_opt(argc, argv, i, c, skip, &taken, err)) return MF_ARGS_BAD;
    if (!taken && shape_list(argc, argv, i, shapes, &taken, err)) return MF_ARGS_BAD;
    if (taken) return MF_ARGS_OK;
    if (!one_of(a, valued)) return bad(err, "unknown option %.80s (see minfer bench %s --help)", a, cmd);
    if (*i + 1 >= argc) return bad(err, "%s needs a value", a);
    *flag = a, *v = argv[++*i];
    return MF_ARGS_OK;
}

// v is x, y or both ("all" / "both"): *want_x and *want_y say which. False otherwise.
static bool either_of(const char *v, const char *x, const char *y, const char *both, bool *want_x, bool *want_y) {
    if (strcmp(v, x) && strcmp(v, y) && strcmp(v, both)) return false;
    *want_x = strcmp(v, y) != 0, *want_y = strcmp(v, x) != 0;
    return true;
}

mf_args_result mf_parse_bench_softmax_args(int argc, char **argv, mf_bench_softmax_opts *o,
                                           char err[MF_ARGS_ERR_CAP]) {
    *o = (mf_bench_softmax_opts){.fused = true, .unfused = true, .grid = true, .sweep = true, .causal = true,
                                 .scale = 0.125f};
    common_defaults(&o->com);
    err[0] = 0;
    const shape_opt shapes[] = {{"--batch", 1, INT32_MAX, &o->batch},
                                {"--heads", 1, INT32_MAX, &o->heads},
                                {"--seq", 1, INT32_MAX, &o->seq},
                                {NULL, 0, 0, NULL}};
    static const char *const valued[] = {"--scale", "--variant", "--cases", "--mask", NULL};
    bool cases_given = false;
    for (int i = 0; i < argc; i++) {
        const char *a, *v;
        const mf_args_result step = bench_arg(argc, argv, &i, &o->com, NO_GEMM, shapes, valued, "softmax", &a, &v, err);
        if (step != MF_ARGS_OK) return step;
        if (!a) continue;
        mf_args_result r = MF_ARGS_OK;
        if (!strcmp(a, "--scale")) {
            r = float_opt(a, v, -INFINITY, INFINITY, &o->scale, err);
        } else if (!strcmp(a, "--variant")) {
            if (!either_of(v, "fused", "unfused", "both", &o->fused, &o->unfused))
                r = bad(err, "--variant %.80s: not fused, unfused or both", v);
        } else if (!strcmp(a, "--cases")) {
            if (!either_of(v, "grid", "sweep", "all", &o->grid, &o->sweep))
                r = bad(err, "--cases %.80s: not grid, sweep or all", v);
            cases_given = true;
        } else {
            if (!strcmp(v, "causal") || !strcmp(v, "none")) o->causal = !strcmp(v, "causal");
            else r = bad(err, "--mask %.80s: not causal or none", v);
        }
        if (r != MF_ARGS_OK) return r;
    }
    bool listed;
    if (shapes_given(shapes, &o->com, "softmax", &listed, err)) return MF_ARGS_BAD;
    if (listed && !cases_given) o->sweep = false; // the listed shapes are what was asked for
    if (listed && !o->grid) return bad(err, "--cases sweep with --batch/--heads/--seq: the lists shape the grid cases");
    if (!o->com.dt_given) o->com.dt = MF_DTYPE_BF16;
    return MF_ARGS_OK;
}

mf_args_result mf_parse_bench_attention_args(int argc, char **argv, mf_bench_attention_opts *o,
                                             char err[MF_ARGS_ERR_CAP]) {
    *o = (mf_bench_attention_opts){.prefill = true, .decode = true, .causal = true, .noncausal = true};
    common_defaults(&o->com);
    err[0] = 0;
    const shape_opt shapes[] = {{"--batch", 1, INT32_MAX, &o->batch},
                                {"--seq", 1, INT32_MAX, &o->seq},
                                {"--heads", 1, 65535, &o->heads},
                                {"--kv-heads", 1, 65535, &o->kv_heads},
                                {"--head-dim", 1, 65535, &o->head_dim},
                                {NULL, 0, 0, NULL}};
    static const char *const valued[] = {"--cases", "--mask", "--num-splits", NULL};
    for (int i = 0; i < argc; i++) {
        const char *a, *v;
        const mf_args_result step = bench_arg(argc, argv, &i, &o->com, 0, shapes, valued, "attention", &a, &v, err);
        if (step != MF_ARGS_OK) return step;
        if (!a) continue;
        mf_args_result r = MF_ARGS_OK;
        if (!strcmp(a, "--cases")) {
            if (!either_of(v, "prefill", "decode", "all", &o->prefill, &o->decode))
                r = bad(err, "--cases %.80s: not prefill, decode or all", v);
        } else if (!strcmp(a, "--mask")) {
            if (!either_of(v, "causal", "none", "both", &o->causal, &o->noncausal))
                r = bad(err, "--mask %.80s: not causal, none or both", v);
        } else {
            r = int32_opt(a, v, 0, 256, &o->num_splits, err);
        }
        if (r != MF_ARGS_OK) return r;
    }
    bool listed;
    if (shapes_given(shapes, &o->com, "attention", &listed, err)) return MF_ARGS_BAD;
    if (!o->com.dt_given) o->com.dt = MF_DTYPE_BF16;
    return MF_ARGS_OK;
}

mf_args_result mf_parse_bench_moe_args(int argc, char **argv, mf_bench_moe_opts *o, char err[MF_ARGS_ERR_CAP]) {
    *o = (mf_bench_moe_opts){.prefill = true, .decode = true, .even = true, .zipf = true, .seq = -1};
    common_defaults(&o->com);
    err[0] = 0;
    const shape_opt shapes[] = {{"--experts", 1, 256, &o->experts},
                                {"--top-k", 1, 256, &o->top_k},
                                {"--hidden", 8, 65536, &o->hidden},
                                {"--batch", 1, 65536, &o->batch},
                                {NULL, 0, 0, NULL}};
    static const char *const valued[] = {"--mode", "--routing", "--seq", NULL};
    for (int i = 0; i < argc; i++) {
        const char *a, *v;
        const mf_args_result step = bench_arg(argc, argv, &i, &o->com, 0, shapes, valued, "moe", &a, &v, err);
        if (step != MF_ARGS_OK) return step;
        if (!a) continue;
        mf_args_result r = MF_ARGS_OK;
        if (!strcmp(a, "--mode")) {
            if (!either_of(v, "prefill", "decode", "all", &o->prefill, &o->decode))
                r = bad(err, "--mode %.80s: not prefill, decode or all", v);
        } else if (!strcmp(a, "--routing")) {
            if (!either_of(v, "even", "zipf", "both", &o->even, &o->zipf))
                r = bad(err, "--routing %.80s: not even, zipf or both", v);
        } else {
            r = int_opt(a, v, 1, 65536, &o->seq, err);
        }
        if (r != MF_ARGS_OK) return r;
    }
    bool listed;
    if (shapes_given(shapes, &o->com, "moe", &listed, err)) return MF_ARGS_BAD;
    for (int h = 0; h < o->hidden.n; h++)
        if (o->hidden.v[h] % 8) return bad(err, "--hidden %lld: not a multiple of 8", (long long)o->hidden.v[h]);
    return MF_ARGS_OK;
}

mf_args_result mf_parse_bench_topk_args(int argc, char **argv, mf_bench_topk_opts *o, char err[MF_ARGS_ERR_CAP]) {
    *o = (mf_bench_topk_opts){.dts = {MF_DTYPE_F32}, .n_dt = 1, .scale = 1.0f};
    common_defaults(&o->com);
    err[0] = 0;
    const shape_opt shapes[] = {{"--vocab", 1, INT32_MAX, &o->vocab},
                                {"--batch", 1, INT32_MAX, &o->batch},
                                {"--k", 1, MF_TOPK_MAX, &o->k},
                                {NULL, 0, 0, NULL}};
    static const char *const valued[] = {"--scale", "--dtype", NULL};
    for (int i = 0; i < argc; i++) {
        const char *a, *v;
        const mf_args_result step =
            bench_arg(argc, argv, &i, &o->com, NO_DTYPE | NO_MAX_MB | NO_GEMM, shapes, valued, "topk", &a, &v, err);
        if (step != MF_ARGS_OK) return step;
        if (!a) continue;
        if (!strcmp(a, "--scale")) {
            double x = 0;
            if (!finite_of(v, &x) || !(x > 0) || x > FLT_MAX || !((float)x > 0))
                return bad(err, "--scale %.80s: not a finite number > 0", v);
            o->scale = (float)x;
            continue;
        }
        o->n_dt = 0; // --dtype f32,bf16: distinct dtypes
        for (const char *p = v;;) {
            const size_t len = strcspn(p, ",");
            mf_dtype dt = MF_DTYPE_F32;
            bool ok = (len == 3 && !strncmp(p, "f32", 3)) || (len == 3 && !strncmp(p, "f16", 3)) ||
                      (len == 4 && !strncmp(p, "bf16", 4));
            if (ok) dt = p[0] == 'b' ? MF_DTYPE_BF16 : p[1] == '1' ? MF_DTYPE_F16 : MF_DTYPE_F32;
            for (int j = 0; ok && j < o->n_dt; j++) ok = o->dts[j] != dt;
            if (!ok || o->n_dt == 3) return bad(err, "--dtype %.80s: want distinct f32, bf16 or f16, comma-separated", v);
            o->dts[o->n_dt++] = dt;
            if (!p[len]) break;
            p += len + 1;
        }
    }
    return MF_ARGS_OK;
}

mf_args_result mf_parse_bench_gemv_args(int argc, char **argv, mf_bench_gemv_opts *o, char err[MF_ARGS_ERR_CAP]) {
    *o = (mf_bench_gemv_opts){0};
    common_defaults(&o->com);
    err[0] = 0;
    const shape_opt shapes[] = {{NULL, 0, 0, NULL}};
    static const char *const valued[] = {"--m", NULL};
    for (int i = 0; i < argc; i++) {
        const char *a, *v;
        const mf_args_result step = bench_arg(argc, argv, &i, &o->com, NO_DTYPE | NO_FULL | NO_MAX_MB | NO_GEMM,
                                              shapes, valued, "gemv", &a, &v, err);
        if (step != MF_ARGS_OK) return step;
        if (a && int32_opt(a, v, 1, 8, &o->m, err)) return MF_ARGS_BAD;
    }
    return MF_ARGS_OK;
}
