// Internal: the backend interface. Every op goes through one of these entries;
// the public mf_* functions in src/ops/ validate arguments first, so entries
// only check what their backend supports (returning MF_ERR_UNSUPPORTED with
// the reason). A NULL op entry means "not implemented on this backend".
#ifndef MF_BACKEND_INTERNAL_H
#define MF_BACKEND_INTERNAL_H

#include "minfer/ops.h"
#include "op_list.h"

#ifdef __cplusplus
extern "C" {
#endif

// The dispatch's profiler hook (mf_session_profiler in minfer/model.h is its
// public face): while be->hook is set, every op called from outside another
// op (mf_moe's parts are mf_moe's) is counted and bracketed with
// begin(user, op, what) / end(user, op, what), `what` being the role the
// caller set last ("qkv", "lm_head").
typedef struct mf_op_hook {
    void (*begin)(void *user, const char *op, const char *what); // NULL: only count
    void (*end)(void *user, const char *op, const char *what);
    void *user;
    const char *what; // the role of the ops queued next, set by the caller
    int64_t ops;      // ops counted
    int depth;        // ops in progress (an op inside another is not counted)
} mf_op_hook;

struct mf_backend {
    const char *name;  // "cpu" | "cuda"
    mf_device device;
    void *ctx;         // backend-private state
    bool mixed_weights; // gemm / moe take f16 or bf16 weights (b, w*) with f32 activations (the CPU)

    void (*destroy)(mf_backend *be);
    mf_status (*alloc)(mf_backend *be, size_t bytes, void **out);
    void (*dealloc)(mf_backend *be, void *p);
    mf_status (*copy)(mf_backend *be, void *dst, const void *src, size_t bytes, mf_copy_kind kind);
    mf_status (*memset)(mf_backend *be, void *dst, int value, size_t bytes);
    mf_status (*sync)(mf_backend *be);
    mf_status (*set_stream)(mf_backend *be, void *stream);

    // The ops, one entry per line of src/op_list.h (arguments already
    // validated by src/ops/; a NULL entry: not implemented on this backend).
    // moe_experts NULL, or returning MF_ERR_UNSUPPORTED (it declines these
    // shapes): src/ops/moe.c runs its generic loop of mf_gemm / mf_act.
#define MF_OP_ENTRY(entry, args_t, name) mf_status (*entry)(mf_backend *be, const args_t *args);
    MF_OPS(MF_OP_ENTRY)
    MF_OPS_OPTIONAL(MF_OP_ENTRY)
#undef MF_OP_ENTRY
    // bytes of split-KV workspace attention could use for args (NULL entry: 0)
    mf_status (*attention_workspace)(mf_backend *be, const mf_attention_args *args, size_t *bytes);

    // Graphs (CUDA Graphs; NULL entries: not supported, e.g. the CPU): the ops
    // queued between graph_begin and graph_end are recorded, not run, into an
    // executable graph; graph_launch queues one replay of it. Between begin and
    // end nothing may synchronise (no D2H copy, no sync). graph_end always
    // ends the recording, also when an op failed during it (then it returns
    // that failure's status and no graph).
    mf_status (*graph_begin)(mf_backend *be);
    mf_status (*graph_end)(mf_backend *be, void **graph);
    mf_status (*graph_launch)(mf_backend *be, void *graph);
    void (*graph_free)(mf_backend *be, void *graph);

    // Whether moe_experts with these (validated) args queues no host read-back
    // or sync, so that a graph can record it (NULL: never; the generic loop
    // reads the offsets back). At most MF_MOE_DECODE_MAX_ROWS routed rows
    // (assignments T * top_k) take such a path on CUDA (its decode kernels,
    // src/cuda/moe/): 32 = a decode batch of 16 x top-2 (docs/notes/moe.md).
    bool (*moe_experts_capturable)(mf_backend *be, const mf_moe_experts_args *args);

    mf_op_hook *hook; // set by a session for the length of a forward call; NULL: ops only run
};

#define MF_MOE_DECODE_MAX_ROWS 32

// The brackets of one op (the dispatch puts them around every entry; mf_moe,
// which runs other ops, around itself; a session around its transfers).
static inline void mf_op_begin(mf_backend *be, const char *op) {
    mf_op_hook *h = be->hook;
    if (h && h->depth++ == 0) {
        h->ops++;
        if (h->begin) h->begin(h->user, op, h->what);
    }
}
static inline void mf_op_end(mf_backend *be, const char *op) {
    mf_op_hook *h = be->hook;
    if (h && --h->depth == 0 && h->end) h->end(h->user, op, h->what);
}

// The dispatch (backend.c): mf_dispatch_<entry>(be, args) runs be's entry
// inside the op's brackets, or fails with MF_ERR_UNSUPPORTED "<op>: not
// implemented on the <backend> backend" when the entry is NULL.
#define MF_OP_DISPATCH(entry, args_t, name) mf_status mf_dispatch_##entry(mf_backend *be, const args_t *args);
MF_OPS(MF_OP_DISPATCH)
MF_OPS_OPTIONAL(MF_OP_DISPATCH)
#undef MF_OP_DISPATCH

mf_status mf_backend_cpu_create(mf_backend **out);

#ifdef MF_HAVE_CUDA
// In src/cuda/backend_cuda.cu. MF_ERR_UNSUPPORTED "no CUDA device" when none.
mf_status mf_backend_cuda_create(mf_backend **out);
bool mf_backend_cuda_usable(void);
const char *mf_backend_cuda_info(void); // "cuda 13.0 runtime, 1 device(s)"
#endif

#ifdef __cplusplus
}
#endif
#endif // MF_BACKEND_INTERNAL_H
