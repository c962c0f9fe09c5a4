// CPU GEMM: OpenBLAS sgemm per batch; f16/bf16 operands are widened to f32
// first (the CPU computes in f32; a 16-bit b, a weight kept in its
// checkpoint's dtype, in panels of columns), then bias and GELU in one pass over c
// (GELU: mf_act's tanh form x sigmoid(2u), vectorised: src/cpu/vmath.h).
// Calls with m <= 8 rows (decode steps) take the skinny loops below instead;
// a 16-bit Linear weight against more rows of f32 a takes the AVX-512
// kernel of gemm_avx512.c where the CPU has it (no widened panels).
#include <cblas.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "cpu/cpu.h"
#include "cpu/skinny.h"
#include "cpu/team.h"
#include "cpu/vmath.h"
#include "kernels/mat_layout.h"

// ---- skinny GEMM: m <= 8 rows of a (decode steps) ------------------------------------
// OpenBLAS's sgemm packs b on every call: at m = 2..8 it streamed a weight at
// 4-6 GB/s on the dev VM, against sgemv's 14-18 at m = 1 (docs/notes/cpu.md).
// These loops read b once for all m rows, in its own dtype (f16/bf16 widened
// in registers, exactly), 16 elements per load, with 8-lane vectors:
// GCC/clang vector extensions, AVX2 in the x86-64-v3 clone and two SSE
// halves in the baseline. Products are added per lane in k order, then the
// lanes in a fixed tree, so both clones give the same bits (no FP
// contraction under -std=c11). The register kernels (sk_nt, sk_nn_tile),
// shared with decode attention: src/cpu/skinny.h.
enum {
    SK_KB = 8,    // row-major b: rows per panel (8 sequential streams, then the next 8)
    SK_WB = 16,   // b a Linear weight: weight rows per task
    SK_KC = 128,  // b row-major: rows per chunk of k (its own partial sums)
};

// Columns of a row-major b at p (row stride ld_bytes, element size es,
// n columns) before its first 32-byte boundary, when every row has the same
// offset from one: the 16-column tiles then start there and no load of 16
// elements spans two cache lines. (A safetensors file only aligns its data
// to 8 bytes. On the dev VM a bf16 768-column b at 8 rows ran 15-40% slower
// from DRAM at an offset of 8 or 16 bytes.) Else 0.
V8_INLINE int64_t sk_head(const char *p, int64_t ld_bytes, int64_t es, int64_t n) {
    const int64_t off = (int64_t)((uintptr_t)p % 32);
    if (ld_bytes % 32 || off % es) return 0;
    const int64_t h = (32 - off) % 32 / es;
    return h < n ? h : n;
}

// b row-major (k, n): adds a @ b into c's columns [j0, j1) for G1 + G2 rows
// of a (sk_gemm passes all columns of a chunk of k rows). Panels of SK_KB
// rows (SK_KB sequential streams), the sums kept in c; the second group of
// rows finds the panel's 16 columns in L1. Tiles of 16 columns from the
// first 32-byte boundary (sk_head); the columns before and after them one
// at a time.
V8_INLINE void sk_nn(const int G1, const int G2, const mf_dtype dt, int64_t k, const float *a, int64_t lda,
                     const char *b, int64_t ldb, float *c, int64_t ldc, int64_t j0, int64_t j1) {
    const int64_t es = dt == MF_DTYPE_F32 ? 4 : 2;
    const int64_t h = j0 + sk_head(b + j0 * es, ldb * es, es, j1 - j0), wv = (j1 - h) / SK_NB * SK_NB;
    for (int64_t i0 = 0; i0 < k; i0 += SK_KB) {
        const int64_t i1 = i0 + SK_KB < k ? i0 + SK_KB : k;
        for (int64_t j = h; j < h + wv; j += SK_NB) {
            sk_nn_tile(G1, dt, i0, i1, a, lda, b, ldb, c, ldc, j);
            if (G2) sk_nn_tile(G2, dt, i0, i1, a + G1 * lda, lda, b, ldb, c + G1 * ldc, ldc, j);
        }
        for (int64_t j = j0; j < j1; j++) { // the columns outside the tiles
            if (j == h) j += wv;
            if (j == j1) break;
            for (int64_t i = i0; i < i1; i++) {
                const float bv = v8_load1(b, dt, i * ldb + j);
                for (int r = 0; r < G1 + G2; r++) c[r * ldc + j] += a[r * lda + i] * bv;
            }
        }
    }
}

