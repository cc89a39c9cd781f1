/* zerotrain: element types of tensors and buffers, and scalar conversions between them.
 * 16-bit values are stored as uint16_t bit patterns; conversions round to nearest even. */
#ifndef ZT_COMMON_DTYPE_H
#define ZT_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    ZT_F32 = 0,
    ZT_BF16 = 1,
    ZT_F16 = 2,
} zt_dtype;

static inline size_t zt_dtype_size(zt_dtype t)
{
    return t == ZT_F32 ? 4 : 2;
}

static inline const char *zt_dtype_name(zt_dtype t)
{
    return t == ZT_F32 ? "fp32" : t == ZT_BF16 ? "bf16" : "fp16";
}

static inline uint32_t zt_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float zt_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t zt_bf16_from_f32(float f)
{
    uint32_t u = zt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float zt_f32_from_bf16(uint16_t h)
{
    return zt_bits_f32((uint32_t)h << 16);
}

static inline uint16_t zt_f16_from_f32(float f)
{
    uint32_t x = zt_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) /* below half the smallest subnormal: zero */
            return (uint16_t)sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t mant = r & 0x1fffu;
    r >>= 13;
    if (mant > 0x1000u || (mant == 0x1000u && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

static inline float zt_f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0)
            return zt_bits_f32(sign);
        /* subnormal: m * 2^-24 */
        float f = (float)m * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (e == 31)
        return zt_bits_f32(sign | 0x7f800000u | (m << 13));
    return zt_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* Reads element i of a buffer of type t as float. */
static inline float zt_load_f32(const void *p, zt_dtype t, size_t i)
{
    if (t == ZT_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == ZT_BF16 ? zt_f32_from_bf16(h) : zt_f32_from_f16(h);
}

/* Writes element i of a buffer of type t from float (rounding to nearest even). */
static inline void zt_store_f32(void *p, zt_dtype t, size_t i, float v)
{
    if (t == ZT_F32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = t == ZT_BF16 ? zt_bf16_from_f32(v) : zt_f16_from_f32(v);
}

#endif
