// `minfer bench attention`: mf_attention on the shapes of issue 8.
//   prefill: fixed mode, q/k/v/o (batch, seq, heads, D) contiguous, q_len = k_len;
//            TFLOP/s by 4 * B * H * Sq * Sk * D (halved when causal).
//   decode:  cache mode, one query token per sequence, 32 q heads over 8 KV
//            heads, D 128, every sequence reading its whole cache slot;
//            GB/s of K + V read (2 * B * L * 8 * 128 * bytes) and that as a
//            share of the device-to-device copy bandwidth measured in the same run.
// Per case p5/p50/p95 microseconds over --iters timed calls (CUDA events, L2
// flushed; the wall clock on the CPU) and the device memory the case allocated
// (q, k, v, o, lse-free; decode adds the split-KV workspace). On CUDA `path`
// names the kernel the default dispatch took, and prefill cases are timed
// again with MINFER_ATTN=wgmma (our sm_90a kernel, opt-in until verified) as
// wgmma_p50_us / wgmma_TFLOP/s ("-" where it does not run).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_util.h"
#include "core/error.h"
#include "ops/attention_cuda.h"

typedef struct {
    const char *backend;
    mf_dtype dt;
    bool prefill, decode, full;
    int warmup, iters; // < 0: per-backend default
    int num_splits;
    double max_mb;     // < 0: default
    mf_bench_format fmt;
    const char *csv, *json;
} at_opts;

typedef struct {
    bool decode;
    int64_t batch, heads, kv_heads, q_len, k_len, d;
    bool causal;
} at_case;

typedef struct {
    mf_backend *be;
    mf_attention_args a;
} at_state;

static mf_status run_attn(void *arg) {
    at_state *s = arg;
    return mf_attention(s->be, &s->a);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: minfer bench attention [options]\n"
            "  --backend auto|cpu|cuda   (default auto)\n"
            "  --dtype bf16|f16|f32      q, k, v, o dtype (default bf16)\n"
            "  --cases prefill|decode|all   (default all)\n"
            "  --full                    the whole grid (default: the goal shapes; on the CPU tiny ones)\n"
            "  --num-splits N            decode split count (default 0: the dispatch chooses)\n"
            "  --warmup N --iters N      (default 10/50 on CUDA, 1/3 on the CPU)\n"
            "  --max-mb N                memory budget per case (default: 85%% of free device memory; CPU 512)\n"
            "  --format table|csv|json   stdout format (default table)\n"
            "  --csv FILE --json FILE    also write the results there\n");
}

// Integer option value in [lo, hi]; false (with a message in err) otherwise.
static bool parse_int(const char *name, const char *v, long lo, long hi, int *out, char *err, size_t cap) {
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > hi) {
        snprintf(err, cap, "%s %s: not an integer in [%ld, %ld]", name, v ? v : "(missing)", lo, hi);
        return false;
    }
    *out = (int)x;
    return true;
}

