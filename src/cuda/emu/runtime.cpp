// CPU emulator: the CUDA runtime subset (cuda_runtime_api.h). Device memory
// is host memory behind an allocation table; streams are queues whose work
// runs when something waits for it (a synchronize, a blocking copy, an event
// wait, cudaFree), in stream order and respecting event waits and the legacy
// default stream's implicit ordering. So a host read of a result before its
// synchronization sees poison, not the result. Graph capture records the
// queued work instead; a replay runs it again with the recorded arguments.
//
// Checks beyond the real runtime's: every device range of a copy or memset
// must lie inside one live allocation; allocations start as poison (0xff)
// and carry 256-byte canaries on both sides, checked after every kernel (and
// poisoned for AddressSanitizer, which then reports the exact access).
#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <set>

#include <cuda.h>

#include "internal.h"

#ifdef MF_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;

namespace mf_emu {

// ---- state -----------------------------------------------------------------------------------

namespace {

constexpr size_t kCanary = 256;
constexpr uint8_t kCanaryByte = 0xc5;

std::recursive_mutex g_mu;
thread_local cudaError_t t_last = cudaSuccess;
cudaError_t g_sticky = cudaSuccess; // a kernel fault: every later call fails

struct Alloc {
    size_t size;
    char *raw;
};
std::map<uintptr_t, Alloc> g_allocs;      // device allocations by base
std::map<uintptr_t, size_t> g_pinned;     // cudaMallocHost / cudaHostAlloc
size_t g_allocated = 0;

size_t mem_limit() {
    static const size_t lim = [] {
        const char *s = getenv("MF_EMU_MEM_MB");
        const long long mb = s ? atoll(s) : 80 * 1024;
        return (size_t)(mb > 0 ? mb : 80 * 1024) << 20;
    }();
    return lim;
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) t_last = e;
    return e;
}

void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mf_emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

} // namespace

std::mutex &runtime_lock() {
    static std::mutex m;
    return m;
}

Device &device() {
    static Device *d = [] {
        Device *r = new Device();
        if (const char *s = getenv("MF_EMU_CC")) {
            if (!strcmp(s, "8.0") || !strcmp(s, "80")) r->cc_major = 8, r->cc_minor = 0, r->sms = 108;
            else if (strcmp(s, "9.0") && strcmp(s, "90")) warn("MF_EMU_CC=%s: only 9.0 and 8.0 are emulated; using 9.0", s);
        }
        if (const char *s = getenv("MF_EMU_SMS")) {
            const int n = atoi(s);
            if (n >= 1 && n <= 1024) r->sms = n;
            else warn("MF_EMU_SMS=%s: not in [1, 1024]; using %d", s, r->sms);
        }
        return r;
    }();
    return *d;
}

KernelAttrs &kernel_attrs(const void *func) {
    static std::unordered_map<const void *, KernelAttrs> m;
    return m[func];
}

// ---- allocations ---------------------------------------------------------------------------------

