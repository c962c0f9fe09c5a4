// Internal: the sampler's PRNG and a draw with a caller-held PRNG, so that the
// generation loop shares one sampler's scratch between the sequences of a
// batch while each sequence keeps its own random stream.
#ifndef MF_ENGINE_SAMPLER_H
#define MF_ENGINE_SAMPLER_H

#include <stdint.h>

#include "minfer/generate.h"
#include "minfer/ops.h" // MF_TOPK_MAX

// xoshiro256** (Blackman & Vigna), state filled from the seed by splitmix64.
typedef struct {
    uint64_t s[4];
} mf_rng;

void mf_rng_seed(mf_rng *r, uint64_t seed);
uint64_t mf_rng_next(mf_rng *r);
// Uniform in [0, 1) with 53 random bits.
double mf_rng_uniform(mf_rng *r);

// Switches the params (checked already) of a sampler whose scratch serves
// several requests, each with its own params and PRNG.
void mf_sampler_set_params(mf_sampler *s, const mf_sampler_params *p);

// mf_sampler_sample with `rng` instead of the sampler's own PRNG.
mf_status mf_sampler_sample_rng(mf_sampler *s, mf_rng *rng, const float *logits, const int32_t *context,
                                int64_t n_context, int32_t *out_id);

// ---- drawing from the device's candidates (mf_topk) ----
// How many candidates to ask mf_topk for, per row of `vocab` logits, so that
// mf_sampler_sample_candidates can be exact: top_k (2 .. MF_TOPK_MAX, at
// most vocab), or MF_TOPK_MAX for top-p or min-p without top-k. 0: these
// params need every logit (repetition penalty, temperature alone, top_k above
// the cap) or are greedy (the argmax path).
int32_t mf_sampler_candidates_k(const mf_sampler_params *p, int64_t vocab);
// The scale to give mf_topk: 1 / temperature, in f32 as the sampler takes it.
float mf_sampler_candidates_scale(const mf_sampler_params *p);
// One draw from a row's candidates: ids, vals (k) and stats (2) as mf_topk
// gives them with k and the scale above. The same token as
// mf_sampler_sample_rng on the row's logits with the same rng state, or
// MF_ERR_UNSUPPORTED (no message, rng untouched) when the candidates cannot
// decide it (top-p's set reaches past them, or the device's row sum leaves the
// cut in doubt): then sample from the logits. A NaN / +inf row or an all -inf
// row is refused with the host sampler's message.
mf_status mf_sampler_sample_candidates(mf_sampler *s, mf_rng *rng, const int32_t *ids, const float *vals, int32_t k,
                                       const float *stats, int32_t *out_id);

#endif // MF_ENGINE_SAMPLER_H
