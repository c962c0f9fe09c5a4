// GEMM cases: c = act(alpha * a @ b + beta * c + bias).
//
// What every backend computes (src/cpu/gemm.c defines it; src/cuda/gemm/gemm.cu
// follows it on each of its paths): the k products summed in f32 (products
// of f16/bf16 values are exact in f32), times alpha, plus beta * c, plus the
// bias, each step rounded to f32; then GELU in f32; then ONE rounding to c's
// dtype. The CUDA paths differ only in where the f32 intermediates live:
//   plain / fused  cuBLASLt's registers (the epilogue runs on the f32 value);
//   in-place       f32 c holds alpha a@b + beta c (an f32 rounding) before the
//                  bias kernel adds the bias;
//   f32-scratch    an f32 scratch holds alpha a@b; the kernel adds beta c and
//                  the bias and stores c once (as the CPU).
// None stores an f16/bf16 intermediate, so the bound has no second rounding
// (the H100 run of ff6b134 found a fallback that did: round(alpha a@b + beta c)
// to bf16 before adding the bias, off by 13 ulp where an outlier bias cancels;
// the `cancel` cases below make that cancellation certain).
//
// Tolerance, per output element (i, j), with S = |alpha| sum_k |a_ik||b_kj|
// + |beta||c_ij| + |bias_j| the magnitude the sum is made of:
//     |c - ref| <= g' (k + 8) eps_f32 S + eps_c |ref| + tiny_c
//                  (+ 8 eps_f32 |pre| with GELU) (+ 2^-11 |pre| fused GELU on CUDA)
//   - (k + 8) eps_f32 S: the worst-case error of an f32 sum of k terms, plus
//     alpha, beta c, the bias and the in-place/scratch intermediate each
//     rounded once to f32. Accumulation must be f32: TF32 (10-bit) or f16
//     accumulation fails this, as it should.
//   - eps_c |ref|: the one rounding of the result to c's dtype (so a
//     truncating conversion, or a second rounding of a larger intermediate,
//     fails).
//   - g' = 1.2 bounds |d gelu/dx| (max 1.13), so errors before the GELU grow
//     at most that much; 8 eps_f32 |pre| covers the f32 GELU of the CPU and
//     of the CUDA epilogue kernel (mf_act's x sigmoid(2u), src/kernels/act_math.h).
//   - cuBLASLt documents no accuracy for its GELU epilogue. If it evaluates
//     tanh with tanh.approx.f32 (PTX ISA: relative error <= 2^-10.987, so
//     absolute <= 2^-10.98 on a value in [-1, 1]), gelu = x/2 (1 + tanh) is
//     off by <= |x|/2 2^-10.98 < 2^-11 |pre|: allowed on the fused path only
//     (the path is asked after the call). A GPU run whose fused GELU cases
//     show err/bound well below 1 without it lets it go.
// Inputs are uniform in [-1, 1) with one element in 64 scaled by 1e4 (f32,
// bf16) or 1e2 (f16: keeps f16 outputs in range). Most failures a kernel can
// have (wrong element, stride, batch, transpose, missing bias, NaN from an
// unread c) give errors of order S, thousands of times the bound; an f32 c
// also catches one dropped k term (|a b| ~ S / k > (k + 8) eps S).
#include <math.h>
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/cpu.h"
#include "harness.h"
#ifdef MF_HAVE_CUDA
#include "cuda/cuda_query.h"
#endif

typedef enum { BC_NONE, BC_A1, BC_B1, BC_B0 } gemm_bcast; // a batch 1, b batch 1, b batch stride 0
static const char *const bcast_names[] = {"none", "a1", "b1", "bstride0"};

// Section 6: the CUDA "gemv" path (off by default) is turned on for the call;
// GEMV_TAKEN: the call fits it and must take it; GEMV_FALLBACK: it does not
// fit (k not a multiple of 8, m > 8, an unaligned row, a strided a, a batch)
// and must stay on cuBLASLt. The CPU runs the same cases as the reference.
typedef enum { GEMV_NO, GEMV_TAKEN, GEMV_FALLBACK } gemm_gemv;
static const char *const gemv_names[] = {"", ",gemv=taken", ",gemv=fallback"};

typedef struct {
    mf_dtype dt, ct;          // a/b dtype, c (and bias) dtype
    int64_t batch;            // 0: 2-D tensors
    gemm_bcast bcast;
    int64_t m, n, k;
    bool ta, tb;              // a, b are transposed views of (k, m) / (n, k) storage
    int64_t pad_a, pad_b, pad_c; // extra elements per stored row: ld = cols + pad
    bool bias;
    bool bias_off;            // bias starts one element past a 256-byte boundary (under 16-byte alignment)
    bool cancel;              // bias_j = -(alpha (a@b)_0j + beta c_0j): row 0's result is far smaller than its terms
    mf_epilogue act;
    float alpha, beta;
    bool c_inter;             // batched c interleaved: batch b's row r at r * (batch * n + pad_c) + b * n
                              // (attention heads side by side in a token's row; batch stride < one matrix's span)
    gemm_gemv gemv;           // CUDA: run with the gemv path on, and which path must be taken
    mf_dtype wt;              // b's dtype when `mixed`: a 16-bit weight with f32 a and c (section 9)
    bool mixed;
    int64_t off_b;            // b (2-D) starts this many elements into its buffer (not 32-byte aligned)
} gemm_p;

