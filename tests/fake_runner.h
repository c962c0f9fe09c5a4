// A scripted model behind the engine's runner interface (src/runtime/runner.h)
// for tests: its "KV cache" is the token id at every (block, row) of the
// pool, written through the block tables exactly as a real model writes K
// and V, and the logits of an output row are a hash of the row's whole
// context read back through the table. A wrong table, a missing copy on
// write, a prefix-cache hit on the wrong block or a recomputation that
// differs all change the tokens that follow, so comparing with a request run
// alone catches them. Faults: a failing run, NaN logits on a row.
#ifndef MF_TESTS_FAKE_RUNNER_H
#define MF_TESTS_FAKE_RUNNER_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"

typedef struct {
    mf_runner r;
    int32_t *kv;            // (n_blocks, block_size) token ids, -1: never written
    int64_t runs, fail_at;  // fail_at > 0: the fail_at-th run from now fails
    int64_t nan_at;         // > 0: that run's first output row gets a NaN logit
    bool broken;            // the engine broke the runner's contract
    char why[256];
    int64_t rows_total, seqs_max;
    float *last;            // (max_seqs, vocab) the last run's logits (read_logits)
    int32_t last_rows;
} fake_runner;

static inline uint64_t fake_mix(uint64_t z) {
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 29)) * 0x94D049BB133111EBull;
    return z ^ (z >> 32);
}

// Logits of a context hash: values in [-4, 4), EOS (id 0) rather unlikely.
static inline void fake_logits(uint64_t h, int64_t V, float *x) {
    for (int64_t v = 0; v < V; v++) {
        const uint64_t z = fake_mix(h ^ (uint64_t)(v + 1) * 0x9E3779B97F4A7C15ull);
        x[v] = (float)((double)(z & 0xFFFFFF) / (double)0x1000000 * 8.0 - 4.0);
    }
    x[0] -= 3.0f;
}

static inline void fake_break(fake_runner *f, const char *why) {
    if (!f->broken) snprintf(f->why, sizeof f->why, "%s", why);
    f->broken = true;
}

static inline mf_status fake_run(void *ctx, const mf_run_batch *b) {
    fake_runner *f = ctx;
    const mf_runner *r = &f->r;
    f->runs++;
    if (f->fail_at > 0 && --f->fail_at == 0) return MF_ERR_CUDA; // (no message needed)
    if (b->n_seqs < 1 || b->n_seqs > r->max_seqs || b->cu[0] != 0 || b->cu[b->n_seqs] > r->max_tokens) {
        fake_break(f, "batch size");
        return MF_ERR_INVALID_ARG;
    }
    if (b->n_seqs > f->seqs_max) f->seqs_max = b->n_seqs;
    int32_t rows = 0;
    const int32_t bs = r->block_size;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        const int32_t *tab = b->tables + (int64_t)i * r->table_width;
        const int64_t n = b->cu[i + 1] - b->cu[i], end = b->pos0[i] + n;
        if (n < 1 || b->pos0[i] < 0 || end > (int64_t)r->table_width * bs) {
            fake_break(f, "sequence lengths");
            return MF_ERR_INVALID_ARG;
        }
        for (int64_t j = 0; j < (end + bs - 1) / bs; j++)
            if (tab[j] < 0 || tab[j] >= r->n_blocks) {
                fake_break(f, "block id out of range");
                return MF_ERR_INVALID_ARG;
            }
        for (int64_t t = 0; t < n; t++) { // the new tokens into the cache
            const int64_t p = b->pos0[i] + t;
            const int32_t tok = b->tokens[b->cu[i] + t];
            if (tok < 0 || tok >= r->vocab) fake_break(f, "token id");
            f->kv[(int64_t)tab[p / bs] * bs + p % bs] = tok;
        }
        if (!b->out[i]) continue;
        uint64_t h = 0x12345;
        for (int64_t p = 0; p < end; p++) { // the whole context, read through the table
            const int32_t tok = f->kv[(int64_t)tab[p / bs] * bs + p % bs];
            if (tok < 0) fake_break(f, "read a cache row never written");
            h = fake_mix(h ^ (uint64_t)(uint32_t)tok) + (uint64_t)p;
        }
        float *x = f->last + (int64_t)rows * r->vocab;
        fake_logits(h, r->vocab, x);
        if (f->nan_at > 0 && f->runs == f->nan_at && rows == 0) x[3] = NAN;
        rows++;
    }
    if (rows != b->n_out) {
        fake_break(f, "n_out");
        return MF_ERR_INVALID_ARG;
    }
    f->last_rows = rows, f->rows_total += rows;
    const int64_t V = r->vocab;
    for (int32_t j = 0; j < rows; j++) {
        const float *x = f->last + (int64_t)j * V;
        if (b->kind == MF_RUN_LOGITS) {
            memcpy(b->logits + (int64_t)j * V, x, (size_t)V * sizeof *x);
        } else if (b->kind == MF_RUN_ARGMAX) { // as mf_argmax: first NaN wins
            int32_t best = -1;
            for (int64_t v = 0; v < V; v++) {
                if (isnan(x[v])) {
                    best = (int32_t)v;
                    break;
                }
                if (x[v] > -INFINITY && (best < 0 || x[v] > x[best])) best = (int32_t)v;
            }
            b->ids[j] = best, b->vals[j] = best >= 0 ? x[best] : -INFINITY;
        } else { // top-k: larger first, lower id on ties; stats (max, sum exp((x - max) scale))
            int32_t *ids = b->ids + (int64_t)j * b->k;
            float *vals = b->vals + (int64_t)j * b->k;
            for (int32_t c = 0; c < b->k; c++) ids[c] = -1, vals[c] = -INFINITY;
            float m = -INFINITY;
            bool nan = false;
            for (int64_t v = 0; v < V; v++) nan |= isnan(x[v]), m = x[v] > m ? x[v] : m;
            for (int64_t v = 0; v < V && !nan; v++) {
                int32_t c = b->k - 1;
                if (ids[c] >= 0 && !(x[v] > vals[c])) continue;
                while (c > 0 && (ids[c - 1] < 0 || x[v] > vals[c - 1])) ids[c] = ids[c - 1], vals[c] = vals[c - 1], c--;
                ids[c] = (int32_t)v, vals[c] = x[v];
            }
            double sum = 0;
            for (int64_t v = 0; v < V; v++) sum += expf((x[v] - m) * b->scale);
            b->stats[2 * j] = nan ? NAN : m, b->stats[2 * j + 1] = nan ? NAN : (float)sum;
            if (nan) {
                for (int64_t v = 0; v < V; v++)
                    if (isnan(x[v])) {
                        ids[0] = (int32_t)v, vals[0] = NAN;
                        break;
                    }
            }
        }
    }
    return MF_OK;
}

