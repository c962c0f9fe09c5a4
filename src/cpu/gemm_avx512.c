// The prefill GEMM's hot case on x86-64 CPUs with AVX-512 (F, BW):
// c (m x n) = alpha a W^T + beta c for a Linear weight W (n, k) in bf16 or
// f16 and a f32 (m, k), m > 8 rows (prompts; decode steps of many
// sequences). The other path widens W to f32 in column panels and calls a
// single-threaded sgemm per panel, which packs a again for every panel: on
// the dev VM a TinyLlama gate|up at 128 rows ran at 89 GFLOP/s on 2 threads
// where sgemm on an f32 copy of W runs at 120-150 (docs/notes/cpu.md).
//
// Here W is read as it lies, in its dtype, and widened in registers. Both
// operands are read along k (a "dot" tile): 4 rows of a x 4 rows of W, one
// 16-lane accumulator per dot product, so neither is transposed. bf16: one
// 64-byte load of 32 elements widened by vpunpcklwd / vpunpckhwd with zero
// (port 5, beside the FMA port), which deals k out of order within each
// 128-bit lane; a is packed once per call in that order (f16: vcvtph2ps, k
// in order). The 16 dot products of a tile are summed together by a
// transposing tree (15 adds), the same tree for each, once per KC keys.
// Blocking: a packed for MC rows and all of k (rows padded to 4, to a
// multiple of 32 keys with zeros, plus 64 bytes so rows do not alias in L1);
// each thread takes a fixed share of W's rows, in blocks of NB rows x KC
// keys (128 KB of bf16: L2) against 4-row tiles of a (16 KB: L1).
//
// Bits: each c element is its own 16 lanes summed over k in a fixed order,
// then the fixed tree, times alpha, added to c per KC block in k order (beta
// c once, on the first block):
// the same for any thread count, row count or tile position. FMA rounds
// once: not the bits of the widened-panel sgemm path (docs/notes/cpu.md).
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/skinny.h"

#if MF_CPU_AVX2_KERNELS
#include <omp.h>

#include "cpu/avx512.h"

enum {
    G5_KC = 1024, // keys per block of a tile's sums (a's tile 16 KB, W's 8 KB)
    G5_MC = 128,  // rows of a packed at a time (k = 5632: 2.9 MB)
    G5_NB = 64,   // W rows per block against the a tiles (bf16, KC keys: 128 KB)
};

static int g_avx512 = -1; // -1: not decided yet (relaxed atomics: a race only decides the same twice)

bool mf_cpu_avx512(void) {
    int on = __atomic_load_n(&g_avx512, __ATOMIC_RELAXED);
    if (on < 0) {
        __builtin_cpu_init(); // the checks include the OS's support of the zmm state
        const char *isa = getenv("MINFER_CPU_ISA"); // "avx2": not these kernels; "baseline": none
        on = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && // decode attention's 8-lane tiles (32 registers)
             !(isa && (!strcmp(isa, "avx2") || !strcmp(isa, "baseline")));
        __atomic_store_n(&g_avx512, on, __ATOMIC_RELAXED);
    }
    return on && mf_cpu_avx2(); // mf_cpu_avx2_set(false) turns every kernel set off
}

// Key of a's element at position p (0..31) of a packed 32-key block: bf16's
// unpacks deliver keys 0-3, 8-11, 16-19, 24-27 (low) then 4-7, ... (high).
static int64_t pack_key(mf_dtype dt, int p) {
    if (dt != MF_DTYPE_BF16) return p;
    const int q = p & 15;
    return 8 * (q / 4) + q % 4 + (p >= 16 ? 4 : 0);
}

