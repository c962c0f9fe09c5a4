// test_core: status and messages, f16/bf16 conversions (edge values,
// every f16 pattern, every rounding midpoint; the CPU's vectorised row
// narrowing against them), tensor views, arenas, fault
// injection, backend selection, and a table of bad inputs that every public
// function must reject with the right status and a message naming the value.
#include <float.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "cpu/skinny.h"
#include "cpu/team.h"
#include "minfer/minfer.h"

static int g_checks, g_fails;

#define CHECK(cond, ...)                                      \
    do {                                                      \
        g_checks++;                                           \
        if (!(cond)) {                                        \
            g_fails++;                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);       \
            printf(__VA_ARGS__);                              \
            printf("\n");                                     \
        }                                                     \
    } while (0)

// The call failed with `want` and the message contains `needle`.
#define CHECK_ERR(expr, want, needle)                                                                  \
    do {                                                                                               \
        mf_status s_ = (expr);                                                                         \
        CHECK(s_ == (want) && strstr(mf_last_error(), (needle)) != NULL, "%s: got %s \"%s\", want %s with \"%s\"", \
              #expr, mf_status_str(s_), mf_last_error(), mf_status_str(want), (needle));               \
    } while (0)

#define CHECK_OK(expr)                                                                              \
    do {                                                                                            \
        mf_status s_ = (expr);                                                                      \
        CHECK(s_ == MF_OK, "%s: %s \"%s\"", #expr, mf_status_str(s_), mf_last_error());            \
    } while (0)

// "name: ok" or "name: N failed" for the checks since `before`.
static void section(const char *name, int before, const char *detail) {
    if (g_fails == before)
        printf("%s: ok%s\n", name, detail);
    else
        printf("%s: %d failed\n", name, g_fails - before);
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---- status ----------------------------------------------------------------------

static void *other_thread(void *arg) {
    (void)arg;
    mf_backend *be;
    mf_backend_init("other-thread-backend", &be);
    return NULL;
}

static void test_status(void) {
    int before = g_fails;
    static const struct {
        mf_status s;
        const char *name;
    } names[] = {{MF_OK, "MF_OK"},
                 {MF_ERR_INVALID_ARG, "MF_ERR_INVALID_ARG"},
                 {MF_ERR_UNSUPPORTED, "MF_ERR_UNSUPPORTED"},
                 {MF_ERR_OOM, "MF_ERR_OOM"},
                 {MF_ERR_IO, "MF_ERR_IO"},
                 {MF_ERR_FORMAT, "MF_ERR_FORMAT"},
                 {MF_ERR_CUDA, "MF_ERR_CUDA"},
                 {MF_ERR_INTERNAL, "MF_ERR_INTERNAL"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(strcmp(mf_status_str(names[i].s), names[i].name) == 0, "mf_status_str(%d) = %s", (int)names[i].s,
              mf_status_str(names[i].s));
    const char *unk = mf_status_str((mf_status)99);
    CHECK(unk && strlen(unk) > 0, "mf_status_str(99) is empty");

    mf_clear_error();
    CHECK(strcmp(mf_last_error(), "") == 0, "after mf_clear_error: \"%s\"", mf_last_error());
    mf_backend *be = NULL;
    CHECK_ERR(mf_backend_init("nonsense", &be), MF_ERR_INVALID_ARG, "'nonsense'");
    CHECK(be == NULL, "out not NULL after a failure");
    // The message is per thread: a failure elsewhere leaves ours alone.
    // (Our own stack: glibc's cached thread stacks read as "possibly lost" to valgrind.)
    pthread_t th;
    pthread_attr_t attr;
    size_t stack_bytes = 1 << 20;
    void *stack = NULL;
    if (pthread_attr_init(&attr) == 0 && posix_memalign(&stack, 4096, stack_bytes) == 0 &&
        pthread_attr_setstack(&attr, stack, stack_bytes) == 0 && pthread_create(&th, &attr, other_thread, NULL) == 0) {
        pthread_join(th, NULL);
        CHECK(strstr(mf_last_error(), "'nonsense'") != NULL, "message changed by another thread: %s",
              mf_last_error());
    }
    pthread_attr_destroy(&attr);
    free(stack);
    mf_clear_error();
    CHECK(mf_last_error()[0] == '\0', "mf_clear_error left \"%s\"", mf_last_error());
    CHECK(strcmp(mf_version(), "0.1.0") == 0, "mf_version() = %s", mf_version());
    CHECK(mf_build_info() && strlen(mf_build_info()) > 0, "mf_build_info() empty");
    section("status", before, "");
}

// ---- f16 / bf16 --------------------------------------------------------------------

// Independent decoder: the value of an f16 bit pattern.
static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
static bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

static void test_f16(void) {
    int before = g_fails;
    static const struct {
        float x;
        uint16_t h;
    } to16[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0x1p-24f, 0x0001},                  // smallest subnormal
        {-0x1p-24f, 0x8001},
        {1023 * 0x1p-24f, 0x03ff},           // largest subnormal
        {0x1p-14f, 0x0400},                  // smallest normal
        {65504.0f, 0x7bff},                  // largest finite
        {65519.0f, 0x7bff},                  // below the midpoint to 65536
        {65519.996f, 0x7bff},
        {65520.0f, 0x7c00},                  // the midpoint: rounds to inf
        {-65520.0f, 0xfc00},
        {1e6f, 0x7c00},
        {FLT_MAX, 0x7c00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {1.0f + 0x1p-11f, 0x3c00},           // tie between 0x3c00 (even) and 0x3c01: down
        {1.0f + 3 * 0x1p-11f, 0x3c02},       // tie between 0x3c01 and 0x3c02 (even): up
        {1.0f + 0x1p-11f + 0x1p-23f, 0x3c01}, // just above the tie
        {0x1p-25f, 0x0000},                  // half the smallest subnormal: tie to 0
        {3 * 0x1p-25f, 0x0002},              // tie between 1 and 2 subnormal units: 2
        {0x1p-25f + 0x1p-40f, 0x0001},
        {1023.5f * 0x1p-24f, 0x0400},        // tie across the subnormal/normal boundary
        {0x1p-30f, 0x0000},
        {0x1p-149f, 0x0000},                 // f32 subnormal
        {-0x1p-149f, 0x8000},
    };
    for (size_t i = 0; i < sizeof to16 / sizeof to16[0]; i++) {
        uint16_t h = mf_f32_to_f16(to16[i].x);
        CHECK(h == to16[i].h, "mf_f32_to_f16(%a) = 0x%04x, want 0x%04x", (double)to16[i].x, h, to16[i].h);
    }
    CHECK(f16_is_nan(mf_f32_to_f16(NAN)), "f16(NaN) = 0x%04x", mf_f32_to_f16(NAN));
    CHECK(f16_is_nan(mf_f32_to_f16(-NAN)), "f16(-NaN) = 0x%04x", mf_f32_to_f16(-NAN));
    CHECK(f16_is_nan(mf_f32_to_f16(bits_f32(0x7f800001u))), "f16(NaN with a low payload) = 0x%04x",
          mf_f32_to_f16(bits_f32(0x7f800001u)));
    CHECK(signbit(mf_f16_to_f32(0x8000)) && mf_f16_to_f32(0x8000) == 0.0f, "f16 -0 decodes wrong");
    CHECK(isnan(mf_f16_to_f32(0x7e00)) && isnan(mf_f16_to_f32(0xfc01)), "f16 NaN decodes to a number");

    // Every pattern: decodes to its value, and f16 -> f32 -> f16 gives it back (NaN stays NaN).
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mf_f16_to_f32((uint16_t)h);
        double want = f16_value((uint16_t)h);
        uint16_t back = mf_f32_to_f16(f);
        bool ok = f16_is_nan((uint16_t)h) ? isnan(f) && f16_is_nan(back)
                                          : (double)f == want && !!signbit(f) == ((h & 0x8000) != 0) && back == h;
        if (!ok && bad++ < 5) CHECK(ok, "f16 0x%04x -> %a -> 0x%04x (value %a)", h, (double)f, back, want);
    }
    CHECK(bad == 0, "%d f16 patterns fail the round trip", bad);

    // Every midpoint between neighbouring finite f16 values (both signs): a tie
    // goes to the even pattern, one f32 ulp either side to the nearer one.
    bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float mid = (float)((f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2); // exact
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        for (int sgn = 0; sgn < 2; sgn++) {
            float m = sgn ? -mid : mid;
            uint16_t s = sgn ? 0x8000 : 0;
            uint16_t t = mf_f32_to_f16(m), lo = mf_f32_to_f16(nextafterf(m, 0.0f)),
                     hi = mf_f32_to_f16(nextafterf(m, sgn ? -INFINITY : INFINITY));
            bool ok = t == (s | even) && lo == (s | h) && hi == (s | (h + 1));
            if (!ok && bad++ < 5)
                CHECK(ok, "f16 midpoint %a: 0x%04x (want 0x%04x), below 0x%04x, above 0x%04x", (double)m, t, s | even,
                      lo, hi);
        }
    }
    CHECK(bad == 0, "%d f16 midpoints round wrong", bad);
    section("f16", before, " (65536 patterns, 2 x 31743 midpoints)");
}

static void test_bf16(void) {
    int before = g_fails;
    static const struct {
        uint32_t x; // f32 bits
        uint16_t h;
    } to16[] = {
        {0x00000000u, 0x0000}, {0x80000000u, 0x8000}, {0x3f800000u, 0x3f80}, // 0, -0, 1
        {0x3f808000u, 0x3f80}, // 1 + 2^-8: tie, down to even
        {0x3f818000u, 0x3f82}, // 1 + 3 * 2^-8: tie, up to even
        {0x3f808001u, 0x3f81}, // just above a tie
        {0x3f807fffu, 0x3f80}, // just below
        {0x7f7f0000u, 0x7f7f}, // largest finite bf16
        {0x7f7f7fffu, 0x7f7f}, // below the midpoint to 2^128
        {0x7f7f8000u, 0x7f80}, // the midpoint: overflows to inf
        {0x7f7fffffu, 0x7f80}, // FLT_MAX -> inf
        {0xff7fffffu, 0xff80}, // -FLT_MAX -> -inf
        {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80}, // +-inf
        {0x00000001u, 0x0000}, // smallest f32 subnormal
        {0x00008000u, 0x0000}, // tie between 0 and the smallest bf16 subnormal: 0
        {0x00018000u, 0x0002}, // tie between 1 and 2 units: 2
        {0x007fffffu, 0x0080}, // largest f32 subnormal rounds up to the smallest normal
    };
    for (size_t i = 0; i < sizeof to16 / sizeof to16[0]; i++) {
        uint16_t h = mf_f32_to_bf16(bits_f32(to16[i].x));
        CHECK(h == to16[i].h, "mf_f32_to_bf16(0x%08x) = 0x%04x, want 0x%04x", to16[i].x, h, to16[i].h);
    }
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu, 0xff800001u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
        CHECK(bf16_is_nan(mf_f32_to_bf16(bits_f32(nans[i]))), "bf16(NaN 0x%08x) = 0x%04x", nans[i],
              mf_f32_to_bf16(bits_f32(nans[i])));
    // bf16 -> f32 is exact: the high half of the f32 pattern.
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mf_bf16_to_f32((uint16_t)h);
        uint16_t back = mf_f32_to_bf16(f);
        bool ok = f32_bits(f) == h << 16 && (bf16_is_nan((uint16_t)h) ? bf16_is_nan(back) : back == h);
        if (!ok && bad++ < 5) CHECK(ok, "bf16 0x%04x -> 0x%08x -> 0x%04x", h, f32_bits(f), back);
    }
    CHECK(bad == 0, "%d bf16 patterns fail the round trip", bad);
    // Every midpoint (both signs), subnormals included: ties to even, neighbours to nearest.
    bad = 0;
    for (uint32_t h = 0; h < 0x7f7f; h++)
        for (uint32_t s = 0; s < 2; s++) {
            uint32_t base = (s << 31) | (h << 16), sh = s << 15;
            uint16_t even = (uint16_t)(sh | ((h & 1) ? h + 1 : h));
            uint16_t t = mf_f32_to_bf16(bits_f32(base | 0x8000u)), lo = mf_f32_to_bf16(bits_f32(base | 0x7fffu)),
                     hi = mf_f32_to_bf16(bits_f32(base | 0x8001u));
            bool ok = t == even && lo == (sh | h) && hi == (sh | (h + 1));
            if (!ok && bad++ < 5) CHECK(ok, "bf16 midpoint 0x%08x: 0x%04x (want 0x%04x)", base | 0x8000u, t, even);
        }
    CHECK(bad == 0, "%d bf16 midpoints round wrong", bad);

    // mf_load_f32 / mf_store_f32 for every dtype.
    char buf[16];
    static const mf_dtype dts[] = {MF_DTYPE_F32, MF_DTYPE_F16, MF_DTYPE_BF16, MF_DTYPE_I32};
    for (int d = 0; d < 4; d++) {
        mf_store_f32(buf, dts[d], 1, -3.0f);
        CHECK(mf_load_f32(buf, dts[d], 1) == -3.0f, "load/store %s", mf_dtype_name(dts[d]));
    }
    section("bf16", before, " (65536 patterns, 2 x 32639 midpoints)");
}

// ---- tensor views --------------------------------------------------------------------

static void test_tensor(void) {
    int before = g_fails;
    CHECK(mf_dtype_size(MF_DTYPE_F32) == 4 && mf_dtype_size(MF_DTYPE_F16) == 2 && mf_dtype_size(MF_DTYPE_BF16) == 2 &&
              mf_dtype_size(MF_DTYPE_I32) == 4 && mf_dtype_size((mf_dtype)9) == 0,
          "mf_dtype_size");
    CHECK(strcmp(mf_dtype_name(MF_DTYPE_BF16), "bf16") == 0 && strcmp(mf_dtype_name((mf_dtype)9), "?") == 0,
          "mf_dtype_name");
    CHECK(strcmp(mf_device_name(MF_DEVICE_CUDA), "cuda") == 0 && strcmp(mf_device_name((mf_device)5), "?") == 0,
          "mf_device_name");

    float data[64];
    mf_tensor t;
    CHECK_OK(mf_tensor_make(&t, data, MF_DTYPE_F32, MF_DEVICE_CPU, 3, (const int64_t[]){2, 3, 4}));
    CHECK(t.ndim == 3 && t.shape[0] == 2 && t.shape[2] == 4 && t.stride[0] == 12 && t.stride[1] == 4 &&
              t.stride[2] == 1 && t.shape[3] == 1 && t.stride[3] == 0,
          "make: shape/strides");
    CHECK(mf_tensor_numel(&t) == 24 && mf_tensor_is_contiguous(&t) && mf_tensor_span_bytes(&t) == 96,
          "make: numel %lld, span %lld", (long long)mf_tensor_numel(&t), (long long)mf_tensor_span_bytes(&t));
    CHECK_OK(mf_tensor_check(&t, "t"));
    CHECK_OK(mf_tensor_transpose(&t, 0, 2));
    CHECK(t.shape[0] == 4 && t.shape[2] == 2 && t.stride[0] == 1 && t.stride[2] == 12 && !mf_tensor_is_contiguous(&t),
          "transpose(0, 2)");
    CHECK(mf_tensor_numel(&t) == 24 && mf_tensor_span_bytes(&t) == 96, "transposed span %lld",
          (long long)mf_tensor_span_bytes(&t));
    CHECK_OK(mf_tensor_transpose(&t, 2, 0));
    CHECK(mf_tensor_is_contiguous(&t), "transposed back is contiguous");
    // A strided view: 3 rows of 2 with row stride 5.
    mf_tensor s = t;
    s.ndim = 2, s.shape[0] = 3, s.shape[1] = 2, s.stride[0] = 5, s.stride[1] = 1, s.shape[2] = 1, s.stride[2] = 0;
    CHECK(!mf_tensor_is_contiguous(&s) && mf_tensor_span_bytes(&s) == 48, "strided span %lld",
          (long long)mf_tensor_span_bytes(&s));
    // Size-1 dims: any stride is still contiguous.
    s.shape[0] = 1, s.stride[0] = 99;
    CHECK(mf_tensor_is_contiguous(&s), "size-1 dim with stride 99 is contiguous");
    // Empty views.
    CHECK_OK(mf_tensor_make(&t, NULL, MF_DTYPE_F16, MF_DEVICE_CPU, 2, (const int64_t[]){0, 5}));
    CHECK(mf_tensor_numel(&t) == 0 && mf_tensor_span_bytes(&t) == 0, "empty view");
    CHECK_OK(mf_tensor_check(&t, "empty")); // NULL data is fine with no elements
    section("tensor", before, "");
}

// ---- arenas and fault injection --------------------------------------------------

static void test_arena(mf_backend *be) {
    int before = g_fails;
    mf_arena *a = NULL;
    CHECK_OK(mf_arena_init(be, 4096, &a));
    if (!a) return;
    CHECK(mf_arena_used(a) == 0 && mf_arena_peak(a) == 0 && mf_arena_capacity(a) == 4096, "fresh arena");
    void *p1, *p2, *p3;
    CHECK_OK(mf_arena_alloc(a, 1, &p1));
    CHECK_OK(mf_arena_alloc(a, 100, &p2));
    CHECK((uintptr_t)p1 % 256 == 0 && (uintptr_t)p2 % 256 == 0 && (char *)p2 == (char *)p1 + 256,
          "alignment: %p %p", p1, p2);
    CHECK(mf_arena_used(a) == 356 && mf_arena_peak(a) == 356, "used %zu peak %zu", mf_arena_used(a),
          mf_arena_peak(a));
    memset(p2, 0x11, 100);
    CHECK_ERR(mf_arena_alloc(a, 4000, &p3), MF_ERR_OOM, "4000 bytes");
    CHECK(p3 == NULL && mf_arena_used(a) == 356, "a failed alloc changed the arena");
    mf_tensor t;
    CHECK_OK(mf_arena_tensor(a, MF_DTYPE_F16, 2, (const int64_t[]){3, 5}, &t));
    CHECK((uintptr_t)t.data % 256 == 0 && t.dtype == MF_DTYPE_F16 && t.device == MF_DEVICE_CPU &&
              mf_tensor_is_contiguous(&t) && mf_arena_used(a) == 512 + 30,
          "arena tensor (used %zu)", mf_arena_used(a));
    mf_arena_reset(a);
    CHECK(mf_arena_used(a) == 0 && mf_arena_peak(a) == 542, "reset: used %zu peak %zu", mf_arena_used(a),
          mf_arena_peak(a));
    CHECK_OK(mf_arena_alloc(a, 4096, &p3));
    CHECK(p3 == p1 && mf_arena_peak(a) == 4096, "after reset the arena starts over");
    CHECK_ERR(mf_arena_alloc(a, 1, &p3), MF_ERR_OOM, "do not fit");
    mf_arena_free(a);
    mf_arena_free(NULL);

    // An empty arena.
    CHECK_OK(mf_arena_init(be, 0, &a));
    CHECK_ERR(mf_arena_alloc(a, 1, &p1), MF_ERR_OOM, "1 bytes");
    mf_arena_free(a);
    section("arena", before, "");
}

static void test_faults(mf_backend *be) {
    int before = g_fails;
    void *p = NULL;
    mf_fault_alloc_fail_after(1);
    CHECK_ERR(mf_backend_alloc(be, 64, &p), MF_ERR_OOM, "64 bytes");
    CHECK(p == NULL, "out set on failure");
    CHECK_OK(mf_backend_alloc(be, 64, &p)); // the next one works
    mf_backend_dealloc(be, p);

    mf_fault_alloc_fail_after(3); // the third allocation from now fails
    void *q[3] = {NULL, NULL, NULL};
    CHECK_OK(mf_backend_alloc(be, 8, &q[0]));
    CHECK_OK(mf_backend_alloc(be, 8, &q[1]));
    CHECK_ERR(mf_backend_alloc(be, 8, &q[2]), MF_ERR_OOM, "8 bytes");
    CHECK_OK(mf_backend_alloc(be, 8, &q[2]));
    for (int i = 0; i < 3; i++) mf_backend_dealloc(be, q[i]);

    mf_arena *a = (mf_arena *)&p; // must be set to NULL on failure
    mf_fault_alloc_fail_after(1); // the arena header
    CHECK_ERR(mf_arena_init(be, 1024, &a), MF_ERR_OOM, "arena");
    CHECK(a == NULL, "arena out not NULL after a failure");
    mf_fault_alloc_fail_after(2); // the arena's block: the header must be freed (leak check)
    CHECK_ERR(mf_arena_init(be, 1024, &a), MF_ERR_OOM, "1024 bytes");
    CHECK(a == NULL, "arena out not NULL after a failure");
    CHECK_OK(mf_arena_init(be, 1024, &a));
    mf_fault_alloc_fail_after(1);
    CHECK_ERR(mf_arena_alloc(a, 16, &p), MF_ERR_OOM, "16 bytes");
    CHECK_OK(mf_arena_alloc(a, 16, &p));
    mf_arena_free(a);

    mf_backend *b2 = NULL;
    mf_fault_alloc_fail_after(1);
    CHECK_ERR(mf_backend_init("cpu", &b2), MF_ERR_OOM, "cpu backend");
    CHECK(b2 == NULL, "backend out not NULL after a failure");
    CHECK_OK(mf_backend_init("cpu", &b2));
    mf_backend_free(b2);

    mf_fault_alloc_fail_after(0); // off
    CHECK_OK(mf_backend_alloc(be, 8, &p));
    mf_backend_dealloc(be, p);

    // Ops that take host scratch: every allocation they make can fail, and
    // each failure is MF_ERR_OOM with everything freed; then the call works.
    uint16_t ha[6 * 5], hb[5 * 7], hc[6 * 7], hbias[7];
    float x[3 * 8], w[8], y[3 * 8];
    for (int i = 0; i < 30; i++) ha[i] = mf_f32_to_bf16((float)(i % 7) - 3.0f);
    for (int i = 0; i < 35; i++) hb[i] = mf_f32_to_bf16((float)(i % 5) * 0.5f);
    for (int i = 0; i < 7; i++) hbias[i] = mf_f32_to_bf16(0.25f * (float)i);
    for (int i = 0; i < 24; i++) x[i] = (float)i - 10.0f;
    for (int i = 0; i < 8; i++) w[i] = 1.0f;
    mf_gemm_args g = {.alpha = 1.0f};
    mf_tensor bias;
    mf_tensor_make(&g.a, ha, MF_DTYPE_BF16, MF_DEVICE_CPU, 2, (const int64_t[]){6, 5});
    mf_tensor_make(&g.b, hb, MF_DTYPE_BF16, MF_DEVICE_CPU, 2, (const int64_t[]){5, 7});
    mf_tensor_make(&g.c, hc, MF_DTYPE_BF16, MF_DEVICE_CPU, 2, (const int64_t[]){6, 7});
    mf_tensor_make(&bias, hbias, MF_DTYPE_BF16, MF_DEVICE_CPU, 1, (const int64_t[]){7});
    g.bias = &bias;
    int n_fail = 0;
    for (int n = 1; n < 20; n++) {
        mf_fault_alloc_fail_after(n);
        mf_status st = mf_gemm(be, &g);
        mf_fault_alloc_fail_after(0);
        if (st == MF_OK) break;
        n_fail++;
        CHECK(st == MF_ERR_OOM && strstr(mf_last_error(), "gemm"), "gemm with allocation %d failing: %s %s", n,
              mf_status_str(st), mf_last_error());
    }
    CHECK(n_fail >= 1, "gemm on bf16 took no host scratch: fault injection untested");
    mf_norm_args na = {.kind = MF_NORM_RMS, .eps = 1e-6f};
    mf_tensor_make(&na.x, x, MF_DTYPE_F32, MF_DEVICE_CPU, 2, (const int64_t[]){3, 8});
    mf_tensor_make(&na.y, y, MF_DTYPE_F32, MF_DEVICE_CPU, 2, (const int64_t[]){3, 8});
    mf_tensor_make(&na.weight, w, MF_DTYPE_F32, MF_DEVICE_CPU, 1, (const int64_t[]){8});
    mf_fault_alloc_fail_after(1);
    CHECK_ERR(mf_add_norm(be, &na), MF_ERR_OOM, "add_norm");
    mf_fault_alloc_fail_after(0);
    CHECK_OK(mf_add_norm(be, &na));
    char detail[64];
    snprintf(detail, sizeof detail, " (gemm failed at %d allocation points)", n_fail);
    section("faults", before, detail);
}

// ---- backends -------------------------------------------------------------------

static void test_backend(void) {
    int before = g_fails;
    mf_backend *be = NULL;
    CHECK_OK(mf_backend_init("auto", &be));
    CHECK(be && (strcmp(mf_backend_name(be), "cpu") == 0 || strcmp(mf_backend_name(be), "cuda") == 0),
          "auto gives %s", mf_backend_name(be));
    if (be && !mf_cuda_available())
        CHECK(strcmp(mf_backend_name(be), "cpu") == 0, "auto without a GPU gives %s", mf_backend_name(be));
    mf_backend_free(be);

    CHECK_OK(mf_backend_init("cpu", &be));
    CHECK(be && strcmp(mf_backend_name(be), "cpu") == 0 && mf_backend_device(be) == MF_DEVICE_CPU, "cpu backend");
    CHECK_OK(mf_backend_set_stream(be, NULL));
    CHECK_OK(mf_backend_sync(be));
    // Copies and memset.
    void *d = NULL;
    CHECK_OK(mf_backend_alloc(be, 1000, &d));
    CHECK((uintptr_t)d % 256 == 0, "alloc not 256-byte aligned: %p", d);
    char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (char)(i * 7);
    CHECK_OK(mf_backend_copy(be, d, src, 1000, MF_COPY_H2D));
    CHECK_OK(mf_backend_copy(be, (char *)d + 500, d, 500, MF_COPY_D2D));
    CHECK_OK(mf_backend_copy(be, dst, d, 1000, MF_COPY_D2H));
    CHECK(memcmp(dst, src, 500) == 0 && memcmp(dst + 500, src, 500) == 0, "copy round trip");
    CHECK_OK(mf_backend_memset(be, d, 0x3c, 10));
    CHECK_OK(mf_backend_copy(be, dst, d, 10, MF_COPY_D2H));
    CHECK(dst[0] == 0x3c && dst[9] == 0x3c, "memset");
    CHECK_OK(mf_backend_copy(be, NULL, NULL, 0, MF_COPY_H2D)); // nothing to copy
    mf_backend_dealloc(be, d);
    mf_backend_dealloc(be, NULL);
    mf_backend_free(be);
    mf_backend_free(NULL);
    CHECK(strcmp(mf_backend_name(NULL), "none") == 0, "mf_backend_name(NULL)");

    be = (mf_backend *)&d;
    mf_status st = mf_backend_init("cuda", &be);
    if (mf_cuda_available()) {
        CHECK(st == MF_OK && be, "cuda with a device: %s %s", mf_status_str(st), mf_last_error());
        mf_backend_free(be);
    } else {
        CHECK(st == MF_ERR_UNSUPPORTED && strstr(mf_last_error(), "no CUDA device") && be == NULL,
              "cuda without a device: %s \"%s\"", mf_status_str(st), mf_last_error());
    }
    section("backend", before, mf_cuda_available() ? " (cuda available)" : " (cuda not available)");
}

// ---- bad inputs ----------------------------------------------------------------
//
// Every public function, each bad argument: the status and a piece of the
// message that names the value. Valid arguments live in one arena; a failing
// call must leave it byte for byte unchanged, and a valid call right after
// must work.

typedef struct {
    mf_backend *be;
    mf_arena *arena;
    void *base;             // the arena's memory, for the "unchanged" check
    size_t bytes;
    mf_gemm_args gemm;      // a (4, 5) @ b (5, 6) -> c (4, 6), bias (6), f32
    mf_tensor gemm_bias;
    mf_norm_args norm;      // x, residual, sum_out, y (3, 8); weight, bias (8); LayerNorm
    mf_tensor norm_res, norm_sum, norm_bias;
    mf_embed_args embed;    // ids (4) into table (10, 8) -> y (4, 8)
    mf_tensor ids_high, ids_neg; // with id 10 at [2], id -1 at [1]
    mf_add_args add;        // a (3, 8) + b (8) -> y (3, 8)
    mf_tensor add_b, add_bfull;
    mf_softmax_args softmax; // x (3, 8) -> y (3, 8); key_lens (1) i32, bias (3, 8) for the bad calls
    mf_tensor sm_key_lens, sm_bias;
} fixture;

typedef enum { FAM_GEMM, FAM_NORM, FAM_EMBED, FAM_ADD, FAM_SOFTMAX, FAM_BACKEND, FAM_TENSOR, FAM_ARENA } family;

typedef struct {
    const char *what;
    family fam;
    mf_status (*call)(fixture *f);
    mf_status want;
    const char *needle; // in the message
} bad_case;

static mf_tensor fx_tensor(fixture *f, mf_dtype dt, int nd, const int64_t *shape) {
    mf_tensor t;
    mf_status st = mf_arena_tensor(f->arena, dt, nd, shape, &t);
    if (st != MF_OK) {
        printf("fixture: %s\n", mf_last_error());
        exit(2);
    }
    for (int64_t i = 0; i < mf_tensor_numel(&t); i++) mf_store_f32(t.data, dt, i, (float)((i * 37) % 11) * 0.25f - 1.0f);
    return t;
}

static void fx_init(fixture *f, mf_backend *be) {
    memset(f, 0, sizeof *f);
    f->be = be;
    f->bytes = 1 << 16;
    if (mf_arena_init(be, f->bytes, &f->arena) != MF_OK || mf_arena_alloc(f->arena, 0, &f->base) != MF_OK) {
        printf("fixture: %s\n", mf_last_error());
        exit(2);
    }
    memset(f->base, 0, f->bytes); // all of it is compared after each bad call
    mf_gemm_args *g = &f->gemm;
    g->a = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){4, 5});
    g->b = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){5, 6});
    g->c = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){4, 6});
    f->gemm_bias = fx_tensor(f, MF_DTYPE_F32, 1, (const int64_t[]){6});
    g->bias = &f->gemm_bias;
    g->alpha = 1.0f;
    g->epilogue = MF_EPILOGUE_GELU;
    mf_norm_args *n = &f->norm;
    n->x = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    f->norm_res = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    f->norm_sum = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    n->y = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    n->weight = fx_tensor(f, MF_DTYPE_F32, 1, (const int64_t[]){8});
    f->norm_bias = fx_tensor(f, MF_DTYPE_F32, 1, (const int64_t[]){8});
    n->residual = &f->norm_res;
    n->sum_out = &f->norm_sum;
    n->bias = &f->norm_bias;
    n->kind = MF_NORM_LAYER;
    n->eps = 1e-5f;
    mf_embed_args *e = &f->embed;
    e->ids = fx_tensor(f, MF_DTYPE_I32, 1, (const int64_t[]){4});
    f->ids_high = fx_tensor(f, MF_DTYPE_I32, 1, (const int64_t[]){4});
    f->ids_neg = fx_tensor(f, MF_DTYPE_I32, 1, (const int64_t[]){4});
    static const int32_t ids[4] = {0, 3, 9, 2}, high[4] = {0, 3, 10, 2}, neg[4] = {0, -1, 9, 2};
    memcpy(e->ids.data, ids, sizeof ids);
    memcpy(f->ids_high.data, high, sizeof high);
    memcpy(f->ids_neg.data, neg, sizeof neg);
    e->table = fx_tensor(f, MF_DTYPE_BF16, 2, (const int64_t[]){10, 8});
    e->y = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){4, 8});
    mf_add_args *a = &f->add;
    a->a = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    f->add_b = fx_tensor(f, MF_DTYPE_F32, 1, (const int64_t[]){8});
    f->add_bfull = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    a->y = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    a->b = &f->add_b;
    a->alpha = 1.0f;
    a->beta = -1.0f;
    mf_softmax_args *sm = &f->softmax;
    sm->x = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    sm->y = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    f->sm_key_lens = fx_tensor(f, MF_DTYPE_I32, 1, (const int64_t[]){1});
    f->sm_bias = fx_tensor(f, MF_DTYPE_F32, 2, (const int64_t[]){3, 8});
    sm->scale = 0.5f;
    sm->causal = true;
}

