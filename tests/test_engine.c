// Engine tests: the sampler (greedy, temperature against the softmax by a
// chi-square test, top-k / top-p / min-p exclusions on crafted logits, the
// repetition penalty against a hand-computed case, seeds), and the generation
// loop, driven by scripted fake models (stop strings across token boundaries,
// streaming that never splits a character, EOS, lengths, batches equal to
// each prompt alone, bad inputs that leave the session usable, allocation
// failures, many calls) and, end to end, by the tiny fixture models
// (tests/fixtures/models, made by tests/fixtures/make_fixtures.py with HF
// transformers): greedy ids and text, streaming, stop strings, batches, bad
// inputs, and 1,000 generate calls.
//
//   test_engine <fixtures dir: tests/fixtures> [--filter SUBSTRING]
//
// Every check that fails prints why; the last line is "N passed, N failed".
#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "minfer/backend.h" // mf_fault_alloc_fail_after
#include "minfer/generate.h"
#include "minfer/model.h"
#include "minfer/ops.h" // mf_argmax (the fake source's argmax path)
#include "minfer/tokenizer.h"

static int n_passed, n_failed;
static const char *fixtures;
static const char *filter;
static bool case_ok;
static int n_bad_inputs; // calls checked to be refused (printed for scripts/reliability-report.sh)

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    case_ok = false;
}

#define CHECK(cond, ...)                \
    do {                                \
        if (!(cond)) fail(__VA_ARGS__); \
    } while (0)

// A case is a group of checks that passes when all of them do. CASE bodies
// may `break` out early; a case is counted when the next one begins (or at
// the end, case_flush).
static const char *cur_case;
static void case_flush(void) {
    if (!cur_case) return;
    if (case_ok) {
        n_passed++;
        printf("ok %s\n", cur_case);
    } else {
        n_failed++;
        printf("FAILED %s\n", cur_case);
    }
    cur_case = NULL;
}
static bool case_begin(const char *name) {
    case_flush();
    if (filter && !strstr(name, filter)) return false;
    cur_case = name;
    case_ok = true;
    return true;
}
#define CASE(name) for (int once_ = case_begin(name); once_; once_ = 0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Test data: a splitmix64 stream (not the sampler's PRNG).
static uint64_t rs = 12345;
static uint64_t rnext(void) {
    uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double runif(void) { return (double)(rnext() >> 11) * 0x1.0p-53; }

// Random logits: N(0, 2)-ish with a few outliers.
static void random_logits(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double u = runif() + runif() + runif() - 1.5;
        x[i] = (float)(2.0 * u);
        if (rnext() % 50 == 0) x[i] += (float)(rnext() % 2 ? 12.0 : -30.0);
    }
}

// ---- sampler: references ---------------------------------------------------------------

static int32_t ref_argmax(const float *x, int64_t n) {
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int32_t)i;
    return b;
}

// Draws `n_draws` times; counts[v] are the draws of each id.
static bool draw_counts(const mf_sampler_params *p, const float *logits, int64_t V, const int32_t *ctx, int64_t n_ctx,
                        int64_t n_draws, int64_t *counts) {
    mf_sampler *s = NULL;
    if (mf_sampler_create(p, V, &s) != MF_OK) {
        fail("sampler_create: %s", mf_last_error());
        return false;
    }
    memset(counts, 0, (size_t)V * sizeof *counts);
    bool ok = true;
    for (int64_t d = 0; d < n_draws && ok; d++) {
        int32_t id = -1;
        if (mf_sampler_sample(s, logits, ctx, n_ctx, &id) != MF_OK || id < 0 || id >= V) {
            fail("sample: id %d: %s", (int)id, mf_last_error());
            ok = false;
        } else {
            counts[id]++;
        }
    }
    mf_sampler_free(s);
    return ok;
}

// Pearson's chi-square of counts against probabilities `prob` (float64);
// a draw where prob is 0 is infinite.
static double chi_square(const int64_t *counts, const double *prob, int64_t V, int64_t n_draws) {
    double c = 0.0;
    for (int64_t i = 0; i < V; i++) {
        double e = prob[i] * (double)n_draws;
        if (e == 0.0) {
            if (counts[i]) return INFINITY;
            continue;
        }
        c += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
    }
    return c;
}

// Softmax of logits / t over the ids with keep[i] (float64).
static void ref_probs(const float *x, int64_t V, double t, const bool *keep, double *prob) {
    double m = -INFINITY, z = 0.0;
    for (int64_t i = 0; i < V; i++)
        if (keep[i] && x[i] > m) m = x[i];
    for (int64_t i = 0; i < V; i++) {
        prob[i] = keep[i] ? exp(((double)x[i] - m) / t) : 0.0;
        z += prob[i];
    }
    for (int64_t i = 0; i < V; i++) prob[i] /= z;
}

// Exactly the ids in `keep` are drawn (each at least once in n draws: the
// cases give each kept id >= 5% probability), and no other.
static void check_support(const char *what, const mf_sampler_params *p, const float *logits, int64_t V,
                          const bool *keep) {
    int64_t counts[64];
    if (!draw_counts(p, logits, V, NULL, 0, 4000, counts)) return;
    for (int64_t i = 0; i < V; i++) {
        if (keep[i]) CHECK(counts[i] > 0, "%s: id %lld should be kept but was never drawn", what, (long long)i);
        else CHECK(counts[i] == 0, "%s: id %lld should be excluded but was drawn %lld times", what, (long long)i,
                   (long long)counts[i]);
    }
}

// ---- sampler tests ---------------------------------------------------------------------

static void test_sampler_params(void) {
    CASE("sampler: bad params are refused, naming the field") {
        struct {
            mf_sampler_params p;
            const char *name;
        } bad[] = {
            {{.temperature = -0.5f}, "temperature"}, {{.temperature = NAN}, "temperature"},
            {{.temperature = INFINITY}, "temperature"}, {{.top_k = -1}, "top_k"},
            {{.top_p = 1.5f}, "top_p"}, {{.top_p = -0.1f}, "top_p"}, {{.top_p = NAN}, "top_p"},
            {{.min_p = 1.01f}, "min_p"}, {{.min_p = -1.0f}, "min_p"},
            {{.repetition_penalty = -1.0f}, "repetition_penalty"}, {{.repetition_penalty = INFINITY}, "repetition_penalty"},
        };
        n_bad_inputs += (int)(sizeof bad / sizeof bad[0]) + 3; // the table, vocab 0, NULL params, NULL out
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            mf_sampler *s = (mf_sampler *)&bad[i];
            mf_status st = mf_sampler_create(&bad[i].p, 10, &s);
            CHECK(st == MF_ERR_INVALID_ARG && s == NULL && strstr(mf_last_error(), bad[i].name),
                  "bad %s: status %s, message '%s'", bad[i].name, mf_status_str(st), mf_last_error());
        }
        mf_sampler_params ok = {.temperature = 0.7f, .top_k = 40, .top_p = 1.0f, .min_p = 1.0f, .repetition_penalty = 0.5f};
        CHECK(mf_sampler_params_check(&ok) == MF_OK, "valid params refused: %s", mf_last_error());
        mf_sampler *s = NULL;
        CHECK(mf_sampler_create(&ok, 0, &s) == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "vocab 0"),
              "vocab 0: '%s'", mf_last_error());
        CHECK(mf_sampler_create(NULL, 10, &s) == MF_ERR_INVALID_ARG, "NULL params accepted");
        CHECK(mf_sampler_create(&ok, 10, NULL) == MF_ERR_INVALID_ARG, "NULL out accepted");
        mf_sampler_free(NULL);
    }
}

static void test_sampler_bad_logits(void) {
    CASE("sampler: NaN / +inf / all -inf / bad context ids are errors; the sampler stays usable") {
        mf_sampler_params p = {.temperature = 1.0f, .repetition_penalty = 1.5f};
        mf_sampler *s = NULL;
        if (mf_sampler_create(&p, 6, &s) != MF_OK) {
            fail("create: %s", mf_last_error());
            break;
        }
        float x[6] = {1, 2, 3, 4, 5, 6};
        int32_t id;
        n_bad_inputs += 6; // NaN, +inf, all -inf, context id 6 (twice), NULL context
        x[4] = NAN;
        CHECK(mf_sampler_sample(s, x, NULL, 0, &id) == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "logit 4 is NaN"),
              "NaN: '%s'", mf_last_error());
        x[4] = INFINITY;
        CHECK(mf_sampler_sample(s, x, NULL, 0, &id) == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "+inf"),
              "+inf: '%s'", mf_last_error());
        for (int i = 0; i < 6; i++) x[i] = -INFINITY;
        CHECK(mf_sampler_sample(s, x, NULL, 0, &id) == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "-inf"),
              "all -inf: '%s'", mf_last_error());
        // A context id out of range fails after ids 0 and 5 were marked: the
        // marks must be undone, or the next call would skip their penalty.
        float y[6] = {3.0f, 2.9f, -50, -50, -50, -50};
        int32_t bad_ctx[3] = {0, 5, 6};
        CHECK(mf_sampler_sample(s, y, bad_ctx, 3, &id) == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "context[2] = 6"),
              "context id 6: '%s'", mf_last_error());
        CHECK(mf_sampler_sample(s, y, NULL, 2, &id) == MF_ERR_INVALID_ARG, "NULL context with n 2 accepted");
        mf_sampler_free(s);
        mf_sampler_params g = {.temperature = 0.0f, .repetition_penalty = 1.5f};
        if (mf_sampler_create(&g, 6, &s) != MF_OK) break;
        CHECK(mf_sampler_sample(s, y, bad_ctx, 3, &id) == MF_ERR_INVALID_ARG, "bad context accepted (greedy)");
        int32_t ctx0[1] = {0};
        CHECK(mf_sampler_sample(s, y, ctx0, 1, &id) == MF_OK && id == 1,
              "after a failed call the penalty of id 0 must still apply: got %d (want 1)", (int)id);
        // -inf for some ids is fine: never drawn.
        float z[6] = {-INFINITY, 0, -INFINITY, 0, -INFINITY, -INFINITY};
        mf_sampler_free(s);
        mf_sampler_params t = {.temperature = 1.0f, .seed = 3};
        if (mf_sampler_create(&t, 6, &s) != MF_OK) break;
        for (int d = 0; d < 200; d++) {
            CHECK(mf_sampler_sample(s, z, NULL, 0, &id) == MF_OK && (id == 1 || id == 3), "drew %d with -inf logit",
                  (int)id);
        }
        mf_sampler_free(s);
    }
}

static void test_sampler_greedy(void) {
    CASE("sampler: greedy = argmax (ties: lowest id); top_k = 1 = greedy; logits unchanged") {
        const int64_t V = 5003;
        float *x = malloc(V * sizeof *x), *copy = malloc(V * sizeof *x);
        mf_sampler *g = NULL, *k1 = NULL;
        mf_sampler_params pg = {0};
        mf_sampler_params pk = {.temperature = 1.3f, .top_k = 1, .seed = 9};
        if (mf_sampler_create(&pg, V, &g) != MF_OK || mf_sampler_create(&pk, V, &k1) != MF_OK) {
            fail("create: %s", mf_last_error());
        } else {
            for (int trial = 0; trial < 200; trial++) {
                random_logits(x, V);
                if (trial % 3 == 0) { // plant a tie at the maximum
                    int64_t a = (int64_t)(rnext() % V), b = (int64_t)(rnext() % V);
                    float top = x[ref_argmax(x, V)] + 1.0f;
                    x[a] = top;
                    x[b] = top;
                }
                if (trial % 7 == 0) x[rnext() % V] = -INFINITY;
                memcpy(copy, x, V * sizeof *x);
                int32_t want = ref_argmax(x, V), a = -1, b = -1;
                CHECK(mf_sampler_sample(g, x, NULL, 0, &a) == MF_OK && a == want, "trial %d: greedy %d, argmax %d",
                      trial, (int)a, (int)want);
                CHECK(mf_sampler_sample(k1, x, NULL, 0, &b) == MF_OK && b == want, "trial %d: top_k=1 %d, argmax %d",
                      trial, (int)b, (int)want);
                CHECK(!memcmp(copy, x, V * sizeof *x), "trial %d: logits modified", trial);
            }
        }
        mf_sampler_free(g);
        mf_sampler_free(k1);
        free(x);
        free(copy);
    }
}

static const float small_logits[8] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f, 1.5f, 0.2f};

static void test_sampler_temperature(void) {
    CASE("sampler: temperature sampling matches softmax(logits / T) (chi-square, 7 dof)") {
        const int64_t V = 8, N = 200000;
        bool all[8];
        for (int i = 0; i < 8; i++) all[i] = true;
        int64_t counts[8];
        double prob[8], wrong[8];
        const float temps[3] = {0.7f, 1.0f, 2.5f};
        for (int ti = 0; ti < 3; ti++) {
            mf_sampler_params p = {.temperature = temps[ti], .seed = 1234 + ti};
            if (!draw_counts(&p, small_logits, V, NULL, 0, N, counts)) break;
            ref_probs(small_logits, V, temps[ti], all, prob);
            double c = chi_square(counts, prob, V, N);
            // 7 degrees of freedom: P(chi2 > 40) ~ 1e-6.
            CHECK(c < 40.0, "T=%g: chi-square %.1f >= 40", (double)temps[ti], c);
            // The test has power: the same draws are far from another temperature's law.
            ref_probs(small_logits, V, temps[ti] * 1.15, all, wrong);
            double cw = chi_square(counts, wrong, V, N);
            CHECK(cw > 200.0, "T=%g: draws not distinguishable from T*1.15 (chi-square %.1f)", (double)temps[ti], cw);
        }
    }
    CASE("sampler: top-k then top-p then min-p renormalise like HF (chi-square on the kept ids)") {
        const int64_t V = 8, N = 100000;
        int64_t counts[8];
        double prob[8];
        // top_k 4 keeps ids {0, 6, 1, 2}; at T = 0.8 their probabilities are
        // .506 .271 .145 .078: top_p .8 keeps three (.777 < .8 <= .922);
        // min_p .3 drops id 1 (.145 / .506 = .287): each filter bites.
        mf_sampler_params p = {.temperature = 0.8f, .top_k = 4, .top_p = 0.8f, .min_p = 0.3f, .seed = 77};
        bool keep[8] = {true, false, false, false, false, false, true, false};
        if (draw_counts(&p, small_logits, V, NULL, 0, N, counts)) {
            ref_probs(small_logits, V, 0.8, keep, prob);
            double c = chi_square(counts, prob, V, N);
            CHECK(c < 30.0, "chi-square %.1f >= 30 (1 dof)", c);
        }
    }
}

