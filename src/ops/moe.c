// Mixture-of-Experts: argument validation for the parts (router, permute,
// experts, combine) and the whole layer mf_moe, which runs them in order on
// caller-provided scratch. The expert FFNs are a loop over the non-empty
// experts of mf_gemm / mf_act calls on their rows (OpenBLAS on the CPU,
// cuBLASLt on CUDA) unless the backend's moe_experts entry takes them (CUDA:
// the small-batch decode kernels, or the grouped GEMM); an entry declines
// with MF_ERR_UNSUPPORTED and the loop here runs.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/moe_offsets.h"
#include "ops/check.h"
#include "ops/moe.h"
#include "ops/overlap.h"

#define MOE_MAX_EXPERTS 256
#define MOE_MAX_TOPK 8

typedef long long ll;

// t: ndim dims equal to shape[] (a -1 entry accepts any size), on be's device;
// the last dim has unit stride unless it has size <= 1.
static mf_status check_shape(const mf_backend *be, const mf_tensor *t, const char *op, const char *name,
                             int32_t ndim, const int64_t *shape) {
    MF_TRY(mf_check_on(be, t, op, name));
    MF_TRY(mf_check_ndim(t, ndim, op, name));
    for (int d = 0; d < ndim; d++)
        if (shape[d] >= 0 && t->shape[d] != shape[d]) {
            char got[96] = "", want[96] = "";
            size_t gl = 0, wl = 0;
            for (int i = 0; i < ndim; i++) {
                gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%lld", i ? ", " : "", (ll)t->shape[i]);
                if (shape[i] >= 0)
                    wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s%lld", i ? ", " : "", (ll)shape[i]);
                else
                    wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s*", i ? ", " : "");
            }
            return mf_fail(MF_ERR_INVALID_ARG, "%s: %s shape (%s) != (%s)", op, name, got, want);
        }
    if (t->shape[ndim - 1] > 1 && t->stride[ndim - 1] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: %s last dim must have stride 1 (stride %lld)", op, name,
                       (ll)t->stride[ndim - 1]);
    return MF_OK;
}

static mf_status check_i32(const mf_tensor *t, const char *op, const char *name) {
    if (t->dtype != MF_DTYPE_I32)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s dtype %s (want i32)", op, name, mf_dtype_name(t->dtype));
    if (!mf_tensor_is_contiguous(t))
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: %s must be contiguous", op, name);
    return MF_OK;
}

static mf_status check_dtype(const mf_tensor *t, mf_dtype want, const char *op, const char *name) {
    if (t->dtype != want)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s dtype %s (want %s)", op, name, mf_dtype_name(t->dtype),
                       mf_dtype_name(want));
    return MF_OK;
}

// A weight's dtype: x's, or f16/bf16 with f32 x on backends whose GEMM widens
// 16-bit weights (the CPU keeps a checkpoint's bf16 weights so).
static mf_status check_wdtype(const mf_backend *be, const mf_tensor *w, mf_dtype xdt, const char *op,
                              const char *name) {
    const bool mixed = be->mixed_weights && xdt == MF_DTYPE_F32 &&
                       (w->dtype == MF_DTYPE_F16 || w->dtype == MF_DTYPE_BF16);
    if (w->dtype != xdt && !mixed)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s dtype %s (want %s%s)", op, name, mf_dtype_name(w->dtype),
                       mf_dtype_name(xdt), be->mixed_weights && xdt == MF_DTYPE_F32 ? ", f16 or bf16" : "");
    return MF_OK;
}

static mf_status check_counts(const char *op, int64_t n_experts, int64_t top_k) {
    if (n_experts < 1 || n_experts > MOE_MAX_EXPERTS)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: n_experts %lld (want 1..%d)", op, (ll)n_experts, MOE_MAX_EXPERTS);
    if (top_k < 1 || top_k > MOE_MAX_TOPK)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: top_k %lld (want 1..%d)", op, (ll)top_k, MOE_MAX_TOPK);
    if (top_k > n_experts)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: top_k %lld > n_experts %lld", op, (ll)top_k, (ll)n_experts);
    return MF_OK;
}

static mf_status check_enums(const char *op, int score, int order, int ffn) {
    if (score != MF_MOE_SCORE_SOFTMAX && score != MF_MOE_SCORE_SIGMOID)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: invalid score function %d", op, score);
    if (order != MF_MOE_SCORE_THEN_TOPK && order != MF_MOE_TOPK_THEN_SCORE)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: invalid order %d", op, order);
    if (ffn != MF_MOE_FFN_SWIGLU && ffn != MF_MOE_FFN_GELU)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: invalid ffn kind %d", op, ffn);
    return MF_OK;
}

