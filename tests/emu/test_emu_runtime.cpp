// The emulated runtime and libraries: device memory (poison, allocation
// table, range checks, limits), streams that run when waited for (a host
// read before the synchronize sees poison), events, the legacy stream's
// ordering, graph capture and replay (arguments recorded at capture; the
// calls a capture refuses), kernel attributes and occupancy, the device
// model (MF_EMU_CC / MF_EMU_SMS through mf_emu_set_device), tensor-map
// validation, and cuBLASLt / cuBLAS: the reference GEMM with every epilogue
// against a float64 product, and the descriptor checks.
#include <cmath>
#include <random>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/portable.cuh"
#include "emu_test.h"

namespace {

__global__ void add_kernel(float *x, float v, int n) {
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (int)(gridDim.x * blockDim.x)) x[i] += v;
}

__global__ void static_smem_kernel(int *o) {
    MF_SHARED(float, big, [4096]); // 16 KB
    big[threadIdx.x] = 1.0f;
    __syncthreads();
    o[threadIdx.x] = (int)big[(threadIdx.x + 1) % blockDim.x];
}

void test_memory() {
    float *d = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void **>(&d), 100 * sizeof(float)));
    std::vector<float> h(100);
    CUDA_OK(cudaMemcpy(h.data(), d, sizeof(float) * 100, cudaMemcpyDeviceToHost));
    CHECK(std::isnan(h[0]) && std::isnan(h[99]), "fresh device memory is poison (NaN)");
    CHECK(cudaMemset(d, 0, 101 * sizeof(float)) == cudaErrorInvalidValue, "a memset past the allocation");
    CHECK(cudaMemcpy(d, h.data(), 400, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "a copy with the kind backwards");
    CHECK(cudaMemcpy(d + 50, h.data(), 400, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "a copy past the allocation");
    CHECK(cudaMemset(h.data(), 0, 4) == cudaErrorInvalidValue, "a memset of host memory");
    CHECK(cudaFree(d + 1) == cudaErrorInvalidValue, "cudaFree of an inner pointer");
    (void)cudaGetLastError();
    size_t fr = 0, tot = 0;
    CUDA_OK(cudaMemGetInfo(&fr, &tot));
    void *huge = nullptr;
    CHECK(cudaMalloc(&huge, tot + 1) == cudaErrorMemoryAllocation && huge == nullptr, "more than the device has");
    CHECK(cudaMalloc(&huge, SIZE_MAX) == cudaErrorMemoryAllocation, "SIZE_MAX");
    (void)cudaGetLastError();
    CUDA_OK(cudaFree(d));
    CUDA_OK(cudaFree(nullptr));
}

void test_streams_events() {
    Dev<float> x(std::vector<float>(1000, 1.0f));
    float *pinned = nullptr;
    CUDA_OK(cudaMallocHost(reinterpret_cast<void **>(&pinned), 1000 * sizeof(float)));
    for (int i = 0; i < 1000; i++) pinned[i] = -5.0f;
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    CUDA_OK(cudaEventRecord(a, s));
    MF_LAUNCH(add_kernel, 4, 128, 0, s, x.p, 2.0f, 1000);
    CUDA_OK(cudaMemcpyAsync(pinned, x.p, 1000 * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaEventRecord(b, s));
    CHECK(pinned[10] == -5.0f, "work on a stream has not run before something waits for it");
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b) == cudaErrorNotReady, "elapsed time of events not yet reached");
    CUDA_OK(cudaEventSynchronize(b));
    CHECK(pinned[10] == 3.0f, "after the event: the kernel then the copy (%g)", pinned[10]);
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    CHECK(ms >= 0.0f, "elapsed %g ms", ms);
    // Another stream ordered after s by an event; the legacy stream after both (a blocking stream waits for it).
    cudaStream_t t;
    CUDA_OK(cudaStreamCreate(&t));
    MF_LAUNCH(add_kernel, 4, 128, 0, s, x.p, 10.0f, 1000);
    CUDA_OK(cudaEventRecord(a, s));
    CUDA_OK(cudaStreamWaitEvent(t, a, 0));
    MF_LAUNCH(add_kernel, 4, 128, 0, t, x.p, 100.0f, 1000);
    CUDA_OK(cudaStreamSynchronize(t));
    CHECK(x.get()[999] == 113.0f, "t ran after s through the event: %g", x.get()[999]);
    MF_LAUNCH(add_kernel, 4, 128, 0, t, x.p, 1000.0f, 1000);
    std::vector<float> h(1000);
    CUDA_OK(cudaMemcpy(h.data(), x.p, 4000, cudaMemcpyDeviceToHost)); // the legacy stream waits for blocking t
    CHECK(h[0] == 1113.0f, "a legacy-stream copy after a blocking stream's kernel: %g", h[0]);
    cudaEvent_t nt;
    CUDA_OK(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming));
    CUDA_OK(cudaEventRecord(nt, s));
    CUDA_OK(cudaEventSynchronize(nt));
    CHECK(cudaEventElapsedTime(&ms, nt, nt) == cudaErrorInvalidResourceHandle, "timing of a DisableTiming event");
    (void)cudaGetLastError();
    for (cudaEvent_t e : {a, b, nt}) CUDA_OK(cudaEventDestroy(e));
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaStreamDestroy(t));
    CUDA_OK(cudaFreeHost(pinned));
}