static mf_status valid_call(fixture *f, family fam) {
    switch (fam) {
    case FAM_GEMM: return mf_gemm(f->be, &f->gemm);
    case FAM_NORM: return mf_add_norm(f->be, &f->norm);
    case FAM_EMBED: return mf_embed(f->be, &f->embed);
    case FAM_ADD: return mf_add(f->be, &f->add);
    case FAM_SOFTMAX: return mf_softmax(f->be, &f->softmax);
    case FAM_BACKEND: {
        void *p = NULL;
        mf_status st = mf_backend_alloc(f->be, 64, &p);
        if (st == MF_OK) st = mf_backend_memset(f->be, p, 0, 64);
        mf_backend_dealloc(f->be, p);
        return st;
    }
    case FAM_TENSOR: {
        mf_tensor t;
        return mf_tensor_make(&t, f->base, MF_DTYPE_F16, MF_DEVICE_CPU, 2, (const int64_t[]){2, 2});
    }
    case FAM_ARENA: {
        mf_arena *a = NULL;
        void *p = NULL;
        mf_status st = mf_arena_init(f->be, 512, &a);
        if (st == MF_OK) st = mf_arena_alloc(a, 100, &p);
        mf_arena_free(a);
        return st;
    }
    }
    return MF_ERR_INTERNAL;
}