namespace {

const Alloc *find_alloc(const void *p, uintptr_t *base) {
    const uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    if (a >= it->first && a < it->first + std::max<size_t>(it->second.size, 1)) {
        if (base) *base = it->first;
        return &it->second;
    }
    return nullptr;
}

bool is_pinned(const void *p, size_t bytes) {
    const uintptr_t a = (uintptr_t)p;
    auto it = g_pinned.upper_bound(a);
    if (it == g_pinned.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

void canary_set(char *p, bool poison_asan) {
    memset(p, kCanaryByte, kCanary);
#ifdef MF_EMU_ASAN
    if (poison_asan) ASAN_POISON_MEMORY_REGION(p, kCanary);
#endif
    (void)poison_asan;
}

bool canary_ok(const char *p) {
#ifdef MF_EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(p, kCanary);
#endif
    bool ok = true;
    for (size_t i = 0; i < kCanary; i++) ok &= (uint8_t)p[i] == kCanaryByte;
#ifdef MF_EMU_ASAN
    ASAN_POISON_MEMORY_REGION(p, kCanary);
#endif
    return ok;
}

} // namespace

bool is_device_range(const void *p, size_t bytes) {
    uintptr_t base = 0;
    const Alloc *a = find_alloc(p, &base);
    return a && (uintptr_t)p + bytes <= base + a->size;
}

bool device_range(const void *p, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    return is_device_range(p, bytes);
}

void check_canaries(const char *after) {
    for (auto &kv : g_allocs) {
        const Alloc &a = kv.second;
        const bool lo = canary_ok(a.raw), hi = canary_ok(a.raw + kCanary + a.size);
        if (!lo || !hi) {
            char buf[512];
            snprintf(buf, sizeof buf,
                     "mf_emu: %s wrote %s the %zu-byte device allocation at %p (a guard zone changed)", after,
                     lo ? "past the end of" : "before the start of", a.size, (void *)kv.first);
            fprintf(stderr, "%s\n", buf);
            canary_set(a.raw, true), canary_set(a.raw + kCanary + a.size, true);
            g_sticky = cudaErrorIllegalAddress;
        }
    }
}

// ---- streams, events, graphs -----------------------------------------------------------------------

struct Stream;

struct Op {
    std::function<cudaError_t()> run;
    const char *what;
    std::vector<std::pair<Stream *, uint64_t>> deps;
};

struct Graph {
    std::vector<std::pair<std::function<cudaError_t()>, const char *>> nodes;
};

struct Stream {
    unsigned flags = 0;
    bool legacy = false;
    std::deque<Op> q;
    uint64_t issued = 0, done = 0;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaStreamCaptureMode cap_mode = cudaStreamCaptureModeGlobal;
    Graph *graph = nullptr;
};

struct Event {
    unsigned flags = 0;
    Stream *stream = nullptr;
    uint64_t seq = 0;
    bool recorded = false, captured = false;
    double t = -1; // ms, once executed
};

namespace {

Stream g_legacy_stream = [] {
    Stream s;
    s.legacy = true;
    return s;
}();
std::set<Stream *> g_streams;
std::set<Event *> g_events;
std::set<Graph *> g_graphs;
int g_capturing = 0; // streams capturing now

Stream *stream_of(cudaStream_t s, cudaError_t *err) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &g_legacy_stream;
    Stream *p = reinterpret_cast<Stream *>(s);
    if (!g_streams.count(p)) {
        *err = cudaErrorInvalidResourceHandle;
        return nullptr;
    }
    return p;
}

void drop_all() {
    for (Stream *s : g_streams) {
        s->done += s->q.size();
        s->q.clear();
    }
    g_legacy_stream.done += g_legacy_stream.q.size();
    g_legacy_stream.q.clear();
}

// Runs stream s up to (and including) the op of sequence number upto.
cudaError_t run_stream(Stream *s, uint64_t upto) {
    while (s->done < upto && !s->q.empty()) {
        if (g_sticky != cudaSuccess) {
            drop_all();
            return g_sticky;
        }
        Op op = std::move(s->q.front());
        s->q.pop_front();
        for (auto &d : op.deps)
            if (d.first != s) {
                const cudaError_t e = run_stream(d.first, d.second);
                if (e != cudaSuccess) return e;
            }
        const cudaError_t e = op.run ? op.run() : cudaSuccess;
        s->done++;
        if (e != cudaSuccess) {
            g_sticky = e;
            drop_all();
            return e;
        }
    }
    return g_sticky;
}

cudaError_t run_all() {
    cudaError_t e = run_stream(&g_legacy_stream, g_legacy_stream.issued);
    for (Stream *s : g_streams)
        if (e == cudaSuccess && s->cap == cudaStreamCaptureStatusNone) e = run_stream(s, s->issued);
    return e;
}

void invalidate_captures(const char *why) {
    for (Stream *s : g_streams)
        if (s->cap == cudaStreamCaptureStatusActive) {
            s->cap = cudaStreamCaptureStatusInvalidated;
            warn("a stream capture was invalidated: %s", why);
        }
}

bool any_blocking_capture() {
    for (Stream *s : g_streams)
        if (s->cap != cudaStreamCaptureStatusNone && !(s->flags & cudaStreamNonBlocking)) return true;
    return false;
}

// Queues work on s (or records it when s is capturing). `pageable`: the op
// touches pageable host memory (refused inside a capture).
cudaError_t enqueue(Stream *s, std::function<cudaError_t()> fn, const char *what, bool pageable = false) {
    if (g_sticky != cudaSuccess) return g_sticky;
    if (s->cap == cudaStreamCaptureStatusInvalidated) return cudaErrorStreamCaptureInvalidated;
    if (s->cap == cudaStreamCaptureStatusActive) {
        if (pageable) {
            s->cap = cudaStreamCaptureStatusInvalidated;
            warn("%s with pageable host memory cannot be captured into a graph", what);
            return cudaErrorStreamCaptureUnsupported;
        }
        s->graph->nodes.emplace_back(std::move(fn), what);
        return cudaSuccess;
    }
    if (s->legacy && g_capturing && any_blocking_capture()) {
        invalidate_captures("work queued on the legacy default stream");
        return cudaErrorStreamCaptureImplicit;
    }
    Op op{std::move(fn), what, {}};
    // The legacy stream waits for every blocking stream and they wait for it.
    if (s->legacy) {
        for (Stream *o : g_streams)
            if (!(o->flags & cudaStreamNonBlocking) && o->issued > o->done) op.deps.emplace_back(o, o->issued);
    } else if (!(s->flags & cudaStreamNonBlocking) && g_legacy_stream.issued > g_legacy_stream.done) {
        op.deps.emplace_back(&g_legacy_stream, g_legacy_stream.issued);
    }
    s->q.push_back(std::move(op));
    s->issued++;
    return cudaSuccess;
}

// Waits for s (refused inside a capture of s).
cudaError_t sync_stream(Stream *s) {
    if (s->cap != cudaStreamCaptureStatusNone) {
        s->cap = cudaStreamCaptureStatusInvalidated;
        return cudaErrorStreamCaptureUnsupported;
    }
    if (s->legacy && g_capturing && any_blocking_capture()) {
        invalidate_captures("a wait on the legacy default stream");
        return cudaErrorStreamCaptureImplicit;
    }
    return run_stream(s, s->issued);
}

} // namespace

// Used by the emulated libraries (blas.cpp): queue host work on a stream.
cudaError_t enqueue_host_op(cudaStream_t stream, const char *what, std::function<cudaError_t()> fn) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return err;
    return enqueue(s, std::move(fn), what);
}