void test_graphs() {
    Dev<float> x(std::vector<float>(256, 0.0f));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    cudaStreamCaptureStatus st;
    CUDA_OK(cudaStreamIsCapturing(s, &st));
    CHECK(st == cudaStreamCaptureStatusActive, "capturing");
    float v = 1.0f;
    MF_LAUNCH(add_kernel, 2, 128, 0, s, x.p, v, 256); // v is recorded now
    v = 100.0f;
    CUDA_OK(cudaMemsetAsync(x.p + 255, 0, sizeof(float), s));
    cudaGraph_t g;
    CUDA_OK(cudaStreamEndCapture(s, &g));
    CHECK(x.get()[0] == 0.0f, "capture records, it does not run");
    cudaGraphExec_t ex;
    CUDA_OK(cudaGraphInstantiate(&ex, g, 0));
    CUDA_OK(cudaGraphDestroy(g));
    for (int i = 0; i < 3; i++) CUDA_OK(cudaGraphLaunch(ex, s));
    CUDA_OK(cudaStreamSynchronize(s));
    const auto h = x.get();
    CHECK(h[0] == 3.0f && h[255] == 0.0f, "three replays with the recorded argument: %g %g", h[0], h[255]);
    CUDA_OK(cudaGraphExecDestroy(ex));
    // What a capture refuses.
    std::vector<float> pageable(4, 2.0f);
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CHECK(cudaMemcpyAsync(x.p, pageable.data(), 16, cudaMemcpyHostToDevice, s) == cudaErrorStreamCaptureUnsupported,
          "a copy from pageable memory inside a capture");
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && g == nullptr, "the capture is invalidated");
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported, "a synchronize of the capturing stream");
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated, "invalidated");
    CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeRelaxed) == cudaErrorStreamCaptureUnsupported,
          "the legacy stream cannot capture");
    cudaStream_t blocking;
    CUDA_OK(cudaStreamCreate(&blocking));
    CUDA_OK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamIsCapturing(nullptr, &st) == cudaErrorStreamCaptureImplicit,
          "the legacy stream while a blocking stream captures");
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 16) == cudaErrorStreamCaptureUnsupported, "cudaMalloc inside a global-mode capture");
    CHECK(cudaStreamEndCapture(blocking, &g) == cudaErrorStreamCaptureInvalidated, "invalidated");
    (void)cudaGetLastError();
    CUDA_OK(cudaStreamDestroy(blocking));
    CUDA_OK(cudaStreamDestroy(s));
}

