/* zerotrain: LayerNorm on CUDA (forward, with the residual add before it, rounded into a
 * matmul's 16-bit staging, and backward) and the deterministic column sums of its parameter
 * gradients and of the linear layers' bias gradients. Arithmetic follows kernels/cpu/gpt2_cpu.c
 * expression by expression; sums run in another order. */
#include "cuda_int.h"
#include "cuda_conv.h"
#include "cuda_math.h"

#define ZT_LN_EPS 1e-5f
/* rows per warp-per-row block */
#define ZT_ROWS_PER_BLOCK (ZT_CUDA_THREADS / 32)
/* column reductions: 32 columns x 8 row lanes per block, at least 64 rows per split */
#define ZT_COL_TY 8
#define ZT_COL_MIN_ROWS 64
#define ZT_COL_MAX_SPLITS 256
#define ZT_COL_BATCH 8 /* rows a colsum_kernel thread loads before using them */

/* ---------------------------------------------------------------------------------------- */
/* LayerNorm: one warp per row */

/* The rest of a row's LayerNorm once each lane holds its partial sum s of the row x (lane c
 * covers x[c], x[c+32], ...): mean, variance, output and the statistics. The output row o in
 * fp32 (OT 0), or rounded to bf16 (1) or fp16 (2) as the matmuls' staging rounds. */
template <int OT>
static __device__ __forceinline__ void
layernorm_row_finish(void *o, float *mean, float *rstd, const float *x, float s, const float *w,
                     const float *b, int row, int C, int lane)
{
    float m = zt_warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(zt_warp_sum(v) / (float)C + ZT_LN_EPS);
    for (int c = lane; c < C; c += 32)
        zt_store_as<OT>(o, c, fmaf((x[c] - m) * rs, w[c], b[c]));
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}

/* out rows of C in fp32 (OT 0) or rounded to 16 bits (OT 1 bf16, 2 fp16: a matmul's copy) */
template <int OT>
static __global__ void layernorm_forward_kernel(void *out, float *mean, float *rstd,
                                                const float *inp, const float *w, const float *b,
                                                int N, int C)
{
    int row = blockIdx.x * ZT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* whole warps leave together */
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += x[c];
    void *o = OT == 0 ? (void *)((float *)out + (size_t)row * C)
                      : (void *)((uint16_t *)out + (size_t)row * C);
    layernorm_row_finish<OT>(o, mean, rstd, x, s, w, b, row, C, lane);
}

/* res = a + b, then the LayerNorm of res, one warp per row: each lane reads back only the
 * elements it wrote, so no barrier is needed; the sums are those of the two kernels apart. */
static __global__ void residual_layernorm_forward_kernel(float *res, float *out, float *mean,
                                                         float *rstd, const float *a,
                                                         const float *b, const float *w,
                                                         const float *bias, int N, int C)
{
    int row = blockIdx.x * ZT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* whole warps leave together */
    size_t off = (size_t)row * C;
    float *x = res + off;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = a[off + c] + b[off + c];
        x[c] = v;
        s += v;
    }
    layernorm_row_finish<0>(out + off, mean, rstd, x, s, w, bias, row, C, lane);
}

/* The backward kernels' pointers are __restrict__ (ops.h: dinp aliases none of the inputs). */
#define ZT_LNB_GROUP 8 /* columns of dinp loaded before any of them is stored */
static __global__ void layernorm_backward_dinp_kernel(float *__restrict__ dinp,
                                                      const float *__restrict__ dout,
                                                      const float *__restrict__ inp,
                                                      const float *__restrict__ w,
                                                      const float *__restrict__ mean,
                                                      const float *__restrict__ rstd, int N, int C)
{
    int row = blockIdx.x * ZT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    const float *dy = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = mean[row], rs = rstd[row];
    float invC = 1.0f / (float)C;
    float a = 0.0f, b = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dn = w[c] * dy[c];
        a += dn;
        b += dn * ((x[c] - m) * rs);
    }
    a = zt_warp_sum(a) * invC;
    b = zt_warp_sum(b) * invC;
    /* ZT_LNB_GROUP columns of dx loaded before any of them is stored, as the fused kernel does */
    for (int c0 = lane; c0 < C; c0 += 32 * ZT_LNB_GROUP) {
        float di[ZT_LNB_GROUP];
        ZT_UNROLL
        for (int j = 0; j < ZT_LNB_GROUP; j++) {
            int c = c0 + 32 * j;
            di[j] = c < C ? dx[c] : 0.0f;
        }
        ZT_UNROLL
        for (int j = 0; j < ZT_LNB_GROUP; j++) {
            int c = c0 + 32 * j;
            if (c < C) dx[c] = di[j] + (w[c] * dy[c] - a - ((x[c] - m) * rs) * b) * rs;
        }
    }
}

