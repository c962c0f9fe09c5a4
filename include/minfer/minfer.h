// minfer: an LLM inference engine in C with CUDA kernels and a CPU twin.
#ifndef MINFER_H
#define MINFER_H

#include "minfer/status.h"
#include "minfer/tensor.h"
#include "minfer/backend.h"
#include "minfer/ops.h"
#include "minfer/tokenizer.h"
#include "minfer/model.h"
#include "minfer/generate.h"
#include "minfer/engine.h"
#include "minfer/chat.h"

#define MF_VERSION_MAJOR 0
#define MF_VERSION_MINOR 1
#define MF_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

// "0.1.0"
const char *mf_version(void);
// One line describing how the library was built ("cuda 13.0 (80;90a), openblas, openmp").
const char *mf_build_info(void);

#ifdef __cplusplus
}
#endif
#endif // MINFER_H
