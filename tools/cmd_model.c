// The model commands of the CLI:
//   minfer score -m DIR (-p TEXT | --tokens 1,2,3) [--logits-out FILE.npy] [--backend B] [--dtype D]
//   minfer info  -m DIR | --synthetic PRESET [--batch N] [--seq N] [--backend B] [--dtype D]
//   minfer bench model [--synthetic PRESET | -m DIR] [--batch 1,4] [--seq 128,512] [--gen N]
//                      [--format table|csv|json] [--profile] [--backend B] [--dtype D]
// Results on stdout, logs and progress on stderr, one "minfer: error: ..."
// line and a non-zero exit on failure (2 for a bad option: the options are
// parsed by mf_parse_{score,info,bench_model}_args, cli_args.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#ifdef MF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "bench_util.h"
#include "cli_args.h"
#include "cmd_model.h"
#include "minfer/minfer.h"
#include "minfer/model.h"

// ---- shared -----------------------------------------------------------------------------------

static int fail_lib(const char *what) {
    fprintf(stderr, "minfer: error: %s%s%s\n", what ? what : "", what ? ": " : "", mf_last_error());
    return 1;
}

static int fail_usage(const char *cmd, const char *msg) {
    fprintf(stderr, "minfer: error: %s: %s\n", cmd, msg);
    return 2;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The model options of score, info and bench model (parsed in cli_args.c).
typedef mf_model_args model_opts;

static int open_model(const model_opts *o, bool verbose, mf_backend **be, mf_model **m) {
    *be = NULL, *m = NULL;
    if (mf_backend_init(o->backend ? o->backend : "auto", be) != MF_OK) return fail_lib("backend");
    mf_model_opts mo = {.dtype = o->dtype, .dtype_auto = o->dtype_auto, .attn = o->attn, .verbose = verbose};
    mf_status s = o->synthetic ? mf_model_synthetic(o->synthetic, o->seed, *be, &mo, m)
                               : mf_model_load(o->dir, *be, &mo, m);
    if (s != MF_OK) {
        fail_lib(o->synthetic ? "synthetic model" : o->dir);
        mf_backend_free(*be);
        *be = NULL;
        return 1;
    }
    return 0;
}

static double mb(int64_t bytes) { return (double)bytes / 1e6; }

// ---- score ----------------------------------------------------------------------------------------

// A (rows, cols) f32 .npy (format 1.0, header padded to 64 bytes).
static bool write_npy(const char *path, const float *x, int64_t rows, int64_t cols) {
    char h[256];
    int n = snprintf(h, sizeof h, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }", (long long)rows,
                     (long long)cols);
    int total = (10 + n + 1 + 63) / 64 * 64; // magic + len + dict + '\n'
    while (10 + n + 1 < total) h[n++] = ' ';
    h[n++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(h, 1, (size_t)n, f) == (size_t)n &&
              fwrite(x, sizeof(float), (size_t)(rows * cols), f) == (size_t)(rows * cols);
    return fclose(f) == 0 && ok;
}

static void print_token(const mf_tokenizer *tok, int32_t id) {
    const char *t = tok ? mf_tokenizer_token_text(tok, id) : NULL;
    if (!t) return;
    putchar(' ');
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        if (*p == '\n') fputs("\\n", stdout);
        else if (*p < 0x20) printf("\\x%02x", *p);
        else putchar(*p);
    }
}

static void score_help(FILE *f) {
    fprintf(f, "usage: minfer score -m DIR (-p TEXT | --tokens 1,2,3) [options]\n"
               "  Per-token negative log-likelihood of the text under the model, and the perplexity.\n"
               "  -m DIR               Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json)\n"
               "  -p TEXT              text, tokenized with the model's tokenizer\n"
               "  --tokens LIST        token ids instead of text, comma-separated\n"
               "  --bos / --no-bos     put BOS first (default: as the tokenizer's add_bos_token says)\n"
               "  --logits-out FILE    write the (T, vocab) f32 logits as .npy (row t: after tokens 0..t)\n"
               "  --backend B          auto (default), cpu or cuda\n"
               "  --dtype D            auto (default: CUDA bf16; CPU keeps a checkpoint's f16/bf16 weights),\n"
               "                       bf16, f16 or f32 (the CPU computes in f32: D is its weights' storage)\n");
}

