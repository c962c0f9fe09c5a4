// The emulator's speed (docs/notes/emulator.md): what a kernel thread, a
// block barrier, a warp shuffle, an ldmatrix + mma.sync step and a wgmma cost
// on this machine. Not a test; `bench_emu [reps]` prints one line per item,
// the best of `reps` runs (default 3).
#include <chrono>
#include <cmath>

#include "cuda/portable.cuh"
#include "cuda/ptx.cuh"
#include "emu_test.h"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

__global__ void empty_kernel(int *o) {
    if (threadIdx.x == 1023) o[blockIdx.x] = 1;
}

__global__ void barrier_kernel(int n, int *o) {
    MF_SHARED(int, v, [256]);
    int s = 0;
    for (int i = 0; i < n; i++) {
        v[threadIdx.x] = i;
        __syncthreads();
        s += v[(threadIdx.x + 1) % blockDim.x];
        __syncthreads();
    }
    o[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

__global__ void shfl_kernel(int n, float *o) {
    float s = (float)threadIdx.x;
    for (int i = 0; i < n; i++)
        for (int k = 16; k; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
    o[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// C (64 x 64 per block) = A (64 x K) B^T, 4 warps: ldmatrix + mma.sync, the FA2 inner loop's shape.
__global__ void mma_kernel(const uint16_t *A, const uint16_t *B, float *C, int K) {
    MF_SHARED_ALIGNED(16, uint16_t, As, [64 * 32]);
    MF_SHARED_ALIGNED(16, uint16_t, Bs, [64 * 32]);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    float acc[8][4] = {};
    for (int k0 = 0; k0 < K; k0 += 32) {
        for (int c = tid; c < 64 * 4; c += 128) {
            const int row = c / 4, ch = c % 4;
            ptx::cp_async_cg16(ptx::smem_u32(&As[row * 32 + ch * 8]), A + (size_t)(blockIdx.y * 64 + row) * K + k0 + ch * 8, 16);
            ptx::cp_async_cg16(ptx::smem_u32(&Bs[row * 32 + ch * 8]), B + (size_t)(blockIdx.x * 64 + row) * K + k0 + ch * 8, 16);
        }
        ptx::cp_async_commit();
        ptx::cp_async_wait<0>();
        __syncthreads();
        for (int ks = 0; ks < 32; ks += 16) {
            uint32_t a[4];
            ptx::ldmatrix_x4(a, ptx::smem_u32(&As[(16 * warp + (lane & 15)) * 32 + ks + 8 * (lane >> 4)]));
            for (int np = 0; np < 4; np++) {
                uint32_t b[4];
                ptx::ldmatrix_x4(b, ptx::smem_u32(&Bs[(16 * np + (lane & 7) + 8 * (lane >> 4)) * 32 + ks + 8 * ((lane >> 3) & 1)]));
                ptx::mma_m16n8k16<false>(acc[2 * np], a, b[0], b[1]);
                ptx::mma_m16n8k16<false>(acc[2 * np + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();
    }
    for (int nt = 0; nt < 8; nt++)
        for (int i = 0; i < 4; i++)
            C[(size_t)(blockIdx.y * 64 + 16 * warp + (lane >> 2) + 8 * (i >> 1)) * (gridDim.x * 64) + blockIdx.x * 64 +
              8 * nt + 2 * (lane & 3) + (i & 1)] = acc[nt][i];
}

__global__ void wgmma_kernel(int n, float *o) {
    MF_DYN_SHARED(uint8_t, raw);
    uint8_t *base = raw + (((ptx::smem_u32(raw) + 1023u) & ~1023u) - ptx::smem_u32(raw));
    for (int i = threadIdx.x; i < 16384; i += 128) reinterpret_cast<uint16_t *>(base)[i] = 0x3c00; // f16 1.0
    __syncthreads();
    const uint32_t s = ptx::smem_u32(base);
    const uint64_t d = ((uint64_t)((s & 0x3ffff) >> 4)) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
    float acc[64] = {};
    for (int i = 0; i < n; i++) {
        ptx::wgmma_fence();
        ptx::wgmma_ss<128, __half>(acc, d, d + (16384 >> 4), 1);
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<0>();
    }
    o[threadIdx.x] = acc[0];
}

template <class F> double best(int reps, F f) {
    double b = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t = now();
        f();
        cudaDeviceSynchronize();
        b = std::min(b, now() - t);
    }
    return b;
}

} // namespace

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 3;
    Dev<int> oi(1 << 20);
    Dev<float> of(1 << 20);
    double t = best(reps, [&] { MF_LAUNCH(empty_kernel, 1024, 1024, 0, 0, oi.p); });
    printf("kernel thread (start + exit, 1M threads): %.0f ns per thread\n", 1e9 * t / (1 << 20));
    t = best(reps, [&] { MF_LAUNCH(barrier_kernel, 16, 256, 0, 0, 200, oi.p); });
    printf("__syncthreads (256 threads per block): %.0f ns per thread per barrier\n", 1e9 * t / (16 * 256 * 400.0));
    t = best(reps, [&] { MF_LAUNCH(shfl_kernel, 32, 256, 0, 0, 20, of.p); });
    printf("__shfl_xor_sync: %.0f ns per lane per shuffle\n", 1e9 * t / (32 * 256 * 100.0));
    const int M = 256;
    std::vector<uint16_t> h((size_t)M * M, 0x3c00);
    Dev<uint16_t> A(h), B(h);
    Dev<float> C((size_t)M * M);
    t = best(reps, [&] { MF_LAUNCH(mma_kernel, dim3(M / 64, M / 64), 128, 0, 0, A.p, B.p, C.p, M); });
    const double mmas = (double)M * M * M / (16 * 8 * 16);
    printf("ldmatrix + mma.sync GEMM %d^3: %.3f s, %.2f us per warp-level mma (incl. its ldmatrix share), %.1f M MAC/s; "
           "C[0] = %g\n",
           M, t, 1e6 * t / mmas, (double)M * M * M / t / 1e6, C.get()[0]);
    cudaFuncSetAttribute(wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 33 << 10);
    t = best(reps, [&] { MF_LAUNCH(wgmma_kernel, 8, 128, 33 << 10, 0, 20, of.p); });
    printf("wgmma m64n128k16 (f16, both operands in shared memory): %.1f us each, %.1f M MAC/s\n", 1e6 * t / 160,
           160.0 * 64 * 128 * 16 / t / 1e6);
    return 0;
}