// One task of the skinny GEMM: columns [j0, j1) of c for all m rows.
// Instantiated per row count and b dtype, so that every loop over rows and
// lanes has a constant trip count and the accumulators stay in registers.
#define SK_DT(CALL)                                                                                         \
    switch (dt) {                                                                                           \
    case MF_DTYPE_F16: { const mf_dtype d = MF_DTYPE_F16; CALL; } break;                                   \
    case MF_DTYPE_BF16: { const mf_dtype d = MF_DTYPE_BF16; CALL; } break;                                 \
    default: { const mf_dtype d = MF_DTYPE_F32; CALL; } break;                                             \
    }
MF_CPU_HOT static void sk_task(bool linear, mf_dtype dt, int64_t m, int64_t k, const float *a, int64_t lda,
                               const char *b, int64_t ldb, float alpha, float beta, float *c, int64_t ldc,
                               int64_t j0, int64_t j1) {
    if (linear) { // passes of <= 4 rows (5..8: two balanced ones; the second finds W's rows in cache)
        const int64_t half = m > SK_ROWS ? (m + 1) / 2 : m;
        for (int64_t r0 = 0; r0 < m; r0 += half) {
            const float *ar = a + r0 * lda;
            float *cr = c + r0 * ldc;
            switch (m - r0 < half ? m - r0 : half) {
            case 1: SK_DT(sk_nt(1, d, k, ar, lda, b, ldb, alpha, beta, cr, ldc, j0, j1)) break;
            case 2: SK_DT(sk_nt(2, d, k, ar, lda, b, ldb, alpha, beta, cr, ldc, j0, j1)) break;
            case 3: SK_DT(sk_nt(3, d, k, ar, lda, b, ldb, alpha, beta, cr, ldc, j0, j1)) break;
            default: SK_DT(sk_nt(4, d, k, ar, lda, b, ldb, alpha, beta, cr, ldc, j0, j1)) break;
            }
        }
        return;
    }
    switch (m) { // (G1, G2): two groups of <= 4 rows
    case 1: SK_DT(sk_nn(1, 0, d, k, a, lda, b, ldb, c, ldc, j0, j1)) break;
    case 2: SK_DT(sk_nn(2, 0, d, k, a, lda, b, ldb, c, ldc, j0, j1)) break;
    case 3: SK_DT(sk_nn(3, 0, d, k, a, lda, b, ldb, c, ldc, j0, j1)) break;
    case 4: SK_DT(sk_nn(4, 0, d, k, a, lda, b, ldb, c, ldc, j0, j1)) break;
    case 5: SK_DT(sk_nn(3, 2, d, k, a, lda, b, ldb, c, ldc, j0, j1)) break;
    case 6: SK_DT(sk_nn(3, 3, d, k, a, lda, b, ldb, c, ldc, j0, j1)) break;
    case 7: SK_DT(sk_nn(4, 3, d, k, a, lda, b, ldb, c, ldc, j0, j1)) break;
    default: SK_DT(sk_nn(4, 4, d, k, a, lda, b, ldb, c, ldc, j0, j1)) break;
    }
}
#undef SK_DT

