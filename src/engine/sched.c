// The scheduling policy: which sequences one step runs, with how many
// tokens, and the KV blocks they get.
//
// Each step has a budget of max_batched_tokens token rows and max_seqs
// sequences. In order:
//   1. every running sequence that decodes (one token: its last sampled one)
//      gets it, oldest admitted first;
//   2. running sequences still in their prompt (chunked prefill) get the next
//      chunk, as much as the budget leaves;
//   3. if nobody was preempted in 1-2, waiting sequences are admitted first
//      come first served while the budget, max_seqs and free blocks allow
//      (the first that does not fit stops admission: no overtaking). An
//      admitted sequence first takes the blocks of its longest cached prefix
//      (full blocks only, and never the block holding its last token, which
//      must be computed to give the next token's logits).
// A scheduled sequence gets the blocks its new tokens need: new ones at its
// end, and a private copy of a shared partial block it is about to write
// (copy on write: siblings of an n > 1 request share the prompt's last
// block). When the pool is short, the newest running sequence is preempted:
// its blocks are freed (full ones stay in the prefix cache) and it goes to
// the front of the waiting queue, to be recomputed from its tokens. The
// oldest running sequence is never preempted for a newer one, and a request
// is admitted only if it fits the whole pool alone (mf_engine_add_request),
// so the oldest always progresses: no deadlock, and every request that fit
// finishes.
#include "core/error.h"
#include "engine/engine_int.h"

static int64_t blocks_for(const mf_engine *e, int64_t tokens) {
    return (tokens + e->r.block_size - 1) / e->r.block_size;
}

// Whether s's next token goes into a partial block that others hold too.
static bool shared_tail(const mf_engine *e, const eng_seq *s) {
    const int64_t bs = e->r.block_size, i = s->n_computed / bs;
    return s->n_computed % bs != 0 && i < s->n_blocks && e->pool.ref[s->blocks[i]] > 1;
}

// Blocks s must take for n more tokens.
static int32_t need_blocks(const mf_engine *e, const eng_seq *s, int64_t n) {
    int64_t need = blocks_for(e, s->n_computed + n) - s->n_blocks;
    return (int32_t)(need > 0 ? need : 0) + (shared_tail(e, s) ? 1 : 0);
}

// The sequences an admitted (unforked) request will run: all n count against max_seqs.
static int32_t slots_of(const eng_seq *s) {
    return s->index == 0 && !s->req->forked ? s->req->n : 1;
}

void mf_sched_release_blocks(mf_engine *e, eng_seq *s) {
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) mf_kv_pool_release(&e->pool, s->blocks[i]);
    s->n_blocks = 0, s->n_seen = 0, s->n_computed = 0;
}

// s leaves the running queue for the front of the waiting one, its blocks freed.
static void preempt(mf_engine *e, eng_seq *s, int64_t *budget) {
    for (int32_t i = 0; i < e->n_sched; i++)
        if (e->sched[i] == s) { // scheduled earlier in this step: its tokens go back to the budget
            *budget += s->step_n;
            for (int32_t j = i; j + 1 < e->n_sched; j++) e->sched[j] = e->sched[j + 1];
            e->n_sched--;
            break;
        }
    mf_seq_queue_remove(&e->running, s);
    e->reserved -= slots_of(s) - 1;
    mf_sched_release_blocks(e, s);
    s->state = SEQ_WAITING;
    mf_seq_queue_front(&e->waiting, s);
    s->req->n_preempted++;
    e->st.preemptions++;
    e->n_preempted++;
}

// s takes the blocks n more tokens need (a copy of a shared tail first).
static mf_status take_blocks(mf_engine *e, eng_seq *s, int64_t n) {
    if (shared_tail(e, s)) {
        const int32_t i = (int32_t)(s->n_computed / e->r.block_size), old = s->blocks[i];
        int32_t b;
        MF_TRY(mf_kv_pool_alloc(&e->pool, &b));
        mf_status st = e->r.copy_block(e->r.ctx, old, b);
        if (st != MF_OK) {
            mf_kv_pool_release(&e->pool, b);
            return st;
        }
        mf_kv_pool_release(&e->pool, old);
        s->blocks[i] = b;
    }
    while (s->n_blocks < blocks_for(e, s->n_computed + n)) {
        int32_t b;
        MF_TRY(mf_kv_pool_alloc(&e->pool, &b));
        s->blocks[s->n_blocks++] = b;
    }
    return MF_OK;
}

static void schedule(mf_engine *e, eng_seq *s, int64_t n, int64_t *budget) {
    s->step_n = n, s->step_row = -1;
    e->sched[e->n_sched++] = s;
    *budget -= n;
}

