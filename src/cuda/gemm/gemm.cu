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
// Paths (src/ops/gemm_plan.h names them; MF_GEMM_LOG=1 prints one line per
// plan built). Every one rounds c once, from the f32 value the CPU computes:
//   plain        no epilogue: cuBLASLt alone.
//   fused        bias and/or GELU (tanh form, as on the CPU) as a cuBLASLt
//                epilogue, applied to the f32 alpha a@b + beta c before the
//                one conversion to c's dtype.
//   in-place     f32 c and no fused algorithm (cuBLASLt has none for some odd
//                leading dimensions) or a bias under 16-byte alignment:
//                cuBLASLt writes alpha a@b + beta c into c, gemm_epilogue_kernel
//                adds the bias and applies GELU there (f32 throughout).
//   f32-scratch  the same for f16/bf16 c: cuBLASLt writes alpha a@b into an
//                f32 scratch (beta 0), gemm_epilogue_kernel computes
//                act(scratch + beta c + bias) in f32 and stores c once. (The
//                earlier fallback stored round(alpha a@b + beta c) in c and
//                added the bias to that: a second rounding of an intermediate
//                that can be far larger than the result when an outlier bias
//                cancels it; bf16 results were off by up to 13 ulp on the H100.)
//   k0           k == 0 never reaches cuBLASLt: the kernel writes act(beta c + bias).
//   gemv         decode shapes (one matrix, m = 1..8 rows, f16/bf16, b the
//                transposed view of a torch Linear weight, k a multiple of 8,
//                16-byte aligned a and b): our skinny GEMM (src/cuda/gemm/gemv.cu),
//                epilogue included, one rounding. OFF by default until a GPU
//                run measures it against cuBLASLt (`minfer bench gemv`,
//                docs/notes/gemv.md): MINFER_GEMV=1 in the environment when the
//                backend's first GEMM runs turns it on (read once per backend);
//                mf_cuda_gemm_set_gemv() overrides that (tests, the benchmark).
//                Every other shape keeps cuBLASLt.
//
// Plans (descriptors, layouts, the heuristic's algorithm, the path) are
// cached per backend, keyed by everything the heuristic saw: dtypes, ops,
// m, n, k, leading dimensions, batch count and strides, epilogue, and the
// alignment of every pointer (a, b, c, bias). 64 sets x 4 ways, LRU within a
// set; a hit allocates nothing and makes one host-only cuBLASLt call (the bias
// pointer). Entries are freed with the backend. Not thread-safe: a backend is
// used by one thread at a time (its stream and workspace already require that).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/alloc.h"
#include "cuda/common.cuh"
#include "cuda/gemm/gemv.cuh"
#include "kernels/mat_layout.h"
#include "cuda/cuda_query.h"

namespace {

constexpr int kEpilogueThreads = 256;
constexpr int kSets = 64, kWays = 4; // 256 plans
constexpr uint32_t kFusedBiasAlign = 16; // bytes: cuBLASLt kernels may assume it (no preference attribute covers the bias)

// ---- the epilogue kernel (k == 0 and the unfused paths) ---------------------------------

struct EpilogueParams {
    void *c;              // (batch, m, n): row stride ldc, batch stride bstride
    const float *acc;     // (batch, m, n) packed f32 alpha a@b (f32-scratch path), or NULL
    const void *bias;     // (n), c's dtype, or NULL
    int c_dt;
    int64_t batch, m, n, ldc, bstride;
    float cscale;         // c = act(acc + cscale * c + bias)
    bool read_c;          // false: c is not read (beta == 0: it may hold NaN)
    bool gelu;
};

// One element per thread per step, grid-stride over batch * m * n elements
// (int64 index math; rows may be padded, so (i, j) are recovered first). The
// sum is formed in the CPU's order (acc, then beta c, then bias) and stored once.
__global__ void __launch_bounds__(kEpilogueThreads) gemm_epilogue_kernel(EpilogueParams p) {
    const int64_t total = p.batch * p.m * p.n;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t j = e % p.n, r = e / p.n;
        const int64_t i = r % p.m, bt = r / p.m;
        const int64_t off = bt * p.bstride + i * p.ldc + j;
        float v = p.acc ? p.acc[e] : 0.0f;
        if (p.read_c) v += p.cscale * mf_ld(p.c, p.c_dt, off);
        if (p.bias) v += mf_ld(p.bias, p.c_dt, j);
        if (p.gelu) v = mf_gelu_tanh(v);
        mf_st(p.c, p.c_dt, off, v);
    }
}

