// Skinny GEMM for decode (m = 1..8 rows), called by the CUDA GEMM
// (src/cuda/gemm/gemm.cu) on its "gemv" path; see src/cuda/gemm/gemv.cu.
#ifndef MF_CUDA_GEMV_CUH
#define MF_CUDA_GEMV_CUH

#include "cuda/common.cuh"
#include "kernels/act_math.h"

// tanh-approximate GELU in f32 (GPT-2's gelu_new) with mf_act's formula,
// x sigmoid(2u), as the CPU computes it; shared by the GEMM epilogue kernel
// and the gemv kernels.
__device__ __forceinline__ float mf_gelu_tanh(float x) { return mf_act_apply(MF_ACT_GELU_TANH, x); }

constexpr int kMfGemvMaxRows = 8; // m above this goes to cuBLASLt

// c = act(alpha * a @ b + beta * c + bias) for one (non-batched) GEMM whose
// weight is a torch Linear weight: b's column j is contiguous along k.
struct MfGemvArgs {
    const void *a;    // (m, k) f16/bf16, row i at a + i * lda, unit stride along k
    const void *w;    // (n, k) same dtype: row j (b's column j) at w + j * ldw, unit stride along k
    void *c;          // (m, n) c_dt: row i at c + i * ldc, unit stride
    const void *bias; // (n) c_dt, or NULL
    int ab_dt, c_dt;  // mf_dtype values
    int64_t m, n, k;
    int64_t lda, ldw, ldc;
    float alpha, beta; // beta == 0: c is not read
    bool gelu;
};

// Whether the kernel takes the call: m in 1..8, f16/bf16 operands, k a
// multiple of 8, a and w 16-byte aligned with leading dimensions that are
// multiples of 8 elements (every 16-byte load aligned), n and k < 2^31.
bool mf_gemv_fits(const MfGemvArgs &g);

// K-splits the launch uses on this device (1: one pass, no scratch).
int mf_gemv_splits(const mf_cuda_ctx *ctx, const MfGemvArgs &g);

// Queues the kernel(s) on ctx->stream. partial: (splits, m, n) f32 scratch
// when mf_gemv_splits() > 1, else unused (may be NULL).
mf_status mf_gemv_launch(mf_cuda_ctx *ctx, const MfGemvArgs &g, int splits, float *partial);

#endif // MF_CUDA_GEMV_CUH
