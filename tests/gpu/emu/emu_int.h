/* zerotrain tests: what the CUDA emulation's C files share (emu_sched.c, emu_runtime.c). */
#ifndef ZT_TESTS_GPU_EMU_EMU_INT_H
#define ZT_TESTS_GPU_EMU_EMU_INT_H

#include "cuda_emu.h"

/* An asynchronous operation (an emulated collective) queued on a stream: later work on the
 * stream, events recorded on it and cudaStreamSynchronize wait for it. zt_emu_op_enqueue
 * makes a new operation the stream's latest (s may be NULL: not on a stream) and returns it,
 * NULL when out of memory; its issuer runs it after the stream's previous one if that is
 * still pending;
 * zt_emu_op_done completes it (from any thread) and gives up the issuer's reference. */
typedef struct zt_emu_op zt_emu_op;
zt_emu_op *zt_emu_op_enqueue(cudaStream_t s);
void zt_emu_op_done(zt_emu_op *op);

/* One wait of a polling loop: yields the first 100 times, then sleeps 50 us. */
void zt_emu_pause(unsigned *spins);

/* Whether [p, p + bytes) lies inside one cudaMalloc allocation (bytes may be 0). */
bool zt_emu_device_range(const void *p, size_t bytes);

/* Counts of what the process asked for, written to ZT_CUDA_EMU_REPORT's file at exit
 * (emu_runtime.c): kernel launches, cuBLASLt matmuls, cudaMalloc and cudaMallocHost calls,
 * copies (cudaMemcpy, cudaMemcpyAsync and cudaMemcpy2DAsync), stream and event synchronisations,
 * NCCL collectives. */
typedef enum {
    ZT_EMU_LAUNCH,
    ZT_EMU_GEMM,
    ZT_EMU_MALLOC,
    ZT_EMU_HOST_ALLOC,
    ZT_EMU_COPY,
    ZT_EMU_STREAM_SYNC,
    ZT_EMU_EVENT_SYNC,
    ZT_EMU_COLLECTIVE,
    ZT_EMU_COUNTERS
} zt_emu_counter;
void zt_emu_count(zt_emu_counter c);
/* zt_emu_count(ZT_EMU_LAUNCH), and the launch counted under the kernel's name */
void zt_emu_count_launch(const char *kernel);

/* Sets the calling thread's last error, which cudaGetLastError returns and clears. */
void zt_emu_record_error(cudaError_t e);

#endif