/* Column sums over a split of rows: db += dout, and with inp, dw += norm(inp) * dout (norm from
 * mean and rstd). accumulate: add into dw/db[c]; else write split s's sums at dw/db[s*ld + c].
 * ST 1 or 2: each element of dout is also written to stage, rounded to bf16 or fp16 (a matmul's
 * staged operand, read once for both). IT 1 or 2: dout is bf16 or fp16 (else fp32). */
template <int ST, int IT>
static __global__ void colsum_kernel(float *dw, float *db, size_t ld, int accumulate,
                                     const void *dout, const float *inp, const float *mean,
                                     const float *rstd, int N, int C, int rows_per_split,
                                     uint16_t *stage)
{
    __shared__ float shw[ZT_COL_TY][33], shb[ZT_COL_TY][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * 32 + tx;
    int r0 = blockIdx.y * rows_per_split;
    int r1 = min(N, r0 + rows_per_split);
    float sw = 0.0f, sb = 0.0f;
    if (c < C) {
        /* ZT_COL_BATCH rows' loads before any use: a row's store to stage (which may alias
         * dout, for all the compiler knows) kept the next row's load behind it, one DRAM round
         * trip a row; the sums still go row by row, in order */
        for (int r = r0 + ty; r < r1; r += ZT_COL_BATCH * ZT_COL_TY) {
            float dy[ZT_COL_BATCH], xn[ZT_COL_BATCH];
            ZT_UNROLL
            for (int u = 0; u < ZT_COL_BATCH; u++) {
                int ru = r + u * ZT_COL_TY;
                size_t i = (size_t)ru * C + c;
                dy[u] = ru < r1 ? zt_load_as<IT>(dout, i) : 0.0f;
                xn[u] = ru < r1 && inp ? (inp[i] - mean[ru]) * rstd[ru] : 0.0f;
            }
            ZT_UNROLL
            for (int u = 0; u < ZT_COL_BATCH; u++) {
                int ru = r + u * ZT_COL_TY;
                if (ru >= r1) break;
                if (ST) zt_store_as<ST>(stage, (size_t)ru * C + c, dy[u]);
                sb += dy[u];
                if (inp) sw = fmaf(xn[u], dy[u], sw);
            }
        }
    }
    shw[ty][tx] = sw;
    shb[ty][tx] = sb;
    __syncthreads();
    if (ty != 0 || c >= C) return;
    float w = 0.0f, b = 0.0f;
    for (int y = 0; y < ZT_COL_TY; y++) {
        w += shw[y][tx];
        b += shb[y][tx];
    }
    if (accumulate) {
        if (dw) dw[c] += w;
        if (db) db[c] += b;
    } else {
        size_t o = (size_t)blockIdx.y * ld + c;
        if (dw) dw[o] = w;
        if (db) db[o] = b;
    }
}

/* colsum_kernel's column sums of a 16-bit dout alone (IT 1 bf16, 2 fp16; a bias gradient),
 * four columns a thread from 8-byte loads (C a multiple of 4, dout 8-byte aligned), each column's
 * rows added in colsum_kernel's order and its ZT_COL_TY partial sums then in row order: the same
 * bits. One column a thread would read 64 bytes of a row a warp, too few bytes in flight to
 * cover DRAM's latency (docs/performance.md). */
template <int IT>
static __global__ void colsum16_kernel(float *db, size_t ld, int accumulate, const void *dout,
                                       int N, int C, int rows_per_split)
{
    __shared__ float4 sh[ZT_COL_TY][32];
    int tx = threadIdx.x, ty = threadIdx.y;
    int C4 = C / 4, q = blockIdx.x * 32 + tx;
    int r0 = blockIdx.y * rows_per_split;
    int r1 = min(N, r0 + rows_per_split);
    float4 sb = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (q < C4) {
        for (int r = r0 + ty; r < r1; r += ZT_COL_BATCH * ZT_COL_TY) {
            typename zt_raw4<IT>::type h[ZT_COL_BATCH];
            ZT_UNROLL
            for (int u = 0; u < ZT_COL_BATCH; u++) {
                int ru = r + u * ZT_COL_TY;
                h[u] = ru < r1 ? zt_load4_raw<IT>(dout, (size_t)ru * C4 + q)
                               : typename zt_raw4<IT>::type();
            }
            ZT_UNROLL
            for (int u = 0; u < ZT_COL_BATCH; u++) {
                if (r + u * ZT_COL_TY >= r1) break;
                float4 d = zt_widen4<IT>(h[u]);
                sb.x += d.x, sb.y += d.y, sb.z += d.z, sb.w += d.w;
            }
        }
    }
    sh[ty][tx] = sb;
    __syncthreads();
    if (ty != 0 || q >= C4) return;
    float4 b = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int y = 0; y < ZT_COL_TY; y++) {
        float4 v = sh[y][tx];
        b.x += v.x, b.y += v.y, b.z += v.z, b.w += v.w;
    }
    float *o = accumulate ? db + 4 * (size_t)q : db + (size_t)blockIdx.y * ld + 4 * (size_t)q;
    if (accumulate) {
        o[0] += b.x, o[1] += b.y, o[2] += b.z, o[3] += b.w;
    } else {
        o[0] = b.x, o[1] = b.y, o[2] = b.z, o[3] = b.w;
    }
}

