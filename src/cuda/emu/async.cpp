// CPU emulator: asynchronous copies (cp.async) and mbarriers.
//
// cp.async: the destination holds poison from the issue on and the data lands
// at the latest point PTX allows: the issuing thread's cp.async.wait_group
// that covers it, or, for copies attached to an mbarrier
// (cp.async.mbarrier.arrive), the first wait that observes that phase
// complete. Copies nobody waits for never land.
//
// mbarrier: the 64-bit word in shared memory holds the state, so that a
// barrier overwritten by a plain store or never initialised is noticed:
//   bit 63 = 0, bit 62 = 1 (valid: the poison pattern has bit 63 set),
//   bits 41..61 tx-count (21-bit signed), 21..40 expected arrivals,
//   1..20 pending arrivals, bit 0 the current phase's parity.
// A phase completes when pending arrivals and tx-count are both 0. A wait
// suspends the thread until then; one that never completes is a deadlock,
// reported with the barrier's state (a wrong expect_tx byte count shows up
// as the tx-count left over).
#include <cinttypes>
#include <cstdio>

#include "internal.h"

#ifdef MF_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace mf_emu {

namespace {

constexpr int64_t kTxMax = (1 << 20) - 1;
constexpr uint32_t kCountMax = (1u << 20) - 1;

struct MbarState {
    int64_t tx;
    uint32_t expected, pending, phase;
};

bool decode(uint64_t w, MbarState &m) {
    if ((w >> 62) != 1) return false;
    int64_t tx = (int64_t)((w >> 41) & 0x1fffff);
    if (tx & 0x100000) tx -= 0x200000;
    m.tx = tx;
    m.expected = (uint32_t)((w >> 21) & 0xfffff);
    m.pending = (uint32_t)((w >> 1) & 0xfffff);
    m.phase = (uint32_t)(w & 1);
    return true;
}

uint64_t encode(const MbarState &m) {
    return (uint64_t)1 << 62 | ((uint64_t)m.tx & 0x1fffff) << 41 | (uint64_t)m.expected << 21 |
           (uint64_t)m.pending << 1 | m.phase;
}

uint64_t *bar_word(uint32_t bar, const char *op, Loc loc) {
    return static_cast<uint64_t *>(smem_at(bar, 8, 8, op, loc));
}

MbarState load(uint64_t *p, uint32_t bar, const char *op, Loc loc) {
    MbarState m;
    if (!decode(*p, m))
        kernel_fail(loc, cudaErrorLaunchFailure,
                    "%s: the shared word at 0x%x is not an initialised mbarrier (it holds 0x%016" PRIx64
                    "; mbarrier.init must run, and be visible, first; or a plain store overwrote it)",
                    op, bar, *p);
    return m;
}

Fiber *self() {
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel("an mbarrier / cp.async operation");
    return f;
}

void land(CpCopy &c) {
    if (c.landed) return;
    if (c.src_size > 0) emu_memcpy(c.dst, c.src, (size_t)c.src_size);
    if (c.cp_size > c.src_size) emu_memset(static_cast<char *>(c.dst) + c.src_size, 0, (size_t)(c.cp_size - c.src_size));
    c.landed = true;
}

// Lands what was deferred to the observation of phases < completed.
void land_deferred(Group &g, MbarSide &s) {
    size_t k = 0;
    for (size_t i = 0; i < s.tma.size(); i++) {
        if (s.tma[i].phase < s.completed) tma_land(g, s.tma[i]);
        else s.tma[k++] = s.tma[i];
    }
    s.tma.resize(k);
    k = 0;
    for (size_t i = 0; i < s.cps.size(); i++) {
        if (s.cps[i].first < s.completed) {
            land(g.cps[s.cps[i].second]);
            cp_release(g, s.cps[i].second);
        } else {
            s.cps[k++] = s.cps[i];
        }
    }
    s.cps.resize(k);
}

// Completes the phase if nothing is pending; wakes the waiters.
void complete_check(Group &g, uint64_t *p, MbarState &m) {
    if (m.pending != 0 || m.tx != 0) return;
    m.phase ^= 1;
    m.pending = m.expected;
    MbarSide &s = g.mbar[(uintptr_t)p];
    s.completed++;
    begin_batch(g);
    for (Fiber *f : s.waiters) make_runnable(f);
    s.waiters.clear();
}

} // namespace

