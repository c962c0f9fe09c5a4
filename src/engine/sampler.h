// Internal: the sampler's PRNG and a draw with a caller-held PRNG, so that the
// generation loop shares one sampler's scratch between the sequences of a
// batch while each sequence keeps its own random stream.
#ifndef MF_ENGINE_SAMPLER_H
#define MF_ENGINE_SAMPLER_H

#include <stdint.h>

#include "minfer/generate.h"

// xoshiro256** (Blackman & Vigna), state filled from the seed by splitmix64.
typedef struct {
    uint64_t s[4];
} mf_rng;

void mf_rng_seed(mf_rng *r, uint64_t seed);
uint64_t mf_rng_next(mf_rng *r);
// Uniform in [0, 1) with 53 random bits.
double mf_rng_uniform(mf_rng *r);

// mf_sampler_sample with `rng` instead of the sampler's own PRNG.
mf_status mf_sampler_sample_rng(mf_sampler *s, mf_rng *rng, const float *logits, const int32_t *context,
                                int64_t n_context, int32_t *out_id);

#endif // MF_ENGINE_SAMPLER_H
