/* zerotrain: GELU on CUDA: forward, backward, the gradient in place for cuBLASLt's epilogue
 * paths, and GELU rounded into a matmul's 16-bit staging. Arithmetic follows
 * kernels/cpu/gpt2_cpu.c expression by expression. */
#include "cuda_int.h"
#include "cuda_conv.h"
#include "cuda_math.h"

#define ZT_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define ZT_GELU_C 0.044715f
#define ZT_GELU_ARG_MAX 80.0f

/* ---------------------------------------------------------------------------------------- */
/* GELU (tanh form) as x / (1 + exp(-2u)); see gpt2_cpu.c for the derivation */

/* -2u, clamped so that e^(-2u) stays finite */
static __device__ __forceinline__ float gelu_arg(float x)
{
    float u = ZT_GELU_K * (x + ZT_GELU_C * x * x * x);
    float arg = -2.0f * u;
    return arg > ZT_GELU_ARG_MAX ? ZT_GELU_ARG_MAX : arg;
}

/* e^(-2u) by expf, for GELU' */
static __device__ __forceinline__ float gelu_e(float x)
{
    return expf(gelu_arg(x));
}

/* GELU(x) from the multi-function unit's 2^x and 1/x: with -2u log2(e) =
 * x (1 + C x^2) (-2 K log2(e)) clamped to 80 log2(e), GELU(x) = x / (1 + 2^that). About 9
 * instructions, where expf and the IEEE division took ~30, with which the staging of GELU's output
 * for the matmuls runs at its instruction rate (docs/performance.md). Relative error within ~5e-6
 * (the argument's rounding, largest at the clamp), inside fp32's test bounds and far inside a
 * 16-bit copy's rounding; gelu_forward and every staging of GELU's output compute it by this one
 * function, so their bits agree. A NaN x gives NaN (the product with x), +-inf gives +-inf. */
static __device__ __forceinline__ float gelu_out(float x)
{
    const float k2 = -2.0f * ZT_GELU_K * 1.4426950408889634f,
                max2 = ZT_GELU_ARG_MAX * 1.4426950408889634f;
    float a = fminf(x * fmaf(ZT_GELU_C * x, x, 1.0f) * k2, max2);
    return x * zt_rcp_approx(1.0f + zt_exp2_ftz(a));
}

static __global__ void gelu_forward_kernel(float *out, const float *inp, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = gelu_out(inp[i]);
}

/* dst = GELU(pre) rounded to fp16 (HALF) or bf16, the bits of gelu_forward then the matmuls'
 * staging (a NaN's payload aside: quads are rounded by zt_store4_cvt16): the 16-bit copy of
 * GELU's output without the fp32 one; four elements a thread from 16-byte loads (8-byte where
 * pre is 16-bit) where the addresses allow (quads), else one. IT: pre's type (0 fp32, 1 bf16,
 * 2 fp16). */
template <bool HALF, int IT>
static __global__ void stage_gelu_kernel(uint16_t *dst, const void *pre, size_t rows, size_t cols,
                                         size_t ld, bool quads)
{
    size_t w = quads ? cols / 4 : cols, n = rows * w, stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    zt_grid_rc p = zt_grid_rc_at(i, w, stride);
    if (!quads) {
        for (; i < n; i += stride, zt_grid_rc_next(&p, w))
            zt_store_as<HALF ? 2 : 1>(dst, p.r * cols + p.c,
                                      gelu_out(zt_load_as<IT>(pre, p.r * ld + p.c)));
        return;
    }
    /* row r's quad c (ld and cols multiples of 4), two items a thread loaded before either is
     * used: twice the bytes in flight of one (8 a thread where pre is 16-bit) */
    for (; i < n; i += 2 * stride) {
        zt_grid_rc q = p;
        zt_grid_rc_next(&q, w);
        bool two = i + stride < n;
        float4 a = zt_load4_as<IT>(pre, (p.r * ld) / 4 + p.c), b = a;
        if (two) b = zt_load4_as<IT>(pre, (q.r * ld) / 4 + q.c);
        a.x = gelu_out(a.x), a.y = gelu_out(a.y), a.z = gelu_out(a.z), a.w = gelu_out(a.w);
        zt_store4_cvt16<HALF ? 2 : 1>(dst, (p.r * cols) / 4 + p.c, a);
        if (two) {
            b.x = gelu_out(b.x), b.y = gelu_out(b.y), b.z = gelu_out(b.z), b.w = gelu_out(b.w);
            zt_store4_cvt16<HALF ? 2 : 1>(dst, (q.r * cols) / 4 + q.c, b);
        }
        p = q;
        zt_grid_rc_next(&p, w);
    }
}

