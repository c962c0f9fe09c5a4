// The sampler: logits -> one token id.
//
// Order (Hugging Face's default logits processors): repetition penalty ->
// temperature -> top-k -> top-p -> min-p -> draw. Candidates are ranked by
// (logit descending, id ascending), a strict total order, so that every
// choice at a tie is deterministic and greedy and top-k = 1 pick the same
// token. With top-k, top-p or min-p the kept set is drawn from in that rank
// order, by one function (draw_ranked) that the host path and the device's
// candidates (mf_topk) share: the same set gives the same token for a seed.
// Cost per draw: O(vocab) expected (heap for top-k, quickselect for top-p)
// plus O(m log m) to rank the m kept ids; no allocation (scratch sized at
// creation).
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

void mf_sampler_set_params(mf_sampler *s, const mf_sampler_params *p) { s->p = *p; }

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

// A heap sort of idx[0, m) into rank order, best first (O(m log m), in place).
static void sort_ranked(int32_t *idx, int64_t m, const float *key) {
    for (int64_t j = m / 2 - 1; j >= 0; j--) sift_down(idx, m, j, key);
    for (int64_t e = m - 1; e > 0; e--) { // the worst of idx[0, e] goes to e
        swap_i32(&idx[0], &idx[e]);
        sift_down(idx, e, 0, key);
    }
}

// idx[0, c) is a prefix picked by weight; extends it with every idx[c, m)
// that ranks (by logit) before its worst member, so that the result is a
// prefix of idx[0, m) in rank order holding at least that weight. Returns
// the new length.
static int64_t close_ranked(int32_t *idx, int64_t c, int64_t m, const float *key) {
    int32_t worst = idx[0];
    for (int64_t j = 1; j < c; j++)
        if (better(key, worst, idx[j])) worst = idx[j];
    for (int64_t j = c; j < m; j++)
        if (better(key, idx[j], worst)) swap_i32(&idx[c++], &idx[j]);
    return c;
}

// The device sum of weights (mf_topk's stats) against the host's z: each
// term differs by the two expf's errors (CUDA <= 2 ulp, glibc < 1 ulp: 3 x
// 2^-23 relative), the double sums by rounding order (~1e-16 per term) and
// the f32 result by 2^-24. Ten times the total, relative to z.
#define CAND_Z_REL 4e-6
// Top-p's target is raised by this when the host picks the superset it then
// ranks: above the relative rounding of a double sum of 2^31 terms (2^-22).
#define TOP_P_SLACK 1e-6
// The ids with w >= 1e-3 (scaled logit >= ln 1e-3) usually hold the top-p set.
#define TOP_P_POOL_LOG (-6.9077553f)

// The draw from a ranked list: idx[0, m) best first, key (the logits) and w
// indexed by id, w written here. Both the host path (which ranks what it
// selected) and the device candidates end here: the same list, the same
// arithmetic in the same order, the same token.
//   z_lo, z_hi: top-p's normaliser without top-k (the weight sum over the
//               whole vocabulary): equal when known exactly (host), else
//               bounds (the device's sum); unused with top-k (z is the
//               list's own sum then)
//   complete:   the list holds every id that min-p and top-p could keep
// MF_ERR_UNSUPPORTED (no message, rng untouched) when the list cannot decide
// which ids top-p keeps: the caller draws from the logits instead.
static mf_status draw_ranked(const mf_sampler_params *p, mf_rng *rng, int32_t *idx, int64_t m, const float *key,
                             float *w, float xmax, float inv_t, double z_lo, double z_hi, bool complete,
                             int32_t *out_id) {
    const bool top_p = p->top_p > 0.0f && p->top_p < 1.0f;
    for (int64_t j = 0; j < m; j++) w[idx[j]] = expf((key[idx[j]] - xmax) * inv_t);
    if (p->top_k > 1) {
        double z = 0.0;
        for (int64_t j = 0; j < m; j++) z += w[idx[j]];
        z_lo = z_hi = z;
    }
    // Min-p before top-p: both keep a prefix of the same ranking, so the result
    // is the shorter prefix in either order (HF runs top-p first). Top-p's
    // probabilities stay normalised over the top-k set, or the vocabulary.
    // Min-p alone first bounds the scaled logit (as the host's pre-filter does).
    if (p->min_p > 0.0f) {
        const bool bounded = p->top_k <= 1 && !top_p;
        const float lo = logf(p->min_p) - 1e-3f;
        int64_t kept = 0;
        for (int64_t j = 0; j < m; j++) {
            const int32_t id = idx[j];
            if ((!bounded || (key[id] - xmax) * inv_t >= lo) && w[id] >= p->min_p) idx[kept++] = id;
        }
        m = kept; // >= 1: the best has w = 1
    }
    if (top_p) {
        // The shortest prefix whose weight reaches top_p * z (at least 1; all
        // when rounding keeps the total below it). With bounds on z the cut
        // must be the same for every z between them.
        const double t_lo = (double)p->top_p * z_lo, t_hi = (double)p->top_p * z_hi;
        double cum = 0.0, prev = 0.0;
        int64_t c = -1;
        for (int64_t j = 0; j < m; j++) {
            prev = cum;
            cum += w[idx[j]];
            if (cum >= t_hi) {
                c = j + 1;
                break;
            }
        }
        if (c < 0) {
            if (!complete || cum >= t_lo) return MF_ERR_UNSUPPORTED;
        } else {
            if (prev >= t_lo) return MF_ERR_UNSUPPORTED; // an earlier cut for some z in the bounds
            m = c;
        }
    }

    // Draw in proportion to w, in rank order.
    double total = 0.0;
    for (int64_t j = 0; j < m; j++) total += w[idx[j]];
    const double u = mf_rng_uniform(rng) * total;
    double acc = 0.0;
    int32_t pick = idx[0];
    for (int64_t j = 0; j < m; j++) {
        const int32_t id = idx[j];
        if (w[id] <= 0.0f) continue;
        acc += w[id];
        pick = id; // rounding: the last with w > 0 when u is not reached
        if (u < acc) break;
    }
    *out_id = pick;
    return MF_OK;
}

