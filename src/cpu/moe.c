// CPU MoE parts (mf_moe_router, mf_moe_permute, mf_moe_combine), f32 math.
// The expert FFNs are the generic per-expert loop of src/ops/moe.c over
// mf_gemm (OpenBLAS) and mf_act. The formulas match src/cuda/moe/*.cu step for
// step (selection on the logits, exp of logit - max, sums in index order).
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "cpu/cpu.h"
#include "kernels/act_math.h"

// Selection order: a ranks above b (NaN below -inf; equal values: lower index,
// which the caller gets by scanning in index order with a strict compare).
static inline float rank_key(float v) { return isnan(v) ? -INFINITY : v; }

mf_status mf_cpu_moe_router(mf_backend *be, const mf_moe_router_args *p) {
    (void)be;
    const int64_t T = p->logits.shape[0], E = p->logits.shape[1], k = p->ids.shape[1];
    const int64_t ls = p->logits.stride[0];
    const bool softmax = p->score == MF_MOE_SCORE_SOFTMAX, first = p->order == MF_MOE_SCORE_THEN_TOPK;
    int32_t *ids = p->ids.data;
    float *w = p->weights.data;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        float l[256];
        bool taken[256];
        for (int64_t e = 0; e < E; e++) {
            l[e] = mf_load_f32(p->logits.data, p->logits.dtype, t * ls + e);
            taken[e] = false;
        }
        int32_t sel[8];
        float key[8];
        for (int64_t j = 0; j < k; j++) {
            int32_t best = -1;
            float bk = 0.0f;
            for (int64_t e = 0; e < E; e++) {
                if (taken[e]) continue;
                const float v = rank_key(l[e]);
                if (best < 0 || v > bk) best = (int32_t)e, bk = v;
            }
            taken[best] = true;
            sel[j] = best, key[j] = bk;
        }
        (void)key;
        float wt[8], sum = 0.0f;
        if (softmax) {
            // max over the scored set: all E (score then top-k) or the k chosen
            float m = -INFINITY;
            if (first)
                for (int64_t e = 0; e < E; e++) m = fmaxf(m, l[e]);
            else
                for (int64_t j = 0; j < k; j++) m = fmaxf(m, l[sel[j]]);
            float z = 0.0f;
            if (first)
                for (int64_t e = 0; e < E; e++) z += m == -INFINITY ? 0.0f : expf(l[e] - m);
            else
                for (int64_t j = 0; j < k; j++) z += m == -INFINITY ? 0.0f : expf(l[sel[j]] - m);
            for (int64_t j = 0; j < k; j++) wt[j] = m == -INFINITY ? 0.0f : expf(l[sel[j]] - m) / z;
        } else {
            for (int64_t j = 0; j < k; j++) wt[j] = mf_act_sigmoid(l[sel[j]]);
        }
        if (p->renorm) {
            for (int64_t j = 0; j < k; j++) sum += wt[j];
            if (sum > 0.0f)
                for (int64_t j = 0; j < k; j++) wt[j] /= sum;
        }
        for (int64_t j = 0; j < k; j++) {
            ids[t * k + j] = sel[j];
            w[t * k + j] = wt[j] * p->routed_scale;
        }
    }
    return MF_OK;
}

mf_status mf_cpu_moe_permute(mf_backend *be, const mf_moe_permute_args *p) {
    (void)be;
    const int64_t T = p->ids.shape[0], k = p->ids.shape[1], N = T * k, E = p->n_experts;
    const int32_t *ids = p->ids.data;
    int32_t *off = p->offsets.data, *sorted = p->sorted.data, *inv = p->inv.data;
    for (int64_t a = 0; a < N; a++)
        if (ids[a] < 0 || ids[a] >= E)
            return mf_fail(MF_ERR_INVALID_ARG, "moe_permute: ids[%lld] (token %lld, slot %lld) = %d outside [0, %lld)",
                           (long long)a, (long long)(a / k), (long long)(a % k), ids[a], (long long)E);
    // Counting sort: histogram, exclusive scan, then a stable scatter in
    // assignment order (serial: T * k integer steps, negligible beside the GEMMs).
    int32_t cursor[257];
    memset(cursor, 0, sizeof cursor);
    for (int64_t a = 0; a < N; a++) cursor[ids[a] + 1]++;
    for (int64_t e = 0; e < E; e++) cursor[e + 1] += cursor[e];
    for (int64_t e = 0; e <= E; e++) off[e] = cursor[e];
    for (int64_t a = 0; a < N; a++) {
        const int32_t r = cursor[ids[a]]++;
        sorted[r] = (int32_t)a;
        inv[a] = r;
    }
    if (p->x) {
        const mf_tensor *x = p->x, *xs = p->xs;
        const int64_t H = x->shape[1];
        const size_t esz = mf_dtype_size(x->dtype);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < N; r++)
            memcpy((char *)xs->data + (size_t)(r * xs->stride[0]) * esz,
                   (const char *)x->data + (size_t)((sorted[r] / k) * x->stride[0]) * esz, (size_t)H * esz);
    }
    return MF_OK;
}

mf_status mf_cpu_moe_combine(mf_backend *be, const mf_moe_combine_args *p) {
    (void)be;
    const int64_t T = p->weights.shape[0], k = p->weights.shape[1], H = p->out.shape[1], N = p->ys.shape[0];
    const int32_t *inv = p->inv.data;
    const float *w = p->weights.data;
    const mf_tensor *ys = &p->ys, *sh = p->shared, *sg = p->shared_gate, *res = p->residual, *out = &p->out;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        const float g = sg ? mf_act_sigmoid(mf_load_f32(sg->data, sg->dtype, t * sg->stride[0])) : 1.0f;
        for (int64_t i = 0; i < H; i++) {
            float acc = res ? mf_load_f32(res->data, res->dtype, t * res->stride[0] + i) : 0.0f;
            for (int64_t j = 0; j < k; j++) {
                const int32_t r = inv[t * k + j];
                if (r < 0 || r >= N) continue;
                acc += w[t * k + j] * mf_load_f32(ys->data, ys->dtype, r * ys->stride[0] + i);
            }
            if (sh) acc += g * mf_load_f32(sh->data, sh->dtype, t * sh->stride[0] + i);
            mf_store_f32(out->data, out->dtype, t * out->stride[0] + i, acc);
        }
    }
    return MF_OK;
}
