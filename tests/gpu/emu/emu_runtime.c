/* zerotrain tests: the CUDA emulation's runtime, the part of the CUDA runtime API that
 * kernels/cuda/ and engine/comm/comm_nccl.c call, on the CPU: emulated GPUs (ordinal 0, or
 * ZT_CUDA_EMU_DEVICES of them) whose memory is the host's. Kernels, copies and memsets complete
 * before they return; the one asynchronous kind of work is an emulated NCCL collective
 * (emu_nccl.c), which completes on its communicator's thread: a stream remembers its latest such
 * operation, an event recorded on the stream stands for it, and anything queued behind it on the
 * stream (or told to wait for the event) blocks the host until it is done — the order a GPU keeps,
 * with the host waiting where the GPU would. ZT_CUDA_EMU_MEMORY_MIB caps the device memory a
 * process may hold (default: the host's), as a GPU's size does. Device allocations are 256-byte
 * aligned, filled with 0xff bytes (NaN as floats, so that a kernel reading memory nobody wrote
 * shows up) and carry a header that cudaFree checks. Prototypes come from the toolkit's
 * cuda_runtime.h, so a mismatch does not compile. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu_int.h"

#define EMU_ALIGN 256
#define EMU_MAGIC_DEV 0x7a74646576ULL    /* "ztdev" */
#define EMU_MAGIC_HOST 0x7a74686f7374ULL /* "zthost" */
#define EMU_MAGIC_STREAM 0x7a747374U
#define EMU_MAGIC_EVENT 0x7a746576U

/* One asynchronous operation. References: its issuer's until zt_emu_op_done, the stream's
 * while it is the stream's latest, each event's recorded on it. */
struct zt_emu_op {
    atomic_int refs;
    atomic_int done;
    double t_done; /* monotonic seconds, written before done is set */
};

struct CUstream_st {
    unsigned magic;
    zt_emu_op *last; /* latest asynchronous operation, NULL when none is pending */
};

struct CUevent_st {
    unsigned magic;
    unsigned flags;
    bool recorded;
    zt_emu_op *op; /* what the event waits for, NULL: complete at t */
    double t;      /* when it was recorded (monotonic seconds) */
};

/* Streams and events are used from several host threads (the engine's, NCCL's): one lock. */
static pthread_mutex_t async_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct emu_block {
    uint64_t magic;
    size_t bytes;
} emu_block;

static __thread cudaError_t last_error = cudaSuccess;

/* Device bytes held now and at most (as asked for, without the allocation's rounding). */
static atomic_size_t dev_cur, dev_peak;

void zt_emu_record_error(cudaError_t e)
{
    last_error = e;
}

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    default:
        return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotReady:
        return "device not ready";
    default:
        return "unknown error";
    }
}

/* ---- the device ---- */

static size_t host_bytes(int name)
{
    long pages = sysconf(name), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : (size_t)1 << 34;
}

/* ZT_CUDA_EMU_MEMORY_MIB (1 to 2^30): the device memory of the process's emulated GPUs
 * together, in MiB; 0 when unset (the host's memory). */
static size_t memory_cap(void)
{
    static size_t cap = SIZE_MAX;
    if (cap != SIZE_MAX) return cap;
    const char *v = getenv("ZT_CUDA_EMU_MEMORY_MIB");
    char *end;
    long long mib = v && *v ? strtoll(v, &end, 10) : 0;
    if (v && *v && (*end || mib < 1 || mib > (1LL << 30))) {
        fprintf(stderr,
                "CUDA emulation: ZT_CUDA_EMU_MEMORY_MIB=\"%s\" is not a size in MiB "
                "from 1 to 2^30\n",
                v);
        abort();
    }
    cap = (size_t)mib << 20;
    return cap;
}

static size_t device_total(void)
{
    size_t cap = memory_cap();
    return cap ? cap : host_bytes(_SC_PHYS_PAGES);
}

/* ZT_CUDA_EMU_DEVICES (1 to 64, default 1): how many GPUs each process sees, so that ranks
 * of one node can each have their own (each process's emulated GPUs are its own memory). */
