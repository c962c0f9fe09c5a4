// CPU emulator: fibers, one per kernel thread. A small x86-64 context switch
// (the callee-saved registers; not MXCSR / the x87 control word, which kernel
// code never changes and whose reload stalls the switch), stacks with a guard
// page, and the annotations that AddressSanitizer and ThreadSanitizer need to
// follow stack switches.
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "internal.h"

#ifdef MF_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the emulator's fiber switch is written for x86-64"
#endif

// The builtins of kernel code (cuda_runtime.h): the running fiber's coordinates.
__thread uint3 threadIdx __attribute__((tls_model("initial-exec")));
__thread uint3 blockIdx __attribute__((tls_model("initial-exec")));
__thread dim3 blockDim __attribute__((tls_model("initial-exec")));
__thread dim3 gridDim __attribute__((tls_model("initial-exec")));

extern "C" void mf_emu_ctx_switch(void **save_sp, void *to_sp);
extern "C" char mf_emu_ctx_entry[];

// mf_emu_ctx_switch(save, to): push the callee-saved state, store the stack
// pointer in *save, load `to`, pop its state, return into it.
// mf_emu_ctx_entry: a new fiber's first return lands here: r12 = its Fiber,
// r13 = fiber_main; the stack is 16-byte aligned before the call. When the
// kernel thread is done, fiber_main returns the stack pointer of the context
// to resume, and the entry switches to it: no C++ frame is left behind on the
// finished fiber's stack (AddressSanitizer's shadow of it stays clean for the
// next thread that uses the stack).
asm(R"(
    .text
    .globl mf_emu_ctx_switch
    .type mf_emu_ctx_switch, @function
mf_emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mf_emu_ctx_switch, .-mf_emu_ctx_switch
    .globl mf_emu_ctx_entry
    .type mf_emu_ctx_entry, @function
mf_emu_ctx_entry:
    movq %r12, %rdi
    callq *%r13
    movq %rax, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mf_emu_ctx_entry, .-mf_emu_ctx_entry
)");

