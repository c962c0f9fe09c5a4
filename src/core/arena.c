// Arenas: one backend allocation carved into aligned pieces.
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "minfer/backend.h"

#define MF_ARENA_ALIGN 256 // 16-byte vector loads and cuBLASLt's preferred alignment

struct mf_arena {
    mf_backend *be;
    mf_device device;
    char *base;      // one allocation of `capacity` bytes on be's device
    size_t capacity;
    size_t used;     // bytes carved since the last reset
    size_t peak;     // max of used
};

mf_status mf_arena_init(mf_backend *be, size_t capacity, mf_arena **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "arena_init: out is NULL");
    *out = NULL;
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "arena_init: backend is NULL");
    mf_arena *a = mf_calloc(1, sizeof *a);
    if (!a) return mf_fail(MF_ERR_OOM, "arena_init: out of host memory for the arena header");
    a->be = be;
    a->device = mf_backend_device(be);
    a->capacity = capacity;
    if (capacity > 0) {
        mf_status s = mf_backend_alloc(be, capacity, (void **)&a->base);
        if (s != MF_OK) {
            free(a);
            return s;
        }
    }
    *out = a;
    return MF_OK;
}

void mf_arena_free(mf_arena *a) {
    if (!a) return;
    mf_backend_dealloc(a->be, a->base);
    free(a);
}

mf_status mf_arena_alloc(mf_arena *a, size_t bytes, void **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "arena_alloc: out is NULL");
    *out = NULL;
    if (!a) return mf_fail(MF_ERR_INVALID_ARG, "arena_alloc: arena is NULL");
    size_t start = (a->used + MF_ARENA_ALIGN - 1) / MF_ARENA_ALIGN * MF_ARENA_ALIGN;
    if (mf_fault_should_fail() || start > a->capacity || bytes > a->capacity - start)
        return mf_fail(MF_ERR_OOM, "arena_alloc: %zu bytes do not fit (used %zu of %zu)", bytes, a->used,
                       a->capacity);
    *out = a->base + start;
    a->used = start + bytes;
    if (a->used > a->peak) a->peak = a->used;
    return MF_OK;
}

mf_status mf_arena_tensor(mf_arena *a, mf_dtype dt, int32_t ndim, const int64_t *shape, mf_tensor *out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "arena_tensor: out is NULL");
    if (!a) return mf_fail(MF_ERR_INVALID_ARG, "arena_tensor: arena is NULL");
    mf_tensor t;
    MF_TRY(mf_tensor_make(&t, NULL, dt, a->device, ndim, shape));
    int64_t n = mf_tensor_numel(&t);
    if (n > (int64_t)(SIZE_MAX / 8)) return mf_fail(MF_ERR_INVALID_ARG, "arena_tensor: %lld elements", (long long)n);
    MF_TRY(mf_arena_alloc(a, (size_t)n * mf_dtype_size(dt), &t.data));
    *out = t;
    return MF_OK;
}

void mf_arena_reset(mf_arena *a) {
    if (a) a->used = 0;
}

size_t mf_arena_used(const mf_arena *a) { return a ? a->used : 0; }
size_t mf_arena_peak(const mf_arena *a) { return a ? a->peak : 0; }
size_t mf_arena_capacity(const mf_arena *a) { return a ? a->capacity : 0; }
