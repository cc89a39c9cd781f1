/* zerotrain: the fused softmax + cross-entropy on CUDA, on fp32 or 16-bit logits, its gradient
 * written in fp32 or rounded into a matmul's 16-bit staging. Arithmetic follows
 * kernels/cpu/gpt2_cpu.c expression by expression; sums run in another order. */
#include "cuda_int.h"
#include "cuda_conv.h"
#include "cuda_math.h"

#define ZT_XENT_THREADS 512
#define ZT_XENT_BATCH 8 /* quads of logits a cross-entropy thread loads before using them */

/* ---------------------------------------------------------------------------------------- */
/* softmax + cross-entropy: one block per row. Every read of a row element happens before the
 * barriers of the two reductions; afterwards each thread writes only elements it reads itself,
 * so dlogits may alias logits. */

/* One block per row, two passes over its V logits: the maximum and the sum of exponentials
 * together (each thread keeps its own running pair, rescaled as its maximum grows, then the
 * block combines them), then the gradient; 16-byte loads where the row allows. The
 * exponentials are the multi-function unit's (zt_exp_ftz, of x - max: relative error within a
 * few 1e-6 where the terms matter): with expf, the kernel on 16-bit logits would run at
 * its instruction rate, below DRAM's bandwidth (docs/performance.md). */
static __device__ __forceinline__ void xent_add(float &m, float &s, float x)
{
    if (x > m) {
        s = s * zt_exp_ftz(m - x) + 1.0f; /* m = -inf, s = 0 at first: 0 * 0 + 1 */
        m = x;
    } else if (x != -INFINITY) { /* -inf adds nothing (-inf - -inf would be NaN); NaN does */
        s += zt_exp_ftz(x - m);
    }
}

/* xent_add of a quad: its maximum first, then at most one rescaling of the pair, then its four
 * terms; an element NaN makes the sum NaN, one -inf adds nothing */
static __device__ __forceinline__ void xent_add4(float &m, float &s, float4 x)
{
    float mq = fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w)); /* NaN passed over, as fmaxf does */
    if (mq > m) {
        s *= zt_exp_ftz(m - mq); /* m = -inf at first: s = 0 * 0 */
        m = mq;
    }
    float b = m == -INFINITY ? 0.0f : m; /* all -inf so far: each term 2^-inf = 0, not NaN */
    s += (zt_exp_ftz(x.x - b) + zt_exp_ftz(x.y - b)) + (zt_exp_ftz(x.z - b) + zt_exp_ftz(x.w - b));
}

