/* zerotrain: linked instead of comm_nccl.c when the build has no CUDA: there is no NCCL
 * backend, and zt_comm_create reports that clearly when asked for it. */
#include "comm_int.h"

const zt_comm_backend *zt_comm_backend_nccl(void)
{
    return NULL;
}