// ---- launches -------------------------------------------------------------------------------------

cudaError_t enqueue_launch(const LaunchConfig &cfg, std::shared_ptr<const LaunchBody> body) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (g_sticky != cudaSuccess) return ret(g_sticky);
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(cfg.stream, &err);
    if (!s) return ret(err);
    const dim3 g = cfg.grid, b = cfg.block, c = cfg.cluster;
    const uint64_t threads = (uint64_t)b.x * b.y * b.z;
    if (!b.x || !b.y || !b.z || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024 || !g.x || !g.y || !g.z ||
        g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
        warn("launch of %s at %s: grid (%u,%u,%u) / block (%u,%u,%u) out of range", cfg.name, where(cfg.loc).c_str(), g.x,
             g.y, g.z, b.x, b.y, b.z);
        return ret(cudaErrorInvalidConfiguration);
    }
    const unsigned cs = c.x * c.y * c.z;
    if (cs > 1) {
        const KernelAttrs &ka = kernel_attrs(cfg.func);
        if (device().cc_major < 9 || !c.x || !c.y || !c.z || g.x % c.x || g.y % c.y || g.z % c.z ||
            cs > (ka.non_portable_cluster ? 16u : 8u)) {
            warn("launch of %s: cluster (%u,%u,%u) invalid for grid (%u,%u,%u) on compute capability %d.%d%s", cfg.name,
                 c.x, c.y, c.z, g.x, g.y, g.z, device().cc_major, device().cc_minor,
                 cs > 8 && !ka.non_portable_cluster ? " (more than 8 blocks needs cudaFuncAttributeNonPortableClusterSizeAllowed)" : "");
            return ret(cudaErrorInvalidClusterSize);
        }
    }
    const KernelAttrs &ka = kernel_attrs(cfg.func);
    if (cfg.smem > (size_t)ka.max_dyn_smem || cfg.smem > device().smem_optin()) {
        warn("launch of %s at %s: %zu bytes of dynamic shared memory; the kernel allows %d (cudaFuncSetAttribute "
             "MaxDynamicSharedMemorySize), the device %zu",
             cfg.name, where(cfg.loc).c_str(), cfg.smem, ka.max_dyn_smem, device().smem_optin());
        return ret(cudaErrorInvalidValue);
    }
    auto run = [cfg, body]() -> cudaError_t {
        Launch L;
        L.cfg = cfg;
        L.body = body;
        const cudaError_t e = execute_launch(L);
        {
            KernelAttrs &a = kernel_attrs(cfg.func);
            a.static_smem = std::max(a.static_smem, L.static_smem.load());
        }
        check_canaries(("kernel " + std::string(cfg.name)).c_str());
        return e != cudaSuccess ? e : g_sticky;
    };
    return ret(enqueue(s, std::move(run), cfg.name));
}

} // namespace mf_emu

// =====================================================================================================
// The C API
// =====================================================================================================

using namespace mf_emu;

#define MF_EMU_API_LOCK std::lock_guard<std::recursive_mutex> mf_emu_lk_(g_mu)
#define MF_EMU_STICKY                                                                                        \
    do {                                                                                                     \
        if (g_sticky != cudaSuccess) return ret(g_sticky);                                                   \
    } while (0)

