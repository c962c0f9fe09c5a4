// CPU emulator: running a launch. The grid's clusters (single blocks without
// clusters) run one at a time per OS thread; the threads of a cluster are
// fibers that run until they must wait for another thread (a barrier, a warp
// collective, an mbarrier), and the next fiber to run is drawn at random from
// the runnable ones (seeded: MF_EMU_SEED, 0 = thread order). Barriers and
// collectives check what the GPU leaves undefined and report it with the
// source location; a state where no thread can continue is a deadlock.
#include <cinttypes>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <unistd.h>

#include "internal.h"

namespace mf_emu {

__thread Tls tls __attribute__((tls_model("initial-exec")));
__thread Fiber *cur;

namespace {
thread_local Worker *t_worker;
std::atomic<uint64_t> g_launch_seq{0};

uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
uint64_t next_rand(uint64_t &s) { // xorshift64
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
}
} // namespace

Worker &worker() {
    if (!t_worker) {
        t_worker = new Worker();
        worker_init_stack_bounds(*t_worker);
        smem_install_fault_handler();
    }
    return *t_worker;
}

const Options &options() {
    static const Options o = [] {
        Options r;
        if (const char *s = getenv("MF_EMU_SEED")) r.seed = strtoull(s, nullptr, 0);
        if (const char *s = getenv("MF_EMU_THREADS")) r.threads = atoi(s) > 0 ? atoi(s) : 1;
        if (const char *s = getenv("MF_EMU_TRACE")) r.trace = *s && strcmp(s, "0") != 0;
        if (const char *s = getenv("MF_EMU_ABORT")) r.abort_on_fail = *s && strcmp(s, "0") != 0;
        if (const char *s = getenv("MF_EMU_STACK_KB")) r.stack_kb = atoi(s) >= 64 ? (size_t)atoi(s) : 64;
#ifdef MF_EMU_TSAN
        r.threads = 1; // TSan follows one OS thread's fibers
#endif
        return r;
    }();
    return o;
}

bool same_loc(const Loc &a, const Loc &b) {
    return a.line == b.line && (a.file == b.file || (a.file && b.file && strcmp(a.file, b.file) == 0));
}

LocText where(const Loc &loc) {
    LocText t;
    const char *f = loc.file ? loc.file : "?";
    if (const char *s = strstr(f, "/src/")) f = s + 1;
    else if (const char *u = strstr(f, "/tests/")) f = u + 1;
    snprintf(t.s, sizeof t.s, "%s:%d (%s)", f, loc.line, loc.func ? loc.func : "?");
    return t;
}

std::string thread_name(const Fiber *f) {
    char buf[160];
    snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u) [warp %u lane %u]", f->v.bid.x, f->v.bid.y,
             f->v.bid.z, f->v.tid.x, f->v.tid.y, f->v.tid.z, f->v.lin >> 5, f->v.lin & 31);
    return buf;
}

void outside_kernel(const char *what) {
    fprintf(stderr, "mf_emu: %s used outside a kernel thread\n", what);
    abort();
}

Fiber *fiber_of(Block &b, unsigned lin) { return &b.fibers[lin]; }

// ---- scheduling ------------------------------------------------------------------------------
//
// The next fiber is drawn at random from the fibers released together most
// recently (the lanes of a warp after a collective, a block after a barrier),
// and one draw in 32 from every runnable fiber: every interleaving stays
// possible, while the lanes of a warp mostly run back to back, their stacks
// in cache (a softmax case with 16-block clusters: 1.05 s of CPU instead of
// 1.6-2.1 s drawing from all every time; noisy shared VM).

void begin_batch(Group &g) {
    if (options().seed && (g.batches.empty() || g.batches.back() != g.rq.size())) g.batches.push_back(g.rq.size());
}

void make_runnable(Fiber *f) {
    f->state = kFiberRun;
    f->wait = kWaitNone;
    f->grp->rq.push_back(f);
}

