// `minfer bench serve`: the serving engine offline, with the metric
// definitions of vLLM's serving benchmark. N requests with prompt and output
// lengths drawn uniformly from ranges (seeded; random token ids, greedy,
// EOS ignored so that each gives its output length) arrive either
//   --concurrency C: C at a time (a new one as soon as one finishes; C = N: all at once), or
//   --rate R:        as a Poisson process of R requests per second (wall clock),
// and one engine (in this process) serves them. Per run:
//   TTFT   time from a request's arrival to its first token,
//   TPOT   per request: (last token - first token) / (output tokens - 1),
//   ITL    every gap between two consecutive tokens of a request,
// each as p50 / p90 / p99 over the requests (ITL: over all gaps), the
// request and output-token throughputs over the run, the KV blocks held at
// the peak, preemptions and prompt tokens served by the prefix cache.
// --shared-prefix N starts every prompt with the same N tokens (a system
// prompt); --no-prefix-cache runs the same without the cache.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cli.h"
#include "minfer/minfer.h"

typedef mf_bench_serve_opts bs_opts;

static void bs_help(FILE *f) {
    fprintf(f,
            "usage: minfer bench serve [-m DIR | --synthetic PRESET] [--requests N] [--concurrency C,...] [--rate R,...]\n"
            "                          [--input-len LO:HI] [--output-len LO:HI] [--shared-prefix N] [--seed S]\n"
            "                          [--kv-blocks N] [--block-size N] [--max-batched-tokens N] [--max-seqs N]\n"
            "                          [--no-prefix-cache] [--backend B] [--dtype D] [--format table|csv|json]\n"
            "                          [--csv FILE] [--json FILE]\n"
            "The serving engine offline (vLLM's serving-benchmark metrics): N requests, prompt and output\n"
            "lengths uniform in the ranges (seeded), greedy, EOS ignored, arriving C at a time\n"
            "(--concurrency; C = N: all at once) or as a Poisson process of R requests/s (--rate). Rows:\n"
            "throughput (requests/s, output tokens/s), TTFT, TPOT and ITL p50/p90/p99 (ms), peak KV\n"
            "blocks, preemptions, prompt tokens from the prefix cache. Default: -m models/minfer-kjv-3m,\n"
            "--requests 64 --concurrency 1,32.\n");
}

static bool range_of(const char *s, int lo_min, int hi_max, int *lo, int *hi) {
    char *end;
    const long a = strtol(s, &end, 10);
    if (end == s || *end != ':') return false;
    const char *t = end + 1;
    const long b = strtol(t, &end, 10);
    if (end == t || *end) return false;
    if (a < lo_min || b < a || b > hi_max) return false;
    *lo = (int)a, *hi = (int)b;
    return true;
}

