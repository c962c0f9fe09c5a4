// Internal: reading text files whole (config.json, index.json,
// tokenizer.json) under a size limit per kind of file, and strict JSON
// parsing for every file minfer reads.
#ifndef MF_CORE_FILEIO_H
#define MF_CORE_FILEIO_H

#include <stddef.h>
#include "minfer/status.h"

typedef struct cJSON cJSON;

#ifdef __cplusplus
extern "C" {
#endif

// Reads the file at path into a NUL-terminated buffer (*out, release with
// free(); *len excludes the NUL). Files over max_bytes are refused with
// MF_ERR_FORMAT; a missing or unreadable file (or a directory) is MF_ERR_IO.
// Messages name the file.
mf_status mf_file_read_all(const char *path, size_t max_bytes, char **out, size_t *len);

// Parses text[0..len) (need not be NUL-terminated) as one JSON value into
// *out (release with cJSON_Delete). Stricter than cJSON: raw control bytes
// (JSON allows none but tab, CR, LF, outside strings) and anything but
// whitespace after the value are refused. MF_ERR_FORMAT messages read
// "FILE: WHAT is not valid JSON (error near byte K of N)".
mf_status mf_json_parse(const char *text, size_t len, const char *file, const char *what, cJSON **out);

// "dir/name" in a fresh buffer (release with free()); NULL when out of memory.
char *mf_path_join(const char *dir, const char *name);

#ifdef __cplusplus
}
#endif
#endif // MF_CORE_FILEIO_H