namespace {

Fiber *pick(Group &g) {
    const size_t n = g.rq.size() - g.rq_head;
    if (n == 0) {
        g.rq.clear(), g.rq_head = 0, g.batches.clear();
        return nullptr;
    }
    Fiber *f;
    if (options().seed == 0) {
        f = g.rq[g.rq_head++];
        if (g.rq_head == g.rq.size()) g.rq.clear(), g.rq_head = 0;
    } else {
        size_t lo = 0;
        if (next_rand(g.rng) & 31) { // the newest batch
            while (!g.batches.empty() && g.batches.back() >= g.rq.size()) g.batches.pop_back();
            lo = g.batches.empty() ? 0 : g.batches.back();
        }
        const size_t j = lo + next_rand(g.rng) % (g.rq.size() - lo);
        f = g.rq[j];
        g.rq[j] = g.rq.back();
        g.rq.pop_back();
    }
    return f;
}

// The running fiber gives the OS thread to the next runnable one (or to the
// scheduler when none is), returning when it is picked again.
void reschedule() {
    Fiber *self = cur;
    Group &g = *self->grp;
    g.switches++;
    Fiber *next = g.failed ? nullptr : pick(g);
    if (next == self) return;
    fiber_switch(self, next);
}

LocText lanes_str(unsigned mask) { // "0-3,7": the fixed buffer of LocText (see where())
    LocText t;
    size_t n = 0;
    t.s[0] = 0;
    for (int l = 0; l < 32;) {
        if (!(mask >> l & 1)) {
            l++;
            continue;
        }
        int e = l;
        while (e + 1 < 32 && (mask >> (e + 1) & 1)) e++;
        n += (size_t)snprintf(t.s + n, sizeof t.s - n, e > l ? "%s%d-%d" : "%s%d", n ? "," : "", l, e);
        l = e + 1;
    }
    if (!n) snprintf(t.s, sizeof t.s, "none");
    return t;
}

const char *coll_name(CollKind k) {
    switch (k) {
    case kCollSyncwarp: return "__syncwarp";
    case kCollShfl: return "a warp shuffle";
    case kCollVote: return "a warp vote (__ballot_sync / __any_sync / __all_sync)";
    case kCollMatch: return "__match_any_sync";
    case kCollLdmatrix: return "ldmatrix";
    case kCollMma: return "mma.sync";
    case kCollSetmaxnreg: return "setmaxnreg";
    default: return "a warp collective";
    }
}

void release_block_barrier(Block &b) {
    begin_batch(*b.fibers[0].grp);
    b.at_bar = 0;
    for (int i = 0; i < b.nthreads; i++)
        if (b.fibers[i].state == kFiberWait && b.fibers[i].wait == kWaitBar) make_runnable(&b.fibers[i]);
}

void release_cluster_barrier(Group &g) {
    begin_batch(g);
    g.at_cluster = 0;
    for (Block &b : g.blocks)
        for (int i = 0; i < b.nthreads; i++)
            if (b.fibers[i].state == kFiberWait && b.fibers[i].wait == kWaitCluster) make_runnable(&b.fibers[i]);
}

} // namespace

void block_yield() {
    make_runnable(cur);
    reschedule();
}

void block_wait() { reschedule(); }

// ---- failures -----------------------------------------------------------------------------------

namespace {
std::mutex g_report_mu;
std::string g_report;
} // namespace

void launch_failed(Launch &l, cudaError_t err, const std::string &report) {
    {
        std::lock_guard<std::mutex> lk(g_report_mu);
        if (!l.failed.load()) {
            l.fail_err = err;
            g_report = report;
        }
        l.failed.store(true);
    }
    fprintf(stderr, "%s\n", report.c_str());
    fflush(stderr);
    if (options().abort_on_fail) abort();
}

std::string last_report() {
    std::lock_guard<std::mutex> lk(g_report_mu);
    return g_report;
}
void clear_report() {
    std::lock_guard<std::mutex> lk(g_report_mu);
    g_report.clear();
}

