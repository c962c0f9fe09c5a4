// CPU emulator of the CUDA backend (src/cuda/emu/): __nv_bfloat16 and
// __nv_bfloat162 with CUDA's layout and exact round-to-nearest-even
// conversions (NaN becomes the canonical 0x7fff, as cvt.rn.bf16.f32 gives).
#ifndef MF_EMU_CUDA_BF16_H
#define MF_EMU_CUDA_BF16_H

#ifndef __cplusplus
#error "cuda_bf16.h (emulator): C++ only"
#endif

#include <cstdint>
#include <cstring>

#include "vector_types.h"

namespace mf_emu {

inline uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff; // NaN
    x += 0x7fffu + ((x >> 16) & 1u);                     // round to nearest even (overflow reaches inf)
    return (uint16_t)(x >> 16);
}

inline float bf16_to_f32(uint16_t b) {
    const uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

} // namespace mf_emu

struct __nv_bfloat16_raw {
    unsigned short x;
};

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(mf_emu::f32_to_bf16(f)) {}
    __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
    __nv_bfloat16 &operator=(float f) {
        __x = mf_emu::f32_to_bf16(f);
        return *this;
    }
    operator float() const { return mf_emu::bf16_to_f32(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
};

struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return mf_emu::bf16_to_f32(b.__x); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __nv_bfloat162{__nv_bfloat16(f.x), __nv_bfloat16(f.y)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 b) { return make_float2(__bfloat162float(b.x), __bfloat162float(b.y)); }
inline float __low2float(__nv_bfloat162 b) { return __bfloat162float(b.x); }
inline float __high2float(__nv_bfloat162 b) { return __bfloat162float(b.y); }

#endif // MF_EMU_CUDA_BF16_H
