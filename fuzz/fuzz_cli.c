// libFuzzer target: the CLI's option parsers (tools/cli_args.c and every
// bench of tools/bench.h's table, through mf_bench_parse) on argument
// vectors. The input is split at NUL bytes into arguments, each copied into a
// heap block of its exact size (ASan then sees any read past an argument),
// and every parser runs on the same vector: generate, score, info and each
// bench (its options in a heap block of the record's opts_size). Accepted
// options must hold what the commands rely on; a refusal must come with a
// one-line message; nothing may leak.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define REQUIRE(c)         \
    do {                   \
        if (!(c)) abort(); \
    } while (0)

enum { kMaxArgs = 4096 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool is_argv(char **argv, int argc, const char *s) {
    for (int i = 0; i < argc; i++)
        if (argv[i] == s) return true;
    return false;
}

static bool dtype_ok(mf_dtype d) { return d == MF_DTYPE_BF16 || d == MF_DTYPE_F16 || d == MF_DTYPE_F32; }

static bool backend_ok(const char *b) { return !strcmp(b, "auto") || !strcmp(b, "cpu") || !strcmp(b, "cuda"); }

// A refusal: a message, NUL-terminated within the buffer, on one line.
static void check_err(mf_args_result r, const char *err) {
    REQUIRE(r == MF_ARGS_OK || r == MF_ARGS_HELP || r == MF_ARGS_BAD);
    if (r != MF_ARGS_BAD) return;
    const char *end = memchr(err, 0, MF_ARGS_ERR_CAP);
    REQUIRE(end && end > err);
    for (const char *p = err; p < end; p++) REQUIRE((unsigned char)*p >= 0x20 && *p != 0x7f);
}

static void check_model(const mf_model_args *m, char **argv, int argc) {
    REQUIRE(m->dir || m->synthetic);
    REQUIRE(!m->dir || is_argv(argv, argc, m->dir));
    REQUIRE(!m->backend || backend_ok(m->backend));
    REQUIRE(dtype_ok(m->dtype));
}

static void run_generate(int argc, char **argv, char *err) {
    mf_generate_opts o;
    mf_args_result r = mf_parse_generate_args(argc, argv, &o, err);
    check_err(r, err);
    if (r != MF_ARGS_OK) return;
    REQUIRE(o.dir && o.prompt && is_argv(argv, argc, o.prompt));
    REQUIRE(o.n >= 0 && o.n <= INT32_MAX);
    REQUIRE(isfinite(o.sp.temperature) && o.sp.temperature >= 0);
    REQUIRE(o.sp.top_k >= 0);
    REQUIRE(o.sp.top_p >= 0 && o.sp.top_p <= 1 && o.sp.min_p >= 0 && o.sp.min_p <= 1);
    REQUIRE(isfinite(o.sp.repetition_penalty) && o.sp.repetition_penalty >= 0);
    REQUIRE(o.n_stop >= 0 && o.n_stop <= MF_ARGS_MAX_STOP);
    for (int i = 0; i < o.n_stop; i++) REQUIRE(is_argv(argv, argc, o.stop[i]) && o.stop[i][0]);
    REQUIRE(backend_ok(o.backend) && dtype_ok(o.dtype));
    REQUIRE(o.bos == MF_BOS_AUTO || o.bos == MF_BOS_ADD || o.bos == MF_BOS_NONE);
}

static void run_score(int argc, char **argv, char *err) {
    mf_score_opts o;
    mf_args_result r = mf_parse_score_args(argc, argv, &o, err);
    check_err(r, err);
    if (r != MF_ARGS_OK) {
        REQUIRE(o.ids == NULL); // nothing left to free
        return;
    }
    check_model(&o.model, argv, argc);
    REQUIRE(!o.text != !o.ids);
    if (o.ids) {
        REQUIRE(o.n_ids >= 1);
        for (int64_t i = 0; i < o.n_ids; i++) REQUIRE(o.ids[i] >= 0);
    }
    REQUIRE(o.bos >= -1 && o.bos <= 1);
    mf_score_opts_free(&o);
}

static void run_info(int argc, char **argv, char *err) {
    mf_info_opts o;
    mf_args_result r = mf_parse_info_args(argc, argv, &o, err);
    check_err(r, err);
    if (r != MF_ARGS_OK) return;
    check_model(&o.model, argv, argc);
    REQUIRE(o.batch >= 1 && o.batch <= INT32_MAX);
    REQUIRE(o.seq >= 0 && o.seq <= INT32_MAX);
}

// What every op bench's options must hold.
static void check_common(const mf_bench_common_opts *c) {
    REQUIRE(backend_ok(c->backend) && dtype_ok(c->dt));
    REQUIRE(c->warmup == -1 || (c->warmup >= 0 && c->warmup <= 1000000));
    REQUIRE(c->iters == -1 || (c->iters >= 1 && c->iters <= 1000000));
    REQUIRE(c->max_mb == -1 || (isfinite(c->max_mb) && c->max_mb >= 0));
    REQUIRE(c->fmt == MF_BENCH_TABLE || c->fmt == MF_BENCH_CSV || c->fmt == MF_BENCH_JSON);
}

// A shape list within [lo, hi].
static bool list_ok(const mf_arg_list *l, int64_t lo, int64_t hi) {
    if (l->n < 0 || l->n > MF_ARGS_MAX_LIST) return false;
    for (int i = 0; i < l->n; i++)
        if (l->v[i] < lo || l->v[i] > hi) return false;
    return true;
}

static void check_bench_softmax(const mf_bench_softmax_opts *o) {
    REQUIRE(isfinite(o->scale) && !o->com.no_gemm);
    REQUIRE((o->fused || o->unfused) && (o->grid || o->sweep));
    REQUIRE(list_ok(&o->batch, 1, INT32_MAX) && list_ok(&o->heads, 1, INT32_MAX) && list_ok(&o->seq, 1, INT32_MAX));
    const bool listed = o->batch.n || o->heads.n || o->seq.n;
    REQUIRE(!(listed && o->com.full) && !(listed && !o->grid));
}

static void check_bench_attention(const mf_bench_attention_opts *o) {
    REQUIRE((o->prefill || o->decode) && (o->causal || o->noncausal) && o->num_splits >= 0 && o->num_splits <= 256);
    REQUIRE(list_ok(&o->batch, 1, INT32_MAX) && list_ok(&o->seq, 1, INT32_MAX) && list_ok(&o->heads, 1, 65535) &&
            list_ok(&o->kv_heads, 1, 65535) && list_ok(&o->head_dim, 1, 65535));
    REQUIRE(!((o->batch.n || o->seq.n || o->heads.n || o->kv_heads.n || o->head_dim.n) && o->com.full));
}

static void check_bench_moe(const mf_bench_moe_opts *o) {
    REQUIRE((o->prefill || o->decode) && (o->even || o->zipf) && (o->seq == -1 || (o->seq >= 1 && o->seq <= 65536)));
    REQUIRE(list_ok(&o->experts, 1, 256) && list_ok(&o->top_k, 1, 256) && list_ok(&o->hidden, 8, 65536) &&
            list_ok(&o->batch, 1, 65536));
    for (int i = 0; i < o->hidden.n; i++) REQUIRE(o->hidden.v[i] % 8 == 0);
    REQUIRE(!((o->experts.n || o->top_k.n || o->hidden.n || o->batch.n) && o->com.full));
}

static void check_bench_topk(const mf_bench_topk_opts *o) {
    REQUIRE(list_ok(&o->vocab, 1, INT32_MAX) && list_ok(&o->batch, 1, INT32_MAX) && list_ok(&o->k, 1, MF_TOPK_MAX));
    REQUIRE(o->n_dt >= 1 && o->n_dt <= 3 && isfinite(o->scale) && o->scale > 0 && o->com.max_mb == -1 && !o->com.no_gemm);
    for (int i = 0; i < o->n_dt; i++) {
        REQUIRE(dtype_ok(o->dts[i]));
        for (int j = 0; j < i; j++) REQUIRE(o->dts[j] != o->dts[i]);
    }
}

static void check_bench_gemv(const mf_bench_gemv_opts *o) {
    REQUIRE(o->m >= 0 && o->m <= 8 && !o->com.full && !o->com.no_gemm && !o->com.dt_given && o->com.max_mb == -1);
    REQUIRE(!o->shapes || !strcmp(o->shapes, "tiny") || !strcmp(o->shapes, "tinyllama") || !strcmp(o->shapes, "smollm2"));
}

static void check_bench_model(const mf_bench_model_opts *o, char **argv, int argc) {
    check_model(&o->model, argv, argc);
    REQUIRE(o->gen >= 1 && o->gen <= 4096 && o->iters >= 0 && o->iters <= 100000);
    REQUIRE(list_ok(&o->batch, 1, INT32_MAX) && list_ok(&o->seq, 1, INT32_MAX));
}

static void check_bench_gemm_host(const mf_bench_gemm_host_opts *o) {
    REQUIRE(o->m >= 1 && o->m <= 4096 && o->reps >= 1 && o->reps <= 100000);
}

static void check_bench_serve(const mf_bench_serve_opts *o, char **argv, int argc) {
    mf_model_args m = o->model; // no -m, no --synthetic: the default model's folder
    if (m.dir && !strcmp(m.dir, "models/minfer-kjv-3m") && !is_argv(argv, argc, m.dir)) m.dir = NULL, m.synthetic = "x";
    check_model(&m, argv, argc);
    REQUIRE(o->requests >= 1 && o->requests <= 100000 && o->shared >= 0 && o->shared <= (1 << 20));
    REQUIRE(o->in_lo >= 1 && o->in_lo <= o->in_hi && o->in_hi <= (1 << 20));
    REQUIRE(o->out_lo >= 1 && o->out_lo <= o->out_hi && o->out_hi <= (1 << 20));
    REQUIRE(list_ok(&o->conc, 1, 100000) && (o->conc.n > 0 || o->rates));
    int n = 0;
    for (const char *p = o->rates; p && *p; n++) { // what bs_run parses again
        char *end;
        const double r = strtod(p, &end);
        REQUIRE(end != p && r >= 0.001 && isfinite(r) && ((*end == ',' && end[1]) || !*end));
        p = *end ? end + 1 : end;
    }
    REQUIRE(n <= 32 && (!o->rates || n >= 1));
    REQUIRE(o->eng.kv_blocks >= 0 && o->eng.max_batched_tokens >= 0 && o->eng.max_seqs >= 0);
    REQUIRE(o->eng.block_size == 0 || (o->eng.block_size >= 16 && o->eng.block_size <= 1024));
}

// Every bench of the table: the common options, then its own.
static void run_benches(int argc, char **argv, char *err) {
    for (int k = 0; mf_benches[k]; k++) {
        const mf_bench_def *d = mf_benches[k];
        void *o = malloc(d->opts_size);
        REQUIRE(o);
        const mf_args_result r = mf_bench_parse(d, argc, argv, o, err);
        check_err(r, err);
        if (r == MF_ARGS_OK) {
            const mf_bench_common_opts *c = o;
            check_common(c);
            if (!(d->common & MF_BENCH_OPT_DTYPE)) REQUIRE(!c->dt_given);
            if (!(d->common & MF_BENCH_OPT_FULL)) REQUIRE(!c->full);
            if (!(d->common & MF_BENCH_OPT_MAX_MB)) REQUIRE(c->max_mb == -1);
            if (!(d->common & MF_BENCH_OPT_NO_GEMM)) REQUIRE(!c->no_gemm);
            if (d == &mf_bench_softmax) check_bench_softmax(o);
            else if (d == &mf_bench_attention) check_bench_attention(o);
            else if (d == &mf_bench_moe) check_bench_moe(o);
            else if (d == &mf_bench_topk) check_bench_topk(o);
            else if (d == &mf_bench_gemv) check_bench_gemv(o);
            else if (d == &mf_bench_gemm_host) check_bench_gemm_host(o);
            else if (d == &mf_bench_model) check_bench_model(o, argv, argc);
            else if (d == &mf_bench_serve) check_bench_serve(o, argv, argc);
            else REQUIRE(!"a bench without checks in fuzz_cli.c");
        }
        free(o);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // argv[0 .. argc) are the pieces between NUL bytes (a trailing empty piece
    // is kept: "" is an argument too; no input: argc 0); argv[argc] = NULL as in main().
    int argc = size > 0;
    for (size_t i = 0; i < size; i++) argc += data[i] == 0;
    if (argc > kMaxArgs) return 0;
    char **argv = calloc((size_t)argc + 1, sizeof *argv);
    REQUIRE(argv);
    const uint8_t *p = data, *end = data + size;
    for (int i = 0; i < argc; i++) {
        const uint8_t *z = memchr(p, 0, (size_t)(end - p));
        const size_t len = z ? (size_t)(z - p) : (size_t)(end - p);
        argv[i] = malloc(len + 1);
        REQUIRE(argv[i]);
        memcpy(argv[i], p, len);
        argv[i][len] = 0;
        p += len + (z != NULL);
    }
    char err[MF_ARGS_ERR_CAP];
    run_generate(argc, argv, err);
    run_score(argc, argv, err);
    run_info(argc, argv, err);
    run_benches(argc, argv, err);
    for (int i = 0; i < argc; i++) free(argv[i]);
    free(argv);
    return 0;
}