static std::string launch_desc(const Launch &l) {
    char buf[512];
    snprintf(buf, sizeof buf, "kernel %s (launched at %s, grid (%u,%u,%u), block (%u,%u,%u), cluster (%u,%u,%u))",
             l.cfg.name, where(l.cfg.loc).c_str(), l.cfg.grid.x, l.cfg.grid.y, l.cfg.grid.z, l.cfg.block.x,
             l.cfg.block.y, l.cfg.block.z, l.cfg.cluster.x, l.cfg.cluster.y, l.cfg.cluster.z);
    return buf;
}

void kernel_fail(Loc loc, cudaError_t err, const char *fmt, ...) {
    MF_EMU_ENTRY;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    Fiber *f = cur;
    if (!f) {
        fprintf(stderr, "mf_emu: %s\n  at %s (outside a kernel thread)\n", msg, where(loc).c_str());
        abort();
    }
    Group &g = *f->grp;
    { // destroyed before the switch: this thread's frames are never unwound
        const std::string r = "mf_emu: " + std::string(msg) + "\n  at " + where(loc).c_str() + "\n  in " +
                              launch_desc(*g.launch) + ",\n     " + thread_name(f);
        launch_failed(*g.launch, err, r);
    }
    g.failed = true;
    f->state = kFiberWait; // abandoned
    fiber_switch(f, nullptr);
    abort(); // never resumed
}

// ---- thread exit -----------------------------------------------------------------------------

Fiber *fiber_exit(Fiber *f) {
    MF_EMU_ENTRY;
    Block &b = *f->blk;
    Group &g = *f->grp;
    const unsigned lane = f->v.lin & 31;
    Warp &w = b.warps[f->v.lin >> 5];
    // Collectives waiting for this lane can never complete.
    for (WarpColl &c : w.coll)
        if (c.arrived && (c.mask >> lane & 1) && !(c.arrived >> lane & 1))
            kernel_fail(c.loc, cudaErrorLaunchFailure,
                        "lane %u of warp %u left the kernel while lanes %s wait for it at %s (mask 0x%08x)", lane,
                        f->v.lin >> 5, lanes_str(c.arrived).c_str(), coll_name(c.kind), c.mask);
    if (!b.wgs.empty()) {
        WarpgroupColl &wc = b.wgs[f->v.lin >> 7];
        if (wc.arrived > 0)
            kernel_fail(wc.loc, cudaErrorLaunchFailure,
                        "thread %u left the kernel while %d thread(s) of its warpgroup wait for it at a wgmma",
                        f->v.lin, wc.arrived);
    }
    f->state = kFiberDone;
    w.exited |= 1u << lane;
    b.live--, g.live--;
    for (uint32_t idx : f->cp) cp_release(g, idx); // copies never waited for: they need not land
    f->cp.clear();
    MF_TSAN_RELEASE(&worker().sync_done);
    // Exited threads count as arrived at block and cluster barriers.
    if (b.at_bar > 0 && b.at_bar == b.live) release_block_barrier(b);
    if (g.at_cluster > 0 && g.at_cluster == g.live) release_cluster_barrier(g);
    g.switches++;
    return g.failed ? nullptr : pick(g); // the caller switches (fiber.cpp)
}

// ---- barriers ------------------------------------------------------------------------------------

void syncthreads(Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel("__syncthreads");
    Block &b = *f->blk;
    if (b.at_bar == 0) {
        b.bar_loc = loc;
    } else if (!same_loc(b.bar_loc, loc)) {
        kernel_fail(loc, cudaErrorLaunchFailure,
                    "threads of one block at different __syncthreads: this thread here, %d thread(s) already wait "
                    "at %s",
                    b.at_bar, where(b.bar_loc).c_str());
    }
    MF_TSAN_RELEASE(&b);
    if (++b.at_bar == b.live) {
        release_block_barrier(b);
        block_yield(); // even the last to arrive: who runs next after a barrier is random
    } else {
        f->state = kFiberWait, f->wait = kWaitBar, f->wait_loc = loc;
        block_wait();
    }
    MF_TSAN_ACQUIRE(&b);
}