// ---- router ------------------------------------------------------------------------

static mf_status router_check(const mf_backend *be, const mf_moe_router_args *p) {
    static const char op[] = "moe_router";
    MF_TRY(check_shape(be, &p->logits, op, "logits", 2, (const int64_t[]){-1, -1}));
    MF_TRY(mf_check_float(&p->logits, op, "logits"));
    const int64_t T = p->logits.shape[0], E = p->logits.shape[1];
    MF_TRY(check_shape(be, &p->ids, op, "ids", 2, (const int64_t[]){T, -1}));
    const int64_t k = p->ids.shape[1];
    MF_TRY(check_counts(op, E, k));
    MF_TRY(check_i32(&p->ids, op, "ids"));
    MF_TRY(check_shape(be, &p->weights, op, "weights", 2, (const int64_t[]){T, k}));
    MF_TRY(check_dtype(&p->weights, MF_DTYPE_F32, op, "weights"));
    if (!mf_tensor_is_contiguous(&p->weights))
        return mf_fail(MF_ERR_UNSUPPORTED, "moe_router: weights must be contiguous");
    MF_TRY(check_enums(op, p->score, p->order, MF_MOE_FFN_SWIGLU));
    if (!isfinite(p->routed_scale))
        return mf_fail(MF_ERR_INVALID_ARG, "moe_router: routed_scale %g is not finite", (double)p->routed_scale);
    MF_TRY(mf_check_disjoint(&p->ids, &p->logits, op, "ids", "logits"));
    MF_TRY(mf_check_disjoint(&p->weights, &p->logits, op, "weights", "logits"));
    MF_TRY(mf_check_disjoint(&p->weights, &p->ids, op, "weights", "ids"));
    return MF_OK;
}

mf_status mf_moe_router(mf_backend *be, const mf_moe_router_args *p) {
    MF_TRY(mf_check_call(be, p, "moe_router"));
    MF_TRY(router_check(be, p));
    if (p->logits.shape[0] == 0) return MF_OK;
    return mf_dispatch_moe_router(be, p);
}

// ---- permutation ---------------------------------------------------------------------

static mf_status permute_check(const mf_backend *be, const mf_moe_permute_args *p) {
    static const char op[] = "moe_permute";
    MF_TRY(check_shape(be, &p->ids, op, "ids", 2, (const int64_t[]){-1, -1}));
    MF_TRY(check_i32(&p->ids, op, "ids"));
    const int64_t T = p->ids.shape[0], k = p->ids.shape[1], E = p->n_experts, N = T * k;
    MF_TRY(check_counts(op, E, k));
    if (N >= INT32_MAX)
        return mf_fail(MF_ERR_UNSUPPORTED, "moe_permute: %lld assignments do not fit i32 indices", (ll)N);
    MF_TRY(check_shape(be, &p->offsets, op, "offsets", 1, (const int64_t[]){E + 1}));
    MF_TRY(check_i32(&p->offsets, op, "offsets"));
    MF_TRY(check_shape(be, &p->sorted, op, "sorted", 1, (const int64_t[]){N}));
    MF_TRY(check_i32(&p->sorted, op, "sorted"));
    MF_TRY(check_shape(be, &p->inv, op, "inv", 1, (const int64_t[]){N}));
    MF_TRY(check_i32(&p->inv, op, "inv"));
    MF_TRY(mf_check_disjoint(&p->offsets, &p->ids, op, "offsets", "ids"));
    MF_TRY(mf_check_disjoint(&p->sorted, &p->ids, op, "sorted", "ids"));
    MF_TRY(mf_check_disjoint(&p->inv, &p->ids, op, "inv", "ids"));
    MF_TRY(mf_check_disjoint(&p->sorted, &p->offsets, op, "sorted", "offsets"));
    MF_TRY(mf_check_disjoint(&p->inv, &p->offsets, op, "inv", "offsets"));
    MF_TRY(mf_check_disjoint(&p->inv, &p->sorted, op, "inv", "sorted"));
    if (!p->x != !p->xs) return mf_fail(MF_ERR_INVALID_ARG, "moe_permute: x and xs must be given together");
    if (p->x) {
        MF_TRY(check_shape(be, p->x, op, "x", 2, (const int64_t[]){T, -1}));
        MF_TRY(mf_check_float(p->x, op, "x"));
        const int64_t H = p->x->shape[1];
        MF_TRY(check_shape(be, p->xs, op, "xs", 2, (const int64_t[]){N, H}));
        MF_TRY(check_dtype(p->xs, p->x->dtype, op, "xs"));
        MF_TRY(mf_check_no_self_overlap(p->xs, op, "xs"));
        MF_TRY(mf_check_disjoint(p->xs, p->x, op, "xs", "x"));
        const mf_tensor *idx[4] = {&p->ids, &p->offsets, &p->sorted, &p->inv};
        static const char *const nm[4] = {"ids", "offsets", "sorted", "inv"};
        for (int i = 0; i < 4; i++) MF_TRY(mf_check_disjoint(p->xs, idx[i], op, "xs", nm[i]));
    }
    return MF_OK;
}

