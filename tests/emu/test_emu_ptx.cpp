// Fidelity of the emulated PTX ops (src/cuda/ptx.cuh under MF_CUDA_EMU), each
// on its own, against the PTX ISA's fragment tables and CuTe's published
// layouts (copied below as data, with the file they come from), not against
// our kernels:
//   mma.sync m16n8k16 (f16, bf16): one-hot A over every (m, k) and random
//     integer operands, register images built from CuTe's SM80_16x8x16 traits;
//   ldmatrix x4 / .trans: rows given in a scrambled order, checked against
//     CuTe's SM75_U32x4_LDSM_N / SM75_U16x8_LDSM_T bit maps;
//   cp.async: poison before the wait, data (and the zero fill) after, groups;
//   mbarrier: phases and parity over several rounds, arrive.noinc copies;
//   TMA 2D / 3D: box, out-of-bounds zero fill, every swizzle, against the
//     driver's documented semantics and CuTe's Swizzle<B,4,3>;
//   wgmma: SS and RS, K-major and MN-major, every swizzle mode and no swizzle
//     with explicit LBO / SBO, N = 8 ... 256, one-hot A, CuTe's CLayout_64xN
//     and ALayout_64x16; groups chained across wait_group 1;
//   shuffles (idx / up / down / xor, widths), votes, match;
//   f32 -> f16 / bf16 conversions (round to nearest even), ex2.approx.ftz.
#include <algorithm>
#include <cmath>
#include <random>

#include "cuda/portable.cuh"
#include "cuda/ptx.cuh"
#include "emu_test.h"