// ---- cp.async ---------------------------------------------------------------------------------

void cp_release(Group &g, uint32_t idx) {
    CpCopy &c = g.cps[idx];
    if (--c.refs == 0) g.cps_free.push_back(idx);
}

void cp_async(uint32_t dst, const void *src, int cp_size, int src_size, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = self();
    Group &g = *f->grp;
    if (cp_size != 4 && cp_size != 8 && cp_size != 16)
        kernel_fail(loc, cudaErrorIllegalInstruction, "cp.async: copy size %d (must be 4, 8 or 16)", cp_size);
    if (src_size < 0 || src_size > cp_size)
        kernel_fail(loc, cudaErrorIllegalInstruction, "cp.async: src-size %d outside [0, %d]", src_size, cp_size);
    void *d = smem_at(dst, (size_t)cp_size, (size_t)cp_size, "cp.async destination", loc);
    if ((uintptr_t)src % (uintptr_t)cp_size)
        kernel_fail(loc, cudaErrorMisalignedAddress, "cp.async: global source %p is not %d-byte aligned", src, cp_size);
#ifdef MF_EMU_ASAN
    if (src_size > 0 && __asan_region_is_poisoned(const_cast<void *>(src), (size_t)src_size))
        kernel_fail(loc, cudaErrorIllegalAddress,
                    "cp.async reads %d bytes at %p, outside any live allocation (AddressSanitizer)", src_size, src);
#endif
    emu_memset(d, kPoison, (size_t)cp_size); // indeterminate until the copy completes
    uint32_t idx;
    if (!g.cps_free.empty()) {
        idx = g.cps_free.back();
        g.cps_free.pop_back();
    } else {
        idx = (uint32_t)g.cps.size();
        g.cps.emplace_back();
    }
    g.cps[idx] = CpCopy{d, src, cp_size, src_size, f->cp_group, 1, false, loc};
    f->cp.push_back(idx);
}

void cp_async_commit(Loc) {
    MF_EMU_ENTRY; self()->cp_group++; }

void cp_async_wait(int n, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = self();
    Group &g = *f->grp;
    if (n < 0) kernel_fail(loc, cudaErrorIllegalInstruction, "cp.async.wait_group %d", n);
    const uint64_t limit = f->cp_group >= (uint64_t)n ? f->cp_group - (uint64_t)n : 0;
    size_t k = 0;
    for (size_t i = 0; i < f->cp.size(); i++) {
        CpCopy &c = g.cps[f->cp[i]];
        if (c.group < limit) {
            land(c);
            cp_release(g, f->cp[i]);
        } else {
            f->cp[k++] = f->cp[i];
        }
    }
    f->cp.resize(k);
}

// ---- mbarrier ------------------------------------------------------------------------------------

void mbar_init(uint32_t bar, uint32_t count, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = self();
    uint64_t *p = bar_word(bar, "mbarrier.init", loc);
    if (count < 1 || count > kCountMax)
        kernel_fail(loc, cudaErrorIllegalInstruction, "mbarrier.init: count %u outside [1, 2^20 - 1]", count);
    MbarSide &s = f->grp->mbar[(uintptr_t)p];
    if (!s.waiters.empty())
        kernel_fail(loc, cudaErrorLaunchFailure, "mbarrier.init of a barrier that %zu thread(s) wait on",
                    s.waiters.size());
    for (auto &c : s.cps) cp_release(*f->grp, c.second);
    s = MbarSide{};
    *p = encode(MbarState{0, count, count, 0});
}

void mbar_arrive(uint32_t bar, uint32_t tx_bytes, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = self();
    uint64_t *p = bar_word(bar, tx_bytes ? "mbarrier.arrive.expect_tx" : "mbarrier.arrive", loc);
    MbarState m = load(p, bar, "mbarrier.arrive", loc);
    if (m.tx + (int64_t)tx_bytes > kTxMax)
        kernel_fail(loc, cudaErrorIllegalInstruction,
                    "mbarrier.arrive.expect_tx(%u): the tx-count (%" PRId64 ") would exceed 2^20 - 1", tx_bytes, m.tx);
    if (m.pending == 0)
        kernel_fail(loc, cudaErrorLaunchFailure,
                    "mbarrier.arrive: more arrivals than the barrier's count %u in one phase (it waits for %" PRId64
                    " tx bytes)",
                    m.expected, m.tx);
    m.tx += tx_bytes;
    m.pending--;
    MF_TSAN_RELEASE(p);
    complete_check(*f->grp, p, m);
    *p = encode(m);
}

