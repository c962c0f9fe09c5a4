// Internal: a growable byte string (server responses, chat templates).
//
// Appends never fail loudly: an allocation failure sets `oom` and later
// appends do nothing, so a builder checks once at the end.
#ifndef MF_CORE_SBUF_H
#define MF_CORE_SBUF_H

#include <stdbool.h>
#include <stddef.h>

#if defined(__GNUC__)
#define MF_SBUF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MF_SBUF_PRINTF(a, b)
#endif

typedef struct {
    char *p;     // (cap) bytes, p[len] == '\0' whenever p != NULL
    size_t len, cap;
    bool oom;    // an append failed; the contents are incomplete
} mf_sbuf;

void mf_sbuf_put(mf_sbuf *b, const char *s, size_t n);
void mf_sbuf_puts(mf_sbuf *b, const char *s);
void mf_sbuf_printf(mf_sbuf *b, const char *fmt, ...) MF_SBUF_PRINTF(2, 3);
// Removes the first n bytes (what a reader has sent).
void mf_sbuf_consume(mf_sbuf *b, size_t n);
void mf_sbuf_free(mf_sbuf *b); // zeroes *b

#endif // MF_CORE_SBUF_H
