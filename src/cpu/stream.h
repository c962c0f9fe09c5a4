// Internal: the CPU's read stream (stream.c), the ceiling `minfer bench`
// quotes CPU decode against.
#ifndef MF_CPU_STREAM_H
#define MF_CPU_STREAM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Reads the `bytes` at p (64-byte aligned; a tail under 64 bytes per thread
// is skipped) once on the OpenMP threads, each thread a contiguous part, in
// one of MF_CPU_READ_VARIANTS access patterns (0: in order; 1: 4 pieces
// side by side, prefetched 512 bytes ahead; 2: in order, prefetched 16 KB
// ahead; 3: 4 pieces, 1 KB ahead: the decode GEMV's; 4, 5: 6 and 8 pieces,
// 1 KB ahead); returns their sum (so
// that no load can be dropped). Time it: bytes / seconds is the read rate;
// the ceiling is the best variant.
enum { MF_CPU_READ_VARIANTS = 6 };
float mf_cpu_read_stream(const void *p, size_t bytes, int variant);

#ifdef __cplusplus
}
#endif
#endif // MF_CPU_STREAM_H
