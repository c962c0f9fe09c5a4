// CPU emulator of the CUDA backend (src/cuda/emu/): __half and __half2 with
// CUDA's layout (the 16 bits in __x) and exact round-to-nearest-even
// conversions (NaN becomes the canonical 0x7fff, as cvt.rn.f16.f32 gives;
// the golden probes check that against a GPU).
#ifndef MF_EMU_CUDA_FP16_H
#define MF_EMU_CUDA_FP16_H

#ifndef __cplusplus
#error "cuda_fp16.h (emulator): C++ only"
#endif

#include <cstdint>
#include <cstring>

#include "vector_types.h"

namespace mf_emu {

inline uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0x7fff;                  // NaN
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // >= 65520 rounds to inf
    if (ax < 0x38800000u) {                                 // below 2^-14: a subnormal half (or 0)
        if (ax < 0x33000000u) return (uint16_t)sign;        // below 2^-25: 0 (2^-25 itself ties to even 0)
        const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e; // value / 2^-24 = m 2^(e - 126)
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (ax >> 13) - (112u << 10); // rebias the exponent (127 - 15)
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023u;
    uint32_t x;
    if (e == 0) {
        if (m == 0) {
            x = sign;
        } else { // subnormal: normalise
            int s = 0;
            uint32_t mm = m;
            while (!(mm & 1024u)) mm <<= 1, s++;
            x = sign | (uint32_t)(113 - s) << 23 | (mm & 1023u) << 13;
        }
    } else if (e == 31) {
        x = sign | 0x7f800000u | m << 13;
    } else {
        x = sign | (e + 112) << 23 | m << 13;
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

} // namespace mf_emu

struct __half_raw {
    unsigned short x;
};

struct __half {
    unsigned short __x;
    __half() = default;
    __half(float f) : __x(mf_emu::f32_to_f16(f)) {}
    __half(__half_raw r) : __x(r.x) {}
    __half &operator=(float f) {
        __x = mf_emu::f32_to_f16(f);
        return *this;
    }
    operator float() const { return mf_emu::f16_to_f32(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
};

struct __attribute__((aligned(4))) __half2 {
    __half x, y;
};

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return mf_emu::f16_to_f32(h.__x); }
inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 f) { return __half2{__half(f.x), __half(f.y)}; }
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }

#endif // MF_EMU_CUDA_FP16_H
