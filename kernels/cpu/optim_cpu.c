/* zerotrain: the optimizer and precision ops on the CPU: AdamW / Adam-with-L2 over fp32 master
 * weights with fp32, bf16 or fp16 gradients, dtype casts, scaled accumulation and the squared
 * norm with a non-finite count. Work is cut into L1-sized chunks spread over OpenMP threads. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_int.h"
#include "vmath.h"

/* Elements per chunk: three float temporaries of this size stay in L1. */
#define ZT_CHUNK 2048

static size_t nchunks(size_t n)
{
    return (n + ZT_CHUNK - 1) / ZT_CHUNK;
}

/* dst[0,n) = src[off, off+n) widened to float. */
ZT_CPU_CLONES static void load_f32(float *restrict dst, const void *src, zt_dtype t, size_t off, size_t n)
{
    if (t == ZT_F32) {
        memcpy(dst, (const float *)src + off, n * sizeof(float));
    } else if (t == ZT_BF16) {
        const uint16_t *restrict s = (const uint16_t *)src + off;
#pragma omp simd
        for (size_t i = 0; i < n; i++)
            dst[i] = zt_v_f32_from_bf16(s[i]);
    } else {
        const uint16_t *restrict s = (const uint16_t *)src + off;
#pragma omp simd
        for (size_t i = 0; i < n; i++)
            dst[i] = zt_v_f32_from_f16(s[i]);
    }
}

/* dst[off, off+n) = src[0,n) rounded to t (nearest even). */
ZT_CPU_CLONES static void store_f32(void *dst, zt_dtype t, size_t off, const float *restrict src, size_t n)
{
    if (t == ZT_F32) {
        memcpy((float *)dst + off, src, n * sizeof(float));
    } else if (t == ZT_BF16) {
        uint16_t *restrict d = (uint16_t *)dst + off;
#pragma omp simd
        for (size_t i = 0; i < n; i++)
            d[i] = zt_v_bf16_from_f32(src[i]);
    } else {
        uint16_t *restrict d = (uint16_t *)dst + off;
#pragma omp simd
        for (size_t i = 0; i < n; i++)
            d[i] = zt_v_f16_from_f32(src[i]);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* AdamW. Follows torch.optim.AdamW / torch.optim.Adam (1.13, single-tensor CPU path) operation
 * by operation, fused multiply-adds where its vector kernels fuse, so that results are bit for
 * bit torch's when the hyperparameters are exact in float (tests/kernels checks this against
 * torch itself):
 *   adamw:   p *= 1 - lr wd                     l2_mode: g = g + wd p  (DeepSpeed's Adam, L2)
 *   m = m b1 + (1 - b1) g ; v = v b2 + ((1 - b2) g) g
 *   p += (-lr/bc1 * m) / (sqrt(v) / sqrt(bc2) + eps)
 * Scalars derived from the arguments are computed in double and rounded once, as torch does
 * with its Python floats. */

typedef struct adam_consts {
    float b1, omb1, b2, omb2, eps, wd, gs, step, bc2_sqrt, decay;
} adam_consts;

ZT_CPU_CLONES static void adamw_chunk(const adam_consts *k, int l2_mode, float *restrict p,
                        const float *restrict g, float *restrict m, float *restrict v, size_t n)
{
    if (l2_mode) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float gi = fmaf(p[i], k->wd, g[i] * k->gs);
            float mi = fmaf(gi, k->omb1, m[i] * k->b1);
            float vi = fmaf(k->omb2 * gi, gi, v[i] * k->b2);
            m[i] = mi;
            v[i] = vi;
            float denom = zt_v_sqrtf(vi) / k->bc2_sqrt + k->eps;
            p[i] = p[i] + (k->step * mi) / denom;
        }
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] * k->gs;
            float pi = p[i] * k->decay;
            float mi = fmaf(gi, k->omb1, m[i] * k->b1);
            float vi = fmaf(k->omb2 * gi, gi, v[i] * k->b2);
            m[i] = mi;
            v[i] = vi;
            float denom = zt_v_sqrtf(vi) / k->bc2_sqrt + k->eps;
            p[i] = pi + (k->step * mi) / denom;
        }
    }
}

