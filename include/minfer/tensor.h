// Tensor views: a pointer plus dtype, device, shape and strides.
// A view never owns memory; buffers come from a backend or an arena.
#ifndef MINFER_TENSOR_H
#define MINFER_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "minfer/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MF_DTYPE_F32 = 0,
    MF_DTYPE_F16 = 1,
    MF_DTYPE_BF16 = 2,
    MF_DTYPE_I32 = 3, // token ids, positions
} mf_dtype;

typedef enum {
    MF_DEVICE_CPU = 0,
    MF_DEVICE_CUDA = 1,
} mf_device;

#define MF_MAX_DIMS 4

typedef struct {
    void *data;                   // first element (may be unaligned)
    mf_dtype dtype;
    mf_device device;
    int32_t ndim;                 // 1..MF_MAX_DIMS
    int64_t shape[MF_MAX_DIMS];   // elements per dim; unused dims are 1
    int64_t stride[MF_MAX_DIMS];  // in elements (not bytes); unused dims are 0
} mf_tensor;

// Bytes per element of dtype (0 for an invalid dtype).
size_t mf_dtype_size(mf_dtype dt);
// "f32", "f16", "bf16", "i32" ("?" for an invalid one).
const char *mf_dtype_name(mf_dtype dt);
const char *mf_device_name(mf_device dev);

// A contiguous row-major view of ndim dims over data.
mf_status mf_tensor_make(mf_tensor *out, void *data, mf_dtype dt, mf_device dev,
                         int32_t ndim, const int64_t *shape);
// Validates ndim, dtype, device, shapes >= 0 and strides >= 0; `what` names
// the tensor in the message ("gemm: a").
mf_status mf_tensor_check(const mf_tensor *t, const char *what);
int64_t mf_tensor_numel(const mf_tensor *t);
bool mf_tensor_is_contiguous(const mf_tensor *t);
// Swap two dims of a view (no data moves): a transposed view for GEMM.
mf_status mf_tensor_transpose(mf_tensor *t, int32_t d0, int32_t d1);
// Bytes from the first to one past the last addressable element.
int64_t mf_tensor_span_bytes(const mf_tensor *t);

// f16/bf16 <-> f32, round-to-nearest-even; NaN stays NaN, overflow -> inf.
uint16_t mf_f32_to_f16(float x);
float mf_f16_to_f32(uint16_t h);
uint16_t mf_f32_to_bf16(float x);
float mf_bf16_to_f32(uint16_t h);
// Element i of a buffer of dtype dt as f32 / stored from f32.
float mf_load_f32(const void *p, mf_dtype dt, int64_t i);
void mf_store_f32(void *p, mf_dtype dt, int64_t i, float v);

#ifdef __cplusplus
}
#endif
#endif // MINFER_TENSOR_H