mf_status mf_moe_permute(mf_backend *be, const mf_moe_permute_args *p) {
    MF_TRY(mf_check_call(be, p, "moe_permute"));
    MF_TRY(permute_check(be, p));
    return mf_dispatch_moe_permute(be, p);
}

// ---- experts -------------------------------------------------------------------------

// w1 / w2 of one expert (or of the shared expert) as the b operand of
// x . W^T: W is (rows, cols) in torch Linear layout, b is its (cols, rows) view.
static mf_tensor linear_b(const mf_tensor *w, int64_t e) {
    mf_tensor b = *w;
    const int nd = w->ndim;
    b.ndim = 2;
    b.data = (char *)w->data + (nd == 3 ? e * w->stride[0] : 0) * (int64_t)mf_dtype_size(w->dtype);
    b.shape[0] = w->shape[nd - 1], b.shape[1] = w->shape[nd - 2];
    b.stride[0] = w->stride[nd - 1], b.stride[1] = w->stride[nd - 2];
    b.shape[2] = b.shape[3] = 1, b.stride[2] = b.stride[3] = 0;
    return b;
}

// Rows [r0, r0 + n) of a 2-D view, and columns [c0, c0 + nc).
static mf_tensor rows_of(const mf_tensor *t, int64_t r0, int64_t n, int64_t c0, int64_t nc) {
    mf_tensor v = *t;
    v.data = (char *)t->data + (r0 * t->stride[0] + c0 * t->stride[1]) * (int64_t)mf_dtype_size(t->dtype);
    v.shape[0] = n, v.shape[1] = nc;
    return v;
}

// One FFN on n rows: h = x W1^T (GELU fused as the GEMM epilogue), the SwiGLU
// product over all rows of h at once by the caller, then y = h W2^T.
static mf_status ffn_first(mf_backend *be, const mf_tensor *x, const mf_tensor *w1, int64_t e, const mf_tensor *h,
                           mf_moe_ffn ffn) {
    mf_gemm_args g = {.a = *x, .b = linear_b(w1, e), .c = *h, .alpha = 1.0f,
                      .epilogue = ffn == MF_MOE_FFN_GELU ? MF_EPILOGUE_GELU : MF_EPILOGUE_NONE};
    return mf_gemm(be, &g);
}

static mf_status ffn_gate(mf_backend *be, const mf_tensor *h, int64_t I) {
    mf_tensor gate = rows_of(h, 0, h->shape[0], 0, I), up = rows_of(h, 0, h->shape[0], I, I);
    mf_act_args a = {.x = gate, .up = &up, .y = gate, .kind = MF_ACT_SILU};
    return mf_act(be, &a);
}

static mf_status ffn_second(mf_backend *be, const mf_tensor *h, int64_t I, const mf_tensor *w2, int64_t e,
                            const mf_tensor *y) {
    mf_gemm_args g = {.a = rows_of(h, 0, h->shape[0], 0, I), .b = linear_b(w2, e), .c = *y, .alpha = 1.0f};
    return mf_gemm(be, &g);
}

