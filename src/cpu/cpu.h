// Internal: the CPU backend's op entries (f32 math, OpenMP over rows).
#ifndef MF_CPU_H
#define MF_CPU_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

mf_status mf_cpu_gemm(mf_backend *be, const mf_gemm_args *args);        // gemm.c
mf_status mf_cpu_add_norm(mf_backend *be, const mf_norm_args *args);    // norm.c
mf_status mf_cpu_embed(mf_backend *be, const mf_embed_args *args);      // embed.c
mf_status mf_cpu_add(mf_backend *be, const mf_add_args *args);          // add.c
mf_status mf_cpu_softmax(mf_backend *be, const mf_softmax_args *args);  // softmax.c
mf_status mf_cpu_rope(mf_backend *be, const mf_rope_args *args);        // rope.c
mf_status mf_cpu_act(mf_backend *be, const mf_act_args *args);          // act.c
mf_status mf_cpu_copy(mf_backend *be, const mf_copy_args *args);        // copy.c
mf_status mf_cpu_argmax(mf_backend *be, const mf_argmax_args *args);    // argmax.c
mf_status mf_cpu_topk(mf_backend *be, const mf_topk_args *args);        // topk.c
mf_status mf_cpu_moe_router(mf_backend *be, const mf_moe_router_args *args);   // moe.c
mf_status mf_cpu_moe_permute(mf_backend *be, const mf_moe_permute_args *args); // moe.c
mf_status mf_cpu_moe_combine(mf_backend *be, const mf_moe_combine_args *args); // moe.c
mf_status mf_cpu_attention(mf_backend *be, const mf_attention_args *args); // attention.c
mf_status mf_cpu_kv_write(mf_backend *be, const mf_kv_write_args *args);   // kv_write.c

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

// Around an OpenMP region whose threads each call sgemm (one pool of threads
// for the cores): OpenBLAS set to one thread when `par`; returns what
// mf_cpu_blas_restore puts back (0: nothing changed). gemm.c.
int mf_cpu_blas_serial(bool par);
void mf_cpu_blas_restore(int saved);

#ifdef __cplusplus
}
#endif
#endif // MF_CPU_H
