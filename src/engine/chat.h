// Internal: chat templates (include/minfer/chat.h).
//
//   chat.c         kinds and names, recognising a template, loading one from a
//                  checkpoint folder, the model accessor
//   chat_render.c  checking a conversation and rendering it, one function per
//                  template family, as the published Jinja templates do
#ifndef MF_ENGINE_CHAT_H
#define MF_ENGINE_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "minfer/chat.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mf_chat_template {
    mf_chat_kind kind;
    char *text; // the template it was recognised from (NULL: forced with none)
    char *bos;  // bos_token / eos_token strings (NULL: the checkpoint defines none)
    char *eos;
};

// The layout-free form recognition compares (see chat.h): inside {{ }} and
// {% %} whitespace outside string literals is dropped and literals are
// rewritten in one quoting ('...', escapes decoded, ' and \ escaped);
// comments lose their text; text between tags is kept; one trailing newline
// is dropped (Jinja drops it). *out: allocated, NUL-terminated (free()).
// MF_ERR_OOM only.
mf_status mf_chat_canonical(const char *text, char **out, size_t *len);
// 64-bit FNV-1a of the canonical form: what the table of known templates
// holds. MF_ERR_OOM only.
mf_status mf_chat_template_hash(const char *text, uint64_t *out);
// The kind whose published template text is (MF_CHAT_NONE: none).
mf_chat_kind mf_chat_recognise(uint64_t hash);
// Byte offset of the first byte of s[0..len) that is not well-formed UTF-8
// (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF), or -1.
int64_t mf_chat_utf8_bad_at(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif // MF_ENGINE_CHAT_H