void test_attributes() {
    cudaFuncAttributes fa;
    CUDA_OK(cudaFuncGetAttributes(&fa, add_kernel));
    CHECK(fa.binaryVersion == 90 && fa.ptxVersion == 90 && fa.maxDynamicSharedSizeBytes == 48 << 10,
          "binary %d ptx %d dyn %d", fa.binaryVersion, fa.ptxVersion, fa.maxDynamicSharedSizeBytes);
    Dev<int> o(256);
    MF_LAUNCH(static_smem_kernel, 1, 256, 0, 0, o.p);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFuncGetAttributes(&fa, static_smem_kernel));
    CHECK(fa.sharedSizeBytes >= 16384 && fa.sharedSizeBytes < 16384 + 64, "static shared memory seen: %zu",
          fa.sharedSizeBytes);
    int n = 0;
    CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, add_kernel, 256, 0));
    CHECK(n == 8, "256-thread blocks per SM: %d (2048 threads)", n);
    CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, static_smem_kernel, 1024, 100 << 10));
    CHECK(n == 0, "100 KB of dynamic shared memory without the opt-in: %d", n);
    CUDA_OK(cudaFuncSetAttribute(static_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10));
    CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, static_smem_kernel, 128, 100 << 10));
    CHECK(n == 1, "one block of 116 KB per 228 KB SM: %d", n);
    int v = 0;
    CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CHECK(v == 232448, "opt-in shared memory %d", v);
    CHECK(mf_emu_set_device(8, 0, 108) == cudaSuccess, "8.0");
    CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
    CUDA_OK(cudaFuncGetAttributes(&fa, add_kernel));
    CHECK(v == 8 && fa.binaryVersion == 80, "an 8.0 device: cc %d, binary %d", v, fa.binaryVersion);
    CHECK(mf_emu_set_device(7, 5, 40) == cudaErrorInvalidValue, "7.5 is not emulated");
    CHECK(mf_emu_set_device(9, 0, 132) == cudaSuccess, "9.0");
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q;
    CUDA_OK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    CHECK(f == reinterpret_cast<void *>(&cuTensorMapEncodeTiled) && q == cudaDriverEntryPointSuccess, "entry point");
}

