// Option parsing of generate, score and info, the model options and the
// primitives every parser uses (tools/cli_args.h). Plain C over argv.
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

// Arguments are shown with "%.80s" by the callers; control bytes become '?',
// so the message is one line whatever an argument holds.
mf_args_result mf_args_bad(char *err, const char *fmt, ...) {
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

bool mf_args_finite(const char *s, double *v) {
    char *end;
    errno = 0;
    const double x = strtod(s, &end);
    if (end == s || *end || !isfinite(x)) return false;
    if (errno == ERANGE && fabs(x) >= 1.0) return false; // overflow; underflow to ~0 is a number
    *v = x;
    return true;
}

mf_args_result mf_args_int(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *v, char *err) {
    if (int_in(s, lo, hi, v)) return MF_ARGS_OK;
    return mf_args_bad(err, "%s %.80s: not an integer in [%lld, %lld]", flag, s, (long long)lo, (long long)hi);
}

mf_args_result mf_args_int32(const char *flag, const char *s, int64_t lo, int64_t hi, int *v, char *err) {
    int64_t x = 0;
    if (mf_args_int(flag, s, lo, hi, &x, err)) return MF_ARGS_BAD;
    *v = (int)x;
    return MF_ARGS_OK;
}

mf_args_result mf_args_double(const char *flag, const char *s, double lo, double hi, double *out, char *err) {
    double x = 0;
    if (!mf_args_finite(s, &x)) return mf_args_bad(err, "%s %.80s: not a finite number", flag, s);
    if (x < lo || x > hi) {
        if (isinf(hi)) return mf_args_bad(err, "%s %.80s: not >= %g", flag, s, lo);
        return mf_args_bad(err, "%s %.80s: not in [%g, %g]", flag, s, lo, hi);
    }
    *out = x;
    return MF_ARGS_OK;
}

// Beyond FLT_MAX a float would be inf.
mf_args_result mf_args_float(const char *flag, const char *s, double lo, double hi, float *out, char *err) {
    double x = 0;
    if (mf_args_double(flag, s, lo, hi, &x, err)) return MF_ARGS_BAD;
    if (fabs(x) > FLT_MAX) return mf_args_bad(err, "%s %.80s: beyond the float range", flag, s);
    *out = (float)x;
    return MF_ARGS_OK;
}

bool mf_args_dtype(const char *s, mf_dtype *dt) {
    if (!strcmp(s, "bf16")) *dt = MF_DTYPE_BF16;
    else if (!strcmp(s, "f16")) *dt = MF_DTYPE_F16;
    else if (!strcmp(s, "f32")) *dt = MF_DTYPE_F32;
    else return false;
    return true;
}

// A model's --dtype: auto, or a float dtype.
static bool model_dtype_of(const char *s, mf_dtype *dt, bool *is_auto) {
    *is_auto = !strcmp(s, "auto");
    return *is_auto || mf_args_dtype(s, dt);
}

bool mf_args_format(const char *s, mf_bench_format *f) {
    if (!strcmp(s, "table")) *f = MF_BENCH_TABLE;
    else if (!strcmp(s, "csv")) *f = MF_BENCH_CSV;
    else if (!strcmp(s, "json")) *f = MF_BENCH_JSON;
    else return false;
    return true;
}

bool mf_args_backend_ok(const char *s) { return !strcmp(s, "auto") || !strcmp(s, "cpu") || !strcmp(s, "cuda"); }

bool mf_args_is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

bool mf_args_one_of(const char *a, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(a, *names)) return true;
    return false;
}

bool mf_args_kv_dtype_ok(const char *s) {
    return !strcmp(s, "auto") || !strcmp(s, "f32") || !strcmp(s, "f16") || !strcmp(s, "bf16");
}

mf_args_result mf_args_value(int argc, char **argv, int *i, const char **v, char *err) {
    if (*i + 1 >= argc) return mf_args_bad(err, "%s needs a value", argv[*i]);
    *v = argv[++*i];
    return MF_ARGS_OK;
}

mf_args_result mf_args_list(const char *flag, const char *s, int64_t lo, int64_t hi, mf_arg_list *l, char *err) {
    l->n = 0;
    const char *p = s;
    do {
        char *end;
        errno = 0;
        const long long x = strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end) || errno || x < lo || x > hi || l->n == MF_ARGS_MAX_LIST)
            return mf_args_bad(err, "%s %.80s: want up to %d comma-separated integers in [%lld, %lld]", flag, s,
                               MF_ARGS_MAX_LIST, (long long)lo, (long long)hi);
        l->v[l->n++] = x;
        p = *end ? end + 1 : end;
        if (*end && !*p) return mf_args_bad(err, "%s %.80s: ends with a comma", flag, s);
    } while (*p);
    return MF_ARGS_OK;
}

