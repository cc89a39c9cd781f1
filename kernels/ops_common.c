/* zerotrain: what the op table's contract defines for every backend alike. */
#include "ops.h"

int zt_attention_chunk_seqs(int B, int T, int NH)
{
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    size_t per_seq = 2 * (size_t)NH * (size_t)T * (size_t)T;
    size_t fit = ZT_ATTENTION_SCRATCH_BUDGET / per_seq;
    if (fit < 1) fit = 1;
    return fit < (size_t)B ? (int)fit : B;
}

size_t zt_attention_scratch_floats(int B, int T, int NH)
{
    return (size_t)zt_attention_chunk_seqs(B, T, NH) * 2 * (size_t)(NH > 0 ? NH : 0) *
           (size_t)(T > 0 ? T : 0) * (size_t)(T > 0 ? T : 0);
}

size_t zt_cuda_context_device_bytes(int B, int T)
{
    size_t n = (size_t)(B > 0 ? B : 0) * (size_t)(T > 0 ? T : 0);
    return ZT_CUDA_LT_WORKSPACE + ZT_CUDA_SCRATCH_FLOATS * sizeof(float) +
           ZT_CUDA_RED_SLOTS * 2 * sizeof(double) + ZT_CUDA_TOKEN_GROUP_INTS(n) * sizeof(int32_t);
}
