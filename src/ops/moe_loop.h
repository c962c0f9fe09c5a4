// Internal: the generic expert loop of mf_moe_experts (src/ops/moe.c), for a
// backend's moe_experts entry that falls back to it; the small-batch decode
// path's size limit, and what tests and the session ask about the path taken.
#ifndef MF_OPS_MOE_LOOP_H
#define MF_OPS_MOE_LOOP_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// The CUDA expert FFNs take the device-routed decode path (src/cuda/moe.cu:
// no host read-back, graph-capturable) for at most this many routed rows
// (assignments T * top_k), when the shapes allow 16-byte loads; the
// per-expert cuBLASLt loop above it. 32 = the decode batch 16 x top-2
// (derivation: docs/notes/moe.md, "Small-batch decode path").
#define MF_MOE_DECODE_MAX_ROWS 32

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

#ifdef MF_HAVE_CUDA
// How the CUDA backend's last mf_moe_experts (or mf_moe) ran its expert FFNs:
// "decode" (the device-routed kernels), "loop" (per-expert cuBLASLt, offsets
// read back), "wgmma" (our sm_90a grouped GEMMs, MINFER_MOE_GEMM=wgmma),
// "grouped" (MINFER_MOE_GEMM=grouped); "" before the first call.
const char *mf_cuda_moe_last_path(mf_backend *be);

// Whether the sm_90a grouped GEMMs run on this backend's device (this build
// has sm_90a code and the device is compute capability 9.0); *cc (if not
// NULL) gets the compute capability as 10 major + minor. For tests and benchmarks.
int mf_cuda_moe_sm90(mf_backend *be, int *cc);
#endif

#ifdef __cplusplus
}
#endif
#endif // MF_OPS_MOE_LOOP_H
