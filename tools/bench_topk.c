// `minfer bench topk`: mf_topk (per row of logits the k <= 1024 largest with
// their ids, plus the row max and sum exp((x - max) * scale)) on the decode
// grid vocab {32000 (Llama-2), 128256 (Llama-3), 151936 (Qwen2)} x batch
// {1, 8, 64} x k {50 (top_k), 1024 (top-p: the cap)}, f32 logits by default
// (what the LM head writes: src/runtime/step.c), bf16 on request.
// Per case: p5/p50/p95 microseconds (L2 flushed before every call, so the
// row's first read comes from device memory; the kernel's later passes over
// the row may hit L2, as they do after the LM-head GEMM in a decode step),
// the bytes the op needs (the logits read once, B V esize: the kernel reads
// a row ~4 times, but that is its cost, not the requirement), GB/s of those
// and % of the device-to-device copy bandwidth measured in the same run, and
// the bytes crossing to the host per step: B (8k + 8) with the candidates vs
// B V 4 for the f32 logits. Every case's outputs are checked on the host
// against the logits (ids and values, rank order, the k-th value's rank, the
// max and the sum): column `check`; a failed check makes the exit status 1.
// On the CPU backend the same loop runs (host clock, memcpy ceiling) on a
// smaller default grid, so the tool is testable without a GPU.
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/error.h"
#include "minfer/minfer.h"

typedef mf_bench_topk_opts tk_opts; // parsed by mf_bench_parse with the options below
typedef mf_arg_list tk_list;

// One case's buffers and the op's arguments, for the timed closure.
typedef struct {
    mf_backend *be;
    mf_topk_args a;
} tk_call;

static mf_status run_topk(void *arg) {
    const tk_call *c = arg;
    return mf_topk(c->be, &c->a);
}

enum { NCOLS = 15 }; // then the session's: device, commit, date, copy_GB/s, gemm_TFLOP/s
static const char *const col_names[NCOLS] = {
    "backend", "vocab", "batch", "k", "dtype", "p5_us", "p50_us", "p95_us", "MB_read", "GB/s", "%copy",
    "host_KB", "logits_KB", "host_saving", "check"};

static void fmt_num(char *buf, size_t cap, double v, int prec) {
    if (!(v >= 0) || isinf(v)) snprintf(buf, cap, "NA");
    else snprintf(buf, cap, "%.*f", prec, v);
}

// (va, ia) ranks before (vb, ib): larger value, then lower index (mf_topk's order).
static bool ranks_before(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

// Checks row r's outputs against its logits xr[n] (host copy, finite values):
// ids point at their values, in rank order; exactly the values above the k-th
// are in the list (count(x > v_k) < k <= count(x >= v_k)); max and sum as the
// op defines them. Returns NULL or what failed.
static const char *check_row(const void *x, mf_dtype dt, int64_t r, int64_t n, int64_t k, float scale,
                             const int32_t *id, const float *v, const float *st) {
    const int64_t base = r * n;
    float xmax = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        const float xi = mf_load_f32(x, dt, base + i);
        if (xi > xmax) xmax = xi;
    }
    for (int64_t j = 0; j < k; j++) {
        if (id[j] < 0 || id[j] >= n) return "an id out of range";
        if (mf_load_f32(x, dt, base + id[j]) != v[j]) return "a value is not its id's logit";
        if (j > 0 && !ranks_before(v[j - 1], id[j - 1], v[j], id[j])) return "candidates out of rank order";
    }
    int64_t above = 0, at_least = 0;
    double z = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float xi = mf_load_f32(x, dt, base + i);
        above += xi > v[k - 1];
        at_least += xi >= v[k - 1];
        z += expf((xi - xmax) * scale);
    }
    if (!(above < k && k <= at_least)) return "the k-th candidate is not the k-th largest logit";
    if (st[0] != xmax || v[0] != xmax) return "the max";
    if (!(fabs((double)st[1] - z) <= 1e-5 * z)) return "the sum of exp";
    return NULL;
}

