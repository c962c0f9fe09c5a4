// CPU emulator: shared memory. Each block gets a window of its own from a
// ring of windows per OS thread; a window is readable only while its block
// runs (mprotect), so a block that reads another block's shared memory
// (outside a cluster, or through a pointer that outlived its block) faults,
// and the fault handler says so. A window is filled with the poison pattern
// when its block first touches shared memory.
//
// Layout of a window (shared addresses = offsets in it):
//   [0, 0x410)                reserved: no valid shared address points here
//   [0x410, +dynamic)         the launch's dynamic shared memory (16-aligned, not 128-aligned,
//                             so that kernels that align their tiles must do it themselves)
//   [.. + align16(dynamic), ) MF_SHARED variables, placed at the first offset of their alignment
//                             that is an odd multiple of it (a kernel assuming more alignment
//                             than it declared gets a misaligned access)
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "internal.h"

namespace mf_emu {

namespace {

constexpr int kSlots = 64;
constexpr size_t kSlotBytes = 256 << 10;

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

struct SlotInfo {
    const char *kernel;
    uint3 block;
};
struct Ring {
    uintptr_t lo, hi;
    SlotInfo info[kSlots];
};
Ring *g_rings[256];
std::atomic<int> g_nrings{0};
struct sigaction g_prev_segv, g_prev_bus;

Ring *my_ring(Worker &w) {
    if (!w.ring) {
        void *m = mmap(nullptr, kSlots * kSlotBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "mf_emu: cannot reserve %zu bytes for shared-memory windows\n", kSlots * kSlotBytes);
            abort();
        }
        w.ring = static_cast<char *>(m);
        Ring *r = new Ring();
        r->lo = (uintptr_t)m, r->hi = (uintptr_t)m + kSlots * kSlotBytes;
        const int i = g_nrings.fetch_add(1);
        if (i < 256) g_rings[i] = r;
        w.ring_info = r;
    }
    return static_cast<Ring *>(w.ring_info);
}

size_t dyn_bytes(const Group &g) { return align_up(g.launch->cfg.smem, 16); }

void on_fault(int sig, siginfo_t *si, void *uc) {
    const uintptr_t a = (uintptr_t)si->si_addr;
    char msg[640];
    int n = 0;
    for (int i = 0; i < g_nrings.load() && i < 256; i++) {
        const Ring *r = g_rings[i];
        if (a >= r->lo && a < r->hi) {
            const int s = (int)((a - r->lo) / kSlotBytes);
            n = snprintf(msg, sizeof msg,
                         "mf_emu: a kernel thread accessed the shared memory of a block that is not running (shared "
                         "address 0x%zx of a window last used by kernel %s, block (%u,%u,%u)): a block read another "
                         "block's shared memory outside its cluster, or a pointer to shared memory outlived its "
                         "block\n",
                         (size_t)((a - r->lo) % kSlotBytes), r->info[s].kernel ? r->info[s].kernel : "?",
                         r->info[s].block.x, r->info[s].block.y, r->info[s].block.z);
        }
    }
    if (!n && stack_guard_hit(a))
        n = snprintf(msg, sizeof msg,
                     "mf_emu: a kernel thread overflowed its stack (%zu KB; MF_EMU_STACK_KB sets it)\n",
                     options().stack_kb);
    if (n > 0) {
        if (Fiber *f = cur) {
            const std::string t = "  in kernel " + std::string(f->grp->launch->cfg.name) + ", " + thread_name(f) + "\n";
            n += snprintf(msg + n, sizeof msg - n, "%s", t.c_str());
        }
        if (write(2, msg, (size_t)n) < 0) { /* nothing to do */
        }
    }
    // Hand the fault to whoever handled it before (ASan prints the stack; the default dumps core).
    sigaction(sig, sig == SIGSEGV ? &g_prev_segv : &g_prev_bus, nullptr);
    (void)uc;
}

} // namespace

void smem_install_fault_handler() {
    // An alternate signal stack per OS thread: a fiber's stack overflow must still be reported.
    static thread_local bool alt = false;
    if (!alt) {
        stack_t ss = {};
        ss.ss_size = 64 << 10;
        ss.ss_sp = mmap(nullptr, ss.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (ss.ss_sp != MAP_FAILED) sigaltstack(&ss, nullptr); // kept for the thread's life
        alt = true;
    }
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa = {};
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_prev_segv);
        sigaction(SIGBUS, &sa, &g_prev_bus);
    });
}

size_t smem_window_bytes() { return kSlotBytes; }

char *smem_window(Block &b) {
    if (b.win) return b.win;
    Worker &w = worker();
    Ring *r = my_ring(w);
    Group &g = *cur->grp;
    const int s = w.ring_next;
    w.ring_next = (w.ring_next + 1) % kSlots;
    b.slot = s;
    b.win = w.ring + (size_t)s * kSlotBytes;
    const size_t dyn = dyn_bytes(g);
    const size_t span = align_up(kSmemDynBase + dyn + kStaticSmemMax, 4096);
    if (mprotect(b.win, span < kSlotBytes ? span : kSlotBytes, PROT_READ | PROT_WRITE) != 0) {
        fprintf(stderr, "mf_emu: mprotect of a shared-memory window failed\n");
        abort();
    }
    r->info[s] = SlotInfo{g.launch->cfg.name, b.idx};
    emu_memset(b.win, kPoison, kSmemDynBase + dyn);
    b.static_used = 0;
    return b.win;
}

