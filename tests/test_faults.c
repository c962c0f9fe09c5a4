// Faults: allocations that cannot succeed, and allocations made to fail in
// the middle of a session's life, on every backend there is (CUDA cases
// print "skipped: no CUDA device" without one).
//
//   huge requests     mf_backend_alloc of SIZE_MAX, PTRDIFF_MAX + 1 and 1 PB,
//                     mf_arena_init of SIZE_MAX, and a session whose KV cache
//                     (64 PB) is bigger than any host or card: MF_ERR_OOM with
//                     a message naming the byte count, nothing leaks, and the
//                     backend keeps working (alloc, memset, copy back).
//   arena             an injected failure of mf_arena_alloc on a live arena:
//                     MF_ERR_OOM, the arena unchanged, the next carve works.
//   mid-session       with session A holding a prefilled sequence, every
//                     allocation of a second session's create made to fail in
//                     turn (KV cache, scratch arena, host buffers), then every
//                     allocation of mf_generate on A: each is MF_ERR_OOM with a
//                     message, and afterwards A continues exactly where it was
//                     (the next decode step's logits equal the reference) and a
//                     new session gives the reference logits and tokens.
//   load              every allocation of a GPT-2 checkpoint's load made to
//                     fail in turn: MF_ERR_OOM, no model, then the load works.
//
//   test_faults <tests/fixtures/models>
//
// Prints one line per check, "bad-input cases: N" (the huge requests),
// "fault-injection points: N", and last "N passed, N failed, N skipped".
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/backend.h"
#include "minfer/generate.h"
#include "minfer/minfer.h"
#include "minfer/model.h"

// The huge requests must come back as NULL under AddressSanitizer too, as
// they do from glibc, instead of ASan's "allocation-size-too-big" report.
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static int n_pass, n_fail, n_skip, n_bad_inputs, n_fault_points;
static const char *fixdir;

static void report(bool ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(bool ok, const char *name, const char *fmt, ...) {
    char detail[768] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name, detail[0] ? ": " : "", detail);
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}

// ---- huge requests ------------------------------------------------------------------------------

// mf_backend_alloc(bytes) must be MF_ERR_OOM naming "<bytes> bytes" and leave *out NULL.
static void huge_alloc(mf_backend *be, const char *bname, size_t bytes, const char *what) {
    char name[160], needle[64];
    snprintf(name, sizeof name, "[%s] backend_alloc(%s)", bname, what);
    snprintf(needle, sizeof needle, "%zu bytes", bytes);
    void *p = (void *)&p;
    mf_clear_error();
    const mf_status st = mf_backend_alloc(be, bytes, &p);
    n_bad_inputs++;
    report(st == MF_ERR_OOM && p == NULL && strstr(mf_last_error(), needle), name, "%s, out %s: \"%s\" (want OOM naming \"%s\")",
           mf_status_str(st), p ? "not NULL" : "NULL", mf_last_error(), needle);
    if (st == MF_OK) mf_backend_dealloc(be, p);
}

// The backend still works: 1 MB allocated, set, copied back and checked.
static void still_works(mf_backend *be, const char *bname, const char *after) {
    char name[160];
    snprintf(name, sizeof name, "[%s] backend works after %s", bname, after);
    const size_t n = (size_t)1 << 20;
    unsigned char *host = malloc(n);
    void *d = NULL;
    mf_status st = host ? mf_backend_alloc(be, n, &d) : MF_ERR_OOM;
    if (st == MF_OK) st = mf_backend_memset(be, d, 0x5A, n);
    if (host) memset(host, 0, n);
    if (st == MF_OK) st = mf_backend_copy(be, host, d, n, MF_COPY_D2H);
    if (st == MF_OK) st = mf_backend_sync(be);
    size_t wrong = 0;
    for (size_t i = 0; st == MF_OK && i < n; i++) wrong += host[i] != 0x5A;
    report(st == MF_OK && wrong == 0, name, "%s%s%s, %zu wrong bytes", mf_status_str(st), st ? ": " : "",
           st ? mf_last_error() : "", wrong);
    mf_backend_dealloc(be, d);
    free(host);
}

