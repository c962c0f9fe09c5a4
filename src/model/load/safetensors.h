// Internal: safetensors checkpoints, memory-mapped read-only.
//
// File layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [768, 2304], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"format": "pt"}}
// then the data section; [begin, end) are byte offsets into the data section.
//
// An mf_st_file is a whole checkpoint: one file (mf_st_open), or every shard
// named by a directory's model.safetensors.index.json (mf_st_open_dir), with
// one lookup over all of their tensors. Tensor data points into the mmap and
// stays valid until mf_st_close. Every header value is checked on open
// (lengths, offsets, byte counts, duplicate names, overlaps); failures are
// MF_ERR_FORMAT (MF_ERR_IO for files that cannot be opened) with the file and
// tensor named, and leave nothing allocated or mapped.
//
// A tensor of a dtype minfer cannot compute with (F64, I64, U8, BOOL, ...)
// does not fail the open — checkpoints carry buffers such as position_ids —
// it is refused when asked for (mf_st_expect, mf_st_tensor_view):
// "dtype I64 unsupported for tensor position_ids in DIR/model.safetensors".
#ifndef MF_MODEL_SAFETENSORS_H
#define MF_MODEL_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/status.h"
#include "minfer/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_ST_MAX_DIMS 8
// Header lengths above this are refused as corrupt (real ones are < 1 MB).
#define MF_ST_MAX_HEADER_BYTES (100ll * 1000 * 1000)

// Every dtype the safetensors format defines.
typedef enum {
    MF_ST_BOOL, MF_ST_U8, MF_ST_I8, MF_ST_U16, MF_ST_I16, MF_ST_U32, MF_ST_I32,
    MF_ST_U64, MF_ST_I64, MF_ST_F16, MF_ST_BF16, MF_ST_F32, MF_ST_F64, MF_ST_C64,
    MF_ST_F8_E4M3, MF_ST_F8_E5M2, MF_ST_F8_E8M0, MF_ST_F6_E2M3, MF_ST_F6_E3M2, MF_ST_F4,
    MF_ST_DTYPE_COUNT
} mf_st_dtype;

typedef struct mf_st_tensor {
    const char *name;               // key in the header; valid until mf_st_close
    const char *file;               // path of the file (shard) holding it, for messages
    int32_t shard;                  // index of that shard, 0 .. mf_st_shard_count()-1
    mf_st_dtype st_dtype;           // dtype as stored
    bool supported;                 // st_dtype is one minfer computes with: F32, F16, BF16, I32
    mf_dtype dtype;                 // the mf_dtype of st_dtype; meaningful only when supported
    int32_t ndim;                   // 0 (a scalar) .. MF_ST_MAX_DIMS
    int64_t shape[MF_ST_MAX_DIMS];  // elements per dim, row-major; unused dims are 1
    int64_t numel;                  // product of shape (1 for a scalar)
    const void *data;               // first byte, inside the read-only mmap; may be unaligned
    bool aligned;                   // data is a multiple of the element size: typed loads are
                                    // valid (files by the reference writer always are; copy if not)
    int64_t nbytes;                 // == numel * element size (data_offsets end - begin)
    int64_t offset;                 // byte offset of data in its file
} mf_st_tensor;

typedef struct mf_st_file mf_st_file;

// Opens and maps one .safetensors file.
mf_status mf_st_open(const char *path, mf_st_file **out);
// Opens a checkpoint directory: DIR/model.safetensors, or else (as
// transformers does) DIR/model.safetensors.index.json: each shard it names is
// mapped once, and every tensor in its weight_map must be in the shard it names.
mf_status mf_st_open_dir(const char *dir, mf_st_file **out);
// Parses an in-memory image of a .safetensors file. buf is not copied and
// must outlive *out; `name` stands for the file in messages. (open() maps the
// file and calls this; the fuzzer calls it directly.)
mf_status mf_st_parse_buffer(const void *buf, size_t len, const char *name, mf_st_file **out);
// Unmaps and frees everything (NULL is fine).
void mf_st_close(mf_st_file *f);

// Number of tensors over all shards (__metadata__ excluded).
int64_t mf_st_count(const mf_st_file *f);
// Tensor i, 0 <= i < mf_st_count(f): shard order, then header order. NULL out of range.
const mf_st_tensor *mf_st_at(const mf_st_file *f, int64_t i);
// Lookup by name (hash table, O(1)). MF_ERR_FORMAT "missing tensor NAME in FILE" when absent.
mf_status mf_st_find(const mf_st_file *f, const char *name, const mf_st_tensor **out);
// The same without failing: NULL when absent, no error recorded (optional
// tensors, e.g. lm_head.weight of a tied checkpoint).
const mf_st_tensor *mf_st_lookup(const mf_st_file *f, const char *name);
// mf_st_find, then: dtype must be supported (else MF_ERR_UNSUPPORTED) and,
// when shape is not NULL, the shape must be exactly shape[0..ndim) (else
// MF_ERR_FORMAT "tensor NAME in FILE has shape (768, 2304), expected (768, 2305)").
mf_status mf_st_expect(const mf_st_file *f, const char *name, int32_t ndim, const int64_t *shape,
                       const mf_st_tensor **out);
// A contiguous CPU view of t (a scalar becomes shape (1)). MF_ERR_UNSUPPORTED
// for an unsupported dtype or more than MF_MAX_DIMS dims. The view's data
// is read-only memory: never write through it.
mf_status mf_st_tensor_view(const mf_st_tensor *t, mf_tensor *out);

// Path of the checkpoint (the file, or the directory for mf_st_open_dir).
const char *mf_st_path(const mf_st_file *f);
int32_t mf_st_shard_count(const mf_st_file *f);
const char *mf_st_shard_path(const mf_st_file *f, int32_t i); // NULL out of range
// Sum of nbytes over all tensors.
int64_t mf_st_data_bytes(const mf_st_file *f);
// A string value of the header's __metadata__ (first shard that has the key),
// e.g. mf_st_metadata(f, "format") == "pt"; NULL when absent or not a string.
const char *mf_st_metadata(const mf_st_file *f, const char *key);

// "F32", "BF16", "I64", ... as the format spells them.
const char *mf_st_dtype_name(mf_st_dtype dt);
// Bits per element (4 for F4, 6 for F6_*); 0 for an invalid value.
int32_t mf_st_dtype_bits(mf_st_dtype dt);

// The sharding index (model.safetensors.index.json): weight_map, name -> shard.
typedef struct {
    int64_t n_entries;
    const char **tensor;  // (n_entries) tensor names
    int32_t *shard;       // (n_entries) index into shards
    int32_t n_shards;
    const char **shards;  // (n_shards) distinct shard file names, sorted
    void *json_;          // owns the strings above
} mf_st_index;

// Parses index JSON text (len bytes; need not be NUL-terminated). Shard names
// must be plain file names (no '/', not "." or ".."). `name` names the file in
// messages. Release with mf_st_index_free.
mf_status mf_st_index_parse(const char *json, size_t len, const char *name, mf_st_index **out);
void mf_st_index_free(mf_st_index *idx);

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_SAFETENSORS_H
