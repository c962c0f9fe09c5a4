// The unfused baseline for `minfer bench softmax --variant unfused`: three
// kernels, each a full pass through memory, as PyTorch eager runs
// x * scale -> masked_fill(mask, -inf) -> softmax. Each is written the way a
// good standalone kernel is (16-byte accesses, the mask row broadcast, a
// softmax that reads its row once), so that the comparison measures fusion
// rather than a weak baseline. Benchmark code, not part of libminfer.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/portable.cuh"
#include "softmax_unfused.h"

namespace {

constexpr int kThreads = 256;
constexpr int kSmemCols = 8192; // the softmax keeps its row in 32 KB of shared memory (f32) up to here

template <typename T> __device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }

// Pass 1: tmp = x * scale, elementwise, 16 bytes per thread per step.
template <typename T> __global__ void scale_kernel(const T *x, T *tmp, int64_t n, float scale) {
    constexpr int kV = 16 / sizeof(T);
    const int64_t nv = n / kV, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t t0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = t0; i < nv; i += stride) {
        uint4 raw = reinterpret_cast<const uint4 *>(x)[i];
        T *v = reinterpret_cast<T *>(&raw);
#pragma unroll
        for (int k = 0; k < kV; k++) v[k] = from_f<T>(to_f(v[k]) * scale);
        reinterpret_cast<uint4 *>(tmp)[i] = raw;
    }
    for (int64_t i = nv * kV + t0; i < n; i += stride) tmp[i] = from_f<T>(to_f(x[i]) * scale);
}

// Pass 2: tmp[mask] = -inf, in place; block per row, the (q_len, cols) mask
// row broadcast over batch and heads (it stays in L2).
template <typename T> __global__ void mask_kernel(T *tmp, const uint8_t *mask, int64_t rows, int64_t q_len, int cols) {
    constexpr int kV = 16 / sizeof(T);
    const bool vec = cols % kV == 0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        T *row = tmp + r * cols;
        const uint8_t *m = mask + (r % q_len) * cols;
        int j0 = 0;
        if (vec) {
            for (int j = threadIdx.x * kV; j < cols; j += blockDim.x * kV) {
                uint4 raw = *reinterpret_cast<const uint4 *>(row + j);
                T *v = reinterpret_cast<T *>(&raw);
#pragma unroll
                for (int k = 0; k < kV; k++)
                    if (m[j + k]) v[k] = from_f<T>(-INFINITY);
                *reinterpret_cast<uint4 *>(row + j) = raw;
            }
            j0 = cols;
        }
        for (int j = j0 + threadIdx.x; j < cols; j += blockDim.x)
            if (m[j]) row[j] = from_f<T>(-INFINITY);
    }
}

__device__ __forceinline__ float block_reduce(float v, float *red, bool is_max) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = is_max ? -INFINITY : 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) v = is_max ? fmaxf(v, red[w]) : v + red[w];
    return v;
}

// Pass 3: y = softmax(in) along rows, one block per row. Rows up to kSmemCols
// are read once into shared memory; longer rows are read three times (max,
// sum, write), as a plain softmax does.
template <typename T> __global__ void softmax_kernel(const T *in, T *y, int64_t rows, int cols, bool cached) {
    MF_DYN_SHARED(float, row);
    MF_SHARED(float, red, [32]);
    constexpr int kV = 16 / sizeof(T);
    const bool vec = cached && cols % kV == 0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *src = in + r * cols;
        float m = -INFINITY;
        if (vec) {
            for (int j = threadIdx.x * kV; j < cols; j += blockDim.x * kV) {
                uint4 raw = *reinterpret_cast<const uint4 *>(src + j);
                const T *v = reinterpret_cast<const T *>(&raw);
#pragma unroll
                for (int k = 0; k < kV; k++) {
                    row[j + k] = to_f(v[k]);
                    m = fmaxf(m, row[j + k]);
                }
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x) {
                const float v = to_f(src[j]);
                if (cached) row[j] = v;
                m = fmaxf(m, v);
            }
        }
        m = block_reduce(m, red, true);
        float s = 0.0f;
        for (int j = threadIdx.x; j < cols; j += blockDim.x)
            s += m == -INFINITY ? 0.0f : __expf((cached ? row[j] : to_f(src[j])) - m);
        s = block_reduce(s, red, false);
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        T *dst = y + r * cols;
        if (vec) {
            for (int j = threadIdx.x * kV; j < cols; j += blockDim.x * kV) {
                uint4 raw;
                T *v = reinterpret_cast<T *>(&raw);
#pragma unroll
                for (int k = 0; k < kV; k++) v[k] = from_f<T>(m == -INFINITY ? 0.0f : __expf(row[j + k] - m) * inv);
                *reinterpret_cast<uint4 *>(dst + j) = raw;
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x)
                dst[j] = from_f<T>(m == -INFINITY ? 0.0f : __expf((cached ? row[j] : to_f(src[j])) - m) * inv);
        }
        __syncthreads(); // the row buffer is reused by the next row
    }
}

template <typename T>
int run(cudaStream_t s, const void *x, void *tmp, void *y, const uint8_t *mask, int64_t rows, int64_t q_len,
        int64_t cols, float scale) {
    const int64_t n = rows * cols;
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int64_t cap = (int64_t)sms * 8;
    auto grid = [&](int64_t work) { return (unsigned)(work < 1 ? 1 : work > cap ? cap : work); };
    MF_LAUNCH(scale_kernel<T>, grid((n / (16 / (int64_t)sizeof(T)) + kThreads - 1) / kThreads), kThreads, 0, s, static_cast<const T *>(x), static_cast<T *>(tmp), n, scale);
    if (mask) MF_LAUNCH(mask_kernel<T>, grid(rows), kThreads, 0, s, static_cast<T *>(tmp), mask, rows, q_len, (int)cols);
    const bool cached = cols <= kSmemCols;
    MF_LAUNCH(softmax_kernel<T>, grid(rows), kThreads, cached ? (size_t)cols * sizeof(float) : 0, s, static_cast<const T *>(tmp), static_cast<T *>(y), rows, (int)cols, cached);
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int mf_bench_softmax_unfused(void *stream, int dt, const void *x, void *tmp, void *y, const uint8_t *mask,
                                        int64_t rows, int64_t q_len, int64_t cols, float scale) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (dt) {
    case 0: return run<float>(s, x, tmp, y, mask, rows, q_len, cols, scale);
    case 1: return run<__half>(s, x, tmp, y, mask, rows, q_len, cols, scale);
    default: return run<__nv_bfloat16>(s, x, tmp, y, mask, rows, q_len, cols, scale);
    }
}