static void test_sampler_filters(void) {
    // Probabilities .4 .3 .2 .1 (T = 1) scattered over ids 0..7; ids 1, 3, 5, 6 at -inf.
    float x[8];
    const int order[4] = {4, 0, 7, 2}; // ids by rank
    const double pr[4] = {0.4, 0.3, 0.2, 0.1};
    for (int i = 0; i < 8; i++) x[i] = -INFINITY;
    for (int r = 0; r < 4; r++) x[order[r]] = (float)log(pr[r]);
    CASE("sampler: top-p keeps the smallest set reaching p, exactly (crafted logits)") {
        const struct {
            float top_p;
            int n_keep;
        } cases[] = {{0.35f, 1}, {0.45f, 2}, {0.65f, 2}, {0.75f, 3}, {0.85f, 3}, {0.95f, 4}, {1.0f, 4}, {0.0f, 4}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            mf_sampler_params p = {.temperature = 1.0f, .top_p = cases[c].top_p, .seed = c};
            bool keep[8] = {false};
            for (int r = 0; r < cases[c].n_keep; r++) keep[order[r]] = true;
            char what[64];
            snprintf(what, sizeof what, "top_p %g", (double)cases[c].top_p);
            check_support(what, &p, x, 8, keep);
        }
        // Temperature first: at T = 0.5 the law is .16 .09 .04 .01 / .3 = .533 .3 .133 .033,
        // so top_p .5 keeps one id (at T = 1 it keeps two).
        mf_sampler_params p = {.temperature = 0.5f, .top_p = 0.5f};
        bool keep1[8] = {false};
        keep1[order[0]] = true;
        check_support("T 0.5 then top_p 0.5", &p, x, 8, keep1);
        // Top-k first, renormalised: top_k 2 gives .571 .429, so top_p .5 keeps one.
        mf_sampler_params q = {.temperature = 1.0f, .top_k = 2, .top_p = 0.5f};
        check_support("top_k 2 then top_p 0.5", &q, x, 8, keep1);
        // Ties: four ids at .25 each; top_p .3 keeps the two lowest ids.
        float t[6] = {-INFINITY, 0, 0, -INFINITY, 0, 0};
        mf_sampler_params tp = {.temperature = 1.0f, .top_p = 0.3f};
        bool keep2[6] = {false, true, true, false, false, false};
        check_support("top_p 0.3 over ties", &tp, t, 6, keep2);
        mf_sampler_params tk = {.temperature = 1.0f, .top_k = 3};
        bool keep3[6] = {false, true, true, false, true, false};
        check_support("top_k 3 over ties", &tk, t, 6, keep3);
    }
    CASE("sampler: min-p drops p < min_p * p_max, exactly (crafted logits)") {
        const struct {
            float min_p;
            int n_keep;
        } cases[] = {{0.9f, 1}, {0.76f, 1}, {0.74f, 2}, {0.51f, 2}, {0.49f, 3}, {0.26f, 3}, {0.24f, 4}, {0.0f, 4}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            mf_sampler_params p = {.temperature = 1.0f, .min_p = cases[c].min_p, .seed = 100 + c};
            bool keep[8] = {false};
            for (int r = 0; r < cases[c].n_keep; r++) keep[order[r]] = true;
            char what[64];
            snprintf(what, sizeof what, "min_p %g", (double)cases[c].min_p);
            check_support(what, &p, x, 8, keep);
        }
        // With top-p: top_p .85 keeps three, min_p .3 keeps (.4, .3, .2 >= .12): three; min_p .6 two.
        mf_sampler_params p = {.temperature = 1.0f, .top_p = 0.85f, .min_p = 0.6f};
        bool keep[8] = {false};
        keep[order[0]] = keep[order[1]] = true;
        check_support("top_p 0.85 + min_p 0.6", &p, x, 8, keep);
    }
    CASE("sampler: top-k keeps exactly the k best") {
        for (int k = 1; k <= 5; k++) {
            mf_sampler_params p = {.temperature = 1.0f, .top_k = k, .seed = (uint64_t)k};
            bool keep[8] = {false};
            for (int r = 0; r < k && r < 4; r++) keep[order[r]] = true;
            char what[64];
            snprintf(what, sizeof what, "top_k %d", k);
            check_support(what, &p, x, 8, keep);
        }
    }
}

static void test_sampler_penalty(void) {
    CASE("sampler: repetition penalty matches a hand-computed case") {
        // Greedy: id 0 (2.0) is in the context twice: once penalised it is
        // 2.0 / 1.5 = 1.333 > 1.2 (id 1) and stays the argmax; penalised twice
        // it would be 0.889 and lose.
        float x[4] = {2.0f, 1.2f, -1.0f, -1.4f};
        int32_t ctx[3] = {0, 2, 0};
        mf_sampler_params g = {.repetition_penalty = 1.5f};
        mf_sampler *s = NULL;
        if (mf_sampler_create(&g, 4, &s) != MF_OK) break;
        int32_t id = -1;
        CHECK(mf_sampler_sample(s, x, ctx, 3, &id) == MF_OK && id == 0, "greedy with penalty: %d (want 0)", (int)id);
        // Negative logits are multiplied: id 2 becomes -1.5 < -1.4 (id 3).
        float y[4] = {-INFINITY, -INFINITY, -1.0f, -1.4f};
        CHECK(mf_sampler_sample(s, y, ctx, 3, &id) == MF_OK && id == 3, "negative logit penalty: %d (want 3)", (int)id);
        CHECK(mf_sampler_sample(s, y, ctx, 0, &id) == MF_OK && id == 2, "no context: %d (want 2)", (int)id);
        mf_sampler_free(s);
        // Sampling: penalty 2 on ids {0, 3, 5} of small_logits: 2 -> 1, 0 -> 0 (either rule), -3 -> -6.
        const int64_t V = 8, N = 100000;
        int32_t c2[5] = {5, 0, 3, 0, 5};
        float pen[8];
        memcpy(pen, small_logits, sizeof pen);
        pen[0] = 1.0f;
        pen[3] = 0.0f;
        pen[5] = -6.0f;
        int64_t counts[8];
        double prob[8];
        bool all[8];
        for (int i = 0; i < 8; i++) all[i] = true;
        mf_sampler_params p = {.temperature = 1.0f, .repetition_penalty = 2.0f, .seed = 5};
        if (draw_counts(&p, small_logits, V, c2, 5, N, counts)) {
            ref_probs(pen, V, 1.0, all, prob);
            double c = chi_square(counts, prob, V, N);
            CHECK(c < 40.0, "penalised law: chi-square %.1f >= 40", c);
            ref_probs(small_logits, V, 1.0, all, prob);
            CHECK(chi_square(counts, prob, V, N) > 200.0, "draws look unpenalised");
        }
        // 0 and 1 disable it.
        for (int d = 0; d < 2; d++) {
            mf_sampler_params q = {.repetition_penalty = (float)d};
            if (mf_sampler_create(&q, 4, &s) != MF_OK) break;
            CHECK(mf_sampler_sample(s, y, ctx, 3, &id) == MF_OK && id == 2, "penalty %d: %d (want 2)", d, (int)id);
            mf_sampler_free(s);
        }
    }
}

static void test_sampler_seed(void) {
    CASE("sampler: same seed -> same sequence; another seed -> another; reseed replays") {
        const int64_t V = 32000;
        float *x = malloc(V * sizeof *x);
        enum { D = 300 };
        int32_t a[D], b[D], c[D], r[D];
        mf_sampler_params p = {.temperature = 1.0f, .top_k = 50, .top_p = 0.9f, .min_p = 0.01f, .repetition_penalty = 1.1f,
                               .seed = 42};
        mf_sampler *s1 = NULL, *s2 = NULL, *s3 = NULL;
        mf_sampler_params p3 = p;
        p3.seed = 43;
        if (mf_sampler_create(&p, V, &s1) != MF_OK || mf_sampler_create(&p, V, &s2) != MF_OK ||
            mf_sampler_create(&p3, V, &s3) != MF_OK) {
            fail("create: %s", mf_last_error());
        } else {
            uint64_t keep_rs = rs;
            for (int d = 0; d < D; d++) {
                random_logits(x, V);
                for (int64_t i = 0; i < V; i++) x[i] *= 0.3f; // flatter: many candidates
                (void)mf_sampler_sample(s1, x, a, d, &a[d]);
                (void)mf_sampler_sample(s2, x, b, d, &b[d]);
                (void)mf_sampler_sample(s3, x, c, d, &c[d]);
            }
            rs = keep_rs;
            (void)mf_sampler_reseed(s1, 42);
            for (int d = 0; d < D; d++) {
                random_logits(x, V);
                for (int64_t i = 0; i < V; i++) x[i] *= 0.3f;
                (void)mf_sampler_sample(s1, x, r, d, &r[d]);
            }
            CHECK(!memcmp(a, b, sizeof a), "same seed gave different draws");
            CHECK(!memcmp(a, r, sizeof a), "reseed did not replay the draws");
            int same = 0;
            for (int d = 0; d < D; d++) same += a[d] == c[d];
            CHECK(same < D / 2, "seeds 42 and 43 agree on %d of %d draws", same, D);
        }
        mf_sampler_free(s1);
        mf_sampler_free(s2);
        mf_sampler_free(s3);
        free(x);
    }
    CASE("sampler: cost per draw at vocab 128k (top-p without top-k)") {
        const int64_t V = 128256;
        float *x = malloc(V * sizeof *x);
        random_logits(x, V);
        mf_sampler_params p = {.temperature = 1.0f, .top_p = 0.9f, .seed = 1};
        mf_sampler *s = NULL;
        if (mf_sampler_create(&p, V, &s) == MF_OK) {
            int32_t id;
            double t = now_s();
            for (int d = 0; d < 50; d++) (void)mf_sampler_sample(s, x, NULL, 0, &id);
            double per = (now_s() - t) / 50;
            printf("  %.3f ms per draw (vocab %lld, top_p 0.9)\n", per * 1e3, (long long)V);
            CHECK(per < 0.05, "%.1f ms per draw: not O(vocab)?", per * 1e3);
        }
        mf_sampler_free(s);
        free(x);
    }
}

// ---- sampler: drawing from device candidates ----------------------------------------------

// One row's mf_topk on the CPU backend (the CPU twin the engine's candidate
// path runs on CPU sessions).
static mf_status cpu_topk(mf_backend *cpu, const float *x, int64_t V, int32_t k, float scale, int32_t *ids,
                          float *vals, float *stats) {
    mf_topk_args a = {.k = k, .scale = scale};
    const int64_t xs[2] = {1, V}, os[2] = {1, k}, ss[2] = {1, 2};
    mf_status st;
    if ((st = mf_tensor_make(&a.x, (void *)x, MF_DTYPE_F32, MF_DEVICE_CPU, 2, xs)) != MF_OK ||
        (st = mf_tensor_make(&a.ids, ids, MF_DTYPE_I32, MF_DEVICE_CPU, 2, os)) != MF_OK ||
        (st = mf_tensor_make(&a.vals, vals, MF_DTYPE_F32, MF_DEVICE_CPU, 2, os)) != MF_OK ||
        (st = mf_tensor_make(&a.stats, stats, MF_DTYPE_F32, MF_DEVICE_CPU, 2, ss)) != MF_OK)
        return st;
    return mf_topk(cpu, &a);
}

// Logit rows of several shapes: ordinary with outliers, ties everywhere,
// mostly -inf (fewer finite values than k), flat (top-p reaches far past the
// candidates), one dominant logit, and a tiny vocabulary.
enum { CAND_SHAPES = 6 };
static int64_t cand_logits(int shape, float *x) {
    static const int64_t Vs[CAND_SHAPES] = {2000, 3000, 1500, 5000, 4000, 7};
    const int64_t V = Vs[shape];
    random_logits(x, V);
    for (int64_t i = 0; i < V; i++) {
        if (shape == 1) x[i] = roundf(x[i] * 4.0f) / 4.0f;
        if (shape == 2 && rnext() % 10 < 7) x[i] = -INFINITY;
        if (shape == 3) x[i] = (float)(0.2 * runif() - 0.1);
    }
    if (shape == 2) x[V / 2] = 1.0f; // at least one finite value
    if (shape == 4) x[rnext() % V] = 20.0f;
    return V;
}

