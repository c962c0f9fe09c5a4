// Models and sessions end to end (CTest `model`):
//
//   test_model FIXTURES_DIR     (tests/fixtures/models, by tests/fixtures/make_fixtures.py)
//
// - Fixtures (HF transformers, float32 eager reference; GPT-2, Llama, Llama 3
//   scaling, bf16 Llama, Mixtral (bf16, 8 experts top-2), Qwen2 with
//   q/k/v biases and tied embeddings): all-position logits
//   of prompt_ids against logits.npy, per row max|got - ref| / max|ref| <= 1e-4
//   (the CPU computes in f32; HF's f32 forward differs by f32 rounding, ~1e-6);
//   20 greedy tokens identical (mf_session_forward step by step, argmax here);
//   the batch prompts prefilled and decoded together give each one's tokens;
//   per-token NLL as in expected.json (1e-4 absolute); model info (experts,
//   top-k and active parameters for the MoE fixtures).
// - Mistral with sliding_window 8 (mistral-window-tiny, 41-token prompt): the
//   full fixture test (each query sees its last 8 keys), flash path.
// - A float64 reference forward written here from the spec and the weight
//   views, for the synthetic tiny presets (Llama-shaped GQA + RoPE, GPT-2
//   shaped, post-norm): 1e-4 relative as above.
// - KV cache: a prefill of N tokens == N single-token decode steps == the
//   prefill split into small steps and query blocks (1e-5 relative).
// - Bad inputs (each error names the value, and the session still works),
//   broken checkpoints (a copied fixture with a tensor renamed, reshaped or
//   retyped: the error names the tensor and the file), allocation failures
//   injected at every allocation of load / create / forward.
// - 100+ create / forward / free cycles (leaks: run under ASan or valgrind).
// - CUDA (skipped without a device): the same fixtures in bf16 within the
//   looser tolerance documented at test_cuda.
// Last line: "N passed, N failed, N skipped".
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "minfer/minfer.h"
#include "minfer/model.h"
#include "cpu/cpu.h"
#include "cpu/skinny.h"
#include "runtime/session.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef MF_HAVE_CUDA
#include <cuda_runtime_api.h> // cudaMemGetInfo: device memory steadiness (test_cuda_memory)
#endif

#define TRY(expr)                          \
    do {                                   \
        mf_status try_s_ = (expr);         \
        if (try_s_ != MF_OK) return try_s_; \
    } while (0)

static int n_pass, n_fail, n_skip;
static const char *fixdir;
static char tmpdir[256];

// ---- reporting ----------------------------------------------------------------------------

static void report(bool ok, const char *name, const char *fmt, ...) {
    char detail[1024] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name, detail[0] ? ": " : "", detail);
    if (ok)
        n_pass++;
    else
        n_fail++;
    fflush(stdout);
}

static void skip(const char *name, const char *why) {
    printf("skip %s: %s\n", name, why);
    n_skip++;
}

static int n_bad_inputs; // expect_err calls: the bad-input cases (printed for scripts/reliability-report.sh)

// got must be want and the last error must contain each non-NULL substring.
static bool expect_err(const char *name, mf_status got, mf_status want, const char *s1, const char *s2) {
    n_bad_inputs++;
    const char *msg = mf_last_error();
    bool ok = got == want;
    const char *miss = NULL;
    if (s1 && !strstr(msg, s1)) ok = false, miss = s1;
    if (s2 && !strstr(msg, s2)) ok = false, miss = s2;
    report(ok, name, "%s (want %s)%s%s%s: %s", mf_status_str(got), mf_status_str(want), miss ? " message lacks \"" : "",
           miss ? miss : "", miss ? "\"" : "", msg);
    return ok;
}

static bool check_ok(const char *name, mf_status s) {
    if (s != MF_OK) report(false, name, "%s: %s", mf_status_str(s), mf_last_error());
    return s == MF_OK;
}

// ---- files --------------------------------------------------------------------------------

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    b[len] = 0;
    if (n) *n = (size_t)len;
    return b;
}

static bool write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

// A .npy file of little-endian f32 with 2 dims (C order). NULL on failure.
static float *read_npy_f32(const char *path, int64_t *rows, int64_t *cols) {
    size_t n;
    char *b = read_file(path, &n);
    if (!b) return NULL;
    float *out = NULL;
    if (n >= 10 && memcmp(b, "\x93NUMPY", 6) == 0) {
        const unsigned char major = (unsigned char)b[6];
        size_t hl, off;
        if (major == 1) {
            hl = (unsigned char)b[8] | (size_t)(unsigned char)b[9] << 8, off = 10;
        } else {
            hl = (unsigned char)b[8] | (size_t)(unsigned char)b[9] << 8 | (size_t)(unsigned char)b[10] << 16 |
                 (size_t)(unsigned char)b[11] << 24;
            off = 12;
        }
        const char *h = b + off;
        long long r = -1, c = -1;
        const char *shape = strstr(h, "'shape': (");
        if (off + hl <= n && strstr(h, "'descr': '<f4'") && strstr(h, "'fortran_order': False") && shape &&
            sscanf(shape + 10, "%lld, %lld)", &r, &c) == 2 && r > 0 && c > 0 &&
            off + hl + (size_t)(r * c) * 4 <= n) {
            out = malloc((size_t)(r * c) * 4);
            memcpy(out, b + off + hl, (size_t)(r * c) * 4);
            *rows = r, *cols = c;
        }
    }
    free(b);
    return out;
}

static cJSON *read_json(const char *path) {
    char *t = read_file(path, NULL);
    if (!t) return NULL;
    cJSON *j = cJSON_Parse(t);
    free(t);
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

// ---- helpers ----------------------------------------------------------------------------------

static int32_t argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
}

// max over rows of max|a - b| / max|b| (per row).
static double row_rel_err(const float *a, const double *b_d, const float *b_f, int64_t rows, int64_t cols) {
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        double md = 0, mb = 0;
        for (int64_t j = 0; j < cols; j++) {
            const double ref = b_d ? b_d[r * cols + j] : (double)b_f[r * cols + j];
            const double d = fabs((double)a[r * cols + j] - ref);
            if (!(d <= md)) md = d; // NaN propagates
            if (fabs(ref) > mb) mb = fabs(ref);
        }
        const double e = md / (mb > 0 ? mb : 1);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

// One sequence in slot `slot`: tokens appended, logits per mode.
static mf_status fwd1(mf_session *s, int32_t slot, const int32_t *tok, int64_t n, mf_logits_mode mode, float *lg) {
    const int64_t off[2] = {0, n};
    return mf_session_forward(s, 1, &slot, tok, off, mode, lg);
}

// Greedy: prompt in slot, then n_gen tokens (first from the prefill's logits).
static mf_status greedy(mf_session *s, int32_t slot, const int32_t *prompt, int64_t n_prompt, int64_t n_gen,
                        int32_t *out, float *lg, int64_t vocab) {
    TRY(fwd1(s, slot, prompt, n_prompt, MF_LOGITS_LAST, lg));
    for (int64_t i = 0; i < n_gen; i++) {
        out[i] = argmax(lg, vocab);
        if (i + 1 < n_gen) TRY(fwd1(s, slot, &out[i], 1, MF_LOGITS_LAST, lg));
    }
    return MF_OK;
}

static void fill_tokens(int32_t *t, int64_t n, int64_t vocab, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
    }
}

// ---- float64 reference forward ------------------------------------------------------------------
// Straight from the math (per token, per head), reading the model's weight
// views (CPU, f32) through their strides; nothing shared with forward.c.

static double wat(const mf_tensor *t, int64_t i, int64_t j) {
    return (double)((const float *)t->data)[i * t->stride[0] + j * t->stride[1]];
}
static double vat(const mf_tensor *t, int64_t i) {
    return t->data ? (double)((const float *)t->data)[i * t->stride[0]] : 0.0;
}

// y (T, sum of outs) = x (T, in) @ lin[0..n) side by side (+ bias).
static void ref_linear(const double *x, int64_t T, int64_t in, const mf_linear *lin, int32_t n, double *y,
                       int64_t ytot) {
    int64_t c0 = 0;
    for (int32_t p = 0; p < n; p++) {
        const int64_t out = lin[p].w.shape[1];
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < out; j++) {
                double acc = vat(&lin[p].bias, j);
                for (int64_t k = 0; k < in; k++) acc += x[t * in + k] * wat(&lin[p].w, k, j);
                y[t * ytot + c0 + j] = acc;
            }
        c0 += out;
    }
}

static void ref_norm(const mf_dec_spec *sp, const double *x, int64_t T, const mf_tensor *w, const mf_tensor *b,
                     double *y) {
    const int64_t h = sp->hidden;
    for (int64_t t = 0; t < T; t++) {
        const double *r = x + t * h;
        double mean = 0, var = 0;
        if (sp->layernorm) {
            for (int64_t i = 0; i < h; i++) mean += r[i];
            mean /= (double)h;
        }
        for (int64_t i = 0; i < h; i++) var += (r[i] - mean) * (r[i] - mean);
        var /= (double)h;
        const double inv = 1.0 / sqrt(var + (double)sp->norm_eps);
        for (int64_t i = 0; i < h; i++) y[t * h + i] = (r[i] - mean) * inv * vat(w, i) + vat(b, i);
    }
}

static double ref_act(mf_act_kind a, double x) {
    switch (a) {
    case MF_ACT_SILU: return x / (1.0 + exp(-x));
    case MF_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case MF_ACT_GELU_ERF: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    }
    return x;
}

// out (T, hidden) = attention block of x (T, hidden), positions 0..T-1 (each
// query sees its last sliding_window keys when the spec has a window).
static void ref_attention(const mf_model *m, int32_t l, const double *x, int64_t T, double *out) {
    const mf_dec_spec *sp = &m->spec;
    const mf_layer_weights *L = &m->w.layers[l];
    const int64_t H = sp->n_heads, G = sp->n_kv_heads, D = sp->head_dim, W = (H + 2 * G) * D, h = sp->hidden;
    double *qkv = malloc((size_t)(T * W) * sizeof *qkv), *ctx = calloc((size_t)(T * H * D), sizeof *ctx);
    double *sc = malloc((size_t)T * sizeof *sc);
    ref_linear(x, T, h, L->qkv, L->n_qkv, qkv, W);
    if (!sp->learned_pos) { // RoPE, rotate_half layout, on q and k heads
        const float *inv = m->w.inv_freq.data;
        for (int64_t t = 0; t < T; t++)
            for (int64_t hd = 0; hd < H + G; hd++) {
                double *v = qkv + t * W + hd * D;
                for (int64_t i = 0; i < D / 2; i++) {
                    const double ang = (double)t * (double)inv[i];
                    const double c = cos(ang), s = sin(ang), a = v[i], b = v[i + D / 2];
                    v[i] = a * c - b * s;
                    v[i + D / 2] = b * c + a * s;
                }
            }
    }
    for (int64_t hd = 0; hd < H; hd++) {
        const int64_t g = hd / (H / G);
        for (int64_t t = 0; t < T; t++) {
            double mx = -INFINITY, sum = 0;
            const int64_t j0 = sp->sliding_window > 0 && t >= sp->sliding_window ? t - sp->sliding_window + 1 : 0;
            for (int64_t j = j0; j <= t; j++) {
                double d = 0;
                for (int64_t i = 0; i < D; i++) d += qkv[t * W + hd * D + i] * qkv[j * W + H * D + g * D + i];
                sc[j] = d / sqrt((double)D);
                if (sc[j] > mx) mx = sc[j];
            }
            for (int64_t j = j0; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
            for (int64_t j = j0; j <= t; j++)
                for (int64_t i = 0; i < D; i++)
                    ctx[t * H * D + hd * D + i] += sc[j] / sum * qkv[j * W + (H + G) * D + g * D + i];
        }
    }
    ref_linear(ctx, T, H * D, &L->o, 1, out, h);
    free(qkv), free(ctx), free(sc);
}

// Element (e, r, c) of a 3-D f32 tensor (the packed experts).
static double w3at(const mf_tensor *t, int64_t e, int64_t r, int64_t c) {
    return (double)((const float *)t->data)[e * t->stride[0] + r * t->stride[1] + c * t->stride[2]];
}

// y (H) += scale * FFN(x) of one expert in torch layout: w1 (rows, H) with
// rows = 2F (gate | up, SwiGLU) or F (GELU-tanh), w2 (H, F); e: the expert's
// index into 3-D tensors, or -1 for 2-D ones (the shared expert).
static void ref_expert(const mf_dec_spec *sp, const mf_tensor *w1, const mf_tensor *w2, int64_t e, int64_t F,
                       const double *x, double scale, double *y) {
    const int64_t H = sp->hidden;
    double *a = malloc((size_t)F * sizeof *a);
    for (int64_t i = 0; i < F; i++) {
        double g = 0, u = 0;
        for (int64_t k = 0; k < H; k++) {
            g += x[k] * (e < 0 ? wat(w1, i, k) : w3at(w1, e, i, k));
            if (sp->gated_mlp) u += x[k] * (e < 0 ? wat(w1, F + i, k) : w3at(w1, e, F + i, k));
        }
        a[i] = sp->gated_mlp ? ref_act(MF_ACT_SILU, g) * u : ref_act(MF_ACT_GELU_TANH, g);
    }
    for (int64_t h = 0; h < H; h++) {
        double acc = 0;
        for (int64_t i = 0; i < F; i++) acc += a[i] * (e < 0 ? wat(w2, h, i) : w3at(w2, e, h, i));
        y[h] += scale * acc;
    }
    free(a);
}

// The mixture of experts per token, as HF's sparse MoE blocks compute it:
// softmax over all router logits, the top_k largest (ties to the lower
// index), optionally renormalised; plus the (sigmoid-gated) shared expert.
static void ref_moe(const mf_model *m, int32_t l, const double *x, int64_t T, double *out) {
    const mf_dec_spec *sp = &m->spec;
    const mf_layer_weights *L = &m->w.layers[l];
    const int64_t H = sp->hidden, E = sp->n_experts, K = sp->top_k;
    double lg[256], p[256];
    for (int64_t t = 0; t < T; t++) {
        const double *xt = x + t * H;
        double *yt = out + t * H;
        memset(yt, 0, (size_t)H * sizeof *yt);
        double mx = -INFINITY, sum = 0;
        for (int64_t e = 0; e < E; e++) {
            lg[e] = 0;
            for (int64_t k = 0; k < H; k++) lg[e] += xt[k] * wat(&L->router, e, k);
            mx = fmax(mx, lg[e]);
        }
        for (int64_t e = 0; e < E; e++) sum += (p[e] = exp(lg[e] - mx));
        int64_t pick[8];
        double wsum = 0;
        for (int64_t j = 0; j < K; j++) {
            int64_t b = -1;
            for (int64_t e = 0; e < E; e++) {
                bool taken = false;
                for (int64_t i = 0; i < j; i++) taken = taken || pick[i] == e;
                if (!taken && (b < 0 || lg[e] > lg[b])) b = e;
            }
            pick[j] = b;
            wsum += p[b] / sum;
        }
        for (int64_t j = 0; j < K; j++) {
            const double w = p[pick[j]] / sum / (sp->moe_renorm ? wsum : 1.0);
            ref_expert(sp, &L->experts_w1, &L->experts_w2, pick[j], sp->ffn, xt, w, yt);
        }
        if (sp->shared_ffn > 0) {
            double g = 1.0;
            if (sp->shared_gated) {
                double z = 0;
                for (int64_t k = 0; k < H; k++) z += xt[k] * wat(&L->shared_gate, 0, k);
                g = 1.0 / (1.0 + exp(-z));
            }
            ref_expert(sp, &L->shared_w1, &L->shared_w2, -1, sp->shared_ffn, xt, g, yt);
        }
    }
}

static void ref_mlp(const mf_model *m, int32_t l, const double *x, int64_t T, double *out) {
    const mf_dec_spec *sp = &m->spec;
    const mf_layer_weights *L = &m->w.layers[l];
    if (sp->n_experts > 0) {
        ref_moe(m, l, x, T, out);
        return;
    }
    const int64_t F = sp->ffn, fw = sp->gated_mlp ? 2 * F : F;
    double *ff = malloc((size_t)(T * fw) * sizeof *ff), *act = malloc((size_t)(T * F) * sizeof *act);
    ref_linear(x, T, sp->hidden, L->up, L->n_up, ff, fw);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < F; i++)
            act[t * F + i] = ref_act(sp->act, ff[t * fw + i]) * (sp->gated_mlp ? ff[t * fw + F + i] : 1.0);
    ref_linear(act, T, F, &L->down, 1, out, sp->hidden);
    free(ff), free(act);
}