int mf_cmd_score(int argc, char **argv) {
    mf_score_opts so;
    char err[MF_ARGS_ERR_CAP];
    const mf_args_result ar = mf_parse_score_args(argc, argv, &so, err);
    if (ar == MF_ARGS_HELP) {
        score_help(stdout);
        return 0;
    }
    if (ar != MF_ARGS_OK) return fail_usage("score", err);
    const model_opts mo = so.model;
    const char *text = so.text, *out = so.logits_out;
    const int bos = so.bos; // -1: the tokenizer's default

    mf_backend *be;
    mf_model *m;
    if (open_model(&mo, true, &be, &m)) {
        mf_score_opts_free(&so);
        return 1;
    }
    int rc = 1;
    mf_model_info info;
    mf_model_get_info(m, &info);
    const mf_tokenizer *tok = mf_model_tokenizer(m);
    int32_t *ids = NULL;
    int64_t T = 0;
    float *logits = NULL;
    mf_session *s = NULL;
    if (text) {
        if (!tok) {
            fprintf(stderr, "minfer: error: score: %s has no tokenizer.json (use --tokens)\n", info.source);
            goto done;
        }
        const bool add_bos = bos < 0 ? mf_tokenizer_default_add_bos(tok) : bos == 1;
        if (mf_tokenizer_encode(tok, text, strlen(text), add_bos, &ids, &T) != MF_OK) {
            fail_lib("score: tokenizing");
            goto done;
        }
    } else {
        ids = so.ids, T = so.n_ids; // parsed with the options; freed below
        so.ids = NULL;
        if (bos == 1 && info.bos_id >= 0) { // --bos with --tokens: prepend it
            int32_t *b = malloc((size_t)(T + 1) * sizeof *b);
            if (!b) {
                fprintf(stderr, "minfer: error: score: out of memory for %lld token ids\n", (long long)T + 1);
                goto done;
            }
            b[0] = info.bos_id;
            memcpy(b + 1, ids, (size_t)T * sizeof *ids);
            free(ids);
            ids = b, T++;
        }
    }
    if (T < 1) {
        fprintf(stderr, "minfer: error: score: no tokens to score\n");
        goto done;
    }
    if (mf_session_create(m, 1, T, &s) != MF_OK) {
        fail_lib("score: session");
        goto done;
    }
    logits = malloc((size_t)T * (size_t)info.vocab * sizeof *logits);
    if (!logits) {
        fprintf(stderr, "minfer: error: score: out of memory for %lld x %d logits\n", (long long)T, info.vocab);
        goto done;
    }
    const int32_t slot = 0;
    const int64_t off[2] = {0, T};
    double t0 = now_s();
    if (mf_session_forward(s, 1, &slot, ids, off, MF_LOGITS_ALL, logits) != MF_OK) {
        fail_lib("score: forward");
        goto done;
    }
    const double secs = now_s() - t0;
    printf("%6s %8s %12s  token\n", "pos", "id", "nll");
    printf("%6d %8d %12s ", 0, ids[0], "-");
    print_token(tok, ids[0]);
    putchar('\n');
    double sum = 0;
    for (int64_t t = 1; t < T; t++) {
        const float *row = logits + (t - 1) * info.vocab;
        double mx = -INFINITY, z = 0;
        for (int32_t v = 0; v < info.vocab; v++) mx = fmax(mx, row[v]);
        for (int32_t v = 0; v < info.vocab; v++) z += exp((double)row[v] - mx);
        const double nll = -((double)row[ids[t]] - mx - log(z));
        sum += nll;
        printf("%6lld %8d %12.6f ", (long long)t, ids[t], nll);
        print_token(tok, ids[t]);
        putchar('\n');
    }
    if (T > 1)
        printf("tokens %lld, scored %lld, mean nll %.6f, perplexity %.4f\n", (long long)T, (long long)(T - 1),
               sum / (double)(T - 1), exp(sum / (double)(T - 1)));
    else
        printf("tokens 1: nothing to score (the first token has no prediction)\n");
    fprintf(stderr, "minfer: score: %lld tokens in %.1f ms on %s (%s)\n", (long long)T, 1e3 * secs, info.backend,
            mf_dtype_name(info.dtype));
    if (out && !write_npy(out, logits, T, info.vocab)) {
        fprintf(stderr, "minfer: error: score: cannot write %s\n", out);
        goto done;
    }
    if (out) fprintf(stderr, "minfer: score: wrote (%lld, %d) f32 logits to %s\n", (long long)T, info.vocab, out);
    rc = 0;
done:
    mf_session_free(s);
    mf_tokenizer_free_buffer(text ? ids : NULL);
    if (!text) free(ids);
    free(logits);
    mf_model_free(m);
    mf_backend_free(be);
    return rc;
}

