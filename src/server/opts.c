// `minfer serve` options (see opts.h).
#include "server/opts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mf_srv_opts_result bad(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static mf_srv_opts_result bad(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, MF_SRV_ERR_CAP, fmt, ap);
    va_end(ap);
    for (unsigned char *p = (unsigned char *)err; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = '?'; // one line whatever an argument holds
    return MF_SRV_OPTS_BAD;
}

static bool int_in(const char *s, int64_t lo, int64_t hi, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi) return false;
    *v = x;
    return true;
}

static bool num_in(const char *s, double lo, double hi, double *v) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(x) || x < lo || x > hi) return false;
    *v = x;
    return true;
}

const char *mf_srv_opts_help(void) {
    return "usage: minfer serve -m DIR [options]\n"
           "  An OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions (stream: true\n"
           "  for server-sent events), GET /v1/models, /health, /metrics (Prometheus, vLLM's names),\n"
           "  POST /tokenize, /detokenize. SIGINT/SIGTERM: stop accepting, let requests finish, exit 0.\n"
           "  -m, --model DIR            Hugging Face checkpoint directory\n"
           "  --served-model-name NAME   the model's name in the API (default: DIR as given)\n"
           "  --host HOST                address to listen on (default 127.0.0.1)\n"
           "  --port N                   port (default 8000; 0: a free one, printed on stderr)\n"
           "  --api-key KEY              require 'Authorization: Bearer KEY' on /v1/*, /tokenize,\n"
           "                             /detokenize (repeatable; also $MINFER_API_KEY)\n"
           "  --kv-mem GB                KV-cache pool size in GiB (default: the engine's)\n"
           "  --kv-blocks N              or in blocks\n"
           "  --block-size N             tokens per KV block, a power of two in [16, 1024] (default 64)\n"
           "  --max-batched-tokens N     token rows one engine step computes at most (default 2048)\n"
           "  --max-seqs N               sequences one step runs at most (default 64)\n"
           "  --max-model-len N          prompt + generated tokens of one sequence at most\n"
           "  --no-prefix-cache          do not share prompt blocks between requests\n"
           "  --max-queue N              requests waiting for the engine at most; more: 429 (default 1024)\n"
           "  --backend B                auto (default), cpu or cuda\n"
           "  --dtype D                  auto (default), bf16, f16 or f32\n"
           "  --mmap                     CPU: weights in place from the checkpoint's file mapping (fast load,\n"
           "                             shared pages) instead of copied at load (q|k|v, gate|up stacked)\n"
           "  --chat-template NAME       force a chat template (default: recognised from the checkpoint)\n"
           "  --max-body-mb MB           request bodies larger than this get 413 (default 8)\n"
           "  --shutdown-timeout S       seconds in-flight requests get to finish on SIGINT/SIGTERM (default 30)\n"
           "  --ping-interval S          SSE comment ping after S idle seconds of a stream (default 5)\n"
           "  --http-threads N           HTTP threads: parsing, tokenizing, streaming (default 4; 1: one)\n";
}

