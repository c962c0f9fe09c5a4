// CPU KV-cache write (mf_kv_write): k_cache[slot, pos] = rope(k), v_cache[slot,
// pos] = v (paged: row slot_mapping[t] of the block pool), q = rope(q) in place. The rotation is mf_rope's exactly: angle =
// (float)pos * inv_freq[i] rounded to f32, cosf/sinf, the products and sums
// in f32, HF rotate_half pairs (i, i + rot_dim/2), dims >= rot_dim copied
// as they are. Slots and positions are all checked before anything is
// written. One token per OpenMP iteration.
#include <math.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "cpu/cpu.h"

enum { kChunk = 64 }; // f32 staging on the stack: pairs and plain dims in chunks

// Row (n, h) of src (3-D) rotated (cs: half cos/sin pairs; half = 0: none)
// into row d_off of dst. A chunk of pairs is read whole before it is
// written, so dst may be src's row (q in place).
static void rot_row(const mf_tensor *src, int64_t s_off, void *dst, mf_dtype dt, int64_t d_off, int64_t D,
                    int64_t half, const float *cs) {
    float x0[kChunk], x1[kChunk];
    for (int64_t i0 = 0; i0 < half; i0 += kChunk) {
        const int64_t n = half - i0 < kChunk ? half - i0 : kChunk;
        mf_cpu_to_f32(x0, src->data, src->dtype, s_off + i0, n);
        mf_cpu_to_f32(x1, src->data, src->dtype, s_off + half + i0, n);
        for (int64_t i = 0; i < n; i++) {
            const float c = cs[2 * (i0 + i)], s = cs[2 * (i0 + i) + 1], a = x0[i], b = x1[i];
            x0[i] = a * c - b * s;
            x1[i] = b * c + a * s;
        }
        mf_cpu_from_f32(dst, dt, d_off + i0, x0, n);
        mf_cpu_from_f32(dst, dt, d_off + half + i0, x1, n);
    }
    for (int64_t d0 = 2 * half; d0 < D; d0 += kChunk) {
        const int64_t n = D - d0 < kChunk ? D - d0 : kChunk;
        mf_cpu_to_f32(x0, src->data, src->dtype, s_off + d0, n);
        mf_cpu_from_f32(dst, dt, d_off + d0, x0, n);
    }
}

mf_status mf_cpu_kv_write(mf_backend *be, const mf_kv_write_args *p) {
    (void)be;
    const int64_t n = p->k.shape[0], KVH = p->k.shape[1], D = p->k.shape[2];
    const int64_t n_slots = p->k_cache.shape[0], max_len = p->k_cache.shape[1];
    const int32_t *slot = p->slot.data, *pos = p->pos.data, *map = p->slot_mapping ? p->slot_mapping->data : NULL;
    for (int64_t t = 0; t < n; t++) {
        if (map && (map[t] < 0 || map[t] >= n_slots * max_len))
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: slot_mapping[%lld] = %d out of range [0, %lld blocks x %lld)",
                           (long long)t, map[t], (long long)n_slots, (long long)max_len);
        if (!map && (slot[t] < 0 || slot[t] >= n_slots))
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: slot[%lld] = %d out of range [0, %lld)", (long long)t,
                           slot[t], (long long)n_slots);
        if (pos[t] < 0 || (!map && pos[t] >= max_len))
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: pos[%lld] = %d out of range [0, max_len = %lld)",
                           (long long)t, pos[t], (long long)max_len);
    }
    const int64_t half = p->inv_freq ? p->inv_freq->shape[0] : 0;
    float *cs_all = NULL;
    if (half) {
        cs_all = mf_malloc((size_t)(n * half * 2) * sizeof(float));
        if (!cs_all)
            return mf_fail(MF_ERR_OOM, "kv_write: out of host memory for %lld cos/sin pairs", (long long)(n * half));
    }
    const float *inv = half ? p->inv_freq->data : NULL;
    const mf_tensor *kc = &p->k_cache, *vc = &p->v_cache, *q = p->q;
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t t = 0; t < n; t++) {
        float *cs = half ? cs_all + t * half * 2 : NULL;
        for (int64_t i = 0; i < half; i++) {
            const float angle = (float)pos[t] * inv[i];
            cs[2 * i] = cosf(angle), cs[2 * i + 1] = sinf(angle);
        }
        const int64_t blk = map ? map[t] / max_len : slot[t], row = map ? map[t] % max_len : pos[t];
        const int64_t cbase = blk * kc->stride[0] + row * kc->stride[1];
        const int64_t vbase = blk * vc->stride[0] + row * vc->stride[1];
        for (int64_t h = 0; h < KVH; h++) {
            rot_row(&p->k, t * p->k.stride[0] + h * p->k.stride[1], kc->data, kc->dtype, cbase + h * kc->stride[2], D,
                    half, cs);
            rot_row(&p->v, t * p->v.stride[0] + h * p->v.stride[1], vc->data, vc->dtype, vbase + h * vc->stride[2], D,
                    0, NULL);
        }
        if (q) // in place
            for (int64_t h = 0; h < q->shape[1]; h++) {
                const int64_t o = t * q->stride[0] + h * q->stride[1];
                rot_row(q, o, q->data, q->dtype, o, 2 * half, half, cs);
            }
    }
    free(cs_all);
    return MF_OK;
}