extern "C" {

// ---- errors, device ----------------------------------------------------------------------------

cudaError_t cudaGetLastError(void) {
    MF_EMU_API_LOCK;
    const cudaError_t e = g_sticky != cudaSuccess ? g_sticky : t_last;
    t_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) {
    MF_EMU_API_LOCK;
    return g_sticky != cudaSuccess ? g_sticky : t_last;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define N(x) case x: return #x;
        N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorInitializationError)
        N(cudaErrorInvalidConfiguration) N(cudaErrorInvalidDevicePointer) N(cudaErrorInvalidMemcpyDirection)
        N(cudaErrorInvalidDeviceFunction) N(cudaErrorNoDevice) N(cudaErrorInvalidDevice) N(cudaErrorInvalidKernelImage)
        N(cudaErrorNoKernelImageForDevice) N(cudaErrorECCUncorrectable) N(cudaErrorUnsupportedPtxVersion)
        N(cudaErrorInvalidResourceHandle) N(cudaErrorIllegalState) N(cudaErrorNotReady) N(cudaErrorIllegalAddress)
        N(cudaErrorLaunchOutOfResources) N(cudaErrorLaunchTimeout) N(cudaErrorAssert) N(cudaErrorHardwareStackError)
        N(cudaErrorIllegalInstruction) N(cudaErrorMisalignedAddress) N(cudaErrorInvalidAddressSpace)
        N(cudaErrorInvalidPc) N(cudaErrorLaunchFailure) N(cudaErrorNotPermitted) N(cudaErrorNotSupported)
        N(cudaErrorStreamCaptureUnsupported) N(cudaErrorStreamCaptureInvalidated) N(cudaErrorStreamCaptureUnmatched)
        N(cudaErrorStreamCaptureImplicit) N(cudaErrorCapturedEvent) N(cudaErrorStreamCaptureWrongThread)
        N(cudaErrorInvalidClusterSize) N(cudaErrorUnknown)
#undef N
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchTimeout: return "the launch timed out and was terminated (emulator: deadlock)";
    case cudaErrorIllegalInstruction: return "an illegal instruction was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorInvalidAddressSpace: return "operation not supported on global/shared address space";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorInvalidClusterSize: return "invalid cluster size";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    default: return cudaGetErrorName(e);
    }
}

