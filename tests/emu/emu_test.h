// The emulator's tests (tests/emu/): a check macro, device buffers, and a
// tiny evaluator of CuTe layouts, so that fragment maps are checked against
// the layouts CuTe publishes (cute/atom/mma_traits_sm80.hpp,
// copy_traits_sm75.hpp, mma_traits_sm90_gmma.hpp) rather than against
// formulas written a second time.
#ifndef MF_TESTS_EMU_TEST_H
#define MF_TESTS_EMU_TEST_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include <cuda_runtime.h>

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond, ...)                                                                                      \
    do {                                                                                                      \
        g_checks++;                                                                                           \
        if (!(cond)) {                                                                                        \
            g_failures++;                                                                                     \
            if (g_failures <= 40) {                                                                           \
                printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                        \
                printf(__VA_ARGS__);                                                                          \
                printf("\n");                                                                                 \
            }                                                                                                 \
        }                                                                                                     \
    } while (0)

#define CUDA_OK(call)                                                                                         \
    do {                                                                                                      \
        const cudaError_t e_ = (call);                                                                        \
        CHECK(e_ == cudaSuccess, "%s -> %s", #call, cudaGetErrorName(e_));                                   \
    } while (0)

// A device buffer of n T's.
template <class T> struct Dev {
    T *p = nullptr;
    size_t n = 0;
    explicit Dev(size_t count) : n(count) { CUDA_OK(cudaMalloc(reinterpret_cast<void **>(&p), count * sizeof(T))); }
    Dev(const std::vector<T> &h) : Dev(h.size()) { put(h); }
    ~Dev() { cudaFree(p); }
    Dev(const Dev &) = delete;
    Dev &operator=(const Dev &) = delete;
    void put(const std::vector<T> &h) { CUDA_OK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
    std::vector<T> get() const {
        std::vector<T> h(n);
        CUDA_OK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
};

// A flat CuTe layout: modes of (shape, stride), coordinates taken
// colexicographically (the first mode fastest), as CuTe evaluates layouts.
struct Layout {
    std::vector<int> shape, stride;
    Layout(std::initializer_list<int> s, std::initializer_list<int> d) : shape(s), stride(d) {}
    int size() const {
        int n = 1;
        for (int s : shape) n *= s;
        return n;
    }
    int operator()(int i) const {
        int r = 0;
        for (size_t k = 0; k < shape.size(); k++) r += (i % shape[k]) * stride[k], i /= shape[k];
        return r;
    }
};
// A thread-value layout: (thread, value) -> index, each mode flattened.
struct TV {
    Layout t, v;
    int operator()(int thr, int val) const { return t(thr) + v(val); }
};

// f32 <-> 16-bit patterns (the tests' own, from GCC's IEEE _Float16 and a
// round-to-nearest-even on the bits for bf16).
inline uint16_t f2h(float f) {
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
inline float h2f(uint16_t u) {
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}
inline uint16_t f2bf(float f) { // f exactly representable in the tests that use it
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}
inline float bf2f(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline int finish(const char *name) {
    if (g_failures) printf("%s: %d of %d checks FAILED\n", name, g_failures, g_checks);
    else printf("%s: all %d checks passed\n", name, g_checks);
    return g_failures ? 1 : 0;
}

#endif // MF_TESTS_EMU_TEST_H
