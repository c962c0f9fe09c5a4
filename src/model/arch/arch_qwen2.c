// The Qwen2 family (Qwen2ForCausalLM: Qwen2, Qwen2.5): the Llama block and
// weight names with biases on q, k and v (none on o), rope_theta often 1e6,
// embeddings tied in the small sizes. A sliding window, when a config turns
// it on for every layer, is Mistral's; on some layers only it is refused.
#include <string.h>

#include "core/error.h"
#include "model/arch/arch.h"

#define N MF_CFG_NAMES

// Qwen2Config: layer i slides when use_sliding_window and i >= max_window_layers,
// unless config.json lists layer_types ("full_attention" / "sliding_attention").
static mf_status qwen2_window(const mf_cfg *c, mf_model_config *m) {
    bool use = false;
    int64_t window = 0, max_window_layers = 28, sliding = 0;
    MF_TRY(mf_cfg_bool(c, "use_sliding_window", false, &use));
    if (use) MF_TRY(mf_cfg_int(c, N("sliding_window"), false, 4096, 1, MF_CFG_MAX32, &window));
    MF_TRY(mf_cfg_int(c, N("max_window_layers"), false, 28, 0, MF_CFG_MAX32, &max_window_layers));
    const char *w;
    const cJSON *types = mf_cfg_field(c, N("layer_types"), &w);
    if (types) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != m->n_layers)
            return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": layer_types is not a list of num_hidden_layers %lld strings",
                           c->fn, (long long)m->n_layers);
        const cJSON *t;
        cJSON_ArrayForEach(t, types) {
            if (!cJSON_IsString(t))
                return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": layer_types holds a non-string", c->fn);
            if (strcmp(t->valuestring, "sliding_attention") == 0) sliding++;
            else if (strcmp(t->valuestring, "full_attention") != 0)
                return mf_fail(MF_ERR_UNSUPPORTED, MF_CFG_FN ": layer_types entry '%.64s' unsupported", c->fn,
                               t->valuestring);
        }
    } else if (use) {
        sliding = max_window_layers >= m->n_layers ? 0 : m->n_layers - max_window_layers;
    }
    if (sliding == 0) {
        m->sliding_window = 0;
        return MF_OK;
    }
    if (sliding != m->n_layers)
        return mf_fail(MF_ERR_UNSUPPORTED,
                       MF_CFG_FN ": a sliding window on %lld of %lld layers (use_sliding_window, max_window_layers "
                                 "%lld, layer_types) is not supported: only on every layer or none",
                       c->fn, (long long)sliding, (long long)m->n_layers, (long long)max_window_layers);
    if (window < 1)
        return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": layer_types slide but use_sliding_window is false (no window)",
                       c->fn);
    m->sliding_window = window;
    return MF_OK;
}

static mf_status qwen2_parse(const mf_cfg *c, mf_model_config *m) {
    const mf_llama_defaults d = {.max_pos = 32768, .norm_eps = 1e-6, .rope_theta = 1e4, .bos = -1, .eos = -1};
    MF_TRY(mf_llama_parse_block(c, m, &d));
    m->qkv_bias = true; // Qwen2Attention: q/k/v with bias, o_proj without
    m->o_bias = false;
    return qwen2_window(c, m);
}

static const mf_arch_class classes[] = {{"Qwen2ForCausalLM", "qwen2", MF_ARCH_QWEN2}};

const mf_family mf_family_qwen2 = {
    .name = "qwen2",
    .about = "Qwen2, Qwen2.5 (the Llama block with q/k/v biases)",
    .classes = classes,
    .n_classes = 1,
    .parse_config = qwen2_parse,
    .weight_map = mf_llama_weight_map, // the same tensor names; the biases follow spec.qkv_bias
};
