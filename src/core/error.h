// Internal: setting the thread-local error message.
#ifndef MF_CORE_ERROR_H
#define MF_CORE_ERROR_H

#include "minfer/status.h"

#if defined(__GNUC__)
#define MF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MF_PRINTF(a, b)
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Records "fmt..." as this thread's last error and returns s, so that
// `return mf_fail(MF_ERR_INVALID_ARG, "gemm: m=%lld < 0", (long long)m);`
mf_status mf_fail(mf_status s, const char *fmt, ...) MF_PRINTF(2, 3);

// Propagate a failing status.
#define MF_TRY(expr)                      \
    do {                                  \
        mf_status mf_try_s_ = (expr);     \
        if (mf_try_s_ != MF_OK) return mf_try_s_; \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif // MF_CORE_ERROR_H
