// minfer generate -m DIR -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
//                 [--repeat-penalty R] [--seed S] [--stop STR]... [--ignore-eos]
//                 [--bos | --no-bos] [--backend auto|cpu|cuda] [--dtype bf16|f16|f32]
//
// The generated text goes to stdout as it is produced (then one newline);
// logs, the seed when chosen at random and a last line of statistics go to
// stderr. Errors: one "minfer: error: ..." line and a non-zero exit.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd_generate.h"
#include "minfer/generate.h"
#include "minfer/minfer.h"
#include "minfer/model.h"

enum { MAX_STOP = 16 };

typedef struct {
    const char *dir, *prompt, *backend;
    mf_dtype dtype;
    int64_t n;
    mf_sampler_params sp;
    bool seed_given;
    const char *stop[MAX_STOP];
    int n_stop;
    bool ignore_eos;
    mf_bos_mode bos;
} gen_opts;

static void help(FILE *f) {
    fprintf(f,
            "usage: minfer generate -m DIR -p TEXT [options]\n"
            "  Generates a continuation of TEXT and streams it to stdout; statistics on stderr.\n"
            "  -m DIR                Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json)\n"
            "  -p TEXT               the prompt\n"
            "  -n N                  tokens to generate at most (default 128)\n"
            "  --temp T              temperature, >= 0; 0 is greedy (default 0.8)\n"
            "  --top-k K             keep the K most likely tokens; 0 disables (default 40)\n"
            "  --top-p P             keep the most likely tokens up to probability P, in [0, 1]; 0 disables (default 0.95)\n"
            "  --min-p P             drop tokens below P x the most likely one's probability, in [0, 1]; 0 disables (default 0.05)\n"
            "  --repeat-penalty R    penalise tokens already in the context (HF semantics), >= 0; 1 or 0 disables (default 1)\n"
            "  --seed S              sampling seed, 0 .. 2^64-1 (default: random, printed on stderr)\n"
            "  --stop STR            stop when the text reaches STR (not printed); repeatable, up to %d\n"
            "  --ignore-eos          go on after the EOS token\n"
            "  --bos / --no-bos      put BOS before the prompt or not (default: as the tokenizer's add_bos_token says)\n"
            "  --backend B           auto (default), cpu or cuda\n"
            "  --dtype D             bf16 (default on CUDA), f16 or f32; the CPU computes in f32\n",
            MAX_STOP);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "minfer: error: generate: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

// Strict number parsing: the whole string, finite.
static bool parse_double(const char *s, double *v) {
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && !*end && errno == 0 && isfinite(*v);
}

static bool parse_i64(const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    *v = x;
    return end != s && !*end && errno == 0;
}

static bool parse_u64(const char *s, uint64_t *v) {
    char *end;
    errno = 0;
    if (*s == '-') return false;
    unsigned long long x = strtoull(s, &end, 10);
    *v = x;
    return end != s && !*end && errno == 0;
}

// A float option in [lo, hi] (hi = INFINITY: no upper bound).
static int float_opt(const char *flag, const char *v, double lo, double hi, float *out) {
    double x;
    if (!parse_double(v, &x)) return usage_error("%s %s is not a number", flag, v);
    if (x < lo || x > hi) {
        char range[64];
        if (isinf(hi)) snprintf(range, sizeof range, "not >= %g", lo);
        else snprintf(range, sizeof range, "not in [%g, %g]", lo, hi);
        return usage_error("%s %s %s", flag, v, range);
    }
    *out = (float)x;
    return 0;
}

static int parse_args(int argc, char **argv, gen_opts *o) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return -1;
        }
        if (!strcmp(a, "--no-bos") || !strcmp(a, "--bos")) {
            o->bos = !strcmp(a, "--bos") ? MF_BOS_ADD : MF_BOS_NONE;
            continue;
        }
        if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
            continue;
        }
        static const char *const valued[] = {"-m", "--model", "-p", "--prompt", "-n", "--temp", "--top-k", "--top-p",
                                             "--min-p", "--repeat-penalty", "--seed", "--stop", "--backend", "--dtype"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(a, valued[k]);
        if (!known) return usage_error("unknown option %s (see minfer generate --help)", a);
        if (i + 1 >= argc) return usage_error("%s needs a value", a);
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->dir = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (o->prompt) return usage_error("one prompt only (-p given twice)");
            o->prompt = v;
        } else if (!strcmp(a, "-n")) {
            if (!parse_i64(v, &o->n)) return usage_error("-n %s is not an integer", v);
            if (o->n < 0) return usage_error("-n %s is negative", v);
        } else if (!strcmp(a, "--temp")) {
            rc = float_opt(a, v, 0.0, INFINITY, &o->sp.temperature);
        } else if (!strcmp(a, "--top-k")) {
            int64_t k;
            if (!parse_i64(v, &k)) return usage_error("--top-k %s is not an integer", v);
            if (k < 0 || k > INT32_MAX) return usage_error("--top-k %s not in [0, 2147483647]", v);
            o->sp.top_k = (int32_t)k;
        } else if (!strcmp(a, "--top-p")) {
            rc = float_opt(a, v, 0.0, 1.0, &o->sp.top_p);
        } else if (!strcmp(a, "--min-p")) {
            rc = float_opt(a, v, 0.0, 1.0, &o->sp.min_p);
        } else if (!strcmp(a, "--repeat-penalty")) {
            rc = float_opt(a, v, 0.0, INFINITY, &o->sp.repetition_penalty);
        } else if (!strcmp(a, "--seed")) {
            if (!parse_u64(v, &o->sp.seed)) return usage_error("--seed %s is not an integer in [0, 2^64)", v);
            o->seed_given = true;
        } else if (!strcmp(a, "--stop")) {
            if (o->n_stop == MAX_STOP) return usage_error("more than %d stop strings", MAX_STOP);
            if (!*v) return usage_error("--stop wants a non-empty string");
            o->stop[o->n_stop++] = v;
        } else if (!strcmp(a, "--backend")) {
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))
                return usage_error("--backend %s is not auto, cpu or cuda", v);
            o->backend = v;
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "bf16")) o->dtype = MF_DTYPE_BF16;
            else if (!strcmp(v, "f16")) o->dtype = MF_DTYPE_F16;
            else if (!strcmp(v, "f32")) o->dtype = MF_DTYPE_F32;
            else return usage_error("--dtype %s is not bf16, f16 or f32", v);
        }
        if (rc) return rc;
    }
    if (!o->dir) return usage_error("give the model with -m DIR (see minfer generate --help)");
    if (!o->prompt) return usage_error("give the prompt with -p TEXT (see minfer generate --help)");
    return 0;
}

