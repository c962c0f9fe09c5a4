// The hot team (team.h): helper threads that spin briefly, then sleep on a
// futex, between the decode step's parallel sections.
#define _GNU_SOURCE
#include "cpu/team.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__linux__) && defined(_OPENMP)
#define TEAM_FUTEX 1
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#else
#define TEAM_FUTEX 0
#endif

#if TEAM_FUTEX
enum { kTeamMax = 64 }; // threads in a section (the caller + 63 helpers)
// Spin budget of one wait: about two wake-ups of a sleeping thread on the dev
// VM (10-20 us each), so that spinning never costs more than twice what
// sleeping would have (the classic spin-then-block bound); the gaps between
// a SmolLM2 decode step's sections are 1-16 us, a tenth of them 16-32.
static const int64_t kTeamSpinNs = 30000;
static const int64_t kTeamQuietNs = 100000000; // no spinning for 100 ms once the machine looks shared
static const int64_t kTeamCheckNs = 5000000;   // the caller looks every 5 ms (check_shared)

static struct {
    pthread_mutex_t lock;        // held by the caller running a section
    _Atomic uint32_t gen;        // futex word: + 1 per section
    _Atomic uint32_t done;       // futex word: helpers finished with the current section
    _Atomic int sleepers;        // helpers asleep on gen
    _Atomic int waiting;         // 1: the caller is asleep on done
    _Atomic int spin_off;        // 1: never spin (mf_cpu_team_spin, MINFER_CPU_SPIN=0)
    bool omp;                    // OpenMP regions instead (ACTIVE policy, or OpenMP binds threads: team_once)
    _Atomic int64_t quiet_until; // CLOCK_MONOTONIC ns: no spinning before it (the machine looked shared)
    _Atomic int close;           // 1: the last gap between two sections was under kTeamSpinNs
    int64_t last_end;            // when the last section ended (ns; the caller's)
    mf_team_fn fn;               // the current section (written before gen is bumped)
    void *arg;
    int nt;                       // its thread count
    int helpers;                  // helper threads started (they live as long as the process)
    bool failed;                  // a helper could not start: no more tries
    _Atomic int fits;             // 1: the caller + the helpers fit the CPUs this process may run on
    uint32_t start_gen[kTeamMax]; // gen when helper t was started: it waits for the next
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *w, uint32_t v) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *w, int n) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static bool spin_ok(void) {
    return atomic_load_explicit(&T.fits, memory_order_relaxed) &&
           !atomic_load_explicit(&T.spin_off, memory_order_relaxed) &&
           now_ns() >= atomic_load_explicit(&T.quiet_until, memory_order_relaxed);
}

// Whether the machine is shared, as the caller sees it every kTeamCheckNs:
// more threads runnable system-wide (/proc/loadavg's fourth field; this one
// and any spinning or working helper included) than the team has, twice in
// a row. Then no spinning for kTeamQuietNs: whoever else is runnable gets
// the CPU a spinning helper would take. (Preemption counts, getrusage's
// ru_nivcsw, were no signal: kernel threads preempt 25-80 times a second
// on the idle dev VM.) Under T.lock.
static void check_shared(int team) {
    static int64_t last_ns;
    static int fd = -2, strikes;
    const int64_t t = now_ns();
    if (t - last_ns < kTeamCheckNs) return;
    last_ns = t;
    if (fd == -2) fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    char buf[128];
    const ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) return;
    buf[n] = 0;
    long running = 0; // "0.50 0.40 0.30 2/79 1234": 2 runnable
    if (sscanf(buf, "%*s %*s %*s %ld/", &running) != 1) return;
    strikes = running > team ? strikes + 1 : 0;
    if (strikes >= 2) atomic_store_explicit(&T.quiet_until, t + kTeamQuietNs, memory_order_relaxed);
}

// Spin at most kTeamSpinNs until (*w == v) == eq; whether that came true.
static bool spin_for(_Atomic uint32_t *w, uint32_t v, bool eq) {
    const int64_t t0 = now_ns();
    for (int i = 1;; i++) {
        if ((atomic_load_explicit(w, memory_order_acquire) == v) == eq) return true;
        if (i % 64 == 0 && now_ns() - t0 > kTeamSpinNs) return false;
        relax();
    }
}

// Until gen != seen (a helper waiting for the next section); returns gen.
// Spins only while sections come close together (the last gap was short):
// a serving step at 32 sequences runs attention on the team between GEMMs
// that are OpenMP regions, and a helper spinning through those would take
// a core from OpenMP's threads.
static uint32_t wait_gen(uint32_t seen) {
    uint32_t g;
    if (atomic_load_explicit(&T.close, memory_order_relaxed) && spin_ok() && spin_for(&T.gen, seen, false))
        return atomic_load_explicit(&T.gen, memory_order_acquire);
    for (;;) { // seq_cst: either the caller sees sleepers > 0 or this sees the new gen
        atomic_fetch_add(&T.sleepers, 1);
        if (atomic_load(&T.gen) == seen) futex_wait(&T.gen, seen);
        atomic_fetch_sub(&T.sleepers, 1);
        if ((g = atomic_load_explicit(&T.gen, memory_order_acquire)) != seen) return g;
    }
}