// 0: ok, 1: --help, 2: bad arguments (message in err).
static int parse_args(int argc, char **argv, at_opts *o, char *err, size_t cap) {
    *o = (at_opts){.backend = "auto", .dt = MF_DTYPE_BF16, .prefill = true, .decode = true, .warmup = -1,
                   .iters = -1, .max_mb = -1};
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) return 1;
        if (!strcmp(k, "--full")) {
            o->full = true;
            continue;
        }
        const bool known = !strcmp(k, "--backend") || !strcmp(k, "--dtype") || !strcmp(k, "--cases") ||
                           !strcmp(k, "--num-splits") || !strcmp(k, "--warmup") || !strcmp(k, "--iters") ||
                           !strcmp(k, "--max-mb") || !strcmp(k, "--format") || !strcmp(k, "--csv") ||
                           !strcmp(k, "--json");
        if (!known) {
            snprintf(err, cap, "unknown option %s", k);
            return 2;
        }
        if (i + 1 >= argc) {
            snprintf(err, cap, "%s needs a value", k);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(k, "--backend")) {
            o->backend = v;
        } else if (!strcmp(k, "--dtype")) {
            if (!strcmp(v, "bf16"))
                o->dt = MF_DTYPE_BF16;
            else if (!strcmp(v, "f16"))
                o->dt = MF_DTYPE_F16;
            else if (!strcmp(v, "f32"))
                o->dt = MF_DTYPE_F32;
            else {
                snprintf(err, cap, "--dtype %s (want bf16, f16 or f32)", v);
                return 2;
            }
        } else if (!strcmp(k, "--cases")) {
            if (strcmp(v, "prefill") && strcmp(v, "decode") && strcmp(v, "all")) {
                snprintf(err, cap, "--cases %s (want prefill, decode or all)", v);
                return 2;
            }
            o->prefill = strcmp(v, "decode") != 0, o->decode = strcmp(v, "prefill") != 0;
        } else if (!strcmp(k, "--num-splits")) {
            if (!parse_int(k, v, 0, 256, &o->num_splits, err, cap)) return 2;
        } else if (!strcmp(k, "--warmup")) {
            if (!parse_int(k, v, 0, 1000000, &o->warmup, err, cap)) return 2;
        } else if (!strcmp(k, "--iters")) {
            if (!parse_int(k, v, 1, 1000000, &o->iters, err, cap)) return 2;
        } else if (!strcmp(k, "--max-mb")) {
            char *end = NULL;
            const double x = strtod(v, &end);
            if (!*v || *end || !(x >= 0) || !isfinite(x)) {
                snprintf(err, cap, "--max-mb %s: not a finite number >= 0", v);
                return 2;
            }
            o->max_mb = x;
        } else if (!strcmp(k, "--format")) {
            if (!strcmp(v, "table"))
                o->fmt = MF_BENCH_TABLE;
            else if (!strcmp(v, "csv"))
                o->fmt = MF_BENCH_CSV;
            else if (!strcmp(v, "json"))
                o->fmt = MF_BENCH_JSON;
            else {
                snprintf(err, cap, "--format %s (want table, csv or json)", v);
                return 2;
            }
        } else if (!strcmp(k, "--csv")) {
            o->csv = v;
        } else {
            o->json = v;
        }
    }
    return 0;
}

// Random values in [-1, 1) into device buffer dst (n elements of dt), one host block copied as needed.
static mf_status fill_random(mf_backend *be, void *dst, mf_dtype dt, int64_t n, uint64_t seed) {
    const int64_t blk = n < ((int64_t)1 << 22) ? n : ((int64_t)1 << 22);
    const size_t es = mf_dtype_size(dt);
    void *h = malloc((size_t)blk * es);
    if (!h) return mf_fail(MF_ERR_OOM, "bench: out of host memory");
    mf_bench_fill_random(h, dt, blk, -1.0f, 1.0f, seed);
    mf_status st = MF_OK;
    for (int64_t i = 0; i < n && st == MF_OK; i += blk) {
        const int64_t m = n - i < blk ? n - i : blk;
        st = mf_backend_copy(be, (char *)dst + (size_t)i * es, h, (size_t)m * es, MF_COPY_H2D);
    }
    free(h);
    return st;
}

static mf_status upload_i32(mf_backend *be, const int32_t *h, int64_t n, void **dst, mf_tensor *t) {
    MF_TRY(mf_backend_alloc(be, (size_t)n * sizeof(int32_t), dst));
    MF_TRY(mf_backend_copy(be, *dst, h, (size_t)n * sizeof(int32_t), MF_COPY_H2D));
    return mf_tensor_make(t, *dst, MF_DTYPE_I32, mf_backend_device(be), 1, &n);
}

static void fmt_num(char *buf, size_t cap, double v, int prec) {
    if (v != v)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.*f", prec, v);
}

enum { NCOLS = 23 };
static const char *const col_names[NCOLS] = {
    "case",   "batch",   "heads", "kv_heads", "q_len",  "k_len", "head_dim", "mask", "dtype",     "p5_us",
    "p50_us", "p95_us",  "TFLOP/s", "GB/s",   "%copy", "MB_alloc", "splits", "device", "copy_GB/s", "date",
    "path",   "wgmma_p50_us", "wgmma_TFLOP/s"};

static double case_mb(const at_case *c, const at_opts *o) {
    const double e = (double)mf_dtype_size(o->dt);
    const double q = (double)(c->batch * c->q_len * c->heads * c->d) * e;
    const double kv = (double)(c->batch * c->k_len * c->kv_heads * c->d) * e;
    return (2 * q + 2 * kv) / 1e6;
}