mf_srv_opts_result mf_srv_opts_parse(int argc, char **argv, mf_srv_opts *o, char err[MF_SRV_ERR_CAP]) {
    *o = (mf_srv_opts){.host = "127.0.0.1", .port = 8000, .max_queue = 1024, .backend = "auto",
                       .dtype = MF_DTYPE_BF16, .dtype_auto = true, .max_body = (int64_t)8 << 20,
                       .shutdown_timeout = 30.0, .ping_interval = 5.0, .http_threads = 4};
    err[0] = '\0';
    static const char *const flags[] = {"-m", "--model", "--served-model-name", "--host", "--port", "--api-key",
                                        "--kv-mem", "--kv-blocks", "--block-size", "--max-batched-tokens",
                                        "--max-seqs", "--max-model-len", "--max-queue", "--backend", "--dtype",
                                        "--chat-template", "--max-body-mb", "--shutdown-timeout",
                                        "--ping-interval", "--http-threads", NULL};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return MF_SRV_OPTS_HELP;
        if (!strcmp(a, "--no-prefix-cache")) {
            o->no_prefix_cache = true;
            continue;
        }
        if (!strcmp(a, "--mmap")) {
            o->mmap = true;
            continue;
        }
        bool known = false;
        for (const char *const *f = flags; *f; f++) known |= !strcmp(a, *f);
        if (!known) return bad(err, "unknown option '%.80s' (see minfer serve --help)", a);
        if (i + 1 >= argc) return bad(err, "%s needs a value", a);
        const char *v = argv[++i];
        int64_t n = 0;
        double d = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->dir = v;
        } else if (!strcmp(a, "--served-model-name")) {
            if (!v[0]) return bad(err, "--served-model-name: empty");
            o->served_name = v;
        } else if (!strcmp(a, "--host")) {
            if (!v[0]) return bad(err, "--host: empty");
            o->host = v;
        } else if (!strcmp(a, "--port")) {
            if (!int_in(v, 0, 65535, &n)) return bad(err, "--port %.80s: not an integer in [0, 65535]", v);
            o->port = (int32_t)n;
        } else if (!strcmp(a, "--api-key")) {
            if (!v[0]) return bad(err, "--api-key: empty");
            if (o->n_api_keys == MF_SRV_MAX_KEYS) return bad(err, "--api-key: more than %d keys", MF_SRV_MAX_KEYS);
            o->api_keys[o->n_api_keys++] = v;
        } else if (!strcmp(a, "--kv-mem")) {
            if (!num_in(v, 0, 1 << 20, &d) || d <= 0)
                return bad(err, "--kv-mem %.80s: not a number of GiB in (0, 1048576]", v);
            o->kv_mem_gb = d;
        } else if (!strcmp(a, "--kv-blocks")) {
            if (!int_in(v, 1, (int64_t)1 << 40, &n)) return bad(err, "--kv-blocks %.80s: not an integer in [1, 2^40]", v);
            o->kv_blocks = n;
        } else if (!strcmp(a, "--block-size")) {
            if (!int_in(v, 16, 1024, &n) || (n & (n - 1)))
                return bad(err, "--block-size %.80s: not a power of two in [16, 1024]", v);
            o->block_size = (int32_t)n;
        } else if (!strcmp(a, "--max-batched-tokens")) {
            if (!int_in(v, 1, (int64_t)1 << 31, &n))
                return bad(err, "--max-batched-tokens %.80s: not an integer in [1, 2^31]", v);
            o->max_batched_tokens = n;
        } else if (!strcmp(a, "--max-seqs")) {
            if (!int_in(v, 1, 1 << 20, &n)) return bad(err, "--max-seqs %.80s: not an integer in [1, 1048576]", v);
            o->max_seqs = (int32_t)n;
        } else if (!strcmp(a, "--max-model-len")) {
            if (!int_in(v, 1, (int64_t)1 << 31, &n))
                return bad(err, "--max-model-len %.80s: not an integer in [1, 2^31]", v);
            o->max_model_len = n;
        } else if (!strcmp(a, "--max-queue")) {
            if (!int_in(v, 0, 1 << 30, &n)) return bad(err, "--max-queue %.80s: not an integer in [0, 2^30]", v);
            o->max_queue = n;
        } else if (!strcmp(a, "--backend")) {
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))
                return bad(err, "--backend %.80s: not auto, cpu or cuda", v);
            o->backend = v;
        } else if (!strcmp(a, "--dtype")) {
            o->dtype_auto = !strcmp(v, "auto");
            if (!strcmp(v, "bf16")) o->dtype = MF_DTYPE_BF16;
            else if (!strcmp(v, "f16")) o->dtype = MF_DTYPE_F16;
            else if (!strcmp(v, "f32")) o->dtype = MF_DTYPE_F32;
            else if (!o->dtype_auto) return bad(err, "--dtype %.80s: not auto, bf16, f16 or f32", v);
        } else if (!strcmp(a, "--chat-template")) {
            if (!v[0]) return bad(err, "--chat-template: empty");
            o->chat_template = v;
        } else if (!strcmp(a, "--max-body-mb")) {
            if (!num_in(v, 0, 1024, &d) || d * 1048576.0 < 1024)
                return bad(err, "--max-body-mb %.80s: not a number of MiB in [1/1024, 1024]", v);
            o->max_body = (int64_t)(d * 1048576.0);
        } else if (!strcmp(a, "--shutdown-timeout")) {
            if (!num_in(v, 0, 86400, &d)) return bad(err, "--shutdown-timeout %.80s: not seconds in [0, 86400]", v);
            o->shutdown_timeout = d;
        } else if (!strcmp(a, "--ping-interval")) {
            if (!num_in(v, 0.05, 3600, &d)) return bad(err, "--ping-interval %.80s: not seconds in [0.05, 3600]", v);
            o->ping_interval = d;
        } else if (!strcmp(a, "--http-threads")) {
            if (!int_in(v, 1, 256, &n)) return bad(err, "--http-threads %.80s: not an integer in [1, 256]", v);
            o->http_threads = (int32_t)n;
        }
    }
    if (!o->dir) return bad(err, "-m DIR is required (a Hugging Face checkpoint directory)");
    if (o->kv_blocks && o->kv_mem_gb > 0) return bad(err, "--kv-mem and --kv-blocks: give one of them");
    if (!o->served_name) o->served_name = o->dir;
    return MF_SRV_OPTS_OK;
}