namespace {

// ---- CuTe's layouts (data) -----------------------------------------------------------------------

// cute/atom/mma_traits_sm80.hpp, SM80_16x8x16_F16F16F16F16_TN (and its f32 / bf16 variants):
//   ALayout ((4,8),(2,2,2)):((32,1),(16,8,128)) over (M16, K16)
//   BLayout ((4,8),(2,2)):((16,1),(8,64))      over (N8, K16)
//   CLayout ((4,8),(2,2)):((32,1),(16,8))      over (M16, N8)
const TV kMmaA{{{4, 8}, {32, 1}}, {{2, 2, 2}, {16, 8, 128}}};
const TV kMmaB{{{4, 8}, {16, 1}}, {{2, 2}, {8, 64}}};
const TV kMmaC{{{4, 8}, {32, 1}}, {{2, 2}, {16, 8}}};
// cute/atom/copy_traits_sm75.hpp (maps to bits of the four 8x8 b16 matrices, row-major,
// matrix j at bits 1024 j; the source: thread t supplies bits [128 t, 128 t + 128)):
//   SM75_U32x4_LDSM_N DstLayout (32,(32,4)):(32,(1,1024))
//   SM75_U16x8_LDSM_T DstLayout ((4,8),(16,2,4)):((256,16),(1,128,1024))
const TV kLdsmN{{{32}, {32}}, {{32, 4}, {1, 1024}}};
const TV kLdsmT{{{4, 8}, {256, 16}}, {{16, 2, 4}, {1, 128, 1024}}};
// cute/atom/mma_traits_sm90_gmma.hpp:
//   CLayout_64xN      ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512)) over (M64, N)
//   ALayout_64x16 (RS, 16-bit) ((4,8,4),(2,2,2)):((128,1,16),(64,8,512)) over (M64, K16)
TV wg_c(int n) { return TV{{{4, 8, 4}, {128, 1, 16}}, {{2, 2, n / 8}, {64, 8, 512}}}; }
const TV kWgA{{{4, 8, 4}, {128, 1, 16}}, {{2, 2, 2}, {64, 8, 512}}};
// CuTe's Swizzle<B, M, S>: x ^ ((x & (((1 << B) - 1) << (M + S))) >> S), on byte offsets with M = 4, S = 3.
uint32_t cute_swizzle(uint32_t x, int b) { return b ? x ^ ((x & (((1u << b) - 1) << 7)) >> 3) : x; }

std::mt19937 rng(1234);
int rnd(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

uint16_t to16(float f, bool bf) { return bf ? f2bf(f) : f2h(f); }

// ---- mma.sync ------------------------------------------------------------------------------------

// One warp per block: lane l's registers a[l][4], b[l][2], c[l][4] -> d[l][4].
template <bool BF16>
__global__ void mma_kernel(const uint32_t *a, const uint32_t *b, const float *c, float *d) {
    const int l = threadIdx.x, k = blockIdx.x;
    uint32_t ar[4];
    float acc[4];
    for (int i = 0; i < 4; i++) ar[i] = a[(k * 32 + l) * 4 + i], acc[i] = c[(k * 32 + l) * 4 + i];
    ptx::mma_m16n8k16<BF16>(acc, ar, b[(k * 32 + l) * 2], b[(k * 32 + l) * 2 + 1]);
    for (int i = 0; i < 4; i++) d[(k * 32 + l) * 4 + i] = acc[i];
}

template <bool BF16> void test_mma() {
    // Cases: 256 one-hot A (m0, k0) with B[k][n] = 8 k + n + 1, then 16 random integer cases with C.
    const int cases = 256 + 16;
    std::vector<float> A(cases * 256), B(cases * 128), C(cases * 128, 0.0f);
    for (int cs = 0; cs < cases; cs++)
        for (int m = 0; m < 16; m++)
            for (int k = 0; k < 16; k++) {
                A[cs * 256 + m * 16 + k] = cs < 256 ? (float)(cs == m * 16 + k) : (float)rnd(-4, 4);
                if (m < 8) B[cs * 128 + k * 8 + m] = cs < 256 ? (float)(8 * k + m + 1) : (float)rnd(-4, 4);
            }
    for (int cs = 256; cs < cases; cs++)
        for (int i = 0; i < 128; i++) C[cs * 128 + i] = (float)rnd(-64, 64);
    std::vector<uint32_t> ra(cases * 32 * 4, 0), rb(cases * 32 * 2, 0);
    std::vector<float> rc(cases * 32 * 4);
    for (int cs = 0; cs < cases; cs++)
        for (int t = 0; t < 32; t++) {
            for (int v = 0; v < 8; v++) {
                const int idx = kMmaA(t, v), m = idx % 16, k = idx / 16;
                ra[(cs * 32 + t) * 4 + v / 2] |= (uint32_t)to16(A[cs * 256 + m * 16 + k], BF16) << (16 * (v % 2));
            }
            for (int v = 0; v < 4; v++) {
                const int idx = kMmaB(t, v), n = idx % 8, k = idx / 8;
                rb[(cs * 32 + t) * 2 + v / 2] |= (uint32_t)to16(B[cs * 128 + k * 8 + n], BF16) << (16 * (v % 2));
            }
            for (int v = 0; v < 4; v++) {
                const int idx = kMmaC(t, v), m = idx % 16, n = idx / 16;
                rc[(cs * 32 + t) * 4 + v] = C[cs * 128 + m * 8 + n];
            }
        }
    Dev<uint32_t> da(ra), db(rb);
    Dev<float> dc(rc), dd(rc.size());
    MF_LAUNCH(mma_kernel<BF16>, cases, 32, 0, 0, da.p, db.p, dc.p, dd.p);
    const std::vector<float> out = dd.get();
    int bad = 0;
    for (int cs = 0; cs < cases; cs++)
        for (int t = 0; t < 32; t++)
            for (int v = 0; v < 4; v++) {
                const int idx = kMmaC(t, v), m = idx % 16, n = idx / 16;
                double s = C[cs * 128 + m * 8 + n];
                for (int k = 0; k < 16; k++) s += (double)A[cs * 256 + m * 16 + k] * B[cs * 128 + k * 8 + n];
                bad += out[(cs * 32 + t) * 4 + v] != (float)s;
            }
    CHECK(bad == 0, "mma.sync m16n8k16 %s: %d of %d outputs differ from A.B + C", BF16 ? "bf16" : "f16", bad,
          cases * 128);
}

// ---- ldmatrix ----------------------------------------------------------------------------------------

// 32 rows of 8 b16 in shared memory, values 100 r + c; lane l addresses row perm[l].
template <bool TRANS> __global__ void ldsm_kernel(const int *perm, uint32_t *out) {
    MF_SHARED_ALIGNED(16, uint16_t, tile, [32 * 8]);
    const int l = threadIdx.x;
    for (int c = 0; c < 8; c++) tile[l * 8 + c] = (uint16_t)(100 * l + c);
    __syncthreads();
    uint32_t r[4];
    const uint32_t addr = ptx::smem_u32(&tile[perm[l] * 8]);
    if (TRANS) ptx::ldmatrix_x4_trans(r, addr);
    else ptx::ldmatrix_x4(r, addr);
    for (int j = 0; j < 4; j++) out[l * 4 + j] = r[j];
}

template <bool TRANS> void test_ldmatrix() {
    std::vector<int> perm(32);
    for (int i = 0; i < 32; i++) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    Dev<int> dp(perm);
    Dev<uint32_t> dout(128);
    MF_LAUNCH(ldsm_kernel<TRANS>, 1, 32, 0, 0, dp.p, dout.p);
    const std::vector<uint32_t> out = dout.get();
    const TV &dst = TRANS ? kLdsmT : kLdsmN;
    int bad = 0;
    for (int l = 0; l < 32; l++)
        for (int v = 0; v < 128; v += 16) { // each 16-bit element of the lane's 4 registers
            const int bit = dst(l, v);        // into the logical 4 x (8 x 8) b16 source
            const int src_lane = bit / 128, col = bit % 128 / 16;
            const uint16_t want = (uint16_t)(100 * perm[src_lane] + col);
            const int reg = v / 32, half = v % 32 / 16;
            bad += (uint16_t)(out[l * 4 + reg] >> (16 * half)) != want;
        }
    CHECK(bad == 0, "ldmatrix.x4%s: %d of 256 elements differ from CuTe's bit map", TRANS ? ".trans" : "", bad);
}

// ---- cp.async ------------------------------------------------------------------------------------------

// Thread t copies 16 bytes from src + 16 t with src-size sizes[t] into two
// groups (t < 16 the first). Records what it reads before and after waits.
__global__ void cp_kernel(const uint8_t *src, const int *sizes, uint8_t *early, uint8_t *mid, uint8_t *late) {
    MF_SHARED_ALIGNED(16, uint8_t, buf, [32 * 16]);
    const int t = threadIdx.x;
    const uint32_t dst = ptx::smem_u32(&buf[t * 16]);
    if (t < 16) ptx::cp_async_cg16(dst, src + t * 16, sizes[t]);
    ptx::cp_async_commit();
    if (t >= 16) ptx::cp_async_cg16(dst, src + t * 16, sizes[t]);
    ptx::cp_async_commit();
    for (int i = 0; i < 16; i++) early[t * 16 + i] = buf[t * 16 + i]; // before any wait: in flight
    ptx::cp_async_wait<1>();                                           // the first group only
    for (int i = 0; i < 16; i++) mid[t * 16 + i] = buf[t * 16 + i];
    ptx::cp_async_wait<0>();
    for (int i = 0; i < 16; i++) late[t * 16 + i] = buf[t * 16 + i];
}

void test_cp_async() {
    std::vector<uint8_t> src(512);
    for (int i = 0; i < 512; i++) src[i] = (uint8_t)(i * 7 + 3);
    std::vector<int> sizes(32);
    for (int t = 0; t < 32; t++) sizes[t] = t % 3 == 0 ? 16 : t % 3 == 1 ? 0 : 8;
    Dev<uint8_t> ds(src), de(512), dm(512), dl(512);
    Dev<int> dz(sizes);
    MF_LAUNCH(cp_kernel, 1, 32, 0, 0, ds.p, dz.p, de.p, dm.p, dl.p);
    const auto e = de.get(), m = dm.get(), l = dl.get();
    int bad_early = 0, bad_mid = 0, bad_late = 0;
    for (int t = 0; t < 32; t++)
        for (int i = 0; i < 16; i++) {
            const uint8_t want = i < sizes[t] ? src[t * 16 + i] : 0;
            bad_early += e[t * 16 + i] != 0xff;
            bad_mid += m[t * 16 + i] != (t < 16 ? want : 0xff);
            bad_late += l[t * 16 + i] != want;
        }
    CHECK(bad_early == 0, "cp.async: %d bytes read before any wait were not poison", bad_early);
    CHECK(bad_mid == 0, "cp.async.wait_group 1: %d bytes wrong (first group landed, second not)", bad_mid);
    CHECK(bad_late == 0, "cp.async.wait_group 0: %d bytes wrong (data, then zero fill past src-size)", bad_late);
}

// ---- mbarrier ----------------------------------------------------------------------------------------------

// 2 warps pass 6 values through one slot: warp 1 writes slot, arrives on
// `full` (count 32), warp 0 waits (parity of the round), reads, arrives on
// `empty` (count 32). try_wait.parity(1) on a fresh barrier must be true.
__global__ void mbar_kernel(int *out, int *fresh) {
    MF_SHARED(uint64_t, bars, [2]);
    MF_SHARED(int, slot, [32]);
    const int t = threadIdx.x, lane = t & 31;
    const uint32_t full = ptx::smem_u32(&bars[0]), empty = ptx::smem_u32(&bars[1]);
    if (t == 0) {
        ptx::mbarrier_init(full, 32), ptx::mbarrier_init(empty, 32);
        ptx::fence_mbarrier_init();
    }
    __syncthreads();
    if (t == 0) *fresh = ptx::mbarrier_try_wait_parity(full, 1);
    for (int round = 0; round < 6; round++) {
        const uint32_t ph = round & 1;
        if (t >= 32) {
            ptx::mbarrier_try_wait_parity(empty, ph ^ 1); // the consumer freed the slot
            slot[lane] = 1000 * round + lane;
            ptx::mbarrier_arrive(full);
        } else {
            ptx::mbarrier_try_wait_parity(full, ph);
            out[round * 32 + lane] = slot[lane];
            ptx::mbarrier_arrive(empty);
        }
    }
}

// cp.async.mbarrier.arrive.noinc: 64 threads copy 16 bytes each and arrive;
// one reader waits on the barrier and reads all 1024 bytes.
__global__ void mbar_cp_kernel(const uint8_t *src, uint8_t *dst) {
    MF_SHARED(uint64_t, bar);
    MF_SHARED_ALIGNED(16, uint8_t, buf, [1024]);
    const int t = threadIdx.x;
    const uint32_t b = ptx::smem_u32(&bar);
    if (t == 0) ptx::mbarrier_init(b, 64), ptx::fence_mbarrier_init();
    __syncthreads();
    ptx::cp_async_cg16(ptx::smem_u32(&buf[t * 16]), src + t * 16, 16);
    ptx::cp_async_mbarrier_arrive_noinc(b);
    if (t == 5) {
        ptx::mbarrier_try_wait_parity(b, 0);
        for (int i = 0; i < 1024; i++) dst[i] = buf[i];
    }
}

void test_mbarrier() {
    Dev<int> out(6 * 32), fresh(1);
    MF_LAUNCH(mbar_kernel, 1, 64, 0, 0, out.p, fresh.p);
    const auto o = out.get();
    int bad = 0;
    for (int r = 0; r < 6; r++)
        for (int l = 0; l < 32; l++) bad += o[r * 32 + l] != 1000 * r + l;
    CHECK(bad == 0, "mbarrier producer / consumer over 6 phases: %d values wrong", bad);
    CHECK(fresh.get()[0] == 1, "try_wait.parity(1) on a fresh barrier must report the phase before 0 complete");
    std::vector<uint8_t> src(1024);
    for (int i = 0; i < 1024; i++) src[i] = (uint8_t)(i * 13 + 1);
    Dev<uint8_t> ds(src), dd(1024);
    MF_LAUNCH(mbar_cp_kernel, 1, 64, 0, 0, ds.p, dd.p);
    CHECK(dd.get() == src, "cp.async.mbarrier.arrive.noinc: the data after the phase completes");
}

// ---- TMA -------------------------------------------------------------------------------------------------------

// One thread loads the box at (c0, c1, c2) into dynamic shared memory (1024-
// aligned), the block copies the raw shared bytes out.
__global__ void tma_kernel(const __grid_constant__ CUtensorMap map, int rank, int c0, int c1, int c2, int bytes,
                           uint8_t *out) {
    MF_DYN_SHARED(uint8_t, raw);
    MF_SHARED(uint64_t, bar);
    uint8_t *tile = raw + (((ptx::smem_u32(raw) + 1023u) & ~1023u) - ptx::smem_u32(raw));
    const uint32_t b = ptx::smem_u32(&bar);
    if (threadIdx.x == 0) {
        ptx::mbarrier_init(b, 1), ptx::fence_mbarrier_init();
        ptx::mbarrier_arrive_expect_tx(b, (uint32_t)bytes);
        if (rank == 2) ptx::tma_load_2d(ptx::smem_u32(tile), &map, c0, c1, b);
        else ptx::tma_load_3d(ptx::smem_u32(tile), &map, c0, c1, c2, b);
    }
    __syncthreads();
    ptx::mbarrier_try_wait_parity(b, 0);
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) out[i] = tile[i];
}

void test_tma() {
    // Tensor (D2, D1, D0) of 16-bit values v(i2, i1, i0) = 1 + i0 + 100 i1 + 10000 i2 (mod 2^16), row stride padded.
    const int D0 = 100, D1 = 37, D2 = 3, ld0 = 104; // elements; ld0 * 2 bytes is a multiple of 16
    std::vector<uint16_t> g((size_t)D2 * D1 * ld0, 0xabcd);
    for (int i2 = 0; i2 < D2; i2++)
        for (int i1 = 0; i1 < D1; i1++)
            for (int i0 = 0; i0 < D0; i0++) g[((size_t)i2 * D1 + i1) * ld0 + i0] = (uint16_t)(1 + i0 + 100 * i1 + 10000 * i2);
    Dev<uint16_t> dg(g);
    struct Case {
        int rank, swz, box0, box1, c0, c1, c2;
    };
    const Case cases[] = {{2, CU_TENSOR_MAP_SWIZZLE_128B, 64, 16, 0, 0, 0},   {2, CU_TENSOR_MAP_SWIZZLE_128B, 64, 16, 64, 30, 0},
                          {2, CU_TENSOR_MAP_SWIZZLE_128B, 64, 8, -8, -3, 0},  {2, CU_TENSOR_MAP_SWIZZLE_64B, 32, 16, 80, 5, 0},
                          {2, CU_TENSOR_MAP_SWIZZLE_32B, 16, 16, 90, 25, 0},  {2, CU_TENSOR_MAP_SWIZZLE_NONE, 24, 5, 96, 35, 0},
                          {3, CU_TENSOR_MAP_SWIZZLE_128B, 64, 8, 48, 33, 2},  {3, CU_TENSOR_MAP_SWIZZLE_NONE, 8, 4, 0, 0, -1},
                          {3, CU_TENSOR_MAP_SWIZZLE_128B, 64, 8, 200, 0, 0}}; // the last box lies wholly outside
    for (const Case &cs : cases) {
        CUtensorMap map;
        const cuuint64_t dims[3] = {(cuuint64_t)D0, (cuuint64_t)D1, (cuuint64_t)D2};
        const cuuint64_t strides[2] = {(cuuint64_t)ld0 * 2, (cuuint64_t)ld0 * 2 * D1};
        const cuuint32_t box[3] = {(cuuint32_t)cs.box0, (cuuint32_t)cs.box1, cs.rank == 3 ? 2u : 1u}, es[3] = {1, 1, 1};
        const CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)cs.rank, dg.p, dims,
                                                  strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                  (CUtensorMapSwizzle)cs.swz, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled (rank %d, swizzle %d)", cs.rank, cs.swz);
        const int n2 = cs.rank == 3 ? 2 : 1, bytes = cs.box0 * cs.box1 * n2 * 2;
        Dev<uint8_t> out((size_t)bytes);
        MF_LAUNCH(tma_kernel, 1, 128, (size_t)bytes + 1024 + 64, 0, map, cs.rank, cs.c0, cs.c1, cs.c2, bytes, out.p);
        const auto o = out.get();
        // The driver's semantics: the box in row-major order of its dimensions (dim 0
        // fastest), elements outside the tensor 0, each byte at CuTe's swizzled offset.
        const int b = cs.swz == CU_TENSOR_MAP_SWIZZLE_128B ? 3 : cs.swz == CU_TENSOR_MAP_SWIZZLE_64B ? 2 : cs.swz == CU_TENSOR_MAP_SWIZZLE_32B ? 1 : 0;
        int bad = 0;
        for (int i2 = 0; i2 < n2; i2++)
            for (int i1 = 0; i1 < cs.box1; i1++)
                for (int i0 = 0; i0 < cs.box0; i0++) {
                    const int x0 = cs.c0 + i0, x1 = cs.c1 + i1, x2 = cs.c2 + i2;
                    const bool in = x0 >= 0 && x0 < D0 && x1 >= 0 && x1 < D1 && x2 >= 0 && x2 < D2;
                    const uint16_t want = in ? g[((size_t)x2 * D1 + x1) * ld0 + x0] : 0;
                    const uint32_t off = cute_swizzle((uint32_t)(((i2 * cs.box1 + i1) * cs.box0 + i0) * 2), b);
                    uint16_t got;
                    memcpy(&got, &o[off], 2);
                    bad += got != want;
                }
        CHECK(bad == 0, "TMA %dD box (%d, %d) at (%d, %d, %d), swizzle mode %d: %d elements wrong", cs.rank, cs.box0,
              cs.box1, cs.c0, cs.c1, cs.c2, cs.swz, bad);
    }
}