mf_args_result mf_args_either(const char *flag, const char *v, const char *x, const char *y, const char *both,
                              bool *want_x, bool *want_y, char *err) {
    if (strcmp(v, x) && strcmp(v, y) && strcmp(v, both))
        return mf_args_bad(err, "%s %.80s: not %s, %s or %s", flag, v, x, y, both);
    *want_x = strcmp(v, y) != 0, *want_y = strcmp(v, x) != 0;
    return MF_ARGS_OK;
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
                                         "--kv-dtype", NULL};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (mf_args_is_help(a)) return MF_ARGS_HELP;
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
        if (!strcmp(a, "--mmap")) {
            o->mmap = true;
            continue;
        }
        if (!mf_args_one_of(a, valued)) return mf_args_bad(err, "unknown option %.80s (see minfer generate --help)", a);
        const char *v = NULL;
        mf_args_result r = mf_args_value(argc, argv, &i, &v, err);
        if (r != MF_ARGS_OK) return r;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->dir = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (o->prompt) return mf_args_bad(err, "one prompt only (%s given twice)", a);
            o->prompt = v;
        } else if (!strcmp(a, "-n")) {
            r = mf_args_int(a, v, 0, INT32_MAX, &o->n, err);
        } else if (!strcmp(a, "--temp")) {
            r = mf_args_float(a, v, 0.0, INFINITY, &o->sp.temperature, err);
        } else if (!strcmp(a, "--top-k")) {
            int k = 0;
            r = mf_args_int32(a, v, 0, INT32_MAX, &k, err);
            if (r == MF_ARGS_OK) o->sp.top_k = k;
        } else if (!strcmp(a, "--top-p")) {
            r = mf_args_float(a, v, 0.0, 1.0, &o->sp.top_p, err);
        } else if (!strcmp(a, "--min-p")) {
            r = mf_args_float(a, v, 0.0, 1.0, &o->sp.min_p, err);
        } else if (!strcmp(a, "--repeat-penalty")) {
            r = mf_args_float(a, v, 0.0, INFINITY, &o->sp.repetition_penalty, err);
        } else if (!strcmp(a, "--seed")) {
            if (!u64_of(v, &o->sp.seed)) return mf_args_bad(err, "--seed %.80s: not an integer in [0, 2^64)", v);
            o->seed_given = true;
        } else if (!strcmp(a, "--stop")) {
            if (o->n_stop == MF_ARGS_MAX_STOP) return mf_args_bad(err, "--stop: more than %d stop strings", MF_ARGS_MAX_STOP);
            if (!*v) return mf_args_bad(err, "--stop wants a non-empty string");
            o->stop[o->n_stop++] = v;
        } else if (!strcmp(a, "--backend")) {
            if (!mf_args_backend_ok(v)) return mf_args_bad(err, "--backend %.80s: not auto, cpu or cuda", v);
            o->backend = v;
        } else if (!strcmp(a, "--dtype")) {
            if (!model_dtype_of(v, &o->dtype, &o->dtype_auto))
                return mf_args_bad(err, "--dtype %.80s: not auto, bf16, f16 or f32", v);
        } else if (!strcmp(a, "--kv-dtype")) {
            if (!mf_args_kv_dtype_ok(v)) return mf_args_bad(err, "--kv-dtype %.80s: not auto, f32, f16 or bf16", v);
            o->kv_dtype = v;
        }
        if (r != MF_ARGS_OK) return r;
    }
    if (!o->dir) return mf_args_bad(err, "give the model with -m DIR (see minfer generate --help)");
    if (!o->prompt) return mf_args_bad(err, "give the prompt with -p TEXT (see minfer generate --help)");
    return MF_ARGS_OK;
}

// ---- the model options of score, info and bench model ----------------------------------------------

