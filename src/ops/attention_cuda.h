// Internal: what tests and benchmarks ask the CUDA attention about (which
// kernel ran, whether the sm_90a one can). Implemented in src/cuda/attention.cu.
#ifndef MF_OPS_ATTENTION_CUDA_H
#define MF_OPS_ATTENTION_CUDA_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef MF_HAVE_CUDA
// How the CUDA backend's last mf_attention ran: "decode" (split-KV), "wgmma"
// (sm_90a prefill, MINFER_ATTN=wgmma), "prefill" (mma.sync FlashAttention-2),
// "fallback" (CUDA cores); "" before the first call or when there were no rows.
const char *mf_cuda_attn_last_path(mf_backend *be);

// Whether the sm_90a prefill kernel runs on this backend's device (this build
// has sm_90a code and the device is compute capability 9.0); *cc (if not
// NULL) gets the compute capability as 10 major + minor.
int mf_cuda_attn_sm90(mf_backend *be, int *cc);
#endif

#ifdef __cplusplus
}
#endif

#endif // MF_OPS_ATTENTION_CUDA_H
