/* zerotrain: GPU discovery through the CUDA runtime (gpu.h). cudaGetDeviceCount fails with
 * "insufficient driver" (35) rather than "no device" (100) on machines without a GPU; any
 * error there means no usable GPU. */
#include "agent/gpu.h"

#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

zt_status zt_agent_gpu_detect(zt_agent_gpu *gpus, int cap, int *n, zt_err *err)
{
    *n = 0;
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess)
        return zt_err_set(err, ZT_ERR_NO_DEVICE, "cudaGetDeviceCount failed: %s (error %d)",
                          cudaGetErrorString(ce), (int)ce);
    if (count <= 0) return zt_err_set(err, ZT_ERR_NO_DEVICE, "the CUDA runtime sees no device");
    for (int i = 0; i < count && *n < cap; i++) {
        struct cudaDeviceProp prop;
        memset(&prop, 0, sizeof(prop));
        ce = cudaGetDeviceProperties(&prop, i);
        if (ce != cudaSuccess)
            return zt_err_set(err, ZT_ERR_NO_DEVICE, "cudaGetDeviceProperties(%d) failed: %s", i,
                              cudaGetErrorString(ce));
        zt_agent_gpu *g = &gpus[(*n)++];
        g->index = i;
        snprintf(g->name, sizeof(g->name), "%.*s", (int)sizeof(g->name) - 1, prop.name);
        g->memory_total = (int64_t)prop.totalGlobalMem;
        g->memory_free = (int64_t)prop.totalGlobalMem;
    }
    return ZT_OK;
}