/* LayerNorm's backward in one pass over dout and inp (C <= 32 ZT_LNB_CPL): the rows of split
 * blockIdx.x (rows_per_split from its first), warp by warp as layernorm_backward_dinp_kernel
 * (dinp, where not NULL, += ...), each lane keeping its columns' sums of norm(inp) dout and of dout
 * in registers; then the block's warps add theirs in warp order through shared memory and write the
 * split's sums into pw and pb (row blockIdx.x of C floats; NULL: not wanted), which
 * colsum_finish_kernel adds in a fixed order: deterministic, and dout and inp read once where the
 * two kernels (this one's dinp part, then colsum) read them twice. IT (colsum_kernel's): dout fp32,
 * or bf16 or fp16 read widened. */
#define ZT_LNB_CPL 32      /* columns a lane holds: C <= 1024 */
#define ZT_LNB_MIN_ROWS 16 /* rows a split has at least (two a warp) */
#define ZT_LNB_MAX_SPLITS 512
template <int IT>
static __global__ void __launch_bounds__(ZT_CUDA_THREADS)
    layernorm_backward_fused_kernel(float *__restrict__ dinp, float *__restrict__ pw,
                                    float *__restrict__ pb, const void *__restrict__ dout,
                                    const float *__restrict__ inp, const float *__restrict__ w,
                                    const float *__restrict__ mean, const float *__restrict__ rstd,
                                    int N, int C, int rows_per_split)
{
    __shared__ float shw[32 * ZT_LNB_CPL], shb[32 * ZT_LNB_CPL];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = blockIdx.x * rows_per_split, r1 = min(N, r0 + rows_per_split);
    float sw[ZT_LNB_CPL], sb[ZT_LNB_CPL];
    ZT_UNROLL
    for (int k = 0; k < ZT_LNB_CPL; k++)
        sw[k] = sb[k] = 0.0f;
    float invC = 1.0f / (float)C;
    for (int row = r0 + warp; row < r1; row += ZT_ROWS_PER_BLOCK) {
        const float *x = inp + (size_t)row * C;
        size_t o = (size_t)row * C;
        float m = mean[row], rs = rstd[row];
        float a = 0.0f, b = 0.0f;
        ZT_UNROLL
        for (int k = 0; k < ZT_LNB_CPL; k++) {
            int c = lane + 32 * k;
            if (c < C) {
                float dn = w[c] * zt_load_as<IT>(dout, o + c);
                a += dn;
                b += dn * ((x[c] - m) * rs);
            }
        }
        a = zt_warp_sum(a) * invC;
        b = zt_warp_sum(b) * invC;
        /* dinp's read-modify-write ZT_LNB_GROUP columns at a time: the group's loads first,
         * then its stores (a load after a store waits for it: one DRAM round trip a column) */
        ZT_UNROLL
        for (int k0 = 0; k0 < ZT_LNB_CPL; k0 += ZT_LNB_GROUP) {
            float di[ZT_LNB_GROUP];
            ZT_UNROLL
            for (int j = 0; j < ZT_LNB_GROUP; j++) {
                int c = lane + 32 * (k0 + j);
                di[j] = dinp && c < C ? dinp[o + c] : 0.0f;
            }
            ZT_UNROLL
            for (int j = 0; j < ZT_LNB_GROUP; j++) {
                int k = k0 + j, c = lane + 32 * k;
                if (c < C) {
                    float n = (x[c] - m) * rs, d = zt_load_as<IT>(dout, o + c);
                    if (dinp) dinp[o + c] = di[j] + (w[c] * d - a - n * b) * rs;
                    sw[k] = fmaf(n, d, sw[k]);
                    sb[k] += d;
                }
            }
        }
    }
    for (int v = 0; v < ZT_ROWS_PER_BLOCK; v++) {
        if (warp == v) {
            ZT_UNROLL
            for (int k = 0; k < ZT_LNB_CPL; k++) {
                int c = lane + 32 * k;
                if (c < C) {
                    shw[c] = v ? shw[c] + sw[k] : sw[k];
                    shb[c] = v ? shb[c] + sb[k] : sb[k];
                }
            }
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        if (pw) pw[(size_t)blockIdx.x * C + c] = shw[c];
        if (pb) pb[(size_t)blockIdx.x * C + c] = shb[c];
    }
}

/* The same sums as layernorm_backward_fused_kernel (and the same finish), for C a multiple of 4
 * up to 128 V, with a row's inp, dout and dinp loaded whole before any of it is used: lane l
 * holds the columns 128 v + 4 l .. +3 (v < V) of each, read by 16-byte loads (8 for a 16-bit
 * dout), so a row costs one DRAM round trip where the grouped read-modify-write cost three and
 * its first version one per column (docs/performance.md). The column sums live in shared
 * memory, a row of each per warp (the lane's own slots: no barrier), which leaves the registers
 * to the row and lets 4 blocks share an SM. pw, pb, dinp, inp and w 16-byte aligned, dout 8
 * (16 in fp32): the caller checks. */
#define ZT_LNR_WARPS 4
#define ZT_LNR_MAXV 8 /* C <= 1024 */
template <int IT, int V>
static __global__ void __launch_bounds__(32 * ZT_LNR_WARPS, 4)
    layernorm_backward_row_kernel(float *__restrict__ dinp, float *__restrict__ pw,
                                  float *__restrict__ pb, const void *__restrict__ dout,
                                  const float *__restrict__ inp, const float *__restrict__ w,
                                  const float *__restrict__ mean, const float *__restrict__ rstd,
                                  int N, int C, int rows_per_split)
{
    __shared__ float4 shw[ZT_LNR_WARPS][32 * V], shb[ZT_LNR_WARPS][32 * V];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = blockIdx.x * rows_per_split, r1 = min(N, r0 + rows_per_split);
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    ZT_UNROLL
    for (int v = 0; v < V; v++)
        shw[warp][32 * v + lane] = shb[warp][32 * v + lane] = zero;
    float invC = 1.0f / (float)C;
    int C4 = C / 4;
    for (int row = r0 + warp; row < r1; row += ZT_LNR_WARPS) {
        size_t o4 = (size_t)row * C4;
        float m = mean[row], rs = rstd[row];
        float4 xv[V], dv[V], iv[V];
        ZT_UNROLL
        for (int v = 0; v < V; v++) {
            int q = 32 * v + lane;
            bool in = q < C4;
            xv[v] = in ? ((const float4 *)inp)[o4 + q] : zero;
            dv[v] = in ? zt_load4_as<IT>(dout, o4 + q) : zero;
            iv[v] = in && dinp ? ((const float4 *)dinp)[o4 + q] : zero;
        }
        float a = 0.0f, b = 0.0f;
        ZT_UNROLL
        for (int v = 0; v < V; v++) {
            int q = 32 * v + lane;
            if (q < C4) {
                float4 wv = ((const float4 *)w)[q];
                float dn;
                dn = wv.x * dv[v].x, a += dn, b += dn * ((xv[v].x - m) * rs);
                dn = wv.y * dv[v].y, a += dn, b += dn * ((xv[v].y - m) * rs);
                dn = wv.z * dv[v].z, a += dn, b += dn * ((xv[v].z - m) * rs);
                dn = wv.w * dv[v].w, a += dn, b += dn * ((xv[v].w - m) * rs);
            }
        }
        a = zt_warp_sum(a) * invC;
        b = zt_warp_sum(b) * invC;
        ZT_UNROLL
        for (int v = 0; v < V; v++) {
            int q = 32 * v + lane;
            if (q < C4) {
                float4 wv = ((const float4 *)w)[q], d = dv[v], di = iv[v];
                float4 n = make_float4((xv[v].x - m) * rs, (xv[v].y - m) * rs, (xv[v].z - m) * rs,
                                       (xv[v].w - m) * rs);
                if (dinp) {
                    di.x += (wv.x * d.x - a - n.x * b) * rs;
                    di.y += (wv.y * d.y - a - n.y * b) * rs;
                    di.z += (wv.z * d.z - a - n.z * b) * rs;
                    di.w += (wv.w * d.w - a - n.w * b) * rs;
                    ((float4 *)dinp)[o4 + q] = di;
                }
                float4 sw = shw[warp][q], sb = shb[warp][q];
                sw.x = fmaf(n.x, d.x, sw.x), sw.y = fmaf(n.y, d.y, sw.y);
                sw.z = fmaf(n.z, d.z, sw.z), sw.w = fmaf(n.w, d.w, sw.w);
                sb.x += d.x, sb.y += d.y, sb.z += d.z, sb.w += d.w;
                shw[warp][q] = sw, shb[warp][q] = sb;
            }
        }
    }
    __syncthreads();
    for (int q = threadIdx.x; q < C4; q += blockDim.x) {
        float4 sw = shw[0][q], sb = shb[0][q];
        for (int k = 1; k < ZT_LNR_WARPS; k++) {
            float4 tw = shw[k][q], tb = shb[k][q];
            sw.x += tw.x, sw.y += tw.y, sw.z += tw.z, sw.w += tw.w;
            sb.x += tb.x, sb.y += tb.y, sb.z += tb.z, sb.w += tb.w;
        }
        if (pw) ((float4 *)pw)[(size_t)blockIdx.x * C4 + q] = sw;
        if (pb) ((float4 *)pb)[(size_t)blockIdx.x * C4 + q] = sb;
    }
}

/* dw[c] += the sum of pw[k][c] over the splits k (and db from pb): each of a block's ZT_COL_TY
 * rows of 32 threads adds every ZT_COL_TY-th split from its own in order, then the rows' sums
 * are added in row order: a fixed order (deterministic), with ZT_COL_TY times the threads of a
 * thread a column (with one thread a column, 512 splits are a chain of 512 L2 round trips, as
 * long as the one-pass kernel's own work) */
static __global__ void colsum_finish_kernel(float *dw, float *db, const float *pw, const float *pb,
                                            int splits, int C)
{
    __shared__ float shw[ZT_COL_TY][33], shb[ZT_COL_TY][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int k = ty; k < splits; k += ZT_COL_TY) {
            if (dw) sw += pw[(size_t)k * C + c];
            if (db) sb += pb[(size_t)k * C + c];
        }
    shw[ty][tx] = sw, shb[ty][tx] = sb;
    __syncthreads();
    if (ty != 0 || c >= C) return;
    for (int y = 1; y < ZT_COL_TY; y++)
        sw += shw[y][tx], sb += shb[y][tx];
    if (dw) dw[c] += sw;
    if (db) db[c] += sb;
}

/* dw (may be NULL; needs inp, mean, rstd) and db (may be NULL) += column sums over N rows,
 * in a fixed order (deterministic): row splits into the scratch, then one pass over splits.
 * ST and IT (colsum_kernel's): dout also rounded into stage; dout's type. */
template <int ST, int IT = 0>
static void colsum(zt_kctx *ctx, float *dw, float *db, const void *dout, const float *inp,
                   const float *mean, const float *rstd, int N, int C, const char *what,
                   uint16_t *stage = NULL)
{
    if ((!dw && !db) || N <= 0 || C <= 0) return;
    size_t splits = ((size_t)N + ZT_COL_MIN_ROWS - 1) / ZT_COL_MIN_ROWS;
    size_t cap = ZT_CUDA_SCRATCH_FLOATS / (2 * (size_t)C);
    if (splits > ZT_COL_MAX_SPLITS) splits = ZT_COL_MAX_SPLITS;
    if (splits > cap) splits = cap;
    int rows = splits > 1 ? (int)(((size_t)N + splits - 1) / splits) : N;
    if (splits > 1) splits = ((size_t)N + (size_t)rows - 1) / (size_t)rows;
    dim3 block(32, ZT_COL_TY);
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)(splits > 1 ? splits : 1));
    /* a 16-bit dout's sums alone: four columns a thread where its rows allow */
    constexpr int IT16 = IT ? IT : 1; /* (instantiated for fp32 too, never launched there) */
    bool quads = IT != 0 && ST == 0 && !dw && C % 4 == 0 && (uintptr_t)dout % 8 == 0;
    if (quads) grid.x = (unsigned)((C / 4 + 31) / 32);
    if (splits <= 1) {
        if (quads)
            ZT_CUDA_LAUNCH(ctx, what, colsum16_kernel<IT16>, grid, block, db, 0, 1, dout, N, C, N);
        else
            ZT_CUDA_LAUNCH(ctx, what, (colsum_kernel<ST, IT>), grid, block, dw, db, 0, 1, dout, inp,
                           mean, rstd, N, C, N, stage);
        return;
    }
    float *pw = ctx->scratch, *pb = ctx->scratch + splits * (size_t)C;
    if (quads)
        ZT_CUDA_LAUNCH(ctx, what, colsum16_kernel<IT16>, grid, block, pb, (size_t)C, 0, dout, N, C,
                       rows);
    else
        ZT_CUDA_LAUNCH(ctx, what, (colsum_kernel<ST, IT>), grid, block, dw ? pw : NULL,
                       db ? pb : NULL, (size_t)C, 0, dout, inp, mean, rstd, N, C, rows, stage);
    ZT_CUDA_LAUNCH(ctx, what, colsum_finish_kernel, (C + 31) / 32, block, dw, db, pw, pb,
                   (int)splits, C);
}

