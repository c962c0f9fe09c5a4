// `minfer bench moe`: the MoE layer by parts on the brief's grid, experts
// {8, 16, 32, 64} x top-k {2, 4, 8} x hidden {2048, 4096, 8192} x batch
// {1, 4, 16, 32} (prefill: x seq 2048 tokens per sequence; decode: one token
// per sequence), FFN width 1.75 x hidden (Mixtral's 14336 / 8192; 7168 at
// 4096), SwiGLU, even and Zipf-skewed routing. Per case:
//   router (logits GEMM + fused top-k), permute (sort + gather), experts
//   (the per-expert GEMM loop, its offsets read-back included), combine:
//   p50 microseconds each and as % of their sum (the layer);
//   expert-GEMM TFLOP/s and % of one dense GEMM of the same FLOPs
//   (m = T k, n = 3 I, k = H) timed in the same run;
//   decode: GB/s of the selected experts' weight bytes read by the expert
//   part and % of the device-to-device copy bandwidth;
//   CUDA: the expert part again with cublasGemmGroupedBatchedEx
//   (MINFER_MOE_GEMM=grouped) in the same run, as grouped_us / TFLOP/s, and
//   with the per-expert cuBLASLt loop forced (MINFER_MOE_GEMM=loop) as
//   loop_us, and on sm_90a with our grouped GEMMs (MINFER_MOE_GEMM=wgmma) as
//   wgmma_us / TFLOP/s / % of the dense GEMM; experts_path names the path experts_us took ("decode" at
//   <= 32 routed rows: the device-routed kernels without the read-back).
// The routed ids are planted (even: assignment a goes to expert a mod E;
// zipf: k distinct experts per token drawn with p(e) ~ 1 / (e + 1)), so the
// router is timed on its own logits and the rest on a known routing.
// Expert TFLOP/s is also quoted as % of the square GEMM measured at the
// start (%gemm). --experts/--top-k/--hidden/--batch lists replace the default
// shapes by their product (make_cases).
// Without --full: on CUDA the goal shape (hidden 4096, 32 experts, top-2,
// batch 16 prefill) and decode batches 1 and 16 of it plus a few neighbours;
// on the CPU a tiny shape (hidden 256) so that it runs in seconds.
#define _POSIX_C_SOURCE 200809L // setenv
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/error.h"
#ifdef MF_HAVE_CUDA
#include "cuda/cuda_query.h"
#endif

typedef mf_bench_moe_opts moe_opts; // parsed by mf_bench_parse with the options below

typedef struct {
    const char *mode; // "prefill" | "decode"
    int E, k;
    int64_t H, I, batch, T;
    bool zipf;
} moe_case;

typedef struct {
    mf_backend *be;
    mf_gemm_args logits_gemm, dense;
    mf_moe_router_args router;
    mf_moe_permute_args permute;
    mf_moe_experts_args experts;
    mf_moe_combine_args combine;
    mf_tensor x, xs; // the permutation's gather views
} moe_state;

static mf_status run_router(void *arg) {
    moe_state *s = arg;
    MF_TRY(mf_gemm(s->be, &s->logits_gemm));
    return mf_moe_router(s->be, &s->router);
}
static mf_status run_permute(void *arg) {
    moe_state *s = arg;
    return mf_moe_permute(s->be, &s->permute);
}
static mf_status run_experts(void *arg) {
    moe_state *s = arg;
    return mf_moe_experts(s->be, &s->experts);
}
static mf_status run_combine(void *arg) {
    moe_state *s = arg;
    return mf_moe_combine(s->be, &s->combine);
}
static mf_status run_dense(void *arg) {
    moe_state *s = arg;
    return mf_gemm(s->be, &s->dense);
}

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

// Planted routing into ids[T * k]; returns the number of distinct experts used.
static int plant_ids(int32_t *ids, int64_t T, int k, int E, bool zipf, uint64_t seed) {
    bool used[256] = {false};
    double cdf[257];
    cdf[0] = 0;
    for (int e = 0; e < E; e++) cdf[e + 1] = cdf[e] + 1.0 / (e + 1);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e = (int)((t * k + j) % E);
            if (zipf) {
                bool dup = true;
                while (dup) {
                    const double u = (double)(rng_next(&x) >> 11) * 0x1.0p-53 * cdf[E];
                    e = 0;
                    while (e < E - 1 && cdf[e + 1] <= u) e++;
                    dup = false;
                    for (int i = 0; i < j; i++) dup |= ids[t * k + i] == e;
                }
            }
            ids[t * k + j] = e;
            used[e] = true;
        }
    int n = 0;
    for (int e = 0; e < E; e++) n += used[e];
    return n;
}