void cluster_sync(Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel("cluster.sync()");
    Group &g = *f->grp;
    if (g.at_cluster == 0) {
        g.cluster_loc = loc;
    } else if (!same_loc(g.cluster_loc, loc)) {
        kernel_fail(loc, cudaErrorLaunchFailure,
                    "threads of one cluster at different cluster barriers: this thread here, %d thread(s) wait at "
                    "%s",
                    g.at_cluster, where(g.cluster_loc).c_str());
    }
    MF_TSAN_RELEASE(&g);
    if (++g.at_cluster == g.live) {
        release_cluster_barrier(g);
        block_yield();
    } else {
        f->state = kFiberWait, f->wait = kWaitCluster, f->wait_loc = loc;
        block_wait();
    }
    MF_TSAN_ACQUIRE(&g);
}

// ---- warp collectives ----------------------------------------------------------------------------

void warp_collective(CollKind kind, unsigned mask, void *args, CollFn fn, bool aligned, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel(coll_name(kind));
    Block &b = *f->blk;
    const unsigned lane = f->v.lin & 31, bit = 1u << lane;
    Warp &w = b.warps[f->v.lin >> 5];
    if (!(mask & bit))
        kernel_fail(loc, cudaErrorLaunchFailure, "%s: the calling lane %u is not in the mask 0x%08x", coll_name(kind),
                    lane, mask);
    if (mask & ~w.lanes)
        kernel_fail(loc, cudaErrorLaunchFailure,
                    "%s: the mask 0x%08x names lanes %s, which this warp does not have (%d threads per block)",
                    coll_name(kind), mask, lanes_str(mask & ~w.lanes).c_str(), b.nthreads);
    if (mask & w.exited)
        kernel_fail(loc, cudaErrorLaunchFailure, "%s with mask 0x%08x: lane(s) %s of the mask already left the kernel",
                    coll_name(kind), mask, lanes_str(mask & w.exited).c_str());
    WarpColl *c = nullptr;
    for (WarpColl &x : w.coll)
        if (x.arrived && (x.mask & mask)) {
            c = &x;
            break;
        }
    if (c) {
        if (c->mask != mask)
            kernel_fail(loc, cudaErrorLaunchFailure,
                        "%s: lanes disagree on the mask: 0x%08x here, 0x%08x for lanes %s waiting at %s",
                        coll_name(kind), mask, c->mask, lanes_str(c->arrived).c_str(), where(c->loc).c_str());
        if (c->kind != kind || c->fn != fn)
            kernel_fail(loc, cudaErrorLaunchFailure, "lanes of a warp at different collectives: %s here, %s at %s",
                        coll_name(kind), coll_name(c->kind), where(c->loc).c_str());
        if ((aligned || c->aligned) && !same_loc(c->loc, loc))
            kernel_fail(loc, cudaErrorLaunchFailure,
                        "%s (.aligned: every lane must execute the same instruction): lanes %s are at %s",
                        coll_name(kind), lanes_str(c->arrived).c_str(), where(c->loc).c_str());
    } else {
        for (WarpColl &x : w.coll)
            if (!x.arrived) {
                c = &x;
                break;
            }
        if (!c) kernel_fail(loc, cudaErrorLaunchFailure, "more than 4 warp collectives of disjoint masks in flight");
        c->mask = mask, c->kind = kind, c->fn = fn, c->aligned = aligned, c->loc = loc;
    }
    c->args[lane] = args;
    c->arrived |= bit;
    if (kind == kCollSyncwarp) MF_TSAN_RELEASE(c);
    if (c->arrived == mask) {
        fn(c->args, mask);
        c->arrived = 0;
        begin_batch(*f->grp);
        const unsigned base = f->v.lin & ~31u;
        for (unsigned m = mask & ~bit; m; m &= m - 1) make_runnable(fiber_of(b, base + __builtin_ctz(m)));
        block_yield();
    } else {
        f->state = kFiberWait, f->wait = kWaitWarp, f->wait_loc = loc;
        block_wait();
    }
    if (kind == kCollSyncwarp) MF_TSAN_ACQUIRE(c);
}

