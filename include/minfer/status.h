// Status codes and the thread-local last-error message.
// Every library function returns an mf_status; on failure mf_last_error()
// names the bad value ("gemm: a.shape[1]=64 != b.shape[0]=65"). The library
// never exits or aborts.
#ifndef MINFER_STATUS_H
#define MINFER_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MF_OK = 0,
    MF_ERR_INVALID_ARG = 1, // a caller's argument is wrong (shape, dtype, NULL, range)
    MF_ERR_UNSUPPORTED = 2, // valid, but this backend/build cannot do it
    MF_ERR_OOM = 3,         // host or device allocation failed
    MF_ERR_IO = 4,          // file could not be opened/read
    MF_ERR_FORMAT = 5,      // a file's content is malformed
    MF_ERR_CUDA = 6,        // a CUDA / cuBLAS call failed
    MF_ERR_INTERNAL = 7,    // a bug in minfer
} mf_status;

// Short name of a status ("MF_ERR_INVALID_ARG").
const char *mf_status_str(mf_status s);

// Message of the last failure on this thread ("" if none). Valid until the
// next failing call on this thread.
const char *mf_last_error(void);

// Forget the last message on this thread.
void mf_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif // MINFER_STATUS_H