static double gelu_ref(double x) {
    const double k = 0.7978845608028654; // sqrt(2/pi)
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

// A (rows, cols) operand, optionally batched, optionally a transposed view of
// (cols, rows) storage with `pad` extra elements per stored row; 2-D only:
// `off` elements into its buffer (every element of the buffer filled).
static th_buf *operand(th_ctx *ctx, mf_dtype dt, int nd, int64_t batch, int64_t batch_stride0, int64_t rows,
                       int64_t cols, bool trans, int64_t pad, int64_t off, mf_tensor *view) {
    int64_t srows = trans ? cols : rows, scols = trans ? rows : cols, ld = scols + pad;
    int64_t shape[3], stride[3];
    if (off) {
        const int64_t total = off + (srows - 1) * ld + scols, shape2[2] = {srows, scols}, stride2[2] = {ld, 1};
        th_buf *b = th_buf_new(ctx, dt, total);
        const mf_tensor all = th_view(ctx, b, 1, &total, NULL);
        th_fill(ctx, b, &all, NULL);
        *view = th_view(ctx, b, 2, shape2, stride2);
        view->data = (char *)view->data + off * (int64_t)mf_dtype_size(dt);
        if (trans) mf_tensor_transpose(view, 0, 1);
        return b;
    }
    if (nd == 3) {
        shape[0] = batch, shape[1] = srows, shape[2] = scols;
        stride[0] = batch_stride0 ? srows * ld : 0, stride[1] = ld, stride[2] = 1;
    } else {
        shape[0] = srows, shape[1] = scols;
        stride[0] = ld, stride[1] = 1;
    }
    th_buf *b;
    if (nd == 3 && !batch_stride0) { // broadcast by stride 0: storage for one matrix
        b = th_buf_new(ctx, dt, (srows - 1) * ld + scols);
        *view = th_view(ctx, b, nd, shape, stride);
    } else {
        b = th_tensor(ctx, dt, nd, shape, stride, view);
    }
    if (trans) mf_tensor_transpose(view, nd - 2, nd - 1);
    th_fill(ctx, b, view, NULL);
    return b;
}

static th_result run_gemm(th_ctx *ctx, const void *params) {
    const gemm_p *p = params;
    int nd = p->batch ? 3 : 2;
    int64_t batch = p->batch ? p->batch : 1, m = p->m, n = p->n, k = p->k;
    mf_gemm_args args = {.alpha = p->alpha, .beta = p->beta, .epilogue = p->act};
    int64_t ab = p->bcast == BC_A1 ? 1 : batch, bb = p->bcast == BC_B1 ? 1 : batch;
    th_buf *ba = operand(ctx, p->dt, nd, ab, 1, m, k, p->ta, p->pad_a, 0, &args.a);
    th_buf *bb_ = operand(ctx, p->mixed ? p->wt : p->dt, nd, bb, p->bcast != BC_B0, k, n, p->tb, p->pad_b, p->off_b,
                          &args.b);
    const int64_t b0 = p->off_b; // buffer offset of b's first element
    int64_t ldc = n + p->pad_c;
    int64_t cshape[3] = {batch, m, n}, cstride[3] = {m * ldc, ldc, 1};
    if (p->c_inter) cstride[0] = n, cstride[1] = batch * n + p->pad_c;
    th_buf *bc = nd == 3 ? th_tensor(ctx, p->ct, 3, cshape, cstride, &args.c)
                         : th_tensor(ctx, p->ct, 2, cshape + 1, cstride + 1, &args.c);
    if (p->beta != 0.0f) th_fill(ctx, bc, &args.c, NULL); // else c stays NaN: must not be read
    mf_tensor bias;
    th_buf *bbias = NULL;
    if (p->bias) {
        if (p->bias_off) {
            bbias = th_buf_new(ctx, p->ct, n + 1);
            const int64_t one = 1;
            bias = th_view(ctx, bbias, 1, &n, &one);
            bias.data = (char *)bias.data + mf_dtype_size(p->ct);
        } else {
            bbias = th_tensor(ctx, p->ct, 1, &n, NULL, &bias);
        }
        th_fill(ctx, bbias, &bias, NULL);
        args.bias = &bias;
    }
    const int64_t bias0 = p->bias_off ? 1 : 0; // buffer offset of bias[0]

    // Reference in double on the stored (rounded) inputs.
    int64_t total = batch * m * n;
    double *ref = th_scratch(ctx, (size_t)total * sizeof(double));
    double *bound = th_scratch(ctx, (size_t)total * sizeof(double));
    const double u32 = th_eps(MF_DTYPE_F32), uc = th_eps(p->ct), gp = p->act == MF_EPILOGUE_GELU ? 1.2 : 1.0;
    double *approx_gelu = p->act == MF_EPILOGUE_GELU ? th_scratch(ctx, (size_t)total * sizeof(double)) : NULL;
    const mf_tensor *A = &args.a, *B = &args.b, *C = &args.c;
    if (p->cancel) { // after the inputs are drawn: bias_j cancels row 0 of batch 0 up to its own rounding
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t q = 0; q < k; q++)
                acc += th_get(ba, q * A->stride[nd - 1]) *
                       th_get(bb_, b0 + q * B->stride[nd - 2] + j * B->stride[nd - 1]);
            double v = (double)p->alpha * acc;
            if (p->beta != 0.0f) v += (double)p->beta * th_get(bc, j);
            th_set(bbias, bias0 + j, -v);
        }
    }
    for (int64_t t = 0; t < batch; t++) {
        int64_t ao = nd == 3 && A->shape[0] > 1 ? t * A->stride[0] : 0;
        int64_t bo = nd == 3 && B->shape[0] > 1 ? t * B->stride[0] : 0;
        int64_t co = nd == 3 ? t * C->stride[0] : 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0, sabs = 0;
                for (int64_t q = 0; q < k; q++) {
                    double x = th_get(ba, ao + i * A->stride[nd - 2] + q * A->stride[nd - 1]);
                    double y = th_get(bb_, b0 + bo + q * B->stride[nd - 2] + j * B->stride[nd - 1]);
                    acc += x * y;
                    sabs += fabs(x * y);
                }
                double pre = (double)p->alpha * acc, S = fabs((double)p->alpha) * sabs;
                if (p->beta != 0.0f) {
                    double c0 = th_get(bc, co + i * C->stride[nd - 2] + j);
                    pre += (double)p->beta * c0;
                    S += fabs((double)p->beta * c0);
                }
                if (p->bias) {
                    pre += th_get(bbias, bias0 + j);
                    S += fabs(th_get(bbias, bias0 + j));
                }
                double r = p->act == MF_EPILOGUE_GELU ? gelu_ref(pre) : pre;
                double bnd = gp * (double)(k + 8) * u32 * S + uc * fabs(r) + th_tiny(p->ct);
                if (p->act == MF_EPILOGUE_GELU) bnd += 8 * u32 * fabs(pre);
                int64_t idx = (t * m + i) * n + j;
                ref[idx] = r;
                bound[idx] = bnd;
                if (approx_gelu) approx_gelu[idx] = 0x1.0p-11 * fabs(pre);
            }
    }

    const char *path = "cpu";