void zt_cpu_adamw(zt_kctx *ctx, float *param, const void *grad, zt_dtype grad_dtype, float *m,
                  float *v, size_t n, const zt_adamw_args *args, void *param_lp, zt_dtype lp_dtype)
{
    adam_consts k = {
        .b1 = args->beta1,
        .omb1 = (float)(1.0 - (double)args->beta1),
        .b2 = args->beta2,
        .omb2 = (float)(1.0 - (double)args->beta2),
        .eps = args->eps,
        .wd = args->weight_decay,
        .gs = args->grad_scale,
        .step = (float)(-(double)args->lr / (double)args->bc1),
        .bc2_sqrt = (float)sqrt((double)args->bc2),
        .decay = (float)(1.0 - (double)args->lr * (double)args->weight_decay),
    };
    size_t nc = nchunks(n);
    int nt = zt_cpu_threads_for(ctx, n);
    int l2 = args->l2_mode;
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t c = 0; c < nc; c++) {
        float gbuf[ZT_CHUNK];
        size_t off = c * ZT_CHUNK;
        size_t len = n - off < ZT_CHUNK ? n - off : ZT_CHUNK;
        const float *g;
        if (grad_dtype == ZT_F32) {
            g = (const float *)grad + off;
        } else {
            load_f32(gbuf, grad, grad_dtype, off, len);
            g = gbuf;
        }
        adamw_chunk(&k, l2, param + off, g, m + off, v + off, len);
        if (param_lp) store_f32(param_lp, lp_dtype, off, param + off, len);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* cast, accumulate, scale */

void zt_cpu_cast(zt_kctx *ctx, void *dst, zt_dtype dst_dtype, const void *src, zt_dtype src_dtype,
                 size_t n)
{
    size_t nc = nchunks(n);
    int nt = zt_cpu_threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t off = c * ZT_CHUNK;
        size_t len = n - off < ZT_CHUNK ? n - off : ZT_CHUNK;
        size_t es = zt_dtype_size(dst_dtype);
        if (dst_dtype == src_dtype) {
            if (dst != src) memcpy((char *)dst + off * es, (const char *)src + off * es, len * es);
        } else if (dst_dtype == ZT_F32) {
            load_f32((float *)dst + off, src, src_dtype, off, len);
        } else if (src_dtype == ZT_F32) {
            store_f32(dst, dst_dtype, off, (const float *)src + off, len);
        } else { /* bf16 <-> fp16 through float: widening is exact, so one rounding */
            float buf[ZT_CHUNK];
            load_f32(buf, src, src_dtype, off, len);
            store_f32(dst, dst_dtype, off, buf, len);
        }
    }
}

void zt_cpu_round16(zt_kctx *ctx, float *x, zt_dtype dt16, size_t n)
{
    size_t nc = nchunks(n);
    int nt = zt_cpu_threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t off = c * ZT_CHUNK;
        size_t len = n - off < ZT_CHUNK ? n - off : ZT_CHUNK;
        uint16_t buf[ZT_CHUNK];
        store_f32(buf, dt16, 0, x + off, len);
        load_f32(x + off, buf, dt16, 0, len);
    }
}

/* d[0,len) += scale * s[0,len) */
ZT_CPU_CLONES static void axpy_chunk(float *restrict d, const float *restrict s, float scale,
                                     size_t len)
{
#pragma omp simd
    for (size_t i = 0; i < len; i++)
        d[i] = fmaf(scale, s[i], d[i]);
}

void zt_cpu_accumulate(zt_kctx *ctx, void *dst, zt_dtype dst_dtype, const float *src, float scale,
                       size_t n)
{
    size_t nc = nchunks(n);
    int nt = zt_cpu_threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t off = c * ZT_CHUNK;
        size_t len = n - off < ZT_CHUNK ? n - off : ZT_CHUNK;
        if (dst_dtype == ZT_F32) {
            axpy_chunk((float *)dst + off, src + off, scale, len);
        } else {
            float buf[ZT_CHUNK];
            load_f32(buf, dst, dst_dtype, off, len);
            axpy_chunk(buf, src + off, scale, len);
            store_f32(dst, dst_dtype, off, buf, len);
        }
    }
}

void zt_cpu_scale(zt_kctx *ctx, float *x, float s, size_t n)
{
    int nt = zt_cpu_threads_for(ctx, n);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

/* ---------------------------------------------------------------------------------------- */
/* squared norm and non-finite count */

/* sum of squares of the finite f[0,len) in double; *bad = how many are not finite */
ZT_CPU_CLONES static double sumsq_chunk(const float *restrict f, size_t len, uint32_t *bad)
{
    double s = 0.0;
    uint32_t b = 0;
#pragma omp simd reduction(+ : s, b)
    for (size_t i = 0; i < len; i++) {
        /* mask the bits rather than select floats: gcc will not if-convert a float->double
         * conversion of a possible NaN (it may trap) and would keep the loop scalar */
        uint32_t u = zt_v_bits(f[i]);
        uint32_t nonfinite = (u & 0x7f800000u) == 0x7f800000u;
        double d = (double)zt_v_float(u & (nonfinite - 1u));
        s += d * d;
        b += nonfinite;
    }
    *bad = b;
    return s;
}

void zt_cpu_sumsq_nonfinite(zt_kctx *ctx, const void *x, zt_dtype dtype, size_t n, double out[2])
{
    size_t nc = nchunks(n);
    int nt = zt_cpu_threads_for(ctx, n);
    double sum = 0.0;
    uint64_t bad = 0;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : sum, bad) if (parallel : nt > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t off = c * ZT_CHUNK;
        size_t len = n - off < ZT_CHUNK ? n - off : ZT_CHUNK;
        float buf[ZT_CHUNK];
        const float *f;
        if (dtype == ZT_F32) {
            f = (const float *)x + off;
        } else {
            load_f32(buf, x, dtype, off, len); /* widening keeps inf and NaN */
            f = buf;
        }
        uint32_t b = 0; /* at most ZT_CHUNK */
        double s = sumsq_chunk(f, len, &b);
        sum += s;
        bad += b;
    }
    out[0] += sum;
    out[1] += (double)bad;
}
