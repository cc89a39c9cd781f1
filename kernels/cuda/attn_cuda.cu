/* zerotrain: causal self-attention on CUDA as fused, flash-style kernels (ZT_CUDA_ATTN=fused):
 * the scores never leave the chip, so neither the T x T scratch nor its memory traffic is
 * needed. fp32 throughout (as the op table's activations), the head size fixed at compile time
 * (64: every GPT-2 size); blas_cuda.c picks these kernels or the chunked cuBLASLt path. Where
 * the context's matmuls take 16-bit inputs, attn_tc_cuda.cu's tensor-core kernels run instead.
 *
 * Forward: a block takes FA_BR queries of one (sequence, head), FA_TPR threads per query, and
 * walks the keys up to its last query in tiles of FA_BC held in shared memory, keeping each
 * query's running maximum m, sum l and unnormalised output (the online softmax); it writes
 * out = acc / l and lse = m + log l.
 * Backward, without atomics (the result does not depend on scheduling), in two kernels that
 * both recompute P = exp(s - lse) and dS = P (dO.V - delta) scale, delta = dO.out:
 *  - dK, dV: a block takes FA_BR keys and walks the queries that can see them in tiles of
 *    FA_BC: dV_j += sum_i P_ij dO_i, dK_j += sum_i dS_ij Q_i;
 *  - dQ: a block takes FA_BR queries and walks their keys: dQ_i += sum_j dS_ij K_j.
 * Thread t of a block owns row t / FA_TPR of the block's rows and, of each head vector it
 * accumulates, the columns c with c % FA_TPR == t % FA_TPR (neighbouring threads read
 * neighbouring words of shared memory); of a tile's FA_BC rows it scores those with
 * index % FA_TPR == t % FA_TPR. Shared rows are padded by one word so that the FA_TPR threads
 * of a row, reading different tile rows at the same column, hit different banks. */
#include "cuda_int.h"

#define FA_TPR 4                    /* threads per row */
#define FA_BR 64                    /* rows (queries or keys) a block owns */
#define FA_BC 32                    /* rows of a tile walked over */
#define FA_THREADS (FA_BR * FA_TPR) /* 256 */
#define FA_HS 64                    /* the head size compiled */
#define FA_PER (FA_BC / FA_TPR)     /* tile rows each thread scores */

static_assert(FA_THREADS % 32 == 0 && 32 % FA_TPR == 0, "a row's threads share a warp");

/* sum and max over the FA_TPR threads of a row (neighbouring lanes of one warp; every thread
 * of the block calls these) */
