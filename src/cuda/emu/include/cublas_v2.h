// CPU emulator of the CUDA backend (src/cuda/emu/): the cuBLAS calls minfer
// makes (the grouped GEMM of the MoE "grouped" path), computed by a reference
// GEMM on the handle's stream (src/cuda/emu/blas.cpp).
#ifndef MF_EMU_CUBLAS_V2_H
#define MF_EMU_CUBLAS_V2_H

#include "cublas_api.h"

#ifdef __cplusplus
extern "C" {
#endif

cublasStatus_t cublasCreate(cublasHandle_t *handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
const char *cublasGetStatusString(cublasStatus_t status);
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t handle, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[],
                                          const int n_array[], const int k_array[], const void *alpha_array,
                                          const void *const Aarray[], cudaDataType_t Atype, const int lda_array[],
                                          const void *const Barray[], cudaDataType_t Btype, const int ldb_array[],
                                          const void *beta_array, void *const Carray[], cudaDataType_t Ctype,
                                          const int ldc_array[], int group_count, const int group_size[],
                                          cublasComputeType_t computeType);

#ifdef __cplusplus
}
#endif

#endif // MF_EMU_CUBLAS_V2_H
