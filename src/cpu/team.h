// Internal: the hot team, a persistent set of helper threads for the decode
// step's short parallel sections (the skinny GEMM over a Linear weight and
// decode attention), where OpenMP's PASSIVE threads cost a wake-up each.
//
// A decode step at batch 1 opens ~160 parallel sections of 5-400 us; a
// sleeping thread takes 10-20 us to wake on the dev VM (a futex wake, and in
// a VM the host's rescheduling of the vCPU), so SmolLM2's step lost ~2-3 ms
// of 33 to wake-ups (docs/notes/cpu.md, "Threads"). The team's helpers wait
// for the next section by spinning for a bounded time (kTeamSpinNs, about
// two wake-ups' worth) and then sleep on a futex: within a step the next
// section comes within microseconds and finds them awake; between steps,
// in an idle server, and while sections come far apart (a serving step's
// attention between GEMMs that are OpenMP regions), they sleep at once. They do not spin at all while the
// machine is shared (more threads runnable than the team, seen twice 5 ms
// apart in /proc/loadavg): then for 100 ms they sleep at once, as under
// OMP_WAIT_POLICY=PASSIVE, which was chosen for that case.
#ifndef MF_CPU_TEAM_H
#define MF_CPU_TEAM_H

#include <stdbool.h>

// One section: fn(arg, t, nt) for every t in [0, nt); t = 0 runs on the caller.
typedef void (*mf_team_fn)(void *arg, int t, int nt);

// Run a section on omp_get_max_threads() threads (the caller's setting, as
// an OpenMP region would) and return when every part is done. One caller
// at a time holds the team; another caller at the same moment, a caller
// inside an OpenMP region (nt = 1 there, as in a nested region), a process
// run with OMP_WAIT_POLICY=ACTIVE (OpenMP's threads spin anyway) or with
// OMP_PROC_BIND / OMP_PLACES (OpenMP pins its threads), or a build without
// Linux futexes runs the section as an OpenMP region instead.
void mf_cpu_team_run(mf_team_fn fn, void *arg);

// Measurements and tests: spinning allowed (the default, subject to the
// shared-machine rule above) or never (helpers sleep at once, like PASSIVE).
// Also set from the environment: MINFER_CPU_SPIN=0 turns spinning off.
void mf_cpu_team_spin(bool on);

#endif