// MF_EMU_DEVICES=0: the machine has no device, as without a GPU (a CPU-only
// test pass in an emulation build); anything else: one.
cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return ret(cudaErrorInvalidValue);
    static const bool none = [] {
        const char *s = getenv("MF_EMU_DEVICES");
        return s && !strcmp(s, "0");
    }();
    *count = none ? 0 : 1;
    return none ? ret(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev) {
    if (!dev) return ret(cudaErrorInvalidValue);
    *dev = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : ret(cudaErrorInvalidDevice); }

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int dev) {
    if (!v) return ret(cudaErrorInvalidValue);
    if (dev != 0) return ret(cudaErrorInvalidDevice);
    const Device &d = device();
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY: *v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *v = 64; break;
    case cudaDevAttrMaxGridDimX: *v = 0x7fffffff; break;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 << 10; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMaxRegistersPerBlock: *v = 65536; break;
    case cudaDevAttrMultiProcessorCount: *v = d.sms; break;
    case cudaDevAttrL2CacheSize: *v = d.l2_bytes(); break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
    case cudaDevAttrComputeCapabilityMajor: *v = d.cc_major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = d.cc_minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)d.smem_per_sm(); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)d.smem_optin(); break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = 32; break;
    default: return ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev) {
    if (!p) return ret(cudaErrorInvalidValue);
    if (dev != 0) return ret(cudaErrorInvalidDevice);
    const Device &d = device();
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "minfer CPU emulator (sm_%d, %d SMs)", d.cc(), d.sms);
    p->totalGlobalMem = mem_limit();
    p->sharedMemPerBlock = 48 << 10;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = d.cc_major, p->minor = d.cc_minor;
    p->multiProcessorCount = d.sms;
    p->l2CacheSize = d.l2_bytes();
    p->maxThreadsPerMultiProcessor = 2048;
    p->sharedMemPerMultiprocessor = d.smem_per_sm();
    p->sharedMemPerBlockOptin = d.smem_optin();
    p->maxBlocksPerMultiProcessor = 32;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (g_capturing && any_blocking_capture()) {
        invalidate_captures("cudaDeviceSynchronize");
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    return ret(run_all());
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return ret(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return ret(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (!free_b || !total_b) return ret(cudaErrorInvalidValue);
    *total_b = mem_limit();
    *free_b = mem_limit() - std::min(mem_limit(), g_allocated);
    return cudaSuccess;
}

// ---- memory ---------------------------------------------------------------------------------------

cudaError_t cudaMalloc(void **ptr, size_t size) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (!ptr) return ret(cudaErrorInvalidValue);
    *ptr = nullptr;
    for (Stream *s : g_streams)
        if (s->cap == cudaStreamCaptureStatusActive && s->cap_mode == cudaStreamCaptureModeGlobal) {
            invalidate_captures("cudaMalloc during a global-mode capture");
            return ret(cudaErrorStreamCaptureUnsupported);
        }
    if (size > mem_limit() - std::min(mem_limit(), g_allocated)) return ret(cudaErrorMemoryAllocation);
    const size_t body = (size + 255) / 256 * 256;
    char *raw = static_cast<char *>(aligned_alloc(256, body + 2 * kCanary));
    if (!raw) return ret(cudaErrorMemoryAllocation);
    char *user = raw + kCanary;
    memset(user, kPoison, body);
    canary_set(raw, true);
    canary_set(user + size, true);
#ifdef MF_EMU_ASAN
    if (body > size) ASAN_POISON_MEMORY_REGION(user + size + kCanary, body - size);
#endif
    g_allocs[(uintptr_t)user] = Alloc{size, raw};
    g_allocated += size;
    *ptr = user;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
    MF_EMU_API_LOCK;
    if (!ptr) return cudaSuccess;
    auto it = g_allocs.find((uintptr_t)ptr);
    if (it == g_allocs.end()) {
        warn("cudaFree(%p): not the start of a live device allocation", ptr);
        return ret(cudaErrorInvalidValue);
    }
    // cudaFree waits for the device (not for streams being captured).
    cudaError_t e = run_stream(&g_legacy_stream, g_legacy_stream.issued);
    for (Stream *s : g_streams)
        if (e == cudaSuccess && s->cap == cudaStreamCaptureStatusNone) e = run_stream(s, s->issued);
    it = g_allocs.find((uintptr_t)ptr);
    const Alloc a = it->second;
    check_canaries("a queued operation");
    g_allocs.erase(it);
    g_allocated -= a.size;
#ifdef MF_EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(a.raw, (a.size + 255) / 256 * 256 + 2 * kCanary);
#endif
    free(a.raw);
    return ret(e != cudaSuccess ? e : g_sticky);
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (!ptr) return ret(cudaErrorInvalidValue);
    void *p = aligned_alloc(256, (size + 255) / 256 * 256 + 256);
    if (!p) {
        *ptr = nullptr;
        return ret(cudaErrorMemoryAllocation);
    }
    g_pinned[(uintptr_t)p] = size;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void *ptr) {
    MF_EMU_API_LOCK;
    if (!ptr) return cudaSuccess;
    auto it = g_pinned.find((uintptr_t)ptr);
    if (it == g_pinned.end()) return ret(cudaErrorInvalidValue);
    const cudaError_t e = run_all(); // like cudaFree, it waits for the device
    g_pinned.erase(it);
    free(ptr);
    return ret(e);
}

namespace {

// Classifies a copy; refuses device ranges outside one allocation and
// pointers on the wrong side of the kind.
cudaError_t copy_check(void *dst, const void *src, size_t n, cudaMemcpyKind kind, bool *d_dev, bool *s_dev) {
    const bool dd = find_alloc(dst, nullptr) != nullptr, sd = find_alloc(src, nullptr) != nullptr;
    bool want_d = dd, want_s = sd;
    switch (kind) {
    case cudaMemcpyHostToHost: want_d = want_s = false; break;
    case cudaMemcpyHostToDevice: want_d = true, want_s = false; break;
    case cudaMemcpyDeviceToHost: want_d = false, want_s = true; break;
    case cudaMemcpyDeviceToDevice: want_d = want_s = true; break;
    case cudaMemcpyDefault: break;
    default: return cudaErrorInvalidMemcpyDirection;
    }
    if (want_d != dd || want_s != sd) {
        warn("cudaMemcpy kind %d: dst %p is %s memory, src %p is %s memory", (int)kind, dst, dd ? "device" : "host", src,
             sd ? "device" : "host");
        return cudaErrorInvalidValue;
    }
    if ((dd && !is_device_range(dst, n)) || (sd && !is_device_range(src, n))) {
        warn("cudaMemcpy of %zu bytes: the %s range runs past its allocation", n, dd && !is_device_range(dst, n) ? "destination" : "source");
        return cudaErrorInvalidValue;
    }
    *d_dev = dd, *s_dev = sd;
    return cudaSuccess;
}

cudaError_t memcpy_async(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
    MF_EMU_STICKY;
    if (n == 0) return cudaSuccess;
    if (!dst || !src) return ret(cudaErrorInvalidValue);
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return ret(err);
    bool dd = false, sd = false;
    if ((err = copy_check(dst, src, n, kind, &dd, &sd)) != cudaSuccess) return ret(err);
    const bool src_pageable = !sd && !is_pinned(src, n), dst_pageable = !dd && !is_pinned(dst, n);
    std::function<cudaError_t()> fn;
    if (src_pageable && !sync) { // staged now: the caller may reuse its buffer at once
        auto staged = std::make_shared<std::vector<char>>(static_cast<const char *>(src), static_cast<const char *>(src) + n);
        fn = [dst, staged, n]() {
            memcpy(dst, staged->data(), n);
            return cudaSuccess;
        };
    } else {
        fn = [dst, src, n]() {
            memmove(dst, src, n);
            return cudaSuccess;
        };
    }
    err = enqueue(s, std::move(fn), "cudaMemcpyAsync", src_pageable || dst_pageable);
    if (err != cudaSuccess) return ret(err);
    // To pageable memory (and every synchronous copy): done before returning.
    if (sync || dst_pageable) {
        if (s->cap != cudaStreamCaptureStatusNone) return cudaSuccess;
        return ret(run_stream(s, s->issued));
    }
    return cudaSuccess;
}

cudaError_t memset_async(void *dst, int v, size_t n, cudaStream_t stream) {
    MF_EMU_STICKY;
    if (n == 0) return cudaSuccess;
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return ret(err);
    if (!is_device_range(dst, n)) {
        warn("cudaMemset(%p, %zu bytes): not inside one device allocation", dst, n);
        return ret(cudaErrorInvalidValue);
    }
    return ret(enqueue(s, [dst, v, n]() {
        memset(dst, v, n);
        return cudaSuccess;
    }, "cudaMemsetAsync"));
}

} // namespace

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    MF_EMU_API_LOCK;
    return memcpy_async(dst, src, n, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    MF_EMU_API_LOCK;
    return memcpy_async(dst, src, n, kind, s, false);
}

cudaError_t cudaMemset(void *dst, int v, size_t n) {
    MF_EMU_API_LOCK;
    return memset_async(dst, v, n, nullptr);
}

cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s) {
    MF_EMU_API_LOCK;
    return memset_async(dst, v, n, s);
}