// One function per bad call: a copy of the valid arguments with one thing wrong.
#define GEMM_BAD(fn, ...)                          \
    static mf_status fn(fixture *f) {              \
        mf_gemm_args a = f->gemm;                  \
        mf_tensor bias = f->gemm_bias;             \
        a.bias = &bias;                            \
        __VA_ARGS__;                               \
        return mf_gemm(f->be, &a);                 \
    }
#define NORM_BAD(fn, ...)                                                       \
    static mf_status fn(fixture *f) {                                           \
        mf_norm_args a = f->norm;                                               \
        mf_tensor res = f->norm_res, sum = f->norm_sum, bias = f->norm_bias;    \
        a.residual = &res, a.sum_out = &sum, a.bias = &bias;                    \
        __VA_ARGS__;                                                            \
        return mf_add_norm(f->be, &a);                                          \
    }
#define EMBED_BAD(fn, ...)                         \
    static mf_status fn(fixture *f) {              \
        mf_embed_args a = f->embed;                \
        __VA_ARGS__;                               \
        return mf_embed(f->be, &a);                \
    }
#define ADD_BAD(fn, ...)                           \
    static mf_status fn(fixture *f) {              \
        mf_add_args a = f->add;                    \
        mf_tensor b = f->add_b;                    \
        a.b = &b;                                  \
        __VA_ARGS__;                               \
        return mf_add(f->be, &a);                  \
    }