// ---- info -m ------------------------------------------------------------------------------------------

static void info_help(FILE *f) {
    fprintf(f, "usage: minfer info (-m DIR | --synthetic PRESET) [--batch N] [--seq N] [--backend B] [--dtype D]\n"
               "  Architecture, parameter count, dtype and the memory plan of a session of\n"
               "  --batch sequences (default 1) of --seq tokens (default min(max positions, 2048)).\n"
               "  Family, chat template, and what runs on which backend.\n"
               "  Presets: small, medium, large, tiny-gpt2, tiny-postnorm, llama-7b, tiny, tiny-geglu.\n"
               "  --dtype D: auto (default: CUDA bf16; CPU keeps a checkpoint's f16/bf16 weights), bf16, f16, f32\n");
}

int mf_cmd_model_info(int argc, char **argv) {
    mf_info_opts io;
    char err[MF_ARGS_ERR_CAP];
    const mf_args_result ar = mf_parse_info_args(argc, argv, &io, err);
    if (ar == MF_ARGS_HELP) {
        info_help(stdout);
        return 0;
    }
    if (ar != MF_ARGS_OK) return fail_usage("info", err);
    const model_opts mo = io.model;
    const int64_t batch = io.batch;
    int64_t seq = io.seq;
    mf_backend *be;
    mf_model *m;
    if (open_model(&mo, false, &be, &m)) return 1;
    mf_model_info in;
    mf_model_get_info(m, &in);
    if (!seq) seq = in.max_pos < 2048 ? in.max_pos : 2048;
    printf("model:        %s\n", in.source);
    printf("family:       %s%s%s: %s\n", in.family, in.hf_class[0] ? ", " : "", in.hf_class, in.family_about);
    printf("architecture: %s: %d layers, hidden %d, heads %d (kv %d, head_dim %d), ffn %d, vocab %d, max positions %lld\n",
           in.arch, in.n_layers, in.hidden, in.n_heads, in.n_kv_heads, in.head_dim, in.ffn, in.vocab,
           (long long)in.max_pos);
    printf("parameters:   %lld (%.2f M)\n", (long long)in.n_params, (double)in.n_params / 1e6);
    if (in.n_experts > 0) {
        printf("experts:      %d per layer, top-%d per token, expert ffn %d", in.n_experts, in.top_k, in.ffn);
        if (in.shared_ffn > 0) printf(", shared expert ffn %d", in.shared_ffn);
        printf("\n              active parameters per token: %lld (%.2f M) of %lld (%.1f%%)\n",
               (long long)in.n_active_params, (double)in.n_active_params / 1e6, (long long)in.n_params,
               100.0 * (double)in.n_active_params / (double)in.n_params);
    }
    printf("dtype:        weights %s, activations and KV cache %s, on %s\n", mf_dtype_name(in.dtype),
           mf_dtype_name(in.act_dtype), in.backend);
    const mf_tokenizer *tok = mf_model_tokenizer(m);
    if (tok)
        printf("tokenizer:    %lld tokens, bos %d, eos %d\n", (long long)mf_tokenizer_vocab_size(tok), in.bos_id, in.eos_id);
    else
        printf("tokenizer:    none (bos %d, eos %d)\n", in.bos_id, in.eos_id);
    printf("chat:         %s\n", in.chat_template ? "a chat template is present (minfer does not apply it: -p is the raw prompt)"
                                                   : "no chat template");
    if (in.sliding_window > 0)
        printf("attention:    sliding window: each token attends to its last %lld positions\n",
               (long long)in.sliding_window);
    // What runs where: the CPU computes every op in f32 (16-bit weights widened in
    // registers); CUDA in the chosen dtype.
    const char *attn = mo.attn ? mo.attn : "flash";
    const bool classic = !strcmp(attn, "classic");
    printf("backends:     cpu:  every op in f32 (weights f32, or f16/bf16 read as stored and widened in registers:\n"
           "                    --dtype), OpenBLAS GEMMs, attention %s%s\n",
           attn, strcmp(in.backend, "cpu") == 0 ? "   <- this run" : "");
    printf("              cuda: weights, activations and KV cache in bf16 (default), f16 or f32 (--dtype), f32 "
           "accumulation, attention %s (%s)%s\n",
           attn,
           classic             ? "QK^T GEMM -> softmax -> PV"
           : in.n_experts > 0 ? "online softmax over the KV cache; no CUDA Graphs: the experts read offsets back"
                              : "online softmax over the KV cache; decode steps as CUDA Graphs",
           strcmp(in.backend, "cuda") == 0 ? "   <- this run" : mf_cuda_available() ? "" : "   (no CUDA device here)");
    mf_session_plan p;
    int rc = 0;
    if (mf_session_plan_memory(m, (int32_t)batch, seq, &p) != MF_OK) {
        rc = fail_lib("info: memory plan");
    } else {
        printf("memory plan:  batch %lld x seq %lld\n", (long long)batch, (long long)seq);
        printf("  weights             %12.2f MB\n", mb(in.weight_bytes));
        printf("  KV cache per token  %12lld B   (K and V, all layers)\n", (long long)in.kv_bytes_per_token);
        printf("  KV cache            %12.2f MB\n", mb(p.kv_bytes));
        printf("  scratch             %12.2f MB  (steps of up to %lld tokens)\n", mb(p.scratch_bytes),
               (long long)p.step_tokens);
        printf("  total               %12.2f MB\n", mb(in.weight_bytes + p.kv_bytes + p.scratch_bytes));
    }
    mf_model_free(m);
    mf_backend_free(be);
    return rc;
}

