// The decoder spec's checks, parameter count and RoPE frequencies (spec.h).
#include <math.h>

#include "core/error.h"
#include "model/arch/spec.h"

mf_status mf_dec_spec_check(const mf_dec_spec *s, const char *who) {
    if (s->n_layers < 1 || s->hidden < 1 || s->n_heads < 1 || s->n_kv_heads < 1 || s->head_dim < 1 || s->ffn < 1 ||
        s->vocab < 1 || s->max_pos < 1)
        return mf_fail(MF_ERR_FORMAT,
                       "%s: sizes must be >= 1 (layers %d, hidden %d, heads %d, kv heads %d, head_dim %d, ffn %d, "
                       "vocab %d, max_pos %lld)",
                       who, s->n_layers, s->hidden, s->n_heads, s->n_kv_heads, s->head_dim, s->ffn, s->vocab,
                       (long long)s->max_pos);
    if (s->n_heads % s->n_kv_heads != 0)
        return mf_fail(MF_ERR_FORMAT, "%s: n_heads %d not divisible by n_kv_heads %d", who, s->n_heads, s->n_kv_heads);
    if (!s->learned_pos && s->head_dim % 2 != 0)
        return mf_fail(MF_ERR_FORMAT, "%s: head_dim %d must be even for rotary embeddings", who, s->head_dim);
    if (!(s->norm_eps >= 0.0f) || !isfinite(s->norm_eps))
        return mf_fail(MF_ERR_FORMAT, "%s: norm eps %g invalid", who, (double)s->norm_eps);
    if (!s->learned_pos && !(s->rope_theta > 0.0))
        return mf_fail(MF_ERR_FORMAT, "%s: rope_theta %g must be > 0", who, s->rope_theta);
    if (!s->post_norm && !s->final_norm)
        return mf_fail(MF_ERR_FORMAT, "%s: a pre-norm decoder needs a final norm", who);
    if (s->post_norm && s->gated_mlp)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: post-norm with a gated MLP is not a layout minfer knows", who);
    if (s->n_experts < 0 || s->n_experts > 256)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: %d experts (minfer runs 1..256)", who, s->n_experts);
    if (s->n_experts > 0) {
        if (s->top_k < 1 || s->top_k > 8 || s->top_k > s->n_experts)
            return mf_fail(MF_ERR_UNSUPPORTED, "%s: top-%d of %d experts (minfer runs 1..min(experts, 8))", who,
                           s->top_k, s->n_experts);
        if (s->mlp_bias)
            return mf_fail(MF_ERR_UNSUPPORTED, "%s: experts with MLP biases are not implemented", who);
        if (s->gated_mlp ? s->act != MF_ACT_SILU : s->act != MF_ACT_GELU_TANH)
            return mf_fail(MF_ERR_UNSUPPORTED,
                           "%s: experts run SwiGLU (gated, silu) or an ungated tanh GELU; this spec has a %s %s MLP",
                           who, s->gated_mlp ? "gated" : "ungated",
                           s->act == MF_ACT_SILU ? "silu" : s->act == MF_ACT_GELU_TANH ? "gelu_tanh" : "gelu");
        if (s->shared_ffn < 0)
            return mf_fail(MF_ERR_FORMAT, "%s: shared expert width %d must be >= 0", who, s->shared_ffn);
    }
    return MF_OK;
}

// One MLP of width f as the spec builds it (weights, + biases when mlp_bias).
static int64_t mlp_params(const mf_dec_spec *s, int64_t f) {
    const int64_t h = s->hidden;
    int64_t n = (s->gated_mlp ? 3 : 2) * h * f;
    if (s->mlp_bias) n += (s->gated_mlp ? 2 * f : f) + h;
    return n;
}

// experts: the routed experts counted (n_experts for the total, top_k for a token's).
static int64_t params(const mf_dec_spec *s, int64_t experts) {
    const int64_t h = s->hidden, q = (int64_t)s->n_heads * s->head_dim, kv = (int64_t)s->n_kv_heads * s->head_dim;
    const int64_t nb = s->layernorm ? 2 : 1; // norm: weight (+ bias)
    int64_t layer = h * (q + 2 * kv) + q * h + nb * h * 2;
    if (s->qkv_bias) layer += q + 2 * kv;
    if (s->o_bias) layer += h;
    if (s->n_experts > 0) { // router + experts + shared expert (+ its gate)
        layer += (int64_t)s->n_experts * h + experts * mlp_params(s, s->ffn);
        if (s->shared_ffn > 0) layer += mlp_params(s, s->shared_ffn) + (s->shared_gated ? h : 0);
    } else {
        layer += mlp_params(s, s->ffn);
    }
    int64_t n = (int64_t)s->vocab * h + layer * s->n_layers;
    if (s->learned_pos) n += s->max_pos * h;
    if (s->final_norm) n += nb * h;
    if (!s->tied) n += (int64_t)s->vocab * h;
    return n;
}

int64_t mf_dec_spec_params(const mf_dec_spec *s) { return params(s, s->n_experts); }
int64_t mf_dec_spec_active_params(const mf_dec_spec *s) { return params(s, s->n_experts > 0 ? s->top_k : 0); }

int64_t mf_dec_spec_matmul_params(const mf_dec_spec *s) {
    const int64_t h = s->hidden, q = (int64_t)s->n_heads * s->head_dim, kv = (int64_t)s->n_kv_heads * s->head_dim;
    const int64_t mlp = (s->gated_mlp ? 3 : 2) * h; // times the width
    int64_t layer = h * (q + 2 * kv) + q * h;
    if (s->n_experts > 0) {
        layer += (int64_t)s->n_experts * h + (int64_t)s->top_k * mlp * s->ffn;
        if (s->shared_ffn > 0) layer += mlp * s->shared_ffn + (s->shared_gated ? h : 0);
    } else {
        layer += mlp * s->ffn;
    }
    return layer * s->n_layers;
}

// HF's _compute_default_rope_parameters (+ linear / llama3 scaling), in f32
// as torch computes it, so that the angles match the reference bit for bit
// as far as possible. Not quite: theta^e is computed in double and rounded
// once with its reciprocal, where torch takes a float pow (whose rounding
// depends on torch's pow kernel) and then 1 / p: entries may differ by 1 ulp.
void mf_dec_spec_inv_freq(const mf_dec_spec *s, float *out) {
    const int32_t half = s->head_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        const float e = (float)(2 * i) / (float)s->head_dim;
        float f = (float)(1.0 / pow(s->rope_theta, (double)e));
        if (s->rope_scaling.type == MF_ROPE_SCALING_LINEAR) f = f / (float)s->rope_scaling.factor;
        if (s->rope_scaling.type == MF_ROPE_SCALING_LLAMA3) {
            const float factor = (float)s->rope_scaling.factor, lo = (float)s->rope_scaling.low_freq_factor, hi = (float)s->rope_scaling.high_freq_factor;
            const float old = (float)s->rope_scaling.original_max_pos;
            const float lo_wavelen = old / lo, hi_wavelen = old / hi;
            const float wavelen = (1.0f / f) * 6.2831853071795864f; // torch: 2*pi / t is t.reciprocal() * 2*pi
            float g = wavelen > lo_wavelen ? f / factor : f; // long wavelengths: scaled down
            if (!(wavelen < hi_wavelen) && !(wavelen > lo_wavelen)) { // between: smooth
                const float smooth = ((1.0f / wavelen) * old - lo) / (hi - lo); // torch: old / t is t.reciprocal() * old
                g = (1.0f - smooth) * g / factor + smooth * g;
            }
            f = g;
        }
        out[i] = f;
    }
}
