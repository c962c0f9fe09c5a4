// Golden probes: each PTX op of src/cuda/ptx.cuh (and the conversions and
// intrinsics the kernels lean on) run on fixed inputs; the outputs go to one
// file per probe. One source, two builds:
//   on a GPU (nvcc, sm_90a):  ptx_probe --write DIR   writes DIR/<probe>.bin
//   under the emulator:       ptx_probe --check DIR   compares with them
// so that the first GPU run pins the emulator to the hardware's own answers
// (commit DIR as tests/emu/golden/). Until then --check finds no files and
// exits 77 (CTest: skipped). Probes marked "ulp" compare f32 results within a
// tolerance (approximate instructions, accumulation order) and print the
// largest difference; all others must match to the bit (NaNs by class).
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/portable.cuh"
#include "cuda/ptx.cuh"

namespace {

// ---- kernels -----------------------------------------------------------------------------------------

template <bool BF16> __global__ void probe_mma(const uint32_t *a, const uint32_t *b, const float *c, float *d) {
    const int l = threadIdx.x, k = blockIdx.x;
    uint32_t ar[4];
    float acc[4];
    for (int i = 0; i < 4; i++) ar[i] = a[(k * 32 + l) * 4 + i], acc[i] = c[(k * 32 + l) * 4 + i];
    ptx::mma_m16n8k16<BF16>(acc, ar, b[(k * 32 + l) * 2], b[(k * 32 + l) * 2 + 1]);
    for (int i = 0; i < 4; i++) d[(k * 32 + l) * 4 + i] = acc[i];
}

template <bool TRANS> __global__ void probe_ldsm(uint32_t *out) {
    MF_SHARED_ALIGNED(16, uint16_t, tile, [32 * 8]);
    const int l = threadIdx.x;
    for (int c = 0; c < 8; c++) tile[l * 8 + c] = (uint16_t)(0x1000 * (l % 16) + 16 * l + c);
    __syncthreads();
    uint32_t r[4];
    const uint32_t addr = ptx::smem_u32(&tile[((l * 5 + 3) % 32) * 8]);
    if (TRANS) ptx::ldmatrix_x4_trans(r, addr);
    else ptx::ldmatrix_x4(r, addr);
    for (int j = 0; j < 4; j++) out[l * 4 + j] = r[j];
}

__global__ void probe_cp_async(const uint8_t *src, uint8_t *out) {
    MF_SHARED_ALIGNED(16, uint8_t, buf, [64 * 16]);
    const int t = threadIdx.x;
    ptx::cp_async_cg16(ptx::smem_u32(&buf[t * 16]), src + t * 16, (t * 5) % 17 == 16 ? 16 : (t * 5) % 17 & ~3);
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    __syncthreads();
    for (int i = 0; i < 16; i++) out[t * 16 + i] = buf[((t + 7) % 64) * 16 + i];
}

__global__ void probe_ex2(const float *x, float *y, int n) {
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (int)(gridDim.x * blockDim.x)) {
        y[2 * i] = ptx::ex2_approx_ftz(x[i]);
        y[2 * i + 1] = __expf(x[i] * 0.25f);
    }
}

__global__ void probe_cvt(const float *x, uint16_t *h, uint16_t *b, int n) {
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (int)(gridDim.x * blockDim.x)) {
        h[i] = __half_as_ushort(__float2half_rn(x[i]));
        b[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
    }
}

__global__ void probe_shfl(int *out) {
    const int l = threadIdx.x, v = 1000 + 7 * l;
    int *o = out + l * 8;
    o[0] = __shfl_sync(0xffffffffu, v, (l * 11) % 32);
    o[1] = __shfl_sync(0xffffffffu, v, l + 5, 8);
    o[2] = __shfl_up_sync(0xffffffffu, v, 5, 16);
    o[3] = __shfl_down_sync(0xffffffffu, v, 3, 8);
    o[4] = __shfl_xor_sync(0xffffffffu, v, 20, 16);
    o[5] = (int)__ballot_sync(0xffffffffu, (l * 7) % 5 < 2);
    o[6] = (int)__match_any_sync(0xffffffffu, (l * 3) % 7);
    o[7] = __any_sync(0xffffffffu, l == 9) + 2 * __all_sync(0xffffffffu, l < 32);
}

