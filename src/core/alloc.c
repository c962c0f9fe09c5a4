#include <stdatomic.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "minfer/backend.h"

// Allocations left before the injected failure; <= 0: injection off.
static _Atomic int64_t mf_fault_countdown = 0;

void mf_fault_alloc_fail_after(int64_t n) { atomic_store(&mf_fault_countdown, n > 0 ? n : 0); }

bool mf_fault_should_fail(void) {
    int64_t c = atomic_load(&mf_fault_countdown);
    while (c > 0) {
        if (atomic_compare_exchange_weak(&mf_fault_countdown, &c, c - 1)) return c == 1;
    }
    return false;
}

void *mf_malloc(size_t bytes) {
    if (mf_fault_should_fail()) return NULL;
    return malloc(bytes ? bytes : 1);
}

void *mf_calloc(size_t n, size_t size) {
    if (mf_fault_should_fail()) return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}
