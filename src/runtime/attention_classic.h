// Internal: the classic attention of one layer over the KV cache
// (attention_classic.c): per segment, QK^T (batched GEMM) -> mf_softmax
// (scale, causal) -> P.V. The "before" of mf_attention, and its reference.
#ifndef MF_RUNTIME_ATTENTION_CLASSIC_H
#define MF_RUNTIME_ATTENTION_CLASSIC_H

#include "runtime/session.h"

#ifdef __cplusplus
extern "C" {
#endif

// Layer `layer` for the step's n_segs segments: queries from the q part of
// s->dev.qkv (rotated already), keys and values from the cache (each
// segment's tokens [0, pos0 + n), the new ones written already), output into
// s->dev.ctx's rows.
mf_status mf_attention_classic(mf_session *s, int32_t layer, int32_t n_segs);

#ifdef __cplusplus
}
#endif
#endif // MF_RUNTIME_ATTENTION_CLASSIC_H