mf_status launch_epilogue(mf_cuda_ctx *ctx, const EpilogueParams &p) {
    const int64_t total = p.batch * p.m * p.n;
    MF_LAUNCH(gemm_epilogue_kernel, mf_cuda_grid(ctx, (total + kEpilogueThreads - 1) / kEpilogueThreads), kEpilogueThreads, 0, ctx->stream, p);
    MF_CUDA_CHECK_LAUNCH("gemm epilogue");
    return MF_OK;
}

// ---- cuBLASLt operands ---------------------------------------------------------------

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

// ---- plans -----------------------------------------------------------------------------

enum Path : int { kPathPlain, kPathFused, kPathInPlace, kPathScratch, kPathGemv };
const char *const kPathNames[] = {"plain", "fused", "in-place", "f32-scratch", "gemv"};

// Everything the heuristic's choice depends on. Built in a zeroed struct so
// that padding compares equal (memcmp).
struct PlanKey {
    int32_t a_type, b_type, c_type;  // cudaDataType_t of cuBLASLt's A (our b), B (our a), C
    int32_t op_a, op_b;
    int32_t epi;                     // cublasLtEpilogue_t asked for
    int32_t batch;
    int32_t gemv;                    // the gemv path was on and the call fits it
    uint32_t align_a, align_b, align_c, align_bias; // bytes (bias: 0 if none)
    int64_t rows_a, cols_a, rows_b, cols_b, n, m;   // stored shapes; c^T is (n, m)
    int64_t lda, ldb, ldc;
    int64_t sa, sb, sc;              // batch strides (elements)
};

struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr; // c describes C and D (the scratch on kPathScratch)
    cublasLtMatmulAlgo_t algo;
    size_t ws = 0;
    Path path = kPathPlain;
    void release() {
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
        op = nullptr, a = b = c = nullptr;
    }
};

// Releases a plan being built unless it is handed over (keep()).
struct PlanGuard {
    Plan *p;
    ~PlanGuard() {
        if (p) p->release();
    }
    void keep() { p = nullptr; }
};

struct Entry {
    PlanKey key;
    uint64_t hash;
    uint64_t last_use; // 0: empty slot
    Plan plan;
};

} // namespace

// The per-backend cache (mf_cuda_ctx::gemm), created on the first GEMM.
struct mf_cuda_gemm_state {
    Entry set[kSets][kWays];
    uint64_t tick, hits, misses, evictions;
    bool enabled;       // false: plan every call and free it after (bench "before")
    bool log;           // MF_GEMM_LOG=1: one line per plan built, on stderr
    bool gemv;          // the "gemv" path is allowed (MINFER_GEMV=1, or mf_cuda_gemm_set_gemv)
    const char *last_path;
    float *scratch;     // (scratch_bytes) f32 alpha a@b of the f32-scratch path
    size_t scratch_bytes;
    // Outgrown scratch buffers, freed only with the backend: a recorded CUDA
    // Graph may still hold one (graph.cu), so none is freed while in use.
    void *retired[48];
    int n_retired;
};

namespace {

uint64_t hash_key(const PlanKey &k) { // FNV-1a over the key's bytes
    const unsigned char *s = reinterpret_cast<const unsigned char *>(&k);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof k; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

mf_status lt_layout(cublasLtMatrixLayout_t *out, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                    int32_t batch, int64_t bstride) {
    MF_CUBLAS_TRY(cublasLtMatrixLayoutCreate(out, type, rows, cols, ld));
    if (batch > 1) {
        MF_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
        MF_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bstride,
                                                       sizeof bstride));
    }
    return MF_OK;
}

// What one plan attempt describes: cuBLASLt's A, B and C = D.
struct Attempt {
    const LtMatrix *A, *B;
    cudaDataType_t c_type;
    uint64_t c_rows, c_cols;
    int64_t ldc, c_bstride;
    uint32_t c_align;
    cublasLtEpilogue_t epi;
    const void *bias; // set before the heuristic: it reads the pointer's alignment
    cudaDataType_t bias_type;
};

