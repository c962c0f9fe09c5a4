// CPU emulator: the tensor-core and matrix-load instructions, written from
// the PTX ISA's fragment tables and shared-memory layouts (and checked
// against CuTe's published layouts in tests/emu/test_emu_ptx.cpp):
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16
//   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16} (A from shared
//     memory or registers, B from shared memory; descriptors decoded from
//     their bits: start, LBO, SBO, swizzle), wgmma.fence / commit_group /
//     wait_group, setmaxnreg.
// Numerics: products are exact, the k16 sum and the accumulator are added in
// double and rounded once to f32. The hardware's accumulation order and
// rounding are not documented; the golden probes (tests/emu/ptx_probe.cu)
// pin them once a GPU has run.
//
// wgmma is asynchronous: the accumulator registers hold poison from the
// mma_async until the wait_group that retires it (reading them early gives
// NaN; writing them meanwhile is reported), and its shared-memory operands
// are read at that wait (a stage overwritten too early shows).
#include <cmath>
#include <cstdio>
#include <ctime>

#include "internal.h"

namespace mf_emu {

namespace {

// f16 -> f32 through a table (2^16 entries, built once: the conversion is exact).
const float *h2f_table() {
    static const float *t = [] {
        float *v = new float[65536];
        for (uint32_t h = 0; h < 65536; h++) {
            const uint32_t s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
            float x;
            if (e == 0) x = ldexpf((float)m, -24);
            else if (e == 31) x = m ? NAN : INFINITY;
            else x = ldexpf((float)(m | 1024), (int)e - 25);
            v[h] = s ? -x : x;
        }
        return v;
    }();
    return t;
}
inline float h2f(uint16_t h) { return h2f_table()[h]; }
float bf2f(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
float cvt(MmaType t, uint16_t v) { return t == kMmaBF16 ? bf2f(v) : h2f(v); }
uint16_t half_of(uint32_t r, int h) { return (uint16_t)(r >> (16 * h)); }

Fiber *self(const char *what) {
    Fiber *f = tls.view ? cur : nullptr;
    if (!f) outside_kernel(what);
    return f;
}

// ---- ldmatrix ------------------------------------------------------------------------------

struct LdsmArgs {
    uint32_t addr;
    int num;
    bool trans;
    Loc loc;
    uint32_t *regs;
};

void ldsm_fn(void *const *args, unsigned) {
    const LdsmArgs &a0 = *static_cast<LdsmArgs *>(args[0]);
    const uint16_t *rows[32];
    for (int l = 0; l < 8 * a0.num; l++) { // lane 8 j + r gives row r of matrix j
        const LdsmArgs &a = *static_cast<LdsmArgs *>(args[l]);
        if (a.num != a0.num || a.trans != a0.trans)
            kernel_fail(a.loc, cudaErrorIllegalInstruction, "ldmatrix: lanes disagree on .x%d / .trans", a.num);
        rows[l] = static_cast<const uint16_t *>(smem_try(a.addr, 16, 16));
        if (!rows[l]) { // fails with the report
            char what[48];
            snprintf(what, sizeof what, "ldmatrix row address of lane %d", l);
            smem_at(a.addr, 16, 16, what, a.loc);
        }
    }
    for (int l = 0; l < 32; l++) {
        LdsmArgs &a = *static_cast<LdsmArgs *>(args[l]);
        for (int j = 0; j < a0.num; j++) {
            uint16_t e[2];
            for (int h = 0; h < 2; h++)
                e[h] = a0.trans ? rows[8 * j + 2 * (l & 3) + h][l >> 2] // (row 2 (l % 4) + h, col l / 4)
                                : rows[8 * j + (l >> 2)][2 * (l & 3) + h]; // (row l / 4, col 2 (l % 4) + h)
            a.regs[j] = e[0] | (uint32_t)e[1] << 16;
        }
    }
}

// ---- mma.sync m16n8k16 --------------------------------------------------------------------------

struct MmaArgs {
    MmaType type;
    const uint32_t *a;
    uint32_t b[2];
    float *d;
    Loc loc;
};

void mma_fn(void *const *args, unsigned) {
    const MmaType t = static_cast<MmaArgs *>(args[0])->type;
    double A[16][16], B[8][16], C[16][8]; // B as (n, k): both operands contiguous along k
    for (int l = 0; l < 32; l++) {
        const MmaArgs &m = *static_cast<MmaArgs *>(args[l]);
        if (m.type != t) kernel_fail(m.loc, cudaErrorIllegalInstruction, "mma.sync: lanes disagree on f16 / bf16");
        const int g = l >> 2, q = l & 3;
        for (int i = 0; i < 4; i++) // A reg i: row g + 8 (i % 2), cols 2q + 8 (i / 2) + {0, 1}
            for (int h = 0; h < 2; h++) A[g + 8 * (i & 1)][2 * q + h + 8 * (i >> 1)] = cvt(t, half_of(m.a[i], h));
        for (int i = 0; i < 2; i++) // B reg i: rows (k) 2q + 8 i + {0, 1}, col (n) g
            for (int h = 0; h < 2; h++) B[g][2 * q + h + 8 * i] = cvt(t, half_of(m.b[i], h));
        for (int i = 0; i < 4; i++) C[g + 8 * (i >> 1)][2 * q + (i & 1)] = m.d[i]; // C/D: row g + 8 (i / 2), col 2q + i % 2
    }
    for (int l = 0; l < 32; l++) {
        MmaArgs &m = *static_cast<MmaArgs *>(args[l]);
        const int g = l >> 2, q = l & 3;
        for (int i = 0; i < 4; i++) {
            const int r = g + 8 * (i >> 1), c = 2 * q + (i & 1);
            double s = C[r][c]; // products exact, summed in double, one rounding to f32
            for (int k = 0; k < 16; k++) s += A[r][k] * B[c][k];
            m.d[i] = (float)s;
        }
    }
}

// ---- wgmma -------------------------------------------------------------------------------------

struct WgArgs {
    int n;
    MmaType type;
    float *d;
    const uint32_t *a;
    uint64_t da, db;
    int scale_d, scale_a, scale_b, trans_a, trans_b;
    Loc loc;
    Fiber *f;
};

} // namespace

struct WgOp {
    int n;
    MmaType type;
    uint64_t da, db;
    int scale_d, scale_a, scale_b, trans_a, trans_b;
    bool a_regs;
    Loc loc;
    uint32_t a[128][4];
    float *d[128];
    WgOp *in[128];            // the op whose result is thread t's input, or NULL (snapshot)
    std::vector<float> snap;  // (128, n / 2) inputs of threads without a chained op
    std::vector<float> out;   // (128, n / 2) results, once executed
    bool executed = false;
    int refs = 128;
};

namespace {

constexpr uint32_t kPoisonF32 = 0xffffffffu;

bool is_poison(const float *d, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &d[i], 4);
        if (u != kPoisonF32) return false;
    }
    return true;
}

// Element (mn, k) of a 16-bit operand in shared memory, per the canonical
// layouts of PTX's wgmma shared-memory matrix descriptors (in 16-byte chunks,
// W = swizzle width in chunks: 1 none, 2 32B, 4 64B, 8 128B):
//   K-major, none:   chunk (mn % 8) + (mn / 8) SBO + (k / 8) LBO
//   K-major, swz:    chunk (mn % 8) W + (mn / 8) SBO + k / 8          (LBO unused)
//   MN-major, none:  chunk (mn / 8) SBO + (k % 8) + (k / 8) LBO
//   MN-major, swz:   chunk (mn / 8) % W + (mn / 8 / W) LBO + (k % 8) W + (k / 8) SBO
// plus 2 (element % 8) bytes, then the swizzle on the byte address.
uint16_t smem_operand(uint64_t desc, bool k_major, int mn, int k, const Loc &loc) {
    const uint32_t start = (uint32_t)(desc & 0x3fff) << 4;
    const uint32_t lbo = (uint32_t)((desc >> 16) & 0x3fff), sbo = (uint32_t)((desc >> 32) & 0x3fff);
    const int base_off = (int)((desc >> 49) & 7), mode = (int)(desc >> 62);
    if (base_off)
        kernel_fail(loc, cudaErrorNotSupported, "wgmma: a matrix descriptor with base offset %d is not emulated", base_off);
    const uint32_t W = mode == 1 ? 8 : mode == 2 ? 4 : mode == 3 ? 2 : 1;
    uint32_t chunk, e;
    if (k_major) {
        e = (uint32_t)k % 8;
        chunk = W == 1 ? (uint32_t)mn % 8 + (uint32_t)mn / 8 * sbo + (uint32_t)k / 8 * lbo
                       : (uint32_t)mn % 8 * W + (uint32_t)mn / 8 * sbo + (uint32_t)k / 8;
    } else {
        e = (uint32_t)mn % 8;
        const uint32_t c = (uint32_t)mn / 8;
        chunk = W == 1 ? c * sbo + (uint32_t)k % 8 + (uint32_t)k / 8 * lbo
                       : c % W + c / W * lbo + (uint32_t)k % 8 * W + (uint32_t)k / 8 * sbo;
    }
    uint32_t addr = start + chunk * 16 + e * 2;
    if (W > 1) addr ^= ((addr >> 7) & (W - 1)) << 4;
    const void *p = smem_try(addr, 2, 2);
    if (!p) p = smem_at(addr, 2, 2, "wgmma shared-memory operand", loc); // fails with the report
    return *static_cast<const uint16_t *>(p);
}

void wg_issue_fn(void *const *args, unsigned) {
    const WgArgs &a0 = *static_cast<WgArgs *>(args[0]);
    WgOp *op = new WgOp();
    op->n = a0.n, op->type = a0.type, op->da = a0.da, op->db = a0.db;
    op->scale_d = a0.scale_d, op->scale_a = a0.scale_a, op->scale_b = a0.scale_b;
    op->trans_a = a0.trans_a, op->trans_b = a0.trans_b, op->a_regs = a0.a != nullptr, op->loc = a0.loc;
    const int na = a0.n / 2;
    op->snap.assign((size_t)128 * na, 0.0f);
    Group &g = *a0.f->grp;
    g.wgops.push_back(op);
    for (int t = 0; t < 128; t++) {
        const WgArgs &a = *static_cast<WgArgs *>(args[t]);
        if (a.n != a0.n || a.type != a0.type || (a.a != nullptr) != op->a_regs || (!op->a_regs && a.da != a0.da) ||
            a.db != a0.db || a.scale_d != a0.scale_d || a.scale_a != a0.scale_a || a.scale_b != a0.scale_b ||
            a.trans_a != a0.trans_a || a.trans_b != a0.trans_b)
            kernel_fail(a.loc, cudaErrorIllegalInstruction,
                        "wgmma.mma_async: the threads of the warpgroup disagree on its operands (thread %d: shape, "
                        "types, descriptors or immediates differ from thread 0's)",
                        t);
        if (!a.f->wg.fenced)
            kernel_fail(a.loc, cudaErrorLaunchFailure,
                        "wgmma.mma_async without a wgmma.fence since the last wgmma.commit_group (thread %d)", t);
        if (op->a_regs) emu_memcpy(op->a[t], a.a, sizeof op->a[t]);
        op->d[t] = a.d;
        op->in[t] = nullptr;
        auto &pend = a.f->wg.pending;
        for (size_t i = pend.size(); i-- > 0;)
            if (pend[i].op->d[t] == a.d) {
                op->in[t] = pend[i].op;
                break;
            }
        if (op->in[t]) {
            op->in[t]->refs++; // its result is this op's input until this op executes
            if (!is_poison(a.d, na))
                kernel_fail(a.loc, cudaErrorLaunchFailure,
                            "thread %d wrote its wgmma accumulator registers while a wgmma on them is in flight "
                            "(before the wgmma.wait_group that retires it)",
                            t);
        } else {
            emu_memcpy(&op->snap[(size_t)t * na], a.d, sizeof(float) * na);
            emu_memset(a.d, 0xff, sizeof(float) * na); // undefined until the wait_group
        }
        pend.push_back(WgPending{op, a.f->wg.committed});
    }
}

void wg_drop(Group &g, WgOp *op);

void wg_execute(Group &g, WgOp *op) {
    for (int th = 0; th < 128; th++)
        if (op->in[th] && !op->in[th]->executed) wg_execute(g, op->in[th]);
    const int N = op->n, na = N / 2;
    const MmaType t = op->type;
    static thread_local std::vector<float> A, B;
    A.assign(64 * 16, 0.0f), B.assign((size_t)N * 16, 0.0f);
    if (op->a_regs) {
        for (int th = 0; th < 128; th++) {
            const int w = th >> 5, l = th & 31, g = l >> 2, q = l & 3;
            for (int i = 0; i < 4; i++)
                for (int h = 0; h < 2; h++)
                    A[(16 * w + g + 8 * (i & 1)) * 16 + 2 * q + h + 8 * (i >> 1)] = cvt(t, half_of(op->a[th][i], h));
        }
    } else {
        for (int m = 0; m < 64; m++)
            for (int k = 0; k < 16; k++) A[m * 16 + k] = cvt(t, smem_operand(op->da, !op->trans_a, m, k, op->loc));
    }
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 16; k++) B[(size_t)n * 16 + k] = cvt(t, smem_operand(op->db, !op->trans_b, n, k, op->loc));
    op->out.assign((size_t)128 * na, 0.0f);
    for (int th = 0; th < 128; th++) {
        const int w = th >> 5, l = th & 31, g = l >> 2, q = l & 3;
        const float *c = op->in[th] ? &op->in[th]->out[(size_t)th * na] : &op->snap[(size_t)th * na];
        for (int i = 0; i < na; i++) { // accumulator i: row 16 w + g + 8 ((i / 2) % 2), col 8 (i / 4) + 2 q + i % 2
            const int m = 16 * w + g + 8 * ((i >> 1) & 1), n = 8 * (i >> 2) + 2 * q + (i & 1);
            double s = op->scale_d ? (double)c[i] : 0.0;
            for (int k = 0; k < 16; k++)
                s += (double)(op->scale_a * A[m * 16 + k]) * (double)(op->scale_b * B[(size_t)n * 16 + k]);
            op->out[(size_t)th * na + i] = (float)s;
        }
    }
    op->executed = true;
    for (int th = 0; th < 128; th++)
        if (op->in[th]) wg_drop(g, op->in[th]), op->in[th] = nullptr;
}

