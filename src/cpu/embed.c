// CPU embedding lookup: ids are checked before anything is written.
#include "core/error.h"
#include "cpu/cpu.h"

mf_status mf_cpu_embed(mf_backend *be, const mf_embed_args *p) {
    (void)be;
    const int32_t *ids = p->ids.data;
    int64_t n = p->ids.shape[0], vocab = p->table.shape[0], dim = p->table.shape[1];
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= vocab)
            return mf_fail(MF_ERR_INVALID_ARG, "embed: ids[%lld]=%d out of range [0, %lld)", (long long)t, ids[t],
                           (long long)vocab);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; t++) {
        int64_t src = (int64_t)ids[t] * p->table.stride[0], dst = t * p->y.stride[0];
        for (int64_t i = 0; i < dim; i++)
            mf_store_f32(p->y.data, p->y.dtype, dst + i, mf_load_f32(p->table.data, p->table.dtype, src + i));
    }
    return MF_OK;
}
