// Internal: the check of mf_moe_experts' E + 1 expert row offsets once they
// are on the host (given as host_offsets, or read back), shared by
// src/ops/moe.c and the CUDA backend's grouped path (src/cuda/moe/).
#ifndef MF_KERNELS_MOE_OFFSETS_H
#define MF_KERNELS_MOE_OFFSETS_H

#include <stdint.h>

#include "core/error.h"

// o[0 .. E] non-decreasing within the N rows of x.
static inline mf_status mf_moe_offsets_check(const int32_t *o, int64_t E, int64_t N) {
    if (o[0] < 0 || o[E] > N)
        return mf_fail(MF_ERR_INVALID_ARG, "moe_experts: offsets [%d, %d] outside the %lld rows of x", o[0], o[E],
                       (long long)N);
    for (int64_t e = 0; e < E; e++)
        if (o[e + 1] < o[e])
            return mf_fail(MF_ERR_INVALID_ARG, "moe_experts: offsets decrease at expert %lld (%d > %d)", (long long)e,
                           o[e], o[e + 1]);
    return MF_OK;
}

#endif // MF_KERNELS_MOE_OFFSETS_H