// ---- streams, events ----------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (!stream || (flags & ~1u)) return ret(cudaErrorInvalidValue);
    Stream *s = new Stream();
    s->flags = flags;
    g_streams.insert(s);
    *stream = reinterpret_cast<cudaStream_t>(s);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    MF_EMU_API_LOCK;
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s || s->legacy) return ret(cudaErrorInvalidResourceHandle);
    if (s->cap != cudaStreamCaptureStatusNone) {
        delete s->graph;
        g_capturing--;
    } else {
        err = run_stream(s, s->issued); // queued work still runs
    }
    g_streams.erase(s);
    for (Stream *o : g_streams)
        for (Op &op : o->q)
            op.deps.erase(std::remove_if(op.deps.begin(), op.deps.end(), [&](auto &d) { return d.first == s; }),
                          op.deps.end());
    for (Event *e : g_events)
        if (e->stream == s) e->stream = nullptr;
    delete s;
    return ret(err);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return ret(err);
    return ret(sync_stream(s));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int *dev) {
    MF_EMU_API_LOCK;
    cudaError_t err = cudaSuccess;
    if (!stream_of(stream, &err)) return ret(err);
    if (!dev) return ret(cudaErrorInvalidValue);
    *dev = 0;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (!event || (flags & ~3u)) return ret(cudaErrorInvalidValue);
    Event *e = new Event();
    e->flags = flags;
    g_events.insert(e);
    *event = reinterpret_cast<cudaEvent_t>(e);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

static Event *event_of(cudaEvent_t ev) {
    Event *e = reinterpret_cast<Event *>(ev);
    return g_events.count(e) ? e : nullptr;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    MF_EMU_API_LOCK;
    Event *e = event_of(ev);
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    g_events.erase(e); // a queued record of it finds it gone (event_of) and does nothing
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t stream) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    Event *e = event_of(ev);
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return ret(err);
    e->captured = s->cap != cudaStreamCaptureStatusNone;
    e->t = -1;
    err = enqueue(s, [ev]() {
        if (Event *x = event_of(ev)) x->t = now_ms();
        return cudaSuccess;
    }, "cudaEventRecord");
    if (err != cudaSuccess) return ret(err);
    e->recorded = true;
    e->stream = s;
    e->seq = s->issued;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    Event *e = event_of(ev);
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    if (e->captured) return ret(cudaErrorStreamCaptureUnsupported);
    if (!e->recorded || !e->stream) return cudaSuccess;
    return ret(run_stream(e->stream, e->seq));
}