void warpgroup_collective(void *args, CollFn fn, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel("a warpgroup instruction");
    Block &b = *f->blk;
    const unsigned wgi = f->v.lin >> 7, base = wgi * 128;
    if ((int)(base + 128) > b.nthreads)
        kernel_fail(loc, cudaErrorLaunchFailure,
                    "a warpgroup instruction in warpgroup %u, which has fewer than 128 threads (%d per block)", wgi,
                    b.nthreads);
    for (unsigned wi = base / 32; wi < base / 32 + 4; wi++)
        if (b.warps[wi].exited)
            kernel_fail(loc, cudaErrorLaunchFailure,
                        "a warpgroup instruction while lanes %s of warp %u (same warpgroup) already left the kernel",
                        lanes_str(b.warps[wi].exited).c_str(), wi);
    WarpgroupColl &c = b.wgs[wgi];
    if (c.arrived == 0) {
        c.fn = fn, c.loc = loc;
    } else if (c.fn != fn || !same_loc(c.loc, loc)) {
        kernel_fail(loc, cudaErrorLaunchFailure,
                    "threads of a warpgroup at different warpgroup instructions (.aligned): %d thread(s) at %s",
                    c.arrived, where(c.loc).c_str());
    }
    c.args[f->v.lin - base] = args;
    if (++c.arrived == 128) {
        fn(c.args, 0xffffffffu);
        c.arrived = 0;
        begin_batch(*f->grp);
        for (unsigned t = base; t < base + 128; t++)
            if (t != f->v.lin) make_runnable(fiber_of(b, t));
        block_yield();
    } else {
        f->state = kFiberWait, f->wait = kWaitWarpgroup, f->wait_loc = loc;
        block_wait();
    }
}

// ---- shuffles, votes, match ------------------------------------------------------------------------

namespace {

struct ShflArgs {
    uint64_t value;
    int mode, param, width;
    Loc loc;
    uint64_t out;
};

void shfl_fn(void *const *args, unsigned mask) {
    for (unsigned m = mask; m; m &= m - 1) {
        const int lane = __builtin_ctz(m);
        ShflArgs &a = *static_cast<ShflArgs *>(args[lane]);
        const int w = a.width;
        if (w < 1 || w > 32 || (w & (w - 1)))
            kernel_fail(a.loc, cudaErrorLaunchFailure, "warp shuffle: width %d is not a power of two in [1, 32]", w);
        const int seg = lane & ~(w - 1), last = seg + w - 1; // PTX shfl.sync's minLane / maxLane
        int j = lane;
        bool ok = true;
        switch (a.mode) {
        case kShflIdx: j = seg | (a.param & (w - 1)); break;
        case kShflUp: j = lane - a.param, ok = j >= seg; break;
        case kShflDown: j = lane + a.param, ok = j <= last; break;
        default: j = lane ^ a.param, ok = j <= last && j >= 0; break;
        }
        if (!ok) j = lane;
        if (!(mask >> j & 1))
            kernel_fail(a.loc, cudaErrorLaunchFailure,
                        "warp shuffle: lane %d reads lane %d, which is not in the mask 0x%08x (undefined value)", lane,
                        j, mask);
        a.out = static_cast<ShflArgs *>(args[j])->value;
    }
}

struct VoteArgs {
    int mode, pred;
    unsigned out;
};

void vote_fn(void *const *args, unsigned mask) {
    unsigned ballot = 0;
    for (unsigned m = mask; m; m &= m - 1)
        if (static_cast<VoteArgs *>(args[__builtin_ctz(m)])->pred) ballot |= 1u << __builtin_ctz(m);
    for (unsigned m = mask; m; m &= m - 1) {
        VoteArgs &a = *static_cast<VoteArgs *>(args[__builtin_ctz(m)]);
        a.out = a.mode == kVoteBallot ? ballot : a.mode == kVoteAny ? ballot != 0 : ballot == mask;
    }
}

struct MatchArgs {
    uint64_t value;
    unsigned out;
};

void match_fn(void *const *args, unsigned mask) {
    for (unsigned m = mask; m; m &= m - 1) {
        MatchArgs &a = *static_cast<MatchArgs *>(args[__builtin_ctz(m)]);
        unsigned peers = 0;
        for (unsigned n = mask; n; n &= n - 1)
            if (static_cast<MatchArgs *>(args[__builtin_ctz(n)])->value == a.value) peers |= 1u << __builtin_ctz(n);
        a.out = peers;
    }
}

void syncwarp_fn(void *const *, unsigned) {}

} // namespace