#define SOFTMAX_BAD(fn, ...)                       \
    static mf_status fn(fixture *f) {              \
        mf_softmax_args a = f->softmax;            \
        mf_tensor kl = f->sm_key_lens, bias = f->sm_bias; \
        (void)kl, (void)bias;                      \
        __VA_ARGS__;                               \
        return mf_softmax(f->be, &a);              \
    }
#define CALL_BAD(fn, ...) \
    static mf_status fn(fixture *f) { (void)f; __VA_ARGS__; }

static const int64_t sh3[3] = {3, 4, 6};

GEMM_BAD(g_null_be, return mf_gemm(NULL, &a))
GEMM_BAD(g_null_args, (void)a; return mf_gemm(f->be, NULL))
GEMM_BAD(g_a_i32, a.a.dtype = MF_DTYPE_I32)
GEMM_BAD(g_a_dtype42, a.a.dtype = (mf_dtype)42)
GEMM_BAD(g_b_dtype, a.a.dtype = MF_DTYPE_F16)
GEMM_BAD(g_mixed_c, a.b.dtype = MF_DTYPE_BF16; a.c.dtype = MF_DTYPE_BF16)
GEMM_BAD(g_c_dtype, a.a.dtype = a.b.dtype = MF_DTYPE_BF16; a.c.dtype = MF_DTYPE_F16)
GEMM_BAD(g_c_ndim4, a.c.ndim = 4)
GEMM_BAD(g_c_ndim1, a.c.ndim = 1)
GEMM_BAD(g_a_ndim3, a.a.ndim = 3; a.a.shape[2] = 1)
GEMM_BAD(g_a_rows, a.a.shape[0] = 13)
GEMM_BAD(g_k, a.b.shape[0] = 7)
GEMM_BAD(g_n, a.b.shape[1] = 9)
GEMM_BAD(g_neg_shape, a.a.shape[1] = -3)
GEMM_BAD(g_neg_stride, a.b.stride[0] = -6)
GEMM_BAD(g_device, a.c.device = MF_DEVICE_CUDA)
GEMM_BAD(g_device5, a.a.device = (mf_device)5)
GEMM_BAD(g_null_data, a.b.data = NULL)
GEMM_BAD(g_batch, a.a.ndim = a.b.ndim = a.c.ndim = 3; for (int i = 2; i > 0; i--) {
    a.a.shape[i] = a.a.shape[i - 1], a.a.stride[i] = a.a.stride[i - 1];
    a.b.shape[i] = a.b.shape[i - 1], a.b.stride[i] = a.b.stride[i - 1];
    a.c.shape[i] = a.c.shape[i - 1], a.c.stride[i] = a.c.stride[i - 1];
} a.a.shape[0] = 2, a.a.stride[0] = 0; a.b.shape[0] = 1, a.b.stride[0] = 0; a.c.shape[0] = 3, a.c.stride[0] = 24)
GEMM_BAD(g_c_batch_overlap, a.a.ndim = a.b.ndim = a.c.ndim = 3; for (int i = 2; i > 0; i--) {
    a.a.shape[i] = a.a.shape[i - 1], a.a.stride[i] = a.a.stride[i - 1];
    a.b.shape[i] = a.b.shape[i - 1], a.b.stride[i] = a.b.stride[i - 1];
    a.c.shape[i] = sh3[i], a.c.stride[i] = a.c.stride[i - 1];
} a.a.shape[0] = a.b.shape[0] = 1, a.a.stride[0] = a.b.stride[0] = 0; a.c.shape[0] = 3, a.c.stride[0] = 6)
GEMM_BAD(g_c_colmajor, a.c.stride[0] = 1; a.c.stride[1] = 4)
GEMM_BAD(g_c_ld, a.c.stride[0] = 3)
GEMM_BAD(g_a_nounit, a.a.stride[0] = 10; a.a.stride[1] = 2)
GEMM_BAD(g_c_over_a, a.c.data = a.a.data)
GEMM_BAD(g_c_over_b, a.c.data = (float *)a.b.data + 1)
GEMM_BAD(g_bias_shape, bias.shape[0] = 5)
GEMM_BAD(g_bias_ndim, bias.ndim = 2; bias.shape[1] = 6; bias.shape[0] = 1; bias.stride[1] = 1; bias.stride[0] = 6)
GEMM_BAD(g_bias_dtype, bias.dtype = MF_DTYPE_F16)
GEMM_BAD(g_bias_over_c, bias.data = a.c.data)
GEMM_BAD(g_bias_strided, bias.stride[0] = 2)
GEMM_BAD(g_bias_device, bias.device = MF_DEVICE_CUDA)
GEMM_BAD(g_epilogue, a.epilogue = (mf_epilogue)7)

