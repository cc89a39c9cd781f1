/* zerotrain: the GPT-2 kernels on CUDA that are neither LayerNorm, GELU nor the loss: the
 * embeddings, the residual, attention's causal softmax (with each row's log-sum-exp), the
 * recomputation of its probabilities and the gradient of its scores, and the device probe.
 * Arithmetic follows kernels/cpu/gpt2_cpu.c expression by expression; sums run in another order. */
#include "cuda_int.h"
#include "cuda_math.h"

/* rows per warp-per-row block */
#define ZT_ROWS_PER_BLOCK (ZT_CUDA_THREADS / 32)

/* ---------------------------------------------------------------------------------------- */
/* encoder */

static __global__ void encoder_forward_kernel(float *out, const int32_t *inp, const float *wte,
                                              const float *wpe, size_t NC, int T, int C)
{
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < NC;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t i = idx / (size_t)C, c = idx % (size_t)C;
        size_t t = i % (size_t)T;
        out[idx] = wte[(size_t)inp[i] * C + c] + wpe[t * C + c];
    }
}

static __global__ void encoder_dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    size_t TC = (size_t)T * C;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < TC;
         idx += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[idx];
        for (int b = 0; b < B; b++)
            acc += dout[(size_t)b * TC + idx];
        dwpe[idx] = acc;
    }
}

static __global__ void encoder_dwte_kernel(float *dwte, const float *dout, const int32_t *tok,
                                           const int32_t *start, const int32_t *order, int C)
{
    int u = blockIdx.x;
    float *dw = dwte + (size_t)tok[u] * C;
    int k0 = start[u], k1 = start[u + 1];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dw[c];
        for (int k = k0; k < k1; k++)
            acc += dout[(size_t)order[k] * C + c];
        dw[c] = acc;
    }
}

extern "C" void zt_cuda_encoder_forward(zt_kctx *ctx, float *out, const int32_t *inp,
                                        const float *wte, const float *wpe, int B, int T, int C)
{
    size_t NC = (size_t)B * T * C;
    if (B <= 0 || T <= 0 || C <= 0) return;
    ZT_CUDA_LAUNCH(ctx, "encoder_forward", encoder_forward_kernel, zt_cuda_blocks(NC),
                   ZT_CUDA_THREADS, out, inp, wte, wpe, NC, T, C);
}

extern "C" void zt_cuda_encoder_dwpe(zt_kctx *ctx, float *dwpe, const float *dout, int B, int T,
                                     int C)
{
    size_t TC = (size_t)T * C;
    ZT_CUDA_LAUNCH(ctx, "encoder_backward (wpe)", encoder_dwpe_kernel, zt_cuda_blocks(TC),
                   ZT_CUDA_THREADS, dwpe, dout, B, T, C);
}

extern "C" void zt_cuda_encoder_dwte(zt_kctx *ctx, float *dwte, const float *dout,
                                     const int32_t *tok, const int32_t *start, const int32_t *order,
                                     int nu, int C)
{
    if (nu <= 0) return;
    ZT_CUDA_LAUNCH(ctx, "encoder_backward (wte)", encoder_dwte_kernel, nu, ZT_CUDA_THREADS, dwte,
                   dout, tok, start, order, C);
}

/* ---------------------------------------------------------------------------------------- */
/* residual */

static __global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

static __global__ void residual_backward_kernel(float *da, float *db, const float *dout, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float d = dout[i];
        if (da) da[i] += d;
        if (db) db[i] += d;
    }
}

extern "C" void zt_cuda_residual_forward(zt_kctx *ctx, float *out, const float *a, const float *b,
                                         size_t n)
{
    if (!n) return;
    ZT_CUDA_LAUNCH(ctx, "residual_forward", residual_forward_kernel, zt_cuda_blocks(n),
                   ZT_CUDA_THREADS, out, a, b, n);
}

extern "C" void zt_cuda_residual_backward(zt_kctx *ctx, float *da, float *db, const float *dout,
                                          size_t n)
{
    if (!n || (!da && !db)) return;
    ZT_CUDA_LAUNCH(ctx, "residual_backward", residual_backward_kernel, zt_cuda_blocks(n),
                   ZT_CUDA_THREADS, da, db, dout, n);
}

/* ---------------------------------------------------------------------------------------- */
/* attention: one warp per (b, h, query) row of T over the T x T matrices of a chunk of whole
 * sequences; row r of the chunk is query r % T, and the causal upper triangle is written as
 * zeros so that the GEMMs after these kernels may run over whole rows. */

