#include <stdarg.h>
#include <stdio.h>

#include "core/error.h"

static _Thread_local char mf_err_msg[512];

const char *mf_status_str(mf_status s) {
    switch (s) {
    case MF_OK: return "MF_OK";
    case MF_ERR_INVALID_ARG: return "MF_ERR_INVALID_ARG";
    case MF_ERR_UNSUPPORTED: return "MF_ERR_UNSUPPORTED";
    case MF_ERR_OOM: return "MF_ERR_OOM";
    case MF_ERR_IO: return "MF_ERR_IO";
    case MF_ERR_FORMAT: return "MF_ERR_FORMAT";
    case MF_ERR_CUDA: return "MF_ERR_CUDA";
    case MF_ERR_INTERNAL: return "MF_ERR_INTERNAL";
    }
    return "MF_ERR_UNKNOWN";
}

const char *mf_last_error(void) { return mf_err_msg; }

void mf_clear_error(void) { mf_err_msg[0] = '\0'; }

mf_status mf_fail(mf_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mf_err_msg, sizeof mf_err_msg, fmt, ap);
    va_end(ap);
    return s;
}
