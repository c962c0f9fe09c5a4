// Benchmark plumbing: see bench_util.h.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef MF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "bench_util.h"
#include "cli.h"
#include "core/error.h"
#include "cpu/stream.h"

struct mf_bench_timer {
    mf_backend *be;
    bool cuda;
    void *flush;        // backend memory (CUDA) or host memory (CPU), flush_bytes
    size_t flush_bytes;
    unsigned flush_n;   // flush counter: each flush writes a different byte
#ifdef MF_HAVE_CUDA
    cudaStream_t stream;
    cudaEvent_t e0, e1;
#endif
};

#ifdef MF_HAVE_CUDA
#define BENCH_CUDA(call)                                                                                  \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) return mf_fail(MF_ERR_CUDA, "bench: %s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)
#endif

mf_status mf_bench_timer_init(mf_backend *be, size_t flush_bytes, mf_bench_timer **out) {
    *out = NULL;
    mf_bench_timer *t = calloc(1, sizeof *t);
    if (!t) return mf_fail(MF_ERR_OOM, "bench: out of host memory");
    t->be = be;
    t->cuda = mf_backend_device(be) == MF_DEVICE_CUDA;
    t->flush_bytes = flush_bytes;
    mf_status st = MF_OK;
    if (t->cuda) {
#ifdef MF_HAVE_CUDA
        if (cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreate(&t->e0) != cudaSuccess || cudaEventCreate(&t->e1) != cudaSuccess)
            st = mf_fail(MF_ERR_CUDA, "bench: cannot create a stream and events");
        if (st == MF_OK) st = mf_backend_set_stream(be, t->stream);
        if (st == MF_OK) st = mf_backend_alloc(be, flush_bytes, &t->flush);
#else
        st = mf_fail(MF_ERR_UNSUPPORTED, "bench: built without CUDA");
#endif
    } else {
        t->flush = malloc(flush_bytes);
        if (!t->flush) st = mf_fail(MF_ERR_OOM, "bench: out of host memory for the %zu-byte flush buffer", flush_bytes);
    }
    if (st != MF_OK) {
        mf_bench_timer_free(t);
        return st;
    }
    *out = t;
    return MF_OK;
}

void mf_bench_timer_free(mf_bench_timer *t) {
    if (!t) return;
    if (t->cuda) {
#ifdef MF_HAVE_CUDA
        (void)mf_backend_sync(t->be);
        mf_backend_dealloc(t->be, t->flush);
        (void)mf_backend_set_stream(t->be, NULL);
        if (t->e0) cudaEventDestroy(t->e0);
        if (t->e1) cudaEventDestroy(t->e1);
        if (t->stream) cudaStreamDestroy(t->stream);
#endif
    } else {
        free(t->flush);
    }
    free(t);
}

bool mf_bench_timer_is_cuda(const mf_bench_timer *t) { return t->cuda; }

void *mf_bench_timer_stream(const mf_bench_timer *t) {
#ifdef MF_HAVE_CUDA
    return t->cuda ? (void *)t->stream : NULL;
#else
    (void)t;
    return NULL;
#endif
}

static mf_status flush_cache(mf_bench_timer *t) {
    int v = (int)(++t->flush_n & 0x7f);
    if (t->cuda) return mf_backend_memset(t->be, t->flush, v, t->flush_bytes);
    memset(t->flush, v, t->flush_bytes);
    return MF_OK;
}

mf_status mf_bench_time(mf_bench_timer *t, mf_bench_fn fn, void *arg, bool flush, double *us) {
    if (flush) MF_TRY(flush_cache(t));
    if (t->cuda) {
#ifdef MF_HAVE_CUDA
        BENCH_CUDA(cudaEventRecord(t->e0, t->stream));
        MF_TRY(fn(arg));
        BENCH_CUDA(cudaEventRecord(t->e1, t->stream));
        BENCH_CUDA(cudaEventSynchronize(t->e1));
        float ms = 0;
        BENCH_CUDA(cudaEventElapsedTime(&ms, t->e0, t->e1));
        MF_TRY(mf_backend_sync(t->be)); // asynchronous errors of the op
        *us = 1e3 * ms;
        return MF_OK;
#endif
    }
    double t0 = mf_cli_now();
    MF_TRY(fn(arg));
    *us = 1e6 * (mf_cli_now() - t0);
    return MF_OK;
}

