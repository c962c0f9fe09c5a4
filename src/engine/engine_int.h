// Internal: the serving engine's state, shared by engine.c (requests,
// outputs, sampling) and sched.c (which sequences run in a step, their KV
// blocks, preemption).
//
// A request has n sequences. Until its prompt has been computed only
// sequence 0 exists (the prompt is computed once); when the prompt's last
// chunk runs, the others are forked from it: they hold the same blocks
// (reference counts), and a sequence about to write into a shared partial
// block copies it first (copy on write).
#ifndef MF_ENGINE_ENGINE_INT_H
#define MF_ENGINE_ENGINE_INT_H

#include "runtime/runner.h"
#include "engine/sampler.h"
#include "engine/textout.h"
#include "minfer/engine.h"
#include "runtime/kv_pool.h"

typedef enum {
    SEQ_UNBORN = 0, // a sibling not forked yet
    SEQ_WAITING,    // queued (new, or preempted: its blocks freed, recomputed when admitted)
    SEQ_RUNNING,    // holds blocks, scheduled every step
    SEQ_DONE,       // finished or aborted
} seq_state;

struct eng_req;

typedef struct eng_seq {
    struct eng_req *req;
    int32_t index;             // within the request
    seq_state state;
    int32_t *toks;             // (n_prompt + max_gen) the prompt, then generated ids
    int64_t n_tok;             // tokens known (prompt + generated)
    int64_t n_computed;        // tokens whose KV is in its blocks
    int32_t *blocks;           // (table_width) its block table
    int32_t n_blocks;
    int32_t n_seen;            // leading full blocks already registered in (or found in) the prefix cache
    mf_rng rng;
    mf_textout text;
    size_t text_sent;          // bytes of text.text handed out in events
    float *lp;                 // (max_gen) chosen-token logprobs, or NULL
    int32_t *top_ids;          // (max_gen, top_n), or NULL
    float *top_lp;             // (max_gen, top_n), or NULL
    mf_finish_reason finish;
    struct eng_seq *prev, *next; // links of the queue it is in (waiting or running)
    // this step
    int64_t step_n;            // tokens scheduled
    int32_t step_row;          // its output row, or -1
} eng_seq;

typedef struct eng_req {
    uint64_t id;
    uint64_t order;            // arrival number
    int32_t n;                 // sequences
    bool forked;               // sequences 1 .. n-1 exist
    int32_t n_done;            // sequences finished
    int32_t *prompt;           // (n_prompt) owned
    int64_t n_prompt, max_gen; // max_gen: tokens each sequence may generate
    mf_sampler_params sampler;
    int32_t cand_k;            // > 0: sampling that the device's top-k candidates can decide
    bool greedy;               // the device argmax decides it
    bool need_logits;          // logprobs or sampling that needs every logit
    char **stop;               // (n_stop) owned copies
    size_t *stop_len;
    int32_t n_stop;
    int32_t *stop_ids;         // (n_stop_ids) owned
    int32_t n_stop_ids;
    bool ignore_eos, logprobs;
    int32_t top_n;
    int64_t n_cached;
    int32_t n_preempted;
    double t_queued, t_first, t_last;
    eng_seq *seqs;             // (n)
} eng_req;

typedef struct {
    eng_seq *head, *tail;
    int32_t n;
} seq_queue;

struct mf_engine {
    mf_runner r;
    mf_engine_opts o;
    mf_kv_pool pool;
    mf_sampler *sampler;       // scratch shared by every request (params switched per draw)
    float *row;                // (vocab) one row's logits (read back for a candidate draw)
    seq_queue waiting, running;
    int32_t reserved;          // sequences admitted requests will fork (count against max_seqs)
    eng_req **reqs;            // (n_reqs, cap_reqs) every request not released
    int32_t n_reqs, cap_reqs;
    uint64_t next_id;
    // this step
    eng_seq **sched;           // (max_seqs) scheduled sequences, in run order
    int32_t n_sched;
    int32_t n_preempted;
    int32_t *b_tokens, *b_cu, *b_pos0, *b_tables; // the run batch (max_tokens; max_seqs + 1; max_seqs; max_seqs x width)
    uint8_t *b_out;
    float *b_logits;           // (max_seqs, vocab)
    int32_t *b_ids;            // (max_seqs, MF_TOPK_MAX)
    float *b_vals;             // (max_seqs, MF_TOPK_MAX)
    float *b_stats;            // (max_seqs, 2)
    uint8_t *b_read;           // (max_seqs) candidate rows whose logits were read back into b_logits
    mf_engine_event *events;   // (max_seqs)
    int32_t n_events;
    mf_engine_stats st;
};

double mf_engine_now(void);

// An engine over any runner (tests: scripted fakes). The runner's sizes are
// the engine's: max_seqs, max_tokens (max_batched_tokens), the pool; o gives
// max_model_len (<= table_width x block_size) and no_prefix_cache.
mf_status mf_engine_create_runner(const mf_runner *r, const mf_engine_opts *o, mf_engine **out);

// ---- queues ----
void mf_seq_queue_push(seq_queue *q, eng_seq *s);  // at the tail
void mf_seq_queue_front(seq_queue *q, eng_seq *s); // at the head
void mf_seq_queue_remove(seq_queue *q, eng_seq *s);

// ---- sched.c ----
// Picks this step's sequences into e->sched (decodes first, then prompt
// chunks of running sequences, then admissions), giving each the blocks its
// tokens need (copy on write, preempting the newest running sequences when
// the pool is short). On failure (an allocation fault) nothing is scheduled.
mf_status mf_sched_step(mf_engine *e);
// Frees seq's blocks (last first: its leading blocks stay cached longest).
void mf_sched_release_blocks(mf_engine *e, eng_seq *s);
// Registers seq's newly full blocks in the prefix cache (swapping to an equal
// block registered already, so that the chain stays findable).
void mf_sched_register(mf_engine *e, eng_seq *s);

#endif // MF_ENGINE_ENGINE_INT_H
