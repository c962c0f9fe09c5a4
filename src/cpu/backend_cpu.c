// The CPU backend: host memory, synchronous ops.
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "cpu/cpu.h"

static void cpu_destroy(mf_backend *be) { free(be); }

static mf_status cpu_alloc(mf_backend *be, size_t bytes, void **out) {
    (void)be;
    void *p = NULL;
    if (mf_fault_should_fail() || posix_memalign(&p, 256, bytes ? bytes : 1) != 0)
        return mf_fail(MF_ERR_OOM, "cpu: out of host memory allocating %zu bytes", bytes);
    *out = p;
    return MF_OK;
}

static void cpu_dealloc(mf_backend *be, void *p) {
    (void)be;
    free(p);
}

static mf_status cpu_copy(mf_backend *be, void *dst, const void *src, size_t bytes, mf_copy_kind kind) {
    (void)be;
    (void)kind; // host and "device" are the same memory
    memmove(dst, src, bytes);
    return MF_OK;
}

static mf_status cpu_memset(mf_backend *be, void *dst, int value, size_t bytes) {
    (void)be;
    memset(dst, value, bytes);
    return MF_OK;
}

static mf_status cpu_sync(mf_backend *be) {
    (void)be;
    return MF_OK;
}

static mf_status cpu_set_stream(mf_backend *be, void *stream) {
    (void)be;
    if (stream) return mf_fail(MF_ERR_INVALID_ARG, "backend_set_stream: the cpu backend has no streams (got %p)", stream);
    return MF_OK;
}

mf_status mf_backend_cpu_create(mf_backend **out) {
    mf_backend *be = mf_calloc(1, sizeof *be);
    if (!be) return mf_fail(MF_ERR_OOM, "backend_init: out of host memory for the cpu backend");
    be->name = "cpu";
    be->mixed_weights = true; // f16/bf16 weights widened in registers (gemm.c)
    be->device = MF_DEVICE_CPU;
    be->destroy = cpu_destroy;
    be->alloc = cpu_alloc;
    be->dealloc = cpu_dealloc;
    be->copy = cpu_copy;
    be->memset = cpu_memset;
    be->sync = cpu_sync;
    be->set_stream = cpu_set_stream;
#define MF_CPU_WIRE(entry, args_t, name) be->entry = mf_cpu_##entry;
    MF_OPS(MF_CPU_WIRE) // moe_experts NULL: src/ops/moe.c loops over mf_gemm; no graphs, no attention workspace
#undef MF_CPU_WIRE
    *out = be;
    return MF_OK;
}
