// Decode attention's tiles on x86-64 CPUs with AVX-512 F, BW and VL: 8-lane
// vectors with 32 registers, tiles of up to 4 query rows
// (src/cpu/attention_tiles.h; when mf_cpu_avx512()).
#include "cpu/cpu.h"
#include "cpu/skinny.h"

#define ATT_NAME(f) f##_avx512
#define ATT_TARGET "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define ATT_ROWS 4
#include "cpu/attention_tiles.h"