extern "C" void zt_cuda_layernorm_forward(zt_kctx *ctx, float *out, float *mean, float *rstd,
                                          const float *inp, const float *weight, const float *bias,
                                          int N, int C)
{
    if (N <= 0 || C <= 0) return;
    unsigned blocks = (unsigned)((N + ZT_ROWS_PER_BLOCK - 1) / ZT_ROWS_PER_BLOCK);
    ZT_CUDA_LAUNCH(ctx, "layernorm_forward", layernorm_forward_kernel<0>, blocks, ZT_CUDA_THREADS,
                   (void *)out, mean, rstd, inp, weight, bias, N, C);
}

extern "C" void zt_cuda_stage_layernorm(zt_kctx *ctx, uint16_t *dst, int mm16, float *mean,
                                        float *rstd, const float *inp, const float *weight,
                                        const float *bias, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    unsigned blocks = (unsigned)((N + ZT_ROWS_PER_BLOCK - 1) / ZT_ROWS_PER_BLOCK);
    if (mm16 == ZT_MM_FP16)
        ZT_CUDA_LAUNCH(ctx, "matmul staging (fp16) of LayerNorm's output",
                       layernorm_forward_kernel<2>, blocks, ZT_CUDA_THREADS, (void *)dst, mean,
                       rstd, inp, weight, bias, N, C);
    else
        ZT_CUDA_LAUNCH(ctx, "matmul staging (bf16) of LayerNorm's output",
                       layernorm_forward_kernel<1>, blocks, ZT_CUDA_THREADS, (void *)dst, mean,
                       rstd, inp, weight, bias, N, C);
}

