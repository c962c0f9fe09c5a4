// The BPE model on one piece: characters -> ids (byte fallback / unk), then
// merges applied lowest rank first (leftmost on ties) until none applies.
//
// The symbols form a doubly-linked list over an array; a binary min-heap holds
// candidate pairs (rank, position of the left symbol). A popped candidate is
// used only if its pair is still there with that rank, so stale entries cost
// a pop each. n symbols: at most n - 1 merges, each pushing <= 2 candidates,
// so O(n log n) for any piece, even a 100 KB run of one character with no
// pre-tokenizer to cut it.
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tok.h"

struct tk_sym {
    int32_t id;         // token id; -1 once merged into its left neighbour
    int32_t prev, next; // neighbours in the list, -1 at the ends
};

struct tk_cand {
    int32_t rank;
    int32_t pos;        // index of the pair's left symbol
};

static bool cand_less(struct tk_cand a, struct tk_cand b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

typedef struct {
    struct tk_cand *v;
    int64_t n;
} heap;

static void heap_push(heap *h, struct tk_cand c) {
    int64_t i = h->n++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!cand_less(c, h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
}

static struct tk_cand heap_pop(heap *h) {
    struct tk_cand top = h->v[0], last = h->v[--h->n];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && cand_less(h->v[c + 1], h->v[c])) c++;
        if (!cand_less(h->v[c], last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

void tk_bpe_scratch_free(tk_bpe_scratch *sc) {
    free(sc->sym);
    free(sc->heap);
    memset(sc, 0, sizeof *sc);
}

// Room for n symbols and their candidates (each merge adds at most 2 to the
// n - 1 initial ones, so 3n bounds the heap).
static mf_status scratch_reserve(tk_bpe_scratch *sc, int64_t n) {
    if (n > sc->cap_sym) {
        struct tk_sym *s = tk_realloc(sc->sym, (size_t)n * sizeof *s);
        if (!s) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for %lld BPE symbols", (long long)n);
        sc->sym = s;
        sc->cap_sym = n;
    }
    if (3 * n > sc->cap_heap) {
        struct tk_cand *c = tk_realloc(sc->heap, (size_t)(3 * n) * sizeof *c);
        if (!c) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for %lld BPE candidates", (long long)(3 * n));
        sc->heap = c;
        sc->cap_heap = 3 * n;
    }
    return MF_OK;
}

static void push_pair(const tk_bpe *m, const struct tk_sym *sym, heap *h, int32_t left) {
    int32_t right = sym[left].next, merged;
    if (right < 0) return;
    int32_t rank = tk_pairmap_get(&m->merges, sym[left].id, sym[right].id, &merged);
    if (rank >= 0) heap_push(h, (struct tk_cand){rank, left});
}

static mf_status encode_word(const tk_bpe *m, tk_bpe_scratch *sc, const char *s, int64_t n, tk_ids *out) {
    if (n > INT32_MAX / 4)
        return mf_fail(MF_ERR_UNSUPPORTED, "tokenizer: a piece of %lld bytes is too long for BPE (max %d)",
                       (long long)n, INT32_MAX / 4);
    // At most one symbol per byte.
    MF_TRY(scratch_reserve(sc, n));
    struct tk_sym *sym = sc->sym;
    int32_t ns = 0;
    bool pending_unk = false; // an unk symbol not yet added (fuse_unk folds a run into one)
    const unsigned char *u = (const unsigned char *)s;
    for (int64_t i = 0; i < n;) {
        int k = tk_utf8_len(u + i, n - i);
        int32_t id = k == 1 && u[i] < 0x80 ? m->char_id[u[i]]
                     : k == 2              ? m->char_id[(u[i] & 0x1F) << 6 | (u[i + 1] & 0x3F)]
                                           : tk_strmap_get(&m->vocab, s + i, k);
        bool fell_back = false;
        if (id < 0 && m->byte_fallback) {
            bool all = true;
            for (int j = 0; j < k; j++) all = all && m->byte_id[u[i + j]] >= 0;
            fell_back = all;
        }
        if (id >= 0 || fell_back) {
            if (pending_unk) sym[ns++].id = m->unk_id;
            pending_unk = false;
            if (id >= 0) sym[ns++].id = id;
            else
                for (int j = 0; j < k; j++) sym[ns++].id = m->byte_id[u[i + j]];
        } else if (m->unk_id >= 0) {
            if (pending_unk && !m->fuse_unk) sym[ns++].id = m->unk_id;
            pending_unk = true;
        } // else: no unk token, the character is dropped (as HF does)
        i += k;
    }
    if (pending_unk) sym[ns++].id = m->unk_id;
    for (int32_t i = 0; i < ns; i++) {
        sym[i].prev = i - 1;
        sym[i].next = i + 1 < ns ? i + 1 : -1;
    }

    heap h = {sc->heap, 0};
    for (int32_t i = 0; i + 1 < ns; i++) push_pair(m, sym, &h, i);
    while (h.n > 0) {
        struct tk_cand c = heap_pop(&h);
        int32_t left = c.pos, right = sym[left].next, merged;
        if (sym[left].id < 0 || right < 0) continue;
        if (tk_pairmap_get(&m->merges, sym[left].id, sym[right].id, &merged) != c.rank) continue; // stale
        sym[left].id = merged;
        sym[right].id = -1;
        sym[left].next = sym[right].next;
        if (sym[right].next >= 0) sym[sym[right].next].prev = left;
        if (sym[left].prev >= 0) push_pair(m, sym, &h, sym[left].prev);
        push_pair(m, sym, &h, left);
    }
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = sym[i].next) MF_TRY(tk_ids_push(out, sym[i].id));
    return MF_OK;
}

// "▁" (U+2581) in UTF-8.
static bool is_meta(const char *s) { return s[0] == '\xE2' && s[1] == '\x96' && s[2] == '\x81'; }

mf_status tk_bpe_encode(const tk_bpe *m, tk_bpe_scratch *sc, const char *s, int64_t n, tk_ids *out) {
    if (n == 0) return MF_OK;
    if (m->ignore_merges) {
        int32_t id = tk_strmap_get(&m->vocab, s, n);
        if (id >= 0) return tk_ids_push(out, id);
    }
    if (!m->cut_before_meta) return encode_word(m, sc, s, n, out);
    // SentencePiece-style text is one long piece; cut it into words before
    // each "▁" that follows another character (no merge can span such a cut).
    int64_t start = 0;
    for (int64_t i = 3; i + 3 <= n; i++) {
        if (is_meta(s + i) && !is_meta(s + i - 3)) {
            MF_TRY(encode_word(m, sc, s + start, i - start, out));
            start = i;
            i += 2;
        }
    }
    return encode_word(m, sc, s + start, n - start, out);
}