void wg_drop(Group &g, WgOp *op) {
    if (--op->refs > 0) return;
    for (size_t i = 0; i < g.wgops.size(); i++)
        if (g.wgops[i] == op) {
            g.wgops[i] = g.wgops.back();
            g.wgops.pop_back();
            break;
        }
    delete op;
}

void setmaxnreg_fn(void *const *, unsigned) {}

} // namespace

void require_sm90(const char *op, Loc loc) {
    if (device().cc_major < 9)
        kernel_fail(loc, cudaErrorIllegalInstruction, "%s needs compute capability 9.0 (the emulated device is %d.%d)",
                    op, device().cc_major, device().cc_minor);
}

void ldmatrix(int num, bool trans, uint32_t *regs, uint32_t addr, Loc loc) {
    MF_EMU_ENTRY;
    if (num != 1 && num != 2 && num != 4)
        kernel_fail(loc, cudaErrorIllegalInstruction, "ldmatrix: .x%d", num);
    LdsmArgs a{addr, num, trans, loc, regs};
    warp_collective(kCollLdmatrix, 0xffffffffu, &a, ldsm_fn, true, loc);
}

void mma_m16n8k16(MmaType type, float *d, const uint32_t *a, uint32_t b0, uint32_t b1, Loc loc) {
    MF_EMU_ENTRY;
    MmaArgs m{type, a, {b0, b1}, d, loc};
    warp_collective(kCollMma, 0xffffffffu, &m, mma_fn, true, loc);
}