static mf_status bench_case(mf_backend *be, mf_bench_timer *timer, const at_opts *o, const at_case *c,
                            const char *device, double copy_gbps, const char *date, mf_bench_table *tab) {
    if (case_mb(c, o) > o->max_mb) {
        fprintf(stderr, "bench attention: skipping %s b%lld h%lld s%lldx%lld d%lld: needs %.0f MB (budget %.0f MB)\n",
                c->decode ? "decode" : "prefill", (long long)c->batch, (long long)c->heads, (long long)c->q_len,
                (long long)c->k_len, (long long)c->d, case_mb(c, o), o->max_mb);
        return MF_OK;
    }
    const mf_device dev = mf_backend_device(be);
    const size_t es = mf_dtype_size(o->dt);
    const int64_t nq = c->batch * c->q_len * c->heads * c->d, nkv = c->batch * c->k_len * c->kv_heads * c->d;
    at_state s = {.be = be};
    void *q = NULL, *k = NULL, *v = NULL, *out = NULL, *cu = NULL, *kl = NULL, *ws = NULL;
    mf_tensor t_cu, t_kl;
    int32_t *hcu = NULL, *hkl = NULL;
    double *samples = calloc((size_t)o->iters, sizeof *samples);
    mf_status st = samples ? MF_OK : mf_fail(MF_ERR_OOM, "bench: out of host memory");
    if (st == MF_OK) st = mf_backend_alloc(be, (size_t)nq * es, &q);
    if (st == MF_OK) st = mf_backend_alloc(be, (size_t)nq * es, &out);
    if (st == MF_OK) st = mf_backend_alloc(be, (size_t)nkv * es, &k);
    if (st == MF_OK) st = mf_backend_alloc(be, (size_t)nkv * es, &v);
    if (st == MF_OK) st = fill_random(be, q, o->dt, nq, 1 + (uint64_t)nq);
    if (st == MF_OK) st = fill_random(be, k, o->dt, nkv, 2 + (uint64_t)nkv);
    if (st == MF_OK) st = fill_random(be, v, o->dt, nkv, 3 + (uint64_t)nkv);
    mf_attention_args *a = &s.a;
    a->scale = 1.0f / sqrtf((float)c->d);
    a->causal = c->causal;
    a->num_splits = o->num_splits;
    if (st == MF_OK && !c->decode) {
        const int64_t qs[4] = {c->batch, c->q_len, c->heads, c->d}, ks[4] = {c->batch, c->k_len, c->kv_heads, c->d};
        st = mf_tensor_make(&a->q, q, o->dt, dev, 4, qs);
        if (st == MF_OK) st = mf_tensor_make(&a->o, out, o->dt, dev, 4, qs);
        if (st == MF_OK) st = mf_tensor_make(&a->k, k, o->dt, dev, 4, ks);
        if (st == MF_OK) st = mf_tensor_make(&a->v, v, o->dt, dev, 4, ks);
        a->batch = (int32_t)c->batch;
    } else if (st == MF_OK) {
        // Cache mode: q (B, H, D) one token per sequence; cache (B, L, Hkv, D); k_lens = L.
        const int64_t qs[3] = {c->batch * c->q_len, c->heads, c->d}, ks[4] = {c->batch, c->k_len, c->kv_heads, c->d};
        hcu = malloc((size_t)(c->batch + 1) * sizeof *hcu), hkl = malloc((size_t)c->batch * sizeof *hkl);
        if (!hcu || !hkl) st = mf_fail(MF_ERR_OOM, "bench: out of host memory");
        for (int64_t b = 0; st == MF_OK && b <= c->batch; b++) {
            hcu[b] = (int32_t)(b * c->q_len);
            if (b < c->batch) hkl[b] = (int32_t)c->k_len;
        }
        if (st == MF_OK) st = mf_tensor_make(&a->q, q, o->dt, dev, 3, qs);
        if (st == MF_OK) st = mf_tensor_make(&a->o, out, o->dt, dev, 3, qs);
        if (st == MF_OK) st = mf_tensor_make(&a->k, k, o->dt, dev, 4, ks);
        if (st == MF_OK) st = mf_tensor_make(&a->v, v, o->dt, dev, 4, ks);
        if (st == MF_OK) st = upload_i32(be, hcu, c->batch + 1, &cu, &t_cu);
        if (st == MF_OK) st = upload_i32(be, hkl, c->batch, &kl, &t_kl);
        a->cu_seqlens_q = &t_cu, a->k_lens = &t_kl;
        a->batch = (int32_t)c->batch, a->max_q_len = c->q_len, a->max_k_len = c->k_len;
        size_t wsb = 0;
        if (st == MF_OK) st = mf_attention_workspace(be, a, &wsb);
        if (st == MF_OK && wsb) st = mf_backend_alloc(be, wsb, &ws);
        a->workspace = ws, a->workspace_bytes = wsb;
    }
    if (st == MF_OK) st = mf_bench_sample(timer, run_attn, &s, o->warmup, o->iters, samples);
    if (st == MF_OK) st = mf_backend_sync(be); // device-side length errors surface here
    mf_bench_stats ss = {0};
    if (st == MF_OK) ss = mf_bench_stats_of(samples, o->iters);
    const char *path = "";
    double t_wgmma = NAN;
#ifdef MF_HAVE_CUDA
    if (st == MF_OK && dev == MF_DEVICE_CUDA) {
        path = mf_cuda_attn_last_path(be);
        if (!c->decode && mf_cuda_attn_sm90(be, NULL)) { // the same data again, samples reused
            setenv("MINFER_ATTN", "wgmma", 1);
            st = mf_bench_sample(timer, run_attn, &s, o->warmup, o->iters, samples);
            if (st == MF_OK) st = mf_backend_sync(be);
            if (st == MF_OK && strcmp(mf_cuda_attn_last_path(be), "wgmma") == 0)
                t_wgmma = mf_bench_stats_of(samples, o->iters).p50;
            unsetenv("MINFER_ATTN");
        }
    }
#endif
    if (st == MF_OK) {
        const double flop = 4.0 * (double)(c->batch * c->heads) * (double)c->q_len * (double)c->k_len *
                            (double)c->d * (c->causal ? 0.5 : 1.0);
        const double kv_bytes = 2.0 * (double)nkv * (double)es;
        const double nan = NAN;
        char cells[NCOLS][192];
        snprintf(cells[0], 192, "%s", c->decode ? "decode" : "prefill");
        snprintf(cells[1], 192, "%lld", (long long)c->batch);
        snprintf(cells[2], 192, "%lld", (long long)c->heads);
        snprintf(cells[3], 192, "%lld", (long long)c->kv_heads);
        snprintf(cells[4], 192, "%lld", (long long)c->q_len);
        snprintf(cells[5], 192, "%lld", (long long)c->k_len);
        snprintf(cells[6], 192, "%lld", (long long)c->d);
        snprintf(cells[7], 192, "%s", c->causal ? "causal" : "none");
        snprintf(cells[8], 192, "%s", mf_dtype_name(o->dt));
        fmt_num(cells[9], 192, ss.p5, 1);
        fmt_num(cells[10], 192, ss.p50, 1);
        fmt_num(cells[11], 192, ss.p95, 1);
        fmt_num(cells[12], 192, c->decode ? nan : flop / (ss.p50 * 1e6), 2);
        fmt_num(cells[13], 192, c->decode ? kv_bytes / (ss.p50 * 1e3) : nan, 1);
        fmt_num(cells[14], 192, c->decode ? 100.0 * kv_bytes / (ss.p50 * 1e3) / copy_gbps : nan, 1);
        fmt_num(cells[15], 192, case_mb(c, o) + (double)a->workspace_bytes / 1e6, 1);
        snprintf(cells[16], 192, "%d", o->num_splits);
        snprintf(cells[17], 192, "%s", device);
        fmt_num(cells[18], 192, copy_gbps, 1);
        snprintf(cells[19], 192, "%s", date);
        snprintf(cells[20], 192, "%s", *path ? path : "-");
        fmt_num(cells[21], 192, t_wgmma, 1);
        fmt_num(cells[22], 192, flop / (t_wgmma * 1e6), 2);
        if (!c->decode) snprintf(cells[16], 192, "-");
        const char *row[NCOLS];
        for (int i = 0; i < NCOLS; i++) row[i] = cells[i];
        if (!mf_bench_table_add(tab, row)) st = mf_fail(MF_ERR_OOM, "bench: out of host memory");
    }
    mf_backend_dealloc(be, q);
    mf_backend_dealloc(be, out);
    mf_backend_dealloc(be, k);
    mf_backend_dealloc(be, v);
    mf_backend_dealloc(be, cu);
    mf_backend_dealloc(be, kl);
    mf_backend_dealloc(be, ws);
    free(hcu);
    free(hkl);
    free(samples);
    return st;
}

