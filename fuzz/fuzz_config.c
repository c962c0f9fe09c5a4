// libFuzzer target: config.json text through mf_model_config_parse. Every
// accepted config must satisfy the invariants the model code relies on.
#include <stdint.h>
#include <stdlib.h>

#include "model/arch/arch.h"

#define REQUIRE(c) \
    do {           \
        if (!(c)) abort(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mf_model_config c;
    if (mf_model_config_parse((const char *)data, size, "fuzz/config.json", &c) != MF_OK) return 0;
    REQUIRE(c.vocab_size >= 1 && c.vocab_size <= INT32_MAX);
    REQUIRE(c.hidden >= 1 && c.n_layers >= 1 && c.ffn >= 1 && c.max_pos >= 1);
    REQUIRE(c.n_heads >= 1 && c.n_kv_heads >= 1 && c.n_heads % c.n_kv_heads == 0);
    REQUIRE(c.head_dim >= 1 && (c.n_heads + 2 * c.n_kv_heads) * c.head_dim <= INT32_MAX);
    REQUIRE(c.learned_pos || (c.head_dim % 2 == 0 && c.rope_theta > 0));
    REQUIRE(c.norm_eps > 0 && c.n_params > 0);
    REQUIRE(c.n_eos >= 0 && c.n_eos <= MF_MAX_EOS && c.bos_id >= -1);
    REQUIRE(c.n_experts == 0 || (c.n_experts_per_tok >= 1 && c.n_experts_per_tok <= c.n_experts));
    if (c.rope_scaling.type == MF_ROPE_SCALING_LLAMA3)
        REQUIRE(c.rope_scaling.factor > 0 && c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor &&
                c.rope_scaling.original_max_pos >= 1);
    char buf[512];
    (void)mf_model_config_describe(&c, buf, sizeof buf);
    return 0;
}
