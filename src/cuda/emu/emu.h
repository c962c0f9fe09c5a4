// CPU emulator of the CUDA backend: the device-side interface that the
// emulated CUDA headers (include/) and the emulated bodies of src/cuda/ptx.cuh
// call. Kernel source never calls it directly.
//
// Execution model (docs/notes/emulator.md): a launch runs one cluster of
// blocks at a time per OS thread; the threads of those blocks are fibers that
// switch only where a GPU thread may wait for another one (__syncthreads,
// __syncwarp, warp collectives, mbarrier waits, cluster barriers), in a seeded
// random order (MF_EMU_SEED). Anything that would hang or is undefined on the
// GPU (deadlock, threads at different barriers, a lane that left before a
// collective, an uninitialised mbarrier, ...) is reported with the source
// location and fails the launch with a sticky error, as a trap would.
#ifndef MF_EMU_EMU_H
#define MF_EMU_EMU_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

namespace mf_emu {

// A source location, taken at the call site by default arguments.
struct Loc {
    const char *file;
    int line;
    const char *func;
    static constexpr Loc here(const char *f = __builtin_FILE(), int l = __builtin_LINE(),
                              const char *fn = __builtin_FUNCTION()) {
        return Loc{f, l, fn};
    }
};
bool same_loc(const Loc &a, const Loc &b);

// ---- the calling kernel thread ------------------------------------------------------------

struct ThreadView {
    uint3 tid, bid;
    dim3 bdim, gdim;
    unsigned lin; // linear thread index in the block: warp lin / 32, lane lin % 32
};
struct Tls {
    ThreadView *view; // the running fiber's, NULL outside a kernel
};
extern __thread Tls tls __attribute__((tls_model("initial-exec")));
[[noreturn]] void outside_kernel(const char *what);
inline ThreadView &view() {
    if (__builtin_expect(!tls.view, 0)) outside_kernel("threadIdx / blockIdx / a device intrinsic");
    return *tls.view;
}

// Fails the running launch: prints the report (kernel, block, thread, loc)
// and never returns to the caller (the block is abandoned). err: the sticky
// error the host sees (cudaErrorLaunchFailure, cudaErrorIllegalAddress, ...).
[[noreturn]] void kernel_fail(Loc loc, cudaError_t err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// ---- barriers and warp collectives ----------------------------------------------------------

void syncthreads(Loc loc);
void syncwarp(unsigned mask, Loc loc);
void cluster_sync(Loc loc);

enum CollKind : int {
    kCollSyncwarp,
    kCollShfl,
    kCollVote,
    kCollMatch,
    kCollLdmatrix,
    kCollMma,
    kCollSetmaxnreg,
    kCollCount
};
// Runs once, in the last lane of `mask` to arrive, over every lane's args.
typedef void (*CollFn)(void *const *args, unsigned mask);
// Every lane of `mask` calls it with a pointer to its own in/out struct;
// returns when fn has run. aligned: a .aligned instruction (every lane at the
// same source location). Reports lanes that exited, masks that disagree,
// lanes at different collectives.
void warp_collective(CollKind kind, unsigned mask, void *args, CollFn fn, bool aligned, Loc loc);
// The same over the 128 threads of a warpgroup (threads 128 w ... 128 w + 127).
void warpgroup_collective(void *args, CollFn fn, Loc loc);

enum ShflMode : int { kShflIdx, kShflUp, kShflDown, kShflXor };
uint64_t shfl(ShflMode mode, unsigned mask, uint64_t value, int param, int width, Loc loc);
enum VoteMode : int { kVoteBallot, kVoteAny, kVoteAll };
unsigned vote(VoteMode mode, unsigned mask, int pred, Loc loc);
unsigned match_any(unsigned mask, uint64_t value, Loc loc);

// ---- shared memory ----------------------------------------------------------------------------

// One MF_SHARED declaration (a static in the declaring function).
struct SmemSite {
    const char *name, *file;
    int line;
    size_t size, align;
};
void *smem_static(const SmemSite *site);
void *smem_dynamic();
// Generic pointer <-> 32-bit shared address of the running block (cvta).
uint32_t cvta_shared(const void *p, Loc loc);
void *smem_at(uint32_t addr, size_t bytes, size_t align, const char *what, Loc loc);

// Clusters (a launch without them: clusters of one block).
unsigned cluster_rank();
dim3 cluster_dims();
dim3 cluster_index();
void *cluster_map(const void *p, unsigned rank, Loc loc);

// ---- PTX ops (src/cuda/ptx.cuh): emulated bodies ----------------------------------------------

void require_sm90(const char *op, Loc loc); // the emulated device must be compute capability 9.0

void cp_async(uint32_t dst, const void *src, int cp_size, int src_size, Loc loc);
void cp_async_commit(Loc loc);
void cp_async_wait(int n, Loc loc);

void mbar_init(uint32_t bar, uint32_t count, Loc loc);
void mbar_arrive(uint32_t bar, uint32_t tx_bytes, Loc loc); // tx_bytes > 0: arrive.expect_tx
void mbar_arrive_cp_async(uint32_t bar, bool noinc, Loc loc);
bool mbar_try_wait_parity(uint32_t bar, uint32_t parity, Loc loc);

void tma_load(uint32_t dst, const void *tensor_map, int rank, const int32_t *coords, uint32_t bar, Loc loc);

enum MmaType : int { kMmaF16, kMmaBF16 };
void ldmatrix(int num, bool trans, uint32_t *regs, uint32_t addr, Loc loc);
void mma_m16n8k16(MmaType type, float *d, const uint32_t *a, uint32_t b0, uint32_t b1, Loc loc);

void wgmma_fence(Loc loc);
void wgmma_commit(Loc loc);
void wgmma_wait(int n, Loc loc);
// d (64 x n) f32 accumulators of this thread (n / 2 of them); a_regs: the A
// fragment (4 registers) or NULL for A in shared memory (descriptor da).
void wgmma_mma(int n, MmaType type, float *d, const uint32_t *a_regs, uint64_t da, uint64_t db, int scale_d,
               int scale_a, int scale_b, int trans_a, int trans_b, Loc loc);
void setmaxnreg(bool inc, int regs, Loc loc);
uint64_t globaltimer();

// ---- launches ---------------------------------------------------------------------------------

// A launch's kernel call, shared by its fibers (and by graph replays).
struct LaunchBody {
    virtual ~LaunchBody() = default;
    virtual void run() const = 0;
};
template <class... P> struct KernelCall final : LaunchBody {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> args; // converted to the parameter types at launch, as CUDA does
    template <class... A> KernelCall(void (*k)(P...), A &&...a) : kernel(k), args(std::forward<A>(a)...) {}
    void run() const override { std::apply(kernel, args); }
};

struct LaunchConfig {
    const void *func; // identifies the kernel (attributes)
    const char *name;
    Loc loc;
    dim3 grid, block, cluster;
    size_t smem;
    cudaStream_t stream;
};
// Validates the configuration (the error is also the runtime's last error)
// and queues the launch on its stream.
cudaError_t enqueue_launch(const LaunchConfig &cfg, std::shared_ptr<const LaunchBody> body);

template <class... P, class... A>
cudaError_t launch_kernel(void (*kernel)(P...), const char *name, Loc loc, dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launch: wrong number of arguments");
    LaunchConfig cfg{reinterpret_cast<const void *>(kernel), name, loc, grid, block, dim3(1, 1, 1), smem, stream};
    return enqueue_launch(cfg, std::make_shared<KernelCall<P...>>(kernel, std::forward<A>(args)...));
}

} // namespace mf_emu

#endif // MF_EMU_EMU_H
