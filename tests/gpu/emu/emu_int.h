/* zerotrain tests: what the CUDA emulation's C files share (emu_sched.c, emu_runtime.c). */
#ifndef ZT_TESTS_GPU_EMU_EMU_INT_H
#define ZT_TESTS_GPU_EMU_EMU_INT_H

#include "cuda_emu.h"

/* Sets the calling thread's last error, which cudaGetLastError returns and clears. */
void zt_emu_record_error(cudaError_t e);

#endif
