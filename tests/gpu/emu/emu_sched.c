/* zerotrain tests: the CUDA emulation's kernel scheduler (see cuda_emu.h). A launch runs its
 * blocks one after another on the calling thread; the threads of a block are fibers run
 * round-robin, each until it exits or waits at a barrier (__syncthreads, or a warp's shuffle).
 * When none can run, the barriers every participant has reached are released; a barrier that
 * can never be released is an error in the kernel, reported with its name and the block, and
 * the process stops (a test would otherwise hang or pass on garbage). Fibers switch with a few
 * instructions on x86-64 (millions of switches per test: ucontext's system call per switch
 * would dominate) and with ucontext elsewhere; AddressSanitizer is told about every switch.
 *
 * The order in which the runnable threads of a block run, each round between barriers, is the
 * schedule (ZT_CUDA_EMU_SCHEDULE, or zt_emu_schedule): "forward" (thread 0 first), "reverse",
 * or "random[:SEED]", a fresh permutation every round from a generator seeded with SEED
 * (default 1), the default. A GPU promises no order between the barriers either, so a kernel
 * whose result depends on it has a race: a thread reading shared or global memory that
 * another writes without a barrier between. A kernel free of races computes the same bits under
 * every schedule; tests run the kernels under several and compare with the CPU. The schedule
 * also picks which warps go on when several wait at warp barriers (shuffles, __syncwarp, the
 * warp matrix functions), so that warps drift apart between block barriers as on the GPU, and
 * when an asynchronous copy to shared memory lands (see zt_emu_cp_async). */
#define _GNU_SOURCE
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "emu_int.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#define EMU_MAX_THREADS 1024
#define EMU_STACK ((size_t)64 << 10)
#define EMU_CP_MAX 64 /* asynchronous copies a thread may have pending */

typedef enum { ORDER_FORWARD, ORDER_REVERSE, ORDER_RANDOM } order_kind;

__thread uint3 zt_emu_thread_idx, zt_emu_block_idx;
__thread dim3 zt_emu_block_dim, zt_emu_grid_dim;

typedef enum { F_RUN, F_SYNC, F_SHFL, F_DONE } fiber_state;

/* an asynchronous copy to shared memory, its source read */
struct emu_cp {
    void *dst;
    unsigned char data[16];
    unsigned size, group;
};

typedef struct fiber {
#if defined(__x86_64__)
    void *sp; /* saved stack pointer while switched out */
    void *fake; /* AddressSanitizer's fake stack while switched out */
#else
    ucontext_t uc;
#endif
    uint3 tid;
    fiber_state st;
    unsigned mask; /* F_SHFL: the shuffle's mask, source lane and value */
    int src;
    uint64_t bits, result;
    /* asynchronous copies (cp.async) not yet landed: each in the group it was issued into;
     * group `groups` is the one still open (not committed) */
    struct emu_cp *cp; /* EMU_CP_MAX */
    int ncp;
    unsigned groups;
} fiber;

typedef struct sched {
#if defined(__x86_64__)
    void *main_sp, *main_fake;
    const void *main_bottom; /* the scheduler's stack, for AddressSanitizer */
    size_t main_size;
#else
    ucontext_t main;
#endif
    fiber *f;     /* EMU_MAX_THREADS */
    char *stacks; /* EMU_MAX_THREADS * EMU_STACK */
    int *ord;     /* EMU_MAX_THREADS: the order of the round that runs */
    order_kind order;
    uint64_t rng; /* ORDER_RANDOM's generator (xorshift64*) */
    int nt;       /* threads of the running block */
    int cur;      /* fiber running, -1 when the scheduler runs */
    const char *kernel;
    void (*fn)(void *);
    void *arg;
} sched;

static __thread sched *S;

static void emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void emu_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda-emu: kernel %s, block (%u,%u,%u): ", S && S->kernel ? S->kernel : "?",
            zt_emu_block_idx.x, zt_emu_block_idx.y, zt_emu_block_idx.z);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* Parses a schedule ("forward", "reverse", "random" or "random:SEED"); false if malformed. */