static int device_count(void)
{
    const char *v = getenv("ZT_CUDA_EMU_DEVICES");
    char *end;
    long n = v && *v ? strtol(v, &end, 10) : 1;
    if (v && *v && (*end || n < 1 || n > 64)) {
        fprintf(stderr, "CUDA emulation: ZT_CUDA_EMU_DEVICES=\"%s\" is not a count from 1 to 64\n",
                v);
        abort();
    }
    return (int)n;
}

static __thread int current_device;

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count) return fail(cudaErrorInvalidValue);
    *count = device_count();
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device) return fail(cudaErrorInvalidValue);
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop) return fail(cudaErrorInvalidValue);
    if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "zerotrain CUDA emulation on the CPU");
    prop->totalGlobalMem = device_total();
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *avail, size_t *total)
{
    if (!avail || !total) return fail(cudaErrorInvalidValue);
    size_t cap = memory_cap(), cur = atomic_load(&dev_cur);
    *avail = cap ? (cur < cap ? cap - cur : 0) : host_bytes(_SC_AVPHYS_PAGES);
    *total = device_total();
    return cudaSuccess;
}

/* ---- asynchronous operations, streams, events ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void op_release(zt_emu_op *op)
{
    if (op && atomic_fetch_sub(&op->refs, 1) == 1) free(op);
}

static zt_emu_op *op_ref(zt_emu_op *op)
{
    if (op) atomic_fetch_add(&op->refs, 1);
    return op;
}

static bool op_done(const zt_emu_op *op)
{
    return !op || atomic_load_explicit(&op->done, memory_order_acquire);
}

void zt_emu_pause(unsigned *spins)
{
    if (++*spins < 100) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* The host waits for the GPU: for an operation that ends on another thread. */
static void op_wait(const zt_emu_op *op)
{
    for (unsigned spins = 0; !op_done(op); zt_emu_pause(&spins)) {
    }
}

zt_emu_op *zt_emu_op_enqueue(cudaStream_t s)
{
    zt_emu_op *op = calloc(1, sizeof(*op));
    if (!op) return NULL;
    atomic_init(&op->refs, s ? 2 : 1);
    atomic_init(&op->done, 0);
    if (s) {
        /* it starts after everything before it on s: the rest has run already, and an earlier
         * collective of the same communicator runs before it on that communicator's thread
         * (collectives of two communicators on one stream are not ordered: not emulated) */
        pthread_mutex_lock(&async_lock);
        op_release(s->last);
        s->last = op;
        pthread_mutex_unlock(&async_lock);
    }
    return op;
}

void zt_emu_op_done(zt_emu_op *op)
{
    op->t_done = now_s();
    atomic_store_explicit(&op->done, 1, memory_order_release);
    op_release(op);
}

/* The stream's pending operation, referenced (NULL when none). */
static zt_emu_op *stream_pending(cudaStream_t s)
{
    if (!s) return NULL;
    pthread_mutex_lock(&async_lock);
    zt_emu_op *op = op_done(s->last) ? NULL : op_ref(s->last);
    pthread_mutex_unlock(&async_lock);
    return op;
}

void zt_emu_stream_wait(cudaStream_t s)
{
    zt_emu_op *op = stream_pending(s);
    op_wait(op);
    op_release(op);
}

static bool stream_ok(cudaStream_t s)
{
    return s == NULL || s->magic == EMU_MAGIC_STREAM;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    if (!s) return fail(cudaErrorInvalidValue);
    *s = calloc(1, sizeof(**s));
    if (!*s) return fail(cudaErrorMemoryAllocation);
    (*s)->magic = EMU_MAGIC_STREAM;
    return cudaSuccess;
}

/* As on the GPU, work still queued completes after the stream is gone. */
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s || s->magic != EMU_MAGIC_STREAM) return fail(cudaErrorInvalidResourceHandle);
    s->magic = 0;
    op_release(s->last);
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    zt_emu_count(ZT_EMU_STREAM_SYNC);
    zt_emu_stream_wait(s);
    return cudaSuccess;
}