static mf_status experts_check(const mf_backend *be, const mf_moe_experts_args *p, int64_t *E_out, int64_t *I_out) {
    static const char op[] = "moe_experts";
    MF_TRY(check_shape(be, &p->x, op, "x", 2, (const int64_t[]){-1, -1}));
    MF_TRY(mf_check_float(&p->x, op, "x"));
    const int64_t N = p->x.shape[0], H = p->x.shape[1];
    MF_TRY(check_enums(op, MF_MOE_SCORE_SOFTMAX, MF_MOE_SCORE_THEN_TOPK, p->ffn));
    MF_TRY(check_shape(be, &p->w1, op, "w1", 3, (const int64_t[]){-1, -1, H}));
    const int64_t E = p->w1.shape[0], rows1 = p->w1.shape[1];
    if (E < 1 || E > MOE_MAX_EXPERTS)
        return mf_fail(MF_ERR_INVALID_ARG, "moe_experts: n_experts %lld (w1 dim 0; want 1..%d)", (ll)E, MOE_MAX_EXPERTS);
    const bool glu = p->ffn == MF_MOE_FFN_SWIGLU;
    if (rows1 < 1 || (glu && rows1 % 2))
        return mf_fail(MF_ERR_INVALID_ARG, "moe_experts: w1 rows %lld (want %s)", (ll)rows1,
                       glu ? "2 * I, gate | up" : "I >= 1");
    const int64_t I = glu ? rows1 / 2 : rows1;
    MF_TRY(check_wdtype(be, &p->w1, p->x.dtype, op, "w1"));
    MF_TRY(check_shape(be, &p->w2, op, "w2", 3, (const int64_t[]){E, H, I}));
    MF_TRY(check_wdtype(be, &p->w2, p->x.dtype, op, "w2"));
    MF_TRY(check_shape(be, &p->offsets, op, "offsets", 1, (const int64_t[]){E + 1}));
    MF_TRY(check_i32(&p->offsets, op, "offsets"));
    MF_TRY(check_shape(be, &p->h, op, "h", 2, (const int64_t[]){N, rows1}));
    MF_TRY(check_dtype(&p->h, p->x.dtype, op, "h"));
    MF_TRY(check_shape(be, &p->y, op, "y", 2, (const int64_t[]){N, H}));
    MF_TRY(check_dtype(&p->y, p->x.dtype, op, "y"));
    MF_TRY(mf_check_no_self_overlap(&p->h, op, "h"));
    MF_TRY(mf_check_no_self_overlap(&p->y, op, "y"));
    MF_TRY(mf_check_alias(&p->y, &p->x, op, "y", "x"));
    const mf_tensor *ro[4] = {&p->x, &p->w1, &p->w2, &p->offsets};
    static const char *const nm[4] = {"x", "w1", "w2", "offsets"};
    for (int i = 0; i < 4; i++) MF_TRY(mf_check_disjoint(&p->h, ro[i], op, "h", nm[i]));
    for (int i = 1; i < 4; i++) MF_TRY(mf_check_disjoint(&p->y, ro[i], op, "y", nm[i]));
    MF_TRY(mf_check_disjoint(&p->y, &p->h, op, "y", "h"));
    *E_out = E, *I_out = I;
    return MF_OK;
}

// The E + 1 offsets on the host (p->host_offsets, or read back into buf: one
// sync on CUDA), checked against the rows of x.
static mf_status host_offsets(mf_backend *be, const mf_moe_experts_args *p, int32_t *buf, const int32_t **out) {
    const int64_t E = p->offsets.shape[0] - 1;
    const int32_t *o = p->host_offsets;
    if (!o) { // one read-back sizes the per-expert GEMMs
        MF_TRY(mf_backend_copy(be, buf, p->offsets.data, (size_t)(E + 1) * sizeof(int32_t), MF_COPY_D2H));
        o = buf;
    }
    MF_TRY(mf_moe_offsets_check(o, E, p->x.shape[0]));
    *out = o;
    return MF_OK;
}

// The generic expert FFNs, for backends whose moe_experts entry declines (or
// has none): per non-empty expert mf_gemm (gate|up or fc1, GELU epilogue),
// one mf_act over all routed rows (SwiGLU), then mf_gemm (down) per expert.
static mf_status experts_loop(mf_backend *be, const mf_moe_experts_args *p) {
    int32_t off[MOE_MAX_EXPERTS + 1];
    const int32_t *o = NULL;
    MF_TRY(host_offsets(be, p, off, &o));
    const int64_t E = p->w1.shape[0], H = p->x.shape[1], rows1 = p->h.shape[1];
    const int64_t I = p->ffn == MF_MOE_FFN_SWIGLU ? rows1 / 2 : rows1;
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = o[e + 1] - o[e];
        if (n == 0) continue; // an expert without tokens costs nothing
        mf_tensor xr = rows_of(&p->x, o[e], n, 0, H), hr = rows_of(&p->h, o[e], n, 0, rows1);
        MF_TRY(ffn_first(be, &xr, &p->w1, e, &hr, p->ffn));
    }
    const int64_t used = o[E] - o[0];
    if (used == 0) return MF_OK;
    if (p->ffn == MF_MOE_FFN_SWIGLU) { // one launch over every routed row
        mf_tensor hr = rows_of(&p->h, o[0], used, 0, rows1);
        MF_TRY(ffn_gate(be, &hr, I));
    }
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = o[e + 1] - o[e];
        if (n == 0) continue;
        mf_tensor hr = rows_of(&p->h, o[e], n, 0, rows1), yr = rows_of(&p->y, o[e], n, 0, H);
        MF_TRY(ffn_second(be, &hr, I, &p->w2, e, &yr));
    }
    return MF_OK;
}