// Until done == n (the caller waiting for the helpers).
static void wait_done(uint32_t n) {
    if (spin_ok() && spin_for(&T.done, n, true)) return;
    for (;;) { // seq_cst: either a helper sees waiting or this sees its count
        atomic_store(&T.waiting, 1);
        const uint32_t d = atomic_load(&T.done);
        if (d != n) futex_wait(&T.done, d);
        atomic_store(&T.waiting, 0);
        if (atomic_load_explicit(&T.done, memory_order_acquire) == n) return;
    }
}

static void *helper(void *p) {
    const int t = (int)(intptr_t)p;
    uint32_t seen = T.start_gen[t];
    for (;;) {
        seen = wait_gen(seen);
        // Every helper acknowledges every section (those past its nt without
        // running it): the caller changes fn, arg and nt only after all have.
        if (t < T.nt) T.fn(T.arg, t, T.nt);
        atomic_fetch_add(&T.done, 1);
        if (atomic_load(&T.waiting)) futex_wake(&T.done, 1);
    }
    return NULL;
}

// A child of fork() has no helpers: start again. The lock may have been held
// by a thread of the parent's that the child doesn't have (a section
// running while another thread forked): a fresh one.
static void team_forked(void) {
    pthread_mutex_init(&T.lock, NULL);
    T.helpers = 0, T.failed = false;
    atomic_store(&T.sleepers, 0);
    atomic_store(&T.waiting, 0);
}
static pthread_once_t team_init = PTHREAD_ONCE_INIT;
static void team_once(void) {
    pthread_atfork(NULL, NULL, team_forked);
    const char *s = getenv("MINFER_CPU_SPIN"), *w = getenv("OMP_WAIT_POLICY"), *b = getenv("OMP_PROC_BIND");
    if (s && !strcmp(s, "0")) atomic_store(&T.spin_off, 1);
    // ACTIVE: OpenMP's threads spin already. OMP_PROC_BIND / OMP_PLACES:
    // libgomp pins its threads to places; helpers started from the pinned
    // caller would share its one CPU. Either way: OpenMP regions.
    T.omp = (w && !strcasecmp(w, "active")) || (b && strcasecmp(b, "false")) || getenv("OMP_PLACES");
}

// At least n helpers running (under T.lock); false when a thread can't
// start (then no more tries: OpenMP regions from there on). Helpers inherit
// the caller's CPU mask (OpenMP's binding is excluded in team_once).
static bool grow(int n) {
    if (T.helpers >= n) return true;
    cpu_set_t cs;
    if (T.failed || sched_getaffinity(0, sizeof cs, &cs) != 0) return false;
    pthread_attr_t at;
    if (pthread_attr_init(&at) != 0) return false;
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    sigset_t all, old; // helpers take no signals: they stay the process's main thread's
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (T.helpers < n) {
        const int t = T.helpers + 1;
        pthread_t th;
        T.start_gen[t] = atomic_load(&T.gen);
        if (pthread_create(&th, &at, helper, (void *)(intptr_t)t) != 0) {
            T.failed = true;
            break;
        }
        pthread_setname_np(th, "minfer-team");
        T.helpers = t;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
    atomic_store(&T.fits, T.helpers + 1 <= CPU_COUNT(&cs));
    return T.helpers >= n;
}

void mf_cpu_team_spin(bool on) {
    pthread_once(&team_init, team_once);
    atomic_store(&T.spin_off, !on);
}

void mf_cpu_team_run(mf_team_fn fn, void *arg) {
    pthread_once(&team_init, team_once);
    int nt = omp_get_max_threads();
    if (nt > kTeamMax) nt = kTeamMax;
    if (nt <= 1 || omp_in_parallel()) { // an OpenMP region here would be one thread (no nesting)
        fn(arg, 0, 1);
        return;
    }
    if (!T.omp && pthread_mutex_trylock(&T.lock) == 0) {
        if (grow(nt - 1)) {
            atomic_store_explicit(&T.close, now_ns() - T.last_end < kTeamSpinNs, memory_order_relaxed);
            T.fn = fn, T.arg = arg, T.nt = nt;
            atomic_store(&T.done, 0);
            atomic_fetch_add(&T.gen, 1); // seq_cst: publishes fn, arg, nt
            if (atomic_load(&T.sleepers) > 0) futex_wake(&T.gen, INT_MAX);
            fn(arg, 0, nt);
            wait_done((uint32_t)T.helpers);
            check_shared(T.helpers + 1); // spinning helpers past nt count as runnable too
            T.last_end = now_ns();
            pthread_mutex_unlock(&T.lock);
            return;
        }
        pthread_mutex_unlock(&T.lock);
    }
#pragma omp parallel num_threads(nt)
    fn(arg, omp_get_thread_num(), omp_get_num_threads());
}

#else // no futexes (or no OpenMP): an OpenMP region, or the caller alone

void mf_cpu_team_spin(bool on) { (void)on; }

void mf_cpu_team_run(mf_team_fn fn, void *arg) {
#ifdef _OPENMP
    if (omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
        fn(arg, omp_get_thread_num(), omp_get_num_threads());
        return;
    }
#endif
    fn(arg, 0, 1);
}
#endif
