// CPU emulator: cuBLASLt and cuBLAS as a reference GEMM. Descriptors are
// checked as the library checks them, and a little more strictly where the
// library would read out of bounds or misbehave silently (every batch's
// matrix must lie inside one device allocation; an algorithm is only valid
// for the kind of problem and the pointer alignments it was found for). The
// product is an f32 OpenBLAS sgemm on f32 copies of the operands (exact for
// f16 / bf16 inputs, f32 accumulation like CUBLAS_COMPUTE_32F), followed by
// the epilogue in f32 in cuBLASLt's order: alpha AB + beta C, + bias, GELU
// (tanh form), one conversion to D's type. It runs when its stream runs.
#include <cblas.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "internal.h"

namespace mf_emu {
bool device_range(const void *p, size_t bytes); // runtime.cpp, under its lock
}

using namespace mf_emu;

namespace {

constexpr uint32_t kMagicLayout = 0x4c41594f, kMagicDesc = 0x44455343, kMagicPref = 0x50524546, kMagicHandle = 0x48414e44;
constexpr uint64_t kMagicAlgo = 0x4d46454d55414c47ull;

cublasStatus_t bad(cublasStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t bad(cublasStatus_t s, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mf_emu: cuBLAS: %s (%s)\n", buf, s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_INVALID_VALUE");
    return s;
}

size_t esize(cudaDataType_t t) {
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
    }
}

float load(const void *p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_32F) return static_cast<const float *>(p)[i];
    const uint16_t u = static_cast<const uint16_t *>(p)[i];
    return t == CUDA_R_16F ? f16_to_f32(u) : bf16_to_f32(u);
}

void store(void *p, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_32F) static_cast<float *>(p)[i] = v;
    else static_cast<uint16_t *>(p)[i] = t == CUDA_R_16F ? f32_to_f16(v) : f32_to_bf16(v);
}

float gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }

} // namespace

struct cublasLtContext {
    uint32_t magic = kMagicHandle;
};
struct cublasLtMatrixLayoutOpaque_t {
    uint32_t magic = kMagicLayout;
    cudaDataType type = CUDA_R_32F;
    uint64_t rows = 0, cols = 0;
    int64_t ld = 0;
    int32_t batch = 1;
    int64_t bstride = 0;
    int32_t order = CUBLASLT_ORDER_COL;
};
struct cublasLtMatmulDescOpaque_t {
    uint32_t magic = kMagicDesc;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cudaDataType_t scale = CUDA_R_32F;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    int32_t bias_type = -1;
};
struct cublasLtMatmulPreferenceOpaque_t {
    uint32_t magic = kMagicPref;
    uint64_t max_ws = 0;
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_MASK;
    uint32_t align[4] = {256, 256, 256, 256}; // A, B, C, D
};
struct cublasContext {
    uint32_t magic = kMagicHandle;
    cudaStream_t stream = nullptr;
};

