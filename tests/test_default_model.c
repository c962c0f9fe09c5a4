// The default model (CTest `default_model`): minfer on the CPU against HF transformers.
//
//   test_default_model MODEL_DIR     (models/minfer-kjv-3m, by tools/train_tiny/train.py)
//
// MODEL_DIR/expected.json holds, per prompt, transformers' ids for "<s>" + prompt, the
// next-token logits after it and 32 greedy tokens (float32, eager attention, CPU). Here:
// - the model's tokenizer gives the same prompt ids, and decodes the greedy ids to HF's text;
// - the prompt's last-position logits: max|got - ref| / max|ref| <= 1e-4 (the CPU computes in
//   f32, HF's f32 forward differs by f32 rounding);
// - greedy generation through the engine (mf_generate, text prompts, BOS as the tokenizer does,
//   no EOS stop) gives HF's 32 ids exactly, each prompt alone and all of them as one batch;
// - on CUDA (bf16, skipped without a device; the kernel emulator runs it in CI), what
//   `minfer generate --backend cuda` runs: the same greedy ids as the CPU's (HF's), every
//   decode step after the first recorded as a CUDA graph and replayed (session stats).
// Last line: "N passed, N failed, N skipped".
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "minfer/minfer.h"

#define MAX_CASES 8

static int n_pass, n_fail, n_skip;

static void report(bool ok, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s %s: ", ok ? "PASS" : "FAIL", name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok)
        n_pass++;
    else
        n_fail++;
}

static bool check_ok(const char *name, mf_status s) {
    if (s != MF_OK) report(false, name, "%s: %s", mf_status_str(s), mf_last_error());
    return s == MF_OK;
}

static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = len >= 0 ? malloc((size_t)len + 1) : NULL;
    cJSON *j = NULL;
    if (b && fread(b, 1, (size_t)len, f) == (size_t)len) {
        b[len] = 0;
        j = cJSON_Parse(b);
    }
    fclose(f);
    free(b);
    return j;
}

// An int array from a JSON list: malloc'd, *n its length.
static int32_t *json_ids(const cJSON *a, int64_t *n) {
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *v);
    int64_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) v[i++] = (int32_t)it->valuedouble;
    return v;
}

static bool same_ids(const int32_t *a, int64_t na, const int32_t *b, int64_t nb, int64_t *first_diff) {
    *first_diff = -1;
    for (int64_t i = 0; i < (na < nb ? na : nb) && *first_diff < 0; i++)
        if (a[i] != b[i]) *first_diff = i;
    if (*first_diff < 0 && na != nb) *first_diff = na < nb ? na : nb;
    return *first_diff < 0;
}

typedef struct {
    const char *prompt;
    int32_t *prompt_ids, *greedy_ids;
    int64_t n_prompt, n_greedy;
    const char *text; // HF's decode of greedy_ids
    double min_margin;
    const cJSON *last_logits;
} test_case;

static void check_generation(const char *name, const mf_generation *g, const test_case *c) {
    int64_t d;
    if (!same_ids(g->prompt, g->n_prompt, c->prompt_ids, c->n_prompt, &d)) {
        report(false, name, "prompt ids differ from HF's at %lld", (long long)d);
        return;
    }
    const bool ok = same_ids(g->tokens, g->n_tokens, c->greedy_ids, c->n_greedy, &d);
    if (ok)
        report(c->n_greedy >= 32 && g->finish == MF_FINISH_LENGTH, name,
               "%lld greedy tokens identical to HF's (finish %s, HF's smallest top-2 gap %.3g)",
               (long long)g->n_tokens, mf_finish_reason_str(g->finish), c->min_margin);
    else
        report(false, name, "%lld tokens (HF %lld), first difference at %lld: %d (HF %d); HF's smallest top-2 gap %.3g",
               (long long)g->n_tokens, (long long)c->n_greedy, (long long)d, d < g->n_tokens ? g->tokens[d] : -1,
               d < c->n_greedy ? c->greedy_ids[d] : -1, c->min_margin);
}