// ---- bench model: the per-op profiler -----------------------------------------------------------------------
// The session brackets every op with begin/end. On the CPU (synchronous ops)
// the wall clock between them is the op's time; on CUDA a pair of events is
// recorded on the backend's stream around the launch and read after the step
// (the time between the events includes any launch gap the GPU waited for).

enum { kMaxProfEntries = 96, kMaxEventPairs = 16384 };

typedef struct {
    const char *op, *what;
    double us;
    int64_t calls;
} prof_entry;

typedef struct {
    bool cuda;
    void *stream;
    prof_entry e[kMaxProfEntries];
    int n, cur;
    double t0;
    int64_t dropped;
#ifdef MF_HAVE_CUDA
    cudaEvent_t *ev;   // 2 * kMaxEventPairs
    int *ev_entry;     // entry of each pair
    int n_pairs;
#endif
} profiler;

static int prof_entry_of(profiler *p, const char *op, const char *what) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->e[i].op, op) && !strcmp(p->e[i].what, what)) return i;
    if (p->n == kMaxProfEntries) return -1;
    p->e[p->n] = (prof_entry){op, what, 0, 0};
    return p->n++;
}

static void prof_begin(void *u, const char *op, const char *what) {
    profiler *p = u;
    p->cur = prof_entry_of(p, op, what);
#ifdef MF_HAVE_CUDA
    if (p->cuda) {
        if (p->cur >= 0 && p->n_pairs < kMaxEventPairs)
            cudaEventRecord(p->ev[2 * p->n_pairs], (cudaStream_t)p->stream);
        return;
    }
#endif
    p->t0 = now_s();
}