NORM_BAD(n_null_be, return mf_add_norm(NULL, &a))
NORM_BAD(n_null_args, (void)a; return mf_add_norm(f->be, NULL))
NORM_BAD(n_x_ndim, a.x.ndim = 3)
NORM_BAD(n_dim0, a.x.shape[1] = 0)
NORM_BAD(n_x_dtype, a.x.dtype = MF_DTYPE_I32)
NORM_BAD(n_y_shape, a.y.shape[1] = 9)
NORM_BAD(n_y_dtype, a.y.dtype = MF_DTYPE_I32)
NORM_BAD(n_res_shape, res.shape[0] = 2)
NORM_BAD(n_sum_dtype, sum.dtype = MF_DTYPE_I32)
NORM_BAD(n_y_over_x, a.y.data = (float *)a.x.data + 1)
NORM_BAD(n_res_over_x, res.data = (float *)a.x.data + 8)
NORM_BAD(n_sum_over_y, sum.data = (float *)a.y.data + 3)
NORM_BAD(n_y_over_res, a.y.data = (float *)res.data + 5)
NORM_BAD(n_w_shape, a.weight.shape[0] = 7)
NORM_BAD(n_w_strided, a.weight.stride[0] = 2)
NORM_BAD(n_w_dtype, a.weight.dtype = MF_DTYPE_I32)
NORM_BAD(n_w_device, a.weight.device = MF_DEVICE_CUDA)
NORM_BAD(n_rms_bias, a.kind = MF_NORM_RMS)
NORM_BAD(n_bias_shape, bias.shape[0] = 9)
NORM_BAD(n_kind, a.kind = (mf_norm_kind)5)
NORM_BAD(n_eps_neg, a.eps = -1.0f)
NORM_BAD(n_eps_nan, a.eps = NAN)
NORM_BAD(n_eps_inf, a.eps = INFINITY)
NORM_BAD(n_x_stride, a.x.stride[1] = 2)
NORM_BAD(n_x_neg, a.x.shape[0] = -4)

EMBED_BAD(e_null_be, return mf_embed(NULL, &a))
EMBED_BAD(e_null_args, (void)a; return mf_embed(f->be, NULL))
EMBED_BAD(e_ids_f32, a.ids.dtype = MF_DTYPE_F32)
EMBED_BAD(e_ids_2d, a.ids.ndim = 2; a.ids.shape[0] = 2; a.ids.shape[1] = 2; a.ids.stride[0] = 2; a.ids.stride[1] = 1)
EMBED_BAD(e_ids_strided, a.ids.shape[0] = 2; a.ids.stride[0] = 2; a.y.shape[0] = 2)
EMBED_BAD(e_ids_device, a.ids.device = MF_DEVICE_CUDA)
EMBED_BAD(e_table_i32, a.table.dtype = MF_DTYPE_I32)
EMBED_BAD(e_table_ndim, a.table.ndim = 3)
EMBED_BAD(e_y_dim, a.y.shape[1] = 7)
EMBED_BAD(e_y_rows, a.y.shape[0] = 5)
EMBED_BAD(e_empty, a.table.shape[0] = 0)
EMBED_BAD(e_table_stride, a.table.stride[1] = 2)
EMBED_BAD(e_y_over_table, a.y.data = a.table.data)
EMBED_BAD(e_y_over_ids, a.y.data = a.ids.data)
EMBED_BAD(e_id_high, a.ids = f->ids_high)
EMBED_BAD(e_id_neg, a.ids = f->ids_neg)

ADD_BAD(a_null_be, return mf_add(NULL, &a))
ADD_BAD(a_null_args, (void)a; return mf_add(f->be, NULL))
ADD_BAD(a_a_i32, a.a.dtype = MF_DTYPE_I32)
ADD_BAD(a_y_numel, a.y.shape[1] = 7; a.y.stride[0] = 7)
ADD_BAD(a_a_strided, a.a.stride[0] = 16)
ADD_BAD(a_y_over_a, a.y.data = (float *)a.a.data + 1)
ADD_BAD(a_b_numel, b.shape[0] = 5)
ADD_BAD(a_b_i32, b.dtype = MF_DTYPE_I32)
ADD_BAD(a_b_over_y, b.data = a.y.data)
ADD_BAD(a_bfull_over_y, b = f->add_bfull; b.data = (float *)a.y.data + 2)
ADD_BAD(a_b_device, b.device = MF_DEVICE_CUDA)
ADD_BAD(a_y_device, a.y.device = MF_DEVICE_CUDA)

SOFTMAX_BAD(s_null_be, return mf_softmax(NULL, &a))
SOFTMAX_BAD(s_null_args, (void)a; return mf_softmax(f->be, NULL))
SOFTMAX_BAD(s_x_i32, a.x.dtype = MF_DTYPE_I32)
SOFTMAX_BAD(s_x_3d, a.x.ndim = 3)
SOFTMAX_BAD(s_y_shape, a.y.shape[1] = 9)
SOFTMAX_BAD(s_x_stride, a.x.stride[1] = 2)
SOFTMAX_BAD(s_y_rows_overlap, a.y.stride[0] = 4)
SOFTMAX_BAD(s_y_over_x, a.y.data = (float *)a.x.data + 3)
SOFTMAX_BAD(s_scale, a.scale = INFINITY)
SOFTMAX_BAD(s_kl_f32, kl.dtype = MF_DTYPE_F32; a.key_lens = &kl)
SOFTMAX_BAD(s_kl_entries, kl.shape[0] = 2; a.key_lens = &kl)
SOFTMAX_BAD(s_bias_shape, bias.shape[1] = 5; a.bias = &bias)
SOFTMAX_BAD(s_bias_device, bias.device = MF_DEVICE_CUDA; a.bias = &bias)
SOFTMAX_BAD(s_bias_over_y, bias.data = a.y.data; a.bias = &bias)

CALL_BAD(b_init_null_out, return mf_backend_init("cpu", NULL))
CALL_BAD(b_init_null_name, mf_backend *be; return mf_backend_init(NULL, &be))
CALL_BAD(b_init_unknown, mf_backend *be; return mf_backend_init("tpu", &be))
CALL_BAD(b_alloc_null_be, void *p; return mf_backend_alloc(NULL, 8, &p))
CALL_BAD(b_alloc_null_out, return mf_backend_alloc(f->be, 8, NULL))
CALL_BAD(b_copy_null_be, char x[4] = {0}; return mf_backend_copy(NULL, x, x + 2, 2, MF_COPY_H2D))
CALL_BAD(b_copy_kind, return mf_backend_copy(f->be, f->base, (char *)f->base + 8, 4, (mf_copy_kind)7))
CALL_BAD(b_copy_null_dst, return mf_backend_copy(f->be, NULL, f->base, 4, MF_COPY_D2D))
CALL_BAD(b_copy_null_src, return mf_backend_copy(f->be, f->base, NULL, 4, MF_COPY_D2D))
CALL_BAD(b_memset_null_be, return mf_backend_memset(NULL, f->base, 0, 4))
CALL_BAD(b_memset_null_dst, return mf_backend_memset(f->be, NULL, 0, 4))
CALL_BAD(b_sync_null, return mf_backend_sync(NULL))
CALL_BAD(b_stream_null_be, return mf_backend_set_stream(NULL, NULL))
CALL_BAD(b_stream_cpu, return mf_backend_set_stream(f->be, (void *)f))

CALL_BAD(t_make_null_out, return mf_tensor_make(NULL, f->base, MF_DTYPE_F32, MF_DEVICE_CPU, 1, (const int64_t[]){4}))
CALL_BAD(t_make_ndim0, mf_tensor t; return mf_tensor_make(&t, f->base, MF_DTYPE_F32, MF_DEVICE_CPU, 0, (const int64_t[]){4}))
CALL_BAD(t_make_ndim5, mf_tensor t; return mf_tensor_make(&t, f->base, MF_DTYPE_F32, MF_DEVICE_CPU, 5, (const int64_t[]){1, 1, 1, 1, 1}))
CALL_BAD(t_make_null_shape, mf_tensor t; return mf_tensor_make(&t, f->base, MF_DTYPE_F32, MF_DEVICE_CPU, 2, NULL))
CALL_BAD(t_make_neg, mf_tensor t; return mf_tensor_make(&t, f->base, MF_DTYPE_F32, MF_DEVICE_CPU, 2, (const int64_t[]){3, -2}))
CALL_BAD(t_make_dtype, mf_tensor t; return mf_tensor_make(&t, f->base, (mf_dtype)9, MF_DEVICE_CPU, 1, (const int64_t[]){3}))
CALL_BAD(t_make_device, mf_tensor t; return mf_tensor_make(&t, f->base, MF_DTYPE_F32, (mf_device)6, 1, (const int64_t[]){3}))
CALL_BAD(t_check_null, return mf_tensor_check(NULL, "t"))
CALL_BAD(t_check_stride, mf_tensor t = f->gemm.a; t.stride[1] = -1; return mf_tensor_check(&t, "t"))
CALL_BAD(t_check_data, mf_tensor t = f->gemm.a; t.data = NULL; return mf_tensor_check(&t, "t"))
CALL_BAD(t_check_overflow, mf_tensor t = f->gemm.a; t.shape[0] = INT64_MAX / 2; t.shape[1] = 4; return mf_tensor_check(&t, "t"))
CALL_BAD(t_transpose_null, return mf_tensor_transpose(NULL, 0, 1))
CALL_BAD(t_transpose_dims, mf_tensor t = f->gemm.a; return mf_tensor_transpose(&t, 0, 4))
CALL_BAD(t_transpose_neg, mf_tensor t = f->gemm.a; return mf_tensor_transpose(&t, -1, 1))

CALL_BAD(r_init_null_out, return mf_arena_init(f->be, 64, NULL))
CALL_BAD(r_init_null_be, mf_arena *a; return mf_arena_init(NULL, 64, &a))
CALL_BAD(r_alloc_null_out, return mf_arena_alloc(f->arena, 8, NULL))
CALL_BAD(r_alloc_null, void *p; return mf_arena_alloc(NULL, 8, &p))
CALL_BAD(r_alloc_big, void *p; return mf_arena_alloc(f->arena, 1000000, &p))
CALL_BAD(r_tensor_null, mf_tensor t; return mf_arena_tensor(NULL, MF_DTYPE_F32, 1, (const int64_t[]){4}, &t))
CALL_BAD(r_tensor_ndim, mf_tensor t; return mf_arena_tensor(f->arena, MF_DTYPE_F32, 0, (const int64_t[]){4}, &t))
CALL_BAD(r_tensor_neg, mf_tensor t; return mf_arena_tensor(f->arena, MF_DTYPE_F32, 1, (const int64_t[]){-5}, &t))
CALL_BAD(r_tensor_dtype, mf_tensor t; return mf_arena_tensor(f->arena, (mf_dtype)9, 1, (const int64_t[]){4}, &t))
CALL_BAD(r_tensor_big, mf_tensor t; return mf_arena_tensor(f->arena, MF_DTYPE_F32, 2, (const int64_t[]){1000, 1000}, &t))
CALL_BAD(r_tensor_null_out, return mf_arena_tensor(f->arena, MF_DTYPE_F32, 1, (const int64_t[]){4}, NULL))