// The candidate path draws the host's token for the same seed, or declines
// (MF_ERR_UNSUPPORTED) with the rng untouched; never another token. Over
// shapes x temperatures x filter settings x seeds, with the row sum as the
// CPU twin gives it and moved by +-3e-6 relative (inside the sampler's bound
// CAND_Z_REL, as a GPU's different expf and summation order may move it).
static void test_sampler_candidates(void) {
    CASE("sampler: draws from mf_topk candidates = host draws, seed for seed (or declined, rng untouched)") {
        mf_backend *cpu = NULL;
        if (mf_backend_init("cpu", &cpu) != MF_OK) {
            fail("cpu backend: %s", mf_last_error());
            break;
        }
        float *x = malloc(5000 * sizeof *x), *vals = malloc(MF_TOPK_MAX * sizeof *vals);
        int32_t *ids = malloc(MF_TOPK_MAX * sizeof *ids);
        static const float temps[4] = {0.25f, 0.7f, 1.0f, 1.6f};
        static const struct { int32_t top_k; float top_p, min_p; bool want_k; } cfg[] = {
            {2, 0, 0, true},       {5, 0, 0, true},          {40, 0, 0, true},       {1024, 0, 0, true},
            {1025, 0, 0, false},   {0, 0.5f, 0, true},       {0, 0.9f, 0, true},     {0, 0.99f, 0, true},
            {0, 0, 0.05f, true},   {0, 0.9f, 0.2f, true},    {50, 0.8f, 0, true},    {50, 0.9f, 0.1f, true},
            {0, 0, 0, false},      {0, 1.0f, 0, false},
        };
        const int n_cfg = (int)(sizeof cfg / sizeof cfg[0]);
        int64_t same = 0, declined = 0, declined_k = 0, compared = 0;
        for (int shape = 0; shape < CAND_SHAPES && case_ok; shape++) {
            const int64_t V = cand_logits(shape, x);
            for (int t = 0; t < 4 && case_ok; t++)
                for (int c = 0; c < n_cfg && case_ok; c++) {
                    mf_sampler_params p = {.temperature = temps[t], .top_k = cfg[c].top_k, .top_p = cfg[c].top_p,
                                           .min_p = cfg[c].min_p};
                    const int32_t k = mf_sampler_candidates_k(&p, V);
                    const int32_t want_k = !cfg[c].want_k ? 0 : cfg[c].top_k > 1 ? cfg[c].top_k : MF_TOPK_MAX;
                    CHECK(k == (want_k < V ? want_k : (int32_t)V), "shape %d config %d: candidates_k %d", shape, c, k);
                    if (k == 0) continue;
                    float stats[2];
                    const float scale = mf_sampler_candidates_scale(&p);
                    if (cpu_topk(cpu, x, V, k, scale, ids, vals, stats) != MF_OK) {
                        fail("topk: %s", mf_last_error());
                        break;
                    }
                    mf_sampler *s = NULL;
                    if (mf_sampler_create(&p, V, &s) != MF_OK) {
                        fail("create: %s", mf_last_error());
                        break;
                    }
                    for (int z = 0; z < 3; z++) {
                        float st2[2] = {stats[0], stats[1] * (float)(z == 0 ? 1.0 : z == 1 ? 1.0 - 3e-6 : 1.0 + 3e-6)};
                        for (uint64_t seed = 0; seed < 25; seed++) {
                            mf_rng ra, rb, r0;
                            mf_rng_seed(&ra, seed * 7919 + (uint64_t)c), rb = ra, r0 = ra;
                            int32_t ia = -1, ib = -1;
                            mf_status sa = mf_sampler_sample_rng(s, &ra, x, NULL, 0, &ia);
                            mf_status sb = mf_sampler_sample_candidates(s, &rb, ids, vals, k, st2, &ib);
                            compared++;
                            if (sa != MF_OK) {
                                fail("host: %s", mf_last_error());
                            } else if (sb == MF_ERR_UNSUPPORTED) {
                                declined++;
                                declined_k += cfg[c].top_k > 1;
                                CHECK(!memcmp(&rb, &r0, sizeof rb), "shape %d T %g config %d: declined but used the rng",
                                      shape, (double)temps[t], c);
                            } else {
                                CHECK(sb == MF_OK && ia == ib && !memcmp(&ra, &rb, sizeof ra),
                                      "shape %d T %g config %d z %d seed %llu: host %d, candidates %d (%s)", shape,
                                      (double)temps[t], c, z, (unsigned long long)seed, (int)ia, (int)ib,
                                      sb == MF_OK ? "ok" : mf_last_error());
                                same += sb == MF_OK && ia == ib;
                            }
                        }
                    }
                    mf_sampler_free(s);
                }
        }
        printf("  %lld draws compared: %lld identical from the candidates, %lld declined (logits path)\n",
               (long long)compared, (long long)same, (long long)declined);
        CHECK(declined_k == 0, "%lld top-k draws declined (top-k candidates are always exact)", (long long)declined_k);
        CHECK(same > compared / 2 && declined > 0, "want most draws from the candidates and some declined (flat rows)");

        // Refusals: the host sampler's messages.
        mf_sampler_params p = {.temperature = 1.0f, .top_k = 3};
        mf_sampler *s = NULL;
        if (mf_sampler_create(&p, 10, &s) == MF_OK) {
            float y[10], stats[2];
            const float bad[2] = {NAN, INFINITY};
            for (int b = 0; b < 3; b++) {
                for (int i = 0; i < 10; i++) y[i] = b == 2 ? -INFINITY : (float)i;
                if (b < 2) y[6] = bad[b], y[8] = bad[1 - b];
                char want[256];
                mf_rng r;
                mf_rng_seed(&r, 1);
                int32_t id;
                mf_status sa = mf_sampler_sample_rng(s, &r, y, NULL, 0, &id);
                snprintf(want, sizeof want, "%s", mf_last_error());
                mf_status sb = cpu_topk(cpu, y, 10, 3, 1.0f, ids, vals, stats);
                if (sb == MF_OK) sb = mf_sampler_sample_candidates(s, &r, ids, vals, 3, stats, &id);
                CHECK(sa == MF_ERR_INVALID_ARG && sb == sa && !strcmp(want, mf_last_error()),
                      "bad row %d: host '%s', candidates '%s'", b, want, mf_last_error());
                n_bad_inputs++;
            }
            // Candidates out of rank order or out of range are refused, not drawn from.
            int32_t bi[3] = {4, 5, 3};
            float bv[3] = {2.0f, 3.0f, 1.0f}, bs[2] = {3.0f, 2.0f};
            int32_t id;
            mf_rng r;
            mf_rng_seed(&r, 1);
            CHECK(mf_sampler_sample_candidates(s, &r, bi, bv, 3, bs, &id) == MF_ERR_INVALID_ARG &&
                      strstr(mf_last_error(), "out of rank order"),
                  "unordered candidates: '%s'", mf_last_error());
            bi[0] = 10, bv[0] = 4.0f;
            CHECK(mf_sampler_sample_candidates(s, &r, bi, bv, 3, bs, &id) == MF_ERR_INVALID_ARG &&
                      strstr(mf_last_error(), "candidate 0 is (10"),
                  "id out of range: '%s'", mf_last_error());
            CHECK(mf_sampler_sample_candidates(s, &r, bi, bv, 11, bs, &id) == MF_ERR_INVALID_ARG, "k 11 > vocab 10 accepted");
            n_bad_inputs += 3;
            mf_sampler_free(s);
        }
        free(x);
        free(vals);
        free(ids);
        mf_backend_free(cpu);
    }
}

// ---- a fake model --------------------------------------------------------------------------
// A runner (src/runtime/runner.h) whose "KV cache" holds each token id at its
// (block, row), written through the engine's block tables; every run checks
// the contract (sizes, block ids, ids in range) and returns logits that
// depend only on the sequence's own context, read back through its table,
// so a sequence gives the same logits in any batch:
//   SCRIPT: the generated position j (tokens after the prompt) gets script[j]
//           with logit +8 and everything else 0 (greedy follows the script);
//   HASH:   pseudo-random logits from the last two ids (EOS pushed down).
// The argmax and top-k outputs come from the real ops on the CPU backend.

enum { FAKE_SCRIPT, FAKE_HASH, FAKE_BS = 16 };

typedef struct {
    mf_runner r;
    int mode;
    int64_t vocab, max_seq;
    int32_t max_batch;
    int32_t *kv;        // (n_blocks, FAKE_BS) token ids
    int64_t *prompt;    // (n_blocks) prompt length of the sequence whose first block this is
    const int32_t *script;
    int64_t n_script;
    int32_t eos;
    int64_t calls, fail_at; // fail_at > 0: the fail_at-th run from now fails
    int32_t batch_log[4096];
    int64_t n_log;
    bool contract_broken;
    // poison: the poison_call-th run (counting from 1) gets output row poison_row
    // spoiled: kind 1 logit poison_idx NaN, 2 it +inf, 3 every logit -inf
    int64_t poison_call, poison_idx;
    int32_t poison_row, poison_kind;
    mf_backend *cpu;
    float *lg;          // (max_batch, vocab): the last run's logits
    int64_t greedy_calls, topk_calls, logit_reads, lg_rows;
} fake_model;

static float hash_logit(int32_t a, int32_t b, int64_t j) {
    uint64_t z = (uint64_t)(uint32_t)a * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)b * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)j * 0x165667B19E3779F9ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 29)) * 0x94D049BB133111EBull;
    z ^= z >> 32;
    return (float)((double)(z & 0xFFFFFF) / (double)0x1000000 * 8.0 - 4.0);
}

static mf_status fake_reduce(fake_model *f, const mf_run_batch *b, int32_t rows) {
    if (b->kind == MF_RUN_LOGITS) {
        memcpy(b->logits, f->lg, (size_t)(rows * f->vocab) * sizeof *f->lg);
        return MF_OK;
    }
    const int64_t xs[2] = {rows, f->vocab}, n = rows;
    mf_status st;
    if (b->kind == MF_RUN_ARGMAX) {
        f->greedy_calls++;
        mf_argmax_args a;
        if ((st = mf_tensor_make(&a.x, f->lg, MF_DTYPE_F32, MF_DEVICE_CPU, 2, xs)) != MF_OK ||
            (st = mf_tensor_make(&a.ids, b->ids, MF_DTYPE_I32, MF_DEVICE_CPU, 1, &n)) != MF_OK ||
            (st = mf_tensor_make(&a.vals, b->vals, MF_DTYPE_F32, MF_DEVICE_CPU, 1, &n)) != MF_OK)
            return st;
        return mf_argmax(f->cpu, &a);
    }
    f->topk_calls++;
    mf_topk_args a = {.k = b->k, .scale = b->scale};
    const int64_t os[2] = {rows, b->k}, ss[2] = {rows, 2};
    if ((st = mf_tensor_make(&a.x, f->lg, MF_DTYPE_F32, MF_DEVICE_CPU, 2, xs)) != MF_OK ||
        (st = mf_tensor_make(&a.ids, b->ids, MF_DTYPE_I32, MF_DEVICE_CPU, 2, os)) != MF_OK ||
        (st = mf_tensor_make(&a.vals, b->vals, MF_DTYPE_F32, MF_DEVICE_CPU, 2, os)) != MF_OK ||
        (st = mf_tensor_make(&a.stats, b->stats, MF_DTYPE_F32, MF_DEVICE_CPU, 2, ss)) != MF_OK)
        return st;
    return mf_topk(f->cpu, &a);
}

static mf_status fake_run(void *ctx, const mf_run_batch *b) {
    fake_model *f = ctx;
    f->calls++;
    f->lg_rows = 0;
    if (f->n_log < 4096) f->batch_log[f->n_log++] = b->n_seqs;
    if (f->fail_at > 0 && --f->fail_at == 0) return mf_fail(MF_ERR_CUDA, "fake: injected run failure");
    const int32_t W = f->r.table_width;
    if (b->n_seqs < 1 || b->n_seqs > f->max_batch || b->cu[0] != 0 || b->cu[b->n_seqs] > f->r.max_tokens) {
        f->contract_broken = true;
        return MF_ERR_INVALID_ARG;
    }
    int32_t rows = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        const int32_t *tab = b->tables + (int64_t)i * W;
        const int64_t n = b->cu[i + 1] - b->cu[i], L = b->pos0[i] + n;
        if (n < 1 || b->pos0[i] < 0 || L > f->max_seq) {
            f->contract_broken = true;
            return MF_ERR_INVALID_ARG;
        }
        for (int64_t j = 0; j < (L + FAKE_BS - 1) / FAKE_BS; j++)
            if (tab[j] < 0 || tab[j] >= f->r.n_blocks) {
                f->contract_broken = true;
                return MF_ERR_INVALID_ARG;
            }
        if (b->pos0[i] == 0) f->prompt[tab[0]] = n;
        for (int64_t t = 0; t < n; t++) {
            const int64_t p = b->pos0[i] + t;
            const int32_t tok = b->tokens[b->cu[i] + t];
            if (tok < 0 || tok >= f->vocab) f->contract_broken = true;
            f->kv[(int64_t)tab[p / FAKE_BS] * FAKE_BS + p % FAKE_BS] = tok;
        }
        if (!b->out[i]) continue;
        float *row = f->lg + (int64_t)rows * f->vocab;
        if (f->mode == FAKE_SCRIPT) {
            const int64_t j = L - f->prompt[tab[0]];
            for (int64_t v = 0; v < f->vocab; v++) row[v] = 0.0f;
            if (j < f->n_script) row[f->script[j]] = 8.0f;
        } else {
            const int32_t a = f->kv[(int64_t)tab[(L - 1) / FAKE_BS] * FAKE_BS + (L - 1) % FAKE_BS];
            const int32_t c = L > 1 ? f->kv[(int64_t)tab[(L - 2) / FAKE_BS] * FAKE_BS + (L - 2) % FAKE_BS] : -1;
            for (int64_t v = 0; v < f->vocab; v++) row[v] = hash_logit(a, c, v);
            if (f->eos >= 0) row[f->eos] = -6.0f;
        }
        if (f->calls == f->poison_call && rows == f->poison_row) {
            if (f->poison_kind == 3)
                for (int64_t v = 0; v < f->vocab; v++) row[v] = -INFINITY;
            else
                row[f->poison_idx] = f->poison_kind == 1 ? NAN : INFINITY;
        }
        rows++;
    }
    if (rows != b->n_out) {
        f->contract_broken = true;
        return MF_ERR_INVALID_ARG;
    }
    f->lg_rows = rows;
    return fake_reduce(f, b, rows);
}

