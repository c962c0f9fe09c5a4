// Backends: where tensors live and ops run. One interface, two
// implementations (CPU: OpenBLAS + OpenMP; CUDA: cuBLASLt + our kernels).
#ifndef MINFER_BACKEND_H
#define MINFER_BACKEND_H

#include "minfer/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_backend mf_backend;

// name: "auto" (CUDA if a device is usable, else CPU), "cpu" or "cuda".
// "cuda" without a usable device returns MF_ERR_UNSUPPORTED, "no CUDA device".
mf_status mf_backend_init(const char *name, mf_backend **out);
void mf_backend_free(mf_backend *be); // NULL is fine
const char *mf_backend_name(const mf_backend *be); // "cpu" | "cuda"
mf_device mf_backend_device(const mf_backend *be);
// True when this build contains the CUDA backend and a device is usable.
bool mf_cuda_available(void);

// Memory on the backend's device (host memory for the CPU backend).
// Blocks are 256-byte aligned.
mf_status mf_backend_alloc(mf_backend *be, size_t bytes, void **out);
void mf_backend_dealloc(mf_backend *be, void *p); // NULL is fine

typedef enum {
    MF_COPY_H2D = 0, // host -> backend device
    MF_COPY_D2H = 1, // backend device -> host
    MF_COPY_D2D = 2, // within the backend device
} mf_copy_kind;

// Ordered on the backend's stream; D2H returns once the data is on the host.
mf_status mf_backend_copy(mf_backend *be, void *dst, const void *src, size_t bytes,
                          mf_copy_kind kind);
mf_status mf_backend_memset(mf_backend *be, void *dst, int value, size_t bytes);
// Waits for queued work and reports asynchronous errors (a device-side
// "token id out of range" included).
mf_status mf_backend_sync(mf_backend *be);
// CUDA: run subsequent ops on this cudaStream_t (NULL = legacy default
// stream), e.g. torch.cuda.current_stream(). CPU: only NULL is accepted.
mf_status mf_backend_set_stream(mf_backend *be, void *stream);

// Fault injection for tests: the n-th host/device allocation from now fails
// with MF_ERR_OOM (n = 1: the next one). n <= 0 disables. Process-wide.
void mf_fault_alloc_fail_after(int64_t n);

// Arenas: one backend allocation carved into 256-byte aligned pieces, freed
// all at once. Peak bytes are recorded for memory plans.
typedef struct mf_arena mf_arena;
mf_status mf_arena_init(mf_backend *be, size_t capacity, mf_arena **out);
void mf_arena_free(mf_arena *a); // NULL is fine
mf_status mf_arena_alloc(mf_arena *a, size_t bytes, void **out);
// A contiguous tensor carved from the arena.
mf_status mf_arena_tensor(mf_arena *a, mf_dtype dt, int32_t ndim, const int64_t *shape,
                          mf_tensor *out);
void mf_arena_reset(mf_arena *a); // everything carved so far is invalid
size_t mf_arena_used(const mf_arena *a);
size_t mf_arena_peak(const mf_arena *a);
size_t mf_arena_capacity(const mf_arena *a);

#ifdef __cplusplus
}
#endif
#endif // MINFER_BACKEND_H