mf_status mf_bench_sample(mf_bench_timer *t, mf_bench_fn fn, void *arg, int warmup, int iters, double *samples) {
    for (int i = 0; i < warmup; i++) MF_TRY(fn(arg));
    MF_TRY(mf_backend_sync(t->be));
    for (int i = 0; i < iters; i++) MF_TRY(mf_bench_time(t, fn, arg, true, &samples[i]));
    return MF_OK;
}

typedef struct {
    mf_backend *be;
    void *dst;
    const void *src;
    size_t bytes;
} copy_arg;

static mf_status run_copy(void *a) {
    copy_arg *c = a;
    if (mf_backend_device(c->be) == MF_DEVICE_CPU) {
        memcpy(c->dst, c->src, c->bytes);
        return MF_OK;
    }
    return mf_backend_copy(c->be, c->dst, c->src, c->bytes, MF_COPY_D2D);
}

mf_status mf_bench_copy_gbps(mf_bench_timer *t, mf_backend *be, size_t bytes, int iters, double *gbps) {
    copy_arg c = {be, NULL, NULL, bytes};
    void *src = NULL;
    mf_status st = mf_backend_alloc(be, bytes, &c.dst);
    if (st == MF_OK) st = mf_backend_alloc(be, bytes, &src);
    if (st == MF_OK) st = mf_backend_memset(be, src, 0x3c, bytes); // not zeros
    c.src = src;
    double *s = calloc((size_t)iters, sizeof *s);
    if (st == MF_OK && !s) st = mf_fail(MF_ERR_OOM, "bench: out of host memory");
    if (st == MF_OK) st = mf_bench_sample(t, run_copy, &c, 2, iters, s);
    if (st == MF_OK) *gbps = 2.0 * (double)bytes / (mf_bench_stats_of(s, iters).p50 * 1e3);
    free(s);
    mf_backend_dealloc(be, c.dst);
    mf_backend_dealloc(be, src);
    return st;
}

mf_status mf_bench_read_gbps(mf_backend *be, size_t bytes, int rounds, double *gbps) {
    if (mf_backend_device(be) != MF_DEVICE_CPU)
        return mf_fail(MF_ERR_UNSUPPORTED, "bench: the read ceiling is measured on the CPU only");
    void *buf = NULL;
    MF_TRY(mf_backend_alloc(be, bytes, &buf));
    mf_status st = mf_backend_memset(be, buf, 0x3c, bytes); // normal floats: no subnormal adds
    volatile float sink = mf_cpu_read_stream(buf, bytes, 0); // warm-up
    for (int r = 0; st == MF_OK && r < rounds; r++)
        for (int v = 0; v < MF_CPU_READ_VARIANTS; v++) {
            const double t0 = mf_cli_now();
            sink = mf_cpu_read_stream(buf, bytes, v);
            const double g = (double)bytes / (mf_cli_now() - t0) / 1e9;
            if (g > *gbps) *gbps = g;
        }
    (void)sink;
    mf_backend_dealloc(be, buf);
    return st;
}

typedef struct {
    mf_backend *be;
    mf_gemm_args g;
} gemm_arg;

static mf_status run_gemm(void *a) {
    gemm_arg *g = a;
    return mf_gemm(g->be, &g->g);
}