#ifdef MF_HAVE_CUDA
    const bool cuda = mf_backend_device(ctx->be) == MF_DEVICE_CUDA;
    if (cuda && p->mixed) // CUDA's GEMMs take operands of one dtype: a clear refusal
        return th_expect(ctx, mf_gemm(ctx->be, &args), MF_ERR_INVALID_ARG, "cuda backend needs them equal",
                         "mixed dtypes") ? TH_PASS : TH_FAIL;
    th_upload_all(ctx); // the call below runs before TH_CALL (which would upload first)
    bool gemv_was = false;
    if (cuda && p->gemv != GEMV_NO) {
        gemv_was = mf_cuda_gemm_gemv_on(ctx->be);
        mf_cuda_gemm_set_gemv(ctx->be, true);
    }
    const mf_status gst = mf_gemm(ctx->be, &args);
    if (cuda && p->gemv != GEMV_NO) mf_cuda_gemm_set_gemv(ctx->be, gemv_was);
    TH_CALL(ctx, gst);
    if (cuda) {
        path = mf_cuda_gemm_last_path(ctx->be);
        if (p->gemv != GEMV_NO && (strcmp(path, "gemv") == 0) != (p->gemv == GEMV_TAKEN)) {
            th_fail(ctx, " (path %s, want %s)", path, p->gemv == GEMV_TAKEN ? "gemv" : "a cuBLASLt path");
            return TH_FAIL;
        }
        if (p->gemv != GEMV_NO) printf("  .. [cuda] %s: path %s\n", ctx->case_name, path);
        if (p->bias || p->act != MF_EPILOGUE_NONE) printf("  .. [cuda] %s: path %s\n", ctx->case_name, path);
        if (approx_gelu && strcmp(path, "fused") == 0)
            for (int64_t e = 0; e < total; e++) bound[e] += approx_gelu[e];
    }
#else
    TH_CALL(ctx, mf_gemm(ctx->be, &args));
#endif
    if (th_check(ctx, bc, &args.c, ref, bound, "c")) return TH_PASS;
    th_fail(ctx, " (path %s)", path);
    return TH_FAIL;
}

// Every f16 / bf16 bit pattern through the GEMM, exactly: b holds pattern j
// in column j at row `pos` (0 and 9: an even and an odd element of a vector
// load, which the skinny loops widen differently; 16: the scalar tail of k = 17)
// and zeros elsewhere; every row of a is the unit row e_pos; so c (f32) must
// be pattern j widened, bit for bit (NaN: any NaN; -0 comes out +0 as 0 + -0
// does). b is a Linear weight (n, k) or row-major (k, n); n = 65541 also runs
// the last columns through the row-major loop's column tail. One row of a in
// b's dtype (the skinny loops), or 9 rows of f32 a (the widened panels
// before sgemm, as for a 16-bit weight on prefill).
typedef struct {
    mf_dtype dt;
    bool linear;
    int64_t pos;
    bool panel;
} widen_p;