static mf_tensor view(void *data, mf_dtype dt, mf_device dev, int nd, int64_t d0, int64_t d1, int64_t d2) {
    mf_tensor t;
    const int64_t shape[3] = {d0, d1, d2};
    mf_tensor_make(&t, data, dt, dev, nd, shape);
    return t;
}

enum { NCOLS = 29 }; // then the session's: device, commit, date, copy_GB/s, gemm_TFLOP/s
static const char *const col_names[NCOLS] = {
    "mode",         "routing",     "experts",         "top_k",        "hidden",     "ffn",
    "batch",        "tokens",      "dtype",           "router_us",    "permute_us", "experts_us",
    "combine_us",   "layer_us",    "overhead_%",      "expert_TFLOP/s", "dense_TFLOP/s", "%dense",
    "%gemm",        "experts_used", "weight_GB/s",    "%copy",        "grouped_us", "grouped_TFLOP/s",
    "experts_path", "loop_us",     "wgmma_us",        "wgmma_TFLOP/s", "wgmma_%dense"};

static double p50_of(mf_bench_timer *tm, mf_bench_fn fn, void *arg, const moe_opts *o, double *samples, mf_status *st) {
    if (*st != MF_OK) return NAN;
    *st = mf_bench_sample(tm, fn, arg, o->com.warmup, o->com.iters, samples);
    return *st == MF_OK ? mf_bench_stats_of(samples, o->com.iters).p50 : NAN;
}

