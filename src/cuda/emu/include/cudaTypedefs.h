// CPU emulator of the CUDA backend (src/cuda/emu/): the driver entry point
// type that cudaGetDriverEntryPointByVersion hands out.
#ifndef MF_EMU_CUDA_TYPEDEFS_H
#define MF_EMU_CUDA_TYPEDEFS_H

#include "cuda.h"

typedef CUresult(CUDAAPI *PFN_cuTensorMapEncodeTiled_v12000)(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void *globalAddress,
    const cuuint64_t *globalDim, const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
    const cuuint32_t *elementStrides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill);

#endif // MF_EMU_CUDA_TYPEDEFS_H
