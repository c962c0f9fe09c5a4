// The decode GEMM's hot case on x86-64 CPUs with AVX2, FMA and F16C:
// c (m <= 8 rows) = alpha a W^T + beta c for a Linear weight W (n, k) in
// f32, f16 or bf16 (the projections and the LM head of a Llama-shaped model
// at batch 1..8). Explicit intrinsics, so that f16 widens with vcvtph2ps and
// products add with FMA, which the portable loops of skinny.h (GCC vector
// extensions, both clones of MF_CPU_HOT) cannot do bit-for-bit alike on a
// CPU without them.
//
// Register tile: RW weight rows x M rows of a, one accumulator each, the
// rows taken from RW stripes of the rows given (a guided piece, gemm.c; RW streams far apart
// read side by side: more misses in flight than one row at a time, which
// read bf16 at ~75% of the read bandwidth on the dev VM; docs/notes/cpu.md),
// each 16-element load widened once for M rows of a. The lanes of an accumulator are summed in a fixed tree, the k
// tail (k % 16) scalar in k order: the same bits for any thread count.
// Not the baseline's bits: FMA rounds once where mul + add round twice
// (docs/notes/cpu.md says what is promised between builds).
#include <stdlib.h>
#include <string.h>

#include "cpu/skinny.h"

#if MF_CPU_AVX2_KERNELS
#include <cpuid.h>

#include "cpu/avx2.h"

static int g_avx2 = -1; // -1: not decided yet (a race only decides the same twice)

// AVX2 and FMA as the compiler's runtime checks see them (OS support of the
// ymm state included), F16C from CPUID leaf 1 (ECX bit 29; clang 14 has no
// "f16c" for __builtin_cpu_supports).
static bool avx2_cpu(void) {
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

bool mf_cpu_avx2(void) {
    if (g_avx2 < 0) {
        const char *isa = getenv("MINFER_CPU_ISA"); // "baseline": the portable loops
        g_avx2 = avx2_cpu() && !(isa && strcmp(isa, "baseline") == 0);
    }
    return g_avx2;
}

bool mf_cpu_avx2_set(bool on) {
    g_avx2 = on && avx2_cpu();
    return g_avx2;
}

// Half h of 16 elements of a W row at p as f32: bf16 in sk order (h = 0:
// the even elements, a shift of one 32-byte load; h = 1: the odd ones, a
// mask), f16 and f32 in order (v8_load16's orders).
AVX2_INLINE __m256 ld8(const char *p, const int h, const mf_dtype dt) {
    if (dt == MF_DTYPE_BF16) {
        const __m256i u = _mm256_loadu_si256((const __m256i *)p);
        return _mm256_castsi256_ps(h ? _mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u))
                                     : _mm256_slli_epi32(u, 16));
    }
    if (dt == MF_DTYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
    return _mm256_loadu_ps((const float *)p + 8 * h);
}

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
AVX2_INLINE float hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// Weight rows j + q rs (q < RW) against M rows of a: c[r][j + q rs] =
// alpha a_r . W_{j + q rs} (+ beta c). rs = 1: adjacent rows; rs > 1: RW
// streams far apart (stripes of a thread's rows, mf_cpu_sk_nt_avx2).
AVX2_INLINE void nt_tile(const int M, const int RW, const mf_dtype dt, int64_t k, const float *a, int64_t lda,
                         const char *w, int64_t ldw_bytes, float alpha, float beta, float *c, int64_t ldc, int64_t j,
                         int64_t rs) {
    const int64_t es = dt == MF_DTYPE_F32 ? 4 : 2;
    const char *wj = w + j * ldw_bytes;
    const int64_t qs = rs * ldw_bytes; // bytes between the tile's rows
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < M; r++)
#pragma GCC unroll 4
        for (int q = 0; q < RW; q++) acc[r][q] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        // each stream 1 KB ahead (a stripe's rows are contiguous: past a
        // row's end, the next row's start): without a prefetch bf16 weights
        // read at 16-18 GB/s on the dev VM. A stream's next row at the same k
        // (until 2026-11-28) did as well for rows of <= 2 KB but not for
        // longer ones (their lines wait in L1 the longer, probably evicted
        // first): SmolLM2's down projection (5 KB rows) 22.3-22.9 -> 23.2-24.4
        // GB/s, TinyLlama's step 20.2 / 23.2 -> 22.2 / 24.7 GB/s
        // (docs/notes/cpu.md). Past the matrix's end a prefetch is a no-op.