/* stage_gelu_kernel over rows x cols of pre (type it: 0 fp32, else the zt_cuda_mm of its 16-bit
 * type) rounded to mm16's type */
static void stage_gelu(zt_kctx *ctx, uint16_t *dst, int mm16, const void *pre, int it, int rows,
                       int cols, size_t ld)
{
    if (rows <= 0 || cols <= 0) return;
    /* little-endian pairs: element 2k in the low half of each 32-bit word, as stored */
    bool quads = cols % 4 == 0 && ld % 4 == 0 && (uintptr_t)pre % (it ? 8 : 16) == 0 &&
                 (uintptr_t)dst % 8 == 0;
    size_t n = (size_t)rows * (size_t)(quads ? cols / 4 : cols);
    unsigned g = zt_cuda_blocks(quads ? (n + 1) / 2 : n); /* quads: two a thread */
    size_t R = (size_t)rows, Cn = (size_t)cols;
    bool half = mm16 == ZT_MM_FP16;
    const char *what =
        half ? "matmul staging (fp16) of GELU's output" : "matmul staging (bf16) of GELU's output";
    if (it == ZT_MM_BF16 && half)
        ZT_CUDA_LAUNCH(ctx, what, (stage_gelu_kernel<true, 1>), g, ZT_CUDA_THREADS, dst, pre, R, Cn,
                       ld, quads);
    else if (it == ZT_MM_BF16)
        ZT_CUDA_LAUNCH(ctx, what, (stage_gelu_kernel<false, 1>), g, ZT_CUDA_THREADS, dst, pre, R,
                       Cn, ld, quads);
    else if (it == ZT_MM_FP16 && half)
        ZT_CUDA_LAUNCH(ctx, what, (stage_gelu_kernel<true, 2>), g, ZT_CUDA_THREADS, dst, pre, R, Cn,
                       ld, quads);
    else if (it == ZT_MM_FP16)
        ZT_CUDA_LAUNCH(ctx, what, (stage_gelu_kernel<false, 2>), g, ZT_CUDA_THREADS, dst, pre, R,
                       Cn, ld, quads);
    else if (half)
        ZT_CUDA_LAUNCH(ctx, what, (stage_gelu_kernel<true, 0>), g, ZT_CUDA_THREADS, dst, pre, R, Cn,
                       ld, quads);
    else
        ZT_CUDA_LAUNCH(ctx, what, (stage_gelu_kernel<false, 0>), g, ZT_CUDA_THREADS, dst, pre, R,
                       Cn, ld, quads);
}

extern "C" void zt_cuda_stage_gelu(zt_kctx *ctx, uint16_t *dst, int mm16, const float *pre,
                                   int rows, int cols, size_t ld)
{
    stage_gelu(ctx, dst, mm16, pre, 0, rows, cols, ld);
}

extern "C" void zt_cuda_stage_gelu16(zt_kctx *ctx, uint16_t *dst, int mm16, const uint16_t *pre,
                                     int pre_mm16, int rows, int cols, size_t ld)
{
    stage_gelu(ctx, dst, mm16, pre, pre_mm16, rows, cols, ld);
}

/* GELU'(x) */
static __device__ __forceinline__ float gelu_grad(float x)
{
    float e = gelu_e(x);
    float s = 1.0f / (1.0f + e);
    float du = ZT_GELU_K * (1.0f + 3.0f * ZT_GELU_C * x * x);
    return s + 2.0f * x * du * ((s * e) * s);
}

static __global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                            size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = fmaf(gelu_grad(inp[i]), dout[i], dinp[i]);
}

static __global__ void gelu_grad_kernel(float *d, const float *inp, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = fmaf(gelu_grad(inp[i]), d[i], 0.0f);
}

extern "C" void zt_cuda_gelu_forward(zt_kctx *ctx, float *out, const float *inp, size_t n)
{
    if (!n) return;
    ZT_CUDA_LAUNCH(ctx, "gelu_forward", gelu_forward_kernel, zt_cuda_blocks(n), ZT_CUDA_THREADS,
                   out, inp, n);
}

extern "C" void zt_cuda_gelu_backward(zt_kctx *ctx, float *dinp, const float *inp,
                                      const float *dout, size_t n)
{
    if (!n || !dinp) return;
    ZT_CUDA_LAUNCH(ctx, "gelu_backward", gelu_backward_kernel, zt_cuda_blocks(n), ZT_CUDA_THREADS,
                   dinp, inp, dout, n);
}

extern "C" void zt_cuda_gelu_grad_inplace(zt_kctx *ctx, float *d, const float *inp, size_t n)
{
    if (!n) return;
    ZT_CUDA_LAUNCH(ctx, "gelu_grad", gelu_grad_kernel, zt_cuda_blocks(n), ZT_CUDA_THREADS, d, inp,
                   n);
}