// ---- wgmma --------------------------------------------------------------------------------------------------------

// Shared-memory operand images (16-bit elements), built from CuTe's canonical
// GMMA layouts (mma_traits_sm90_gmma.hpp, make_gmma_desc's comment), in
// 16-byte units T = 8 elements, W = swizzle width in units (1 none .. 8 128B):
//   K-major  INTERLEAVE ((8,m),(T,2)):((1T,SBO),(1,LBO)); swizzled ((8,m),(T,2)):((WT,SBO),(1,T))
//   MN-major INTERLEAVE ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)); swizzled ((T,W,m),(8,k)):((1,T,LBO),(WT,SBO))
// then Swizzle<log2 W, 4, 3> on the byte offset from a pattern-aligned base.
struct Operand {
    bool k_major;
    int w;          // swizzle width in 16-byte units: 1 (none), 2, 4, 8
    uint32_t lbo, sbo; // bytes
};
uint32_t element_offset(const Operand &o, int mn, int k) { // bytes, before the swizzle
    const uint32_t T = 8;
    if (o.k_major) {
        const uint32_t i0 = mn % 8, i1 = mn / 8, j0 = k % T, j1 = k / T;
        return o.w == 1 ? (i0 * T + j0) * 2 + i1 * o.sbo + j1 * o.lbo : (i0 * o.w * T + j0) * 2 + i1 * o.sbo + j1 * 16;
    }
    const uint32_t e = mn % T, c = mn / T, k0 = k % 8, k1 = k / 8;
    if (o.w == 1) return e * 2 + c * o.sbo + k0 * 16 + k1 * o.lbo;
    return e * 2 + (c % o.w) * 16 + (c / o.w) * o.lbo + k0 * o.w * 16 + k1 * o.sbo;
}
int log2i(int w) { return w == 8 ? 3 : w == 4 ? 2 : w == 2 ? 1 : 0; }
uint64_t descriptor(uint32_t addr, const Operand &o) {
    const int mode = o.w == 8 ? 1 : o.w == 4 ? 2 : o.w == 2 ? 3 : 0;
    return (uint64_t)((addr & 0x3ffff) >> 4) | (uint64_t)((o.lbo >> 4) & 0x3fff) << 16 |
           (uint64_t)((o.sbo >> 4) & 0x3fff) << 32 | (uint64_t)mode << 62;
}