// Builds the descriptors and asks the heuristic for one algorithm. *found
// says whether it had one (no algorithm is not an error here); without one
// the plan is released.
mf_status lt_plan(mf_cuda_ctx *ctx, const Attempt &t, int32_t batch, Plan *plan, bool *found) {
    *found = false;
    PlanGuard guard{plan};
    MF_CUBLAS_TRY(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t ta = t.A->op, tb = t.B->op;
    MF_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    MF_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (t.epi != CUBLASLT_EPILOGUE_DEFAULT) {
        MF_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &t.epi, sizeof t.epi));
        if (t.bias) {
            // Said explicitly (the default, -1, means d's type, which it is):
            // bias and c share a dtype (src/ops/gemm.c). Batch stride 0 (the
            // default): one bias vector for every batch.
            const int32_t bt = t.bias_type;
            MF_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
            MF_CUBLAS_TRY(
                cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &t.bias, sizeof t.bias));
        }
    }
    MF_TRY(lt_layout(&plan->a, t.A->type, t.A->rows, t.A->cols, t.A->ld, batch, t.A->bstride));
    MF_TRY(lt_layout(&plan->b, t.B->type, t.B->rows, t.B->cols, t.B->ld, batch, t.B->bstride));
    MF_TRY(lt_layout(&plan->c, t.c_type, t.c_rows, t.c_cols, t.ldc, batch, t.c_bstride));
    cublasLtMatmulPreference_t pref = nullptr;
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    struct PrefGuard {
        cublasLtMatmulPreference_t p;
        ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } pref_guard{pref};
    const uint64_t ws = ctx->workspace_bytes;
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    // Split-K parts are added in f32 (in the workspace) or not at all: the
    // default mask also allows INPLACE and OUTPUT_TYPE, which add them in c's
    // dtype, a second rounding per part for an f16/bf16 c (one rounding is
    // the contract). Found by review, not yet by a GPU run.
    const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                                       sizeof reduction));
    // The heuristic assumes 256-byte aligned buffers unless told: offset views
    // (a slice of a fused QKV output) must only get kernels that accept them.
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &t.A->align,
                                                       sizeof t.A->align));
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &t.B->align,
                                                       sizeof t.B->align));
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &t.c_align,
                                                       sizeof t.c_align));
    MF_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &t.c_align,
                                                       sizeof t.c_align));
    cublasLtMatmulHeuristicResult_t heur;
    memset(&heur, 0, sizeof heur);
    int count = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(ctx->lt, plan->op, plan->a, plan->b, plan->c, plan->c, pref, 1, &heur, &count);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return MF_OK; // nothing for this configuration
    MF_CUBLAS_TRY(st);
    if (count > 0 && heur.state == CUBLAS_STATUS_SUCCESS && heur.workspaceSize <= ctx->workspace_bytes) {
        plan->algo = heur.algo;
        plan->ws = heur.workspaceSize;
        *found = true;
        guard.keep();
    }
    return MF_OK;
}

const char *op_name(cublasOperation_t op) { return op == CUBLAS_OP_T ? "col-major" : "row-major"; }

const char *epi_name(cublasLtEpilogue_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_BIAS: return "bias";
    case CUBLASLT_EPILOGUE_GELU: return "gelu";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "bias+gelu";
    default: return "none";
    }
}

// One GEMM call, resolved to cuBLASLt's view of it.
struct Call {
    int64_t batch, m, n, k;
    LtMatrix A, B, C;       // cuBLASLt's A (our b), B (our a), C = D (our c)
    cublasLtEpilogue_t epi; // what the call asks for
    const void *bias;
    uint32_t bias_align;    // 0: no bias
    mf_dtype a_dt, c_dt;
    MfGemvArgs gv;          // the call as the gemv kernel sees it
    bool gemv;              // the gemv path is on and mf_gemv_fits(gv)
};