static bool penalty_on(const mf_sampler_params *p) {
    return p->repetition_penalty != 0.0f && p->repetition_penalty != 1.0f;
}

mf_status mf_sampler_sample_rng(mf_sampler *s, mf_rng *rng, const float *logits, const int32_t *context,
                                int64_t n_context, int32_t *out_id) {
    if (!s || !rng || !logits || !out_id)
        return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: NULL argument (sampler %p, logits %p, out_id %p)",
                       (void *)s, (const void *)logits, (void *)out_id);
    *out_id = -1;
    const mf_sampler_params *p = &s->p;
    const int64_t V = s->vocab;
    const bool penalty = penalty_on(p);
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
    // probabilities are w / z and "p_i >= c * p_max" is "w_i >= c". Each
    // filter's set is selected here in O(V) (heap, quickselect), then ranked
    // (O(m log m) in its size m) and drawn from by draw_ranked, the code the
    // device candidates use too. Weights are computed only where needed.
    float *w = s->w;
    int32_t *idx = s->idx;
    int64_t m = 0;
    double z = 0.0;
    const bool top_p = p->top_p > 0.0f && p->top_p < 1.0f;
    if (p->top_k > 1) {
        m = top_k_ids(x, V, p->top_k, idx); // the logits' order is the scaled logits' order
    } else if (top_p) {
        for (int64_t i = 0; i < V; i++) { // -inf logits give 0
            w[i] = expf((x[i] - xmax) * inv_t);
            z += w[i];
        }
        // A superset of the top-p prefix: a prefix by weight that reaches a
        // slightly higher target, closed under the logit ranking; draw_ranked
        // then finds the exact cut in rank order.
        const double target = (double)p->top_p * z * (1.0 + TOP_P_SLACK);
        if (p->min_p > 0.0f) {
            for (int64_t i = 0; i < V; i++)
                if (w[i] >= p->min_p) idx[m++] = (int32_t)i;
        } else {
            // The ids with a scaled logit >= ln 1e-3 (a rank prefix) usually
            // hold the target, and far fewer to select from; else every id.
            double mass = 0.0;
            for (int64_t i = 0; i < V; i++)
                if ((x[i] - xmax) * inv_t >= TOP_P_POOL_LOG) {
                    idx[m++] = (int32_t)i;
                    mass += w[i];
                }
            if (mass < target) {
                m = 0;
                for (int64_t i = 0; i < V; i++)
                    if (x[i] > -INFINITY) idx[m++] = (int32_t)i;
            }
        }
        const int64_t c = top_p_count(idx, m, w, target);
        m = close_ranked(idx, c, m, x);
    } else if (p->min_p > 0.0f) {
        // Min-p in logit space first (a bound a little looser than w >= min_p,
        // which draw_ranked then tests exactly), so that exp runs on survivors only.
        const float lo = logf(p->min_p) - 1e-3f;
        for (int64_t i = 0; i < V; i++)
            if ((x[i] - xmax) * inv_t >= lo) idx[m++] = (int32_t)i;
    } else {
        // Temperature alone: every id, in id order.
        for (int64_t i = 0; i < V; i++) {
            w[i] = expf((x[i] - xmax) * inv_t);
            z += w[i];
        }
        const double u = mf_rng_uniform(rng) * z;
        double acc = 0.0;
        int32_t pick = best;
        for (int64_t i = 0; i < V; i++) {
            if (w[i] <= 0.0f) continue;
            acc += w[i];
            pick = (int32_t)i; // rounding: the last with w > 0 when u is not reached
            if (u < acc) break;
        }
        *out_id = pick;
        return MF_OK;
    }
    sort_ranked(idx, m, x);
    return draw_ranked(p, rng, idx, m, x, w, xmax, inv_t, z, z, true, out_id);
}

// ---- device candidates -------------------------------------------------------------------

