// The KV block pool's bookkeeping and prefix cache (see kv_pool.h).
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "runtime/kv_pool.h"

static int32_t head_free(const mf_kv_pool *p) { return p->n_blocks; }
static int32_t head_lru(const mf_kv_pool *p) { return p->n_blocks + 1; }

static void list_remove(mf_kv_pool *p, int32_t b) {
    p->next[p->prev[b]] = p->next[b];
    p->prev[p->next[b]] = p->prev[b];
    p->prev[b] = p->next[b] = -1;
}

// Appends b at the tail of list h (most recent).
static void list_push(mf_kv_pool *p, int32_t h, int32_t b) {
    const int32_t last = p->prev[h];
    p->next[last] = b, p->prev[b] = last;
    p->next[b] = h, p->prev[h] = b;
}

mf_status mf_kv_pool_init(mf_kv_pool *p, int32_t n_blocks, int32_t block_size, bool caching) {
    memset(p, 0, sizeof *p);
    if (n_blocks < 1 || block_size < 1)
        return mf_fail(MF_ERR_INVALID_ARG, "kv_pool: %d blocks of %d tokens (want >= 1 each)", n_blocks, block_size);
    if (n_blocks > (1 << 28))
        return mf_fail(MF_ERR_INVALID_ARG, "kv_pool: %d blocks (at most 2^28)", n_blocks);
    p->n_blocks = n_blocks, p->block_size = block_size, p->caching = caching;
    const size_t n = (size_t)n_blocks;
    p->n_buckets = 1;
    while (p->n_buckets < 2 * n_blocks) p->n_buckets *= 2;
    p->ref = mf_calloc(n, sizeof *p->ref);
    p->gen = mf_calloc(n, sizeof *p->gen);
    p->prev = mf_malloc((n + 2) * sizeof *p->prev);
    p->next = mf_malloc((n + 2) * sizeof *p->next);
    p->cached = mf_calloc(n, sizeof *p->cached);
    p->parent = mf_malloc(n * sizeof *p->parent);
    p->parent_gen = mf_calloc(n, sizeof *p->parent_gen);
    p->key = mf_calloc(n, sizeof *p->key);
    p->chain = mf_malloc(n * sizeof *p->chain);
    p->bucket = mf_malloc((size_t)p->n_buckets * sizeof *p->bucket);
    p->tokens = caching ? mf_malloc(n * (size_t)block_size * sizeof *p->tokens) : NULL;
    if (!p->ref || !p->gen || !p->prev || !p->next || !p->cached || !p->parent || !p->parent_gen || !p->key ||
        !p->chain || !p->bucket || (caching && !p->tokens)) {
        mf_kv_pool_free(p);
        return mf_fail(MF_ERR_OOM, "kv_pool: out of host memory for %d blocks of %d tokens", n_blocks, block_size);
    }
    for (int32_t h = n_blocks; h < n_blocks + 2; h++) p->prev[h] = p->next[h] = h;
    for (int32_t b = 0; b < n_blocks; b++) list_push(p, head_free(p), b), p->parent[b] = -1, p->chain[b] = -1;
    for (int32_t i = 0; i < p->n_buckets; i++) p->bucket[i] = -1;
    p->n_free = n_blocks;
    return MF_OK;
}

void mf_kv_pool_free(mf_kv_pool *p) {
    if (!p) return;
    free(p->ref);
    free(p->gen);
    free(p->prev);
    free(p->next);
    free(p->cached);
    free(p->parent);
    free(p->parent_gen);
    free(p->key);
    free(p->chain);
    free(p->bucket);
    free(p->tokens);
    memset(p, 0, sizeof *p);
}

// splitmix64 finaliser: the hash of a block key.
static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t key_of(const mf_kv_pool *p, int32_t parent, uint32_t parent_gen, const int32_t *tokens) {
    uint64_t h = mix(((uint64_t)(uint32_t)parent << 32 | parent_gen) + 0x9E3779B97F4A7C15ull);
    for (int32_t i = 0; i < p->block_size; i++) h = mix(h ^ (uint32_t)tokens[i]);
    return h;
}

static int32_t *bucket_of(mf_kv_pool *p, uint64_t key) { return &p->bucket[key & (uint64_t)(p->n_buckets - 1)]; }

// Takes b out of the prefix cache (its hash chain); its children are orphaned by the generation bump.
static void unregister(mf_kv_pool *p, int32_t b) {
    int32_t *at = bucket_of(p, p->key[b]);
    while (*at != b) at = &p->chain[*at];
    *at = p->chain[b];
    p->chain[b] = -1, p->cached[b] = false, p->parent[b] = -1;
}

