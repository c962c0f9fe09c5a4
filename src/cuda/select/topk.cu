// Row top-k with softmax statistics (mf_topk) for sampling on the device.
//
// Each value becomes a 32-bit key whose unsigned order is the value order
// (negatives flipped, positives with the sign bit set; -0.0 taken as +0.0 so
// that equal values tie). -inf makes no key (never a candidate); NaN and
// +inf poison the row (the first of them is reported). The k-th largest key
// T is found by a radix select over the keys' 11 + 11 + 10 bits; then the
// keys above T, and the lowest-index ones equal to T, are gathered and sorted
// as 64-bit (key, ~index) pairs, so that the result and its order are the
// sampler's ranking whatever order threads ran in (deterministic).
#include "cuda/common.cuh"

namespace {

constexpr int kTopkThreads = 1024; // one block per row; one thread per candidate slot in the sort
static_assert(kTopkThreads == MF_TOPK_MAX, "the sort gives each of the MF_TOPK_MAX candidates one thread");
static_assert(kTopkThreads % 32 == 0 && kTopkThreads <= 1024, "whole warps, at most 32 of them");
constexpr int kBins = 2048;                  // 11-bit digits (the last pass uses 1024 of them)
static_assert(kBins % kTopkThreads == 0 && 1024 % kTopkThreads == 0, "each thread owns whole histogram bins");

struct TopkParams {
    const void *x;  // (rows, n), row stride rs, unit column stride
    int32_t *ids;   // (rows, k)
    float *vals;    // (rows, k)
    float *stats;   // (rows, 2): max, sum of expf((x - max) * scale)
    int64_t rows, n, rs;
    int k;
    float scale;
    int dt;
    bool vec;       // 16-byte chunk loads allowed (row starts 16-byte aligned)
};

// The ordered key of an ordinary value (not NaN, not +-inf).
__device__ __forceinline__ uint32_t topk_key(float v) {
    const uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float topk_value(uint32_t key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Calls f(value, index) for every element of row `base`, each thread taking
// 8-element chunks in turn (16-byte loads when p.vec) and then the tail.
template <class F>
__device__ __forceinline__ void for_row(const TopkParams &p, int64_t base, F f) {
    const int64_t n_vec = p.vec ? p.n / kMfVec * kMfVec : 0;
    for (int64_t e0 = (int64_t)threadIdx.x * kMfVec; e0 < n_vec; e0 += (int64_t)blockDim.x * kMfVec) {
        float v[kMfVec];
        mf_ld8(p.x, p.dt, base + e0, v);
#pragma unroll
        for (int j = 0; j < kMfVec; j++) f(v[j], e0 + j);
    }
    for (int64_t i = n_vec + threadIdx.x; i < p.n; i += blockDim.x) f(mf_ld(p.x, p.dt, base + i), i);
}

// Inclusive prefix sum of v over the block's threads in thread order; every
// thread gets its own prefix and *total the block's sum. scan: 32 words of
// shared memory.
__device__ __forceinline__ uint32_t block_scan(uint32_t v, uint32_t *scan, uint32_t *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    __syncthreads(); // the previous call's readers are done with scan
    if (lane == 31) scan[warp] = v;
    __syncthreads();
    if (warp == 0) {
        uint32_t w = lane < nwarps ? scan[lane] : 0u;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t t = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += t;
        }
        if (lane < nwarps) scan[lane] = w;
    }
    __syncthreads();
    *total = scan[nwarps - 1];
    return v + (warp > 0 ? scan[warp - 1] : 0u);
}

// The bin holding the want-th largest key (1-based) of the histogram
// hist[0, nbins): *bin, and *above = the keys in higher bins. Exactly one
// thread finds it; the result is in shared memory after the final barrier.
__device__ __forceinline__ void select_bin(const uint32_t *hist, int nbins, uint32_t want, uint32_t *scan,
                                           uint32_t *bin, uint32_t *above) {
    const int per = nbins / (int)blockDim.x, b0 = (int)threadIdx.x * per;
    uint32_t mine = 0, total;
    for (int b = 0; b < per; b++) mine += hist[b0 + b];
    const uint32_t incl = block_scan(mine, scan, &total);
    uint32_t cum = total - incl; // keys in bins above this thread's
    for (int b = b0 + per - 1; b >= b0; b--) {
        if (cum < want && want <= cum + hist[b]) *bin = (uint32_t)b, *above = cum;
        cum += hist[b];
    }
    __syncthreads();
}

// One block per row (grid-stride over rows); row r of n values, k <= 1024.
//   pass 0: first NaN / +inf, largest key, histogram of the keys' top 11 bits
//   pass 1: sum of expf((x - max) * scale); histogram of the next 11 bits of
//           the keys in the selected top bin
//   pass 2: histogram of the low 10 bits of the keys in the selected prefix
//           -> T, the k-th largest key (or the smallest, with fewer finite
//           values than k), and how many keys equal to T are taken
//   pass 3: gather keys > T (and all keys == T when all are taken) into
//           shared memory; otherwise the lowest-index keys == T follow from
//           a scan over contiguous per-thread chunks (index order)
//   then a bitonic sort of the (key, ~index) pairs, largest first, and the
//   outputs. Shared memory: 8 KiB histogram + 8 KiB candidates.
__global__ void __launch_bounds__(kTopkThreads, 1) topk_kernel(TopkParams p) {
    MF_SHARED(uint32_t, hist, [kBins]);
    MF_SHARED(unsigned long long, cand, [kTopkThreads]);
    MF_SHARED(uint32_t, scan, [32]);
    MF_SHARED(double, red, [32]);
    MF_SHARED(uint32_t, s_bin);
    MF_SHARED(uint32_t, s_above);
    MF_SHARED(uint32_t, s_max);
    MF_SHARED(uint32_t, s_count);
    MF_SHARED(int, s_bad);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;

    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const int64_t base = r * p.rs;
        int32_t *ids = p.ids + r * p.k;
        float *vals = p.vals + r * p.k, *st = p.stats + 2 * r;
        __syncthreads(); // the previous row is done with the shared state
        for (int b = tid; b < kBins; b += blockDim.x) hist[b] = 0;
        if (tid == 0) s_bad = INT32_MAX, s_max = 0, s_count = 0;
        __syncthreads();

        // pass 0
        int bad = INT32_MAX;
        uint32_t kmax = 0;
        for_row(p, base, [&](float v, int64_t i) {
            if (v != v || v == INFINITY) {
                bad = min(bad, (int)i);
            } else if (v != -INFINITY) {
                const uint32_t key = topk_key(v);
                kmax = max(kmax, key);
                atomicAdd(&hist[key >> 21], 1u);
            }
        });
        if (bad != INT32_MAX) atomicMin(&s_bad, bad);
        atomicMax(&s_max, kmax);
        __syncthreads();
        if (s_bad != INT32_MAX) { // the sampler refuses the row: name the first bad value
            for (int j = tid; j < p.k; j += blockDim.x) {
                if (j == 0) {
                    const float v = mf_ld(p.x, p.dt, base + s_bad);
                    ids[0] = s_bad, vals[0] = v != v ? __int_as_float(0x7fc00000) : v;
                } else {
                    ids[j] = -1, vals[j] = -INFINITY;
                }
            }
            if (tid == 0) st[0] = st[1] = __int_as_float(0x7fc00000);
            continue;
        }
        if (s_max == 0) { // no finite value: all -inf
            for (int j = tid; j < p.k; j += blockDim.x) ids[j] = -1, vals[j] = -INFINITY;
            if (tid == 0) st[0] = -INFINITY, st[1] = 0.0f;
            continue;
        }
        uint32_t n_fin = 0;
        {
            uint32_t mine = 0;
            for (int b = tid; b < kBins; b += blockDim.x) mine += hist[b];
            (void)block_scan(mine, scan, &n_fin);
        }
        const uint32_t kk = n_fin < (uint32_t)p.k ? n_fin : (uint32_t)p.k; // candidates this row has
        select_bin(hist, kBins, kk, scan, &s_bin, &s_above);
        const uint32_t d0 = s_bin;
        uint32_t above = s_above;
        __syncthreads();
        for (int b = tid; b < kBins; b += blockDim.x) hist[b] = 0;
        __syncthreads();

        // pass 1
        const float xmax = topk_value(s_max), scale = p.scale;
        double sum = 0.0;
        for_row(p, base, [&](float v, int64_t) {
            sum += (double)expf((v - xmax) * scale); // the sampler's f32 weight; -inf gives 0
            if (v != -INFINITY) {
                const uint32_t key = topk_key(v);
                if ((key >> 21) == d0) atomicAdd(&hist[(key >> 10) & 0x7ffu], 1u);
            }
        });
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) red[warp] = sum;
        __syncthreads();
        select_bin(hist, kBins, kk - above, scan, &s_bin, &s_above);
        const uint32_t pre1 = (d0 << 11) | s_bin;
        above += s_above;
        __syncthreads();
        for (int b = tid; b < kBins; b += blockDim.x) hist[b] = 0;
        __syncthreads();

        // pass 2
        for_row(p, base, [&](float v, int64_t) {
            if (v != -INFINITY) {
                const uint32_t key = topk_key(v);
                if ((key >> 10) == pre1) atomicAdd(&hist[key & 0x3ffu], 1u);
            }
        });
        __syncthreads();
        select_bin(hist, 1024, kk - above, scan, &s_bin, &s_above);
        const uint32_t T = (pre1 << 10) | s_bin;
        above += s_above;
        const uint32_t n_eq = hist[s_bin], take_eq = kk - above; // 1 <= take_eq <= n_eq
        __syncthreads();

        // pass 3
        const bool all_eq = take_eq == n_eq;
        for_row(p, base, [&](float v, int64_t i) {
            if (v != -INFINITY) {
                const uint32_t key = topk_key(v);
                if (key > T || (all_eq && key == T))
                    cand[atomicAdd(&s_count, 1u)] = ((unsigned long long)key << 32) | (~(uint32_t)i);
            }
        });
        if (!all_eq) { // ties at T: the take_eq lowest indices, by a scan over contiguous chunks
            const int64_t chunk = (p.n + blockDim.x - 1) / blockDim.x, c0 = (int64_t)tid * chunk;
            const int64_t c1 = c0 + chunk < p.n ? c0 + chunk : p.n;
            uint32_t mine = 0, total;
            for (int64_t i = c0; i < c1; i++) {
                const float v = mf_ld(p.x, p.dt, base + i);
                mine += v != -INFINITY && topk_key(v) == T;
            }
            uint32_t rank = block_scan(mine, scan, &total) - mine; // equal keys before this chunk
            const uint32_t slot0 = kk - take_eq;                  // the keys > T fill [0, slot0)
            for (int64_t i = c0; i < c1 && rank < take_eq; i++) {
                const float v = mf_ld(p.x, p.dt, base + i);
                if (v != -INFINITY && topk_key(v) == T)
                    cand[slot0 + rank++] = ((unsigned long long)T << 32) | (~(uint32_t)i);
            }
        }
        // bitonic sort of cand[0, P), P the power of two >= kk, padding 0 (below every pair)
        uint32_t P = 1;
        while (P < kk) P <<= 1;
        __syncthreads();
        for (uint32_t j = kk + tid; j < P; j += blockDim.x) cand[j] = 0ull;
        __syncthreads();
        for (uint32_t size = 2; size <= P; size <<= 1)
            for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
                const uint32_t i = tid, j = i ^ stride;
                if (i < P && j > i) {
                    const unsigned long long a = cand[i], b = cand[j];
                    const bool desc = (i & size) == 0; // this run ends up largest first
                    if ((a < b) == desc) cand[i] = b, cand[j] = a;
                }
                __syncthreads();
            }
        for (int j = tid; j < p.k; j += blockDim.x) {
            if ((uint32_t)j < kk) {
                const unsigned long long c = cand[j];
                ids[j] = (int32_t)(~(uint32_t)c), vals[j] = topk_value((uint32_t)(c >> 32));
            } else {
                ids[j] = -1, vals[j] = -INFINITY;
            }
        }
        if (warp == 0) {
            double s = lane < nwarps ? red[lane] : 0.0;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) st[0] = xmax, st[1] = (float)s;
        }
    }
}

} // namespace

extern "C" mf_status mf_cuda_topk(mf_backend *be, const mf_topk_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    TopkParams p;
    p.x = a->x.data, p.dt = a->x.dtype;
    p.ids = static_cast<int32_t *>(a->ids.data), p.vals = static_cast<float *>(a->vals.data);
    p.stats = static_cast<float *>(a->stats.data);
    p.rows = a->x.shape[0], p.n = a->x.shape[1], p.rs = a->x.stride[0];
    p.k = a->k, p.scale = a->scale;
    const int64_t es = (int64_t)mf_dtype_size(a->x.dtype);
    p.vec = mf_aligned16(p.x) && (p.rows == 1 || (p.rs * es) % 16 == 0);
    MF_LAUNCH(topk_kernel, mf_cuda_grid(c, p.rows), kTopkThreads, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("topk");
    return MF_OK;
}
