// `minfer bench model`: the end-to-end model benchmark (prefill latency and
// throughput, time to first token, decode steps against the weight-bandwidth
// roofline, memory) and, with --profile, the per-op profile (profiler.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench.h"
#include "cli.h"
#include "profiler.h"

typedef mf_bench_model_opts bm_opts; // parsed by mf_bench_parse with the options below

static double mb(int64_t bytes) { return (double)bytes / 1e6; }

static void bm_help(FILE *f) {
    fprintf(f,
            "usage: minfer bench model [options]\n"
            "  Forward latency of a prefill (batch x seq new tokens, the last token's logits per\n"
            "  sequence), prefill tokens/s, time to first token (prefill + the first greedy tokens),\n"
            "  decode tokens/s (single-token steps after the prefill, median step), the decode\n"
            "  roofline: the bytes a step reads (its weights and the KV cache it attends over, the\n"
            "  mean of the gen steps) over the bandwidth measured in the same run (CUDA: a device\n"
            "  copy, read + write; CPU: a read stream on the decode's threads over a buffer of the\n"
            "  step's weight bytes, at most 256 MB, best of rounds before and after each size: a\n"
            "  decode step reads these and writes little, so %%roof stays <= 100), the prefill's\n"
            "  TFLOP/s and %% of a square GEMM measured in the same run, and memory (weights + session:\n"
            "  KV cache and scratch).\n"
            "  --synthetic PRESET   small (default), medium, large, llama-7b, tiny, moe-small (the brief's\n"
            "                       post-norm MoE model: Small with 8 GELU experts, top-2): seeded random weights\n"
            "                       (MoE: roof_tok/s counts the experts a step selects on average, even routing)\n"
            "  -m DIR               a checkpoint instead\n"
            "  --batch LIST         comma-separated (CPU default 1; CUDA default 1,4,8,16,32)\n"
            "  --seq LIST           prompt lengths (CPU default 128; CUDA default 128,512,2048,8192)\n"
            "  --gen N              decode steps after each prefill (default 16)\n"
            "  --iters N            timed repetitions (default 3; CUDA 5) after one warm-up\n"
            "  --format F           table (default: markdown), csv or json\n"
            "  --profile            per-op time breakdown of one prefill and one decode step\n"
            "                       (CUDA events around each op on CUDA, wall clock on the CPU)\n"
            "  --backend B          auto (default), cpu or cuda\n"
            "  --dtype D            auto (default: CUDA bf16; CPU keeps a checkpoint's f16/bf16 weights,\n"
            "                       synthetic f32), bf16, f16 or f32 (CPU: its weights' storage)\n"
            "  --kv-dtype D         the KV cache: auto (default: CUDA the activations' dtype, CPU f32), f32,\n"
            "                       f16 or bf16 (CPU only; column kv_dtype)\n"
            "  --mmap               CPU: weights in place from the checkpoint's file mapping (fast load)\n"
            "                       instead of copied at load (the default: q|k|v, gate|up stacked)\n"
            "  --attn A             attention: flash (mf_attention over the KV cache; default) or classic\n"
            "                       (QK^T GEMM, softmax, PV GEMM: the reference and the \"before\")\n"
            "  --no-graphs          decode steps launch their ops (default on CUDA: one CUDA Graph per step)\n"
            "  --host-argmax        greedy tokens from logits copied to the host (default: the argmax runs on\n"
            "                       the device, mf_session_forward_greedy; column argmax says which)\n"
            "  --topk K             decode steps return K top-k candidates per sequence and the row sums,\n"
            "                       as sampling with top_k K (or top-p: K 1024) does (mf_session_forward_topk);\n"
            "                       the token is the best candidate, so the sequence is the greedy one;\n"
            "                       column argmax says topkK\n"
            "  Decode columns: dec_ops = ops per step (a graph counts the ops it recorded), dec_launches =\n"
            "  host-side launches per step (1 with a graph), dec_host_us = host time per step until all is queued.\n"
            "  --seed N             seed of the synthetic weights (default 1)\n"
            "  Sizes whose session does not fit are reported on stderr and skipped.\n");
}