static void test_huge(mf_backend *be, const char *bname) {
    huge_alloc(be, bname, SIZE_MAX, "SIZE_MAX");
    huge_alloc(be, bname, (size_t)PTRDIFF_MAX + 1, "PTRDIFF_MAX + 1");
    huge_alloc(be, bname, (size_t)1 << 50, "1 PB");
    still_works(be, bname, "the huge allocations");

    char name[160];
    snprintf(name, sizeof name, "[%s] arena_init(SIZE_MAX)", bname);
    mf_arena *a = (mf_arena *)&a;
    const mf_status st = mf_arena_init(be, SIZE_MAX, &a);
    n_bad_inputs++;
    report(st == MF_ERR_OOM && a == NULL && strstr(mf_last_error(), "18446744073709551615 bytes"), name, "%s, \"%s\"",
           mf_status_str(st), mf_last_error());
    if (st == MF_OK) mf_arena_free(a);
}

// ---- arena -----------------------------------------------------------------------------------------

static void test_arena_fault(mf_backend *be, const char *bname) {
    char name[160];
    snprintf(name, sizeof name, "[%s] arena_alloc with an injected failure", bname);
    mf_arena *a = NULL;
    void *p = NULL, *q = NULL;
    mf_status st = mf_arena_init(be, (size_t)1 << 20, &a);
    if (st == MF_OK) st = mf_arena_alloc(a, 1000, &p);
    const size_t used = mf_arena_used(a);
    if (st != MF_OK) {
        report(false, name, "setup: %s", mf_last_error());
        mf_arena_free(a);
        return;
    }
    mf_fault_alloc_fail_after(1);
    const mf_status inj = mf_arena_alloc(a, 1000, &q);
    mf_fault_alloc_fail_after(0);
    n_fault_points++;
    const bool unchanged = mf_arena_used(a) == used && q == NULL;
    st = mf_arena_alloc(a, 1000, &q);
    report(inj == MF_ERR_OOM && unchanged && st == MF_OK && q != NULL && q != p, name,
           "injected: %s (arena %s), next carve: %s", mf_status_str(inj), unchanged ? "unchanged" : "CHANGED",
           mf_status_str(st));
    mf_arena_free(a);
}

// ---- mid-session -------------------------------------------------------------------------------------

enum { kPrompt = 8 };

typedef struct {
    mf_model *m;
    int32_t vocab;
    int32_t tok[kPrompt + 1]; // the prompt, then the decode step's token
    float *pre, *dec;         // (vocab) reference logits after the prompt and after the step
    float *buf;               // (vocab)
    double tol;               // max |diff| / max |ref| accepted between two runs of the same input
} ref_run;

static mf_status prefill(mf_session *s, ref_run *r, float *out) {
    const int32_t slot = 0;
    const int64_t off[2] = {0, kPrompt};
    mf_status st = mf_session_reset(s, 0);
    if (st == MF_OK) st = mf_session_forward(s, 1, &slot, r->tok, off, MF_LOGITS_LAST, out);
    return st;
}

static mf_status decode(mf_session *s, ref_run *r, float *out) {
    const int32_t slot = 0;
    const int64_t off[2] = {0, 1};
    return mf_session_forward(s, 1, &slot, r->tok + kPrompt, off, MF_LOGITS_LAST, out);
}

// max |a - b| / max |b|
static double rel_diff(const float *a, const float *b, int32_t n) {
    double d = 0, mx = 0;
    for (int32_t i = 0; i < n; i++) {
        const double e = a[i] > b[i] ? (double)a[i] - b[i] : (double)b[i] - a[i];
        if (e > d || e != e) d = e != e ? 1e30 : e;
        const double v = b[i] < 0 ? -(double)b[i] : b[i];
        if (v > mx) mx = v;
    }
    return mx > 0 ? d / mx : d;
}