static void prof_end(void *u, const char *op, const char *what) {
    profiler *p = u;
    (void)op, (void)what;
    if (p->cur < 0) {
        p->dropped++;
        return;
    }
#ifdef MF_HAVE_CUDA
    if (p->cuda) {
        if (p->n_pairs < kMaxEventPairs) {
            cudaEventRecord(p->ev[2 * p->n_pairs + 1], (cudaStream_t)p->stream);
            p->ev_entry[p->n_pairs++] = p->cur;
        } else {
            p->dropped++;
        }
        return;
    }
#endif
    p->e[p->cur].us += 1e6 * (now_s() - p->t0);
    p->e[p->cur].calls++;
}

// After a forward call returned (it synchronises): reads the events.
static void prof_collect(profiler *p) {
#ifdef MF_HAVE_CUDA
    if (!p->cuda) return;
    cudaStreamSynchronize((cudaStream_t)p->stream);
    for (int i = 0; i < p->n_pairs; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]) == cudaSuccess) {
            p->e[p->ev_entry[i]].us += 1e3 * ms;
            p->e[p->ev_entry[i]].calls++;
        }
    }
    p->n_pairs = 0;
#else
    (void)p;
#endif
}

static int prof_init(profiler *p, bool cuda, void *stream) {
    memset(p, 0, sizeof *p);
    p->cuda = cuda, p->stream = stream;
#ifdef MF_HAVE_CUDA
    if (cuda) {
        p->ev = calloc(2 * kMaxEventPairs, sizeof *p->ev);
        p->ev_entry = calloc(kMaxEventPairs, sizeof *p->ev_entry);
        if (!p->ev || !p->ev_entry) return 1;
        for (int i = 0; i < 2 * kMaxEventPairs; i++)
            if (cudaEventCreate(&p->ev[i]) != cudaSuccess) return 1;
    }
#endif
    return 0;
}

static void prof_free(profiler *p) {
#ifdef MF_HAVE_CUDA
    if (p->ev)
        for (int i = 0; i < 2 * kMaxEventPairs; i++)
            if (p->ev[i]) cudaEventDestroy(p->ev[i]);
    free(p->ev);
    free(p->ev_entry);
#else
    (void)p;
#endif
}

static void prof_reset(profiler *p) {
    p->n = 0, p->dropped = 0;
}

static int cmp_entry(const void *a, const void *b) {
    const double x = ((const prof_entry *)a)->us, y = ((const prof_entry *)b)->us;
    return x < y ? 1 : x > y ? -1 : 0;
}

// Rows of the profile table for one phase: each (op, what) by time, then the
// op families, then the time outside the ops (host work, launches, copies of ids).
// stamp: the device, commit and date every row ends with.
static void prof_rows(profiler *p, const char *phase, double wall_us, mf_bench_table *t, const char *bench_id,
                      const char *const stamp[3]) {
    qsort(p->e, (size_t)p->n, sizeof p->e[0], cmp_entry);
    double sum = 0;
    for (int i = 0; i < p->n; i++) sum += p->e[i].us;
    char c[8][64];
    const char *cells[11];
    for (int k = 0; k < 8; k++) cells[k] = c[k];
    for (int k = 0; k < 3; k++) cells[8 + k] = stamp[k];
    for (int i = 0; i < p->n; i++) {
        snprintf(c[0], 64, "%s", bench_id);
        snprintf(c[1], 64, "%s", phase);
        snprintf(c[2], 64, "%s:%s", p->e[i].op, p->e[i].what);
        snprintf(c[3], 64, "%lld", (long long)p->e[i].calls);
        snprintf(c[4], 64, "%.3f", p->e[i].us / 1e3);
        snprintf(c[5], 64, "%.1f", 100.0 * p->e[i].us / sum);
        snprintf(c[6], 64, "%.2f", p->e[i].calls ? p->e[i].us / (double)p->e[i].calls : 0.0);
        snprintf(c[7], 64, "op");
        mf_bench_table_add(t, cells);
    }
    // families
    const char *fam[16];
    double fus[16] = {0};
    int64_t fcalls[16] = {0};
    int nf = 0;
    for (int i = 0; i < p->n; i++) {
        int f = 0;
        while (f < nf && strcmp(fam[f], p->e[i].op)) f++;
        if (f == nf && nf < 16) fam[nf++] = p->e[i].op;
        if (f < 16) fus[f] += p->e[i].us, fcalls[f] += p->e[i].calls;
    }
    for (int f = 0; f < nf; f++) {
        snprintf(c[0], 64, "%s", bench_id);
        snprintf(c[1], 64, "%s", phase);
        snprintf(c[2], 64, "%s (all)", fam[f]);
        snprintf(c[3], 64, "%lld", (long long)fcalls[f]);
        snprintf(c[4], 64, "%.3f", fus[f] / 1e3);
        snprintf(c[5], 64, "%.1f", 100.0 * fus[f] / sum);
        snprintf(c[6], 64, "%.2f", fcalls[f] ? fus[f] / (double)fcalls[f] : 0.0);
        snprintf(c[7], 64, "family");
        mf_bench_table_add(t, cells);
    }
    snprintf(c[2], 64, "ops total (outside: %.3f ms of %.3f ms wall)", (wall_us - sum) / 1e3, wall_us / 1e3);
    snprintf(c[3], 64, "-");
    snprintf(c[4], 64, "%.3f", sum / 1e3);
    snprintf(c[5], 64, "100.0");
    snprintf(c[6], 64, "-");
    snprintf(c[7], 64, "total");
    mf_bench_table_add(t, cells);
}