mf_status mf_moe_experts(mf_backend *be, const mf_moe_experts_args *p) {
    MF_TRY(mf_check_call(be, p, "moe_experts"));
    int64_t E = 0, I = 0;
    MF_TRY(experts_check(be, p, &E, &I));
    if (p->x.shape[0] == 0 || p->x.shape[1] == 0) return MF_OK;
    if (p->host_offsets) MF_TRY(mf_moe_offsets_check(p->host_offsets, E, p->x.shape[0]));
    const mf_status st = mf_dispatch_moe_experts(be, p); // MF_ERR_UNSUPPORTED: no entry, or it declines
    if (st != MF_ERR_UNSUPPORTED) return st;
    mf_clear_error();
    return experts_loop(be, p);
}

// ---- combine ---------------------------------------------------------------------------

static mf_status combine_check(const mf_backend *be, const mf_moe_combine_args *p) {
    static const char op[] = "moe_combine";
    MF_TRY(check_shape(be, &p->weights, op, "weights", 2, (const int64_t[]){-1, -1}));
    MF_TRY(check_dtype(&p->weights, MF_DTYPE_F32, op, "weights"));
    const int64_t T = p->weights.shape[0], k = p->weights.shape[1];
    if (k < 1 || k > MOE_MAX_TOPK)
        return mf_fail(MF_ERR_INVALID_ARG, "moe_combine: top_k %lld (weights dim 1; want 1..%d)", (ll)k, MOE_MAX_TOPK);
    if (!mf_tensor_is_contiguous(&p->weights))
        return mf_fail(MF_ERR_UNSUPPORTED, "moe_combine: weights must be contiguous");
    MF_TRY(check_shape(be, &p->inv, op, "inv", 1, (const int64_t[]){T * k}));
    MF_TRY(check_i32(&p->inv, op, "inv"));
    MF_TRY(check_shape(be, &p->ys, op, "ys", 2, (const int64_t[]){-1, -1}));
    MF_TRY(mf_check_float(&p->ys, op, "ys"));
    const int64_t H = p->ys.shape[1];
    MF_TRY(check_shape(be, &p->out, op, "out", 2, (const int64_t[]){T, H}));
    MF_TRY(mf_check_float(&p->out, op, "out"));
    MF_TRY(mf_check_no_self_overlap(&p->out, op, "out"));
    MF_TRY(mf_check_disjoint(&p->out, &p->ys, op, "out", "ys"));
    MF_TRY(mf_check_disjoint(&p->out, &p->inv, op, "out", "inv"));
    MF_TRY(mf_check_disjoint(&p->out, &p->weights, op, "out", "weights"));
    if (p->shared) {
        MF_TRY(check_shape(be, p->shared, op, "shared", 2, (const int64_t[]){T, H}));
        MF_TRY(mf_check_float(p->shared, op, "shared"));
        MF_TRY(mf_check_disjoint(&p->out, p->shared, op, "out", "shared"));
    }
    if (p->shared_gate) {
        if (!p->shared) return mf_fail(MF_ERR_INVALID_ARG, "moe_combine: shared_gate without shared");
        MF_TRY(check_shape(be, p->shared_gate, op, "shared_gate", 2, (const int64_t[]){T, 1}));
        MF_TRY(mf_check_float(p->shared_gate, op, "shared_gate"));
        MF_TRY(mf_check_disjoint(&p->out, p->shared_gate, op, "out", "shared_gate"));
    }
    if (p->residual) {
        MF_TRY(check_shape(be, p->residual, op, "residual", 2, (const int64_t[]){T, H}));
        MF_TRY(mf_check_float(p->residual, op, "residual"));
        MF_TRY(mf_check_alias(&p->out, p->residual, op, "out", "residual"));
    }
    return MF_OK;
}

mf_status mf_moe_combine(mf_backend *be, const mf_moe_combine_args *p) {
    MF_TRY(mf_check_call(be, p, "moe_combine"));
    MF_TRY(combine_check(be, p));
    if (p->out.shape[0] == 0 || p->out.shape[1] == 0) return MF_OK;
    return mf_dispatch_moe_combine(be, p);
}

// ---- the whole layer ---------------------------------------------------------------------

