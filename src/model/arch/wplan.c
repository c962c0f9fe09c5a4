// The weight planner a family's weight map calls (wplan.h): one slot per
// destination view, named after the checkpoint's tensors.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/arch/wplan.h"

typedef mf_wplan wplan;

// snprintf into a name buffer (names are short; a longer one is cut, and then
// simply not found in the checkpoint).
static void set_name(char *dst, const char *fmt, ...) MF_PRINTF(2, 3);
static void set_name(char *dst, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, MF_W_NAME, fmt, ap);
    va_end(ap);
}

static wslot *plan_add(wplan *p, mf_tensor *dst) {
    if (p->n == p->cap) {
        int32_t cap = p->cap ? 2 * p->cap : 64;
        wslot *v = realloc(p->v, (size_t)cap * sizeof *v);
        if (!v) {
            p->oom = true;
            return NULL;
        }
        p->v = v, p->cap = cap;
    }
    wslot *s = &p->v[p->n++];
    memset(s, 0, sizeof *s);
    s->dst = dst;
    s->offset = -1;
    s->std = 0.02f;
    return s;
}

bool mf_wplan_has(const mf_wplan *p, const char *name) { return p->st && p->has && p->has(p->st, name); }

void mf_wplan_vec(mf_wplan *p, mf_tensor *dst, int64_t n, float mean, const char *fmt, ...) {
    wslot *s = plan_add(p, dst);
    if (!s) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name[0], MF_W_NAME, fmt, ap);
    va_end(ap);
    s->n_src = 1;
    s->rows[0] = n;
    s->mean = mean;
}

// A matrix: sources names[0..n) of rows[i] x cols, stacked.
static void plan_mat(wplan *p, mf_tensor *dst, bool transposed, int n, char names[][MF_W_NAME], const int64_t *rows,
                     int64_t cols) {
    wslot *s = plan_add(p, dst);
    if (!s) return;
    s->n_src = n;
    for (int i = 0; i < n; i++) {
        set_name(s->name[i], "%s", names[i]);
        s->rows[i] = rows[i];
    }
    s->cols = cols;
    s->transposed = transposed;
}

void mf_wplan_mat(mf_wplan *p, mf_tensor *dst, bool transposed, int64_t rows, int64_t cols, const char *fmt, ...) {
    char names[1][MF_W_NAME];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(names[0], MF_W_NAME, fmt, ap);
    va_end(ap);
    plan_mat(p, dst, transposed, 1, names, &rows, cols);
}

// A stacked vector (biases of stacked matrices).
static void plan_vecs(wplan *p, mf_tensor *dst, int n, char names[][MF_W_NAME], const int64_t *lens) {
    wslot *s = plan_add(p, dst);
    if (!s) return;
    s->n_src = n;
    for (int i = 0; i < n; i++) {
        set_name(s->name[i], "%s", names[i]);
        s->rows[i] = lens[i];
    }
}

void mf_wplan_linears(mf_wplan *p, mf_linear *lin, int32_t *n_out, int n, const char *const *base,
                      const int64_t *out, int64_t in, bool bias) {
    char names[3][MF_W_NAME];
    if (n < 1 || n > 3) { // a family's bug, not the checkpoint's: fail the plan
        p->oom = true;
        return;
    }
    if (p->fuse || n == 1) {
        for (int i = 0; i < n; i++) set_name(names[i], "%s.weight", base[i]);
        plan_mat(p, &lin[0].w, true, n, names, out, in);
        if (bias) {
            for (int i = 0; i < n; i++) set_name(names[i], "%s.bias", base[i]);
            plan_vecs(p, &lin[0].bias, n, names, out);
        }
        if (n_out) *n_out = 1;
        return;
    }
    for (int i = 0; i < n; i++) {
        set_name(names[0], "%s.weight", base[i]);
        plan_mat(p, &lin[i].w, true, 1, names, &out[i], in);
        if (bias) mf_wplan_vec(p, &lin[i].bias, out[i], 0.0f, "%s.bias", base[i]);
    }
    if (n_out) *n_out = n;
}

void mf_wplan_stack(mf_wplan *p, mf_tensor *dst, int32_t n_rep, int n_src, const char *const *prefix,
                    const char *const *suffix, const int64_t *rows, int64_t cols) {
    if (n_src < 1 || n_src > 3 || n_rep < 0) { // a family's bug: fail the plan
        p->oom = true;
        return;
    }
    wslot *s = plan_add(p, dst);
    if (!s) return;
    s->n_src = n_src;
    s->n_rep = n_rep;
    for (int i = 0; i < n_src; i++) {
        set_name(s->name[i], "%s", prefix[i]);
        if (n_rep > 0) snprintf(s->suffix[i], sizeof s->suffix[i], "%s", suffix[i]);
        s->rows[i] = rows[i];
    }
    s->cols = cols;
    s->transposed = false;
}

void mf_wplan_conv1d(mf_wplan *p, mf_linear *lin, int64_t in, int64_t out, const char *fmt, ...) {
    char base[MF_W_NAME];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(base, MF_W_NAME, fmt, ap);
    va_end(ap);
    mf_wplan_mat(p, &lin->w, false, in, out, "%s.weight", base);
    if (!p->oom) p->v[p->n - 1].conv1d = true;
    mf_wplan_vec(p, &lin->bias, out, 0.0f, "%s.bias", base);
}
