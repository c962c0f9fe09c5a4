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
// wgmma_p50_us / wgmma_TFLOP/s ("-" where it does not run). Prefill TFLOP/s
// is also quoted as % of the square GEMM measured at the start (%gemm).
// --batch/--seq/--heads/--kv-heads/--head-dim lists replace the default
// shapes by their product (make_cases).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/error.h"
#include "cuda/cuda_query.h"

typedef mf_bench_attention_opts at_opts; // parsed by mf_bench_parse with the options below

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

static void at_help(FILE *f) {
    const mf_bench_def *d = &mf_bench_attention;
    fprintf(f,
            "usage: minfer bench attention [options]\n"
            "  --backend auto|cpu|cuda   (default auto)\n"
            "  --dtype bf16|f16|f32      q, k, v, o dtype (default bf16)\n"
            "  --cases prefill|decode|all   (default all)\n"
            "  --full                    the whole grid (default: the goal shapes; on the CPU tiny ones)\n"
            "  --batch L --seq L --heads L --kv-heads L --head-dim L\n"
            "                            comma-separated lists: the cases are their product (prefill: q_len =\n"
            "                            k_len = seq; decode: seq = cached tokens per sequence); unlisted ones\n"
            "                            take prefill batch 4 (CPU 1), seq 2048 (CPU 256), heads 16 (CPU 8),\n"
            "                            kv-heads = heads, head-dim 128 (CPU 64); decode batch 1, seq 4096\n"
            "                            (CPU 1024), heads 32, kv-heads 8 (or heads when 8 does not divide it),\n"
            "                            head-dim 128\n"
            "  --mask causal|none|both   prefill masks (default both)\n"
            "  --num-splits N            decode split count (default 0: the dispatch chooses)\n"
            "  --no-gemm-ceiling         skip the GEMM ceiling (%%gemm \"-\"; for profilers: no cuBLAS kernel)\n"
            "  --warmup N --iters N      (default %d/%d on CUDA, %d/%d on the CPU)\n"
            "  --max-mb N                memory budget per case (default: 85%% of free device memory; CPU 512)\n"
            "  --format table|csv|json   stdout format (default table: markdown)\n"
            "  --csv FILE --json FILE    also write the results there\n",
            d->warmup[1], d->iters[1], d->warmup[0], d->iters[0]);
}

static mf_status upload_i32(mf_backend *be, const int32_t *h, int64_t n, void **dst, mf_tensor *t) {
    MF_TRY(mf_backend_alloc(be, (size_t)n * sizeof(int32_t), dst));
    MF_TRY(mf_backend_copy(be, *dst, h, (size_t)n * sizeof(int32_t), MF_COPY_H2D));
    return mf_tensor_make(t, *dst, MF_DTYPE_I32, mf_backend_device(be), 1, &n);
}

enum { NCOLS = 22 }; // then the session's: device, commit, date, copy_GB/s, gemm_TFLOP/s
static const char *const col_names[NCOLS] = {
    "case",    "batch",    "heads",  "kv_heads", "q_len",        "k_len",         "head_dim", "mask",
    "dtype",   "p5_us",    "p50_us", "p95_us",   "TFLOP/s",      "%gemm",         "GB/s",     "%copy",
    "MB_alloc", "splits",  "path",   "wgmma_p50_us", "wgmma_TFLOP/s", "wgmma_%gemm"};

static double case_mb(const at_case *c, const at_opts *o) {
    const double e = (double)mf_dtype_size(o->com.dt);
    const double q = (double)(c->batch * c->q_len * c->heads * c->d) * e;
    const double kv = (double)(c->batch * c->k_len * c->kv_heads * c->d) * e;
    return (2 * q + 2 * kv) / 1e6;
}

