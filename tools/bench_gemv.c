// `minfer bench gemv`: decode GEMMs (m = 1..8 rows, x (m, k) @ W^T with W a
// torch Linear weight (n, k), bf16) timed on both CUDA paths in one run:
// cuBLASLt (the default) and our skinny GEMM (the "gemv" path of
// src/cuda/gemm/gemv.cu, turned on for its half of the run). Each timed call starts
// with L2 flushed (mf_bench_sample), so the weight streams from device memory,
// as in a decode step whose weights (GBs) never fit in L2. Reported: median
// microseconds, GB/s of weight bytes (n * k * 2; the activations and c are
// <= 0.2% of them), that as % of the device-to-device copy bandwidth measured
// in the same run, the speedup, and the largest difference between the two
// paths' outputs relative to the largest |c| (a cross-check: both are tested
// against a float64 reference in tests/cases_gemm.c).
// On the CPU backend the same loop runs tiny shapes through mf_gemm (the
// figures are the CPU GEMM's; there is one path), so the tool is testable
// without a GPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/error.h"
#include "minfer/minfer.h"
#ifdef MF_HAVE_CUDA
#include "cuda/cuda_query.h"
#endif

typedef struct {
    const char *model, *name;
    int64_t n, k;
} gv_shape;

// Llama-7B (hidden 4096, MLP 11008; q/k/v and gate/up fused as src/model does)
// and GPT-2 small (hidden 768) decode GEMMs; tiny ones for the CPU.
static const gv_shape kGpuShapes[] = {
    {"llama-7b", "qkv", 12288, 4096},    {"llama-7b", "o", 4096, 4096},
    {"llama-7b", "gate_up", 22016, 4096}, {"llama-7b", "down", 4096, 11008},
    {"gpt2", "qkv", 2304, 768},          {"gpt2", "attn_out", 768, 768},
    {"gpt2", "mlp_up", 3072, 768},       {"gpt2", "mlp_down", 768, 3072},
};
static const gv_shape kCpuShapes[] = {{"tiny", "a", 64, 128}, {"tiny", "b", 96, 256}};
// --shapes on the CPU: the decode GEMMs of two Llama geometries (q|k|v and
// gate|up counted as one matrix each; the CPU reads a checkpoint's separate
// matrices one after the other at the same rate).
static const gv_shape kTinyLlama[] = {{"tinyllama-1.1b", "qkv", 2560, 2048}, {"tinyllama-1.1b", "o", 2048, 2048},
                                      {"tinyllama-1.1b", "gate_up", 11264, 2048}, {"tinyllama-1.1b", "down", 2048, 5632},
                                      {"tinyllama-1.1b", "lm_head", 32000, 2048}};
static const gv_shape kSmolLM2[] = {{"smollm2-360m", "qkv", 1600, 960}, {"smollm2-360m", "o", 960, 960},
                                    {"smollm2-360m", "gate_up", 5120, 960}, {"smollm2-360m", "down", 960, 2560},
                                    {"smollm2-360m", "lm_head", 49152, 960}};
static const int64_t kRows[] = {1, 2, 4, 8};

enum { NCOLS = 18 }; // then the session's: device, commit, date, copy_GB/s, gemm_TFLOP/s
static const char *const col_names[NCOLS] = {
    "backend", "model", "gemm", "m", "n", "k", "weight_MB", "lt_path", "lt_us", "lt_GB/s", "lt_pct_copy",
    "gemv_us", "gemv_GB/s", "gemv_pct_copy", "speedup", "max_rel_diff", "read_GB/s", "lt_pct_read"};

// CPU: copies of the weight cycled through, at least this many bytes in all
// (>> the L3), so that every call streams its weight from memory as a decode
// step does.
enum { kCpuCycleBytes = 96 << 20, kMaxCopies = 64 };

typedef struct {
    mf_backend *be;
    mf_gemm_args *args;
    void *w[kMaxCopies]; // the weight's copies (CPU) or one
    int n_w, next;
} gv_call;

