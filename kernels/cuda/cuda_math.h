/* zerotrain: the multi-function unit's approximations in CUDA device code, for the kernels
 * whose exponentials and quotients outnumber their bytes (the attention's softmax, the
 * cross-entropy, GELU): one instruction each where the C library's expf and an IEEE division
 * take about eight, with errors of a few units in the last place of fp32. The emulation
 * (ZT_CUDA_EMU) computes them with the C library, flushed the same way, so its bits may differ
 * from a GPU's in the last places, as the GPU's expf differs from glibc's. */
#ifndef ZT_CUDA_MATH_H
#define ZT_CUDA_MATH_H

#include <float.h>

/* 2^x with subnormal results flushed to zero (ex2.approx.ftz: one instruction, where exp2f's
 * ex2.approx keeps subnormal results at the cost of a compare and two multiplies around it);
 * 2^-inf = +0, 2^NaN = NaN. No caller needs values below 2^-126: the softmax's terms below it
 * add nothing to a sum holding a term of 1, and round to zero in 16 bits. */
static __device__ __forceinline__ float zt_exp2_ftz(float x)
{
#ifdef ZT_CUDA_EMU
    float r = exp2f(x);
    return r < FLT_MIN ? 0.0f : r;
#else
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#endif
}

/* e^x as 2^(x log2 e) by zt_exp2_ftz: the product's rounding adds a relative error of about
 * |x| 2^-24, so it suits arguments whose results shrink as that error grows (x - max of a
 * softmax row) */
static __device__ __forceinline__ float zt_exp_ftz(float x)
{
    return zt_exp2_ftz(x * 1.4426950408889634f);
}

/* 1/x to within one unit in the last place (rcp.approx), for x in [2^-126, 2^126] */
static __device__ __forceinline__ float zt_rcp_approx(float x)
{
#ifdef ZT_CUDA_EMU
    return 1.0f / x;
#else
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#endif
}

#endif