static th_result run_gemm_widen(th_ctx *ctx, const void *params) {
    const widen_p *p = params;
    const int64_t n = 65541, k = 17, m = p->panel ? 9 : 1;
    mf_gemm_args args = {.alpha = 1.0f, .beta = 0.0f};
    const int64_t ashape[2] = {m, k};
    th_buf *ba = th_tensor(ctx, p->panel ? MF_DTYPE_F32 : p->dt, 2, ashape, NULL, &args.a);
    for (int64_t i = 0; i < m * k; i++) th_set(ba, i, i % k == p->pos ? 1.0 : 0.0);
    const int64_t bshape[2] = {p->linear ? n : k, p->linear ? k : n};
    th_buf *bb = th_tensor(ctx, p->dt, 2, bshape, NULL, &args.b);
    if (p->linear) mf_tensor_transpose(&args.b, 0, 1);
    uint16_t *h = (uint16_t *)bb->host;
    memset(h, 0, bb->bytes);
    double *ref = th_scratch(ctx, (size_t)(m * n) * sizeof(double));
    double *bound = th_scratch(ctx, (size_t)(m * n) * sizeof(double));
    for (int64_t j = 0; j < n; j++) {
        const uint16_t v = (uint16_t)(j & 0xffff);
        h[p->linear ? j * k + p->pos : p->pos * n + j] = v;
        for (int64_t i = 0; i < m; i++)
            ref[i * n + j] = p->dt == MF_DTYPE_F16 ? (double)mf_f16_to_f32(v) : (double)mf_bf16_to_f32(v);
    }
    const int64_t cshape[2] = {m, n};
    th_buf *bc = th_tensor(ctx, MF_DTYPE_F32, 2, cshape, NULL, &args.c);
#ifdef MF_HAVE_CUDA
    if (p->panel && mf_backend_device(ctx->be) == MF_DEVICE_CUDA) // mixed dtypes: the CPU only
        return th_expect(ctx, mf_gemm(ctx->be, &args), MF_ERR_INVALID_ARG, "cuda backend", "mixed") ? TH_PASS
                                                                                                    : TH_FAIL;
#endif
    TH_CALL(ctx, mf_gemm(ctx->be, &args));
    return th_check(ctx, bc, &args.c, ref, bound, "c") ? TH_PASS : TH_FAIL;
}

// A 16-bit Linear weight against f32 rows of a, m > 8, on the CPU's AVX-512
// kernel: rows [r0, r0 + mr) of a (mr > 8: the same kernel) passed alone
// give c's rows of the whole call bit for bit, on 1 thread and on all of
// them (a prompt's rows do not change with what runs beside them, nor with
// the thread count). The whole call against float64 first (the only check
// on the widened panels, whose bits do depend on the row count: the bitwise
// check fails there).
typedef struct {
    mf_dtype wt;
    int64_t m, n, k, r0, mr;
} rows_p;

static th_result run_gemm_rows(th_ctx *ctx, const void *params) {
    const rows_p *p = params;
    const int64_t m = p->m, n = p->n, k = p->k;
    mf_gemm_args args = {.alpha = 1.0f, .beta = 0.0f};
    const int64_t ashape[2] = {m, k}, bshape[2] = {n, k}, cshape[2] = {m, n}, c2shape[2] = {p->mr, n};
    th_buf *ba = th_tensor(ctx, MF_DTYPE_F32, 2, ashape, NULL, &args.a);
    th_buf *bb = th_tensor(ctx, p->wt, 2, bshape, NULL, &args.b);
    mf_tensor_transpose(&args.b, 0, 1);
    th_buf *bc = th_tensor(ctx, MF_DTYPE_F32, 2, cshape, NULL, &args.c);
    th_fill(ctx, ba, &args.a, NULL);
    th_fill(ctx, bb, &args.b, NULL);
#ifdef MF_HAVE_CUDA
    if (mf_backend_device(ctx->be) == MF_DEVICE_CUDA) // mixed dtypes: the CPU only
        return th_expect(ctx, mf_gemm(ctx->be, &args), MF_ERR_INVALID_ARG, "cuda backend", "mixed") ? TH_PASS
                                                                                                    : TH_FAIL;
#endif
    double *ref = th_scratch(ctx, (size_t)(m * n) * sizeof(double));
    double *bound = th_scratch(ctx, (size_t)(m * n) * sizeof(double));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0, sabs = 0;
            for (int64_t q = 0; q < k; q++) {
                const double x = th_get(ba, i * k + q), y = th_get(bb, j * k + q);
                acc += x * y, sabs += fabs(x * y);
            }
            ref[i * n + j] = acc;
            bound[i * n + j] = (double)(k + 8) * th_eps(MF_DTYPE_F32) * sabs + th_tiny(MF_DTYPE_F32);
        }
    TH_CALL(ctx, mf_gemm(ctx->be, &args));
    if (!th_check(ctx, bc, &args.c, ref, bound, "c")) return TH_FAIL;
    // The widened panels' sgemm (a CPU without AVX-512, MINFER_CPU_ISA=avx2)
    // sums a row differently at other row counts: the float64 check only.
    if (!mf_cpu_avx512()) return TH_PASS;
    double *same = th_scratch(ctx, (size_t)(p->mr * n) * sizeof(double));
    double *zero = th_scratch(ctx, (size_t)(p->mr * n) * sizeof(double));
    for (int64_t e = 0; e < p->mr * n; e++) same[e] = th_get(bc, p->r0 * n + e);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    for (int t = threads; t >= 1; t = t > 1 ? 1 : 0) {
#ifdef _OPENMP
        omp_set_num_threads(t);
#endif
        mf_gemm_args part = args;
        part.a.data = (char *)args.a.data + p->r0 * k * (int64_t)sizeof(float);
        part.a.shape[0] = p->mr;
        th_buf *bc2 = th_tensor(ctx, MF_DTYPE_F32, 2, c2shape, NULL, &part.c);
        th_upload_all(ctx); // before the call: TH_CALL's upload would poison c again
        const mf_status st = mf_gemm(ctx->be, &part);
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        TH_CALL(ctx, st);
        if (!th_check(ctx, bc2, &part.c, same, zero, "c of the rows alone")) return th_fail(ctx, " (%d threads)", t);
    }
    return TH_PASS;
}