static mf_status fake_read_logits(void *ctx, int32_t row, float *logits) {
    fake_model *f = ctx;
    if (row < 0 || row >= f->lg_rows) {
        f->contract_broken = true;
        return MF_ERR_UNSUPPORTED;
    }
    f->logit_reads++;
    memcpy(logits, f->lg + (int64_t)row * f->vocab, (size_t)f->vocab * sizeof *logits);
    return MF_OK;
}

static mf_status fake_copy_block(void *ctx, int32_t src, int32_t dst) {
    fake_model *f = ctx;
    memcpy(f->kv + (int64_t)dst * FAKE_BS, f->kv + (int64_t)src * FAKE_BS, FAKE_BS * sizeof *f->kv);
    return MF_OK;
}

// max_batch sequences of up to max_seq tokens (the pool holds them all), as a
// session of that size. Logits only, unless fake_device: then the argmax and
// top-k outputs too (and read_logits).
static void fake_init(fake_model *f, int mode, int64_t vocab, int32_t max_batch, int64_t max_seq, int32_t eos,
                      const mf_tokenizer *tok) {
    memset(f, 0, sizeof *f);
    f->mode = mode;
    f->vocab = vocab;
    f->max_batch = max_batch;
    f->max_seq = max_seq;
    f->eos = eos;
    const int32_t W = (int32_t)((max_seq + FAKE_BS - 1) / FAKE_BS), nb = max_batch * W;
    f->r = (mf_runner){.ctx = f, .run = fake_run, .copy_block = fake_copy_block,
                       .vocab = vocab, .n_blocks = nb, .block_size = FAKE_BS, .table_width = W,
                       .max_seqs = max_batch, .max_tokens = (int64_t)max_batch * max_seq, .tok = tok,
                       .n_eos = eos >= 0 ? 1 : 0};
    f->r.eos_ids[0] = eos;
    f->kv = calloc((size_t)nb * FAKE_BS, sizeof *f->kv);
    f->prompt = calloc((size_t)nb, sizeof *f->prompt);
    f->lg = malloc((size_t)(max_batch * vocab) * sizeof *f->lg);
    if (mf_backend_init("cpu", &f->cpu) != MF_OK) fail("cpu backend: %s", mf_last_error());
}

static void fake_free(fake_model *f) {
    mf_backend_free(f->cpu);
    free(f->lg);
    free(f->kv);
    free(f->prompt);
}

static void fake_device(fake_model *f) { f->r.read_logits = fake_read_logits; }

// mf_generate on the fake.
static mf_status fake_generate(fake_model *f, const mf_prompts *pr, const mf_generate_params *p,
                               mf_generate_result *out) {
    return mf_generate_runner(&f->r, f->max_seq, pr, p, out);
}

// ---- streaming capture ---------------------------------------------------------------------

typedef struct {
    char text[8][4096];
    size_t len[8];
    int chunks[8];
    size_t ends[8][512]; // where the chunks ended
    bool bad_seq;        // a call with a bad sequence index or no bytes
} capture;

static void on_text(int32_t seq, const char *text, size_t len, void *user) {
    capture *c = user;
    if (seq < 0 || seq >= 8 || len == 0) {
        c->bad_seq = true;
        return;
    }
    if (c->len[seq] + len < sizeof c->text[seq]) memcpy(c->text[seq] + c->len[seq], text, len);
    c->len[seq] += len;
    if (c->chunks[seq] < 512) c->ends[seq][c->chunks[seq]] = c->len[seq];
    c->chunks[seq]++;
}

// Length of the valid UTF-8 character at s[i] (within n), 0 when none starts there.
static size_t utf8_char_at(const unsigned char *s, size_t i, size_t n) {
    unsigned char c = s[i];
    size_t need = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (need == 0 || i + need > n) return 0;
    for (size_t k = 1; k < need; k++)
        if ((s[i + k] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) || (c == 0xF0 && s[i + 1] < 0x90) ||
        (c == 0xF4 && s[i + 1] > 0x8F))
        return 0;
    return need;
}

// What was streamed for sequence `seq` is the result's text, and no chunk
// boundary falls inside a valid UTF-8 character of it. (Bytes that are not
// part of any character, e.g. a lone lead byte followed by another lead,
// may end a chunk: there is no character there to split.)
static bool stream_ok(const capture *c, int32_t seq, const char *text, size_t len) {
    if (c->bad_seq || c->len[seq] != len || memcmp(c->text[seq], text, len)) {
        fail("sequence %d: the streamed text (%zu bytes) is not the result's text (%zu bytes)", (int)seq, c->len[seq], len);
        return false;
    }
    const unsigned char *u = (const unsigned char *)text;
    int b = 0;
    for (size_t i = 0; i < len;) {
        size_t l = utf8_char_at(u, i, len);
        if (l == 0) l = 1;
        while (b < c->chunks[seq] && b < 512 && c->ends[seq][b] <= i) b++;
        if (l > 1 && b < c->chunks[seq] && b < 512 && c->ends[seq][b] < i + l) {
            fail("sequence %d: a chunk ends at byte %zu, inside the %zu-byte character at %zu", (int)seq, c->ends[seq][b],
                 l, i);
            return false;
        }
        i += l;
    }
    return true;
}

static int32_t *encode(const mf_tokenizer *tok, const char *text, int64_t *n) {
    int32_t *ids = NULL;
    if (mf_tokenizer_encode(tok, text, strlen(text), false, &ids, n) != MF_OK) {
        fail("encode '%s': %s", text, mf_last_error());
        return NULL;
    }
    return ids;
}

// Greedy generation of a scripted text after prompt "Once", with stop strings.
typedef struct {
    mf_status st;
    mf_generate_result r;
    capture cap;
} run_out;

static void run_script(const mf_tokenizer *tok, const char *script_text, const int32_t *extra, int n_extra,
                       const char *const *stop, int n_stop, int64_t max_new, bool ignore_eos, run_out *o) {
    int64_t n_script;
    int32_t *ids = encode(tok, script_text, &n_script);
    int32_t script[512];
    memcpy(script, ids, (size_t)n_script * sizeof *ids);
    for (int i = 0; i < n_extra; i++) script[n_script + i] = extra[i];
    fake_model f;
    fake_init(&f, FAKE_SCRIPT, mf_tokenizer_vocab_size(tok), 2, 256, mf_tokenizer_eos_id(tok), tok);
    f.script = script;
    f.n_script = n_script + n_extra;
    const char *texts[1] = {"Once"};
    mf_prompts pr = {.n = 1, .texts = texts};
    mf_generate_params p = mf_generate_params_default();
    p.max_new_tokens = max_new;
    p.stop = stop;
    p.n_stop = n_stop;
    p.ignore_eos = ignore_eos;
    p.on_text = on_text;
    memset(&o->cap, 0, sizeof o->cap);
    p.user = &o->cap;
    o->st = fake_generate(&f, &pr, &p, &o->r);
    if (o->st != MF_OK) fail("generate: %s", mf_last_error());
    CHECK(!f.contract_broken, "the loop broke the forward contract");
    if (o->st == MF_OK) {
        mf_generation *g = &o->r.seqs[0];
        (void)stream_ok(&o->cap, 0, g->text, g->text_len);
        CHECK(strlen(g->text) == g->text_len, "text_len %zu, strlen %zu", g->text_len, strlen(g->text));
        for (int64_t j = 0; j < g->n_tokens && j < f.n_script; j++)
            CHECK(g->tokens[j] == script[j], "token %lld: %d != script %d", (long long)j, (int)g->tokens[j], (int)script[j]);
    }
    fake_free(&f);
    mf_tokenizer_free_buffer(ids);
}

// ---- generation tests (fake model) -------------------------------------------------------

static void test_generate_text(const mf_tokenizer *tok) {
    const char *story = "Hello world, this is a test. Caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89 end";
    run_out o;
    CASE("generate (fake): stream == text == decode, chunks never split a character; length") {
        run_script(tok, story, NULL, 0, NULL, 0, 1000, false, &o);
        if (o.st == MF_OK) {
            mf_generation *g = &o.r.seqs[0];
            // The script ends: then all logits are 0 and greedy takes id 0 ("!") until max_new_tokens.
            CHECK(g->finish == MF_FINISH_LENGTH, "finish %s", mf_finish_reason_str(g->finish));
            CHECK(g->n_tokens == 256 - g->n_prompt + 1, "%lld tokens: max_seq 256 allows %lld", (long long)g->n_tokens,
                  (long long)(256 - g->n_prompt + 1));
            CHECK(!strncmp(g->text, story, strlen(story)), "text '%s' does not start with the script", g->text);
            char *dec = NULL;
            size_t n = 0;
            // decode(prompt ++ tokens) minus decode(prompt)
            int32_t all[300];
            memcpy(all, g->prompt, g->n_prompt * sizeof *all);
            memcpy(all + g->n_prompt, g->tokens, g->n_tokens * sizeof *all);
            if (mf_tokenizer_decode(tok, all, g->n_prompt + g->n_tokens, &dec, &n) == MF_OK)
                CHECK(n == strlen("Once") + g->text_len && !memcmp(dec + 4, g->text, g->text_len), "text != decode");
            mf_tokenizer_free_buffer(dec);
            CHECK(o.cap.chunks[0] > 10, "only %d chunks: not streamed per token?", o.cap.chunks[0]);
        }
        mf_generate_result_free(&o.r);
        run_script(tok, story, NULL, 0, NULL, 0, 5, false, &o);
        if (o.st == MF_OK)
            CHECK(o.r.seqs[0].n_tokens == 5 && o.r.seqs[0].finish == MF_FINISH_LENGTH, "max_new 5: %lld tokens, %s",
                  (long long)o.r.seqs[0].n_tokens, mf_finish_reason_str(o.r.seqs[0].finish));
        mf_generate_result_free(&o.r);
        run_script(tok, story, NULL, 0, NULL, 0, 0, false, &o);
        if (o.st == MF_OK)
            CHECK(o.r.seqs[0].n_tokens == 0 && o.r.seqs[0].text_len == 0 && o.r.seqs[0].finish == MF_FINISH_LENGTH &&
                      o.cap.chunks[0] == 0,
                  "max_new 0: %lld tokens", (long long)o.r.seqs[0].n_tokens);
        mf_generate_result_free(&o.r);
    }
    CASE("generate (fake): EOS ends a sequence (kept in tokens, not in text); ignore_eos goes on") {
        int32_t eos = mf_tokenizer_eos_id(tok);
        int32_t extra[2] = {eos, 11};
        run_script(tok, "Hello there", extra, 2, NULL, 0, 100, false, &o);
        if (o.st == MF_OK) {
            mf_generation *g = &o.r.seqs[0];
            CHECK(g->finish == MF_FINISH_EOS && g->n_tokens == 3 && g->tokens[2] == eos, "finish %s, %lld tokens",
                  mf_finish_reason_str(g->finish), (long long)g->n_tokens);
            CHECK(!strcmp(g->text, "Hello there"), "text '%s'", g->text);
        }
        mf_generate_result_free(&o.r);
        run_script(tok, "Hello there", extra, 2, NULL, 0, 5, true, &o);
        if (o.st == MF_OK) {
            mf_generation *g = &o.r.seqs[0];
            CHECK(g->finish == MF_FINISH_LENGTH && g->n_tokens == 5, "ignore_eos: %s", mf_finish_reason_str(g->finish));
            CHECK(!strncmp(g->text, "Hello there<|endoftext|>,", 25), "ignore_eos text '%s'", g->text);
        }
        mf_generate_result_free(&o.r);
    }
    CASE("generate (fake): stop strings across tokens; earliest wins; never streamed; partial matches released") {
        const struct {
            const char *stops[3];
            int n;
            const char *text; // what is left
            mf_finish_reason why;
        } cases[] = {
            {{"s is a t"}, 1, "Hello world, thi", MF_FINISH_STOP},        // spans " this", " is", " a", " test"
            {{"test", "this"}, 2, "Hello world, ", MF_FINISH_STOP},        // the earliest occurrence wins
            {{"Hello"}, 1, "", MF_FINISH_STOP},                            // at the very start
            {{"is a tex", "e\xe6\x97\xa5"}, 2, NULL, MF_FINISH_LENGTH},    // partial matches only: all text
            {{"\xe6\x97\xa5\xe6\x9c\xac"}, 1, "Hello world, this is a test. Caf\xc3\xa9 ", MF_FINISH_STOP},
            {{"\x9f\x8e"}, 1, "Hello world, this is a test. Caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac ", MF_FINISH_STOP}, // mid-character
            {{" end"}, 1, "Hello world, this is a test. Caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89", MF_FINISH_STOP},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int64_t n_story;
            int32_t *sid = encode(tok, story, &n_story);
            mf_tokenizer_free_buffer(sid);
            run_script(tok, story, NULL, 0, cases[c].stops, cases[c].n, n_story, false, &o);
            if (o.st != MF_OK) continue;
            mf_generation *g = &o.r.seqs[0];
            const char *want = cases[c].text ? cases[c].text : story;
            CHECK(g->finish == cases[c].why && !strcmp(g->text, want), "stop '%s': %s, text '%s' (want '%s')",
                  cases[c].stops[0], mf_finish_reason_str(g->finish), g->text, want);
            CHECK(o.cap.len[0] == strlen(want), "stop '%s': %zu bytes streamed", cases[c].stops[0], o.cap.len[0]);
            mf_generate_result_free(&o.r);
        }
    }
}

