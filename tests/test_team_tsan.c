// The CPU backend's hot team (src/cpu/team.c) under ThreadSanitizer: this
// program and team.c are built with -fsanitize=thread (tests/CMakeLists.txt,
// where the compiler has it), without the rest of the library. The parts
// write plain memory and the caller reads it after mf_cpu_team_run returns,
// then the next section overwrites it: a missing happens-before between a
// helper's writes and the caller (or between sections) is a reported race.
// Only the team's own path runs here: one caller, no OpenMP region (libgomp
// is not instrumented).
#include <omp.h>
#include <stdio.h>

#include "cpu/team.h"

enum { kThreads = 3, kLen = 512, kSections = 3000 };
static int g_data[kThreads][kLen];

static void part(void *arg, int t, int nt) {
    const int r = *(const int *)arg;
    if (nt != kThreads) return;
    for (int i = 0; i < kLen; i++) g_data[t][i] = r + t + i;
}

int main(void) {
    omp_set_num_threads(kThreads);
    long wrong = 0;
    for (int spin = 1; spin >= 0; spin--) { // helpers that spin, then helpers that sleep at once
        mf_cpu_team_spin(spin);
        for (int r = 0; r < kSections; r++) {
            mf_cpu_team_run(part, &r);
            for (int t = 0; t < kThreads; t++)
                for (int i = 0; i < kLen; i++) wrong += g_data[t][i] != r + t + i;
        }
    }
    printf("team under ThreadSanitizer: %d x 2 sections on %d threads, %ld wrong values\n", kSections, kThreads, wrong);
    return wrong != 0;
}