static void test_case_alone(mf_model *m, mf_session *s, const test_case *c, int idx, int64_t vocab) {
    const mf_tokenizer *tok = mf_model_tokenizer(m);
    char name[96];

    // tokenizer: encode (BOS as the tokenizer config says) and decode
    snprintf(name, sizeof name, "prompt %d tokenizer", idx);
    int32_t *ids = NULL;
    int64_t n = 0, d;
    if (check_ok(name, mf_tokenizer_encode(tok, c->prompt, strlen(c->prompt), true, &ids, &n))) {
        const bool same = same_ids(ids, n, c->prompt_ids, c->n_prompt, &d);
        report(same, name, "\"%s\" -> %lld ids %s", c->prompt, (long long)n,
               same ? "identical to HF's" : "DIFFER from HF's");
    }
    mf_tokenizer_free_buffer(ids);
    char *text = NULL;
    size_t len = 0;
    snprintf(name, sizeof name, "prompt %d decode", idx);
    if (check_ok(name, mf_tokenizer_decode(tok, c->greedy_ids, c->n_greedy, &text, &len)))
        report(len == strlen(c->text) && memcmp(text, c->text, len) == 0, name, "greedy ids -> \"%s\"", text);
    mf_tokenizer_free_buffer(text);

    // last-position logits of the prompt
    snprintf(name, sizeof name, "prompt %d logits", idx);
    float *lg = malloc((size_t)vocab * sizeof *lg);
    const int32_t slot = 0;
    const int64_t off[2] = {0, c->n_prompt};
    if (cJSON_GetArraySize(c->last_logits) != vocab) {
        report(false, name, "expected.json has %d logits, the model's vocab is %lld",
               cJSON_GetArraySize(c->last_logits), (long long)vocab);
    } else if (check_ok(name, mf_session_reset(s, -1)) &&
               check_ok(name, mf_session_forward(s, 1, &slot, c->prompt_ids, off, MF_LOGITS_LAST, lg))) {
        double diff = 0, ref_max = 0;
        int64_t v = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, c->last_logits) {
            diff = fmax(diff, fabs((double)lg[v] - it->valuedouble));
            ref_max = fmax(ref_max, fabs(it->valuedouble));
            v++;
        }
        const double rel = diff / ref_max;
        report(rel <= 1e-4, name, "max|got - HF| / max|HF| = %.2e (tol 1e-4)", rel);
    }
    free(lg);

    // greedy generation through the engine, this prompt alone
    snprintf(name, sizeof name, "prompt %d greedy", idx);
    mf_generate_params p = mf_generate_params_default();
    p.max_new_tokens = c->n_greedy;
    p.ignore_eos = true; // HF's reference ran with no EOS stop
    const mf_prompts pr = {.n = 1, .texts = &c->prompt};
    mf_generate_result r = {0};
    if (check_ok(name, mf_generate(s, &pr, &p, &r))) check_generation(name, &r.seqs[0], c);
    mf_generate_result_free(&r);
}

