// Backend selection and the public wrappers over the backend interface.
#include <string.h>

#include "backend.h"
#include "core/error.h"

bool mf_cuda_available(void) {
#ifdef MF_HAVE_CUDA
    return mf_backend_cuda_usable();
#else
    return false;
#endif
}

mf_status mf_backend_init(const char *name, mf_backend **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "backend_init: out is NULL");
    *out = NULL;
    if (!name) return mf_fail(MF_ERR_INVALID_ARG, "backend_init: name is NULL (want auto, cpu or cuda)");
    if (strcmp(name, "cpu") == 0) return mf_backend_cpu_create(out);
    if (strcmp(name, "cuda") == 0) {
#ifdef MF_HAVE_CUDA
        return mf_backend_cuda_create(out);
#else
        return mf_fail(MF_ERR_UNSUPPORTED, "backend_init: no CUDA device (this build has no CUDA backend)");
#endif
    }
    if (strcmp(name, "auto") == 0) {
#ifdef MF_HAVE_CUDA
        if (mf_backend_cuda_usable() && mf_backend_cuda_create(out) == MF_OK) return MF_OK;
#endif
        mf_clear_error();
        return mf_backend_cpu_create(out);
    }
    return mf_fail(MF_ERR_INVALID_ARG, "backend_init: unknown backend '%s' (want auto, cpu or cuda)", name);
}

void mf_backend_free(mf_backend *be) {
    if (be) be->destroy(be);
}

const char *mf_backend_name(const mf_backend *be) { return be ? be->name : "none"; }

mf_device mf_backend_device(const mf_backend *be) { return be ? be->device : MF_DEVICE_CPU; }

mf_status mf_backend_alloc(mf_backend *be, size_t bytes, void **out) {
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "backend_alloc: backend is NULL");
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "backend_alloc: out is NULL");
    *out = NULL;
    return be->alloc(be, bytes, out);
}

void mf_backend_dealloc(mf_backend *be, void *p) {
    if (be && p) be->dealloc(be, p);
}

mf_status mf_backend_copy(mf_backend *be, void *dst, const void *src, size_t bytes, mf_copy_kind kind) {
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "backend_copy: backend is NULL");
    if (kind != MF_COPY_H2D && kind != MF_COPY_D2H && kind != MF_COPY_D2D)
        return mf_fail(MF_ERR_INVALID_ARG, "backend_copy: invalid kind %d", (int)kind);
    if (bytes == 0) return MF_OK;
    if (!dst || !src)
        return mf_fail(MF_ERR_INVALID_ARG, "backend_copy: %s is NULL with bytes=%zu", dst ? "src" : "dst", bytes);
    return be->copy(be, dst, src, bytes, kind);
}

mf_status mf_backend_memset(mf_backend *be, void *dst, int value, size_t bytes) {
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "backend_memset: backend is NULL");
    if (bytes == 0) return MF_OK;
    if (!dst) return mf_fail(MF_ERR_INVALID_ARG, "backend_memset: dst is NULL with bytes=%zu", bytes);
    return be->memset(be, dst, value, bytes);
}

mf_status mf_backend_sync(mf_backend *be) {
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "backend_sync: backend is NULL");
    return be->sync(be);
}

mf_status mf_backend_set_stream(mf_backend *be, void *stream) {
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "backend_set_stream: backend is NULL");
    return be->set_stream(be, stream);
}

// The dispatch of every op (backend.h): be's entry inside the op's brackets.
#define MF_OP_DISPATCH_DEF(entry, args_t, op)                                                            \
    mf_status mf_dispatch_##entry(mf_backend *be, const args_t *args) {                                  \
        if (!be->entry) return mf_fail(MF_ERR_UNSUPPORTED, op ": not implemented on the %s backend", be->name); \
        mf_op_begin(be, op);                                                                             \
        const mf_status st = be->entry(be, args);                                                        \
        mf_op_end(be, op);                                                                               \
        return st;                                                                                       \
    }
MF_OPS(MF_OP_DISPATCH_DEF)
MF_OPS_OPTIONAL(MF_OP_DISPATCH_DEF)
