/* zerotrain: the fused causal attention of ZT_CUDA_ATTN=fused on tensor cores, for jobs whose
 * matmuls take 16-bit inputs (zt_cuda_mm bf16 or fp16): attn_cuda.cu's algorithm (online
 * softmax forward; backward without atomics, one kernel for dK and dV and one for dQ, both
 * recomputing P = exp(s - lse) and dS = P (dO.V - delta) scale, delta = dO.out computed once
 * per query row by a kernel before them, into the attention's scratch) with every
 * product on 16-bit tensor cores through the warp matrix functions (mma.h, 16 x 16 x 16, fp32
 * accumulators), as FlashAttention does under bf16 and fp16: Q, K, V and dO are rounded to the
 * context's 16-bit type (E: bf16, or fp16 for fp16 contexts) as a tile is loaded, P and dS as
 * they are written for their products; the softmax, the running sums, delta and lse stay fp32,
 * and so do the results in memory. Head size 64.
 *
 * A block is 4 warps and owns 64 rows (queries, or keys for dK/dV), 16 per warp, and walks
 * the other side in tiles of 32 rows held in shared memory. A warp's 16 x 32 scores go
 * through its own part of shared memory (fragments keep no known element order), where two
 * lanes per row run the softmax and write the 16-bit P or dS over the scores' own rows. The
 * forward keeps each warp's 16 x 64 output in shared memory, rescaled there by the running
 * maximum; the backward keeps its gradients in accumulator fragments and adds them to dqkv
 * once, through shared memory (so rows past T are never touched). */
#include "cuda_int.h"

#ifndef ZT_CUDA_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#endif

namespace wmma = nvcuda::wmma;

/* x rounded to the 16-bit input type E */
template <class E> static __device__ __forceinline__ E tc_round(float x);
template <> __device__ __forceinline__ __nv_bfloat16 tc_round<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half tc_round<__half>(float x)
{
    return __float2half_rn(x);
}

#define TC_HS 64                 /* the head size compiled */
#define TC_WARPS 4
#define TC_THREADS (32 * TC_WARPS)
#define TC_BR (16 * TC_WARPS)    /* rows a block owns */
#define TC_BC 32                 /* rows of a walked tile */
#define TC_LDH (TC_HS + 8)       /* 16-bit row stride of head-vector tiles */
#define TC_LDS (TC_BC + 4)       /* float row stride of a warp's 16 x TC_BC scores */
#define TC_LDP (2 * TC_LDS)      /* 16-bit row stride of P or dS written over them */
#define TC_LDO (TC_HS + 4)       /* float row stride of a warp's 16 x TC_HS outputs */
#define TC_HEAD ((size_t)TC_BR * TC_LDH * 2)      /* bytes of TC_BR 16-bit head vectors */
#define TC_TILE ((size_t)TC_BC * TC_LDH * 2)      /* bytes of TC_BC 16-bit head vectors */
#define TC_SCORES ((size_t)TC_WARPS * 16 * TC_LDS * 4)
#define TC_OUT ((size_t)TC_WARPS * 16 * TC_LDO * 4)

template <class E> using tc_frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major>;
template <class E> using tc_frag_b = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major>;
/* a matrix_b given by the rows of its transpose */
template <class E> using tc_frag_bt = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major>;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> tc_frag_c;

static_assert(TC_HEAD % 32 == 0 && TC_TILE % 32 == 0 && TC_SCORES % 32 == 0 &&
                  TC_OUT % 32 == 0 && (16 * TC_LDS * 4) % 32 == 0 && (16 * TC_LDO * 4) % 32 == 0,
              "every region and every warp's part starts 256-bit aligned");

/* dst (ROWS x TC_HS 16-bit, row stride TC_LDH) = rows row0.. of src (row stride ld), zero past
 * T: four floats a load where src and ld keep every row 16-byte aligned (the same for every
 * thread of the block), else one */
