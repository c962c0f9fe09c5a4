// test_ops: every op x dtype x shape case on every available backend, against
// a float64 reference (see harness.h for the harness and how to add a family).
//
//   test_ops [--filter SUBSTR] [--list] [--seed N] [--backend cpu|cuda] [--skip-file FILE] [-v]
//
// --filter: the cases whose name contains SUBSTR; "A|B|C": any of them.
// --skip-file: lines "SUBSTR reason..." ('#' starts a comment): CUDA runs of
// cases whose name contains SUBSTR are skipped, with the reason (the
// emulator's list of cases too big to run on the CPU: tests/emu/skip.txt).
// Prints one line per case and backend, then "N passed, N failed, N skipped".
// Exit code: 0 when nothing failed, 1 on a failure (or no case matching the
// filter), 2 when the harness itself broke.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

// The registry: one X(family) per cases_<family>.c, which defines
// void th_cases_<family>(th_list *).
#define TH_FAMILIES(X) \
    X(gemm)            \
    X(norm)            \
    X(embed)           \
    X(add)             \
    X(softmax)         \
    X(rope)            \
    X(act)             \
    X(copy)            \
    X(argmax)          \
    X(topk)            \
    X(moe)             \
    X(attention)       \
    X(kv_write)

#define TH_DECLARE(f) void th_cases_##f(th_list *l);
TH_FAMILIES(TH_DECLARE)
#define TH_ENTRY(f) th_cases_##f,
static void (*const families[])(th_list *) = {TH_FAMILIES(TH_ENTRY)};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void usage(void) {
    fprintf(stderr, "usage: test_ops [--filter SUBSTR] [--list] [--seed N] [--backend cpu|cuda] [--skip-file FILE] [-v]\n");
}

// The skip list of --skip-file: n entries of (substring, reason).
typedef struct {
    char sub[64][128], why[64][160];
    int n;
} skip_list;

static bool skip_list_read(const char *path, skip_list *s) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "test_ops: cannot read the skip file %s\n", path);
        return false;
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char sub[128] = "", why[160] = "";
        if (sscanf(line, " %127s %159[^\n]", sub, why) < 1) continue;
        if (s->n == 64) {
            fprintf(stderr, "test_ops: more than 64 entries in %s\n", path);
            fclose(f);
            return false;
        }
        snprintf(s->sub[s->n], sizeof s->sub[0], "%s", sub);
        snprintf(s->why[s->n], sizeof s->why[0], "%s", why[0] ? why : "in the skip file");
        s->n++;
    }
    fclose(f);
    return true;
}

static const char *skip_reason(const skip_list *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strstr(name, s->sub[i])) return s->why[i];
    return NULL;
}

// The case name contains one of the '|'-separated substrings of filter (all cases for NULL).
static bool filter_match(const char *name, const char *filter) {
    if (!filter) return true;
    for (const char *a = filter;;) {
        const char *bar = strchr(a, '|');
        const size_t n = bar ? (size_t)(bar - a) : strlen(a);
        for (const char *p = name; *p; p++)
            if (!strncmp(p, a, n)) return true;
        if (!n && !*name) return true;
        if (!bar) return false;
        a = bar + 1;
    }
}

int main(int argc, char **argv) {
    const char *filter = NULL, *only = NULL;
    bool list = false, verbose = false;
    uint64_t seed = 0;
    static skip_list skips;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
            filter = argv[++i];
        } else if (strcmp(argv[i], "--list") == 0) {
            list = true;
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--skip-file") == 0 && i + 1 < argc) {
            if (!skip_list_read(argv[++i], &skips)) return 2;
        } else if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
        } else {
            usage();
            return 2;
        }
    }

    th_list all = {0};
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) families[f](&all);

    // Names select cases: two cases with one name would be one too many.
    const char **names_sorted = malloc((size_t)(all.n ? all.n : 1) * sizeof *names_sorted);
    if (!names_sorted) th_fatal("out of host memory");
    for (int64_t i = 0; i < all.n; i++) names_sorted[i] = all.cases[i].name;
    qsort(names_sorted, (size_t)all.n, sizeof *names_sorted, cmp_str);
    for (int64_t i = 1; i < all.n; i++)
        if (strcmp(names_sorted[i - 1], names_sorted[i]) == 0) th_fatal("two cases are named %s", names_sorted[i]);
    free(names_sorted);

    int64_t selected = 0;
    for (int64_t i = 0; i < all.n; i++) {
        if (!filter_match(all.cases[i].name, filter)) continue;
        selected++;
        if (list) printf("%s\n", all.cases[i].name);
    }
    if (list) {
        th_list_free(&all);
        return 0;
    }

    // Backends: the CPU always; CUDA when a device is usable.
    const char *names[2] = {"cpu", "cuda"};
    mf_backend *bes[2] = {NULL, NULL};
    const char *why_not[2] = {NULL, NULL};
    for (int b = 0; b < 2; b++) {
        if (only && strcmp(only, names[b]) != 0) {
            why_not[b] = "not selected";
            continue;
        }
        if (b == 1 && !mf_cuda_available()) {
            why_not[b] = "no CUDA device";
            continue;
        }
        mf_status st = mf_backend_init(names[b], &bes[b]);
        if (st != MF_OK) {
            fprintf(stderr, "mf_backend_init(%s): %s: %s\n", names[b], mf_status_str(st), mf_last_error());
            th_list_free(&all);
            return 2;
        }
    }

    int64_t passed = 0, failed = 0, skipped = 0;
    char msg[2048];
    double t0 = now_s();
    for (int64_t i = 0; i < all.n; i++) {
        const th_case *c = &all.cases[i];
        if (!filter_match(c->name, filter)) continue;
        for (int b = 0; b < 2; b++) {
            if (!bes[b]) {
                if (why_not[b] && strcmp(why_not[b], "not selected") == 0) continue;
                printf("skip [%-4s] %s: skipped: %s\n", names[b], c->name, why_not[b]);
                skipped++;
                continue;
            }
            const char *why = b == 1 ? skip_reason(&skips, c->name) : NULL;
            if (why) {
                printf("skip [%-4s] %s: skipped: %s\n", names[b], c->name, why);
                skipped++;
                continue;
            }
            double worst = 0, t = now_s();
            th_result r = th_run_case(c, bes[b], seed, msg, sizeof msg, &worst);
            if (r == TH_PASS) {
                passed++;
                printf("  ok [%-4s] %s  err/bound %.3g", names[b], c->name, worst);
                if (verbose) printf("  %.3f s", now_s() - t);
                printf("\n");
            } else if (r == TH_SKIP) {
                skipped++;
                printf("skip [%-4s] %s: skipped: %s\n", names[b], c->name, msg);
            } else {
                failed++;
                printf("FAIL [%-4s] %s: %s\n", names[b], c->name, msg);
            }
        }
    }
    if (selected == 0) {
        printf("no case matches --filter '%s'\n", filter ? filter : "");
        failed++;
    }
    if (verbose) printf("%lld cases in %.2f s\n", (long long)selected, now_s() - t0);
    for (int b = 0; b < 2; b++) mf_backend_free(bes[b]);
    th_list_free(&all);
    printf("%lld passed, %lld failed, %lld skipped\n", (long long)passed, (long long)failed, (long long)skipped);
    return failed ? 1 : 0;
}