namespace mf_emu {

Fiber *fiber_exit(Fiber *f); // exec.cpp: the thread's end; returns the fiber to run next (NULL: the scheduler)

namespace {

constexpr size_t kGuard = 4096;

// Guard pages of every stack, for the fault handler's message.
struct GuardRange {
    uintptr_t lo, hi;
};
GuardRange g_guards[1 << 16];
std::atomic<int> g_nguards{0};

void *fiber_main(Fiber *f) {
#ifdef MF_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    MF_TSAN_ACQUIRE(&worker().sync_start); // the launch's setup happens before every thread
    f->grp->launch->body->run();
    Fiber *to = fiber_exit(f);
    // The final switch: mf_emu_ctx_entry loads the returned stack pointer.
    Worker &w = worker();
    cur = to;
    tls.view = to ? &to->v : nullptr;
    if (to) ::threadIdx = to->v.tid, ::blockIdx = to->v.bid, ::blockDim = to->v.bdim, ::gridDim = to->v.gdim;
#ifdef MF_EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, to ? to->stack : w.main_stack_bottom, to ? to->stack_size : w.main_stack_size);
#endif
#ifdef MF_EMU_TSAN
    __tsan_switch_to_fiber(to ? to->tsan : w.tsan_main, 1 /* __tsan_switch_to_fiber_no_sync */);
#endif
    return to ? to->sp : w.main_sp;
}

// Switches the OS thread from the current context to `to_sp` (a fiber, or the
// scheduler when to == NULL).
inline void do_switch(Worker &w, Fiber *from, Fiber *to) {
    void **save = from ? &from->sp : &w.main_sp;
    void *to_sp = to ? to->sp : w.main_sp;
    cur = to;
    tls.view = to ? &to->v : nullptr;
    if (to) ::threadIdx = to->v.tid, ::blockIdx = to->v.bid, ::blockDim = to->v.bdim, ::gridDim = to->v.gdim;
#ifdef MF_EMU_ASAN
    const void *bottom = to ? to->stack : w.main_stack_bottom;
    const size_t size = to ? to->stack_size : w.main_stack_size;
    void **fake = from ? (from->state == kFiberDone ? nullptr : &from->asan_fake) : &w.asan_main_fake;
    __sanitizer_start_switch_fiber(fake, bottom, size);
#endif
#ifdef MF_EMU_TSAN
    __tsan_switch_to_fiber(to ? to->tsan : w.tsan_main, 1 /* __tsan_switch_to_fiber_no_sync */);
#endif
    mf_emu_ctx_switch(save, to_sp);
    // Resumed (as `from`).
#ifdef MF_EMU_ASAN
    __sanitizer_finish_switch_fiber(from ? from->asan_fake : w.asan_main_fake, nullptr, nullptr);
#endif
}

} // namespace

void fiber_prepare(Worker &w, Fiber &f, size_t stack_bytes) {
    if (!f.stack || f.stack_size != stack_bytes) {
        if (f.stack) munmap(f.stack - kGuard, f.stack_size + kGuard);
        void *m = mmap(nullptr, stack_bytes + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "mf_emu: cannot map a %zu-byte fiber stack\n", stack_bytes);
            abort();
        }
        mprotect(m, kGuard, PROT_NONE);
        f.stack = static_cast<char *>(m) + kGuard;
        f.stack_size = stack_bytes;
        const int i = g_nguards.fetch_add(1);
        if (i < (int)(sizeof g_guards / sizeof g_guards[0]))
            g_guards[i] = GuardRange{(uintptr_t)m, (uintptr_t)m + kGuard};
#ifdef MF_EMU_TSAN
        f.tsan = __tsan_create_fiber(0);
#endif
    }
    // The first switch into the fiber pops this frame and returns into
    // mf_emu_ctx_entry (see the layout pushed by mf_emu_ctx_switch).
    // After the 7 pops the stack pointer is top: 16-byte aligned before the call.
    uintptr_t top = ((uintptr_t)(f.stack + f.stack_size) & ~(uintptr_t)15) - 128;
    void **sp = reinterpret_cast<void **>(top - 56);
    sp[0] = nullptr;                                      // r15
    sp[1] = nullptr;                                      // r14
    sp[2] = reinterpret_cast<void *>(&fiber_main);        // r13
    sp[3] = &f;                                           // r12
    sp[4] = nullptr;                                      // rbx
    sp[5] = nullptr;                                      // rbp
    sp[6] = reinterpret_cast<void *>(mf_emu_ctx_entry);   // return address
    f.sp = sp;
    f.asan_fake = nullptr;
    (void)w;
}

void fiber_enter(Worker &w, Fiber *to) { do_switch(w, nullptr, to); }

void fiber_switch(Fiber *from, Fiber *to) { do_switch(worker(), from, to); }

void fiber_abandoned(Fiber &f) {
#ifdef MF_EMU_ASAN
    // Frames that never returned leave their redzones poisoned.
    ASAN_UNPOISON_MEMORY_REGION(f.stack, f.stack_size);
#endif
    (void)f;
}

bool stack_guard_hit(uintptr_t a) {
    const int n = g_nguards.load();
    for (int i = 0; i < n && i < (int)(sizeof g_guards / sizeof g_guards[0]); i++)
        if (a >= g_guards[i].lo && a < g_guards[i].hi) return true;
    return false;
}

void worker_init_stack_bounds(Worker &w) {
#ifdef MF_EMU_ASAN
    pthread_attr_t attr;
    void *addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &addr, &size);
        pthread_attr_destroy(&attr);
    }
    w.main_stack_bottom = addr, w.main_stack_size = size;
#endif
#ifdef MF_EMU_TSAN
    w.tsan_main = __tsan_get_current_fiber();
#endif
    (void)w;
}

} // namespace mf_emu