uint64_t shfl(ShflMode mode, unsigned mask, uint64_t value, int param, int width, Loc loc) {
    MF_EMU_ENTRY;
    ShflArgs a{value, mode, param, width, loc, 0};
    warp_collective(kCollShfl, mask, &a, shfl_fn, false, loc);
    return a.out;
}

unsigned vote(VoteMode mode, unsigned mask, int pred, Loc loc) {
    MF_EMU_ENTRY;
    VoteArgs a{mode, pred != 0, 0};
    warp_collective(kCollVote, mask, &a, vote_fn, false, loc);
    return a.out;
}

unsigned match_any(unsigned mask, uint64_t value, Loc loc) {
    MF_EMU_ENTRY;
    MatchArgs a{value, 0};
    warp_collective(kCollMatch, mask, &a, match_fn, false, loc);
    return a.out;
}

void syncwarp(unsigned mask, Loc loc) {
    MF_EMU_ENTRY;
    int dummy = 0;
    warp_collective(kCollSyncwarp, mask, &dummy, syncwarp_fn, false, loc);
}

// ---- clusters --------------------------------------------------------------------------------------

unsigned cluster_rank() { return view(), cur->blk->rank; }
dim3 cluster_dims() { return view(), cur->grp->cdim; }
dim3 cluster_index() { return view(), cur->grp->cidx; }

// ---- deadlocks ---------------------------------------------------------------------------------------

namespace {

std::string thread_ranges(const std::vector<unsigned> &t) {
    std::string s;
    for (size_t i = 0; i < t.size();) {
        size_t e = i;
        while (e + 1 < t.size() && t[e + 1] == t[e] + 1) e++;
        char buf[32];
        snprintf(buf, sizeof buf, e > i ? "%s%u-%u" : "%s%u", s.empty() ? "" : ",", t[i], t[e]);
        s += buf;
        i = e + 1;
    }
    return s;
}

std::string deadlock_report(Group &g) {
    std::string r = "mf_emu: deadlock: no thread of the cluster can continue\n  in " + launch_desc(*g.launch);
    for (Block &b : g.blocks) {
        struct Key {
            WaitKind kind;
            Loc loc;
            uintptr_t obj;
            uint32_t param;
            std::vector<unsigned> threads;
        };
        std::vector<Key> keys;
        int exited = 0;
        for (int i = 0; i < b.nthreads; i++) {
            Fiber &f = b.fibers[i];
            if (f.state == kFiberDone) {
                exited++;
                continue;
            }
            Key *k = nullptr;
            for (Key &x : keys)
                if (x.kind == f.wait && same_loc(x.loc, f.wait_loc) && x.obj == f.wait_obj && x.param == f.wait_param)
                    k = &x;
            if (!k) {
                keys.push_back(Key{f.wait, f.wait_loc, f.wait_obj, f.wait_param, {}});
                k = &keys.back();
            }
            k->threads.push_back((unsigned)i);
        }
        char head[96];
        snprintf(head, sizeof head, "\n  block (%u,%u,%u):", b.idx.x, b.idx.y, b.idx.z);
        r += head;
        for (Key &k : keys) {
            std::string what;
            switch (k.kind) {
            case kWaitBar: what = "wait at __syncthreads"; break;
            case kWaitCluster: what = "wait at a cluster barrier"; break;
            case kWaitWarp: what = "wait at a warp collective for lanes that never arrive"; break;
            case kWaitWarpgroup: what = "wait at a wgmma for threads of their warpgroup that never arrive"; break;
            case kWaitMbar: {
                char buf[256], st[192];
                mbar_describe(g, k.obj, st, sizeof st);
                snprintf(buf, sizeof buf, "wait for parity %u of the mbarrier at shared 0x%x (%s)", k.param,
                         (unsigned)(k.obj - (uintptr_t)b.win), st);
                what = buf;
                break;
            }
            default: what = "are runnable"; break;
            }
            r += "\n    threads " + thread_ranges(k.threads) + " " + what + " at " + where(k.loc).c_str();
        }
        if (exited) r += "\n    " + std::to_string(exited) + " thread(s) exited";
    }
    return r;
}

} // namespace

