// libFuzzer target: a safetensors file image (header length, JSON header,
// tensor offsets) through mf_st_parse_buffer, and, for inputs that start
// with '{', the same bytes as a model.safetensors.index.json.
// Every accepted file must keep its tensors inside the input; every
// rejected one must leave nothing allocated (ASan reports leaks).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/load/safetensors.h"

#define REQUIRE(c) \
    do {           \
        if (!(c)) abort(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mf_st_file *f = NULL;
    if (mf_st_parse_buffer(data, size, "fuzz.safetensors", &f) == MF_OK) {
        volatile uint8_t sink = 0;
        int64_t sum = 0;
        for (int64_t i = 0; i < mf_st_count(f); i++) {
            const mf_st_tensor *t = mf_st_at(f, i);
            REQUIRE(t && mf_st_lookup(f, t->name) == t);
            const uint8_t *p = t->data;
            REQUIRE(t->nbytes >= 0 && p >= data && p + t->nbytes <= data + size);
            REQUIRE(t->offset == p - data);
            if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1]; // ASan checks both ends
            REQUIRE(t->ndim >= 0 && t->ndim <= MF_ST_MAX_DIMS);
            sum += t->nbytes;
            const mf_st_tensor *e = NULL;
            if (mf_st_expect(f, t->name, t->ndim, t->shape, &e) == MF_OK) {
                REQUIRE(e == t && t->supported);
                mf_tensor v;
                if (mf_st_tensor_view(t, &v) == MF_OK) REQUIRE(mf_tensor_span_bytes(&v) == t->nbytes);
            }
        }
        (void)sink;
        REQUIRE(sum == mf_st_data_bytes(f) && sum <= (int64_t)size);
        (void)mf_st_metadata(f, "format");
        mf_st_close(f);
    } else {
        REQUIRE(f == NULL);
    }

    if (size && data[0] == '{') {
        mf_st_index *idx = NULL;
        if (mf_st_index_parse((const char *)data, size, "fuzz.index.json", &idx) == MF_OK) {
            REQUIRE(idx->n_entries > 0 && idx->n_shards > 0 && idx->n_shards <= idx->n_entries);
            for (int64_t i = 0; i < idx->n_entries; i++) {
                REQUIRE(idx->shard[i] >= 0 && idx->shard[i] < idx->n_shards);
                REQUIRE(strchr(idx->shards[idx->shard[i]], '/') == NULL);
            }
            mf_st_index_free(idx);
        }
    }
    return 0;
}
