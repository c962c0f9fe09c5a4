// CPU GEMM: OpenBLAS sgemm per batch; f16/bf16 operands are widened to f32
// first (the CPU computes in f32), then bias and GELU in one pass over c
// (GELU: mf_act's tanh form x sigmoid(2u), vectorised: src/cpu/vmath.h).
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "cpu/cpu.h"
#include "cpu/vmath.h"
#include "ops/check.h"

// Widen matrix `bt` of view t (rows, cols, with layout l) to packed row-major f32.
static void widen(const mf_tensor *t, const mf_mat_layout *l, int64_t bt, int64_t rows, int64_t cols, float *dst) {
    const char *base = (const char *)t->data + bt * l->batch_stride * (int64_t)mf_dtype_size(t->dtype);
    if (!l->col_major) {
        for (int64_t r = 0; r < rows; r++) mf_cpu_to_f32(dst + r * cols, base, t->dtype, r * l->ld, cols);
        return;
    }
    for (int64_t c = 0; c < cols; c++) // column-major: column c is contiguous
        for (int64_t r = 0; r < rows; r++) dst[r * cols + c] = mf_load_f32(base, t->dtype, c * l->ld + r);
}

// row[0..n) = gelu?(row + bias).
MF_CPU_HOT static void epilogue_row(float *row, const float *bias, bool gelu, int64_t n) {
    if (bias)
        for (int64_t j = 0; j < n; j++) row[j] += bias[j];
    if (gelu)
        for (int64_t j = 0; j < n; j++) row[j] = mf_gelu_tanh_v(row[j]);
}

mf_status mf_cpu_gemm(mf_backend *be, const mf_gemm_args *p) {
    (void)be;
    int nd = p->c.ndim;
    int64_t batch = nd == 3 ? p->c.shape[0] : 1;
    int64_t m = p->c.shape[nd - 2], n = p->c.shape[nd - 1], k = p->a.shape[nd - 1];
    int64_t ldc = m > 1 ? p->c.stride[nd - 2] : n;
    int64_t c_bstride = nd == 3 ? p->c.stride[0] : 0;
    mf_mat_layout la, lb;
    MF_TRY(mf_mat_layout_of(&p->a, "gemm", "a", &la));
    MF_TRY(mf_mat_layout_of(&p->b, "gemm", "b", &lb));
    bool wide = p->a.dtype != MF_DTYPE_F32; // a and b share a dtype
    bool c_f32 = p->c.dtype == MF_DTYPE_F32;
    float *wa = NULL, *wb = NULL, *tc = NULL;
    if (wide) {
        wa = mf_malloc((size_t)(m * k) * sizeof(float));
        wb = mf_malloc((size_t)(k * n) * sizeof(float));
    }
    if (!c_f32) tc = mf_malloc((size_t)(m * n) * sizeof(float));
    if ((wide && (!wa || !wb)) || (!c_f32 && !tc)) {
        free(wa);
        free(wb);
        free(tc);
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
                free(wb);
                free(tc);
                return mf_fail(MF_ERR_OOM, "gemm: out of host memory for the bias (n=%lld)", (long long)n);
            }
            for (int64_t j = 0; j < n; j++) bias32[j] = mf_load_f32(p->bias->data, p->bias->dtype, j);
            bias = bias32;
        }
    }
    size_t csz = mf_dtype_size(p->c.dtype);
    for (int64_t bt = 0; bt < batch; bt++) {
        const float *A, *B;
        CBLAS_TRANSPOSE ta, tb;
        blasint lda, ldb;
        if (wide) {
            widen(&p->a, &la, bt, m, k, wa);
            widen(&p->b, &lb, bt, k, n, wb);
            A = wa, B = wb, ta = tb = CblasNoTrans, lda = (blasint)(k > 0 ? k : 1), ldb = (blasint)(n > 0 ? n : 1);
        } else {
            A = (const float *)p->a.data + bt * la.batch_stride;
            B = (const float *)p->b.data + bt * lb.batch_stride;
            ta = la.col_major ? CblasTrans : CblasNoTrans;
            tb = lb.col_major ? CblasTrans : CblasNoTrans;
            lda = (blasint)la.ld, ldb = (blasint)lb.ld;
        }
        char *C = (char *)p->c.data + bt * c_bstride * (int64_t)csz;
        float *out;
        blasint ldo;
        float beta;
        if (c_f32) {
            out = (float *)C, ldo = (blasint)ldc, beta = p->beta;
            if (beta == 0.0f) // BLAS may compute 0 * NaN; beta == 0 means c is not read
                for (int64_t i = 0; i < m; i++) memset(out + i * ldc, 0, (size_t)n * sizeof(float));
        } else {
            out = tc, ldo = (blasint)n, beta = 0.0f;
        }
        if (k > 0 && m == 1 && !wide) {
            // One row (a decode step's LM head, projections at batch 1):
            // sgemv is ~3x faster than sgemm here. c = alpha * a_row @ B + beta * c.
            blasint incx = (blasint)(la.col_major ? la.ld : 1);
            if (tb == CblasNoTrans) // B (k, n) row-major: c = B^T a
                cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)k, (blasint)n, p->alpha, B, ldb, A, incx, beta, out, 1);
            else // B stored as W (n, k) row-major: c = W a
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)k, p->alpha, B, ldb, A, incx, beta, out,
                            1);
        } else if (k > 0) {
            cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, p->alpha, A, lda, B, ldb, beta,
                        out, ldo);
        } else if (!c_f32 || beta == 0.0f) {
            for (int64_t i = 0; i < m; i++) memset(out + i * ldo, 0, (size_t)n * sizeof(float));
        } else {
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) out[i * ldo + j] *= beta;
        }
        // Epilogue: half c gets beta * c_old here; then bias, then GELU.
        bool need = !c_f32 || bias || p->epilogue != MF_EPILOGUE_NONE;
        if (!need) continue;
#pragma omp parallel for schedule(static)
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
    free(wb);
    free(tc);
    free(bias32);
    return MF_OK;
}