static void add_gemm(th_list *l, const gemm_p *p) {
    char batch[48] = "";
    if (p->batch) snprintf(batch, sizeof batch, ",batch=%lld,bcast=%s", (long long)p->batch, bcast_names[p->bcast]);
    char pads[64] = "";
    if (p->pad_a || p->pad_b || p->pad_c)
        snprintf(pads, sizeof pads, ",pad_a=%lld,pad_b=%lld,pad_c=%lld", (long long)p->pad_a, (long long)p->pad_b,
                 (long long)p->pad_c);
    const char *bias = !p->bias ? "0" : p->cancel ? (p->bias_off ? "cancel_off" : "cancel") : p->bias_off ? "off" : "1";
    char dt[32], off[32] = "";
    snprintf(dt, sizeof dt, p->mixed ? "f32,b=%s" : "%s", mf_dtype_name(p->mixed ? p->wt : p->dt));
    if (p->off_b) snprintf(off, sizeof off, ",off_b=%lld", (long long)p->off_b);
    th_add(l, run_gemm, p, sizeof *p, "gemm(dtype=%s,c=%s,m=%lld,n=%lld,k=%lld,ta=%d,tb=%d%s%s%s%s,bias=%s,act=%s,alpha=%g,beta=%g%s)",
           dt, mf_dtype_name(p->ct), (long long)p->m, (long long)p->n, (long long)p->k, th_b(p->ta), th_b(p->tb), batch, p->c_inter ? ",c_interleaved=1" : "", pads, off, bias,
           p->act == MF_EPILOGUE_GELU ? "gelu" : "none", (double)p->alpha, (double)p->beta, gemv_names[p->gemv]);
}

// (a dtype, c dtype): c is a's dtype or f32.
static const mf_dtype combos[][2] = {{MF_DTYPE_F32, MF_DTYPE_F32}, {MF_DTYPE_F16, MF_DTYPE_F16},
                                     {MF_DTYPE_F16, MF_DTYPE_F32}, {MF_DTYPE_BF16, MF_DTYPE_BF16},
                                     {MF_DTYPE_BF16, MF_DTYPE_F32}};
#define N_COMBOS (int)(sizeof combos / sizeof combos[0])