static bool event_ok(cudaEvent_t e)
{
    return e && e->magic == EMU_MAGIC_EVENT;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    if (!e || (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming)))
        return fail(cudaErrorInvalidValue);
    *e = calloc(1, sizeof(**e));
    if (!*e) return fail(cudaErrorMemoryAllocation);
    (*e)->magic = EMU_MAGIC_EVENT;
    (*e)->flags = flags;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!event_ok(e)) return fail(cudaErrorInvalidResourceHandle);
    e->magic = 0;
    op_release(e->op);
    free(e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!event_ok(e) || !stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    zt_emu_op *op = stream_pending(s);
    pthread_mutex_lock(&async_lock);
    op_release(e->op);
    e->op = op;
    e->t = now_s();
    e->recorded = true;
    pthread_mutex_unlock(&async_lock);
    return cudaSuccess;
}

/* The event's operation (referenced) or NULL when it is complete. */
static zt_emu_op *event_pending(cudaEvent_t e)
{
    pthread_mutex_lock(&async_lock);
    zt_emu_op *op = op_done(e->op) ? NULL : op_ref(e->op);
    pthread_mutex_unlock(&async_lock);
    return op;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!event_ok(e)) return fail(cudaErrorInvalidResourceHandle);
    zt_emu_op *op = event_pending(e);
    op_release(op);
    /* cudaErrorNotReady is not an error: the runtime does not record it */
    return op ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!event_ok(e)) return fail(cudaErrorInvalidResourceHandle);
    zt_emu_count(ZT_EMU_EVENT_SYNC);
    zt_emu_op *op = event_pending(e);
    op_wait(op);
    op_release(op);
    return cudaSuccess;
}

/* Work queued on s after this call starts once e is complete: emulated by waiting now, since
 * everything but a collective runs when it is queued. */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    if (!stream_ok(s) || !event_ok(e)) return fail(cudaErrorInvalidResourceHandle);
    if (flags) return fail(cudaErrorInvalidValue);
    return cudaEventSynchronize(e);
}

static double event_time(cudaEvent_t e)
{
    pthread_mutex_lock(&async_lock);
    double t = e->op ? (e->op->t_done > e->t ? e->op->t_done : e->t) : e->t;
    pthread_mutex_unlock(&async_lock);
    return t;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms) return fail(cudaErrorInvalidValue);
    if (!event_ok(start) || !event_ok(end) ||
        ((start->flags | end->flags) & cudaEventDisableTiming))
        return fail(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
    zt_emu_op *a = event_pending(start), *b = event_pending(end);
    op_release(a);
    op_release(b);
    if (a || b) return cudaErrorNotReady;
    *ms = (float)((event_time(end) - event_time(start)) * 1e3);
    return cudaSuccess;
}

/* ---- memory ---- */

static cudaError_t block_alloc(void **p, size_t bytes, uint64_t magic, int fill)
{
    if (!p) return fail(cudaErrorInvalidValue);
    *p = NULL;
    /* the emulated GPU has the host's memory: a request beyond it fails as cudaMalloc does */
    if (bytes > host_bytes(_SC_PHYS_PAGES)) return fail(cudaErrorMemoryAllocation);
    size_t total = EMU_ALIGN + (bytes + EMU_ALIGN - 1) / EMU_ALIGN * EMU_ALIGN;
    char *b = aligned_alloc(EMU_ALIGN, total);
    if (!b) return fail(cudaErrorMemoryAllocation);
    emu_block *h = (emu_block *)b;
    h->magic = magic;
    h->bytes = bytes;
    memset(b + EMU_ALIGN, fill, total - EMU_ALIGN);
    *p = b + EMU_ALIGN;
    return cudaSuccess;
}

static cudaError_t block_free(void *p, uint64_t magic)
{
    if (!p) return cudaSuccess;
    emu_block *h = (emu_block *)((char *)p - EMU_ALIGN);
    if (h->magic != magic) return fail(cudaErrorInvalidValue);
    h->magic = 0;
    free(h);
    return cudaSuccess;
}