#pragma GCC unroll 4
        for (int q = 0; q < RW; q++) _mm_prefetch(wj + q * qs + i * es + 1024, _MM_HINT_T0);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) { // a half of the block of a's M rows in registers, then RW rows of W
            __m256 av[4];
#pragma GCC unroll 4
            for (int r = 0; r < M; r++) av[r] = _mm256_loadu_ps(a + r * lda + i + 8 * h);
#pragma GCC unroll 4
            for (int q = 0; q < RW; q++) {
                const __m256 v = ld8(wj + q * qs + i * es, h, dt);
#pragma GCC unroll 4
                for (int r = 0; r < M; r++) acc[r][q] = _mm256_fmadd_ps(av[r], v, acc[r][q]);
            }
        }
    }
    for (int r = 0; r < M; r++)
        for (int q = 0; q < RW; q++) {
            float s = hsum(acc[r][q]);
            for (int64_t t = i; t < k; t++) s += a[r * lda + t] * v8_load1(wj + q * qs, dt, t);
            sk_out(c + r * ldc + j + q * rs, s, alpha, beta);
        }
}

// Weight rows [j0, j1) for M rows of a: the range cut into RW stripes read
// side by side (tile i: rows j0 + i + q Q), then the rows past RW Q one by
// one. RW x M accumulators + M rows of a + one W vector: at most 16 ymm
// registers.
AVX2_INLINE void nt_rows(const int M, const mf_dtype dt, int64_t k, const float *a, int64_t lda, const char *w,
                         int64_t ldw_bytes, float alpha, float beta, float *c, int64_t ldc, int64_t j0, int64_t j1) {
    const int RW = M <= 2 ? 4 : M == 3 ? 3 : 2;
    const int64_t Q = (j1 - j0) / RW;
    for (int64_t i = 0; i < Q; i++) {
        if (RW == 4)
            nt_tile(M, 4, dt, k, a, lda, w, ldw_bytes, alpha, beta, c, ldc, j0 + i, Q);
        else if (RW == 3)
            nt_tile(M, 3, dt, k, a, lda, w, ldw_bytes, alpha, beta, c, ldc, j0 + i, Q);
        else
            nt_tile(M, 2, dt, k, a, lda, w, ldw_bytes, alpha, beta, c, ldc, j0 + i, Q);
    }
    for (int64_t j = j0 + RW * Q; j < j1; j++) nt_tile(M, 1, dt, k, a, lda, w, ldw_bytes, alpha, beta, c, ldc, j, 1);
}

#define NT_M(M)                                                                                              \
    switch (dt) {                                                                                            \
    case MF_DTYPE_BF16: nt_rows(M, MF_DTYPE_BF16, k, ar, lda, w, ldw_bytes, alpha, beta, cr, ldc, j0, j1); break; \
    case MF_DTYPE_F16: nt_rows(M, MF_DTYPE_F16, k, ar, lda, w, ldw_bytes, alpha, beta, cr, ldc, j0, j1); break;   \
    default: nt_rows(M, MF_DTYPE_F32, k, ar, lda, w, ldw_bytes, alpha, beta, cr, ldc, j0, j1); break;            \
    }

AVX2_FN void mf_cpu_sk_nt_avx2(int64_t m, mf_dtype dt, int64_t k, const float *a, int64_t lda, const char *w,
                               int64_t ldw, float alpha, float beta, float *c, int64_t ldc, int64_t j0, int64_t j1) {
    const int64_t ldw_bytes = ldw * (dt == MF_DTYPE_F32 ? 4 : 2);
    // passes of <= 4 rows (5..8: two balanced ones; the second finds W's rows in cache)
    const int64_t half = m > SK_ROWS ? (m + 1) / 2 : m;
    for (int64_t r0 = 0; r0 < m; r0 += half) {
        const float *ar = a + r0 * lda;
        float *cr = c + r0 * ldc;
        switch (m - r0 < half ? m - r0 : half) {
        case 1: NT_M(1) break;
        case 2: NT_M(2) break;
        case 3: NT_M(3) break;
        default: NT_M(4) break;
        }
    }
}
#undef NT_M

#else
bool mf_cpu_avx2(void) { return false; }
bool mf_cpu_avx2_set(bool on) {
    (void)on;
    return false;
}
#endif
