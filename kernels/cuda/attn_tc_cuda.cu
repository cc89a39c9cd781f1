/* zerotrain: the fused causal attention of ZT_CUDA_ATTN=fused on tensor cores, for jobs whose
 * matmuls take 16-bit inputs (zt_cuda_mm bf16 or fp16): attn_cuda.cu's algorithm (online
 * softmax forward; backward without atomics, one kernel for dK and dV and one for dQ, both
 * recomputing P = exp(s - lse) and dS = P (dO.V - delta) scale, delta = dO.out computed once
 * per query row by a kernel before them) with every product on 16-bit tensor cores, as
 * FlashAttention does under bf16 and fp16: Q, K, V and dO are rounded to the context's 16-bit
 * type (E: bf16, or fp16 for fp16 contexts), once, into the attention's scratch (for runs of as
 * many sequences as it holds) before the kernels, P and dS as they are written for their
 * products; the softmax, the running sums, delta and lse stay fp32, and so do the results in
 * memory where the caller has no 16-bit home for them (the output's; the gradient of
 * attention_backward16). Head size 64.
 *
 * The kernels come in two generations of the same algorithm: on the warp matrix functions
 * (mma.h, attn_tc_wmma.cuh; ZT_CUDA_ATTN_FWD and ZT_CUDA_ATTN_BWD =wmma) and on mma.sync
 * (attn_tc_mma.cuh, the default: faster, docs/performance.md). This file holds what both
 * share (the tiles, the asynchronous copies, the block's place, delta) and the launchers;
 * the two .cuh files are part of this translation unit, where the launchers instantiate their
 * templates (device code is not compiled separately). */
#include "cuda_int.h"
#include "cuda_math.h"

#include <float.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#ifndef ZT_CUDA_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline_primitives.h>
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

/* An output element stored as its tensor holds it: fp32, or rounded to a 16-bit type (the
 * attention output's 16-bit home); and read back as fp32. */
static __device__ __forceinline__ void tc_put(float *p, float v)
{
    *p = v;
}
static __device__ __forceinline__ void tc_put(__nv_bfloat16 *p, float v)
{
    *p = tc_round<__nv_bfloat16>(v);
}
static __device__ __forceinline__ void tc_put(__half *p, float v)
{
    *p = tc_round<__half>(v);
}
static __device__ __forceinline__ float tc_get(float v)
{
    return v;
}
static __device__ __forceinline__ float tc_get(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}
static __device__ __forceinline__ float tc_get(__half v)
{
    return __half2float(v);
}

/* The score column (of TC_BC) that a lane of half h (of its row's two) takes at step u (of 16):
 * the halves interleaved, so that at every step the warp's 32 lanes hit 16 banks of scores at
 * row stride TC_LDS (4 mod 32 words; rows r and r + 8 share them), where halves side by side
 * hit 8, and its 16-bit P or dS at 2 mod 32 words likewise. */
static __device__ __forceinline__ int tc_col(int u, int h)
{
    return 2 * u + h;
}

#define TC_LOG2E 1.4426950408889634f /* softmax in base 2: exp(x) = exp2(x log2(e)) */
#define TC_LN2 0.6931471805599453f

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

/* Issues the asynchronous copies of rows row0.. of src (16-bit, row stride ld elements, every
 * row 16-byte aligned) into dst (ROWS x TC_HS, row stride TC_LDH), zeros for rows at or past T:
 * eight elements a copy. The caller commits them and waits. */
template <int ROWS, class E>
static __device__ __forceinline__ void tc_fetch(E *dst, const E *src, int row0, int T, size_t ld)
{
    for (int e = (int)threadIdx.x; e < ROWS * TC_HS / 8; e += TC_THREADS) {
        int r = e / (TC_HS / 8), c = 8 * (e % (TC_HS / 8)), i = row0 + r;
        /* a row past T reads nothing: the copy is all zero fill (from an aligned address) */
        const E *from = i < T ? src + (size_t)i * ld + c : src;
        __pipeline_memcpy_async(dst + r * TC_LDH + c, from, 16, i < T ? 0 : 16);
    }
}