// Rows [r0, r1) of the block of a at row i0 into ap (row stride kp floats):
// k rounded up to 32 keys, rows past m zero.
static void pack_a(mf_dtype dt, const float *a, int64_t lda, int64_t i0, int64_t m, int64_t k, int64_t kp, int64_t r0,
                   int64_t r1, float *ap) {
    for (int64_t r = r0; r < r1; r++) {
        float *d = ap + r * kp;
        const float *src = i0 + r < m ? a + (i0 + r) * lda : NULL; // NULL: a padding row
        for (int64_t b = 0; b < k; b += 32)
            for (int p = 0; p < 32; p++) {
                const int64_t key = b + pack_key(dt, p);
                d[b + p] = src && key < k ? src[key] : 0.0f;
            }
    }
}

// 32 keys of a W row at p as two f32 vectors (lo, hi), keys past `left` zero.
MF_AVX512_INLINE void ld32(const mf_dtype dt, const char *p, int64_t left, __m512 *lo, __m512 *hi) {
    const __m512i x = left >= 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16((__mmask32)((1ull << left) - 1), p);
    if (dt == MF_DTYPE_BF16) {
        const __m512i z = _mm512_setzero_si512();
        *lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, x));
        *hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, x));
    } else {
        *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(x));
        *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
    }
}

// One tile over keys [k0, k1): 4 packed rows of a at ap (stride kp) x W rows
// w[0..3] (bytes; es per element, k keys a row). Lane 4 r + q of the result:
// a_r . W_q over those keys.
MF_AVX512_INLINE __m512 tile(const mf_dtype dt, const float *ap, int64_t kp, const char *const w[4], int64_t es,
                             int64_t k0, int64_t k1, int64_t k) {
    __m512 acc[16];
    for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = k0; i < k1; i += 32) {
        const __m512 a0l = _mm512_loadu_ps(ap + i), a0h = _mm512_loadu_ps(ap + i + 16);
        const __m512 a1l = _mm512_loadu_ps(ap + kp + i), a1h = _mm512_loadu_ps(ap + kp + i + 16);
        const __m512 a2l = _mm512_loadu_ps(ap + 2 * kp + i), a2h = _mm512_loadu_ps(ap + 2 * kp + i + 16);
        const __m512 a3l = _mm512_loadu_ps(ap + 3 * kp + i), a3h = _mm512_loadu_ps(ap + 3 * kp + i + 16);
        for (int q = 0; q < 4; q++) {
            __m512 lo, hi;
            ld32(dt, w[q] + i * es, k - i, &lo, &hi);
            acc[q] = _mm512_fmadd_ps(a0h, hi, _mm512_fmadd_ps(a0l, lo, acc[q]));
            acc[4 + q] = _mm512_fmadd_ps(a1h, hi, _mm512_fmadd_ps(a1l, lo, acc[4 + q]));
            acc[8 + q] = _mm512_fmadd_ps(a2h, hi, _mm512_fmadd_ps(a2l, lo, acc[8 + q]));
            acc[12 + q] = _mm512_fmadd_ps(a3h, hi, _mm512_fmadd_ps(a3l, lo, acc[12 + q]));
        }
    }
    return mf_sum16(acc);
}

// Keys [k0, k1) of c's rows [i, i + mr) x columns [j, j + nr): the first
// block writes alpha s + beta c (beta 0: c not read), later ones add alpha s.
MF_AVX512_INLINE void store(__m512 s, float *c, int64_t ldc, int64_t mr, int64_t nr, float alpha, float beta,
                            bool first) {
    float o[16];
    _mm512_storeu_ps(o, s);
    for (int64_t r = 0; r < mr; r++)
        for (int64_t q = 0; q < nr; q++) {
            float *e = c + r * ldc + q;
            const float v = alpha * o[4 * r + q];
            *e = !first ? *e + v : beta == 0.0f ? v : v + beta * *e;
        }
}

