/* zerotrain: the optimizer and precision kernels on CUDA: fused AdamW / Adam-with-L2 over flat
 * ranges (fp32, bf16 or fp16 gradients, optional 16-bit copy of the result), dtype casts,
 * scaled accumulation, scaling, and the squared norm with a non-finite count. AdamW uses the
 * round-to-nearest intrinsics operation by operation so that it matches kernels/cpu/optim_cpu.c
 * bit for bit (no contraction into other fused multiply-adds than the CPU's). */
#include "cuda_int.h"
#include "cuda_conv.h"

#include <math.h>

static __device__ __forceinline__ float load_f32(const void *p, int t, size_t i)
{
    if (t == ZT_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == ZT_BF16 ? f32_from_bf16(h) : f32_from_f16(h);
}

static __device__ __forceinline__ void store_f32(void *p, int t, size_t i, float v)
{
    if (t == ZT_F32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = t == ZT_BF16 ? bf16_from_f32(v) : f16_from_f32(v);
}

static bool dtype_ok(zt_kctx *ctx, int t, const char *op)
{
    if (t == ZT_F32 || t == ZT_BF16 || t == ZT_F16) return true;
    zt_cuda_fail(
        ctx, ZT_ERR_INVALID,
        "%s: unknown element type %d (expected fp32, bf16 or fp16); this is a bug in the caller",
        op, t);
    return false;
}

/* ---------------------------------------------------------------------------------------- */
/* AdamW (see optim_cpu.c: torch.optim.AdamW / Adam operation by operation) */

typedef struct adam_consts {
    float b1, omb1, b2, omb2, eps, wd, gs, step, bc2_sqrt, decay;
    int l2;
} adam_consts;

static __global__ void adamw_kernel(float *p, const void *g, int gdt, float *m, float *v, size_t n,
                                    adam_consts k, void *plp, int lpdt)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = __fmul_rn(load_f32(g, gdt, i), k.gs);
        float pi = p[i];
        float pd;
        if (k.l2) {
            gi = __fmaf_rn(pi, k.wd, gi);
            pd = pi;
        } else {
            pd = __fmul_rn(pi, k.decay);
        }
        float mi = __fmaf_rn(gi, k.omb1, __fmul_rn(m[i], k.b1));
        float vi = __fmaf_rn(__fmul_rn(k.omb2, gi), gi, __fmul_rn(v[i], k.b2));
        m[i] = mi;
        v[i] = vi;
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
        float pn = __fadd_rn(pd, __fdiv_rn(__fmul_rn(k.step, mi), denom));
        p[i] = pn;
        if (plp) store_f32(plp, lpdt, i, pn);
    }
}

extern "C" void zt_cuda_adamw(zt_kctx *ctx, float *param, const void *grad, int grad_dtype,
                              float *m, float *v, size_t n, const zt_adamw_args *args,
                              void *param_lp, int lp_dtype)
{
    if (!n || !dtype_ok(ctx, grad_dtype, "adamw") ||
        (param_lp && !dtype_ok(ctx, lp_dtype, "adamw")))
        return;
    /* scalars derived in double and rounded once, exactly as optim_cpu.c */
    adam_consts k;
    k.b1 = args->beta1;
    k.omb1 = (float)(1.0 - (double)args->beta1);
    k.b2 = args->beta2;
    k.omb2 = (float)(1.0 - (double)args->beta2);
    k.eps = args->eps;
    k.wd = args->weight_decay;
    k.gs = args->grad_scale;
    k.step = (float)(-(double)args->lr / (double)args->bc1);
    k.bc2_sqrt = (float)sqrt((double)args->bc2);
    k.decay = (float)(1.0 - (double)args->lr * (double)args->weight_decay);
    k.l2 = args->l2_mode;
    ZT_CUDA_LAUNCH(ctx, "adamw", adamw_kernel, zt_cuda_blocks(n), ZT_CUDA_THREADS, param, grad,
                   grad_dtype, m, v, n, k, param_lp, lp_dtype);
}

/* ---------------------------------------------------------------------------------------- */
/* cast, accumulate, scale */

static __global__ void cast_kernel(void *dst, int ddt, const void *src, int sdt, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_f32(dst, ddt, i, load_f32(src, sdt, i));
}

static __global__ void accumulate_kernel(void *dst, int ddt, const float *src, float scale,
                                         size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_f32(dst, ddt, i, __fmaf_rn(scale, src[i], load_f32(dst, ddt, i)));
}

static __global__ void round16_kernel(float *x, int dt16, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        x[i] = dt16 == ZT_BF16 ? f32_from_bf16(bf16_from_f32(v)) : f32_from_f16(f16_from_f32(v));
    }
}

extern "C" void zt_cuda_round16(zt_kctx *ctx, float *x, zt_dtype dt16, size_t n)
{
    if (!n || !dtype_ok(ctx, (int)dt16, "round16")) return;
    if (dt16 == ZT_F32) return;
    ZT_CUDA_LAUNCH(ctx, "round16", round16_kernel, zt_cuda_blocks(n), ZT_CUDA_THREADS, x, (int)dt16,
                   n);
}

static __global__ void scale_kernel(float *x, float s, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], s);
}

