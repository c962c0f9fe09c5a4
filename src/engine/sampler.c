// The sampler: logits -> one token id.
//
// Order (Hugging Face's default logits processors): repetition penalty ->
// temperature -> top-k -> top-p -> min-p -> draw. Candidates are ordered by
// (logit descending, id ascending), a strict total order, so that every
// choice at a tie is deterministic and greedy, top-k = 1 and top-p -> 0 all
// pick the same token. Cost per draw: O(vocab) expected (quickselect for
// top-k and top-p, no sort); no allocation (scratch sized at creation).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/sampler.h"

struct mf_sampler {
    mf_sampler_params p;
    int64_t vocab;
    mf_rng rng;
    float *work;   // (vocab) logits after the penalty; then the candidates' scaled logits / weights
    int32_t *idx;  // (vocab) candidate ids, best first after each selection
    uint8_t *seen; // (vocab) ids penalised in the current call; all 0 between calls
};

// ---- PRNG ---------------------------------------------------------------------------------

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void mf_rng_seed(mf_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x); // never all zero: splitmix64 is a bijection of distinct inputs
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t mf_rng_next(mf_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double mf_rng_uniform(mf_rng *r) { return (double)(mf_rng_next(r) >> 11) * 0x1.0p-53; }

// ---- parameters and lifetime -------------------------------------------------------------

mf_status mf_sampler_params_check(const mf_sampler_params *p) {
    if (!p) return mf_fail(MF_ERR_INVALID_ARG, "sampler: params is NULL");
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return mf_fail(MF_ERR_INVALID_ARG, "sampler: temperature %g not a finite value >= 0", (double)p->temperature);
    if (p->top_k < 0) return mf_fail(MF_ERR_INVALID_ARG, "sampler: top_k %d < 0", (int)p->top_k);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return mf_fail(MF_ERR_INVALID_ARG, "sampler: top_p %g not in [0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return mf_fail(MF_ERR_INVALID_ARG, "sampler: min_p %g not in [0, 1]", (double)p->min_p);
    if (!(p->repetition_penalty >= 0.0f) || isinf(p->repetition_penalty))
        return mf_fail(MF_ERR_INVALID_ARG, "sampler: repetition_penalty %g not a finite value >= 0",
                       (double)p->repetition_penalty);
    return MF_OK;
}

mf_status mf_sampler_create(const mf_sampler_params *p, int64_t vocab, mf_sampler **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "sampler_create: out is NULL");
    *out = NULL;
    MF_TRY(mf_sampler_params_check(p));
    // idx holds int32 ids; the bound also keeps the scratch sizes in size_t.
    if (vocab < 1 || vocab > INT32_MAX)
        return mf_fail(MF_ERR_INVALID_ARG, "sampler_create: vocab %lld not in [1, %d]", (long long)vocab, INT32_MAX);
    mf_sampler *s = mf_calloc(1, sizeof *s);
    if (s) {
        s->work = mf_malloc((size_t)vocab * sizeof *s->work);
        s->idx = mf_malloc((size_t)vocab * sizeof *s->idx);
        s->seen = mf_calloc((size_t)vocab, 1);
    }
    if (!s || !s->work || !s->idx || !s->seen) {
        mf_sampler_free(s);
        return mf_fail(MF_ERR_OOM, "sampler_create: out of memory for a vocab of %lld", (long long)vocab);
    }
    s->p = *p;
    s->vocab = vocab;
    mf_rng_seed(&s->rng, p->seed);
    *out = s;
    return MF_OK;
}

void mf_sampler_free(mf_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->idx);
    free(s->seen);
    free(s);
}

mf_status mf_sampler_reseed(mf_sampler *s, uint64_t seed) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "sampler_reseed: sampler is NULL");
    mf_rng_seed(&s->rng, seed);
    s->p.seed = seed;
    return MF_OK;
}

// ---- selection -------------------------------------------------------------------------------

