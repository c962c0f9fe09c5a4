// Tokenizer: Hugging Face tokenizer.json (BPE models) in C.
//
// Supported, component by component (anything else is refused at load with
// MF_ERR_UNSUPPORTED naming the component):
//   model          BPE: "merges" as ["a b", ...] or [["a", "b"], ...]; byte_fallback
//                  (<0xNN> tokens); unk_token + fuse_unk; ignore_merges (Llama-3).
//   normalizer     null, Sequence, Prepend, Replace (String or Regex pattern), NFC
//                  (Unicode 14.0 tables).
//   pre_tokenizer  null, Sequence, Split (String or Regex; every split behavior;
//                  invert), ByteLevel (add_prefix_space, use_regex: the GPT-2
//                  regex), Metaspace (replacement, prepend_scheme, split), Digits.
//   decoder        null, Sequence, ByteLevel, Replace (String pattern),
//                  ByteFallback, Fuse, Strip, Metaspace.
//   added_tokens   matched before normalization (normalized=false) or after it
//                  (normalized=true), leftmost then longest; lstrip, rstrip
//                  (single_word=true is refused). Special tokens written in the
//                  text are always matched, as in HF by default: callers that
//                  encode untrusted text must screen it themselves.
//   post_processor ignored: the caller decides about BOS (add_bos below).
// Regexes run through PCRE2 with UTF and UCP (Unicode \s, \p{L}, \p{N}); \s and
// \w are spelled out as Oniguruma (HF's engine) defines them.
//
// Encoding is what HF `Tokenizer.encode(text, add_special_tokens=False)`
// gives, plus an optional BOS in front. Text need not be valid UTF-8: a
// byte-level tokenizer encodes the raw bytes (that is what it models), a
// SentencePiece-style one uses its <0xNN> byte-fallback tokens for bytes that
// are not UTF-8 (or its unk token when it has no byte fallback).
//
// Decoding returns raw bytes. Where HF would turn bytes that are not valid
// UTF-8 into U+FFFD, minfer keeps the bytes, so that decode(encode(x)) == x
// for byte-level tokenizers whatever x is. Added and special tokens decode
// to their text; use mf_tokenizer_is_special to drop them first.
//
// A loaded tokenizer is immutable: encode/decode may run on several threads
// at once. A stream (mf_tokenizer_stream) belongs to one thread.
#ifndef MINFER_TOKENIZER_H
#define MINFER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_tokenizer mf_tokenizer;

// Loads a tokenizer.json. When a tokenizer_config.json lies in the same folder
// its bos_token / eos_token / add_bos_token are read too (otherwise BOS comes
// from a TemplateProcessing post_processor that starts with a special token,
// and EOS is unknown). Errors: MF_ERR_IO (names the path), MF_ERR_FORMAT
// (malformed JSON or content, names what), MF_ERR_UNSUPPORTED (names the
// model type / component), MF_ERR_OOM. *out is NULL on failure.
mf_status mf_tokenizer_load(const char *path_to_tokenizer_json, mf_tokenizer **out);
// Same, from a model folder: loads <dir>/tokenizer.json.
mf_status mf_tokenizer_load_dir(const char *dir, mf_tokenizer **out);
void mf_tokenizer_free(mf_tokenizer *tok); // NULL is fine

// Text (len bytes; need not be NUL-terminated, may hold NULs) -> token ids.
// add_bos puts the BOS id first (MF_ERR_INVALID_ARG when the tokenizer has
// none). *ids is allocated (release with mf_tokenizer_free_buffer; non-NULL
// even when *n == 0), *n is its length. On failure *ids is NULL and *n 0.
// MF_ERR_UNSUPPORTED when the normalizers or pre-tokenizers grow the text
// more than 64-fold (only a hostile tokenizer.json does; decode likewise).
mf_status mf_tokenizer_encode(const mf_tokenizer *tok, const char *text, size_t len, bool add_bos,
                              int32_t **ids, int64_t *n);