// Plans a call from nothing: fused when asked and possible, else the
// unfused path for c's dtype. Fails only when cuBLASLt has no algorithm at all.
mf_status build_plan(mf_cuda_ctx *ctx, mf_cuda_gemm_state *g, const Call &cl, Plan *plan) {
    const int32_t batch = (int32_t)cl.batch;
    Attempt t;
    t.A = &cl.A, t.B = &cl.B;
    t.c_type = cl.C.type, t.c_rows = cl.C.rows, t.c_cols = cl.C.cols, t.ldc = cl.C.ld, t.c_bstride = cl.C.bstride;
    t.c_align = cl.C.align;
    t.epi = cl.epi, t.bias = cl.bias, t.bias_type = cl.C.type;
    bool found = false;
    const char *why = "";
    if (cl.gemv) {
        plan->path = kPathGemv;
        if (g->log)
            fprintf(stderr,
                    "minfer gemm plan: m=%lld n=%lld k=%lld batch=1 a=%s ld %lld, w (n, k) ld %lld, c=%s ld %lld, "
                    "epilogue %s -> gemv, %d k-split(s)\n",
                    (long long)cl.m, (long long)cl.n, (long long)cl.k, mf_dtype_name(cl.a_dt), (long long)cl.gv.lda,
                    (long long)cl.gv.ldw, mf_dtype_name(cl.c_dt), (long long)cl.C.ld, epi_name(cl.epi),
                    mf_gemv_splits(ctx, cl.gv));
        return MF_OK;
    }
    if (cl.epi == CUBLASLT_EPILOGUE_DEFAULT) {
        MF_TRY(lt_plan(ctx, t, batch, plan, &found));
        plan->path = kPathPlain;
    } else if (cl.bias && cl.bias_align < kFusedBiasAlign) {
        why = " (bias under 16-byte alignment)";
    } else {
        // An error from the epilogue attempt (not only "not supported") falls
        // back to the unfused path like an empty answer: the plain GEMM below
        // still has to succeed, and MF_GEMM_LOG shows what cuBLASLt said.
        const mf_status fs = lt_plan(ctx, t, batch, plan, &found);
        plan->path = kPathFused;
        if (fs != MF_OK) {
            found = false, why = " (cuBLASLt failed on the epilogue)";
            if (g->log) fprintf(stderr, "minfer gemm plan: fused attempt: %s\n", mf_last_error());
        } else if (!found) {
            why = " (cuBLASLt has no algorithm with the epilogue)";
        }
    }
    if (!found && cl.epi != CUBLASLT_EPILOGUE_DEFAULT) {
        t.epi = CUBLASLT_EPILOGUE_DEFAULT, t.bias = nullptr;
        if (cl.c_dt == MF_DTYPE_F32) {
            plan->path = kPathInPlace;
        } else { // D = the f32 scratch, packed (n, m) column-major per batch
            plan->path = kPathScratch;
            t.c_type = CUDA_R_32F, t.ldc = cl.n, t.c_bstride = cl.batch > 1 ? cl.m * cl.n : 0;
            t.c_align = align_of(nullptr, t.c_bstride, sizeof(float)); // cudaMalloc'd: 256-byte aligned base
        }
        MF_TRY(lt_plan(ctx, t, batch, plan, &found));
    }
    if (!found)
        return mf_fail(MF_ERR_UNSUPPORTED,
                       "gemm: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld batch=%lld, a %s %s (ld %lld), "
                       "b %s %s (ld %lld), c %s (ld %lld), alignment a/b/c %u/%u/%u bytes",
                       (long long)cl.m, (long long)cl.n, (long long)cl.k, (long long)cl.batch,
                       mf_dtype_name(cl.a_dt), op_name(cl.B.op), (long long)cl.B.ld, mf_dtype_name(cl.a_dt),
                       op_name(cl.A.op), (long long)cl.A.ld, mf_dtype_name(cl.c_dt), (long long)cl.C.ld, cl.B.align,
                       cl.A.align, cl.C.align);
    if (g->log)
        fprintf(stderr,
                "minfer gemm plan: m=%lld n=%lld k=%lld batch=%lld a=%s %s ld %lld, b=%s %s ld %lld, c=%s ld %lld, "
                "align a/b/c/bias %u/%u/%u/%u, epilogue %s -> %s%s, workspace %zu\n",
                (long long)cl.m, (long long)cl.n, (long long)cl.k, (long long)cl.batch, mf_dtype_name(cl.a_dt),
                op_name(cl.B.op), (long long)cl.B.ld, mf_dtype_name(cl.a_dt), op_name(cl.A.op), (long long)cl.A.ld,
                mf_dtype_name(cl.c_dt), (long long)cl.C.ld, cl.B.align, cl.A.align, cl.C.align, cl.bias_align,
                epi_name(cl.epi), kPathNames[plan->path], why, plan->ws);
    return MF_OK;
}