// logits (T, vocab) of tokens at positions 0..T-1.
static void ref_forward(const mf_model *m, const int32_t *tok, int64_t T, double *logits) {
    const mf_dec_spec *sp = &m->spec;
    const mf_weights *w = &m->w;
    const int64_t h = sp->hidden;
    double *x = malloc((size_t)(T * h) * sizeof *x), *n = malloc((size_t)(T * h) * sizeof *n);
    double *a = malloc((size_t)(T * h) * sizeof *a);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < h; i++)
            x[t * h + i] = wat(&w->tok_emb, tok[t], i) + (sp->learned_pos ? wat(&w->pos_emb, t, i) : 0.0);
    for (int32_t l = 0; l < sp->n_layers; l++) {
        const mf_layer_weights *L = &w->layers[l];
        if (!sp->post_norm) {
            ref_norm(sp, x, T, &L->norm1_w, &L->norm1_b, n);
            ref_attention(m, l, n, T, a);
            for (int64_t i = 0; i < T * h; i++) x[i] += a[i];
            ref_norm(sp, x, T, &L->norm2_w, &L->norm2_b, n);
            ref_mlp(m, l, n, T, a);
            for (int64_t i = 0; i < T * h; i++) x[i] += a[i];
        } else {
            ref_attention(m, l, x, T, a);
            for (int64_t i = 0; i < T * h; i++) a[i] += x[i];
            ref_norm(sp, a, T, &L->norm1_w, &L->norm1_b, x);
            ref_mlp(m, l, x, T, a);
            for (int64_t i = 0; i < T * h; i++) a[i] += x[i];
            ref_norm(sp, a, T, &L->norm2_w, &L->norm2_b, x);
        }
    }
    if (sp->final_norm) {
        ref_norm(sp, x, T, &w->final_w, &w->final_b, n);
    } else {
        memcpy(n, x, (size_t)(T * h) * sizeof *n);
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t v = 0; v < sp->vocab; v++) {
            double acc = 0;
            for (int64_t i = 0; i < h; i++) acc += n[t * h + i] * wat(&w->lm_head.w, i, v);
            logits[t * sp->vocab + v] = acc;
        }
    free(x), free(n), free(a);
}

// The whole forward of a synthetic preset against the float64 reference, on
// the attention path `attn` ("flash" | "classic"), with the spec's sliding
// window set to W (0: none): all-position logits in one prefill, then a
// prefill of 12 tokens followed by one-token decode steps over the cache,
// each step's logits against the reference's row.
static void test_reference(mf_backend *cpu, const char *preset, const char *attn, int64_t W) {
    char name[160];
    snprintf(name, sizeof name, "reference(%s,attn=%s,window=%lld)", preset, attn, (long long)W);
    mf_model *m = NULL;
    const mf_model_opts mo = {.dtype = MF_DTYPE_F32, .attn = attn};
    if (!check_ok(name, mf_model_synthetic(preset, 7, cpu, &mo, &m))) return;
    m->spec.sliding_window = W;
    const int64_t T = 19, V = m->spec.vocab, P = 12;
    int32_t tok[19];
    fill_tokens(tok, T, V, 11);
    float *got = malloc((size_t)(T * V) * sizeof *got);
    double *ref = malloc((size_t)(T * V) * sizeof *ref);
    mf_session *s = NULL;
    if (check_ok(name, mf_session_create(m, 2, 64, &s)) && check_ok(name, fwd1(s, 1, tok, T, MF_LOGITS_ALL, got))) {
        ref_forward(m, tok, T, ref);
        const double e = row_rel_err(got, ref, NULL, T, V);
        report(e <= 1e-4, name, "all-position logits vs float64 reference: max row rel err %.2e (tol 1e-4)", e);
        if (W > 0) { // the window must matter, or this case could not fail
            double *full = malloc((size_t)(T * V) * sizeof *full);
            m->spec.sliding_window = 0;
            ref_forward(m, tok, T, full);
            m->spec.sliding_window = W;
            const double d = row_rel_err(got, full, NULL, T, V);
            report(d > 1e-2, name, "differs from full attention: max row rel err %.2e (want > 1e-2)", d);
            free(full);
        }
        double worst = 0;
        bool ok = check_ok(name, mf_session_reset(s, -1)) && check_ok(name, fwd1(s, 0, tok, P, MF_LOGITS_LAST, got));
        for (int64_t t = P - 1; ok && t < T; t++) {
            if (t >= P) ok = check_ok(name, fwd1(s, 0, tok + t, 1, MF_LOGITS_LAST, got));
            const double et = ok ? row_rel_err(got, ref + t * V, NULL, 1, V) : 1.0;
            if (et > worst) worst = et;
        }
        if (ok)
            report(worst <= 1e-4, name, "prefill %lld + %lld decode steps vs reference: max row rel err %.2e (tol 1e-4)",
                   (long long)P, (long long)(T - P), worst);
    }
    mf_session_free(s);
    mf_model_free(m);
    free(got), free(ref);
}

// ---- fixtures -------------------------------------------------------------------------------------

typedef struct {
    char dir[512];
    cJSON *exp;
    int32_t *prompt;
    int64_t n_prompt;
    float *logits; // (n_prompt, vocab) from logits.npy
    int64_t vocab;
} fixture;

static bool fixture_open(const char *name, fixture *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s/%s", fixdir, name);
    char p[700];
    snprintf(p, sizeof p, "%s/expected.json", f->dir);
    f->exp = read_json(p);
    if (!f->exp) return false;
    f->prompt = json_ids(cJSON_GetObjectItem(f->exp, "prompt_ids"), &f->n_prompt);
    snprintf(p, sizeof p, "%s/logits.npy", f->dir);
    int64_t rows = 0;
    f->logits = read_npy_f32(p, &rows, &f->vocab);
    if (!f->logits || rows != f->n_prompt) {
        fprintf(stderr, "%s: logits.npy unreadable or not (%lld, vocab)\n", p, (long long)f->n_prompt);
        return false;
    }
    return true;
}

static void fixture_close(fixture *f) {
    cJSON_Delete(f->exp);
    free(f->prompt);
    free(f->logits);
}

