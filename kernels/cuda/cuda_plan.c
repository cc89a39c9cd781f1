/* zerotrain: the CUDA backend's sizes that a plan reads without a CUDA build (cuda_plan.h):
 * its context's device memory and the 16-bit staging of its matmuls, from the same settings
 * ops_cuda.c reads. */
#include "cuda_plan.h"

#include <stdint.h>
#include <string.h>

#include "../../common/settings.h"

size_t zt_cuda_context_device_bytes(int B, int T)
{
    size_t n = (size_t)(B > 0 ? B : 0) * (size_t)(T > 0 ? T : 0);
    return ZT_CUDA_LT_WORKSPACE + ZT_CUDA_SCRATCH_FLOATS * sizeof(float) +
           ZT_CUDA_RED_SLOTS * 2 * sizeof(double) + ZT_CUDA_TOKEN_GROUP_INTS(n) * sizeof(int32_t);
}

bool zt_cuda_stage_env(void)
{
    return zt_setting_bool(ZT_SET_CUDA_GEMM_STAGE); /* warns once: a plan asks many times */
}

bool zt_cuda_stage_wanted(zt_dtype pdt)
{
    if (!zt_cuda_stage_env()) return false;
    /* ZT_CUDA_MATMUL as ops_cuda.c reads it: a value naming no mode counts as unset */
    const char *mm = zt_setting_env(ZT_SET_CUDA_MATMUL);
    if (mm && (strcmp(mm, "bf16") == 0 || strcmp(mm, "fp16") == 0)) return true;
    if (mm && (strcmp(mm, "fp32") == 0 || strcmp(mm, "tf32") == 0)) return false;
    return pdt == ZT_BF16 || pdt == ZT_F16;
}

size_t zt_cuda_stage_cap_elems(void)
{
    size_t def = (size_t)ZT_CUDA_STAGE_MIB << 19; /* MiB of 2-byte elements */
    if (!zt_setting_raw(ZT_SET_CUDA_GEMM_STAGE_MIB)) return def;
    /* a bad value warns once (a plan asks many times) and gives the table's default, which
     * tests/common/test_settings.c holds to ZT_CUDA_STAGE_MIB */
    double mib = zt_setting_real(ZT_SET_CUDA_GEMM_STAGE_MIB);
    size_t n = (size_t)(mib * (double)((size_t)1 << 19));
    return n < ZT_CUDA_STAGE_MIN_ELEMS ? ZT_CUDA_STAGE_MIN_ELEMS : n;
}

size_t zt_cuda_stage_pad(size_t elems)
{
    return (elems + 127) / 128 * 128;
}

size_t zt_cuda_stage_elems(size_t M, size_t N, size_t K, size_t cap)
{
    /* op(B), a 16-bit copy of the bias (a product with a 16-bit output), op(A) */
    size_t need = zt_cuda_stage_pad(K * N) + zt_cuda_stage_pad(N) + M * K;
    return need < cap ? need : cap;
}

size_t zt_cuda_stage_bwd_elems(size_t N, size_t C, size_t OC, size_t cap)
{
    size_t need = zt_cuda_stage_pad(OC * C) + zt_cuda_stage_pad(N * OC) + N * C;
    return need < cap ? need : cap;
}
