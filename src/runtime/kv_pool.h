// Internal: the host bookkeeping of a paged KV cache: which of n_blocks
// blocks are free, who holds each (a reference count: a block shared by
// several sequences, e.g. a common prompt, is counted once per holder), and
// the prefix cache.
//
// Prefix cache: a full block of a prompt can be registered under its key
// (the parent block that precedes it in the sequence, and its block_size
// token ids). A later sequence with the same leading tokens finds its blocks
// again block by block from the start (mf_kv_pool_lookup), so their KV is
// not computed twice. A hit is confirmed by comparing the stored token ids and
// the parent's identity (block id and generation), never by the hash alone:
// a collision cannot serve another prompt's KV. A registered block whose last
// holder lets go stays cached, in an LRU list of evictable blocks; allocation
// takes a never-cached free block first, then evicts the least recently
// released cached one (a sequence releases its blocks last-first, so its
// leading blocks, the most shareable, are evicted last). Evicting or
// reusing a block bumps its generation, which orphans cached children that
// named it as parent (they can no longer be found; they age out of the LRU).
//
// Invariant (checked by mf_kv_pool_check): every block is exactly one of
// held (ref > 0), cached-and-free (ref 0, in the LRU) or free (ref 0, in the
// free list), and free + LRU + held = n_blocks.
#ifndef MF_RUNTIME_KV_POOL_H
#define MF_RUNTIME_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "minfer/status.h"

typedef struct {
    int32_t n_blocks, block_size;
    int32_t *ref;        // (n_blocks) holders of each block
    uint32_t *gen;       // (n_blocks) bumped each time the block is handed out fresh
    // free list and LRU of cached free blocks: doubly linked through prev/next
    // (heads: n_blocks = free list, n_blocks + 1 = LRU; least recent after the head)
    int32_t *prev, *next; // (n_blocks + 2)
    int32_t n_free, n_lru;
    // prefix cache
    bool caching;        // false: register/lookup are no-ops
    bool *cached;        // (n_blocks) registered (findable)
    int32_t *parent;     // (n_blocks) the block before it in its sequence (-1: the first)
    uint32_t *parent_gen;// (n_blocks) that parent's generation when registered
    uint64_t *key;       // (n_blocks) hash of (parent, parent_gen, tokens)
    int32_t *tokens;     // (n_blocks, block_size) token ids of registered blocks
    int32_t *bucket;     // (n_buckets) first block of each hash chain (-1: none)
    int32_t *chain;      // (n_blocks) next block in the chain
    int32_t n_buckets;   // a power of two >= 2 n_blocks
    int64_t evictions;   // cached blocks evicted so far
} mf_kv_pool;

// n_blocks >= 1, block_size >= 1; caching: keep a prefix cache.
mf_status mf_kv_pool_init(mf_kv_pool *p, int32_t n_blocks, int32_t block_size, bool caching);
void mf_kv_pool_free(mf_kv_pool *p);

// Blocks an allocation can take now (free + evictable cached).
static inline int32_t mf_kv_pool_available(const mf_kv_pool *p) { return p->n_free + p->n_lru; }

// A block for a new holder (ref 1, not cached): from the free list, else
// the LRU's oldest cached block, evicted. MF_ERR_OOM when none is left (or a
// fault is injected: mf_fault_alloc_fail_after counts these too).
mf_status mf_kv_pool_alloc(mf_kv_pool *p, int32_t *block);
// One more holder of a held or cached block (a prefix hit, a forked sequence).
void mf_kv_pool_ref(mf_kv_pool *p, int32_t block);
// One holder less; at 0 a cached block joins the LRU, any other the free list.
void mf_kv_pool_release(mf_kv_pool *p, int32_t block);

// Registers full block `block` (held) as the one after `parent` (-1: first)
// holding tokens[0 .. block_size). When an equal block is registered already
// the call does nothing (the first stays the one found). Returns whether
// `block` is now registered.
bool mf_kv_pool_register(mf_kv_pool *p, int32_t block, int32_t parent, const int32_t *tokens);
// The registered block after `parent` (-1: first) holding tokens[0 ..
// block_size), or -1. Does not take it (mf_kv_pool_ref does).
int32_t mf_kv_pool_lookup(const mf_kv_pool *p, int32_t parent, const int32_t *tokens);

// Checks the invariant; MF_ERR_INTERNAL naming the first violation.
mf_status mf_kv_pool_check(const mf_kv_pool *p);

#endif // MF_RUNTIME_KV_POOL_H
