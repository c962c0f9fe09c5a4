// CPU strided copy / cast (mf_copy) over the collapsed geometry of
// src/kernels/copy_geom.h: one row of the innermost dim per OpenMP iteration.
// Same dtype (i32 included): the bytes move unchanged (memcpy of whole rows
// when both sides are contiguous along them; NaN payloads and -0 survive).
// Otherwise f32/f16/bf16 go through f32: widening is exact, so a narrowing
// cast rounds once, to nearest even.
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/copy_geom.h"

mf_status mf_cpu_copy_tensor(mf_backend *be, const mf_copy_args *p) {
    (void)be;
    mf_copy_geom g;
    mf_copy_geom_of(p, &g);
    const int last = g.ndim - 1;
    const int64_t inner = g.shape[last], rows = g.numel / inner;
    const int64_t s_step = g.ss[last], d_step = g.ds[last]; // strides along the rows
    const mf_dtype st = p->src.dtype, dt = p->dst.dtype;
    const int64_t es = (int64_t)mf_dtype_size(st);
    const bool same = st == dt, contig = mf_copy_rows_contiguous(&g);
    const char *s = (const char *)p->src.data;
    char *d = (char *)p->dst.data;
    if (same && contig && rows == 1) { // one contiguous block
        memcpy(d, s, (size_t)(inner * es));
        return MF_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t so = 0, doff = 0, rem = r;
        for (int k = last - 1; k >= 0; k--) {
            const int64_t i = rem % g.shape[k];
            rem /= g.shape[k];
            so += i * g.ss[k];
            doff += i * g.ds[k];
        }
        if (same && contig) {
            memcpy(d + doff * es, s + so * es, (size_t)(inner * es));
        } else if (same) {
            for (int64_t j = 0; j < inner; j++) memcpy(d + (doff + j * d_step) * es, s + (so + j * s_step) * es, (size_t)es);
        } else if (s_step == 1 && d_step == 1) { // a cast of contiguous rows, through f32 in L1-sized blocks
            float buf[256];
            for (int64_t j0 = 0; j0 < inner; j0 += 256) {
                const int64_t n = inner - j0 < 256 ? inner - j0 : 256;
                mf_cpu_to_f32(buf, s, st, so + j0, n);
                mf_cpu_from_f32(d, dt, doff + j0, buf, n);
            }
        } else {
            for (int64_t j = 0; j < inner; j++) mf_store_f32(d, dt, doff + j * d_step, mf_load_f32(s, st, so + j * s_step));
        }
    }
    return MF_OK;
}