// Greedy through the source's argmax (forward_greedy) vs the host sampler:
// the same tokens and text for greedy (temperature 0, and top_k 1 at a
// temperature); the argmax path used exactly when the sampling is greedy
// with no repetition penalty and host_sampling is off; a NaN / +inf logit
// or an all -inf row refused by both paths with the same sequence, token and
// logit index in the message.
static void test_generate_device_greedy(const mf_tokenizer *tok) {
    CASE("generate (fake): greedy through the source's argmax = host sampling, token for token; poisoned logits named alike") {
        const int64_t V = mf_tokenizer_vocab_size(tok);
        const char *prompts[3] = {"The quick brown fox", "A", "Lorem ipsum dolor sit amet"};
        mf_prompts pr = {.n = 3, .texts = prompts};
        const mf_sampler_params kinds[5] = {
            {0},                                          // greedy: device
            {.temperature = 0.7f, .top_k = 1, .seed = 3}, // top_k 1: device
            {.repetition_penalty = 1.3f},                 // greedy with a penalty: host
            {.temperature = 0.7f, .top_k = 5, .seed = 3}, // sampling: host
            {.repetition_penalty = 1.0f},                 // penalty 1 is off: device
        };
        const bool want_device[5] = {true, true, false, false, true};
        for (int k = 0; k < 5; k++) {
            mf_generate_result r[2];
            int64_t greedy_calls[2], calls[2];
            bool ok = true;
            for (int host = 0; host < 2; host++) {
                fake_model f;
                fake_init(&f, FAKE_HASH, V, 4, 64, mf_tokenizer_eos_id(tok), tok);
                fake_device(&f);
                mf_generate_params p = mf_generate_params_default();
                p.max_new_tokens = 25;
                p.sampler = kinds[k];
                p.host_sampling = host == 1;
                mf_status st = fake_generate(&f, &pr, &p, &r[host]);
                CHECK(st == MF_OK && !f.contract_broken, "kind %d host %d: %s", k, host, mf_last_error());
                ok &= st == MF_OK;
                greedy_calls[host] = f.greedy_calls, calls[host] = f.calls;
                fake_free(&f);
            }
            if (!ok) break;
            CHECK(greedy_calls[0] == (want_device[k] ? calls[0] : 0) && greedy_calls[1] == 0,
                  "kind %d: %lld of %lld forward calls through the argmax (host_sampling: %lld); want %s", k,
                  (long long)greedy_calls[0], (long long)calls[0], (long long)greedy_calls[1],
                  want_device[k] ? "all, then none" : "none");
            for (int i = 0; i < 3; i++) {
                const mf_generation *a = &r[0].seqs[i], *b = &r[1].seqs[i];
                CHECK(a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof *a->tokens) &&
                          a->finish == b->finish && !strcmp(a->text, b->text),
                      "kind %d sequence %d: %lld tokens through the argmax, %lld on the host, or the text differs", k, i,
                      (long long)a->n_tokens, (long long)b->n_tokens);
            }
            CHECK(r[0].stats.decode_steps == r[1].stats.decode_steps && r[0].stats.decode_steps > 0,
                  "kind %d: %lld vs %lld decode steps", k, (long long)r[0].stats.decode_steps,
                  (long long)r[1].stats.decode_steps);
            mf_generate_result_free(&r[0]);
            mf_generate_result_free(&r[1]);
        }
        // Poisoned logits: call 1 is the prefill (token 0), call 3 the second decode step (token 2).
        static const struct { int64_t call; int32_t row, kind; int64_t idx; } poison[4] = {
            {3, 1, 1, 17}, {3, 2, 2, 5}, {1, 0, 3, 0}, {4, 1, 1, 0}};
        for (int c = 0; c < 4; c++) {
            char msg[2][512];
            mf_status st[2];
            for (int host = 0; host < 2; host++) {
                fake_model f;
                fake_init(&f, FAKE_HASH, V, 4, 64, -1, tok);
                fake_device(&f);
                f.poison_call = poison[c].call, f.poison_row = poison[c].row;
                f.poison_kind = poison[c].kind, f.poison_idx = poison[c].idx;
                mf_generate_params p = mf_generate_params_default();
                p.max_new_tokens = 10;
                p.host_sampling = host == 1;
                mf_generate_result r;
                st[host] = fake_generate(&f, &pr, &p, &r);
                snprintf(msg[host], sizeof msg[host], "%s", mf_last_error());
                if (st[host] == MF_OK) mf_generate_result_free(&r);
                fake_free(&f);
            }
            char where[96], what[64];
            snprintf(where, sizeof where, "generate: sequence %d, token %lld: ", (int)poison[c].row,
                     (long long)(poison[c].call - 1));
            if (poison[c].kind == 3)
                snprintf(what, sizeof what, "all %lld logits are -inf", (long long)V);
            else
                snprintf(what, sizeof what, "logit %lld is %s", (long long)poison[c].idx, poison[c].kind == 1 ? "NaN" : "");
            for (int host = 0; host < 2; host++)
                CHECK(st[host] == MF_ERR_INVALID_ARG && strstr(msg[host], where) && strstr(msg[host], what) &&
                          (poison[c].kind != 2 || strstr(msg[host], "+inf")),
                      "poison %d (%s): %s '%s', want '%s...%s'", c, host ? "host" : "argmax", mf_status_str(st[host]),
                      msg[host], where, what);
            n_bad_inputs += 2;
        }
    }
}

// Sampling through the source's top-k candidates = host sampling, token for
// token, over filter settings and seeds; candidates used exactly when the
// sampler says they can be exact (every step, the prefill's included), a
// row's logits read back when its candidates do not decide; a
// poisoned decode row refused with the host's message.
static void test_generate_device_candidates(const mf_tokenizer *tok) {
    CASE("generate (fake): sampling from the source's top-k candidates = host sampling, token for token") {
        const int64_t V = mf_tokenizer_vocab_size(tok);
        const char *prompts[3] = {"The quick brown fox", "A", "Lorem ipsum dolor sit amet"};
        mf_prompts pr = {.n = 3, .texts = prompts};
        const mf_sampler_params kinds[] = {
            {.temperature = 0.7f, .top_k = 5},                   // candidates
            {.temperature = 1.0f, .top_k = 40},                  // candidates
            {.temperature = 0.3f, .top_p = 0.9f},                // flat rows: top-p past the candidates, logits read
            {.temperature = 1.2f, .top_p = 0.95f, .min_p = 0.05f},
            {.temperature = 0.2f, .min_p = 0.1f},
            {.temperature = 0.5f, .top_k = 50, .top_p = 0.8f},
            {.temperature = 0.05f, .top_p = 0.9f},               // sharp rows: top-p within the candidates
            {.temperature = 0.05f, .min_p = 0.5f},               // and min-p
            {.temperature = 1.0f},                               // temperature alone: host
            {.temperature = 1.0f, .top_k = 20, .repetition_penalty = 1.2f}, // penalty: host
            {.temperature = 1.0f, .top_k = MF_TOPK_MAX + 1},     // above the cap: host
        };
        const int n_kinds = (int)(sizeof kinds / sizeof kinds[0]);
        int64_t picks = 0, reads = 0;
        for (int k = 0; k < n_kinds && case_ok; k++)
            for (uint64_t seed = 1; seed <= 3 && case_ok; seed++) {
                const bool want_cand = mf_sampler_candidates_k(&kinds[k], V) > 0;
                mf_generate_result r[2];
                int64_t topk_calls[2], reads_f[2];
                bool ok = true;
                for (int host = 0; host < 2; host++) {
                    fake_model f;
                    fake_init(&f, FAKE_HASH, V, 4, 64, mf_tokenizer_eos_id(tok), tok);
                fake_device(&f);
                        mf_generate_params p = mf_generate_params_default();
                    p.max_new_tokens = 20;
                    p.sampler = kinds[k];
                    p.sampler.seed = seed * 101;
                    p.host_sampling = host == 1;
                    mf_status st = fake_generate(&f, &pr, &p, &r[host]);
                    CHECK(st == MF_OK && !f.contract_broken, "kind %d host %d: %s", k, host, mf_last_error());
                    ok &= st == MF_OK;
                    topk_calls[host] = f.topk_calls, reads_f[host] = f.logit_reads;
                    fake_free(&f);
                }
                if (!ok) break;
                const mf_generate_stats *a = &r[0].stats, *b = &r[1].stats;
                CHECK(topk_calls[0] == (want_cand ? a->decode_steps + 1 : 0) && topk_calls[1] == 0,
                      "kind %d: %lld top-k calls for %lld decode steps + the prefill (host_sampling: %lld); want %s", k,
                      (long long)topk_calls[0], (long long)a->decode_steps, (long long)topk_calls[1],
                      want_cand ? "one per step" : "none");
                CHECK(!want_cand ||
                          (a->device_picks + a->logit_reads == a->generated_tokens && a->logit_reads == reads_f[0]),
                      "kind %d: %lld picks from candidates + %lld logit reads != %lld tokens", k,
                      (long long)a->device_picks, (long long)a->logit_reads, (long long)a->generated_tokens);
                CHECK(b->device_picks == 0 && b->logit_reads == 0 && (want_cand || a->device_picks == 0),
                      "kind %d: picks %lld / %lld where none were expected", k, (long long)a->device_picks,
                      (long long)b->device_picks);
                picks += a->device_picks, reads += a->logit_reads;
                for (int i = 0; i < 3; i++) {
                    const mf_generation *x = &r[0].seqs[i], *y = &r[1].seqs[i];
                    CHECK(x->n_tokens == y->n_tokens && !memcmp(x->tokens, y->tokens, (size_t)x->n_tokens * sizeof *x->tokens) &&
                              x->finish == y->finish && !strcmp(x->text, y->text),
                          "kind %d seed %llu sequence %d: %lld tokens from the candidates, %lld on the host, or they differ",
                          k, (unsigned long long)seed, i, (long long)x->n_tokens, (long long)y->n_tokens);
                }
                mf_generate_result_free(&r[0]);
                mf_generate_result_free(&r[1]);
            }
        printf("  %lld tokens picked from candidates, %lld from logits read back\n", (long long)picks, (long long)reads);
        CHECK(picks > 0 && reads > 0, "want both paths exercised");
        // A poisoned row in a decode step (call 3: token 2): the host's message.
        static const struct { int32_t row, kind; int64_t idx; } poison[3] = {{1, 1, 17}, {2, 2, 5}, {0, 3, 0}};
        for (int c = 0; c < 3; c++) {
            char msg[2][512];
            mf_status st[2];
            for (int host = 0; host < 2; host++) {
                fake_model f;
                fake_init(&f, FAKE_HASH, V, 4, 64, -1, tok);
                fake_device(&f);
                f.poison_call = 3, f.poison_row = poison[c].row;
                f.poison_kind = poison[c].kind, f.poison_idx = poison[c].idx;
                mf_generate_params p = mf_generate_params_default();
                p.max_new_tokens = 10;
                p.sampler = (mf_sampler_params){.temperature = 0.8f, .top_k = 10, .seed = 5};
                p.host_sampling = host == 1;
                mf_generate_result r;
                st[host] = fake_generate(&f, &pr, &p, &r);
                snprintf(msg[host], sizeof msg[host], "%s", mf_last_error());
                if (st[host] == MF_OK) mf_generate_result_free(&r);
                fake_free(&f);
            }
            CHECK(st[0] == MF_ERR_INVALID_ARG && st[1] == st[0] && !strcmp(msg[0], msg[1]) &&
                      strstr(msg[0], "token 2: sampler_sample: "),
                  "poison %d: candidates %s '%s', host %s '%s'", c, mf_status_str(st[0]), msg[0], mf_status_str(st[1]),
                  msg[1]);
            n_bad_inputs += 2;
        }
    }
}

