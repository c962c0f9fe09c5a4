// Decode attention's tiles on x86-64 CPUs with AVX2, FMA and F16C (no
// AVX-512): 8-lane vectors with 16 registers, tiles of up to 2 query rows
// (src/cpu/attention_tiles.h; when mf_cpu_avx2() and not mf_cpu_avx512()).
#include "cpu/cpu.h"
#include "cpu/skinny.h"

#define ATT_NAME(f) f##_avx2
#if MF_CPU_AVX2_KERNELS
#define ATT_TARGET "avx2,fma,f16c"
#define ATT_ROWS 2
#include "cpu/attention_tiles.h"
#else
void ATT_NAME(mf_cpu_dec_softmax)(float *s, int64_t n, float *m, float *l) { (void)s, (void)n, (void)m, (void)l; }
void ATT_NAME(mf_cpu_dec_qk)(mf_dtype dt, const float *q, int64_t D, const int32_t *rows, int64_t nr, int64_t kvh,
                             const char *const *kp, int64_t hs, int64_t nk, float scale, float *s, int64_t lds) {
    (void)dt, (void)q, (void)D, (void)rows, (void)nr, (void)kvh, (void)kp, (void)hs, (void)nk, (void)scale, (void)s,
        (void)lds;
}
void ATT_NAME(mf_cpu_dec_pv)(mf_dtype dt, const float *p, int64_t ldp, const int32_t *rows, int64_t nr, int64_t kvh,
                             const char *const *vp, int64_t hs, int64_t nk, int64_t D, float *o) {
    (void)dt, (void)p, (void)ldp, (void)rows, (void)nr, (void)kvh, (void)vp, (void)hs, (void)nk, (void)D, (void)o;
}
#endif
