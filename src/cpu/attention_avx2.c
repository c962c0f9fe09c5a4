// Decode attention's tiles on x86-64 CPUs with AVX2, FMA and F16C (no
// AVX-512): 8-lane vectors with 16 registers, tiles of up to 2 query rows
// (src/cpu/attention_tiles.h; when mf_cpu_avx2() and not mf_cpu_avx512()).
#include "cpu/cpu.h"
#include "cpu/skinny.h"

#define ATT_NAME(f) f##_avx2
#define ATT_TARGET "avx2,fma,f16c"
#define ATT_ROWS 2
#include "cpu/attention_tiles.h"