void wgmma_fence(Loc loc) {
    MF_EMU_ENTRY;
    require_sm90("wgmma.fence", loc);
    self("wgmma.fence")->wg.fenced = true;
}

void wgmma_commit(Loc loc) {
    MF_EMU_ENTRY;
    require_sm90("wgmma.commit_group", loc);
    Fiber *f = self("wgmma.commit_group");
    f->wg.committed++;
    f->wg.fenced = false;
}

void wgmma_wait(int n, Loc loc) {
    MF_EMU_ENTRY;
    require_sm90("wgmma.wait_group", loc);
    Fiber *f = self("wgmma.wait_group");
    if (n < 0 || n > 7) kernel_fail(loc, cudaErrorIllegalInstruction, "wgmma.wait_group %d", n);
    const uint64_t limit = f->wg.committed >= (uint64_t)n ? f->wg.committed - (uint64_t)n : 0;
    const int t = (int)(f->v.lin & 127);
    auto &pend = f->wg.pending;
    size_t k = 0;
    for (size_t i = 0; i < pend.size(); i++) {
        WgOp *op = pend[i].op;
        if (pend[i].group >= limit) {
            pend[k++] = pend[i];
            continue;
        }
        if (!op->executed) wg_execute(*f->grp, op);
        bool chained = false; // a later op in flight on the same registers writes them back
        for (size_t j = i + 1; j < pend.size(); j++)
            if (pend[j].op->d[t] == op->d[t]) chained = true;
        if (!chained) {
            const int na = op->n / 2;
            if (!is_poison(op->d[t], na))
                kernel_fail(loc, cudaErrorLaunchFailure,
                            "the wgmma accumulator registers were written while the wgmma of %s was in flight",
                            where(op->loc).c_str());
            emu_memcpy(op->d[t], &op->out[(size_t)t * na], sizeof(float) * na);
        }
        wg_drop(*f->grp, op);
    }
    pend.resize(k);
}

