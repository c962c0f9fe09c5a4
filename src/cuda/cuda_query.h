// Internal: what tests and benchmarks may ask the CUDA backend about how it
// ran (which kernel, whether the sm_90a code runs on this device) and the
// switches they may flip. Not part of the public API; declared only when the
// build has the CUDA backend. Plain C (implemented in src/cuda/<family>/*.cu).
#ifndef MF_CUDA_QUERY_H
#define MF_CUDA_QUERY_H

#include <stdbool.h>
#include <stdint.h>

#include "minfer/ops.h"

#ifdef MF_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// ---- gemm/ ----
// How the backend's last mf_gemm call ran (every path rounds c once, from f32):
//   "plain"      no epilogue: cuBLASLt alone
//   "fused"      cuBLASLt with its bias / GELU epilogue
//   "in-place"   f32 c, no fused algorithm: cuBLASLt writes alpha a@b + beta c
//                into c, then a small kernel adds the bias and applies GELU
//   "f32-scratch" f16/bf16 c, no fused algorithm: cuBLASLt writes alpha a@b
//                into an f32 scratch, a small kernel adds beta c + bias, GELU,
//                and stores c once
//   "k0"         k == 0: only the small kernel (act(beta c + bias))
//   "gemv"       our skinny GEMM (src/cuda/gemm/gemv.cu) for m = 1..8 rows with a
//                torch Linear weight as b; only when the gemv path is on
// "" before the first call. The string is static.
const char *mf_cuda_gemm_last_path(mf_backend *be);

// Plan cache counters since the backend was created.
typedef struct {
    uint64_t hits, misses, evictions;
    int entries, capacity;
    bool enabled;
} mf_cuda_gemm_cache_stats;
void mf_cuda_gemm_cache_stats_of(mf_backend *be, mf_cuda_gemm_cache_stats *out);

// The "gemv" path (src/cuda/gemm/gemv.cu) is off by default until a GPU run has
// measured it against cuBLASLt; MINFER_GEMV=1 in the environment when the
// backend's first GEMM runs turns it on. This overrides that, for tests and
// `minfer bench gemv`. Cached plans remember whether it was on.
void mf_cuda_gemm_set_gemv(mf_backend *be, bool on);
bool mf_cuda_gemm_gemv_on(mf_backend *be);

// Turns the plan cache off (every call plans from scratch, as before the
// cache existed) or back on; for `minfer bench gemm-host`. Entries are kept.
void mf_cuda_gemm_cache_enable(mf_backend *be, bool on);

// ---- softmax/ ----
// The kernel variant mf_softmax would run for these validated arguments
// ("rows", "cluster", "online", "split", "generic"), or NULL with the reason
// in mf_last_error() when unsupported.
const char *mf_cuda_softmax_variant(mf_backend *be, const mf_softmax_args *args);
// The most blocks of a thread-block cluster the softmax can spread one row
// over on this backend's GPU (1: no clusters: before sm_90, a kernel image
// without sm_90 code, or none fits), for rows with / without a bias along
// keys; *cc (if not NULL) gets the compute capability as 10 major + minor.
int mf_cuda_softmax_clusters(mf_backend *be, int bias_along_keys, int *cc);

// ---- attention/ ----
// How the last mf_attention ran: "decode" (split-KV), "wgmma" (sm_90a
// prefill, MINFER_ATTN=wgmma), "prefill" (mma.sync FlashAttention-2),
// "fallback" (CUDA cores); "" before the first call or when there were no rows.
const char *mf_cuda_attn_last_path(mf_backend *be);
// Whether the sm_90a prefill kernel runs on this backend's device (this build
// has sm_90a code and the device is compute capability 9.0); *cc (if not
// NULL) gets the compute capability as 10 major + minor.
int mf_cuda_attn_sm90(mf_backend *be, int *cc);

// ---- moe/ ----
// How the last mf_moe_experts (or mf_moe) ran its expert FFNs: "decode" (the
// device-routed kernels), "loop" (the generic per-expert loop of
// src/ops/moe.c, offsets read back), "wgmma" (our sm_90a grouped GEMMs,
// MINFER_MOE_GEMM=wgmma), "grouped" (MINFER_MOE_GEMM=grouped); "" before the first call.
const char *mf_cuda_moe_last_path(mf_backend *be);
// Whether the sm_90a grouped GEMMs run on this backend's device (as mf_cuda_attn_sm90).
int mf_cuda_moe_sm90(mf_backend *be, int *cc);

#ifdef __cplusplus
}
#endif
#endif // MF_HAVE_CUDA
#endif // MF_CUDA_QUERY_H