#define INV MF_ERR_INVALID_ARG
#define UNS MF_ERR_UNSUPPORTED
static const bad_case bad_cases[] = {
    {"gemm: NULL backend", FAM_GEMM, g_null_be, INV, "backend is NULL"},
    {"gemm: NULL args", FAM_GEMM, g_null_args, INV, "args is NULL"},
    {"gemm: a dtype i32", FAM_GEMM, g_a_i32, INV, "a dtype i32"},
    {"gemm: a dtype 42", FAM_GEMM, g_a_dtype42, INV, "invalid dtype 42"},
    {"gemm: b dtype != a dtype", FAM_GEMM, g_b_dtype, INV, "a dtype f16 != b dtype f32"},
    {"gemm: bf16 b, f32 a, bf16 c", FAM_GEMM, g_mixed_c, INV, "b dtype bf16"},
    {"gemm: c f16 for bf16 a", FAM_GEMM, g_c_dtype, INV, "c dtype f16"},
    {"gemm: c 4-D", FAM_GEMM, g_c_ndim4, INV, "4 dims"},
    {"gemm: c 1-D", FAM_GEMM, g_c_ndim1, INV, "1 dims"},
    {"gemm: a 3-D, c 2-D", FAM_GEMM, g_a_ndim3, INV, "a has 3 dims"},
    {"gemm: a rows != c rows", FAM_GEMM, g_a_rows, INV, "13"},
    {"gemm: k mismatch", FAM_GEMM, g_k, INV, "7"},
    {"gemm: n mismatch", FAM_GEMM, g_n, INV, "9"},
    {"gemm: negative shape", FAM_GEMM, g_neg_shape, INV, "-3"},
    {"gemm: negative stride", FAM_GEMM, g_neg_stride, INV, "-6"},
    {"gemm: c on cuda", FAM_GEMM, g_device, INV, "cuda"},
    {"gemm: a device 5", FAM_GEMM, g_device5, INV, "device 5"},
    {"gemm: b data NULL", FAM_GEMM, g_null_data, INV, "gemm: b: data is NULL"},
    {"gemm: a batch 2 for c batch 3", FAM_GEMM, g_batch, INV, "batch 2"},
    {"gemm: c batches overlap", FAM_GEMM, g_c_batch_overlap, INV, "batch stride 6"},
    {"gemm: c column-major", FAM_GEMM, g_c_colmajor, UNS, "row-major"},
    {"gemm: c row stride < n", FAM_GEMM, g_c_ld, INV, "row stride 3"},
    {"gemm: a without a unit stride", FAM_GEMM, g_a_nounit, UNS, "(10, 2)"},
    {"gemm: c overlaps a", FAM_GEMM, g_c_over_a, INV, "c and a overlap"},
    {"gemm: c overlaps b", FAM_GEMM, g_c_over_b, INV, "c and b overlap"},
    {"gemm: bias shape 5", FAM_GEMM, g_bias_shape, INV, "5"},
    {"gemm: bias 2-D", FAM_GEMM, g_bias_ndim, INV, "2 dims"},
    {"gemm: bias dtype", FAM_GEMM, g_bias_dtype, INV, "bias dtype f16"},
    {"gemm: bias overlaps c", FAM_GEMM, g_bias_over_c, INV, "c and bias overlap"},
    {"gemm: bias strided", FAM_GEMM, g_bias_strided, INV, "contiguous"},
    {"gemm: bias on cuda", FAM_GEMM, g_bias_device, INV, "bias is on cuda"},
    {"gemm: epilogue 7", FAM_GEMM, g_epilogue, INV, "epilogue 7"},

    {"add_norm: NULL backend", FAM_NORM, n_null_be, INV, "backend is NULL"},
    {"add_norm: NULL args", FAM_NORM, n_null_args, INV, "args is NULL"},
    {"add_norm: x 3-D", FAM_NORM, n_x_ndim, INV, "x has 3 dims"},
    {"add_norm: dim 0", FAM_NORM, n_dim0, INV, "dim 0"},
    {"add_norm: x dtype i32", FAM_NORM, n_x_dtype, INV, "x dtype i32"},
    {"add_norm: y shape", FAM_NORM, n_y_shape, INV, "(3, 9)"},
    {"add_norm: y dtype i32", FAM_NORM, n_y_dtype, INV, "y dtype i32"},
    {"add_norm: residual shape", FAM_NORM, n_res_shape, INV, "(2, 8)"},
    {"add_norm: sum_out dtype i32", FAM_NORM, n_sum_dtype, INV, "sum_out dtype i32"},
    {"add_norm: y partly overlaps x", FAM_NORM, n_y_over_x, INV, "y and x overlap"},
    {"add_norm: residual partly overlaps x", FAM_NORM, n_res_over_x, INV, "residual and x overlap"},
    {"add_norm: sum_out partly overlaps y", FAM_NORM, n_sum_over_y, INV, "sum_out and y overlap"},
    {"add_norm: y partly overlaps residual", FAM_NORM, n_y_over_res, INV, "y and residual overlap"},
    {"add_norm: weight shape 7", FAM_NORM, n_w_shape, INV, "7"},
    {"add_norm: weight strided", FAM_NORM, n_w_strided, INV, "contiguous"},
    {"add_norm: weight dtype i32", FAM_NORM, n_w_dtype, INV, "weight dtype i32"},
    {"add_norm: weight on cuda", FAM_NORM, n_w_device, INV, "weight is on cuda"},
    {"add_norm: bias for RMSNorm", FAM_NORM, n_rms_bias, INV, "RMSNorm"},
    {"add_norm: bias shape 9", FAM_NORM, n_bias_shape, INV, "9"},
    {"add_norm: kind 5", FAM_NORM, n_kind, INV, "kind 5"},
    {"add_norm: eps -1", FAM_NORM, n_eps_neg, INV, "eps -1"},
    {"add_norm: eps NaN", FAM_NORM, n_eps_nan, INV, "eps nan"},
    {"add_norm: eps inf", FAM_NORM, n_eps_inf, INV, "eps inf"},
    {"add_norm: x stride[1] 2", FAM_NORM, n_x_stride, UNS, "stride[1]=2"},
    {"add_norm: x rows -4", FAM_NORM, n_x_neg, INV, "-4"},

    {"embed: NULL backend", FAM_EMBED, e_null_be, INV, "backend is NULL"},
    {"embed: NULL args", FAM_EMBED, e_null_args, INV, "args is NULL"},
    {"embed: ids f32", FAM_EMBED, e_ids_f32, INV, "ids dtype f32"},
    {"embed: ids 2-D", FAM_EMBED, e_ids_2d, INV, "2 dims"},
    {"embed: ids strided", FAM_EMBED, e_ids_strided, INV, "contiguous"},
    {"embed: ids on cuda", FAM_EMBED, e_ids_device, INV, "ids is on cuda"},
    {"embed: table i32", FAM_EMBED, e_table_i32, INV, "table dtype i32"},
    {"embed: table 3-D", FAM_EMBED, e_table_ndim, INV, "table has 3 dims"},
    {"embed: y dim 7", FAM_EMBED, e_y_dim, INV, "(4, 7)"},
    {"embed: y rows 5", FAM_EMBED, e_y_rows, INV, "(5, 8)"},
    {"embed: empty table", FAM_EMBED, e_empty, INV, "(0, 8)"},
    {"embed: table stride[1] 2", FAM_EMBED, e_table_stride, UNS, "stride[1]=2"},
    {"embed: y overlaps table", FAM_EMBED, e_y_over_table, INV, "y and table overlap"},
    {"embed: y overlaps ids", FAM_EMBED, e_y_over_ids, INV, "y and ids overlap"},
    {"embed: id 10 >= vocab 10", FAM_EMBED, e_id_high, INV, "ids[2]=10"},
    {"embed: id -1", FAM_EMBED, e_id_neg, INV, "ids[1]=-1"},

    {"add: NULL backend", FAM_ADD, a_null_be, INV, "backend is NULL"},
    {"add: NULL args", FAM_ADD, a_null_args, INV, "args is NULL"},
    {"add: a dtype i32", FAM_ADD, a_a_i32, INV, "a dtype i32"},
    {"add: y numel 21 != 24", FAM_ADD, a_y_numel, INV, "21"},
    {"add: a strided", FAM_ADD, a_a_strided, UNS, "contiguous"},
    {"add: y partly overlaps a", FAM_ADD, a_y_over_a, INV, "y and a overlap"},
    {"add: b numel 5", FAM_ADD, a_b_numel, INV, "5"},
    {"add: b dtype i32", FAM_ADD, a_b_i32, INV, "b dtype i32"},
    {"add: broadcast b overlaps y", FAM_ADD, a_b_over_y, INV, "overlap"},
    {"add: full b partly overlaps y", FAM_ADD, a_bfull_over_y, INV, "y and b overlap"},
    {"add: b on cuda", FAM_ADD, a_b_device, INV, "b is on cuda"},
    {"add: y on cuda", FAM_ADD, a_y_device, INV, "y is on cuda"},

    {"softmax: NULL backend", FAM_SOFTMAX, s_null_be, INV, "backend is NULL"},
    {"softmax: NULL args", FAM_SOFTMAX, s_null_args, INV, "args is NULL"},
    {"softmax: x dtype i32", FAM_SOFTMAX, s_x_i32, INV, "x dtype i32"},
    {"softmax: x 3-D", FAM_SOFTMAX, s_x_3d, INV, "x has 3 dims"},
    {"softmax: y cols 9", FAM_SOFTMAX, s_y_shape, INV, "= 9"},
    {"softmax: x stride[-1] 2", FAM_SOFTMAX, s_x_stride, UNS, "stride[-1] = 2"},
    {"softmax: y rows overlap each other", FAM_SOFTMAX, s_y_rows_overlap, INV, "overlap"},
    {"softmax: y partly overlaps x", FAM_SOFTMAX, s_y_over_x, INV, "y and x overlap"},
    {"softmax: scale inf", FAM_SOFTMAX, s_scale, INV, "scale inf"},
    {"softmax: key_lens f32", FAM_SOFTMAX, s_kl_f32, INV, "key_lens dtype f32"},
    {"softmax: 2 key_lens for batch 1", FAM_SOFTMAX, s_kl_entries, INV, "2 entries"},
    {"softmax: bias cols 5", FAM_SOFTMAX, s_bias_shape, INV, "= 5"},
    {"softmax: bias on cuda", FAM_SOFTMAX, s_bias_device, INV, "bias is on cuda"},
    {"softmax: bias overlaps y", FAM_SOFTMAX, s_bias_over_y, INV, "y and bias overlap"},

    {"backend_init: NULL out", FAM_BACKEND, b_init_null_out, INV, "out is NULL"},
    {"backend_init: NULL name", FAM_BACKEND, b_init_null_name, INV, "name is NULL"},
    {"backend_init: tpu", FAM_BACKEND, b_init_unknown, INV, "'tpu'"},
    {"backend_alloc: NULL backend", FAM_BACKEND, b_alloc_null_be, INV, "backend is NULL"},
    {"backend_alloc: NULL out", FAM_BACKEND, b_alloc_null_out, INV, "out is NULL"},
    {"backend_copy: NULL backend", FAM_BACKEND, b_copy_null_be, INV, "backend is NULL"},
    {"backend_copy: kind 7", FAM_BACKEND, b_copy_kind, INV, "kind 7"},
    {"backend_copy: NULL dst", FAM_BACKEND, b_copy_null_dst, INV, "dst is NULL"},
    {"backend_copy: NULL src", FAM_BACKEND, b_copy_null_src, INV, "src is NULL"},
    {"backend_memset: NULL backend", FAM_BACKEND, b_memset_null_be, INV, "backend is NULL"},
    {"backend_memset: NULL dst", FAM_BACKEND, b_memset_null_dst, INV, "dst is NULL"},
    {"backend_sync: NULL backend", FAM_BACKEND, b_sync_null, INV, "backend is NULL"},
    {"backend_set_stream: NULL backend", FAM_BACKEND, b_stream_null_be, INV, "backend is NULL"},
    {"backend_set_stream: a stream on the cpu", FAM_BACKEND, b_stream_cpu, INV, "no streams"},

    {"tensor_make: NULL out", FAM_TENSOR, t_make_null_out, INV, "out is NULL"},
    {"tensor_make: ndim 0", FAM_TENSOR, t_make_ndim0, INV, "ndim 0"},
    {"tensor_make: ndim 5", FAM_TENSOR, t_make_ndim5, INV, "ndim 5"},
    {"tensor_make: NULL shape", FAM_TENSOR, t_make_null_shape, INV, "shape is NULL"},
    {"tensor_make: shape -2", FAM_TENSOR, t_make_neg, INV, "shape[1]=-2"},
    {"tensor_make: dtype 9", FAM_TENSOR, t_make_dtype, INV, "dtype 9"},
    {"tensor_make: device 6", FAM_TENSOR, t_make_device, INV, "device 6"},
    {"tensor_check: NULL", FAM_TENSOR, t_check_null, INV, "NULL"},
    {"tensor_check: stride -1", FAM_TENSOR, t_check_stride, INV, "stride[1]=-1"},
    {"tensor_check: NULL data", FAM_TENSOR, t_check_data, INV, "data is NULL"},
    {"tensor_check: element count overflow", FAM_TENSOR, t_check_overflow, INV, "overflow"},
    {"tensor_transpose: NULL", FAM_TENSOR, t_transpose_null, INV, "NULL"},
    {"tensor_transpose: dim 4 of 2", FAM_TENSOR, t_transpose_dims, INV, "(0, 4)"},
    {"tensor_transpose: dim -1", FAM_TENSOR, t_transpose_neg, INV, "(-1, 1)"},

    {"arena_init: NULL out", FAM_ARENA, r_init_null_out, INV, "out is NULL"},
    {"arena_init: NULL backend", FAM_ARENA, r_init_null_be, INV, "backend is NULL"},
    {"arena_alloc: NULL out", FAM_ARENA, r_alloc_null_out, INV, "out is NULL"},
    {"arena_alloc: NULL arena", FAM_ARENA, r_alloc_null, INV, "arena is NULL"},
    {"arena_alloc: 1000000 bytes", FAM_ARENA, r_alloc_big, MF_ERR_OOM, "1000000 bytes"},
    {"arena_tensor: NULL arena", FAM_ARENA, r_tensor_null, INV, "arena is NULL"},
    {"arena_tensor: ndim 0", FAM_ARENA, r_tensor_ndim, INV, "ndim 0"},
    {"arena_tensor: shape -5", FAM_ARENA, r_tensor_neg, INV, "-5"},
    {"arena_tensor: dtype 9", FAM_ARENA, r_tensor_dtype, INV, "dtype 9"},
    {"arena_tensor: 4 MB in 64 kB", FAM_ARENA, r_tensor_big, MF_ERR_OOM, "4000000 bytes"},
    {"arena_tensor: NULL out", FAM_ARENA, r_tensor_null_out, INV, "out is NULL"},
};