mf_status gemm_state(mf_cuda_ctx *ctx, mf_cuda_gemm_state **out) {
    if (!ctx->gemm) {
        mf_cuda_gemm_state *g = static_cast<mf_cuda_gemm_state *>(mf_calloc(1, sizeof *g));
        if (!g) return mf_fail(MF_ERR_OOM, "gemm: out of host memory for the plan cache (%zu bytes)", sizeof *g);
        g->enabled = true;
        const char *log = getenv("MF_GEMM_LOG");
        g->log = log && *log && strcmp(log, "0") != 0;
        g->last_path = "";
        const char *gemv = getenv("MINFER_GEMV"); // read once per backend: off unless "1"
        g->gemv = gemv && strcmp(gemv, "1") == 0;
        ctx->gemm = g;
    }
    *out = ctx->gemm;
    return MF_OK;
}

// The f32 scratch of at least `bytes`. It grows at least 2x at a time, and
// the old buffer is retired, not freed: queued GEMMs and recorded graphs may
// still use it, and no cudaFree (which waits for the device) may run while a
// graph is being recorded.
mf_status scratch_of(mf_cuda_gemm_state *g, size_t bytes, float **out) {
    if (g->scratch_bytes < bytes) {
        if (bytes < 2 * g->scratch_bytes) bytes = 2 * g->scratch_bytes;
        if (g->scratch && g->n_retired == (int)(sizeof g->retired / sizeof g->retired[0]))
            return mf_fail(MF_ERR_UNSUPPORTED, "gemm: the f32 scratch grew %d times (now %zu bytes)", g->n_retired,
                           g->scratch_bytes);
        void *p = nullptr;
        cudaError_t e = mf_fault_should_fail() ? cudaErrorMemoryAllocation : cudaMalloc(&p, bytes);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return mf_fail(e == cudaErrorMemoryAllocation ? MF_ERR_OOM : MF_ERR_CUDA,
                           "gemm: cannot allocate the %zu-byte f32 scratch of the unfused epilogue: %s", bytes,
                           cudaGetErrorString(e));
        }
        if (g->scratch) g->retired[g->n_retired++] = g->scratch;
        g->scratch = static_cast<float *>(p), g->scratch_bytes = bytes;
    }
    *out = g->scratch;
    return MF_OK;
}

PlanKey key_of(const Call &cl) {
    PlanKey k;
    memset(&k, 0, sizeof k);
    k.a_type = cl.A.type, k.b_type = cl.B.type, k.c_type = cl.C.type;
    k.op_a = cl.A.op, k.op_b = cl.B.op;
    k.epi = cl.epi;
    k.batch = (int32_t)cl.batch;
    k.gemv = cl.gemv;
    k.align_a = cl.A.align, k.align_b = cl.B.align, k.align_c = cl.C.align, k.align_bias = cl.bias_align;
    k.rows_a = (int64_t)cl.A.rows, k.cols_a = (int64_t)cl.A.cols;
    k.rows_b = (int64_t)cl.B.rows, k.cols_b = (int64_t)cl.B.cols;
    k.n = cl.n, k.m = cl.m;
    k.lda = cl.A.ld, k.ldb = cl.B.ld, k.ldc = cl.C.ld;
    k.sa = cl.A.bstride, k.sb = cl.B.bstride, k.sc = cl.C.bstride;
    return k;
}

// The cached plan for the call, built on a miss (evicting the set's least
// recently used entry).
mf_status cached_plan(mf_cuda_ctx *ctx, mf_cuda_gemm_state *g, const Call &cl, Plan **out) {
    const PlanKey key = key_of(cl);
    const uint64_t h = hash_key(key);
    Entry *set = g->set[h % kSets];
    Entry *victim = &set[0];
    g->tick++;
    for (int w = 0; w < kWays; w++) {
        Entry &e = set[w];
        if (e.last_use && e.hash == h && memcmp(&e.key, &key, sizeof key) == 0) {
            e.last_use = g->tick;
            g->hits++;
            *out = &e.plan;
            return MF_OK;
        }
        if (e.last_use < victim->last_use) victim = &e;
    }
    g->misses++;
    Plan fresh;
    MF_TRY(build_plan(ctx, g, cl, &fresh));
    if (victim->last_use) {
        victim->plan.release();
        g->evictions++;
    }
    victim->key = key, victim->hash = h, victim->last_use = g->tick, victim->plan = fresh;
    *out = &victim->plan;
    return MF_OK;
}

