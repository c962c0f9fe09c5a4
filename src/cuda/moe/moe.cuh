// Internal: what the MoE files of the CUDA backend share: the family's
// per-backend state, a layout check, and the expert paths that experts.cu
// dispatches to: the decode kernels (experts_decode.cu) and our sm_90a grouped
// GEMMs (moe_gemm.cu).
#ifndef MF_CUDA_MOE_MOE_CUH
#define MF_CUDA_MOE_MOE_CUH

#include "cuda/common.cuh"
#include "minfer/ops.h"

// What the family keeps per backend (mf_cuda_ctx::moe), made by its first
// use (experts.cu) and freed by mf_cuda_moe_release.
struct mf_cuda_moe_state {
    void *cublas;     // cublasHandle_t of the "grouped" path, created on its first use
    const char *path; // how the last moe_experts ran: "decode" | "wgmma" | "loop" | "grouped" | ""
    int sm90;         // the sm_90a grouped GEMMs run here: 1 yes, -1 no, 0 not asked yet
};
// The backend's state, made on first use; NULL (with mf_fail's message) when
// out of host memory.
mf_cuda_moe_state *mf_cuda_moe_state_of(mf_cuda_ctx *c);

// Rows of a 2-D view can be read in 16-byte pieces.
static inline bool mf_moe_rows_aligned16(const mf_tensor *t) {
    const int64_t esz = (int64_t)mf_dtype_size(t->dtype);
    return mf_aligned16(t->data) && (t->shape[0] <= 1 || (t->stride[0] * esz) % 16 == 0);
}

// ---- experts_decode.cu: at most MF_MOE_DECODE_MAX_ROWS routed rows ----

// Whether the decode kernels take these (validated) arguments.
bool mf_moe_decode_fits(const mf_moe_experts_args *p);
// Queues the two decode launches (no host sync; graph-capturable).
mf_status mf_moe_decode_run(mf_backend *be, const mf_moe_experts_args *a);

// ---- moe_gemm.cu: grouped tensor-core GEMMs for sm_90a (wgmma + TMA) ----

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

#endif // MF_CUDA_MOE_MOE_CUH