typedef struct {
    mf_session *s;
    int32_t B;
    int64_t S;
    const int32_t *prompt; // (B * S)
    int64_t *off;          // (B + 1)
    int32_t *slots, *cur;  // (B)
    int64_t *off1;         // (B + 1): 0, 1, 2, ...
    float *logits;         // (B, vocab)
    float *vals;           // (B) max logits (device argmax)
    bool host_argmax;      // logits to the host and argmax there (else mf_session_forward_greedy)
    int32_t topk;          // > 0: decode steps through mf_session_forward_topk with this k
    int32_t *c_ids;        // (B, topk) candidates
    float *c_vals;         // (B, topk)
    float *c_stats;        // (B, 2)
    int32_t vocab;
    int64_t dec_ops, dec_launches; // the last decode step's ops (a graph: those it recorded) and host launches
    double dec_host_us;    // the last decode step's host time until all was queued
    bool dec_graph;        // the last decode step replayed a CUDA Graph
    bool graphs_told;      // the reason graphs went off was printed
} bench_run;

static int32_t argmax_row(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

// Prefill of all B prompts (*fwd: the forward call, logits on the host) and
// the first greedy token of each (*ttft: from the call to the tokens).
static mf_status run_prefill(bench_run *r, double *fwd, double *ttft) {
    mf_status st = mf_session_reset(r->s, -1);
    const double t0 = mf_cli_now();
    if (st == MF_OK && !r->host_argmax) {
        st = mf_session_forward_greedy(r->s, r->B, r->slots, r->prompt, r->off, r->cur, r->vals);
        *fwd = *ttft = mf_cli_now() - t0;
        return st;
    }
    if (st == MF_OK) st = mf_session_forward(r->s, r->B, r->slots, r->prompt, r->off, MF_LOGITS_LAST, r->logits);
    *fwd = mf_cli_now() - t0;
    for (int32_t i = 0; st == MF_OK && i < r->B; i++) r->cur[i] = argmax_row(r->logits + (int64_t)i * r->vocab, r->vocab);
    *ttft = mf_cli_now() - t0;
    return st;
}

static mf_status run_decode_step(bench_run *r, double *secs) {
    const double t0 = mf_cli_now();
    mf_status st;
    if (r->host_argmax) {
        st = mf_session_forward(r->s, r->B, r->slots, r->cur, r->off1, MF_LOGITS_LAST, r->logits);
        for (int32_t i = 0; st == MF_OK && i < r->B; i++) r->cur[i] = argmax_row(r->logits + (int64_t)i * r->vocab, r->vocab);
    } else if (r->topk > 0) { // the sampling path: the best candidate is the next token
        st = mf_session_forward_topk(r->s, r->B, r->slots, r->cur, r->off1, r->topk, 1.0f, r->c_ids, r->c_vals,
                                     r->c_stats);
        for (int32_t i = 0; st == MF_OK && i < r->B; i++) r->cur[i] = r->c_ids[(int64_t)i * r->topk];
    } else { // the ids come back into cur once the step's tokens have been read
        st = mf_session_forward_greedy(r->s, r->B, r->slots, r->cur, r->off1, r->cur, r->vals);
    }
    *secs = mf_cli_now() - t0;
    mf_session_stats ss;
    if (st == MF_OK && mf_session_get_stats(r->s, &ss) == MF_OK) {
        r->dec_ops = ss.ops, r->dec_launches = ss.launches, r->dec_host_us = ss.host_us, r->dec_graph = ss.graph;
        if (ss.graphs_off[0] && !r->graphs_told) {
            fprintf(stderr, "minfer: bench model: decode graphs turned off: %s\n", ss.graphs_off);
            r->graphs_told = true;
        }
    }
    return st;
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1e3; // Linux: kilobytes
}

// Weight bytes a decode step of B sequences reads: all of them for a dense
// model; with experts the dense part plus the experts the step's B tokens
// select, E (1 - (1 - k/E)^B) per layer on average under even routing (a
// real router's skew touches fewer distinct experts: a higher roofline).
static double step_weight_bytes(const mf_model_info *in, int32_t B) {
    const int64_t E = in->n_experts, k = in->top_k;
    if (E <= 0 || E == k || in->n_params <= 0) return (double)in->weight_bytes;
    const double per_param = (double)in->weight_bytes / (double)in->n_params;
    const double one = (double)(in->n_params - in->n_active_params) / (double)(E - k); // one expert, all layers
    const double dense = (double)in->n_params - (double)E * one;
    const double used = (double)E * (1.0 - pow(1.0 - (double)k / (double)E, (double)B));
    return per_param * (dense + used * one);
}

// KV-cache bytes a decode step of B sequences reads, on average over the
// gen steps after a prompt of S tokens: step k attends over S + k + 1 keys
// (the last sliding_window of them when the model slides), K and V of every
// layer. A decode step must read these as well as its weights (at context
// 1024 SmolLM2's f32 cache is 84 MB against 724 MB of weights).
static double step_kv_bytes(const mf_model_info *in, int32_t B, int64_t S, int gen) {
    double keys = 0;
    const int64_t w = in->sliding_window;
    for (int k = 0; k < gen; k++) keys += (double)(w > 0 && S + k + 1 > w ? w : S + k + 1);
    return gen > 0 ? (double)B * (double)in->kv_bytes_per_token * keys / gen : 0.0;
}

// FLOPs of a prefill of B sequences of S new tokens (empty cache): 2 per
// layer weight per token, the LM head for each sequence's last token, and per
// layer and head 4 D per visible (query, key) pair (QK^T and PV; causal, and
// windowed when the model has a sliding window).
static double prefill_flops(const mf_model_info *in, int32_t B, int64_t S) {
    double pairs = 0;
    const int64_t w = in->sliding_window;
    for (int64_t i = 0; i < S; i++) pairs += (double)(w > 0 && i + 1 > w ? w : i + 1);
    const double attn = 4.0 * in->n_layers * (double)in->n_heads * in->head_dim * pairs;
    return (double)B * (2.0 * (double)S * (double)in->layer_matmul_params + attn + 2.0 * in->vocab * (double)in->hidden);
}

static int bm_run(void *opts) {
    const bm_opts *o = opts;
    const mf_model_args mo = o->model;
    const int gen = o->gen;
    int iters = o->iters;
    const bool profile = o->profile;
    const mf_bench_format fmt = o->com.fmt;

    mf_backend *be;
    mf_model *m;
    fprintf(stderr, "minfer: bench model: building %s%s ...\n", mo.synthetic ? "synthetic " : "",
            mo.synthetic ? mo.synthetic : mo.dir);
    if (mf_cli_open_model(&mo, true, &be, &m)) return 1;
    const bool cuda = mf_backend_device(be) == MF_DEVICE_CUDA;
    if (!cuda && !getenv("OMP_WAIT_POLICY")) // measured: 4-10x slower decode on a loaded 2-core box without it
        fprintf(stderr, "minfer: bench model: note: OMP_WAIT_POLICY is not set; OpenMP threads spinning between ops "
                        "take the cores from OpenBLAS's threads: run with OMP_WAIT_POLICY=PASSIVE for CPU figures\n");
    // --batch / --seq as given, else the backend's defaults.
    static const int64_t cuda_batches[] = {1, 4, 8, 16, 32}, cuda_seqs[] = {128, 512, 2048, 8192}, cpu_one[] = {1},
                         cpu_seqs[] = {128};
    const int64_t *batches = o->batch.n ? o->batch.v : cuda ? cuda_batches : cpu_one;
    const int64_t *seqs = o->seq.n ? o->seq.v : cuda ? cuda_seqs : cpu_seqs;
    const int nb = o->batch.n ? o->batch.n : cuda ? 5 : 1, ns = o->seq.n ? o->seq.n : cuda ? 4 : 1;
    if (!iters) iters = mf_bench_model.iters[cuda];
    int rc = 1;
    mf_bench_timer *timer = NULL;
    mf_bench_table *tab = NULL, *ptab = NULL;
    mf_profiler *prof = NULL;
    mf_model_info in;
    mf_model_get_info(m, &in);
    if (mf_bench_timer_init(be, (size_t)1 << 20, &timer) != MF_OK) {
        mf_cli_fail("bench model: timer");
        goto out;
    }
    double copy_gbps = 0;
    const size_t copy_bytes = cuda ? (size_t)512 << 20 : (size_t)128 << 20;
    if (mf_bench_copy_gbps(timer, be, copy_bytes, cuda ? 20 : 5, &copy_gbps) != MF_OK) {
        mf_cli_fail("bench model: copy bandwidth");
        goto out;
    }
    // CPU: the read ceiling decode is quoted against, over the bytes a step
    // reads (a model in cache is bounded by the cache's rate), at least 1 MB,
    // at most 256 MB (>> any LLC). Measured again after each size (below).
    double read_gbps = 0;
    const double wbytes = step_weight_bytes(&in, 1);
    const size_t read_bytes = wbytes < (1 << 20) ? (size_t)1 << 20 : wbytes > (256 << 20) ? (size_t)256 << 20 : (size_t)wbytes / 64 * 64;
    if (!cuda && mf_bench_read_gbps(be, read_bytes, 5, &read_gbps) != MF_OK) {
        mf_cli_fail("bench model: read bandwidth");
        goto out;
    }
    // The GEMM ceiling prefill is quoted against (as the op benches: bf16 8192^3 on CUDA, f32 1024^3 on the CPU).
    double gemm_tflops = 0;
    if (mf_bench_gemm_tflops(timer, be, cuda ? 8192 : 1024, cuda ? MF_DTYPE_BF16 : MF_DTYPE_F32, cuda ? 20 : 3,
                             &gemm_tflops) != MF_OK) {
        mf_cli_fail("bench model: GEMM ceiling");
        goto out;
    }
    char device[256], date[32];
    mf_bench_device_name(timer, device, sizeof device);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(stderr, "minfer: bench model: %s, %s, commit %s, weights %.1f MB (%s), copy %.1f GB/s, read %.1f GB/s, GEMM %.3f TFLOP/s\n",
            in.source, device, mf_build_commit, mb(in.weight_bytes), mf_dtype_name(in.dtype), copy_gbps, read_gbps, gemm_tflops);

    static const char *const cols[] = {"model", "backend", "dtype", "attn", "batch", "seq", "fwd_ms", "prefill_tok/s",
                                       "prefill_TFLOP/s", "%gemm", "ttft_ms", "dec_ms", "dec_tok/s", "roof_tok/s",
                                       "%roof", "dec_ops", "dec_launches", "dec_host_us", "graphs", "argmax", "mem_MB",
                                       "rss_MB", "copy_GB/s", "gemm_TFLOP/s", "device", "commit", "date",
                                       "fwd_p5_ms", "fwd_p95_ms", "dec_p5_ms", "dec_p95_ms", "read_GB/s", "kv_dtype"};
    enum { NC = sizeof cols / sizeof cols[0] };
    tab = mf_bench_table_new(NC, cols);
    static const char *const pcols[] = {"bench", "phase", "op",   "calls",  "ms",  "%",
                                        "us/call", "kind", "device", "commit", "date"};
    ptab = mf_bench_table_new(11, pcols);
    const char *const stamp[3] = {device, mf_build_commit, date};
    if (!tab || !ptab) {
        fprintf(stderr, "minfer: error: bench model: out of memory\n");
        goto out;
    }
    // CSV / JSON only: the stamp, the GEMM ceiling (in the "# ..." line) and the spread
    static const char *const hide[] = {"device", "commit", "date", "gemm_TFLOP/s", "fwd_p5_ms", "fwd_p95_ms",
                                       "dec_p5_ms", "dec_p95_ms"};
    for (int k = 0; k < 8; k++) mf_bench_table_hide_in_table(tab, hide[k]);
    for (int k = 0; k < 3; k++) mf_bench_table_hide_in_table(ptab, hide[k]);
    mf_bench_table_hide_in_table(ptab, "kind");
    if (profile && !(prof = mf_profiler_new(cuda, mf_bench_timer_stream(timer)))) {
        fprintf(stderr, "minfer: error: bench model: cannot create the profiler's CUDA events\n");
        goto out;
    }
    const char *model_name = mo.synthetic ? mo.synthetic : in.source;

    for (int bi = 0; bi < nb; bi++) {
        for (int si = 0; si < ns; si++) {
            const int32_t B = (int32_t)batches[bi];
            const int64_t S = seqs[si];
            bench_run r = {.B = B, .S = S, .vocab = in.vocab, .host_argmax = mo.host_argmax,
                           .topk = mo.host_argmax || mo.topk > in.vocab ? 0 : mo.topk};
            int32_t *prompt = malloc((size_t)(B * S) * sizeof *prompt);
            r.prompt = prompt;
            r.off = malloc((size_t)(B + 1) * sizeof *r.off);
            r.off1 = malloc((size_t)(B + 1) * sizeof *r.off1);
            r.slots = malloc((size_t)B * sizeof *r.slots);
            r.cur = malloc((size_t)B * sizeof *r.cur);
            r.logits = malloc((size_t)B * (size_t)in.vocab * sizeof *r.logits);
            r.vals = malloc((size_t)B * sizeof *r.vals);
            r.c_ids = malloc((size_t)B * (size_t)(r.topk + 1) * sizeof *r.c_ids);
            r.c_vals = malloc((size_t)B * (size_t)(r.topk + 1) * sizeof *r.c_vals);
            r.c_stats = malloc((size_t)B * 2 * sizeof *r.c_stats);
            double *ps = calloc((size_t)iters, sizeof *ps), *ts = calloc((size_t)iters, sizeof *ts);
            double *ds = calloc((size_t)(iters * gen), sizeof *ds), *dh = calloc((size_t)(iters * gen), sizeof *dh);
            mf_status st = MF_OK;
            if (!prompt || !r.off || !r.off1 || !r.slots || !r.cur || !r.logits || !r.vals || !r.c_ids || !r.c_vals || !r.c_stats || !ps || !ts || !ds || !dh)
                st = MF_ERR_OOM, fprintf(stderr, "minfer: bench model: batch %d seq %lld: out of host memory\n", B,
                                         (long long)S);
            if (st == MF_OK) {
                uint64_t x = 12345 + (uint64_t)B * 7 + (uint64_t)S;
                for (int64_t i = 0; i < B * S; i++) {
                    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                    prompt[i] = (int32_t)(x % (uint64_t)in.vocab);
                }
                for (int32_t i = 0; i <= B; i++) r.off[i] = (int64_t)i * S, r.off1[i] = i;
                for (int32_t i = 0; i < B; i++) r.slots[i] = i;
                st = mf_session_create(m, B, S + gen, &r.s);
                if (st == MF_OK && mo.no_graphs) st = mf_session_set_graphs(r.s, false);
                if (st != MF_OK)
                    fprintf(stderr, "minfer: bench model: batch %d seq %lld skipped: %s\n", B, (long long)S,
                            mf_last_error());
            }
            for (int it = -1; st == MF_OK && it < iters; it++) { // it == -1: warm-up
                double t, tt;
                st = run_prefill(&r, &t, &tt);
                if (it >= 0) ps[it] = t, ts[it] = tt;
                for (int k = 0; st == MF_OK && k < gen; k++) {
                    st = run_decode_step(&r, &t);
                    if (it >= 0) ds[it * gen + k] = t, dh[it * gen + k] = r.dec_host_us;
                }
                if (st != MF_OK) mf_cli_fail("bench model: forward");
            }
            char id[64];
            snprintf(id, sizeof id, "%s b%d s%lld", model_name, B, (long long)S);
            if (st == MF_OK && profile) { // one prefill and one decode step, bracketed
                const mf_session_profiler hook = mf_profiler_hook(prof);
                double t, tt;
                int64_t dropped = 0;
                mf_session_set_profiler(r.s, &hook);
                mf_profiler_reset(prof);
                st = run_prefill(&r, &t, &tt);
                if (st == MF_OK) dropped += mf_profiler_rows(prof, "prefill", 1e6 * t, ptab, id, stamp);
                mf_profiler_reset(prof);
                if (st == MF_OK) st = run_decode_step(&r, &t);
                if (st == MF_OK) dropped += mf_profiler_rows(prof, "decode", 1e6 * t, ptab, id, stamp);
                if (dropped) fprintf(stderr, "minfer: bench model: profile dropped %lld ops\n", (long long)dropped);
                mf_session_set_profiler(r.s, NULL);
            }
            if (st == MF_OK) {
                const mf_bench_stats pf = mf_bench_stats_of(ps, iters), dc = mf_bench_stats_of(ds, iters * gen);
                const double fwd = pf.p50, ttft = mf_bench_stats_of(ts, iters).p50, dec = dc.p50;
                // CPU: the read ceiling again after this size's runs (the best of all rounds so far)
                if (!cuda && mf_bench_read_gbps(be, read_bytes, 3, &read_gbps) != MF_OK) mf_cli_fail("bench model: read bandwidth");
                const double roof = (double)B * (cuda ? copy_gbps : read_gbps) * 1e9 /
                                    (step_weight_bytes(&in, B) + step_kv_bytes(&in, B, S, gen));
                char c[NC][256];
                const char *cells[NC];
                for (int k = 0; k < NC; k++) cells[k] = c[k];
                snprintf(c[0], 256, "%s", model_name);
                snprintf(c[1], 256, "%s", in.backend);
                snprintf(c[2], 256, "%s", mf_dtype_name(in.dtype));
                snprintf(c[3], 256, "%s", mo.attn ? mo.attn : "flash");
                snprintf(c[4], 256, "%d", B);
                snprintf(c[5], 256, "%lld", (long long)S);
                snprintf(c[6], 256, "%.2f", 1e3 * fwd);
                snprintf(c[7], 256, "%.1f", (double)B * (double)S / fwd);
                const double tf = prefill_flops(&in, B, S) / fwd / 1e12;
                snprintf(c[8], 256, "%.4f", tf);
                snprintf(c[9], 256, "%.1f", 100.0 * tf / gemm_tflops);
                snprintf(c[10], 256, "%.2f", 1e3 * ttft);
                snprintf(c[11], 256, "%.2f", 1e3 * dec);
                snprintf(c[12], 256, "%.1f", (double)B / dec);
                snprintf(c[13], 256, "%.1f", roof);
                snprintf(c[14], 256, "%.1f", 100.0 * ((double)B / dec) / roof);
                snprintf(c[15], 256, "%lld", (long long)r.dec_ops);
                snprintf(c[16], 256, "%lld", (long long)r.dec_launches);
                snprintf(c[17], 256, "%.1f", mf_bench_stats_of(dh, iters * gen).p50);
                snprintf(c[18], 256, "%s", r.dec_graph ? "on" : "off");
                if (r.topk > 0)
                    snprintf(c[19], 256, "topk%d", (int)r.topk);
                else
                    snprintf(c[19], 256, "%s", r.host_argmax ? "host" : "device");
                snprintf(c[20], 256, "%.1f", mb(in.weight_bytes + mf_session_bytes(r.s)));
                snprintf(c[21], 256, "%.1f", cuda ? NAN : peak_rss_mb());
                snprintf(c[22], 256, "%.1f", copy_gbps);
                snprintf(c[23], 256, "%.3f", gemm_tflops);
                snprintf(c[24], 256, "%s", device);
                snprintf(c[25], 256, "%s", mf_build_commit);
                snprintf(c[26], 256, "%s", date);
                snprintf(c[27], 256, "%.2f", 1e3 * pf.p5);
                snprintf(c[28], 256, "%.2f", 1e3 * pf.p95);
                snprintf(c[29], 256, "%.2f", 1e3 * dc.p5);
                snprintf(c[30], 256, "%.2f", 1e3 * dc.p95);
                snprintf(c[31], 256, "%.1f", cuda ? NAN : read_gbps);
                snprintf(c[32], 256, "%s", mf_dtype_name(in.kv_dtype));
                mf_bench_table_add(tab, cells);
                fprintf(stderr, "minfer: bench model: [%d/%d] batch %d seq %lld: prefill %.2f ms (%s%% of GEMM), decode %.2f ms/step (%s%% of roofline)\n",
                        bi * ns + si + 1, nb * ns, B, (long long)S, 1e3 * fwd, c[9], 1e3 * dec, c[14]);
            }
            mf_session_free(r.s);
            free(prompt), free(r.off), free(r.off1), free(r.slots), free(r.cur), free(r.logits), free(r.vals), free(r.c_ids), free(r.c_vals), free(r.c_stats), free(ps), free(ts), free(ds), free(dh);
        }
    }
    char read_note[96];
    snprintf(read_note, sizeof read_note, "%.1f GB/s (a %.0f MB read stream)", read_gbps, (double)read_bytes / 1e6);
    if (fmt == MF_BENCH_TABLE)
        printf("# model on %s (%s), commit %s, %s; copy %.1f GB/s (read + write); %s%s; GEMM ceiling %.3f TFLOP/s "
               "(%s); prefill TFLOP/s = 2 x layer weights per token + LM head per sequence + causal attention pairs "
               "x 4 D\n",
               in.backend, device, mf_build_commit, date, copy_gbps, cuda ? "roof: copy" : "roof: read ",
               cuda ? "" : read_note, gemm_tflops, cuda ? "bf16 8192x8192x8192" : "f32 1024x1024x1024");
    mf_bench_table_print(tab, fmt, stdout);
    if (profile) {
        if (fmt == MF_BENCH_TABLE) printf("\nper-op profile (%s):\n", cuda ? "CUDA events" : "wall clock, synchronous CPU ops");
        mf_bench_table_print(ptab, fmt, stdout);
    }
    rc = 0;
out:
    mf_profiler_free(prof);
    mf_bench_table_free(tab);
    mf_bench_table_free(ptab);
    mf_bench_timer_free(timer);
    mf_model_free(m);
    mf_backend_free(be);
    return rc;
}

// ---- options ---------------------------------------------------------------------------------

static mf_args_result bm_option(void *opts, const char *a, const char *v, char *err) {
    bm_opts *o = opts;
    if (!strcmp(a, "--profile")) {
        o->profile = true;
        return MF_ARGS_OK;
    }
    if (!strcmp(a, "--gen")) return mf_args_int32(a, v, 1, 4096, &o->gen, err);
    if (!strcmp(a, "--iters")) return mf_args_int32(a, v, 1, 100000, &o->iters, err);
    return mf_args_model_set(&o->model, a, v, err);
}

static mf_args_result bm_check(void *opts, char *err) {
    bm_opts *o = opts;
    (void)err;
    if (!o->model.dir && !o->model.synthetic) o->model.synthetic = "small";
    return MF_ARGS_OK;
}

const mf_bench_def mf_bench_model = {
    .name = "model", .opts_size = sizeof(bm_opts),
    .about = "the end-to-end model benchmark and per-op profile",
    .common = MF_BENCH_OPT_FORMAT,
    .defaults = &(const bm_opts){.model = {.dtype = MF_DTYPE_BF16, .dtype_auto = true, .seed = 1}, .gen = 16},
    .lists = (const mf_bench_list_opt[]){{"--batch", 1, INT32_MAX, offsetof(bm_opts, batch)},
                                         {"--seq", 1, INT32_MAX, offsetof(bm_opts, seq)},
                                         {NULL, 0, 0, 0}},
    .valued = (const char *const[]){MF_ARGS_MODEL_VALUED, "--gen", "--iters", NULL},
    .flags = (const char *const[]){MF_ARGS_MODEL_FLAGS, "--profile", NULL},
    .option = bm_option, .check = bm_check, .help = bm_help, .run = bm_run,
    .iters = {3, 5},
};