static __device__ __forceinline__ float fa_row_sum(float v)
{
    for (int o = 1; o < FA_TPR; o <<= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float fa_row_max(float v)
{
    for (int o = 1; o < FA_TPR; o <<= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* dst[r][c] = src row (row0 + r)'s HS values (row stride ld), zero for rows at or past T */
template <int HS, int ROWS>
static __device__ __forceinline__ void fa_load_tile(float (*dst)[HS + 1], const float *src,
                                                    int row0, int T, size_t ld)
{
    for (int e = threadIdx.x; e < ROWS * HS; e += FA_THREADS) {
        int r = e / HS, c = e % HS, i = row0 + r;
        dst[r][c] = i < T ? src[(size_t)i * ld + c] : 0.0f;
    }
}

/* x . row, HS terms */
template <int HS> static __device__ __forceinline__ float fa_dot(const float *x, const float *row)
{
    float d = 0.0f;
    ZT_UNROLL
    for (int k = 0; k < HS; k++)
        d += x[k] * row[k];
    return d;
}

/* Where a thread of a block is: the block's (sequence b, head h) and its row (a query, or a key
 * for dK/dV) among the FA_BR rows of tile `tile`, and the head's columns in qkv. The query
 * kernels take their tiles last first (the longest rows start first). */
struct fa_pos {
    int C, r, sub, b, h, bh, row;
    bool valid; /* row < T */
    size_t C3;
    const float *base; /* qkv at (b, token 0, head h) */
};

template <int HS>
static __device__ __forceinline__ fa_pos fa_pos_of(const float *qkv, int T, int NH, bool last_first)
{
    fa_pos p;
    int nt = (T + FA_BR - 1) / FA_BR;
    int tile = last_first ? nt - 1 - (int)blockIdx.x : (int)blockIdx.x;
    p.C = NH * HS;
    p.r = threadIdx.x / FA_TPR;
    p.sub = threadIdx.x % FA_TPR;
    p.bh = (int)blockIdx.y;
    p.b = p.bh / NH;
    p.h = p.bh % NH;
    p.row = tile * FA_BR + p.r;
    p.valid = p.row < T;
    p.C3 = 3 * (size_t)p.C;
    p.base = qkv + (size_t)p.b * T * p.C3 + (size_t)p.h * HS;
    return p;
}

/* Forward. grid (query tiles, B NH). */
template <int HS>
static __global__ void __launch_bounds__(FA_THREADS)
    flash_fwd_kernel(float *out, float *lse, const float *qkv, int T, int NH, float scale)
{
    constexpr int CPT = HS / FA_TPR;
    __shared__ float Ks[FA_BC][HS + 1];
    __shared__ float Vs[FA_BC][HS + 1];
    __shared__ float Ps[FA_BR][FA_BC + 1];
    fa_pos p = fa_pos_of<HS>(qkv, T, NH, true);
    int C = p.C, r = p.r, sub = p.sub, b = p.b, h = p.h, bh = p.bh, i = p.row;
    bool valid = p.valid;
    size_t C3 = p.C3;
    const float *base = p.base;

    float q[HS], acc[CPT];
    ZT_UNROLL
    for (int k = 0; k < HS; k++)
        q[k] = valid ? base[(size_t)i * C3 + k] : 0.0f;
    ZT_UNROLL
    for (int cc = 0; cc < CPT; cc++)
        acc[cc] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int kend = min(T, (i - r) + FA_BR); /* keys the tile's last query sees */
    for (int k0 = 0; k0 < kend; k0 += FA_BC) {
        __syncthreads(); /* the previous tile is used up */
        fa_load_tile<HS, FA_BC>(Ks, base + C, k0, T, C3); /* keys k0.. and their values */
        fa_load_tile<HS, FA_BC>(Vs, base + 2 * C, k0, T, C3);
        __syncthreads();
        float s[FA_PER], mx = -INFINITY;
        ZT_UNROLL
        for (int t = 0; t < FA_PER; t++) {
            int jj = sub + FA_TPR * t, j = k0 + jj;
            s[t] = valid && j <= i ? scale * fa_dot<HS>(q, Ks[jj]) : -INFINITY;
            mx = fmaxf(mx, s[t]);
        }
        float mnew = fmaxf(m, fa_row_max(mx));
        /* a row with no key yet (or past T) keeps m = -inf and adds nothing */
        float mref = mnew == -INFINITY ? 0.0f : mnew;
        float alpha = expf(m - mref), ps = 0.0f;
        ZT_UNROLL
        for (int t = 0; t < FA_PER; t++) {
            float p = expf(s[t] - mref);
            Ps[r][sub + FA_TPR * t] = p;
            ps += p;
        }
        l = l * alpha + fa_row_sum(ps);
        m = mnew;
        __syncthreads(); /* the row's probabilities are written */
        ZT_UNROLL
        for (int cc = 0; cc < CPT; cc++)
            acc[cc] *= alpha;
        for (int jj = 0; jj < FA_BC; jj++) {
            float p = Ps[r][jj];
            ZT_UNROLL
            for (int cc = 0; cc < CPT; cc++)
                acc[cc] += p * Vs[jj][cc * FA_TPR + sub];
        }
    }
    if (!valid) return;
    float *o = out + ((size_t)b * T + i) * C + (size_t)h * HS;
    ZT_UNROLL
    for (int cc = 0; cc < CPT; cc++)
        o[cc * FA_TPR + sub] = acc[cc] / l;
    if (sub == 0) lse[(size_t)bh * T + i] = m + logf(l);
}

/* delta of the FA_BC queries of a tile into dl[], their lse into ls[] (0 past T):
 * FA_THREADS / FA_BC threads per query */
template <int HS>
static __device__ __forceinline__ void fa_tile_delta(float *dl, float *ls, const float *dout,
                                                     const float *out, const float *lse_bh, int q0,
                                                     int T, int C)
{
    constexpr int TPQ = FA_THREADS / FA_BC; /* 8 */
    static_assert(32 % TPQ == 0 && HS % TPQ == 0, "a query's threads share a warp");
    int ii = threadIdx.x / TPQ, part = threadIdx.x % TPQ, i = q0 + ii;
    float d = 0.0f;
    if (i < T) {
        const float *go = dout + (size_t)i * C, *o = out + (size_t)i * C;
        for (int c = part; c < HS; c += TPQ)
            d += go[c] * o[c];
    }
    for (int w = 1; w < TPQ; w <<= 1)
        d += __shfl_xor_sync(0xffffffffu, d, w);
    if (part == 0) {
        dl[ii] = d;
        ls[ii] = i < T ? lse_bh[i] : 0.0f;
    }
}

/* dK and dV. grid (key tiles, B NH), the longest (first) key tiles first. */
template <int HS>
static __global__ void __launch_bounds__(FA_THREADS)
    flash_bwd_kv_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                        const float *lse, int T, int NH, float scale)
{
    constexpr int CPT = HS / FA_TPR;
    __shared__ float Qs[FA_BC][HS + 1];
    __shared__ float dOs[FA_BC][HS + 1];
    __shared__ float Pt[FA_BR][FA_BC + 1];
    __shared__ float dSt[FA_BR][FA_BC + 1];
    __shared__ float ls[FA_BC], dl[FA_BC];
    fa_pos p = fa_pos_of<HS>(qkv, T, NH, false);
    int C = p.C, r = p.r, sub = p.sub, b = p.b, h = p.h, bh = p.bh, j = p.row;
    int kt = (int)blockIdx.x;
    bool valid = p.valid;
    size_t C3 = p.C3;
    const float *base = p.base;
    size_t hoff = (size_t)b * T * C + (size_t)h * HS; /* (b, h) in dout and out */

    float k[HS], v[HS], dk[CPT], dv[CPT];
    ZT_UNROLL
    for (int c = 0; c < HS; c++) {
        k[c] = valid ? base[(size_t)j * C3 + C + c] : 0.0f;
        v[c] = valid ? base[(size_t)j * C3 + 2 * C + c] : 0.0f;
    }
    ZT_UNROLL
    for (int cc = 0; cc < CPT; cc++)
        dk[cc] = dv[cc] = 0.0f;
    for (int q0 = kt * FA_BR; q0 < T; q0 += FA_BC) { /* queries i >= the tile's first key */
        __syncthreads();
        fa_load_tile<HS, FA_BC>(Qs, base, q0, T, C3);
        fa_load_tile<HS, FA_BC>(dOs, dout + hoff, q0, T, (size_t)C);
        fa_tile_delta<HS>(dl, ls, dout + hoff, out + hoff, lse + (size_t)bh * T, q0, T, C);
        __syncthreads();
        ZT_UNROLL
        for (int t = 0; t < FA_PER; t++) {
            int ii = sub + FA_TPR * t, i = q0 + ii;
            float p = 0.0f, ds = 0.0f;
            if (valid && i < T && j <= i) {
                p = expf(scale * fa_dot<HS>(Qs[ii], k) - ls[ii]);
                ds = p * (fa_dot<HS>(dOs[ii], v) - dl[ii]) * scale;
            }
            Pt[r][ii] = p;
            dSt[r][ii] = ds;
        }
        __syncthreads();
        for (int ii = 0; ii < FA_BC; ii++) {
            float p = Pt[r][ii], ds = dSt[r][ii];
            ZT_UNROLL
            for (int cc = 0; cc < CPT; cc++) {
                dv[cc] += p * dOs[ii][cc * FA_TPR + sub];
                dk[cc] += ds * Qs[ii][cc * FA_TPR + sub];
            }
        }
    }
    if (!valid) return;
    float *g = dqkv + ((size_t)b * T + j) * C3 + (size_t)h * HS;
    ZT_UNROLL
    for (int cc = 0; cc < CPT; cc++) {
        g[C + cc * FA_TPR + sub] += dk[cc];
        g[2 * C + cc * FA_TPR + sub] += dv[cc];
    }
}

/* dQ. grid (query tiles, B NH), the longest (last) query tiles first. */
template <int HS>
static __global__ void __launch_bounds__(FA_THREADS)
    flash_bwd_q_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                       const float *lse, int T, int NH, float scale)
{
    constexpr int CPT = HS / FA_TPR;
    __shared__ float Ks[FA_BC][HS + 1];
    __shared__ float Vs[FA_BC][HS + 1];
    __shared__ float dSs[FA_BR][FA_BC + 1];
    fa_pos p = fa_pos_of<HS>(qkv, T, NH, true);
    int C = p.C, r = p.r, sub = p.sub, b = p.b, h = p.h, bh = p.bh, i = p.row;
    bool valid = p.valid;
    size_t C3 = p.C3;
    const float *base = p.base;

    float q[HS], go[HS], dq[CPT], delta = 0.0f, li = 0.0f;
    if (valid) {
        size_t off = ((size_t)b * T + i) * C + (size_t)h * HS;
        ZT_UNROLL
        for (int c = 0; c < HS; c++) {
            q[c] = base[(size_t)i * C3 + c];
            go[c] = dout[off + c];
        }
        ZT_UNROLL
        for (int cc = 0; cc < CPT; cc++) /* global reads: go[] stays in registers */
            delta += dout[off + cc * FA_TPR + sub] * out[off + cc * FA_TPR + sub];
        li = lse[(size_t)bh * T + i];
    } else {
        ZT_UNROLL
        for (int c = 0; c < HS; c++)
            q[c] = go[c] = 0.0f;
    }
    delta = fa_row_sum(delta);
    ZT_UNROLL
    for (int cc = 0; cc < CPT; cc++)
        dq[cc] = 0.0f;
    int kend = min(T, (i - r) + FA_BR);
    for (int k0 = 0; k0 < kend; k0 += FA_BC) {
        __syncthreads();
        fa_load_tile<HS, FA_BC>(Ks, base + C, k0, T, C3); /* keys k0.. and their values */
        fa_load_tile<HS, FA_BC>(Vs, base + 2 * C, k0, T, C3);
        __syncthreads();
        ZT_UNROLL
        for (int t = 0; t < FA_PER; t++) {
            int jj = sub + FA_TPR * t, j = k0 + jj;
            float ds = 0.0f;
            if (valid && j <= i) {
                float p = expf(scale * fa_dot<HS>(q, Ks[jj]) - li);
                ds = p * (fa_dot<HS>(go, Vs[jj]) - delta) * scale;
            }
            dSs[r][jj] = ds;
        }
        __syncthreads();
        for (int jj = 0; jj < FA_BC; jj++) {
            float ds = dSs[r][jj];
            ZT_UNROLL
            for (int cc = 0; cc < CPT; cc++)
                dq[cc] += ds * Ks[jj][cc * FA_TPR + sub];
        }
    }
    if (!valid) return;
    float *g = dqkv + ((size_t)b * T + i) * C3 + (size_t)h * HS;
    ZT_UNROLL
    for (int cc = 0; cc < CPT; cc++)
        g[cc * FA_TPR + sub] += dq[cc];
}

extern "C" bool zt_cuda_attn_fused_fits(int B, int T, int C, int NH)
{
    return NH > 0 && C == NH * FA_HS && (long long)B * NH <= 65535 && T > 0;
}

extern "C" bool zt_cuda_attn_fused(const zt_kctx *ctx, int B, int T, int C, int NH)
{
    bool want = ctx->attn_fused == ZT_CUDA_ATTN_AUTO
                    ? ctx->mm == ZT_MM_BF16 || ctx->mm == ZT_MM_FP16
                    : ctx->attn_fused != 0;
    return want && zt_cuda_attn_fused_fits(B, T, C, NH);
}

extern "C" void zt_cuda_attn_fused_forward(zt_kctx *ctx, float *out, float *lse, float *scratch,
                                           size_t scratch_floats, const float *qkv, uint16_t *home,
                                           uint16_t *out16, int B, int T, int C, int NH)
{
    if (ctx->mm == ZT_MM_BF16 || ctx->mm == ZT_MM_FP16) {
        zt_cuda_attn_tc_forward(ctx, out, lse, scratch, scratch_floats, qkv, home, out16, B, T, C,
                                NH);
        return;
    }
    float scale = 1.0f / sqrtf((float)(C / NH));
    dim3 grid((unsigned)((T + FA_BR - 1) / FA_BR), (unsigned)(B * NH));
    ZT_CUDA_LAUNCH(ctx, "attention_forward (fused)", flash_fwd_kernel<FA_HS>, grid, FA_THREADS, out,
                   lse, qkv, T, NH, scale);
}

extern "C" void zt_cuda_attn_fused_backward(zt_kctx *ctx, float *dqkv, uint16_t *dq16,
                                            float *scratch, size_t scratch_floats,
                                            const float *dout, const uint16_t *dout16,
                                            const float *qkv, const uint16_t *home,
                                            const float *out, const uint16_t *out16,
                                            const float *lse, int B, int T, int C, int NH)
{
    if (ctx->mm == ZT_MM_BF16 || ctx->mm == ZT_MM_FP16) {
        zt_cuda_attn_tc_backward(ctx, dqkv, dq16, scratch, scratch_floats, dout, dout16, qkv, home,
                                 out, out16, lse, B, T, C, NH);
        return;
    }
    float scale = 1.0f / sqrtf((float)(C / NH));
    dim3 grid((unsigned)((T + FA_BR - 1) / FA_BR), (unsigned)(B * NH));
    ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dK dV)", flash_bwd_kv_kernel<FA_HS>, grid,
                   FA_THREADS, dqkv, dout, qkv, out, lse, T, NH, scale);
    ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dQ)", flash_bwd_q_kernel<FA_HS>, grid,
                   FA_THREADS, dqkv, dout, qkv, out, lse, T, NH, scale);
}