// A seed nobody chose: the clock and the process id, mixed.
static uint64_t random_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void on_text(int32_t seq, const char *text, size_t len, void *user) {
    (void)seq;
    *(bool *)user = true;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

static int lib_error(const char *what) {
    fprintf(stderr, "minfer: error: generate: %s%s%s\n", what ? what : "", what ? ": " : "", mf_last_error());
    return 1;
}

int mf_cmd_generate(int argc, char **argv) {
    gen_opts o = {.backend = "auto", .dtype = MF_DTYPE_BF16, .n = 128, .bos = MF_BOS_AUTO};
    o.sp = (mf_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                               .repetition_penalty = 1.0f};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (!o.seed_given) o.sp.seed = random_seed();

    mf_backend *be = NULL;
    mf_model *m = NULL;
    mf_session *s = NULL;
    int32_t *ids = NULL;
    mf_generate_result r = {0};
    rc = 1;
    if (mf_backend_init(o.backend, &be) != MF_OK) {
        lib_error("backend");
        goto done;
    }
    mf_model_opts mo = {.dtype = o.dtype, .attn = "classic", .verbose = true};
    if (mf_model_load(o.dir, be, &mo, &m) != MF_OK) {
        lib_error(o.dir);
        goto done;
    }
    mf_model_info info;
    if (mf_model_get_info(m, &info) != MF_OK) {
        lib_error("model info");
        goto done;
    }
    const mf_tokenizer *tok = mf_model_tokenizer(m);
    if (!tok) {
        fprintf(stderr, "minfer: error: generate: %s has no tokenizer.json\n", o.dir);
        goto done;
    }

    // The session holds the prompt and the new tokens (the model's max_pos at most):
    // count the prompt's tokens as mf_generate will make them.
    const bool has_bos = mf_tokenizer_bos_id(tok) >= 0;
    const bool add_bos = o.bos == MF_BOS_ADD ||
                         (o.bos == MF_BOS_AUTO && has_bos && (mf_tokenizer_default_add_bos(tok) || !o.prompt[0]));
    int64_t n_prompt = 0;
    if (add_bos && !has_bos) {
        fprintf(stderr, "minfer: error: generate: --bos given but the tokenizer has no BOS token\n");
        goto done;
    }
    if (mf_tokenizer_encode(tok, o.prompt, strlen(o.prompt), add_bos, &ids, &n_prompt) != MF_OK) {
        lib_error("tokenizing the prompt");
        goto done;
    }
    int64_t max_seq = n_prompt + (o.n > 0 ? o.n : 1);
    if (info.max_pos > 0 && max_seq > info.max_pos) {
        if (n_prompt > info.max_pos) {
            fprintf(stderr, "minfer: error: generate: the prompt has %lld tokens, more than the model's %lld positions\n",
                    (long long)n_prompt, (long long)info.max_pos);
            goto done;
        }
        fprintf(stderr, "minfer: the model has %lld positions: at most %lld new tokens\n", (long long)info.max_pos,
                (long long)(info.max_pos - n_prompt + 1));
        max_seq = info.max_pos;
    }
    if (mf_session_create(m, 1, max_seq, &s) != MF_OK) {
        lib_error("session");
        goto done;
    }

    const char *prompts[1] = {o.prompt};
    mf_prompts pr = {.n = 1, .texts = prompts};
    mf_generate_params p = mf_generate_params_default();
    p.max_new_tokens = o.n;
    p.sampler = o.sp;
    p.stop = o.stop;
    p.n_stop = o.n_stop;
    p.ignore_eos = o.ignore_eos;
    p.bos = o.bos;
    p.on_text = on_text;
    bool streamed = false;
    p.user = &streamed;
    if (o.sp.temperature > 0.0f && !o.seed_given)
        fprintf(stderr, "minfer: seed %llu (random; --seed %llu repeats this run)\n", (unsigned long long)o.sp.seed,
                (unsigned long long)o.sp.seed);
    mf_status gs = mf_generate(s, &pr, &p, &r);
    if (gs == MF_OK || streamed) { // end the text's line
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (gs != MF_OK) {
        fprintf(stderr, "minfer: error: %s\n", mf_last_error()); // the message starts with "generate: "
        goto done;
    }

    const mf_generate_stats *st = &r.stats;
    int64_t sess_bytes = mf_session_bytes(s);
    fprintf(stderr,
            "minfer: prompt %lld tokens, %.1f tokens/s | generated %lld tokens, %.1f tokens/s | time to first token "
            "%.1f ms | peak memory %.1f MB (weights %.1f + session %.1f) | %s, %s, finish: %s\n",
            (long long)st->prompt_tokens, st->prefill_tok_s, (long long)st->generated_tokens, st->decode_tok_s,
            st->ttft_s * 1e3, (double)(info.weight_bytes + sess_bytes) / 1e6, (double)info.weight_bytes / 1e6,
            (double)sess_bytes / 1e6, mf_backend_name(be), info.arch, mf_finish_reason_str(r.seqs[0].finish));
    rc = 0;
done:
    mf_generate_result_free(&r);
    mf_tokenizer_free_buffer(ids);
    mf_session_free(s);
    mf_model_free(m);
    mf_backend_free(be);
    return rc;
}