static void test_bad_inputs(mf_backend *be) {
    fixture f;
    fx_init(&f, be);
    size_t used = mf_arena_used(f.arena);
    unsigned char *snap = malloc(f.bytes);
    if (!snap) exit(2);
    int n = (int)(sizeof bad_cases / sizeof bad_cases[0]), bad = 0;
    for (int i = 0; i < n; i++) {
        const bad_case *c = &bad_cases[i];
        int before = g_fails;
        memcpy(snap, f.base, f.bytes);
        mf_clear_error();
        mf_status st = c->call(&f);
        const char *msg = mf_last_error();
        CHECK(st == c->want, "%s: got %s \"%s\", want %s", c->what, mf_status_str(st), msg, mf_status_str(c->want));
        CHECK(strstr(msg, c->needle) != NULL, "%s: message \"%s\" does not name \"%s\"", c->what, msg, c->needle);
        CHECK(memcmp(snap, f.base, f.bytes) == 0, "%s: the failing call wrote to memory", c->what);
        CHECK(mf_arena_used(f.arena) == used, "%s: the failing call took arena memory (%zu -> %zu)", c->what, used,
              mf_arena_used(f.arena));
        mf_status ok = valid_call(&f, c->fam);
        CHECK(ok == MF_OK, "%s: the valid call after it failed: %s \"%s\"", c->what, mf_status_str(ok),
              mf_last_error());
        if (g_fails != before) bad++;
    }
    free(snap);
    mf_arena_free(f.arena);
    printf("bad inputs: %d cases, %d wrong\n", n, bad);
}

// The CPU's row narrowing (mf_cpu_from_f32: 8 lanes at a time, branch-free)
// gives the bits of mf_f32_to_f16 / mf_f32_to_bf16 for every 4099th f32
// pattern and the 64 patterns around each boundary it selects on (both
// signs), in runs of 1003 (a scalar tail) written at an odd offset.
enum { kNarrowRun = 1003 };

static int64_t narrow_run(const float *src, int64_t n) { // mismatches
    uint16_t got[kNarrowRun + 3];
    int64_t bad = 0;
    for (int dt = 0; dt < 2; dt++) {
        mf_cpu_from_f32(got, dt ? MF_DTYPE_F16 : MF_DTYPE_BF16, 3, src, n);
        for (int64_t j = 0; j < n; j++) {
            const uint16_t want = dt ? mf_f32_to_f16(src[j]) : mf_f32_to_bf16(src[j]);
            if (got[3 + j] != want && bad++ < 3)
                CHECK(0, "%s row narrowing of 0x%08x: 0x%04x, want 0x%04x", dt ? "f16" : "bf16", f32_bits(src[j]),
                      got[3 + j], want);
        }
    }
    return bad;
}

static void test_row_narrow(void) {
    int before = g_fails;
    static const uint32_t edges[] = {0x00000000u, 0x00800000u, 0x33000000u, 0x33800000u, 0x38000000u, 0x38800000u,
                                     0x387fe000u, 0x387ff000u, 0x477fe000u, 0x477ff000u, 0x7f7f8000u, 0x7f7fffffu,
                                     0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffe0u, 0x3f808000u, 0x3f800fffu};
    float src[kNarrowRun];
    int64_t n = 0, tested = 0, bad = 0;
    for (uint64_t i = 0; i <= 0xffffffffu; i += 4099) {
        src[n++] = bits_f32((uint32_t)i);
        if (n == kNarrowRun) bad += narrow_run(src, n), tested += n, n = 0;
    }
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (uint32_t d = 0; d < 64; d++)
            for (uint32_t sgn = 0; sgn < 2; sgn++) {
                src[n++] = bits_f32((edges[e] + d - 32u) ^ (sgn << 31));
                if (n == kNarrowRun) bad += narrow_run(src, n), tested += n, n = 0;
            }
    bad += narrow_run(src, n), tested += n;
    CHECK(bad == 0, "%lld row narrowings differ from the scalar conversions", (long long)bad);
    char what[64];
    snprintf(what, sizeof what, " (%lld f32 patterns, f16 and bf16)", (long long)tested);
    section("row narrowing", before, what);
}

// ---- decode attention's softmax row in AVX-512 (src/cpu/attention_avx512.c) --