static bool scheduled(const mf_engine *e, const eng_seq *s) {
    for (int32_t i = 0; i < e->n_sched; i++)
        if (e->sched[i] == s) return true;
    return false;
}

// Steps 1 and 2: running sequences, decodes (pass 0) then prompt chunks (pass 1).
static mf_status run_running(mf_engine *e, int64_t *budget) {
    for (int pass = 0; pass < 2; pass++)
        for (eng_seq *s = e->running.head, *next; s; s = next) {
            next = s->next;
            const int64_t left = s->n_tok - s->n_computed;
            if ((left == 1) != (pass == 0) || scheduled(e, s)) continue;
            if (*budget == 0 || e->n_sched == e->r.max_seqs) return MF_OK;
            const int64_t n = left < *budget ? left : *budget;
            bool self = false;
            while (mf_kv_pool_available(&e->pool) < need_blocks(e, s, n)) {
                eng_seq *v = e->running.tail;
                preempt(e, v, budget);
                if (v == s) {
                    self = true;
                    break;
                }
            }
            if (self) return MF_OK; // s was the newest: nothing runs after it
            MF_TRY(take_blocks(e, s, n));
            schedule(e, s, n, budget);
            next = s->next; // victims came off the tail
        }
    return MF_OK;
}

// Step 3: admissions, first come first served.
static mf_status admit(mf_engine *e, int64_t *budget) {
    const int32_t bs = e->r.block_size;
    while (*budget > 0 && e->waiting.head && e->n_sched < e->r.max_seqs) {
        eng_seq *s = e->waiting.head;
        const int32_t slots = slots_of(s);
        if (e->running.n + e->reserved + slots > e->r.max_seqs) break;
        // the longest cached prefix: full blocks, not the one with the last token
        int32_t hits = 0, from_lru = 0, parent = -1;
        if (e->pool.caching)
            while ((int64_t)(hits + 1) * bs <= s->n_tok - 1) {
                const int32_t b = mf_kv_pool_lookup(&e->pool, parent, s->toks + (int64_t)hits * bs);
                if (b < 0) break;
                s->blocks[hits++] = b; // taken below, if s fits
                from_lru += e->pool.ref[b] == 0;
                parent = b;
            }
        const int64_t computed = (int64_t)hits * bs, left = s->n_tok - computed;
        const int64_t n = left < *budget ? left : *budget;
        if (mf_kv_pool_available(&e->pool) < from_lru + blocks_for(e, computed + n) - hits) break;
        for (int32_t i = 0; i < hits; i++) mf_kv_pool_ref(&e->pool, s->blocks[i]);
        s->n_blocks = hits, s->n_seen = hits, s->n_computed = computed;
        mf_seq_queue_remove(&e->waiting, s);
        mf_seq_queue_push(&e->running, s);
        s->state = SEQ_RUNNING;
        e->reserved += slots - 1;
        e->st.cached_tokens += computed;
        if (s->index == 0 && !s->req->forked && s->req->n_preempted == 0)
            s->req->n_cached = computed < s->req->n_prompt ? computed : s->req->n_prompt;
        MF_TRY(take_blocks(e, s, n));
        schedule(e, s, n, budget);
    }
    return MF_OK;
}

mf_status mf_sched_step(mf_engine *e) {
    e->n_sched = 0, e->n_preempted = 0;
    int64_t budget = e->r.max_tokens;
    mf_status st = run_running(e, &budget);
    if (st == MF_OK && e->n_preempted == 0) st = admit(e, &budget);
    if (st != MF_OK) e->n_sched = 0;
    return st;
}

void mf_sched_register(mf_engine *e, eng_seq *s) {
    const int32_t bs = e->r.block_size, full = (int32_t)(s->n_computed / bs);
    for (int32_t i = s->n_seen; i < full && e->pool.caching; i++) {
        const int32_t parent = i > 0 ? s->blocks[i - 1] : -1;
        const int32_t *toks = s->toks + (int64_t)i * bs;
        if (mf_kv_pool_register(&e->pool, s->blocks[i], parent, toks)) continue;
        const int32_t twin = mf_kv_pool_lookup(&e->pool, parent, toks); // computed by another sequence meanwhile
        if (twin >= 0 && twin != s->blocks[i]) {
            mf_kv_pool_ref(&e->pool, twin);
            mf_kv_pool_release(&e->pool, s->blocks[i]);
            s->blocks[i] = twin;
        }
    }
    if (full > s->n_seen) s->n_seen = full;
}