// ---- bench model ----------------------------------------------------------------------------------------------

static void bench_help(FILE *f) {
    fprintf(f,
            "usage: minfer bench model [options]\n"
            "  Forward latency of a prefill (batch x seq new tokens, the last token's logits per\n"
            "  sequence), prefill tokens/s, time to first token (prefill + the first greedy tokens),\n"
            "  decode tokens/s (single-token steps after the prefill, median step), the decode\n"
            "  roofline (weight bytes per step over the copy bandwidth measured in the same run; on a\n"
            "  CPU, where a decode step's streaming reads can outrun memcpy's read + write rate and the\n"
            "  bandwidth drifts, %%roof may exceed 100), the prefill's TFLOP/s and %% of a square GEMM\n"
            "  measured in the same run, and memory (weights + session: KV cache and scratch).\n"
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
    const double t0 = now_s();
    if (st == MF_OK && !r->host_argmax) {
        st = mf_session_forward_greedy(r->s, r->B, r->slots, r->prompt, r->off, r->cur, r->vals);
        *fwd = *ttft = now_s() - t0;
        return st;
    }
    if (st == MF_OK) st = mf_session_forward(r->s, r->B, r->slots, r->prompt, r->off, MF_LOGITS_LAST, r->logits);
    *fwd = now_s() - t0;
    for (int32_t i = 0; st == MF_OK && i < r->B; i++) r->cur[i] = argmax_row(r->logits + (int64_t)i * r->vocab, r->vocab);
    *ttft = now_s() - t0;
    return st;
}

static mf_status run_decode_step(bench_run *r, double *secs) {
    const double t0 = now_s();
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
    *secs = now_s() - t0;
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

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n ? v[(n - 1) / 2] : NAN;
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

int mf_bench_model_main(int argc, char **argv) {
    mf_bench_model_opts bo;
    char err[MF_ARGS_ERR_CAP];
    const mf_args_result ar = mf_parse_bench_model_args(argc, argv, &bo, err);
    if (ar == MF_ARGS_HELP) {
        bench_help(stdout);
        return 0;
    }
    if (ar != MF_ARGS_OK) return fail_usage("bench model", err);
    const model_opts mo = bo.model;
    const int gen = bo.gen;
    int iters = bo.iters;
    const bool profile = bo.profile;
    const mf_bench_format fmt = bo.fmt;

    mf_backend *be;
    mf_model *m;
    fprintf(stderr, "minfer: bench model: building %s%s ...\n", mo.synthetic ? "synthetic " : "",
            mo.synthetic ? mo.synthetic : mo.dir);
    if (open_model(&mo, true, &be, &m)) return 1;
    const bool cuda = mf_backend_device(be) == MF_DEVICE_CUDA;
    if (!cuda && !getenv("OMP_WAIT_POLICY")) // measured: 4-10x slower decode on a loaded 2-core box without it
        fprintf(stderr, "minfer: bench model: note: OMP_WAIT_POLICY is not set; OpenMP threads spinning between ops "
                        "take the cores from OpenBLAS's threads: run with OMP_WAIT_POLICY=PASSIVE for CPU figures\n");
    // --batch / --seq as parsed (cli_args.c), else the backend's defaults.
    static const int64_t cuda_batches[] = {1, 4, 8, 16, 32}, cuda_seqs[] = {128, 512, 2048, 8192}, cpu_one[] = {1},
                         cpu_seqs[] = {128};
    const int64_t *batches = bo.n_batches ? bo.batches : cuda ? cuda_batches : cpu_one;
    const int64_t *seqs = bo.n_seqs ? bo.seqs : cuda ? cuda_seqs : cpu_seqs;
    const int nb = bo.n_batches ? bo.n_batches : cuda ? 5 : 1, ns = bo.n_seqs ? bo.n_seqs : cuda ? 4 : 1;
    if (!iters) iters = cuda ? 5 : 3;
    int rc = 1;
    mf_bench_timer *timer = NULL;
    mf_bench_table *tab = NULL, *ptab = NULL;
    profiler prof;
    memset(&prof, 0, sizeof prof);
    mf_model_info in;
    mf_model_get_info(m, &in);
    if (mf_bench_timer_init(be, (size_t)1 << 20, &timer) != MF_OK) {
        fail_lib("bench model: timer");
        goto out;
    }
    double copy_gbps = 0;
    const size_t copy_bytes = cuda ? (size_t)512 << 20 : (size_t)128 << 20;
    if (mf_bench_copy_gbps(timer, be, copy_bytes, cuda ? 20 : 5, &copy_gbps) != MF_OK) {
        fail_lib("bench model: copy bandwidth");
        goto out;
    }
    // The GEMM ceiling prefill is quoted against (as the op benches: bf16 8192^3 on CUDA, f32 1024^3 on the CPU).
    double gemm_tflops = 0;
    if (mf_bench_gemm_tflops(timer, be, cuda ? 8192 : 1024, cuda ? MF_DTYPE_BF16 : MF_DTYPE_F32, cuda ? 20 : 3,
                             &gemm_tflops) != MF_OK) {
        fail_lib("bench model: GEMM ceiling");
        goto out;
    }
    char device[256], date[32];
    mf_bench_device_name(timer, device, sizeof device);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(stderr, "minfer: bench model: %s, %s, commit %s, weights %.1f MB (%s), copy %.1f GB/s, GEMM %.3f TFLOP/s\n",
            in.source, device, mf_build_commit, mb(in.weight_bytes), mf_dtype_name(in.dtype), copy_gbps, gemm_tflops);

    static const char *const cols[] = {"model", "backend", "dtype", "attn", "batch", "seq", "fwd_ms", "prefill_tok/s",
                                       "prefill_TFLOP/s", "%gemm", "ttft_ms", "dec_ms", "dec_tok/s", "roof_tok/s",
                                       "%roof", "dec_ops", "dec_launches", "dec_host_us", "graphs", "argmax", "mem_MB",
                                       "rss_MB", "copy_GB/s", "gemm_TFLOP/s", "device", "commit", "date",
                                       "fwd_p5_ms", "fwd_p95_ms", "dec_p5_ms", "dec_p95_ms"};
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
    mf_bench_table_hide_in_table(tab, "device");
    mf_bench_table_hide_in_table(tab, "commit");
    mf_bench_table_hide_in_table(tab, "date");
    mf_bench_table_hide_in_table(tab, "gemm_TFLOP/s");
    static const char *const spread[] = {"fwd_p5_ms", "fwd_p95_ms", "dec_p5_ms", "dec_p95_ms"};
    for (int k = 0; k < 4; k++) mf_bench_table_hide_in_table(tab, spread[k]); // CSV / JSON only
    mf_bench_table_hide_in_table(ptab, "kind");
    mf_bench_table_hide_in_table(ptab, "device");
    mf_bench_table_hide_in_table(ptab, "commit");
    mf_bench_table_hide_in_table(ptab, "date");
    if (profile && prof_init(&prof, cuda, mf_bench_timer_stream(timer))) {
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
                if (st != MF_OK) fail_lib("bench model: forward");
            }
            char id[64];
            snprintf(id, sizeof id, "%s b%d s%lld", model_name, B, (long long)S);
            if (st == MF_OK && profile) { // one prefill and one decode step, bracketed
                mf_session_profiler hook = {.begin = prof_begin, .end = prof_end, .user = &prof};
                double t, tt;
                prof_reset(&prof);
                mf_session_set_profiler(r.s, &hook);
                st = run_prefill(&r, &t, &tt);
                prof_collect(&prof);
                if (st == MF_OK) prof_rows(&prof, "prefill", 1e6 * t, ptab, id, stamp);
                prof_reset(&prof);
                if (st == MF_OK) st = run_decode_step(&r, &t);
                prof_collect(&prof);
                if (st == MF_OK) prof_rows(&prof, "decode", 1e6 * t, ptab, id, stamp);
                if (prof.dropped) fprintf(stderr, "minfer: bench model: profile dropped %lld ops\n", (long long)prof.dropped);
                mf_session_set_profiler(r.s, NULL);
            }
            if (st == MF_OK) {
                const double fwd = median(ps, iters), ttft = median(ts, iters), dec = median(ds, iters * gen);
                const double roof = (double)B * copy_gbps * 1e9 / step_weight_bytes(&in, B);
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
                snprintf(c[17], 256, "%.1f", median(dh, iters * gen));
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
                const mf_bench_stats pf = mf_bench_stats_of(ps, iters), dc = mf_bench_stats_of(ds, iters * gen);
                snprintf(c[27], 256, "%.2f", 1e3 * pf.p5);
                snprintf(c[28], 256, "%.2f", 1e3 * pf.p95);
                snprintf(c[29], 256, "%.2f", 1e3 * dc.p5);
                snprintf(c[30], 256, "%.2f", 1e3 * dc.p95);
                mf_bench_table_add(tab, cells);
                fprintf(stderr, "minfer: bench model: [%d/%d] batch %d seq %lld: prefill %.2f ms (%s%% of GEMM), decode %.2f ms/step (%s%% of roofline)\n",
                        bi * ns + si + 1, nb * ns, B, (long long)S, 1e3 * fwd, c[9], 1e3 * dec, c[14]);
            }
            mf_session_free(r.s);
            free(prompt), free(r.off), free(r.off1), free(r.slots), free(r.cur), free(r.logits), free(r.vals), free(r.c_ids), free(r.c_vals), free(r.c_stats), free(ps), free(ts), free(ds), free(dh);
        }
    }
    if (fmt == MF_BENCH_TABLE)
        printf("# model on %s (%s), commit %s, %s; copy ceiling %.1f GB/s (read + write); GEMM ceiling %.3f TFLOP/s "
               "(%s); prefill TFLOP/s = 2 x layer weights per token + LM head per sequence + causal attention pairs "
               "x 4 D\n",
               in.backend, device, mf_build_commit, date, copy_gbps, gemm_tflops,
               cuda ? "bf16 8192x8192x8192" : "f32 1024x1024x1024");
    mf_bench_table_print(tab, fmt, stdout);
    if (profile) {
        if (fmt == MF_BENCH_TABLE) printf("\nper-op profile (%s):\n", cuda ? "CUDA events" : "wall clock, synchronous CPU ops");
        mf_bench_table_print(ptab, fmt, stdout);
    }
    rc = 0;
out:
    if (profile) prof_free(&prof);
    mf_bench_table_free(tab);
    mf_bench_table_free(ptab);
    mf_bench_timer_free(timer);
    mf_model_free(m);
    mf_backend_free(be);
    return rc;
}