mf_status mf_bench_gemm_tflops(mf_bench_timer *t, mf_backend *be, int64_t n, mf_dtype dt, int iters, double *tflops) {
    const size_t bytes = (size_t)(n * n) * mf_dtype_size(dt);
    const int64_t shape[2] = {n, n};
    const mf_device dev = mf_backend_device(be);
    gemm_arg g = {.be = be, .g = {.alpha = 1.0f}};
    void *p[3] = {NULL, NULL, NULL};
    double *s = calloc((size_t)iters, sizeof *s);
    mf_status st = s ? MF_OK : mf_fail(MF_ERR_OOM, "bench: out of host memory");
    for (int i = 0; i < 3 && st == MF_OK; i++) st = mf_backend_alloc(be, bytes, &p[i]);
    for (int i = 0; i < 2 && st == MF_OK; i++) st = mf_bench_upload_random(be, p[i], dt, n * n, -1.0f, 1.0f, 11 + (uint64_t)i);
    if (st == MF_OK) st = mf_tensor_make(&g.g.a, p[0], dt, dev, 2, shape);
    if (st == MF_OK) st = mf_tensor_make(&g.g.b, p[1], dt, dev, 2, shape);
    if (st == MF_OK) st = mf_tensor_make(&g.g.c, p[2], dt, dev, 2, shape);
    if (st == MF_OK) st = mf_bench_sample(t, run_gemm, &g, 2, iters, s);
    if (st == MF_OK) *tflops = 2.0 * (double)n * (double)n * (double)n / (mf_bench_stats_of(s, iters).p50 * 1e6);
    for (int i = 0; i < 3; i++) mf_backend_dealloc(be, p[i]);
    free(s);
    return st;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

mf_bench_stats mf_bench_stats_of(double *s, int n) {
    mf_bench_stats r = {0, 0, 0, n};
    if (n <= 0) return r;
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    int i5 = (int)ceil(0.05 * n) - 1, i50 = (int)ceil(0.5 * n) - 1, i95 = (int)ceil(0.95 * n) - 1;
    r.p5 = s[i5 < 0 ? 0 : i5];
    r.p50 = s[i50 < 0 ? 0 : i50];
    r.p95 = s[i95 < 0 ? 0 : i95];
    return r;
}

void mf_bench_fill_random(void *dst, mf_dtype dt, int64_t n, float lo, float hi, uint64_t seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; // xorshift64
        float v = lo + (hi - lo) * (float)((x >> 40) * 0x1.0p-24);
        mf_store_f32(dst, dt, i, v);
    }
}

// ---- tables ------------------------------------------------------------------------------

struct mf_bench_table {
    int ncols;
    char **names;
    bool *hidden; // in the markdown table
    char **cells; // rows * ncols
    int rows, cap;
};

mf_status mf_bench_upload_random(mf_backend *be, void *dst, mf_dtype dt, int64_t n, float lo, float hi, uint64_t seed) {
    const int64_t blk = n < ((int64_t)1 << 22) ? n : ((int64_t)1 << 22);
    const size_t es = mf_dtype_size(dt);
    void *h = malloc((size_t)(blk > 0 ? blk : 1) * es);
    if (!h) return mf_fail(MF_ERR_OOM, "bench: out of host memory");
    mf_bench_fill_random(h, dt, blk, lo, hi, seed);
    mf_status st = MF_OK;
    for (int64_t i = 0; i < n && st == MF_OK; i += blk) {
        const int64_t m = n - i < blk ? n - i : blk;
        st = mf_backend_copy(be, (char *)dst + (size_t)i * es, h, (size_t)m * es, MF_COPY_H2D);
    }
    free(h);
    return st;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

mf_bench_table *mf_bench_table_new(int ncols, const char *const *names) {
    mf_bench_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->ncols = ncols;
    t->names = calloc((size_t)ncols, sizeof *t->names);
    t->hidden = calloc((size_t)ncols, sizeof *t->hidden);
    if (!t->names || !t->hidden) {
        free(t->names);
        free(t->hidden);
        free(t);
        return NULL;
    }
    for (int c = 0; c < ncols; c++)
        if (!(t->names[c] = dup_str(names[c]))) {
            mf_bench_table_free(t);
            return NULL;
        }
    return t;
}

void mf_bench_table_free(mf_bench_table *t) {
    if (!t) return;
    for (int c = 0; c < t->ncols; c++) free(t->names[c]);
    for (int i = 0; i < t->rows * t->ncols; i++) free(t->cells[i]);
    free(t->names);
    free(t->hidden);
    free(t->cells);
    free(t);
}

void mf_bench_table_hide_in_table(mf_bench_table *t, const char *name) {
    for (int c = 0; c < t->ncols; c++)
        if (!strcmp(t->names[c], name)) t->hidden[c] = true;
}

bool mf_bench_table_add(mf_bench_table *t, const char *const *cells) {
    if (t->rows == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        char **c = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof *c);
        if (!c) return false;
        t->cells = c;
        t->cap = cap;
    }
    char **row = t->cells + (size_t)t->rows * (size_t)t->ncols;
    for (int c = 0; c < t->ncols; c++) {
        row[c] = dup_str(cells[c] ? cells[c] : "");
        if (!row[c]) {
            for (int k = 0; k < c; k++) free(row[k]);
            return false;
        }
    }
    t->rows++;
    return true;
}

