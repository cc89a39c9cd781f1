/* zerotrain: fp32 <-> bf16 and fp16 conversions in CUDA device code, bit for bit those of
 * kernels/cpu/vmath.h and common/dtype.h (round to nearest even; NaN kept quiet), and loads and
 * stores of elements of a type given as a template argument, one or four at a time. For the .cu
 * files that round or widen 16-bit data: the casts and the matmuls' staging (optim_cuda.cu),
 * the kernels that read or write 16-bit activations and gradients (layernorm_cuda.cu,
 * gelu_cuda.cu, loss_cuda.cu). */
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

/* The element types of the templates below: 0 fp32, 1 bf16, 2 fp16 */

/* v rounded to bf16 (OT 1) or fp16 (2), in the low half of the word */
template <int OT> static __device__ __forceinline__ uint32_t zt_narrow16(float v)
{
    return OT == 2 ? (uint32_t)f16_from_f32(v) : (uint32_t)bf16_from_f32(v);
}

/* h's low half, a bf16 (IT 1) or fp16 (2), widened */
template <int IT> static __device__ __forceinline__ float zt_widen16(uint32_t h)
{
    return IT == 2 ? f32_from_f16((uint16_t)h) : f32_from_bf16((uint16_t)h);
}

/* Element j of d in fp32 (OT 0), or rounded to bf16 (1) or fp16 (2) as the matmuls' staging
 * rounds: the kernels that write a matmul's 16-bit copy as they compute its values. */
template <int OT> static __device__ __forceinline__ void zt_store_as(void *d, size_t j, float v)
{
    if (OT == 0)
        ((float *)d)[j] = v;
    else
        ((uint16_t *)d)[j] = (uint16_t)zt_narrow16<OT>(v);
}

/* Element i of s (of type IT) in fp32 */
template <int IT> static __device__ __forceinline__ float zt_load_as(const void *s, size_t i)
{
    if (IT == 0) return ((const float *)s)[i];
    return zt_widen16<IT>(((const uint16_t *)s)[i]);
}

/* Four elements of type IT as loaded, before widening: a float4, or a uint2 of 16-bit pairs */
template <int IT> struct zt_raw4 {
    typedef uint2 type;
};
template <> struct zt_raw4<0> {
    typedef float4 type;
};

/* Elements 4q .. 4q+3 of s (of type IT) as they are, one 16-byte load (8-byte for 16-bit
 * types): s aligned to it. Holding a batch of these takes half the registers of the widened
 * values in 16 bits. */
template <int IT>
static __device__ __forceinline__ typename zt_raw4<IT>::type zt_load4_raw(const void *s, size_t q)
{
    return ((const typename zt_raw4<IT>::type *)s)[q];
}

/* zt_load4_raw's four elements in fp32. Little-endian pairs: element 2k in the low half of each
 * 32-bit word. */
template <int IT> static __device__ __forceinline__ float4 zt_widen4(float4 v)
{
    return v;
}
template <int IT> static __device__ __forceinline__ float4 zt_widen4(uint2 h)
{
    float4 v;
    v.x = zt_widen16<IT>(h.x & 0xffffu), v.y = zt_widen16<IT>(h.x >> 16);
    v.z = zt_widen16<IT>(h.y & 0xffffu), v.w = zt_widen16<IT>(h.y >> 16);
    return v;
}

/* Elements 4q .. 4q+3 of s (of type IT) in fp32, one 16-byte load (8-byte for 16-bit types):
 * s aligned to it. */
template <int IT> static __device__ __forceinline__ float4 zt_load4_as(const void *s, size_t q)
{
    return zt_widen4<IT>(zt_load4_raw<IT>(s, q));
}

/* Elements 4q .. 4q+3 of d (of type OT) from v, one 16-byte store (8-byte for 16-bit types):
 * d aligned to it; each element rounded as zt_store_as rounds it. */
template <int OT> static __device__ __forceinline__ void zt_store4_as(void *d, size_t q, float4 v)
{
    if (OT == 0) {
        ((float4 *)d)[q] = v;
        return;
    }
    uint2 h;
    h.x = zt_narrow16<OT>(v.x) | zt_narrow16<OT>(v.y) << 16;
    h.y = zt_narrow16<OT>(v.z) | zt_narrow16<OT>(v.w) << 16;
    ((uint2 *)d)[q] = h;
}

/* zt_store4_as of a 16-bit OT (1 bf16, 2 fp16) by the conversion unit: cvt.rn.bf16x2.f32 or
 * cvt.rn.f16x2.f32, two elements an instruction where zt_narrow16 takes about six integer
 * instructions an element. The same bits for every value but NaN, which becomes the canonical
 * quiet NaN (0x7fff, 0x7fff) where zt_narrow16 keeps its sign and payload: for kernels that
 * run at their instruction rate and whose outputs are NaN only where their inputs are (GELU's
 * staging). The emulation stores by zt_store4_as. */
template <int OT>
static __device__ __forceinline__ void zt_store4_cvt16(void *d, size_t q, float4 v)
{
#ifdef ZT_CUDA_EMU
    zt_store4_as<OT>(d, q, v);
#else
    uint2 h; /* the upper half from cvt's first operand: element 2k + 1 */
    if (OT == 2) {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h.x) : "f"(v.y), "f"(v.x));
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h.y) : "f"(v.w), "f"(v.z));
    } else {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(h.x) : "f"(v.y), "f"(v.x));
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(h.y) : "f"(v.w), "f"(v.z));
    }
    ((uint2 *)d)[q] = h;
#endif
}

#endif