// Times one case and appends its row. *failed is set when the check fails.
static mf_status bench_case(mf_bench_session *b, const tk_opts *o, mf_dtype dt, int64_t V, int64_t B, int64_t k,
                            int ci, int nc, bool *failed) {
    mf_backend *be = b->be;
    mf_bench_timer *timer = b->timer;
    const double copy = b->copy_gbps;
    const size_t es = mf_dtype_size(dt), xb = (size_t)(B * V) * es, ob = (size_t)(B * k) * 4, sb = (size_t)B * 8;
    void *x = NULL, *ids = NULL, *vals = NULL, *stats = NULL;
    void *hx = malloc(xb);
    int32_t *hid = malloc(ob);
    float *hv = malloc(ob), *hs = malloc(sb);
    double *samples = malloc((size_t)o->com.iters * sizeof *samples);
    mf_status st = hx && hid && hv && hs && samples ? MF_OK : mf_fail(MF_ERR_OOM, "bench topk: out of host memory");
    if (st == MF_OK) st = mf_backend_alloc(be, xb, &x);
    if (st == MF_OK) st = mf_backend_alloc(be, ob, &ids);
    if (st == MF_OK) st = mf_backend_alloc(be, ob, &vals);
    if (st == MF_OK) st = mf_backend_alloc(be, sb, &stats);
    if (st == MF_OK) { // logit-sized values; random, so ties are rare but possible in bf16
        mf_bench_fill_random(hx, dt, B * V, -8.0f, 8.0f, 7 + (uint64_t)(V * 131 + B * 17 + k));
        st = mf_backend_copy(be, x, hx, xb, MF_COPY_H2D);
    }
    tk_call c = {be, {.k = (int32_t)k, .scale = o->scale}};
    const mf_device dev = mf_backend_device(be);
    const int64_t xs[2] = {B, V}, os[2] = {B, k}, ss[2] = {B, 2};
    if (st == MF_OK) st = mf_tensor_make(&c.a.x, x, dt, dev, 2, xs);
    if (st == MF_OK) st = mf_tensor_make(&c.a.ids, ids, MF_DTYPE_I32, dev, 2, os);
    if (st == MF_OK) st = mf_tensor_make(&c.a.vals, vals, MF_DTYPE_F32, dev, 2, os);
    if (st == MF_OK) st = mf_tensor_make(&c.a.stats, stats, MF_DTYPE_F32, dev, 2, ss);
    mf_bench_stats s = {0};
    if (st == MF_OK) st = mf_bench_sample(timer, run_topk, &c, (int)o->com.warmup, (int)o->com.iters, samples);
    if (st == MF_OK) s = mf_bench_stats_of(samples, (int)o->com.iters);
    if (st == MF_OK) st = mf_backend_copy(be, hid, ids, ob, MF_COPY_D2H);
    if (st == MF_OK) st = mf_backend_copy(be, hv, vals, ob, MF_COPY_D2H);
    if (st == MF_OK) st = mf_backend_copy(be, hs, stats, sb, MF_COPY_D2H);
    if (st == MF_OK) {
        const char *bad = NULL;
        int64_t bad_row = -1;
        for (int64_t r = 0; r < B && !bad; r++)
            if ((bad = check_row(hx, dt, r, V, k, o->scale, hid + r * k, hv + r * k, hs + 2 * r))) bad_row = r;
        if (bad) {
            fprintf(stderr, "bench topk: CHECK FAILED vocab %lld batch %lld k %lld %s: row %lld: %s\n", (long long)V,
                    (long long)B, (long long)k, mf_dtype_name(dt), (long long)bad_row, bad);
            *failed = true;
        }
        const double req = (double)xb, host = (double)(B * (8 * k + 8)), logits = (double)(B * V) * 4.0;
        const double gbps = req / (s.p50 * 1e3);
        char cells[NCOLS][192];
        snprintf(cells[0], 192, "%s", mf_backend_name(be));
        snprintf(cells[1], 192, "%lld", (long long)V);
        snprintf(cells[2], 192, "%lld", (long long)B);
        snprintf(cells[3], 192, "%lld", (long long)k);
        snprintf(cells[4], 192, "%s", mf_dtype_name(dt));
        fmt_num(cells[5], 192, s.p5, 1);
        fmt_num(cells[6], 192, s.p50, 1);
        fmt_num(cells[7], 192, s.p95, 1);
        fmt_num(cells[8], 192, req / 1e6, 2);
        fmt_num(cells[9], 192, gbps, 1);
        fmt_num(cells[10], 192, 100.0 * gbps / copy, 1);
        fmt_num(cells[11], 192, host / 1e3, 1);
        fmt_num(cells[12], 192, logits / 1e3, 1);
        fmt_num(cells[13], 192, logits / host, 1);
        snprintf(cells[14], 192, "%s", bad ? "FAIL" : "ok");
        const char *row[NCOLS];
        for (int i = 0; i < NCOLS; i++) row[i] = cells[i];
        if (!mf_bench_add_row(b, row)) st = mf_fail(MF_ERR_OOM, "bench topk: out of host memory");
        mf_bench_progress(b, ci, nc, "vocab %lld batch %lld k %lld %s: p50 %s us, %s GB/s (%s%% of copy)",
                          (long long)V, (long long)B, (long long)k, mf_dtype_name(dt), cells[6], cells[9], cells[10]);
    }
    mf_backend_dealloc(be, x);
    mf_backend_dealloc(be, ids);
    mf_backend_dealloc(be, vals);
    mf_backend_dealloc(be, stats);
    free(hx);
    free(hid);
    free(hv);
    free(hs);
    free(samples);
    return st;
}

