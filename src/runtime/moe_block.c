// The MoE MLP of one decoder layer: the layer's tensors into mf_moe's args.
// forward.c's mlp_block calls it when the spec
// has experts: x is the normed hidden state and out the block output (`a`),
// which the following add & norm adds to the residual stream, exactly as the
// dense MLP's output. The session sizes s->moe_ws with mf_moe_block_workspace
// for its step's T rows, once at create.
#include "runtime/moe_block.h"
#include "ops/moe.h"

static void fill_args(const mf_moe_layer *L, const mf_moe_routing *r, const mf_tensor *x, const mf_tensor *residual,
                      const mf_tensor *out, mf_moe_args *a) {
    *a = (mf_moe_args){.x = *x, .w_router = L->router, .w1 = L->w1, .w2 = L->w2, .ffn = r->ffn, .top_k = r->top_k,
                       .score = r->score, .order = r->order, .renorm = r->renorm, .routed_scale = r->routed_scale,
                       .residual = residual, .out = *out};
    if (L->shared_w1.data) {
        a->shared_w1 = &L->shared_w1, a->shared_w2 = &L->shared_w2;
        if (L->shared_gate.data) a->shared_gate = &L->shared_gate;
    }
}

mf_status mf_moe_block(mf_backend *be, const mf_moe_layer *L, const mf_moe_routing *r, const mf_tensor *x,
                       const mf_tensor *residual, const mf_tensor *out, void *workspace, size_t workspace_bytes) {
    mf_moe_args a;
    fill_args(L, r, x, residual, out, &a);
    a.workspace = workspace, a.workspace_bytes = workspace_bytes;
    return mf_moe(be, &a);
}

mf_status mf_moe_block_workspace(mf_backend *be, const mf_moe_layer *L, const mf_moe_routing *r, const mf_tensor *x,
                                 const mf_tensor *out, size_t *bytes) {
    mf_moe_args a;
    fill_args(L, r, x, NULL, out, &a);
    return mf_moe_workspace(be, &a, bytes);
}

bool mf_moe_block_capturable(mf_backend *be, const mf_moe_layer *L, const mf_moe_routing *r, const mf_tensor *x,
                             const mf_tensor *out, void *workspace, size_t workspace_bytes) {
    mf_moe_args a;
    fill_args(L, r, x, NULL, out, &a);
    a.workspace = workspace, a.workspace_bytes = workspace_bytes;
    return mf_moe_capturable(be, &a);
}
