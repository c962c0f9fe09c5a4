// Row argmax (mf_argmax) for greedy decoding on the device.
//
// Each element becomes a 64-bit key whose unsigned order is the sampler's
// greedy order, so that the whole reduction is a max over keys:
//   high 32 bits: the value's bits mapped to an unsigned order (negatives
//                 flipped, positives with the sign bit set; -0.0 taken as
//                 +0.0 so that equal values tie), or 0xffffffff for NaN and
//                 +inf, which beat every ordinary value (the first of them wins)
//   low 32 bits:  ~index, so that on equal high halves the lowest index wins
// -inf never makes a key: a row of all -inf keeps the empty key 0 -> id -1.
// Finite values and -inf map below 0xff800000, so 0xffffffff is only a poison.
#include "cuda/common.cuh"

namespace {

constexpr int kArgmaxThreads = 512; // one block per row: 16 warps keep enough 16-byte loads in flight
static_assert(kArgmaxThreads % 32 == 0 && kArgmaxThreads <= 1024, "whole warps, at most 32 of them");

constexpr uint32_t kPoison = 0xffffffffu;

struct ArgmaxParams {
    const void *x;  // (rows, n), row stride rs, unit column stride
    int32_t *ids;   // (rows)
    float *vals;    // (rows)
    int64_t rows, n, rs;
    int dt;
    bool vec;       // 16-byte chunk loads allowed (row starts 16-byte aligned)
};

__device__ __forceinline__ unsigned long long argmax_key(float v, int64_t i) {
    if (v == -INFINITY) return 0ull;
    uint32_t hi;
    if (v != v || v == INFINITY) {
        hi = kPoison;
    } else {
        const uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
        hi = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    }
    return ((unsigned long long)hi << 32) | (unsigned long long)(~(uint32_t)i);
}

__device__ __forceinline__ unsigned long long key_max(unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
}

// One block per row (grid-stride over rows). Each thread folds the keys of
// its 8-element chunks (16-byte loads when vec; the n % 8 tail and unaligned
// rows element by element) into one key; warp shuffles, then one warp over
// the per-warp keys in shared memory, give the row's key; thread 0 decodes it.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(ArgmaxParams p) {
    MF_SHARED(unsigned long long, red, [32]);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t n_vec = p.vec ? p.n / kMfVec * kMfVec : 0;
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const int64_t base = r * p.rs;
        unsigned long long k = 0ull;
        for (int64_t e0 = (int64_t)threadIdx.x * kMfVec; e0 < n_vec; e0 += (int64_t)blockDim.x * kMfVec) {
            float v[kMfVec];
            mf_ld8(p.x, p.dt, base + e0, v);
#pragma unroll
            for (int j = 0; j < kMfVec; j++) k = key_max(k, argmax_key(v[j], e0 + j));
        }
        for (int64_t i = n_vec + threadIdx.x; i < p.n; i += blockDim.x) k = key_max(k, argmax_key(mf_ld(p.x, p.dt, base + i), i));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) k = key_max(k, __shfl_xor_sync(0xffffffffu, k, o));
        __syncthreads(); // the previous row's readers are done with red
        if (lane == 0) red[warp] = k;
        __syncthreads();
        if (warp == 0) {
            k = lane < (int)(blockDim.x >> 5) ? red[lane] : 0ull;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) k = key_max(k, __shfl_xor_sync(0xffffffffu, k, o));
            if (lane == 0) {
                const uint32_t hi = (uint32_t)(k >> 32), idx = ~(uint32_t)k;
                if (k == 0ull) {
                    p.ids[r] = -1, p.vals[r] = -INFINITY;
                } else if (hi == kPoison) {
                    p.ids[r] = (int32_t)idx, p.vals[r] = __int_as_float(0x7fc00000); // NaN
                } else {
                    const uint32_t u = (hi & 0x80000000u) ? (hi & 0x7fffffffu) : ~hi;
                    p.ids[r] = (int32_t)idx, p.vals[r] = __uint_as_float(u);
                }
            }
        }
    }
}

} // namespace

extern "C" mf_status mf_cuda_argmax(mf_backend *be, const mf_argmax_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    ArgmaxParams p;
    p.x = a->x.data, p.dt = a->x.dtype;
    p.ids = static_cast<int32_t *>(a->ids.data), p.vals = static_cast<float *>(a->vals.data);
    p.rows = a->x.shape[0], p.n = a->x.shape[1], p.rs = a->x.stride[0];
    const int64_t es = (int64_t)mf_dtype_size(a->x.dtype);
    p.vec = mf_aligned16(p.x) && (p.rows == 1 || (p.rs * es) % 16 == 0);
    MF_LAUNCH(argmax_kernel, mf_cuda_grid(c, p.rows), kArgmaxThreads, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("argmax");
    return MF_OK;
}