int32_t mf_sampler_candidates_k(const mf_sampler_params *p, int64_t vocab) {
    if (!p || vocab < 1 || penalty_on(p)) return 0; // the penalty changes logits the device never sees
    if (p->temperature == 0.0f || p->top_k == 1 || isinf(1.0f / p->temperature)) return 0; // greedy: argmax
    const bool top_p = p->top_p > 0.0f && p->top_p < 1.0f;
    int64_t k;
    if (p->top_k > 1) k = p->top_k;
    else if (top_p || p->min_p > 0.0f) k = MF_TOPK_MAX;
    else return 0; // temperature alone draws over every id
    if (k > MF_TOPK_MAX) return 0;
    return (int32_t)(k < vocab ? k : vocab);
}

float mf_sampler_candidates_scale(const mf_sampler_params *p) { return 1.0f / p->temperature; }

mf_status mf_sampler_sample_candidates(mf_sampler *s, mf_rng *rng, const int32_t *ids, const float *vals, int32_t k,
                                       const float *stats, int32_t *out_id) {
    if (!s || !rng || !ids || !vals || !stats || !out_id)
        return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample_candidates: NULL argument");
    *out_id = -1;
    const mf_sampler_params *p = &s->p;
    const int64_t V = s->vocab;
    if (k < 1 || k > MF_TOPK_MAX || k > V)
        return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample_candidates: k %d not in [1, min(%d, vocab %lld)]", (int)k,
                       MF_TOPK_MAX, (long long)V);
    if (penalty_on(p)) return MF_ERR_UNSUPPORTED;
    // The host sampler's refusals, with its messages.
    if (isnan(stats[0])) {
        if (ids[0] >= 0 && ids[0] < V && (isnan(vals[0]) || vals[0] == INFINITY))
            return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: logit %lld is %s", (long long)ids[0],
                           isnan(vals[0]) ? "NaN" : "+inf");
        return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample_candidates: a poisoned row names id %d (value %g)",
                       (int)ids[0], (double)vals[0]);
    }
    if (ids[0] < 0) return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: all %lld logits are -inf", (long long)V);
    // The list: ids in range, in rank order (what mf_topk promises; checked
    // because a wrong list would silently draw a wrong token).
    int64_t m = 0;
    while (m < k && ids[m] >= 0) {
        const int32_t id = ids[m];
        if (id >= V || !(vals[m] > -INFINITY && vals[m] < INFINITY))
            return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample_candidates: candidate %lld is (%d, %g)", (long long)m,
                           (int)id, (double)vals[m]);
        if (m > 0 && !(vals[m - 1] > vals[m] || (vals[m - 1] == vals[m] && ids[m - 1] < id)))
            return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample_candidates: candidates %lld and %lld out of rank order",
                           (long long)m - 1, (long long)m);
        s->work[id] = vals[m];
        s->idx[m] = id;
        m++;
    }
    const float xmax = vals[0];
    if (p->temperature == 0.0f || p->top_k == 1) {
        *out_id = ids[0];
        return MF_OK;
    }
    const float inv_t = 1.0f / p->temperature;
    if (isinf(inv_t)) {
        *out_id = ids[0];
        return MF_OK;
    }
    const bool top_p = p->top_p > 0.0f && p->top_p < 1.0f;
    bool complete = true;
    double z_lo = 0.0, z_hi = 0.0;
    if (p->top_k > 1) {
        // The top-k set, unless k ids came and more were asked for than that.
        if (m == k && k < p->top_k && k < V) return MF_ERR_UNSUPPORTED;
        if (m > p->top_k) m = p->top_k;
    } else {
        if (!top_p && !(p->min_p > 0.0f)) return MF_ERR_UNSUPPORTED; // temperature alone needs every id
        complete = m < k; // fewer than k finite logits: all of them came
        // Min-p keeps nothing below the last candidate when its scaled logit
        // is under min-p's bound (w < min_p there and beyond).
        if (!complete && p->min_p > 0.0f && (vals[m - 1] - xmax) * inv_t < logf(p->min_p) - 1e-3f) complete = true;
        if (!complete && !top_p) return MF_ERR_UNSUPPORTED; // min-p alone keeps ids past the candidates
        if (top_p) {
            const double z = stats[1];
            if (!(z >= 1.0 - CAND_Z_REL) || isinf(z)) return MF_ERR_UNSUPPORTED; // the best alone has w = 1
            z_lo = z * (1.0 - CAND_Z_REL), z_hi = z * (1.0 + CAND_Z_REL);
        }
    }
    return draw_ranked(p, rng, s->idx, m, s->work, s->w, xmax, inv_t, z_lo, z_hi, complete, out_id);
}

mf_status mf_sampler_sample(mf_sampler *s, const float *logits, const int32_t *context, int64_t n_context,
                            int32_t *out_id) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: sampler is NULL");
    return mf_sampler_sample_rng(s, &s->rng, logits, context, n_context, out_id);
}
