// The sm_90a building blocks of src/cuda/sm90.cuh, one at a time, so that a
// failure of the wgmma kernels (ops_attention_wgmma, ops_moe_wgmma) points at
// the piece that is wrong:
//   S:  cp.async into swizzled panels + cp.async.mbarrier.arrive.noinc +
//       fence.proxy.async, then S = Q K^T with wgmma_ss (both operands
//       K-major in shared memory), for N = 64 and 128 and K = 64 ... 256,
//       with the attention kernel's Q layout (128 rows, warpgroup w reads
//       rows 64 w ...);
//   PV: O = P V with wgmma_rs_tb (P from registers re-packed from an
//       accumulator-layout array as the attention kernel does it, V MN-major
//       in shared memory), for D = 64, 128, 256 and 64 / 128 keys;
// in bf16 and f16. Inputs are small multiples of powers of two, so every
// product and sum is exact in f32: the results must match bit for bit.
// Exit 77 (CTest: skipped) without a compute capability 9.0 device.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/sm90.cuh"
#include "minfer/tensor.h"

namespace {

constexpr int kRows = 128; // q rows: two warpgroups of 64

#ifdef MF_SM90A_DEVICE
// Accumulator register i of this thread: (row in the 128-row tile, column).
__device__ __forceinline__ void acc_rc(int i, int &r, int &c) {
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    r = 64 * wg + 16 * warp + (lane >> 2) + 8 * ((i >> 1) & 1);
    c = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
}
#endif

// q (128, K), k (N, K) row-major 16-bit; s (128, N) f32.
template <int N, int K, typename T>
__global__ void __launch_bounds__(256, 1) s_kernel(const uint16_t *q, const uint16_t *k, float *s) {
#ifdef MF_SM90A_DEVICE
    using namespace sm90;
    MF_DYN_SHARED(uint8_t, raw);
    uint8_t *base = raw + (((smem_u32(raw) + 1023u) & ~1023u) - smem_u32(raw));
    const uint32_t sQ = smem_u32(base), sK = sQ + kRows * K * 2;
    uint64_t *full = reinterpret_cast<uint64_t *>(base + kRows * K * 2 + N * K * 2);
    if (threadIdx.x == 0) {
        mbar_init(full, 256);
        ptx::fence_mbarrier_init();
    }
    __syncthreads();
    cp_async_panels<K, kRows, 256>(sQ, q, (int64_t)K, 0, kRows); // int64: the stride overload
    cp_async_panels<K, N, 256>(sK, k, (int64_t)K, 0, N);
    mbar_arrive_cp_async(full);
    mbar_wait(full, 0);
    __syncwarp();
    fence_proxy_async();
    const uint32_t q_wg = sQ + (threadIdx.x >> 7) * 64 * 128;
    float acc[N / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++)
        wgmma_ss<N, T>(acc, desc_k(q_wg + (kk >> 2) * kRows * 128 + (kk & 3) * 32),
                       desc_k(sK + (kk >> 2) * N * 128 + (kk & 3) * 32), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(acc);
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        int r, c;
        acc_rc(i, r, c);
        s[r * N + c] = acc[i];
    }
#else
    (void)q, (void)k, (void)s;
    __trap();
#endif
}

// p (128, BN) f32 (exact in T), v (BN, D) 16-bit; o (128, D) f32.
template <int D, int BN, typename T>
__global__ void __launch_bounds__(256, 1) pv_kernel(const float *p, const uint16_t *v, float *o) {
#ifdef MF_SM90A_DEVICE
    using namespace sm90;
    constexpr int kDt = std::is_same<T, __nv_bfloat16>::value ? MF_DTYPE_BF16 : MF_DTYPE_F16;
    MF_DYN_SHARED(uint8_t, raw);
    uint8_t *base = raw + (((smem_u32(raw) + 1023u) & ~1023u) - smem_u32(raw));
    const uint32_t sV = smem_u32(base);
    uint64_t *full = reinterpret_cast<uint64_t *>(base + BN * D * 2);
    if (threadIdx.x == 0) {
        mbar_init(full, 256);
        ptx::fence_mbarrier_init();
    }
    __syncthreads();
    cp_async_panels<D, BN, 256>(sV, v, (int64_t)D, 0, BN);
    mbar_arrive_cp_async(full);
    float sc[BN / 2]; // P in the accumulator layout of an m64nBN S
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
        int r, c;
        acc_rc(i, r, c);
        sc[i] = p[r * BN + c];
    }
    uint32_t pa[BN / 16][4]; // the attention kernel's re-pack
#pragma unroll
    for (int j = 0; j < BN / 16; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) pa[j][e] = mf_pack2(sc[8 * j + 2 * e], sc[8 * j + 2 * e + 1], kDt);
    float acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) acc[i] = 0.0f;
    mbar_wait(full, 0);
    __syncwarp();
    fence_proxy_async();
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < BN / 16; j++) wgmma_rs_tb<D, T>(acc, pa[j], desc_mn(sV + j * 2048, BN * 128));
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(acc);
#pragma unroll
    for (int i = 0; i < D / 2; i++) {
        int r, c;
        acc_rc(i, r, c);
        o[r * D + c] = acc[i];
    }
#else
    (void)p, (void)v, (void)o;
    __trap();
#endif
}

// ---- host ------------------------------------------------------------------------------------