// The scratch of one call, carved from the workspace in this order (each
// piece 256-byte aligned). xs also holds the expert outputs (ys): the
// expert loop reads all of xs before it writes any ys row.
typedef struct {
    mf_tensor logits;  // (T, E) f32
    mf_tensor ids;     // (T, k) i32
    mf_tensor weights; // (T, k) f32
    mf_tensor offsets; // (E + 1) i32
    mf_tensor sorted;  // (N) i32
    mf_tensor inv;     // (N) i32
    mf_tensor xs;      // (N, H) x's dtype: gathered rows, then expert outputs
    mf_tensor h;       // (N, rows1) x's dtype
    mf_tensor sh;      // (T, shared rows1) x's dtype (shared expert)
    mf_tensor sy;      // (T, H) x's dtype (shared expert output)
    mf_tensor sg;      // (T, 1) f32 (shared gate logits)
} moe_scratch;

typedef struct {
    char *base;
    size_t used;
    mf_device dev;
} carver;

static mf_tensor carve(carver *c, mf_dtype dt, int32_t nd, int64_t d0, int64_t d1) {
    mf_tensor t;
    memset(&t, 0, sizeof t);
    c->used = (c->used + 255) & ~(size_t)255;
    t.data = c->base ? c->base + c->used : NULL;
    t.dtype = dt, t.device = c->dev, t.ndim = nd;
    t.shape[0] = d0, t.shape[1] = nd == 2 ? d1 : 1, t.shape[2] = t.shape[3] = 1;
    t.stride[0] = nd == 2 ? d1 : 1, t.stride[1] = nd == 2 ? 1 : 0;
    c->used += (size_t)(d0 * (nd == 2 ? d1 : 1)) * mf_dtype_size(dt);
    return t;
}

static size_t plan_scratch(const mf_moe_args *p, int64_t E, int64_t rows1, int64_t srows1, void *base, mf_device dev,
                           moe_scratch *s) {
    const int64_t T = p->x.shape[0], H = p->x.shape[1], k = p->top_k, N = T * k;
    const mf_dtype dt = p->x.dtype;
    carver c = {.base = base, .used = 0, .dev = dev};
    memset(s, 0, sizeof *s);
    s->logits = carve(&c, MF_DTYPE_F32, 2, T, E);
    s->ids = carve(&c, MF_DTYPE_I32, 2, T, k);
    s->weights = carve(&c, MF_DTYPE_F32, 2, T, k);
    s->offsets = carve(&c, MF_DTYPE_I32, 1, E + 1, 0);
    s->sorted = carve(&c, MF_DTYPE_I32, 1, N, 0);
    s->inv = carve(&c, MF_DTYPE_I32, 1, N, 0);
    s->xs = carve(&c, dt, 2, N, H);
    s->h = carve(&c, dt, 2, N, rows1);
    if (p->shared_w1) {
        s->sh = carve(&c, dt, 2, T, srows1);
        s->sy = carve(&c, dt, 2, T, H);
        if (p->shared_gate) s->sg = carve(&c, MF_DTYPE_F32, 2, T, 1);
    }
    return (c.used + 255) & ~(size_t)255;
}