#if MF_CPU_AVX2_KERNELS
typedef struct {
    int64_t m;
    mf_dtype dt;
    int64_t n, k;
    const float *a; // (m, k), row stride lda
    int64_t lda;
    const char *w; // W (n, k), row stride ldw elements
    int64_t ldw;
    float alpha, beta;
    float *c; // (m, n), row stride ldc
    int64_t ldc;
    _Atomic int64_t next; // W's first row not yet taken
} sk_job;

// Take W's rows in guided pieces (each 1 / (2 nt) of what is left, at least
// 64 rows) until none are left: the threads finish together whichever one
// started late or read slower (a static half each left one spinning 1-3% of
// a SmolLM2 decode step; perf). A row's bits do not depend on its piece.
static void sk_part(void *arg, int t, int nt) {
    (void)t;
    sk_job *j = arg;
    int64_t r0 = atomic_load_explicit(&j->next, memory_order_relaxed);
    while (r0 < j->n) {
        int64_t len = (j->n - r0) / (2 * nt);
        len = len < 64 ? 64 : len;
        const int64_t r1 = r0 + len < j->n ? r0 + len : j->n;
        if (!atomic_compare_exchange_weak_explicit(&j->next, &r0, r1, memory_order_relaxed, memory_order_relaxed))
            continue; // r0 is now the current value
        mf_cpu_sk_nt_avx2(j->m, j->dt, j->k, j->a, j->lda, j->w, j->ldw, j->alpha, j->beta, j->c, j->ldc, r0, r1);
        r0 = atomic_load_explicit(&j->next, memory_order_relaxed);
    }
}
#endif

// c (m <= 8 rows, f32, row stride ldc) = alpha a @ b + beta c; a f32 row-major
// (m, k), in sk order for a bf16 Linear weight (sk_order_rows); b (k, n)
// in dtype dt: a Linear weight W (n, k) (linear) or row-major. A Linear
// weight: tasks of 16 weight rows. Row-major: chunks of SK_KC rows of b (a
// run of whole rows, contiguous: one sequential stream per thread, where a
// split of the columns read 0.75-1.5 KB pieces of each row), each summed
// into its own (m, n) f32 partial in part (sk_part_floats), then the
// partials added in chunk order: the same bits for any thread count.
static void sk_gemm(bool linear, mf_dtype dt, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                    const void *b, int64_t ldb, float alpha, float beta, float *c, int64_t ldc, float *part) {
#if MF_CPU_AVX2_KERNELS
    // The AVX2 kernels: guided pieces of W's rows, each read as stripes side
    // by side (skinny_avx2.c); tasks of 16 rows kept the streams adjacent
    // and read at 81-84% of the read roof where stripes read at 84-94%
    // (TinyLlama shapes, `bench gemv --shapes tinyllama --m 1`).
    // On the hot team (team.h): a decode step runs ~130 of these, 80-400 us each.
    if (linear && mf_cpu_avx2()) {
        sk_job j = {m, dt, n, k, a, lda, (const char *)b, ldb, alpha, beta, c, ldc, 0};
        mf_cpu_team_run(sk_part, &j);
        return;
    }
#endif
    if (linear) {
        const int64_t tasks = (n + SK_WB - 1) / SK_WB;
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t j0 = t * SK_WB, j1 = j0 + SK_WB < n ? j0 + SK_WB : n;
            sk_task(true, dt, m, k, a, lda, (const char *)b, ldb, alpha, beta, c, ldc, j0, j1);
        }
        return;
    }
    const int64_t chunks = (k + SK_KC - 1) / SK_KC, es = (int64_t)mf_dtype_size(dt);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t q = 0; q < chunks; q++) {
            const int64_t i0 = q * SK_KC, kc = k - i0 < SK_KC ? k - i0 : SK_KC;
            float *pq = part + q * m * n;
            memset(pq, 0, (size_t)(m * n) * sizeof(float));
            sk_task(false, dt, m, kc, a + i0, lda, (const char *)b + i0 * ldb * es, ldb, alpha, beta, pq, n, 0, n);
        }
        // the columns of sk_nn's tiles, in sk order for a bf16 b: [h, h + nsk)
        const int64_t h = sk_head((const char *)b, ldb * es, es, n);
        const int64_t nsk = v8_sk(dt) ? (n - h) / SK_NB * SK_NB : 0;
