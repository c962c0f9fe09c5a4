#include <string.h>

#include "core/error.h"
#include "minfer/tensor.h"

size_t mf_dtype_size(mf_dtype dt) {
    switch (dt) {
    case MF_DTYPE_F32: return 4;
    case MF_DTYPE_F16: return 2;
    case MF_DTYPE_BF16: return 2;
    case MF_DTYPE_I32: return 4;
    }
    return 0;
}

const char *mf_dtype_name(mf_dtype dt) {
    switch (dt) {
    case MF_DTYPE_F32: return "f32";
    case MF_DTYPE_F16: return "f16";
    case MF_DTYPE_BF16: return "bf16";
    case MF_DTYPE_I32: return "i32";
    }
    return "?";
}

const char *mf_device_name(mf_device dev) {
    switch (dev) {
    case MF_DEVICE_CPU: return "cpu";
    case MF_DEVICE_CUDA: return "cuda";
    }
    return "?";
}

static mf_status check_layout(const mf_tensor *t, const char *what, bool need_data);

mf_status mf_tensor_make(mf_tensor *out, void *data, mf_dtype dt, mf_device dev, int32_t ndim,
                         const int64_t *shape) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "tensor_make: out is NULL");
    if (ndim < 1 || ndim > MF_MAX_DIMS)
        return mf_fail(MF_ERR_INVALID_ARG, "tensor_make: ndim %d not in [1, %d]", ndim, MF_MAX_DIMS);
    if (!shape) return mf_fail(MF_ERR_INVALID_ARG, "tensor_make: shape is NULL");
    memset(out, 0, sizeof *out);
    out->data = data;
    out->dtype = dt;
    out->device = dev;
    out->ndim = ndim;
    for (int i = 0; i < MF_MAX_DIMS; i++) out->shape[i] = 1;
    int64_t st = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] < 0)
            return mf_fail(MF_ERR_INVALID_ARG, "tensor_make: shape[%d]=%lld < 0", i, (long long)shape[i]);
        out->shape[i] = shape[i];
        out->stride[i] = st;
        st *= shape[i] > 0 ? shape[i] : 1;
    }
    return check_layout(out, "tensor_make", false);
}

mf_status mf_tensor_check(const mf_tensor *t, const char *what) { return check_layout(t, what, true); }

static mf_status check_layout(const mf_tensor *t, const char *what, bool need_data) {
    if (!t) return mf_fail(MF_ERR_INVALID_ARG, "%s: tensor is NULL", what);
    if (t->ndim < 1 || t->ndim > MF_MAX_DIMS)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: ndim %d not in [1, %d]", what, t->ndim, MF_MAX_DIMS);
    if (mf_dtype_size(t->dtype) == 0)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: invalid dtype %d", what, (int)t->dtype);
    if (t->device != MF_DEVICE_CPU && t->device != MF_DEVICE_CUDA)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: invalid device %d", what, (int)t->device);
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return mf_fail(MF_ERR_INVALID_ARG, "%s: shape[%d]=%lld < 0", what, i, (long long)t->shape[i]);
        if (t->stride[i] < 0)
            return mf_fail(MF_ERR_INVALID_ARG, "%s: stride[%d]=%lld < 0", what, i, (long long)t->stride[i]);
        if (t->shape[i] > 0 && n > INT64_MAX / t->shape[i])
            return mf_fail(MF_ERR_INVALID_ARG, "%s: element count overflows int64", what);
        n *= t->shape[i];
    }
    if (need_data && n > 0 && !t->data) return mf_fail(MF_ERR_INVALID_ARG, "%s: data is NULL", what);
    return MF_OK;
}

int64_t mf_tensor_numel(const mf_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

bool mf_tensor_is_contiguous(const mf_tensor *t) {
    if (mf_tensor_numel(t) == 0) return true; // nothing to lay out (numpy gives empty arrays 0 strides)
    int64_t st = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != st) return false;
        st *= t->shape[i];
    }
    return true;
}

mf_status mf_tensor_transpose(mf_tensor *t, int32_t d0, int32_t d1) {
    if (!t) return mf_fail(MF_ERR_INVALID_ARG, "tensor_transpose: tensor is NULL");
    if (d0 < 0 || d0 >= t->ndim || d1 < 0 || d1 >= t->ndim)
        return mf_fail(MF_ERR_INVALID_ARG, "tensor_transpose: dims (%d, %d) out of range for ndim %d",
                       d0, d1, t->ndim);
    int64_t s = t->shape[d0], st = t->stride[d0];
    t->shape[d0] = t->shape[d1];
    t->stride[d0] = t->stride[d1];
    t->shape[d1] = s;
    t->stride[d1] = st;
    return MF_OK;
}

int64_t mf_tensor_span_bytes(const mf_tensor *t) {
    if (mf_tensor_numel(t) == 0) return 0;
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++) last += (t->shape[i] - 1) * t->stride[i];
    return (last + 1) * (int64_t)mf_dtype_size(t->dtype);
}

// ---- f16 / bf16 conversions (round to nearest even) ------------------------

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t mf_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x3ffu); // NaN, quiet
    if (ax >= 0x477ff000u) return sign | 0x7c00u; // >= 65520 rounds to inf (and inf itself)
    uint32_t e = ax >> 23, mant = ax & 0x7fffffu;
    if (e < 113) { // below 2^-14: an f16 subnormal or zero
        uint32_t s = 126 - e; // value = (mant|1<<23) * 2^-(s) in units of 2^-24
        if (s >= 25) return sign; // < 2^-25: rounds to zero
        uint32_t m = mant | 0x800000u;
        uint32_t r = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t h = ((e - 112) << 10) | (mant >> 13), rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; // carry may bump the exponent: fine
    return sign | (uint16_t)h;
}

float mf_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13)); // inf / NaN
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        float v = (float)m * 5.9604644775390625e-08f; // m * 2^-24, exact
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t mf_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u); // NaN, quiet
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float mf_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

// Element access through memcpy: views may come from files whose data is not
// aligned to the element size (compilers turn these into plain loads).
float mf_load_f32(const void *p, mf_dtype dt, int64_t i) {
    const char *b = (const char *)p;
    uint16_t h;
    switch (dt) {
    case MF_DTYPE_F32: {
        float f;
        memcpy(&f, b + i * 4, 4);
        return f;
    }
    case MF_DTYPE_F16: memcpy(&h, b + i * 2, 2); return mf_f16_to_f32(h);
    case MF_DTYPE_BF16: memcpy(&h, b + i * 2, 2); return mf_bf16_to_f32(h);
    case MF_DTYPE_I32: {
        int32_t v;
        memcpy(&v, b + i * 4, 4);
        return (float)v;
    }
    }
    return 0.0f;
}

void mf_store_f32(void *p, mf_dtype dt, int64_t i, float v) {
    char *b = (char *)p;
    uint16_t h;
    switch (dt) {
    case MF_DTYPE_F32: memcpy(b + i * 4, &v, 4); break;
    case MF_DTYPE_F16: h = mf_f32_to_f16(v); memcpy(b + i * 2, &h, 2); break;
    case MF_DTYPE_BF16: h = mf_f32_to_bf16(v); memcpy(b + i * 2, &h, 2); break;
    case MF_DTYPE_I32: {
        int32_t x = (int32_t)v;
        memcpy(b + i * 4, &x, 4);
        break;
    }
    }
}
