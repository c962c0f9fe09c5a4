// CPU embedding lookup: ids are checked before anything is written. Rows
// are contiguous (checked in src/ops/embed.c): a copy of the table row when
// the dtypes match, else one vectorised widening and/or narrowing per row.
#include <string.h>

#include "core/error.h"
#include "cpu/cpu.h"

enum { kChunk = 256 }; // f16 <-> bf16 rows go through f32 in chunks of this many

mf_status mf_cpu_embed(mf_backend *be, const mf_embed_args *p) {
    (void)be;
    const int32_t *ids = p->ids.data;
    int64_t n = p->ids.shape[0], vocab = p->table.shape[0], dim = p->table.shape[1];
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= vocab)
            return mf_fail(MF_ERR_INVALID_ARG, "embed: ids[%lld]=%d out of range [0, %lld)", (long long)t, ids[t],
                           (long long)vocab);
    const mf_dtype td = p->table.dtype, yd = p->y.dtype;
    const size_t tes = mf_dtype_size(td), yes = mf_dtype_size(yd);
#pragma omp parallel for schedule(static) if (n * dim >= 32768)
    for (int64_t t = 0; t < n; t++) {
        const int64_t src = (int64_t)ids[t] * p->table.stride[0], dst = t * p->y.stride[0];
        if (td == yd) {
            memcpy((char *)p->y.data + dst * yes, (const char *)p->table.data + src * tes, (size_t)dim * yes);
        } else if (yd == MF_DTYPE_F32) {
            mf_cpu_to_f32((float *)p->y.data + dst, p->table.data, td, src, dim);
        } else if (td == MF_DTYPE_F32) {
            mf_cpu_from_f32(p->y.data, yd, dst, (const float *)p->table.data + src, dim);
        } else {
            float buf[kChunk];
            for (int64_t i = 0; i < dim; i += kChunk) {
                const int64_t c = dim - i < kChunk ? dim - i : kChunk;
                mf_cpu_to_f32(buf, p->table.data, td, src + i, c);
                mf_cpu_from_f32(p->y.data, yd, dst + i, buf, c);
            }
        }
    }
    return MF_OK;
}