static mf_status bench_case(mf_bench_session *b, const moe_opts *o, const moe_case *c, int ci, int nc) {
    mf_backend *be = b->be;
    mf_bench_timer *tm = b->timer;
    const double copy = b->copy_gbps;
    const mf_dtype dt = o->com.dt;
    const mf_device dev = mf_backend_device(be);
    const int64_t T = c->T, H = c->H, I = c->I, E = c->E, k = c->k, N = T * k;
    const size_t es = mf_dtype_size(dt);
    const double w_mb = (double)(E * 3 * I * H) * (double)es / 1e6;
    const double a_mb = ((double)T * H * 2 + (double)N * (H + 2 * I) + (double)N * 3 * I) * (double)es / 1e6 +
                        (double)(H * 3 * I) * (double)es / 1e6;
    if (w_mb + a_mb > o->com.max_mb) {
        fprintf(stderr, "bench moe: skipping %s E=%d k=%d H=%lld batch=%lld: needs %.0f MB (budget %.0f MB)\n", c->mode,
                c->E, c->k, (long long)H, (long long)c->batch, w_mb + a_mb, o->com.max_mb);
        return MF_OK;
    }
    void *x = NULL, *wr = NULL, *w1 = NULL, *w2 = NULL, *logits = NULL, *ids = NULL, *wts = NULL, *off = NULL,
         *sorted = NULL, *inv = NULL, *xs = NULL, *h = NULL, *out = NULL, *wd = NULL, *cd = NULL, *rids = NULL,
         *rw = NULL;
    int32_t *ids_h = malloc((size_t)N * sizeof(int32_t));
    double *samples = calloc((size_t)o->com.iters, sizeof(double));
    mf_status st = ids_h && samples ? MF_OK : mf_fail(MF_ERR_OOM, "bench moe: out of host memory");
    struct {
        void **p;
        size_t bytes;
    } al[] = {{&x, (size_t)(T * H) * es},       {&wr, (size_t)(E * H) * es},     {&w1, (size_t)(E * 2 * I * H) * es},
              {&w2, (size_t)(E * H * I) * es},  {&logits, (size_t)(T * E) * 4}, {&ids, (size_t)N * 4},
              {&wts, (size_t)N * 4},            {&off, (size_t)(E + 1) * 4},    {&sorted, (size_t)N * 4},
              {&inv, (size_t)N * 4},            {&xs, (size_t)(N * H) * es},    {&h, (size_t)(N * 2 * I) * es},
              {&out, (size_t)(T * H) * es},     {&wd, (size_t)(H * 3 * I) * es}, {&cd, (size_t)(N * 3 * I) * es},
              {&rids, (size_t)N * 4},           {&rw, (size_t)N * 4}};
    for (size_t i = 0; i < sizeof al / sizeof al[0] && st == MF_OK; i++) st = mf_backend_alloc(be, al[i].bytes, al[i].p);
    if (st == MF_OK) st = mf_bench_upload_random(be, x, dt, T * H, -1.0f, 1.0f, 1);
    if (st == MF_OK) st = mf_bench_upload_random(be, wr, dt, E * H, -0.05f, 0.05f, 2);
    if (st == MF_OK) st = mf_bench_upload_random(be, w1, dt, E * 2 * I * H, -0.02f, 0.02f, 3);
    if (st == MF_OK) st = mf_bench_upload_random(be, w2, dt, E * H * I, -0.02f, 0.02f, 4);
    if (st == MF_OK) st = mf_bench_upload_random(be, wd, dt, H * 3 * I, -0.02f, 0.02f, 5);
    if (st == MF_OK) st = mf_bench_upload_random(be, wts, MF_DTYPE_F32, N, -0.5f, 0.5f, 6);
    const int used = plant_ids(ids_h, T, c->k, c->E, c->zipf, (uint64_t)T * 31 + (uint64_t)E);
    if (st == MF_OK) st = mf_backend_copy(be, ids, ids_h, (size_t)N * 4, MF_COPY_H2D);
    moe_state s = {.be = be};
    if (st == MF_OK) {
        mf_tensor tx = view(x, dt, dev, 2, T, H, 1), twr = view(wr, dt, dev, 2, E, H, 1);
        mf_tensor tl = view(logits, MF_DTYPE_F32, dev, 2, T, E, 1);
        mf_tensor_transpose(&twr, 0, 1);
        s.logits_gemm = (mf_gemm_args){.a = tx, .b = twr, .c = tl, .alpha = 1.0f};
        // The router writes its own ids elsewhere: the permutation keeps the planted ones.
        s.router = (mf_moe_router_args){.logits = tl, .ids = view(rids, MF_DTYPE_I32, dev, 2, T, k, 1),
                                        .weights = view(rw, MF_DTYPE_F32, dev, 2, T, k, 1), .routed_scale = 1.0f,
                                        .renorm = true};
        mf_tensor txs = view(xs, dt, dev, 2, N, H, 1);
        s.permute = (mf_moe_permute_args){.ids = view(ids, MF_DTYPE_I32, dev, 2, T, k, 1),
                                          .offsets = view(off, MF_DTYPE_I32, dev, 1, E + 1, 1, 1),
                                          .sorted = view(sorted, MF_DTYPE_I32, dev, 1, N, 1, 1),
                                          .inv = view(inv, MF_DTYPE_I32, dev, 1, N, 1, 1), .x = NULL, .xs = NULL,
                                          .n_experts = (int32_t)E};
        s.x = tx, s.xs = txs;
        s.permute.x = &s.x, s.permute.xs = &s.xs;
        s.experts = (mf_moe_experts_args){.x = txs, .offsets = s.permute.offsets,
                                          .w1 = view(w1, dt, dev, 3, E, 2 * I, H), .w2 = view(w2, dt, dev, 3, E, H, I),
                                          .h = view(h, dt, dev, 2, N, 2 * I, 1), .y = txs, .ffn = MF_MOE_FFN_SWIGLU};
        s.combine = (mf_moe_combine_args){.ys = txs, .inv = s.permute.inv,
                                          .weights = view(wts, MF_DTYPE_F32, dev, 2, T, k, 1),
                                          .out = view(out, dt, dev, 2, T, H, 1)};
        mf_tensor twd = view(wd, dt, dev, 2, 3 * I, H, 1);
        mf_tensor_transpose(&twd, 0, 1);
        s.dense = (mf_gemm_args){.a = view(xs, dt, dev, 2, N, H, 1), .b = twd, .c = view(cd, dt, dev, 2, N, 3 * I, 1),
                                 .alpha = 1.0f};
    }
    // The permutation first (the experts read its offsets), then each part on its own.
    const double t_perm = p50_of(tm, run_permute, &s, o, samples, &st);
    const double t_router = p50_of(tm, run_router, &s, o, samples, &st);
    const double t_exp = p50_of(tm, run_experts, &s, o, samples, &st);
    const char *path = "loop"; // the CPU's only path
#ifdef MF_HAVE_CUDA
    if (dev == MF_DEVICE_CUDA) path = mf_cuda_moe_last_path(be);
#endif
    const double t_comb = p50_of(tm, run_combine, &s, o, samples, &st);
    const double t_dense = p50_of(tm, run_dense, &s, o, samples, &st);
    double t_grouped = NAN, t_loop = NAN, t_wgmma = NAN;
    if (dev == MF_DEVICE_CUDA && st == MF_OK) { // the alternative expert paths, same data
        setenv("MINFER_MOE_GEMM", "grouped", 1);
        t_grouped = p50_of(tm, run_experts, &s, o, samples, &st);
        setenv("MINFER_MOE_GEMM", "loop", 1);
        t_loop = p50_of(tm, run_experts, &s, o, samples, &st);
#ifdef MF_HAVE_CUDA
        if (mf_cuda_moe_sm90(be, NULL)) { // our sm_90a grouped GEMMs
            setenv("MINFER_MOE_GEMM", "wgmma", 1);
            t_wgmma = p50_of(tm, run_experts, &s, o, samples, &st);
            if (st == MF_OK && strcmp(mf_cuda_moe_last_path(be), "wgmma") != 0) t_wgmma = NAN; // did not fit
        }
#endif
        unsetenv("MINFER_MOE_GEMM");
    }
    if (st == MF_OK) {
        const double flops = 2.0 * (double)N * (double)H * (double)(3 * I);
        const double layer = t_router + t_perm + t_exp + t_comb;
        const double wbytes = (double)used * 3.0 * (double)(I * H) * (double)es;
        char cells[NCOLS][192];
        snprintf(cells[0], 192, "%s", c->mode);
        snprintf(cells[1], 192, "%s", c->zipf ? "zipf" : "even");
        snprintf(cells[2], 192, "%d", c->E);
        snprintf(cells[3], 192, "%d", c->k);
        snprintf(cells[4], 192, "%lld", (long long)H);
        snprintf(cells[5], 192, "%lld", (long long)I);
        snprintf(cells[6], 192, "%lld", (long long)c->batch);
        snprintf(cells[7], 192, "%lld", (long long)T);
        snprintf(cells[8], 192, "%s", mf_dtype_name(dt));
        mf_bench_fmt(cells[9], 192, t_router, 1);
        mf_bench_fmt(cells[10], 192, t_perm, 1);
        mf_bench_fmt(cells[11], 192, t_exp, 1);
        mf_bench_fmt(cells[12], 192, t_comb, 1);
        mf_bench_fmt(cells[13], 192, layer, 1);
        mf_bench_fmt(cells[14], 192, 100.0 * (t_router + t_perm + t_comb) / layer, 1);
        mf_bench_fmt(cells[15], 192, flops / (t_exp * 1e6), 4);
        mf_bench_fmt(cells[16], 192, flops / (t_dense * 1e6), 4);
        mf_bench_fmt(cells[17], 192, 100.0 * t_dense / t_exp, 1);
        mf_bench_fmt(cells[18], 192, 100.0 * flops / (t_exp * 1e6) / b->gemm_tflops, 1);
        snprintf(cells[19], 192, "%d", used);
        mf_bench_fmt(cells[20], 192, wbytes / (t_exp * 1e3), 1);
        mf_bench_fmt(cells[21], 192, 100.0 * wbytes / (t_exp * 1e3) / (copy / 2), 1); // copy counts read + write
        mf_bench_fmt(cells[22], 192, t_grouped, 1);
        mf_bench_fmt(cells[23], 192, flops / (t_grouped * 1e6), 4);
        snprintf(cells[24], 192, "%s", path);
        mf_bench_fmt(cells[25], 192, t_loop, 1);
        mf_bench_fmt(cells[26], 192, t_wgmma, 1);
        mf_bench_fmt(cells[27], 192, flops / (t_wgmma * 1e6), 4);
        mf_bench_fmt(cells[28], 192, 100.0 * t_dense / t_wgmma, 1);
        const char *row[NCOLS];
        for (int i = 0; i < NCOLS; i++) row[i] = cells[i];
        if (!mf_bench_add_row(b, row)) st = mf_fail(MF_ERR_OOM, "bench moe: out of host memory");
        mf_bench_progress(b, ci, nc, "%s %s E=%d k=%d H=%lld T=%lld: layer %s us, experts %s TFLOP/s (%s%% of dense)",
                          c->mode, cells[1], c->E, c->k, (long long)H, (long long)T, cells[13], cells[15], cells[17]);
    }
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) mf_backend_dealloc(be, *al[i].p);
    free(ids_h);
    free(samples);
    return st;
}