// The sm_90a ops: a TMA tile into shared memory (raw bytes out), and wgmma
// SS (both K-major, 128B swizzle) and RS (B N-major, 128B swizzle).
__global__ void probe_tma(const __grid_constant__ CUtensorMap map, int rank, int c0, int c1, int c2, int bytes,
                          uint8_t *out) {
#if MF_PTX_SM90
    MF_DYN_SHARED(uint8_t, raw);
    MF_SHARED(uint64_t, bar);
    uint8_t *tile = raw + (((ptx::smem_u32(raw) + 1023u) & ~1023u) - ptx::smem_u32(raw));
    const uint32_t b = ptx::smem_u32(&bar);
    if (threadIdx.x == 0) {
        ptx::mbarrier_init(b, 1);
        ptx::fence_mbarrier_init();
        ptx::mbarrier_arrive_expect_tx(b, (uint32_t)bytes);
        if (rank == 2) ptx::tma_load_2d(ptx::smem_u32(tile), &map, c0, c1, b);
        else ptx::tma_load_3d(ptx::smem_u32(tile), &map, c0, c1, c2, b);
    }
    __syncthreads();
    while (!ptx::mbarrier_try_wait_parity(b, 0)) {
    }
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) out[i] = tile[i];
#else
    (void)map, (void)rank, (void)c0, (void)c1, (void)c2, (void)bytes, (void)out;
    __trap();
#endif
}

// img: the shared-memory image (A at 0, B at 16 KB); a: the RS A fragments.
template <bool RS>
__global__ void probe_wgmma(const uint16_t *img, int img_bytes, const uint32_t *a, float *d, uint64_t da_bits,
                            uint64_t db_bits) {
#if MF_PTX_SM90
    MF_DYN_SHARED(uint8_t, raw);
    uint8_t *base = raw + (((ptx::smem_u32(raw) + 1023u) & ~1023u) - ptx::smem_u32(raw));
    for (int i = threadIdx.x; i < img_bytes / 2; i += blockDim.x) reinterpret_cast<uint16_t *>(base)[i] = img[i];
    __syncthreads();
    ptx::fence_proxy_async_shared_cta();
    const uint32_t s = ptx::smem_u32(base);
    const uint64_t da = da_bits | ((s & 0x3ffff) >> 4), db = db_bits | (((s + 16384) & 0x3ffff) >> 4);
    float acc[64];
    for (int i = 0; i < 64; i++) acc[i] = 0.25f * (float)(i % 5) - 0.5f;
    uint32_t af[4];
    for (int i = 0; i < 4; i++) af[i] = a[threadIdx.x * 4 + i];
    ptx::wgmma_fence();
    if constexpr (RS) ptx::wgmma_rs_tb<128, __half>(acc, af, db);
    else ptx::wgmma_ss<128, __nv_bfloat16>(acc, da, db, 1);
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    ptx::fence_acc(acc);
    for (int i = 0; i < 64; i++) d[threadIdx.x * 64 + i] = acc[i];
#else
    (void)img, (void)img_bytes, (void)a, (void)d, (void)da_bits, (void)db_bits;
    __trap();
#endif
}

// ---- host --------------------------------------------------------------------------------------------

uint32_t g_lcg = 12345;
uint32_t next() { return g_lcg = g_lcg * 1664525u + 1013904223u; }

struct Probe {
    std::string name;
    int ulp; // -1: bitwise; else f32 within this many ulps
    std::vector<uint8_t> out;
};
std::vector<Probe> g_probes;

bool ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    fprintf(stderr, "ptx_probe: %s: %s\n", what, cudaGetErrorString(e));
    return false;
}