mf_status run_plan(mf_cuda_ctx *ctx, mf_cuda_gemm_state *g, const Call &cl, Plan &plan, const mf_gemm_args *p,
                   EpilogueParams &ep) {
    if (plan.path == kPathGemv) {
        const int splits = mf_gemv_splits(ctx, cl.gv);
        float *s = nullptr;
        if (splits > 1) MF_TRY(scratch_of(g, (size_t)splits * (size_t)(cl.m * cl.n) * sizeof(float), &s));
        MF_TRY(mf_gemv_launch(ctx, cl.gv, splits, s));
        g->last_path = kPathNames[kPathGemv];
        return MF_OK;
    }
    float alpha = p->alpha, beta = p->beta; // with beta == 0 cuBLASLt does not read c
    void *d = p->c.data;
    if (plan.path == kPathFused && cl.bias) // same alignment class as planned (it is in the key)
        MF_CUBLAS_TRY(
            cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &cl.bias, sizeof cl.bias));
    if (plan.path == kPathScratch) {
        float *s = nullptr;
        MF_TRY(scratch_of(g, (size_t)(cl.batch * cl.m * cl.n) * sizeof(float), &s));
        d = s, beta = 0.0f;
    }
    MF_CUBLAS_TRY(cublasLtMatmul(ctx->lt, plan.op, &alpha, cl.A.data, plan.a, cl.B.data, plan.b, &beta, d, plan.c, d,
                                 plan.c, &plan.algo, ctx->workspace, ctx->workspace_bytes, ctx->stream));
    g->last_path = kPathNames[plan.path];
    if (plan.path == kPathInPlace) { // c = alpha a@b + beta c, in f32: add the bias, apply GELU
        ep.acc = nullptr, ep.cscale = 1.0f, ep.read_c = true;
        return launch_epilogue(ctx, ep);
    }
    if (plan.path == kPathScratch) { // c = act(scratch + beta c + bias), one rounding
        ep.acc = static_cast<const float *>(d), ep.cscale = p->beta, ep.read_c = p->beta != 0.0f;
        return launch_epilogue(ctx, ep);
    }
    return MF_OK;
}

} // namespace

extern "C" void mf_cuda_gemm_release(mf_cuda_ctx *ctx) {
    mf_cuda_gemm_state *g = ctx->gemm;
    if (!g) return;
    for (int s = 0; s < kSets; s++)
        for (int w = 0; w < kWays; w++)
            if (g->set[s][w].last_use) g->set[s][w].plan.release();
    if (g->scratch) cudaFree(g->scratch);
    for (int i = 0; i < g->n_retired; i++) cudaFree(g->retired[i]);
    free(g);
    ctx->gemm = nullptr;
}

extern "C" const char *mf_cuda_gemm_last_path(mf_backend *be) {
    const mf_cuda_gemm_state *g = mf_cuda_ctx_of(be)->gemm;
    return g ? g->last_path : "";
}

extern "C" void mf_cuda_gemm_cache_stats_of(mf_backend *be, mf_cuda_gemm_cache_stats *out) {
    memset(out, 0, sizeof *out);
    out->capacity = kSets * kWays;
    out->enabled = true;
    const mf_cuda_gemm_state *g = mf_cuda_ctx_of(be)->gemm;
    if (!g) return;
    out->hits = g->hits, out->misses = g->misses, out->evictions = g->evictions, out->enabled = g->enabled;
    for (int s = 0; s < kSets; s++)
        for (int w = 0; w < kWays; w++) out->entries += g->set[s][w].last_use != 0;
}

extern "C" void mf_cuda_gemm_set_gemv(mf_backend *be, bool on) {
    mf_cuda_gemm_state *g = nullptr;
    if (gemm_state(mf_cuda_ctx_of(be), &g) == MF_OK) g->gemv = on;
}

extern "C" bool mf_cuda_gemm_gemv_on(mf_backend *be) {
    mf_cuda_gemm_state *g = nullptr;
    return gemm_state(mf_cuda_ctx_of(be), &g) == MF_OK && g->gemv;
}

extern "C" void mf_cuda_gemm_cache_enable(mf_backend *be, bool on) {
    mf_cuda_gemm_state *g = nullptr;
    if (gemm_state(mf_cuda_ctx_of(be), &g) == MF_OK) g->enabled = on;
}

