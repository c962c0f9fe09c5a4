// Internal: the three constructs of kernel source that nvcc and the CPU
// emulator (src/cuda/emu/, -DMF_CUDA_EMU) spell differently, behind one macro
// each, so that every kernel compiles unchanged under both:
//
//   MF_LAUNCH(kernel, grid, block, smem, stream, args...)
//       kernel<<<grid, block, smem, stream>>>(args...). A kernel name with a
//       comma (a template) goes in parentheses: MF_LAUNCH((k<D, R>), ...).
//   MF_SHARED(type, name, dims)      e.g. MF_SHARED(float, red, [32]);
//       __shared__ type name dims; dims may be empty (a scalar). One variable
//       per macro (split `__shared__ float a[32], b[32];` into two).
//   MF_SHARED_ALIGNED(align, type, name, dims)
//       __shared__ alignas(align) type name dims; (e.g. a b16 tile ldmatrix reads: 16)
//   MF_DYN_SHARED(type, name)        e.g. MF_DYN_SHARED(uint4, smem);
//       extern __shared__ type name[]; (the launch's dynamic shared memory)
//
// Under the emulator each block gets its own shared arena, filled with a
// poison pattern (0xff bytes: NaN in f32 / f16 / bf16) when the block starts,
// and MF_SHARED variables are references into it.
//
// MF_DEVICE_ARCH: __CUDA_ARCH__ in a device pass, 0 in nvcc's host pass;
// under the emulator 900, since it compiles every architecture's device
// code once (the emulated device's compute capability, 9.0 or 8.0, decides
// at run time which kernels are launched). Use `#if MF_DEVICE_ARCH >= 900`
// where the source now tests `defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900`.
#ifndef MF_CUDA_PORTABLE_CUH
#define MF_CUDA_PORTABLE_CUH

#ifdef MF_CUDA_EMU

#include <cuda_runtime.h> // the emulator's: mf_emu::launch_kernel, smem_static, smem_dynamic

#define MF_DEVICE_ARCH 900
#define MF_EMU_CAT2(a, b) a##b
#define MF_EMU_CAT(a, b) MF_EMU_CAT2(a, b)
#define MF_LAUNCH(kernel, grid, block, smem, stream, ...)                                                     \
    ::mf_emu::launch_kernel(kernel, #kernel, ::mf_emu::Loc::here(), grid, block, smem, stream, ##__VA_ARGS__)
#define MF_SHARED_ALIGNED(align, type, name, ...)                                                             \
    static constexpr ::mf_emu::SmemSite MF_EMU_CAT(mf_emu_site_, name) = {                                    \
        #name, __FILE__, __LINE__, sizeof(type __VA_ARGS__),                                                  \
        (align) > alignof(type __VA_ARGS__) ? (size_t)(align) : alignof(type __VA_ARGS__)};                   \
    auto &name = *reinterpret_cast<type(*) __VA_ARGS__>(::mf_emu::smem_static(&MF_EMU_CAT(mf_emu_site_, name)))
#define MF_SHARED(type, name, ...) MF_SHARED_ALIGNED(1, type, name, __VA_ARGS__)
#define MF_DYN_SHARED(type, name) type *const name = static_cast<type *>(::mf_emu::smem_dynamic())

#else // nvcc

#if defined(__CUDA_ARCH__)
#define MF_DEVICE_ARCH __CUDA_ARCH__
#else
#define MF_DEVICE_ARCH 0
#endif
#define MF_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define MF_SHARED(type, name, ...) __shared__ type name __VA_ARGS__
#define MF_SHARED_ALIGNED(align, type, name, ...) __shared__ alignas(align) type name __VA_ARGS__
#define MF_DYN_SHARED(type, name) extern __shared__ type name[]

#endif // MF_CUDA_EMU

#endif // MF_CUDA_PORTABLE_CUH
