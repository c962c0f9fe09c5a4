// Classic attention over the KV cache, for one sequence's new tokens:
// S = Q K^T (batched GEMM) -> P = softmax(S / sqrt(D), causal) -> O = P V.
// It materialises the scores, so it is the "before" that faster attention
// is measured against; selectable as attn = "classic".
//
// GQA without copies of K and V: with the queries head-major, the grp =
// H / G query heads that share kv head g are consecutive, so for each g they
// form one (grp * nq, D) matrix, and a GEMM batched over g multiplies it by
// K_g^T, a (D, T_k) view of the cache with batch stride D (kv heads are
// interleaved per token in the cache). One GEMM for all heads, one for P V.
//
// Shapes for a block of nq queries of a segment (positions pos0 + q0 ..):
//   Q:  (G, grp * nq, D)   head-major: rows (h, t); a copy of the strided q
//                          columns of s->qkv (no copy when nq == 1: the heads
//                          of one token are already head-major)
//   K:  (G, D, T_k)        strides (D, 1, G * D) into the cache, T_k = pos0 + q0 + nq
//   S:  (G, grp * nq, T_k) f32 = (1, H, nq, T_k) for the softmax: causal,
//                          bottom-right aligned (query t sees keys <= pos0 + q0 + t)
//   P:  same, activation dtype (the CPU softmaxes S in place)
//   V:  (G, T_k, D)        strides (D, G * D, 1)
//   O:  (G, grp * nq, D)   head-major, copied into s->ctx's rows (n, H * D)
// Queries go in blocks of s->q_block rows so that S stays within its
// scratch (H * q_block * max_seq) however long the sequence.
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "model/session.h"

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

mf_status mf_attention_classic(mf_session *s, int32_t layer, const mf_fwd_seg *seg) {
    const mf_dec_spec *sp = &s->m->spec;
    const int64_t H = sp->n_heads, G = sp->n_kv_heads, D = sp->head_dim, grp = H / G;
    const int64_t qkv_w = (H + 2 * G) * D, ctx_w = H * D;
    const mf_dtype dt = s->m->dtype;
    const mf_device dev = mf_backend_device(s->be);
    const float scale = 1.0f / sqrtf((float)D);
    const mf_tensor kc = mf_kv_cache_view(&s->kv, layer, 0, seg->slot, 0, 1);
    const mf_tensor vc = mf_kv_cache_view(&s->kv, layer, 1, seg->slot, 0, 1);

    for (int64_t q0 = 0; q0 < seg->n; q0 += s->q_block) {
        const int64_t nq = seg->n - q0 < s->q_block ? seg->n - q0 : s->q_block;
        const int64_t tk = seg->pos0 + q0 + nq;
        const int64_t row = seg->row0 + q0; // first query row in s->qkv / s->ctx
        mf_tensor q;
        if (nq == 1) {
            q = view3(at(&s->qkv, row * qkv_w), dt, dev, G, grp, D, grp * D, D, 1);
        } else {
            mf_copy_args c = {.src = view3(at(&s->qkv, row * qkv_w), dt, dev, H, nq, D, D, qkv_w, 1),
                              .dst = view3(s->q_hm.data, dt, dev, H, nq, D, nq * D, D, 1)};
            MF_TRY(mf_fw_copy(s, "q_head_major", &c));
            q = view3(s->q_hm.data, dt, dev, G, grp * nq, D, grp * nq * D, D, 1);
        }
        const mf_tensor scores = view3(s->scores.data, MF_DTYPE_F32, dev, G, grp * nq, tk, grp * nq * tk, tk, 1);
        mf_gemm_args qk = {.a = q, .b = view3(kc.data, dt, dev, G, D, tk, D, 1, G * D), .c = scores, .alpha = 1.0f};
        MF_TRY(mf_fw_gemm(s, "scores", &qk));

        mf_softmax_args sm = {.scale = scale, .causal = true};
        const int64_t shape4[4] = {1, H, nq, tk};
        MF_TRY(mf_tensor_make(&sm.x, s->scores.data, MF_DTYPE_F32, dev, 4, shape4));
        MF_TRY(mf_tensor_make(&sm.y, s->probs.data, s->probs.dtype, dev, 4, shape4));
        MF_TRY(mf_fw_softmax(s, "attn", &sm));

        const mf_tensor p = view3(s->probs.data, s->probs.dtype, dev, G, grp * nq, tk, grp * nq * tk, tk, 1);
        mf_gemm_args pv = {.a = p, .b = view3(vc.data, dt, dev, G, tk, D, D, G * D, 1), .alpha = 1.0f};
        if (nq == 1) {
            pv.c = view3(at(&s->ctx, row * ctx_w), dt, dev, G, grp, D, grp * D, D, 1);
            MF_TRY(mf_fw_gemm(s, "pv", &pv));
        } else {
            pv.c = view3(s->ctx_hm.data, dt, dev, G, grp * nq, D, grp * nq * D, D, 1);
            MF_TRY(mf_fw_gemm(s, "pv", &pv));
            mf_copy_args c = {.src = view3(s->ctx_hm.data, dt, dev, H, nq, D, nq * D, D, 1),
                              .dst = view3(at(&s->ctx, row * ctx_w), dt, dev, H, nq, D, D, ctx_w, 1)};
            MF_TRY(mf_fw_copy(s, "attn_out", &c));
        }
    }
    return MF_OK;
}
