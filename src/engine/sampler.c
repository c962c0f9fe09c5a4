// The sampler: logits -> one token id.
//
// Order (Hugging Face's default logits processors): repetition penalty ->
// temperature -> top-k -> top-p -> min-p -> draw. Candidates are ranked by
// (logit descending, id ascending), a strict total order, so that every
// choice at a tie is deterministic and greedy and top-k = 1 pick the same
// token. Cost per draw: O(vocab) expected (quickselect for top-k and top-p,
// no sort); no allocation (scratch sized at creation).
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
    float *work;   // (vocab) logits after the penalty
    float *w;      // (vocab) weights exp((logit - max) / T) of the candidates
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
        s->w = mf_malloc((size_t)vocab * sizeof *s->w);
        s->idx = mf_malloc((size_t)vocab * sizeof *s->idx);
        s->seen = mf_calloc((size_t)vocab, 1);
    }
    if (!s || !s->work || !s->w || !s->idx || !s->seen) {
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
    free(s->w);
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

// A heap over h[0, n) with the worst (under `better`) at the root.
static void sift_down(int32_t *h, int64_t n, int64_t i, const float *key) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && better(key, h[worst], h[l])) worst = l;
        if (r < n && better(key, h[worst], h[r])) worst = r;
        if (worst == i) return;
        swap_i32(&h[i], &h[worst]);
        i = worst;
    }
}

// The k best ids with a finite key into h[0, return value) (fewer when fewer
// are finite), in no particular order: one pass with a k-heap, O(V log k)
// worst case, about one comparison per id in practice.
static int64_t top_k_ids(const float *key, int64_t V, int64_t k, int32_t *h) {
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++) {
        if (!(key[i] > -INFINITY)) continue;
        if (n < k) {
            h[n++] = (int32_t)i;
            if (n == k)
                for (int64_t j = k / 2 - 1; j >= 0; j--) sift_down(h, k, j, key);
        } else if (key[i] > key[h[0]]) { // ids rise: an equal key loses the tie
            h[0] = (int32_t)i;
            sift_down(h, k, 0, key);
        }
    }
    return n;
}

// Top-p: rearranges idx[0, m) and returns the length of the shortest prefix,
// in rank order, whose weight reaches `target` (at least 1; all m when
// rounding keeps the total below it). The prefix's members come first, in no
// particular order. Expected O(m): each round keeps one side of a partition,
// like quickselect.
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

    const float inv_t = 1.0f / p->temperature;
    if (isinf(inv_t)) { // so cold that only the argmax is left
        *out_id = best;
        return MF_OK;
    }

    // Weights w = exp((x - xmax) / T): the best has w = 1 exactly, so the
    // probabilities are w / z and "p_i >= c * p_max" is "w_i >= c".
    // The candidates are idx[0, m), or every id while `all` (no list built).
    // Weights are computed only where needed: z (top-p's normaliser) needs
    // every candidate's; without top-k and top-p, min-p's survivors suffice.
    float *w = s->w;
    int32_t *idx = s->idx;
    int64_t m = 0;
    bool all = true, min_p_done = false;
    double z = 0.0;
    const bool top_p = p->top_p > 0.0f && p->top_p < 1.0f;
    if (p->top_k > 1) {
        m = top_k_ids(x, V, p->top_k, idx); // the logits' order is the scaled logits' order
        for (int64_t j = 0; j < m; j++) {
            w[idx[j]] = expf((x[idx[j]] - xmax) * inv_t);
            z += w[idx[j]];
        }
        all = false;
    } else if (p->min_p > 0.0f && !top_p) {
        // Min-p first in logit space (a bound a little looser than w >= min_p,
        // which is then tested exactly), so that exp runs on survivors only.
        const float lo = logf(p->min_p) - 1e-3f;
        for (int64_t i = 0; i < V; i++) {
            float sx = (x[i] - xmax) * inv_t;
            if (sx >= lo) {
                w[i] = expf(sx);
                if (w[i] >= p->min_p) idx[m++] = (int32_t)i;
            }
        }
        all = false;
        min_p_done = true;
    } else {
        for (int64_t i = 0; i < V; i++) { // contiguous: -inf logits give 0
            w[i] = expf((x[i] - xmax) * inv_t);
            z += w[i];
        }
    }

    // Min-p before top-p: both keep a prefix of the same ranking, so the result
    // is the shorter prefix in either order (HF runs top-p first); the cheap
    // filter first shrinks top-p's work. Top-p's probabilities stay normalised
    // over the top-k set (z), as when it runs first.
    if (p->min_p > 0.0f && !min_p_done) {
        int64_t kept = 0;
        if (all) {
            for (int64_t i = 0; i < V; i++)
                if (w[i] >= p->min_p) idx[kept++] = (int32_t)i;
        } else {
            for (int64_t j = 0; j < m; j++)
                if (w[idx[j]] >= p->min_p) idx[kept++] = idx[j];
        }
        m = kept; // >= 1: the best has w = 1
        all = false;
    }
    if (top_p) {
        const double target = (double)p->top_p * z;
        if (all) {
            // The ids with w >= 1e-3 rank before all others: when their mass
            // reaches the target the top-p set lies among them (usually the
            // case, and far fewer to select from); else take every id with w > 0.
            double mass = 0.0;
            for (int64_t i = 0; i < V; i++)
                if (w[i] >= 1e-3f) {
                    idx[m++] = (int32_t)i;
                    mass += w[i];
                }
            if (mass < target) {
                m = 0;
                for (int64_t i = 0; i < V; i++)
                    if (w[i] > 0.0f) idx[m++] = (int32_t)i;
            }
            all = false;
        }
        m = top_p_count(idx, m, w, target);
    }

    // Draw in proportion to w.
    double total = 0.0;
    if (all) {
        total = z;
    } else {
        for (int64_t j = 0; j < m; j++) total += w[idx[j]];
    }
    const double u = mf_rng_uniform(rng) * total;
    double acc = 0.0;
    int32_t pick = best;
    const int64_t n = all ? V : m;
    for (int64_t j = 0; j < n; j++) {
        int32_t id = all ? (int32_t)j : idx[j];
        if (w[id] <= 0.0f) continue;
        acc += w[id];
        pick = id; // rounding: the last with w > 0 when u is not reached
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
