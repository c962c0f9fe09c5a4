// Internal: host allocation with the fault-injection point.
#ifndef MF_CORE_ALLOC_H
#define MF_CORE_ALLOC_H

#include <stddef.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

// True when the fault injector says this allocation must fail (counts one
// allocation). Backends call it before every real allocation.
bool mf_fault_should_fail(void);

// malloc/calloc through the injector; NULL on failure (the caller reports
// MF_ERR_OOM naming what it was allocating). Release with free().
void *mf_malloc(size_t bytes);
void *mf_calloc(size_t n, size_t size);

#ifdef __cplusplus
}
#endif
#endif // MF_CORE_ALLOC_H