mf_status mf_kv_pool_alloc(mf_kv_pool *p, int32_t *block) {
    *block = -1;
    if (mf_fault_should_fail())
        return mf_fail(MF_ERR_OOM, "kv_pool: injected allocation failure (%d free, %d cached)", p->n_free, p->n_lru);
    int32_t b;
    if (p->n_free > 0) {
        b = p->next[head_free(p)];
        p->n_free--;
    } else if (p->n_lru > 0) {
        b = p->next[head_lru(p)];
        p->n_lru--;
        unregister(p, b);
        p->evictions++;
    } else {
        return mf_fail(MF_ERR_OOM, "kv_pool: all %d blocks are held", p->n_blocks);
    }
    list_remove(p, b);
    p->ref[b] = 1;
    p->gen[b]++;
    *block = b;
    return MF_OK;
}

void mf_kv_pool_ref(mf_kv_pool *p, int32_t b) {
    if (p->ref[b] == 0) { // a cached block off the LRU
        list_remove(p, b);
        p->n_lru--;
    }
    p->ref[b]++;
}

void mf_kv_pool_release(mf_kv_pool *p, int32_t b) {
    if (--p->ref[b] > 0) return;
    if (p->cached[b]) {
        list_push(p, head_lru(p), b);
        p->n_lru++;
    } else {
        list_push(p, head_free(p), b);
        p->n_free++;
    }
}

static bool same(const mf_kv_pool *p, int32_t b, int32_t parent, uint32_t parent_gen, const int32_t *tokens) {
    return p->parent[b] == parent && p->parent_gen[b] == parent_gen &&
           !memcmp(p->tokens + (size_t)b * (size_t)p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
}

int32_t mf_kv_pool_lookup(const mf_kv_pool *p, int32_t parent, const int32_t *tokens) {
    if (!p->caching) return -1;
    const uint32_t pg = parent >= 0 ? p->gen[parent] : 0;
    const uint64_t key = key_of(p, parent, pg, tokens);
    for (int32_t b = p->bucket[key & (uint64_t)(p->n_buckets - 1)]; b >= 0; b = p->chain[b])
        if (p->key[b] == key && same(p, b, parent, pg, tokens)) return b;
    return -1;
}

bool mf_kv_pool_register(mf_kv_pool *p, int32_t b, int32_t parent, const int32_t *tokens) {
    if (!p->caching || p->cached[b]) return p->cached[b];
    if (mf_kv_pool_lookup(p, parent, tokens) >= 0) return false; // an equal block is the one found
    const uint32_t pg = parent >= 0 ? p->gen[parent] : 0;
    p->key[b] = key_of(p, parent, pg, tokens);
    p->parent[b] = parent, p->parent_gen[b] = pg, p->cached[b] = true;
    memcpy(p->tokens + (size_t)b * (size_t)p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
    int32_t *at = bucket_of(p, p->key[b]);
    p->chain[b] = *at, *at = b;
    return true;
}

mf_status mf_kv_pool_check(const mf_kv_pool *p) {
    int32_t in_free = 0, in_lru = 0, held = 0;
    for (int32_t h = 0; h < 2; h++) {
        const int32_t head = p->n_blocks + h;
        for (int32_t b = p->next[head], n = 0; b != head; b = p->next[b], n++) {
            if (b < 0 || b >= p->n_blocks || n > p->n_blocks)
                return mf_fail(MF_ERR_INTERNAL, "kv_pool: %s list broken at %d", h ? "LRU" : "free", b);
            if (p->ref[b] != 0)
                return mf_fail(MF_ERR_INTERNAL, "kv_pool: block %d in the %s list has ref %d", b, h ? "LRU" : "free",
                               p->ref[b]);
            if (p->cached[b] != (h == 1))
                return mf_fail(MF_ERR_INTERNAL, "kv_pool: block %d in the %s list is %scached", b, h ? "LRU" : "free",
                               p->cached[b] ? "" : "not ");
            if (h) in_lru++;
            else in_free++;
        }
    }
    for (int32_t b = 0; b < p->n_blocks; b++) {
        if (p->ref[b] < 0) return mf_fail(MF_ERR_INTERNAL, "kv_pool: block %d has ref %d", b, p->ref[b]);
        held += p->ref[b] > 0;
    }
    if (in_free != p->n_free || in_lru != p->n_lru || in_free + in_lru + held != p->n_blocks)
        return mf_fail(MF_ERR_INTERNAL, "kv_pool: %d free (counted %d) + %d cached (counted %d) + %d held != %d blocks",
                       p->n_free, in_free, p->n_lru, in_lru, held, p->n_blocks);
    return MF_OK;
}