void test_tensor_map_checks() {
    Dev<uint16_t> g(64 * 64);
    CUtensorMap map;
    auto enc = [&](void *base, cuuint64_t d0, cuuint64_t stride, cuuint32_t b0, cuuint32_t b1, CUtensorMapSwizzle sw) {
        const cuuint64_t dims[2] = {d0, 64}, strides[1] = {stride};
        const cuuint32_t box[2] = {b0, b1}, es[2] = {1, 1};
        return cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, base, dims, strides, box, es,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    };
    CHECK(enc(g.p, 64, 128, 64, 16, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_SUCCESS, "a good map");
    CHECK(enc(g.p + 1, 64, 128, 64, 16, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_ERROR_INVALID_VALUE, "base not 16-aligned");
    CHECK(enc(g.p, 64, 120, 64, 16, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_ERROR_INVALID_VALUE, "stride not a multiple of 16");
    CHECK(enc(g.p, 64, 96, 32, 16, CU_TENSOR_MAP_SWIZZLE_NONE) == CUDA_ERROR_INVALID_VALUE, "stride below the row");
    CHECK(enc(g.p, 64, 128, 64, 300, CU_TENSOR_MAP_SWIZZLE_NONE) == CUDA_ERROR_INVALID_VALUE, "box over 256");
    CHECK(enc(g.p, 64, 128, 4, 16, CU_TENSOR_MAP_SWIZZLE_NONE) == CUDA_ERROR_INVALID_VALUE, "inner box of 8 bytes");
    CHECK(enc(g.p, 64, 128, 64, 16, CU_TENSOR_MAP_SWIZZLE_64B) == CUDA_ERROR_INVALID_VALUE, "128-byte box, 64B swizzle");
    CHECK(mf_emu_set_device(8, 0, 108) == cudaSuccess, "8.0");
    CHECK(enc(g.p, 64, 128, 64, 16, CU_TENSOR_MAP_SWIZZLE_128B) != CUDA_SUCCESS, "no tensor maps before 9.0");
    CHECK(mf_emu_set_device(9, 0, 132) == cudaSuccess, "9.0");
}

// ---- cuBLASLt --------------------------------------------------------------------------------------------

std::mt19937 rng(99);

float to_type(float v, cudaDataType_t t) {
    if (t == CUDA_R_16F) return h2f(f2h(v));
    if (t == CUDA_R_16BF) { // round to bf16 (RNE) through the emulated conversion
        const __nv_bfloat16 b = __float2bfloat16_rn(v);
        return __bfloat162float(b);
    }
    return v;
}

void put(std::vector<uint8_t> &buf, size_t i, float v, cudaDataType_t t) {
    if (t == CUDA_R_32F) memcpy(&buf[i * 4], &v, 4);
    else {
        const uint16_t u = t == CUDA_R_16F ? f2h(v) : __bfloat16_as_ushort(__float2bfloat16_rn(v));
        memcpy(&buf[i * 2], &u, 2);
    }
}
float get(const std::vector<uint8_t> &buf, size_t i, cudaDataType_t t) {
    if (t == CUDA_R_32F) {
        float v;
        memcpy(&v, &buf[i * 4], 4);
        return v;
    }
    uint16_t u;
    memcpy(&u, &buf[i * 2], 2);
    return t == CUDA_R_16F ? h2f(u) : bf2f(u);
}
size_t es(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// D (m x n, column-major, ld ldd) = epi(alpha op(A) op(B) + beta C + bias) for `batch` strided batches.
void gemm_case(cudaDataType_t ab, cudaDataType_t cd, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
               int batch, cublasLtEpilogue_t epi, float alpha, float beta) {
    const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    const int lda = ar + 3, ldb = br + 1, ldc = m + 2;
    const int64_t sa = (int64_t)lda * ac, sb = batch > 1 ? (int64_t)ldb * bc : 0, sc = (int64_t)ldc * n;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> A((size_t)sa * batch), B((size_t)ldb * bc * batch), C((size_t)sc * batch), bias(m);
    for (auto &x : A) x = to_type(u(rng), ab);
    for (auto &x : B) x = to_type(u(rng), ab);
    for (auto &x : C) x = to_type(u(rng), cd);
    for (auto &x : bias) x = to_type(u(rng), cd);
    std::vector<uint8_t> hA(A.size() * es(ab)), hB(B.size() * es(ab)), hC(C.size() * es(cd)), hbias(m * es(cd));
    for (size_t i = 0; i < A.size(); i++) put(hA, i, A[i], ab);
    for (size_t i = 0; i < B.size(); i++) put(hB, i, B[i], ab);
    for (size_t i = 0; i < C.size(); i++) put(hC, i, C[i], cd);
    for (int i = 0; i < m; i++) put(hbias, (size_t)i, bias[i], cd);
    Dev<uint8_t> dA(hA), dB(hB), dC(hC), dbias(hbias);
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    const void *bp = dbias.p;
    if (epi & CUBLASLT_EPILOGUE_BIAS) cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
    cublasLtMatrixLayoutCreate(&la, ab, (uint64_t)ar, (uint64_t)ac, lda);
    cublasLtMatrixLayoutCreate(&lb, ab, (uint64_t)br, (uint64_t)bc, ldb);
    cublasLtMatrixLayoutCreate(&lc, cd, (uint64_t)m, (uint64_t)n, ldc);
    for (auto l : {la, lb, lc}) cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa);
    cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb);
    cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof sc);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    const uint32_t al = 16;
    for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        cublasLtMatmulPreferenceSetAttribute(pref, a, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res;
    int count = 0;
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &count) == CUBLAS_STATUS_SUCCESS &&
              count == 1,
          "heuristic");
    CHECK(cublasLtMatmul(h, op, &alpha, dA.p, la, dB.p, lb, &beta, dC.p, lc, dC.p, lc, &res.algo, nullptr, 0, nullptr) ==
              CUBLAS_STATUS_SUCCESS,
          "matmul");
    const auto out = dC.get();
    double worst = 0;
    for (int bt = 0; bt < batch; bt++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double s = 0;
                for (int p = 0; p < k; p++) {
                    const double a = ta == CUBLAS_OP_N ? A[bt * sa + (size_t)p * lda + i] : A[bt * sa + (size_t)i * lda + p];
                    const double b = tb == CUBLAS_OP_N ? B[bt * sb + (size_t)j * ldb + p] : B[bt * sb + (size_t)p * ldb + j];
                    s += a * b;
                }
                double v = alpha * s + beta * C[bt * sc + (size_t)j * ldc + i];
                if (epi & CUBLASLT_EPILOGUE_BIAS) v += bias[i];
                if (epi & CUBLASLT_EPILOGUE_GELU) v = 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
                const double got = get(out, (size_t)bt * sc + (size_t)j * ldc + i, cd);
                worst = std::max(worst, std::fabs(got - v) / (1.0 + std::fabs(v)));
            }
    const double tol = cd == CUDA_R_32F ? 1e-5 : cd == CUDA_R_16F ? 2e-3 : 1e-2;
    CHECK(worst < tol, "cuBLASLt %dx%dx%d batch %d types %d/%d ops %d/%d epilogue %d: error %.3g", m, n, k, batch, ab, cd,
          ta, tb, epi, worst);
    // Pointers less aligned than the algorithm was found for.
    const float one = 1.0f, zero = 0.0f;
    if (ab != CUDA_R_32F && batch == 1)
        CHECK(cublasLtMatmul(h, op, &one, static_cast<uint8_t *>(dA.p) + 2, la, dB.p, lb, &zero, dC.p, lc, dC.p, lc,
                             &res.algo, nullptr, 0, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED,
              "A 2 bytes off the alignment the heuristic was promised");
    cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {la, lb, lc}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(h);
}

void test_cublaslt() {
    gemm_case(CUDA_R_16BF, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, 33, 17, 40, 1, CUBLASLT_EPILOGUE_DEFAULT, 1.0f, 0.0f);
    gemm_case(CUDA_R_16F, CUDA_R_16F, CUBLAS_OP_N, CUBLAS_OP_T, 16, 24, 8, 1, CUBLASLT_EPILOGUE_GELU_BIAS, 0.5f, 1.0f);
    gemm_case(CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, 20, 12, 64, 3, CUBLASLT_EPILOGUE_BIAS, 1.0f, -0.5f);
    gemm_case(CUDA_R_16BF, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_T, 8, 40, 24, 2, CUBLASLT_EPILOGUE_GELU, 2.0f, 0.0f);
    gemm_case(CUDA_R_16F, CUDA_R_16F, CUBLAS_OP_T, CUBLAS_OP_N, 24, 8, 16, 1, CUBLASLT_EPILOGUE_BIAS, 1.0f, 0.0f);

    // The descriptor checks.
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayout_t la, lb, lc, lbad;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 16, 8, 16);   // A (m 16, k 8)
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 8, 4, 8);     // B (k 8, n 4)
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, 16, 4, 16);
    cublasLtMatrixLayoutCreate(&lbad, CUDA_R_16BF, 16, 4, 8);  // ld below rows
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t res;
    int count = 0;
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &count) == CUBLAS_STATUS_SUCCESS, "ok");
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lbad, lbad, pref, 1, &res, &count) == CUBLAS_STATUS_INVALID_VALUE,
          "ld below the rows");
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, lb, la, lc, lc, pref, 1, &res, &count) == CUBLAS_STATUS_INVALID_VALUE,
          "shapes that do not agree");
    const int32_t two = 2;
    cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two);
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &count) == CUBLAS_STATUS_INVALID_VALUE,
          "batch counts that differ");
    CHECK(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, 8) == CUBLAS_STATUS_INVALID_VALUE,
          "an attribute of the wrong size");
    const int32_t one = 1;
    cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &one, sizeof one);
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &count) == CUBLAS_STATUS_INVALID_VALUE,
          "a bias epilogue without a bias pointer");
    const cublasLtEpilogue_t plain = CUBLASLT_EPILOGUE_DEFAULT;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &plain, sizeof plain);
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &count) == CUBLAS_STATUS_SUCCESS, "ok");
    Dev<uint16_t> A(16 * 8), B(8 * 4), C(16 * 4), small(8);
    const float a1 = 1.0f, b0 = 0.0f;
    CHECK(cublasLtMatmul(h, op, &a1, A.p, la, small.p, lb, &b0, C.p, lc, C.p, lc, &res.algo, nullptr, 0, nullptr) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "B's 32 elements in an 8-element allocation");
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    const void *bias = C.p;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    CHECK(cublasLtMatmul(h, op, &a1, A.p, la, B.p, lb, &b0, C.p, lc, C.p, lc, &res.algo, nullptr, 0, nullptr) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "an algorithm found without the epilogue");
    CUDA_OK(cudaDeviceSynchronize());
    for (auto l : {la, lb, lc, lbad}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(h);
}