// The case list. Default on CUDA: the goal shapes, causal and not,
// and every decode shape; --full: the whole grid. CPU: tiny shapes.
static int make_cases(const at_opts *o, bool cuda, at_case *cases, int cap) {
    int n = 0;
    static const int64_t ss[6] = {128, 512, 1024, 2048, 4096, 8192}, bs[4] = {1, 4, 16, 32}, hs[3] = {8, 16, 32};
    static const int64_t ds[2] = {64, 128};
    if (o->prefill) {
        if (!cuda && !o->full) {
            for (int causal = 0; causal < 2 && n + 1 < cap; causal++) {
                cases[n++] = (at_case){false, 1, 8, 8, 128, 128, 64, causal};
                cases[n++] = (at_case){false, 1, 8, 8, 256, 256, 128, causal};
            }
        } else if (!o->full) {
            // the goal shapes, and one head_dim 256 shape (Gemma-style heads)
            static const int64_t goal[][4] = {{16, 16, 2048, 64}, {8, 16, 2048, 64}, {4, 32, 4096, 128},
                                              {1, 32, 8192, 128}, {4, 16, 512, 128}, {4, 16, 1024, 64},
                                              {2, 16, 4096, 256}};
            for (int g = 0; g < 7; g++)
                for (int causal = 0; causal < 2 && n < cap; causal++)
                    cases[n++] = (at_case){false, goal[g][0], goal[g][1], goal[g][1], goal[g][2], goal[g][2],
                                           goal[g][3], causal};
        } else {
            for (int di = 0; di < 2; di++)
                for (int si = 0; si < 6; si++)
                    for (int bi = 0; bi < 4; bi++)
                        for (int hi = 0; hi < 3; hi++)
                            for (int causal = 0; causal < 2 && n < cap; causal++)
                                cases[n++] = (at_case){false, bs[bi], hs[hi], hs[hi], ss[si], ss[si], ds[di], causal};
        }
    }
    if (o->decode) {
        static const int64_t db[4] = {1, 8, 32, 64}, dl[4] = {1024, 4096, 16384, 32768};
        for (int bi = 0; bi < 4; bi++)
            for (int li = 0; li < 4; li++) {
                if (!cuda && !o->full && (bi > 0 || li > 0)) continue;
                if (n < cap) cases[n++] = (at_case){true, db[bi], 32, 8, 1, dl[li], 128, false};
            }
    }
    return n;
}