static mf_status run_call(void *arg) {
    gv_call *c = arg;
    c->args->b.data = c->w[c->next];
    c->next = (c->next + 1) % c->n_w;
    return mf_gemm(c->be, c->args);
}

#ifdef MF_HAVE_CUDA
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#endif

static void fmt_num(char *buf, size_t cap, double v, int prec) {
    if (v < 0 || v != v) snprintf(buf, cap, "NA");
    else snprintf(buf, cap, "%.*f", prec, v);
}

// Median microseconds of one call on the backend's current path; *path
// names it, and c (m * n bf16) is copied to host memory `out`.
static mf_status time_path(mf_backend *be, mf_bench_timer *timer, mf_gemm_args *a, void *const *w, int n_w,
                           int warmup, int iters, double *samples, double *us, const char **path, uint16_t *out,
                           size_t cbytes) {
    gv_call call = {.be = be, .args = a, .n_w = n_w};
    for (int i = 0; i < n_w; i++) call.w[i] = w[i];
    const mf_status st = mf_bench_sample(timer, run_call, &call, warmup, iters, samples);
    if (st != MF_OK) return st;
    *us = mf_bench_stats_of(samples, iters).p50;
    *path = "cpu";
#ifdef MF_HAVE_CUDA
    if (mf_backend_device(be) == MF_DEVICE_CUDA) *path = mf_cuda_gemm_last_path(be);
#endif
    return mf_backend_copy(be, out, a->c.data, cbytes, MF_COPY_D2H);
}

