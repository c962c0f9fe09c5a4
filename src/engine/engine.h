// Internal: generation over any runner (src/runtime/runner.h), so that tests
// drive mf_generate's semantics with scripted fakes.
#ifndef MF_ENGINE_ENGINE_H
#define MF_ENGINE_ENGINE_H

#include "runtime/runner.h"
#include "minfer/generate.h"

// mf_generate over runner r: sequences of up to max_seq tokens, up to
// r->max_seqs prompts; the runner's pool must hold them all at once.
mf_status mf_generate_runner(const mf_runner *r, int64_t max_seq, const mf_prompts *prompts,
                             const mf_generate_params *p, mf_generate_result *out);

#endif // MF_ENGINE_ENGINE_H
