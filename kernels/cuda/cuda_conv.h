/* zerotrain: fp32 <-> bf16 and fp16 conversions in CUDA device code, bit for bit those of
 * kernels/cpu/vmath.h and common/dtype.h (round to nearest even; NaN kept quiet). For the .cu
 * files that round or widen 16-bit data: the casts and the matmuls' staging (optim_cuda.cu),
 * the staging that sums a bias gradient on the way (gpt2_cuda.cu). */
#ifndef ZT_CUDA_CONV_H
#define ZT_CUDA_CONV_H

#include <stdint.h>

static __device__ __forceinline__ uint16_t bf16_from_f32(float f)
{
    uint32_t u = __float_as_uint(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static __device__ __forceinline__ float f32_from_bf16(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

static __device__ __forceinline__ uint16_t f16_from_f32(float f)
{
    uint32_t x = __float_as_uint(f);
    uint32_t sign = x & 0x80000000u;
    uint32_t a = x ^ sign;
    uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
    uint32_t sub = __float_as_uint(__fadd_rn(__uint_as_float(a), 0.5f)) - 0x3f000000u;
    uint32_t norm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    uint32_t o = a >= 0x47800000u ? big : a < 0x38800000u ? sub : norm;
    return (uint16_t)(o | (sign >> 16));
}

static __device__ __forceinline__ float f32_from_f16(uint16_t h)
{
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t e = o & 0x0f800000u;
    o += 0x38000000u;
    uint32_t infnan = o + 0x38000000u;
    float sub = __fsub_rn(__uint_as_float(o + 0x00800000u), __uint_as_float(0x38800000u));
    o = e == 0x0f800000u ? infnan : e == 0 ? __float_as_uint(sub) : o;
    return __uint_as_float(o | ((uint32_t)(h & 0x8000u) << 16));
}

/* Element j of d in fp32 (OT 0), or rounded to bf16 (1) or fp16 (2) as the matmuls' staging
 * rounds: the kernels that write a matmul's 16-bit copy as they compute its values. */
template <int OT> static __device__ __forceinline__ void zt_store_as(void *d, size_t j, float v)
{
    if (OT == 0) ((float *)d)[j] = v;
    if (OT == 1) ((uint16_t *)d)[j] = bf16_from_f32(v);
    if (OT == 2) ((uint16_t *)d)[j] = f16_from_f32(v);
}

#endif