static mf_status greedy(mf_session *s, mf_generate_result *r) {
    const char *texts[1] = {"Hello there"};
    mf_prompts pr = {.n = 1, .texts = texts};
    mf_generate_params p = mf_generate_params_default();
    p.max_new_tokens = 8;
    p.ignore_eos = true;
    return mf_generate(s, &pr, &p, r);
}

static bool same_tokens(const mf_generate_result *a, const mf_generate_result *b) {
    return a->n == 1 && b->n == 1 && a->seqs[0].n_tokens == b->seqs[0].n_tokens &&
           !memcmp(a->seqs[0].tokens, b->seqs[0].tokens, (size_t)a->seqs[0].n_tokens * sizeof(int32_t));
}

static void test_mid_session(mf_backend *be, const char *bname) {
    char dir[700], name[200];
    snprintf(dir, sizeof dir, "%s/llama-tiny", fixdir);
    ref_run r = {.tol = mf_backend_device(be) == MF_DEVICE_CUDA ? 1e-3 : 1e-5};
    const mf_model_opts mo = {.dtype = MF_DTYPE_F32};
    mf_session *a = NULL, *b = NULL;
    mf_generate_result ref_gen = {0}, g = {0};
    snprintf(name, sizeof name, "[%s] mid-session faults: setup (llama-tiny f32, references)", bname);
    mf_status st = mf_model_load(dir, be, &mo, &r.m);
    mf_model_info info;
    if (st == MF_OK) st = mf_model_get_info(r.m, &info);
    if (st != MF_OK) {
        report(false, name, "%s", mf_last_error());
        mf_model_free(r.m);
        return;
    }
    r.vocab = info.vocab;
    for (int i = 0; i <= kPrompt; i++) r.tok[i] = (int32_t)((37 * i + 11) % r.vocab);
    r.pre = malloc((size_t)r.vocab * sizeof(float));
    r.dec = malloc((size_t)r.vocab * sizeof(float));
    r.buf = malloc((size_t)r.vocab * sizeof(float));
    if (!r.pre || !r.dec || !r.buf) {
        report(false, name, "out of host memory");
        goto out;
    }
    // References on session A; A keeps the prompt in slot 0 for what follows.
    st = mf_session_create(r.m, 2, 64, &a);
    if (st == MF_OK) st = prefill(a, &r, r.pre);
    if (st == MF_OK) st = decode(a, &r, r.dec);
    if (st == MF_OK) st = greedy(a, &ref_gen);
    if (st == MF_OK) st = prefill(a, &r, r.buf); // slot 0: the prompt again (greedy used it)
    double again = 1e30, other = 0;
    if (st == MF_OK) again = rel_diff(r.buf, r.pre, r.vocab);
    // Can the comparison fail? A different last prompt token must move the logits far beyond tol.
    if (st == MF_OK) {
        const int32_t slot = 1;
        const int64_t off[2] = {0, kPrompt};
        int32_t t2[kPrompt];
        memcpy(t2, r.tok, sizeof t2);
        t2[kPrompt - 1] = (t2[kPrompt - 1] + 1) % r.vocab;
        st = mf_session_forward(a, 1, &slot, t2, off, MF_LOGITS_LAST, r.buf);
        if (st == MF_OK) other = rel_diff(r.buf, r.pre, r.vocab);
    }
    report(st == MF_OK && again <= r.tol && other > 100 * r.tol, name,
           "%s%s; rerun diff %.2e (tol %.0e), another prompt differs by %.2e (must exceed 100 x tol)", mf_status_str(st),
           st ? mf_last_error() : "", again, r.tol, other);
    if (st != MF_OK || again > r.tol) goto out;

    // 1. Every allocation of a second session's create fails in turn; A is live throughout.
    int k, bad = 0, n_oom = 0;
    char first_bad[300] = "";
    for (k = 1; k < 500; k++) {
        b = (mf_session *)&b;
        mf_fault_alloc_fail_after(k);
        st = mf_session_create(r.m, 4, 96, &b);
        mf_fault_alloc_fail_after(0);
        if (st == MF_OK) break;
        if (st == MF_ERR_OOM && b == NULL && mf_last_error()[0]) {
            n_oom++;
        } else if (!bad++) {
            snprintf(first_bad, sizeof first_bad, "allocation %d: %s (session %s): %s", k, mf_status_str(st),
                     b ? "not NULL" : "NULL", mf_last_error());
        }
    }
    n_fault_points += n_oom;
    snprintf(name, sizeof name, "[%s] session_create with each allocation failing while another session is live", bname);
    report(bad == 0 && n_oom >= 3 && st == MF_OK, name, "%d injected failures, all MF_ERR_OOM with a message%s%s", n_oom,
           bad ? "; first other: " : "", first_bad);
    // A goes on from its prompt as if nothing had happened; the new session B matches.
    snprintf(name, sizeof name, "[%s] after the failed creates: session A's next step, and a new session", bname);
    mf_status sa = decode(a, &r, r.buf);
    const double da = sa == MF_OK ? rel_diff(r.buf, r.dec, r.vocab) : 1e30;
    mf_status sb = st == MF_OK ? prefill(b, &r, r.buf) : st;
    const double db_pre = sb == MF_OK ? rel_diff(r.buf, r.pre, r.vocab) : 1e30;
    if (sb == MF_OK) sb = decode(b, &r, r.buf);
    const double db_dec = sb == MF_OK ? rel_diff(r.buf, r.dec, r.vocab) : 1e30;
    report(sa == MF_OK && sb == MF_OK && da <= r.tol && db_pre <= r.tol && db_dec <= r.tol, name,
           "A step: %s diff %.2e; new session: %s diff %.2e / %.2e (tol %.0e)", mf_status_str(sa), da, mf_status_str(sb),
           db_pre, db_dec, r.tol);
    if (st == MF_OK) mf_session_free(b);
    b = NULL;

    // 2. Every allocation of mf_generate on A fails in turn; after each, A generates the reference.
    bad = 0, n_oom = 0;
    int mismatched = 0;
    first_bad[0] = 0;
    for (k = 1; k < 500; k++) {
        memset(&g, 0x5A, sizeof g);
        mf_fault_alloc_fail_after(k);
        st = greedy(a, &g);
        mf_fault_alloc_fail_after(0);
        if (st == MF_OK) {
            mismatched += !same_tokens(&g, &ref_gen);
            mf_generate_result_free(&g);
            break;
        }
        if (st == MF_ERR_OOM && mf_last_error()[0] && g.n == 0 && g.seqs == NULL) {
            n_oom++;
        } else if (!bad++) {
            snprintf(first_bad, sizeof first_bad, "allocation %d: %s: %s", k, mf_status_str(st), mf_last_error());
        }
        mf_generate_result g2 = {0};
        const mf_status s2 = greedy(a, &g2);
        mismatched += s2 != MF_OK || !same_tokens(&g2, &ref_gen);
        mf_generate_result_free(&g2);
    }
    n_fault_points += n_oom;
    snprintf(name, sizeof name, "[%s] generate with each allocation failing, then again on the same session", bname);
    report(bad == 0 && n_oom >= 1 && st == MF_OK && mismatched == 0, name,
           "%d injected failures, all MF_ERR_OOM with an empty result%s%s; %d runs after them differ from the reference "
           "(%lld greedy tokens)",
           n_oom, bad ? "; first other: " : "", first_bad, mismatched, (long long)ref_gen.seqs[0].n_tokens);

    // 3. A session bigger than any memory: 65536 slots x 2^31 - 1 tokens of KV cache (64 PB).
    snprintf(name, sizeof name, "[%s] session_create(65536 x 2147483647 tokens: 64 PB of KV cache)", bname);
    b = (mf_session *)&b;
    st = mf_session_create(r.m, 65536, INT32_MAX, &b);
    n_bad_inputs++;
    report(st == MF_ERR_OOM && b == NULL && strstr(mf_last_error(), "KV cache"), name, "%s, \"%s\"", mf_status_str(st),
           mf_last_error());
    if (st == MF_OK) mf_session_free(b);
    b = NULL;
    snprintf(name, sizeof name, "[%s] session A works after the 64 PB request", bname);
    st = prefill(a, &r, r.buf);
    const double d2 = st == MF_OK ? rel_diff(r.buf, r.pre, r.vocab) : 1e30;
    report(st == MF_OK && d2 <= r.tol, name, "%s, diff %.2e (tol %.0e)", mf_status_str(st), d2, r.tol);
out:
    mf_generate_result_free(&ref_gen);
    mf_session_free(a);
    mf_model_free(r.m);
    free(r.pre), free(r.dec), free(r.buf);
}