static mf_args_result bs_option(void *opts, const char *a, const char *v, char *err) {
    bs_opts *o = opts;
    int64_t x;
    if (!strcmp(a, "--no-prefix-cache")) {
        o->eng.no_prefix_cache = true;
        return MF_ARGS_OK;
    }
    if (!strcmp(a, "--requests")) return mf_args_int32(a, v, 1, 100000, &o->requests, err);
    if (!strcmp(a, "--concurrency")) return mf_args_list(a, v, 1, 100000, &o->conc, err);
    if (!strcmp(a, "--rate")) {
        int n = 0;
        for (const char *p = v; *p; n++) {
            if (n == 32) return mf_args_bad(err, "--rate %.80s: more than 32 rates", v);
            char *end;
            const double r = strtod(p, &end);
            // below 0.001 requests/s a run waits for days (1e-320: forever)
            if (end == p || !(r >= 0.001) || !isfinite(r) || (*end && *end != ',') || (*end == ',' && !end[1]))
                return mf_args_bad(err, "--rate %.80s: not a list of request rates >= 0.001", v);
            p = *end ? end + 1 : end;
        }
        if (n == 0) return mf_args_bad(err, "--rate \"\": not a list of request rates >= 0.001");
        o->rates = v;
        return MF_ARGS_OK;
    }
    if (!strcmp(a, "--input-len") || !strcmp(a, "--output-len")) {
        const bool in = a[2] == 'i';
        if (!range_of(v, 1, 1 << 20, in ? &o->in_lo : &o->out_lo, in ? &o->in_hi : &o->out_hi))
            return mf_args_bad(err, "%s %.80s: not LO:HI with 1 <= LO <= HI <= 2^20", a, v);
        return MF_ARGS_OK;
    }
    if (!strcmp(a, "--shared-prefix")) return mf_args_int32(a, v, 0, 1 << 20, &o->shared, err);
    if (!strcmp(a, "--kv-blocks")) {
        const mf_args_result r = mf_args_int(a, v, 1, 1 << 28, &x, err);
        if (r == MF_ARGS_OK) o->eng.kv_blocks = x;
        return r;
    }
    if (!strcmp(a, "--block-size")) return mf_args_int32(a, v, 16, 1024, &o->eng.block_size, err);
    if (!strcmp(a, "--max-batched-tokens")) {
        const mf_args_result r = mf_args_int(a, v, 1, 1 << 20, &x, err);
        if (r == MF_ARGS_OK) o->eng.max_batched_tokens = x;
        return r;
    }
    if (!strcmp(a, "--max-seqs")) return mf_args_int32(a, v, 1, 65536, &o->eng.max_seqs, err);
    return mf_args_model_set(&o->model, a, v, err);
}

static mf_args_result bs_check(void *opts, char *err) {
    bs_opts *o = opts;
    (void)err;
    if (!o->model.dir && !o->model.synthetic) o->model.dir = "models/minfer-kjv-3m";
    if (!o->conc.n && !o->rates) o->conc = (mf_arg_list){.n = 2, .v = {1, 32}};
    return MF_ARGS_OK;
}

// ---- one run --------------------------------------------------------------------------------

typedef struct {
    double arrive, first, last;  // seconds since the run's start (first, last: < 0 until then)
    int64_t n_out;               // tokens received
    uint64_t id;                 // 0: not added yet
} bs_req;

typedef struct {
    double dur, req_s, out_tok_s, in_tok_s;
    double ttft[3], tpot[3], itl[3]; // p50, p90, p99 (ms)
    int64_t kv_peak, preempt, cached, out_tokens;
    double kv_peak_mb;
} bs_result;

static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// p50, p90, p99 of v[0 .. n) (sorted in place), in ms.
static void pct(double *v, int64_t n, double out[3]) {
    static const double q[3] = {0.50, 0.90, 0.99};
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    for (int k = 0; k < 3; k++) out[k] = n ? 1e3 * v[(int64_t)fmin((double)(n - 1), ceil(q[k] * (double)n) - 1)] : NAN;
}

