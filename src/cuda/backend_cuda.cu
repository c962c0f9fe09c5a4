// The CUDA backend: device memory, one stream, one cuBLASLt handle and
// workspace, and the op entries of the other src/cuda/*.cu files. Ops are
// queued on the stream and return at once; mf_backend_sync waits and reports
// errors that only the device sees (embed's out-of-range token ids).
//
// The backend works on the device that is current when it is created; the
// caller keeps that device current on the threads that use it.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/alloc.h"
#include "cuda/common.cuh"

// cuBLASLt scratch: 32 MiB is what NVIDIA recommends for Hopper (less
// limits the split-k / stream-k algorithms the heuristic may pick).
static const size_t kWorkspaceBytes = (size_t)32 << 20;

// Does this build hold a kernel image this device can run? Launched by no one:
// create asks for its attributes.
static __global__ void mf_cuda_probe_kernel() {}

// cudaMalloc through the fault injector. A failure is MF_ERR_OOM (or
// MF_ERR_CUDA when the context itself is broken).
static mf_status device_alloc(size_t bytes, void **out, const char *what) {
    *out = nullptr;
    if (mf_fault_should_fail())
        return mf_fail(MF_ERR_OOM, "cuda: out of device memory allocating %zu bytes (%s)", bytes, what);
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (e == cudaErrorMemoryAllocation)
            return mf_fail(MF_ERR_OOM, "cuda: out of device memory allocating %zu bytes (%s)", bytes, what);
        return mf_fail(MF_ERR_CUDA, "cuda: cudaMalloc of %zu bytes (%s) failed: %s (%s)", bytes, what,
                       cudaGetErrorString(e), cudaGetErrorName(e));
    }
    *out = p;
    return MF_OK;
}

// Frees whatever ctx_init got before it failed (or everything). Teardown
// errors are not reported, but cleared so that no later call sees them.
static void ctx_release(mf_cuda_ctx *c) {
    if (!c) return;
    mf_cuda_gemm_release(c); // its descriptors belong to c->lt
    mf_cuda_softmax_release(c);
    if (c->lt) cublasLtDestroy(c->lt);
    mf_cuda_moe_release(c);
    mf_cuda_attention_release(c);
    if (c->workspace) cudaFree(c->workspace);
    if (c->err_count) cudaFree(c->err_count);
    if (c->err_host) cudaFreeHost(c->err_host);
    if (c->switch_event) cudaEventDestroy(c->switch_event);
    if (c->capture) cudaStreamDestroy(c->capture);
    (void)cudaGetLastError();
    free(c);
}

// Errors after which the CUDA context is unusable: every later call of the
// process returns them (the CUDA programming guide's "sticky" errors).
static bool cuda_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable: return true;
    default: return false;
    }
}

static mf_status ctx_init(mf_cuda_ctx *c) {
    MF_CUDA_TRY(cudaGetDevice(&c->device));
    MF_CUDA_TRY(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, c->device));
    MF_CUDA_TRY(cudaDeviceGetAttribute(&c->cc_major, cudaDevAttrComputeCapabilityMajor, c->device));
    MF_CUDA_TRY(cudaDeviceGetAttribute(&c->cc_minor, cudaDevAttrComputeCapabilityMinor, c->device));
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, mf_cuda_probe_kernel);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction ||
            e == cudaErrorUnsupportedPtxVersion || e == cudaErrorInvalidKernelImage)
            return mf_fail(MF_ERR_UNSUPPORTED,
                           "backend_init: this build has no CUDA kernels for device %d (sm_%d%d): %s; rebuild with "
                           "CMAKE_CUDA_ARCHITECTURES including %d%d",
                           c->device, c->cc_major, c->cc_minor, cudaGetErrorString(e), c->cc_major, c->cc_minor);
        // Anything else, e.g. a context left unusable by an earlier fault in this process.
        return mf_fail(MF_ERR_CUDA, "backend_init: device %d: %s (%s)%s", c->device, cudaGetErrorString(e),
                       cudaGetErrorName(e),
                       cuda_sticky(e) ? ": a kernel of this process faulted earlier; restart the process" : "");
    }
    c->stream = nullptr;
    MF_CUDA_TRY(cudaEventCreateWithFlags(&c->switch_event, cudaEventDisableTiming));
    MF_CUBLAS_TRY(cublasLtCreate(&c->lt));
    MF_TRY(device_alloc(kWorkspaceBytes, &c->workspace, "cuBLASLt workspace"));
    c->workspace_bytes = kWorkspaceBytes;
    const size_t err_bytes = kMfErrSlots * sizeof(unsigned int);
    MF_TRY(device_alloc(err_bytes, reinterpret_cast<void **>(&c->err_count), "error counters"));
    if (mf_fault_should_fail())
        return mf_fail(MF_ERR_OOM, "cuda: out of pinned host memory allocating %zu bytes (error read-back)",
                       err_bytes);
    MF_CUDA_TRY(cudaMallocHost(reinterpret_cast<void **>(&c->err_host), err_bytes));
    memset(c->err_host, 0, err_bytes);
    MF_CUDA_TRY(cudaMemset(c->err_count, 0, err_bytes));
    // The zeroed counter must be visible to whatever stream set_stream installs later.
    MF_CUDA_TRY(cudaDeviceSynchronize());
    return MF_OK;
}

