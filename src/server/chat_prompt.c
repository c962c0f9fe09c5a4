// Chat templates for the server: the model's template (src/engine/chat.c
// renders each known family in C), loaded once, rendered per request.
#include "server/chat_prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/chat.h"

bool mf_srv_chat_load(mf_srv *s, const char *name, bool *hard) {
    s->chat = NULL;
    *hard = false;
    mf_chat_template *t = NULL;
    if (mf_model_chat_template(s->model, name, &t) == MF_OK) {
        s->chat = t;
        fprintf(stderr, "minfer serve: chat template %s%s\n", mf_chat_kind_name(mf_chat_template_kind(t)),
                name ? " (--chat-template)" : " (recognised from the checkpoint)");
        return true;
    }
    snprintf(s->chat_error, sizeof s->chat_error, "%s", mf_last_error());
    // A name that is not a template, or a checkpoint template that is not
    // one we render: refused at start. A checkpoint without any template
    // (GPT-2, base models) serves completions; chat asks for --chat-template.
    mf_model_info info;
    *hard = name != NULL || (mf_model_get_info(s->model, &info) == MF_OK && info.chat_template);
    if (!*hard)
        snprintf(s->chat_error, sizeof s->chat_error,
                 "the model has no chat template (start the server with --chat-template NAME to use one)");
    return false;
}

void mf_srv_chat_free(mf_srv *s) {
    mf_chat_template_free(s->chat);
    s->chat = NULL;
}

bool mf_srv_chat_render(mf_srv *s, const mf_oai_message *msgs, int32_t n, bool add_generation_prompt, char **text,
                        size_t *len, mf_oai_error *err) {
    *text = NULL;
    *len = 0;
    if (!s->chat) return mf_oai_error_set(err, 400, "invalid_request_error", "messages", "messages: %s", s->chat_error);
    mf_chat_message *m = malloc((size_t)n * sizeof *m);
    if (!m) return mf_oai_error_set(err, 500, "internal_error", NULL, "out of memory rendering the conversation");
    for (int32_t i = 0; i < n; i++) m[i] = (mf_chat_message){.role = msgs[i].role, .content = msgs[i].content};
    mf_chat_opts o = {.add_generation_prompt = add_generation_prompt};
    char *out = NULL;
    size_t out_len = 0;
    mf_status st = mf_chat_render(s->chat, m, n, &o, &out, &out_len);
    free(m);
    if (st != MF_OK)
        return mf_oai_error_set(err, st == MF_ERR_OOM ? 500 : 400, st == MF_ERR_OOM ? "internal_error" : "invalid_request_error",
                                "messages", "messages: %s", mf_last_error());
    *text = malloc(out_len + 1);
    if (*text) {
        memcpy(*text, out, out_len + 1);
        *len = out_len;
    }
    mf_chat_free_buffer(out);
    if (!*text) return mf_oai_error_set(err, 500, "internal_error", NULL, "out of memory rendering the conversation");
    return true;
}
