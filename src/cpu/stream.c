// The CPU's read ceiling: a read stream over a buffer on the OpenMP threads
// the ops run on (the decode step's threads), for `minfer bench model`'s and
// `bench gemv`'s roofline. A decode step streams its weights once and
// writes almost nothing, so the bound on it is the read bandwidth, not a
// copy's (read + write; on the dev VM memcpy counted that way gave
// 8.5-14.3 GB/s where two threads read 21.7: docs/notes/cpu.md).
#include <omp.h>

#include "cpu/stream.h"
#include "cpu/v8.h"

// Sum of the 32-byte blocks of [p, p + n) as 8 lanes, in `streams` parts
// read side by side (several pages in flight, as the decode kernels' tiles
// of weight rows are), each prefetched `ahead` bytes ahead (0: none).
MF_CPU_HOT static float read_part(const char *p, size_t n, int streams, size_t ahead) {
    const size_t per = n / (size_t)streams / 64 * 64;
    v8f s0 = {0}, s1 = {0};
    for (size_t i = 0; i < per; i += 64)
        for (int q = 0; q < streams; q++) {
            const char *b = p + (size_t)q * per + i;
            if (ahead) __builtin_prefetch(b + ahead);
            v8f x, y;
            memcpy(&x, b, 32);
            memcpy(&y, b + 32, 32);
            s0 += x, s1 += y;
        }
    s0 += s1;
    return v8_hsum(&s0);
}

float mf_cpu_read_stream(const void *p, size_t bytes, int variant) {
    // (streams, prefetch distance): in order; 4 streams 512 B ahead; in
    // order 16 KB ahead; 4 streams 1 KB ahead (the decode GEMV's pattern
    // since 2026-11-28, which read faster than the other three: TinyLlama's
    // decode step at 100.8% of their best, skinny_avx2.c); 6 and 8 streams
    // 1 KB ahead (more pages in flight: 1-3% above 4 on the dev VM, where
    // GPT-2 small's f32 decode, once its Conv1D weights were stored as
    // Linear rows, read at 100.3% of the first four's best)
    static const size_t kStreams[MF_CPU_READ_VARIANTS] = {1, 4, 1, 4, 6, 8},
                        kAhead[MF_CPU_READ_VARIANTS] = {0, 512, 16384, 1024, 1024, 1024};
    const int v = variant < 0 || variant >= MF_CPU_READ_VARIANTS ? 0 : variant;
    float sum = 0.0f;
#pragma omp parallel reduction(+ : sum)
    {
        const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        const size_t part = bytes / nt / 64 * 64; // each thread its own contiguous part
        sum += read_part((const char *)p + t * part, part, (int)kStreams[v], kAhead[v]);
    }
    return sum;
}