// Every allocation of a GPT-2 checkpoint's load made to fail in turn (the
// CPU stores its Conv1D weights transposed through a staging buffer): each
// is MF_ERR_OOM with a message and no model, nothing leaks (LeakSanitizer),
// and the load then works.
static void test_load_faults(mf_backend *be, const char *bname) {
    char name[160], dir[600], first_bad[300] = "";
    snprintf(dir, sizeof dir, "%s/gpt2-tiny", fixdir);
    snprintf(name, sizeof name, "[%s] model_load(gpt2-tiny) with each allocation failing", bname);
    const mf_model_opts mo = {.dtype = MF_DTYPE_F32};
    int n_oom = 0, bad = 0, k;
    mf_status st = MF_OK;
    for (k = 1; k < 2000; k++) {
        mf_model *m = (mf_model *)&m;
        mf_fault_alloc_fail_after(k);
        st = mf_model_load(dir, be, &mo, &m);
        mf_fault_alloc_fail_after(0);
        if (st == MF_OK) {
            mf_model_free(m);
            break;
        }
        if (st == MF_ERR_OOM && mf_last_error()[0] && m == NULL)
            n_oom++;
        else if (!bad++)
            snprintf(first_bad, sizeof first_bad, "allocation %d: %s: %s (model %s)", k, mf_status_str(st),
                     mf_last_error(), m ? "set" : "NULL");
    }
    n_fault_points += n_oom;
    report(bad == 0 && n_oom >= 3 && st == MF_OK, name, "%d injected failures, all MF_ERR_OOM with a message and no "
           "model%s%s; then the load works (%s)", n_oom, bad ? "; first other: " : "", first_bad, mf_status_str(st));
}

static void run_backend(const char *bname) {
    mf_backend *be = NULL;
    const mf_status st = mf_backend_init(bname, &be);
    if (st != MF_OK) {
        if (!strcmp(bname, "cuda") && !mf_cuda_available()) {
            printf("skip [cuda] huge requests, arena, mid-session faults: skipped: no CUDA device\n");
            n_skip++;
        } else {
            report(false, bname, "backend_init: %s", mf_last_error());
        }
        return;
    }
    test_huge(be, bname);
    test_arena_fault(be, bname);
    test_mid_session(be, bname);
    test_load_faults(be, bname);
    still_works(be, bname, "all the faults");
    mf_backend_free(be);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <tests/fixtures/models>\n", argv[0]);
        return 2;
    }
    fixdir = argv[1];
    run_backend("cpu");
    run_backend("cuda");
    printf("bad-input cases: %d\n", n_bad_inputs);
    printf("fault-injection points: %d\n", n_fault_points);
    printf("%d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    return n_fail ? 1 : 0;
}