// Every length 1..64 (the chunk), scores with outliers, -inf (masked) and
// NaN entries, rows all -inf, all NaN, or with a +inf, against float64: m
// the largest non-NaN score exactly, exp of the f32 difference s - m within
// 2 ulp (2.4e-7) (1e-37 absolute: the exp flushes below 2^-126 to 0), NaN
// and -inf to 0 (a +inf max: every difference NaN or -inf, so all 0), l the
// sum within 1e-6.
// Both instantiations (attention_tiles.h) where the CPU runs them, and
// the same bits from both.
static void test_dec_softmax_one(bool avx512) {
    int before = g_fails;
    const char *title = avx512 ? "cpu decode softmax (AVX-512VL)" : "cpu decode softmax (AVX2)";
    if (avx512 ? !mf_cpu_avx512() : !mf_cpu_avx2()) {
        section(title, before, " (skipped: the CPU lacks it, or the AVX2 kernels are off)");
        return;
    }
    void (*softmax)(float *, int64_t, float *, float *) = avx512 ? mf_cpu_dec_softmax_avx512 : mf_cpu_dec_softmax_avx2;
    int64_t differ = 0; // rows where the other instantiation (when it runs here) gave other bits
    uint64_t rng = 88172645463325252ull;
    float s[64], keep[64];
    int64_t rows = 0, worst_n = 0;
    double worst = 0.0;
    for (int rep = 0; rep < 42; rep++)
        for (int n = 1; n <= 64; n++, rows++) {
            // 0-1: plain, 2: outliers, 3: masked entries and a NaN, 4: all masked, 5: all NaN, 6: a +inf
            const int kind = rep < 40 ? rep % 5 : rep - 35;
            for (int i = 0; i < n; i++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                float v = (float)((double)(rng >> 11) / 9007199254740992.0 * 20.0 - 10.0);
                if (kind == 2 && i % 7 == 3) v *= 30.0f;
                if ((kind == 3 && i % 5 == 1) || kind == 4) v = -INFINITY;
                if (kind == 3 && i == n / 2 && n > 2) v = NAN;
                if (kind == 5) v = NAN;
                if (kind == 6 && i == n / 3) v = INFINITY;
                s[i] = keep[i] = v;
            }
            for (int i = n; i < 64; i++) s[i] = -7.0f; // past the row: must stay
            float m = 0.0f, l = -1.0f, s2[64], m2 = 0.0f, l2 = -1.0f;
            memcpy(s2, s, sizeof s2);
            softmax(s, n, &m, &l);
            if (avx512) { // AVX2 runs wherever AVX-512 does
                mf_cpu_dec_softmax_avx2(s2, n, &m2, &l2);
                differ += memcmp(s, s2, sizeof s2) != 0 || memcmp(&m, &m2, 4) != 0 || memcmp(&l, &l2, 4) != 0;
            }
            int past = 0;
            for (int i = n; i < 64; i++) past += s[i] != -7.0f;
            CHECK(past == 0, "softmax row n=%d: %d values past the row written", n, past);
            double want_m = -INFINITY, want_l = 0.0;
            for (int i = 0; i < n; i++)
                if (keep[i] == keep[i] && keep[i] > want_m) want_m = keep[i];
            int bad_at = -1;
            for (int i = 0; i < n; i++) {
                const float d = keep[i] - (float)want_m; // rounded as the kernel's f32 difference is
                const double e = d == d && want_m != -INFINITY ? exp((double)d) : 0.0; // NaN, inf - inf: 0
                const double err = fabs((double)s[i] - e) / (e > 1e-37 ? e : 1e-37 / 2.4e-7);
                if (err > worst) worst = err, worst_n = n;
                if (!(err <= 2.4e-7) && bad_at < 0) bad_at = i;
                want_l += e;
            }
            const bool bad_l = !(fabs((double)l - want_l) <= 1e-6 * want_l) || (want_l == 0.0 && l != 0.0f);
            CHECK(m == (float)want_m && bad_at < 0 && !bad_l,
                  "softmax row n=%d kind %d: m %g (want %g), l %g (want %g), first bad exp at %d: %g of %g", n, kind,
                  m, want_m, l, want_l, bad_at, bad_at < 0 ? 0.0 : s[bad_at], bad_at < 0 ? 0.0 : (double)keep[bad_at]);
        }
    CHECK(differ == 0, "softmax: %lld rows with other bits from the AVX2 instantiation", (long long)differ);
    char what[128];
    snprintf(what, sizeof what, " (%lld rows of 1-64 scores; worst exp error %.2g of its value, n=%lld%s)",
             (long long)rows, worst, (long long)worst_n, avx512 ? "; the AVX2 one's bits equal" : "");
    section(title, before, what);
}

static void test_dec_softmax(void) {
    test_dec_softmax_one(true);
    test_dec_softmax_one(false);
}

// ---- the CPU's hot team (src/cpu/team.h) ------------------------------------------

typedef struct {
    _Atomic int hits[8]; // parts run, by t
    _Atomic int bad;     // parts that saw a wrong nt (or a t out of range)
    int want_nt;
} team_probe;

static void team_part(void *arg, int t, int nt) {
    team_probe *p = arg;
    if (nt != p->want_nt || t < 0 || t >= nt || t >= 8)
        atomic_fetch_add(&p->bad, 1);
    else
        atomic_fetch_add(&p->hits[t], 1);
}

// n sections on nt threads: every part exactly once each time.
static int team_sections(int nt, int n) {
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        team_probe p = {.want_nt = nt};
        mf_cpu_team_run(team_part, &p);
        int ok = atomic_load(&p.bad) == 0;
        for (int t = 0; t < 8; t++) ok &= atomic_load(&p.hits[t]) == (t < nt);
        wrong += !ok;
    }
    return wrong;
}

// Parts that ran inside an OpenMP region (the fallback) instead of on the team.
static _Atomic int g_team_in_omp;
static void team_part_where(void *arg, int t, int nt) {
#ifdef _OPENMP
    if (omp_in_parallel()) atomic_fetch_add(&g_team_in_omp, 1);
#endif
    team_part(arg, t, nt);
}

static _Atomic int g_team_busy; // 1: team_busy_thread keeps running sections
static void *team_busy_thread(void *arg) {
    (void)arg;
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    while (atomic_load(&g_team_busy)) {
        team_probe p = {.want_nt = 2};
        mf_cpu_team_run(team_part, &p);
    }
    return NULL;
}

// fork() while another thread runs sections (it may hold the team's lock):
// the child runs its sections on a team of its own, not OpenMP regions
// (until 2026-11-28 the child kept the parent's held lock). 0: all good.
static int team_fork_children(int n) {
    pthread_t th;
    atomic_store(&g_team_busy, 1);
    if (pthread_create(&th, NULL, team_busy_thread, NULL) != 0) return -1;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const pid_t pid = fork();
        if (pid == 0) {
            atomic_store(&g_team_in_omp, 0);
            int wrong = 0;
            for (int r = 0; r < 50; r++) {
                team_probe p = {.want_nt = 2};
                mf_cpu_team_run(team_part_where, &p);
                wrong += atomic_load(&p.bad) != 0 || atomic_load(&p.hits[0]) != 1 || atomic_load(&p.hits[1]) != 1;
            }
            _exit(wrong || atomic_load(&g_team_in_omp) ? 1 : 0);
        }
        int status = 0, waited = 0;
        const struct timespec tick = {0, 10000000}; // 10 ms
        while (pid > 0 && waitpid(pid, &status, WNOHANG) == 0 && waited < 1000) nanosleep(&tick, NULL), waited++;
        if (pid > 0 && waited == 1000) kill(pid, SIGKILL), waitpid(pid, &status, 0);
        bad += pid < 0 || waited == 1000 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    atomic_store(&g_team_busy, 0);
    pthread_join(th, NULL);
    return bad;
}

static void *team_thread(void *arg) {
#ifdef _OPENMP
    omp_set_num_threads(2); // this thread's own setting
#endif
    *(int *)arg = team_sections(2, 300);
    return NULL;
}

static void test_team(void) {
    int before = g_fails;
    const char *preload = getenv("LD_PRELOAD"); // valgrind's tools preload vgpreload_*
    const bool vg = preload && strstr(preload, "vgpreload");
#ifdef _OPENMP
    const int saved = omp_get_max_threads();
    for (int spin = 1; spin >= 0; spin--) { // helpers that spin, then helpers that sleep at once
        mf_cpu_team_spin(spin);
        omp_set_num_threads(3);
        CHECK(team_sections(3, 2000) == 0, "3 threads, spin %d: a section ran a part twice, none, or with a wrong nt", spin);
        omp_set_num_threads(2); // fewer than the helpers started: the third one sits it out
        CHECK(team_sections(2, 2000) == 0, "2 threads, spin %d: a section ran a part twice, none, or with a wrong nt", spin);
    }
    mf_cpu_team_spin(true);
    omp_set_num_threads(1);
    CHECK(team_sections(1, 10) == 0, "1 thread: the caller alone, t = 0, nt = 1");
    omp_set_num_threads(2);
    int inner_wrong = 0;
#pragma omp parallel num_threads(2) reduction(+ : inner_wrong)
    inner_wrong += team_sections(1, 50); // inside a region: the caller alone, as a nested region would be
    CHECK(inner_wrong == 0, "inside an OpenMP region: %d sections not run on the caller alone", inner_wrong);
    // two callers at once: one holds the team, the other takes an OpenMP region
    pthread_t th;
    int other = -1;
    CHECK(pthread_create(&th, NULL, team_thread, &other) == 0, "pthread_create");
    const int mine = team_sections(2, 300);
    pthread_join(th, NULL);
    CHECK(mine == 0 && other == 0, "two callers at once: %d and %d sections wrong", mine, other);
    // (not under valgrind: its leak check of each child counts the parent's
    // threads' blocks as lost and exits with its error code)
    if (!vg) {
        const int forked = team_fork_children(20);
        CHECK(forked == 0, "fork during sections: %d of 20 children ran wrong, in OpenMP regions, or hung", forked);
    }
    omp_set_num_threads(saved);
#endif
    section("cpu team", before,
            vg ? " (sections on 1-3 threads, spinning and sleeping helpers, nested, two callers; fork: not under valgrind)"
               : " (sections on 1-3 threads, spinning and sleeping helpers, nested, two callers, fork)");
}

int main(void) {
#ifdef _OPENMP
    // Nothing here needs threads but test_team (which sets its own counts),
    // and libgomp's idle pool threads would show their TLS blocks as
    // "possibly lost" in `valgrind --leak-check=full` (the team's helpers
    // do too; CI counts only definite and indirect leaks).
    omp_set_num_threads(1);
#endif
    test_status();
    test_f16();
    test_bf16();
    test_row_narrow();
    test_dec_softmax();
    test_team();
    test_tensor();
    mf_backend *be = NULL;
    if (mf_backend_init("cpu", &be) != MF_OK) {
        printf("FAIL: mf_backend_init(cpu): %s\n", mf_last_error());
        return 1;
    }
    test_arena(be);
    test_faults(be);
    test_backend();
    test_bad_inputs(be);
    mf_backend_free(be);
    printf("%d checks, %d failed\n", g_checks, g_fails);
    return g_fails ? 1 : 0;
}