static void moe_help(FILE *f) {
    const mf_bench_def *d = &mf_bench_moe;
    fprintf(f,
            "usage: minfer bench moe [options]\n"
            "  --backend auto|cpu|cuda   (default auto)\n"
            "  --dtype bf16|f16|f32      (default bf16; f32 on the CPU)\n"
            "  --mode prefill|decode|all (default all)\n"
            "  --routing even|zipf|both  (default both)\n"
            "  --full                    the whole grid (default: a subset; tiny on the CPU)\n"
            "  --experts L --top-k L --hidden L --batch L\n"
            "                            comma-separated lists: the cases are their product; unlisted ones take\n"
            "                            experts 32 (CPU 8), top-k 2, hidden 4096 (CPU 256; a multiple of 8),\n"
            "                            batch 16 prefill and 1,16 decode (CPU 1 and 1,4)\n"
            "  --seq N                   prefill tokens per sequence (default 2048; CPU 16)\n"
            "  --no-gemm-ceiling         skip the GEMM ceiling (%%gemm \"-\"; for profilers: no cuBLAS kernel)\n"
            "  --warmup N --iters N      (default %d/%d on CUDA, %d/%d on the CPU)\n"
            "  --max-mb N                memory budget per case (default 85%% of free device memory; CPU 2048)\n"
            "  --format table|csv|json   stdout format (default table: markdown)\n"
            "  --csv FILE --json FILE    also write the results there\n",
            d->warmup[1], d->iters[1], d->warmup[0], d->iters[0]);
}