template <int ROWS, class E>
static __device__ __forceinline__ void tc_load(E *dst, const float *src, int row0, int T, size_t ld)
{
    if ((uintptr_t)src % 16 == 0 && ld % 4 == 0) {
        for (int e = threadIdx.x; e < ROWS * TC_HS / 4; e += TC_THREADS) {
            int r = e / (TC_HS / 4), c = 4 * (e % (TC_HS / 4)), i = row0 + r;
            float4 v = i < T ? *(const float4 *)(src + (size_t)i * ld + c)
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            E *d = dst + r * TC_LDH + c;
            d[0] = tc_round<E>(v.x), d[1] = tc_round<E>(v.y);
            d[2] = tc_round<E>(v.z), d[3] = tc_round<E>(v.w);
        }
        return;
    }
    for (int e = threadIdx.x; e < ROWS * TC_HS; e += TC_THREADS) {
        int r = e / TC_HS, c = e % TC_HS, i = row0 + r;
        dst[r * TC_LDH + c] = tc_round<E>(i < T ? src[(size_t)i * ld + c] : 0.0f);
    }
}

/* s (16 x 16 NB, row stride lds) = a (16 x 16 KB) b^T, a and b row-major 16-bit (b: 16 NB
 * rows of 16 KB), lda = ldb = TC_LDH. Collective over the warp. */
template <int NB, int KB, class E>
static __device__ __forceinline__ void tc_abt(float *s, int lds, const E *a, const E *b)
{
    for (int n = 0; n < NB; n++) {
        tc_frag_c acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < KB; k++) {
            tc_frag_a<E> fa;
            tc_frag_bt<E> fb;
            wmma::load_matrix_sync(fa, a + k * 16, TC_LDH);
            wmma::load_matrix_sync(fb, b + (size_t)n * 16 * TC_LDH + k * 16, TC_LDH);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(s + n * 16, acc, lds, wmma::mem_row_major);
    }
}

/* acc[n] += a (16 x 16 KB, row stride TC_LDP) b (16 KB x 16 NB, row stride TC_LDH), both
 * row-major 16-bit: a warp's P or dS times a tile. Collective over the warp. */