static void test_generate_batch(const mf_tokenizer *tok) {
    CASE("generate (fake): batch of 3 = each alone (seed + i); one prefill; finished ones drop out") {
        const int64_t V = mf_tokenizer_vocab_size(tok);
        const char *prompts[3] = {"The quick brown fox", "A", "Lorem ipsum dolor sit amet, consectetur"};
        fake_model f;
        fake_init(&f, FAKE_HASH, V, 4, 64, mf_tokenizer_eos_id(tok), tok);
        mf_generate_params p = mf_generate_params_default();
        p.max_new_tokens = 30;
        p.sampler = (mf_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .repetition_penalty = 1.2f,
                                        .seed = 2024};
        const char *stop[1] = {"zz"};
        p.stop = stop;
        p.n_stop = 1;
        p.on_text = on_text;
        capture cap;
        memset(&cap, 0, sizeof cap);
        p.user = &cap;
        mf_generate_result all;
        mf_prompts pr = {.n = 3, .texts = prompts};
        if (fake_generate(&f, &pr, &p, &all) != MF_OK) {
            fail("batch: %s", mf_last_error());
            fake_free(&f);
            break;
        }
        CHECK(f.batch_log[0] == 3, "prefill ran %d sequences", f.batch_log[0]);
        bool grew = false;
        for (int64_t c = 2; c < f.n_log; c++) grew |= f.batch_log[c] > f.batch_log[c - 1];
        // Prompt 2 (about 10 tokens) meets max_seq 64 after 55 tokens; the
        // others reach 30 first: all stop together unless something ended early.
        CHECK(!grew, "a finished sequence came back into the batch");
        CHECK(!f.contract_broken, "contract broken");
        int64_t sum_gen = 0, sum_prompt = 0;
        for (int i = 0; i < 3; i++) {
            mf_generation *g = &all.seqs[i];
            sum_gen += g->n_tokens;
            sum_prompt += g->n_prompt;
            (void)stream_ok(&cap, i, g->text, g->text_len);
            mf_generate_params p1 = p;
            p1.sampler.seed = p.sampler.seed + (uint64_t)i;
            p1.on_text = NULL;
            mf_prompts one = {.n = 1, .texts = &prompts[i]};
            mf_generate_result r1;
            if (fake_generate(&f, &one, &p1, &r1) != MF_OK) {
                fail("alone %d: %s", i, mf_last_error());
                continue;
            }
            mf_generation *h = &r1.seqs[0];
            CHECK(h->n_tokens == g->n_tokens && !memcmp(h->tokens, g->tokens, g->n_tokens * sizeof *g->tokens) &&
                      h->finish == g->finish && !strcmp(h->text, g->text),
                  "seq %d: batch (%lld tokens, %s) != alone (%lld tokens, %s)", i, (long long)g->n_tokens,
                  mf_finish_reason_str(g->finish), (long long)h->n_tokens, mf_finish_reason_str(h->finish));
            mf_generate_result_free(&r1);
        }
        const mf_generate_stats *st = &all.stats;
        CHECK(st->prompt_tokens == sum_prompt && st->generated_tokens == sum_gen && st->decode_tokens == sum_gen - 3,
              "stats: prompt %lld/%lld, generated %lld/%lld, decode %lld", (long long)st->prompt_tokens,
              (long long)sum_prompt, (long long)st->generated_tokens, (long long)sum_gen, (long long)st->decode_tokens);
        CHECK(st->ttft_s > 0 && st->prefill_s > 0 && st->total_s >= st->ttft_s && st->decode_tok_s > 0,
              "stats: ttft %g prefill %g total %g", st->ttft_s, st->prefill_s, st->total_s);
        mf_generate_result_free(&all);

        // Different budgets (max_seq): the short ones leave the batch.
        const char *p2[3] = {"one two three four five six seven eight nine ten eleven twelve", "a", "b c"};
        p.max_new_tokens = 1000;
        p.on_text = NULL;
        p.n_stop = 0;
        f.n_log = 0;
        mf_prompts pr2 = {.n = 3, .texts = p2};
        if (fake_generate(&f, &pr2, &p, &all) == MF_OK) {
            for (int i = 0; i < 3; i++)
                CHECK(all.seqs[i].finish != MF_FINISH_LENGTH || all.seqs[i].n_prompt + all.seqs[i].n_tokens == 65,
                      "seq %d: length stop at %lld + %lld tokens (max_seq 64)", i, (long long)all.seqs[i].n_prompt,
                      (long long)all.seqs[i].n_tokens);
            int32_t last = f.batch_log[f.n_log - 1];
            CHECK(f.batch_log[0] == 3 && last < 3, "batch sizes %d ... %d: nobody dropped out", f.batch_log[0], (int)last);
            for (int64_t c = 2; c < f.n_log; c++)
                CHECK(f.batch_log[c] <= f.batch_log[c - 1], "batch grew at step %lld", (long long)c);
            CHECK(!f.contract_broken, "contract broken");
        } else {
            fail("budgets: %s", mf_last_error());
        }
        mf_generate_result_free(&all);
        fake_free(&f);
    }
}

// A good run on the fake model: the reference that bad inputs must not disturb.
static bool good_run(fake_model *f, mf_generate_result *r) {
    const char *texts[2] = {"Hello", "world"};
    mf_prompts pr = {.n = 2, .texts = texts};
    mf_generate_params p = mf_generate_params_default();
    p.max_new_tokens = 12;
    p.sampler = (mf_sampler_params){.temperature = 0.9f, .top_p = 0.9f, .seed = 11};
    return fake_generate(f, &pr, &p, r) == MF_OK;
}

static bool same_result(const mf_generate_result *a, const mf_generate_result *b) {
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++) {
        const mf_generation *x = &a->seqs[i], *y = &b->seqs[i];
        if (x->n_tokens != y->n_tokens || memcmp(x->tokens, y->tokens, x->n_tokens * sizeof *x->tokens) ||
            x->text_len != y->text_len || memcmp(x->text, y->text, x->text_len) || x->finish != y->finish)
            return false;
    }
    return true;
}

static void test_generate_bad(const mf_tokenizer *tok) {
    CASE("generate (fake): bad inputs are named and leave the session usable") {
        fake_model f;
        fake_init(&f, FAKE_HASH, mf_tokenizer_vocab_size(tok), 2, 32, mf_tokenizer_eos_id(tok), tok);
        mf_generate_result ref, r;
        if (!good_run(&f, &ref)) {
            fail("good run: %s", mf_last_error());
            fake_free(&f);
            break;
        }
        const char *one[1] = {"Hi"}, *empty[1] = {""}, *null1[1] = {NULL}, *three[3] = {"a", "b", "c"};
        char long_text[400];
        memset(long_text, 0, sizeof long_text);
        for (int i = 0; i < 60; i++) strcat(long_text, " word");
        const char *longp[1] = {long_text};
        int32_t toks[2] = {5, 70000};
        const int32_t *tp[1] = {toks};
        int64_t n2[1] = {2}, n0[1] = {0};
        const char *stop_empty[1] = {""};
        struct {
            const char *what, *needle;
            mf_prompts pr;
            int64_t max_new;
            mf_sampler_params sp;
            const char *const *stop;
            int n_stop;
            mf_bos_mode bos;
        } cases[] = {
            {"n 0", "0 prompts", {.n = 0, .texts = one}, 4, {.seed = 0}, NULL, 0, MF_BOS_AUTO},
            {"n > max_batch", "3 prompts", {.n = 3, .texts = three}, 4, {.seed = 0}, NULL, 0, MF_BOS_AUTO},
            {"max_new < 0", "max_new_tokens -1", {.n = 1, .texts = one}, -1, {.seed = 0}, NULL, 0, MF_BOS_AUTO},
            {"top_p 1.5", "top_p 1.5", {.n = 1, .texts = one}, 4, {.top_p = 1.5f}, NULL, 0, MF_BOS_AUTO},
            {"temperature -1", "temperature -1", {.n = 1, .texts = one}, 4, {.temperature = -1}, NULL, 0, MF_BOS_AUTO},
            {"empty prompt, no BOS", "prompt 0 is empty", {.n = 1, .texts = empty}, 4, {.seed = 0}, NULL, 0, MF_BOS_NONE},
            {"NULL prompt", "prompt 0 is NULL", {.n = 1, .texts = null1}, 4, {.seed = 0}, NULL, 0, MF_BOS_AUTO},
            {"prompt > max_seq", "max_seq 32", {.n = 1, .texts = longp}, 4, {.seed = 0}, NULL, 0, MF_BOS_AUTO},
            {"token out of range", "70000", {.n = 1, .tokens = tp, .n_tokens = n2}, 4, {.seed = 0}, NULL, 0, MF_BOS_AUTO},
            {"0 tokens", "0 tokens", {.n = 1, .tokens = tp, .n_tokens = n0}, 4, {.seed = 0}, NULL, 0, MF_BOS_AUTO},
            {"no texts or tokens", "neither", {.n = 1}, 4, {.seed = 0}, NULL, 0, MF_BOS_AUTO},
            {"empty stop string", "stop string 0 is empty", {.n = 1, .texts = one}, 4, {.seed = 0}, stop_empty, 1, MF_BOS_AUTO},
            {"bos mode 7", "bos mode 7", {.n = 1, .texts = one}, 4, {.seed = 0}, NULL, 0, (mf_bos_mode)7},
        };
        n_bad_inputs += (int)(sizeof cases / sizeof cases[0]) + 2; // the table, NULL prompts, NULL out
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            mf_generate_params p = mf_generate_params_default();
            p.max_new_tokens = cases[c].max_new;
            p.sampler = cases[c].sp;
            p.stop = cases[c].stop;
            p.n_stop = cases[c].n_stop;
            p.bos = cases[c].bos;
            memset(&r, 0x5A, sizeof r);
            mf_status st = fake_generate(&f, &cases[c].pr, &p, &r);
            CHECK(st == MF_ERR_INVALID_ARG && strstr(mf_last_error(), cases[c].needle), "%s: %s, '%s' (want '%s')",
                  cases[c].what, mf_status_str(st), mf_last_error(), cases[c].needle);
            CHECK(r.n == 0 && r.seqs == NULL, "%s: result not emptied", cases[c].what);
        }
        CHECK(fake_generate(&f, NULL, NULL, &r) == MF_ERR_INVALID_ARG, "NULL prompts accepted");
        CHECK(fake_generate(&f, &cases[0].pr, NULL, NULL) == MF_ERR_INVALID_ARG, "NULL out accepted");
        // An empty prompt with AUTO gets BOS (GPT-2's tokenizer has one).
        {
            mf_prompts pe = {.n = 1, .texts = empty};
            mf_generate_params p = mf_generate_params_default();
            p.max_new_tokens = 3;
            mf_status st = fake_generate(&f, &pe, &p, &r);
            CHECK(st == MF_OK && r.seqs[0].n_prompt == 1 && r.seqs[0].prompt[0] == mf_tokenizer_bos_id(tok),
                  "empty prompt with AUTO: %s", mf_last_error());
            if (st == MF_OK) mf_generate_result_free(&r);
        }
        // A failing run (prefill, then a decode step): error out, the next call unaffected.
        for (int at = 1; at <= 3; at += 2) {
            f.fail_at = at;
            mf_status st = good_run(&f, &r) ? MF_OK : MF_ERR_CUDA;
            CHECK(st != MF_OK && r.n == 0 && strstr(mf_last_error(), "injected run failure"),
                  "run failure %d not reported: %s", at, mf_last_error());
            f.fail_at = 0;
        }
        // A sampler error at run time (NaN logits) names the sequence.
        CHECK(!f.contract_broken, "contract broken");
        mf_generate_result again;
        CHECK(good_run(&f, &again) && same_result(&ref, &again), "session not usable after the bad inputs");
        mf_generate_result_free(&again);
        mf_generate_result_free(&ref);
        mf_generate_result_free(NULL);
        fake_free(&f);
    }
}

static void test_generate_oom(const mf_tokenizer *tok) {
    CASE("generate (fake): every allocation failure is MF_ERR_OOM, frees all, session usable") {
        fake_model f;
        fake_init(&f, FAKE_HASH, mf_tokenizer_vocab_size(tok), 2, 32, mf_tokenizer_eos_id(tok), tok);
        mf_generate_result ref, r;
        const char *stop[2] = {"ab", "the"};
        if (!good_run(&f, &ref)) {
            fail("good run: %s", mf_last_error());
            fake_free(&f);
            break;
        }
        int n_fail = 0;
        for (int64_t k = 1; k < 10000; k++) {
            const char *texts[2] = {"Hello", "world"};
            mf_prompts pr = {.n = 2, .texts = texts};
            mf_generate_params p = mf_generate_params_default();
            p.max_new_tokens = 12;
            p.stop = stop;
            p.n_stop = 2;
            p.sampler = (mf_sampler_params){.temperature = 0.9f, .top_p = 0.9f, .seed = 11};
            mf_fault_alloc_fail_after(k);
            mf_status st = fake_generate(&f, &pr, &p, &r);
            mf_fault_alloc_fail_after(0);
            if (st == MF_OK) {
                mf_generate_result_free(&r);
                break;
            }
            n_fail++;
            CHECK(st == MF_ERR_OOM, "failure at allocation %lld: %s (%s)", (long long)k, mf_status_str(st), mf_last_error());
            CHECK(r.n == 0 && !r.seqs, "failure at allocation %lld: result not emptied", (long long)k);
        }
        CHECK(n_fail > 5, "only %d allocation points", n_fail);
        mf_generate_result again;
        CHECK(good_run(&f, &again) && same_result(&ref, &again), "session not usable after the failures");
        mf_generate_result_free(&again);
        mf_generate_result_free(&ref);
        fake_free(&f);
    }
}

static void test_generate_many(const mf_tokenizer *tok) {
    CASE("generate (fake): 200 calls in one process (leaks: run under ASan/valgrind)") {
        fake_model f;
        fake_init(&f, FAKE_HASH, mf_tokenizer_vocab_size(tok), 2, 32, mf_tokenizer_eos_id(tok), tok);
        const char *stop[1] = {"e"};
        double t = now_s();
        int bad = 0;
        for (int i = 0; i < 200; i++) {
            const char *texts[2] = {"Hello", "to the world"};
            mf_prompts pr = {.n = 1 + i % 2, .texts = texts};
            mf_generate_params p = mf_generate_params_default();
            p.max_new_tokens = 2 + i % 3;
            p.stop = stop;
            p.n_stop = i % 2;
            p.sampler = (mf_sampler_params){.temperature = 0.9f, .top_k = 5, .seed = (uint64_t)i};
            mf_generate_result r;
            if (fake_generate(&f, &pr, &p, &r) != MF_OK) bad++;
            mf_generate_result_free(&r);
        }
        printf("  200 calls in %.2f s\n", now_s() - t);
        CHECK(bad == 0, "%d calls failed: %s", bad, mf_last_error());
        fake_free(&f);
    }
}


// ---- end to end: the tiny fixture models ------------------------------------------------

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (p) p[n] = '\0';
    fclose(f);
    return p;
}