/* A warp's 16 rows of a ROWS x TC_HS tile in shared memory (row stride TC_LDH) as the
 * matrix_a fragments of its TC_HS / 16 column blocks. Collective over the warp. */
template <class E> static __device__ __forceinline__ void tc_frags(tc_frag_a<E> *f, const E *rows)
{
    for (int k = 0; k < TC_HS / 16; k++)
        wmma::load_matrix_sync(f[k], rows + k * 16, TC_LDH);
}

/* s (16 x 16 NB, row stride lds) = a b^T: a the warp's 16 x TC_HS rows as fragments, b 16 NB
 * rows of TC_HS (row stride TC_LDH). Collective over the warp. */
template <int NB, class E>
static __device__ __forceinline__ void tc_abt(float *s, int lds, const tc_frag_a<E> *a, const E *b)
{
    for (int n = 0; n < NB; n++) {
        tc_frag_c acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < TC_HS / 16; k++) {
            tc_frag_bt<E> fb;
            wmma::load_matrix_sync(fb, b + (size_t)n * 16 * TC_LDH + k * 16, TC_LDH);
            wmma::mma_sync(acc, a[k], fb, acc);
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

/* dst rows row0.. (from element off, row stride ld) += a warp's 16 x TC_HS accumulators, or
 * where dst16 is not NULL, dst16's = them rounded (written: the bits of rounding the sums
 * added into zeros, which are never -0 as sums from +0 are not), through its part of shared
 * memory `stage` (16 x TC_LDO floats); rows at or past T are left alone. */
template <class E>
static __device__ __forceinline__ void tc_add_out(float *dst, E *dst16, size_t off, size_t ld,
                                                  int row0, int T, float *stage,
                                                  const tc_frag_c *acc)
{
    int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    for (int n = 0; n < TC_HS / 16; n++)
        wmma::store_matrix_sync(stage + n * 16, acc[n], TC_LDO, wmma::mem_row_major);
    __syncwarp();
    size_t o = off + (size_t)(row0 + r) * ld;
    if (row0 + r < T)
        for (int c = half * (TC_HS / 2); c < (half + 1) * (TC_HS / 2); c++) {
            if (dst16)
                dst16[o + c] = tc_round<E>(stage[r * TC_LDO + c]);
            else
                dst[o + c] += stage[r * TC_LDO + c];
        }
    __syncwarp();
}

/* The block's place: (sequence b, head h) from blockIdx.y, its tile of TC_BR rows (the last
 * first when last_first: the longest query rows start first). */
struct tc_pos {
    int C, b, h, bh, row0, warp, lane;
    size_t C3;
};

static __device__ __forceinline__ tc_pos tc_pos_of(int T, int NH, bool last_first)
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
    return p;
}

/* The shared memory of every kernel: `own` (TC_BR rows of up to two head-vector tensors, the
 * block's own, until they are in fragments; then two stages of two TC_BC-row tiles; at the end
 * the warps' 16 x TC_LDO float staging of their results), the warps' two score matrices, and
 * TC_BR floats of two per-row vectors. */
#define TC_OWN (2 * TC_HEAD > 4 * TC_TILE ? 2 * TC_HEAD : 4 * TC_TILE)
#define TC_SMEM (TC_OWN + 2 * TC_SCORES + 2 * TC_BR * 4)
static_assert(TC_OWN >= TC_OUT && TC_OWN % 32 == 0, "the staging fits the tiles' place");
static_assert(TC_SMEM <= 48 * 1024, "static shared memory");

/* stage s's tile a (0 or 1) of ROWS head vectors each in `own` (the wmma kernels' tiles are
 * TC_BC rows, the mma kernels' TC_MK) */
template <int ROWS, class E>
static __device__ __forceinline__ E *tc_stage(unsigned char *own, int s, int a)
{
    return (E *)(own + (size_t)(2 * s + a) * ROWS * TC_LDH * 2);
}

/* The walked side's tile t (ROWS rows from row0 + t ROWS of a and of b, row strides lda and
 * ldb, each into its place of stage t % 2): issues and commits its copies, unless t >= nt. */
template <int ROWS, class E>
static __device__ __forceinline__ void tc_tile(unsigned char *sm, int t, int nt, int row0,
                                               const E *a, size_t lda, const E *b, size_t ldb,
                                               int T)
{
    if (t >= nt) return;
    int q = row0 + t * ROWS;
    tc_fetch<ROWS>(tc_stage<ROWS, E>(sm, t % 2, 0), a, q, T, lda);
    tc_fetch<ROWS>(tc_stage<ROWS, E>(sm, t % 2, 1), b, q, T, ldb);
    __pipeline_commit();
}

/* Tile t's turn: waits for its copies and (a block barrier) for every warp to be done with
 * tile t - 1 (and its scores, or the block's own rows), then issues tile t + 1's into the
 * stage t - 1 leaves free. */
template <int ROWS, class E>
static __device__ __forceinline__ void tc_turn(unsigned char *sm, int t, int nt, int row0,
                                               const E *a, size_t lda, const E *b, size_t ldb,
                                               int T)
{
    __pipeline_wait_prior(0);
    __syncthreads();
    tc_tile<ROWS>(sm, t + 1, nt, row0, a, lda, b, ldb, T);
}

/* Forward. qkv: the 16-bit copy of the run's (B, T, 3C) tensor; out (fp32, or E: the output's
 * home), lse at the run's first sequence. grid (query tiles, B NH). */

/* For the rows r = (b, h, i) of a run of sequences (dout and out at its first):
 * delta[r] = dO_i . out_i (fp32) over head h, and where dout is fp32 dO_i's 16-bit copy into d16
 * ((B, T, C), as dout), one warp a row, each lane two of its 64 columns; out fp32 or E (the
 * output's home); dout fp32, or E (the kernels then read it in place: no copy). The backward
 * kernels read delta once per row instead of recomputing it for every key tile. */
template <class E, class OT, class DT = float>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_delta_kernel(float *delta, E *d16, const DT *dout, const OT *out, int T, int NH, size_t rows)
{
    size_t r = (size_t)blockIdx.x * TC_WARPS + threadIdx.x / 32;
    int lane = (int)threadIdx.x % 32;
    if (r >= rows) return; /* the whole warp: no barrier follows */
    size_t i = r % (size_t)T, bh = r / (size_t)T, h = bh % (size_t)NH, b = bh / (size_t)NH;
    size_t off = (b * (size_t)T + i) * (size_t)NH * TC_HS + h * TC_HS;
    float g0 = tc_get(dout[off + lane]), g1 = tc_get(dout[off + 32 + lane]);
    if (d16) {
        d16[off + lane] = tc_round<E>(g0);
        d16[off + 32 + lane] = tc_round<E>(g1);
    }
    float d = g0 * tc_get(out[off + lane]) + g1 * tc_get(out[off + 32 + lane]);
    d = zt_warp_sum(d);
    if (lane == 0) delta[r] = d;
}

/* delta and lse log2(e) (base 2) of the ROWS queries from q0 into dl[], ls[] (0 past T);
 * delta_bh and lse_bh at (b, h) */
template <int ROWS>
static __device__ __forceinline__ void tc_rows(float *dl, float *ls, const float *delta_bh,
                                               const float *lse_bh, int q0, int T)
{
    for (int e = (int)threadIdx.x; e < ROWS; e += TC_THREADS) {
        int i = q0 + e;
        dl[e] = i < T ? delta_bh[i] : 0.0f;
        ls[e] = i < T ? lse_bh[i] * TC_LOG2E : 0.0f;
    }
}

/* The operands of the backward kernels: the run's 16-bit qkv and dO, its delta and lse; ds
 * (ZT_CUDA_ATTN_DQ=gemm, else NULL): where the dK dV kernel leaves dS^T, T x T per (b, h),
 * zeros where it writes nothing (above the diagonal), for dQ = dS K by cuBLASLt. */
template <class E> struct tc_bwd_args {
    float *dqkv;
    E *dq16; /* not NULL: the gradient written rounded there (as dqkv) instead of added */
    const E *qkv, *dout;
    const float *delta, *lse;
    E *ds;
};

#include "attn_tc_wmma.cuh"
#include "attn_tc_mma.cuh"

/* The scratch of a run of sequences: the 16-bit copies of qkv (where it has no home) and
 * (backward) dout (where not given in 16 bits), delta, and (ZT_CUDA_ATTN_DQ=gemm) dS^T; NULL
 * what the run does not hold. */
template <class E> struct tc_run {
    E *qkv, *dout, *ds;
    float *delta;
    int n; /* sequences per run */
};

enum { TC_FWD, TC_BWD, TC_BWD_DS }; /* what a run holds */
enum { TC_COPY_QKV = 1, TC_COPY_DOUT = 2 }; /* which copies it holds */

/* A sequence's bytes of a run's scratch: 0 for a forward without copies (one run of all) */
static size_t tc_seq_bytes(int T, int C, int NH, int what, int copies)
{
    size_t b = copies & TC_COPY_QKV ? (size_t)T * (3 * (size_t)C * 2) : 0;
    if (what != TC_FWD)
        b += (copies & TC_COPY_DOUT ? (size_t)T * C * 2 : 0) + (size_t)T * (size_t)NH * 4;
    if (what == TC_BWD_DS) b += (size_t)NH * T * T * 2;
    return b;
}

/* 16-byte boundaries: where the copies start, and dS^T after delta */
#define TC_SLACK 28

extern "C" size_t zt_cuda_attn_tc_floats(int nseq, int T, int C, int NH)
{
    return ((size_t)nseq * tc_seq_bytes(T, C, NH, TC_BWD, TC_COPY_QKV | TC_COPY_DOUT) + TC_SLACK +
            3) /
           4;
}

/* Carves runs of sequences out of the scratch, the copies (`copies`: TC_COPY_ bits) and dS^T at
 * 16-byte boundaries; n = 0 when not even one sequence fits, a recorded failure unless `what`
 * is TC_BWD_DS (whose caller then takes TC_BWD). Where the homes hold qkv and dO no copies are
 * made, and the runs are as long as the deltas allow (at GPT-2's shapes all of a micro batch
 * of 128 in one run, where the copies' room gave runs of 15: each run's last wave of blocks
 * part-empty). */
template <class E>
static tc_run<E> tc_run_of(zt_kctx *ctx, float *scratch, size_t scratch_floats, int B, int T, int C,
                           int NH, int what, int copies)
{
    tc_run<E> run;
    uintptr_t at = ((uintptr_t)scratch + 15) & ~(uintptr_t)15;
    size_t bytes = scratch_floats * 4, per = tc_seq_bytes(T, C, NH, what, copies);
    size_t fit = per == 0 ? (size_t)B : bytes > TC_SLACK ? (bytes - TC_SLACK) / per : 0;
    /* as few runs as fit, of even length (21, 21, 21, 1 would leave the GPU mostly idle in
     * the last; 16, 16, 16, 16 does not) */
    size_t runs = fit ? ((size_t)B + fit - 1) / fit : 0;
    run.n = runs ? (int)(((size_t)B + runs - 1) / runs) : 0;
    size_t q = copies & TC_COPY_QKV ? (size_t)run.n * T * 3 * (size_t)C : 0;
    size_t d = copies & TC_COPY_DOUT ? (size_t)run.n * T * (size_t)C : 0;
    E *p = (E *)at;
    run.qkv = q ? p : NULL;
    run.dout = d ? p + q : NULL;
    run.delta = what != TC_FWD ? (float *)(p + q + d) : NULL;
    uintptr_t ds = (uintptr_t)(p + q + d) + (size_t)run.n * NH * T * sizeof(float);
    run.ds = what == TC_BWD_DS ? (E *)((ds + 15) & ~(uintptr_t)15) : NULL;
    if (run.n < 1 && what != TC_BWD_DS)
        zt_cuda_fail(ctx, ZT_ERR_INVALID,
                     "attention: a scratch of %zu floats holds the 16-bit copies of no sequence "
                     "(%d tokens, %d heads); this is a bug in the caller (it must have "
                     "zt_attention_scratch_floats)",
                     scratch_floats, T, NH);
    return run;
}

/* The forward kernel ctx asks for, writing out as OT (fp32, or E into the output's home) */
template <class E, class OT>
static void tc_fwd_launch(zt_kctx *ctx, const char *const names[3], dim3 grid, OT *out, float *lse,
                          const E *q16, int T, int NH, float scale)
{
    if (ctx->attn_fwd_mma == ZT_ATTN_FWD_MMA4)
        ZT_CUDA_LAUNCH(ctx, names[2], (tc_fwd_mma4_kernel<E, OT>), grid, TC_THREADS, out, lse, q16,
                       T, NH, scale);
    else if (ctx->attn_fwd_mma)
        ZT_CUDA_LAUNCH(ctx, names[1], (tc_fwd_mma_kernel<E, OT>), grid, TC_THREADS, out, lse, q16,
                       T, NH, scale);
    else
        ZT_CUDA_LAUNCH(ctx, names[0], (tc_fwd_kernel<E, OT>), grid, TC_THREADS, out, lse, q16, T,
                       NH, scale);
}

/* home, out16: where qkv's and out's 16-bit homes take the run's copy of qkv and its output
 * (NULL: the scratch, and out in fp32); qkv NULL: the home holds qkv already */
template <class E>
static void tc_forward(zt_kctx *ctx, const char *const names[3], float *out, float *lse,
                       float *scratch, size_t scratch_floats, const float *qkv, E *home, E *out16,
                       int B, int T, int C, int NH)
{
    float scale = 1.0f / sqrtf((float)(C / NH));
    if (ctx->attn_cudnn && home && out16) { /* cuDNN's, on the homes (the default) */
        if (qkv)
            zt_cuda_stage_cast(ctx, (uint16_t *)home, ctx->mm, qkv, B * T, 3 * C, 3 * (size_t)C);
        if (zt_cuda_dnn_forward(ctx, (uint16_t *)out16, lse, (const uint16_t *)home, B, T, C, NH,
                                scratch, scratch_floats * sizeof(float)))
            return;
        qkv = NULL; /* in its home now */
    }
    tc_run<E> run =
        tc_run_of<E>(ctx, scratch, scratch_floats, B, T, C, NH, TC_FWD, home ? 0 : TC_COPY_QKV);
    for (int b0 = 0; run.n > 0 && b0 < B; b0 += run.n) {
        int nb = B - b0 < run.n ? B - b0 : run.n;
        size_t tok = (size_t)b0 * T;
        E *q16 = home ? home + tok * 3 * C : run.qkv; /* the run's 16-bit qkv */
        if (qkv)                                      /* else in its home already */
            zt_cuda_stage_cast(ctx, (uint16_t *)q16, ctx->mm, qkv + tok * 3 * C, nb * T, 3 * C,
                               3 * (size_t)C);
        dim3 grid((unsigned)((T + TC_BR - 1) / TC_BR), (unsigned)(nb * NH));
        float *lr = lse + (size_t)b0 * NH * T;
        if (out16)
            tc_fwd_launch<E, E>(ctx, names, grid, out16 + tok * C, lr, q16, T, NH, scale);
        else
            tc_fwd_launch<E, float>(ctx, names, grid, out + tok * C, lr, q16, T, NH, scale);
    }
}

extern "C" void zt_cuda_attn_tc_forward(zt_kctx *ctx, float *out, float *lse, float *scratch,
                                        size_t scratch_floats, const float *qkv, uint16_t *home,
                                        uint16_t *out16, int B, int T, int C, int NH)
{
    static const char *const fp16[3] = {"attention_forward (fused, fp16 tensor cores)",
                                        "attention_forward (fused, fp16 mma.sync)",
                                        "attention_forward (fused, fp16 mma.sync, 4 blocks an SM)"};
    static const char *const bf16[3] = {"attention_forward (fused, bf16 tensor cores)",
                                        "attention_forward (fused, bf16 mma.sync)",
                                        "attention_forward (fused, bf16 mma.sync, 4 blocks an SM)"};
    if (ctx->mm == ZT_MM_FP16)
        tc_forward<__half>(ctx, fp16, out, lse, scratch, scratch_floats, qkv, (__half *)home,
                           (__half *)out16, B, T, C, NH);
    else
        tc_forward<__nv_bfloat16>(ctx, bf16, out, lse, scratch, scratch_floats, qkv,
                                  (__nv_bfloat16 *)home, (__nv_bfloat16 *)out16, B, T, C, NH);
}

/* dQ += dS K for the run's sequences from cuBLASLt (ZT_CUDA_ATTN_DQ=gemm), a strided batch
 * over the heads of each sequence: dS^T (keys x queries) from run.ds, K from the run's 16-bit
 * qkv (q16). false (nothing queued) where cuBLASLt has no algorithm for it. */
template <class E>
static bool tc_dq_gemm(zt_kctx *ctx, const tc_run<E> &run, const E *q16, float *dqkv, int nb, int T,
                       int C, int NH)
{
    for (int b = 0; b < nb; b++) {
        zt_cuda_gemm g;
        memset(&g, 0, sizeof(g));
        g.ta = 'T', g.tb = 'N', g.M = T, g.N = TC_HS, g.K = T, g.alpha = 1.0f, g.beta = 1.0f;
        g.A = run.ds + (size_t)b * NH * T * T, g.lda = T, g.sA = (long long)T * T;
        g.B = q16 + (size_t)b * T * 3 * C + C, g.ldb = 3 * C, g.sB = TC_HS;
        g.C = dqkv + (size_t)b * T * 3 * C, g.ldc = 3 * C, g.sC = TC_HS;
        g.batch = NH, g.in16 = ctx->mm;
        if (!zt_cuda_gemm16_run(ctx, &g)) return false;
    }
    return true;
}

/* dq16 (NULL: none): the gradient written rounded there, dQ by its kernel (it comes with dQ by
 * GEMM or atomics only for cuDNN: where cuDNN does not take it, by its kernel all the same);
 * dout16 (NULL: none): dO in 16 bits, read in place (else rounded from dout into the run's
 * copy) */
template <class E>
static void tc_backward(zt_kctx *ctx, const char *const names[7], float *dqkv, E *dq16,
                        float *scratch, size_t scratch_floats, const float *dout, const E *dout16,
                        const float *qkv, const E *home, const float *out, const E *out16,
                        const float *lse, int B, int T, int C, int NH)
{
    float scale = 1.0f / sqrtf((float)(C / NH));
    tc_run<E> run;
    /* dQ by cuBLASLt where asked and a sequence's dS^T fits (else by the kernel, which needs
     * less) */
    bool gemm = ctx->attn_dq == ZT_ATTN_DQ_GEMM, atomic = ctx->attn_dq == ZT_ATTN_DQ_ATOMIC;
    if (ctx->attn_cudnn && home && out16 && dout16 && dq16) {
        /* cuDNN's, on the homes (the default). Its workspaces (the scores' gradients,
         * 25 MB a sequence at GPT-2's shapes, or with ZT_CUDA_ATTN_DQ=atomic dQ's fp32 sum, 3 MB)
         * go in the fp32 gradient where it is larger than the scratch, room where the 16-bit
         * one is written (B T 3C floats, 9.4 MB a sequence) */
        size_t room = (size_t)B * T * 3 * (size_t)C;
        bool big = dqkv && room > scratch_floats;
        if (zt_cuda_dnn_backward(ctx, (uint16_t *)dq16, (const uint16_t *)dout16,
                                 (const uint16_t *)home, (const uint16_t *)out16, lse, B, T, C, NH,
                                 big ? (void *)dqkv : (void *)scratch,
                                 (big ? room : scratch_floats) * sizeof(float)))
            return;
    }
    /* a 16-bit gradient with dQ by GEMM or atomics was offered to cuDNN only
     * (attention_backward16), which did not take it (and said why): the kernels write it with
     * dQ by its own kernel, as by default */
    if (dq16) gemm = atomic = false;
    int copies = (home ? 0 : TC_COPY_QKV) | (dout16 ? 0 : TC_COPY_DOUT);
    if (gemm) run = tc_run_of<E>(ctx, scratch, scratch_floats, B, T, C, NH, TC_BWD_DS, copies);
    if (!gemm || run.n < 1)
        run = tc_run_of<E>(ctx, scratch, scratch_floats, B, T, C, NH, TC_BWD, copies);
    for (int b0 = 0; run.n > 0 && b0 < B; b0 += run.n) {
        int nb = B - b0 < run.n ? B - b0 : run.n;
        size_t rows = (size_t)nb * NH * T, tok = (size_t)b0 * T;
        const E *q16 = home ? home + tok * 3 * C : run.qkv; /* the run's 16-bit qkv */
        if (!home)
            zt_cuda_stage_cast(ctx, (uint16_t *)run.qkv, ctx->mm, qkv + tok * 3 * C, nb * T, 3 * C,
                               3 * (size_t)C);
        unsigned dgrid = (unsigned)((rows + TC_WARPS - 1) / TC_WARPS);
        const E *d16 = dout16 ? dout16 + tok * C : run.dout; /* the run's 16-bit dO */
        if (dout16 && out16)
            ZT_CUDA_LAUNCH(ctx, names[0], (tc_delta_kernel<E, E, E>), dgrid, TC_THREADS, run.delta,
                           (E *)NULL, d16, out16 + tok * C, T, NH, rows);
        else if (dout16)
            ZT_CUDA_LAUNCH(ctx, names[0], (tc_delta_kernel<E, float, E>), dgrid, TC_THREADS,
                           run.delta, (E *)NULL, d16, out + tok * C, T, NH, rows);
        else if (out16)
            ZT_CUDA_LAUNCH(ctx, names[0], (tc_delta_kernel<E, E>), dgrid, TC_THREADS, run.delta,
                           run.dout, dout + tok * C, out16 + tok * C, T, NH, rows);
        else
            ZT_CUDA_LAUNCH(ctx, names[0], (tc_delta_kernel<E, float>), dgrid, TC_THREADS, run.delta,
                           run.dout, dout + tok * C, out + tok * C, T, NH, rows);
        tc_bwd_args<E> a;
        a.dqkv = dqkv + tok * 3 * C;
        a.dq16 = dq16 ? dq16 + tok * 3 * C : NULL;
        a.qkv = q16;
        a.dout = d16;
        a.delta = run.delta;
        a.lse = lse + (size_t)b0 * NH * T;
        a.ds = run.ds;
        if (a.ds)
            zt_cuda_check(
                ctx, cudaMemsetAsync(a.ds, 0, (size_t)nb * NH * T * T * sizeof(E), ctx->stream),
                "clearing the attention's dS");
        dim3 grid((unsigned)((T + TC_BR - 1) / TC_BR), (unsigned)(nb * NH));
        if (atomic)
            ZT_CUDA_LAUNCH(ctx, names[5], (tc_bwd_mma_kv_kernel<E, true, 2>), grid, TC_THREADS, a,
                           T, NH, scale);
        else if (ctx->attn_bwd_mma == ZT_ATTN_BWD_MMA2 && a.dq16)
            ZT_CUDA_LAUNCH(ctx, names[6], (tc_bwd_mma_kv_kernel<E, false, 2, true>), grid,
                           TC_THREADS, a, T, NH, scale);
        else if (ctx->attn_bwd_mma == ZT_ATTN_BWD_MMA2)
            ZT_CUDA_LAUNCH(ctx, names[6], (tc_bwd_mma_kv_kernel<E, false, 2>), grid, TC_THREADS, a,
                           T, NH, scale);
        else if (ctx->attn_bwd_mma && a.dq16)
            ZT_CUDA_LAUNCH(ctx, names[3], (tc_bwd_mma_kv_kernel<E, false, 3, true>), grid,
                           TC_THREADS, a, T, NH, scale);
        else if (ctx->attn_bwd_mma)
            ZT_CUDA_LAUNCH(ctx, names[3], (tc_bwd_mma_kv_kernel<E, false>), grid, TC_THREADS, a, T,
                           NH, scale);
        else
            ZT_CUDA_LAUNCH(ctx, names[1], tc_bwd_kv_kernel<E>, grid, TC_THREADS, a, T, NH, scale);
        if (atomic || (a.ds && tc_dq_gemm(ctx, run, q16, a.dqkv, nb, T, C, NH))) continue;
        if (ctx->attn_bwd_mma && a.dq16)
            ZT_CUDA_LAUNCH(ctx, names[4], (tc_bwd_mma_q_kernel<E, true>), grid, TC_THREADS, a, T,
                           NH, scale);
        else if (ctx->attn_bwd_mma)
            ZT_CUDA_LAUNCH(ctx, names[4], tc_bwd_mma_q_kernel<E>, grid, TC_THREADS, a, T, NH,
                           scale);
        else
            ZT_CUDA_LAUNCH(ctx, names[2], tc_bwd_q_kernel<E>, grid, TC_THREADS, a, T, NH, scale);
    }
}

extern "C" void zt_cuda_attn_tc_backward(zt_kctx *ctx, float *dqkv, uint16_t *dq16, float *scratch,
                                         size_t scratch_floats, const float *dout,
                                         const uint16_t *dout16, const float *qkv,
                                         const uint16_t *home, const float *out,
                                         const uint16_t *out16, const float *lse, int B, int T,
                                         int C, int NH)
{
    static const char *const fp16[7] = {
        "attention_backward (delta, fp16 dO)",
        "attention_backward (fused dK dV, fp16 tensor cores)",
        "attention_backward (fused dQ, fp16 tensor cores)",
        "attention_backward (fused dK dV, fp16 mma.sync)",
        "attention_backward (fused dQ, fp16 mma.sync)",
        "attention_backward (fused dK dV dQ, fp16 mma.sync)",
        "attention_backward (fused dK dV, fp16 mma.sync, 2 blocks an SM)"};
    static const char *const bf16[7] = {
        "attention_backward (delta, bf16 dO)",
        "attention_backward (fused dK dV, bf16 tensor cores)",
        "attention_backward (fused dQ, bf16 tensor cores)",
        "attention_backward (fused dK dV, bf16 mma.sync)",
        "attention_backward (fused dQ, bf16 mma.sync)",
        "attention_backward (fused dK dV dQ, bf16 mma.sync)",
        "attention_backward (fused dK dV, bf16 mma.sync, 2 blocks an SM)"};
    if (ctx->mm == ZT_MM_FP16)
        tc_backward<__half>(ctx, fp16, dqkv, (__half *)dq16, scratch, scratch_floats, dout,
                            (const __half *)dout16, qkv, (const __half *)home, out,
                            (const __half *)out16, lse, B, T, C, NH);
    else
        tc_backward<__nv_bfloat16>(ctx, bf16, dqkv, (__nv_bfloat16 *)dq16, scratch, scratch_floats,
                                   dout, (const __nv_bfloat16 *)dout16, qkv,
                                   (const __nv_bfloat16 *)home, out, (const __nv_bfloat16 *)out16,
                                   lse, B, T, C, NH);
}