static void cuda_destroy(mf_backend *be) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    if (c) {
        // Queued ops may still use the workspace and the counter. The device
        // (not the stream) is waited for: a stream given to set_stream may be gone.
        (void)cudaDeviceSynchronize();
        ctx_release(c);
    }
    free(be);
}

static mf_status cuda_alloc(mf_backend *be, size_t bytes, void **out) {
    (void)be;
    return device_alloc(bytes, out, "backend_alloc");
}

static void cuda_dealloc(mf_backend *be, void *p) {
    (void)be;
    if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError(); // void entry: nothing to report to
}

// The status for a failed call in a backend entry: a sticky error marks the
// backend dead (later entries refuse with the same diagnosis), anything
// else is that call's failure.
static mf_status cuda_failed(mf_cuda_ctx *c, const char *what, cudaError_t e) {
    (void)cudaGetLastError();
    if (cuda_sticky(e)) {
        c->fatal = true;
        return mf_fail(MF_ERR_CUDA,
                       "%s: a kernel queued since the last sync faulted: %s (%s); the CUDA context is unusable: free "
                       "the backend and restart the process",
                       what, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return mf_fail(MF_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// Entries that wait or switch streams refuse on a dead backend and while a
// graph is being recorded (a wait or a cross-stream event inside a capture
// would break it).
static mf_status usable(const mf_cuda_ctx *c, const char *what) {
    if (c->fatal)
        return mf_fail(MF_ERR_CUDA, "%s: an earlier kernel faulted; the CUDA context is unusable: free the backend "
                                    "and restart the process",
                       what);
    if (c->capturing) return mf_fail(MF_ERR_INVALID_ARG, "%s: a graph is being recorded on this backend", what);
    return MF_OK;
}

static mf_status cuda_copy(mf_backend *be, void *dst, const void *src, size_t bytes, mf_copy_kind kind) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    if (kind == MF_COPY_D2H || c->fatal) MF_TRY(usable(c, "backend_copy"));
    cudaMemcpyKind k = cudaMemcpyDeviceToDevice;
    if (kind == MF_COPY_H2D) k = cudaMemcpyHostToDevice;
    if (kind == MF_COPY_D2H) k = cudaMemcpyDeviceToHost;
    if (kind == MF_COPY_D2D) {
        if (dst == src) return MF_OK;
        uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
        if (d < s + bytes && s < d + bytes)
            return mf_fail(MF_ERR_UNSUPPORTED,
                           "backend_copy: device ranges overlap (dst %p, src %p, %zu bytes); cudaMemcpy cannot "
                           "move overlapping memory",
                           dst, src, bytes);
    }
    // H2D from pinned host memory is truly asynchronous: the source must stay
    // unchanged until the stream reaches the copy (pageable memory is staged
    // before cudaMemcpyAsync returns).
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, c->stream);
    if (e == cudaSuccess && kind == MF_COPY_D2H) e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? MF_OK : cuda_failed(c, "backend_copy", e);
}

static mf_status cuda_memset(mf_backend *be, void *dst, int value, size_t bytes) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    MF_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, c->stream));
    return MF_OK;
}

static mf_status cuda_sync(mf_backend *be) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    MF_TRY(usable(c, "backend_sync"));
    cudaError_t e = cudaSuccess;
    if (c->err_pending) {
        // Read and reset the counter in stream order: one wait covers both.
        e = cudaMemcpyAsync(c->err_host, c->err_count, kMfErrSlots * sizeof(unsigned int), cudaMemcpyDeviceToHost,
                            c->stream);
        if (e == cudaSuccess) e = cudaMemsetAsync(c->err_count, 0, kMfErrSlots * sizeof(unsigned int), c->stream);
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) return cuda_failed(c, "backend_sync", e);
    if (c->err_pending) {
        c->err_pending = false;
        const unsigned int bad = c->err_host[kMfErrEmbed], bad_attn = c->err_host[kMfErrAttention];
        const unsigned int bad_kv = c->err_host[kMfErrKvWrite];
        memset(c->err_host, 0, kMfErrSlots * sizeof(unsigned int));
        if (bad_kv)
            return mf_fail(MF_ERR_INVALID_ARG,
                           "kv_write: %u token(s) with a slot or position out of range since the last sync "
                           "(they were skipped)",
                           bad_kv);
        if (bad_attn)
            return mf_fail(MF_ERR_INVALID_ARG,
                           "attention: %u sequence(s) with invalid device lengths (decreasing cu_seqlens, a length "
                           "past max_q_len / max_k_len / the cache, or a slot out of range) since the last sync "
                           "(their rows were zero-filled)",
                           bad_attn);
        if (bad)
            return mf_fail(MF_ERR_INVALID_ARG,
                           "embed: %u token id(s) out of range [0, %lld) since the last sync (their rows were "
                           "zero-filled)",
                           bad, (long long)c->err_vocab);
    }
    return MF_OK;
}

