// Open-addressing hash maps with linear probing, sized at init to a power of
// two at least twice the expected count (so probes stay short and a full
// table never happens: inserting beyond `expected` is a caller bug).
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tok.h"

// FNV-1a, 64-bit.
uint64_t tk_hash_bytes(const void *s, int64_t n) {
    const unsigned char *p = s;
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int64_t table_cap(int64_t expected) {
    int64_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    return cap;
}

mf_status tk_strmap_init(tk_strmap *m, int64_t expected, const char *const *keys, const int32_t *key_len) {
    memset(m, 0, sizeof *m);
    m->cap = table_cap(expected);
    m->slot = mf_malloc((size_t)m->cap * sizeof *m->slot);
    if (!m->slot) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for a %lld-slot vocabulary map", (long long)m->cap);
    for (int64_t i = 0; i < m->cap; i++) m->slot[i] = (tk_str_slot){-1, 0};
    m->keys = keys;
    m->key_len = key_len;
    return MF_OK;
}

void tk_strmap_free(tk_strmap *m) {
    free(m->slot);
    m->slot = NULL;
}

bool tk_strmap_insert(tk_strmap *m, int32_t id) {
    const char *s = m->keys[id];
    int64_t n = m->key_len[id];
    uint64_t h = tk_hash_bytes(s, n), mask = (uint64_t)m->cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        tk_str_slot *sl = &m->slot[i];
        if (sl->id < 0) {
            *sl = (tk_str_slot){id, (uint32_t)h};
            m->count++;
            return true;
        }
        if (sl->hash == (uint32_t)h && m->key_len[sl->id] == n && memcmp(m->keys[sl->id], s, (size_t)n) == 0)
            return false;
    }
}

int32_t tk_strmap_get(const tk_strmap *m, const char *s, int64_t n) {
    if (!m->slot) return -1;
    uint64_t h = tk_hash_bytes(s, n), mask = (uint64_t)m->cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        const tk_str_slot *sl = &m->slot[i];
        if (sl->id < 0) return -1;
        if (sl->hash == (uint32_t)h && m->key_len[sl->id] == n && memcmp(m->keys[sl->id], s, (size_t)n) == 0)
            return sl->id;
    }
}

// A 64-bit mix (splitmix64's finalizer) for pair keys.
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

mf_status tk_pairmap_init(tk_pairmap *m, int64_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = table_cap(expected);
    m->e = mf_malloc((size_t)m->cap * sizeof *m->e);
    if (!m->e) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for a %lld-slot merge map", (long long)m->cap);
    for (int64_t i = 0; i < m->cap; i++) m->e[i] = (tk_pair_entry){UINT64_MAX, -1, -1};
    return MF_OK;
}

void tk_pairmap_free(tk_pairmap *m) {
    free(m->e);
    m->e = NULL;
}

void tk_pairmap_insert(tk_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t mask = (uint64_t)m->cap - 1;
    for (uint64_t i = mix64(k) & mask;; i = (i + 1) & mask) {
        tk_pair_entry *e = &m->e[i];
        if (e->key == UINT64_MAX) m->count++;
        if (e->key == UINT64_MAX || e->key == k) { // a repeated merge: the last rank wins, as in HF
            *e = (tk_pair_entry){k, rank, merged};
            return;
        }
    }
}

int32_t tk_pairmap_get(const tk_pairmap *m, int32_t a, int32_t b, int32_t *merged) {
    if (!m->e) return -1;
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t mask = (uint64_t)m->cap - 1;
    for (uint64_t i = mix64(k) & mask;; i = (i + 1) & mask) {
        const tk_pair_entry *e = &m->e[i];
        if (e->key == k) {
            *merged = e->merged;
            return e->rank;
        }
        if (e->key == UINT64_MAX) return -1;
    }
}