// a ranks before b: larger key, then lower id (a strict total order on distinct ids).
static inline int better(const float *key, int32_t a, int32_t b) {
    return key[a] > key[b] || (key[a] == key[b] && a < b);
}

static inline void swap_i32(int32_t *x, int32_t *y) {
    int32_t t = *x;
    *x = *y;
    *y = t;
}

// Partitions idx[lo, hi) (hi - lo >= 2) around a median-of-three pivot:
// returns mid with idx[lo, mid) better than idx[mid] and idx(mid, hi) worse.
static int64_t partition(int32_t *idx, int64_t lo, int64_t hi, const float *key) {
    int64_t a = lo, b = lo + (hi - lo) / 2, c = hi - 1;
    // Median of idx[a], idx[b], idx[c] under `better`.
    int64_t m;
    if (better(key, idx[a], idx[b]))
        m = better(key, idx[b], idx[c]) ? b : (better(key, idx[a], idx[c]) ? c : a);
    else
        m = better(key, idx[a], idx[c]) ? a : (better(key, idx[b], idx[c]) ? c : b);
    swap_i32(&idx[m], &idx[hi - 1]);
    int32_t pivot = idx[hi - 1];
    int64_t store = lo;
    for (int64_t j = lo; j < hi - 1; j++)
        if (better(key, idx[j], pivot)) swap_i32(&idx[store++], &idx[j]);
    swap_i32(&idx[store], &idx[hi - 1]);
    return store;
}

// Rearranges idx[0, m) so that idx[0, k) are its k best (in no particular order).
static void select_top(int32_t *idx, int64_t m, int64_t k, const float *key) {
    int64_t lo = 0, hi = m;
    while (hi - lo > 1) {
        int64_t mid = partition(idx, lo, hi, key);
        if (mid == k || mid + 1 == k) return;
        if (mid > k) hi = mid;
        else lo = mid + 1;
    }
}

// Top-p: rearranges idx[0, m) and returns the length of the shortest prefix,
// in rank order, whose weight reaches `target` (all m when rounding keeps the
// total below it; at least 1). The prefix's members come first, in no particular order.
// Expected O(m): each round keeps one side of a partition, like quickselect.
static int64_t top_p_count(int32_t *idx, int64_t m, const float *w, double target) {
    int64_t lo = 0, hi = m; // idx[0, lo) are kept, with weight acc < target; the answer ends in [lo, hi)
    double acc = 0.0;
    while (hi - lo > 1) {
        int64_t mid = partition(idx, lo, hi, w);
        double left = 0.0;
        for (int64_t j = lo; j < mid; j++) left += w[idx[j]];
        if (acc + left >= target) {
            hi = mid; // mid > lo here, because acc < target
        } else if (acc + left + w[idx[mid]] >= target) {
            return mid + 1;
        } else {
            acc += left + w[idx[mid]];
            lo = mid + 1;
        }
    }
    // hi - lo is 1 (that last one is needed) or 0 (rounding: keep all that is left).
    return hi;
}

// ---- sampling --------------------------------------------------------------------------------

