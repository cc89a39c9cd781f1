/* zerotrain: GPU discovery when zagent is built without CUDA: there are none (gpu.h). */
#include "agent/gpu.h"

zt_status zt_agent_gpu_detect(zt_agent_gpu *gpus, int cap, int *n, zt_err *err)
{
    (void)gpus;
    (void)cap;
    *n = 0;
    return zt_err_set(err, ZT_ERR_NO_DEVICE,
                      "this zagent was built without CUDA (ZT_CUDA=OFF or no toolkit)");
}
