// CPU emulator of the CUDA backend (src/cuda/emu/): CUDA's built-in vector
// types and their make_ functions, with CUDA's sizes and alignments (so that
// a misaligned 16-byte access is caught by UBSan as it would fault on a GPU).
// Plain C as well as C++: the runtime API header uses dim3.
#ifndef MF_EMU_VECTOR_TYPES_H
#define MF_EMU_VECTOR_TYPES_H

#define MF_EMU_VEC2(T, n, a) typedef struct __attribute__((aligned(a))) n { T x, y; } n;
#define MF_EMU_VEC3(T, n) typedef struct n { T x, y, z; } n;
#define MF_EMU_VEC4(T, n, a) typedef struct __attribute__((aligned(a))) n { T x, y, z, w; } n;

MF_EMU_VEC2(float, float2, 8)
MF_EMU_VEC3(float, float3)
MF_EMU_VEC4(float, float4, 16)
MF_EMU_VEC2(int, int2, 8)
MF_EMU_VEC3(int, int3)
MF_EMU_VEC4(int, int4, 16)
MF_EMU_VEC2(unsigned int, uint2, 8)
MF_EMU_VEC4(unsigned int, uint4, 16)
MF_EMU_VEC2(double, double2, 16)
MF_EMU_VEC2(unsigned short, ushort2, 4)
MF_EMU_VEC2(long long, longlong2, 16)
MF_EMU_VEC2(unsigned long long, ulonglong2, 16)

#ifdef __cplusplus
struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
#else
typedef struct uint3 { unsigned int x, y, z; } uint3;
typedef struct dim3 { unsigned int x, y, z; } dim3;
#endif

#define MF_EMU_MAKE2(T, n) static inline n make_##n(T x, T y) { n v; v.x = x, v.y = y; return v; }
#define MF_EMU_MAKE3(T, n) static inline n make_##n(T x, T y, T z) { n v; v.x = x, v.y = y, v.z = z; return v; }
#define MF_EMU_MAKE4(T, n)                                                                                    \
    static inline n make_##n(T x, T y, T z, T w) { n v; v.x = x, v.y = y, v.z = z, v.w = w; return v; }
MF_EMU_MAKE2(float, float2)
MF_EMU_MAKE3(float, float3)
MF_EMU_MAKE4(float, float4)
MF_EMU_MAKE2(int, int2)
MF_EMU_MAKE3(int, int3)
MF_EMU_MAKE4(int, int4)
MF_EMU_MAKE2(unsigned int, uint2)
MF_EMU_MAKE3(unsigned int, uint3)
MF_EMU_MAKE4(unsigned int, uint4)
MF_EMU_MAKE2(double, double2)
MF_EMU_MAKE2(unsigned short, ushort2)
MF_EMU_MAKE2(long long, longlong2)
MF_EMU_MAKE2(unsigned long long, ulonglong2)

#undef MF_EMU_VEC2
#undef MF_EMU_VEC3
#undef MF_EMU_VEC4
#undef MF_EMU_MAKE2
#undef MF_EMU_MAKE3
#undef MF_EMU_MAKE4

#endif // MF_EMU_VECTOR_TYPES_H