template <class T> std::vector<uint8_t> fetch(const T *d, size_t n) {
    std::vector<uint8_t> h(n * sizeof(T));
    if (!ok(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost), "copy back")) exit(2);
    return h;
}
template <class T> T *upload(const std::vector<T> &h) {
    T *d = nullptr;
    if (!ok(cudaMalloc(reinterpret_cast<void **>(&d), h.size() * sizeof(T)), "cudaMalloc") ||
        !ok(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload"))
        exit(2);
    return d;
}

// A random f16 / bf16 pattern: small integers (exact: any accumulation order
// agrees) or wide magnitudes (exposes the accumulator's rounding).
uint16_t operand(bool bf, bool wide);
uint32_t pair(bool bf, bool wide) { // two operands, drawn in a fixed order
    const uint32_t lo = operand(bf, wide);
    return lo | (uint32_t)operand(bf, wide) << 16;
}
uint16_t operand(bool bf, bool wide) {
    if (!wide) {
        const float v = (float)((int)(next() % 9) - 4);
        if (bf) {
            uint32_t u;
            memcpy(&u, &v, 4);
            return (uint16_t)(u >> 16);
        }
        return __half_as_ushort(__float2half_rn(v));
    }
    const float mant = (float)(int)(next() % 2047 + 1) / 2048.0f;
    const float sign = (next() & 1) ? 1.0f : -1.0f;
    const float v = std::ldexp(mant * sign, (int)(next() % 24) - 12);
    return bf ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}

template <bool BF16> void run_mma(bool wide) {
    const int blocks = 8;
    std::vector<uint32_t> a(blocks * 32 * 4), b(blocks * 32 * 2);
    std::vector<float> c(blocks * 32 * 4);
    for (auto &x : a) x = pair(BF16, wide);
    for (auto &x : b) x = pair(BF16, wide);
    for (auto &x : c) x = wide ? std::ldexp((float)(int)(next() % 4001) - 2000.0f, -10) : (float)((int)(next() % 65) - 32);
    uint32_t *da = upload(a), *db = upload(b);
    float *dc = upload(c), *dd = upload(c);
    MF_LAUNCH(probe_mma<BF16>, blocks, 32, 0, 0, da, db, dc, dd);
    g_probes.push_back(Probe{std::string("mma_m16n8k16_") + (BF16 ? "bf16" : "f16") + (wide ? "_rounding" : "_exact"),
                             wide ? 2 : -1, fetch(dd, c.size())});
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
}

void run_simple() {
    uint32_t *o = nullptr;
    cudaMalloc(reinterpret_cast<void **>(&o), 128 * 4);
    MF_LAUNCH(probe_ldsm<false>, 1, 32, 0, 0, o);
    g_probes.push_back(Probe{"ldmatrix_x4", -1, fetch(o, 128)});
    MF_LAUNCH(probe_ldsm<true>, 1, 32, 0, 0, o);
    g_probes.push_back(Probe{"ldmatrix_x4_trans", -1, fetch(o, 128)});
    cudaFree(o);
    std::vector<uint8_t> src(1024);
    for (auto &x : src) x = (uint8_t)next();
    uint8_t *ds = upload(src), *dout = upload(src);
    MF_LAUNCH(probe_cp_async, 1, 64, 0, 0, ds, dout);
    g_probes.push_back(Probe{"cp_async_cg16_zfill", -1, fetch(dout, 1024)});
    cudaFree(ds), cudaFree(dout);
    const int n = 4096;
    std::vector<float> x(n);
    for (int i = 0; i < n; i++) x[i] = i < 64 ? (float)(i - 32) * 4.0f : std::ldexp((float)(int)(next() % 20001) - 10000.0f, -8);
    x[0] = -INFINITY, x[1] = INFINITY, x[2] = NAN, x[3] = -149.5f, x[4] = 1e-40f, x[5] = -0.0f;
    float *dx = upload(x), *dy = nullptr;
    cudaMalloc(reinterpret_cast<void **>(&dy), 2 * n * 4);
    MF_LAUNCH(probe_ex2, 8, 128, 0, 0, dx, dy, n);
    g_probes.push_back(Probe{"ex2_approx_ftz_and_expf", 4, fetch(dy, 2 * n)});
    std::vector<float> cv(n);
    for (int i = 0; i < n; i++) {
        uint32_t u = next();
        if (i < 2048) u = (u & 0x80000000u) | ((100 + u % 60) << 23) | (u & 0x7fffffu); // around f16's range
        memcpy(&cv[i], &u, 4);
    }
    float *dcv = upload(cv);
    uint16_t *dh = nullptr, *dbf = nullptr;
    cudaMalloc(reinterpret_cast<void **>(&dh), n * 2), cudaMalloc(reinterpret_cast<void **>(&dbf), n * 2);
    MF_LAUNCH(probe_cvt, 8, 128, 0, 0, dcv, dh, dbf, n);
    g_probes.push_back(Probe{"cvt_rn_f16", -1, fetch(dh, n)});
    g_probes.push_back(Probe{"cvt_rn_bf16", -1, fetch(dbf, n)});
    cudaFree(dx), cudaFree(dy), cudaFree(dcv), cudaFree(dh), cudaFree(dbf);
    int *ds2 = nullptr;
    cudaMalloc(reinterpret_cast<void **>(&ds2), 32 * 8 * 4);
    MF_LAUNCH(probe_shfl, 1, 32, 0, 0, ds2);
    g_probes.push_back(Probe{"shfl_vote_match", -1, fetch(ds2, 32 * 8)});
    cudaFree(ds2);
}

void run_sm90() {
    // TMA: a (37, 100) bf16 tensor (+ a third dimension of 3), boxes partly outside it.
    const int D0 = 100, D1 = 37, D2 = 3, ld0 = 104;
    std::vector<uint16_t> g((size_t)D2 * D1 * ld0);
    for (auto &x : g) x = (uint16_t)next();
    uint16_t *dg = upload(g);
    struct Case {
        const char *name;
        int rank, swz, box0, box1, c0, c1, c2;
    };
    const Case cases[] = {{"tma_2d_swizzle128_oob", 2, CU_TENSOR_MAP_SWIZZLE_128B, 64, 16, 64, 30, 0},
                          {"tma_2d_swizzle64", 2, CU_TENSOR_MAP_SWIZZLE_64B, 32, 16, -4, 5, 0},
                          {"tma_3d_swizzle128_oob", 3, CU_TENSOR_MAP_SWIZZLE_128B, 64, 8, 48, 33, 2},
                          {"tma_2d_noswizzle", 2, CU_TENSOR_MAP_SWIZZLE_NONE, 24, 5, 80, 35, 0}};
    uint8_t *dout = nullptr;
    cudaMalloc(reinterpret_cast<void **>(&dout), 8192);
    cudaFuncSetAttribute(probe_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 16384);
    for (const Case &cs : cases) {
        CUtensorMap map;
        const cuuint64_t dims[3] = {(cuuint64_t)D0, (cuuint64_t)D1, (cuuint64_t)D2};
        const cuuint64_t strides[2] = {(cuuint64_t)ld0 * 2, (cuuint64_t)ld0 * 2 * D1};
        const cuuint32_t box[3] = {(cuuint32_t)cs.box0, (cuuint32_t)cs.box1, 2}, es[3] = {1, 1, 1};
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess || !f)
            exit(2);
        typedef CUresult (*Enc)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
        if (reinterpret_cast<Enc>(f)(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)cs.rank, dg, dims, strides, box,
                                     es, CU_TENSOR_MAP_INTERLEAVE_NONE, (CUtensorMapSwizzle)cs.swz,
                                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
            exit(2);
        const int bytes = cs.box0 * cs.box1 * (cs.rank == 3 ? 2 : 1) * 2;
        MF_LAUNCH(probe_tma, 1, 128, (size_t)bytes + 1024 + 64, 0, map, cs.rank, cs.c0, cs.c1, cs.c2, bytes, dout);
        g_probes.push_back(Probe{cs.name, -1, fetch(dout, (size_t)bytes)});
    }
    cudaFree(dout), cudaFree(dg);
    // wgmma: images in the kernels' layouts (K-major: 128-byte rows, 8-row groups 1024 bytes apart;
    // N-major V: 64 N per 128-byte row, K rows, the next 64 N 2048 bytes on).
    for (int rs = 0; rs < 2; rs++)
        for (int wide = 0; wide < 2; wide++) {
            std::vector<uint16_t> img(32768 / 2);
            auto swz = [](uint32_t x) { return x ^ ((x & 0x380u) >> 3); };
            for (int m = 0; m < 64; m++) // A (64 x 16) K-major at 0
                for (int k = 0; k < 16; k++) img[swz((uint32_t)(m / 8 * 1024 + m % 8 * 128 + k * 2)) / 2] = operand(!rs, wide);
            for (int n = 0; n < 128; n++)
                for (int k = 0; k < 16; k++) {
                    const uint32_t off = rs ? (uint32_t)(n / 64 * 2048 + k / 8 * 1024 + swz((uint32_t)(k % 8 * 128 + n % 64 * 2)))
                                            : (uint32_t)(n / 8 * 1024 + swz((uint32_t)(n % 8 * 128 + k * 2)));
                    img[(16384 + off) / 2] = operand(!rs, wide);
                }
            std::vector<uint32_t> a(128 * 4);
            for (auto &x : a) x = pair(false, wide);
            const uint64_t da_bits = (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
            const uint64_t db_bits = rs ? ((uint64_t)(2048 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62) : da_bits;
            uint16_t *dimg = upload(img);
            uint32_t *dav = upload(a);
            float *dd = nullptr;
            cudaMalloc(reinterpret_cast<void **>(&dd), 128 * 64 * 4);
            if (rs) {
                cudaFuncSetAttribute(probe_wgmma<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 32768 + 1024);
                MF_LAUNCH(probe_wgmma<true>, 1, 128, 32768 + 1024, 0, dimg, 32768, dav, dd, da_bits, db_bits);
            } else {
                cudaFuncSetAttribute(probe_wgmma<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 32768 + 1024);
                MF_LAUNCH(probe_wgmma<false>, 1, 128, 32768 + 1024, 0, dimg, 32768, dav, dd, da_bits, db_bits);
            }
            g_probes.push_back(Probe{std::string(rs ? "wgmma_rs_tb_m64n128k16_f16" : "wgmma_ss_m64n128k16_bf16") +
                                         (wide ? "_rounding" : "_exact"),
                                     wide ? 2 : -1, fetch(dd, 128 * 64)});
            cudaFree(dimg), cudaFree(dav), cudaFree(dd);
        }
}

int32_t ulp_key(float f) { // monotone integer order of floats
    int32_t i;
    memcpy(&i, &f, 4);
    return i < 0 ? (int32_t)0x80000000 - i : i;
}

int compare(const std::string &dir) {
    int present = 0, failed = 0;
    for (const Probe &p : g_probes) {
        FILE *f = fopen((dir + "/" + p.name + ".bin").c_str(), "rb");
        if (!f) continue;
        present++;
        std::vector<uint8_t> gold;
        uint8_t buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) gold.insert(gold.end(), buf, buf + n);
        fclose(f);
        if (gold.size() != p.out.size()) {
            printf("FAIL %s: %zu bytes, the golden file has %zu\n", p.name.c_str(), p.out.size(), gold.size());
            failed++;
            continue;
        }
        long worst = 0, diff = 0;
        if (p.ulp < 0) {
            for (size_t i = 0; i < gold.size(); i++) diff += gold[i] != p.out[i];
        } else {
            for (size_t i = 0; i + 4 <= gold.size(); i += 4) {
                float a, b;
                memcpy(&a, &gold[i], 4), memcpy(&b, &p.out[i], 4);
                if (std::isnan(a) || std::isnan(b)) {
                    diff += std::isnan(a) != std::isnan(b);
                    continue;
                }
                const long d = labs((long)ulp_key(a) - (long)ulp_key(b));
                worst = d > worst ? d : worst;
                diff += d > p.ulp;
            }
        }
        printf("%s %s: %ld %s differ%s", diff ? "FAIL" : "ok  ", p.name.c_str(), diff, p.ulp < 0 ? "byte(s)" : "value(s)",
               p.ulp < 0 ? "\n" : "");
        if (p.ulp >= 0) printf(" (largest difference %ld ulp, tolerance %d)\n", worst, p.ulp);
        failed += diff != 0;
    }
    if (!present) {
        printf("ptx_probe: no golden files in %s yet: run `ptx_probe --write DIR` on a GPU (docs/notes/emulator.md)\n",
               dir.c_str());
        return 77;
    }
    printf("ptx_probe: %d of %d probes with golden files match\n", present - failed, present);
    return failed ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "--write") && strcmp(argv[1], "--check"))) {
        fprintf(stderr, "usage: ptx_probe --write DIR | --check DIR\n");
        return 2;
    }
    int cc_major = 0;
    if (!ok(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0), "no CUDA device")) return 2;
    run_mma<false>(false);
    run_mma<true>(false);
    run_mma<false>(true);
    run_mma<true>(true);
    run_simple();
    if (cc_major == 9) run_sm90();
    else printf("ptx_probe: compute capability %d.x: the sm_90a probes are skipped\n", cc_major);
    if (!ok(cudaDeviceSynchronize(), "a probe kernel")) return 2;
    if (!strcmp(argv[1], "--check")) return compare(argv[2]);
    for (const Probe &p : g_probes) {
        const std::string path = std::string(argv[2]) + "/" + p.name + ".bin";
        FILE *f = fopen(path.c_str(), "wb");
        if (!f || fwrite(p.out.data(), 1, p.out.size(), f) != p.out.size()) {
            fprintf(stderr, "ptx_probe: cannot write %s: %s\n", path.c_str(), strerror(errno));
            return 2;
        }
        fclose(f);
        printf("wrote %s (%zu bytes)\n", path.c_str(), p.out.size());
    }
    return 0;
}
