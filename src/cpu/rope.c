// CPU rotary position embedding (mf_rope), in place on q and k, HF
// rotate_half layout: pair (v[i], v[i + half]) of every head rotated by
// angle = (float)pos[t] * inv_freq[i], the product rounded to f32 as HF
// computes it. cos and sin are taken in f32 with the C library's cosf/sinf
// (full range reduction: angles reach ~1e5 rad at long positions), the
// rotation in f32. One token per OpenMP iteration; each (token, i) angle
// serves all heads of q and k.
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"

// Rotates pair i of every head of token t in v (q or k).
static void rotate_heads(const mf_tensor *v, int64_t t, int64_t i, int64_t half, float c, float s) {
    for (int64_t h = 0; h < v->shape[1]; h++) {
        const int64_t o = t * v->stride[0] + h * v->stride[1] + i;
        const float x0 = mf_load_f32(v->data, v->dtype, o), x1 = mf_load_f32(v->data, v->dtype, o + half);
        mf_store_f32(v->data, v->dtype, o, x0 * c - x1 * s);
        mf_store_f32(v->data, v->dtype, o + half, x1 * c + x0 * s);
    }
}

mf_status mf_cpu_rope(mf_backend *be, const mf_rope_args *p) {
    (void)be;
    const int64_t n_tokens = p->q.shape[0], half = p->inv_freq.shape[0];
#pragma omp parallel for schedule(static) if (n_tokens > 1)
    for (int64_t t = 0; t < n_tokens; t++) {
        int32_t pos;
        memcpy(&pos, (const char *)p->pos.data + t * (int64_t)sizeof pos, sizeof pos);
        for (int64_t i = 0; i < half; i++) {
            const float angle = (float)pos * mf_load_f32(p->inv_freq.data, MF_DTYPE_F32, i);
            const float c = cosf(angle), s = sinf(angle);
            rotate_heads(&p->q, t, i, half, c, s);
            if (p->k) rotate_heads(p->k, t, i, half, c, s);
        }
    }
    return MF_OK;
}