// ---- running a launch -----------------------------------------------------------------------------

namespace {

void run_group(Worker &w, Launch &L, uint64_t gi) {
    const LaunchConfig &c = L.cfg;
    Group &g = w.group;
    const dim3 cd = c.cluster;
    const unsigned gx = c.grid.x / cd.x, gy = c.grid.y / cd.y;
    g.launch = &L;
    g.cdim = cd;
    g.cidx = dim3((unsigned)(gi % gx), (unsigned)(gi / gx % gy), (unsigned)(gi / gx / gy));
    const unsigned cs = cd.x * cd.y * cd.z, nt = c.block.x * c.block.y * c.block.z;
    g.blocks.resize(cs);
    g.rq.clear(), g.rq_head = 0, g.batches.clear();
    g.rng = splitmix(options().seed ^ splitmix(L.seq * 0x100000001b3ull + gi)) | 1;
    g.live = (int)(cs * nt);
    g.at_cluster = 0;
    g.statics.clear(), g.static_size = 0;
    g.mbar.clear();
    g.cps.clear(), g.cps_free.clear();
    g.failed = false;
    g.switches = 0;
    if (w.fibers.size() < (size_t)cs * nt) w.fibers.resize((size_t)cs * nt);
    const size_t stack = options().stack_kb << 10;
    for (unsigned r = 0; r < cs; r++) {
        Block &b = g.blocks[r];
        b.idx = uint3{g.cidx.x * cd.x + r % cd.x, g.cidx.y * cd.y + r / cd.x % cd.y, g.cidx.z * cd.z + r / cd.x / cd.y};
        b.rank = r;
        b.nthreads = b.live = (int)nt;
        b.fibers = &w.fibers[(size_t)r * nt];
        b.at_bar = 0;
        b.warps.assign((nt + 31) / 32, Warp{});
        for (size_t i = 0; i < b.warps.size(); i++) {
            const unsigned n = nt - 32 * (unsigned)i;
            b.warps[i].lanes = n >= 32 ? 0xffffffffu : (1u << n) - 1;
        }
        b.wgs.assign((nt + 127) / 128, WarpgroupColl{});
        b.win = nullptr, b.slot = -1, b.static_used = 0;
        for (unsigned i = 0; i < nt; i++) {
            Fiber &f = b.fibers[i];
            f.v.tid = uint3{i % c.block.x, i / c.block.x % c.block.y, i / c.block.x / c.block.y};
            f.v.bid = b.idx;
            f.v.bdim = c.block, f.v.gdim = c.grid;
            f.v.lin = i;
            f.blk = &b, f.grp = &g;
            f.state = kFiberRun, f.wait = kWaitNone, f.started = false;
            f.cp.clear(), f.cp_group = 0;
            f.wg.pending.clear(), f.wg.committed = 0, f.wg.fenced = false;
            fiber_prepare(w, f, stack);
            g.rq.push_back(&f);
        }
    }
    MF_TSAN_RELEASE(&w.sync_start);
    while (!g.failed) {
        Fiber *f = pick(g);
        if (!f) break;
        fiber_enter(w, f);
    }
    if (!g.failed && g.live > 0) {
        launch_failed(L, cudaErrorLaunchTimeout, deadlock_report(g));
        g.failed = true;
    }
    if (g.failed)
        for (Block &b : g.blocks)
            for (int i = 0; i < b.nthreads; i++)
                if (b.fibers[i].state != kFiberDone) fiber_abandoned(b.fibers[i]);
    MF_TSAN_ACQUIRE(&w.sync_done);
    wgmma_group_end(g);
    for (Block &b : g.blocks) smem_release(b);
    size_t prev = L.static_smem.load();
    while (g.static_size > prev && !L.static_smem.compare_exchange_weak(prev, g.static_size)) {
    }
    L.switches.fetch_add(g.switches);
}

// Clusters in a seeded order: the stride of an affine walk, coprime with n.
uint64_t walk_stride(uint64_t n, uint64_t seed) {
    if (seed == 0 || n < 2) return 1;
    uint64_t s = splitmix(seed) % n;
    auto gcd = [](uint64_t a, uint64_t b) {
        while (b) a %= b, std::swap(a, b);
        return a;
    };
    while (s == 0 || gcd(s, n) != 1) s = (s + 1) % n;
    return s;
}

// OS threads beyond the caller's, for MF_EMU_THREADS > 1.
struct Pool {
    std::mutex mu;
    std::condition_variable cv, done_cv;
    std::vector<std::thread> threads;
    Launch *job = nullptr;
    uint64_t gen = 0, n = 0, stride = 1, offset = 0;
    std::atomic<uint64_t> next{0};
    int busy = 0;