#pragma omp for schedule(static)
        for (int64_t e = 0; e < m * n; e++) { // c = alpha (partials in chunk order) + beta c
            const int64_t r = e / n, j = e % n, src = r * n + (j >= h && j - h < nsk ? h + v8_pos(j - h) : j);
            float sum = part[src];
            for (int64_t q = 1; q < chunks; q++) sum += part[q * m * n + src];
            float *ce = c + r * ldc + j;
            *ce = beta == 0.0f ? alpha * sum : alpha * sum + beta * *ce;
        }
    }
}

// f32 elements of sk_gemm's partial sums for a row-major b.
static int64_t sk_part_floats(int64_t m, int64_t n, int64_t k) { return (k + SK_KC - 1) / SK_KC * m * n; }

// Widen matrix `bt` of view t (rows, cols, with layout l) to packed row-major
// f32: a's rows for the skinny loops (m <= 8, so the column-major loads are few).
static void widen_rows(const mf_tensor *t, const mf_mat_layout *l, int64_t bt, int64_t rows, int64_t cols,
                       float *dst) {
    const char *base = (const char *)t->data + bt * l->batch_stride * (int64_t)mf_dtype_size(t->dtype);
    if (!l->col_major) {
        for (int64_t r = 0; r < rows; r++) mf_cpu_to_f32(dst + r * cols, base, t->dtype, r * l->ld, cols);
        return;
    }
    for (int64_t c = 0; c < cols; c++) // column-major: column c is contiguous
        for (int64_t r = 0; r < rows; r++) dst[r * cols + c] = mf_load_f32(base, t->dtype, c * l->ld + r);
}

// Rows of a (m, k) packed f32, their whole 16-blocks put in sk order in place
// (for a bf16 Linear weight).
static void sk_order_rows(float *a, int64_t m, int64_t k) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i + 16 <= k; i += 16) {
            float t[16];
            for (int64_t e = 0; e < 16; e++) t[v8_pos(e)] = a[r * k + i + e];
            memcpy(a + r * k + i, t, sizeof t);
        }
}

// Lines [l0, l1) of matrix `bt` of view t, elements [c0, c0 + len) of each,
// as f32 at dst with line stride len. A line is a row, or a column when
// l->col_major: the layout is kept (the caller passes CblasTrans for
// col_major), so each line is one contiguous read.
static void widen_lines(const mf_tensor *t, const mf_mat_layout *l, int64_t bt, int64_t l0, int64_t l1, int64_t c0,
                        int64_t len, float *dst, bool par) {
    const int64_t es = (int64_t)mf_dtype_size(t->dtype);
    const char *base = (const char *)t->data + bt * l->batch_stride * es;
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = l0; i < l1; i++) mf_cpu_widen(dst + (i - l0) * len, base + (i * l->ld + c0) * es, t->dtype, len);
}

// A 16-bit b (a weight with m > 8 rows of a: prefill) is widened in panels of
// columns, each at most a quarter of this many f32 elements (4 threads stage
// 16 MB together: the whole weight would take 4x its own size, 154 MB for
// GPT-2's LM head; 8 MB made 4 panels of 192 columns of a 3072 x 768 b on 2
// threads, whose short row segments widened slower: 3.2 against 2.7 ms per
// call at m = 32).
enum { WIDE_PANEL = 4 << 20 };

int mf_cpu_blas_serial(bool par) {
    const int threads = openblas_get_num_threads();
    if (!par || threads <= 1) return 0;
    openblas_set_num_threads(1);
    return threads;
}

void mf_cpu_blas_restore(int saved) {
    if (saved > 0) openblas_set_num_threads(saved);
}