// Validates the layer's arguments; E, the w1 rows and the shared w1 rows out.
static mf_status moe_check(const mf_backend *be, const mf_moe_args *p, int64_t *E_out, int64_t *rows1_out,
                           int64_t *srows1_out) {
    static const char op[] = "moe";
    MF_TRY(check_shape(be, &p->x, op, "x", 2, (const int64_t[]){-1, -1}));
    MF_TRY(mf_check_float(&p->x, op, "x"));
    const int64_t T = p->x.shape[0], H = p->x.shape[1];
    const mf_dtype dt = p->x.dtype;
    if (H < 1) return mf_fail(MF_ERR_INVALID_ARG, "moe: hidden size %lld (x dim 1)", (ll)H);
    MF_TRY(check_shape(be, &p->w_router, op, "w_router", 2, (const int64_t[]){-1, H}));
    const int64_t E = p->w_router.shape[0];
    MF_TRY(check_counts(op, E, p->top_k));
    MF_TRY(check_wdtype(be, &p->w_router, dt, op, "w_router"));
    MF_TRY(check_enums(op, p->score, p->order, p->ffn));
    if (!isfinite(p->routed_scale))
        return mf_fail(MF_ERR_INVALID_ARG, "moe: routed_scale %g is not finite", (double)p->routed_scale);
    const bool glu = p->ffn == MF_MOE_FFN_SWIGLU;
    MF_TRY(check_shape(be, &p->w1, op, "w1", 3, (const int64_t[]){E, -1, H}));
    MF_TRY(check_wdtype(be, &p->w1, dt, op, "w1"));
    const int64_t rows1 = p->w1.shape[1];
    if (rows1 < 1 || (glu && rows1 % 2))
        return mf_fail(MF_ERR_INVALID_ARG, "moe: w1 rows %lld (want %s)", (ll)rows1, glu ? "2 * I, gate | up" : "I >= 1");
    const int64_t I = glu ? rows1 / 2 : rows1;
    MF_TRY(check_shape(be, &p->w2, op, "w2", 3, (const int64_t[]){E, H, I}));
    MF_TRY(check_wdtype(be, &p->w2, dt, op, "w2"));
    int64_t srows1 = 0;
    if (!p->shared_w1 != !p->shared_w2)
        return mf_fail(MF_ERR_INVALID_ARG, "moe: shared_w1 and shared_w2 must be given together");
    if (p->shared_gate && !p->shared_w1) return mf_fail(MF_ERR_INVALID_ARG, "moe: shared_gate without a shared expert");
    if (p->shared_w1) {
        MF_TRY(check_shape(be, p->shared_w1, op, "shared_w1", 2, (const int64_t[]){-1, H}));
        MF_TRY(check_wdtype(be, p->shared_w1, dt, op, "shared_w1"));
        srows1 = p->shared_w1->shape[0];
        if (srows1 < 1 || (glu && srows1 % 2))
            return mf_fail(MF_ERR_INVALID_ARG, "moe: shared_w1 rows %lld (want %s)", (ll)srows1,
                           glu ? "2 * Is, gate | up" : "Is >= 1");
        MF_TRY(check_shape(be, p->shared_w2, op, "shared_w2", 2, (const int64_t[]){H, glu ? srows1 / 2 : srows1}));
        MF_TRY(check_wdtype(be, p->shared_w2, dt, op, "shared_w2"));
        if (p->shared_gate) {
            MF_TRY(check_shape(be, p->shared_gate, op, "shared_gate", 2, (const int64_t[]){1, H}));
            MF_TRY(check_wdtype(be, p->shared_gate, dt, op, "shared_gate"));
        }
    }
    MF_TRY(check_shape(be, &p->out, op, "out", 2, (const int64_t[]){T, H}));
    MF_TRY(mf_check_float(&p->out, op, "out"));
    MF_TRY(mf_check_no_self_overlap(&p->out, op, "out"));
    MF_TRY(mf_check_disjoint(&p->out, &p->x, op, "out", "x"));
    if (p->residual) {
        MF_TRY(check_shape(be, p->residual, op, "residual", 2, (const int64_t[]){T, H}));
        MF_TRY(mf_check_float(p->residual, op, "residual"));
        MF_TRY(mf_check_alias(&p->out, p->residual, op, "out", "residual"));
    }
    if (T * p->top_k >= INT32_MAX)
        return mf_fail(MF_ERR_UNSUPPORTED, "moe: %lld assignments do not fit i32 indices", (ll)(T * p->top_k));
    *E_out = E, *rows1_out = rows1, *srows1_out = srows1;
    return MF_OK;
}

mf_status mf_moe_workspace(mf_backend *be, const mf_moe_args *p, size_t *bytes) {
    MF_TRY(mf_check_call(be, p, "moe"));
    if (!bytes) return mf_fail(MF_ERR_INVALID_ARG, "moe: bytes is NULL");
    int64_t E = 0, rows1 = 0, srows1 = 0;
    MF_TRY(moe_check(be, p, &E, &rows1, &srows1));
    moe_scratch s;
    *bytes = plan_scratch(p, E, rows1, srows1, NULL, be->device, &s);
    return MF_OK;
}

bool mf_moe_capturable(mf_backend *be, const mf_moe_args *p) {
    if (mf_check_call(be, p, "moe") != MF_OK) return false;
    int64_t E = 0, rows1 = 0, srows1 = 0;
    if (moe_check(be, p, &E, &rows1, &srows1) != MF_OK) return false;
    if (!be->graph_begin || !be->moe_experts_capturable) return false;
    // The other parts (router GEMM and kernel, permutation, gather, shared
    // expert, combine) are stream-ordered launches whatever the shapes.
    moe_scratch s;
    plan_scratch(p, E, rows1, srows1, p->workspace ? p->workspace : (void *)(uintptr_t)256, be->device, &s);
    const mf_moe_experts_args ex = {.x = s.xs, .offsets = s.offsets, .w1 = p->w1, .w2 = p->w2, .h = s.h, .y = s.xs,
                                    .ffn = p->ffn};
    return be->moe_experts_capturable(be, &ex);
}