static bool parse_schedule(const char *v, order_kind *kind, uint64_t *seed)
{
    *seed = 1;
    if (strcmp(v, "forward") == 0) {
        *kind = ORDER_FORWARD;
        return true;
    }
    if (strcmp(v, "reverse") == 0) {
        *kind = ORDER_REVERSE;
        return true;
    }
    if (strncmp(v, "random", 6) != 0 || (v[6] && v[6] != ':'))
        return false;
    *kind = ORDER_RANDOM;
    if (!v[6])
        return true;
    char *end;
    unsigned long long n = strtoull(v + 7, &end, 10);
    if (!isdigit((unsigned char)v[7]) || *end)
        return false;
    *seed = n;
    return true;
}

static void set_schedule(sched *s, const char *spec, const char *origin)
{
    uint64_t seed;
    if (!parse_schedule(spec, &s->order, &seed)) {
        fprintf(stderr, "cuda-emu: %s \"%s\" is not forward, reverse, random or random:SEED\n",
                origin, spec);
        abort();
    }
    s->rng = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull; /* never 0 */
    if (!s->rng)
        s->rng = 1;
}

static sched *sched_get(void)
{
    if (S)
        return S;
    sched *s = calloc(1, sizeof(*s));
    if (!s)
        emu_fail("out of host memory for the scheduler");
    s->f = calloc(EMU_MAX_THREADS, sizeof(*s->f));
    s->ord = calloc(EMU_MAX_THREADS, sizeof(*s->ord));
    struct emu_cp *cp = calloc((size_t)EMU_MAX_THREADS * EMU_CP_MAX, sizeof(*cp));
    if (!cp) emu_fail("out of host memory for the asynchronous copies");
    for (int i = 0; s->f && i < EMU_MAX_THREADS; i++)
        s->f[i].cp = cp + (size_t)i * EMU_CP_MAX;
    void *st = mmap(NULL, EMU_MAX_THREADS * EMU_STACK, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!s->f || !s->ord || st == MAP_FAILED)
        emu_fail("out of host memory for %d fiber stacks", EMU_MAX_THREADS);
    s->stacks = st;
    s->cur = -1;
    const char *v = getenv("ZT_CUDA_EMU_SCHEDULE");
    set_schedule(s, v && *v ? v : "random", "ZT_CUDA_EMU_SCHEDULE");
    S = s;
    return s;
}

void zt_emu_schedule(const char *spec)
{
    set_schedule(sched_get(), spec, "zt_emu_schedule");
}

/* ORDER_RANDOM's next 32 random bits */
static uint64_t sched_rand(sched *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (s->rng * 0x2545f4914f6cdd1dull) >> 32;
}

/* s->ord: this round's order of the block's threads */
static void round_order(sched *s)
{
    int n = s->nt;
    for (int k = 0; k < n; k++)
        s->ord[k] = s->order == ORDER_REVERSE ? n - 1 - k : k;
    if (s->order != ORDER_RANDOM)
        return;
    for (int k = n - 1; k > 0; k--) { /* Fisher-Yates */
        uint64_t r = sched_rand(s);
        int j = (int)(r % (uint64_t)(k + 1));
        int t = s->ord[k];
        s->ord[k] = s->ord[j];
        s->ord[j] = t;
    }
}

/* ---- switching: fiber_init, to_fiber (scheduler -> fiber), to_sched (fiber -> scheduler) */

static void fiber_main(void);

#if defined(__x86_64__)
/* Pushes rbp, rbx, r12-r15 and the SSE and x87 control words, stores the stack pointer in
 * *save, continues on stack pointer `load` by undoing the same (System V: every other
 * register is the caller's to save). */