// W rows [j0, j1) (this thread's) against the packed rows [0, mc) of a.
MF_AVX512_INLINE void rows(const mf_dtype dt, int64_t mc, int64_t k, int64_t kp, const float *ap, const char *w,
                           int64_t ldw_bytes, float alpha, float beta, float *c, int64_t ldc, int64_t j0, int64_t j1) {
    const int64_t es = 2, k32 = (k + 31) / 32 * 32;
    for (int64_t k0 = 0; k0 < k; k0 += G5_KC) {
        const int64_t k1 = k0 + G5_KC < k32 ? k0 + G5_KC : k32;
        for (int64_t jb = j0; jb < j1; jb += G5_NB) {
            const int64_t je = jb + G5_NB < j1 ? jb + G5_NB : j1;
            for (int64_t i = 0; i < mc; i += 4)
                for (int64_t j = jb; j < je; j += 4) {
                    const int64_t nr = je - j < 4 ? je - j : 4;
                    const char *wr[4];
                    for (int q = 0; q < 4; q++)
                        wr[q] = w + (j + (q < nr ? q : 0)) * ldw_bytes; // a short tile repeats row j
                    const __m512 s = tile(dt, ap + i * kp, kp, wr, es, k0, k1, k);
                    store(s, c + i * ldc + j, ldc, mc - i < 4 ? mc - i : 4, nr, alpha, beta, k0 == 0);
                }
        }
    }
}

size_t mf_cpu_gemm_avx512_floats(int64_t m, int64_t k) {
    const int64_t mc = m < G5_MC ? m : G5_MC;
    return (size_t)((mc + 3) / 4 * 4) * (size_t)((k + 31) / 32 * 32 + 16);
}

// One thread's part of a call (inside the parallel region): its share of
// W's rows for every 128-row block of a, which the threads pack together. A
// function of its own with the target attribute: clang outlines a parallel
// region into a function without it, and compiled the kernels there as SSE2.
static MF_AVX512_FN __attribute__((noinline)) void part(mf_dtype dt, int64_t m, int64_t n, int64_t k, float alpha,
                                                        const float *a, int64_t lda, const void *w, int64_t ldw,
                                                        float beta, float *c, int64_t ldc, float *ap, int64_t t,
                                                        int64_t T) {
    const int64_t kp = (k + 31) / 32 * 32 + 16; // + 64 bytes: 4 rows of a 4 KB apart share L1 sets
    const int64_t ldw_bytes = ldw * 2;
    // this thread's W rows: multiples of 4, a function of (n, T) only
    const int64_t j0 = n * t / T / 4 * 4, j1 = t + 1 == T ? n : n * (t + 1) / T / 4 * 4;
    for (int64_t i0 = 0; i0 < m; i0 += G5_MC) {
        const int64_t mc = m - i0 < G5_MC ? m - i0 : G5_MC, mp = (mc + 3) / 4 * 4;
        pack_a(dt, a, lda, i0, m, k, kp, mp * t / T, mp * (t + 1) / T, ap);
#pragma omp barrier
        if (dt == MF_DTYPE_BF16)
            rows(MF_DTYPE_BF16, mc, k, kp, ap, w, ldw_bytes, alpha, beta, c + i0 * ldc, ldc, j0, j1);
        else
            rows(MF_DTYPE_F16, mc, k, kp, ap, w, ldw_bytes, alpha, beta, c + i0 * ldc, ldc, j0, j1);
#pragma omp barrier
    }
}

void mf_cpu_gemm_avx512(mf_dtype dt, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                        const void *w, int64_t ldw, float beta, float *c, int64_t ldc, float *ap) {
#pragma omp parallel if (n >= 64)
    part(dt, m, n, k, alpha, a, lda, w, ldw, beta, c, ldc, ap, omp_get_thread_num(), omp_get_num_threads());
}

#else
bool mf_cpu_avx512(void) { return false; }
size_t mf_cpu_gemm_avx512_floats(int64_t m, int64_t k) {
    (void)m, (void)k;
    return 0;
}
void mf_cpu_gemm_avx512(mf_dtype dt, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                        const void *w, int64_t ldw, float beta, float *c, int64_t ldc, float *ap) {
    (void)dt, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)w, (void)ldw, (void)beta, (void)c,
        (void)ldc, (void)ap;
}
#endif
