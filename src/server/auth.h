// Internal (server): API keys.
#ifndef MF_SERVER_AUTH_H
#define MF_SERVER_AUTH_H

#include <stdbool.h>

#include "server/opts.h"

// True when the server has no keys, or `authorization` (the header's value,
// NULL when absent) is "Bearer KEY" for one of them. Compares in time that
// does not depend on where a wrong key differs.
bool mf_srv_auth_ok(const mf_srv_opts *o, const char *authorization);

#endif // MF_SERVER_AUTH_H
