// The cache of a session's recorded decode steps (graph.h).
#include <string.h>

#include "core/error.h"
#include "runtime/graph.h"

static void drop(mf_graph *g, mf_backend *be) {
    if (g->exec) be->graph_free(be, g->exec);
    memset(g, 0, sizeof *g);
}

mf_graph *mf_graph_find(mf_graph_cache *c, const mf_graph_key *key) {
    for (int i = 0; i < MF_SESSION_GRAPHS; i++) {
        const mf_graph_key *k = &c->g[i].key;
        if (k->n_seqs == key->n_seqs && k->kind == key->kind && k->k == key->k && k->scale == key->scale &&
            k->paged == key->paged)
            return &c->g[i];
    }
    return NULL;
}

mf_graph *mf_graph_evict(mf_graph_cache *c, mf_backend *be) {
    int victim = 0;
    for (int i = 1; i < MF_SESSION_GRAPHS; i++)
        if (c->g[i].used < c->g[victim].used) victim = i;
    drop(&c->g[victim], be);
    return &c->g[victim];
}

mf_status mf_graph_replay(mf_graph_cache *c, mf_backend *be, mf_graph *g) {
    g->used = ++c->clock;
    MF_TRY(be->graph_launch(be, g->exec));
    c->replayed++;
    return MF_OK;
}

void mf_graph_drop_all(mf_graph_cache *c, mf_backend *be) {
    for (int i = 0; i < MF_SESSION_GRAPHS; i++) drop(&c->g[i], be);
}
