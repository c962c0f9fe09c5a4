// The decoder's forward pass: one implementation configured by mf_dec_spec
// for GPT-2 (LayerNorm, learned positions, tanh GELU, biases) and Llama
// (RMSNorm, RoPE, SwiGLU, GQA), pre-norm or post-norm.
//
// Pre-norm, with the residual add fused into the next norm:
//   h = embed(ids) [+ pos];  n = norm1_0(h)
//   per layer l:  a = attention(n);  h += a, n = norm2_l(h)
//                 a = mlp(n);        h += a, n = norm1_{l+1}(h)  (after the last layer: the final norm)
// Post-norm:  h = norm1_l(h + attention(h));  h = norm2_l(h + mlp(h))
//
// The two blocks are small functions (attention_block, mlp_block) so that a
// mixture-of-experts MLP or another attention op replaces one call; the
// attention over the cache itself is attention_flash below (the default) or
// mf_attention_classic (attention_classic.c, the "before").
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "runtime/attention_classic.h"
#include "runtime/forward.h"

// ---- views ------------------------------------------------------------------------------

// Columns [c0, c0 + w) of rows [r0, r0 + n) of a row-major 2-D tensor.
static mf_tensor block_of(const mf_tensor *t, int64_t r0, int64_t n, int64_t c0, int64_t w) {
    mf_tensor v = mf_rows_of(t, r0, n);
    v.data = (char *)v.data + c0 * (int64_t)mf_dtype_size(t->dtype);
    v.shape[1] = w;
    return v;
}

// Columns [c0, c0 + heads * D) of rows [r0, r0 + n) as (n, heads, D).
static mf_tensor heads_of(const mf_tensor *t, int64_t r0, int64_t n, int64_t c0, int64_t heads, int64_t D) {
    mf_tensor v = block_of(t, r0, n, c0, heads * D);
    v.ndim = 3;
    v.shape[1] = heads, v.shape[2] = D;
    v.stride[1] = D, v.stride[2] = 1;
    return v;
}

static const mf_tensor *opt(const mf_tensor *t) { return t->data ? t : NULL; }

// y = x @ lin (+ bias) (epilogue ep); lin[0 .. n) write side by side into y's columns.
static mf_status linear(mf_session *s, const char *what, const mf_tensor *x, const mf_linear *lin, int32_t n,
                        const mf_tensor *y, mf_epilogue ep) {
    int64_t c0 = 0;
    for (int32_t i = 0; i < n; i++) {
        const int64_t w = lin[i].w.shape[1];
        mf_gemm_args g = {.a = *x, .b = lin[i].w, .c = block_of(y, 0, y->shape[0], c0, w), .bias = opt(&lin[i].bias),
                          .alpha = 1.0f, .beta = 0.0f, .epilogue = ep};
        MF_TRY(mf_gemm(mf_role(s, what), &g));
        c0 += w;
    }
    return MF_OK;
}

static mf_status norm(mf_session *s, const char *what, const mf_tensor *x, const mf_tensor *residual,
                      const mf_tensor *sum_out, const mf_tensor *y, const mf_tensor *w, const mf_tensor *b) {
    const mf_dec_spec *sp = &s->m->spec;
    mf_norm_args a = {.x = *x, .residual = residual, .sum_out = sum_out, .y = *y, .weight = *w, .bias = opt(b),
                      .kind = sp->layernorm ? MF_NORM_LAYER : MF_NORM_RMS, .eps = sp->norm_eps};
    return mf_add_norm(mf_role(s, what), &a);
}

// ---- blocks ---------------------------------------------------------------------------------