// The CPU's weight dtypes (mf_model_opts.dtype / dtype_auto): a bf16
// checkpoint keeps its matrices in bf16 by default (norms widened to f32),
// copied into the backend's memory, or as views into the file's mapping with
// opts.mmap; or is widened (f32) / converted (f16) on request; an f32
// checkpoint can be stored in bf16. Every variant against HF's logits for the
// fixture prompt; the stored bytes against the checkpoint's shapes.
static void test_weight_dtypes(mf_backend *cpu) {
    static const struct {
        const char *fx;
        bool dtype_auto;
        mf_dtype dt, want;   // asked, and the matrices' dtype
        bool mmap, views;    // opts.mmap; the matrices are views into the checkpoint's mapping
        double tol;          // max row rel err of the logits vs HF
    } cases[] = {
        {"llama-tiny-bf16", true, MF_DTYPE_F32, MF_DTYPE_BF16, false, false, 1e-4},
        {"llama-tiny-bf16", true, MF_DTYPE_F32, MF_DTYPE_BF16, true, true, 1e-4},
        {"llama-tiny-bf16", false, MF_DTYPE_F32, MF_DTYPE_F32, true, false, 1e-4},
        {"llama-tiny-bf16", false, MF_DTYPE_F16, MF_DTYPE_F16, false, false, 1e-4}, // its bf16 values are f16 values
        {"llama-tiny-bf16", false, MF_DTYPE_BF16, MF_DTYPE_BF16, true, true, 1e-4},
        {"mixtral-tiny", true, MF_DTYPE_F32, MF_DTYPE_BF16, true, true, 1e-4},
        {"mixtral-tiny", true, MF_DTYPE_F32, MF_DTYPE_BF16, false, false, 1e-4},
        {"qwen2-moe-tiny", true, MF_DTYPE_F32, MF_DTYPE_F32, true, true, 1e-4}, // experts packed, the rest in place
        {"gpt2-tiny", true, MF_DTYPE_F32, MF_DTYPE_F32, true, true, 1e-4},
        {"gpt2-tiny", true, MF_DTYPE_F32, MF_DTYPE_F32, false, false, 1e-4},
        {"gpt2-tiny", false, MF_DTYPE_BF16, MF_DTYPE_BF16, false, false, 3e-2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[128];
        snprintf(name, sizeof name, "weight dtypes(%s, %s%s)", cases[c].fx,
                 cases[c].dtype_auto ? "auto" : mf_dtype_name(cases[c].dt), cases[c].mmap ? ", mmap" : "");
        fixture f;
        if (!fixture_open(cases[c].fx, &f)) {
            report(false, name, "cannot read the fixture");
            fixture_close(&f);
            continue;
        }
        const mf_model_opts mo = {.dtype = cases[c].dt, .dtype_auto = cases[c].dtype_auto, .mmap = cases[c].mmap};
        mf_model *m = NULL;
        if (!check_ok(name, mf_model_load(f.dir, cpu, &mo, &m))) {
            fixture_close(&f);
            continue;
        }
        mf_model_info info;
        mf_model_get_info(m, &info);
        // bytes: the checkpoint's matrices in the dtype asked, its vectors in f32
        int64_t want_bytes = 0;
        mf_st_file *stf = NULL;
        if (mf_st_open_dir(f.dir, &stf) == MF_OK) {
            for (int64_t i = 0; i < mf_st_count(stf); i++) {
                const mf_st_tensor *t = mf_st_at(stf, i);
                if (t->supported && t->dtype != MF_DTYPE_I32)
                    want_bytes += t->numel * (int64_t)(t->ndim >= 2 ? mf_dtype_size(cases[c].want) : 4);
            }
            mf_st_close(stf);
        }
        const mf_layer_weights *L0 = &m->w.layers[0];
        const mf_tensor *mat = info.n_experts > 0 ? &L0->experts_w1 : &L0->qkv[0].w;
        const char *blk = m->w.block;
        const bool in_block = (const char *)L0->qkv[0].w.data >= blk && (const char *)L0->qkv[0].w.data < blk + m->w.block_bytes;
        const bool views = m->w.st != NULL && !in_block;
        report(info.dtype == cases[c].want && info.act_dtype == MF_DTYPE_F32 && mat->dtype == cases[c].want &&
                   L0->o.w.dtype == cases[c].want && m->w.tok_emb.dtype == cases[c].want &&
                   L0->norm1_w.dtype == MF_DTYPE_F32 && views == cases[c].views && info.weight_bytes == want_bytes,
               name, "weights %s (want %s; first matrix %s, norm %s), activations %s, attention weights %s (want %s), "
               "%lld weight bytes (want %lld)", mf_dtype_name(info.dtype), mf_dtype_name(cases[c].want),
               mf_dtype_name(mat->dtype), mf_dtype_name(L0->norm1_w.dtype), mf_dtype_name(info.act_dtype),
               views ? "in place in the mmap" : "copied", cases[c].views ? "in place" : "copied",
               (long long)info.weight_bytes, (long long)want_bytes);
        if (!strcmp(info.arch, "gpt2")) { // Conv1D (in, out): copied as Linear rows (out, in), in place as stored
            const mf_tensor *w[4] = {&L0->qkv[0].w, &L0->o.w, &L0->up[0].w, &L0->down.w};
            bool ok = true;
            for (int i = 0; i < 4; i++)
                ok = ok && w[i]->ndim == 2 && (views ? w[i]->stride[1] == 1 && w[i]->stride[0] == w[i]->shape[1]
                                                     : w[i]->stride[0] == 1 && w[i]->stride[1] == w[i]->shape[0]);
            report(ok, name, "Conv1D weights %s: c_attn (%lld, %lld) strides (%lld, %lld)",
                   views ? "used as stored, (in, out) rows" : "stored as (out, in) rows", (long long)w[0]->shape[0],
                   (long long)w[0]->shape[1], (long long)w[0]->stride[0], (long long)w[0]->stride[1]);
        }
        const int64_t V = info.vocab;
        float *lg = malloc((size_t)(f.n_prompt + 1) * (size_t)V * sizeof *lg);
        mf_session *s = NULL;
        if (lg && check_ok(name, mf_session_create(m, 1, 64, &s)) &&
            check_ok(name, fwd1(s, 0, f.prompt, f.n_prompt, MF_LOGITS_ALL, lg))) {
            const double e = row_rel_err(lg, NULL, f.logits, f.n_prompt, V);
            report(e <= cases[c].tol, name, "%lld positions: max row rel err %.2e vs HF (tol %.0e)",
                   (long long)f.n_prompt, e, cases[c].tol);
        }
        mf_session_free(s);
        free(lg);
        mf_model_free(m);
        fixture_close(&f);
    }
}

// The KV cache in f16 / bf16 on the CPU (mf_model_opts.kv_dtype): f32
// activations over a 16-bit cache. Each fixture's all-position logits (the
// prefill path) and its prompt fed one token at a time (the decode path,
// whose attention reads the cache through the skinny kernels) against HF's,
// within the bound measured here (docs/notes/cpu.md): the cache rounds each
// K and V to the 16-bit dtype, the rest is the f32 path's. The info and the
// memory plan count 2 bytes per element; "f32" is the default's bits; a bad
// name and (when a CUDA device is there) a 16-bit cache under other
// activations on CUDA are errors naming the value.
static void test_kv_dtypes(mf_backend *cpu) {
    static const struct {
        const char *fx, *kv;
        double tol; // max row rel err of the logits vs HF
    } cases[] = {
        // measured (commit of this test): f16 4.7e-4 .. 2.1e-3, bf16 3.6e-3 .. 8.2e-3, f32 1.5e-6
        {"llama-tiny", "f16", 5e-3},  {"llama-tiny", "bf16", 3e-2},       {"gpt2-tiny", "f16", 5e-3},
        {"gpt2-tiny", "bf16", 3e-2},  {"mistral-window-tiny", "f16", 5e-3}, {"qwen2-tiny", "f16", 5e-3},
        {"llama-tiny", "f32", 1e-4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[128];
        snprintf(name, sizeof name, "kv dtype(%s, %s)", cases[c].fx, cases[c].kv);
        fixture f;
        if (!fixture_open(cases[c].fx, &f)) {
            report(false, name, "cannot read the fixture");
            fixture_close(&f);
            continue;
        }
        const mf_model_opts mo = {.dtype_auto = true, .kv_dtype = cases[c].kv}, m0 = {.dtype_auto = true};
        mf_model *m = NULL, *ref = NULL;
        mf_session *s = NULL, *s0 = NULL;
        const int64_t N = f.n_prompt, V = f.vocab;
        float *lg = malloc((size_t)(N * V) * sizeof *lg), *ld = malloc((size_t)(N * V) * sizeof *ld);
        if (lg && ld && check_ok(name, mf_model_load(f.dir, cpu, &mo, &m)) &&
            check_ok(name, mf_model_load(f.dir, cpu, &m0, &ref))) {
            mf_model_info in, in0;
            mf_model_get_info(m, &in);
            mf_model_get_info(ref, &in0);
            const mf_dtype want = !strcmp(cases[c].kv, "f16") ? MF_DTYPE_F16 : !strcmp(cases[c].kv, "bf16") ? MF_DTYPE_BF16 : MF_DTYPE_F32;
            const int64_t per_tok = 2LL * in.n_layers * in.n_kv_heads * in.head_dim * (int64_t)mf_dtype_size(want);
            mf_session_plan pl;
            const bool planned = check_ok(name, mf_session_plan_memory(m, 2, 64, &pl));
            report(in.kv_dtype == want && in0.kv_dtype == MF_DTYPE_F32 && in.kv_bytes_per_token == per_tok &&
                       planned && pl.kv_bytes == per_tok * 2 * 64,
                   name, "info kv_dtype %s (want %s), %lld bytes a token (want %lld), plan %lld bytes for 2 x 64",
                   mf_dtype_name(in.kv_dtype), mf_dtype_name(want), (long long)in.kv_bytes_per_token,
                   (long long)per_tok, planned ? (long long)pl.kv_bytes : -1LL);
            if (check_ok(name, mf_session_create(m, 2, 64, &s)) && check_ok(name, fwd1(s, 0, f.prompt, N, MF_LOGITS_ALL, lg))) {
                bool ok = true;
                for (int64_t t = 0; ok && t < N; t++) ok = check_ok(name, fwd1(s, 1, f.prompt + t, 1, MF_LOGITS_LAST, ld + t * V));
                const double ep = row_rel_err(lg, NULL, f.logits, N, V), ed = ok ? row_rel_err(ld, NULL, f.logits, N, V) : 1;
                report(ep <= cases[c].tol && ed <= cases[c].tol, name,
                       "%lld positions vs HF: prefill max row rel err %.2e, token by token %.2e (tol %.0e)", (long long)N,
                       ep, ed, cases[c].tol);
                if (want == MF_DTYPE_F32 && check_ok(name, mf_session_create(ref, 1, 64, &s0)) &&
                    check_ok(name, fwd1(s0, 0, f.prompt, N, MF_LOGITS_ALL, ld)))
                    report(memcmp(lg, ld, (size_t)(N * V) * sizeof *lg) == 0, name, "kv_dtype f32: the default's bits");
            }
        }
        mf_session_free(s);
        mf_session_free(s0);
        mf_model_free(m);
        mf_model_free(ref);
        free(lg);
        free(ld);
        fixture_close(&f);
    }
    mf_model *m = NULL;
    const mf_model_opts bad = {.kv_dtype = "f8"};
    const mf_status st = mf_model_synthetic("tiny", 1, cpu, &bad, &m);
    report(st == MF_ERR_INVALID_ARG && strstr(mf_last_error(), "kv_dtype 'f8'") && !m, "kv dtype(f8)",
           "status %d: %s", (int)st, mf_last_error());
    mf_model_free(m);
    if (!mf_cuda_available()) {
        skip("kv dtype(cuda bf16 + f16 cache)", "no CUDA device");
        return;
    }
    mf_backend *cu = NULL;
    if (!check_ok("kv dtype(cuda)", mf_backend_init("cuda", &cu))) return;
    const mf_model_opts mixed = {.dtype = MF_DTYPE_BF16, .kv_dtype = "f16"};
    const mf_status sc = mf_model_synthetic("tiny", 1, cu, &mixed, &m);
    report(sc == MF_ERR_UNSUPPORTED && strstr(mf_last_error(), "kv_dtype f16") && !m, "kv dtype(cuda bf16 + f16 cache)",
           "status %d: %s", (int)sc, mf_last_error());
    mf_model_free(m);
    mf_backend_free(cu);
}

// What the CPU promises about its bits (docs/notes/cpu.md): a forward gives
// the same bits for any thread count (the work splits are fixed in the
// source, sums in a fixed order), on either set of kernels: the bf16 fixture
// (the decode GEMV, bf16 weights), prompt then token by token, on 1 and 2
// threads, with the AVX2+FMA kernels on (where the CPU has them) and off.
// (Between the two kernel sets the bits differ: FMA rounds once; both are
// held to the float64 references of test_ops, ctest ops_gemm / ops_cpu_baseline.)
static void test_cpu_threads(mf_backend *cpu) {
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
    fixture f;
    if (!fixture_open("llama-tiny-bf16", &f)) {
        report(false, "cpu threads", "cannot read llama-tiny-bf16");
        fixture_close(&f);
        return;
    }
    const int64_t N = f.n_prompt, V = f.vocab;
    float *lg[2] = {malloc((size_t)(2 * N * V) * sizeof(float)), malloc((size_t)(2 * N * V) * sizeof(float))};
    // its bf16 matrices kept (the skinny loops; widened panels on prefill), and widened to f32 (OpenBLAS)
    const mf_model_opts opts[2] = {{.dtype_auto = true}, {.dtype = MF_DTYPE_F32}};
    for (int w = 0; w < 2 && lg[0] && lg[1]; w++) {
        mf_model *m = NULL;
        if (!check_ok("cpu threads", mf_model_load(f.dir, cpu, &opts[w], &m))) continue;
        for (int isa = 1; isa >= 0; isa--) {
            const bool on = mf_cpu_avx2_set(isa == 1);
            if (isa == 1 && !on) continue; // no AVX2 here: the baseline run below covers it
            char name[96];
            snprintf(name, sizeof name, "cpu threads(%s weights, %s kernels)", w ? "f32" : "bf16",
                     !on ? "portable" : w == 0 && mf_cpu_avx512() ? "avx2+fma, avx512 prefill" : "avx2+fma");
            bool ok = true;
            for (int t = 0; t < 2 && ok; t++) {
                omp_set_num_threads(t + 1);
                mf_session *s = NULL;
                ok = check_ok(name, mf_session_create(m, 2, 64, &s)) &&
                     check_ok(name, fwd1(s, 0, f.prompt, N, MF_LOGITS_ALL, lg[t]));
                for (int64_t i = 0; ok && i < N; i++)
                    ok = check_ok(name, fwd1(s, 1, f.prompt + i, 1, MF_LOGITS_LAST, lg[t] + (N + i) * V));
                mf_session_free(s);
            }
            int64_t differ = 0; // rows: the prompt's N, then the N decode steps
            for (int64_t r = 0; ok && r < 2 * N; r++) differ += memcmp(lg[0] + r * V, lg[1] + r * V, (size_t)V * 4) != 0;
            if (ok)
                report(differ == 0 && row_rel_err(lg[0], NULL, f.logits, N, V) <= 1e-4, name,
                       "prefill + %lld decode steps: 1 and 2 threads give the same bits (%lld of %lld rows differ; "
                       "max row rel err vs HF %.2e)", (long long)N, (long long)differ, (long long)(2 * N),
                       row_rel_err(lg[0], NULL, f.logits, N, V));
        }
        mf_model_free(m);
    }
    const char *isa = getenv("MINFER_CPU_ISA"); // back to the environment's choice
    mf_cpu_avx2_set(!(isa && !strcmp(isa, "baseline")));
    omp_set_num_threads(threads);
    free(lg[0]);
    free(lg[1]);
    fixture_close(&f);
#else
    (void)cpu;
    skip("cpu threads", "built without OpenMP");
#endif
}

static void test_fixture(mf_backend *cpu, const char *fx) {
    char name[128];
    fixture f;
    snprintf(name, sizeof name, "fixture(%s)", fx);
    if (!fixture_open(fx, &f)) {
        report(false, name, "cannot read the fixture in %s/%s (run tests/fixtures/make_fixtures.py)", fixdir, fx);
        fixture_close(&f);
        return;
    }
    mf_model *m = NULL;
    mf_status st = mf_model_load(f.dir, cpu, NULL, &m);
    if (!check_ok(name, st)) {
        fixture_close(&f);
        return;
    }
    mf_model_info info;
    mf_model_get_info(m, &info);
    const int64_t V = info.vocab;
    char sub[160];

    // info: parameters = the checkpoint's float tensors (tied embeddings once).
    {
        mf_st_file *stf = NULL;
        int64_t numel = 0, layer_mm = 0, experts_mm = 0; // the layers' matrices, the routed experts' apart
        if (mf_st_open_dir(f.dir, &stf) == MF_OK) {
            for (int64_t i = 0; i < mf_st_count(stf); i++) {
                const mf_st_tensor *t = mf_st_at(stf, i);
                if (t->supported && t->dtype != MF_DTYPE_I32) numel += t->numel;
                if (t->ndim >= 2 && (strstr(t->name, ".layers.") || strstr(t->name, ".h.")))
                    *(strstr(t->name, ".experts.") ? &experts_mm : &layer_mm) += t->numel;
            }
            mf_st_close(stf);
        }
        // info: the weights a token multiplies by: every 2-D layer tensor, top_k / E of the experts'
        if (info.n_experts > 0) layer_mm += experts_mm / info.n_experts * info.top_k;
        snprintf(sub, sizeof sub, "%s info matmul params", name);
        report(info.layer_matmul_params == layer_mm, sub, "%lld per token (the checkpoint's layer matrices: %lld)",
               (long long)info.layer_matmul_params, (long long)layer_mm);
        snprintf(sub, sizeof sub, "%s info", name);
        const int32_t want_eos = (int32_t)cJSON_GetObjectItem(f.exp, "eos_id")->valuedouble;
        report(info.n_params == numel && V == f.vocab && info.eos_id == want_eos &&
                   info.kv_bytes_per_token == 2LL * info.n_layers * info.n_kv_heads * info.head_dim * 4,
               sub, "arch %s, %lld params (checkpoint %lld), vocab %d, eos %d (want %d), kv/token %lld", info.arch,
               (long long)info.n_params, (long long)numel, info.vocab, info.eos_id, want_eos,
               (long long)info.kv_bytes_per_token);
        // experts: config.json's counts, and a token's share of the parameters from the shapes
        const cJSON *cfg = NULL;
        char cp[700];
        snprintf(cp, sizeof cp, "%s/config.json", f.dir);
        cJSON *cj = read_json(cp);
        if (cj) cfg = cJSON_GetObjectItem(cj, "num_experts_per_tok");
        if (cfg) {
            const cJSON *ne = cJSON_GetObjectItem(cj, "num_local_experts");
            if (!ne) ne = cJSON_GetObjectItem(cj, "num_experts");
            const int64_t E = ne ? (int64_t)ne->valuedouble : -1, k = (int64_t)cfg->valuedouble;
            const int64_t per_expert = 3LL * info.hidden * info.ffn;
            snprintf(sub, sizeof sub, "%s info experts", name);
            report(info.n_experts == E && info.top_k == k &&
                       info.n_active_params == info.n_params - (E - k) * info.n_layers * per_expert,
                   sub, "%d experts (config %lld), top-%d (config %lld), active %lld of %lld params", info.n_experts,
                   (long long)E, info.top_k, (long long)k, (long long)info.n_active_params, (long long)info.n_params);
            // The experts are packed into the weight block at load, and by default every
            // other tensor is copied there too (in place from the mapping with opts.mmap,
            // the mixed path: test_weight_dtypes' qwen2-moe-tiny, an f32 checkpoint).
            const mf_layer_weights *L0 = &m->w.layers[0];
            const char *blk = m->w.block, *ew = L0->experts_w1.data;
            const bool packed = ew >= blk && ew < blk + m->w.block_bytes && L0->experts_w1.ndim == 3;
            snprintf(sub, sizeof sub, "%s load layout", name);
            report(packed && m->w.st == NULL, sub,
                   "experts packed (%lld, %lld, %lld) in the weight block: %s; other tensors %s", (long long)E,
                   (long long)L0->experts_w1.shape[1], (long long)L0->experts_w1.shape[2], packed ? "yes" : "NO",
                   m->w.st ? "used in place from the mmap" : "copied");
        } else {
            report(info.n_experts == 0 && info.n_active_params == info.n_params, sub,
                   "dense: no experts, active params = params");
        }
        cJSON_Delete(cj);
    }

    float *lg = malloc((size_t)(f.n_prompt + 1) * (size_t)V * sizeof *lg);
    mf_session *s = NULL;
    if (!check_ok(name, mf_session_create(m, 4, 64, &s))) goto done;

    // all-position logits
    snprintf(sub, sizeof sub, "%s logits", name);
    if (check_ok(sub, fwd1(s, 0, f.prompt, f.n_prompt, MF_LOGITS_ALL, lg))) {
        const double e = row_rel_err(lg, NULL, f.logits, f.n_prompt, V);
        report(e <= 1e-4, sub, "%lld positions: max row rel err %.2e vs HF (tol 1e-4)", (long long)f.n_prompt, e);
        // score: per-token NLL (float64 from our f32 logits) vs expected
        const cJSON *nll = cJSON_GetObjectItem(cJSON_GetObjectItem(f.exp, "score"), "nll");
        double worst = 0;
        for (int64_t t = 0; t + 1 < f.n_prompt; t++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t v = 0; v < V; v++) mx = fmax(mx, lg[t * V + v]);
            for (int64_t v = 0; v < V; v++) sum += exp((double)lg[t * V + v] - mx);
            const double mine = -((double)lg[t * V + f.prompt[t + 1]] - mx - log(sum));
            worst = fmax(worst, fabs(mine - cJSON_GetArrayItem(nll, (int)t)->valuedouble));
        }
        snprintf(sub, sizeof sub, "%s score", name);
        report(worst <= 1e-4, sub, "per-token NLL max abs diff %.2e (tol 1e-4)", worst);
    }

    // greedy, 20 tokens
    {
        const cJSON *g = cJSON_GetObjectItem(f.exp, "greedy");
        int64_t n_want;
        int32_t *want = json_ids(cJSON_GetObjectItem(g, "ids"), &n_want);
        int32_t got[64] = {0};
        snprintf(sub, sizeof sub, "%s greedy", name);
        mf_session_reset(s, -1);
        if (check_ok(sub, greedy(s, 2, f.prompt, f.n_prompt, n_want, got, lg, V))) {
            int64_t first_diff = -1;
            for (int64_t i = 0; i < n_want && first_diff < 0; i++)
                if (got[i] != want[i]) first_diff = i;
            if (first_diff < 0)
                report(n_want >= 20, sub, "%lld tokens identical", (long long)n_want);
            else
                report(false, sub, "%lld tokens, first difference at %lld: %d (want %d)", (long long)n_want,
                       (long long)first_diff, got[first_diff], want[first_diff]);
        }
        free(want);
    }

    // batch: the prompts prefilled in one call, then decoded together, in slots 3, 0, 1
    {
        const cJSON *b = cJSON_GetObjectItem(f.exp, "batch");
        const int32_t nb = cJSON_GetArraySize(b);
        int32_t *pr[8] = {0}, *want[8] = {0}, slots[8] = {3, 0, 1, 2};
        int64_t np[8] = {0}, nw[8] = {0}, off[9] = {0};
        int32_t tok[1024], cur[8], out[8][64];
        float *blg = malloc((size_t)nb * (size_t)V * sizeof *blg);
        for (int32_t i = 0; i < nb && i < 4; i++) {
            const cJSON *e = cJSON_GetArrayItem(b, i);
            pr[i] = json_ids(cJSON_GetObjectItem(e, "prompt_ids"), &np[i]);
            want[i] = json_ids(cJSON_GetObjectItem(e, "greedy_ids"), &nw[i]);
            memcpy(tok + off[i], pr[i], (size_t)np[i] * sizeof *tok);
            off[i + 1] = off[i] + np[i];
        }
        snprintf(sub, sizeof sub, "%s batch", name);
        mf_session_reset(s, -1);
        mf_status bs = nb >= 1 && nb <= 4 ? mf_session_forward(s, nb, slots, tok, off, MF_LOGITS_LAST, blg)
                                          : MF_ERR_INVALID_ARG;
        int64_t steps = nw[0];
        for (int32_t i = 0; i < nb; i++) steps = nw[i] < steps ? nw[i] : steps;
        for (int64_t k = 0; bs == MF_OK && k < steps; k++) {
            int64_t o1[9];
            for (int32_t i = 0; i < nb; i++) {
                cur[i] = out[i][k] = argmax(blg + (int64_t)i * V, V);
                o1[i] = i;
            }
            o1[nb] = nb;
            if (k + 1 < steps) bs = mf_session_forward(s, nb, slots, cur, o1, MF_LOGITS_LAST, blg);
        }
        if (check_ok(sub, bs)) {
            bool same = steps >= 10;
            for (int32_t i = 0; i < nb; i++)
                for (int64_t k = 0; k < steps; k++) same = same && out[i][k] == want[i][k];
            report(same, sub, "%d prompts together (slots 3, 0, 1), %lld decode steps: each one's greedy tokens %s", nb,
                   (long long)steps, same ? "identical to HF's alone" : "DIFFER");
        }
        for (int32_t i = 0; i < nb && i < 4; i++) free(pr[i]), free(want[i]);
        free(blg);
    }

    // KV cache: prefill of N == N decode steps == small steps and query blocks
    {
        const int64_t N = f.n_prompt < 12 ? f.n_prompt : 12;
        float *a = malloc((size_t)(N * V) * sizeof *a), *c = malloc((size_t)(N * V) * sizeof *c);
        snprintf(sub, sizeof sub, "%s kv_cache", name);
        mf_session_reset(s, -1);
        bool ok = check_ok(sub, fwd1(s, 1, f.prompt, N, MF_LOGITS_ALL, a));
        for (int64_t t = 0; ok && t < N; t++) ok = check_ok(sub, fwd1(s, 2, f.prompt + t, 1, MF_LOGITS_LAST, c + t * V));
        if (ok) {
            const double e = row_rel_err(c, NULL, a, N, V);
            report(e <= 1e-5 && mf_session_seq_len(s, 2) == N, sub,
                   "prefill of %lld vs %lld decode steps: max row rel err %.2e (tol 1e-5)", (long long)N, (long long)N, e);
        }
        // the same prefill split in steps of 5 rows (a sequence straddles steps)
        // and query blocks of 3 (smaller than created: always safe)
        const int64_t T0 = s->dims.step_tokens, Q0 = s->dims.q_block;
        s->dims.step_tokens = 5, s->dims.q_block = 3;
        mf_session_reset(s, 3);
        snprintf(sub, sizeof sub, "%s kv_cache split", name);
        if (ok && check_ok(sub, fwd1(s, 3, f.prompt, N, MF_LOGITS_ALL, c))) {
            const double e = row_rel_err(c, NULL, a, N, V);
            report(e <= 1e-5, sub, "steps of 5 rows, query blocks of 3: max row rel err %.2e (tol 1e-5)", e);
        }
        s->dims.step_tokens = T0, s->dims.q_block = Q0;
        free(a), free(c);
    }
done:
    mf_session_free(s);
    mf_model_free(m);
    free(lg);
    fixture_close(&f);
}

// ---- bad inputs ------------------------------------------------------------------------------------

static void test_bad_inputs(mf_backend *cpu) {
    mf_model *m = NULL;
    const char *n = "bad_inputs";
    if (!check_ok(n, mf_model_synthetic("tiny-gpt2", 3, cpu, NULL, &m))) return;
    mf_session *s = NULL;
    expect_err("session_create(max_batch 0)", mf_session_create(m, 0, 16, &s), MF_ERR_INVALID_ARG, "max_batch 0", NULL);
    expect_err("session_create(max_seq -1)", mf_session_create(m, 1, -1, &s), MF_ERR_INVALID_ARG, "max_seq -1", NULL);
    expect_err("session_create(max_seq > positions)", mf_session_create(m, 1, 1025, &s), MF_ERR_INVALID_ARG, "1025",
               "1024 learned positions");
    expect_err("session_create(NULL model)", mf_session_create(NULL, 1, 16, &s), MF_ERR_INVALID_ARG, "model is NULL",
               NULL);
    if (!check_ok(n, mf_session_create(m, 3, 16, &s))) {
        mf_model_free(m);
        return;
    }
    const int64_t V = m->spec.vocab;
    int32_t tok[40];
    fill_tokens(tok, 40, V, 5);
    float *ref = malloc((size_t)(8 * V) * sizeof *ref), *lg = malloc((size_t)(40 * V) * sizeof *lg);
    // a reference run in a fresh slot to compare against after each error
    if (!check_ok(n, fwd1(s, 0, tok, 8, MF_LOGITS_ALL, ref))) goto out;
    mf_session_reset(s, 0);
    const int32_t slots2[2] = {1, 1}, slot_bad[1] = {3}, slot_neg[1] = {-1}, slot0[1] = {0};
    const int64_t off17[2] = {0, 17}, off2[3] = {0, 4, 8}, off_empty[3] = {0, 4, 4}, off_bad0[2] = {1, 4};
    int32_t badtok[4] = {1, 2, (int32_t)V, 3};
    const int64_t off4[2] = {0, 4};
    expect_err("forward(sequence > max_seq)", mf_session_forward(s, 1, slot0, tok, off17, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "17 new tokens exceed max_seq 16", NULL);
    expect_err("forward(slot out of range)", mf_session_forward(s, 1, slot_bad, tok, off4, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "seq_ids[0] = 3", "out of range");
    expect_err("forward(negative slot)", mf_session_forward(s, 1, slot_neg, tok, off4, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "seq_ids[0] = -1", NULL);
    expect_err("forward(duplicate slots)", mf_session_forward(s, 2, slots2, tok, off2, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "slot 1 given twice", NULL);
    expect_err("forward(token >= vocab)", mf_session_forward(s, 1, slot0, badtok, off4, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "token id 512 at tokens[2]", "vocab 512");
    badtok[2] = -7;
    expect_err("forward(negative token)", mf_session_forward(s, 1, slot0, badtok, off4, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "token id -7", NULL);
    expect_err("forward(empty sequence)", mf_session_forward(s, 2, (const int32_t[]){0, 1}, tok, off_empty,
                                                             MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "sequence 1 (slot 1) has no new tokens", NULL);
    expect_err("forward(offsets[0] != 0)", mf_session_forward(s, 1, slot0, tok, off_bad0, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "offsets[0] = 1", NULL);
    expect_err("forward(n_seqs 0)", mf_session_forward(s, 0, slot0, tok, off4, MF_LOGITS_LAST, lg), MF_ERR_INVALID_ARG,
               "n_seqs 0", NULL);
    expect_err("forward(n_seqs > max_batch)", mf_session_forward(s, 4, slot0, tok, off4, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "n_seqs 4", NULL);
    expect_err("forward(tokens NULL)", mf_session_forward(s, 1, slot0, NULL, off4, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "tokens is NULL", NULL);
    expect_err("forward(bad mode)", mf_session_forward(s, 1, slot0, tok, off4, (mf_logits_mode)7, lg),
               MF_ERR_INVALID_ARG, "mode 7", NULL);
    expect_err("forward(NULL session)", mf_session_forward(NULL, 1, slot0, tok, off4, MF_LOGITS_LAST, lg),
               MF_ERR_INVALID_ARG, "session is NULL", NULL);
    // a sequence that fits now but not after 12 more: nothing is appended on the failing call
    if (check_ok(n, fwd1(s, 2, tok, 12, MF_LOGITS_LAST, lg)))
        expect_err("forward(cached + new > max_seq)", fwd1(s, 2, tok, 5, MF_LOGITS_LAST, lg), MF_ERR_INVALID_ARG,
                   "12 cached + 5 new tokens exceed max_seq 16", NULL);
    report(mf_session_seq_len(s, 0) == 0 && mf_session_seq_len(s, 1) == 0 && mf_session_seq_len(s, 2) == 12,
           "errors leave the cache lengths", "slot lengths %lld %lld %lld (want 0 0 12)", (long long)mf_session_seq_len(s, 0),
           (long long)mf_session_seq_len(s, 1), (long long)mf_session_seq_len(s, 2));
    expect_err("session_reset(slot 3)", mf_session_reset(s, 3), MF_ERR_INVALID_ARG, "slot 3", NULL);
    report(mf_session_seq_len(s, 5) == -1, "seq_len(slot 5)", "%lld (want -1)", (long long)mf_session_seq_len(s, 5));
    // the session still works and gives the same answer
    if (check_ok(n, fwd1(s, 0, tok, 8, MF_LOGITS_ALL, lg))) {
        const double e = row_rel_err(lg, NULL, ref, 8, V);
        report(e == 0.0, "session works after the errors", "logits vs before the errors: max row rel err %.2e", e);
    }
    // logits NULL: only the cache; then the next token's logits as with a full run
    mf_session_reset(s, -1);
    if (check_ok(n, fwd1(s, 1, tok, 7, MF_LOGITS_LAST, NULL)) && check_ok(n, fwd1(s, 1, tok + 7, 1, MF_LOGITS_LAST, lg))) {
        const double e = row_rel_err(lg, NULL, ref + 7 * V, 1, V);
        report(e <= 1e-5, "forward(logits NULL)", "then one step: rel err %.2e vs the prefill's last row", e);
    }
out:
    mf_session_free(s);
    mf_model_free(m);
    free(ref), free(lg);

    mf_model *m2 = NULL;
    expect_err("model_synthetic(unknown)", mf_model_synthetic("huge", 1, cpu, NULL, &m2), MF_ERR_INVALID_ARG, "'huge'",
               "tiny");
    expect_err("model_synthetic(NULL backend)", mf_model_synthetic("tiny", 1, NULL, NULL, &m2), MF_ERR_INVALID_ARG,
               "backend is NULL", NULL);
    mf_model_opts o = {.dtype = MF_DTYPE_I32};
    expect_err("model_synthetic(dtype i32)", mf_model_synthetic("tiny", 1, cpu, &o, &m2), MF_ERR_INVALID_ARG, "i32",
               NULL);
    o = (mf_model_opts){.dtype = MF_DTYPE_BF16, .attn = "flash9"};
    expect_err("model_synthetic(attn unknown)", mf_model_synthetic("tiny", 1, cpu, &o, &m2), MF_ERR_UNSUPPORTED,
               "flash9", "classic");
    expect_err("model_load(NULL dir)", mf_model_load(NULL, cpu, NULL, &m2), MF_ERR_INVALID_ARG, "dir is NULL", NULL);
    expect_err("model_load(no such dir)", mf_model_load("/nonexistent/minfer", cpu, NULL, &m2), MF_ERR_IO,
               "/nonexistent/minfer", NULL);
    expect_err("model_get_info(NULL)", mf_model_get_info(NULL, NULL), MF_ERR_INVALID_ARG, "model is NULL", NULL);
    report(mf_model_tokenizer(NULL) == NULL && m2 == NULL, "NULL model accessors", NULL);
    mf_model_free(NULL);
    mf_session_free(NULL);
}

// ---- broken checkpoints -------------------------------------------------------------------------------

// Copies fixture `fx` (config.json, generation_config.json, model.safetensors)
// to tmpdir/name with its safetensors header edited by `edit`.
typedef void (*header_edit)(cJSON *h, const char *arg);

static void edit_rename(cJSON *h, const char *arg) { // "old=new"
    char old[256];
    snprintf(old, sizeof old, "%s", arg);
    char *eq = strchr(old, '=');
    *eq = 0;
    cJSON *t = cJSON_DetachItemFromObjectCaseSensitive(h, old);
    if (t) cJSON_AddItemToObject(h, eq + 1, t);
}

static void edit_transpose(cJSON *h, const char *arg) { // swaps a 2-D tensor's shape
    cJSON *sh = cJSON_GetObjectItem(cJSON_GetObjectItem(h, arg), "shape");
    const double a = cJSON_GetArrayItem(sh, 0)->valuedouble, b = cJSON_GetArrayItem(sh, 1)->valuedouble;
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 0), b);
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 1), a);
}

static void edit_dtype_i32(cJSON *h, const char *arg) { // F32 -> I32 (same size)
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(h, arg), "dtype", cJSON_CreateString("I32"));
}

static void edit_remove(cJSON *h, const char *arg) { cJSON_DeleteItemFromObjectCaseSensitive(h, arg); }

static void edit_strip_prefix(cJSON *h, const char *arg) { // "transformer." -> "" (the original GPT-2 files)
    const size_t n = strlen(arg);
    for (cJSON *it = h->child; it; it = it->next)
        if (!strncmp(it->string, arg, n)) memmove(it->string, it->string + n, strlen(it->string) - n + 1);
}

static const char *make_broken(const char *fx, const char *name, header_edit edit, const char *arg) {
    static char dir[600];
    char src[700], dst[700];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    mkdir(dir, 0700);
    const char *copy[] = {"config.json", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s/%s", fixdir, fx, copy[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, copy[i]);
        size_t n;
        char *b = read_file(src, &n);
        if (b) write_file(dst, b, n);
        free(b);
    }
    snprintf(src, sizeof src, "%s/%s/model.safetensors", fixdir, fx);
    size_t n;
    unsigned char *b = (unsigned char *)read_file(src, &n);
    if (!b) return dir;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
    char *ht = malloc(hl + 1);
    memcpy(ht, b + 8, hl);
    ht[hl] = 0;
    cJSON *h = cJSON_Parse(ht);
    edit(h, arg);
    char *nh = cJSON_PrintUnformatted(h);
    size_t nl = strlen(nh), padded = (nl + 7) / 8 * 8; // keep the data section 8-aligned
    unsigned char *out = malloc(8 + padded + (n - 8 - hl));
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(out + 8, nh, nl);
    memset(out + 8 + nl, ' ', padded - nl);
    memcpy(out + 8 + padded, b + 8 + hl, n - 8 - hl);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    write_file(dst, out, 8 + padded + (n - 8 - hl));
    free(out), free(nh), free(ht), free(b);
    cJSON_Delete(h);
    return dir;
}

static void remove_dir(const char *dir) {
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors", "model.safetensors.index.json"};
    char p[700];
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

// Copies fixture fx to tmpdir/name as two shards + model.safetensors.index.json
// (tensors alternate between the shards), as transformers writes big checkpoints.
static const char *make_sharded(const char *fx, const char *name) {
    static char dir[600];
    char p[700];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    mkdir(dir, 0700);
    snprintf(p, sizeof p, "%s/%s/config.json", fixdir, fx);
    size_t n;
    char *cfg = read_file(p, &n);
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (cfg) write_file(p, cfg, n);
    free(cfg);
    snprintf(p, sizeof p, "%s/%s/model.safetensors", fixdir, fx);
    unsigned char *b = (unsigned char *)read_file(p, &n);
    if (!b) return dir;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
    char *ht = malloc(hl + 1);
    memcpy(ht, b + 8, hl);
    ht[hl] = 0;
    cJSON *h = cJSON_Parse(ht), *hs[2] = {cJSON_CreateObject(), cJSON_CreateObject()}, *map = cJSON_CreateObject();
    unsigned char *data[2] = {malloc(n), malloc(n)};
    size_t used[2] = {0, 0};
    int k = 0;
    for (cJSON *it = h->child; it; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) continue;
        cJSON *off = cJSON_GetObjectItem(it, "data_offsets");
        const size_t a = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble, e = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        memcpy(data[k] + used[k], b + 8 + hl + a, e - a);
        cJSON *t = cJSON_Duplicate(it, 1);
        cJSON *no = cJSON_CreateArray();
        cJSON_AddItemToArray(no, cJSON_CreateNumber((double)used[k]));
        cJSON_AddItemToArray(no, cJSON_CreateNumber((double)(used[k] + e - a)));
        cJSON_ReplaceItemInObject(t, "data_offsets", no);
        cJSON_AddItemToObject(hs[k], it->string, t);
        cJSON_AddStringToObject(map, it->string, k ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors");
        used[k] += e - a;
        k ^= 1;
    }
    for (k = 0; k < 2; k++) {
        char *txt = cJSON_PrintUnformatted(hs[k]);
        size_t tl = strlen(txt), padded = (tl + 7) / 8 * 8;
        unsigned char *out = malloc(8 + padded + used[k]);
        for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)padded >> (8 * i));
        memcpy(out + 8, txt, tl);
        memset(out + 8 + tl, ' ', padded - tl);
        memcpy(out + 8 + padded, data[k], used[k]);
        snprintf(p, sizeof p, "%s/model-0000%d-of-00002.safetensors", dir, k + 1);
        write_file(p, out, 8 + padded + used[k]);
        free(out), free(txt), free(data[k]);
        cJSON_Delete(hs[k]);
    }
    cJSON *idx = cJSON_CreateObject();
    cJSON_AddItemToObject(idx, "metadata", cJSON_CreateObject());
    cJSON_AddItemToObject(idx, "weight_map", map);
    char *it = cJSON_Print(idx);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_file(p, it, strlen(it));
    free(it), free(ht), free(b);
    cJSON_Delete(idx);
    cJSON_Delete(h);
    return dir;
}

// Loads dir and fixture fx; the all-position logits of fx's prompt must be identical.
static void expect_same_model(mf_backend *cpu, const char *name, const char *dir, const char *fx) {
    fixture f;
    mf_model *a = NULL, *b = NULL;
    mf_session *sa = NULL, *sb = NULL;
    if (!fixture_open(fx, &f)) {
        report(false, name, "cannot read fixture %s", fx);
    } else if (check_ok(name, mf_model_load(dir, cpu, NULL, &a)) && check_ok(name, mf_model_load(f.dir, cpu, NULL, &b)) &&
               check_ok(name, mf_session_create(a, 1, 64, &sa)) && check_ok(name, mf_session_create(b, 1, 64, &sb))) {
        const int64_t V = a->spec.vocab;
        float *la = malloc((size_t)(f.n_prompt * V) * sizeof *la), *lb = malloc((size_t)(f.n_prompt * V) * sizeof *lb);
        if (check_ok(name, fwd1(sa, 0, f.prompt, f.n_prompt, MF_LOGITS_ALL, la)) &&
            check_ok(name, fwd1(sb, 0, f.prompt, f.n_prompt, MF_LOGITS_ALL, lb)))
            report(!memcmp(la, lb, (size_t)(f.n_prompt * V) * sizeof *la), name, "logits identical to %s's", fx);
        free(la), free(lb);
    }
    mf_session_free(sa), mf_session_free(sb);
    mf_model_free(a), mf_model_free(b);
    fixture_close(&f);
}

static void test_broken(mf_backend *cpu) {
    mf_model *m = NULL;
    const char *d;
    d = make_broken("llama-tiny", "missing", edit_rename,
                    "model.layers.1.mlp.down_proj.weight=model.layers.1.mlp.down_proj.weightX");
    expect_err("load(missing tensor)", mf_model_load(d, cpu, NULL, &m), MF_ERR_FORMAT,
               "missing tensor 'model.layers.1.mlp.down_proj.weight'", "missing/model.safetensors");
    remove_dir(d);
    d = make_broken("llama-tiny", "shape", edit_transpose, "model.layers.0.self_attn.k_proj.weight");
    expect_err("load(wrong shape)", mf_model_load(d, cpu, NULL, &m), MF_ERR_FORMAT,
               "model.layers.0.self_attn.k_proj.weight", "shape (64, 32), expected (32, 64)");
    remove_dir(d);
    d = make_broken("llama-tiny", "dtype", edit_dtype_i32, "model.norm.weight");
    expect_err("load(wrong dtype)", mf_model_load(d, cpu, NULL, &m), MF_ERR_FORMAT, "'model.norm.weight'", "dtype I32");
    remove_dir(d);
    d = make_broken("llama-tiny", "nohead", edit_remove, "lm_head.weight");
    expect_err("load(untied, no lm_head)", mf_model_load(d, cpu, NULL, &m), MF_ERR_FORMAT, "missing tensor 'lm_head.weight'",
               NULL);
    remove_dir(d);
    d = make_broken("gpt2-tiny", "gpt2missing", edit_rename,
                    "transformer.h.1.attn.c_attn.weight=transformer.h.1.attn.c_attnX.weight");
    expect_err("load(gpt2 missing c_attn)", mf_model_load(d, cpu, NULL, &m), MF_ERR_FORMAT,
               "'transformer.h.1.attn.c_attn.weight'", "gpt2missing/model.safetensors");
    remove_dir(d);
    // mixture of experts: one expert's tensor among the 8 packed per layer
    d = make_broken("mixtral-tiny", "moemissing", edit_rename,
                    "model.layers.1.block_sparse_moe.experts.5.w3.weight="
                    "model.layers.1.block_sparse_moe.experts.5.w3X");
    expect_err("load(mixtral missing expert 5 w3)", mf_model_load(d, cpu, NULL, &m), MF_ERR_FORMAT,
               "missing tensor 'model.layers.1.block_sparse_moe.experts.5.w3.weight'", "moemissing/model.safetensors");
    remove_dir(d);
    d = make_broken("mixtral-tiny", "moeshape", edit_transpose, "model.layers.0.block_sparse_moe.experts.7.w2.weight");
    expect_err("load(mixtral expert w2 transposed)", mf_model_load(d, cpu, NULL, &m), MF_ERR_FORMAT,
               "model.layers.0.block_sparse_moe.experts.7.w2.weight", "expected (64, 96)");
    remove_dir(d);
    report(m == NULL, "failed loads leave *out NULL", NULL);

    d = make_sharded("llama-tiny", "sharded");
    expect_same_model(cpu, "load(sharded: 2 shards + index.json)", d, "llama-tiny");
    remove_dir(d);
    d = make_sharded("mixtral-tiny", "moesharded");
    expect_same_model(cpu, "load(mixtral sharded: 2 shards + index.json)", d, "mixtral-tiny");
    remove_dir(d);
    d = make_broken("gpt2-tiny", "gpt2noprefix", edit_strip_prefix, "transformer.");
    expect_same_model(cpu, "load(gpt2 names without 'transformer.')", d, "gpt2-tiny");
    remove_dir(d);
}

// ---- profiler ---------------------------------------------------------------------------------------------

typedef struct {
    int depth, max_depth, begins, ends, unbalanced;
    int gemm, softmax, norm, rope, act, copy, embed, attention, kv_write;
} prof_count;

static void pc_begin(void *u, const char *op, const char *what) {
    prof_count *c = u;
    (void)what;
    c->begins++;
    if (++c->depth > c->max_depth) c->max_depth = c->depth;
    c->gemm += !strcmp(op, "gemm"), c->softmax += !strcmp(op, "softmax"), c->norm += !strcmp(op, "add_norm");
    c->rope += !strcmp(op, "rope"), c->act += !strcmp(op, "act"), c->copy += !strcmp(op, "copy");
    c->embed += !strcmp(op, "embed"), c->attention += !strcmp(op, "attention"), c->kv_write += !strcmp(op, "kv_write");
}

static void pc_end(void *u, const char *op, const char *what) {
    prof_count *c = u;
    (void)op, (void)what;
    c->ends++;
    if (--c->depth < 0) c->unbalanced++;
}

// Every op of a forward is bracketed once, the counts per family match the
// path: flash = one kv_write (RoPE fused) and one attention per layer;
// classic = the kv_write, then per query block a scores GEMM, a softmax and
// a P.V GEMM (the tiny preset has GQA: plus the head-major copies).
static void test_profiler(mf_backend *cpu, const char *attn) {
    char name[64];
    snprintf(name, sizeof name, "profiler(attn=%s)", attn);
    mf_model *m = NULL;
    mf_session *s = NULL;
    const mf_model_opts mo = {.dtype = MF_DTYPE_F32, .attn = attn};
    if (!check_ok(name, mf_model_synthetic("tiny", 9, cpu, &mo, &m))) return;
    if (!check_ok(name, mf_session_create(m, 1, 32, &s))) {
        mf_model_free(m);
        return;
    }
    const bool classic = !strcmp(attn, "classic");
    const int64_t V = m->spec.vocab;
    int32_t tok[10];
    fill_tokens(tok, 10, V, 2);
    float *a = malloc((size_t)(10 * V) * sizeof *a), *b = malloc((size_t)(10 * V) * sizeof *b);
    prof_count c = {0};
    mf_session_profiler p = {.begin = pc_begin, .end = pc_end, .user = &c};
    expect_err("set_profiler(begin only)", mf_session_set_profiler(s, &(mf_session_profiler){.begin = pc_begin}),
               MF_ERR_INVALID_ARG, "both begin and end", NULL);
    bool ok = check_ok(name, fwd1(s, 0, tok, 10, MF_LOGITS_ALL, a));
    mf_session_reset(s, -1);
    ok = ok && check_ok(name, mf_session_set_profiler(s, &p)) && check_ok(name, fwd1(s, 0, tok, 10, MF_LOGITS_ALL, b));
    if (ok) {
        const int L = m->spec.n_layers;
        const bool counts = classic ? c.gemm >= L * 6 && c.softmax == L && c.copy >= 2 * L && c.attention == 0
                                    : c.gemm == L * 4 + 1 && c.softmax == 0 && c.copy == 0 && c.attention == L;
        report(c.begins == c.ends && !c.unbalanced && c.max_depth == 1 && counts && c.norm == 2 * L + 1 &&
                   c.kv_write == L && c.rope == 0 && c.act == L && c.embed == 1 && row_rel_err(a, NULL, b, 10, V) == 0.0,
               name,
               "%d brackets (max depth %d): gemm %d, attention %d, kv_write %d, softmax %d, add_norm %d, act %d, "
               "copy %d, embed %d; logits unchanged",
               c.begins, c.max_depth, c.gemm, c.attention, c.kv_write, c.softmax, c.norm, c.act, c.copy, c.embed);
        // the call's statistics count the same ops; the CPU records no graphs
        mf_session_stats st;
        if (check_ok(name, mf_session_get_stats(s, &st)) && check_ok(name, mf_session_set_graphs(s, true)))
            report(st.ops == c.begins && st.launches == st.ops && st.host_us > 0 && !st.graph &&
                       st.graphs_recorded == 0,
                   name, "stats: %lld ops, %lld launches, host %.1f us, graph %d", (long long)st.ops,
                   (long long)st.launches, st.host_us, (int)st.graph);
        expect_err(name, mf_session_get_stats(s, NULL), MF_ERR_INVALID_ARG, "out is NULL", NULL);
        expect_err(name, mf_session_set_graphs(NULL, true), MF_ERR_INVALID_ARG, "session is NULL", NULL);
    }
    const int before = c.begins;
    mf_session_set_profiler(s, NULL);
    mf_session_reset(s, -1);
    if (check_ok(name, fwd1(s, 0, tok, 10, MF_LOGITS_LAST, a)))
        report(c.begins == before, name, "no calls after set_profiler(NULL)");
    mf_session_free(s);
    mf_model_free(m);
    free(a), free(b);
}

// ---- allocation failures and leaks ------------------------------------------------------------------------

static void test_faults(mf_backend *cpu, const char *fx) {
    char dir[600], name[128];
    snprintf(dir, sizeof dir, "%s/%s", fixdir, fx);
    snprintf(name, sizeof name, "fault injection(%s: load, create, forward)", fx);
    int n_oom = 0, bad = 0, n;
    char first_bad[256] = "";
    for (n = 1; n < 2000; n++) {
        mf_model *m = NULL;
        mf_session *s = NULL;
        int32_t tok[6] = {1, 2, 3, 4, 5, 6}, slot = 0;
        const int64_t off[2] = {0, 6};
        float lg[4096];
        mf_fault_alloc_fail_after(n);
        mf_status st = mf_model_load(dir, cpu, NULL, &m);
        if (st == MF_OK) st = mf_session_create(m, 2, 16, &s);
        if (st == MF_OK) st = mf_session_forward(s, 1, &slot, tok, off, MF_LOGITS_LAST, m->spec.vocab <= 4096 ? lg : NULL);
        mf_fault_alloc_fail_after(0);
        mf_session_free(s);
        mf_model_free(m);
        if (st == MF_OK) break;
        if (st == MF_ERR_OOM && mf_last_error()[0]) {
            n_oom++;
        } else if (!bad++) {
            snprintf(first_bad, sizeof first_bad, "alloc %d: %s: %s", n, mf_status_str(st), mf_last_error());
        }
    }
    report(bad == 0 && n_oom > 5 && n < 2000, name, "%d injected failures, all MF_ERR_OOM with a message, then success%s%s",
           n_oom, bad ? "; first other: " : "", first_bad);
}

static void test_cycles(mf_backend *cpu) {
    mf_model *m = NULL;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/llama-tiny", fixdir);
    int ok = 0, loads = 0;
    for (int i = 0; i < 10; i++) {
        mf_model *mm = NULL;
        if (mf_model_load(dir, cpu, NULL, &mm) == MF_OK) loads++;
        mf_model_free(mm);
    }
    if (!check_ok("cycles", mf_model_synthetic("tiny", 4, cpu, NULL, &m))) return;
    float *lg = malloc((size_t)(2 * m->spec.vocab) * sizeof *lg);
    for (int i = 0; i < 120; i++) {
        mf_session *s = NULL;
        int32_t tok[9], slots[2] = {1, 0};
        fill_tokens(tok, 9, m->spec.vocab, (uint64_t)i);
        const int64_t off[3] = {0, 5, 7}, off1[3] = {0, 1, 2};
        if (mf_session_create(m, 2, 12, &s) == MF_OK && mf_session_forward(s, 2, slots, tok, off, MF_LOGITS_LAST, lg) == MF_OK &&
            mf_session_forward(s, 2, slots, tok + 7, off1, MF_LOGITS_LAST, lg) == MF_OK)
            ok++;
        mf_session_free(s);
    }
    report(ok == 120 && loads == 10, "create/forward/free cycles",
           "%d of 120 session cycles, %d of 10 model loads (leaks: see ASan / valgrind)", ok, loads);
    mf_model_free(m);
    free(lg);
}

// ---- CUDA -------------------------------------------------------------------------------------------------
// bf16 weights and activations, f32 accumulation and softmax: logits are
// compared per row as max|got - ref| / max|ref| <= 5e-2 (bf16 keeps 8 bits:
// 4e-3 per rounding, accumulated over two layers of tiny random models;
// HF's own bf16 run is of the same order), and batched runs (1, 4, 16 and 32
// sequences) against the same prompt alone on the device, teacher-forced on
// the alone run's greedy tokens, within 2e-2; a prefill against the same
// tokens fed one decode step at a time within 3e-2. Greedy tokens are not
// compared: the tiny random models' top-2 margins (~1e-3) are below bf16's
// resolution.

static void test_cuda(const char *fx) {
    char name[128];
    snprintf(name, sizeof name, "cuda bf16(%s)", fx);
    if (!mf_cuda_available()) {
        skip(name, "no CUDA device");
        return;
    }
    fixture f;
    mf_backend *be = NULL;
    mf_model *m = NULL;
    mf_session *s = NULL;
    if (!fixture_open(fx, &f) || !check_ok(name, mf_backend_init("cuda", &be))) {
        fixture_close(&f);
        mf_backend_free(be);
        return;
    }
    mf_model_opts o = {.dtype = MF_DTYPE_BF16};
    mf_status st = mf_model_load(f.dir, be, &o, &m);
    if (st == MF_ERR_UNSUPPORTED) {
        skip(name, mf_last_error());
        goto out;
    }
    if (!check_ok(name, st)) goto out;
    const int64_t V = m->spec.vocab, NG = 8;
    float *lg = malloc((size_t)(f.n_prompt * V) * sizeof *lg);
    if (check_ok(name, mf_session_create(m, 32, 64, &s)) && check_ok(name, fwd1(s, 0, f.prompt, f.n_prompt, MF_LOGITS_ALL, lg))) {
        const double e = row_rel_err(lg, NULL, f.logits, f.n_prompt, V);
        report(e <= 5e-2, name, "logits: max row rel err %.2e vs HF f32 (tol 5e-2)", e);
        // KV cache: the prefill's rows again from single-token steps (bf16: other GEMM shapes round differently)
        float *st = malloc((size_t)(f.n_prompt * V) * sizeof *st);
        bool ok1 = true;
        for (int64_t t = 0; ok1 && t < f.n_prompt; t++) ok1 = check_ok(name, fwd1(s, 1, f.prompt + t, 1, MF_LOGITS_LAST, st + t * V));
        if (ok1) {
            const double e2 = row_rel_err(st, NULL, lg, f.n_prompt, V);
            report(e2 <= 3e-2, name, "prefill vs single-token decode steps: max row rel err %.2e (tol 3e-2)", e2);
        }
        free(st);
    }
    // alone: greedy NG tokens, keeping each step's logits
    int32_t gen[8];
    float *alone = malloc((size_t)(NG * V) * sizeof *alone), *bl = malloc((size_t)(32 * V) * sizeof *bl);
    mf_session_reset(s, -1);
    bool ok = check_ok(name, fwd1(s, 0, f.prompt, f.n_prompt, MF_LOGITS_LAST, alone));
    for (int64_t k = 0; ok && k + 1 < NG; k++) {
        gen[k] = argmax(alone + k * V, V);
        ok = check_ok(name, fwd1(s, 0, &gen[k], 1, MF_LOGITS_LAST, alone + (k + 1) * V));
    }
    const int32_t sizes[3] = {4, 16, 32};
    for (int b = 0; ok && b < 3; b++) {
        const int32_t nb = sizes[b];
        int32_t slots[32], *tok = malloc((size_t)(nb * f.n_prompt) * sizeof *tok);
        int64_t off[33];
        for (int32_t i = 0; i < nb; i++) {
            slots[i] = (i * 7) % nb; // scattered slots
            memcpy(tok + i * f.n_prompt, f.prompt, (size_t)f.n_prompt * sizeof *tok);
            off[i] = (int64_t)i * f.n_prompt;
        }
        off[nb] = (int64_t)nb * f.n_prompt;
        double worst = 0;
        mf_session_reset(s, -1);
        mf_status bs = mf_session_forward(s, nb, slots, tok, off, MF_LOGITS_LAST, bl);
        for (int64_t k = 0; bs == MF_OK && k < NG; k++) {
            for (int32_t i = 0; i < nb; i++) worst = fmax(worst, row_rel_err(bl + i * V, NULL, alone + k * V, 1, V));
            if (k + 1 < NG) {
                int32_t cur[32];
                int64_t o1[33];
                for (int32_t i = 0; i <= nb; i++) o1[i] = i;
                for (int32_t i = 0; i < nb; i++) cur[i] = gen[k];
                bs = mf_session_forward(s, nb, slots, cur, o1, MF_LOGITS_LAST, bl);
            }
        }
        char sub[160];
        snprintf(sub, sizeof sub, "%s batch %d", name, nb);
        if (check_ok(sub, bs)) report(worst <= 2e-2, sub, "every sequence as if alone: max row rel err %.2e (tol 2e-2)", worst);
        free(tok);
    }
    free(alone), free(bl), free(lg);
out:
    mf_session_free(s);
    mf_model_free(m);
    mf_backend_free(be);
    fixture_close(&f);
}

// Memory: the flash path keeps no scores buffer, so a session's plan (KV
// cache + scratch) grows linearly with max_seq (at most 2x per doubling, as
// the KV cache does); the classic path's scores scratch comes on top.
static void test_memory_plan(mf_backend *cpu) {
    static const char name[] = "memory plan(tiny: flash linear in max_seq)";
    mf_model *mf = NULL, *mc = NULL;
    const mf_model_opts of = {.dtype = MF_DTYPE_F32, .attn = "flash"}, oc = {.dtype = MF_DTYPE_F32, .attn = "classic"};
    // the tiny preset stands in: plan_memory needs no weights beyond the spec
    if (!check_ok(name, mf_model_synthetic("tiny", 1, cpu, &of, &mf)) ||
        !check_ok(name, mf_model_synthetic("tiny", 1, cpu, &oc, &mc))) {
        mf_model_free(mf);
        mf_model_free(mc);
        return;
    }
    double worst = 0;
    bool ok = true, less = true;
    int64_t prev = 0;
    for (int64_t S = 1024; ok && S <= 16384; S *= 2) {
        mf_session_plan pf, pc;
        ok = check_ok(name, mf_session_plan_memory(mf, 1, S, &pf)) && check_ok(name, mf_session_plan_memory(mc, 1, S, &pc));
        if (!ok) break;
        const int64_t tot = pf.kv_bytes + pf.scratch_bytes;
        if (prev) worst = fmax(worst, (double)tot / (double)prev);
        less &= pf.scratch_bytes < pc.scratch_bytes;
        prev = tot;
    }
    if (ok)
        report(worst <= 2.0 && less, name, "flash: worst growth %.3fx per doubling of max_seq (want <= 2); scratch below classic's: %s",
               worst, less ? "yes" : "NO");
    mf_model_free(mf);
    mf_model_free(mc);

    // mixture of experts: the plan counts mf_moe's workspace, which the session allocates at create
    static const char mname[] = "memory plan(tiny-moe-postnorm: MoE workspace)";
    mf_model *mm = NULL;
    mf_session *s = NULL;
    mf_session_plan pm;
    if (check_ok(mname, mf_model_synthetic("tiny-moe-postnorm", 1, cpu, &of, &mm)) &&
        check_ok(mname, mf_session_plan_memory(mm, 2, 64, &pm)) && check_ok(mname, mf_session_create(mm, 2, 64, &s)))
        report(s->dev.moe_ws_bytes > 0 && pm.kv_bytes + pm.scratch_bytes >= mf_session_bytes(s) &&
                   pm.kv_bytes + pm.scratch_bytes - mf_session_bytes(s) < 256, // the arena's last tensor is not padded
               mname, "plan %lld + %lld bytes, session %lld (MoE workspace %zu)", (long long)pm.kv_bytes,
               (long long)pm.scratch_bytes, (long long)mf_session_bytes(s), s->dev.moe_ws_bytes);
    mf_session_free(s);
    mf_model_free(mm);
}

// CUDA Graphs: greedy decoding with graphs (the default) and without gives
// the same logits bit for bit, on both attention paths and batch sizes 1, 3
// and 8 in one session (each size recorded once, then replayed; a size met
// again reuses its graph); a bad step in between changes nothing. RoPE
// fixtures use a max_seq of 1100, so split-KV decode runs inside the graphs.
// Mixture-of-experts fixtures: a decode step is recorded only when every MoE
// layer takes the device-routed expert path (batch x top_k <=
// MF_MOE_DECODE_MAX_ROWS); a batch of 17 (34 or more routed rows) runs
// plainly between recorded steps, and its output is the same with graphs on.
static void test_cuda_graphs(const char *fx, const char *attn) {
    char name[160];
    snprintf(name, sizeof name, "cuda graphs(%s,attn=%s)", fx, attn);
    if (!mf_cuda_available()) {
        skip(name, "no CUDA device");
        return;
    }
    fixture f;
    mf_backend *be = NULL;
    mf_model *m = NULL;
    mf_session *sg = NULL, *sp = NULL;
    float *lg = NULL, *lp = NULL;
    if (!fixture_open(fx, &f) || !check_ok(name, mf_backend_init("cuda", &be))) goto out;
    mf_model_opts o = {.dtype = MF_DTYPE_BF16, .attn = attn};
    if (!check_ok(name, mf_model_load(f.dir, be, &o, &m))) goto out;
    const bool moe = m->spec.n_experts > 0;
    const int32_t B = moe ? 17 : 8; // slots
    const int32_t dense_sizes[3] = {3, 1, 3}, moe_sizes[4] = {3, 1, 17, 3}; // 3 again: replays the graph recorded first
    const int32_t *sizes = moe ? moe_sizes : dense_sizes;
    const int n_sizes = moe ? 4 : 3;
    const int64_t V = m->spec.vocab, NP = f.n_prompt < 12 ? f.n_prompt : 12, NG = 10;
    lg = malloc((size_t)(B * V) * sizeof *lg), lp = malloc((size_t)(B * V) * sizeof *lp);
    // Decode steps bound the keys by max_seq (so that one recording serves
    // every length): with RoPE, 1100 makes the decode attention split the
    // keys 9 ways (128 a split), most splits empty, and the combine kernel
    // is recorded too. Learned positions (GPT-2) cap max_seq: one split.
    const int64_t S = m->spec.learned_pos ? NP + 3 * NG + 4 : 1100;
    if (!check_ok(name, mf_session_create(m, B, S, &sg)) || !check_ok(name, mf_session_create(m, B, S, &sp)) ||
        !check_ok(name, mf_session_set_graphs(sp, false)))
        goto out;
    // Steps a graph may record: every size for a dense model; for MoE the
    // largest batch whose routed rows fit the decode path.
    const int32_t rec_max = moe ? MF_MOE_DECODE_MAX_ROWS / m->spec.top_k : B;
    if (moe && sg->graphs.moe_rows != (rec_max < B ? rec_max : B)) {
        report(false, name, "moe_graph_rows %d, want %d (top_k %d)", sg->graphs.moe_rows, rec_max < B ? rec_max : B,
               m->spec.top_k);
        goto out;
    }
    double worst = 0;
    int64_t replays = 0, steps = 0, want_replays = 0, want_rec = 0;
    bool ok = true, same_tokens = true, seen[18] = {false};
    for (int b = 0; ok && b < n_sizes; b++) {
        const int32_t nb = sizes[b];
        const bool graphed = !strcmp(attn, "flash") && nb <= rec_max; // the classic path never records
        if (graphed && !seen[nb]) want_rec++;
        seen[nb] = true;
        int32_t slots[17], cur[17];
        int64_t off[18], o1[18];
        int32_t *tok = malloc((size_t)(nb * NP) * sizeof *tok);
        for (int32_t i = 0; i < nb; i++) {
            slots[i] = (i * 7 + 2) % B; // 7 is prime to 8 and 17: distinct slots
            for (int64_t t = 0; t < NP; t++) tok[i * NP + t] = f.prompt[(t + i) % f.n_prompt]; // distinct prompts
            off[i] = (int64_t)i * NP, o1[i] = i;
        }
        off[nb] = (int64_t)nb * NP, o1[nb] = nb;
        ok = check_ok(name, mf_session_reset(sg, -1)) && check_ok(name, mf_session_reset(sp, -1)) &&
             check_ok(name, mf_session_forward(sg, nb, slots, tok, off, MF_LOGITS_LAST, lg)) &&
             check_ok(name, mf_session_forward(sp, nb, slots, tok, off, MF_LOGITS_LAST, lp));
        for (int64_t k = 0; ok && k < NG; k++) {
            for (int32_t i = 0; i < nb; i++) {
                const int32_t a = argmax(lg + i * V, V), c = argmax(lp + i * V, V);
                same_tokens &= a == c;
                worst = fmax(worst, row_rel_err(lg + i * V, NULL, lp + i * V, 1, V));
                cur[i] = a;
            }
            if (k == 4) { // a bad step (token id out of range): refused, the caches unchanged
                int32_t bad[17];
                memcpy(bad, cur, sizeof bad);
                bad[nb - 1] = (int32_t)V;
                expect_err(name, mf_session_forward(sg, nb, slots, bad, o1, MF_LOGITS_LAST, lg), MF_ERR_INVALID_ARG,
                           "outside [0, vocab", NULL);
            }
            mf_session_stats st;
            ok = check_ok(name, mf_session_forward(sg, nb, slots, cur, o1, MF_LOGITS_LAST, lg)) &&
                 check_ok(name, mf_session_get_stats(sg, &st)) &&
                 check_ok(name, mf_session_forward(sp, nb, slots, cur, o1, MF_LOGITS_LAST, lp));
            if (ok) replays += st.graph, steps++, want_replays += graphed;
        }
        free(tok);
    }
    mf_session_stats st;
    if (ok && check_ok(name, mf_session_get_stats(sg, &st)))
        report(same_tokens && worst == 0.0 && replays == want_replays && st.graphs_recorded == want_rec, name,
               "%lld decode steps: greedy tokens %s, logits max row rel diff %.2e (want 0), %lld of them graph "
               "replays (want %lld), %lld graphs recorded (want %lld)%s%s",
               (long long)steps, same_tokens ? "identical" : "DIFFER", worst, (long long)replays,
               (long long)want_replays, (long long)st.graphs_recorded, (long long)want_rec,
               st.graphs_off[0] ? "; graphs off: " : "", st.graphs_off);
out:
    free(lg), free(lp);
    mf_session_free(sg);
    mf_session_free(sp);
    mf_model_free(m);
    mf_backend_free(be);
    fixture_close(&f);
}

// ---- greedy on the device (mf_session_forward_greedy) ------------------------------------------------
// Two sessions fed the same tokens: one returns logits (argmax taken here),
// the other only ids and max values. Ids must be equal and values equal bit
// for bit (the same LM-head GEMM feeds both): a prefill of 3 prompts of
// different lengths in scattered slots, decode steps at batch 3, then 2
// (one sequence drops out), one step of the greedy session asking for logits
// in between (graphs: the cache keys on the output kind), vals NULL on one
// step, and bad inputs named.
static void greedy_sessions(const char *name, mf_model *m, const fixture *f, bool graphs) {
    const int64_t V = m->spec.vocab, NP = f->n_prompt < 10 ? f->n_prompt : 10;
    mf_session *sa = NULL, *sb = NULL;
    float *lg = malloc((size_t)(8 * V) * sizeof *lg), vals[4]; // rows [0, 4): sa's; [4, 8): sb's
    int32_t ids[4], *tok = malloc((size_t)(3 * NP) * sizeof *tok);
    if (!check_ok(name, mf_session_create(m, 4, 64, &sa)) || !check_ok(name, mf_session_create(m, 4, 64, &sb))) goto out;
    int32_t slots[3] = {2, 0, 3}, cur[3];
    int64_t off[4] = {0}, o1[4] = {0, 1, 2, 3};
    for (int32_t i = 0; i < 3; i++) {
        const int64_t n = NP - 2 * i > 0 ? NP - 2 * i : 1; // 10, 8, 6 tokens
        for (int64_t t = 0; t < n; t++) tok[off[i] + t] = f->prompt[(t + 3 * i) % f->n_prompt];
        off[i + 1] = off[i] + n;
    }
    bool ok = check_ok(name, mf_session_forward(sa, 3, slots, tok, off, MF_LOGITS_LAST, lg)) &&
              check_ok(name, mf_session_forward_greedy(sb, 3, slots, tok, off, ids, vals));
    int32_t nb = 3;
    int64_t steps = 0, same = 0, graph_steps = 0;
    for (int k = 0; ok && k < 12; k++) {
        for (int32_t i = 0; i < nb; i++) {
            const int32_t want = argmax(lg + i * V, V);
            same += ids[i] == want && memcmp(&vals[i], &lg[i * V + want], sizeof(float)) == 0;
            cur[i] = want;
        }
        steps += nb;
        if (k == 6) nb = 2; // the last sequence drops out
        mf_session_stats st;
        ok = check_ok(name, mf_session_forward(sa, nb, slots, cur, o1, MF_LOGITS_LAST, lg));
        if (ok && k == 3) { // the greedy session asks for logits once: its argmax is taken here
            ok = check_ok(name, mf_session_forward(sb, nb, slots, cur, o1, MF_LOGITS_LAST, lg + 4 * V));
            for (int32_t i = 0; ok && i < nb; i++) ids[i] = argmax(lg + (4 + i) * V, V), vals[i] = lg[(4 + i) * V + ids[i]];
        } else if (ok && k == 8) { // vals NULL: ids only
            ok = check_ok(name, mf_session_forward_greedy(sb, nb, slots, cur, o1, ids, NULL));
            for (int32_t i = 0; ok && i < nb; i++) vals[i] = lg[i * V + ids[i]];
        } else if (ok) {
            ok = check_ok(name, mf_session_forward_greedy(sb, nb, slots, cur, o1, ids, vals));
        }
        if (ok && check_ok(name, mf_session_get_stats(sb, &st))) graph_steps += st.graph;
    }
    if (!ok) goto out;
    mf_session_stats st;
    check_ok(name, mf_session_get_stats(sb, &st));
    // graphs: greedy at 3, logits at 3, greedy at 2 (every decode step of sb replays one)
    const int64_t want_rec = graphs ? 3 : 0, want_graph_steps = graphs ? 12 : 0;
    report(same == steps && st.graphs_recorded == want_rec && graph_steps == want_graph_steps, name,
           "%lld of %lld greedy ids (and max values) equal to the argmax of the logits; %lld graphs recorded (want "
           "%lld), %lld of 12 decode steps replayed (want %lld)%s%s",
           (long long)same, (long long)steps, (long long)st.graphs_recorded, (long long)want_rec,
           (long long)graph_steps, (long long)want_graph_steps, st.graphs_off[0] ? "; graphs off: " : "",
           st.graphs_off);
    expect_err(name, mf_session_forward_greedy(sb, 1, slots, cur, o1, NULL, vals), MF_ERR_INVALID_ARG,
               "session_forward_greedy: ids is NULL", NULL);
    expect_err(name, mf_session_forward_greedy(sb, 0, slots, cur, o1, ids, vals), MF_ERR_INVALID_ARG,
               "session_forward_greedy: n_seqs 0", NULL);
    cur[0] = (int32_t)V;
    expect_err(name, mf_session_forward_greedy(sb, 1, slots, cur, o1, ids, vals), MF_ERR_INVALID_ARG,
               "outside [0, vocab", NULL);
    expect_err(name, mf_session_forward_greedy(NULL, 1, slots, cur, o1, ids, vals), MF_ERR_INVALID_ARG,
               "session is NULL", NULL);
out:
    mf_session_free(sa);
    mf_session_free(sb);
    free(lg);
    free(tok);
}

// ---- sampling on the device (mf_session_forward_topk) ----------------------------------------------
// Two sessions fed the same tokens: one returns logits, the other top-k
// candidates and row sums. The candidates must be the top-k of the logits
// (rank order, values bit for bit: the same LM-head GEMM feeds both), the max
// equal, the sum within 1e-6 of the double sum of the sampler's f32 terms,
// and mf_session_read_logits must give the logits row bit for bit. Prefill of
// 3 prompts, decode steps at batch 3 then 2, k changed on one step (graphs:
// the cache keys on k), bad inputs named. Then mf_generate with sampling:
// tokens equal to host_sampling's for several filter settings and seeds.
static int cmp_rank_desc(const float *x, int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); }

static bool topk_row_ok(const float *lg, int64_t V, int32_t k, float scale, const int32_t *ids, const float *vals,
                        const float *stats, int32_t *scratch) {
    int32_t m = 0; // insertion-sorted top k (k is small here)
    for (int32_t i = 0; i < V; i++) {
        if (lg[i] == -INFINITY) continue;
        int32_t j = m < k ? m++ : k;
        if (j == k && !cmp_rank_desc(lg, i, scratch[k - 1])) continue;
        if (j == k) j = k - 1;
        while (j > 0 && cmp_rank_desc(lg, i, scratch[j - 1])) scratch[j] = scratch[j - 1], j--;
        scratch[j] = i;
    }
    for (int32_t j = 0; j < k; j++) {
        if (j < m && (ids[j] != scratch[j] || vals[j] != (lg[scratch[j]] == 0.0f ? 0.0f : lg[scratch[j]]))) return false;
        if (j >= m && (ids[j] != -1 || vals[j] != -INFINITY)) return false;
    }
    const float xmax = lg[scratch[0]];
    double z = 0.0;
    for (int64_t i = 0; i < V; i++) z += exp((double)((lg[i] - xmax) * scale));
    return stats[0] == xmax && fabs(stats[1] - z) <= 1e-6 * z;
}

static void topk_sessions(const char *name, mf_model *m, const fixture *f, bool graphs) {
    const int64_t V = m->spec.vocab, NP = f->n_prompt < 10 ? f->n_prompt : 10;
    const int32_t K1 = V < 20 ? (int32_t)V : 20, K2 = V < MF_TOPK_MAX ? (int32_t)V : MF_TOPK_MAX;
    const float scale = 1.0f / 0.8f;
    mf_session *sa = NULL, *sb = NULL;
    float *lg = malloc((size_t)(4 * V) * sizeof *lg), *row = malloc((size_t)V * sizeof *row);
    int32_t *ids = malloc((size_t)(4 * K2) * sizeof *ids), *scratch = malloc((size_t)(K2 + 1) * sizeof *scratch);
    float *vals = malloc((size_t)(4 * K2) * sizeof *vals), stats[8];
    int32_t *tok = malloc((size_t)(3 * NP) * sizeof *tok);
    if (!check_ok(name, mf_session_create(m, 4, 64, &sa)) || !check_ok(name, mf_session_create(m, 4, 64, &sb))) goto out;
    int32_t slots[3] = {2, 0, 3}, cur[3];
    int64_t off[4] = {0}, o1[4] = {0, 1, 2, 3};
    for (int32_t i = 0; i < 3; i++) {
        const int64_t n = NP - 2 * i > 0 ? NP - 2 * i : 1;
        for (int64_t t = 0; t < n; t++) tok[off[i] + t] = f->prompt[(t + 3 * i) % f->n_prompt];
        off[i + 1] = off[i] + n;
    }
    bool ok = check_ok(name, mf_session_forward(sa, 3, slots, tok, off, MF_LOGITS_LAST, lg)) &&
              check_ok(name, mf_session_forward_topk(sb, 3, slots, tok, off, K1, scale, ids, vals, stats));
    int32_t nb = 3, K = K1;
    int64_t rows = 0, good = 0, reads_good = 0, graph_steps = 0;
    for (int s = 0; ok && s < 10; s++) {
        for (int32_t i = 0; i < nb; i++) {
            good += topk_row_ok(lg + i * V, V, K, scale, ids + i * K, vals + i * K, stats + 2 * i, scratch);
            reads_good += mf_session_read_logits(sb, i, row) == MF_OK && !memcmp(row, lg + i * V, (size_t)V * sizeof *row);
            cur[i] = ids[i * K];
        }
        rows += nb;
        if (s == 6) nb = 2;
        K = s == 3 ? K2 : K1;
        mf_session_stats st;
        ok = check_ok(name, mf_session_forward(sa, nb, slots, cur, o1, MF_LOGITS_LAST, lg)) &&
             check_ok(name, mf_session_forward_topk(sb, nb, slots, cur, o1, K, scale, ids, vals, stats));
        if (ok && check_ok(name, mf_session_get_stats(sb, &st))) graph_steps += st.graph;
    }
    if (!ok) goto out;
    mf_session_stats st;
    check_ok(name, mf_session_get_stats(sb, &st));
    // graphs: (3, K1), (3, K2) once, (2, K1); every decode step of sb replays one
    const int64_t want_rec = graphs ? (K1 == K2 ? 2 : 3) : 0, want_graph_steps = graphs ? 10 : 0;
    report(good == rows && reads_good == rows && st.graphs_recorded == want_rec && graph_steps == want_graph_steps, name,
           "%lld of %lld candidate rows = the logits' top-k and row sums, %lld logits rows read back equal; %lld "
           "graphs recorded (want %lld), %lld of 10 decode steps replayed (want %lld)%s%s",
           (long long)good, (long long)rows, (long long)reads_good, (long long)st.graphs_recorded, (long long)want_rec,
           (long long)graph_steps, (long long)want_graph_steps, st.graphs_off[0] ? "; graphs off: " : "",
           st.graphs_off);
    expect_err(name, mf_session_forward_topk(sb, 1, slots, cur, o1, 0, scale, ids, vals, stats), MF_ERR_INVALID_ARG,
               "session_forward_topk: k 0 not in", NULL);
    expect_err(name, mf_session_forward_topk(sb, 1, slots, cur, o1, K1, 0.0f, ids, vals, stats), MF_ERR_INVALID_ARG,
               "scale 0 not a finite value", NULL);
    expect_err(name, mf_session_forward_topk(sb, 1, slots, cur, o1, K1, scale, ids, vals, NULL), MF_ERR_INVALID_ARG,
               "stats is NULL", NULL);
    expect_err(name, mf_session_read_logits(sb, 3, row), MF_ERR_UNSUPPORTED, "row 3's logits are not on the device", NULL);

    // mf_generate runs on the serving engine, which runs flash attention
    // only: a model loaded with classic attention is refused (first run on
    // the CUDA kernel emulator: the CUDA classic pass called it).
    if (m->attn != MF_ATTN_FLASH) {
        const int32_t *p1[1] = {tok};
        const int64_t n1[1] = {off[1]};
        mf_prompts pr1 = {.n = 1, .tokens = p1, .n_tokens = n1};
        mf_generate_params p = mf_generate_params_default();
        mf_generate_result r;
        expect_err(name, mf_generate(sb, &pr1, &p, &r), MF_ERR_UNSUPPORTED, "the serving engine runs flash attention",
                   NULL);
        goto out;
    }
    // mf_generate: candidates vs host sampling, token for token.
    const mf_sampler_params kinds[4] = {{.temperature = 0.8f, .top_k = 20},
                                        {.temperature = 0.6f, .top_p = 0.9f},
                                        {.temperature = 0.05f, .top_p = 0.95f, .min_p = 0.05f},
                                        {.temperature = 1.0f, .top_k = 40, .top_p = 0.9f}};
    const int32_t *pt[3] = {tok, tok + off[1], tok + off[2]};
    const int64_t pn[3] = {off[1], off[2] - off[1], off[3] - off[2]};
    mf_prompts pr = {.n = 3, .tokens = pt, .n_tokens = pn};
    int64_t same = 0, total = 0, picks = 0;
    for (int k = 0; k < 4; k++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            mf_generate_result r[2];
            bool gok = true;
            for (int host = 0; host < 2; host++) {
                mf_generate_params p = mf_generate_params_default();
                p.max_new_tokens = 12, p.ignore_eos = true, p.host_sampling = host == 1;
                p.sampler = kinds[k], p.sampler.seed = seed;
                gok &= check_ok(name, mf_generate(sb, &pr, &p, &r[host]));
            }
            if (!gok) goto out;
            for (int i = 0; i < 3; i++) {
                total++;
                same += r[0].seqs[i].n_tokens == r[1].seqs[i].n_tokens &&
                        !memcmp(r[0].seqs[i].tokens, r[1].seqs[i].tokens, (size_t)r[0].seqs[i].n_tokens * sizeof(int32_t));
            }
            picks += r[0].stats.device_picks;
            mf_generate_result_free(&r[0]);
            mf_generate_result_free(&r[1]);
        }
    report(same == total && picks > 0, name, "%lld of %lld sampled sequences equal to host sampling's; %lld tokens picked from candidates",
           (long long)same, (long long)total, (long long)picks);
out:
    mf_session_free(sa);
    mf_session_free(sb);
    free(lg);
    free(row);
    free(ids);
    free(vals);
    free(scratch);
    free(tok);
}

// Runs a fixture-sessions check (greedy_sessions, topk_sessions) on fixture fx:
// on the CPU backend when cpu is given (f32), else on CUDA in bf16 with the
// attention path attn (graphs checked on the flash path), skipped without a GPU.
typedef void (*sessions_fn)(const char *name, mf_model *m, const fixture *f, bool graphs);
static void on_fixture(const char *what, sessions_fn fn, mf_backend *cpu, const char *fx, const char *attn) {
    char name[160];
    if (cpu)
        snprintf(name, sizeof name, "%s(%s, cpu)", what, fx);
    else
        snprintf(name, sizeof name, "%s(%s, cuda bf16, attn=%s)", what, fx, attn);
    if (!cpu && !mf_cuda_available()) {
        skip(name, "no CUDA device");
        return;
    }
    fixture f;
    mf_backend *be = NULL;
    mf_model *m = NULL;
    mf_model_opts o = {.dtype = MF_DTYPE_BF16, .attn = attn};
    if (fixture_open(fx, &f) && (cpu || check_ok(name, mf_backend_init("cuda", &be))) &&
        check_ok(name, mf_model_load(f.dir, cpu ? cpu : be, cpu ? NULL : &o, &m)))
        fn(name, m, &f, !cpu && !strcmp(attn, "flash"));
    mf_model_free(m);
    mf_backend_free(be);
    fixture_close(&f);
}

// Device memory stays flat over 1,000 mf_generate calls on one session
// (graphs recorded once and replayed, nothing allocated per call): free
// device memory after the calls equals what it was after the first one
// (1 MiB slack for the driver's own bookkeeping).
// MF_TEST_MEMORY_CALLS: fewer calls (the kernel emulator's passes take 100:
// its free memory counts bytes, so a leak shows after one call); the bound
// stays 1 MiB per 1000 calls.
static void test_cuda_memory(const char *fx) {
    const char *env = getenv("MF_TEST_MEMORY_CALLS");
    const int calls = env && atoi(env) > 0 ? atoi(env) : 1000;
    char name[128];
    snprintf(name, sizeof name, "cuda memory(%s): %d generate calls", fx, calls);
#ifdef MF_HAVE_CUDA
    if (!mf_cuda_available()) {
        skip(name, "no CUDA device");
        return;
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", fixdir, fx);
    mf_backend *be = NULL;
    mf_model *m = NULL;
    mf_session *s = NULL;
    if (!check_ok(name, mf_backend_init("cuda", &be))) return;
    mf_model_opts o = {.dtype = MF_DTYPE_BF16};
    bool ok = check_ok(name, mf_model_load(dir, be, &o, &m)) && check_ok(name, mf_session_create(m, 2, 64, &s));
    const char *texts[2] = {"The fox", "runs into the woods"};
    mf_prompts pr = {.n = 2, .texts = texts};
    mf_generate_params p = mf_generate_params_default();
    p.max_new_tokens = 8;
    p.sampler.temperature = 0.0f;
    size_t free0 = 0, free1 = 0, total = 0;
    for (int i = 0; ok && i < calls; i++) {
        mf_generate_result r;
        ok = check_ok(name, mf_generate(s, &pr, &p, &r));
        mf_generate_result_free(&r);
        if (ok && i == 0) ok = cudaMemGetInfo(&free0, &total) == cudaSuccess;
    }
    if (ok) ok = cudaMemGetInfo(&free1, &total) == cudaSuccess;
    if (ok) {
        const double drop = ((double)free0 - (double)free1) / 1048576.0;
        const double bound = calls / 1000.0; // MiB: 1 MiB per 1000 calls
        report(drop <= bound, name, "free device memory after call 1: %.1f MiB, after call %d: %.1f MiB (drop %.3f MiB, want <= %.3f)",
               (double)free0 / 1048576.0, calls, (double)free1 / 1048576.0, drop, bound);
    }
    mf_session_free(s);
    mf_model_free(m);
    mf_backend_free(be);
#else
    skip(name, "no CUDA device");
#endif
}

// --cuda-only: the CUDA cases alone (the MINFER_ATTN=wgmma and compute
// capability 8.0 passes, whose CPU cases are the plain run's).
int main(int argc, char **argv) {
    if (argc < 2 || (argc > 2 && strcmp(argv[2], "--cuda-only") != 0)) {
        fprintf(stderr, "usage: test_model FIXTURES_DIR (tests/fixtures/models) [--cuda-only]\n");
        return 2;
    }
    const bool cpu_cases = argc == 2;
    fixdir = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/minfer_test_model_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 2;
    }
    mf_backend *cpu = NULL;
    if (mf_backend_init("cpu", &cpu) != MF_OK) return 2;

    const char *fixtures[] = {"gpt2-tiny",    "llama-tiny", "llama3-tiny",        "llama-tiny-bf16",
                              "mixtral-tiny", "qwen2-tiny", "mistral-window-tiny", // window 8, a 41-token prompt
                              "qwen2-moe-tiny"};
    const int n_fixtures = (int)(sizeof fixtures / sizeof fixtures[0]);
    const char *attns[] = {"flash", "classic"};
    if (cpu_cases) {
        for (int i = 0; i < n_fixtures; i++) test_fixture(cpu, fixtures[i]);
        test_weight_dtypes(cpu);
        test_kv_dtypes(cpu);
        test_cpu_threads(cpu);
        for (int a = 0; a < 2; a++) {
            test_reference(cpu, "tiny", attns[a], 0);
            test_reference(cpu, "tiny", attns[a], 5); // sliding window (Mistral)
            test_reference(cpu, "tiny-geglu", attns[a], 0);
            test_reference(cpu, "tiny-gpt2", attns[a], 0);
            test_reference(cpu, "tiny-postnorm", attns[a], 0);
            test_reference(cpu, "tiny-moe-postnorm", attns[a], 0); // attention, add & norm, MoE, add & norm
        }
        test_bad_inputs(cpu);
        test_broken(cpu);
        test_memory_plan(cpu);
        test_profiler(cpu, "flash");
        test_profiler(cpu, "classic");
        test_faults(cpu, "gpt2-tiny");
        test_faults(cpu, "llama-tiny-bf16");
        test_faults(cpu, "mixtral-tiny");
        test_faults(cpu, "qwen2-moe-tiny");
        test_cycles(cpu);
        on_fixture("greedy on the device", greedy_sessions, cpu, "gpt2-tiny", NULL);
        on_fixture("greedy on the device", greedy_sessions, cpu, "llama-tiny", NULL);
        on_fixture("greedy on the device", greedy_sessions, cpu, "llama3-tiny", NULL);
        on_fixture("greedy on the device", greedy_sessions, cpu, "mixtral-tiny", NULL);
        on_fixture("greedy on the device", greedy_sessions, cpu, "qwen2-moe-tiny", NULL);
        on_fixture("sampling on the device", topk_sessions, cpu, "gpt2-tiny", NULL);
        on_fixture("sampling on the device", topk_sessions, cpu, "llama-tiny", NULL);
        on_fixture("sampling on the device", topk_sessions, cpu, "mixtral-tiny", NULL);
    }
    for (int i = 0; i < n_fixtures; i++) test_cuda(fixtures[i]);
    for (int a = 0; a < 2; a++) {
        test_cuda_graphs("gpt2-tiny", attns[a]);
        test_cuda_graphs("llama-tiny", attns[a]);
        test_cuda_graphs("mixtral-tiny", attns[a]);   // top-2: batches 1, 3 recorded, 17 plain
        test_cuda_graphs("qwen2-moe-tiny", attns[a]); // top-4, gated shared expert
        on_fixture("greedy on the device", greedy_sessions, NULL, "gpt2-tiny", attns[a]);
        on_fixture("greedy on the device", greedy_sessions, NULL, "llama-tiny", attns[a]);
        on_fixture("sampling on the device", topk_sessions, NULL, "gpt2-tiny", attns[a]);
        on_fixture("sampling on the device", topk_sessions, NULL, "llama-tiny", attns[a]);
    }
    test_cuda_memory("llama-tiny");

    mf_backend_free(cpu);
    rmdir(tmpdir);
    printf("bad-input cases: %d\n", n_bad_inputs);
    printf("%d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    return n_fail ? 1 : 0;
}