namespace {

// The problem a matmul describes, checked.
struct Problem {
    uint64_t m, n, k;
    int32_t batch;
    cudaDataType_t ab, cd, bias_type;
};

template <class T> cublasStatus_t set_attr(T &field, const void *buf, size_t size) {
    if (!buf || size != sizeof(T)) return bad(CUBLAS_STATUS_INVALID_VALUE, "attribute of %zu bytes, expected %zu", size, sizeof(T));
    memcpy(&field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, Problem *p) {
    if (!d || d->magic != kMagicDesc) return bad(CUBLAS_STATUS_INVALID_VALUE, "not a matmul descriptor");
    for (cublasLtMatrixLayout_t l : {A, B, C, D})
        if (!l || l->magic != kMagicLayout) return bad(CUBLAS_STATUS_INVALID_VALUE, "not a matrix layout");
    if ((d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_PEDANTIC) || d->scale != CUDA_R_32F)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "compute type %d / scale type %d (emulated: 32F / R_32F)", d->compute, d->scale);
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "device pointer mode is not emulated");
    for (cublasLtMatrixLayout_t l : {A, B, C, D}) {
        if (l->order != CUBLASLT_ORDER_COL) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "row-major layouts are not emulated");
        if (!esize(l->type)) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "data type %d", l->type);
        if (l->ld < 1 || (uint64_t)l->ld < l->rows)
            return bad(CUBLAS_STATUS_INVALID_VALUE, "leading dimension %lld below the %llu rows", (long long)l->ld,
                       (unsigned long long)l->rows);
        if (l->batch < 1) return bad(CUBLAS_STATUS_INVALID_VALUE, "batch count %d", l->batch);
    }
    if (A->type != B->type || C->type != D->type)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "A/B types %d/%d, C/D types %d/%d", A->type, B->type, C->type, D->type);
    if (!(C->type == A->type || C->type == CUDA_R_32F))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "A/B of type %d with C/D of type %d", A->type, C->type);
    if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) || (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "transa %d / transb %d", d->transa, d->transb);
    const uint64_t m = D->rows, n = D->cols;
    const uint64_t am = d->transa == CUBLAS_OP_N ? A->rows : A->cols, k = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
    const uint64_t bk = d->transb == CUBLAS_OP_N ? B->rows : B->cols, bn = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
    if (am != m || bn != n || bk != k || C->rows != m || C->cols != n)
        return bad(CUBLAS_STATUS_INVALID_VALUE,
                   "shapes do not agree: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu",
                   (unsigned long long)am, (unsigned long long)k, (unsigned long long)bk, (unsigned long long)bn,
                   (unsigned long long)C->rows, (unsigned long long)C->cols, (unsigned long long)m, (unsigned long long)n);
    if (A->batch != D->batch || B->batch != D->batch || C->batch != D->batch)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "batch counts A %d, B %d, C %d, D %d differ", A->batch, B->batch, C->batch,
                   D->batch);
    if (C->ld != D->ld || C->bstride != D->bstride)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "C and D laid out differently (ld %lld / %lld)", (long long)C->ld,
                   (long long)D->ld);
    const uint32_t epi = d->epi;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT && epi != CUBLASLT_EPILOGUE_RELU && epi != CUBLASLT_EPILOGUE_BIAS &&
        epi != CUBLASLT_EPILOGUE_GELU && epi != CUBLASLT_EPILOGUE_GELU_BIAS)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u is not emulated", epi);
    cudaDataType_t bt = (cudaDataType_t)(d->bias_type < 0 ? (int)D->type : d->bias_type);
    if (epi & CUBLASLT_EPILOGUE_BIAS) {
        if (!d->bias) return bad(CUBLAS_STATUS_INVALID_VALUE, "a bias epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
        if (bt != D->type && bt != CUDA_R_32F) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "bias type %d with D of type %d", bt, D->type);
    }
    *p = Problem{m, n, k, D->batch, A->type, D->type, bt};
    return CUBLAS_STATUS_SUCCESS;
}

uint32_t align_of(const void *p, int64_t bstride, size_t es, int32_t batch) {
    uint64_t bits = (uint64_t)(uintptr_t)p | 256u;
    if (batch > 1) bits |= (uint64_t)bstride * es;
    return (uint32_t)(bits & (~bits + 1));
}

uint64_t fingerprint(const cublasLtMatmulDescOpaque_t *d, const Problem &p) {
    return (uint64_t)p.ab | (uint64_t)p.cd << 8 | (uint64_t)d->transa << 16 | (uint64_t)d->transb << 18 |
           (uint64_t)d->epi << 20;
}

// Whether every batch's matrix (rows x cols, ld, stride) lies in device memory.
bool in_device(const void *base, cublasLtMatrixLayout_t l) {
    const size_t es = esize(l->type);
    const size_t extent = ((size_t)(l->cols ? l->cols - 1 : 0) * (size_t)l->ld + (size_t)l->rows) * es;
    if (l->rows == 0 || l->cols == 0) return true;
    for (int32_t b = 0; b < l->batch; b++)
        if (!device_range(static_cast<const char *>(base) + (int64_t)b * l->bstride * (int64_t)es, extent)) return false;
    return true;
}

// op(X) of one batch as a dense column-major f32 matrix (r x c).
void to_f32(std::vector<float> &out, const void *base, const cublasLtMatrixLayoutOpaque_t *l, int64_t batch) {
    const size_t es = esize(l->type);
    const char *p = static_cast<const char *>(base) + batch * l->bstride * (int64_t)es;
    out.resize((size_t)l->rows * l->cols);
    for (uint64_t j = 0; j < l->cols; j++)
        for (uint64_t i = 0; i < l->rows; i++) out[j * l->rows + i] = load(p, l->type, j * (uint64_t)l->ld + i);
}

} // namespace