static inline mf_status fake_read_logits(void *ctx, int32_t row, float *logits) {
    fake_runner *f = ctx;
    if (row < 0 || row >= f->last_rows) {
        fake_break(f, "read_logits row");
        return MF_ERR_UNSUPPORTED;
    }
    memcpy(logits, f->last + (int64_t)row * f->r.vocab, (size_t)f->r.vocab * sizeof *logits);
    return MF_OK;
}

static inline mf_status fake_copy_block(void *ctx, int32_t src, int32_t dst) {
    fake_runner *f = ctx;
    const int32_t bs = f->r.block_size;
    if (src < 0 || src >= f->r.n_blocks || dst < 0 || dst >= f->r.n_blocks || src == dst) {
        fake_break(f, "copy_block ids");
        return MF_ERR_INVALID_ARG;
    }
    memcpy(f->kv + (int64_t)dst * bs, f->kv + (int64_t)src * bs, (size_t)bs * sizeof *f->kv);
    return MF_OK;
}

// A fake with vocab V, a pool of n_blocks x bs, up to max_seqs sequences and
// max_tokens rows a step, sequences of up to width blocks.
static inline void fake_init(fake_runner *f, int64_t V, int32_t n_blocks, int32_t bs, int32_t max_seqs,
                             int64_t max_tokens, int32_t width) {
    memset(f, 0, sizeof *f);
    f->r = (mf_runner){.ctx = f, .run = fake_run, .read_logits = fake_read_logits, .copy_block = fake_copy_block,
                       .vocab = V, .n_blocks = n_blocks, .block_size = bs, .table_width = width,
                       .max_seqs = max_seqs, .max_tokens = max_tokens, .n_eos = 1};
    f->r.eos_ids[0] = 0;
    f->kv = malloc((size_t)n_blocks * (size_t)bs * sizeof *f->kv);
    for (int64_t i = 0; i < (int64_t)n_blocks * bs; i++) f->kv[i] = -1;
    f->last = malloc((size_t)max_seqs * (size_t)V * sizeof *f->last);
}

static inline void fake_free(fake_runner *f) {
    free(f->kv);
    free(f->last);
}

#endif // MF_TESTS_FAKE_RUNNER_H