int mf_bench_attention_main(int argc, char **argv) {
    at_opts o;
    char err[256];
    const int pr = parse_args(argc, argv, &o, err, sizeof err);
    if (pr == 1) {
        usage(stdout);
        return 0;
    }
    if (pr) {
        fprintf(stderr, "minfer: error: bench attention: %s\n", err);
        return 2;
    }
    mf_bench_session b;
    if (mf_bench_open(&b, "attention", o.backend, (size_t)16 << 20, NCOLS, col_names)) return 1;
    if (o.warmup < 0) o.warmup = b.cuda ? 10 : 1;
    if (o.iters < 1) o.iters = b.cuda ? 50 : 3;
    if (o.max_mb < 0) o.max_mb = mf_bench_default_max_mb(b.be, 512, 600);
    double copy = 0;
    mf_status st = mf_bench_copy_gbps(b.timer, b.be, b.cuda ? ((size_t)1 << 30) : ((size_t)64 << 20),
                                      b.cuda ? 20 : 3, &copy);
    enum { CAP = 320 };
    at_case *cases = calloc(CAP, sizeof *cases);
    const int n = cases ? make_cases(&o, b.cuda, cases, CAP) : 0;
    if (!cases) st = mf_fail(MF_ERR_OOM, "bench: out of host memory");
    for (int i = 0; i < n && st == MF_OK; i++)
        st = bench_case(b.be, b.timer, &o, &cases[i], b.device, copy, b.date, b.tab);
    int rc = 0;
    if (st != MF_OK) {
        fprintf(stderr, "minfer bench attention: %s\n", mf_last_error());
        rc = 1;
    }
    if (o.fmt == MF_BENCH_TABLE)
        printf("# attention on %s (%s), %s; copy ceiling %.1f GB/s (read + write); %d iterations, L2 flushed; "
               "TFLOP/s = 4*B*H*Sq*Sk*D (x0.5 causal); decode GB/s = K + V bytes read\n",
               mf_backend_name(b.be), b.device, b.date, copy, o.iters);
    mf_bench_table_print(b.tab, o.fmt, stdout);
    if (mf_bench_table_write_files(b.tab, o.csv, o.json, "minfer bench attention")) rc = 1;
    free(cases);
    mf_bench_close(&b);
    return rc;
}