    void work(Launch &L) {
        Worker &w = worker();
        for (;;) {
            const uint64_t i = next.fetch_add(1);
            if (i >= n || L.failed.load()) break;
            run_group(w, L, (i * stride + offset) % n);
        }
    }
    void loop() {
        uint64_t seen = 0;
        for (;;) {
            Launch *L;
            {
                std::unique_lock<std::mutex> lk(mu);
                cv.wait(lk, [&] { return gen != seen; });
                seen = gen, L = job;
            }
            work(*L);
            std::lock_guard<std::mutex> lk(mu);
            if (--busy == 0) done_cv.notify_all();
        }
    }
    void run(Launch &L, uint64_t groups, uint64_t st, uint64_t off, int nthreads) {
        {
            std::lock_guard<std::mutex> lk(mu);
            while ((int)threads.size() < nthreads - 1) {
                threads.emplace_back([this] { loop(); });
                threads.back().detach();
            }
            job = &L, n = groups, stride = st, offset = off;
            next.store(0);
            busy = nthreads - 1;
            gen++;
        }
        cv.notify_all();
        work(L);
        std::unique_lock<std::mutex> lk(mu);
        done_cv.wait(lk, [&] { return busy == 0; });
    }
};

Pool &pool() {
    static Pool *p = nullptr; // never destroyed: detached threads wait on it
    static pid_t owner = 0;
    if (!p || owner != getpid()) { // a forked child has none of the parent's threads: start afresh
        p = new Pool();
        owner = getpid();
    }
    return *p;
}

} // namespace

cudaError_t execute_launch(Launch &L) {
    const LaunchConfig &c = L.cfg;
    L.seq = g_launch_seq.fetch_add(1);
    const uint64_t n = (uint64_t)(c.grid.x / c.cluster.x) * (c.grid.y / c.cluster.y) * (c.grid.z / c.cluster.z);
    const uint64_t stride = walk_stride(n, options().seed ^ L.seq);
    const uint64_t offset = options().seed ? splitmix(options().seed + L.seq) % (n ? n : 1) : 0;
    Fiber *outer = cur;
    ThreadView *outer_view = tls.view;
    if (outer) {
        fprintf(stderr, "mf_emu: a kernel launched from inside a kernel thread (dynamic parallelism) is not emulated\n");
        abort();
    }
    const int nthreads = options().threads;
    if (nthreads > 1 && n > 1) {
        pool().run(L, n, stride, offset, nthreads);
    } else {
        Worker &w = worker();
        for (uint64_t i = 0; i < n && !L.failed.load(); i++) run_group(w, L, (i * stride + offset) % n);
    }
    cur = outer, tls.view = outer_view;
    if (options().trace)
        fprintf(stderr,
                "mf_emu: %s grid (%u,%u,%u) block (%u,%u,%u) cluster (%u,%u,%u) smem %zu dynamic + %zu static, "
                "%" PRIu64 " switches, at %s%s\n",
                c.name, c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.cluster.x, c.cluster.y,
                c.cluster.z, c.smem, L.static_smem.load(), L.switches.load(), where(c.loc).c_str(),
                L.failed.load() ? " FAILED" : "");
    return L.failed.load() ? L.fail_err : cudaSuccess;
}

} // namespace mf_emu