// Columns per panel of a 16-bit b (k x n): a multiple of 16, at most a
// quarter of WIDE_PANEL each, an even number of panels of equal width (two
// threads, the common case, finish together). Not a function of the thread
// count: OpenBLAS's sums for a column depend on the width of the sgemm call
// (llama-tiny-bf16's fused q|k|v prefill gave other bits on 1 and 2 threads
// when the panels followed the threads), and a forward's bits must not.
static int64_t wide_panel_cols(int64_t k, int64_t n) {
    int64_t per = WIDE_PANEL / 4 / (k > 0 ? k : 1);
    per = per < 16 ? 16 : per;
    int64_t panels = (n + per - 1) / per;
    panels += panels & 1;
    const int64_t nb = ((n + panels - 1) / panels + 15) / 16 * 16;
    return nb < n ? nb : n;
}

// c (m x n, row stride ldo) = alpha a @ b + beta c for a 16-bit b, matrix bt
// of p->b: each thread widens its panels of b's columns (its own staging,
// k x nb f32 at wb + thread * k * nb) and multiplies them with a
// single-threaded sgemm. One pool of threads: widening on OpenMP's threads
// and then sgemm on OpenBLAS's own made them fight for the cores (libgomp's
// threads spin after a region): on the dev VM a bf16 768 x 3072 weight at
// m = 512 took 32-36 ms per call, 20-23 with OMP_WAIT_POLICY=passive, and
// f32 sgemm 19-20.
static void wide_b_gemm(const mf_gemm_args *p, const mf_mat_layout *lb, int64_t bt, int64_t m, int64_t n,
                        int64_t k, const float *A, CBLAS_TRANSPOSE ta, blasint lda, float beta, float *out,
                        blasint ldo, float *wb, int64_t nb, int threads) {
    const int64_t panels = (n + nb - 1) / nb;
    const bool par = threads > 1 && panels > 1;
    const int blas_threads = mf_cpu_blas_serial(par);
#pragma omp parallel for schedule(static, 1) num_threads(threads) if (par)
    for (int64_t q = 0; q < panels; q++) {
        const int64_t j0 = q * nb, w = n - j0 < nb ? n - j0 : nb;
        float *buf = wb + (int64_t)omp_get_thread_num() * k * nb;
        // b's layout kept: a Linear weight's rows (col_major) or segments of
        // a row-major b's rows
        if (lb->col_major)
            widen_lines(&p->b, lb, bt, j0, j0 + w, 0, k, buf, false);
        else
            widen_lines(&p->b, lb, bt, 0, k, j0, w, buf, false);
        cblas_sgemm(CblasRowMajor, ta, lb->col_major ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)w,
                    (blasint)k, p->alpha, A, lda, buf, (blasint)(lb->col_major ? k : w), beta, out + j0, ldo);
    }
    mf_cpu_blas_restore(blas_threads);
}

// Multiply-adds below which a GEMM stays on one thread: waking the (PASSIVE,
// sleeping) OpenMP threads costs ~10-20 us, a thread's 2^18 multiply-adds about as much.
enum { F32_PAR_MACS = 1 << 18 };

typedef struct {
    int64_t m, n, k, parts;
    float alpha, beta;
    const float *A; // (m, k) as ta says, leading dimension lda
    CBLAS_TRANSPOSE ta;
    blasint lda;
    const float *B; // W (n, k) (b_col_major) or (k, n), leading dimension ldb
    bool b_col_major;
    blasint ldb;
    float *out; // (m, n), row stride ldo
    blasint ldo;
} f32_job;