extern "C" void zt_cuda_residual_layernorm_forward(zt_kctx *ctx, float *res, float *out,
                                                   float *mean, float *rstd, const float *a,
                                                   const float *b, const float *weight,
                                                   const float *bias, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    unsigned blocks = (unsigned)((N + ZT_ROWS_PER_BLOCK - 1) / ZT_ROWS_PER_BLOCK);
    ZT_CUDA_LAUNCH(ctx, "residual_layernorm_forward", residual_layernorm_forward_kernel, blocks,
                   ZT_CUDA_THREADS, res, out, mean, rstd, a, b, weight, bias, N, C);
}

template <int IT, int V>
static void layernorm_backward_row(zt_kctx *ctx, size_t splits, float *dinp, float *pw, float *pb,
                                   const void *dout, const float *inp, const float *weight,
                                   const float *mean, const float *rstd, int N, int C, int rows)
{
    ZT_CUDA_LAUNCH(ctx, "layernorm_backward (row kernel)", (layernorm_backward_row_kernel<IT, V>),
                   (unsigned)splits, 32 * ZT_LNR_WARPS, dinp, pw, pb, dout, inp, weight, mean, rstd,
                   N, C, rows);
}

/* LayerNorm's backward by layernorm_backward_row_kernel<IT> where C and the pointers allow it
 * (and ctx->ln_bwd_row), else by layernorm_backward_fused_kernel<IT>, where a lane can hold its
 * columns' sums and a parameter gradient is wanted; false (nothing queued) otherwise */