// smem: A image at 0, B image at 32 KB (both 1024-aligned); a_regs != NULL: A from registers.
template <int N, bool BF16, bool RS>
__global__ void wgmma_kernel(const uint16_t *img, int img_bytes, uint64_t da_off, uint64_t da_rest, uint64_t db_off,
                             uint64_t db_rest, int trans_a, int trans_b, const uint32_t *a_regs, float *d, int chain) {
    MF_DYN_SHARED(uint8_t, raw);
    uint8_t *base = raw + (((ptx::smem_u32(raw) + 1023u) & ~1023u) - ptx::smem_u32(raw));
    for (int i = threadIdx.x; i < img_bytes / 2; i += blockDim.x) reinterpret_cast<uint16_t *>(base)[i] = img[i];
    __syncthreads();
    ptx::fence_proxy_async_shared_cta();
    const uint32_t s = ptx::smem_u32(base);
    const uint64_t da = da_rest | (((s + da_off) & 0x3ffff) >> 4), db = db_rest | (((s + db_off) & 0x3ffff) >> 4);
    float acc[N / 2];
    for (int i = 0; i < N / 2; i++) acc[i] = 0.5f * (float)(i % 7); // overwritten: the first wgmma does not accumulate
    using T = typename std::conditional<BF16, __nv_bfloat16, __half>::type;
    uint32_t a[4];
    for (int i = 0; i < 4; i++) a[i] = RS ? a_regs[threadIdx.x * 4 + i] : 0;
    for (int rep = 0; rep < chain; rep++) { // chain groups: the second and later accumulate
        ptx::wgmma_fence();
        if constexpr (RS) {
            if (rep == 0) // scale-d 0 is not expressible through wgmma_rs_tb: zero the accumulators
                for (int i = 0; i < N / 2; i++) acc[i] = 0.0f;
            ptx::wgmma_rs_tb<N, T>(acc, a, db);
        } else {
            if ((N == 64 || N == 128) && !trans_a && !trans_b) { // what ptx.cuh has device code for
                ptx::wgmma_ss<(N == 64 || N == 128) ? N : 64, T>(
                    *reinterpret_cast<float(*)[(N == 64 || N == 128) ? N / 2 : 32]>(acc), da, db, rep > 0);
            } else { // other N and transposed operands: the emulated instruction itself
                ::mf_emu::wgmma_mma(N, BF16 ? ::mf_emu::kMmaBF16 : ::mf_emu::kMmaF16, acc, nullptr, da, db, rep > 0, 1,
                                    1, trans_a, trans_b, ::mf_emu::Loc::here());
            }
        }
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<1>();
    }
    ptx::wgmma_wait_group<0>();
    ptx::fence_acc(acc);
    for (int i = 0; i < N / 2; i++) d[threadIdx.x * (N / 2) + i] = acc[i];
}