// One case per (mode, routing, E, k, H, batch); FFN width I = 1.75 H.
static int add_case(const moe_opts *o, bool cuda, bool prefill, bool zipf, int E, int k, int64_t H, int64_t B,
                    moe_case *cs, int n, int cap) {
    if (n >= cap) return n;
    const int64_t seq = o->seq > 0 ? o->seq : cuda ? 2048 : 16;
    cs[n] = (moe_case){.mode = prefill ? "prefill" : "decode", .E = E, .k = k, .H = H, .I = H * 7 / 4, .batch = B,
                       .T = prefill ? B * seq : B, .zipf = zipf};
    return n + 1;
}

// The case list: the listed shapes' product (an unlisted dimension: experts 32
// (CPU 8), top-k 2, hidden 4096 (CPU 256), batch 16 prefill and 1,16 decode
// (CPU 1 and 1,4)); else the brief's grid, whole (--full) or the subset.
static int make_cases(const moe_opts *o, bool cuda, moe_case *cs, int cap) {
    static const int Es[4] = {8, 16, 32, 64}, ks[3] = {2, 4, 8};
    static const int64_t Hs[3] = {2048, 4096, 8192}, Bs[4] = {1, 4, 16, 32};
    const bool listed = o->experts.n || o->top_k.n || o->hidden.n || o->batch.n;
    int n = 0;
    for (int m = 0; m < 2; m++) {
        const bool prefill = m == 0;
        if ((prefill && !o->prefill) || (!prefill && !o->decode)) continue;
        for (int z = 0; z < 2; z++) {
            if ((z == 0 && !o->even) || (z == 1 && !o->zipf)) continue;
            if (listed) {
                const mf_arg_list dE = {.v = {cuda ? 32 : 8}, .n = 1}, dk = {.v = {2}, .n = 1},
                                  dH = {.v = {cuda ? 4096 : 256}, .n = 1},
                                  dB = prefill ? (mf_arg_list){.v = {cuda ? 16 : 1}, .n = 1}
                                               : (mf_arg_list){.v = {1, cuda ? 16 : 4}, .n = 2};
                const mf_arg_list *E = o->experts.n ? &o->experts : &dE, *K = o->top_k.n ? &o->top_k : &dk,
                                  *H = o->hidden.n ? &o->hidden : &dH, *B = o->batch.n ? &o->batch : &dB;
                for (int ei = 0; ei < E->n; ei++)
                    for (int ki = 0; ki < K->n; ki++)
                        for (int hi = 0; hi < H->n; hi++)
                            for (int bi = 0; bi < B->n; bi++) {
                                if (K->v[ki] > E->v[ei]) {
                                    if (!z && prefill)
                                        fprintf(stderr, "minfer bench moe: skipping top-k %lld with %lld experts\n",
                                                (long long)K->v[ki], (long long)E->v[ei]);
                                    continue;
                                }
                                n = add_case(o, cuda, prefill, z == 1, (int)E->v[ei], (int)K->v[ki], H->v[hi],
                                             B->v[bi], cs, n, cap);
                            }
                continue;
            }
            for (int ei = 0; ei < 4; ei++)
                for (int ki = 0; ki < 3; ki++)
                    for (int hi = 0; hi < 3; hi++)
                        for (int bi = 0; bi < 4; bi++) {
                            int64_t H = Hs[hi];
                            bool pick = o->com.full;
                            if (!pick && cuda) // the goal shape, its neighbours in E and k, and decode 1 / 16
                                pick = hi == 1 && ((ei == 2 && ki == 0) || (ei == 3 && ki == 1) || (ei == 0 && ki == 0)) &&
                                       (prefill ? bi == 2 : (bi == 0 || bi == 2));
                            if (!pick && !cuda) { // tiny: hidden 256, E 8, k 2, batch 1 and 4
                                pick = ei == 0 && ki == 0 && hi == 0 && bi < 2;
                                if (pick) H = 256;
                            }
                            if (pick) n = add_case(o, cuda, prefill, z == 1, Es[ei], ks[ki], H, Bs[bi], cs, n, cap);
                        }
        }
    }
    return n;
}