static uint64_t bs_rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// One run: conc > 0 (C at a time) or rate > 0 (Poisson). Prompts and lengths
// from seed, the same for every run of a call.
static int run_one(mf_model *m, const bs_opts *o, int conc, double rate, bs_result *res) {
    mf_model_info info;
    mf_model_get_info(m, &info);
    const int N = o->requests;
    uint64_t rs = o->model.seed;
    int32_t **prompts = calloc((size_t)N, sizeof *prompts);
    int64_t *n_in = calloc((size_t)N, sizeof *n_in), *n_out = calloc((size_t)N, sizeof *n_out);
    bs_req *rq = calloc((size_t)N, sizeof *rq);
    double *itl = NULL, *tmp = calloc((size_t)N, sizeof *tmp);
    int32_t *shared = calloc((size_t)(o->shared > 0 ? o->shared : 1), sizeof *shared);
    mf_engine *e = NULL;
    int rc = 1;
    if (!prompts || !n_in || !n_out || !rq || !tmp || !shared) {
        fprintf(stderr, "minfer: error: bench serve: out of memory\n");
        goto out;
    }
    for (int j = 0; j < o->shared; j++) shared[j] = (int32_t)(bs_rng(&rs) % (uint64_t)info.vocab);
    int64_t total_out = 0;
    for (int i = 0; i < N; i++) {
        n_in[i] = o->shared + o->in_lo + (int64_t)(bs_rng(&rs) % (uint64_t)(o->in_hi - o->in_lo + 1));
        n_out[i] = o->out_lo + (int64_t)(bs_rng(&rs) % (uint64_t)(o->out_hi - o->out_lo + 1));
        total_out += n_out[i];
        prompts[i] = malloc((size_t)n_in[i] * sizeof **prompts);
        if (!prompts[i]) {
            fprintf(stderr, "minfer: error: bench serve: out of memory\n");
            goto out;
        }
        memcpy(prompts[i], shared, (size_t)o->shared * sizeof *shared);
        for (int64_t j = o->shared; j < n_in[i]; j++) prompts[i][j] = (int32_t)(bs_rng(&rs) % (uint64_t)info.vocab);
    }
    itl = calloc((size_t)(total_out > 0 ? total_out : 1), sizeof *itl);
    if (!itl) {
        fprintf(stderr, "minfer: error: bench serve: out of memory\n");
        goto out;
    }
    if (mf_engine_create(m, &o->eng, &e) != MF_OK) {
        mf_cli_fail("bench serve: engine");
        goto out;
    }
    // Poisson arrival times (rate mode), from their own stream so that both modes see the same requests
    uint64_t as = o->model.seed ^ 0xA5A5A5A5ull;
    double t_arrive = 0;
    for (int i = 0; i < N; i++) {
        rq[i].first = rq[i].last = -1;
        if (rate > 0) {
            t_arrive += -log(((double)(bs_rng(&as) >> 11) + 0.5) / 9007199254740992.0) / rate;
            rq[i].arrive = t_arrive;
        }
    }
    const double t0 = mf_cli_now();
    int next = 0, done = 0, in_flight = 0;
    int64_t n_itl = 0;
    while (done < N) {
        double now = mf_cli_now() - t0;
        while (next < N && (rate > 0 ? rq[next].arrive <= now : in_flight < conc)) { // arrivals
            const mf_request_params p = {.prompt = prompts[next], .n_prompt = n_in[next], .max_tokens = n_out[next],
                                         .ignore_eos = true, .no_text = true};
            if (rate <= 0) rq[next].arrive = now;
            if (mf_engine_add_request(e, &p, &rq[next].id) != MF_OK) {
                mf_cli_fail("bench serve: request %d", next);
                goto out;
            }
            next++, in_flight++;
        }
        if (in_flight == 0) { // Poisson: idle until the next arrival
            const double wait = rq[next].arrive - now;
            if (wait > 0) nanosleep(&(struct timespec){.tv_sec = (time_t)wait, .tv_nsec = (long)((wait - floor(wait)) * 1e9)}, NULL);
            continue;
        }
        mf_engine_step_result r;
        if (mf_engine_step(e, &r) != MF_OK) {
            mf_cli_fail("bench serve: step");
            goto out;
        }
        now = mf_cli_now() - t0;
        mf_engine_stats st;
        mf_engine_get_stats(e, &st);
        if (st.kv_blocks_used > res->kv_peak) res->kv_peak = st.kv_blocks_used;
        for (int32_t k = 0; k < r.n_events; k++) {
            const mf_engine_event *ev = &r.events[k];
            int i = 0;
            while (rq[i].id != ev->id) i++; // requests are few; arrivals in order
            bs_req *q = &rq[i];
            if (ev->token >= 0) {
                if (q->first < 0) q->first = now;
                else itl[n_itl++] = now - q->last;
                q->last = now, q->n_out++;
            }
            if (ev->finish != MF_FINISH_NONE) {
                done++, in_flight--;
                mf_engine_release(e, ev->id);
            }
        }
    }
    res->dur = mf_cli_now() - t0;
    int64_t tok_out = 0, tok_in = 0;
    for (int i = 0; i < N; i++) tok_out += rq[i].n_out, tok_in += n_in[i];
    res->out_tokens = tok_out;
    res->req_s = N / res->dur, res->out_tok_s = (double)tok_out / res->dur, res->in_tok_s = (double)tok_in / res->dur;
    for (int i = 0; i < N; i++) tmp[i] = rq[i].first - rq[i].arrive;
    pct(tmp, N, res->ttft);
    int64_t nt = 0;
    for (int i = 0; i < N; i++)
        if (rq[i].n_out > 1) tmp[nt++] = (rq[i].last - rq[i].first) / (double)(rq[i].n_out - 1);
    pct(tmp, nt, res->tpot);
    pct(itl, n_itl, res->itl);
    mf_engine_stats st;
    mf_engine_get_stats(e, &st);
    res->preempt = st.preemptions, res->cached = st.cached_tokens;
    res->kv_peak_mb = (double)res->kv_peak * (double)st.kv_bytes / (double)st.kv_blocks / 1e6;
    rc = 0;
out:
    mf_engine_free(e);
    for (int i = 0; prompts && i < N; i++) free(prompts[i]);
    free(prompts), free(n_in), free(n_out), free(rq), free(itl), free(tmp), free(shared);
    return rc;
}