static mf_status bench_case(mf_bench_session *b, const at_opts *o, const at_case *c, int ci, int nc) {
    mf_backend *be = b->be;
    mf_bench_timer *timer = b->timer;
    const double copy_gbps = b->copy_gbps, gemm = b->gemm_tflops;
    if (case_mb(c, o) > o->com.max_mb) {
        fprintf(stderr, "bench attention: skipping %s b%lld h%lld s%lldx%lld d%lld: needs %.0f MB (budget %.0f MB)\n",
                c->decode ? "decode" : "prefill", (long long)c->batch, (long long)c->heads, (long long)c->q_len,
                (long long)c->k_len, (long long)c->d, case_mb(c, o), o->com.max_mb);
        return MF_OK;
    }
    const mf_device dev = mf_backend_device(be);
    const size_t es = mf_dtype_size(o->com.dt);
    const int64_t nq = c->batch * c->q_len * c->heads * c->d, nkv = c->batch * c->k_len * c->kv_heads * c->d;
    at_state s = {.be = be};
    void *q = NULL, *k = NULL, *v = NULL, *out = NULL, *cu = NULL, *kl = NULL, *ws = NULL;
    mf_tensor t_cu, t_kl;
    int32_t *hcu = NULL, *hkl = NULL;
    double *samples = calloc((size_t)o->com.iters, sizeof *samples);
    mf_status st = samples ? MF_OK : mf_fail(MF_ERR_OOM, "bench: out of host memory");
    if (st == MF_OK) st = mf_backend_alloc(be, (size_t)nq * es, &q);
    if (st == MF_OK) st = mf_backend_alloc(be, (size_t)nq * es, &out);
    if (st == MF_OK) st = mf_backend_alloc(be, (size_t)nkv * es, &k);
    if (st == MF_OK) st = mf_backend_alloc(be, (size_t)nkv * es, &v);
    if (st == MF_OK) st = mf_bench_upload_random(be, q, o->com.dt, nq, -1.0f, 1.0f, 1 + (uint64_t)nq);
    if (st == MF_OK) st = mf_bench_upload_random(be, k, o->com.dt, nkv, -1.0f, 1.0f, 2 + (uint64_t)nkv);
    if (st == MF_OK) st = mf_bench_upload_random(be, v, o->com.dt, nkv, -1.0f, 1.0f, 3 + (uint64_t)nkv);
    mf_attention_args *a = &s.a;
    a->scale = 1.0f / sqrtf((float)c->d);
    a->causal = c->causal;
    a->num_splits = o->num_splits;
    if (st == MF_OK && !c->decode) {
        const int64_t qs[4] = {c->batch, c->q_len, c->heads, c->d}, ks[4] = {c->batch, c->k_len, c->kv_heads, c->d};
        st = mf_tensor_make(&a->q, q, o->com.dt, dev, 4, qs);
        if (st == MF_OK) st = mf_tensor_make(&a->o, out, o->com.dt, dev, 4, qs);
        if (st == MF_OK) st = mf_tensor_make(&a->k, k, o->com.dt, dev, 4, ks);
        if (st == MF_OK) st = mf_tensor_make(&a->v, v, o->com.dt, dev, 4, ks);
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
        if (st == MF_OK) st = mf_tensor_make(&a->q, q, o->com.dt, dev, 3, qs);
        if (st == MF_OK) st = mf_tensor_make(&a->o, out, o->com.dt, dev, 3, qs);
        if (st == MF_OK) st = mf_tensor_make(&a->k, k, o->com.dt, dev, 4, ks);
        if (st == MF_OK) st = mf_tensor_make(&a->v, v, o->com.dt, dev, 4, ks);
        if (st == MF_OK) st = upload_i32(be, hcu, c->batch + 1, &cu, &t_cu);
        if (st == MF_OK) st = upload_i32(be, hkl, c->batch, &kl, &t_kl);
        a->cu_seqlens_q = &t_cu, a->k_lens = &t_kl;
        a->batch = (int32_t)c->batch, a->max_q_len = c->q_len, a->max_k_len = c->k_len;
        size_t wsb = 0;
        if (st == MF_OK) st = mf_attention_workspace(be, a, &wsb);
        if (st == MF_OK && wsb) st = mf_backend_alloc(be, wsb, &ws);
        a->workspace = ws, a->workspace_bytes = wsb;
    }
    if (st == MF_OK) st = mf_bench_sample(timer, run_attn, &s, o->com.warmup, o->com.iters, samples);
    if (st == MF_OK) st = mf_backend_sync(be); // device-side length errors surface here
    mf_bench_stats ss = {0};
    if (st == MF_OK) ss = mf_bench_stats_of(samples, o->com.iters);
    const char *path = "";
    double t_wgmma = NAN;
#ifdef MF_HAVE_CUDA
    if (st == MF_OK && dev == MF_DEVICE_CUDA) {
        path = mf_cuda_attn_last_path(be);
        if (!c->decode && mf_cuda_attn_sm90(be, NULL)) { // the same data again, samples reused
            setenv("MINFER_ATTN", "wgmma", 1);
            st = mf_bench_sample(timer, run_attn, &s, o->com.warmup, o->com.iters, samples);
            if (st == MF_OK) st = mf_backend_sync(be);
            if (st == MF_OK && strcmp(mf_cuda_attn_last_path(be), "wgmma") == 0)
                t_wgmma = mf_bench_stats_of(samples, o->com.iters).p50;
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
        snprintf(cells[8], 192, "%s", mf_dtype_name(o->com.dt));
        mf_bench_fmt(cells[9], 192, ss.p5, 1);
        mf_bench_fmt(cells[10], 192, ss.p50, 1);
        mf_bench_fmt(cells[11], 192, ss.p95, 1);
        const double tf = c->decode ? nan : flop / (ss.p50 * 1e6), tf_w = flop / (t_wgmma * 1e6);
        mf_bench_fmt(cells[12], 192, tf, 4);
        mf_bench_fmt(cells[13], 192, 100.0 * tf / gemm, 1);
        mf_bench_fmt(cells[14], 192, c->decode ? kv_bytes / (ss.p50 * 1e3) : nan, 1);
        mf_bench_fmt(cells[15], 192, c->decode ? 100.0 * kv_bytes / (ss.p50 * 1e3) / copy_gbps : nan, 1);
        mf_bench_fmt(cells[16], 192, case_mb(c, o) + (double)a->workspace_bytes / 1e6, 1);
        snprintf(cells[17], 192, "%d", o->num_splits);
        if (!c->decode) snprintf(cells[17], 192, "-");
        snprintf(cells[18], 192, "%s", *path ? path : "-");
        mf_bench_fmt(cells[19], 192, t_wgmma, 1);
        mf_bench_fmt(cells[20], 192, tf_w, 4);
        mf_bench_fmt(cells[21], 192, 100.0 * tf_w / gemm, 1);
        const char *row[NCOLS];
        for (int i = 0; i < NCOLS; i++) row[i] = cells[i];
        if (!mf_bench_add_row(b, row)) st = mf_fail(MF_ERR_OOM, "bench: out of host memory");
        if (c->decode)
            mf_bench_progress(b, ci, nc, "decode b%lld h%lld/%lld ctx %lld d%lld: %s us, %s GB/s (%s%% of copy)",
                              (long long)c->batch, (long long)c->heads, (long long)c->kv_heads, (long long)c->k_len,
                              (long long)c->d, cells[10], cells[14], cells[15]);
        else
            mf_bench_progress(b, ci, nc, "prefill b%lld h%lld/%lld s%lld d%lld %s: %s us, %s TFLOP/s (%s%% of GEMM)",
                              (long long)c->batch, (long long)c->heads, (long long)c->kv_heads, (long long)c->q_len,
                              (long long)c->d, cells[7], cells[10], cells[12], cells[13]);
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

// The listed shapes' product for one phase; an unlisted dimension takes
// the phase's default (see usage()).
static int listed_cases(const at_opts *o, bool cuda, bool decode, at_case *cases, int n, int cap) {
    mf_arg_list db = {.v = {decode ? 1 : cuda ? 4 : 1}, .n = 1},
                ds = {.v = {decode ? (cuda ? 4096 : 1024) : (cuda ? 2048 : 256)}, .n = 1},
                dh = {.v = {decode ? 32 : cuda ? 16 : 8}, .n = 1}, dd = {.v = {decode || cuda ? 128 : 64}, .n = 1};
    const mf_arg_list *B = o->batch.n ? &o->batch : &db, *S = o->seq.n ? &o->seq : &ds,
                      *H = o->heads.n ? &o->heads : &dh, *D = o->head_dim.n ? &o->head_dim : &dd;
    const int masks = decode ? 1 : o->causal + o->noncausal;
    for (int bi = 0; bi < B->n; bi++)
        for (int si = 0; si < S->n; si++)
            for (int hi = 0; hi < H->n; hi++)
                for (int ki = 0; ki < (o->kv_heads.n ? o->kv_heads.n : 1); ki++)
                    for (int di = 0; di < D->n; di++)
                        for (int m = 0; m < masks && n < cap; m++) {
                            const int64_t h = H->v[hi];
                            const int64_t kv = o->kv_heads.n ? o->kv_heads.v[ki] : decode && h % 8 == 0 ? 8 : h;
                            if (h % kv) { // grouped-query heads need kv | h
                                if (m == 0 && di == 0)
                                    fprintf(stderr, "minfer bench attention: skipping %lld heads over %lld kv heads\n",
                                            (long long)h, (long long)kv);
                                continue;
                            }
                            const bool causal = !decode && (o->noncausal ? m == 1 : true);
                            cases[n++] = (at_case){decode, B->v[bi], h, kv, decode ? 1 : S->v[si], S->v[si],
                                                   D->v[di], causal};
                        }
    return n;
}

// The case list: the listed shapes (listed_cases), else on CUDA the issue's
// goal shapes, causal and not, and every decode shape; --full: the whole
// grid; CPU: tiny shapes.
static int make_cases(const at_opts *o, bool cuda, at_case *cases, int cap) {
    int n = 0;
    if (o->batch.n || o->seq.n || o->heads.n || o->kv_heads.n || o->head_dim.n) {
        if (o->prefill) n = listed_cases(o, cuda, false, cases, n, cap);
        if (o->decode) n = listed_cases(o, cuda, true, cases, n, cap);
        return n;
    }
    static const int64_t ss[6] = {128, 512, 1024, 2048, 4096, 8192}, bs[4] = {1, 4, 16, 32}, hs[3] = {8, 16, 32};
    static const int64_t ds[2] = {64, 128};
    const bool want[2] = {o->noncausal, o->causal};
    if (o->prefill) {
        if (!cuda && !o->com.full) {
            for (int causal = 0; causal < 2 && n + 1 < cap; causal++) {
                if (!want[causal]) continue;
                cases[n++] = (at_case){false, 1, 8, 8, 128, 128, 64, causal};
                cases[n++] = (at_case){false, 1, 8, 8, 256, 256, 128, causal};
            }
        } else if (!o->com.full) {
            // the goal shapes, and one head_dim 256 shape (Gemma-style heads)
            static const int64_t goal[][4] = {{16, 16, 2048, 64}, {8, 16, 2048, 64}, {4, 32, 4096, 128},
                                              {1, 32, 8192, 128}, {4, 16, 512, 128}, {4, 16, 1024, 64},
                                              {2, 16, 4096, 256}};
            for (int g = 0; g < 7; g++)
                for (int causal = 0; causal < 2 && n < cap; causal++)
                    if (want[causal])
                        cases[n++] = (at_case){false, goal[g][0], goal[g][1], goal[g][1], goal[g][2], goal[g][2],
                                               goal[g][3], causal};
        } else {
            for (int di = 0; di < 2; di++)
                for (int si = 0; si < 6; si++)
                    for (int bi = 0; bi < 4; bi++)
                        for (int hi = 0; hi < 3; hi++)
                            for (int causal = 0; causal < 2 && n < cap; causal++)
                                if (want[causal])
                                    cases[n++] =
                                        (at_case){false, bs[bi], hs[hi], hs[hi], ss[si], ss[si], ds[di], causal};
        }
    }
    if (o->decode) {
        static const int64_t db[4] = {1, 8, 32, 64}, dl[4] = {1024, 4096, 16384, 32768};
        for (int bi = 0; bi < 4; bi++)
            for (int li = 0; li < 4; li++) {
                if (!cuda && !o->com.full && (bi > 0 || li > 0)) continue;
                if (n < cap) cases[n++] = (at_case){true, db[bi], 32, 8, 1, dl[li], 128, false};
            }
    }
    return n;
}

static int at_run(void *opts) {
    at_opts *o = opts;
    mf_bench_session b;
    if (mf_bench_begin(&b, &mf_bench_attention, &o->com, (size_t)16 << 20, o->prefill && !o->com.no_gemm, NCOLS,
                       col_names))
        return 1;
    // the listed product: up to 16^5 x 2 masks per phase; the grids: < 320
    enum { CAP = 4096 };
    at_case *cases = calloc(CAP, sizeof *cases);
    const int n = cases ? make_cases(o, b.cuda, cases, CAP) : 0;
    mf_status st = cases ? MF_OK : mf_fail(MF_ERR_OOM, "bench: out of host memory");
    if (n == CAP) fprintf(stderr, "minfer bench attention: the lists' product is cut at %d cases\n", CAP);
    for (int i = 0; i < n && st == MF_OK; i++) st = bench_case(&b, o, &cases[i], i + 1, n);
    free(cases);
    return mf_bench_end(&b, st, &o->com, "TFLOP/s = 4*B*H*Sq*Sk*D (x0.5 causal); decode GB/s = K + V bytes read");
}

// ---- options ---------------------------------------------------------------------------------

static mf_args_result at_option(void *opts, const char *a, const char *v, char *err) {
    at_opts *o = opts;
    if (!strcmp(a, "--cases")) return mf_args_either(a, v, "prefill", "decode", "all", &o->prefill, &o->decode, err);
    if (!strcmp(a, "--mask")) return mf_args_either(a, v, "causal", "none", "both", &o->causal, &o->noncausal, err);
    return mf_args_int32(a, v, 0, 256, &o->num_splits, err); // --num-splits
}

const mf_bench_def mf_bench_attention = {
    .name = "attention", .opts_size = sizeof(at_opts),
    .about = "mf_attention prefill (TFLOP/s, % of a GEMM) and decode over a KV cache (GB/s, % of copy)",
    .common = MF_BENCH_OPT_SESSION | MF_BENCH_OPT_DTYPE | MF_BENCH_OPT_FULL | MF_BENCH_OPT_MAX_MB |
              MF_BENCH_OPT_NO_GEMM,
    .defaults = &(const at_opts){.prefill = true, .decode = true, .causal = true, .noncausal = true},
    .lists = (const mf_bench_list_opt[]){{"--batch", 1, INT32_MAX, offsetof(at_opts, batch)},
                                         {"--seq", 1, INT32_MAX, offsetof(at_opts, seq)},
                                         {"--heads", 1, 65535, offsetof(at_opts, heads)},
                                         {"--kv-heads", 1, 65535, offsetof(at_opts, kv_heads)},
                                         {"--head-dim", 1, 65535, offsetof(at_opts, head_dim)},
                                         {NULL, 0, 0, 0}},
    .valued = (const char *const[]){"--cases", "--mask", "--num-splits", NULL},
    .option = at_option, .help = at_help, .run = at_run,
    .warmup = {1, 10}, .iters = {3, 50}, .max_mb = {512, 600},
};
