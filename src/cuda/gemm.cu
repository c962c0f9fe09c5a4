// GEMM through cuBLASLt (mf_gemm): c = act(alpha * a @ b + beta * c + bias),
// f32 accumulation (CUBLAS_COMPUTE_32F: plain f32 for f32 inputs, no TF32).
//
// Our matrices are row-major, cuBLASLt's column-major. A row-major (m, n) c
// read column-major is c^T, an (n, m) matrix, so we ask cuBLASLt for
//     c^T = b^T a^T        its "A" is our b, its "B" our a, m and n swapped.
// A row-major operand read column-major is already the transpose we need
// (op N); a column-major view (a torch Linear weight (n, k) passed as its
// transpose) gets op T. Batches are strided (stride 0 broadcasts a or b).
//
// Epilogues: bias and GELU (cuBLASLt's GELU is the tanh approximation, as on
// the CPU) run fused in cuBLASLt. If its heuristic has no algorithm with the
// epilogue, the GEMM runs without it and gemm_epilogue_kernel applies bias
// and GELU afterwards (then c is rounded twice for f16/bf16 outputs).
// k == 0 never reaches cuBLASLt: gemm_epilogue_kernel writes act(beta * c + bias).
#include "cuda/common.cuh"
#include "ops/check.h"

namespace {

constexpr int kEpilogueThreads = 256;

// ---- the epilogue kernel (k == 0, and the unfused fallback) -------------------------

struct EpilogueParams {
    void *c;              // (batch, m, n): row stride ldc, batch stride bstride
    const void *bias;     // (n), c's dtype, or NULL
    int c_dt;
    int64_t batch, m, n, ldc, bstride;
    float cscale;         // c = act(cscale * c + bias)
    bool read_c;          // false: c is not read (beta == 0: it may hold NaN)
    bool gelu;
};

__device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f; // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// One element per thread per step, grid-stride over batch * m * n elements
// (int64 index math; rows may be padded, so (i, j) are recovered first).
__global__ void __launch_bounds__(kEpilogueThreads) gemm_epilogue_kernel(EpilogueParams p) {
    const int64_t total = p.batch * p.m * p.n;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t j = e % p.n, r = e / p.n;
        const int64_t i = r % p.m, bt = r / p.m;
        const int64_t off = bt * p.bstride + i * p.ldc + j;
        float v = p.read_c ? p.cscale * mf_ld(p.c, p.c_dt, off) : 0.0f;
        if (p.bias) v += mf_ld(p.bias, p.c_dt, j);
        if (p.gelu) v = gelu_tanh(v);
        mf_st(p.c, p.c_dt, off, v);
    }
}

mf_status launch_epilogue(mf_cuda_ctx *ctx, const EpilogueParams &p) {
    const int64_t total = p.batch * p.m * p.n;
    gemm_epilogue_kernel<<<mf_cuda_grid(ctx, (total + kEpilogueThreads - 1) / kEpilogueThreads), kEpilogueThreads,
                           0, ctx->stream>>>(p);
    MF_CUDA_CHECK_LAUNCH("gemm epilogue");
    return MF_OK;
}

// ---- cuBLASLt ---------------------------------------------------------------------

cudaDataType_t lt_type(mf_dtype dt) {
    if (dt == MF_DTYPE_F16) return CUDA_R_16F;
    if (dt == MF_DTYPE_BF16) return CUDA_R_16BF;
    return CUDA_R_32F;
}

// One matrix as cuBLASLt stores it (before its op).
struct LtMatrix {
    const void *data;
    cudaDataType_t type;
    cublasOperation_t op;
    uint64_t rows, cols;  // of the stored column-major matrix
    int64_t ld;           // >= rows
    int64_t bstride;      // elements between batches; 0 broadcasts
    uint32_t align;       // bytes guaranteed for every batch's first element, power of two <= 256
};

