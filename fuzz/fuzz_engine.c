// libFuzzer target: random add / step / abort / release sequences on the
// serving engine over a fake runner (tests/fake_runner.h), a small pool so
// that preemption, prefix hits and copy on write all happen. After every
// operation the block pool's invariant holds and the blocks held are exactly
// the running sequences' (shared ones counted once per holder); at the end
// every request finishes or was aborted, and the pool is whole again.
#include <stdint.h>
#include <stdlib.h>

#include "../tests/fake_runner.h"

#define REQUIRE(c)         \
    do {                   \
        if (!(c)) abort(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const mf_engine *e) {
    REQUIRE(mf_kv_pool_check(&e->pool) == MF_OK);
    int32_t *refs = calloc((size_t)e->pool.n_blocks, sizeof *refs);
    for (int32_t i = 0; i < e->n_reqs; i++)
        for (int32_t j = 0; j < e->reqs[i]->n; j++) {
            const eng_seq *s = &e->reqs[i]->seqs[j];
            REQUIRE(s->state == SEQ_RUNNING || s->n_blocks == 0);
            REQUIRE(s->n_computed <= s->n_tok && s->n_blocks <= e->r.table_width);
            for (int32_t b = 0; b < s->n_blocks; b++) refs[s->blocks[b]]++;
        }
    for (int32_t b = 0; b < e->pool.n_blocks; b++) REQUIRE(refs[b] == e->pool.ref[b]);
    free(refs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    fake_runner f;
    fake_init(&f, 32, 6 + data[0] % 20, 8, 1 + data[1] % 5, 24 + data[1] % 40, 8);
    mf_engine_opts o = {.max_model_len = 64, .no_prefix_cache = data[0] & 0x80};
    mf_engine *e = NULL;
    if (mf_engine_create_runner(&f.r, &o, &e) != MF_OK) {
        fake_free(&f);
        return 0;
    }
    uint64_t ids[64];
    int n = 0;
    int32_t prompt[64];
    for (size_t i = 2; i + 2 < size; i += 3) {
        const uint8_t op = data[i] % 8, a = data[i + 1], b = data[i + 2];
        if (op <= 2 && n < 64) { // add
            const int64_t len = 1 + a % 40;
            for (int64_t k = 0; k < len; k++) prompt[k] = 1 + (int32_t)((a * 7 + k * (b % 3)) % 31); // shared prefixes
            mf_request_params p = {.prompt = prompt, .n_prompt = len, .max_tokens = 1 + b % 30, .n = 1 + (b >> 6),
                                   .sampler = {.temperature = (b & 1) ? 0.8f : 0.0f, .seed = b}};
            uint64_t id;
            if (mf_engine_add_request(e, &p, &id) == MF_OK) ids[n++] = id;
        } else if (op <= 5) { // step
            mf_engine_step_result r;
            REQUIRE(mf_engine_step(e, &r) == MF_OK);
            REQUIRE(r.n_events <= e->r.max_seqs);
        } else if (op == 6 && n > 0) {
            (void)mf_engine_abort(e, ids[a % n]);
        } else if (op == 7 && n > 0) {
            (void)mf_engine_release(e, ids[a % n]);
        }
        check(e);
        REQUIRE(!f.broken);
    }
    for (int step = 0; step < 5000 && (e->running.n || e->waiting.n); step++) {
        mf_engine_step_result r;
        REQUIRE(mf_engine_step(e, &r) == MF_OK);
        check(e);
    }
    REQUIRE(e->running.n == 0 && e->waiting.n == 0);
    REQUIRE(e->pool.n_free + e->pool.n_lru == e->pool.n_blocks);
    REQUIRE(!f.broken);
    mf_engine_free(e);
    fake_free(&f);
    return 0;
}