void test_grouped() {
    // Two groups: (m 8, n 3, k 16) x 2 problems and (m 4, n 5, k 8) x 1; C = A^T B with A (k, m) column-major.
    cublasHandle_t h;
    CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    const cublasOperation_t ta[2] = {CUBLAS_OP_T, CUBLAS_OP_T}, tb[2] = {CUBLAS_OP_N, CUBLAS_OP_N};
    const int m[2] = {8, 4}, n[2] = {3, 5}, k[2] = {16, 8}, lda[2] = {16, 8}, ldb[2] = {16, 8}, ldc[2] = {8, 4}, gs[2] = {2, 1};
    const float alpha[2] = {1.0f, 2.0f}, beta[2] = {0.0f, 0.0f};
    std::vector<std::vector<float>> hA(3), hB(3);
    std::vector<Dev<float> *> dA, dB, dC;
    std::uniform_int_distribution<int> u(-3, 3);
    for (int p = 0; p < 3; p++) {
        const int g = p < 2 ? 0 : 1;
        hA[p].resize((size_t)k[g] * m[g]), hB[p].resize((size_t)k[g] * n[g]);
        for (auto &x : hA[p]) x = (float)u(rng);
        for (auto &x : hB[p]) x = (float)u(rng);
        dA.push_back(new Dev<float>(hA[p])), dB.push_back(new Dev<float>(hB[p])), dC.push_back(new Dev<float>((size_t)m[g] * n[g]));
    }
    std::vector<void *> ptrs = {dA[0]->p, dA[1]->p, dA[2]->p, dB[0]->p, dB[1]->p, dB[2]->p, dC[0]->p, dC[1]->p, dC[2]->p};
    Dev<void *> dptrs(ptrs);
    CHECK(cublasGemmGroupedBatchedEx(h, ta, tb, m, n, k, alpha, (const void *const *)dptrs.p, CUDA_R_32F, lda,
                                     (const void *const *)(dptrs.p + 3), CUDA_R_32F, ldb, beta, (void *const *)(dptrs.p + 6),
                                     CUDA_R_32F, ldc, 2, gs, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS,
          "grouped GEMM");
    int bad = 0;
    for (int p = 0; p < 3; p++) {
        const int g = p < 2 ? 0 : 1;
        const auto c = dC[p]->get();
        for (int j = 0; j < n[g]; j++)
            for (int i = 0; i < m[g]; i++) {
                double s = 0;
                for (int q = 0; q < k[g]; q++) s += (double)hA[p][(size_t)i * lda[g] + q] * hB[p][(size_t)j * ldb[g] + q];
                bad += c[(size_t)j * ldc[g] + i] != (float)(alpha[g] * s);
            }
    }
    CHECK(bad == 0, "grouped GEMM: %d outputs wrong", bad);
    std::vector<void *> host_ptrs = ptrs;
    CHECK(cublasGemmGroupedBatchedEx(h, ta, tb, m, n, k, alpha, (const void *const *)host_ptrs.data(), CUDA_R_32F, lda,
                                     (const void *const *)(host_ptrs.data() + 3), CUDA_R_32F, ldb, beta,
                                     (void *const *)(host_ptrs.data() + 6), CUDA_R_32F, ldc, 2, gs,
                                     CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE,
          "pointer arrays in host memory");
    for (auto *d : dA) delete d;
    for (auto *d : dB) delete d;
    for (auto *d : dC) delete d;
    cublasDestroy(h);
}

} // namespace

int main() {
    test_memory();
    test_streams_events();
    test_graphs();
    test_attributes();
    test_tensor_map_checks();
    test_cublaslt();
    test_grouped();
    return finish("test_emu_runtime");
}
