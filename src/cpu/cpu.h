// Internal: the CPU backend's op entries (f32 math, OpenMP over rows).
#ifndef MF_CPU_H
#define MF_CPU_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// The op entries (src/op_list.h's MF_OPS; moe_experts stays NULL: the
// generic loop of src/ops/moe.c), each in its op family's file: <op>.c
// (add_norm: norm.c, copy_tensor: copy.c, moe_*: moe.c).
#define MF_CPU_OP(entry, args_t, name) mf_status mf_cpu_##entry(mf_backend *be, const args_t *args);
MF_OPS(MF_CPU_OP)
#undef MF_CPU_OP

// Elements of work below which an op over rows opens no OpenMP region:
// waking the sleeping (PASSIVE) threads costs 10-40 us on the dev VM, about
// what 2^16 elements of an elementwise op take on one core (decode steps at
// 32 sequences of the default model: add_norm, act, kv_write over 6-32 K
// elements each, ~60 regions a step).
enum { MF_CPU_PAR_ELEMS = 1 << 16 };

// Dtype conversion, all in convert.c.
// dst[0 .. n) = elements [off, off + n) of a contiguous f32 / f16 / bf16 run
// as f32 (exact): the row loaders of the ops.
void mf_cpu_to_f32(float *dst, const void *src, mf_dtype dt, int64_t off, int64_t n);
// dst[0 .. n) = the n contiguous f32 / f16 / bf16 values at src (any
// alignment) as f32 (exact), 8 lanes at a time.
void mf_cpu_widen(float *dst, const char *src, mf_dtype dt, int64_t n);
// Elements [off, off + n) of a contiguous f32 / f16 / bf16 run = src[0 .. n),
// rounded to nearest even (NaN stays NaN), 8 lanes at a time: the bits of
// mf_f32_to_f16 / mf_f32_to_bf16.
void mf_cpu_from_f32(void *dst, mf_dtype dt, int64_t off, const float *src, int64_t n);

// A staging buffer of at least `bytes` for one op: the backend's kept one
// (its pages stay mapped between calls) or, while another thread's op holds
// it, a fresh malloc (*owned). NULL when out of memory. Give it back with
// mf_cpu_staging_give (p NULL: nothing). backend_cpu.c.
void *mf_cpu_staging_take(mf_backend *be, size_t bytes, bool *owned);
void mf_cpu_staging_give(mf_backend *be, void *p, bool owned);

// Around an OpenMP region whose threads each call sgemm (one pool of threads
// for the cores): OpenBLAS set to one thread when `par`; returns what
// mf_cpu_blas_restore puts back (0: nothing changed). gemm.c.
int mf_cpu_blas_serial(bool par);
void mf_cpu_blas_restore(int saved);

// The prefill GEMM of a 16-bit Linear weight in AVX-512 (gemm_avx512.c):
// whether it runs here (the CPU has AVX-512 F, BW and VL, the AVX2 kernels are
// on, MINFER_CPU_ISA is not "avx2" or "baseline"); the f32 staging it needs
// for m rows of a at k; and c (m x n, row stride ldc) = alpha a W^T + beta c
// for a f32 (m, k) with row stride lda and W (n, k) in dt (bf16 or f16) with
// row stride ldw elements, on OpenMP's threads, ap the staging.
bool mf_cpu_avx512(void);
size_t mf_cpu_gemm_avx512_floats(int64_t m, int64_t k);
// Decode attention's products in 8-lane vectors for a KV cache in dt (f32,
// f16 or bf16), head_dim D a multiple of 16 up to 256 (attention_tiles.h;
// _avx512 when mf_cpu_avx512(), _avx2 when only mf_cpu_avx2(): the same
// bits, a NaN's payload aside). kv head g's query rows: rows[g nr + t], t < nr (row r
// of q, f32, at q + r D); key j's kv head g at kp[j] + g hs elements (D of
// them; kp in bytes), value likewise at vp[j]. qk: s[row lds + j] = scale
// q_row . k_j, j < nk rounded up to 4 (lds >= it); pv: o[row D + d] =
// sum_{j < nk} p[row ldp + j] v_j[d]; softmax: one row of scores s[0..n)
// to exp(s - m) with *m their max, *l their sum.
void mf_cpu_dec_qk_avx512(mf_dtype dt, const float *q, int64_t D, const int32_t *rows, int64_t nr, int64_t kvh,
                          const char *const *kp, int64_t hs, int64_t nk, float scale, float *s, int64_t lds);
void mf_cpu_dec_pv_avx512(mf_dtype dt, const float *p, int64_t ldp, const int32_t *rows, int64_t nr, int64_t kvh,
                          const char *const *vp, int64_t hs, int64_t nk, int64_t D, float *o);
void mf_cpu_dec_softmax_avx512(float *s, int64_t n, float *m, float *l);
void mf_cpu_dec_qk_avx2(mf_dtype dt, const float *q, int64_t D, const int32_t *rows, int64_t nr, int64_t kvh,
                        const char *const *kp, int64_t hs, int64_t nk, float scale, float *s, int64_t lds);
void mf_cpu_dec_pv_avx2(mf_dtype dt, const float *p, int64_t ldp, const int32_t *rows, int64_t nr, int64_t kvh,
                        const char *const *vp, int64_t hs, int64_t nk, int64_t D, float *o);
void mf_cpu_dec_softmax_avx2(float *s, int64_t n, float *m, float *l);
void mf_cpu_gemm_avx512(mf_dtype dt, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                        const void *w, int64_t ldw, float beta, float *c, int64_t ldc, float *ap);

#ifdef __cplusplus
}
#endif
#endif // MF_CPU_H
