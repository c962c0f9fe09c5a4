// Internal: architecture families, one file each.
//
// A family (arch_<family>.c) is everything minfer knows about one kind of
// Hugging Face checkpoint: the classes it covers ("architectures"[0] and
// model_type), how their config.json reads (names, class defaults, details it
// refuses), config -> mf_dec_spec, the tensor names in the checkpoint, and
// the synthetic presets shaped like it. Nothing outside the family file
// compares architecture names: the loader, the weight planner and the forward
// pass read the family's hooks and the spec's flags.
//
// Adding a family: a new arch_<family>.c defining one mf_family, one line in
// mf_families[] (arch.c), its class's id in config.h's mf_arch, a fixture
// and its test. A family whose decoder is not written yet (weight_map NULL)
// still parses its config; loading it is refused with the reason.
#ifndef MF_MODEL_ARCH_H
#define MF_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

#include "model/arch/config.h"
#include "model/arch/spec.h"
#include "model/arch/wplan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *hf_class;   // "architectures"[0] as HF writes it: "MistralForCausalLM"
    const char *model_type; // config.json model_type: "mistral" (also the spec's arch name)
    mf_arch arch;           // config.h's id
} mf_arch_class;

typedef struct {
    const char *name;                // "tiny", "small", ... (mf_model_synthetic's preset)
    void (*make)(mf_dec_spec *s);    // fills a zeroed spec
} mf_arch_preset;

typedef struct mf_family {
    const char *name;                // "gpt2", "llama", "qwen2", ...
    const char *about;               // one line for `minfer info`: what the family covers
    const mf_arch_class *classes;    // (n_classes)
    int n_classes;
    // config.json -> c: this family's field names, defaults and refusals
    // (c->arch and c->arch_name are set; sizes are checked by config.c after).
    mf_status (*parse_config)(const mf_cfg *r, mf_model_config *c);
    // Adjusts s, already filled from c by mf_spec_from_config's shared part,
    // or refuses what the decoder cannot run (naming the field). NULL: nothing to add.
    mf_status (*to_spec)(const mf_model_config *c, const char *path, mf_dec_spec *s);
    // The checkpoint tensors behind every view of w for spec s (weights.h's
    // planner). NULL: the decoder cannot run this family yet (`missing` says why).
    void (*weight_map)(const mf_dec_spec *s, mf_weights *w, mf_wplan *p);
    const char *missing;             // weight_map NULL: what is not implemented
    const mf_arch_preset *presets;   // synthetic presets (n_presets; may be 0)
    int n_presets;
} mf_family;

// The registry (arch.c), in the order messages list them.
extern const mf_family *const mf_families[];
extern const int mf_n_families;

// The class named hf_class (or, when NULL, with model_type), and its family
// in *fam; NULL when no family knows it.
const mf_arch_class *mf_arch_class_find(const char *hf_class, const char *model_type, const mf_family **fam);
// The class and family of a config.h id (NULL when unknown).
const mf_arch_class *mf_arch_class_of(mf_arch a);
const mf_family *mf_family_of(mf_arch a);
// "GPT2LMHeadModel, LlamaForCausalLM, ..." (model_types when by_type) into
// buf; runnable_only: only families whose decoder exists. Returns buf.
const char *mf_arch_list(char *buf, size_t n, bool by_type, bool runnable_only);
// A synthetic preset by name (and its family); NULL when none. mf_preset_list
// writes "small, medium, ..." into buf.
const mf_arch_preset *mf_preset_find(const char *name, const mf_family **fam);
const char *mf_preset_list(char *buf, size_t n);

// Parses config.json text (len bytes, need not be NUL-terminated); `name`
// stands for the file in messages. *out is written only on success.
mf_status mf_model_config_parse(const char *json, size_t len, const char *name, mf_model_config *out);
// Reads and parses a config.json; path may be the file or its directory.
mf_status mf_model_config_load(const char *path, mf_model_config *out);

// The model_type of a class: "gpt2", "llama", "mistral", "qwen2", "mixtral", "qwen2_moe".
const char *mf_arch_name(mf_arch a);
// One line: "llama: 32 layers, hidden 4096, heads 32 (kv 8, head_dim 128), ffn 14336, ..."
// into buf (truncated to n); returns buf.
const char *mf_model_config_describe(const mf_model_config *c, char *buf, size_t n);

// config -> spec: the shared part (sizes, norms, RoPE, tokens, the class's
// model_type as s->arch), then the family's to_spec, then mf_dec_spec_check.
// A family without a decoder is refused here, naming what is missing.
mf_status mf_spec_from_config(const mf_model_config *c, const char *path, mf_dec_spec *s, const mf_family **fam);

// The Llama layout's config reading and weight names, shared by the families
// built on it (Mistral, Qwen2, Mixtral, Qwen2-MoE). def_*: the class's
// defaults; ffn_key: "intermediate_size" (or Qwen2-MoE's "moe_intermediate_size").
typedef struct {
    int64_t max_pos;
    double norm_eps, rope_theta;
    int32_t bos, eos;       // -1: none
    const char *ffn_key;
} mf_llama_defaults;
mf_status mf_llama_parse_block(const mf_cfg *r, mf_model_config *c, const mf_llama_defaults *d);
void mf_llama_weight_map(const mf_dec_spec *s, mf_weights *w, mf_wplan *p);
// The Llama map with layer l's MLP planned by `moe` (NULL: the dense MLP).
typedef void (*mf_moe_map)(const mf_dec_spec *s, mf_layer_weights *L, mf_wplan *p, int32_t l);
void mf_llama_map(const mf_dec_spec *s, mf_weights *w, mf_wplan *p, mf_moe_map moe);
// Layer l's router "model.layers.L.<router>.weight" (E, hidden) and experts
// "model.layers.L.<experts>.E.<names[i]>.weight": names[0] | names[1] (gate,
// up; gate only when ungated) packed into experts_w1, names[2] (down) into
// experts_w2.
void mf_moe_map_experts(const mf_dec_spec *s, mf_layer_weights *L, mf_wplan *p, int32_t l, const char *router,
                        const char *experts, const char *const *names);

extern const mf_family mf_family_gpt2, mf_family_llama, mf_family_qwen2, mf_family_mixtral, mf_family_qwen2_moe;

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_ARCH_H
