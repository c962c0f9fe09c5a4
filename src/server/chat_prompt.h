// Internal (server): chat messages -> prompt text through the model's chat template.
#ifndef MF_SERVER_CHAT_PROMPT_H
#define MF_SERVER_CHAT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

#include "server/oai_request.h"
#include "server/server.h"

// Loads the server's template (s->chat) from the model (name: --chat-template,
// NULL: recognised from the checkpoint). false: s->chat stays NULL and
// s->chat_error says why; hard: the error must stop the server (a name that
// is not a template), else chat completions are refused with that reason.
bool mf_srv_chat_load(mf_srv *s, const char *name, bool *hard);
void mf_srv_chat_free(mf_srv *s);

// Renders msgs[0 .. n) (with the assistant header when add_generation_prompt):
// *text is malloc'ed (free()). false: *err is the client's error.
bool mf_srv_chat_render(mf_srv *s, const mf_oai_message *msgs, int32_t n, bool add_generation_prompt, char **text,
                        size_t *len, mf_oai_error *err);

#endif // MF_SERVER_CHAT_PROMPT_H