extern "C" void zt_cuda_cast(zt_kctx *ctx, void *dst, int dst_dtype, const void *src,
                             int src_dtype, size_t n)
{
    if (!n || !dtype_ok(ctx, dst_dtype, "cast") || !dtype_ok(ctx, src_dtype, "cast")) return;
    if (dst_dtype == src_dtype) {
        if (dst != src)
            zt_cuda_check(ctx,
                          cudaMemcpyAsync(dst, src, n * zt_dtype_size((zt_dtype)dst_dtype),
                                          cudaMemcpyDeviceToDevice, ctx->stream),
                          "cast (same type: cudaMemcpyAsync)");
        return;
    }
    ZT_CUDA_LAUNCH(ctx, "cast", cast_kernel, zt_cuda_blocks(n), ZT_CUDA_THREADS, dst,
                   dst_dtype, src, src_dtype, n);
}

/* the matmuls' staged operands: four elements a thread from 16-byte loads where rows allow
 * (quads), else one */
template <bool HALF>
static __global__ void stage_cast_kernel(uint16_t *dst, const float *src, size_t rows, size_t cols,
                                         size_t ld, bool quads)
{
    size_t w = quads ? cols / 4 : cols, n = rows * w, stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (zt_grid_rc p = zt_grid_rc_at(i, w, stride); i < n; i += stride, zt_grid_rc_next(&p, w)) {
        size_t r = p.r, c = p.c;
        if (quads) { /* row r's quad c: ld and cols are multiples of 4 */
            zt_store4_as<HALF ? 2 : 1>(dst, (r * cols) / 4 + c,
                                       zt_load4_as<0>(src, (r * ld) / 4 + c));
        } else {
            zt_store_as<HALF ? 2 : 1>(dst, r * cols + c, src[r * ld + c]);
        }
    }
}

extern "C" void zt_cuda_stage_cast(zt_kctx *ctx, uint16_t *dst, int mm16, const float *src,
                                   int rows, int cols, size_t ld)
{
    if (rows <= 0 || cols <= 0) return;
    /* little-endian pairs: element 2k in the low half of each 32-bit word, as stored */
    bool quads =
        cols % 4 == 0 && ld % 4 == 0 && (uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0;
    size_t n = (size_t)rows * (size_t)(quads ? cols / 4 : cols);
    if (mm16 == ZT_MM_FP16)
        ZT_CUDA_LAUNCH(ctx, "matmul staging (fp16)", stage_cast_kernel<true>, zt_cuda_blocks(n),
                       ZT_CUDA_THREADS, dst, src, (size_t)rows, (size_t)cols, ld, quads);
    else
        ZT_CUDA_LAUNCH(ctx, "matmul staging (bf16)", stage_cast_kernel<false>, zt_cuda_blocks(n),
                       ZT_CUDA_THREADS, dst, src, (size_t)rows, (size_t)cols, ld, quads);
}

extern "C" void zt_cuda_accumulate(zt_kctx *ctx, void *dst, int dst_dtype, const float *src,
                                   float scale, size_t n)
{
    if (!n || !dtype_ok(ctx, dst_dtype, "accumulate")) return;
    ZT_CUDA_LAUNCH(ctx, "accumulate", accumulate_kernel, zt_cuda_blocks(n), ZT_CUDA_THREADS, dst,
                   dst_dtype, src, scale, n);
}

extern "C" void zt_cuda_scale(zt_kctx *ctx, float *x, float s, size_t n)
{
    if (!n) return;
    ZT_CUDA_LAUNCH(ctx, "scale", scale_kernel, zt_cuda_blocks(n), ZT_CUDA_THREADS, x, s, n);
}

/* ---------------------------------------------------------------------------------------- */
/* squared norm and non-finite count: per-block partials (double) into the scratch, then one
 * block sums them in a fixed order into the result slot (deterministic) */

static __global__ void sumsq_partial_kernel(double *part, const void *x, int dt, size_t n)
{
    __shared__ double sh[32];
    double s = 0.0, bad = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float f = load_f32(x, dt, i); /* widening keeps inf and NaN */
        if (isfinite(f)) {
            double d = (double)f;
            s += d * d;
        } else {
            bad += 1.0;
        }
    }
    s = zt_block_sum_d(s, sh);
    bad = zt_block_sum_d(bad, sh);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = s;
        part[2 * blockIdx.x + 1] = bad;
    }
}

static __global__ void sumsq_final_kernel(double *red, const double *part, int nparts)
{
    __shared__ double sh[32];
    double s = 0.0, bad = 0.0;
    for (int k = threadIdx.x; k < nparts; k += blockDim.x) {
        s += part[2 * k];
        bad += part[2 * k + 1];
    }
    s = zt_block_sum_d(s, sh);
    bad = zt_block_sum_d(bad, sh);
    if (threadIdx.x == 0) {
        red[0] = s;
        red[1] = bad;
    }
}

extern "C" void zt_cuda_sumsq(zt_kctx *ctx, double *red, const void *x, int dtype, size_t n)
{
    if (!dtype_ok(ctx, dtype, "sumsq_nonfinite")) {
        zt_cuda_check(ctx, cudaMemsetAsync(red, 0, 2 * sizeof(double), ctx->stream),
                      "sumsq_nonfinite (clearing the result)");
        return;
    }
    size_t blocks = (n + 4 * ZT_CUDA_THREADS - 1) / (4 * ZT_CUDA_THREADS);
    if (blocks > ZT_CUDA_RED_BLOCKS) blocks = ZT_CUDA_RED_BLOCKS;
    if (blocks < 1) blocks = 1;
    double *part = (double *)ctx->scratch;
    ZT_CUDA_LAUNCH(ctx, "sumsq_nonfinite", sumsq_partial_kernel, (unsigned)blocks, ZT_CUDA_THREADS,
                   part, x, dtype, n);
    ZT_CUDA_LAUNCH(ctx, "sumsq_nonfinite", sumsq_final_kernel, 1, ZT_CUDA_THREADS, red, part,
                   (int)blocks);
}
