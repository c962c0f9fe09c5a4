// Internal: reading config.json fields, for config.c and the family files
// (arch_<family>.c) that know their architecture's names and defaults.
//
// Every reader takes HF's names (the first present, non-null one wins),
// a default for absent or null keys (or an error naming the field when
// required), range-checks the value, and writes *out only on success.
#ifndef MF_MODEL_CONFIG_READ_H
#define MF_MODEL_CONFIG_READ_H

#include <stdbool.h>
#include <stdint.h>

#include <cJSON.h>

#include "model/arch/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const cJSON *obj;   // the object fields are read from
    const char *fn;     // file name for messages
    const char *prefix; // "" or "rope_scaling." for messages
} mf_cfg;

// A NULL-terminated list of alternative names: MF_CFG_NAMES("n_embd", "hidden_size").
#define MF_CFG_NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define MF_CFG_FN "%.200s"                 // how messages print the file name
#define MF_CFG_MAX32 ((int64_t)INT32_MAX)  // the upper bound of every size

// The first of names present with a non-null value (NULL when none); *which
// is set to its name, or to names[0].
const cJSON *mf_cfg_field(const mf_cfg *c, const char *const *names, const char **which);
// An integer in [lo, hi]; def when absent or null (or an error when required).
mf_status mf_cfg_int(const mf_cfg *c, const char *const *names, bool required, int64_t def, int64_t lo, int64_t hi,
                     int64_t *out);
// A finite number; *which: the name it came from.
mf_status mf_cfg_num(const mf_cfg *c, const char *const *names, bool required, double def, double *out,
                     const char **which);
// A number > 0 (epsilons, theta, scaling factors).
mf_status mf_cfg_pos(const mf_cfg *c, const char *const *names, bool required, double def, double *out);
mf_status mf_cfg_bool(const mf_cfg *c, const char *name, bool def, bool *out);
// A string; def when absent or null. *out points into the JSON.
mf_status mf_cfg_str(const mf_cfg *c, const char *const *names, const char *def, const char **out);
// An activation name (gelu_new, gelu_pytorch_tanh, gelu_fast, gelu, silu, swish, relu).
mf_status mf_cfg_act(const mf_cfg *c, const char *const *names, const char *def, mf_hidden_act *out);
// rope_theta (already read into *theta, overridden by rope_parameters) and
// rope_scaling / rope_parameters (none, linear, llama3).
mf_status mf_cfg_rope(const mf_cfg *c, double *theta, mf_rope_scaling *rs);
// bos_token_id / eos_token_id with the class defaults (-1: none).
mf_status mf_cfg_token_ids(const mf_cfg *c, mf_model_config *m, int32_t def_bos, int32_t def_eos);
// MF_ERR_UNSUPPORTED naming `name` when the field is present and not equal
// to `ok` (a number): a detail the decoder does not implement.
mf_status mf_cfg_refuse_num(const mf_cfg *c, const char *name, double ok, const char *why);

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_CONFIG_READ_H