cudaError_t cudaEventQuery(cudaEvent_t ev) { return cudaEventSynchronize(ev); }

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    Event *x = event_of(a), *y = event_of(b);
    if (!ms || !x || !y) return ret(!ms ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
    if ((x->flags | y->flags) & cudaEventDisableTiming) return ret(cudaErrorInvalidResourceHandle);
    if (x->t < 0 || y->t < 0) return ret(cudaErrorNotReady);
    *ms = (float)(y->t - x->t);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t ev, unsigned int flags) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    Event *e = event_of(ev);
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    if (flags) return ret(cudaErrorInvalidValue);
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return ret(err);
    if (!e->recorded || !e->stream) return cudaSuccess; // never recorded: nothing to wait for
    if (e->captured && s->cap == cudaStreamCaptureStatusNone) {
        warn("cudaStreamWaitEvent on an event recorded inside a capture (joining a capture is not emulated)");
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (s->cap != cudaStreamCaptureStatusNone) return cudaSuccess; // a dependency inside the graph: its order already
    err = enqueue(s, nullptr, "cudaStreamWaitEvent");
    if (err == cudaSuccess && e->stream != s) s->q.back().deps.emplace_back(e->stream, e->seq);
    return ret(err);
}

// ---- graphs -------------------------------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return ret(err);
    if (s->legacy) return ret(cudaErrorStreamCaptureUnsupported);
    if (s->cap != cudaStreamCaptureStatusNone) return ret(cudaErrorIllegalState);
    if (mode > cudaStreamCaptureModeRelaxed) return ret(cudaErrorInvalidValue);
    // Work queued before the capture is not part of the graph: it runs first.
    if ((err = run_stream(s, s->issued)) != cudaSuccess) return ret(err);
    s->cap = cudaStreamCaptureStatusActive;
    s->cap_mode = mode;
    s->graph = new Graph();
    g_capturing++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    MF_EMU_API_LOCK;
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return ret(err);
    if (!graph) return ret(cudaErrorInvalidValue);
    *graph = nullptr;
    if (s->cap == cudaStreamCaptureStatusNone) return ret(cudaErrorIllegalState);
    const bool ok = s->cap == cudaStreamCaptureStatusActive;
    Graph *g = s->graph;
    s->graph = nullptr;
    s->cap = cudaStreamCaptureStatusNone;
    g_capturing--;
    if (!ok) {
        delete g;
        return ret(cudaErrorStreamCaptureInvalidated);
    }
    g_graphs.insert(g);
    *graph = reinterpret_cast<cudaGraph_t>(g);
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *st) {
    MF_EMU_API_LOCK;
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return ret(err);
    if (!st) return ret(cudaErrorInvalidValue);
    if (s->legacy && g_capturing && any_blocking_capture()) return ret(cudaErrorStreamCaptureImplicit);
    *st = s->cap;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    Graph *g = reinterpret_cast<Graph *>(graph);
    if (!exec || !g_graphs.count(g) || flags) return ret(cudaErrorInvalidValue);
    Graph *x = new Graph(*g); // an executable graph: a snapshot of the nodes
    g_graphs.insert(x);
    *exec = reinterpret_cast<cudaGraphExec_t>(x);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    Graph *g = reinterpret_cast<Graph *>(exec);
    if (!g_graphs.count(g)) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t err = cudaSuccess;
    Stream *s = stream_of(stream, &err);
    if (!s) return ret(err);
    if (s->cap != cudaStreamCaptureStatusNone) return ret(cudaErrorStreamCaptureUnsupported);
    auto nodes = std::make_shared<std::vector<std::pair<std::function<cudaError_t()>, const char *>>>(g->nodes);
    return ret(enqueue(s, [nodes]() {
        for (auto &n : *nodes) {
            const cudaError_t e = n.first();
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }, "cudaGraphLaunch"));
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    MF_EMU_API_LOCK;
    Graph *g = reinterpret_cast<Graph *>(graph);
    if (!g_graphs.erase(g)) return ret(cudaErrorInvalidValue);
    delete g;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { return cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(exec)); }

// ---- kernels --------------------------------------------------------------------------------------------

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *func) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (!a) return ret(cudaErrorInvalidValue);
    if (!func) return ret(cudaErrorInvalidDeviceFunction);
    const KernelAttrs &k = kernel_attrs(func);
    memset(a, 0, sizeof *a);
    a->sharedSizeBytes = k.static_smem;
    a->maxThreadsPerBlock = 1024;
    a->numRegs = 0; // unknown: the emulator runs C++, not SASS
    a->ptxVersion = a->binaryVersion = device().cc();
    a->maxDynamicSharedSizeBytes = k.max_dyn_smem;
    a->preferredShmemCarveout = k.carveout;
    a->nonPortableClusterSizeAllowed = k.non_portable_cluster;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (!func) return ret(cudaErrorInvalidDeviceFunction);
    KernelAttrs &k = kernel_attrs(func);
    switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
        if (value < 0 || (size_t)value + k.static_smem > device().smem_optin()) return ret(cudaErrorInvalidValue);
        k.max_dyn_smem = value;
        return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
        if (value < -1 || value > 100) return ret(cudaErrorInvalidValue);
        k.carveout = value;
        return cudaSuccess;
    case cudaFuncAttributeNonPortableClusterSizeAllowed:
        if (device().cc_major < 9) return ret(cudaErrorNotSupported);
        if (value != 0 && value != 1) return ret(cudaErrorInvalidValue);
        k.non_portable_cluster = value != 0;
        return cudaSuccess;
    default: return ret(cudaErrorInvalidValue);
    }
}

