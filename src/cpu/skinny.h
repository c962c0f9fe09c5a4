// Internal: the skinny register kernels, a few rows of f32 a against a
// matrix b in its own dtype (f32, or f16/bf16 widened in registers 16 per
// load: v8_load16, sk order), for the decode-step GEMMs (src/cpu/gemm.c) and
// decode attention (src/cpu/attention.c: q . K^T is sk_nt, P V is
// sk_nn_tile). Inlined into MF_CPU_HOT callers with constant row counts
// and dtype, so that the sums stay in registers; both clones give the same
// bits (products added per lane in k order, then a fixed tree).
#ifndef MF_CPU_SKINNY_H
#define MF_CPU_SKINNY_H

#include <stdbool.h>

#include "cpu/v8.h"

enum {
    SK_ROWS = 4, // rows of a per pass: 4 x 2 accumulator vectors fit AVX2's 16 registers
    SK_NB = 16,  // columns of c per register tile (sk_nn_tile)
};


// The AVX2 + FMA + F16C kernels of skinny_avx2.c: built for x86-64 with
// GCC/clang unless the build asks for the baseline only (MF_CPU_NO_CLONES,
// CI's sanitizer build), and run where the CPU has them (mf_cpu_avx2; the
// environment variable MINFER_CPU_ISA=baseline turns them off).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(MF_CPU_NO_CLONES)
#define MF_CPU_AVX2_KERNELS 1
#else
#define MF_CPU_AVX2_KERNELS 0
#endif
bool mf_cpu_avx2(void);
// Tests and measurements: the AVX2 kernels on (where the CPU has them) or
// off, process-wide; returns whether they are on now.
bool mf_cpu_avx2_set(bool on);
// c (m <= 8 rows, row stride ldc) columns [j0, j1) = alpha a W^T + beta c
// for a Linear weight W (n, k) in dt, row stride ldw elements; a f32 (m, k),
// its 16-blocks in sk order for a bf16 W (v8_sk). Only when mf_cpu_avx2().
void mf_cpu_sk_nt_avx2(int64_t m, mf_dtype dt, int64_t k, const float *a, int64_t lda, const char *w,
                       int64_t ldw, float alpha, float beta, float *c, int64_t ldc, int64_t j0, int64_t j1);

// c = alpha acc + beta c (beta == 0: c is not read).
V8_INLINE void sk_out(float *c, float acc, float alpha, float beta) {
    *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

// b a Linear weight, W (n, k) row-major: c[r][j] = a_r . W_j for M rows of a
// and weight rows [j0, j1). a's whole 16-blocks are in sk order for a bf16
// W. Two sums per row (the 16 elements of a block), so that one row is not
// bound by the latency of a single chain of adds.
V8_INLINE void sk_nt(const int M, const mf_dtype dt, int64_t k, const float *a, int64_t lda, const char *w,
                     int64_t ldw, float alpha, float beta, float *c, int64_t ldc, int64_t j0, int64_t j1) {
    const int64_t es = dt == MF_DTYPE_F32 ? 4 : 2;
    for (int64_t j = j0; j < j1; j++) {
        const char *wj = w + j * ldw * es;
        v8f acc[SK_ROWS][2];
        for (int r = 0; r < M; r++) acc[r][0] = acc[r][1] = (v8f){0};
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            v8f wv[2];
            v8_load16(wv, wj + i * es, dt);
            for (int r = 0; r < M; r++) {
                v8f a0, a1;
                memcpy(&a0, a + r * lda + i, 32);
                memcpy(&a1, a + r * lda + i + 8, 32);
                acc[r][0] += a0 * wv[0];
                acc[r][1] += a1 * wv[1];
            }
        }
        for (int r = 0; r < M; r++) {
            const v8f v = acc[r][0] + acc[r][1];
            float s = v8_hsum(&v);
            for (int64_t t = i; t < k; t++) s += a[r * lda + t] * v8_load1(wj, dt, t);
            sk_out(c + r * ldc + j, s, alpha, beta);
        }
    }
}

// b row-major (k, n), rows [i0, i1) of a panel, columns [j, j + 16): G rows
// of a add into their sums in c (rows r < G at c + r * ldc; a bf16 b's
// columns in sk order). The sums move as whole vectors (v8f_un): through
// memcpy, GCC 12 copied them to the stack in 16-byte pieces and loaded
// them back 32 bytes at a time, which store forwarding cannot serve (a
// stall per tile).
V8_INLINE void sk_nn_tile(const int G, const mf_dtype dt, int64_t i0, int64_t i1, const float *a, int64_t lda,
                          const char *b, int64_t ldb, float *c, int64_t ldc, int64_t j) {
    const int64_t es = dt == MF_DTYPE_F32 ? 4 : 2;
    v8f s[SK_ROWS][2];
    for (int r = 0; r < G; r++) {
        s[r][0] = *(const v8f_un *)(c + r * ldc + j);
        s[r][1] = *(const v8f_un *)(c + r * ldc + j + 8);
    }
    for (int64_t i = i0; i < i1; i++) {
        v8f bv[2];
        v8_load16(bv, b + (i * ldb + j) * es, dt);
        for (int r = 0; r < G; r++) {
            const float x = a[r * lda + i];
            const v8f xv = {x, x, x, x, x, x, x, x};
            s[r][0] += xv * bv[0];
            s[r][1] += xv * bv[1];
        }
    }
    for (int r = 0; r < G; r++) {
        *(v8f_un *)(c + r * ldc + j) = s[r][0];
        *(v8f_un *)(c + r * ldc + j + 8) = s[r][1];
    }
}

#endif // MF_CPU_SKINNY_H
