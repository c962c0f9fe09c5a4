// CPU emulator: tensor maps and TMA tile loads (cp.async.bulk.tensor).
//
// cuTensorMapEncodeTiled checks every requirement the driver documents and
// stores the emulator's own encoding in the 128-byte map. A tile load credits
// the whole box to the mbarrier's tx-count at once and fills the box with
// poison; the data itself (elements outside the tensor as zeros, or NaN for
// OOB_FILL_NAN_REQUEST_ZERO_FMA) lands when a wait observes the phase. The
// box is written in row-major order of its dimensions (dimension 0 fastest),
// each 16-byte chunk at its swizzled shared address: bits 4..6 of the
// address XOR bits 7..9 (128B; 64B: bits 4..5 with 7..8; 32B: bit 4 with 7).
#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include <cuda.h>

#include "internal.h"

namespace mf_emu {

namespace {

constexpr uint32_t kMagic = 0x4d46544d; // "MFTM"

struct Enc {
    uint32_t magic;
    uint8_t dtype, rank, interleave, swizzle, l2, oob, esize, pad;
    uint64_t base;
    uint32_t dim_m1[5];  // globalDim - 1 (dims up to 2^32)
    uint64_t stride[5];  // bytes; stride[0] = element size
    uint16_t box[5];
    uint8_t estride[5];
};
static_assert(sizeof(Enc) <= sizeof(CUtensorMap), "the encoding fits the opaque map");

int esize_of(int t) {
    switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

bool is_float(int t) {
    return t == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 || t == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ||
           t == CU_TENSOR_MAP_DATA_TYPE_FLOAT64 || t == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ||
           t == CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ || t == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 ||
           t == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ;
}

int swizzle_span(int s) { return s == CU_TENSOR_MAP_SWIZZLE_32B ? 32 : s == CU_TENSOR_MAP_SWIZZLE_64B ? 64 : s == CU_TENSOR_MAP_SWIZZLE_128B ? 128 : 0; }

CUresult refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
CUresult refuse(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mf_emu: cuTensorMapEncodeTiled: %s (CUDA_ERROR_INVALID_VALUE)\n", buf);
    return CUDA_ERROR_INVALID_VALUE;
}

uint32_t swizzle(uint32_t addr, int span) {
    const uint32_t bits = span == 128 ? 7 : span == 64 ? 3 : span == 32 ? 1 : 0;
    return addr ^ (((addr >> 7) & bits) << 4);
}

} // namespace

} // namespace mf_emu

using namespace mf_emu;

extern "C" CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank, void *base,
                                           const cuuint64_t *dim, const cuuint64_t *stride, const cuuint32_t *box,
                                           const cuuint32_t *estride, CUtensorMapInterleave interleave,
                                           CUtensorMapSwizzle swz, CUtensorMapL2promotion l2,
                                           CUtensorMapFloatOOBfill oob) {
    if (device().cc_major < 9) return refuse("tensor maps need compute capability 9.0 (the device is %d.%d)", device().cc_major, device().cc_minor);
    if (!map || (uintptr_t)map % 64) return refuse("tensorMap %p is not 64-byte aligned", (void *)map);
    const int es = esize_of(dtype);
    if (!es) return refuse("tensorDataType %d is not one this emulator knows", (int)dtype);
    if (rank < 1 || rank > 5) return refuse("tensorRank %u outside [1, 5]", rank);
    if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3)
        return refuse("tensorRank %u < 3 with an interleaved layout", rank);
    if (interleave > CU_TENSOR_MAP_INTERLEAVE_32B) return refuse("interleave %d", (int)interleave);
    const uintptr_t al = interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
    if ((uintptr_t)base % al) return refuse("globalAddress %p is not %zu-byte aligned", base, (size_t)al);
    if (!dim || !box || !estride || (rank > 1 && !stride)) return refuse("a NULL array");
    for (cuuint32_t i = 0; i < rank; i++)
        if (dim[i] < 1 || dim[i] > ((uint64_t)1 << 32)) return refuse("globalDim[%u] = %" PRIu64 " outside [1, 2^32]", i, (uint64_t)dim[i]);
    uint64_t prev = (uint64_t)dim[0] * es;
    for (cuuint32_t i = 0; i + 1 < rank; i++) {
        if (stride[i] % al) return refuse("globalStrides[%u] = %" PRIu64 " is not a multiple of %zu", i, (uint64_t)stride[i], (size_t)al);
        if (stride[i] >= ((uint64_t)1 << 40)) return refuse("globalStrides[%u] = %" PRIu64 " >= 2^40", i, (uint64_t)stride[i]);
        // Each stride includes the previous dimension (the driver documents
        // globalStrides[i] = globalStrides[i - 1] * (globalDim[i] + padding)).
        if (stride[i] < prev)
            return refuse("globalStrides[%u] = %" PRIu64 " is less than the %" PRIu64 " bytes of the dimensions below it", i,
                          (uint64_t)stride[i], prev);
        prev = stride[i] * dim[i + 1];
    }
    for (cuuint32_t i = 0; i < rank; i++) {
        if (box[i] < 1 || box[i] > 256) return refuse("boxDim[%u] = %u outside [1, 256]", i, box[i]);
        if (estride[i] < 1 || estride[i] > 8) return refuse("elementStrides[%u] = %u outside [1, 8]", i, estride[i]);
    }
    if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && (box[0] * es) % 16)
        return refuse("boxDim[0] * element size = %u bytes is not a multiple of 16", box[0] * es);
    if (swz > CU_TENSOR_MAP_SWIZZLE_128B) return refuse("swizzle %d is not one this emulator knows", (int)swz);
    if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && swz != CU_TENSOR_MAP_SWIZZLE_NONE &&
        (int)(box[0] * es) > swizzle_span(swz))
        return refuse("the box's inner dimension (%u bytes) exceeds the %d-byte swizzle", box[0] * es, swizzle_span(swz));
    if (interleave == CU_TENSOR_MAP_INTERLEAVE_32B && swz != CU_TENSOR_MAP_SWIZZLE_32B)
        return refuse("interleave 32B requires swizzle 32B");
    if (l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B) return refuse("l2Promotion %d", (int)l2);
    if (oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) return refuse("oobFill %d", (int)oob);
    if (oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !is_float(dtype))
        return refuse("oobFill NAN_REQUEST_ZERO_FMA with an integer data type");
    Enc e = {};
    e.magic = kMagic;
    e.dtype = (uint8_t)dtype, e.rank = (uint8_t)rank, e.interleave = (uint8_t)interleave, e.swizzle = (uint8_t)swz;
    e.l2 = (uint8_t)l2, e.oob = (uint8_t)oob, e.esize = (uint8_t)es;
    e.base = (uint64_t)(uintptr_t)base;
    e.stride[0] = (uint64_t)es;
    for (cuuint32_t i = 0; i < rank; i++) {
        e.dim_m1[i] = (uint32_t)(dim[i] - 1);
        e.box[i] = (uint16_t)box[i];
        e.estride[i] = (uint8_t)estride[i];
        if (i > 0) e.stride[i] = stride[i - 1];
    }
    memset(map, 0, sizeof *map);
    memcpy(map, &e, sizeof e);
    return CUDA_SUCCESS;
}

