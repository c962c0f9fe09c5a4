// The MoE expert FFNs as grouped tensor-core GEMMs of our own for sm_90a
// (wgmma + TMA), called by mf_cuda_moe_experts (src/cuda/moe.cu) on its
// "wgmma" path; see src/cuda/moe_gemm.cu.
#ifndef MF_CUDA_MOE_GEMM_CUH
#define MF_CUDA_MOE_GEMM_CUH

#include "cuda/common.cuh"
#include "minfer/ops.h"

// Whether this build has the kernel as sm_90a code and the context's device
// runs it (compute capability 9.0): asked once per context.
bool mf_moe_sm90_available(mf_cuda_ctx *c);

// Whether the kernels take these arguments: available, f16/bf16, H and I
// multiples of 8, row strides multiples of 8 elements and base pointers
// 16-byte aligned (TMA's 16-byte global strides), sizes within int32.
bool mf_moe_sm90_fits(mf_cuda_ctx *c, const mf_moe_experts_args *p);

// Queues the two grouped GEMMs on c->stream (no host sync: each block finds
// its experts' rows from the device offsets; graph-capturable):
//   h[:, :I] = silu(xs . W1_gate^T) * (xs . W1_up^T)   (SwiGLU, fused), or
//   h[:, :I] = gelu_tanh(xs . W1^T)                     (GELU, fused);
//   y = h[:, :I] . W2^T.
// p must fit (mf_moe_sm90_fits).
mf_status mf_moe_sm90_run(mf_cuda_ctx *c, const mf_moe_experts_args *p);

#endif // MF_CUDA_MOE_GEMM_CUH