void wgmma_mma(int n, MmaType type, float *d, const uint32_t *a_regs, uint64_t da, uint64_t db, int scale_d,
               int scale_a, int scale_b, int trans_a, int trans_b, Loc loc) {
    MF_EMU_ENTRY;
    require_sm90("wgmma.mma_async", loc);
    if (n < 8 || n > 256 || n % 8)
        kernel_fail(loc, cudaErrorIllegalInstruction, "wgmma.mma_async.m64n%dk16: N must be a multiple of 8 in [8, 256]", n);
    if ((scale_a != 1 && scale_a != -1) || (scale_b != 1 && scale_b != -1))
        kernel_fail(loc, cudaErrorIllegalInstruction, "wgmma.mma_async: imm-scale-a/b must be 1 or -1");
    if (a_regs && trans_a)
        kernel_fail(loc, cudaErrorIllegalInstruction, "wgmma.mma_async: imm-trans-a with A in registers");
    WgArgs a{n, type, d, a_regs, da, db, scale_d != 0, scale_a, scale_b, trans_a, trans_b, loc, self("wgmma.mma_async")};
    warpgroup_collective(&a, wg_issue_fn, loc);
}

void wgmma_group_end(Group &g) {
    for (WgOp *op : g.wgops) delete op;
    g.wgops.clear();
    for (Block &b : g.blocks)
        for (int i = 0; i < b.nthreads; i++) b.fibers[i].wg.pending.clear();
}

void setmaxnreg(bool inc, int regs, Loc loc) {
    MF_EMU_ENTRY;
    require_sm90(inc ? "setmaxnreg.inc" : "setmaxnreg.dec", loc);
    if (regs < 24 || regs > 256 || regs % 8)
        kernel_fail(loc, cudaErrorIllegalInstruction, "setmaxnreg: %d registers (a multiple of 8 in [24, 256])", regs);
    int dummy = 0;
    warp_collective(kCollSetmaxnreg, 0xffffffffu, &dummy, setmaxnreg_fn, true, loc);
}

uint64_t globaltimer() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

} // namespace mf_emu