namespace mf_emu {

void tma_load(uint32_t dst, const void *tensor_map, int rank, const int32_t *coords, uint32_t bar, Loc loc) {
    MF_EMU_ENTRY;
    require_sm90("cp.async.bulk.tensor", loc);
    Enc e;
    memcpy(&e, tensor_map, sizeof e);
    if (e.magic != kMagic)
        kernel_fail(loc, cudaErrorIllegalInstruction,
                    "cp.async.bulk.tensor: %p is not a tensor map made by cuTensorMapEncodeTiled", tensor_map);
    if (e.rank != rank)
        kernel_fail(loc, cudaErrorIllegalInstruction, "cp.async.bulk.tensor.%dd with a rank-%d tensor map", rank, e.rank);
    if (e.interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || e.dtype >= CU_TENSOR_MAP_DATA_TYPE_TFLOAT32)
        kernel_fail(loc, cudaErrorNotSupported, "cp.async.bulk.tensor: interleaved / tf32 tensor maps are not emulated");
    const int span = swizzle_span(e.swizzle);
    if (span && (int)e.box[0] * e.esize != span)
        kernel_fail(loc, cudaErrorNotSupported,
                    "cp.async.bulk.tensor: a %d-byte inner box under the %d-byte swizzle is not emulated", e.box[0] * e.esize, span);
    uint64_t elems = 1;
    for (int i = 0; i < rank; i++) elems *= i == 0 ? e.box[0] : (e.box[i] + e.estride[i] - 1) / e.estride[i];
    const uint64_t bytes = elems * e.esize;
    char *d = static_cast<char *>(smem_at(dst, bytes, 128, "cp.async.bulk.tensor destination", loc));
    emu_memset(d, kPoison, bytes);
    TmaReq r;
    r.phase = 0, r.dst = d, r.dst_addr = dst, r.rank = rank, r.loc = loc;
    memcpy(r.map, tensor_map, sizeof r.map);
    for (int i = 0; i < 5; i++) r.coords[i] = i < rank ? coords[i] : 0;
    mbar_complete_tx(bar, (uint32_t)bytes, r, loc);
}

void tma_land(Group &, const TmaReq &r) {
    Enc e;
    memcpy(&e, r.map, sizeof e);
    const int rank = e.rank, es = e.esize, span = swizzle_span(e.swizzle);
    uint32_t n[5] = {1, 1, 1, 1, 1};
    for (int i = 0; i < rank; i++) n[i] = i == 0 ? e.box[0] : (e.box[i] + e.estride[i] - 1) / e.estride[i];
    unsigned char fill[8] = {};
    if (e.oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) { // the type's canonical NaN
        const uint64_t nan = es == 2 ? 0x7fff : es == 4 ? 0x7fffffff : 0x7fffffffffffffffull;
        memcpy(fill, &nan, (size_t)es);
    }
    char *win = r.dst - r.dst_addr;
    uint64_t lin = 0;
    for (uint32_t i4 = 0; i4 < n[4]; i4++)
        for (uint32_t i3 = 0; i3 < n[3]; i3++)
            for (uint32_t i2 = 0; i2 < n[2]; i2++)
                for (uint32_t i1 = 0; i1 < n[1]; i1++)
                    for (uint32_t i0 = 0; i0 < n[0]; i0++, lin++) {
                        const uint32_t idx[5] = {i0, i1, i2, i3, i4};
                        bool in = true;
                        uint64_t off = 0;
                        for (int d = 0; d < rank; d++) {
                            const int64_t c = (int64_t)r.coords[d] + (int64_t)idx[d] * (d == 0 ? 1 : e.estride[d]);
                            if (c < 0 || c > (int64_t)e.dim_m1[d]) in = false;
                            else off += (uint64_t)c * e.stride[d];
                        }
                        const uint32_t a = swizzle(r.dst_addr + (uint32_t)(lin * es), span);
                        emu_memcpy(win + a, in ? reinterpret_cast<const char *>(e.base + off) : (const char *)fill, (size_t)es);
                    }
}

} // namespace mf_emu