extern "C" mf_status mf_cuda_gemm(mf_backend *be, const mf_gemm_args *p) {
    mf_cuda_ctx *ctx = mf_cuda_ctx_of(be);
    mf_cuda_gemm_state *g = nullptr;
    MF_TRY(gemm_state(ctx, &g));
    const int nd = p->c.ndim;
    const int64_t batch = nd == 3 ? p->c.shape[0] : 1;
    const int64_t m = p->c.shape[nd - 2], n = p->c.shape[nd - 1], k = p->a.shape[nd - 1];
    const int64_t ldc = m > 1 ? p->c.stride[nd - 2] : n;
    const int64_t c_bstride = batch > 1 ? p->c.stride[0] : 0;
    const bool gelu = p->epilogue == MF_EPILOGUE_GELU;
    const void *bias = p->bias ? p->bias->data : nullptr;

    EpilogueParams ep;
    ep.c = p->c.data, ep.acc = nullptr, ep.bias = bias, ep.c_dt = p->c.dtype;
    ep.batch = batch, ep.m = m, ep.n = n, ep.ldc = ldc, ep.bstride = c_bstride;
    ep.gelu = gelu;
    if (k == 0) { // a @ b is all zeros: no cuBLASLt call (it may refuse k == 0)
        ep.cscale = p->beta, ep.read_c = p->beta != 0.0f;
        g->last_path = "k0";
        return launch_epilogue(ctx, ep);
    }
    if (batch > INT32_MAX)
        return mf_fail(MF_ERR_UNSUPPORTED, "gemm: batch %lld exceeds cuBLASLt's int32 batch count", (long long)batch);

    mf_mat_layout la, lb;
    MF_TRY(mf_mat_layout_of(&p->a, "gemm", "a", &la));
    MF_TRY(mf_mat_layout_of(&p->b, "gemm", "b", &lb));
    Call cl;
    cl.batch = batch, cl.m = m, cl.n = n, cl.k = k;
    cl.A = lt_operand(&p->b, &lb, k, n); // cuBLASLt's A = our b: op(A) = b^T, (n, k)
    cl.B = lt_operand(&p->a, &la, m, k); // cuBLASLt's B = our a: op(B) = a^T, (k, m)
    cl.C.data = p->c.data, cl.C.type = lt_type(p->c.dtype), cl.C.op = CUBLAS_OP_N;
    cl.C.rows = (uint64_t)n, cl.C.cols = (uint64_t)m, cl.C.ld = ldc, cl.C.bstride = c_bstride;
    cl.C.align = align_of(p->c.data, c_bstride, mf_dtype_size(p->c.dtype));
    cl.epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (gelu) cl.epi = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (bias) cl.epi = CUBLASLT_EPILOGUE_BIAS;
    cl.bias = bias;
    cl.bias_align = bias ? align_of(bias, 0, 1) : 0;
    cl.a_dt = p->a.dtype, cl.c_dt = p->c.dtype;
    // The gemv view: one matrix, a rows along k, b's columns contiguous along k.
    MfGemvArgs &gv = cl.gv;
    gv.a = p->a.data, gv.w = p->b.data, gv.c = p->c.data, gv.bias = bias;
    gv.ab_dt = p->a.dtype, gv.c_dt = p->c.dtype;
    gv.m = m, gv.n = n, gv.k = k;
    gv.lda = m > 1 ? p->a.stride[nd - 2] : k, gv.ldw = n > 1 ? p->b.stride[nd - 1] : k, gv.ldc = ldc;
    gv.alpha = p->alpha, gv.beta = p->beta, gv.gelu = gelu;
    cl.gemv = g->gemv && batch == 1 && p->a.stride[nd - 1] == 1 && p->b.stride[nd - 2] == 1 && mf_gemv_fits(gv);

    if (g->enabled) {
        Plan *plan = nullptr;
        MF_TRY(cached_plan(ctx, g, cl, &plan));
        return run_plan(ctx, g, cl, *plan, p, ep);
    }
    Plan plan; // uncached: what every call did before the cache
    MF_TRY(build_plan(ctx, g, cl, &plan));
    PlanGuard guard{&plan};
    return run_plan(ctx, g, cl, plan, p, ep);
}
