// Chat templates: a conversation (system / user / assistant messages) turned
// into the prompt text a chat model was trained on, byte for byte what
// transformers' apply_chat_template(messages, tokenize=False) gives with the
// checkpoint's own template.
//
// Hugging Face templates are Jinja programs; minfer runs no Jinja. Instead it
// recognises the published templates of the families it loads and renders
// each in C (as llama.cpp does). Recognition is exact: a template is known
// when, ignoring how its code is laid out (whitespace inside {{ }} / {% %},
// quote style, "\n" written as an escape or as a newline, comments, one
// trailing newline), it is one of the published templates listed with each
// kind below. Anything else is refused, naming the choices; a caller can then
// force a kind by name (the server's --chat-template NAME). Tests render many
// conversations with transformers and with minfer on each real template and
// compare the bytes (tests/python/test_chat_templates.py).
//
// The rendered text contains the BOS/EOS strings the template inserts (e.g.
// "<s>"), taken from the checkpoint's tokenizer_config.json: encode it with
// add_bos false (special tokens written in the text are matched as tokens).
//
// Refused (a clear error, nothing rendered): an empty conversation, a NULL
// role or content, a role other than system/user/assistant (tool and ipython
// messages: tool calls are out of scope), content or a BOS/EOS string that is
// not valid UTF-8 (templates are defined over Unicode text; there is no
// reference behaviour for stray bytes), and every conversation the template
// itself rejects with raise_exception (e.g. Llama-2's and Mistral's
// "roles must alternate user/assistant"), with the template's own words.
#ifndef MINFER_CHAT_H
#define MINFER_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/model.h"
#include "minfer/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// The template kinds minfer renders; the name (mf_chat_kind_name) is what
// forces one. Each recognises the published templates named here.
typedef enum {
    MF_CHAT_NONE = 0,        // no template (rendering is refused)
    MF_CHAT_LLAMA2,          // "llama2": meta-llama/Llama-2-{7,13,70}b-chat-hf
    MF_CHAT_LLAMA3,          // "llama3": meta-llama/Meta-Llama-3-8B-Instruct (3.0)
    MF_CHAT_LLAMA3_1,        // "llama3.1": Llama-3.1-8B-Instruct, Llama-3.3-70B-Instruct: a system
                             // header with the knowledge cutoff and "Today Date: 26 Jul 2024"
    MF_CHAT_LLAMA3_2,        // "llama3.2": Llama-3.2-3B-Instruct: the same with today's date
    MF_CHAT_MISTRAL_V1,      // "mistral-v1": mistralai/Mistral-7B-Instruct-v0.2 (and Mixtral-8x7B-Instruct)
                             // since mid-2024: " [INST] ", the system prompt before the first user turn
    MF_CHAT_MISTRAL_V1_OLD,  // "mistral-v1-old": the same models' first template: no system role
    MF_CHAT_MISTRAL_V01_OLD, // "mistral-v0.1-old": Mistral-7B-Instruct-v0.1's first template:
                             // no system role, "</s> " after each answer
    MF_CHAT_MISTRAL_V3,      // "mistral-v3": Mistral-7B-Instruct-v0.3: "[INST] ", the system prompt
                             // in the last user turn, answers trimmed
    MF_CHAT_CHATML,          // "chatml": <|im_start|>role\n...<|im_end|>\n (teknium/OpenHermes-2.5-Mistral-7B)
    MF_CHAT_QWEN2,           // "qwen2": ChatML, "You are a helpful assistant." when the conversation
                             // does not open with a system message (Qwen/Qwen2-7B-Instruct)
    MF_CHAT_QWEN2_5,         // "qwen2.5": the same with "You are Qwen, created by Alibaba Cloud. You are
                             // a helpful assistant." (Qwen/Qwen2.5-7B-Instruct)
    MF_CHAT_KIND_COUNT
} mf_chat_kind;

// "llama3.1", ... ("none" for MF_CHAT_NONE, "?" outside the enum).
const char *mf_chat_kind_name(mf_chat_kind kind);

typedef struct {
    const char *role;    // "system", "user" or "assistant" (NUL-terminated)
    const char *content; // UTF-8 text (NUL-terminated; may be empty)
} mf_chat_message;

typedef struct {
    bool add_generation_prompt; // end with the assistant header (templates that have one)
    const char *date_string;    // llama3.1 / llama3.2 "Today Date", as the template's date_string
                                // variable ("26 Jul 2024"); NULL: the template's default (3.1:
                                // "26 Jul 2024"; 3.2: today, local time, as strftime "%d %b %Y")
} mf_chat_opts;

// A chat template: its kind, the text it was recognised from (if any) and the
// BOS/EOS strings it inserts. Immutable: render may run on several threads.
typedef struct mf_chat_template mf_chat_template;

// From a checkpoint folder: the template is chat_template.jinja when present,
// else tokenizer_config.json's "chat_template" (a string, or a list of
// {"name", "template"} of which "default" is taken), as transformers reads
// them; bos_token / eos_token (a string or {"content": ...}) come from
// tokenizer_config.json, else special_tokens_map.json. name NULL: recognise
// the template; a kind name forces that kind (the folder's template text, if
// any, is kept for mf_chat_template_text). Errors: MF_ERR_UNSUPPORTED when
// the folder has no template and no name is given (GPT-2), the template is
// not recognised, or the name is unknown (each names the choices);
// MF_ERR_FORMAT for malformed files, MF_ERR_IO, MF_ERR_OOM.
mf_status mf_chat_template_load(const char *dir, const char *name, mf_chat_template **out);
// The same from memory: text (NULL: none), name (NULL: recognise text), bos
// and eos (NULL: the checkpoint defines none; a template that needs one is
// then refused at render, as transformers fails on the undefined value).
mf_status mf_chat_template_new(const char *text, const char *name, const char *bos, const char *eos,
                               mf_chat_template **out);
void mf_chat_template_free(mf_chat_template *t); // NULL is fine

// The kind (MF_CHAT_NONE for NULL), and the template text it came from (NULL
// when forced by name without one). Owned by t.
mf_chat_kind mf_chat_template_kind(const mf_chat_template *t);
const char *mf_chat_template_text(const mf_chat_template *t);

// msgs[0 .. n) -> *text (allocated, NUL-terminated; *len excludes the NUL;
// release with mf_chat_free_buffer). opts NULL: no generation prompt, default
// date. On failure *text is NULL and *len 0.
mf_status mf_chat_render(const mf_chat_template *t, const mf_chat_message *msgs, int64_t n,
                         const mf_chat_opts *opts, char **text, size_t *len);
void mf_chat_free_buffer(void *p); // NULL is fine

// A loaded model's template: mf_chat_template_load on the folder it was
// loaded from (name as there). A synthetic model has no files: only a name
// works, and the template has no BOS/EOS strings.
mf_status mf_model_chat_template(const mf_model *m, const char *name, mf_chat_template **out);

#ifdef __cplusplus
}
#endif
#endif // MINFER_CHAT_H
