// Internal (server): UTF-8 checks and repair for what goes out as JSON.
//
// The tokenizer keeps bytes that are not UTF-8 raw (decode(encode(x)) == x)
// and its stream decoder lets them out once they can no longer complete a
// character. JSON text must be UTF-8, so the server replaces each maximal
// ill-formed subsequence with U+FFFD (Unicode ch. 3 "U+FFFD substitution of
// maximal subparts": what Python's decode(errors="replace") and Rust's
// from_utf8_lossy do, hence HF's ByteLevel decoder; HF's ByteFallback
// decoder gives one U+FFFD per byte of an invalid run of byte tokens, which
// can be more of them).
#ifndef MF_SERVER_UTF8_H
#define MF_SERVER_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#include "core/sbuf.h"

// Length of the well-formed character at s[0 .. n), or 0 when s starts with
// an ill-formed sequence; *bad (when not NULL) gets the length of its
// maximal subpart (>= 1) in that case.
size_t mf_srv_utf8_char(const unsigned char *s, size_t n, size_t *bad);
// True when s[0 .. n) is well-formed; else *bad_at = offset of the first bad byte.
bool mf_srv_utf8_valid(const char *s, size_t n, size_t *bad_at);
// Appends s[0 .. n) to b with every maximal ill-formed subsequence replaced by U+FFFD.
void mf_srv_utf8_append(mf_sbuf *b, const char *s, size_t n);
// Code points in s[0 .. n) (as mf_srv_utf8_append would write them).
size_t mf_srv_utf8_count(const char *s, size_t n);

#endif // MF_SERVER_UTF8_H
