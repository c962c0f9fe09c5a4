// Internal: whether mf_moe can be recorded into a graph (the session and
// tests ask). The rest of the MoE ops is public (minfer/ops.h).
#ifndef MF_OPS_MOE_H
#define MF_OPS_MOE_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

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
#endif // MF_OPS_MOE_H