static void dev_charge(size_t bytes, bool add)
{
    if (!add) {
        atomic_fetch_sub(&dev_cur, bytes);
        return;
    }
    size_t now = atomic_fetch_add(&dev_cur, bytes) + bytes;
    size_t peak = atomic_load(&dev_peak);
    while (now > peak && !atomic_compare_exchange_weak(&dev_peak, &peak, now)) {
    }
}

/* What the process asked of the runtime, for the report: the counts of zt_emu_counter. */
static atomic_ullong counts[ZT_EMU_COUNTERS];
static const char *const count_names[ZT_EMU_COUNTERS] = {
    [ZT_EMU_LAUNCH] = "launches",         [ZT_EMU_GEMM] = "gemms",
    [ZT_EMU_MALLOC] = "device_allocs",    [ZT_EMU_HOST_ALLOC] = "host_allocs",
    [ZT_EMU_COPY] = "copies",             [ZT_EMU_STREAM_SYNC] = "stream_syncs",
    [ZT_EMU_EVENT_SYNC] = "event_syncs",  [ZT_EMU_COLLECTIVE] = "collectives",
};

void zt_emu_count(zt_emu_counter c)
{
    atomic_fetch_add_explicit(&counts[c], 1, memory_order_relaxed);
}

/* Test hook (test_gpu_ops): the count of counter `which` so far. */
unsigned long long zt_emu_counted(int which);
unsigned long long zt_emu_counted(int which)
{
    return which >= 0 && which < ZT_EMU_COUNTERS ? atomic_load(&counts[which]) : 0;
}

/* Launches by kernel name: the first EMU_NAMES names seen (copied, at most EMU_NAME_MAX - 1
 * bytes of each: longer names that agree that far count as one), each with its count. */
#define EMU_NAMES 256
#define EMU_NAME_MAX 128
static struct {
    char name[EMU_NAME_MAX];
    unsigned long long n;
} launched[EMU_NAMES];
static pthread_mutex_t launched_mu = PTHREAD_MUTEX_INITIALIZER;

void zt_emu_count_launch(const char *kernel)
{
    zt_emu_count(ZT_EMU_LAUNCH);
    pthread_mutex_lock(&launched_mu);
    for (int i = 0; i < EMU_NAMES; i++) {
        if (!launched[i].name[0]) snprintf(launched[i].name, EMU_NAME_MAX, "%s", kernel);
        if (strncmp(launched[i].name, kernel, EMU_NAME_MAX - 1) == 0) {
            launched[i].n++;
            break;
        }
    }
    pthread_mutex_unlock(&launched_mu);
}

/* Test hook (test_gpu_ops): the launches so far of kernels whose names contain `part`. */
unsigned long long zt_emu_launches_named(const char *part);
unsigned long long zt_emu_launches_named(const char *part)
{
    unsigned long long n = 0;
    pthread_mutex_lock(&launched_mu);
    for (int i = 0; i < EMU_NAMES && launched[i].name[0]; i++)
        if (strstr(launched[i].name, part)) n += launched[i].n;
    pthread_mutex_unlock(&launched_mu);
    return n;
}

/* ZT_CUDA_EMU_REPORT=DIR: at exit each process writes DIR/device-PID.txt, lines of name=value:
 * its peak of device memory (tests compare it with what zctl plan predicts) and the counts
 * above (tests compare them between runs of different lengths: what a training step costs). */
static void write_report(void)
{
    const char *dir = getenv("ZT_CUDA_EMU_REPORT");
    if (!dir || !*dir) return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/device-%d.txt", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "peak_device_bytes=%zu\n", atomic_load(&dev_peak));
    for (int c = 0; c < ZT_EMU_COUNTERS; c++)
        fprintf(f, "%s=%llu\n", count_names[c], (unsigned long long)atomic_load(&counts[c]));
    fclose(f);
}

