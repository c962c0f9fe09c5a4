// Internal: loading a model's weights (arch/wplan.h: the views and their
// plan) from a checkpoint, or generating them.
//
// Memory: one backend allocation (`block`) holds every weight that is not
// used in place, plus the RoPE frequencies. CPU: vectors (norms, biases) in
// f32; matrices in f32, f16 or bf16 (the target's mat_dtype, or with
// mat_auto their checkpoint's 16-bit dtype: the CPU's GEMM widens them in
// registers); with the target's mmap, tensors already in their dtype and
// aligned are views into the read-only mmap (`st` kept open), else every one
// is copied (q|k|v and gate|up stacked) into the block, whose pages the CPU
// backend advises for huge pages. CUDA: everything in the model dtype,
// uploaded through a host staging buffer.
#ifndef MF_MODEL_WEIGHTS_H
#define MF_MODEL_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "model/arch/spec.h"
#include "model/arch/wplan.h"
#include "model/load/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- loading -----------------------------------------------------------------------------
// What the weights are for: the spec, its family's weight map, the backend and dtype.
typedef struct {
    const mf_dec_spec *spec;
    void (*map)(const mf_dec_spec *s, mf_weights *w, mf_wplan *p); // the family's weight map (arch.h)
    mf_backend *be;
    mf_dtype dtype;           // vectors (CUDA: every weight, = mat_dtype); the CPU's is f32
    mf_dtype mat_dtype;       // matrices (2-D and the experts' 3-D)
    bool mat_auto;            // CPU: a matrix whose sources are all f16 (or all bf16) keeps that
                              // dtype; the others take mat_dtype
    bool mmap;                // CPU: matrices in their dtype stay views into the file mapping
                              // (else every tensor is copied into the backend's memory)
    bool verbose;             // progress on stderr
} mf_weights_target;

// Loads every tensor the spec needs from `st` (taking ownership of st: it is
// closed on failure, or when no view points into it) into w. Errors name the
// tensor and its file.
mf_status mf_weights_load(mf_weights *w, const mf_weights_target *t, mf_st_file *st);
// Allocates the weights of the spec and fills them with seeded normal values
// (std 0.02; norm gains 1 + that).
mf_status mf_weights_random(mf_weights *w, const mf_weights_target *t, uint64_t seed);
// Writes weights made by mf_weights_random (or a load that copied every
// tensor) as one safetensors file at path, every tensor under the checkpoint
// name and layout mf_weights_load reads (so loading the file gives the same
// weights), each in its view's dtype; meta: n_meta (key, value) string pairs for
// "__metadata__". For tests and fixtures (the synthetic presets' weights
// for an outside reference); not public API.
mf_status mf_weights_save(mf_weights *w, const mf_weights_target *t, const char *path, const char *const *meta,
                          int32_t n_meta);
void mf_weights_free(mf_weights *w);

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_WEIGHTS_H