template <int IT>
static bool layernorm_backward_one_pass(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                        const void *dout, const float *inp, const float *weight,
                                        const float *mean, const float *rstd, int N, int C)
{
    if (C > 32 * ZT_LNB_CPL || (!dweight && !dbias)) return false;
    size_t splits = ((size_t)N + ZT_LNB_MIN_ROWS - 1) / ZT_LNB_MIN_ROWS;
    size_t cap = ZT_CUDA_SCRATCH_FLOATS / (2 * (size_t)C);
    if (splits > ZT_LNB_MAX_SPLITS) splits = ZT_LNB_MAX_SPLITS;
    if (splits > cap) splits = cap;
    int rows = (int)(((size_t)N + splits - 1) / splits);
    splits = ((size_t)N + (size_t)rows - 1) / (size_t)rows;
    float *pw = ctx->scratch, *pb = ctx->scratch + splits * (size_t)C;
    typedef void (*row_fn)(zt_kctx *, size_t, float *, float *, float *, const void *,
                           const float *, const float *, const float *, const float *, int, int,
                           int);
    static const row_fn by_v[ZT_LNR_MAXV] = {
        layernorm_backward_row<IT, 1>, layernorm_backward_row<IT, 2>, layernorm_backward_row<IT, 3>,
        layernorm_backward_row<IT, 4>, layernorm_backward_row<IT, 5>, layernorm_backward_row<IT, 6>,
        layernorm_backward_row<IT, 7>, layernorm_backward_row<IT, 8>};
    int v = (C + 127) / 128;
    bool row = ctx->ln_bwd_row && C % 4 == 0 && v <= ZT_LNR_MAXV &&
               ((uintptr_t)dinp | (uintptr_t)inp | (uintptr_t)weight | (uintptr_t)pw) % 16 == 0 &&
               (uintptr_t)dout % (IT ? 8 : 16) == 0;
    if (row)
        by_v[v - 1](ctx, splits, dinp, dweight ? pw : NULL, dbias ? pb : NULL, dout, inp, weight,
                    mean, rstd, N, C, rows);
    else
        ZT_CUDA_LAUNCH(ctx, "layernorm_backward", layernorm_backward_fused_kernel<IT>,
                       (unsigned)splits, ZT_CUDA_THREADS, dinp, dweight ? pw : NULL,
                       dbias ? pb : NULL, dout, inp, weight, mean, rstd, N, C, rows);
    ZT_CUDA_LAUNCH(ctx, "layernorm_backward (parameters)", colsum_finish_kernel, (C + 31) / 32,
                   dim3(32, ZT_COL_TY), dweight, dbias, pw, pb, (int)splits, C);
    return true;
}

