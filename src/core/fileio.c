#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"

mf_status mf_file_read_all(const char *path, size_t max_bytes, char **out, size_t *len) {
    if (!path || !out || !len) return mf_fail(MF_ERR_INVALID_ARG, "read file: NULL argument");
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mf_fail(MF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mf_fail(MF_ERR_IO, "%s: not a regular file", path);
    }
    if ((unsigned long long)st.st_size > max_bytes) {
        close(fd);
        return mf_fail(MF_ERR_FORMAT, "%s: %lld bytes, more than the %zu allowed for this kind of file",
                       path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = mf_malloc(n + 1);
    if (!buf) {
        close(fd);
        return mf_fail(MF_ERR_OOM, "%s: cannot allocate %zu bytes to read it", path, n + 1);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; // the file shrank, or a read error
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return mf_fail(MF_ERR_IO, "%s: read %zu of %zu bytes", path, got, n);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return MF_OK;
}

char *mf_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = mf_malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a > 0 && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

mf_status mf_json_parse(const char *text, size_t len, const char *file, const char *what, cJSON **out) {
    *out = NULL;
    if (!text && len) return mf_fail(MF_ERR_INVALID_ARG, "%.200s: %s: text is NULL, len %zu", file, what, len);
    // A NUL would end cJSON's strings early ("a\0b" read as "a"): refuse all raw
    // control bytes, which JSON only allows as whitespace.
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r')
            return mf_fail(MF_ERR_FORMAT, "%.200s: %s has a raw control byte 0x%02x at byte %zu", file, what, ch, i);
    }
    // cJSON gets a NUL-terminated copy: the caller's text (a mapped header) is not.
    char *copy = mf_malloc(len + 1);
    if (!copy) return mf_fail(MF_ERR_OOM, "%.200s: cannot allocate %zu bytes to parse the %s", file, len + 1, what);
    if (len) memcpy(copy, text, len);
    copy[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
    size_t at = end ? (size_t)(end - copy) : 0;
    if (!root) {
        free(copy);
        return mf_fail(MF_ERR_FORMAT, "%.200s: %s is not valid JSON (error near byte %zu of %zu)", file, what, at, len);
    }
    for (size_t i = at; i < len; i++) {
        if (copy[i] != ' ' && copy[i] != '\t' && copy[i] != '\n' && copy[i] != '\r') {
            free(copy);
            cJSON_Delete(root);
            return mf_fail(MF_ERR_FORMAT, "%.200s: %s has unexpected bytes after the JSON value (at byte %zu of %zu)",
                           file, what, i, len);
        }
    }
    free(copy);
    *out = root;
    return MF_OK;
}