void zt_emu_switch(void **save, void *load);
__asm__(".pushsection .text\n"
        ".globl zt_emu_switch\n"
        ".hidden zt_emu_switch\n"
        ".type zt_emu_switch, @function\n"
        "zt_emu_switch:\n"
        "\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
        "\tsubq $8, %rsp\n\tstmxcsr (%rsp)\n\tfnstcw 4(%rsp)\n"
        "\tmovq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n"
        "\tldmxcsr (%rsp)\n\tfldcw 4(%rsp)\n\taddq $8, %rsp\n"
        "\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
        "\tret\n"
        ".size zt_emu_switch, .-zt_emu_switch\n"
        ".popsection\n");

/* A stack that zt_emu_switch "returns" into fiber_main from: control words, six zero
 * registers, then fiber_main's address where its entry sees the stack pointer at 8 mod 16. */
static void fiber_init(sched *s, fiber *f, int i)
{
    char *top = s->stacks + (size_t)(i + 1) * EMU_STACK;
    uint64_t *sp = (uint64_t *)(void *)(top - 72);
    unsigned mxcsr = __builtin_ia32_stmxcsr();
    uint16_t fpucw;
    __asm__ volatile("fnstcw %0" : "=m"(fpucw));
    memset(sp, 0, 72);
    memcpy(sp, &mxcsr, sizeof(mxcsr));
    memcpy((char *)sp + 4, &fpucw, sizeof(fpucw));
    sp[7] = (uint64_t)(uintptr_t)fiber_main;
    f->sp = sp;
    f->fake = NULL;
}

static void to_fiber(sched *s, fiber *f, int i)
{
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&s->main_fake, s->stacks + (size_t)i * EMU_STACK, EMU_STACK);
#else
    (void)i;
#endif
    zt_emu_switch(&s->main_sp, f->sp);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(s->main_fake, NULL, NULL);
#endif
}

/* Back to the scheduler; a dying fiber is never resumed. */
static void to_sched(sched *s, fiber *f, bool dying)
{
#if EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? NULL : &f->fake, s->main_bottom, s->main_size);
#else
    (void)dying;
#endif
    zt_emu_switch(&f->sp, s->main_sp);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake, &s->main_bottom, &s->main_size);
#endif
}

static void fiber_entered(sched *s)
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &s->main_bottom, &s->main_size);
#else
    (void)s;
#endif
}
#else
static void fiber_init(sched *s, fiber *f, int i)
{
    if (getcontext(&f->uc) != 0)
        emu_fail("getcontext failed");
    f->uc.uc_stack.ss_sp = s->stacks + (size_t)i * EMU_STACK;
    f->uc.uc_stack.ss_size = EMU_STACK;
    f->uc.uc_link = NULL;
    makecontext(&f->uc, fiber_main, 0);
}

static void to_fiber(sched *s, fiber *f, int i)
{
    (void)i;
    swapcontext(&s->main, &f->uc);
}

static void to_sched(sched *s, fiber *f, bool dying)
{
    (void)dying;
    swapcontext(&f->uc, &s->main);
}

static void fiber_entered(sched *s)
{
    (void)s;
}
#endif

static void fiber_main(void)
{
    sched *s = S;
    fiber_entered(s);
    s->fn(s->arg);
    fiber *f = &s->f[s->cur];
    if (f->ncp)
        emu_fail("thread %d exits with %d asynchronous copies to shared memory not waited for "
                 "(__pipeline_wait_prior)",
                 s->cur, f->ncp);
    f->st = F_DONE;
    to_sched(s, f, true); /* never resumed */
    abort();
}

/* Parks the running fiber in state st and returns to the scheduler. */
static fiber *fiber_yield(fiber_state st, const char *what)
{
    sched *s = S;
    if (!s || s->cur < 0) {
        fprintf(stderr, "cuda-emu: %s called outside a kernel\n", what);
        abort();
    }
    fiber *f = &s->f[s->cur];
    f->st = st;
    to_sched(s, f, false);
    return f;
}

void zt_emu_syncthreads(void)
{
    fiber_yield(F_SYNC, "__syncthreads");
}

