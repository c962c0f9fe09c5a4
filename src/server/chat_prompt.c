// Chat templates: until src/engine/chat.c (a renderer per template family)
// lands on main, no template can be rendered: chat completions are refused
// with that reason, and --chat-template is refused at start.
#include "server/chat_prompt.h"

#include <stdio.h>

bool mf_srv_chat_load(mf_srv *s, const char *name, bool *hard) {
    s->chat = NULL;
    snprintf(s->chat_error, sizeof s->chat_error, "this build has no chat template renderer yet");
    *hard = name != NULL;
    return false;
}

void mf_srv_chat_free(mf_srv *s) { s->chat = NULL; }

bool mf_srv_chat_render(mf_srv *s, const mf_oai_message *msgs, int32_t n, bool add_generation_prompt, char **text,
                        size_t *len, mf_oai_error *err) {
    (void)msgs;
    (void)n;
    (void)add_generation_prompt;
    *text = NULL;
    *len = 0;
    return mf_oai_error_set(err, 400, "invalid_request_error", "messages", "chat completions: %s", s->chat_error);
}