template <int N, bool BF16, bool RS> void wgmma_case(const Operand &oa, const Operand &ob, int kk_bytes, int chain) {
    // A (64 x 16): one-hot per warp... use distinct small integers so every (m, k) matters:
    // A[m][k] = (m + 3 k) % 5 - 2, B[n][k] = (2 n + k) % 7 - 3 (exact in f16 and bf16).
    std::vector<float> A(64 * 16), B((size_t)N * 16);
    for (int m = 0; m < 64; m++)
        for (int k = 0; k < 16; k++) A[m * 16 + k] = (float)((m + 3 * k + rnd(0, 4)) % 5 - 2);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 16; k++) B[n * 16 + k] = (float)((2 * n + k + rnd(0, 6)) % 7 - 3);
    const int b_base = 32768, img_bytes = 65536;
    std::vector<uint16_t> img(img_bytes / 2, 0x7fff); // NaN: a read off the operand shows
    auto put = [&](uint32_t base, const Operand &o, int mn, int k, float v) {
        const uint32_t off = cute_swizzle(base + kk_bytes + element_offset(o, mn, k), log2i(o.w));
        img[off / 2] = to16(v, BF16);
    };
    if (!RS)
        for (int m = 0; m < 64; m++)
            for (int k = 0; k < 16; k++) put(0, oa, m, k, A[m * 16 + k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 16; k++) put((uint32_t)b_base, ob, n, k, B[n * 16 + k]);
    std::vector<uint32_t> ar(128 * 4, 0);
    for (int t = 0; t < 128; t++)
        for (int v = 0; v < 8; v++) {
            const int idx = kWgA(t, v), m = idx % 64, k = idx / 64;
            ar[t * 4 + v / 2] |= (uint32_t)to16(A[m * 16 + k], BF16) << (16 * (v % 2));
        }
    const uint64_t da = descriptor(0, oa), db = descriptor(0, ob);
    Dev<uint16_t> dimg(img);
    Dev<uint32_t> dar(ar);
    Dev<float> dd((size_t)128 * (N / 2));
    cudaFuncSetAttribute(wgmma_kernel<N, BF16, RS>, cudaFuncAttributeMaxDynamicSharedMemorySize, img_bytes + 1024);
    MF_LAUNCH((wgmma_kernel<N, BF16, RS>), 1, 128, (size_t)img_bytes + 1024, 0, dimg.p, img_bytes, (uint64_t)kk_bytes,
              da, (uint64_t)(b_base + kk_bytes), db, oa.k_major ? 0 : 1, ob.k_major ? 0 : 1, dar.p, dd.p, chain);
    const auto out = dd.get();
    const TV c = wg_c(N);
    int bad = 0;
    for (int t = 0; t < 128; t++)
        for (int v = 0; v < N / 2; v++) {
            const int idx = c(t, v), m = idx % 64, n = idx / 64;
            double s = 0;
            for (int k = 0; k < 16; k++) s += (double)A[m * 16 + k] * B[n * 16 + k];
            bad += out[t * (N / 2) + v] != (float)(s * chain);
        }
    CHECK(bad == 0,
          "wgmma m64n%dk16 %s %s: A %s-major w%d, B %s-major w%d (lbo %u sbo %u), k offset %d, %d group(s): %d of %d "
          "outputs wrong",
          N, BF16 ? "bf16" : "f16", RS ? "RS" : "SS", oa.k_major ? "K" : "M", oa.w, ob.k_major ? "K" : "N", ob.w, ob.lbo,
          ob.sbo, kk_bytes, chain, bad, 64 * N);
}