extern "C" {

const char *cublasLtGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}
const char *cublasGetStatusString(cublasStatus_t s) { return cublasLtGetStatusString(s); }

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new cublasLtContext();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h || h->magic != kMagicHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    *l = new cublasLtMatrixLayoutOpaque_t();
    (*l)->type = t, (*l)->rows = rows, (*l)->cols = cols, (*l)->ld = ld;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    if (!l || l->magic != kMagicLayout) return CUBLAS_STATUS_INVALID_VALUE;
    l->magic = 0;
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t size) {
    if (!l || l->magic != kMagicLayout) return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return set_attr(l->type, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set_attr(l->order, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set_attr(l->rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set_attr(l->cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD: return set_attr(l->ld, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set_attr(l->batch, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set_attr(l->bstride, buf, size);
    }
    return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix layout attribute %d", (int)a);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    *d = new cublasLtMatmulDescOpaque_t();
    (*d)->compute = compute, (*d)->scale = scale;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    if (!d || d->magic != kMagicDesc) return CUBLAS_STATUS_INVALID_VALUE;
    d->magic = 0;
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t size) {
    if (!d || d->magic != kMagicDesc) return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return set_attr(d->compute, buf, size);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set_attr(d->scale, buf, size);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set_attr(d->pointer_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_attr(d->transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_attr(d->transb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_attr(d->epi, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_attr(d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set_attr(d->bias_type, buf, size);
    }
    return bad(CUBLAS_STATUS_INVALID_VALUE, "matmul descriptor attribute %d", (int)a);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    *p = new cublasLtMatmulPreferenceOpaque_t();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    if (!p || p->magic != kMagicPref) return CUBLAS_STATUS_INVALID_VALUE;
    p->magic = 0;
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                    size_t size) {
    if (!p || p->magic != kMagicPref) return CUBLAS_STATUS_INVALID_VALUE;
    uint32_t v32 = 0;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return set_attr(v32, buf, size);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set_attr(p->max_ws, buf, size);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return set_attr(p->reduction, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        const cublasStatus_t s = set_attr(v32, buf, size);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
        if (v32 == 0 || (v32 & (v32 - 1)) || v32 > 256)
            return bad(CUBLAS_STATUS_INVALID_VALUE, "minimum alignment %u is not a power of two <= 256", v32);
        p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v32;
        return CUBLAS_STATUS_SUCCESS;
    }
    }
    return bad(CUBLAS_STATUS_INVALID_VALUE, "preference attribute %d", (int)a);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                              cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned) {
    if (!h || h->magic != kMagicHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!pref || pref->magic != kMagicPref || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    Problem p;
    const cublasStatus_t s = check(d, A, B, C, D, &p);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    // Element alignment is the least any kernel takes; the heuristic trusts the preferences for the rest.
    const uint32_t es[4] = {(uint32_t)esize(A->type), (uint32_t)esize(B->type), (uint32_t)esize(C->type),
                            (uint32_t)esize(D->type)};
    for (int i = 0; i < 4; i++)
        if (pref->align[i] < es[i]) return CUBLAS_STATUS_NOT_SUPPORTED;
    // Reduction schemes: a reference GEMM does not split K, which every mask allows.
    if ((d->epi & CUBLASLT_EPILOGUE_BIAS) && (uintptr_t)d->bias % 16) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = kMagicAlgo;
    results[0].algo.data[1] = fingerprint(d, p);
    for (int i = 0; i < 4; i++) results[0].algo.data[2 + i] = pref->align[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t *algo, void *workspace, size_t ws_bytes, cudaStream_t stream) {
    if (!h || h->magic != kMagicHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta) return bad(CUBLAS_STATUS_INVALID_VALUE, "alpha / beta NULL");
    Problem p;
    cublasStatus_t s = check(d, Ad, Bd, Cd, Dd, &p);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!algo || algo->data[0] != kMagicAlgo)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "no algorithm (emulated: pass one from cublasLtMatmulAlgoGetHeuristic)");
    if (algo->data[1] != fingerprint(d, p))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "the algorithm was found for another kind of problem (types, ops or epilogue)");
    (void)workspace, (void)ws_bytes;
    const float a = *static_cast<const float *>(alpha), b = *static_cast<const float *>(beta);
    const void *ptr[4] = {A, B, C, D};
    const cublasLtMatrixLayout_t lay[4] = {Ad, Bd, Cd, Dd};
    for (int i = 0; i < 4; i++) {
        if (i == 2 && b == 0.0f) continue; // C is not read
        if (!ptr[i]) return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %c is NULL", "ABCD"[i]);
        const uint32_t got = align_of(ptr[i], lay[i]->bstride, esize(lay[i]->type), lay[i]->batch);
        if (got < algo->data[2 + i])
            return bad(CUBLAS_STATUS_NOT_SUPPORTED,
                       "matrix %c at %p (batch stride %lld) is %u-byte aligned; the algorithm was found for %u-byte "
                       "alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)",
                       "ABCD"[i], ptr[i], (long long)lay[i]->bstride, got, (unsigned)algo->data[2 + i], "ABCD"[i]);
        if (!in_device(ptr[i], lay[i]))
            return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %c (%llux%llu, ld %lld, %d batch(es) of stride %lld) is not inside one device allocation",
                       "ABCD"[i], (unsigned long long)lay[i]->rows, (unsigned long long)lay[i]->cols,
                       (long long)lay[i]->ld, lay[i]->batch, (long long)lay[i]->bstride);
    }
    const bool has_bias = d->epi & CUBLASLT_EPILOGUE_BIAS;
    if (has_bias && !device_range(d->bias, p.m * esize(p.bias_type)))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "the bias (%llu elements) is not inside one device allocation",
                   (unsigned long long)p.m);
    // Everything the queued work needs, by value: descriptors may change or go before it runs.
    const cublasLtMatrixLayoutOpaque_t la = *Ad, lb = *Bd, lc = *Cd, ld = *Dd;
    const int32_t ta = d->transa, tb = d->transb;
    const uint32_t epi = d->epi;
    const void *bias = d->bias;
    const cudaError_t e = enqueue_host_op(stream, "cublasLtMatmul", [=]() -> cudaError_t {
        std::vector<float> fa, fb, acc((size_t)p.m * p.n);
        for (int32_t bt = 0; bt < p.batch; bt++) {
            to_f32(fa, A, &la, bt);
            to_f32(fb, B, &lb, bt);
            if (p.k > 0)
                cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                            tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)p.m, (int)p.n, (int)p.k, 1.0f,
                            fa.data(), (int)la.rows, fb.data(), (int)lb.rows, 0.0f, acc.data(), (int)p.m);
            else
                std::fill(acc.begin(), acc.end(), 0.0f);
            const size_t es_c = esize(lc.type), es_d = esize(ld.type);
            const char *cb = static_cast<const char *>(C) + bt * lc.bstride * (int64_t)es_c;
            char *db = static_cast<char *>(D) + bt * ld.bstride * (int64_t)es_d;
            for (uint64_t j = 0; j < p.n; j++)
                for (uint64_t i = 0; i < p.m; i++) {
                    float v = a * acc[j * p.m + i];
                    if (b != 0.0f) v += b * load(cb, lc.type, j * (uint64_t)lc.ld + i);
                    if (has_bias) v += load(bias, p.bias_type, i);
                    if (epi == CUBLASLT_EPILOGUE_RELU) v = v > 0.0f ? v : 0.0f;
                    if (epi & CUBLASLT_EPILOGUE_GELU) v = gelu_tanh(v);
                    store(db, ld.type, j * (uint64_t)ld.ld + i, v);
                }
        }
        return cudaSuccess;
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// ---- cuBLAS ---------------------------------------------------------------------------------------

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new cublasContext();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h || h->magic != kMagicHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h || h->magic != kMagicHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t ta[], const cublasOperation_t tb[],
                                          const int m[], const int n[], const int k[], const void *alpha,
                                          const void *const Aarr[], cudaDataType_t At, const int lda[],
                                          const void *const Barr[], cudaDataType_t Bt, const int ldb[],
                                          const void *beta, void *const Carr[], cudaDataType_t Ct, const int ldc[],
                                          int groups, const int gsize[], cublasComputeType_t compute) {
    if (!h || h->magic != kMagicHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (groups < 0) return bad(CUBLAS_STATUS_INVALID_VALUE, "group_count %d", groups);
    if (groups == 0) return CUBLAS_STATUS_SUCCESS;
    if (!ta || !tb || !m || !n || !k || !alpha || !beta || !lda || !ldb || !ldc || !gsize || !Aarr || !Barr || !Carr)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "a NULL array");
    if (At != Bt || At != Ct || !esize(At))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "types A %d, B %d, C %d (emulated: one of 32F, 16F, 16BF for all)", At, Bt, Ct);
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "compute type %d", compute);
    struct G {
        cublasOperation_t ta, tb;
        int m, n, k, lda, ldb, ldc, size;
        float alpha, beta;
    };
    std::vector<G> gs((size_t)groups);
    int total = 0;
    for (int g = 0; g < groups; g++) {
        G x{ta[g], tb[g], m[g], n[g], k[g], lda[g], ldb[g], ldc[g], gsize[g], static_cast<const float *>(alpha)[g],
            static_cast<const float *>(beta)[g]};
        if (x.m < 0 || x.n < 0 || x.k < 0 || x.size < 0 || (x.ta != CUBLAS_OP_N && x.ta != CUBLAS_OP_T) ||
            (x.tb != CUBLAS_OP_N && x.tb != CUBLAS_OP_T) || x.lda < std::max(1, x.ta == CUBLAS_OP_N ? x.m : x.k) ||
            x.ldb < std::max(1, x.tb == CUBLAS_OP_N ? x.k : x.n) || x.ldc < std::max(1, x.m))
            return bad(CUBLAS_STATUS_INVALID_VALUE, "group %d: m %d n %d k %d lda %d ldb %d ldc %d ops %d/%d size %d", g, x.m,
                       x.n, x.k, x.lda, x.ldb, x.ldc, x.ta, x.tb, x.size);
        gs[(size_t)g] = x;
        total += x.size;
    }
    for (const void *arr : {(const void *)Aarr, (const void *)Barr, (const void *)Carr})
        if (!device_range(arr, (size_t)total * sizeof(void *)))
            return bad(CUBLAS_STATUS_INVALID_VALUE, "a pointer array is not in device memory (%d entries)", total);
    const cudaDataType_t t = At;
    const cudaError_t e = enqueue_host_op(h->stream, "cublasGemmGroupedBatchedEx", [=]() -> cudaError_t {
        const size_t es = esize(t);
        int idx = 0;
        std::vector<float> fa, fb, fc;
        for (const G &x : gs)
            for (int p = 0; p < x.size; p++, idx++) {
                const void *Ap = Aarr[idx], *Bp = Barr[idx]; // read on the device, when the work runs
                void *Cp = Carr[idx];
                const int ar = x.ta == CUBLAS_OP_N ? x.m : x.k, ac = x.ta == CUBLAS_OP_N ? x.k : x.m;
                const int br = x.tb == CUBLAS_OP_N ? x.k : x.n, bc = x.tb == CUBLAS_OP_N ? x.n : x.k;
                const bool ok = device_range(Ap, ((size_t)(ac ? ac - 1 : 0) * x.lda + ar) * es) &&
                                device_range(Bp, ((size_t)(bc ? bc - 1 : 0) * x.ldb + br) * es) &&
                                device_range(Cp, ((size_t)(x.n ? x.n - 1 : 0) * x.ldc + x.m) * es);
                if (!ok && x.m && x.n) {
                    fprintf(stderr, "mf_emu: cublasGemmGroupedBatchedEx: problem %d's matrices are not inside device allocations\n", idx);
                    return cudaErrorIllegalAddress;
                }
                fa.assign((size_t)ar * ac, 0.0f), fb.assign((size_t)br * bc, 0.0f), fc.assign((size_t)x.m * x.n, 0.0f);
                for (int j = 0; j < ac; j++)
                    for (int i = 0; i < ar; i++) fa[(size_t)j * ar + i] = load(Ap, t, (size_t)j * x.lda + i);
                for (int j = 0; j < bc; j++)
                    for (int i = 0; i < br; i++) fb[(size_t)j * br + i] = load(Bp, t, (size_t)j * x.ldb + i);
                if (x.k > 0 && x.m > 0 && x.n > 0)
                    cblas_sgemm(CblasColMajor, x.ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                                x.tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, x.m, x.n, x.k, 1.0f, fa.data(),
                                std::max(1, ar), fb.data(), std::max(1, br), 0.0f, fc.data(), std::max(1, x.m));
                for (int j = 0; j < x.n; j++)
                    for (int i = 0; i < x.m; i++) {
                        float v = x.alpha * fc[(size_t)j * x.m + i];
                        if (x.beta != 0.0f) v += x.beta * load(Cp, t, (size_t)j * x.ldc + i);
                        store(Cp, t, (size_t)j * x.ldc + i, v);
                    }
            }
        return cudaSuccess;
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} // extern "C"
