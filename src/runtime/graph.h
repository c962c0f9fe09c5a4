// Internal: a session's recorded decode steps. On a backend that records
// graphs (CUDA Graphs), a decode step is recorded once per batch size and
// output and replayed for every later step like it; a few are kept, the least
// recently used going first. step.c records and replays them; this is the cache.
#ifndef MF_RUNTIME_GRAPH_H
#define MF_RUNTIME_GRAPH_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MF_SESSION_GRAPHS = 8 }; // graphs kept per session (batch sizes in use)

// What a recorded step is for.
typedef struct {
    int32_t n_seqs;          // sequences, one token each (0: an empty entry)
    int kind;                // what the step ends with: logits, their argmax, or top-k (step.c)
    int32_t k;               // top-k: candidates per row (else 0)
    float scale;             // top-k: the scale of the row sums (else 0)
    bool paged;              // keys read through block tables (a runner's step) or from slots
} mf_graph_key;

typedef struct {
    mf_graph_key key;
    void *exec;              // the backend's executable graph
    uint64_t used;           // the cache's clock at the last use
    int64_t ops;             // ops it recorded
} mf_graph;

typedef struct {
    bool on;                 // record and replay (default: when the backend records graphs)
    int32_t moe_rows;        // MoE models: decode steps of up to this many sequences are recorded (0: none)
    mf_graph g[MF_SESSION_GRAPHS];
    uint64_t clock;
    int64_t recorded, replayed; // since the session was created
    char off[192];           // the error that turned graphs off ("" if none)
} mf_graph_cache;

// The graph recorded for key, or NULL.
mf_graph *mf_graph_find(mf_graph_cache *c, const mf_graph_key *key);
// The least recently used entry, emptied (its graph freed) for a recording.
mf_graph *mf_graph_evict(mf_graph_cache *c, mf_backend *be);
// Queues one replay of g.
mf_status mf_graph_replay(mf_graph_cache *c, mf_backend *be, mf_graph *g);
// Frees every recorded graph.
void mf_graph_drop_all(mf_graph_cache *c, mf_backend *be);

#ifdef __cplusplus
}
#endif
#endif // MF_RUNTIME_GRAPH_H