void test_wgmma() {
    const Operand k128{true, 8, 16, 1024}, k64{true, 4, 16, 512}, k32{true, 2, 16, 256};
    const Operand kint{true, 1, 128, 256}; // no swizzle: core matrices (8 rows x 16 bytes) at LBO along K, SBO along MN
    // The kernels' layouts: both K-major 128B (moe_gemm, attention S = Q K^T), k steps of 32 bytes in the row.
    for (int kk = 0; kk < 128; kk += 32) wgmma_case<128, true, false>(k128, k128, kk, 1);
    wgmma_case<64, false, false>(k128, k128, 64, 1);
    wgmma_case<8, true, false>(k128, k128, 0, 1);
    wgmma_case<256, false, false>(k128, k128, 32, 1);
    wgmma_case<64, true, false>(k64, k64, 32, 1);
    wgmma_case<64, true, false>(k32, k32, 0, 1);
    wgmma_case<64, false, false>(kint, kint, 0, 1);
    // M / N-major operands: A transposed (imm-trans-a), B transposed (imm-trans-b), each swizzle.
    const Operand mn128{false, 8, 8192, 1024}, mn64{false, 4, 4096, 512}, mn32{false, 2, 2048, 256};
    const Operand mnint{false, 1, 1024, 128}; // no swizzle: 8-element chunks of N at SBO, K rows of 8 at LBO
    wgmma_case<128, true, false>(mn128, mn128, 0, 1);
    wgmma_case<64, false, false>(mn64, k128, 0, 1);
    wgmma_case<64, true, false>(k128, mn32, 0, 1);
    wgmma_case<64, true, false>(mnint, mnint, 0, 1);
    // RS with B N-major 128B (the attention kernel's O += P V), LBO = the next 64 N, and chained groups.
    wgmma_case<64, true, true>(k128, Operand{false, 8, 2048, 1024}, 0, 1);
    wgmma_case<128, false, true>(k128, Operand{false, 8, 2048, 1024}, 0, 1);
    wgmma_case<256, true, true>(k128, Operand{false, 8, 2048, 1024}, 0, 1);
    wgmma_case<128, true, false>(k128, k128, 0, 3);
    wgmma_case<64, true, true>(k128, Operand{false, 8, 2048, 1024}, 0, 2);
}