// Largest power of two (<= 256) dividing the address and the batch stride in bytes.
uint32_t align_of(const void *p, int64_t bstride, size_t esz) {
    uint64_t bits = (uint64_t)(uintptr_t)p | 256u | (uint64_t)bstride * esz;
    return (uint32_t)(bits & (~bits + 1));
}

// Our row-major-indexed (R, C) operand t, with layout l, as the column-major
// matrix whose op is t^T (C, R): row-major memory already is t^T (op N),
// column-major memory is t (op T).
LtMatrix lt_operand(const mf_tensor *t, const mf_mat_layout *l, int64_t R, int64_t C) {
    LtMatrix o;
    o.data = t->data;
    o.type = lt_type(t->dtype);
    o.op = l->col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
    o.rows = (uint64_t)(l->col_major ? R : C);
    o.cols = (uint64_t)(l->col_major ? C : R);
    o.ld = l->ld;
    o.bstride = l->batch_stride;
    o.align = align_of(t->data, o.bstride, mf_dtype_size(t->dtype));
    return o;
}

// Descriptors of one matmul; destroyed on every path out of mf_cuda_gemm.
struct LtPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr; // c also describes d (same buffer)
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulHeuristicResult_t heur;
    bool found = false;
    LtPlan() = default;
    LtPlan(const LtPlan &) = delete;
    LtPlan &operator=(const LtPlan &) = delete;
    ~LtPlan() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

mf_status lt_layout(cublasLtMatrixLayout_t *out, const LtMatrix &m, int32_t batch) {
    MF_CUBLAS_TRY(cublasLtMatrixLayoutCreate(out, m.type, m.rows, m.cols, m.ld));
    if (batch > 1) {
        MF_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
        MF_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &m.bstride,
                                                       sizeof m.bstride));
    }
    return MF_OK;
}

// Builds the descriptors and asks the heuristic for one algorithm; plan.found
// says whether it had one (no algorithm is not an error here).
mf_status lt_plan(mf_cuda_ctx *ctx, LtPlan &plan, const LtMatrix &A, const LtMatrix &B, const LtMatrix &C,
                  int32_t batch, cublasLtEpilogue_t epi, const void *bias) {
    MF_CUBLAS_TRY(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t ta = A.op, tb = B.op;
    MF_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    MF_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        MF_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (bias) // bias type defaults to d's type, which is ours (bias dtype == c dtype)
            MF_CUBLAS_TRY(
                cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    MF_TRY(lt_layout(&plan.a, A, batch));
    MF_TRY(lt_layout(&plan.b, B, batch));
    MF_TRY(lt_layout(&plan.c, C, batch));
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&plan.pref));
    const uint64_t ws = ctx->workspace_bytes;
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(plan.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                       sizeof ws));
    // The heuristic assumes 256-byte aligned buffers unless told: offset views
    // (a slice of a fused QKV output) must only get kernels that accept them.
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                       &A.align, sizeof A.align));
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                       &B.align, sizeof B.align));
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                       &C.align, sizeof C.align));
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                       &C.align, sizeof C.align));
    int count = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, plan.op, plan.a, plan.b, plan.c, plan.c, plan.pref,
                                                       1, &plan.heur, &count);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return MF_OK; // nothing for this configuration: plan.found stays false
    MF_CUBLAS_TRY(st);
    plan.found = count > 0 && plan.heur.state == CUBLAS_STATUS_SUCCESS &&
                 plan.heur.workspaceSize <= ctx->workspace_bytes;
    return MF_OK;
}

const char *op_name(cublasOperation_t op) { return op == CUBLAS_OP_T ? "col-major" : "row-major"; }

} // namespace