static int blocks_per_sm(const void *func, int threads, size_t dyn) {
    const KernelAttrs &k = kernel_attrs(func);
    if (dyn > (size_t)k.max_dyn_smem) return 0;
    const int warps = (threads + 31) / 32;
    int n = std::min(64 / warps, 32);                     // 64 warps (2048 threads) per SM
    const size_t per_block = dyn + k.static_smem + 1024; // + the 1 KB each block reserves
    n = std::min<int>(n, (int)(device().smem_per_sm() / per_block));
    return n; // registers are not known: assumed to fit
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *func, int threads, size_t dyn) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (!n || threads <= 0 || threads > 1024) return ret(cudaErrorInvalidValue);
    if (!func) return ret(cudaErrorInvalidDeviceFunction);
    *n = blocks_per_sm(func, threads, dyn);
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveClusters(int *n, const void *func, const cudaLaunchConfig_t *cfg) {
    MF_EMU_API_LOCK;
    MF_EMU_STICKY;
    if (!n || !cfg) return ret(cudaErrorInvalidValue);
    if (!func) return ret(cudaErrorInvalidDeviceFunction);
    unsigned cx = 1, cy = 1, cz = 1;
    for (unsigned i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == cudaLaunchAttributeClusterDimension)
            cx = cfg->attrs[i].val.clusterDim.x, cy = cfg->attrs[i].val.clusterDim.y, cz = cfg->attrs[i].val.clusterDim.z;
    const unsigned cs = cx * cy * cz;
    if (device().cc_major < 9) return ret(cudaErrorNotSupported);
    if (cs < 1 || cs > (kernel_attrs(func).non_portable_cluster ? 16u : 8u)) return ret(cudaErrorInvalidClusterSize);
    const unsigned threads = cfg->blockDim.x * cfg->blockDim.y * cfg->blockDim.z;
    if (threads < 1 || threads > 1024) return ret(cudaErrorInvalidValue);
    // A cluster runs inside one GPC: H100-like, 8 GPCs sharing the SMs.
    const int gpcs = 8, per_gpc = device().sms / gpcs;
    const int b = blocks_per_sm(func, (int)threads, cfg->dynamicSmemBytes);
    *n = gpcs * (per_gpc * b / (int)cs);
    return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **func, unsigned int version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult *status) {
    if (!symbol || !func) return ret(cudaErrorInvalidValue);
    (void)version, (void)flags;
    *func = nullptr;
    if (status) *status = cudaDriverEntryPointSymbolNotFound;
    if (!strcmp(symbol, "cuTensorMapEncodeTiled")) {
        *func = reinterpret_cast<void *>(&cuTensorMapEncodeTiled);
        if (status) *status = cudaDriverEntryPointSuccess;
    }
    return cudaSuccess;
}

// ---- the emulator's controls -------------------------------------------------------------------------

cudaError_t mf_emu_set_device(int cc_major, int cc_minor, int sm_count) {
    MF_EMU_API_LOCK;
    if (!((cc_major == 9 || cc_major == 8) && cc_minor == 0) || sm_count < 1 || sm_count > 1024)
        return cudaErrorInvalidValue;
    Device &d = device();
    d.cc_major = cc_major, d.cc_minor = cc_minor, d.sms = sm_count;
    return cudaSuccess;
}

const char *mf_emu_last_report(void) {
    static thread_local std::string r;
    r = last_report();
    return r.c_str();
}

void mf_emu_reset(void) {
    MF_EMU_API_LOCK;
    drop_all();
    g_sticky = cudaSuccess;
    t_last = cudaSuccess;
    clear_report();
}

} // extern "C"
