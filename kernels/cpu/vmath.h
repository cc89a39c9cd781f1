/* zerotrain: scalar math written so that gcc auto-vectorizes the loops that call it (no
 * branches, no libm calls, bit casts through memcpy): exp to about 1 ulp and branch-free
 * bf16/fp16 conversions that give the same bits as common/dtype.h. Private to kernels/cpu/. */
#ifndef ZT_KERNELS_CPU_VMATH_H
#define ZT_KERNELS_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t zt_v_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float zt_v_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Smallest float whose exp is a normal float (just above ln FLT_MIN); below it the result is 0. */
#define ZT_V_EXP_LO (-87.3365402f)
/* Largest argument zt_v_expf takes (n stays <= 127); larger ones saturate to exp(88). */
#define ZT_V_EXP_HI (88.0f)

/* exp(x) within about 1 ulp (measured by tests/kernels/test_kernels_cpu.c) for x in
 * [ZT_V_EXP_LO, ZT_V_EXP_HI]; 0 below (never a subnormal, which would be slow), saturating
 * above, NaN for NaN. x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split, fused), exp(r) by a
 * degree-7 polynomial, then 2^n through the exponent bits. Pure and thread-safe. */
static inline float zt_v_expf(float x)
{
    float xc = x > ZT_V_EXP_HI ? ZT_V_EXP_HI : x < ZT_V_EXP_LO ? ZT_V_EXP_LO : x;
    /* 1.5 * 2^23: adding it rounds x*log2(e) to the nearest integer, kept in the low bits */
    float t = fmaf(xc, 1.44269502f, 12582912.0f);
    float n = t - 12582912.0f;
    float r = fmaf(n, -0.693145752f, xc); /* ln2 high part: exact when multiplied by n */
    r = fmaf(n, -1.42860677e-06f, r);     /* ln2 - high part */
    float p = 1.98412698e-04f;            /* Taylor coefficients 1/k! */
    p = fmaf(p, r, 1.38888889e-03f);
    p = fmaf(p, r, 8.33333333e-03f);
    p = fmaf(p, r, 4.16666667e-02f);
    p = fmaf(p, r, 1.66666667e-01f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r * r, r);
    p = p + 1.0f;
    uint32_t scale = (zt_v_bits(t) - 0x4b400000u + 127u) << 23; /* 2^n, n in [-126, 127] */
    float y = p * zt_v_float(scale);
    return x < ZT_V_EXP_LO ? 0.0f : y;
}

/* sqrt(x), correctly rounded (checked against sqrtf for every non-negative float, subnormals,
 * 0 and inf included), for x >= 0 or NaN; NaN for x < 0. libm's sqrtf would do, but with
 * errno semantics gcc will not vectorize it. Newton steps on 1/sqrt from the exponent-halving
 * guess, then one fused residual correction. Tiny x is scaled by 2^100 so the guess is sane. */
static inline float zt_v_sqrtf(float x)
{
    int tiny = x < 7.88860905e-31f;           /* 2^-100 */
    float xs = tiny ? x * 1.26765060e30f : x; /* 2^100 */
    float r = zt_v_float(0x5f375a86u - (zt_v_bits(xs) >> 1));
    float hx = 0.5f * xs;
    r = r * (1.5f - hx * r * r);
    r = r * (1.5f - hx * r * r);
    r = r * (1.5f - hx * r * r);
    float y = xs * r;
    float e = fmaf(-y, y, xs); /* exact residual x - y^2 */
    y = fmaf(e, 0.5f * r, y);
    y = tiny ? y * 8.88178420e-16f : y; /* 2^-50 */
    y = (xs == INFINITY || xs == 0.0f) ? x : y;
    return x < 0.0f ? NAN : y;
}

/* float -> bf16 bits, round to nearest even, NaN stays a quiet NaN (as zt_bf16_from_f32). */
static inline uint16_t zt_v_bf16_from_f32(float f)
{
    uint32_t u = zt_v_bits(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static inline float zt_v_f32_from_bf16(uint16_t h)
{
    return zt_v_float((uint32_t)h << 16);
}

/* float -> fp16 bits, round to nearest even, overflow to inf, NaN -> quiet NaN, subnormals
 * exact (as zt_f16_from_f32). All three cases are computed and one is selected. */
static inline uint16_t zt_v_f16_from_f32(float f)
{
    uint32_t x = zt_v_bits(f);
    uint32_t sign = x & 0x80000000u;
    uint32_t a = x ^ sign;
    uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
    /* subnormal half: adding 0.5 (ulp 2^-24) rounds a to a multiple of 2^-24 */
    uint32_t sub = zt_v_bits(zt_v_float(a) + 0.5f) - 0x3f000000u;
    /* normal half: rebias the exponent, round the 13 dropped bits to nearest even */
    uint32_t norm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    uint32_t o = a >= 0x47800000u ? big : a < 0x38800000u ? sub : norm;
    return (uint16_t)(o | (sign >> 16));
}

static inline float zt_v_f32_from_f16(uint16_t h)
{
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t e = o & 0x0f800000u;
    o += 0x38000000u;                                                  /* rebias 15 -> 127 */
    uint32_t infnan = o + 0x38000000u;                                 /* exponent 31 -> 255 */
    float sub = zt_v_float(o + 0x00800000u) - zt_v_float(0x38800000u); /* exact */
    o = e == 0x0f800000u ? infnan : e == 0 ? zt_v_bits(sub) : o;
    return zt_v_float(o | ((uint32_t)(h & 0x8000u) << 16));
}

#endif
