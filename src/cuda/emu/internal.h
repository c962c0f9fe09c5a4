// CPU emulator: the runtime's internal state, shared by its .cpp files
// (fiber.cpp, exec.cpp, smem.cpp, async.cpp, tma.cpp, mma.cpp, runtime.cpp,
// blas.cpp). Not included by kernel code.
#ifndef MF_EMU_INTERNAL_H
#define MF_EMU_INTERNAL_H

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define MF_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(MF_EMU_TSAN)
#define MF_EMU_TSAN 1
#endif

namespace mf_emu {

constexpr uint8_t kPoison = 0xff;          // uninitialised shared / device memory: NaN in every float type
constexpr uint32_t kSmemDynBase = 0x410;   // shared address of the dynamic region (16-aligned, not 128-aligned)
constexpr size_t kStaticSmemMax = 48 << 10; // CUDA's limit on static shared memory per block

// ---- the emulated device ----------------------------------------------------------------------

struct Device {
    int cc_major = 9, cc_minor = 0;
    int sms = 132;
    int cc() const { return 10 * cc_major + cc_minor; }
    size_t smem_optin() const { return cc_major >= 9 ? 232448 : 166912; }  // 227 / 163 KB per block
    size_t smem_per_sm() const { return cc_major >= 9 ? 233472 : 167936; } // 228 / 164 KB
    int l2_bytes() const { return cc_major >= 9 ? 50 << 20 : 40 << 20; }
};
Device &device(); // read from MF_EMU_CC / MF_EMU_SMS on first use

// Options from the environment, read once.
struct Options {
    uint64_t seed = 1;   // MF_EMU_SEED: order of runnable fibers (0: thread order)
    int threads = 1;     // MF_EMU_THREADS: OS threads running clusters of a launch
    bool trace = false;  // MF_EMU_TRACE=1: one line per kernel launch
    bool abort_on_fail = false; // MF_EMU_ABORT=1: abort() at a kernel failure (for a debugger)
    size_t stack_kb = 256;      // MF_EMU_STACK_KB: stack of each kernel thread (virtual)
};
const Options &options();

// ---- kernels and launches ---------------------------------------------------------------------

struct KernelAttrs {
    int max_dyn_smem = 48 << 10; // cudaFuncAttributeMaxDynamicSharedMemorySize
    bool non_portable_cluster = false;
    int carveout = -1;
    size_t static_smem = 0;      // the most any block used so far
};
KernelAttrs &kernel_attrs(const void *func); // under the runtime lock

struct Launch {
    LaunchConfig cfg;
    std::shared_ptr<const LaunchBody> body;
    uint64_t seq = 0; // launches executed in this process: seeds the fiber order
    std::atomic<bool> failed{false};
    cudaError_t fail_err = cudaSuccess; // set with `failed` (first failure wins)
    std::atomic<size_t> static_smem{0};
    std::atomic<uint64_t> switches{0};
};
// Records a kernel failure: the report (also printed) and the sticky error.
void launch_failed(Launch &l, cudaError_t err, const std::string &report);
std::string last_report();
void clear_report();
// Runs every block of the launch (called from stream execution). Returns
// cudaSuccess or the sticky error of a kernel failure (report kept).
cudaError_t execute_launch(Launch &launch);

// ---- fibers -------------------------------------------------------------------------------------

struct Block;
struct Group;

enum FiberState : uint8_t { kFiberRun, kFiberWait, kFiberDone };
enum WaitKind : uint8_t { kWaitNone, kWaitBar, kWaitCluster, kWaitWarp, kWaitWarpgroup, kWaitMbar };

struct CpCopy {            // one cp.async in flight (Group::cps; index-stable until the group ends)
    void *dst;
    const void *src;
    int cp_size, src_size;
    uint64_t group;        // the issuing thread's commit-group index
    uint8_t refs;          // the thread's list + an mbarrier's deferred list
    bool landed;
    Loc loc;
};

struct WgOp;               // mma.cpp: one wgmma.mma_async of a warpgroup
struct WgPending {
    WgOp *op;
    uint64_t group;        // the thread's commit group
};
struct WgThread {          // a thread's wgmma state
    std::vector<WgPending> pending; // issue order
    uint64_t committed = 0;         // commit groups so far
    bool fenced = false;            // wgmma.fence since the last commit_group
};

struct Fiber {
    ThreadView v;          // first: what threadIdx & co read
    void *sp = nullptr;    // saved context
    char *stack = nullptr; // base of the usable stack
    size_t stack_size = 0;
    Block *blk = nullptr;
    Group *grp = nullptr;
    FiberState state = kFiberDone;
    WaitKind wait = kWaitNone;
    Loc wait_loc{};
    uintptr_t wait_obj = 0;  // mbarrier: its address
    uint32_t wait_param = 0; // mbarrier: the parity waited for
    bool started = false;
    std::vector<uint32_t> cp; // cp.async in flight: indices into Group::cps
    uint64_t cp_group = 0;    // commit groups so far
    WgThread wg;
    void *asan_fake = nullptr;
    void *tsan = nullptr;
};

struct WarpColl {          // one pending collective of a warp (disjoint masks may overlap in time)
    unsigned mask = 0, arrived = 0;
    CollKind kind = kCollSyncwarp;
    CollFn fn = nullptr;
    bool aligned = false;
    Loc loc{};
    void *args[32] = {};
};
struct Warp {
    WarpColl coll[4];
    unsigned exited = 0;    // lanes that returned from the kernel
    unsigned lanes = 0;     // lanes that exist
};
struct WarpgroupColl {
    int arrived = 0;
    CollFn fn = nullptr;
    Loc loc{};
    void *args[128] = {};
};

struct Block {
    uint3 idx{};
    unsigned rank = 0;       // in its cluster
    int nthreads = 0, live = 0;
    Fiber *fibers = nullptr; // nthreads of them
    int at_bar = 0;
    Loc bar_loc{};
    std::vector<Warp> warps;
    std::vector<WarpgroupColl> wgs;
    // shared memory
    char *win = nullptr;     // the window (NULL until first use)
    int slot = -1;
    size_t static_used = 0;  // bytes of the static region handed out
};

struct StaticVar {
    const SmemSite *site;
    size_t offset;           // from the start of the static region
};

struct TmaReq {            // a tensor copy whose data lands when its phase is observed
    uint64_t phase;
    char *dst;             // host pointer of the box in the window
    uint32_t dst_addr;     // its shared address (the swizzle follows address bits 4-9)
    unsigned char map[128];
    int rank;
    int32_t coords[5];
    Loc loc;
};
struct MbarSide {          // what the 64-bit mbarrier word cannot hold
    uint64_t completed = 0;                        // phases completed so far
    std::vector<TmaReq> tma;                       // pending tensor copies
    std::vector<std::pair<uint64_t, uint32_t>> cps; // (phase, Group::cps index) of cp.async arrive-on copies
    std::vector<Fiber *> waiters;
};

struct Group {             // one cluster of blocks, run by one OS thread
    Launch *launch = nullptr;
    dim3 cdim{1, 1, 1}, cidx{0, 0, 0};
    std::vector<Block> blocks;
    std::vector<Fiber *> rq;  // runnable
    size_t rq_head = 0;       // FIFO mode (seed 0)
    std::vector<size_t> batches; // rq indices where the fibers released together begin
    uint64_t rng = 0;
    int live = 0;             // unfinished threads of the cluster
    int at_cluster = 0;
    Loc cluster_loc{};
    std::vector<StaticVar> statics;
    size_t static_size = 0;
    std::unordered_map<uintptr_t, MbarSide> mbar;
    std::vector<CpCopy> cps;        // cp.async copies of the group's threads
    std::vector<uint32_t> cps_free; // reusable indices
    std::vector<WgOp *> wgops;      // wgmma ops in flight (freed at the end)
    bool failed = false;
    uint64_t switches = 0;
};

// The OS thread running groups: its scheduler context and reusable memory.
struct Worker {
    void *main_sp = nullptr;
    Group group;
    std::vector<Fiber> fibers;
    std::vector<char *> stacks;
    char *ring = nullptr;     // shared-memory windows (smem.cpp)
    int ring_next = 0;
    void *ring_info = nullptr;
    void *tsan_main = nullptr;
    void *asan_main_fake = nullptr;
    void *main_stack_bottom = nullptr;
    size_t main_stack_size = 0;
    char sync_start, sync_done; // TSan happens-before objects
};
Worker &worker();
extern __thread Fiber *cur; // the running fiber

// fiber.cpp
void fiber_prepare(Worker &w, Fiber &f, size_t stack_bytes);
void fiber_switch(Fiber *from, Fiber *to); // to == NULL: back to the worker's scheduler
void fiber_enter(Worker &w, Fiber *to);     // from the scheduler
void fiber_abandoned(Fiber &f);             // a fiber that will never resume
bool stack_guard_hit(uintptr_t addr);
void worker_init_stack_bounds(Worker &w);

// exec.cpp
void block_yield(); // the running fiber gives way (it stays runnable)
void block_wait();  // the running fiber waits (state set by the caller)
void make_runnable(Fiber *f);
void begin_batch(Group &g); // the fibers made runnable next were released together
Fiber *fiber_of(Block &b, unsigned lin);
// "file:line (function)" in a fixed buffer: kernel_fail's arguments must not
// own heap memory (the failing thread's frames are never unwound).
struct LocText {
    char s[320];
    const char *c_str() const { return s; }
};
LocText where(const Loc &loc);
std::string thread_name(const Fiber *f);

// smem.cpp
char *smem_window(Block &b);
void *smem_try(uint32_t addr, size_t bytes, size_t align); // smem_at's check without the report: NULL if bad
void smem_release(Block &b);
void smem_install_fault_handler();
size_t smem_window_bytes();

// async.cpp, tma.cpp, mma.cpp
void cp_release(Group &g, uint32_t idx);
void mbar_describe(Group &g, uintptr_t addr, char *buf, size_t cap);
void tma_land(Group &g, const TmaReq &r);
void mbar_complete_tx(uint32_t bar, uint32_t bytes, const TmaReq &req, Loc loc);
void wgmma_group_end(Group &g); // frees the ops of a finished / abandoned group

// runtime.cpp
std::mutex &runtime_lock();
// Queues host work on a stream (or records it into a capture): the emulated
// libraries' "kernels" (blas.cpp).
cudaError_t enqueue_host_op(cudaStream_t stream, const char *what, std::function<cudaError_t()> fn);
bool is_device_range(const void *p, size_t bytes); // inside one live cudaMalloc allocation
void check_canaries(const char *after_kernel);     // out-of-bounds writes past allocations

// Sanitizer helpers.
#ifdef MF_EMU_TSAN
extern "C" {
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
}
#define MF_TSAN_RELEASE(p) __tsan_release((void *)(p))
#define MF_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
extern "C" {
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
}
#else
#define MF_TSAN_RELEASE(p) ((void)0)
#define MF_TSAN_ACQUIRE(p) ((void)0)
#endif

// Every entry from kernel code into the emulator: under TSan its accesses
// (queues, vectors growing, other threads' argument structs) are not the
// kernel's, and are ignored for the rest of the call.
struct EntryScope {
#ifdef MF_EMU_TSAN
    EntryScope() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__), AnnotateIgnoreWritesBegin(__FILE__, __LINE__); }
    ~EntryScope() { AnnotateIgnoreWritesEnd(__FILE__, __LINE__), AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
#endif
};
#define MF_EMU_ENTRY [[maybe_unused]] ::mf_emu::EntryScope mf_emu_entry_scope_

// The emulator's own bulk accesses to kernel-visible memory (poison fills,
// landing copies, accumulator snapshots): TSan intercepts memset / memcpy
// even from uninstrumented code, so they are bracketed as ignored; what TSan
// should see, kernel threads do themselves (src/cuda/ptx.cuh).
inline void emu_memset(void *p, int v, size_t n) {
#ifdef MF_EMU_TSAN
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
    memset(p, v, n);
#ifdef MF_EMU_TSAN
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
#endif
}
inline void emu_memcpy(void *d, const void *s, size_t n) {
#ifdef MF_EMU_TSAN
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__), AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
    memcpy(d, s, n);
#ifdef MF_EMU_TSAN
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__), AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

} // namespace mf_emu

#endif // MF_EMU_INTERNAL_H