// Token ids -> bytes (see "Decoding" above). The decoder treats ids[0] as the
// start of a sequence (e.g. the SentencePiece decoder strips the space its
// normalizer put in front). *text is allocated, NUL-terminated (the NUL is
// not counted in *len); release with mf_tokenizer_free_buffer. An id outside
// [0, vocab_size) or one with no token gives MF_ERR_INVALID_ARG naming it.
mf_status mf_tokenizer_decode(const mf_tokenizer *tok, const int32_t *ids, int64_t n, char **text, size_t *len);

// Releases what encode/decode allocated (NULL is fine).
void mf_tokenizer_free_buffer(void *p);

// Highest token id + 1 (model vocabulary and added tokens); 0 for NULL.
int64_t mf_tokenizer_vocab_size(const mf_tokenizer *tok);
// Id of a token spelled as in tokenizer.json ("<s>", "Ġthe", "▁the"); added
// tokens first, then the model vocabulary. -1 when absent or an argument is NULL.
int32_t mf_tokenizer_token_id(const mf_tokenizer *tok, const char *token);
// The token's spelling in tokenizer.json (NUL-terminated, owned by tok; for
// an added token with normalized=true its normalized form, as HF's
// id_to_token gives), or NULL for an id with no token.
const char *mf_tokenizer_token_text(const mf_tokenizer *tok, int32_t id);
// BOS / EOS ids (see mf_tokenizer_load), -1 when unknown.
int32_t mf_tokenizer_bos_id(const mf_tokenizer *tok);
int32_t mf_tokenizer_eos_id(const mf_tokenizer *tok);
// tokenizer_config.json's add_bos_token (false when absent): what the model's
// own tokenizer does with add_special_tokens=True, for callers that ask.
bool mf_tokenizer_default_add_bos(const mf_tokenizer *tok);
// True for added tokens marked "special" (e.g. <s>, <|endoftext|>).
bool mf_tokenizer_is_special(const mf_tokenizer *tok, int32_t id);

// ---- streaming decode -------------------------------------------------------------
// Turns ids arriving one at a time into text that never splits a UTF-8
// character: bytes of an incomplete character are held until the character
// is complete (or until it can no longer be completed: then the raw bytes go
// out). The concatenation of everything a stream emits, after
// mf_tokenizer_stream_flush, equals decode(context ++ pushed ids) minus
// decode(context). Each push costs O(tokens since the last complete
// character), not O(sequence), for the decoder chains models use (ByteLevel;
// Replace, ByteFallback, Fuse, Strip start=1; Metaspace); a chain whose
// start-of-sequence rule or matching can reach past one token (e.g. Strip with
// start=2 after Fuse) is decoded whole, context included, at each push.
typedef struct mf_tokenizer_stream mf_tokenizer_stream;

// context: ids that precede the stream (e.g. the prompt), used so that the
// first pieces decode as in the middle of the sequence (a SentencePiece "▁Hi"
// after a prompt gives " Hi", at the start of a sequence "Hi"). Their text is
// not emitted. n_context may be 0 (context may then be NULL).
mf_status mf_tokenizer_stream_new(const mf_tokenizer *tok, const int32_t *context, int64_t n_context,
                                  mf_tokenizer_stream **out);
// Feeds one id. *text / *len: the newly complete text (possibly empty; not
// NUL-terminated), valid until the next call on this stream. After a failure
// other than MF_ERR_INVALID_ARG, free the stream.
mf_status mf_tokenizer_stream_push(mf_tokenizer_stream *s, int32_t id, const char **text, size_t *len);
// Emits the held bytes of an incomplete character (raw) and ends the
// character; the stream can go on.
mf_status mf_tokenizer_stream_flush(mf_tokenizer_stream *s, const char **text, size_t *len);
void mf_tokenizer_stream_free(mf_tokenizer_stream *s); // NULL is fine

#ifdef __cplusplus
}
#endif
#endif // MINFER_TOKENIZER_H