int failures = 0;

// Random multiples of 1/8 in [-2, 2) (or 1/16 in [0, 1) for P): exact in bf16 and f16.
float draw(bool prob) {
    const int r = rand();
    return prob ? (float)(r % 16) / 16.0f : (float)(r % 32 - 16) / 8.0f;
}

// The library's round-to-nearest-even conversions (exact for these values).
uint16_t to16(float x, bool bf) { return bf ? mf_f32_to_bf16(x) : mf_f32_to_f16(x); }

bool cuda_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
    failures++;
    return false;
}

template <typename T> void *dev_copy(const std::vector<T> &h) {
    void *d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(T)) != cudaSuccess) return nullptr;
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}

void compare(const char *name, const std::vector<float> &got, const std::vector<double> &want) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); i++)
        if ((double)got[i] != want[i] && bad++ == 0) first = i;
    if (bad) {
        printf("FAIL %s: %zu of %zu differ; first at %zu: %.6g, want %.6g\n", name, bad, got.size(), first,
               got[first], want[first]);
        failures++;
    } else {
        printf("  ok %s\n", name);
    }
}

// MF_LAUNCH(kern, 1, 256, smem, 0, args...), then its f32 output (want.size() values at
// out) against want, bit for bit.
template <typename Kern, typename... A>
void launch_check(const char *name, Kern kern, int smem, float *out, const std::vector<double> &want, A... args) {
    if (!cuda_ok(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), name)) return;
    MF_LAUNCH(kern, 1, 256, smem, 0, args...);
    std::vector<float> got(want.size());
    if (cuda_ok(cudaDeviceSynchronize(), name) &&
        cuda_ok(cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost), name))
        compare(name, got, want);
}

template <int N, int K, typename T> void test_s() {
    const bool bf = std::is_same<T, __nv_bfloat16>::value;
    char name[96];
    snprintf(name, sizeof name, "S = Q K^T (wgmma_ss m64n%dk16, K %d, %s)", N, K, bf ? "bf16" : "f16");
    std::vector<float> qf(kRows * K), kf(N * K);
    std::vector<uint16_t> q(qf.size()), k(kf.size());
    for (size_t i = 0; i < qf.size(); i++) qf[i] = draw(false), q[i] = to16(qf[i], bf);
    for (size_t i = 0; i < kf.size(); i++) kf[i] = draw(false), k[i] = to16(kf[i], bf);
    std::vector<double> want(kRows * N);
    for (int r = 0; r < kRows; r++)
        for (int c = 0; c < N; c++) {
            double a = 0;
            for (int d = 0; d < K; d++) a += (double)qf[r * K + d] * kf[c * K + d];
            want[r * N + c] = a;
        }
    void *dq = dev_copy(q), *dk = dev_copy(k);
    float *ds = nullptr;
    if (cuda_ok(cudaMalloc(&ds, want.size() * 4), name) &&
        cuda_ok(dq && dk ? cudaSuccess : cudaErrorMemoryAllocation, name))
        launch_check(name, s_kernel<N, K, T>, 1024 + kRows * K * 2 + N * K * 2 + 8, ds, want,
                     static_cast<const uint16_t *>(dq), static_cast<const uint16_t *>(dk), ds);
    cudaFree(dq), cudaFree(dk), cudaFree(ds);
}

template <int D, int BN, typename T> void test_pv() {
    const bool bf = std::is_same<T, __nv_bfloat16>::value;
    char name[96];
    snprintf(name, sizeof name, "O = P V (wgmma_rs_tb m64n%dk16, %d keys, %s)", D, BN, bf ? "bf16" : "f16");
    std::vector<float> p(kRows * BN), vf(BN * D);
    std::vector<uint16_t> v(vf.size());
    for (auto &x : p) x = draw(true);
    for (size_t i = 0; i < vf.size(); i++) vf[i] = draw(false), v[i] = to16(vf[i], bf);
    std::vector<double> want(kRows * D);
    for (int r = 0; r < kRows; r++)
        for (int c = 0; c < D; c++) {
            double a = 0;
            for (int j = 0; j < BN; j++) a += (double)p[r * BN + j] * vf[j * D + c];
            want[r * D + c] = a;
        }
    void *dp = dev_copy(p), *dv = dev_copy(v);
    float *dout = nullptr;
    if (cuda_ok(cudaMalloc(&dout, want.size() * 4), name) &&
        cuda_ok(dp && dv ? cudaSuccess : cudaErrorMemoryAllocation, name))
        launch_check(name, pv_kernel<D, BN, T>, 1024 + BN * D * 2 + 8, dout, want, static_cast<const float *>(dp),
                     static_cast<const uint16_t *>(dv), dout);
    cudaFree(dp), cudaFree(dv), cudaFree(dout);
}

template <typename T> void test_all() {
    test_s<128, 64, T>();
    test_s<128, 128, T>();
    test_s<64, 256, T>();
    test_pv<64, 128, T>();
    test_pv<128, 128, T>();
    test_pv<256, 64, T>();
}

} // namespace

int main() {
    int n = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    if (prop.major != 9 || prop.minor != 0) {
        printf("skipped: compute capability %d.%d (the sm_90a image runs on 9.0 only)\n", prop.major, prop.minor);
        return 77;
    }
    srand(1234);
    test_all<__nv_bfloat16>();
    test_all<__half>();
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
