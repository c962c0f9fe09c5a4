// Internal: what the CUDA GEMM (src/cuda/gemm.cu) tells tests and benchmarks
// about how it ran. Not part of the public API.
#ifndef MF_OPS_GEMM_PLAN_H
#define MF_OPS_GEMM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

#ifdef MF_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif
// How the backend's last mf_gemm call ran (every path rounds c once, from f32):
//   "plain"      no epilogue: cuBLASLt alone
//   "fused"      cuBLASLt with its bias / GELU epilogue
//   "in-place"   f32 c, no fused algorithm: cuBLASLt writes alpha a@b + beta c
//                into c, then a small kernel adds the bias and applies GELU
//   "f32-scratch" f16/bf16 c, no fused algorithm: cuBLASLt writes alpha a@b
//                into an f32 scratch, a small kernel adds beta c + bias, GELU,
//                and stores c once
//   "k0"         k == 0: only the small kernel (act(beta c + bias))
//   "gemv"       our skinny GEMM (src/cuda/gemv.cu) for m = 1..8 rows with a
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

// The "gemv" path (src/cuda/gemv.cu) is off by default until a GPU run has
// measured it against cuBLASLt; MINFER_GEMV=1 in the environment when the
// backend's first GEMM runs turns it on. This overrides that, for tests and
// `minfer bench gemv`. Cached plans remember whether it was on.
void mf_cuda_gemm_set_gemv(mf_backend *be, bool on);
bool mf_cuda_gemm_gemv_on(mf_backend *be);

// Turns the plan cache off (every call plans from scratch, as before the
// cache existed) or back on; for `minfer bench gemm-host`. Entries are kept.
void mf_cuda_gemm_cache_enable(mf_backend *be, bool on);
#ifdef __cplusplus
}
#endif
#endif
#endif // MF_OPS_GEMM_PLAN_H