static mf_status cuda_set_stream(mf_backend *be, void *stream) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (s == c->stream) return MF_OK;
    MF_TRY(usable(c, "backend_set_stream"));
    if (s) {
        int dev = -1;
        MF_CUDA_TRY(cudaStreamGetDevice(s, &dev));
        if (dev != c->device)
            return mf_fail(MF_ERR_INVALID_ARG, "backend_set_stream: stream %p is on device %d, the backend on %d",
                           stream, dev, c->device);
    }
    // The switch orders the new stream after the old one with an event: in a
    // stream capture someone else started (torch.cuda.graph), that event would
    // come from outside the capture, which CUDA refuses and which breaks it.
    const cudaStream_t ends[2] = {c->stream, s};
    for (int i = 0; i < 2; i++) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        const cudaError_t e = cudaStreamIsCapturing(ends[i], &cs);
        if (e == cudaErrorStreamCaptureImplicit) { // the legacy stream while a blocking stream captures
            (void)cudaGetLastError();
            cs = cudaStreamCaptureStatusActive;
        } else if (e != cudaSuccess) {
            return cuda_failed(c, "backend_set_stream: cudaStreamIsCapturing", e);
        }
        if (cs != cudaStreamCaptureStatusNone)
            return mf_fail(MF_ERR_UNSUPPORTED,
                           "backend_set_stream: stream %p is being captured into a CUDA graph by someone else "
                           "(e.g. torch.cuda.graph); minfer ops cannot join it",
                           (void *)ends[i]);
    }
    // Work already queued (it uses the workspace and the error counter) runs
    // before anything queued on the new stream; no host wait.
    MF_CUDA_TRY(cudaEventRecord(c->switch_event, c->stream));
    MF_CUDA_TRY(cudaStreamWaitEvent(s, c->switch_event, 0));
    c->stream = s;
    return MF_OK;
}

extern "C" bool mf_backend_cuda_usable(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); // no driver / no device: leave no error behind
        return false;
    }
    return n > 0;
}

extern "C" const char *mf_backend_cuda_info(void) {
    static thread_local char buf[192];
    int rt = 0, drv = 0, n = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    char drv_s[32];
    if (drv > 0)
        snprintf(drv_s, sizeof drv_s, "driver %d.%d", drv / 1000, drv % 1000 / 10);
    else
        snprintf(drv_s, sizeof drv_s, "no driver");
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(buf, sizeof buf, "cuda %d.%d runtime, %s, no device (%s)", rt / 1000, rt % 1000 / 10, drv_s,
                 cudaGetErrorString(e));
    } else {
        snprintf(buf, sizeof buf, "cuda %d.%d runtime, %s, %d device(s)", rt / 1000, rt % 1000 / 10, drv_s, n);
    }
#ifdef MF_EMU_RUNTIME // src/cuda/emu: the kernels run on the CPU
    cudaDeviceProp prop;
    if (e == cudaSuccess && n > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(buf, sizeof buf, "cuda (emulated on the CPU): compute capability %d.%d, %d SMs", prop.major,
                 prop.minor, prop.multiProcessorCount);
#endif
    return buf;
}

extern "C" mf_status mf_backend_cuda_create(mf_backend **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "backend_init: out is NULL");
    *out = nullptr;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return mf_fail(MF_ERR_UNSUPPORTED, "backend_init: no CUDA device (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
    }
    mf_backend *be = static_cast<mf_backend *>(mf_calloc(1, sizeof *be));
    mf_cuda_ctx *c = static_cast<mf_cuda_ctx *>(mf_calloc(1, sizeof *c));
    if (!be || !c) {
        free(be);
        free(c);
        return mf_fail(MF_ERR_OOM, "backend_init: out of host memory for the cuda backend");
    }
    mf_status s = ctx_init(c);
    if (s != MF_OK) {
        ctx_release(c);
        free(be);
        return s;
    }
    be->name = "cuda";
    be->device = MF_DEVICE_CUDA;
    be->ctx = c;
    be->destroy = cuda_destroy;
    be->alloc = cuda_alloc;
    be->dealloc = cuda_dealloc;
    be->copy = cuda_copy;
    be->memset = cuda_memset;
    be->sync = cuda_sync;
    be->set_stream = cuda_set_stream;
#define MF_CUDA_WIRE(entry, args_t, name) be->entry = mf_cuda_##entry;
    MF_OPS(MF_CUDA_WIRE)
    MF_OPS_OPTIONAL(MF_CUDA_WIRE) // moe_experts: decode kernels (<= MF_MOE_DECODE_MAX_ROWS rows), else it declines
#undef MF_CUDA_WIRE
    be->attention_workspace = mf_cuda_attention_workspace;
    be->moe_experts_capturable = mf_cuda_moe_experts_capturable;
    be->graph_begin = mf_cuda_graph_begin;
    be->graph_end = mf_cuda_graph_end;
    be->graph_launch = mf_cuda_graph_launch;
    be->graph_free = mf_cuda_graph_free;
    *out = be;
    return MF_OK;
}