uint64_t zt_emu_shfl(unsigned mask, uint64_t bits, int src_lane)
{
    sched *s = S;
    if (s && s->cur >= 0) {
        fiber *f = &s->f[s->cur];
        f->mask = mask;
        f->bits = bits;
        f->src = src_lane;
    }
    return fiber_yield(F_SHFL, "__shfl_xor_sync")->result;
}

/* ---- asynchronous copies to shared memory (cuda_pipeline_primitives.h, cp.async) ----
 * The GPU lands a copy any time between its issue and its thread's wait for its group; the
 * schedule picks which end: at once under "forward", at the wait under "reverse", either (a
 * coin per copy) under "random". A thread that reads the destination before the wait (its own
 * copy, or another thread's without the wait and a barrier between) then reads what was there,
 * and a copy issued into memory that other threads still read overwrites it early: both races
 * show. The source is read at issue time. */

static fiber *cp_fiber(const char *what)
{
    sched *s = S;
    if (!s || s->cur < 0) {
        fprintf(stderr, "cuda-emu: %s called outside a kernel\n", what);
        abort();
    }
    return &s->f[s->cur];
}

void zt_emu_cp_async(void *dst, const void *src, size_t size, size_t zfill)
{
    fiber *f = cp_fiber("__pipeline_memcpy_async");
    if ((size != 4 && size != 8 && size != 16) || zfill > size)
        emu_fail("__pipeline_memcpy_async of %zu bytes, %zu zero-filled: the size must be 4, 8 "
                 "or 16 and the zero fill at most the size",
                 size, zfill);
    if ((uintptr_t)dst % size || (uintptr_t)src % size)
        emu_fail("__pipeline_memcpy_async of %zu bytes from %p to %p: both must be aligned to "
                 "the size",
                 size, src, dst);
    if (f->ncp == EMU_CP_MAX)
        emu_fail("more than %d asynchronous copies pending in one thread", EMU_CP_MAX);
    struct emu_cp *c = &f->cp[f->ncp++];
    c->dst = dst;
    c->size = (unsigned)size;
    c->group = f->groups;
    memset(c->data, 0, sizeof(c->data));
    memcpy(c->data, src, size - zfill);
    sched *s = S;
    if (s->order == ORDER_FORWARD || (s->order == ORDER_RANDOM && sched_rand(s) % 2))
        memcpy(dst, c->data, size); /* early; the wait writes the same again */
}

void zt_emu_cp_commit(void)
{
    cp_fiber("__pipeline_commit")->groups++;
}

void zt_emu_cp_wait(size_t prior)
{
    fiber *f = cp_fiber("__pipeline_wait_prior");
    int k = 0;
    for (int i = 0; i < f->ncp; i++) { /* committed groups older than the last `prior` land */
        struct emu_cp *c = &f->cp[i];
        if (c->group < f->groups && f->groups - c->group > prior)
            memcpy(c->dst, c->data, c->size);
        else
            f->cp[k++] = *c;
    }
    f->ncp = k;
}

static const char *state_name(fiber_state st)
{
    switch (st) {
    case F_RUN: return "runs";
    case F_SYNC: return "waits at __syncthreads";
    case F_SHFL: return "waits in a shuffle";
    case F_DONE: return "has exited";
    }
    return "?";
}

/* Releases the barriers that every participant has reached; false when the block is done.
 * Stops the process on a barrier that can never be released. */