mf_status mf_sampler_sample_rng(mf_sampler *s, mf_rng *rng, const float *logits, const int32_t *context,
                                int64_t n_context, int32_t *out_id) {
    if (!s || !rng || !logits || !out_id)
        return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: NULL argument (sampler %p, logits %p, out_id %p)",
                       (void *)s, (const void *)logits, (void *)out_id);
    *out_id = -1;
    const mf_sampler_params *p = &s->p;
    const int64_t V = s->vocab;
    const bool penalty = p->repetition_penalty != 0.0f && p->repetition_penalty != 1.0f;
    if (penalty && (n_context < 0 || (n_context > 0 && !context)))
        return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: n_context %lld with context %p", (long long)n_context,
                       (const void *)context);
    float *x = s->work;
    for (int64_t i = 0; i < V; i++) {
        float v = logits[i];
        if (isnan(v) || v == INFINITY)
            return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: logit %lld is %s", (long long)i, isnan(v) ? "NaN" : "+inf");
        x[i] = v;
    }

    // Repetition penalty, once per distinct id (seen[] marks those done).
    if (penalty) {
        const float r = p->repetition_penalty;
        mf_status st = MF_OK;
        int64_t j = 0;
        for (; j < n_context; j++) {
            int32_t id = context[j];
            if (id < 0 || id >= V) {
                st = mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: context[%lld] = %d not in [0, %lld)", (long long)j,
                             (int)id, (long long)V);
                break;
            }
            if (s->seen[id]) continue;
            s->seen[id] = 1;
            x[id] = x[id] > 0.0f ? x[id] / r : x[id] * r;
        }
        for (int64_t i = 0; i < j; i++) s->seen[context[i]] = 0; // ids before j are all in range
        MF_TRY(st);
    }

    // The best id (lowest on ties): greedy's answer, and the temperature's reference.
    int32_t best = -1;
    float xmax = -INFINITY;
    for (int64_t i = 0; i < V; i++)
        if (x[i] > xmax) {
            xmax = x[i];
            best = (int32_t)i;
        }
    if (best < 0) return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: all %lld logits are -inf", (long long)V);
    if (p->temperature == 0.0f || p->top_k == 1) {
        *out_id = best;
        return MF_OK;
    }

    // Candidates: the ids with a finite logit, scaled by the temperature (max 0).
    int32_t *idx = s->idx;
    int64_t m = 0;
    const float inv_t = 1.0f / p->temperature;
    for (int64_t i = 0; i < V; i++)
        if (x[i] > -INFINITY) {
            x[i] = x[i] == xmax ? 0.0f : (x[i] - xmax) * inv_t; // no 0 * inf for a tiny temperature
            idx[m++] = (int32_t)i;
        }

    if (p->top_k > 0 && p->top_k < m) {
        select_top(idx, m, p->top_k, x);
        m = p->top_k;
    }

    // Weights exp(scaled logit): the best candidate has weight 1 exactly, so the
    // probabilities are w / z, and w also ranks the candidates (ties that
    // underflow to 0 cannot be drawn anyway).
    double z = 0.0;
    for (int64_t j = 0; j < m; j++) {
        float w = expf(x[idx[j]]);
        x[idx[j]] = w;
        z += w;
    }

    // Min-p before top-p: both keep a prefix of the same ranking, so the result
    // is the shorter prefix in either order; filtering the cheap one first
    // shrinks top-p's work. Top-p's probabilities stay normalised over the
    // top-k set (z), as when it runs first. Min-p: p_i < min_p * p_max, i.e.
    // w_i < min_p.
    if (p->min_p > 0.0f) {
        int64_t kept = 0;
        for (int64_t j = 0; j < m; j++)
            if (x[idx[j]] >= p->min_p) idx[kept++] = idx[j];
        m = kept; // >= 1: the best has w = 1
    }
    if (p->top_p > 0.0f && p->top_p < 1.0f) m = top_p_count(idx, m, x, (double)p->top_p * z);

    // Draw from the kept candidates in proportion to w.
    double total = 0.0;
    for (int64_t j = 0; j < m; j++) total += x[idx[j]];
    double u = mf_rng_uniform(rng) * total, acc = 0.0;
    int32_t pick = best;
    for (int64_t j = 0; j < m; j++) {
        float w = x[idx[j]];
        if (w <= 0.0f) continue;
        acc += w;
        pick = idx[j];
        if (u < acc) break;
    }
    *out_id = pick;
    return MF_OK;
}

mf_status mf_sampler_sample(mf_sampler *s, const float *logits, const int32_t *context, int64_t n_context,
                            int32_t *out_id) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: sampler is NULL");
    return mf_sampler_sample_rng(s, &s->rng, logits, context, n_context, out_id);
}