/* The device allocations, for zt_emu_device_range (few: the engine allocates arenas). */
static struct {
    pthread_mutex_t lock;
    const char **start;
    size_t *bytes;
    size_t n, cap;
} dev_blocks = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool dev_block_add(const char *p, size_t bytes)
{
    pthread_mutex_lock(&dev_blocks.lock);
    size_t cap = memory_cap();
    bool ok = !cap || bytes <= cap - atomic_load(&dev_cur); /* dev_cur <= cap: charged here */
    if (ok && dev_blocks.n == dev_blocks.cap) {
        size_t cap = dev_blocks.cap ? 2 * dev_blocks.cap : 64;
        const char **s = realloc(dev_blocks.start, cap * sizeof(*s));
        if (s) dev_blocks.start = s;
        size_t *b = s ? realloc(dev_blocks.bytes, cap * sizeof(*b)) : NULL;
        if (b) {
            dev_blocks.bytes = b;
            dev_blocks.cap = cap;
        }
        ok = s && b;
    }
    if (ok) {
        static bool registered;
        if (!registered) registered = atexit(write_report) == 0;
        dev_blocks.start[dev_blocks.n] = p;
        dev_blocks.bytes[dev_blocks.n++] = bytes;
        dev_charge(bytes, true);
    }
    pthread_mutex_unlock(&dev_blocks.lock);
    return ok;
}

static void dev_block_remove(const char *p)
{
    pthread_mutex_lock(&dev_blocks.lock);
    for (size_t i = 0; i < dev_blocks.n; i++)
        if (dev_blocks.start[i] == p) {
            dev_charge(dev_blocks.bytes[i], false);
            dev_blocks.start[i] = dev_blocks.start[--dev_blocks.n];
            dev_blocks.bytes[i] = dev_blocks.bytes[dev_blocks.n];
            break;
        }
    pthread_mutex_unlock(&dev_blocks.lock);
}

bool zt_emu_device_range(const void *p, size_t bytes)
{
    const char *c = p;
    bool in = false;
    pthread_mutex_lock(&dev_blocks.lock);
    for (size_t i = 0; i < dev_blocks.n && !in; i++)
        in = c >= dev_blocks.start[i] && bytes <= dev_blocks.bytes[i] &&
             (size_t)(c - dev_blocks.start[i]) <= dev_blocks.bytes[i] - bytes;
    pthread_mutex_unlock(&dev_blocks.lock);
    return in;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    zt_emu_count(ZT_EMU_MALLOC);
    size_t cap = memory_cap();
    if (p && cap && bytes > cap - atomic_load(&dev_cur)) { /* before touching the host's memory */
        *p = NULL;
        return fail(cudaErrorMemoryAllocation);
    }
    cudaError_t e = block_alloc(p, bytes, EMU_MAGIC_DEV, 0xff);
    if (e == cudaSuccess && !dev_block_add(*p, bytes)) {
        block_free(*p, EMU_MAGIC_DEV);
        *p = NULL;
        return fail(cudaErrorMemoryAllocation);
    }
    return e;
}

cudaError_t cudaFree(void *p)
{
    dev_block_remove(p); /* first: once freed, another thread may get the address */
    return block_free(p, EMU_MAGIC_DEV);
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    zt_emu_count(ZT_EMU_HOST_ALLOC);
    return block_alloc(p, bytes, EMU_MAGIC_HOST, 0xff);
}

cudaError_t cudaFreeHost(void *p)
{
    return block_free(p, EMU_MAGIC_HOST);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    if (bytes && !p) return fail(cudaErrorInvalidValue);
    zt_emu_stream_wait(s);
    if (bytes) memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    if ((unsigned)kind > (unsigned)cudaMemcpyDefault || (bytes && (!dst || !src)))
        return fail(cudaErrorInvalidValue);
    zt_emu_count(ZT_EMU_COPY);
    zt_emu_stream_wait(s);
    if (bytes) memcpy(dst, src, bytes); /* overlapping ranges are undefined on the GPU too */
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s)
{
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    if ((unsigned)kind > (unsigned)cudaMemcpyDefault || width > dpitch || width > spitch)
        return fail(cudaErrorInvalidValue);
    if (width && height && (!dst || !src)) return fail(cudaErrorInvalidValue);
    zt_emu_count(ZT_EMU_COPY);
    zt_emu_stream_wait(s);
    for (size_t r = 0; r < height && width; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    return cudaMemsetAsync(p, value, bytes, NULL);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    return cudaMemcpyAsync(dst, src, bytes, kind, NULL);
}