// Thread t's panels of c's columns: q = t, t + nt, ... < parts (panel q's
// columns, and so its bits, depend on parts alone).
static void f32_part(void *arg, int t, int nt) {
    const f32_job *j = arg;
    for (int64_t q = t; q < j->parts; q += nt) {
        const int64_t n = j->n, j0 = n * q / j->parts / 16 * 16;
        const int64_t j1 = q + 1 == j->parts ? n : n * (q + 1) / j->parts / 16 * 16, w = j1 - j0;
        if (w <= 0) continue;
        const float *Bq = j->b_col_major ? j->B + j0 * j->ldb : j->B + j0;
        if (j->m == 1) {
            const blasint incx = j->ta == CblasTrans ? j->lda : 1; // a (1, k): a column of a col-major a
            if (j->b_col_major) // c = W a
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)w, (blasint)j->k, j->alpha, Bq, j->ldb, j->A, incx,
                            j->beta, j->out + j0, 1);
            else // c = B^T a
                cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)j->k, (blasint)w, j->alpha, Bq, j->ldb, j->A, incx,
                            j->beta, j->out + j0, 1);
        } else {
            cblas_sgemm(CblasRowMajor, j->ta, j->b_col_major ? CblasTrans : CblasNoTrans, (blasint)j->m, (blasint)w,
                        (blasint)j->k, j->alpha, j->A, j->lda, Bq, j->ldb, j->beta, j->out + j0, j->ldo);
        }
    }
}

// c (m x n, row stride ldo) = alpha a @ b + beta c, all f32: b a Linear
// weight W (n, k) (col_major) or row-major (k, n). One pool of threads: the
// columns of c in panels (multiples of 16), each one single-threaded BLAS
// call, on the hot team (team.h; an OpenMP region woke a PASSIVE thread per
// GEMM: the serving engine's f32 steps make ~25 of them). OpenBLAS's own
// threads spin (sched_yield) after a call and took the cores from the
// regions between the GEMMs: the engine at 32 sequences of the default model
// spent 67% of its cycles in sched_yield (docs/notes/engine.md). One row:
// sgemv (~3x faster than sgemm).
static void f32_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float *A, CBLAS_TRANSPOSE ta, blasint lda,
                     const float *B, bool b_col_major, blasint ldb, float beta, float *out, blasint ldo) {
    int64_t parts = omp_get_max_threads();
    const int64_t macs = m * n * k;
    while (parts > 1 && (macs / parts < F32_PAR_MACS || n / parts < 32)) parts--;
    const int saved = mf_cpu_blas_serial(true);
    f32_job j = {m, n, k, parts, alpha, beta, A, ta, lda, B, b_col_major, ldb, out, ldo};
    if (parts > 1)
        mf_cpu_team_run(f32_part, &j);
    else
        f32_part(&j, 0, 1);
    mf_cpu_blas_restore(saved);
}

// row[0..n) = gelu?(row + bias).
MF_CPU_HOT static void epilogue_row(float *row, const float *bias, bool gelu, int64_t n) {
    if (bias)
        for (int64_t j = 0; j < n; j++) row[j] += bias[j];
    if (gelu)
        for (int64_t j = 0; j < n; j++) row[j] = mf_gelu_tanh_v(row[j]);
}

