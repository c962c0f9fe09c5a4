// The per-op profiler of `minfer bench model --profile`: hooked into a session
// (mf_session_set_profiler), it times every op of a forward call (CUDA events
// around each op on CUDA, the wall clock on the CPU) and turns them into rows
// of a result table.
#ifndef MF_TOOLS_PROFILER_H
#define MF_TOOLS_PROFILER_H

#include <stdbool.h>
#include <stdint.h>

#include "bench_util.h"
#include "minfer/model.h"

typedef struct mf_profiler mf_profiler;

// NULL when out of memory or the CUDA events could not be created.
// stream: the cudaStream_t the ops run on (CUDA only).
mf_profiler *mf_profiler_new(bool cuda, void *stream);
void mf_profiler_free(mf_profiler *p); // NULL is fine
mf_session_profiler mf_profiler_hook(mf_profiler *p);
void mf_profiler_reset(mf_profiler *p); // forgets what was recorded
// After a forward call (it synchronises): appends the rows of one phase to t
// (columns bench, phase, op, calls, ms, %, us/call, kind, device, commit,
// date): each (op, what) by time, then the op families, then the time outside
// the ops (host work, launches, copies of ids) of wall_us. stamp: the device,
// commit and date every row ends with. Returns the ops that were not timed
// (more than the profiler holds).
int64_t mf_profiler_rows(mf_profiler *p, const char *phase, double wall_us, mf_bench_table *t, const char *bench_id,
                         const char *const stamp[3]);

#endif // MF_TOOLS_PROFILER_H