// ---- shuffles, votes, match ---------------------------------------------------------------------------------

__global__ void shfl_kernel(int *out) {
    const int l = threadIdx.x;
    const int v = 100 + l;
    int *o = out + l * 16;
    o[0] = __shfl_sync(0xffffffffu, v, (l * 7) % 32);
    o[1] = __shfl_sync(0xffffffffu, v, l + 3, 8); // srcLane modulo width, inside the segment
    o[2] = __shfl_up_sync(0xffffffffu, v, 3);
    o[3] = __shfl_up_sync(0xffffffffu, v, 2, 8);
    o[4] = __shfl_down_sync(0xffffffffu, v, 5);
    o[5] = __shfl_down_sync(0xffffffffu, v, 3, 16);
    o[6] = __shfl_xor_sync(0xffffffffu, v, 9);
    o[7] = __shfl_xor_sync(0xffffffffu, v, 12, 8); // a later segment: own value; an earlier one: allowed
    o[8] = (int)__ballot_sync(0xffffffffu, l % 3 == 0);
    o[9] = __any_sync(0xffffffffu, l == 17);
    o[10] = __all_sync(0xffffffffu, l < 31);
    o[11] = (int)__match_any_sync(0xffffffffu, l / 5);
    const double dv = __shfl_xor_sync(0xffffffffu, 0.25 * l, 1); // 8-byte values
    o[12] = (int)(dv * 4);
    if (l < 16) o[13] = __shfl_xor_sync(0x0000ffffu, v, 4); // a half-warp mask
    else o[13] = __shfl_xor_sync(0xffff0000u, v, 4);
}