static int64_t json_ids(const cJSON *arr, int32_t *out, int64_t cap) {
    int64_t n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        if (n < cap) out[n] = (int32_t)e->valuedouble;
        n++;
    }
    return n;
}

// HF's text, cut at each U+FFFD, appears piece by piece, in order, in ours.
// (minfer's decoder keeps raw bytes where HF writes U+FFFD; HF's ByteFallback
// even turns a whole run of byte tokens into U+FFFDs when the run is not
// valid UTF-8, valid ASCII bytes included. The tokenizer tests pin the
// decoder down; here the model's text is what is checked.)
static bool hf_text_in(const char *hf, const char *ours) {
    const char *pos = ours;
    while (*hf) {
        const char *r = strstr(hf, "\xef\xbf\xbd");
        size_t n = r ? (size_t)(r - hf) : strlen(hf);
        if (n > 0) {
            char piece[1024];
            if (n >= sizeof piece) return false;
            memcpy(piece, hf, n);
            piece[n] = '\0';
            const char *at = strstr(pos, piece);
            if (!at) return false;
            pos = at + n;
        }
        hf += n + (r ? 3 : 0);
    }
    return true;
}

typedef struct {
    const char *name;
    cJSON *exp;
    mf_backend *be;
    mf_model *model;
    mf_session *sess;
} fixture_model;

// On CUDA (f32: HF's ids are the f32 model's) or the CPU.
static bool fixture_open(const char *name, fixture_model *fm, const char *backend) {
    memset(fm, 0, sizeof *fm);
    fm->name = name;
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s/expected.json", fixtures, name);
    char *js = read_file(path);
    fm->exp = js ? cJSON_Parse(js) : NULL;
    free(js);
    if (!fm->exp) {
        fail("%s: cannot read %s", name, path);
        return false;
    }
    snprintf(path, sizeof path, "%s/models/%s", fixtures, name);
    const mf_model_opts mo = {.dtype = MF_DTYPE_F32};
    const bool cuda = !strcmp(backend, "cuda");
    if (mf_backend_init(backend, &fm->be) != MF_OK || mf_model_load(path, fm->be, cuda ? &mo : NULL, &fm->model) != MF_OK ||
        mf_session_create(fm->model, 4, 64, &fm->sess) != MF_OK) {
        fail("%s: %s", name, mf_last_error());
        return false;
    }
    return true;
}

static void fixture_close(fixture_model *fm) {
    mf_session_free(fm->sess);
    mf_model_free(fm->model);
    mf_backend_free(fm->be);
    cJSON_Delete(fm->exp);
}

static mf_status gen_one(fixture_model *fm, const char *prompt, mf_bos_mode bos, int64_t max_new,
                         const char *const *stop, int n_stop, capture *cap, mf_generate_result *r) {
    mf_prompts pr = {.n = 1, .texts = &prompt};
    mf_generate_params p = mf_generate_params_default();
    p.max_new_tokens = max_new;
    p.bos = bos;
    p.stop = stop;
    p.n_stop = n_stop;
    if (cap) {
        memset(cap, 0, sizeof *cap);
        p.on_text = on_text;
        p.user = cap;
    }
    return mf_generate(fm->sess, &pr, &p, r);
}

// Greedy ids and text of the fixture prompt equal HF's; the stream equals the
// text, never splits a character, and equals decode(prompt ++ ids) - decode(prompt).
static void e2e_greedy(fixture_model *fm, const mf_tokenizer *tok) {
    const cJSON *g = cJSON_GetObjectItem(fm->exp, "greedy");
    const char *prompt = cJSON_GetObjectItem(fm->exp, "prompt")->valuestring;
    bool add_bos = cJSON_IsTrue(cJSON_GetObjectItem(fm->exp, "add_bos"));
    int32_t want[64], want_prompt[64];
    int64_t n_want = json_ids(cJSON_GetObjectItem(g, "ids"), want, 64);
    int64_t n_want_prompt = json_ids(cJSON_GetObjectItem(fm->exp, "prompt_ids"), want_prompt, 64);
    const char *full = cJSON_GetObjectItem(g, "full_text")->valuestring;
    for (int mode = 0; mode < 2; mode++) {
        // AUTO follows tokenizer_config.json as HF does; ADD / NONE as the fixture says.
        mf_bos_mode bos = mode == 0 ? MF_BOS_AUTO : add_bos ? MF_BOS_ADD : MF_BOS_NONE;
        capture cap;
        mf_generate_result r;
        if (gen_one(fm, prompt, bos, n_want, NULL, 0, &cap, &r) != MF_OK) {
            fail("%s: generate: %s", fm->name, mf_last_error());
            continue;
        }
        mf_generation *q = &r.seqs[0];
        CHECK(q->n_prompt == n_want_prompt && !memcmp(q->prompt, want_prompt, n_want_prompt * sizeof *want_prompt),
              "%s (bos mode %d): prompt ids differ from HF's", fm->name, mode);
        CHECK(q->n_tokens == n_want && !memcmp(q->tokens, want, n_want * sizeof *want), "%s: greedy ids differ from HF's",
              fm->name);
        for (int64_t j = 0; j < q->n_tokens && j < n_want; j++)
            if (q->tokens[j] != want[j]) {
                fail("%s: first difference at token %lld: %d, HF %d", fm->name, (long long)j, (int)q->tokens[j],
                     (int)want[j]);
                break;
            }
        CHECK(q->finish == MF_FINISH_LENGTH, "%s: finish %s", fm->name, mf_finish_reason_str(q->finish));
        CHECK(stream_ok(&cap, 0, q->text, q->text_len), "%s: streaming", fm->name);
        // decode(prompt ++ ids) - decode(prompt)
        int32_t all[128];
        memcpy(all, q->prompt, q->n_prompt * sizeof *all);
        memcpy(all + q->n_prompt, q->tokens, q->n_tokens * sizeof *all);
        char *d_all = NULL, *d_prompt = NULL;
        size_t l_all = 0, l_prompt = 0;
        if (mf_tokenizer_decode(tok, all, q->n_prompt + q->n_tokens, &d_all, &l_all) == MF_OK &&
            mf_tokenizer_decode(tok, all, q->n_prompt, &d_prompt, &l_prompt) == MF_OK) {
            CHECK(l_all == l_prompt + q->text_len && !memcmp(d_all + l_prompt, q->text, q->text_len),
                  "%s: text != decode(prompt ++ ids) - decode(prompt)", fm->name);
        } else {
            fail("%s: decode: %s", fm->name, mf_last_error());
        }
        mf_tokenizer_free_buffer(d_all);
        mf_tokenizer_free_buffer(d_prompt);
        // HF's full text (special tokens skipped) is the prompt, then the generated text.
        size_t lp = strlen(prompt);
        if (strncmp(full, prompt, lp)) {
            fail("%s: HF full_text does not start with the prompt", fm->name);
        } else {
            CHECK(hf_text_in(full + lp, q->text), "%s: text '%s' does not hold HF's '%s'", fm->name, q->text, full + lp);
        }
        mf_generate_result_free(&r);
    }
}

// A stop string made of the 4 ASCII bytes around a token boundary of the
// greedy text: generation stops before its first occurrence.
static void e2e_stop(fixture_model *fm) {
    const char *prompt = cJSON_GetObjectItem(fm->exp, "prompt")->valuestring;
    capture cap;
    mf_generate_result r;
    if (gen_one(fm, prompt, MF_BOS_AUTO, 20, NULL, 0, &cap, &r) != MF_OK) {
        fail("%s: generate: %s", fm->name, mf_last_error());
        return;
    }
    char stop[5] = {0};
    const char *text = r.seqs[0].text;
    size_t len = r.seqs[0].text_len;
    for (int c = 0; c < cap.chunks[0] && c < 64 && !stop[0]; c++) {
        size_t b = cap.ends[0][c];
        if (b < 2 || b + 2 > len) continue;
        bool ascii = true;
        for (size_t k = b - 2; k < b + 2; k++) ascii &= (unsigned char)text[k] >= 0x20 && (unsigned char)text[k] < 0x80;
        if (ascii) memcpy(stop, text + b - 2, 4);
    }
    if (!stop[0]) {
        fail("%s: no ASCII token boundary in the greedy text to build a stop string from", fm->name);
        mf_generate_result_free(&r);
        return;
    }
    size_t at = (size_t)(strstr(text, stop) - text);
    const char *stops[2] = {"\xff\xfe never", stop};
    mf_generate_result s;
    if (gen_one(fm, prompt, MF_BOS_AUTO, 20, stops, 2, &cap, &s) != MF_OK) {
        fail("%s: generate with stop: %s", fm->name, mf_last_error());
    } else {
        mf_generation *q = &s.seqs[0];
        CHECK(q->finish == MF_FINISH_STOP && q->text_len == at && !memcmp(q->text, text, at),
              "%s: stop '%s': %s, text '%s' (want the first %zu bytes of '%s')", fm->name, stop,
              mf_finish_reason_str(q->finish), q->text, at, text);
        CHECK(stream_ok(&cap, 0, q->text, q->text_len), "%s: stop: streaming", fm->name);
        CHECK(q->n_tokens < r.seqs[0].n_tokens && !memcmp(q->tokens, r.seqs[0].tokens, q->n_tokens * sizeof *q->tokens),
              "%s: stop: %lld tokens, not a prefix of the greedy ones", fm->name, (long long)q->n_tokens);
        mf_generate_result_free(&s);
    }
    mf_generate_result_free(&r);
}

// The fixture's batch prompts in one call equal HF's greedy ids, and each alone.
static void e2e_batch(fixture_model *fm) {
    const cJSON *batch = cJSON_GetObjectItem(fm->exp, "batch");
    int n = cJSON_GetArraySize(batch);
    if (n < 2 || n > 4) {
        fail("%s: %d batch prompts in the fixture", fm->name, n);
        return;
    }
    const char *prompts[4];
    int32_t want[4][32];
    int64_t n_want[4];
    for (int i = 0; i < n; i++) {
        const cJSON *b = cJSON_GetArrayItem(batch, i);
        prompts[i] = cJSON_GetObjectItem(b, "prompt")->valuestring;
        n_want[i] = json_ids(cJSON_GetObjectItem(b, "greedy_ids"), want[i], 32);
    }
    mf_prompts pr = {.n = n, .texts = prompts};
    mf_generate_params p = mf_generate_params_default();
    p.max_new_tokens = n_want[0];
    capture cap;
    memset(&cap, 0, sizeof cap);
    p.on_text = on_text;
    p.user = &cap;
    mf_generate_result r;
    if (mf_generate(fm->sess, &pr, &p, &r) != MF_OK) {
        fail("%s: batch: %s", fm->name, mf_last_error());
        return;
    }
    for (int i = 0; i < n; i++) {
        mf_generation *q = &r.seqs[i];
        CHECK(q->n_tokens == n_want[i] && !memcmp(q->tokens, want[i], n_want[i] * sizeof *want[i]),
              "%s: batch sequence %d differs from HF's greedy ids", fm->name, i);
        CHECK(stream_ok(&cap, i, q->text, q->text_len), "%s: batch sequence %d: streaming", fm->name, i);
        mf_generate_result one;
        if (gen_one(fm, prompts[i], MF_BOS_AUTO, n_want[0], NULL, 0, NULL, &one) != MF_OK) {
            fail("%s: alone %d: %s", fm->name, i, mf_last_error());
            continue;
        }
        CHECK(one.seqs[0].n_tokens == q->n_tokens &&
                  !memcmp(one.seqs[0].tokens, q->tokens, q->n_tokens * sizeof *q->tokens) &&
                  !strcmp(one.seqs[0].text, q->text),
              "%s: sequence %d alone != in the batch", fm->name, i);
        mf_generate_result_free(&one);
    }
    // Sampling: the batch equals each alone with seed + i.
    p.sampler = (mf_sampler_params){.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .repetition_penalty = 1.1f,
                                    .seed = 99};
    p.on_text = NULL;
    mf_generate_result sb;
    if (mf_generate(fm->sess, &pr, &p, &sb) == MF_OK) {
        for (int i = 0; i < n; i++) {
            mf_prompts one_pr = {.n = 1, .texts = &prompts[i]};
            mf_generate_params p1 = p;
            p1.sampler.seed = 99 + (uint64_t)i;
            mf_generate_result one;
            if (mf_generate(fm->sess, &one_pr, &p1, &one) != MF_OK) {
                fail("%s: sampled alone %d: %s", fm->name, i, mf_last_error());
                continue;
            }
            CHECK(one.seqs[0].n_tokens == sb.seqs[i].n_tokens &&
                      !memcmp(one.seqs[0].tokens, sb.seqs[i].tokens, sb.seqs[i].n_tokens * sizeof *sb.seqs[i].tokens),
                  "%s: sampled sequence %d alone != in the batch", fm->name, i);
            mf_generate_result_free(&one);
        }
        mf_generate_result_free(&sb);
    } else {
        fail("%s: sampled batch: %s", fm->name, mf_last_error());
    }
    mf_generate_result_free(&r);
}