// Greedy generation on CUDA as `minfer generate --backend cuda` runs it (bf16,
// one session of batch 1, graphs on): each prompt's ids equal HF's (which the
// CPU's equal, checked above), and the decode steps were replayed graphs.
static void test_cuda(const char *dir, const test_case *cases, int nc) {
    if (!mf_cuda_available()) {
        printf("SKIP cuda greedy: no CUDA device\n");
        n_skip++;
        return;
    }
    mf_backend *be = NULL;
    mf_model *m = NULL;
    mf_session *s = NULL;
    if (!check_ok("cuda backend", mf_backend_init("cuda", &be)) || !check_ok("cuda load", mf_model_load(dir, be, NULL, &m)) ||
        !check_ok("cuda session", mf_session_create(m, 1, 128, &s)))
        goto out;
    for (int i = 0; i < nc; i++) {
        char name[96];
        snprintf(name, sizeof name, "cuda bf16 prompt %d greedy", i);
        mf_generate_params p = mf_generate_params_default();
        p.max_new_tokens = cases[i].n_greedy;
        p.ignore_eos = true;
        p.sampler.temperature = 0.0f;
        const mf_prompts pr = {.n = 1, .texts = &cases[i].prompt};
        mf_session_stats st0, st1;
        mf_generate_result r = {0};
        if (check_ok(name, mf_session_get_stats(s, &st0)) && check_ok(name, mf_generate(s, &pr, &p, &r)) &&
            check_ok(name, mf_session_get_stats(s, &st1))) {
            check_generation(name, &r.seqs[0], &cases[i]);
            // the first token comes from the prefill; each later one from a decode step
            const int64_t rec = st1.graphs_recorded - st0.graphs_recorded, rep = st1.graphs_replayed - st0.graphs_replayed;
            snprintf(name, sizeof name, "cuda bf16 prompt %d graphs", i);
            report(rep >= cases[i].n_greedy - 1 && rec <= 1 && (i > 0 || rec == 1) && !st1.graphs_off[0], name,
                   "%lld decode graph(s) recorded, %lld replays for %lld tokens%s%s", (long long)rec, (long long)rep,
                   (long long)cases[i].n_greedy, st1.graphs_off[0] ? "; graphs off: " : "", st1.graphs_off);
        }
        mf_generate_result_free(&r);
    }
out:
    mf_session_free(s);
    mf_model_free(m);
    mf_backend_free(be);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_default_model MODEL_DIR (models/minfer-kjv-3m)\n");
        return 2;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/expected.json", argv[1]);
    cJSON *exp = read_json(path);
    if (!exp) {
        fprintf(stderr, "cannot read %s (tools/train_tiny/train.py writes it)\n", path);
        return 2;
    }
    mf_backend *cpu = NULL;
    mf_model *m = NULL;
    mf_session *s = NULL;
    test_case cases[MAX_CASES] = {0};
    int nc = 0;
    const cJSON *jc = cJSON_GetObjectItem(exp, "cases"), *it;
    cJSON_ArrayForEach(it, jc) {
        if (nc == MAX_CASES) break;
        test_case *c = &cases[nc++];
        c->prompt = cJSON_GetStringValue(cJSON_GetObjectItem(it, "prompt"));
        c->text = cJSON_GetStringValue(cJSON_GetObjectItem(it, "text"));
        c->prompt_ids = json_ids(cJSON_GetObjectItem(it, "prompt_ids"), &c->n_prompt);
        c->greedy_ids = json_ids(cJSON_GetObjectItem(it, "greedy_ids"), &c->n_greedy);
        c->min_margin = cJSON_GetNumberValue(cJSON_GetObjectItem(it, "min_margin"));
        c->last_logits = cJSON_GetObjectItem(it, "last_logits");
        if (!c->prompt || !c->text || c->n_prompt < 1) nc = -1;
        if (nc < 0) break;
    }
    if (nc < 1) {
        report(false, "expected.json", "no usable \"cases\" in %s", path);
        goto done;
    }

    if (!check_ok("backend", mf_backend_init("cpu", &cpu))) goto done;
    if (!check_ok("load", mf_model_load(argv[1], cpu, NULL, &m))) goto done;
    mf_model_info info;
    if (!check_ok("info", mf_model_get_info(m, &info)) ||
        !check_ok("session", mf_session_create(m, nc, 128, &s)))
        goto done;
    report(mf_model_tokenizer(m) != NULL && info.bos_id == 1 && info.eos_id == 2, "load",
           "%s, %d layers, hidden %d, %d heads (%d KV), vocab %d, %.2f M parameters, bos %d, eos %d", info.arch,
           info.n_layers, info.hidden, info.n_heads, info.n_kv_heads, info.vocab, (double)info.n_params / 1e6,
           info.bos_id, info.eos_id);

    for (int i = 0; i < nc; i++) test_case_alone(m, s, &cases[i], i, info.vocab);

    // all prompts as one batch: each sequence's greedy tokens are what they are alone
    {
        const char *texts[MAX_CASES];
        for (int i = 0; i < nc; i++) texts[i] = cases[i].prompt;
        mf_generate_params p = mf_generate_params_default();
        p.max_new_tokens = cases[0].n_greedy;
        p.ignore_eos = true;
        const mf_prompts pr = {.n = nc, .texts = texts};
        mf_generate_result r = {0};
        if (check_ok("batch", mf_generate(s, &pr, &p, &r))) {
            for (int i = 0; i < nc; i++) {
                char name[64];
                snprintf(name, sizeof name, "batch seq %d greedy", i);
                check_generation(name, &r.seqs[i], &cases[i]);
            }
            printf("  \"%s\" ->%s\n", cases[0].prompt, r.seqs[0].text);
        }
        mf_generate_result_free(&r);
    }

    test_cuda(argv[1], cases, nc);

done:
    for (int i = 0; i < (nc > 0 ? nc : MAX_CASES); i++) free(cases[i].prompt_ids), free(cases[i].greedy_ids);
    mf_session_free(s);
    mf_model_free(m);
    mf_backend_free(cpu);
    cJSON_Delete(exp);
    printf("%d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    return n_fail ? 1 : 0;
}