// All segments of the step in one mf_attention over the cache (cache mode:
// segment i is q rows [seg_cu[i], seg_cu[i+1]) against keys [0, seg_klen[i])
// of slot seg_slot[i], or, in a runner's step, of the blocks its row of the
// block tables names); causal, and windowed when the model slides.
static mf_status attention_flash(mf_session *s, int32_t l, int32_t n_segs, int64_t T) {
    const mf_dec_spec *sp = &s->m->spec;
    const int64_t H = sp->n_heads, D = sp->head_dim;
    const mf_tensor cu = mf_rows_of(&s->dev.seg_cu, 0, n_segs + 1), slot = mf_rows_of(&s->dev.seg_slot, 0, n_segs),
                    klen = mf_rows_of(&s->dev.seg_klen, 0, n_segs), tab = mf_rows_of(&s->dev.tables, 0, n_segs);
    const bool paged = s->call.paged;
    mf_attention_args a = {.q = heads_of(&s->dev.qkv, 0, T, 0, H, D),
                           .k = paged ? mf_kv_cache_pool(&s->kv, l, 0) : mf_kv_cache_slots(&s->kv, l, 0, s->dims.slot_len),
                           .v = paged ? mf_kv_cache_pool(&s->kv, l, 1) : mf_kv_cache_slots(&s->kv, l, 1, s->dims.slot_len),
                           .o = heads_of(&s->dev.ctx, 0, T, 0, H, D), .cu_seqlens_q = &cu, .k_lens = &klen,
                           .slots = paged ? NULL : &slot, .block_table = paged ? &tab : NULL, .batch = n_segs,
                           .max_q_len = s->host.max_q,
                           // decode steps bound the keys by max_seq, as a recorded graph must: the
                           // split-KV choice, and so the rounding, is then the same with and without graphs
                           .max_k_len = s->host.max_q == 1 ? s->max_seq : s->host.max_k,
                           .scale = 1.0f / sqrtf((float)D), .causal = true, .window = sp->sliding_window,
                           .workspace = s->dev.attn_ws, .workspace_bytes = s->dev.attn_ws_bytes};
    return mf_attention(mf_role(s, s->host.max_q == 1 ? "decode" : "prefill"), &a);
}

// out (T, hidden) = o_proj(attention(q, k, v of x)). One mf_kv_write puts the
// new keys and values of every segment into the cache (rotating q and k on
// the way when the model uses RoPE), then the model's attention runs all segments.
static mf_status attention_block(mf_session *s, int32_t l, const mf_tensor *x, const mf_tensor *out, int32_t n_segs,
                                 int64_t T) {
    const mf_dec_spec *sp = &s->m->spec;
    const mf_layer_weights *L = &s->m->w.layers[l];
    const int64_t H = sp->n_heads, G = sp->n_kv_heads, D = sp->head_dim;
    const mf_tensor qkv = mf_rows_of(&s->dev.qkv, 0, T);
    MF_TRY(linear(s, "qkv", x, L->qkv, L->n_qkv, &qkv, MF_EPILOGUE_NONE));
    const mf_tensor q = heads_of(&qkv, 0, T, 0, H, D);
    const mf_tensor slot_map = mf_rows_of(&s->dev.slot_map, 0, T);
    mf_kv_write_args kw = {.k = heads_of(&qkv, 0, T, H * D, G, D), .v = heads_of(&qkv, 0, T, (H + G) * D, G, D),
                           .k_cache = mf_kv_cache_pool(&s->kv, l, 0), .v_cache = mf_kv_cache_pool(&s->kv, l, 1),
                           .slot_mapping = &slot_map, .pos = mf_rows_of(&s->dev.pos, 0, T)};
    if (!sp->learned_pos) kw.q = &q, kw.inv_freq = &s->m->w.inv_freq;
    MF_TRY(mf_kv_write(mf_role(s, sp->learned_pos ? "kv" : "rope_kv"), &kw));
    MF_TRY(s->m->attn == MF_ATTN_CLASSIC ? mf_attention_classic(s, l, n_segs) : attention_flash(s, l, n_segs, T));
    const mf_tensor ctx = mf_rows_of(&s->dev.ctx, 0, T);
    return linear(s, "o", &ctx, &L->o, 1, out, MF_EPILOGUE_NONE);
}