static void tk_help(FILE *f) {
    const mf_bench_def *d = &mf_bench_topk;
    fprintf(f,
            "usage: minfer bench topk [options]\n"
            "  mf_topk: per row of logits the k largest with ids, the row max and sum of exp;\n"
            "  grid vocab x batch x k (CUDA: vocab 32000,128256,151936 x batch 1,8,64 x k 50,1024;\n"
            "  CPU: vocab 32000 x batch 1,8 x k 50,1024), L2 flushed before each call\n"
            "  --backend auto|cpu|cuda   (default auto)\n"
            "  --vocab N[,N...]          row lengths, each in [1, 2^31) (default: the grid above)\n"
            "  --batch N[,N...]          rows, each in [1, 2^31)\n"
            "  --k N[,N...]              candidates, each in [1, %d] and <= vocab\n"
            "  --dtype f32|bf16|f16[,...] logits dtype (default f32: the engine's LM head output)\n"
            "  --full                    more: vocab + 50257,256000, batch + 4,16,32,128, k + 1,256, dtype + bf16\n"
            "  --scale S                 1 / temperature, finite and > 0 (default 1)\n"
            "  --warmup N --iters N      (default %d/%d on CUDA, %d/%d on the CPU)\n"
            "  --format table|csv|json   stdout format (default table: markdown)\n"
            "  --csv FILE --json FILE    also write the results there\n",
            MF_TOPK_MAX, d->warmup[1], d->iters[1], d->warmup[0], d->iters[0]);
}

// Fills l with defaults[] when the user gave no list; --full appends more[].
static void default_list(tk_list *l, const int64_t *defaults, int nd, const int64_t *more, int nm, bool full) {
    if (l->n) return;
    for (int i = 0; i < nd; i++) l->v[l->n++] = defaults[i];
    for (int i = 0; full && i < nm; i++) l->v[l->n++] = more[i];
}

