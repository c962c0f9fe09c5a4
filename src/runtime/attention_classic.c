// Classic attention over the KV cache, one segment (sequence) at a time:
// S = Q K^T (batched GEMM) -> P = softmax(S / sqrt(D), causal) -> O = P V.
// It materialises the scores, so it is the "before" that mf_attention (the
// flash path) is measured against and its reference; selectable as
// attn = "classic". The new keys and values are in the cache already
// (forward.c's mf_kv_write, which also rotated q).
//
// GQA without copies of K and V: with the queries head-major, the grp =
// H / G query heads that share kv head g are consecutive, so for each g they
// form one (grp * nq, D) matrix, and a GEMM batched over g multiplies it by
// K_g^T, a (D, T_k) view of the cache with batch stride D (kv heads are
// interleaved per token in the cache). One GEMM for all heads, one for P V.
//
// Shapes for a block of nq queries of a segment (positions pos0 + q0 ..):
//   Q:  (G, grp * nq, D)   rows (h, t). MHA (grp == 1) and single queries:
//                          a strided view of s->dev.qkv's q columns; GQA blocks:
//                          a head-major copy (rows of two heads interleave)
//   K:  (G, D, T_k)        strides (D, 1, G * D) into the cache, keys [k0, k0 + T_k)
//   S:  (G, grp * nq, T_k) f32, row stride ld (T_k rounded up to 8: 16-byte
//                          rows for the GEMM and the softmax) = (1, H, nq, T_k)
//                          for the softmax: causal, bottom-right aligned
//   P:  same, activation dtype (the CPU softmaxes S in place)
//   V:  (G, T_k, D)        strides (D, G * D, 1)
//   O:  (G, grp * nq, D)   written straight into s->dev.ctx's rows when Q was a
//                          view, else head-major and copied back
// Queries go in blocks of s->dims.q_block rows (a multiple of 64 where the budget
// allows) so that S stays within its scratch however long the sequence.
// Sliding window (the model's sliding_window W > 0 and a longer cache): one
// query per block, whose keys are the last W up to its own position: the
// plain causal softmax over that key range is the windowed one.
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "runtime/attention_classic.h"

// A 3-D view (b, r, c) with the given element strides.
static mf_tensor view3(void *data, mf_dtype dt, mf_device dev, int64_t b, int64_t r, int64_t c, int64_t sb, int64_t sr,
                       int64_t sc) {
    mf_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data, t.dtype = dt, t.device = dev, t.ndim = 3;
    t.shape[0] = b, t.shape[1] = r, t.shape[2] = c, t.shape[3] = 1;
    t.stride[0] = sb, t.stride[1] = sr, t.stride[2] = sc;
    return t;
}

static void *at(const mf_tensor *t, int64_t elems) {
    return (char *)t->data + elems * (int64_t)mf_dtype_size(t->dtype);
}