void mbar_arrive_cp_async(uint32_t bar, bool noinc, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = self();
    Group &g = *f->grp;
    uint64_t *p = bar_word(bar, "cp.async.mbarrier.arrive", loc);
    MbarState m = load(p, bar, "cp.async.mbarrier.arrive", loc);
    MbarSide &s = g.mbar[(uintptr_t)p];
    // Every cp.async this thread issued so far lands when this phase is observed.
    for (uint32_t idx : f->cp)
        if (!g.cps[idx].landed) {
            g.cps[idx].refs++;
            s.cps.emplace_back(s.completed, idx);
        }
    if (noinc) { // the arrival counts toward the barrier's count
        if (m.pending == 0)
            kernel_fail(loc, cudaErrorLaunchFailure,
                        "cp.async.mbarrier.arrive.noinc: more arrivals than the barrier's count %u", m.expected);
        m.pending--;
    }
    MF_TSAN_RELEASE(p);
    complete_check(g, p, m);
    *p = encode(m);
}

bool mbar_try_wait_parity(uint32_t bar, uint32_t parity, Loc loc) {
    MF_EMU_ENTRY;
    Fiber *f = self();
    Group &g = *f->grp;
    uint64_t *p = bar_word(bar, "mbarrier.try_wait.parity", loc);
    MbarState m = load(p, bar, "mbarrier.try_wait.parity", loc);
    if (parity > 1) kernel_fail(loc, cudaErrorIllegalInstruction, "mbarrier.try_wait.parity: parity %u", parity);
    if (m.phase == parity) { // the phase of this parity is the current one: wait for it
        g.mbar[(uintptr_t)p].waiters.push_back(f);
        f->state = kFiberWait, f->wait = kWaitMbar, f->wait_loc = loc;
        f->wait_obj = (uintptr_t)p, f->wait_param = parity;
        block_wait();
        f->wait_obj = 0;
        load(p, bar, "mbarrier.try_wait.parity", loc); // still a barrier
    }
    land_deferred(g, g.mbar[(uintptr_t)p]);
    MF_TSAN_ACQUIRE(p);
    return true;
}

// Called by the TMA engine (tma.cpp): credit `bytes` to the phase in flight.
void mbar_complete_tx(uint32_t bar, uint32_t bytes, const TmaReq &req, Loc loc) {
    Fiber *f = self();
    Group &g = *f->grp;
    uint64_t *p = bar_word(bar, "cp.async.bulk.tensor (mbarrier)", loc);
    MbarState m = load(p, bar, "cp.async.bulk.tensor's mbarrier", loc);
    MbarSide &s = g.mbar[(uintptr_t)p];
    if (m.tx - (int64_t)bytes < -kTxMax)
        kernel_fail(loc, cudaErrorIllegalInstruction, "complete_tx of %u bytes underflows the tx-count (%" PRId64 ")",
                    bytes, m.tx);
    TmaReq r = req;
    r.phase = s.completed;
    s.tma.push_back(r);
    m.tx -= bytes;
    MF_TSAN_RELEASE(p);
    complete_check(g, p, m);
    *p = encode(m);
}

void mbar_describe(Group &g, uintptr_t addr, char *buf, size_t cap) {
    MbarState m;
    if (!decode(*reinterpret_cast<uint64_t *>(addr), m)) {
        snprintf(buf, cap, "not an initialised mbarrier");
        return;
    }
    const MbarSide &s = g.mbar[addr];
    snprintf(buf, cap,
             "phase %" PRIu64 " (parity %u) in flight: %u of %u arrivals missing, tx-count %" PRId64
             " bytes%s",
             s.completed, m.phase, m.pending, m.expected, m.tx,
             m.tx > 0 ? ": more bytes expected than the copies delivered"
                      : m.tx < 0 ? ": the copies delivered more bytes than expect_tx announced" : "");
}

} // namespace mf_emu