static bool resolve(sched *s)
{
    int done = 0, shfl = 0;
    for (int i = 0; i < s->nt; i++) {
        done += s->f[i].st == F_DONE;
        shfl += s->f[i].st == F_SHFL;
    }
    if (done == s->nt)
        return false;
    if (shfl) {
        /* the warps whose lanes all wait in a shuffle; the schedule releases some of them (the
         * first under "forward", the last under "reverse", each with even odds and at least one
         * under "random"), so that one warp may run ahead of another by any number of warp
         * barriers, as on the GPU: a warp reading what another writes without __syncthreads
         * between sees it too early or too late */
        int ready[EMU_MAX_THREADS / 32], nready = 0;
        for (int lo = 0; lo < s->nt; lo += 32) {
            int hi = lo + 32 < s->nt ? lo + 32 : s->nt, n = 0;
            for (int i = lo; i < hi; i++)
                n += s->f[i].st == F_SHFL;
            if (!n)
                continue;
            if (hi - lo < 32)
                emu_fail("warp %d has %d threads (%d in the block): a full-mask shuffle needs 32",
                         lo / 32, hi - lo, s->nt);
            for (int i = lo; i < hi; i++) {
                if (s->f[i].st != F_SHFL)
                    emu_fail("lane %d of warp %d %s while other lanes wait in a full-mask "
                             "shuffle (undefined on the GPU: every lane of the mask must "
                             "reach it)",
                             i - lo, lo / 32, state_name(s->f[i].st));
                if (s->f[i].mask != 0xffffffffu)
                    emu_fail("shuffle mask %08x: the emulation knows full-warp shuffles only",
                             s->f[i].mask);
            }
            ready[nready++] = lo;
        }
        bool any = false;
        for (int k = 0; k < nready; k++) {
            bool go = s->order == ORDER_FORWARD   ? k == 0
                      : s->order == ORDER_REVERSE ? k == nready - 1
                                                  : sched_rand(s) % 2 == 1;
            if (!go && !(k == nready - 1 && !any)) continue;
            any = true;
            int lo = ready[k], hi = lo + 32;
            for (int i = lo; i < hi; i++)
                s->f[i].result = s->f[lo + s->f[i].src].bits;
            for (int i = lo; i < hi; i++)
                s->f[i].st = F_RUN;
        }
        return true;
    }
    if (done)
        emu_fail("%d of %d threads exited while the others wait at __syncthreads (undefined on "
                 "the GPU: the whole block must reach the barrier)",
                 done, s->nt);
    for (int i = 0; i < s->nt; i++)
        s->f[i].st = F_RUN;
    return true;
}

static void run_block(sched *s, dim3 block)
{
    for (int i = 0; i < s->nt; i++) {
        fiber *f = &s->f[i];
        fiber_init(s, f, i);
        f->st = F_RUN;
        f->ncp = 0;
        f->groups = 0;
        f->tid.x = (unsigned)i % block.x;
        f->tid.y = (unsigned)i / block.x % block.y;
        f->tid.z = (unsigned)i / (block.x * block.y);
    }
    do {
        round_order(s);
        for (int k = 0; k < s->nt; k++) {
            int i = s->ord[k];
            if (s->f[i].st != F_RUN)
                continue;
            s->cur = i;
            zt_emu_thread_idx = s->f[i].tid;
            to_fiber(s, &s->f[i], i);
        }
        s->cur = -1;
    } while (resolve(s));
}

void zt_emu_launch(const char *kernel, dim3 grid, dim3 block, void (*fn)(void *), void *arg)
{
    sched *s = sched_get();
    if (s->cur >= 0)
        emu_fail("kernel %s launched from inside a kernel", kernel);
    size_t nt = (size_t)block.x * block.y * block.z;
    if (nt == 0 || nt > EMU_MAX_THREADS || block.z > 64 || grid.x == 0 || grid.x > INT_MAX ||
        grid.y == 0 || grid.y > 65535 || grid.z == 0 || grid.z > 65535) {
        zt_emu_record_error(cudaErrorInvalidConfiguration);
        return;
    }
    zt_emu_count_launch(kernel);
    s->kernel = kernel;
    s->fn = fn;
    s->arg = arg;
    s->nt = (int)nt;
    zt_emu_block_dim = block;
    zt_emu_grid_dim = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                zt_emu_block_idx.x = x;
                zt_emu_block_idx.y = y;
                zt_emu_block_idx.z = z;
                run_block(s, block);
            }
    s->kernel = NULL;
}