// Queries [q0, q0 + nq) of segment g against keys [k0, k1) of its slot.
static mf_status classic_block(mf_session *s, int32_t layer, const mf_fwd_seg *g, int64_t q0, int64_t nq, int64_t k0,
                               int64_t k1) {
    const mf_dec_spec *sp = &s->m->spec;
    const int64_t H = sp->n_heads, G = sp->n_kv_heads, D = sp->head_dim, grp = H / G;
    const int64_t qkv_w = (H + 2 * G) * D, ctx_w = H * D;
    const mf_dtype dt = s->m->dtype;
    const mf_device dev = mf_backend_device(s->be);
    const int64_t row0 = (int64_t)g->slot * s->dims.slot_len + k0; // a slot's tokens are one run of the pool
    const mf_tensor kc = mf_kv_cache_rows(&s->kv, layer, 0, row0, 1);
    const mf_tensor vc = mf_kv_cache_rows(&s->kv, layer, 1, row0, 1);
    const int64_t tk = k1 - k0, ld = (tk + 7) / 8 * 8;
    const int64_t row = g->row0 + q0; // first query row in s->dev.qkv / s->dev.ctx
    const bool view = nq == 1 || grp == 1; // Q and O as strided views, no copies

    mf_tensor q;
    if (nq == 1) {
        q = view3(at(&s->dev.qkv, row * qkv_w), dt, dev, G, grp, D, grp * D, D, 1);
    } else if (grp == 1) {
        q = view3(at(&s->dev.qkv, row * qkv_w), dt, dev, G, nq, D, D, qkv_w, 1);
    } else {
        mf_copy_args c = {.src = view3(at(&s->dev.qkv, row * qkv_w), dt, dev, H, nq, D, D, qkv_w, 1),
                          .dst = view3(s->dev.q_hm.data, dt, dev, H, nq, D, nq * D, D, 1)};
        MF_TRY(mf_copy(mf_role(s, "q_head_major"), &c));
        q = view3(s->dev.q_hm.data, dt, dev, G, grp * nq, D, grp * nq * D, D, 1);
    }
    const mf_tensor scores = view3(s->dev.scores.data, MF_DTYPE_F32, dev, G, grp * nq, tk, grp * nq * ld, ld, 1);
    const mf_dtype kvt = s->kv.dtype; // the activations' or (CPU) f16/bf16: a mixed GEMM
    mf_gemm_args qk = {.a = q, .b = view3(kc.data, kvt, dev, G, D, tk, D, 1, G * D), .c = scores, .alpha = 1.0f};
    MF_TRY(mf_gemm(mf_role(s, "scores"), &qk));

    mf_softmax_args sm = {.scale = 1.0f / sqrtf((float)D), .causal = true};
    mf_tensor x4;
    memset(&x4, 0, sizeof x4);
    x4.data = s->dev.scores.data, x4.dtype = MF_DTYPE_F32, x4.device = dev, x4.ndim = 4;
    x4.shape[0] = 1, x4.shape[1] = H, x4.shape[2] = nq, x4.shape[3] = tk;
    x4.stride[0] = H * nq * ld, x4.stride[1] = nq * ld, x4.stride[2] = ld, x4.stride[3] = 1;
    mf_tensor y4 = x4;
    y4.data = s->dev.probs.data, y4.dtype = s->dev.probs.dtype;
    sm.x = x4, sm.y = y4;
    MF_TRY(mf_softmax(mf_role(s, "attn"), &sm));

    const mf_tensor p = view3(s->dev.probs.data, s->dev.probs.dtype, dev, G, grp * nq, tk, grp * nq * ld, ld, 1);
    mf_gemm_args pv = {.a = p, .b = view3(vc.data, kvt, dev, G, tk, D, D, G * D, 1), .alpha = 1.0f};
    if (view) {
        pv.c = nq == 1 ? view3(at(&s->dev.ctx, row * ctx_w), dt, dev, G, grp, D, grp * D, D, 1)
                       : view3(at(&s->dev.ctx, row * ctx_w), dt, dev, G, nq, D, D, ctx_w, 1);
        return mf_gemm(mf_role(s, "pv"), &pv);
    }
    pv.c = view3(s->dev.ctx_hm.data, dt, dev, G, grp * nq, D, grp * nq * D, D, 1);
    MF_TRY(mf_gemm(mf_role(s, "pv"), &pv));
    mf_copy_args c = {.src = view3(s->dev.ctx_hm.data, dt, dev, H, nq, D, nq * D, D, 1),
                      .dst = view3(at(&s->dev.ctx, row * ctx_w), dt, dev, H, nq, D, D, ctx_w, 1)};
    return mf_copy(mf_role(s, "attn_out"), &c);
}

mf_status mf_attention_classic(mf_session *s, int32_t layer, int32_t n_segs) {
    const int64_t W = s->m->spec.sliding_window;
    for (int32_t i = 0; i < n_segs; i++) {
        const mf_fwd_seg *g = &s->host.segs[i];
        if (W > 0 && g->pos0 + g->n > W) { // windowed: one query at a time over its last W keys
            for (int64_t t = 0; t < g->n; t++) {
                const int64_t k1 = g->pos0 + t + 1, k0 = k1 > W ? k1 - W : 0;
                MF_TRY(classic_block(s, layer, g, t, 1, k0, k1));
            }
            continue;
        }
        for (int64_t q0 = 0; q0 < g->n; q0 += s->dims.q_block) {
            const int64_t nq = g->n - q0 < s->dims.q_block ? g->n - q0 : s->dims.q_block;
            MF_TRY(classic_block(s, layer, g, q0, nq, 0, g->pos0 + q0 + nq));
        }
    }
    return MF_OK;
}