extern "C" mf_status mf_cuda_gemm(mf_backend *be, const mf_gemm_args *p) {
    mf_cuda_ctx *ctx = mf_cuda_ctx_of(be);
    const int nd = p->c.ndim;
    const int64_t batch = nd == 3 ? p->c.shape[0] : 1;
    const int64_t m = p->c.shape[nd - 2], n = p->c.shape[nd - 1], k = p->a.shape[nd - 1];
    const int64_t ldc = m > 1 ? p->c.stride[nd - 2] : n;
    const int64_t c_bstride = batch > 1 ? p->c.stride[0] : 0;
    const bool gelu = p->epilogue == MF_EPILOGUE_GELU;
    const void *bias = p->bias ? p->bias->data : nullptr;

    EpilogueParams ep;
    ep.c = p->c.data, ep.bias = bias, ep.c_dt = p->c.dtype;
    ep.batch = batch, ep.m = m, ep.n = n, ep.ldc = ldc, ep.bstride = c_bstride;
    ep.gelu = gelu;
    if (k == 0) { // a @ b is all zeros: no cuBLASLt call (it may refuse k == 0)
        ep.cscale = p->beta, ep.read_c = p->beta != 0.0f;
        return launch_epilogue(ctx, ep);
    }
    if (batch > INT32_MAX)
        return mf_fail(MF_ERR_UNSUPPORTED, "gemm: batch %lld exceeds cuBLASLt's int32 batch count", (long long)batch);

    mf_mat_layout la, lb;
    MF_TRY(mf_mat_layout_of(&p->a, "gemm", "a", &la));
    MF_TRY(mf_mat_layout_of(&p->b, "gemm", "b", &lb));
    const LtMatrix A = lt_operand(&p->b, &lb, k, n); // cuBLASLt's A = our b: op(A) = b^T, (n, k)
    const LtMatrix B = lt_operand(&p->a, &la, m, k); // cuBLASLt's B = our a: op(B) = a^T, (k, m)
    LtMatrix C;
    C.data = p->c.data, C.type = lt_type(p->c.dtype), C.op = CUBLAS_OP_N;
    C.rows = (uint64_t)n, C.cols = (uint64_t)m, C.ld = ldc, C.bstride = c_bstride;
    C.align = align_of(p->c.data, c_bstride, mf_dtype_size(p->c.dtype));

    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (gelu) epi = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (bias) epi = CUBLASLT_EPILOGUE_BIAS;

    LtPlan fused, plain;
    LtPlan *plan = &fused;
    MF_TRY(lt_plan(ctx, fused, A, B, C, (int32_t)batch, epi, bias));
    if (!fused.found && epi != CUBLASLT_EPILOGUE_DEFAULT) {
        MF_TRY(lt_plan(ctx, plain, A, B, C, (int32_t)batch, CUBLASLT_EPILOGUE_DEFAULT, nullptr));
        plan = &plain;
    }
    if (!plan->found)
        return mf_fail(MF_ERR_UNSUPPORTED,
                       "gemm: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld batch=%lld, a %s %s (ld %lld), "
                       "b %s %s (ld %lld), c %s (ld %lld), alignment a/b/c %u/%u/%u bytes",
                       (long long)m, (long long)n, (long long)k, (long long)batch, mf_dtype_name(p->a.dtype),
                       op_name(B.op), (long long)B.ld, mf_dtype_name(p->b.dtype), op_name(A.op), (long long)A.ld,
                       mf_dtype_name(p->c.dtype), (long long)ldc, B.align, A.align, C.align);

    const float alpha = p->alpha, beta = p->beta; // with beta == 0 cuBLASLt does not read c
    MF_CUBLAS_TRY(cublasLtMatmul(ctx->lt, plan->op, &alpha, A.data, plan->a, B.data, plan->b, &beta, C.data, plan->c,
                                 p->c.data, plan->c, &plan->heur.algo, ctx->workspace, ctx->workspace_bytes,
                                 ctx->stream));
    if (plan == &plain) { // the epilogue cuBLASLt could not fuse
        ep.cscale = 1.0f, ep.read_c = true;
        return launch_epilogue(ctx, ep);
    }
    return MF_OK;
}