void test_shuffles() {
    Dev<int> out(32 * 16);
    MF_LAUNCH(shfl_kernel, 1, 32, 0, 0, out.p);
    const auto o = out.get();
    int bad = 0;
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++) ballot |= (unsigned)(l % 3 == 0) << l;
    for (int l = 0; l < 32; l++) {
        const int *x = &o[l * 16];
        auto val = [](int lane) { return 100 + lane; };
        const int seg8 = l & ~7, seg16 = l & ~15;
        unsigned match = 0;
        for (int j = 0; j < 32; j++) match |= (unsigned)(j / 5 == l / 5) << j;
        const int x7 = l ^ 12;
        bad += x[0] != val((l * 7) % 32);
        bad += x[1] != val(seg8 + ((l + 3) & 7));
        bad += x[2] != (l >= 3 ? val(l - 3) : val(l));
        bad += x[3] != (l - 2 >= seg8 ? val(l - 2) : val(l));
        bad += x[4] != (l + 5 < 32 ? val(l + 5) : val(l));
        bad += x[5] != (l + 3 < seg16 + 16 ? val(l + 3) : val(l));
        bad += x[6] != val(l ^ 9);
        bad += x[7] != (x7 < seg8 + 8 ? val(x7) : val(l));
        bad += (unsigned)x[8] != ballot;
        bad += x[9] != 1 || x[10] != 0;
        bad += (unsigned)x[11] != match;
        bad += x[12] != (l ^ 1);
        bad += x[13] != val(l ^ 4);
    }
    CHECK(bad == 0, "shuffles / votes / match: %d results differ from CUDA's definitions", bad);
}

// ---- conversions and ex2 ------------------------------------------------------------------------------------------

void test_conversions() {
    // f16: against GCC's IEEE _Float16 conversion (round to nearest even) over
    // edge values and random bit patterns; NaN gives the canonical 0x7fff.
    std::vector<float> xs = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f, 5.96e-8f, 2.98e-8f,
                             2.99e-8f, 6.1e-5f, 6.09e-5f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, INFINITY, -INFINITY};
    std::mt19937 r(7);
    for (int i = 0; i < 200000; i++) {
        uint32_t u = r();
        float f;
        memcpy(&f, &u, 4);
        if (f == f) xs.push_back(f);
    }
    int bad_h = 0, bad_b = 0;
    for (float f : xs) {
        bad_h += __half_as_ushort(__float2half_rn(f)) != f2h(f);
        // bf16: the nearest of the two candidates, ties to the even one.
        uint32_t u;
        memcpy(&u, &f, 4);
        const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
        // Past the largest finite value the next candidate is infinity, at the distance of 2^128 (IEEE's rule).
        const double vh = (hi & 0x7fff) == 0x7f80 ? std::copysign(std::ldexp(1.0, 128), (double)f) : (double)bf2f(hi);
        const double dl = std::fabs((double)bf2f(lo) - f), dh = std::fabs(vh - f);
        uint16_t want = dl < dh ? lo : dh < dl ? hi : (lo & 1 ? hi : lo);
        if (std::isinf(f)) want = lo;
        bad_b += __bfloat16_as_ushort(__float2bfloat16_rn(f)) != want;
    }
    CHECK(bad_h == 0, "f32 -> f16: %d of %zu conversions differ from IEEE round-to-nearest-even", bad_h, xs.size());
    CHECK(bad_b == 0, "f32 -> bf16: %d of %zu conversions are not the nearest (ties to even)", bad_b, xs.size());
    CHECK(__half_as_ushort(__float2half_rn(NAN)) == 0x7fff && __bfloat16_as_ushort(__float2bfloat16_rn(-NAN)) == 0x7fff,
          "NaN converts to the canonical 0x7fff");
    int bad_back = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        const float a = __half2float(__ushort_as_half((unsigned short)u)), b = h2f((uint16_t)u);
        bad_back += !(a == b || (a != a && b != b)) || (a == 0 && std::signbit(a) != std::signbit(b));
    }
    CHECK(bad_back == 0, "f16 -> f32: %d of 65536 patterns wrong", bad_back);
}

__global__ void ex2_kernel(const float *x, float *y, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = ptx::ex2_approx_ftz(x[i]);
}

void test_ex2() {
    std::vector<float> x = {0.0f, 1.0f, -1.0f, 10.0f, -126.0f, -127.0f, -140.0f, 127.0f, 128.0f, -INFINITY, INFINITY, 0.5f,
                            1e-40f};
    Dev<float> dx(x), dy(x.size());
    MF_LAUNCH(ex2_kernel, 1, 32, 0, 0, dx.p, dy.p, (int)x.size());
    const auto y = dy.get();
    CHECK(y[0] == 1.0f && y[1] == 2.0f && y[2] == 0.5f && y[3] == 1024.0f, "ex2: exact powers of two");
    CHECK(y[4] == std::ldexp(1.0f, -126) && y[5] == 0.0f && y[6] == 0.0f, "ex2.ftz: subnormal results flush to 0");
    CHECK(std::isinf(y[8]) && y[9] == 0.0f && std::isinf(y[10]), "ex2: overflow, -inf, +inf");
    CHECK(std::fabs(y[11] - 1.41421356f) < 1e-6f && y[12] == 1.0f, "ex2: 2^0.5; a subnormal input is 0");
}

} // namespace

int main() {
    test_mma<false>();
    test_mma<true>();
    test_ldmatrix<false>();
    test_ldmatrix<true>();
    test_cp_async();
    test_mbarrier();
    test_tma();
    test_wgmma();
    test_shuffles();
    test_conversions();
    test_ex2();
    return finish("test_emu_ptx");
}