static int tk_run(void *opts) {
    tk_opts *o = opts;
    mf_bench_session b;
    if (mf_bench_begin(&b, &mf_bench_topk, &o->com, (size_t)64 << 20, false, NCOLS, col_names)) return 1;
    static const int64_t gpu_vocab[] = {32000, 128256, 151936}, cpu_vocab[] = {32000}, more_vocab[] = {50257, 256000};
    static const int64_t gpu_batch[] = {1, 8, 64}, cpu_batch[] = {1, 8}, more_batch[] = {4, 16, 32, 128};
    static const int64_t def_k[] = {50, 1024}, more_k[] = {1, 256};
    default_list(&o->vocab, b.cuda ? gpu_vocab : cpu_vocab, b.cuda ? 3 : 1, more_vocab, 2, o->com.full);
    default_list(&o->batch, b.cuda ? gpu_batch : cpu_batch, b.cuda ? 3 : 2, more_batch, 4, o->com.full);
    default_list(&o->k, def_k, 2, more_k, 2, o->com.full);
    if (o->com.full && o->n_dt == 1 && o->dts[0] == MF_DTYPE_F32) o->dts[o->n_dt++] = MF_DTYPE_BF16;

    mf_status st = MF_OK;
    bool failed = false;
    const int nc = o->n_dt * o->vocab.n * o->batch.n * o->k.n;
    int ci = 0;
    for (int d = 0; d < o->n_dt && st == MF_OK; d++)
        for (int vi = 0; vi < o->vocab.n && st == MF_OK; vi++)
            for (int bi = 0; bi < o->batch.n && st == MF_OK; bi++)
                for (int ki = 0; ki < o->k.n && st == MF_OK; ki++) {
                    ci++;
                    if (o->k.v[ki] > o->vocab.v[vi]) {
                        fprintf(stderr, "minfer bench topk: [%d/%d] skipping k %lld > vocab %lld\n", ci, nc,
                                (long long)o->k.v[ki], (long long)o->vocab.v[vi]);
                        continue;
                    }
                    st = bench_case(&b, o, o->dts[d], o->vocab.v[vi], o->batch.v[bi], o->k.v[ki], ci, nc, &failed);
                }
    char note[320];
    snprintf(note, sizeof note,
             "MB_read = B V esize (the logits once), GB/s = that / p50; host_KB = B (8k + 8) crossing to the host "
             "vs logits_KB = B V 4 (f32 logits); scale %g",
             (double)o->scale);
    const int rc = mf_bench_end(&b, st, &o->com, note);
    if (failed) fprintf(stderr, "minfer bench topk: some outputs failed the host check (column check)\n");
    return rc || failed;
}

// ---- options ---------------------------------------------------------------------------------

static mf_args_result tk_option(void *opts, const char *a, const char *v, char *err) {
    tk_opts *o = opts;
    if (!strcmp(a, "--scale")) {
        double x = 0;
        if (!mf_args_finite(v, &x) || !(x > 0) || x > FLT_MAX || !((float)x > 0))
            return mf_args_bad(err, "--scale %.80s: not a finite number > 0", v);
        o->scale = (float)x;
        return MF_ARGS_OK;
    }
    o->n_dt = 0; // --dtype f32,bf16: distinct dtypes
    for (const char *p = v;;) {
        const size_t len = strcspn(p, ",");
        mf_dtype dt = MF_DTYPE_F32;
        bool ok = (len == 3 && !strncmp(p, "f32", 3)) || (len == 3 && !strncmp(p, "f16", 3)) ||
                  (len == 4 && !strncmp(p, "bf16", 4));
        if (ok) dt = p[0] == 'b' ? MF_DTYPE_BF16 : p[1] == '1' ? MF_DTYPE_F16 : MF_DTYPE_F32;
        for (int j = 0; ok && j < o->n_dt; j++) ok = o->dts[j] != dt;
        if (!ok || o->n_dt == 3)
            return mf_args_bad(err, "--dtype %.80s: want distinct f32, bf16 or f16, comma-separated", v);
        o->dts[o->n_dt++] = dt;
        if (!p[len]) return MF_ARGS_OK;
        p += len + 1;
    }
}

const mf_bench_def mf_bench_topk = {
    .name = "topk", .opts_size = sizeof(tk_opts),
    .about = "device top-k / top-p candidates (mf_topk) per row of logits: us, GB/s, bytes to the host",
    .common = MF_BENCH_OPT_SESSION | MF_BENCH_OPT_FULL, .full_with_lists = true, // --full: more unlisted values
    .defaults = &(const tk_opts){.dts = {MF_DTYPE_F32}, .n_dt = 1, .scale = 1.0f},
    .lists = (const mf_bench_list_opt[]){{"--vocab", 1, INT32_MAX, offsetof(tk_opts, vocab)},
                                         {"--batch", 1, INT32_MAX, offsetof(tk_opts, batch)},
                                         {"--k", 1, MF_TOPK_MAX, offsetof(tk_opts, k)},
                                         {NULL, 0, 0, 0}},
    .valued = (const char *const[]){"--scale", "--dtype", NULL},
    .option = tk_option, .help = tk_help, .run = tk_run,
    .warmup = {1, 10}, .iters = {5, 50},
};