mf_status mf_cpu_gemm(mf_backend *be, const mf_gemm_args *p) {
    int nd = p->c.ndim;
    int64_t batch = nd == 3 ? p->c.shape[0] : 1;
    int64_t m = p->c.shape[nd - 2], n = p->c.shape[nd - 1], k = p->a.shape[nd - 1];
    int64_t ldc = m > 1 ? p->c.stride[nd - 2] : n;
    int64_t c_bstride = nd == 3 ? p->c.stride[0] : 0;
    mf_mat_layout la, lb;
    MF_TRY(mf_mat_layout_of(&p->a, "gemm", "a", &la));
    MF_TRY(mf_mat_layout_of(&p->b, "gemm", "b", &lb));
    // a 16-bit a comes with a 16-bit b; a 16-bit b may come with f32 a (a weight)
    const bool a_wide = p->a.dtype != MF_DTYPE_F32, b_wide = p->b.dtype != MF_DTYPE_F32;
    const bool c_f32 = p->c.dtype == MF_DTYPE_F32;
    // Skinny: m <= 8 (f16/bf16: it reads b in its dtype instead of widening
    // all of it); f32: not one row (sgemv streams it as fast) unless b is a
    // Linear weight and the AVX2 kernels run: they stream it on the hot team
    // where sgemv's OpenMP region woke a sleeping thread per call (SmolLM2
    // f32 decode 66-68 -> 60-61 ms a step; docs/notes/cpu.md). a is staged as
    // packed f32 rows when it is not. (A row-major b took sgemm at 5..8 rows
    // until its loop split k: docs/notes/cpu.md.)
    const bool skinny = k > 0 && m <= 8 && (b_wide || m > 1 || (lb.col_major && mf_cpu_avx2()));
    const bool sk_order_a = skinny && lb.col_major && v8_sk(p->b.dtype); // a's blocks match a bf16 W's loads
    const bool stage_a = k > 0 && (a_wide || (skinny && la.col_major) || sk_order_a);
    // a 16-bit Linear weight against f32 rows of a: widened in registers
    // (gemm_avx512.c) where the CPU has AVX-512, else in panels (wide_b_gemm)
    const bool w16 = b_wide && !skinny && k > 0 && lb.col_major && !a_wide && !la.col_major && mf_cpu_avx512();
    const bool stage_b = b_wide && !skinny && k > 0 && !w16;
    const bool stage_part = skinny && !lb.col_major; // a row-major b's partial sums
    // b's panel: nb columns of b (k x nb f32), for a 16-bit b outside the skinny loops
    const int threads = stage_b ? omp_get_max_threads() : 1;
    const int64_t nb = stage_b ? wide_panel_cols(k, n) : 0;
    float *wa = NULL, *wb = NULL, *tc = NULL, *part = NULL;
    if (stage_a) wa = mf_malloc((size_t)(m * k) * sizeof(float));
    bool wb_owned = false; // wb from the backend's kept staging (page faults once) or, when busy, malloc
    if (stage_b) wb = mf_cpu_staging_take(be, (size_t)(threads * k * nb) * sizeof(float), &wb_owned);
    if (w16) wb = mf_cpu_staging_take(be, mf_cpu_gemm_avx512_floats(m, k) * sizeof(float), &wb_owned);
    if (stage_part) part = mf_malloc((size_t)sk_part_floats(m, n, k) * sizeof(float));
    if (!c_f32) tc = mf_malloc((size_t)(m * n) * sizeof(float));
    if ((stage_a && !wa) || ((stage_b || w16) && !wb) || (stage_part && !part) || (!c_f32 && !tc)) {
        free(wa);
        mf_cpu_staging_give(be, wb, wb_owned);
        free(tc);
        free(part);
        return mf_fail(MF_ERR_OOM, "gemm: out of host memory for f32 staging (m=%lld, n=%lld, k=%lld)",
                       (long long)m, (long long)n, (long long)k);
    }
    const float *bias = NULL;
    float *bias32 = NULL;
    if (p->bias) {
        if (p->bias->dtype == MF_DTYPE_F32) {
            bias = p->bias->data;
        } else {
            bias32 = mf_malloc((size_t)n * sizeof(float));
            if (!bias32) {
                free(wa);
                mf_cpu_staging_give(be, wb, wb_owned);
                free(tc);
                free(part);
                return mf_fail(MF_ERR_OOM, "gemm: out of host memory for the bias (n=%lld)", (long long)n);
            }
            for (int64_t j = 0; j < n; j++) bias32[j] = mf_load_f32(p->bias->data, p->bias->dtype, j);
            bias = bias32;
        }
    }
    size_t csz = mf_dtype_size(p->c.dtype);
    for (int64_t bt = 0; bt < batch; bt++) {
        // a as f32, with its layout (a skinny call takes packed rows)
        const float *A = (const float *)p->a.data + bt * la.batch_stride;
        CBLAS_TRANSPOSE ta = la.col_major ? CblasTrans : CblasNoTrans;
        blasint lda = (blasint)la.ld;
        if (stage_a && skinny) {
            widen_rows(&p->a, &la, bt, m, k, wa);
            if (sk_order_a) sk_order_rows(wa, m, k);
            A = wa, ta = CblasNoTrans, lda = (blasint)k;
        } else if (stage_a) {
            widen_lines(&p->a, &la, bt, 0, la.col_major ? k : m, 0, la.col_major ? m : k, wa, true);
            A = wa, lda = (blasint)(la.col_major ? m : k);
        }
        char *C = (char *)p->c.data + bt * c_bstride * (int64_t)csz;
        float *out;
        blasint ldo;
        float beta;
        if (c_f32) {
            out = (float *)C, ldo = (blasint)ldc, beta = p->beta;
            // BLAS may compute 0 * NaN; beta == 0 means c is not read (the skinny
            // loops write c without reading it, so need no zeroing first)
            if (beta == 0.0f && !skinny && !w16)
                for (int64_t i = 0; i < m; i++) memset(out + i * ldc, 0, (size_t)n * sizeof(float));
        } else {
            out = tc, ldo = (blasint)n, beta = 0.0f;
        }
        if (skinny) {
            const char *b = (const char *)p->b.data + bt * lb.batch_stride * (int64_t)mf_dtype_size(p->b.dtype);
            sk_gemm(lb.col_major, p->b.dtype, m, n, k, A, lda, b, lb.ld, p->alpha, beta, out, ldo, part);
        } else if (w16) {
            const char *w = (const char *)p->b.data + bt * lb.batch_stride * (int64_t)mf_dtype_size(p->b.dtype);
            mf_cpu_gemm_avx512(p->b.dtype, m, n, k, p->alpha, A, lda, w, lb.ld, beta, out, ldo, wb);
        } else if (stage_b) {
            wide_b_gemm(p, &lb, bt, m, n, k, A, ta, lda, beta, out, ldo, wb, nb, threads);
        } else if (k > 0) {
            f32_gemm(m, n, k, p->alpha, A, ta, lda, (const float *)p->b.data + bt * lb.batch_stride, lb.col_major,
                     (blasint)lb.ld, beta, out, ldo);
        } else if (!c_f32 || beta == 0.0f) {
            for (int64_t i = 0; i < m; i++) memset(out + i * ldo, 0, (size_t)n * sizeof(float));
        } else {
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) out[i * ldo + j] *= beta;
        }
        // Epilogue: half c gets beta * c_old here; then bias, then GELU.
        bool need = !c_f32 || bias || p->epilogue != MF_EPILOGUE_NONE;
        if (!need) continue;
        // (one row: no region; waking the sleeping threads costs more than the row, docs/notes/cpu.md)
#pragma omp parallel for schedule(static) if (m > 1 && m * n >= MF_CPU_PAR_ELEMS)
        for (int64_t i = 0; i < m; i++) {
            float *row = out + i * ldo;
            if (!c_f32 && p->beta != 0.0f) {
                float cb[256];
                for (int64_t j0 = 0; j0 < n; j0 += 256) {
                    const int64_t nb = n - j0 < 256 ? n - j0 : 256;
                    mf_cpu_to_f32(cb, C, p->c.dtype, i * ldc + j0, nb);
                    for (int64_t j = 0; j < nb; j++) row[j0 + j] += p->beta * cb[j];
                }
            }
            epilogue_row(row, bias, p->epilogue == MF_EPILOGUE_GELU, n);
            if (!c_f32) mf_cpu_from_f32(C, p->c.dtype, i * ldc, row, n);
        }
    }
    free(wa);
    mf_cpu_staging_give(be, wb, wb_owned);
    free(tc);
    free(part);
    free(bias32);
    return MF_OK;
}
