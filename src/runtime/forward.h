// Internal: one step of a forward call through the decoder's layers (forward.c).
#ifndef MF_RUNTIME_FORWARD_H
#define MF_RUNTIME_FORWARD_H

#include "runtime/session.h"

#ifdef __cplusplus
extern "C" {
#endif

// Rows [0, T) of the step (its index arrays uploaded already, segments
// s->host.segs[0 .. n_segs)) through every layer; *out: the final hidden
// rows (T, hidden), what the LM head reads.
mf_status mf_forward_step(mf_session *s, int32_t n_segs, int64_t T, mf_tensor *out);

#ifdef __cplusplus
}
#endif
#endif // MF_RUNTIME_FORWARD_H