mf_args_result mf_args_model_set(mf_model_args *o, const char *a, const char *v, char *err) {
    if (!strcmp(a, "--no-graphs")) {
        o->no_graphs = true;
    } else if (!strcmp(a, "--host-argmax")) {
        o->host_argmax = true;
    } else if (!strcmp(a, "--mmap")) {
        o->mmap = true;
    } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        o->dir = v;
    } else if (!strcmp(a, "--synthetic")) {
        o->synthetic = v;
    } else if (!strcmp(a, "--backend")) {
        if (!mf_args_backend_ok(v)) return mf_args_bad(err, "--backend %.80s: not auto, cpu or cuda", v);
        o->backend = v;
    } else if (!strcmp(a, "--seed")) {
        if (!u64_of(v, &o->seed)) return mf_args_bad(err, "--seed %.80s: not an integer in [0, 2^64)", v);
    } else if (!strcmp(a, "--attn")) {
        o->attn = v;
    } else if (!strcmp(a, "--kv-dtype")) {
        if (!mf_args_kv_dtype_ok(v)) return mf_args_bad(err, "--kv-dtype %.80s: not auto, f32, f16 or bf16", v);
        o->kv_dtype = v;
    } else if (!strcmp(a, "--topk")) {
        int64_t k;
        if (!int_in(v, 1, MF_TOPK_MAX, &k)) return mf_args_bad(err, "--topk %.80s: not an integer in [1, %d]", v, MF_TOPK_MAX);
        o->topk = (int32_t)k;
    } else if (!model_dtype_of(v, &o->dtype, &o->dtype_auto)) { // --dtype
        return mf_args_bad(err, "--dtype %.80s: not auto, bf16, f16 or f32", v);
    }
    return MF_ARGS_OK;
}

mf_args_result mf_args_model_opt(int argc, char **argv, int *i, mf_model_args *o, bool *taken, char *err) {
    static const char *const valued[] = {MF_ARGS_MODEL_VALUED, NULL}, *const flags[] = {MF_ARGS_MODEL_FLAGS, NULL};
    const char *a = argv[*i], *v = NULL;
    const bool has_value = mf_args_one_of(a, valued);
    *taken = has_value || mf_args_one_of(a, flags);
    if (!*taken) return MF_ARGS_OK;
    if (has_value && mf_args_value(argc, argv, i, &v, err)) return MF_ARGS_BAD;
    return mf_args_model_set(o, a, v, err);
}

// ---- score ------------------------------------------------------------------------------------------

// "1,2,3" -> ids in [0, 2^31).
static mf_args_result parse_ids(const char *s, mf_score_opts *o, char *err) {
    int64_t n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    o->ids = malloc((size_t)n * sizeof *o->ids);
    if (!o->ids) return mf_args_bad(err, "--tokens: out of memory for %lld ids", (long long)n);
    const char *p = s;
    for (int64_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        const long long v = strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end) || errno || v < 0 || v > INT32_MAX) {
            const size_t len = strcspn(p, ",");
            return mf_args_bad(err, "--tokens: item %lld '%.*s' is not a token id in [0, 2147483647]", (long long)i,
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
        if (mf_args_model_opt(argc, argv, &i, &o->model, &taken, err)) return MF_ARGS_BAD;
        if (taken) continue;
        if (mf_args_is_help(a)) return MF_ARGS_HELP;
        if (!strcmp(a, "--bos") || !strcmp(a, "--no-bos")) {
            o->bos = !strcmp(a, "--bos");
            continue;
        }
        if (!strcmp(a, "-p") || !strcmp(a, "--tokens") || !strcmp(a, "--logits-out")) {
            const char *v = NULL;
            if (mf_args_value(argc, argv, &i, &v, err)) return MF_ARGS_BAD;
            if (!strcmp(a, "-p")) o->text = v;
            else if (!strcmp(a, "--tokens")) tokens = v;
            else o->logits_out = v;
            continue;
        }
        return mf_args_bad(err, "unknown option %.80s (see minfer score --help)", a);
    }
    if (!o->model.dir && !o->model.synthetic) return mf_args_bad(err, "give the model with -m DIR (see minfer score --help)");
    if (!o->text == !tokens)
        return mf_args_bad(err, "give exactly one of -p TEXT and --tokens LIST (see minfer score --help)");
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
        if (mf_args_model_opt(argc, argv, &i, &o->model, &taken, err)) return MF_ARGS_BAD;
        if (taken) continue;
        if (mf_args_is_help(a)) return MF_ARGS_HELP;
        if (!strcmp(a, "--batch") || !strcmp(a, "--seq")) {
            const char *v = NULL;
            if (mf_args_value(argc, argv, &i, &v, err) || mf_args_int(a, v, 1, INT32_MAX, !strcmp(a, "--batch") ? &o->batch : &o->seq, err))
                return MF_ARGS_BAD;
            continue;
        }
        return mf_args_bad(err, "unknown option %.80s (see minfer info --help)", a);
    }
    if (!o->model.dir && !o->model.synthetic)
        return mf_args_bad(err, "give the model with -m DIR or --synthetic PRESET (see minfer info --help)");
    return MF_ARGS_OK;
}