static int moe_run(void *opts) {
    moe_opts *o = opts;
    mf_bench_session b;
    if (mf_bench_begin(&b, &mf_bench_moe, &o->com, (size_t)64 << 20, !o->com.no_gemm, NCOLS, col_names)) return 1;
    if (!o->com.dt_given) o->com.dt = b.cuda ? MF_DTYPE_BF16 : MF_DTYPE_F32;
    enum { CAP = 4096 }; // the lists' product: up to 16^4 x 2 x 2; the full grid: 576
    moe_case *cases = calloc(CAP, sizeof *cases);
    const int n = cases ? make_cases(o, b.cuda, cases, CAP) : 0;
    mf_status st = cases ? MF_OK : mf_fail(MF_ERR_OOM, "bench moe: out of host memory");
    if (n == CAP) fprintf(stderr, "minfer bench moe: the lists' product is cut at %d cases\n", CAP);
    for (int i = 0; i < n && st == MF_OK; i++) st = bench_case(&b, o, &cases[i], i + 1, n);
    free(cases);
    return mf_bench_end(&b, st, &o->com, "FFN = 1.75 x hidden, SwiGLU; layer = router + permute + experts + combine");
}

// ---- options ---------------------------------------------------------------------------------

static mf_args_result moe_option(void *opts, const char *a, const char *v, char *err) {
    moe_opts *o = opts;
    if (!strcmp(a, "--mode")) return mf_args_either(a, v, "prefill", "decode", "all", &o->prefill, &o->decode, err);
    if (!strcmp(a, "--routing")) return mf_args_either(a, v, "even", "zipf", "both", &o->even, &o->zipf, err);
    return mf_args_int(a, v, 1, 65536, &o->seq, err); // --seq
}

static mf_args_result moe_check(void *opts, char *err) {
    const moe_opts *o = opts;
    for (int h = 0; h < o->hidden.n; h++)
        if (o->hidden.v[h] % 8) return mf_args_bad(err, "--hidden %lld: not a multiple of 8", (long long)o->hidden.v[h]);
    return MF_ARGS_OK;
}

const mf_bench_def mf_bench_moe = {
    .name = "moe", .opts_size = sizeof(moe_opts),
    .about = "the MoE layer by parts (router, permute, experts, combine), even and Zipf routing",
    .common = MF_BENCH_OPT_SESSION | MF_BENCH_OPT_DTYPE | MF_BENCH_OPT_FULL | MF_BENCH_OPT_MAX_MB |
              MF_BENCH_OPT_NO_GEMM,
    .defaults = &(const moe_opts){.prefill = true, .decode = true, .even = true, .zipf = true, .seq = -1},
    .lists = (const mf_bench_list_opt[]){{"--experts", 1, 256, offsetof(moe_opts, experts)},
                                         {"--top-k", 1, 256, offsetof(moe_opts, top_k)},
                                         {"--hidden", 8, 65536, offsetof(moe_opts, hidden)},
                                         {"--batch", 1, 65536, offsetof(moe_opts, batch)},
                                         {NULL, 0, 0, 0}},
    .valued = (const char *const[]){"--mode", "--routing", "--seq", NULL},
    .option = moe_option, .check = moe_check, .help = moe_help, .run = moe_run,
    .warmup = {1, 5}, .iters = {3, 20}, .max_mb = {2048, 600},
};