static int bs_run(void *opts) {
    const bs_opts *o = opts;
    mf_backend *be;
    mf_model *m;
    if (mf_cli_open_model(&o->model, true, &be, &m)) return 1;
    int rc = 1;
    mf_bench_timer *timer = NULL;
    mf_bench_table *tab = NULL;
    if (mf_bench_timer_init(be, (size_t)1 << 20, &timer) != MF_OK) {
        mf_cli_fail("bench serve: timer");
        goto out;
    }
    char device[256], date[32];
    mf_bench_device_name(timer, device, sizeof device);
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    static const char *const cols[] = {"model", "backend", "mode", "value", "requests", "in_len", "out_len", "prefix",
                                       "prefix_cache", "dur_s", "req/s", "out_tok/s", "ttft_p50_ms", "ttft_p90_ms",
                                       "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "itl_p50_ms",
                                       "itl_p90_ms", "itl_p99_ms", "kv_peak_blocks", "kv_peak_MB", "preemptions",
                                       "cached_tokens", "device", "commit", "date"};
    enum { NC = sizeof cols / sizeof cols[0] };
    tab = mf_bench_table_new(NC, cols);
    if (!tab) {
        fprintf(stderr, "minfer: error: bench serve: out of memory\n");
        goto out;
    }
    static const char *const hide[] = {"device", "commit", "date", "itl_p90_ms", "tpot_p90_ms", "ttft_p90_ms"};
    for (int k = 0; k < 6; k++) mf_bench_table_hide_in_table(tab, hide[k]);
    mf_model_info in;
    mf_model_get_info(m, &in);
    const char *model_name = o->model.synthetic ? o->model.synthetic : in.source;
    // the runs: each concurrency, then each rate
    double rates[32];
    int n_rates = 0;
    for (const char *p = o->rates; p && *p && n_rates < 32;) {
        char *end;
        rates[n_rates++] = strtod(p, &end);
        p = *end ? end + 1 : end;
    }
    const int n_runs = o->conc.n + n_rates;
    for (int run = 0; run < n_runs; run++) {
        const int conc = run < o->conc.n ? (int)o->conc.v[run] : 0;
        const double rate = run < o->conc.n ? 0 : rates[run - o->conc.n];
        fprintf(stderr, "minfer: bench serve: [%d/%d] %d requests, %s %g\n", run + 1, n_runs, o->requests,
                conc ? "concurrency" : "rate", conc ? (double)conc : rate);
        bs_result res = {0};
        if (run_one(m, o, conc, rate, &res)) goto out;
        char c[NC][64];
        snprintf(c[0], 64, "%s", model_name);
        snprintf(c[1], 64, "%s", mf_backend_name(be));
        snprintf(c[2], 64, "%s", conc ? "concurrency" : "rate");
        snprintf(c[3], 64, "%g", conc ? (double)conc : rate);
        snprintf(c[4], 64, "%d", o->requests);
        snprintf(c[5], 64, "%d:%d", o->in_lo, o->in_hi);
        snprintf(c[6], 64, "%d:%d", o->out_lo, o->out_hi);
        snprintf(c[7], 64, "%d", o->shared);
        snprintf(c[8], 64, "%s", o->eng.no_prefix_cache ? "off" : "on");
        mf_bench_fmt(c[9], 64, res.dur, 2);
        mf_bench_fmt(c[10], 64, res.req_s, 2);
        mf_bench_fmt(c[11], 64, res.out_tok_s, 1);
        for (int k = 0; k < 3; k++) {
            mf_bench_fmt(c[12 + k], 64, res.ttft[k], 2);
            mf_bench_fmt(c[15 + k], 64, res.tpot[k], 2);
            mf_bench_fmt(c[18 + k], 64, res.itl[k], 2);
        }
        snprintf(c[21], 64, "%lld", (long long)res.kv_peak);
        mf_bench_fmt(c[22], 64, res.kv_peak_mb, 2);
        snprintf(c[23], 64, "%lld", (long long)res.preempt);
        snprintf(c[24], 64, "%lld", (long long)res.cached);
        snprintf(c[25], 64, "%.63s", device);
        snprintf(c[26], 64, "%s", mf_build_commit);
        snprintf(c[27], 64, "%s", date);
        const char *cells[NC];
        for (int k = 0; k < NC; k++) cells[k] = c[k];
        if (!mf_bench_table_add(tab, cells)) {
            fprintf(stderr, "minfer: error: bench serve: out of memory\n");
            goto out;
        }
    }
    if (o->com.fmt == MF_BENCH_TABLE)
        printf("# %s, %s, commit %s, %s; ms; TTFT/TPOT/ITL as vLLM's bench serve defines them\n", model_name, device,
               mf_build_commit, date);
    mf_bench_table_print(tab, o->com.fmt, stdout);
    rc = mf_bench_table_write_files(tab, o->com.csv, o->com.json, "bench serve");
out:
    mf_bench_table_free(tab);
    mf_bench_timer_free(timer);
    mf_model_free(m);
    mf_backend_free(be);
    return rc;
}

const mf_bench_def mf_bench_serve = {
    .name = "serve", .opts_size = sizeof(bs_opts),
    .about = "the serving engine offline: throughput, TTFT, TPOT, ITL at a concurrency or a Poisson rate",
    .common = MF_BENCH_OPT_FORMAT | MF_BENCH_OPT_CSV | MF_BENCH_OPT_JSON,
    .defaults = &(const bs_opts){.model = {.dtype = MF_DTYPE_BF16, .dtype_auto = true, .seed = 1}, .requests = 64,
                                 .in_lo = 16, .in_hi = 128, .out_lo = 16, .out_hi = 64},
    .valued = (const char *const[]){MF_ARGS_MODEL_VALUED, "--requests", "--concurrency", "--rate", "--input-len",
                                    "--output-len", "--shared-prefix", "--kv-blocks", "--block-size",
                                    "--max-batched-tokens", "--max-seqs", NULL},
    .flags = (const char *const[]){MF_ARGS_MODEL_FLAGS, "--no-prefix-cache", NULL},
    .option = bs_option, .check = bs_check, .help = bs_help, .run = bs_run,
};
