/* zerotrain: how zagent finds its GPUs for `--slots cuda:auto`. Two backends with one
 * function: gpu_cuda.c (CUDA runtime, when built with CUDA) and gpu_none.c (no CUDA in the
 * build: no GPUs). */
#ifndef ZT_AGENT_GPU_H
#define ZT_AGENT_GPU_H

#include "agent/agent.h"
#include "common/status.h"

/* Lists up to cap GPUs into gpus (*n set). Without creating a CUDA context (memory_free is
 * the total). ZT_ERR_NO_DEVICE with the reason (driver missing, no device, CUDA not built)
 * when there is none. Not thread-safe (first CUDA call). */
zt_status zt_agent_gpu_detect(zt_agent_gpu *gpus, int cap, int *n, zt_err *err);

#endif