void th_cases_gemm(th_list *l) {
    // 1. Shapes x transposes x dtypes; odd sizes, some with padded rows.
    static const int64_t shapes[][3] = {{1, 1, 1},     {7, 7, 7},    {1, 33, 129}, {33, 1, 129},
                                        {7, 129, 33},  {33, 257, 7}, {129, 33, 257}, {257, 7, 33}};
    int v = 0;
    for (int c = 0; c < N_COMBOS; c++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int t = 0; t < 4; t++, v++) {
                gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = shapes[s][0], .n = shapes[s][1],
                            .k = shapes[s][2], .ta = t & 1, .tb = t >> 1, .alpha = 1.0f, .beta = 0.0f};
                if (v % 3 == 1) p.pad_a = 3, p.pad_c = 5;
                if (v % 3 == 2) p.pad_b = 1 + v % 7;
                add_gemm(l, &p);
            }

    // 2. Epilogues and alpha/beta: bias, GELU, beta != 0 reading c, beta == 0 on a NaN c.
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-1.5f, 0.25f}};
    v = 0;
    for (int c = 0; c < N_COMBOS; c++)
        for (int e = 0; e < 3; e++)
            for (int a = 0; a < 3; a++, v++) {
                gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = 37, .n = 65, .k = 129, .ta = v & 1,
                            .tb = (v >> 1) & 1, .bias = e != 1, .act = e ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE,
                            .alpha = ab[a][0], .beta = ab[a][1], .pad_c = v % 2 ? 3 : 0};
                add_gemm(l, &p);
            }
    for (int c = 0; c < N_COMBOS; c++) { // alpha alone (c NaN), no epilogue
        gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = 33, .n = 33, .k = 33, .alpha = 0.5f, .beta = 0.0f};
        add_gemm(l, &p);
    }

    // 3. Batched, with every kind of broadcast batch.
    v = 0;
    for (int c = 0; c < N_COMBOS; c++)
        for (int b = 0; b < 4; b++, v++) {
            gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .batch = 3, .bcast = (gemm_bcast)b, .m = 33, .n = 7,
                        .k = 65, .ta = v & 1, .tb = (v >> 1) & 1, .alpha = 1.0f, .beta = 0.0f,
                        .pad_a = v % 3 == 0 ? 2 : 0, .pad_c = v % 2 ? 1 : 0};
            add_gemm(l, &p);
        }
    for (int c = 0; c < N_COMBOS; c++) { // and every epilogue at once
        gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .batch = 3, .bcast = BC_B0, .m = 37, .n = 65, .k = 129,
                    .ta = 1, .tb = 0, .bias = true, .act = MF_EPILOGUE_GELU, .alpha = 0.75f, .beta = -0.5f};
        add_gemm(l, &p);
    }

    // 4. Linear layers: x (tokens, in) @ W^T with W a torch weight (out, in),
    //    i.e. b is the transposed view of (n, k) storage; decode (1 token) and prefill.
    static const int64_t lin[][3] = {{1, 65, 129}, {37, 96, 129}, {37, 33, 257}, {1, 257, 257}};
    for (int c = 0; c < N_COMBOS; c++)
        for (size_t s = 0; s < sizeof lin / sizeof lin[0]; s++) {
            gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = lin[s][0], .n = lin[s][1], .k = lin[s][2],
                        .tb = true, .bias = s % 2 == 1, .act = s == 2 ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE,
                        .alpha = 1.0f, .beta = 0.0f};
            add_gemm(l, &p);
        }

    for (int c = 0; c < N_COMBOS; c++) // one row (decode's GEMV) with alpha, beta != 0 and the epilogues, a padded c
        for (int ta = 0; ta < 2; ta++) {
            gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = 1, .n = 65, .k = 129, .ta = ta, .tb = true,
                        .bias = true, .act = ta ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE, .alpha = -1.5f, .beta = 0.25f,
                        .pad_c = 3};
            add_gemm(l, &p);
        }

    // 5. Leading dimensions and pointers aligned to 16 bytes (n = 64, k = 128;
    //    a transposed a, stored (128, 37), padded to ld 40): what cuBLASLt's
    //    fused epilogue needs, so on CUDA these take the
    //    "fused" path while the odd shapes above mostly take the unfused ones;
    //    `cancel` makes a double rounding of alpha a@b + beta c certain to
    //    show; bias_off (a bias 2 or 4 bytes past alignment) takes the unfused
    //    path on purpose. Each dtype pair, bias / GELU / both, alpha / beta.
    v = 0;
    for (int c = 0; c < N_COMBOS; c++)
        for (int e = 0; e < 3; e++)
            for (int a = 0; a < 3; a++, v++) {
                gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = 37, .n = 64, .k = 128, .ta = v & 1,
                            .pad_a = (v & 1) * 3, .tb = (v >> 1) & 1, .bias = e != 1,
                            .act = e ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE,
                            .alpha = ab[a][0], .beta = ab[a][1], .pad_c = v % 2 ? 8 : 0, .cancel = e != 1 && a != 1};
                add_gemm(l, &p);
            }
    for (int c = 0; c < N_COMBOS; c++)
        for (int odd = 0; odd < 2; odd++) { // bias under 16-byte alignment, aligned and odd shapes, cancelling
            gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = 37, .n = odd ? 65 : 64, .k = odd ? 129 : 128,
                        .tb = true, .bias = true, .bias_off = true, .cancel = true,
                        .act = odd ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE, .alpha = 1.0f, .beta = odd ? 0.5f : 0.0f};
            add_gemm(l, &p);
        }
    for (int c = 0; c < N_COMBOS; c++) { // batched, aligned, every epilogue, cancelling
        gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .batch = 3, .bcast = BC_B0, .m = 37, .n = 64, .k = 128,
                    .ta = 1, .pad_a = 3, .tb = 0, .bias = true, .cancel = true, .act = MF_EPILOGUE_GELU, .alpha = 0.75f,
                    .beta = -0.5f};
        add_gemm(l, &p);
    }
    for (int c = 0; c < N_COMBOS; c++) { // interleaved c batches: attention's per-head P.V into a token's row
        gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .batch = 4, .bcast = BC_NONE, .m = 37, .n = 16, .k = 33,
                    .ta = 0, .tb = 0, .c_inter = true, .pad_c = c % 2 ? 8 : 0, .alpha = 1.0f, .beta = c % 2 ? 0.5f : 0.0f};
        add_gemm(l, &p);
    }
    for (int c = 0; c < N_COMBOS; c++) { // the odd shape of section 2 with a cancelling bias (the H100 failures)
        gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = 37, .n = 65, .k = 129, .ta = 1, .tb = 1,
                    .pad_c = 3, .bias = true, .cancel = true, .alpha = -1.5f, .beta = 0.25f};
        add_gemm(l, &p);
    }

    // 6. The decode path (CUDA "gemv", turned on per call): m = 1..8, b a
    //    Linear weight (transposed view), odd n (a partial last warp), k a
    //    multiple of 8 but not of the kernel's 1024-element step (tails), one
    //    and several k-splits (on 132 SMs: k = 1032 -> 2, 2056 -> 3, 4104 -> 5,
    //    8200 -> 9, the last split 8 elements long),
    //    bias (also under 16-byte alignment), GELU, alpha, beta != 0, f32 c,
    //    a padded weight row (ld = k + 8). Then shapes it must refuse.
    static const struct {
        int64_t m, n, k, pad_b;
        bool bias, bias_off;
        mf_epilogue act;
        float alpha, beta;
    } gv[] = {
        {1, 65, 136, 0, false, false, MF_EPILOGUE_NONE, 1.0f, 0.0f},
        {2, 33, 4104, 0, true, false, MF_EPILOGUE_NONE, 1.0f, 0.0f},
        {3, 129, 520, 8, true, true, MF_EPILOGUE_GELU, 1.0f, 0.5f},
        {5, 7, 1032, 0, false, false, MF_EPILOGUE_GELU, -1.5f, 0.25f},
        {8, 17, 8200, 0, true, false, MF_EPILOGUE_NONE, 0.75f, -0.5f},
        {8, 257, 2056, 8, true, false, MF_EPILOGUE_GELU, 1.0f, 1.0f},
        {1, 1, 8, 0, true, false, MF_EPILOGUE_NONE, 1.0f, 0.0f},
    };
    v = 0;
    for (int c = 1; c < N_COMBOS; c++) // f16/bf16 operands, c 16-bit or f32
        for (size_t s = 0; s < sizeof gv / sizeof gv[0]; s++, v++) {
            gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = gv[s].m, .n = gv[s].n, .k = gv[s].k,
                        .tb = true, .pad_b = gv[s].pad_b, .pad_c = v % 2 ? 3 : 0, .bias = gv[s].bias,
                        .bias_off = gv[s].bias_off, .act = gv[s].act, .alpha = gv[s].alpha, .beta = gv[s].beta,
                        .gemv = GEMV_TAKEN};
            add_gemm(l, &p);
        }
    for (int c = 1; c < N_COMBOS; c++) {
        const gemm_p base = {.dt = combos[c][0], .ct = combos[c][1], .m = 4, .n = 33, .k = 136, .tb = true,
                             .bias = true, .act = MF_EPILOGUE_GELU, .alpha = 1.0f, .beta = 0.5f, .gemv = GEMV_FALLBACK};
        gemm_p p = base;
        p.k = 129; // k not a multiple of 8
        add_gemm(l, &p);
        p = base, p.m = 9; // more rows than the kernel takes
        add_gemm(l, &p);
        p = base, p.pad_a = 3; // a's rows not 16-byte aligned
        add_gemm(l, &p);
        p = base, p.pad_b = 3; // the weight's rows not 16-byte aligned
        add_gemm(l, &p);
        p = base, p.tb = false; // b row-major: its columns are strided
        add_gemm(l, &p);
        p = base, p.ta = true; // a column-major: its rows are strided
        add_gemm(l, &p);
        p = base, p.batch = 2, p.bcast = BC_B0; // batched
        add_gemm(l, &p);
    }

    // 7. Decode-shaped layers (m = 1..8 rows: the CPU's skinny loops), b a
    //    torch weight (transposed view) or row-major (GPT-2's Conv1D), every
    //    dtype pair: every row count, k with and without a tail under 8, k over
    //    several 128-row chunks of a row-major b (129, 257, 771: a last chunk of
    //    1 or 3 rows), n = 1, n with a column tail, padded
    //    a / b / c rows, a column-major a, beta != 0 (c read) and beta == 0 on
    //    a NaN c, bias, GELU, negative alpha; then batched with one shared weight.
    static const int64_t sk[][3] = {{2, 130, 64}, {3, 65, 771}, {4, 200, 8}, {5, 64, 129}, {6, 1, 16},
                                    {7, 333, 40}, {8, 129, 257}, {1, 1100, 33}, {8, 530, 19}};
    v = 0;
    for (int c = 0; c < N_COMBOS; c++)
        for (int t = 0; t < 2; t++)
            for (size_t s = 0; s < sizeof sk / sizeof sk[0]; s++, v++) {
                gemm_p p = {.dt = combos[c][0], .ct = combos[c][1], .m = sk[s][0], .n = sk[s][1], .k = sk[s][2],
                            .tb = t == 0, .ta = v % 5 == 4, .pad_a = s % 2 ? 3 : 0, .pad_b = s % 3 ? 5 : 0,
                            .pad_c = s % 2 ? 0 : 2, .bias = s % 2 == 0,
                            .act = s % 3 == 1 ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE, .alpha = s % 2 ? -1.5f : 1.0f,
                            .beta = s % 3 == 2 ? 0.5f : 0.0f};
                add_gemm(l, &p);
            }
    for (int c = 0; c < N_COMBOS; c += 2)
        for (int t = 0; t < 2; t++) {
            gemm_p pb = {.dt = combos[c][0], .ct = combos[c][1], .batch = 3, .bcast = BC_B0, .m = 4, .n = 70, .k = 65,
                         .tb = t == 0, .bias = true, .alpha = 1.0f, .beta = 0.0f};
            add_gemm(l, &pb);
        }

    // 8. Every f16 / bf16 value widened exactly: the decode path (above) and
    //    the prefill panels of a 16-bit weight (section 9).
    for (int d = 0; d < 2; d++)
        for (int lin = 0; lin < 2; lin++)
            for (int pos = 0; pos <= 16; pos += pos ? 7 : 9)
                for (int panel = 0; panel < 2; panel++) {
                    const widen_p w = {.dt = d ? MF_DTYPE_BF16 : MF_DTYPE_F16, .linear = lin, .pos = pos,
                                       .panel = panel};
                    th_add(l, run_gemm_widen, &w, sizeof w, "gemm_widen(dtype=%s,b=%s,k_index=%lld,a=%s)",
                           mf_dtype_name(w.dt), lin ? "linear" : "row_major", (long long)pos,
                           panel ? "f32x9" : "same");
                }

    // 9. A 16-bit weight b with f32 a and c (the CPU keeps a checkpoint's
    //    bf16/f16 weights; CUDA refuses): the skinny loops (m <= 8) and the
    //    panels of widened columns before sgemm (m > 8), one panel and several
    //    (8200 columns of k = 257 make one panel per thread on 2..4 threads,
    //    the last one narrower: 4112 + 4088 on 2), both b layouts, a
    //    column-major a, padded rows,
    //    bias, GELU, beta; batched with a shared weight.
    static const int64_t mx[][3] = {{1, 129, 65}, {3, 70, 33}, {8, 33, 129}, {9, 65, 129}, {37, 200, 257},
                                    {9, 8200, 257}};
    v = 0;
    for (int w = 0; w < 2; w++)
        for (int t = 0; t < 2; t++)
            for (size_t s = 0; s < sizeof mx / sizeof mx[0]; s++, v++) {
                gemm_p p = {.dt = MF_DTYPE_F32, .ct = MF_DTYPE_F32, .mixed = true,
                            .wt = w ? MF_DTYPE_BF16 : MF_DTYPE_F16, .m = mx[s][0], .n = mx[s][1], .k = mx[s][2],
                            .tb = t == 0, .ta = v % 3 == 1, .pad_a = s % 2 ? 3 : 0, .pad_b = s % 3 ? 5 : 0,
                            .pad_c = s % 2 ? 0 : 2, .bias = s % 2 == 0,
                            .act = s % 3 == 1 ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE, .alpha = s % 2 ? -1.5f : 1.0f,
                            .beta = s % 3 == 2 ? 0.5f : 0.0f};
                add_gemm(l, &p);
            }
    for (int t = 0; t < 2; t++)
        for (int m = 4; m <= 40; m += 36) {
            gemm_p pb = {.dt = MF_DTYPE_F32, .ct = MF_DTYPE_F32, .mixed = true, .wt = MF_DTYPE_BF16, .batch = 3,
                         .bcast = t ? BC_B0 : BC_NONE, .m = m, .n = 70, .k = 65, .tb = t == 0, .bias = true,
                         .alpha = 1.0f, .beta = 0.0f};
            add_gemm(l, &pb);
        }

    // 10. b's first element off a 32-byte boundary, its rows 32-byte multiples:
    //     the CPU's row-major skinny loop starts its 16-column tiles at the
    //     first boundary (3 elements into a 16-byte aligned host buffer: f32
    //     1 or 5 columns before it, f16/bf16 5 or 13), so some columns
    //     precede the tiles and some follow; k = 129 spans two of its k
    //     chunks. A Linear weight (tb) at the same offsets.
    static const mf_dtype od[] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16};
    for (int d = 0; d < 3; d++)
        for (int t = 0; t < 2; t++)
            for (int m = 1; m <= 8; m += m < 3 ? 2 : 5) {
                gemm_p po = {.dt = MF_DTYPE_F32, .ct = MF_DTYPE_F32, .mixed = d > 0, .wt = od[d], .m = m,
                             .n = d ? 80 : 72, .k = 129, .tb = t == 1, .off_b = 3, .bias = m == 3, .alpha = 1.0f,
                             .beta = m == 8 ? 0.5f : 0.0f};
                add_gemm(l, &po);
            }

    // 11. f32 GEMMs big enough for the CPU to split c's columns over its
    //     threads (m n k >= 2^19, n >= 64: one single-threaded BLAS call per
    //     panel, panels cut at multiples of 16): one row (sgemv, a plain or
    //     column-major a: a strided row) and 37 rows, b a Linear weight or
    //     row-major, odd n, padded rows, beta != 0, alpha, bias, GELU.
    static const int64_t big[][3] = {{1, 1031, 517}, {37, 203, 129}, {1, 77, 8200}};
    v = 0;
    for (size_t s = 0; s < sizeof big / sizeof big[0]; s++)
        for (int t = 0; t < 4; t++, v++) {
            gemm_p pf = {.dt = MF_DTYPE_F32, .ct = MF_DTYPE_F32, .m = big[s][0], .n = big[s][1], .k = big[s][2],
                         .ta = t & 1, .tb = t >> 1, .pad_a = v % 3 == 1 ? 3 : 0, .pad_b = v % 3 == 2 ? 5 : 0,
                         .pad_c = v % 2 ? 7 : 0, .bias = t == 3, .act = t == 2 ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE,
                         .alpha = t == 1 ? -0.75f : 1.0f, .beta = t >= 2 ? 0.5f : 0.0f};
            add_gemm(l, &pf);
        }

    // 12. A 16-bit Linear weight against f32 rows of a, m > 8, at the blocks
    //     of the CPU's AVX-512 kernel (src/cpu/gemm_avx512.c; elsewhere the
    //     widened panels): k past one 1024-key block with a tail of k % 32
    //     (a masked load), k < 32, m past one 128-row block (a last block of
    //     5 rows, 4-row tiles with 1 row), n past a thread's 64-row blocks
    //     with a tail of n % 4, n < 64 (one thread); beta, alpha, bias,
    //     padded rows. Then rows of a alone, bit for bit.
    static const int64_t w16[][3] = {{133, 131, 2100}, {12, 9, 1057}, {9, 200, 31}, {37, 64, 96}};
    v = 0;
    for (int w = 0; w < 2; w++)
        for (size_t s = 0; s < sizeof w16 / sizeof w16[0]; s++, v++) {
            gemm_p pw = {.dt = MF_DTYPE_F32, .ct = MF_DTYPE_F32, .mixed = true,
                         .wt = w ? MF_DTYPE_BF16 : MF_DTYPE_F16, .m = w16[s][0], .n = w16[s][1], .k = w16[s][2],
                         .tb = true, .pad_a = v % 2 ? 3 : 0, .pad_b = v % 3 == 1 ? 5 : 0, .pad_c = v % 2 ? 0 : 2,
                         .bias = s == 1, .alpha = s == 2 ? -1.5f : 1.0f, .beta = s == 0 || s == 3 ? 0.5f : 0.0f};
            add_gemm(l, &pw);
        }
    static const rows_p rp[] = {{MF_DTYPE_BF16, 133, 70, 1100, 61, 11}, {MF_DTYPE_F16, 40, 131, 300, 3, 9},
                                {MF_DTYPE_BF16, 20, 64, 64, 9, 9}};
    for (size_t i = 0; i < sizeof rp / sizeof rp[0]; i++)
        th_add(l, run_gemm_rows, &rp[i], sizeof rp[i], "gemm(rows_alone,dtype=f32,b=%s,m=%lld,n=%lld,k=%lld,rows=%lld+%lld)",
               mf_dtype_name(rp[i].wt), (long long)rp[i].m, (long long)rp[i].n, (long long)rp[i].k,
               (long long)rp[i].r0, (long long)rp[i].mr);
}
