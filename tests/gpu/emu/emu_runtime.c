/* zerotrain tests: the CUDA emulation's runtime, the part of the CUDA runtime API that
 * kernels/cuda/ calls, on the CPU: one emulated GPU (ordinal 0) whose memory is the host's.
 * Streams are tokens (every operation completes before it returns), device allocations are
 * 256-byte aligned, filled with 0xff bytes (NaN as floats, so that a kernel reading memory
 * nobody wrote shows up) and carry a header that cudaFree checks. Prototypes come from the
 * toolkit's cuda_runtime.h, so a mismatch does not compile. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu_int.h"

#define EMU_ALIGN 256
#define EMU_MAGIC_DEV 0x7a74646576ULL  /* "ztdev" */
#define EMU_MAGIC_HOST 0x7a74686f7374ULL /* "zthost" */
#define EMU_MAGIC_STREAM 0x7a747374U

struct CUstream_st {
    unsigned magic;
};

typedef struct emu_block {
    uint64_t magic;
    size_t bytes;
} emu_block;

static __thread cudaError_t last_error = cudaSuccess;

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
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "unknown error";
    }
}

/* ---- the device ---- */

static size_t host_bytes(int name)
{
    long pages = sysconf(name), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : (size_t)1 << 34;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return fail(cudaErrorInvalidValue);
    if (device != 0)
        return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "zerotrain CUDA emulation on the CPU");
    prop->totalGlobalMem = host_bytes(_SC_PHYS_PAGES);
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *avail, size_t *total)
{
    if (!avail || !total)
        return fail(cudaErrorInvalidValue);
    *avail = host_bytes(_SC_AVPHYS_PAGES);
    *total = host_bytes(_SC_PHYS_PAGES);
    return cudaSuccess;
}

/* ---- streams: every operation is complete when it returns ---- */

static bool stream_ok(cudaStream_t s)
{
    return s == NULL || s->magic == EMU_MAGIC_STREAM;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    if (!s)
        return fail(cudaErrorInvalidValue);
    *s = malloc(sizeof(**s));
    if (!*s)
        return fail(cudaErrorMemoryAllocation);
    (*s)->magic = EMU_MAGIC_STREAM;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s || s->magic != EMU_MAGIC_STREAM)
        return fail(cudaErrorInvalidResourceHandle);
    s->magic = 0;
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    return stream_ok(s) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

/* ---- memory ---- */

static cudaError_t block_alloc(void **p, size_t bytes, uint64_t magic, int fill)
{
    if (!p)
        return fail(cudaErrorInvalidValue);
    *p = NULL;
    /* the emulated GPU has the host's memory: a request beyond it fails as cudaMalloc does */
    if (bytes > host_bytes(_SC_PHYS_PAGES))
        return fail(cudaErrorMemoryAllocation);
    size_t total = EMU_ALIGN + (bytes + EMU_ALIGN - 1) / EMU_ALIGN * EMU_ALIGN;
    char *b = aligned_alloc(EMU_ALIGN, total);
    if (!b)
        return fail(cudaErrorMemoryAllocation);
    emu_block *h = (emu_block *)b;
    h->magic = magic;
    h->bytes = bytes;
    memset(b + EMU_ALIGN, fill, total - EMU_ALIGN);
    *p = b + EMU_ALIGN;
    return cudaSuccess;
}

static cudaError_t block_free(void *p, uint64_t magic)
{
    if (!p)
        return cudaSuccess;
    emu_block *h = (emu_block *)((char *)p - EMU_ALIGN);
    if (h->magic != magic)
        return fail(cudaErrorInvalidValue);
    h->magic = 0;
    free(h);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    return block_alloc(p, bytes, EMU_MAGIC_DEV, 0xff);
}

cudaError_t cudaFree(void *p)
{
    return block_free(p, EMU_MAGIC_DEV);
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return block_alloc(p, bytes, EMU_MAGIC_HOST, 0xff);
}

cudaError_t cudaFreeHost(void *p)
{
    return block_free(p, EMU_MAGIC_HOST);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    if (!stream_ok(s))
        return fail(cudaErrorInvalidResourceHandle);
    if (bytes && !p)
        return fail(cudaErrorInvalidValue);
    if (bytes)
        memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    if (!stream_ok(s))
        return fail(cudaErrorInvalidResourceHandle);
    if ((unsigned)kind > (unsigned)cudaMemcpyDefault || (bytes && (!dst || !src)))
        return fail(cudaErrorInvalidValue);
    if (bytes)
        memcpy(dst, src, bytes); /* overlapping ranges are undefined on the GPU too */
    return cudaSuccess;
}