template <int NB, int KB, class E>
static __device__ __forceinline__ void tc_ab_acc(tc_frag_c *acc, const E *a, const E *b)
{
    for (int k = 0; k < KB; k++) {
        tc_frag_a<E> fa;
        wmma::load_matrix_sync(fa, a + k * 16, TC_LDP);
        for (int n = 0; n < NB; n++) {
            tc_frag_b<E> fb;
            wmma::load_matrix_sync(fb, b + (size_t)k * 16 * TC_LDH + n * 16, TC_LDH);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* dst rows row0.. (row stride ld) += a warp's 16 x TC_HS accumulators, through its part of
 * shared memory `stage` (16 x TC_LDO floats); rows at or past T are left alone. */
static __device__ __forceinline__ void tc_add_out(float *dst, size_t ld, int row0, int T,
                                                  float *stage, const tc_frag_c *acc)
{
    int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    for (int n = 0; n < TC_HS / 16; n++)
        wmma::store_matrix_sync(stage + n * 16, acc[n], TC_LDO, wmma::mem_row_major);
    __syncwarp();
    if (row0 + r < T)
        for (int c = half * (TC_HS / 2); c < (half + 1) * (TC_HS / 2); c++)
            dst[(size_t)(row0 + r) * ld + c] += stage[r * TC_LDO + c];
    __syncwarp();
}

/* The block's place: (sequence b, head h) from blockIdx.y, its tile of TC_BR rows (the last
 * first when last_first: the longest query rows start first), qkv at (b, token 0, head h). */
struct tc_pos {
    int C, b, h, bh, row0, warp, lane;
    size_t C3;
    const float *base;
};

static __device__ __forceinline__ tc_pos tc_pos_of(const float *qkv, int T, int NH,
                                                   bool last_first)
{
    tc_pos p;
    int nt = (T + TC_BR - 1) / TC_BR;
    int tile = last_first ? nt - 1 - (int)blockIdx.x : (int)blockIdx.x;
    p.C = NH * TC_HS;
    p.bh = (int)blockIdx.y;
    p.b = p.bh / NH;
    p.h = p.bh % NH;
    p.row0 = tile * TC_BR;
    p.warp = (int)threadIdx.x / 32;
    p.lane = (int)threadIdx.x % 32;
    p.C3 = 3 * (size_t)p.C;
    p.base = qkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    return p;
}

/* Forward. grid (query tiles, B NH). */
template <class E>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_fwd_kernel(float *out, float *lse, const float *qkv, int T, int NH, float scale)
{
    __shared__ __align__(32) unsigned char sm[TC_HEAD + 2 * TC_TILE + TC_SCORES + TC_OUT];
    E *Qs = (E *)sm, *Ks = (E *)(sm + TC_HEAD);
    E *Vs = (E *)(sm + TC_HEAD + TC_TILE);
    tc_pos p = tc_pos_of(qkv, T, NH, true);
    float *S = (float *)(sm + TC_HEAD + 2 * TC_TILE) + p.warp * 16 * TC_LDS;
    E *P = (E *)S; /* over the scores, row stride TC_LDP */
    float *O = (float *)(sm + TC_HEAD + 2 * TC_TILE + TC_SCORES) + p.warp * 16 * TC_LDO;
    int qw = p.row0 + 16 * p.warp, r = p.lane / 2, half = p.lane % 2, i = qw + r;
    int c0 = half * (TC_HS / 2), j0 = half * 16; /* this lane's output columns and keys */

    tc_load<TC_BR>(Qs, p.base, p.row0, T, p.C3);
    /* the outputs stay in accumulator fragments; to rescale their rows, each element's row is
     * read off a fragment loaded from a matrix of row numbers (whatever the fragments' element
     * order, it is the same for every accumulator fragment), the factors from al[] */
    for (int c = half * 8; c < half * 8 + 8; c++) /* a 16 x 16 matrix of row numbers */
        O[r * TC_LDO + c] = (float)r;
    __syncwarp();
    tc_frag_c rowf, acc[TC_HS / 16];
    wmma::load_matrix_sync(rowf, O, TC_LDO, wmma::mem_row_major);
    for (int n = 0; n < TC_HS / 16; n++)
        wmma::fill_fragment(acc[n], 0.0f);
    float *al = O + 16 * TC_LDO - 16; /* the warp's last row of O, free until the end */
    float m = -INFINITY, l = 0.0f;
    int kend = min(T, p.row0 + TC_BR); /* keys the block's last query sees */
    for (int k0 = 0; k0 < kend; k0 += TC_BC) {
        __syncthreads(); /* the previous tile is used up */
        tc_load<TC_BC>(Ks, p.base + p.C, k0, T, p.C3);
        tc_load<TC_BC>(Vs, p.base + 2 * p.C, k0, T, p.C3);
        __syncthreads();
        if (k0 > qw + 15) continue; /* the warp's queries see none of these keys */
        tc_abt<TC_BC / 16, TC_HS / 16>(S, TC_LDS, Qs + 16 * p.warp * TC_LDH, Ks);
        __syncwarp();
        float s[16], mx = -INFINITY;
        for (int t = 0; t < 16; t++) {
            int j = k0 + j0 + t;
            s[t] = i < T && j <= i ? scale * S[r * TC_LDS + j0 + t] : -INFINITY;
            mx = fmaxf(mx, s[t]);
        }
        float mnew = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
        /* a row with no key yet (or past T) keeps m = -inf and adds nothing */
        float mref = mnew == -INFINITY ? 0.0f : mnew;
        float alpha = expf(m - mref), ps = 0.0f;
        __syncwarp(); /* the scores are read before P overwrites them */
        for (int t = 0; t < 16; t++) {
            float e = expf(s[t] - mref);
            ps += e;
            P[r * TC_LDP + j0 + t] = tc_round<E>(e);
        }
        l = l * alpha + ps + __shfl_xor_sync(0xffffffffu, ps, 1);
        m = mnew;
        if (half == 0) al[r] = alpha;
        __syncwarp();
        for (int n = 0; n < TC_HS / 16; n++)
            for (int e = 0; e < acc[n].num_elements; e++)
                acc[n].x[e] *= al[(int)rowf.x[e]];
        tc_ab_acc<TC_HS / 16, TC_BC / 16>(acc, P, Vs);
        __syncwarp(); /* al and P are read before the next tile writes them */
    }
    for (int n = 0; n < TC_HS / 16; n++)
        wmma::store_matrix_sync(O + n * 16, acc[n], TC_LDO, wmma::mem_row_major);
    __syncwarp();
    if (i >= T) return;
    float *o = out + ((size_t)p.b * T + i) * p.C + (size_t)p.h * TC_HS;
    for (int c = c0; c < c0 + TC_HS / 2; c++)
        o[c] = O[r * TC_LDO + c] / l;
    if (half == 0) lse[(size_t)p.bh * T + i] = m + logf(l);
}

/* delta[r] = dO_i . out_i (fp32) over head h for the rows r = (b, h, i) of a run of
 * sequences, dout and out at its first: one warp a row, each lane two of its 64 columns. The
 * backward kernels read it, once per row, instead of recomputing it for every key tile. */
static __global__ void __launch_bounds__(TC_THREADS)
    tc_delta_kernel(float *delta, const float *dout, const float *out, int T, int NH, size_t rows)
{
    size_t r = (size_t)blockIdx.x * TC_WARPS + threadIdx.x / 32;
    int lane = (int)threadIdx.x % 32;
    if (r >= rows) return; /* the whole warp: no barrier follows */
    size_t i = r % (size_t)T, bh = r / (size_t)T, h = bh % (size_t)NH, b = bh / (size_t)NH;
    size_t off = (b * (size_t)T + i) * (size_t)NH * TC_HS + h * TC_HS;
    float d = dout[off + lane] * out[off + lane] + dout[off + 32 + lane] * out[off + 32 + lane];
    d = zt_warp_sum(d);
    if (lane == 0) delta[r] = d;
}

/* delta and lse of the ROWS queries from q0 into dl[], ls[] (0 past T); delta_bh and lse_bh at
 * (b, h) */
template <int ROWS>
static __device__ __forceinline__ void tc_rows(float *dl, float *ls, const float *delta_bh,
                                               const float *lse_bh, int q0, int T)
{
    for (int e = (int)threadIdx.x; e < ROWS; e += TC_THREADS) {
        int i = q0 + e;
        dl[e] = i < T ? delta_bh[i] : 0.0f;
        ls[e] = i < T ? lse_bh[i] : 0.0f;
    }
}

/* Backward, dK and dV. grid (key tiles, B NH), the first (longest) key tiles first. */
template <class E>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_bwd_kv_kernel(float *dqkv, const float *dout, const float *qkv, const float *delta,
                     const float *lse, int T, int NH, float scale)
{
    __shared__ __align__(32) unsigned char sm[2 * TC_HEAD + 2 * TC_TILE + 2 * TC_SCORES +
                                              2 * TC_BC * 4];
    static_assert(2 * TC_TILE + 2 * TC_SCORES >= TC_OUT, "the staging fits the tiles' place");
    E *Ks = (E *)sm, *Vs = (E *)(sm + TC_HEAD);
    E *Qs = (E *)(sm + 2 * TC_HEAD), *dOs = (E *)(sm + 2 * TC_HEAD + TC_TILE);
    unsigned char *sc = sm + 2 * TC_HEAD + 2 * TC_TILE;
    tc_pos p = tc_pos_of(qkv, T, NH, false);
    float *St = (float *)sc + p.warp * 16 * TC_LDS;                /* S^T, then P^T */
    float *dPt = (float *)(sc + TC_SCORES) + p.warp * 16 * TC_LDS; /* dP^T, then dS^T */
    float *ls = (float *)(sc + 2 * TC_SCORES), *dl = ls + TC_BC;
    int jw = p.row0 + 16 * p.warp, r = p.lane / 2, half = p.lane % 2, j = jw + r;
    int i0 = half * 16; /* this lane's queries in a tile */
    size_t hoff = (size_t)p.b * T * p.C + (size_t)p.h * TC_HS; /* (b, h) in dout */

    tc_load<TC_BR>(Ks, p.base + p.C, p.row0, T, p.C3);
    tc_load<TC_BR>(Vs, p.base + 2 * p.C, p.row0, T, p.C3);
    tc_frag_c dk[TC_HS / 16], dv[TC_HS / 16];
    for (int n = 0; n < TC_HS / 16; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    for (int q0 = p.row0; q0 < T; q0 += TC_BC) { /* queries i >= the tile's first key */
        __syncthreads();
        tc_load<TC_BC>(Qs, p.base, q0, T, p.C3);
        tc_load<TC_BC>(dOs, dout + hoff, q0, T, (size_t)p.C);
        tc_rows<TC_BC>(dl, ls, delta + (size_t)p.bh * T, lse + (size_t)p.bh * T, q0, T);
        __syncthreads();
        if (q0 + TC_BC - 1 < jw) continue; /* no query of the tile sees the warp's keys */
        tc_abt<TC_BC / 16, TC_HS / 16>(St, TC_LDS, Ks + 16 * p.warp * TC_LDH, Qs);
        tc_abt<TC_BC / 16, TC_HS / 16>(dPt, TC_LDS, Vs + 16 * p.warp * TC_LDH, dOs);
        __syncwarp();
        float pv[16], dsv[16];
        for (int t = 0; t < 16; t++) {
            int ii = i0 + t, i = q0 + ii;
            float e = 0.0f, ds = 0.0f;
            if (j < T && i < T && j <= i) {
                e = expf(scale * St[r * TC_LDS + ii] - ls[ii]);
                ds = e * (dPt[r * TC_LDS + ii] - dl[ii]) * scale;
            }
            pv[t] = e;
            dsv[t] = ds;
        }
        __syncwarp(); /* read before overwritten */
        E *Pt = (E *)St, *dSt = (E *)dPt;
        for (int t = 0; t < 16; t++) {
            Pt[r * TC_LDP + i0 + t] = tc_round<E>(pv[t]);
            dSt[r * TC_LDP + i0 + t] = tc_round<E>(dsv[t]);
        }
        __syncwarp();
        tc_ab_acc<TC_HS / 16, TC_BC / 16>(dv, Pt, dOs);
        tc_ab_acc<TC_HS / 16, TC_BC / 16>(dk, dSt, Qs);
    }
    __syncthreads(); /* the tiles' place becomes the staging */
    float *stage = (float *)(sm + 2 * TC_HEAD) + p.warp * 16 * TC_LDO;
    float *g = dqkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    tc_add_out(g + p.C, p.C3, jw, T, stage, dk);
    tc_add_out(g + 2 * p.C, p.C3, jw, T, stage, dv);
}

/* Backward, dQ. grid (query tiles, B NH), the last (longest) query tiles first. */
template <class E>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_bwd_q_kernel(float *dqkv, const float *dout, const float *qkv, const float *delta,
                    const float *lse, int T, int NH, float scale)
{
    __shared__ __align__(32) unsigned char sm[2 * TC_HEAD + 2 * TC_TILE + 2 * TC_SCORES +
                                              2 * TC_BR * 4];
    E *Qs = (E *)sm, *dOs = (E *)(sm + TC_HEAD);
    E *Ks = (E *)(sm + 2 * TC_HEAD), *Vs = (E *)(sm + 2 * TC_HEAD + TC_TILE);
    unsigned char *sc = sm + 2 * TC_HEAD + 2 * TC_TILE;
    tc_pos p = tc_pos_of(qkv, T, NH, true);
    float *S = (float *)sc + p.warp * 16 * TC_LDS;                /* S, then dS */
    float *dP = (float *)(sc + TC_SCORES) + p.warp * 16 * TC_LDS; /* dO V^T */
    float *ls = (float *)(sc + 2 * TC_SCORES), *dl = ls + TC_BR;
    int qw = p.row0 + 16 * p.warp, r = p.lane / 2, half = p.lane % 2, i = qw + r;
    int j0 = half * 16;
    size_t hoff = (size_t)p.b * T * p.C + (size_t)p.h * TC_HS;

    tc_load<TC_BR>(Qs, p.base, p.row0, T, p.C3);
    tc_load<TC_BR>(dOs, dout + hoff, p.row0, T, (size_t)p.C);
    tc_rows<TC_BR>(dl, ls, delta + (size_t)p.bh * T, lse + (size_t)p.bh * T, p.row0, T);
    tc_frag_c dq[TC_HS / 16];
    for (int n = 0; n < TC_HS / 16; n++)
        wmma::fill_fragment(dq[n], 0.0f);
    int kend = min(T, p.row0 + TC_BR);
    for (int k0 = 0; k0 < kend; k0 += TC_BC) {
        __syncthreads();
        tc_load<TC_BC>(Ks, p.base + p.C, k0, T, p.C3);
        tc_load<TC_BC>(Vs, p.base + 2 * p.C, k0, T, p.C3);
        __syncthreads();
        if (k0 > qw + 15) continue;
        tc_abt<TC_BC / 16, TC_HS / 16>(S, TC_LDS, Qs + 16 * p.warp * TC_LDH, Ks);
        tc_abt<TC_BC / 16, TC_HS / 16>(dP, TC_LDS, dOs + 16 * p.warp * TC_LDH, Vs);
        __syncwarp();
        float dsv[16], li = ls[16 * p.warp + r], di = dl[16 * p.warp + r];
        for (int t = 0; t < 16; t++) {
            int j = k0 + j0 + t;
            float ds = 0.0f;
            if (i < T && j <= i) {
                float e = expf(scale * S[r * TC_LDS + j0 + t] - li);
                ds = e * (dP[r * TC_LDS + j0 + t] - di) * scale;
            }
            dsv[t] = ds;
        }
        __syncwarp();
        E *dS = (E *)S;
        for (int t = 0; t < 16; t++)
            dS[r * TC_LDP + j0 + t] = tc_round<E>(dsv[t]);
        __syncwarp();
        tc_ab_acc<TC_HS / 16, TC_BC / 16>(dq, dS, Ks);
    }
    __syncthreads();
    float *stage = (float *)(sm + 2 * TC_HEAD) + p.warp * 16 * TC_LDO;
    tc_add_out(dqkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS, p.C3, qw, T, stage, dq);
}

extern "C" void zt_cuda_attn_tc_forward(zt_kctx *ctx, float *out, float *lse, const float *qkv,
                                        int B, int T, int C, int NH)
{
    float scale = 1.0f / sqrtf((float)(C / NH));
    dim3 grid((unsigned)((T + TC_BR - 1) / TC_BR), (unsigned)(B * NH));
    if (ctx->mm == ZT_MM_FP16)
        ZT_CUDA_LAUNCH(ctx, "attention_forward (fused, fp16 tensor cores)", tc_fwd_kernel<__half>,
                       grid, TC_THREADS, out, lse, qkv, T, NH, scale);
    else
        ZT_CUDA_LAUNCH(ctx, "attention_forward (fused, bf16 tensor cores)",
                       tc_fwd_kernel<__nv_bfloat16>, grid, TC_THREADS, out, lse, qkv, T, NH, scale);
}

extern "C" void zt_cuda_attn_tc_backward(zt_kctx *ctx, float *dqkv, float *scratch,
                                         size_t scratch_floats, const float *dout, const float *qkv,
                                         const float *out, const float *lse, int B, int T, int C,
                                         int NH)
{
    float scale = 1.0f / sqrtf((float)(C / NH));
    /* as many sequences at a time as the scratch holds the deltas of (all of them, unless the
     * scratch is small; at least one: it holds 2 NH T T floats per sequence or more) */
    size_t per_seq = (size_t)NH * (size_t)T, fit = scratch_floats / per_seq;
    int run = fit < (size_t)B ? (int)(fit > 0 ? fit : 1) : B;
    bool fp16 = ctx->mm == ZT_MM_FP16;
    for (int b0 = 0; b0 < B; b0 += run) {
        int nb = B - b0 < run ? B - b0 : run;
        size_t rows = (size_t)nb * per_seq, tok = (size_t)b0 * T;
        const float *q = qkv + tok * 3 * C, *dO = dout + tok * C, *o = out + tok * C;
        const float *ls = lse + (size_t)b0 * per_seq;
        float *dq = dqkv + tok * 3 * C;
        ZT_CUDA_LAUNCH(ctx, "attention_backward (delta)", tc_delta_kernel,
                       (unsigned)((rows + TC_WARPS - 1) / TC_WARPS), TC_THREADS, scratch, dO, o, T,
                       NH, rows);
        dim3 grid((unsigned)((T + TC_BR - 1) / TC_BR), (unsigned)(nb * NH));
        if (fp16) {
            ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dK dV, fp16 tensor cores)",
                           tc_bwd_kv_kernel<__half>, grid, TC_THREADS, dq, dO, q, scratch, ls, T,
                           NH, scale);
            ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dQ, fp16 tensor cores)",
                           tc_bwd_q_kernel<__half>, grid, TC_THREADS, dq, dO, q, scratch, ls, T, NH,
                           scale);
        } else {
            ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dK dV, bf16 tensor cores)",
                           tc_bwd_kv_kernel<__nv_bfloat16>, grid, TC_THREADS, dq, dO, q, scratch,
                           ls, T, NH, scale);
            ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dQ, bf16 tensor cores)",
                           tc_bwd_q_kernel<__nv_bfloat16>, grid, TC_THREADS, dq, dO, q, scratch, ls,
                           T, NH, scale);
        }
    }
}