void smem_release(Block &b) {
    if (!b.win) return;
    mprotect(b.win, kSlotBytes, PROT_NONE);
    b.win = nullptr;
    b.slot = -1;
}

void *smem_static(const SmemSite *site) {
    MF_EMU_ENTRY;
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel("MF_SHARED");
    Group &g = *f->grp;
    Block &b = *f->blk;
    size_t off = (size_t)-1;
    for (const StaticVar &v : g.statics)
        if (v.site == site) off = v.offset;
    if (off == (size_t)-1) {
        const size_t al = site->align < 1 ? 1 : site->align;
        off = align_up(g.static_size, al);
        if (al < 128 && (off / al) % 2 == 0) off += al; // an odd multiple of the declared alignment
        const size_t end = off + site->size;
        const size_t dyn = dyn_bytes(g);
        if (end > kStaticSmemMax)
            kernel_fail(Loc{site->file, site->line, site->name}, cudaErrorLaunchOutOfResources,
                        "static shared memory of the kernel exceeds 48 KB with %s (%zu bytes)", site->name,
                        site->size);
        if (dyn + end > device().smem_optin())
            kernel_fail(Loc{site->file, site->line, site->name}, cudaErrorLaunchOutOfResources,
                        "%zu bytes of dynamic and %zu of static shared memory exceed the device's %zu per block",
                        g.launch->cfg.smem, end, device().smem_optin());
        g.statics.push_back(StaticVar{site, off});
        g.static_size = end;
    }
    char *win = smem_window(b);
    char *base = win + kSmemDynBase + dyn_bytes(g);
    if (b.static_used < g.static_size) { // poison what this block has not seen yet
        emu_memset(base + b.static_used, kPoison, g.static_size - b.static_used);
        b.static_used = g.static_size;
    }
    return base + off;
}

void *smem_dynamic() {
    MF_EMU_ENTRY;
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel("MF_DYN_SHARED");
    return smem_window(*f->blk) + kSmemDynBase;
}

static size_t smem_limit(const Group &g) { return kSmemDynBase + dyn_bytes(g) + g.static_size; }

uint32_t cvta_shared(const void *p, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel("__cvta_generic_to_shared");
    Block &b = *f->blk;
    Group &g = *f->grp;
    const char *c = static_cast<const char *>(p);
    char *win = smem_window(b);
    if (c >= win + kSmemDynBase && c < win + smem_limit(g)) return (uint32_t)(c - win);
    for (Block &o : g.blocks)
        if (&o != &b && o.win && c >= o.win && c < o.win + kSlotBytes)
            kernel_fail(loc, cudaErrorInvalidAddressSpace,
                        "__cvta_generic_to_shared of a pointer into the shared memory of cluster rank %u (a "
                        "shared::cta address must be this block's)",
                        o.rank);
    kernel_fail(loc, cudaErrorInvalidAddressSpace,
                "__cvta_generic_to_shared(%p): not this block's shared memory (its %zu bytes start at %p)", p,
                smem_limit(g) - kSmemDynBase, (void *)(win + kSmemDynBase));
}

void *smem_at(uint32_t addr, size_t bytes, size_t align, const char *what, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel(what);
    Block &b = *f->blk;
    Group &g = *f->grp;
    char *win = smem_window(b);
    if (addr < kSmemDynBase || (size_t)addr + bytes > smem_limit(g))
        kernel_fail(loc, cudaErrorIllegalAddress,
                    "%s: shared address 0x%x (+%zu bytes) is outside the block's shared memory [0x%x, 0x%zx)", what,
                    addr, bytes, kSmemDynBase, smem_limit(g));
    if (align > 1 && addr % align)
        kernel_fail(loc, cudaErrorMisalignedAddress, "%s: shared address 0x%x is not %zu-byte aligned", what, addr,
                    align);
    return win + addr;
}

void *smem_try(uint32_t addr, size_t bytes, size_t align) {
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) return nullptr;
    Block &b = *f->blk;
    char *win = smem_window(b);
    if (addr < kSmemDynBase || (size_t)addr + bytes > smem_limit(*f->grp) || (align > 1 && addr % align)) return nullptr;
    return win + addr;
}

void *cluster_map(const void *p, unsigned rank, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel("map_shared_rank");
    Block &b = *f->blk;
    Group &g = *f->grp;
    if (rank >= g.blocks.size())
        kernel_fail(loc, cudaErrorIllegalAddress,
                    "map_shared_rank(%p, %u): the cluster has %zu block(s): a block read another block's shared "
                    "memory outside its cluster",
                    p, rank, g.blocks.size());
    const char *c = static_cast<const char *>(p);
    char *win = smem_window(b);
    if (c < win + kSmemDynBase || c >= win + smem_limit(g))
        kernel_fail(loc, cudaErrorIllegalAddress, "map_shared_rank(%p, %u): not this block's shared memory", p, rank);
    Block &o = g.blocks[rank];
    char *owin = smem_window(o);
    if (o.static_used < g.static_size) {
        emu_memset(owin + kSmemDynBase + dyn_bytes(g) + o.static_used, kPoison, g.static_size - o.static_used);
        o.static_used = g.static_size;
    }
    return owin + (c - win);
}

} // namespace mf_emu