extern "C" bool zt_cuda_layernorm_backward16(zt_kctx *ctx, float *dinp, float *dweight,
                                             float *dbias, const uint16_t *dout, int mm16,
                                             const float *inp, const float *weight,
                                             const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0) return true;
    if (mm16 == ZT_MM_FP16)
        return layernorm_backward_one_pass<2>(ctx, dinp, dweight, dbias, dout, inp, weight, mean,
                                              rstd, N, C);
    return layernorm_backward_one_pass<1>(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                          N, C);
}

extern "C" void zt_cuda_layernorm_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                           const float *dout, const float *inp, const float *weight,
                                           const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    if (layernorm_backward_one_pass<0>(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N,
                                       C))
        return;
    if (dinp) {
        unsigned blocks = (unsigned)((N + ZT_ROWS_PER_BLOCK - 1) / ZT_ROWS_PER_BLOCK);
        ZT_CUDA_LAUNCH(ctx, "layernorm_backward", layernorm_backward_dinp_kernel, blocks,
                       ZT_CUDA_THREADS, dinp, dout, inp, weight, mean, rstd, N, C);
    }
    colsum<0>(ctx, dweight, dbias, dout, inp, mean, rstd, N, C, "layernorm_backward (parameters)");
}

extern "C" void zt_cuda_bias_backward(zt_kctx *ctx, float *dbias, const float *dout, int N, int OC)
{
    colsum<0>(ctx, NULL, dbias, dout, NULL, NULL, NULL, N, OC, "matmul_backward (bias)");
}