static bool is_number(const char *s) {
    if (!*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    return *end == '\0' && errno == 0 && isfinite(v);
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

void mf_bench_fmt(char *buf, size_t cap, double v, int prec) {
    if (v != v)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.*f", prec, v);
}

int mf_bench_table_write_files(const mf_bench_table *t, const char *csv, const char *json, const char *who) {
    const char *files[2] = {csv, json};
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        if (!files[k]) continue;
        FILE *f = fopen(files[k], "w");
        if (!f) {
            fprintf(stderr, "%s: cannot write %s\n", who, files[k]);
            rc = 1;
            continue;
        }
        mf_bench_table_print(t, k ? MF_BENCH_JSON : MF_BENCH_CSV, f);
        fclose(f);
    }
    return rc;
}

void mf_bench_table_print(const mf_bench_table *t, mf_bench_format fmt, FILE *f) {
    const int nc = t->ncols;
    if (fmt == MF_BENCH_CSV) {
        for (int c = 0; c < nc; c++) fprintf(f, "%s%s", c ? "," : "", t->names[c]);
        fputc('\n', f);
        for (int r = 0; r < t->rows; r++) {
            for (int c = 0; c < nc; c++) {
                const char *s = t->cells[r * nc + c];
                fprintf(f, strpbrk(s, ",\"") ? "%s\"%s\"" : "%s%s", c ? "," : "", s); // cells hold no quotes
            }
            fputc('\n', f);
        }
        return;
    }
    if (fmt == MF_BENCH_JSON) {
        fprintf(f, "[\n");
        for (int r = 0; r < t->rows; r++) {
            fprintf(f, "  {");
            for (int c = 0; c < nc; c++) {
                const char *s = t->cells[r * nc + c];
                fprintf(f, "%s", c ? ", " : "");
                json_str(f, t->names[c]);
                fprintf(f, ": ");
                if (is_number(s))
                    fprintf(f, "%s", s);
                else
                    json_str(f, s);
            }
            fprintf(f, "}%s\n", r + 1 < t->rows ? "," : "");
        }
        fprintf(f, "]\n");
        return;
    }
    // A markdown table (GitHub's pipe tables), padded to aligned columns,
    // numbers right-aligned: readable as printed and when pasted into a doc.
    int *w = calloc((size_t)nc, sizeof *w);
    bool *num = calloc((size_t)nc, sizeof *num);
    if (!w || !num) {
        free(w);
        free(num);
        return;
    }
    for (int c = 0; c < nc; c++) {
        w[c] = (int)strlen(t->names[c]);
        num[c] = t->rows > 0;
        for (int r = 0; r < t->rows; r++) {
            const char *s = t->cells[r * nc + c];
            int n = (int)strlen(s);
            if (n > w[c]) w[c] = n;
            if (!is_number(s) && strcmp(s, "-")) num[c] = false;
        }
        if (w[c] < 3) w[c] = 3;
    }
    for (int c = 0; c < nc; c++)
        if (!t->hidden[c]) fprintf(f, num[c] ? "| %*s " : "| %-*s ", w[c], t->names[c]);
    fprintf(f, "|\n");
    for (int c = 0; c < nc; c++)
        if (!t->hidden[c]) {
            fputs("|", f);
            for (int i = 0; i < w[c] + 1; i++) fputc('-', f);
            fputc(num[c] ? ':' : '-', f);
        }
    fprintf(f, "|\n");
    for (int r = 0; r < t->rows; r++) {
        for (int c = 0; c < nc; c++)
            if (!t->hidden[c]) fprintf(f, num[c] ? "| %*s " : "| %-*s ", w[c], t->cells[r * nc + c]);
        fprintf(f, "|\n");
    }
    free(w);
    free(num);
}

void mf_bench_device_name(const mf_bench_timer *t, char *buf, size_t cap) {
    if (t->cuda) {
#ifdef MF_HAVE_CUDA
        int dev = 0;
        struct cudaDeviceProp prop;
        if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
            snprintf(buf, cap, "%s (%d SMs, %d MB L2)", prop.name, prop.multiProcessorCount,
                     prop.l2CacheSize >> 20);
            return;
        }
#endif
        snprintf(buf, cap, "cuda (unknown device)");
        return;
    }
    char model[128] = "cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "model name", 10)) {
                char *p = strchr(line, ':');
                if (p) {
                    p++;
                    while (*p == ' ') p++;
                    p[strcspn(p, "\n")] = '\0';
                    snprintf(model, sizeof model, "%s", p);
                }
                break;
            }
        }
        fclose(f);
    }
    snprintf(buf, cap, "%s, %ld threads", model, sysconf(_SC_NPROCESSORS_ONLN));
}