// Bad inputs on a real session are named, and greedy generation is unchanged after them.
static void e2e_bad(fixture_model *fm) {
    const char *prompt = cJSON_GetObjectItem(fm->exp, "prompt")->valuestring;
    const cJSON *g = cJSON_GetObjectItem(fm->exp, "greedy");
    int32_t want[64];
    int64_t n_want = json_ids(cJSON_GetObjectItem(g, "ids"), want, 64);
    char long_prompt[2048] = "";
    for (int i = 0; i < 100; i++) strcat(long_prompt, i % 2 ? "the fox " : "a dog, ");
    mf_generate_result r;
    n_bad_inputs += 6; // empty prompt, max_new -3, a long prompt, 5 prompts, min_p 2, NULL session
    mf_status st = gen_one(fm, "", MF_BOS_NONE, 4, NULL, 0, NULL, &r);
    CHECK(st == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "prompt 0 is empty"), "%s: empty prompt: '%s'", fm->name,
          mf_last_error());
    st = gen_one(fm, prompt, MF_BOS_AUTO, -3, NULL, 0, NULL, &r);
    CHECK(st == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "max_new_tokens -3"), "%s: max_new -3: '%s'", fm->name,
          mf_last_error());
    st = gen_one(fm, long_prompt, MF_BOS_AUTO, 4, NULL, 0, NULL, &r);
    CHECK(st == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "max_seq 64"), "%s: long prompt: %s '%s'", fm->name,
          mf_status_str(st), mf_last_error());
    if (st == MF_OK) mf_generate_result_free(&r);
    const char *four[5] = {"a", "b", "c", "d", "e"};
    mf_prompts pr5 = {.n = 5, .texts = four};
    mf_generate_params p = mf_generate_params_default();
    st = mf_generate(fm->sess, &pr5, &p, &r);
    CHECK(st == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "5 prompts"), "%s: 5 prompts: '%s'", fm->name,
          mf_last_error());
    p.sampler.min_p = 2.0f;
    mf_prompts pr1 = {.n = 1, .texts = &prompt};
    st = mf_generate(fm->sess, &pr1, &p, &r);
    CHECK(st == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "min_p 2"), "%s: min_p 2: '%s'", fm->name,
          mf_last_error());
    CHECK(mf_generate(NULL, &pr1, &p, &r) == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "session is NULL"),
          "%s: NULL session", fm->name);
    // An empty prompt with AUTO: BOS alone when the tokenizer has one (gpt2, llama);
    // without one (qwen2-tiny, like Qwen2's) it is refused, naming why.
    st = gen_one(fm, "", MF_BOS_AUTO, 2, NULL, 0, NULL, &r);
    if (mf_tokenizer_bos_id(mf_model_tokenizer(fm->model)) >= 0)
        CHECK(st == MF_OK && r.seqs[0].n_prompt == 1 && r.seqs[0].n_tokens == 2, "%s: empty prompt with BOS: %s",
              fm->name, mf_last_error());
    else
        CHECK(st == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "the tokenizer has no BOS token"),
              "%s: empty prompt, no BOS token: %s", fm->name, mf_last_error());
    if (st == MF_OK) mf_generate_result_free(&r);
    st = gen_one(fm, prompt, MF_BOS_AUTO, n_want, NULL, 0, NULL, &r);
    CHECK(st == MF_OK && r.seqs[0].n_tokens == n_want && !memcmp(r.seqs[0].tokens, want, n_want * sizeof *want),
          "%s: greedy generation changed after the bad inputs", fm->name);
    if (st == MF_OK) mf_generate_result_free(&r);
}

// Greedy through mf_session_forward_greedy (the default) = the host sampler
// (host_sampling), token for token and in text, on the fixture's batch
// prompts together and on its prompt alone; the session's profiler sees the
// argmax op only on the device path.
static int prof_argmax, prof_topk;
static void prof_begin(void *u, const char *op, const char *what) {
    (void)u, (void)what;
    prof_argmax += !strcmp(op, "argmax");
    prof_topk += !strcmp(op, "topk");
}
static void prof_end(void *u, const char *op, const char *what) { (void)u, (void)op, (void)what; }

static void e2e_device_greedy(fixture_model *fm) {
    const cJSON *batch = cJSON_GetObjectItem(fm->exp, "batch");
    const char *prompts[4];
    int n = cJSON_GetArraySize(batch);
    if (n > 3) n = 3;
    prompts[0] = cJSON_GetObjectItem(fm->exp, "prompt")->valuestring;
    for (int i = 0; i < n; i++) prompts[i + 1] = cJSON_GetObjectItem(cJSON_GetArrayItem(batch, i), "prompt")->valuestring;
    const mf_session_profiler prof = {.begin = prof_begin, .end = prof_end};
    for (int shape = 0; shape < 2; shape++) {
        mf_prompts pr = {.n = shape == 0 ? 1 : n + 1, .texts = prompts};
        mf_generate_result r[2];
        int argmax_ops[2];
        bool ok = true;
        for (int host = 0; host < 2; host++) {
            mf_generate_params p = mf_generate_params_default();
            p.max_new_tokens = 24;
            p.ignore_eos = true;
            p.host_sampling = host == 1;
            prof_argmax = 0;
            ok &= mf_session_set_profiler(fm->sess, &prof) == MF_OK;
            mf_status st = mf_generate(fm->sess, &pr, &p, &r[host]);
            ok &= mf_session_set_profiler(fm->sess, NULL) == MF_OK;
            CHECK(st == MF_OK, "%s: device greedy (host %d): %s", fm->name, host, mf_last_error());
            ok &= st == MF_OK;
            argmax_ops[host] = prof_argmax;
        }
        if (!ok) return;
        // one argmax per forward call: the prefill and 23 decode steps
        CHECK(argmax_ops[0] == 24 && argmax_ops[1] == 0, "%s: %d argmax ops on the device path (want 24), %d with host_sampling",
              fm->name, argmax_ops[0], argmax_ops[1]);
        for (int i = 0; i < pr.n; i++) {
            const mf_generation *a = &r[0].seqs[i], *b = &r[1].seqs[i];
            CHECK(a->n_tokens == 24 && a->n_tokens == b->n_tokens &&
                      !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof *a->tokens) && !strcmp(a->text, b->text),
                  "%s: batch of %d, sequence %d: device greedy != host greedy", fm->name, pr.n, i);
        }
        mf_generate_result_free(&r[0]);
        mf_generate_result_free(&r[1]);
    }
}

// Sampling from the session's top-k candidates (mf_session_forward_topk, the
// CPU twin of mf_topk) = host sampling (host_sampling), token for token, over
// filter settings and seeds, on the fixture's batch prompts; one topk op per
// decode step on the candidate path, none with host_sampling; rows whose
// candidates do not decide are read back with mf_session_read_logits.
static void e2e_device_candidates(fixture_model *fm) {
    const cJSON *batch = cJSON_GetObjectItem(fm->exp, "batch");
    const char *prompts[4];
    int n = cJSON_GetArraySize(batch);
    if (n > 3) n = 3;
    prompts[0] = cJSON_GetObjectItem(fm->exp, "prompt")->valuestring;
    for (int i = 0; i < n; i++) prompts[i + 1] = cJSON_GetObjectItem(cJSON_GetArrayItem(batch, i), "prompt")->valuestring;
    mf_prompts pr = {.n = n + 1, .texts = prompts};
    const mf_session_profiler prof = {.begin = prof_begin, .end = prof_end};
    const mf_sampler_params kinds[5] = {
        {.temperature = 0.8f, .top_k = 20},
        {.temperature = 0.6f, .top_p = 0.9f},
        {.temperature = 0.05f, .top_p = 0.9f},
        {.temperature = 1.0f, .min_p = 0.2f},
        {.temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .min_p = 0.05f},
    };
    int64_t picks = 0, reads = 0;
    for (int k = 0; k < 5; k++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            mf_generate_result r[2];
            int topk_ops[2];
            bool ok = true;
            for (int host = 0; host < 2; host++) {
                mf_generate_params p = mf_generate_params_default();
                p.max_new_tokens = 16;
                p.ignore_eos = true;
                p.sampler = kinds[k];
                p.sampler.seed = seed;
                p.host_sampling = host == 1;
                prof_topk = 0;
                ok &= mf_session_set_profiler(fm->sess, &prof) == MF_OK;
                mf_status st = mf_generate(fm->sess, &pr, &p, &r[host]);
                ok &= mf_session_set_profiler(fm->sess, NULL) == MF_OK;
                CHECK(st == MF_OK, "%s: candidates kind %d (host %d): %s", fm->name, k, host, mf_last_error());
                ok &= st == MF_OK;
                topk_ops[host] = prof_topk;
            }
            if (!ok) return;
            // 16 steps (the prefill's included) each end with one topk op
            CHECK(topk_ops[0] == 16 && topk_ops[1] == 0, "%s: kind %d: %d topk ops on the candidate path (want 16), %d with host_sampling",
                  fm->name, k, topk_ops[0], topk_ops[1]);
            const mf_generate_stats *a = &r[0].stats;
            CHECK(a->device_picks + a->logit_reads == a->generated_tokens && r[1].stats.device_picks == 0,
                  "%s: kind %d: %lld picks + %lld reads != %lld tokens", fm->name, k, (long long)a->device_picks,
                  (long long)a->logit_reads, (long long)a->generated_tokens);
            picks += a->device_picks, reads += a->logit_reads;
            for (int i = 0; i < pr.n; i++) {
                const mf_generation *x = &r[0].seqs[i], *y = &r[1].seqs[i];
                CHECK(x->n_tokens == 16 && x->n_tokens == y->n_tokens &&
                          !memcmp(x->tokens, y->tokens, (size_t)x->n_tokens * sizeof *x->tokens) && !strcmp(x->text, y->text),
                      "%s: kind %d seed %llu sequence %d: candidates != host sampling", fm->name, k,
                      (unsigned long long)seed, i);
            }
            mf_generate_result_free(&r[0]);
            mf_generate_result_free(&r[1]);
        }
    printf("  %s: sampling, %lld tokens from candidates, %lld from logits read back\n", fm->name, (long long)picks,
           (long long)reads);
    CHECK(picks > 0, "%s: no token came from the candidates", fm->name);
}

// Many calls in one process: under ASan/valgrind this is the leak check.
static void e2e_many(fixture_model *fm, int calls) {
    const char *prompt = cJSON_GetObjectItem(fm->exp, "prompt")->valuestring;
    const char *stop[1] = {"e"};
    double t = now_s();
    int bad = 0;
    for (int i = 0; i < calls; i++) {
        mf_prompts pr = {.n = 1 + i % 2, .texts = (const char *[]){prompt, "Hi"}};
        mf_generate_params p = mf_generate_params_default();
        p.max_new_tokens = 2;
        p.stop = stop;
        p.n_stop = i % 2;
        p.sampler = (mf_sampler_params){.temperature = (float)(i % 3) * 0.5f, .top_k = 20, .seed = (uint64_t)i};
        mf_generate_result r;
        if (mf_generate(fm->sess, &pr, &p, &r) != MF_OK) bad++;
        mf_generate_result_free(&r);
    }
    printf("  %s: %d generate calls (2 tokens, batch 1-2) in %.2f s\n", fm->name, calls, now_s() - t);
    CHECK(bad == 0, "%s: %d calls failed: %s", fm->name, bad, mf_last_error());
}

// backend "cuda": skipped without a device (the kernel emulator runs it in CI).
static void test_e2e(const char *name, int calls, const char *backend) {
    static char titles[8][200]; // case names must outlive the case
    static int n_titles;
    char *title = titles[n_titles++ % 8];
    snprintf(title, sizeof titles[0], "generate (%s, %s): greedy = HF ids and text, stop strings, batches, bad inputs, device greedy = host, device candidates = host, %d calls", name, !strcmp(backend, "cuda") ? "cuda f32" : backend, calls);
    if (!strcmp(backend, "cuda") && !mf_cuda_available()) {
        if (!filter || strstr(title, filter)) printf("skip %s: no CUDA device\n", title);
        return;
    }
    CASE(title) {
        fixture_model fm;
        if (fixture_open(name, &fm, backend)) {
            const mf_tokenizer *tok = mf_model_tokenizer(fm.model);
            if (!tok) fail("%s: no tokenizer", name);
            else {
                e2e_greedy(&fm, tok);
                e2e_stop(&fm);
                e2e_batch(&fm);
                e2e_bad(&fm);
                e2e_device_greedy(&fm);
                e2e_device_candidates(&fm);
                e2e_many(&fm, calls);
            }
        }
        fixture_close(&fm);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_engine <fixtures dir> [--filter SUBSTRING]\n");
        return 2;
    }
    fixtures = argv[1];
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];

    test_sampler_params();
    test_sampler_bad_logits();
    test_sampler_greedy();
    test_sampler_temperature();
    test_sampler_filters();
    test_sampler_penalty();
    test_sampler_seed();
    test_sampler_candidates();

    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/gpt2/tokenizer.json", fixtures);
    mf_tokenizer *gpt2 = NULL;
    if (mf_tokenizer_load(path, &gpt2) != MF_OK) {
        printf("FAILED loading %s: %s\n", path, mf_last_error());
        n_failed++;
    } else {
        test_generate_text(gpt2);
        test_generate_batch(gpt2);
        test_generate_device_greedy(gpt2);
        test_generate_device_candidates(gpt2);
        test_generate_bad(gpt2);
        test_generate_oom(gpt2);
        test_generate_many(gpt2);
    }
    mf_tokenizer_free(gpt2);

    // 1,000 calls each: a few seconds (with OMP_WAIT_POLICY=PASSIVE, as CTest sets).
    test_e2e("gpt2-tiny", 1000, "cpu");
    test_e2e("llama-tiny", 1000, "cpu");
    test_e2e("llama3-tiny", 1000, "cpu");
    test_e2e("qwen2-tiny", 300, "cpu"); // byte-level BPE with NFC + Split (Qwen2), no BOS, ChatML specials
    // On CUDA: the engine's prefill and decode on the device, argmax / top-k on the device
    test_e2e("gpt2-tiny", 20, "cuda");
    test_e2e("llama-tiny", 20, "cuda");

    case_flush();
    printf("bad-input cases: %d\n", n_bad_inputs);
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