// out (T, hidden) = the MLP of x: down(act(gate(x)) * up(x)) or proj(act(fc(x))),
// or with experts the routed mixture (+ the shared expert).
static mf_status mlp_block(mf_session *s, int32_t l, const mf_tensor *x, const mf_tensor *out, int64_t T) {
    const mf_dec_spec *sp = &s->m->spec;
    const mf_layer_weights *L = &s->m->w.layers[l];
    if (sp->n_experts > 0) { // the workspace was sized for T rows at create (session.c)
        mf_moe_args a;
        mf_model_moe_args(s->m, l, &a);
        a.x = *x, a.out = *out, a.workspace = s->dev.moe_ws, a.workspace_bytes = s->dev.moe_ws_bytes;
        return mf_moe(mf_role(s, "experts"), &a);
    }
    const int64_t F = sp->ffn;
    const mf_tensor ff = mf_rows_of(&s->dev.ff, 0, T);
    if (sp->gated_mlp) {
        MF_TRY(linear(s, "gate_up", x, L->up, L->n_up, &ff, MF_EPILOGUE_NONE));
        const mf_tensor gate = block_of(&ff, 0, T, 0, F), up = block_of(&ff, 0, T, F, F);
        mf_act_args a = {.x = gate, .up = &up, .y = gate, .kind = sp->act};
        MF_TRY(mf_act(mf_role(s, "gated"), &a));
        return linear(s, "down", &gate, &L->down, 1, out, MF_EPILOGUE_NONE);
    }
    // GPT-2's gelu_new is the GEMM's epilogue; other activations are one more pass.
    const bool fused = sp->act == MF_ACT_GELU_TANH;
    MF_TRY(linear(s, "up", x, L->up, L->n_up, &ff, fused ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE));
    if (!fused) {
        mf_act_args a = {.x = ff, .up = NULL, .y = ff, .kind = sp->act};
        MF_TRY(mf_act(mf_role(s, "act"), &a));
    }
    return linear(s, "down", &ff, &L->down, 1, out, MF_EPILOGUE_NONE);
}

// ---- the step --------------------------------------------------------------------------------

mf_status mf_forward_step(mf_session *s, int32_t n_segs, int64_t T, mf_tensor *out) {
    const mf_dec_spec *sp = &s->m->spec;
    const mf_weights *w = &s->m->w;
    const mf_tensor h = mf_rows_of(&s->dev.h, 0, T), n = mf_rows_of(&s->dev.n, 0, T), a = mf_rows_of(&s->dev.a, 0, T);
    const mf_tensor ids = mf_rows_of(&s->dev.ids, 0, T), pos = mf_rows_of(&s->dev.pos, 0, T);

    mf_embed_args e = {.ids = ids, .table = w->tok_emb, .y = h};
    MF_TRY(mf_embed(mf_role(s, "tokens"), &e));
    if (sp->learned_pos) { // position rows into a, added by the first norm (or an add)
        mf_embed_args ep = {.ids = pos, .table = w->pos_emb, .y = a};
        MF_TRY(mf_embed(mf_role(s, "positions"), &ep));
    }
    const int32_t nl = sp->n_layers;
    if (!sp->post_norm) {
        MF_TRY(norm(s, "attn_norm", &h, sp->learned_pos ? &a : NULL, sp->learned_pos ? &h : NULL, &n,
                    &w->layers[0].norm1_w, &w->layers[0].norm1_b));
        for (int32_t l = 0; l < nl; l++) {
            const mf_layer_weights *L = &w->layers[l];
            MF_TRY(attention_block(s, l, &n, &a, n_segs, T));
            MF_TRY(norm(s, "mlp_norm", &a, &h, &h, &n, &L->norm2_w, &L->norm2_b));
            MF_TRY(mlp_block(s, l, &n, &a, T));
            const bool last = l + 1 == nl;
            MF_TRY(norm(s, last ? "final_norm" : "attn_norm", &a, &h, &h, &n,
                        last ? &w->final_w : &w->layers[l + 1].norm1_w, last ? &w->final_b : &w->layers[l + 1].norm1_b));
        }
        *out = n;
        return MF_OK;
    }
    if (sp->learned_pos) {
        mf_add_args ad = {.a = h, .b = &a, .y = h, .alpha = 1.0f, .beta = 1.0f};
        MF_TRY(mf_add(mf_role(s, "positions"), &ad));
    }
    for (int32_t l = 0; l < nl; l++) {
        const mf_layer_weights *L = &w->layers[l];
        MF_TRY(attention_block(s, l, &h, &a, n_segs, T));
        MF_TRY(norm(s, "attn_norm", &a, &h, NULL, &h, &L->norm1_w, &L->norm1_b));
        MF_TRY(mlp_block(s, l, &h, &a, T));
        MF_TRY(norm(s, "mlp_norm", &a, &h, NULL, &h, &L->norm2_w, &L->norm2_b));
    }
    if (sp->final_norm) {
        MF_TRY(norm(s, "final_norm", &h, NULL, NULL, &n, &w->final_w, &w->final_b));
        *out = n;
    } else {
        *out = h;
    }
    return MF_OK;
}