static mf_status bench_shape(mf_bench_session *b, const gv_shape *sh, int64_t m, int warmup, int iters, double read) {
    mf_backend *be = b->be;
    mf_bench_timer *timer = b->timer;
    const double copy = b->copy_gbps;
#ifdef MF_HAVE_CUDA
    const bool cuda = mf_backend_device(be) == MF_DEVICE_CUDA;
#endif
    const mf_dtype dt = MF_DTYPE_BF16;
    const size_t es = 2, xb = (size_t)(m * sh->k) * es, wb = (size_t)(sh->n * sh->k) * es,
                 cb = (size_t)(m * sh->n) * es;
    void *x = NULL, *c = NULL, *w[kMaxCopies] = {NULL};
    int n_w = 1; // CPU: enough copies to stream from memory
    if (mf_backend_device(be) == MF_DEVICE_CPU) {
        const size_t want = (kCpuCycleBytes + wb - 1) / wb;
        n_w = want > kMaxCopies ? kMaxCopies : (int)want;
    }
    uint16_t *hw = malloc(wb > xb ? wb : xb), *c_lt = malloc(cb), *c_gv = malloc(cb);
    double *samples = malloc((size_t)iters * sizeof *samples);
    mf_status st = hw && c_lt && c_gv && samples ? MF_OK : mf_fail(MF_ERR_OOM, "bench gemv: out of host memory");
    if (st == MF_OK) st = mf_backend_alloc(be, xb, &x);
    for (int i = 0; i < n_w && st == MF_OK; i++) st = mf_backend_alloc(be, wb, &w[i]);
    if (st == MF_OK) st = mf_backend_alloc(be, cb, &c);
    if (st == MF_OK) { // weights ~ N(0, 1/k)-sized, activations O(1): outputs O(1)
        const float s = 1.0f / sqrtf((float)sh->k);
        mf_bench_fill_random(hw, dt, sh->n * sh->k, -s, s, 1234 + (uint64_t)sh->n);
        for (int i = 0; i < n_w && st == MF_OK; i++) st = mf_backend_copy(be, w[i], hw, wb, MF_COPY_H2D);
        mf_bench_fill_random(hw, dt, m * sh->k, -1.0f, 1.0f, 99 + (uint64_t)m);
        if (st == MF_OK) st = mf_backend_copy(be, x, hw, xb, MF_COPY_H2D);
    }
    mf_gemm_args a = {.alpha = 1.0f, .beta = 0.0f, .epilogue = MF_EPILOGUE_NONE};
    const int64_t xs[2] = {m, sh->k}, ws[2] = {sh->n, sh->k}, cs[2] = {m, sh->n};
    const mf_device dev = mf_backend_device(be);
    mf_tensor_make(&a.a, x, dt, dev, 2, xs);
    mf_tensor_make(&a.b, w[0], dt, dev, 2, ws);
    mf_tensor_transpose(&a.b, 0, 1); // (k, n) view of the (n, k) weight
    mf_tensor_make(&a.c, c, dt, dev, 2, cs);

    double lt_us = -1, gv_us = -1, diff = -1;
    const char *lt_path = "";
#ifdef MF_HAVE_CUDA
    if (cuda && st == MF_OK) mf_cuda_gemm_set_gemv(be, false);
#endif
    if (st == MF_OK) st = time_path(be, timer, &a, w, n_w, warmup, iters, samples, &lt_us, &lt_path, c_lt, cb);
#ifdef MF_HAVE_CUDA
    if (cuda && st == MF_OK) {
        const char *gv_path = "";
        mf_cuda_gemm_set_gemv(be, true);
        st = time_path(be, timer, &a, w, n_w, warmup, iters, samples, &gv_us, &gv_path, c_gv, cb);
        mf_cuda_gemm_set_gemv(be, false);
        if (st == MF_OK && strcmp(gv_path, "gemv") != 0) gv_us = -1; // the shape did not take the path
        if (st == MF_OK && gv_us >= 0) {
            double dmax = 0, cmax = 0;
            for (int64_t e = 0; e < m * sh->n; e++) {
                const double r = bf16_to_f32(c_lt[e]), g = bf16_to_f32(c_gv[e]);
                if (fabs(r) > cmax) cmax = fabs(r);
                if (!(fabs(g - r) <= dmax)) dmax = fabs(g - r); // NaN-safe: a NaN diff wins
            }
            diff = cmax > 0 ? dmax / cmax : dmax;
        }
    }
#endif
    if (st == MF_OK) {
        const double gb = (double)wb / 1e9;
        char cells[NCOLS][192];
        snprintf(cells[0], 64, "%s", mf_backend_name(be));
        snprintf(cells[1], 64, "%s", sh->model);
        snprintf(cells[2], 64, "%s", sh->name);
        snprintf(cells[3], 64, "%lld", (long long)m);
        snprintf(cells[4], 64, "%lld", (long long)sh->n);
        snprintf(cells[5], 64, "%lld", (long long)sh->k);
        fmt_num(cells[6], 64, (double)wb / 1e6, 2);
        snprintf(cells[7], 64, "%s", lt_path);
        fmt_num(cells[8], 64, lt_us, 2);
        fmt_num(cells[9], 64, gb / (lt_us * 1e-6), 1);
        fmt_num(cells[10], 64, 100.0 * gb / (lt_us * 1e-6) / copy, 1);
        fmt_num(cells[11], 64, gv_us, 2);
        fmt_num(cells[12], 64, gv_us >= 0 ? gb / (gv_us * 1e-6) : -1, 1);
        fmt_num(cells[13], 64, gv_us >= 0 ? 100.0 * gb / (gv_us * 1e-6) / copy : -1, 1);
        fmt_num(cells[14], 64, gv_us > 0 ? lt_us / gv_us : -1, 2);
        if (diff >= 0) snprintf(cells[15], 64, "%.2e", diff);
        else snprintf(cells[15], 64, "NA");
        fmt_num(cells[16], 64, read > 0 ? read : -1, 1);
        fmt_num(cells[17], 64, read > 0 ? 100.0 * gb / (lt_us * 1e-6) / read : -1, 1);
        const char *row[NCOLS];
        for (int i = 0; i < NCOLS; i++) row[i] = cells[i];
        if (!mf_bench_add_row(b, row)) st = mf_fail(MF_ERR_OOM, "bench gemv: out of host memory");
    }
    mf_backend_dealloc(be, x);
    for (int i = 0; i < n_w; i++) mf_backend_dealloc(be, w[i]);
    mf_backend_dealloc(be, c);
    free(hw);
    free(c_lt);
    free(c_gv);
    free(samples);
    return st;
}

