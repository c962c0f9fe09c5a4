// Writes a synthetic preset's weights (CPU, f32) as one safetensors file,
// under the checkpoint names minfer's loader reads, so that a reference
// outside minfer (tests/fixtures/torch_moe_postnorm.py) runs the very same
// weights:
//
//   synthetic_weights PRESET SEED OUT.safetensors
//
// A test tool, not installed; the metadata records the preset, seed and
// version. tests/test_torch_ref.c checks that loading the file back gives the
// same logits.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "minfer/minfer.h"
#include "model/load/model.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: synthetic_weights PRESET SEED OUT.safetensors\n");
        return 2;
    }
    char *end = NULL;
    errno = 0;
    const unsigned long long seed = strtoull(argv[2], &end, 10);
    if (errno || !end || *end || argv[2][0] == '-' || !argv[2][0]) {
        fprintf(stderr, "synthetic_weights: SEED '%s' is not a non-negative integer\n", argv[2]);
        return 2;
    }
    mf_backend *cpu = NULL;
    mf_model *m = NULL;
    mf_status s = mf_backend_init("cpu", &cpu);
    const mf_model_opts mo = {.dtype = MF_DTYPE_F32};
    if (s == MF_OK) s = mf_model_synthetic(argv[1], (uint64_t)seed, cpu, &mo, &m);
    if (s == MF_OK) {
        const mf_weights_target t = mf_model_wtarget(m, false);
        const char *meta[] = {"format",      "pt",    "minfer_preset",  argv[1],
                              "minfer_seed", argv[2], "minfer_version", mf_version()};
        s = mf_weights_save(&m->w, &t, argv[3], meta, 4);
    }
    if (s != MF_OK) fprintf(stderr, "synthetic_weights: %s\n", mf_last_error());
    mf_model_free(m);
    mf_backend_free(cpu);
    return s == MF_OK ? 0 : 1;
}
