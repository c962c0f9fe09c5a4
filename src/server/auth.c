#include "server/auth.h"

#include <string.h>

static bool same(const char *a, size_t na, const char *b) {
    size_t nb = strlen(b);
    unsigned char d = (unsigned char)(na != nb);
    for (size_t i = 0; i < na; i++) d |= (unsigned char)(a[i] ^ b[i % (nb ? nb : 1)]);
    return d == 0 && nb > 0;
}

bool mf_srv_auth_ok(const mf_srv_opts *o, const char *authorization) {
    if (o->n_api_keys == 0) return true;
    if (!authorization) return false;
    const char *p = authorization;
    while (*p == ' ') p++;
    // The scheme is case-insensitive (RFC 7235).
    static const char scheme[] = "bearer ";
    for (int i = 0; i < 7; i++) {
        char c = p[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != scheme[i]) return false;
    }
    p += 7;
    while (*p == ' ') p++;
    size_t n = strlen(p);
    while (n > 0 && p[n - 1] == ' ') n--;
    bool ok = false;
    for (int32_t k = 0; k < o->n_api_keys; k++) ok |= same(p, n, o->api_keys[k]);
    return ok;
}