static __global__ void attn_softmax_kernel(float *att, float *lse, size_t rows, int T)
{
    size_t row = (size_t)blockIdx.x * ZT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int n = (int)(row % (size_t)T) + 1; /* keys 0..i */
    float *p = att + row * (size_t)T;
    float mx = -INFINITY;
    for (int j = lane; j < n; j += 32)
        mx = fmaxf(mx, p[j]);
    mx = zt_warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
        float e = expf(p[j] - mx);
        p[j] = e;
        sum += e;
    }
    sum = zt_warp_sum(sum);
    float inv = 1.0f / sum;
    for (int j = lane; j < n; j += 32)
        p[j] *= inv;
    for (int j = n + lane; j < T; j += 32)
        p[j] = 0.0f;
    if (lane == 0) lse[row] = mx + logf(sum);
}

static __global__ void attn_probs_kernel(float *att, const float *lse, size_t rows, int T)
{
    size_t row = (size_t)blockIdx.x * ZT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int n = (int)(row % (size_t)T) + 1;
    float *p = att + row * (size_t)T;
    float l = lse[row];
    for (int j = lane; j < n; j += 32)
        p[j] = expf(p[j] - l);
    for (int j = n + lane; j < T; j += 32)
        p[j] = 0.0f;
}

/* delta = dO_i . out_i equals rowsum(dP * P) (out_i = sum_j P_ij V_j) at hs multiply-adds per
 * row instead of i + 1. dout and out start at the chunk's first sequence. */
static __global__ void attn_dscores_kernel(float *d, const float *att, const float *dout,
                                           const float *out, size_t rows, int T, int NH, int C,
                                           int hs, float scale)
{
    size_t row = (size_t)blockIdx.x * ZT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    size_t bh = row / (size_t)T;
    int i = (int)(row % (size_t)T), n = i + 1;
    size_t b = bh / (size_t)NH, h = bh % (size_t)NH;
    size_t off = (b * (size_t)T + (size_t)i) * (size_t)C + h * (size_t)hs;
    const float *go = dout + off, *o = out + off;
    float delta = 0.0f;
    for (int c = lane; c < hs; c += 32)
        delta += go[c] * o[c];
    delta = zt_warp_sum(delta);
    const float *p = att + row * (size_t)T;
    float *dr = d + row * (size_t)T;
    for (int j = lane; j < n; j += 32)
        dr[j] = p[j] * (dr[j] - delta) * scale;
    for (int j = n + lane; j < T; j += 32)
        dr[j] = 0.0f;
}

static unsigned row_blocks(size_t rows)
{
    return (unsigned)((rows + ZT_ROWS_PER_BLOCK - 1) / ZT_ROWS_PER_BLOCK);
}

extern "C" void zt_cuda_attn_softmax(zt_kctx *ctx, float *att, float *lse, size_t rows, int T)
{
    if (!rows) return;
    ZT_CUDA_LAUNCH(ctx, "attention_forward (softmax)", attn_softmax_kernel, row_blocks(rows),
                   ZT_CUDA_THREADS, att, lse, rows, T);
}

extern "C" void zt_cuda_attn_probs(zt_kctx *ctx, float *att, const float *lse, size_t rows, int T)
{
    if (!rows) return;
    ZT_CUDA_LAUNCH(ctx, "attention_backward (probabilities)", attn_probs_kernel, row_blocks(rows),
                   ZT_CUDA_THREADS, att, lse, rows, T);
}

extern "C" void zt_cuda_attn_dscores(zt_kctx *ctx, float *d, const float *att, const float *dout,
                                     const float *out, size_t rows, int T, int NH, int C,
                                     float scale)
{
    if (!rows) return;
    ZT_CUDA_LAUNCH(ctx, "attention_backward (scores)", attn_dscores_kernel, row_blocks(rows),
                   ZT_CUDA_THREADS, d, att, dout, out, rows, T, NH, C, C / NH, scale);
}

/* ---------------------------------------------------------------------------------------- */

static __global__ void probe_kernel(float *dst)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) dst[0] = 1.0f;
}

extern "C" void zt_cuda_probe(zt_kctx *ctx, float *dst)
{
    ZT_CUDA_KERNEL("probe", probe_kernel, 1, 32, ctx->stream, dst);
}