// The layer's parts in order on the carved scratch s (arguments checked).
static mf_status moe_run(mf_backend *be, const mf_moe_args *p, const moe_scratch *s, int64_t E, int64_t srows1) {
    // 1. Router logits in f32, then the fused top-k.
    mf_gemm_args g = {.a = p->x, .b = linear_b(&p->w_router, 0), .c = s->logits, .alpha = 1.0f};
    MF_TRY(mf_gemm(be, &g));
    mf_moe_router_args r = {.logits = s->logits, .ids = s->ids, .weights = s->weights, .score = p->score,
                            .order = p->order, .renorm = p->renorm, .routed_scale = p->routed_scale};
    MF_TRY(mf_moe_router(be, &r));
    // 2. Sort the assignments by expert and gather x into expert-contiguous rows.
    mf_moe_permute_args pm = {.ids = s->ids, .offsets = s->offsets, .sorted = s->sorted, .inv = s->inv,
                              .x = &p->x, .xs = &s->xs, .n_experts = (int32_t)E};
    MF_TRY(mf_moe_permute(be, &pm));
    // 3. The routed experts; their outputs overwrite the gathered rows.
    mf_moe_experts_args ex = {.x = s->xs, .offsets = s->offsets, .w1 = p->w1, .w2 = p->w2, .h = s->h, .y = s->xs,
                              .ffn = p->ffn};
    MF_TRY(mf_moe_experts(be, &ex));
    // 4. The shared expert on every token, and its gate logit.
    if (p->shared_w1) {
        MF_TRY(ffn_first(be, &p->x, p->shared_w1, 0, &s->sh, p->ffn));
        if (p->ffn == MF_MOE_FFN_SWIGLU) MF_TRY(ffn_gate(be, &s->sh, srows1 / 2));
        MF_TRY(ffn_second(be, &s->sh, p->ffn == MF_MOE_FFN_SWIGLU ? srows1 / 2 : srows1, p->shared_w2, 0, &s->sy));
        if (p->shared_gate) {
            mf_gemm_args gg = {.a = p->x, .b = linear_b(p->shared_gate, 0), .c = s->sg, .alpha = 1.0f};
            MF_TRY(mf_gemm(be, &gg));
        }
    }
    // 5. Weighted sum back in token order (+ shared, + residual).
    mf_moe_combine_args cb = {.ys = s->xs, .inv = s->inv, .weights = s->weights,
                              .shared = p->shared_w1 ? &s->sy : NULL, .shared_gate = p->shared_gate ? &s->sg : NULL,
                              .residual = p->residual, .out = p->out};
    return mf_moe_combine(be, &cb);
}

mf_status mf_moe(mf_backend *be, const mf_moe_args *p) {
    MF_TRY(mf_check_call(be, p, "moe"));
    int64_t E = 0, rows1 = 0, srows1 = 0;
    MF_TRY(moe_check(be, p, &E, &rows1, &srows1));
    moe_scratch s;
    const size_t need = plan_scratch(p, E, rows1, srows1, NULL, be->device, &s);
    if (!p->workspace || p->workspace_bytes < need)
        return mf_fail(MF_ERR_INVALID_ARG, "moe: workspace of %zu bytes (%s), need %zu (mf_moe_workspace)",
                       p->workspace_bytes, p->workspace ? "given" : "NULL", need);
    if (p->x.shape[0] == 0) return MF_OK;
    plan_scratch(p, E, rows1, srows1, p->workspace, be->device, &s);
    mf_tensor ws_view = {.data = p->workspace, .dtype = MF_DTYPE_I32, .device = be->device, .ndim = 1,
                         .shape = {(int64_t)(need / 4), 1, 1, 1}, .stride = {1, 0, 0, 0}};
    static const char op[] = "moe";
    MF_TRY(mf_check_disjoint(&ws_view, &p->x, op, "workspace", "x"));
    MF_TRY(mf_check_disjoint(&ws_view, &p->out, op, "workspace", "out"));
    if (p->residual) MF_TRY(mf_check_disjoint(&ws_view, p->residual, op, "workspace", "residual"));
    const mf_tensor *wts[6] = {&p->w_router, &p->w1, &p->w2, p->shared_w1, p->shared_w2, p->shared_gate};
    static const char *const wn[6] = {"w_router", "w1", "w2", "shared_w1", "shared_w2", "shared_gate"};
    for (int i = 0; i < 6; i++)
        if (wts[i]) MF_TRY(mf_check_disjoint(&ws_view, wts[i], op, "workspace", wn[i]));
    mf_op_begin(be, "moe"); // one op for the profiler: its parts are inside it
    const mf_status st = moe_run(be, p, &s, E, srows1);
    mf_op_end(be, "moe");
    return st;
}

