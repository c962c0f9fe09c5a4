// Internal: the weight plan, between a family's weight map (which fills it
// through weights.h's mf_wplan_* calls, wplan.c) and weights.c (which checks
// it against the checkpoint, places and fills it). No backend here, so that
// the config parser's fuzz target links the family table without one.
#ifndef MF_MODEL_WPLAN_H
#define MF_MODEL_WPLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "model/load/weights.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_W_NAME 128

typedef struct {
    mf_tensor *dst;            // the view this slot sets
    int32_t n_src;             // 1..3 sources stacked along dim 0
    char name[3][MF_W_NAME];   // their names in the checkpoint (n_rep > 0: prefixes)
    int32_t n_rep;             // 0: one group of sources; > 0: n_rep groups (experts), source j of
                               // group e named name[j] + e + suffix[j]; the view is 3-D
    char suffix[3][32];        // n_rep > 0: the name after the group index
    int64_t rows[3];           // dim 0 of each source
    int64_t cols;              // dim 1 of every source; 0: the sources are vectors
    bool transposed;           // a torch Linear (out, in): the view is its transpose (in, out)
    float mean, std;           // synthetic values: mean + std * N(0, 1)
    const mf_st_tensor *src[3];// n_rep > 0: group 0's (the others are looked up when filled)
    mf_dtype src_dt;           // the sources' dtype when every one has it (src_same), from check_sources
    bool src_same;
    mf_dtype dt;               // the view's dtype (weights.c: slot_dtype)
    int64_t offset;            // bytes into the block; -1: a view into the mmap
} wslot;

struct mf_wplan {
    wslot *v;
    int32_t n, cap;
    bool oom;
    bool fuse;               // stack q|k|v and gate|up (the weights are copied anyway)
    const mf_st_file *st;    // the checkpoint; NULL: random weights
};

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_WPLAN_H
