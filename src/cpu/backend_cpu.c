// The CPU backend: host memory, synchronous ops.
#define _DEFAULT_SOURCE // madvise, MADV_HUGEPAGE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/alloc.h"
#include "core/error.h"
#include "cpu/cpu.h"

// The CPU backend's state: one staging buffer kept between ops (grow-only),
// for the f32 panels of a 16-bit weight on prefill (gemm.c). malloc'd
// afresh each call, its pages faulted in again every call: 4-12 ms of a
// 45 ms bf16 (128 x 5632 x 2048) GEMM on the dev VM (docs/notes/cpu.md).
typedef struct {
    pthread_mutex_t mu; // held by the op using buf
    void *buf;
    size_t bytes;
} cpu_ctx;

static void cpu_destroy(mf_backend *be) {
    cpu_ctx *c = be->ctx;
    if (c) {
        pthread_mutex_destroy(&c->mu);
        free(c->buf);
        free(c);
    }
    free(be);
}

void *mf_cpu_staging_take(mf_backend *be, size_t bytes, bool *owned) {
    cpu_ctx *c = be->ctx;
    *owned = true;
    if (!c || pthread_mutex_trylock(&c->mu) != 0) return mf_malloc(bytes); // another thread's op holds it
    if (c->bytes < bytes) {
        free(c->buf);
        c->buf = mf_malloc(bytes);
        c->bytes = c->buf ? bytes : 0;
    }
    if (!c->buf) {
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    *owned = false;
    return c->buf;
}

void mf_cpu_staging_give(mf_backend *be, void *p, bool owned) {
    if (!p) return;
    if (owned) {
        free(p);
        return;
    }
    pthread_mutex_unlock(&((cpu_ctx *)be->ctx)->mu);
}

// Allocations from this size on (weights, the KV cache) are 2 MB aligned and
// advised for transparent huge pages (Linux's default policy is "madvise"):
// a decode step streams every weight once, one TLB entry per 2 MB instead
// of per 4 KB. Measured: a first A/B on TinyLlama bf16 gave 20-25% a step,
// later interleaved runs only ~0-10% (docs/notes/cpu.md, "Huge pages");
// f32 widened weights 212-227 -> 202-218 ms. Advice only: where the kernel
// gives no huge page, nothing changes.
enum { HUGE_FROM = 4 << 20, HUGE_PAGE = 2 << 20 };

static mf_status cpu_alloc(mf_backend *be, size_t bytes, void **out) {
    (void)be;
    void *p = NULL;
    const bool huge = bytes >= HUGE_FROM;
    if (mf_fault_should_fail() || posix_memalign(&p, huge ? HUGE_PAGE : 256, bytes ? bytes : 1) != 0)
        return mf_fail(MF_ERR_OOM, "cpu: out of host memory allocating %zu bytes", bytes);
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(p, bytes, MADV_HUGEPAGE); // advice: an error changes nothing
#endif
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
    cpu_ctx *c = mf_calloc(1, sizeof *c);
    if (!c || pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        free(be);
        return mf_fail(MF_ERR_OOM, "backend_init: out of host memory for the cpu backend");
    }
    be->ctx = c;
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