/* OT: dlogits' type as zt_store_as's; IT: logits' as zt_load_as's (0 fp32, 1 bf16, 2 fp16) */
template <int OT, int IT = 0>
static __global__ void __launch_bounds__(ZT_XENT_THREADS, 2)
    crossentropy_kernel(float *losses, void *dlogits, const void *logits, const int32_t *targets,
                        int V, int Vp, float dloss)
{
    __shared__ float sh[32];
    size_t row = blockIdx.x;
    const void *l = IT == 0 ? (const void *)((const float *)logits + row * (size_t)Vp)
                            : (const void *)((const uint16_t *)logits + row * (size_t)Vp);
    void *d = !dlogits  ? NULL
              : OT == 0 ? (void *)((float *)dlogits + row * (size_t)Vp)
                        : (void *)((uint16_t *)dlogits + row * (size_t)Vp);
    int t = targets[row];
    bool valid = t >= 0 && t < V;
    float lt = valid ? zt_load_as<IT>(l, t) : NAN; /* a bad target gives a NaN loss, not a fault */
    /* four elements a load from the row's start (16 or 8 bytes: rows are aligned so when Vp is a
     * multiple of 4 and logits are), the rest one by one */
    int V4 = Vp % 4 == 0 && (uintptr_t)logits % (IT == 0 ? 16 : 8) == 0 ? V / 4 : 0;
    float m = -INFINITY, s = 0.0f;
    /* ZT_XENT_BATCH quads loaded before any is used (a loop of one load and its use waited a
     * DRAM round trip a quad), then added in the order of the quads */
    int q = threadIdx.x, stride = blockDim.x;
    for (; q + (ZT_XENT_BATCH - 1) * stride < V4; q += ZT_XENT_BATCH * stride) {
        typename zt_raw4<IT>::type h[ZT_XENT_BATCH];
        ZT_UNROLL
        for (int u = 0; u < ZT_XENT_BATCH; u++)
            h[u] = zt_load4_raw<IT>(l, q + u * stride);
        ZT_UNROLL
        for (int u = 0; u < ZT_XENT_BATCH; u++)
            xent_add4(m, s, zt_widen4<IT>(h[u]));
    }
    for (; q < V4; q += stride)
        xent_add4(m, s, zt_load4_as<IT>(l, q));
    for (int j = 4 * V4 + threadIdx.x; j < V; j += blockDim.x)
        xent_add(m, s, zt_load_as<IT>(l, j));
    float mx = zt_block_max(m, sh);
    /* a NaN logit: fmaxf passes it over but the thread's own sum carries it into the loss */
    s = zt_block_sum(m == -INFINITY ? 0.0f : s * expf(m - mx), sh);
    if (threadIdx.x == 0) losses[row] = logf(s) - (lt - mx);
    if (!d) return;
    float k = dloss / s;
    /* the gradient four elements a load and a store where dlogits' rows are aligned as the
     * logits' (each thread writes the quads it reads itself), the rest one by one */
    int D4 = (uintptr_t)dlogits % (OT == 0 ? 16 : 8) == 0 ? V4 : 0;
    /* as above: a batch of quads loaded, then each one's gradient stored */
    for (q = threadIdx.x; q < D4; q += ZT_XENT_BATCH * stride) {
        typename zt_raw4<IT>::type h[ZT_XENT_BATCH];
        ZT_UNROLL
        for (int u = 0; u < ZT_XENT_BATCH; u++)
            if (q + u * stride < D4) h[u] = zt_load4_raw<IT>(l, q + u * stride);
        ZT_UNROLL
        for (int u = 0; u < ZT_XENT_BATCH; u++) {
            int qu = q + u * stride;
            if (qu >= D4) break;
            float4 x = zt_widen4<IT>(h[u]), g;
            g.x = zt_exp_ftz(x.x - mx) * k, g.y = zt_exp_ftz(x.y - mx) * k;
            g.z = zt_exp_ftz(x.z - mx) * k, g.w = zt_exp_ftz(x.w - mx) * k;
            int p = t - 4 * qu; /* the target's place in this quad, if it is in it */
            if (p == 0) g.x -= dloss;
            if (p == 1) g.y -= dloss;
            if (p == 2) g.z -= dloss;
            if (p == 3) g.w -= dloss;
            zt_store4_as<OT>(d, qu, g);
        }
    }
    for (int j = 4 * D4 + threadIdx.x; j < V; j += blockDim.x) {
        float g = zt_exp_ftz(zt_load_as<IT>(l, j) - mx) * k;
        zt_store_as<OT>(d, j, j == t ? g - dloss : g);
    }
    for (int j = V + threadIdx.x; j < Vp; j += blockDim.x)
        zt_store_as<OT>(d, j, 0.0f);
}

extern "C" void zt_cuda_crossentropy(zt_kctx *ctx, float *losses, float *dlogits,
                                     const float *logits, const int32_t *targets, int N, int V,
                                     int Vp, float dloss)
{
    if (N <= 0) return;
    ZT_CUDA_LAUNCH(ctx, "crossentropy_forward_backward", crossentropy_kernel<0>, N, ZT_XENT_THREADS,
                   losses, (void *)dlogits, (const void *)logits, targets, V, Vp, dloss);
}

extern "C" void zt_cuda_crossentropy16(zt_kctx *ctx, float *losses, uint16_t *d16, int mm16,
                                       const float *logits, const int32_t *targets, int N, int V,
                                       int Vp, float dloss)
{
    if (N <= 0) return;
    if (mm16 == ZT_MM_FP16)
        ZT_CUDA_LAUNCH(ctx, "crossentropy_forward_backward (fp16 dlogits)", crossentropy_kernel<2>,
                       N, ZT_XENT_THREADS, losses, (void *)d16, logits, targets, V, Vp, dloss);
    else
        ZT_CUDA_LAUNCH(ctx, "crossentropy_forward_backward (bf16 dlogits)", crossentropy_kernel<1>,
                       N, ZT_XENT_THREADS, losses, (void *)d16, logits, targets, V, Vp, dloss);
}

extern "C" void zt_cuda_crossentropy16in(zt_kctx *ctx, float *losses, uint16_t *d16, int mm16,
                                         const uint16_t *l16, const int32_t *targets, int N, int V,
                                         int Vp, float dloss)
{
    if (N <= 0) return;
    if (mm16 == ZT_MM_FP16)
        ZT_CUDA_LAUNCH(ctx, "crossentropy_forward_backward (fp16 logits)",
                       (crossentropy_kernel<2, 2>), N, ZT_XENT_THREADS, losses, (void *)d16,
                       (const void *)l16, targets, V, Vp, dloss);
    else
        ZT_CUDA_LAUNCH(ctx, "crossentropy_forward_backward (bf16 logits)",
                       (crossentropy_kernel<1, 1>), N, ZT_XENT_THREADS, losses, (void *)d16,
                       (const void *)l16, targets, V, Vp, dloss);
}
