// Synthetic models: a preset spec (each family's file lists its presets,
// arch.h) and seeded random weights, so that benchmarks and tests need no
// download.
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/load/model.h"

mf_status mf_model_synthetic(const char *preset, uint64_t seed, mf_backend *be, const mf_model_opts *opts,
                             mf_model **out) {
    static const char fn[] = "model_synthetic";
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    char presets[256];
    if (!preset)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: preset is NULL (want one of: %s)", fn,
                       mf_preset_list(presets, sizeof presets));
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "%s: backend is NULL", fn);
    const mf_family *fam = NULL;
    const mf_arch_preset *pre = mf_preset_find(preset, &fam);
    if (!pre)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: unknown preset '%s' (want one of: %s)", fn, preset,
                       mf_preset_list(presets, sizeof presets));
    mf_dec_spec spec;
    memset(&spec, 0, sizeof spec);
    pre->make(&spec);
    MF_TRY(mf_dec_spec_check(&spec, fn));
    mf_model *m = NULL;
    MF_TRY(mf_model_alloc(be, opts, fn, &m));
    m->spec = spec;
    m->fam = fam;
    snprintf(m->source, sizeof m->source, "synthetic:%s", preset);
    const mf_weights_target t = mf_model_wtarget(m, opts && opts->verbose);
    mf_status s = mf_weights_random(&m->w, &t, seed);
    if (s != MF_OK) {
        mf_model_free(m);
        return s;
    }
    m->n_params = mf_dec_spec_params(&m->spec);
    *out = m;
    return MF_OK;
}