static void gv_help(FILE *f) {
    const mf_bench_def *d = &mf_bench_gemv;
    fprintf(f, "usage: minfer bench gemv [options]\n"
               "  decode GEMMs x (m, k) @ W^T, bf16, m in {1, 2, 4, 8}: Llama-7B and GPT-2 small shapes on CUDA\n"
               "  (cuBLASLt vs our gemv path, L2 flushed before each call), tiny shapes on the CPU\n"
               "  --backend auto|cpu|cuda   (default auto)\n"
               "  --m N                     one row count in [1, 8] instead of 1, 2, 4, 8\n"
               "  --shapes S                CPU: tiny (default), tinyllama or smollm2 (their decode GEMMs, bf16\n"
               "                            weights cycled through 96 MB of copies: streamed from memory), with\n"
               "                            the read ceiling (bench model's) and lt_pct_read\n"
               "  --warmup N --iters N      (default %d/%d on CUDA, %d/%d on the CPU)\n"
               "  --format table|csv|json   stdout format (default table: markdown)\n"
               "  --csv FILE --json FILE    also write the results there\n",
            d->warmup[1], d->iters[1], d->warmup[0], d->iters[0]);
}

static int gv_run(void *opts) {
    mf_bench_gemv_opts *o = opts;
    mf_bench_session b;
    if (mf_bench_begin(&b, &mf_bench_gemv, &o->com, (size_t)16 << 20, false, NCOLS, col_names)) return 1;
    mf_status st = MF_OK;
    const gv_shape *shapes = b.cuda ? kGpuShapes : kCpuShapes;
    size_t n_shapes = b.cuda ? sizeof kGpuShapes / sizeof kGpuShapes[0] : sizeof kCpuShapes / sizeof kCpuShapes[0];
    if (!b.cuda && o->shapes && !strcmp(o->shapes, "tinyllama"))
        shapes = kTinyLlama, n_shapes = sizeof kTinyLlama / sizeof kTinyLlama[0];
    else if (!b.cuda && o->shapes && !strcmp(o->shapes, "smollm2"))
        shapes = kSmolLM2, n_shapes = sizeof kSmolLM2 / sizeof kSmolLM2[0];
    double read = 0; // CPU: the read ceiling, before and after (the best)
    if (!b.cuda) st = mf_bench_read_gbps(b.be, (size_t)256 << 20, 5, &read);
    for (size_t s = 0; s < n_shapes && st == MF_OK; s++)
        for (size_t r = 0; r < sizeof kRows / sizeof kRows[0] && st == MF_OK; r++) {
            st = bench_shape(&b, &shapes[s], o->m ? o->m : kRows[r], o->com.warmup, o->com.iters, read);
            if (o->m) break;
        }
    return mf_bench_end(&b, st, &o->com,
                        b.cuda ? "GB/s = weight bytes (n k 2) / time; lt = cuBLASLt (default path), gemv = "
                                 "src/cuda/gemm/gemv.cu"
                               : "GB/s = weight bytes (n k 2) / time; CPU: mf_gemm only (no gemv path)");
}

static mf_args_result gv_option(void *opts, const char *a, const char *v, char *err) {
    mf_bench_gemv_opts *o = opts;
    if (!strcmp(a, "--shapes")) {
        if (strcmp(v, "tiny") && strcmp(v, "tinyllama") && strcmp(v, "smollm2"))
            return mf_args_bad(err, "--shapes %.80s: not tiny, tinyllama or smollm2", v);
        o->shapes = v;
        return MF_ARGS_OK;
    }
    return mf_args_int32(a, v, 1, 8, &o->m, err); // --m
}

const mf_bench_def mf_bench_gemv = {
    .name = "gemv", .opts_size = sizeof(mf_bench_gemv_opts),
    .about = "decode GEMMs (m = 1..8): cuBLASLt vs our gemv kernel, GB/s and % of copy bandwidth",
    .common = MF_BENCH_OPT_SESSION,
    .valued = (const char *const[]){"--m", "--shapes", NULL},
    .option = gv_option, .help = gv_help, .run = gv_run,
    .warmup = {1, 10}, .iters = {3, 50},
};
