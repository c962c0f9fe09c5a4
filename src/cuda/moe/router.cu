// The MoE router on CUDA (mf_moe_router): softmax / sigmoid scores, top-k,
// renormalisation and scale, fused, one warp per token. Every formula matches
// src/cpu/moe.c: selection compares the logits (NaN ranks as -inf; equal keys
// go to the lower expert), softmax is exp(l - max) / sum with precise expf,
// weights in f32. Only the order of the softmax denominator's sum differs (a
// warp tree here, index order there).
#include <climits>

#include "cuda/moe/moe.cuh"
#include "kernels/act_math.h"

namespace {

constexpr unsigned kFull = 0xffffffffu;

constexpr int kRouterWarps = 4;   // tokens per block
constexpr int kRouterPerLane = 8; // E <= 32 * 8 = 256 logits per token
static_assert(kRouterPerLane * 32 == 256, "the router holds up to 256 experts in registers");

struct RouterParams {
    const void *logits; // (T, E), row stride ls
    int64_t ls;
    int ldt;            // mf_dtype of logits
    int32_t *ids;       // (T, k) out
    float *w;           // (T, k) out
    int64_t T;
    int E, k;
    int score, order;   // mf_moe_score, mf_moe_order
    bool renorm;
    float scale;
};

__device__ __forceinline__ float rank_key(float v) { return isnan(v) ? -INFINITY : v; }

// One warp per token (grid-stride over tokens): lane holds logits lane + 32 j,
// j < 8. k rounds of a warp argmax over (key, index) pairs pick the experts
// (larger key first, equal keys to the lower index); the owner lane marks
// its pick taken and broadcasts the raw logit. Lane 0 writes the k weights.
__global__ void __launch_bounds__(kRouterWarps * 32) moe_router_kernel(RouterParams p) {
    const int lane = threadIdx.x & 31;
    const int64_t step = (int64_t)gridDim.x * kRouterWarps;
    for (int64_t t = (int64_t)blockIdx.x * kRouterWarps + (threadIdx.x >> 5); t < p.T; t += step) {
        float l[kRouterPerLane];
        unsigned taken = 0; // bit j: expert lane + 32 j chosen already, or absent
#pragma unroll
        for (int j = 0; j < kRouterPerLane; j++) {
            const int e = lane + 32 * j;
            l[j] = e < p.E ? mf_ld(p.logits, p.ldt, t * p.ls + e) : -INFINITY;
            if (e >= p.E) taken |= 1u << j;
        }
        int sel[8];
        float sl[8];
        for (int r = 0; r < p.k; r++) {
            float bk = -INFINITY;
            int bi = INT_MAX; // INT_MAX: no candidate (ranks below everything)
#pragma unroll
            for (int j = 0; j < kRouterPerLane; j++) {
                if ((taken >> j) & 1u) continue;
                const float key = rank_key(l[j]);
                if (bi == INT_MAX || key > bk) bk = key, bi = lane + 32 * j;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ok = __shfl_xor_sync(kFull, bk, o);
                const int oi = __shfl_xor_sync(kFull, bi, o);
                if (oi != INT_MAX && (bi == INT_MAX || ok > bk || (ok == bk && oi < bi))) bk = ok, bi = oi;
            }
            const int owner = bi & 31, slot = bi >> 5; // bi is the same in every lane now
            float raw = 0.0f;
#pragma unroll
            for (int j = 0; j < kRouterPerLane; j++)
                if (j == slot) raw = l[j];
            raw = __shfl_sync(kFull, raw, owner);
            if (lane == owner) taken |= 1u << slot;
            sel[r] = bi, sl[r] = raw;
        }
        const bool first = p.order == MF_MOE_SCORE_THEN_TOPK;
        float m = -INFINITY, z = 0.0f;
        if (p.score == MF_MOE_SCORE_SOFTMAX) {
            if (first) {
#pragma unroll
                for (int j = 0; j < kRouterPerLane; j++)
                    if (lane + 32 * j < p.E) m = fmaxf(m, l[j]);
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
#pragma unroll
                for (int j = 0; j < kRouterPerLane; j++)
                    if (lane + 32 * j < p.E) z += m == -INFINITY ? 0.0f : expf(l[j] - m);
                z = mf_warp_sum(z);
            } else {
                for (int r = 0; r < p.k; r++) m = fmaxf(m, sl[r]);
                for (int r = 0; r < p.k; r++) z += m == -INFINITY ? 0.0f : expf(sl[r] - m);
            }
        }
        if (lane == 0) {
            float wt[8], sum = 0.0f;
            for (int r = 0; r < p.k; r++) {
                if (p.score == MF_MOE_SCORE_SOFTMAX)
                    wt[r] = m == -INFINITY ? 0.0f : expf(sl[r] - m) / z;
                else
                    wt[r] = mf_act_sigmoid(sl[r]);
            }
            if (p.renorm) {
                for (int r = 0; r < p.k; r++) sum += wt[r];
                if (sum > 0.0f)
                    for (int r = 0; r < p.k; r++) wt[r] /= sum;
            }
            for (int r = 0; r < p.k; r++) {
                p.ids[t * p.k + r] = sel[r];
                p.w[t * p.k + r] = wt[r] * p.scale;
            }
        }
    }
}

} // namespace

extern "C" mf_status mf_cuda_moe_router(mf_backend *be, const mf_moe_router_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    RouterParams p = {};
    p.logits = a->logits.data, p.ls = a->logits.stride[0], p.ldt = a->logits.dtype;
    p.ids = static_cast<int32_t *>(a->ids.data), p.w = static_cast<float *>(a->weights.data);
    p.T = a->logits.shape[0], p.E = (int)a->logits.shape[1], p.k = (int)a->ids.shape[1];
    p.score = a->score, p.order = a->order, p.renorm = a->renorm, p.scale = a->routed_scale;
    const unsigned grid = mf_cuda_grid(c, (p.T + kRouterWarps - 1) / kRouterWarps);
    MF_LAUNCH(moe_router_kernel, grid, kRouterWarps * 32, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("moe_router_kernel");
    return MF_OK;
}
