/* zerotrain tests: the CUDA emulation, device side. Included (as C++) before a .cu file of
 * kernels/cuda/ so that g++ compiles its kernels for the CPU: each thread of a block runs as a
 * fiber (emu_sched.c), __syncthreads and warp shuffles are barriers of those fibers, __shared__
 * arrays are shared by the fibers of a block, and a launch runs its whole grid before it
 * returns. The emulator stops the process with a message naming the kernel on what the CUDA
 * programming guide calls undefined: a block barrier or a full-mask shuffle that not every
 * thread reaches, bad launch dimensions. It is a way to run the kernels' own code in CI, where
 * no GPU exists; it says nothing about their speed, and the GPU's memory model is stronger
 * here (everything is sequentially consistent), so ctest -L gpu on a real GPU stays the
 * proof. */
#ifndef ZT_TESTS_GPU_EMU_CUDA_EMU_H
#define ZT_TESTS_GPU_EMU_CUDA_EMU_H

#define ZT_CUDA_EMU 1

#include <cuda_runtime.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The built-in variables of the fiber that runs (set by the scheduler at every switch). */
extern __thread uint3 zt_emu_thread_idx, zt_emu_block_idx;
extern __thread dim3 zt_emu_block_dim, zt_emu_grid_dim;

/* Runs fn(arg) as every thread of a grid, block after block; returns when the grid is done.
 * A bad configuration sets cudaErrorInvalidConfiguration for cudaGetLastError and runs
 * nothing, as the runtime does. */
void zt_emu_launch(const char *kernel, dim3 grid, dim3 block, void (*fn)(void *), void *arg);
/* The calling thread's schedule from now on, as ZT_CUDA_EMU_SCHEDULE gives it (emu_sched.c):
 * "forward", "reverse", "random" or "random:SEED"; another value stops the process. */
void zt_emu_schedule(const char *spec);
/* __syncthreads of the calling fiber. */
void zt_emu_syncthreads(void);
/* The warp exchange under every shuffle: returns lane src_lane's `bits` (all 32 lanes of the
 * warp must call it with the same mask, which must be 0xffffffff). */
uint64_t zt_emu_shfl(unsigned mask, uint64_t bits, int src_lane);
/* The calling thread's asynchronous copies to shared memory (emu_sched.c): size bytes from
 * src to dst, the last zfill of them zeros (src not read for them); each lands when the
 * thread waits for its group. */
void zt_emu_cp_async(void *dst, const void *src, size_t size, size_t zfill);
void zt_emu_cp_commit(void);
void zt_emu_cp_wait(size_t prior);
/* Blocks until the asynchronous operation pending on stream s, if any, is complete: work queued
 * on a stream starts after what is before it (emu_runtime.c). */
void zt_emu_stream_wait(cudaStream_t s);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
/* ---- what nvcc provides, for g++ ---- */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* one array per OS thread, shared by the fibers of the block that thread runs */
#define __shared__ static __thread

#define threadIdx zt_emu_thread_idx
#define blockIdx zt_emu_block_idx
#define blockDim zt_emu_block_dim
#define gridDim zt_emu_grid_dim

/* CUDA's integer min/max overloads */
#define ZT_EMU_MINMAX(T)                                                                           \
    static inline T min(T a, T b) { return a < b ? a : b; }                                        \
    static inline T max(T a, T b) { return a > b ? a : b; }
ZT_EMU_MINMAX(int)
ZT_EMU_MINMAX(unsigned)
ZT_EMU_MINMAX(long long)
ZT_EMU_MINMAX(unsigned long long)
#undef ZT_EMU_MINMAX

static inline void __syncthreads(void)
{
    zt_emu_syncthreads();
}

/* the calling thread's lane in its warp */
static inline unsigned zt_emu_lane(void)
{
    return (threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) & 31u;
}

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask)
{
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a type wider than 64 bits");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(v));
    unsigned lane = zt_emu_lane();
    bits = zt_emu_shfl(mask, bits, (int)(lane ^ (unsigned)lane_mask) & 31);
    memcpy(&v, &bits, sizeof(v));
    return v;
}

/* atomicAdd on float: the threads of a block are fibers that switch only at barriers, and
 * blocks run one after another, so a plain read-modify-write is atomic here */
static inline float atomicAdd(float *p, float v)
{
    float old = *p;
    *p = old + v;
    return old;
}

/* IEEE round-to-nearest intrinsics: plain C arithmetic is exactly that (no contraction: the
 * emulation is compiled with -ffp-contract=off) */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

static inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

template <class F> static void zt_emu_trampoline(void *f)
{
    (*(F *)f)();
}

/* kernel<<<grid, block, 0, stream>>>(args...): the arguments are evaluated in each thread's
 * call, so each thread owns its copies as on the GPU */
#define ZT_EMU_LAUNCH(name, kernel, grid, block, stream, ...)                                      \
    do {                                                                                           \
        zt_emu_stream_wait(stream);                                                                \
        auto zt_emu_body = [&]() { kernel(__VA_ARGS__); };                                         \
        zt_emu_launch((name), dim3(grid), dim3(block),                                             \
                      zt_emu_trampoline<decltype(zt_emu_body)>, &zt_emu_body);                     \
    } while (0)

/* cuda_pipeline_primitives.h: copies to shared memory that land when the thread waits for
 * them (a read before that sees the old contents, as the GPU may show it) */
static inline void __pipeline_memcpy_async(void *dst, const void *src, size_t size_and_align,
                                           size_t zfill = 0)
{
    zt_emu_cp_async(dst, src, size_and_align, zfill);
}
static inline void __pipeline_commit(void)
{
    zt_emu_cp_commit();
}
static inline void __pipeline_wait_prior(size_t prior)
{
    zt_emu_cp_wait(prior);
}

/* the warp matrix functions (mma.h) and __syncwarp */
#include "wmma_emu.h"
#endif /* __cplusplus */

#endif
