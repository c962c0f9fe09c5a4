// Internal: the generic expert loop of mf_moe_experts (src/ops/moe.c), for a
// backend's moe_experts entry that falls back to it, and whether mf_moe can be
// recorded into a graph (the session and tests ask).
#ifndef MF_OPS_MOE_LOOP_H
#define MF_OPS_MOE_LOOP_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// Per non-empty expert: mf_gemm (gate|up or fc1, GELU epilogue), one mf_act
// over all routed rows (SwiGLU), mf_gemm (down). Arguments already validated.
mf_status mf_moe_experts_loop(mf_backend *be, const mf_moe_experts_args *args);

// The E + 1 offsets on the host (args->host_offsets, or read back into buf:
// one sync on CUDA), checked against the rows of x.
mf_status mf_moe_host_offsets(mf_backend *be, const mf_moe_experts_args *args, int32_t *buf, const int32_t **out);

// Whether mf_moe(args) on be queues only stream-ordered device work (no host
// read-back, no sync), so that a CUDA Graph can record it: true when the
// backend's expert FFNs take a capturable path for these shapes. The
// workspace may be NULL: its pieces are then placed as at any 256-byte
// aligned address (backend allocations are). False for invalid arguments
// (mf_last_error says why) and on backends without graphs.
bool mf_moe_capturable(mf_backend *be, const mf_moe_args *args);

#ifdef __cplusplus
}
#endif
#endif // MF_OPS_MOE_LOOP_H