extern "C" void zt_cuda_bias_backward16(zt_kctx *ctx, float *dbias, const uint16_t *dout, int mm16,
                                        int N, int OC)
{
    if (mm16 == ZT_MM_FP16)
        colsum<0, 2>(ctx, NULL, dbias, dout, NULL, NULL, NULL, N, OC,
                     "matmul_backward (bias, from fp16)");
    else
        colsum<0, 1>(ctx, NULL, dbias, dout, NULL, NULL, NULL, N, OC,
                     "matmul_backward (bias, from bf16)");
}

extern "C" void zt_cuda_stage_cast_bias(zt_kctx *ctx, uint16_t *dst, int mm16, const float *dout,
                                        int N, int OC, float *dbias)
{
    if (mm16 == ZT_MM_FP16)
        colsum<2>(ctx, NULL, dbias, dout, NULL, NULL, NULL, N, OC,
                  "matmul staging (fp16) with the bias gradient", dst);
    else
        colsum<1>(ctx, NULL, dbias, dout, NULL, NULL, NULL, N, OC,
                  "matmul staging (bf16) with the bias gradient", dst);
}

static __global__ void bias_fill_kernel(float *out, const float *bias, size_t n, int OC)
{
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x)
        out[idx] = bias ? bias[idx % (size_t)OC] : 0.0f;
}

extern "C" void zt_cuda_bias_fill(zt_kctx *ctx, float *out, const float *bias, int N, int OC)
{
    size_t n = (size_t)N * OC;
    if (N <= 0 || OC <= 0) return;
    ZT_CUDA_LAUNCH(ctx, "bias_fill", bias_fill_kernel, zt_cuda_blocks(n), ZT_CUDA_THREADS, out,
                   bias, n, OC);
}
