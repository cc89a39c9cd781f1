/* zerotrain: the fused causal attention of ZT_CUDA_ATTN=fused on tensor cores, for jobs whose
 * matmuls take 16-bit inputs (zt_cuda_mm bf16 or fp16): attn_cuda.cu's algorithm (online
 * softmax forward; backward without atomics, one kernel for dK and dV and one for dQ, both
 * recomputing P = exp(s - lse) and dS = P (dO.V - delta) scale, delta = dO.out computed once
 * per query row by a kernel before them) with every product on 16-bit tensor cores through the
 * warp matrix functions (mma.h, 16 x 16 x 16, fp32 accumulators), as FlashAttention does under
 * bf16 and fp16: Q, K, V and dO are rounded to the context's 16-bit type (E: bf16, or fp16 for
 * fp16 contexts), once, into the attention's scratch (for runs of as many sequences as it
 * holds) before the kernels, P and dS as they are written for their products; the softmax, the
 * running sums, delta and lse stay fp32, and so do the results in memory where the caller has
 * no 16-bit home for them (the output's; the gradient of attention_backward16). Head size 64.
 *
 * A block is 4 warps and owns 64 rows (queries, or keys for dK/dV), 16 per warp, whose own
 * operands (Q; K and V; Q and dO) each warp keeps in matrix fragments, and walks the other side
 * in tiles of 32 rows brought into shared memory by asynchronous copies (cp.async), two tiles
 * in flight: the next tile lands while the warps work on this one. A warp's 16 x 32 scores go
 * through its own part of shared memory (fragments keep no known element order), where two
 * lanes per row run the softmax (in base 2: exp2 of the scores times scale log2(e)), each on
 * every other column, and write the 16-bit P or dS over the scores' own rows. The
 * forward keeps each warp's 16 x 64 output in accumulator fragments, rescaled there by the
 * running maximum; the backward keeps its gradients in accumulator fragments too and adds them
 * to dqkv once, through shared memory (so rows past T are never touched). With
 * ZT_CUDA_ATTN_DQ=gemm the dK dV kernel also writes dS^T (16-bit) into the scratch and dQ comes
 * from cuBLASLt (dQ += dS K per sequence) instead of the dQ kernel, which recomputes the scores
 * and dP; where a sequence's dS does not fit (short sequences) or cuBLASLt has no algorithm,
 * the dQ kernel runs.
 *
 * By default (ZT_CUDA_ATTN_FWD and ZT_CUDA_ATTN_BWD unset or "mma") the same algorithm runs as
 * mma.sync kernels instead (below, "the forward on mma.sync"): FlashAttention-2's layout, the
 * scores, the softmax, P and dS in registers, tiles of 64 rows read by ldmatrix; on an H100
 * 0.153 and 0.498 ms per layer of GPT-2 124M at micro batch 8 against the wmma kernels' 0.251
 * and 0.870 (=wmma selects those). */
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
template <class E, class OT>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_fwd_kernel(OT *out, float *lse, const E *qkv, int T, int NH, float scale)
{
    __shared__ __align__(32) unsigned char sm[TC_SMEM];
    tc_pos p = tc_pos_of(T, NH, true);
    const E *base = qkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    float *S = (float *)(sm + TC_OWN) + p.warp * 16 * TC_LDS;
    E *P = (E *)S; /* over the scores, row stride TC_LDP */
    float *al = (float *)(sm + TC_OWN + 2 * TC_SCORES) + p.warp * 16; /* row factors */
    int qw = p.row0 + 16 * p.warp, r = p.lane / 2, half = p.lane % 2, i = qw + r;
    int c0 = half * (TC_HS / 2); /* this lane's output columns */
    float sl2 = scale * TC_LOG2E;
    int kend = min(T, p.row0 + TC_BR);           /* keys the block's last query sees */
    int nk = (kend + TC_BC - 1) / TC_BC;

    tc_fetch<TC_BR>((E *)sm, base, p.row0, T, p.C3);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    tc_frag_a<E> qf[TC_HS / 16];
    tc_frags(qf, (const E *)sm + 16 * p.warp * TC_LDH);
    /* the outputs stay in accumulator fragments; to rescale their rows, each element's row is
     * read off a fragment loaded from a matrix of row numbers (whatever the fragments' element
     * order, it is the same for every accumulator fragment), the factors from al[] */
    for (int c = half * 8; c < half * 8 + 8; c++) /* a 16 x 16 matrix of row numbers */
        S[r * TC_LDS + c] = (float)r;
    __syncwarp();
    tc_frag_c rowf, acc[TC_HS / 16];
    wmma::load_matrix_sync(rowf, S, TC_LDS, wmma::mem_row_major);
    for (int n = 0; n < TC_HS / 16; n++)
        wmma::fill_fragment(acc[n], 0.0f);
    __syncthreads(); /* Q is in fragments: its place takes the tiles (K and V) */
    tc_tile<TC_BC>(sm, 0, nk, 0, base + p.C, p.C3, base + 2 * p.C, p.C3, T);
    float m = -INFINITY, l = 0.0f; /* the row's running maximum (base 2) and sum */
    for (int t = 0; t < nk; t++) {
        int k0 = t * TC_BC;
        tc_turn<TC_BC>(sm, t, nk, 0, base + p.C, p.C3, base + 2 * p.C, p.C3, T);
        if (k0 > qw + 15) continue; /* the warp's queries see none of these keys */
        const E *Ks = tc_stage<TC_BC, E>(sm, t % 2, 0), *Vs = tc_stage<TC_BC, E>(sm, t % 2, 1);
        tc_abt<TC_BC / 16>(S, TC_LDS, qf, Ks);
        __syncwarp();
        float s[16], mx = -INFINITY; /* scores in base 2: scale log2(e) q.k */
        for (int u = 0; u < 16; u++) {
            int c = tc_col(u, half), j = k0 + c;
            s[u] = i < T && j <= i ? sl2 * S[r * TC_LDS + c] : -INFINITY;
            mx = fmaxf(mx, s[u]);
        }
        float mnew = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
        /* a row with no key yet (or past T) keeps m = -inf and adds nothing */
        float mref = mnew == -INFINITY ? 0.0f : mnew;
        float alpha = zt_exp2_ftz(m - mref), ps = 0.0f;
        __syncwarp(); /* the scores are read before P overwrites them */
        for (int u = 0; u < 16; u++) {
            float e = zt_exp2_ftz(s[u] - mref);
            ps += e;
            P[r * TC_LDP + tc_col(u, half)] = tc_round<E>(e);
        }
        l = l * alpha + ps + __shfl_xor_sync(0xffffffffu, ps, 1);
        m = mnew;
        if (half == 0) al[r] = alpha;
        __syncwarp();
        float fac[rowf.num_elements]; /* the factor of each element's row */
        for (int e = 0; e < rowf.num_elements; e++)
            fac[e] = al[(int)rowf.x[e]];
        for (int n = 0; n < TC_HS / 16; n++)
            for (int e = 0; e < acc[n].num_elements; e++)
                acc[n].x[e] *= fac[e];
        tc_ab_acc<TC_HS / 16, TC_BC / 16>(acc, P, Vs);
    }
    __syncthreads(); /* every tile is used up: their place takes the outputs */
    float *O = (float *)sm + p.warp * 16 * TC_LDO;
    for (int n = 0; n < TC_HS / 16; n++)
        wmma::store_matrix_sync(O + n * 16, acc[n], TC_LDO, wmma::mem_row_major);
    __syncwarp();
    if (i >= T) return;
    OT *o = out + ((size_t)p.b * T + i) * p.C + (size_t)p.h * TC_HS;
    for (int c = c0; c < c0 + TC_HS / 2; c++)
        tc_put(o + c, O[r * TC_LDO + c] / l);
    if (half == 0) lse[(size_t)p.bh * T + i] = (m + log2f(l)) * TC_LN2;
}

/* ---- the forward on mma.sync (ZT_CUDA_ATTN_FWD=mma) ----
 * FlashAttention-2's layout: the m16n8k16 matrix instruction, whose fragment layouts the PTX
 * ISA fixes, so a warp's scores stay in registers: its 16 x 64 scores come out of the
 * instruction in accumulator layout, which packed two to a register is the next product's A
 * operand, so the masking, the softmax and the rescaling of the outputs run on registers and
 * P goes into P V without a trip through shared memory. Tiles of 64 keys (K and V, two stages
 * of cp.async as above); operands come out of shared memory by ldmatrix (V transposed on the
 * way). Same arithmetic as the wmma kernel but for the order of the products' sums. */

#define TC_MK 64           /* keys of a tile */
#define TC_MN (TC_MK / 8)  /* n8 accumulators across a tile's keys, or across the head */
#define TC_MS (TC_HS / 16) /* k16 steps over the head */
static_assert(TC_MK == TC_BR && TC_HS / 8 == TC_MN, "tiles as tall as a block's rows");

/* d (16 x 8, fp32) += a (16 x 16) b (16 x 8) on the tensor cores, collective over the warp.
 * Fragment layouts (g = lane / 4, t = lane % 4; two 16-bit elements per register, the one of
 * lower column or k in the low half): a[0] = A(g, 2t..), a[1] = A(g+8, 2t..),
 * a[2] = A(g, 2t+8..), a[3] = A(g+8, 2t+8..); b0 = B(2t.., g), b1 = B(2t+8.., g);
 * d[0..1] = D(g, 2t..), d[2..3] = D(g+8, 2t..). So two n8 accumulators side by side, packed,
 * are an A fragment. */
template <class E>
static __device__ __forceinline__ void tc_mma(float d[4], const uint32_t a[4], uint32_t b0,
                                              uint32_t b1);
#ifdef ZT_CUDA_EMU
template <class E>
static __device__ __forceinline__ void tc_mma(float d[4], const uint32_t a[4], uint32_t b0,
                                              uint32_t b1)
{
    zt_emu_mma16816<E>(d, a, b0, b1);
}
#else
template <>
__device__ __forceinline__ void tc_mma<__nv_bfloat16>(float d[4], const uint32_t a[4], uint32_t b0,
                                                      uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void tc_mma<__half>(float d[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

/* Four 8 x 8 16-bit matrices from shared memory, collective over the warp: lanes 8j..8j+7
 * give the addresses of matrix j's rows (16-byte aligned); r[j] gets the lane's two elements
 * of matrix j, (l / 4, 2 (l % 4)..) as an A fragment's register holds them, or with TRANS of
 * its transpose, (2 (l % 4).., l / 4), as a B fragment's does from a row-major k x n tile. */
template <bool TRANS> static __device__ __forceinline__ void tc_ldsm4(uint32_t r[4], const void *p)
{
#ifdef ZT_CUDA_EMU
    zt_emu_ldmatrix_x4(r, p, TRANS);
#else
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
#endif
}

/* lo and hi rounded to E and packed as the instruction takes them: lo in the low half */
template <class E> static __device__ __forceinline__ uint32_t tc_pack(float lo, float hi)
{
    E a = tc_round<E>(lo), b = tc_round<E>(hi);
    unsigned short ua, ub;
    memcpy(&ua, &a, sizeof(ua));
    memcpy(&ub, &b, sizeof(ub));
    return (uint32_t)ua | (uint32_t)ub << 16;
}

/* The lane's place in the ldmatrix x4 loads of the mma kernels: lr, lc the row and column (of
 * a 16 x 16 block) whose address it gives for an A fragment, or for the B fragments of two n8
 * tiles from a k x n tile (TRANS); lrk, lck those for the B fragments of two n8 tiles from an
 * n x k tile (the rows of the product's right-hand side transposed, as K for Q K^T). */
struct tc_lm {
    int lr, lc, lrk, lck;
};

static __device__ __forceinline__ tc_lm tc_lm_of(int lane)
{
    tc_lm m;
    m.lr = lane % 8 + 8 * ((lane / 8) % 2);
    m.lc = 8 * (lane / 16);
    m.lrk = lane % 8 + 8 * (lane / 16);
    m.lck = 8 * ((lane / 8) % 2);
    return m;
}

/* The A fragments of a warp's 16 rows of TC_HS in shared memory (row stride TC_LDH), k16 step
 * by step. */
template <class E>
static __device__ __forceinline__ void tc_mma_frags(uint32_t a[TC_MS][4], const E *rows, tc_lm m)
{
    ZT_UNROLL
    for (int kk = 0; kk < TC_MS; kk++)
        tc_ldsm4<false>(a[kk], rows + m.lr * TC_LDH + 16 * kk + m.lc);
}

/* A warp's scores in accumulator layout (NB n8 accumulators: the lane's own elements, its rows
 * from row, its columns from col) set to -inf where the column's key comes after the row's
 * query. */
template <int NB>
static __device__ __forceinline__ void tc_mma_mask(float (&s)[NB][4], int row, int col)
{
    ZT_UNROLL
    for (int n = 0; n < NB; n++) {
        ZT_UNROLL
        for (int e = 0; e < 4; e++)
            if (col + 8 * n + e % 2 > row + 8 * (e / 2)) s[n][e] = -INFINITY;
    }
}

/* acc (16 x 8 NB: NB n8 accumulators, TC_MN for a whole tile of 64) = a x^T: a a warp's 16 rows
 * as A fragments, x 8 NB rows of TC_HS in shared memory (row stride TC_LDH); column n of the
 * product is row n of x. */
template <class E, int NB>
static __device__ __forceinline__ void tc_mma_abt(float (&acc)[NB][4], const uint32_t a[TC_MS][4],
                                                  const E *x, tc_lm m)
{
    ZT_UNROLL
    for (int n = 0; n < NB; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    ZT_UNROLL
    for (int kk = 0; kk < TC_MS; kk++) {
        ZT_UNROLL
        for (int n = 0; n < NB; n += 2) { /* rows 8n.. and 8n + 8.. of x */
            uint32_t b[4];
            tc_ldsm4<false>(b, x + (8 * n + m.lrk) * TC_LDH + 16 * kk + m.lck);
            tc_mma<E>(acc[n], a[kk], b[0], b[1]);
            tc_mma<E>(acc[n + 1], a[kk], b[2], b[3]);
        }
    }
}

/* acc (16 x TC_HS) += a x[16 kk.., :]: a the A fragment of a warp's 16 x 16 block kk (of 64
 * columns), x 64 rows of TC_HS in shared memory (row stride TC_LDH), read transposed. */
template <class E>
static __device__ __forceinline__ void tc_mma_kstep(float acc[TC_MN][4], const uint32_t a[4],
                                                    int kk, const E *x, tc_lm m)
{
    ZT_UNROLL
    for (int n = 0; n < TC_MN; n += 2) { /* columns 8n.. and 8n + 8.. */
        uint32_t b[4];
        tc_ldsm4<true>(b, x + (16 * kk + m.lr) * TC_LDH + 8 * n + m.lc);
        tc_mma<E>(acc[n], a, b[0], b[1]);
        tc_mma<E>(acc[n + 1], a, b[2], b[3]);
    }
}

/* acc (16 x TC_HS) += p x: p a warp's 16 x 64 in accumulator layout (P or dS, rounded to E
 * here), x 64 rows of TC_HS in shared memory (row stride TC_LDH), read transposed. */
template <class E>
static __device__ __forceinline__ void tc_mma_pv(float acc[TC_MN][4], const float p[TC_MN][4],
                                                 const E *x, tc_lm m)
{
    ZT_UNROLL
    for (int kk = 0; kk < TC_MK / 16; kk++) { /* rows 16 kk.. of x */
        uint32_t a[4] = {tc_pack<E>(p[2 * kk][0], p[2 * kk][1]),
                         tc_pack<E>(p[2 * kk][2], p[2 * kk][3]),
                         tc_pack<E>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                         tc_pack<E>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
        tc_mma_kstep<E>(acc, a, kk, x, m);
    }
}

/* dst rows row0 + g and row0 + g + 8 (from element off, row stride ld) += a warp's 16 x TC_HS
 * accumulators, the lane's own elements, or with D16 dst16's = them rounded (as tc_add_out);
 * rows at or past T are left alone. */
template <class E, bool D16>
static __device__ __forceinline__ void tc_mma_add_out(float *dst, E *dst16, size_t off, size_t ld,
                                                      int row0, int T, const float acc[TC_MN][4],
                                                      int lane)
{
    int g = lane / 4, t4 = lane % 4;
    ZT_UNROLL
    for (int h = 0; h < 2; h++) {
        int i = row0 + g + 8 * h;
        if (i >= T) continue;
        size_t at = off + (size_t)i * ld + 2 * t4;
        if (D16) {
            uint32_t *o = (uint32_t *)(dst16 + at); /* two columns a store: at is even */
            ZT_UNROLL
            for (int n = 0; n < TC_MN; n++)
                o[4 * n] = tc_pack<E>(acc[n][2 * h], acc[n][2 * h + 1]);
            continue;
        }
        float *o = dst + at;
        ZT_UNROLL
        for (int n = 0; n < TC_MN; n++) {
            o[8 * n] += acc[n][2 * h];
            o[8 * n + 1] += acc[n][2 * h + 1];
        }
    }
}

/* The mma forward's shared memory: four places of TC_BR head vectors (K and V of stage 0,
 * K and V of stage 1); Q first lands in stage 1's K place. */
#define TC_MSMEM (4 * TC_HEAD)
static_assert(TC_MSMEM <= 48 * 1024, "static shared memory");

/* The block's own rows (TC_BR from row0 of a into adst, and of b unless NULL into stage 1's
 * second place; row strides lda, ldb), tile 0 of the walked side (from trow0 of ta and tb)
 * into stage 0's places, then waits for the own rows only (and a block barrier). */
template <class E>
static __device__ __forceinline__ void
tc_mstart_at(unsigned char *sm, E *adst, int row0, const E *a, size_t lda, const E *b, size_t ldb,
             int nt, int trow0, const E *ta, const E *tb, size_t tlda, size_t tldb, int T)
{
    tc_fetch<TC_BR>(adst, a, row0, T, lda);
    if (b) tc_fetch<TC_BR>((E *)(sm + 3 * TC_HEAD), b, row0, T, ldb);
    __pipeline_commit();
    tc_tile<TC_MK>(sm, 0, nt, trow0, ta, tlda, tb, tldb, T);
    if (nt > 0)
        __pipeline_wait_prior(1); /* the own rows are in; tile 0 may still be on its way */
    else
        __pipeline_wait_prior(0);
    __syncthreads();
}

/* tc_mstart_at with a's rows into stage 1's first place */
template <class E>
static __device__ __forceinline__ void
tc_mstart(unsigned char *sm, int row0, const E *a, size_t lda, const E *b, size_t ldb, int nt,
          int trow0, const E *ta, const E *tb, size_t tlda, size_t tldb, int T)
{
    tc_mstart_at<E>(sm, (E *)(sm + 2 * TC_HEAD), row0, a, lda, b, ldb, nt, trow0, ta, tb, tlda,
                    tldb, T);
}

/* Forward on mma.sync. qkv: the 16-bit copy of the run's (B, T, 3C) tensor; out (fp32, or E:
 * the output's home), lse at the run's first sequence. grid (query tiles, B NH). The kernel
 * takes 135 registers on sm_90 (3 blocks an SM); its mma4 twin (ZT_CUDA_ATTN_FWD=mma4) is held
 * to 128 for 4 blocks. */
template <class E, class OT>
static __device__ __forceinline__ void tc_fwd_mma(OT *out, float *lse, const E *qkv, int T, int NH,
                                                  float scale)
{
    __shared__ __align__(128) unsigned char sm[TC_MSMEM];
    tc_pos p = tc_pos_of(T, NH, true);
    const E *base = qkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    const E *kg = base + p.C, *vg = base + 2 * p.C;
    int qw = p.row0 + 16 * p.warp, g = p.lane / 4, t4 = p.lane % 4;
    tc_lm lm = tc_lm_of(p.lane);
    float sl2 = scale * TC_LOG2E;
    int kend = min(T, p.row0 + TC_BR); /* keys the block's last query sees */
    int nk = (kend + TC_MK - 1) / TC_MK;

    tc_mstart<E>(sm, p.row0, base, p.C3, (const E *)NULL, 0, nk, 0, kg, vg, p.C3, p.C3, T);
    uint32_t aq[TC_MS][4]; /* the warp's 16 queries as A fragments */
    tc_mma_frags(aq, (const E *)(sm + 2 * TC_HEAD) + 16 * p.warp * TC_LDH, lm);
    float o[TC_MN][4]; /* the warp's 16 x 64 outputs */
    ZT_UNROLL
    for (int n = 0; n < TC_MN; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    /* per row (g, g + 8): running maximum of the raw scores, and this lane's part of the sum
     * in two (its even and its odd columns: two chains of additions instead of one) */
    float m[2] = {-INFINITY, -INFINITY}, l[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    for (int t = 0; t < nk; t++) {
        int k0 = t * TC_MK;
        tc_turn<TC_MK>(sm, t, nk, 0, kg, p.C3, vg, p.C3, T);
        if (k0 > qw + 15) continue; /* the warp's queries see none of these keys */
        const E *Ks = tc_stage<TC_MK, E>(sm, t % 2, 0), *Vs = tc_stage<TC_MK, E>(sm, t % 2, 1);
        float s[TC_MN][4];
        tc_mma_abt<E>(s, aq, Ks, lm);
        /* some key past some query of the warp (the diagonal's tile): those scores -inf; rows
         * past T see keys past T (zeros): finite, and never written */
        if (k0 + TC_MK - 1 > qw) tc_mma_mask<TC_MN>(s, qw + g, k0 + 2 * t4);
        float mx[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
        ZT_UNROLL
        for (int n = 0; n < TC_MN; n++) {
            ZT_UNROLL
            for (int e = 0; e < 4; e++)
                mx[e / 2][e % 2] = fmaxf(mx[e / 2][e % 2], s[n][e]);
        }
        /* the softmax in base 2 as FlashAttention-2 forms it: the maximum of the raw scores (a
         * positive scale keeps their order), then exp2(s scale log2(e) - m scale log2(e)), one
         * fused multiply-add an element */
        float alpha[2], ms[2];
        ZT_UNROLL
        for (int h = 0; h < 2; h++) {
            float mh = fmaxf(mx[h][0], mx[h][1]);
            mh = fmaxf(mh, __shfl_xor_sync(0xffffffffu, mh, 1));
            mh = fmaxf(mh, __shfl_xor_sync(0xffffffffu, mh, 2));
            /* key k0 <= every row's query once seen: the tile of key 0 comes first, so m is
             * finite from it on (alpha of the first tile is exp2(-inf) = 0) */
            float mnew = fmaxf(m[h], mh);
            alpha[h] = zt_exp2_ftz((m[h] - mnew) * sl2);
            m[h] = mnew;
            ms[h] = mnew * sl2;
            l[h][0] *= alpha[h];
            l[h][1] *= alpha[h];
        }
        ZT_UNROLL
        for (int n = 0; n < TC_MN; n++) {
            ZT_UNROLL
            for (int e = 0; e < 4; e++) {
                s[n][e] = zt_exp2_ftz(fmaf(s[n][e], sl2, -ms[e / 2]));
                l[e / 2][e % 2] += s[n][e];
                o[n][e] *= alpha[e / 2];
            }
        }
        tc_mma_pv<E>(o, s, Vs, lm);
    }
    ZT_UNROLL
    for (int h = 0; h < 2; h++) {
        float lh = l[h][0] + l[h][1];
        lh += __shfl_xor_sync(0xffffffffu, lh, 1);
        lh += __shfl_xor_sync(0xffffffffu, lh, 2);
        int i = qw + g + 8 * h;
        if (i >= T) continue;
        OT *orow = out + ((size_t)p.b * T + i) * p.C + (size_t)p.h * TC_HS + 2 * t4;
        float inv = 1.0f / lh; /* one division a row, not one an element */
        ZT_UNROLL
        for (int n = 0; n < TC_MN; n++) {
            tc_put(orow + 8 * n, o[n][2 * h] * inv);
            tc_put(orow + 8 * n + 1, o[n][2 * h + 1] * inv);
        }
        if (t4 == 0) lse[(size_t)p.bh * T + i] = (m[h] * sl2 + log2f(lh)) * TC_LN2;
    }
}

template <class E, class OT>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_fwd_mma_kernel(OT *out, float *lse, const E *qkv, int T, int NH, float scale)
{
    tc_fwd_mma<E, OT>(out, lse, qkv, T, NH, scale);
}

template <class E, class OT>
static __global__ void __launch_bounds__(TC_THREADS, 4)
    tc_fwd_mma4_kernel(OT *out, float *lse, const E *qkv, int T, int NH, float scale)
{
    tc_fwd_mma<E, OT>(out, lse, qkv, T, NH, scale);
}

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

/* The warp's 16-bit dS^T (its 16 keys from jw x the TC_BC queries from q0, in shared memory at
 * row stride TC_LDP) into ds (T x T, keys by queries), inside T: eight a store where rows allow
 * (T a multiple of 8), else one. */
template <class E>
static __device__ __forceinline__ void tc_put_ds(E *ds, const E *dSt, int jw, int q0, int T,
                                                 int lane)
{
    for (int e = lane; e < 16 * (TC_BC / 8); e += 32) {
        int rr = e / (TC_BC / 8), c8 = 8 * (e % (TC_BC / 8)), j = jw + rr, i = q0 + c8;
        if (j >= T) continue;
        const E *src = dSt + rr * TC_LDP + c8;
        E *dst = ds + (size_t)j * T + i;
        if (T % 8 == 0 && i + 8 <= T)
            *(uint4 *)dst = *(const uint4 *)src;
        else
            for (int u = 0; u < 8 && i + u < T; u++)
                dst[u] = src[u];
    }
}

/* Backward, dK and dV. grid (key tiles, B NH), the first (longest) key tiles first. */
template <class E>
static __global__ void __launch_bounds__(TC_THREADS, 3)
    tc_bwd_kv_kernel(tc_bwd_args<E> a, int T, int NH, float scale)
{
    __shared__ __align__(32) unsigned char sm[TC_SMEM];
    tc_pos p = tc_pos_of(T, NH, false);
    const E *base = a.qkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    const E *dO = a.dout + (size_t)p.b * T * p.C + (size_t)p.h * TC_HS;
    const float *delta_bh = a.delta + (size_t)p.bh * T, *lse_bh = a.lse + (size_t)p.bh * T;
    unsigned char *sc = sm + TC_OWN;
    float *St = (float *)sc + p.warp * 16 * TC_LDS;                /* S^T, then P^T */
    float *dPt = (float *)(sc + TC_SCORES) + p.warp * 16 * TC_LDS; /* dP^T, then dS^T */
    float *rows = (float *)(sc + 2 * TC_SCORES); /* stage s: ls at rows + 2 s TC_BC, dl after */
    int jw = p.row0 + 16 * p.warp, r = p.lane / 2, half = p.lane % 2, j = jw + r;
    float sl2 = scale * TC_LOG2E;
    int nq = (T - p.row0 + TC_BC - 1) / TC_BC; /* query tiles from the block's first key */

    tc_fetch<TC_BR>((E *)sm, base + p.C, p.row0, T, p.C3);
    tc_fetch<TC_BR>((E *)(sm + TC_HEAD), base + 2 * p.C, p.row0, T, p.C3);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    tc_frag_a<E> kf[TC_HS / 16], vf[TC_HS / 16];
    tc_frags(kf, (const E *)sm + 16 * p.warp * TC_LDH);
    tc_frags(vf, (const E *)(sm + TC_HEAD) + 16 * p.warp * TC_LDH);
    tc_frag_c dk[TC_HS / 16], dv[TC_HS / 16];
    for (int n = 0; n < TC_HS / 16; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    __syncthreads(); /* K and V are in fragments: their place takes the tiles (Q and dO) */
    tc_tile<TC_BC>(sm, 0, nq, p.row0, base, p.C3, dO, (size_t)p.C, T);
    tc_rows<TC_BC>(rows + TC_BC, rows, delta_bh, lse_bh, p.row0, T);
    for (int t = 0; t < nq; t++) { /* queries i >= the tile's first key */
        int q0 = p.row0 + t * TC_BC;
        tc_turn<TC_BC>(sm, t, nq, p.row0, base, p.C3, dO, (size_t)p.C, T);
        if (t + 1 < nq) { /* the next tile's rows, into the stage tile t - 1 left */
            float *ls1 = rows + 2 * ((t + 1) % 2) * TC_BC;
            tc_rows<TC_BC>(ls1 + TC_BC, ls1, delta_bh, lse_bh, q0 + TC_BC, T);
        }
        if (q0 + TC_BC - 1 < jw) continue; /* no query of the tile sees the warp's keys */
        const E *Qs = tc_stage<TC_BC, E>(sm, t % 2, 0), *dOs = tc_stage<TC_BC, E>(sm, t % 2, 1);
        const float *ls = rows + 2 * (t % 2) * TC_BC, *dl = ls + TC_BC;
        tc_abt<TC_BC / 16>(St, TC_LDS, kf, Qs);
        tc_abt<TC_BC / 16>(dPt, TC_LDS, vf, dOs);
        __syncwarp();
        float pv[16], dsv[16];
        for (int u = 0; u < 16; u++) {
            int ii = tc_col(u, half), i = q0 + ii; /* the lane's query at step u */
            float e = 0.0f, ds = 0.0f;
            if (j < T && i < T && j <= i) {
                e = zt_exp2_ftz(sl2 * St[r * TC_LDS + ii] - ls[ii]);
                ds = e * (dPt[r * TC_LDS + ii] - dl[ii]) * scale;
            }
            pv[u] = e;
            dsv[u] = ds;
        }
        __syncwarp(); /* read before overwritten */
        E *Pt = (E *)St, *dSt = (E *)dPt;
        for (int u = 0; u < 16; u++) {
            int ii = tc_col(u, half);
            Pt[r * TC_LDP + ii] = tc_round<E>(pv[u]);
            dSt[r * TC_LDP + ii] = tc_round<E>(dsv[u]);
        }
        __syncwarp();
        if (a.ds) tc_put_ds(a.ds + (size_t)p.bh * T * T, dSt, jw, q0, T, p.lane);
        tc_ab_acc<TC_HS / 16, TC_BC / 16>(dv, Pt, dOs);
        tc_ab_acc<TC_HS / 16, TC_BC / 16>(dk, dSt, Qs);
    }
    __syncthreads(); /* every tile is used up: their place becomes the staging */
    float *stage = (float *)sm + p.warp * 16 * TC_LDO;
    size_t g = (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    tc_add_out(a.dqkv, a.dq16, g + p.C, p.C3, jw, T, stage, dk);
    tc_add_out(a.dqkv, a.dq16, g + 2 * p.C, p.C3, jw, T, stage, dv);
}

/* Backward, dQ. grid (query tiles, B NH), the last (longest) query tiles first. */
template <class E>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_bwd_q_kernel(tc_bwd_args<E> a, int T, int NH, float scale)
{
    __shared__ __align__(32) unsigned char sm[TC_SMEM];
    tc_pos p = tc_pos_of(T, NH, true);
    const E *base = a.qkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    const E *dO = a.dout + (size_t)p.b * T * p.C + (size_t)p.h * TC_HS;
    unsigned char *sc = sm + TC_OWN;
    float *S = (float *)sc + p.warp * 16 * TC_LDS;                /* S, then dS */
    float *dP = (float *)(sc + TC_SCORES) + p.warp * 16 * TC_LDS; /* dO V^T */
    float *ls = (float *)(sc + 2 * TC_SCORES), *dl = ls + TC_BR;
    int qw = p.row0 + 16 * p.warp, r = p.lane / 2, half = p.lane % 2, i = qw + r;
    float sl2 = scale * TC_LOG2E;
    int kend = min(T, p.row0 + TC_BR), nk = (kend + TC_BC - 1) / TC_BC;

    tc_fetch<TC_BR>((E *)sm, base, p.row0, T, p.C3);
    tc_fetch<TC_BR>((E *)(sm + TC_HEAD), dO, p.row0, T, (size_t)p.C);
    __pipeline_commit();
    tc_rows<TC_BR>(dl, ls, a.delta + (size_t)p.bh * T, a.lse + (size_t)p.bh * T, p.row0, T);
    __pipeline_wait_prior(0);
    __syncthreads();
    tc_frag_a<E> qf[TC_HS / 16], df[TC_HS / 16];
    tc_frags(qf, (const E *)sm + 16 * p.warp * TC_LDH);
    tc_frags(df, (const E *)(sm + TC_HEAD) + 16 * p.warp * TC_LDH);
    tc_frag_c dq[TC_HS / 16];
    for (int n = 0; n < TC_HS / 16; n++)
        wmma::fill_fragment(dq[n], 0.0f);
    float li = ls[16 * p.warp + r], di = dl[16 * p.warp + r];
    __syncthreads(); /* Q and dO are in fragments: their place takes the tiles (K and V) */
    tc_tile<TC_BC>(sm, 0, nk, 0, base + p.C, p.C3, base + 2 * p.C, p.C3, T);
    for (int t = 0; t < nk; t++) {
        int k0 = t * TC_BC;
        tc_turn<TC_BC>(sm, t, nk, 0, base + p.C, p.C3, base + 2 * p.C, p.C3, T);
        if (k0 > qw + 15) continue;
        const E *Ks = tc_stage<TC_BC, E>(sm, t % 2, 0), *Vs = tc_stage<TC_BC, E>(sm, t % 2, 1);
        tc_abt<TC_BC / 16>(S, TC_LDS, qf, Ks);
        tc_abt<TC_BC / 16>(dP, TC_LDS, df, Vs);
        __syncwarp();
        float dsv[16];
        for (int u = 0; u < 16; u++) {
            int c = tc_col(u, half), j = k0 + c;
            float ds = 0.0f;
            if (i < T && j <= i) {
                float e = zt_exp2_ftz(sl2 * S[r * TC_LDS + c] - li);
                ds = e * (dP[r * TC_LDS + c] - di) * scale;
            }
            dsv[u] = ds;
        }
        __syncwarp();
        E *dS = (E *)S;
        for (int u = 0; u < 16; u++)
            dS[r * TC_LDP + tc_col(u, half)] = tc_round<E>(dsv[u]);
        __syncwarp();
        tc_ab_acc<TC_HS / 16, TC_BC / 16>(dq, dS, Ks);
    }
    __syncthreads();
    float *stage = (float *)sm + p.warp * 16 * TC_LDO;
    tc_add_out(a.dqkv, a.dq16, (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS, p.C3, qw, T, stage,
               dq);
}

/* ---- the backward on mma.sync (ZT_CUDA_ATTN_BWD=mma) ----
 * The wmma backward's two kernels in the forward's layout: each warp keeps its own 16 rows
 * (K and V; Q and dO) as A fragments and its 16 x 64 scores and dP in accumulators, where P and
 * dS are formed and from where, packed, they go into the next products; the walked side comes
 * in tiles of 64 rows (two stages of cp.async), read by ldmatrix. */

/* The mma dK dV kernel's shared memory: the four places of TC_BR head vectors, per stage the
 * tile's lse log2(e) and delta (TC_MK floats each), and the block's K (for dQ by atomics). */
#define TC_MROWS (4 * TC_HEAD)
#define TC_MKEEP (TC_MROWS + 2 * 2 * TC_MK * 4)
#define TC_MBSMEM (TC_MKEEP + TC_HEAD)
static_assert(TC_MBSMEM <= 48 * 1024, "static shared memory");

/* dS^T (the warp's 16 keys from jw x the 8 NB queries from q0, accumulator layout, fp32)
 * rounded into ds (T x T, keys by queries), inside T. */
template <class E, int NB>
static __device__ __forceinline__ void tc_mma_put_ds(E *ds, const float (&d)[NB][4], int jw, int q0,
                                                     int T, int lane)
{
    int g = lane / 4, t4 = lane % 4;
    ZT_UNROLL
    for (int n = 0; n < NB; n++) {
        ZT_UNROLL
        for (int e = 0; e < 4; e++) {
            int j = jw + g + 8 * (e / 2), i = q0 + 8 * n + 2 * t4 + e % 2;
            if (j < T && i < T) ds[(size_t)j * T + i] = tc_round<E>(d[n][e]);
        }
    }
}

/* dQ += dS K for the tile's 64 queries from q0 and the block's 64 keys, by atomics into dqkv
 * (at (b, token 0, head h) of the run, as p places the block), as FlashAttention-2 does: the
 * warps' dS^T (keys by queries, packed as A fragments: dsp) go into shared memory over the
 * tile's dO (which every warp is done with after a block barrier); then each warp multiplies its
 * 16 queries' rows of dS (read transposed) by the block's K (Kb) and adds the 16 x 64 result to
 * dQ's rows below T. Collective over the block (two block barriers). */
template <class E>
static __device__ __forceinline__ void
tc_mma_dq_atomic(float *dqkv, const uint32_t dsp[TC_MK / 16][4], E *dSs, const E *Kb, int q0, int T,
                 const tc_pos &p, tc_lm lm)
{
    int g = p.lane / 4, t4 = p.lane % 4;
    __syncthreads(); /* every warp is done with the tile's dO */
    ZT_UNROLL
    for (int n = 0; n < TC_MN; n++) {
        ZT_UNROLL
        for (int h = 0; h < 2; h++) {
            uint32_t v = dsp[n / 2][2 * (n % 2) + h]; /* (dS^T[n][2h], [2h + 1]), packed */
            memcpy((void *)(dSs + (16 * p.warp + g + 8 * h) * TC_LDH + 8 * n + 2 * t4), &v,
                   sizeof(v));
        }
    }
    __syncthreads(); /* dS^T is whole */
    float dq[TC_MN][4];
    ZT_UNROLL
    for (int n = 0; n < TC_MN; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    ZT_UNROLL
    for (int kk = 0; kk < TC_MK / 16; kk++) { /* keys 16 kk.. */
        uint32_t af[4]; /* dS's rows of the warp's queries, keys 16 kk.. (dS^T transposed) */
        tc_ldsm4<true>(af, dSs + (16 * kk + lm.lrk) * TC_LDH + 16 * p.warp + lm.lck);
        tc_mma_kstep<E>(dq, af, kk, Kb, lm);
    }
    float *g0 = dqkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS + 2 * t4;
    ZT_UNROLL
    for (int h = 0; h < 2; h++) {
        int i = q0 + 16 * p.warp + g + 8 * h;
        if (i >= T) continue;
        float *row = g0 + (size_t)i * p.C3;
        ZT_UNROLL
        for (int n = 0; n < TC_MN; n++) {
            atomicAdd(row + 8 * n, dq[n][2 * h]);
            atomicAdd(row + 8 * n + 1, dq[n][2 * h + 1]);
        }
    }
}

/* P^T and dS^T from S^T and dP^T in place (accumulator layout, NB n8 accumulators: the lane's
 * elements, its rows (keys) from row j0, its columns (queries) from i0): P^T = exp2(sl2 S^T -
 * lse log2(e)), dS^T = P^T (dP^T - delta) scale, with the lse log2(e) and delta of the lane's
 * columns at ls and dl (two floats at 8 n: 8-byte aligned); zero where the key comes after the
 * query or the query is at or past T (the values computed there, unused, may be infinite),
 * unless T is INT_MIN: a tile where every query sees every key. One path without branches
 * either way (a masked and an unmasked copy of the loop spilled more: 220 bytes). */
template <int NB>
static __device__ __forceinline__ void tc_mma_pds(float (&st)[NB][4], float (&dpt)[NB][4],
                                                  const float *ls, const float *dl, int j0, int i0,
                                                  int T, float sl2, float scale)
{
    ZT_UNROLL
    for (int n = 0; n < NB; n++) {
        float2 l2 = *(const float2 *)(ls + 8 * n), d2 = *(const float2 *)(dl + 8 * n);
        ZT_UNROLL
        for (int e = 0; e < 4; e++) {
            float pe = zt_exp2_ftz(sl2 * st[n][e] - (e % 2 ? l2.y : l2.x));
            float ds = pe * (dpt[n][e] - (e % 2 ? d2.y : d2.x)) * scale;
            int i = i0 + 8 * n + e % 2, j = j0 + 8 * (e / 2);
            if (T != INT_MIN && (j > i || i >= T)) pe = ds = 0.0f;
            st[n][e] = pe;
            dpt[n][e] = ds;
        }
    }
}

/* Backward, dK and dV (and with DQA dQ by atomics), on mma.sync. grid (key tiles, B NH), the
 * first (longest) key tiles first. Each tile's P^T and dS^T are formed half a tile at a time and
 * packed to 16 bits at once, the mask without a branch (tc_mma_pds): on sm_90 at 168 registers
 * 56 bytes of spill stores a thread, where a branch per element took 212 and forming the whole
 * tile in fp32 416. MINB blocks per SM: 3 (the default) holds the
 * kernel to 168 registers, spilling the rest, for 12 warps an SM; 2 (ZT_CUDA_ATTN_BWD=mma2) gives
 * the compiler the 246 it asks on sm_90, 8 warps an SM, where Nsight Compute found it latency-bound
 * (1.9 warps per scheduler, 0.33 of them eligible a cycle): 0.501 ms against 0.479 at 3 on an
 * H100 (GPT-2 124M, micro batch 8). With dQ by atomics (DQA) it stays at 2, as measured. */
template <class E, bool DQA, int MINB = 3, bool D16 = false>
static __global__ void __launch_bounds__(TC_THREADS, MINB)
    tc_bwd_mma_kv_kernel(tc_bwd_args<E> a, int T, int NH, float scale)
{
    __shared__ __align__(128) unsigned char sm[DQA ? TC_MBSMEM : TC_MKEEP];
    tc_pos p = tc_pos_of(T, NH, false);
    const E *base = a.qkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    const E *dO = a.dout + (size_t)p.b * T * p.C + (size_t)p.h * TC_HS;
    const float *delta_bh = a.delta + (size_t)p.bh * T, *lse_bh = a.lse + (size_t)p.bh * T;
    float *rows = (float *)(sm + TC_MROWS);   /* stage s: ls at rows + 2 s TC_MK, dl after */
    /* the block's K: kept past the tiles for dQ, else in stage 1's place until in fragments */
    const E *Kb = (const E *)(sm + (DQA ? TC_MKEEP : 2 * TC_HEAD));
    int jw = p.row0 + 16 * p.warp, g = p.lane / 4, t4 = p.lane % 4;
    tc_lm lm = tc_lm_of(p.lane);
    float sl2 = scale * TC_LOG2E;
    int nq = (T - p.row0 + TC_MK - 1) / TC_MK; /* query tiles from the block's first key */

    tc_rows<TC_MK>(rows + TC_MK, rows, delta_bh, lse_bh, p.row0, T);
    tc_mstart_at<E>(sm, (E *)Kb, p.row0, base + p.C, p.C3, base + 2 * p.C, p.C3, nq, p.row0, base,
                    dO, p.C3, (size_t)p.C, T);
    uint32_t ka[TC_MS][4], va[TC_MS][4];
    tc_mma_frags(ka, Kb + 16 * p.warp * TC_LDH, lm);
    tc_mma_frags(va, (const E *)(sm + 3 * TC_HEAD) + 16 * p.warp * TC_LDH, lm);
    float dk[TC_MN][4], dv[TC_MN][4];
    ZT_UNROLL
    for (int n = 0; n < TC_MN; n++)
        dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] =
            0.0f;
    for (int t = 0; t < nq; t++) { /* queries i >= the block's first key */
        int q0 = p.row0 + t * TC_MK;
        tc_turn<TC_MK>(sm, t, nq, p.row0, base, p.C3, dO, (size_t)p.C, T);
        if (t + 1 < nq) { /* the next tile's rows, into the stage tile t - 1 left */
            float *ls1 = rows + 2 * ((t + 1) % 2) * TC_MK;
            tc_rows<TC_MK>(ls1 + TC_MK, ls1, delta_bh, lse_bh, q0 + TC_MK, T);
        }
        const E *Qs = tc_stage<TC_MK, E>(sm, t % 2, 0), *dOs = tc_stage<TC_MK, E>(sm, t % 2, 1);
        const float *ls = rows + 2 * (t % 2) * TC_MK, *dl = ls + TC_MK;
        bool full = jw + 15 <= q0 && q0 + TC_MK <= T; /* every query sees every key of the warp */
        /* P^T and dS^T packed to 16 bits as A fragments of the next products (k-step kk: queries
         * 16 kk..), formed a part of the tile at a time so that only that part of the fp32
         * scores and dP^T lives at once: halves, or quarters with dQ by atomics (whichever
         * spills least on sm_90) */
        const int PARTS = DQA ? 4 : 2;
        uint32_t pp[TC_MK / 16][4], dsp[TC_MK / 16][4];
        ZT_UNROLL
        for (int hh = 0; hh < PARTS; hh++) {
            const int NB = TC_MN / PARTS;
            float st[NB][4], dpt[NB][4]; /* S^T then P^T; dP^T then dS^T */
            tc_mma_abt<E>(st, ka, Qs + 8 * NB * hh * TC_LDH, lm);
            tc_mma_abt<E>(dpt, va, dOs + 8 * NB * hh * TC_LDH, lm);
            int c0 = 8 * NB * hh + 2 * t4; /* the lane's first column (query) */
            tc_mma_pds<NB>(st, dpt, ls + c0, dl + c0, jw + g, q0 + c0, full ? INT_MIN : T, sl2,
                           scale);
            if (a.ds)
                tc_mma_put_ds<E>(a.ds + (size_t)p.bh * T * T, dpt, jw, q0 + 8 * NB * hh, T, p.lane);
            ZT_UNROLL
            for (int k2 = 0; k2 < NB / 2; k2++) { /* two n8 accumulators: one A fragment */
                int kk = NB / 2 * hh + k2;
                pp[kk][0] = tc_pack<E>(st[2 * k2][0], st[2 * k2][1]);
                pp[kk][1] = tc_pack<E>(st[2 * k2][2], st[2 * k2][3]);
                pp[kk][2] = tc_pack<E>(st[2 * k2 + 1][0], st[2 * k2 + 1][1]);
                pp[kk][3] = tc_pack<E>(st[2 * k2 + 1][2], st[2 * k2 + 1][3]);
                dsp[kk][0] = tc_pack<E>(dpt[2 * k2][0], dpt[2 * k2][1]);
                dsp[kk][1] = tc_pack<E>(dpt[2 * k2][2], dpt[2 * k2][3]);
                dsp[kk][2] = tc_pack<E>(dpt[2 * k2 + 1][0], dpt[2 * k2 + 1][1]);
                dsp[kk][3] = tc_pack<E>(dpt[2 * k2 + 1][2], dpt[2 * k2 + 1][3]);
            }
        }
        ZT_UNROLL
        for (int kk = 0; kk < TC_MK / 16; kk++) {
            tc_mma_kstep<E>(dv, pp[kk], kk, dOs, lm);
            tc_mma_kstep<E>(dk, dsp[kk], kk, Qs, lm);
        }
        if (DQA) tc_mma_dq_atomic(a.dqkv, dsp, (E *)dOs, Kb, q0, T, p, lm);
    }
    size_t gk = (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    tc_mma_add_out<E, D16>(a.dqkv, a.dq16, gk + p.C, p.C3, jw, T, dk, p.lane);
    tc_mma_add_out<E, D16>(a.dqkv, a.dq16, gk + 2 * p.C, p.C3, jw, T, dv, p.lane);
}

/* dS = exp2(sl2 S - lse log2(e)) (dP - delta) scale over S in place (accumulator layout: the
 * lane's elements of TC_MN n8 accumulators, its rows (queries) from i0 with li, di their lse
 * log2(e) and delta, its columns (keys) from j0); with MASK zero where the key comes after the
 * query or the query is at or past T (the values computed there, unused, may be infinite). */
template <bool MASK>
static __device__ __forceinline__ void tc_mma_ds(float (&s)[TC_MN][4], const float (&dp)[TC_MN][4],
                                                 const float li[2], const float di[2], int i0,
                                                 int j0, int T, float sl2, float scale)
{
    ZT_UNROLL
    for (int n = 0; n < TC_MN; n++) {
        ZT_UNROLL
        for (int e = 0; e < 4; e++) {
            int h = e / 2, i = i0 + 8 * h, j = j0 + 8 * n + e % 2;
            float ds = zt_exp2_ftz(sl2 * s[n][e] - li[h]) * (dp[n][e] - di[h]) * scale;
            s[n][e] = MASK && (j > i || i >= T) ? 0.0f : ds;
        }
    }
}

/* Backward, dQ, on mma.sync. grid (query tiles, B NH), the last (longest) query tiles first. */
template <class E, bool D16 = false>
static __global__ void __launch_bounds__(TC_THREADS, 3)
    tc_bwd_mma_q_kernel(tc_bwd_args<E> a, int T, int NH, float scale)
{
    __shared__ __align__(128) unsigned char sm[TC_MSMEM];
    tc_pos p = tc_pos_of(T, NH, true);
    const E *base = a.qkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    const E *dO = a.dout + (size_t)p.b * T * p.C + (size_t)p.h * TC_HS;
    const E *kg = base + p.C, *vg = base + 2 * p.C;
    int qw = p.row0 + 16 * p.warp, g = p.lane / 4, t4 = p.lane % 4;
    tc_lm lm = tc_lm_of(p.lane);
    float sl2 = scale * TC_LOG2E;
    int kend = min(T, p.row0 + TC_BR), nk = (kend + TC_MK - 1) / TC_MK;
    float li[2], di[2]; /* lse log2(e) and delta of the lane's rows */
    ZT_UNROLL
    for (int h = 0; h < 2; h++) {
        int i = qw + g + 8 * h;
        li[h] = i < T ? a.lse[(size_t)p.bh * T + i] * TC_LOG2E : 0.0f;
        di[h] = i < T ? a.delta[(size_t)p.bh * T + i] : 0.0f;
    }

    tc_mstart<E>(sm, p.row0, base, p.C3, dO, (size_t)p.C, nk, 0, kg, vg, p.C3, p.C3, T);
    uint32_t qa[TC_MS][4], oa[TC_MS][4];
    tc_mma_frags(qa, (const E *)(sm + 2 * TC_HEAD) + 16 * p.warp * TC_LDH, lm);
    tc_mma_frags(oa, (const E *)(sm + 3 * TC_HEAD) + 16 * p.warp * TC_LDH, lm);
    float dq[TC_MN][4];
    ZT_UNROLL
    for (int n = 0; n < TC_MN; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int t = 0; t < nk; t++) {
        int k0 = t * TC_MK;
        tc_turn<TC_MK>(sm, t, nk, 0, kg, p.C3, vg, p.C3, T);
        if (k0 > qw + 15) continue; /* the warp's queries see none of these keys */
        const E *Ks = tc_stage<TC_MK, E>(sm, t % 2, 0), *Vs = tc_stage<TC_MK, E>(sm, t % 2, 1);
        float s[TC_MN][4], dp[TC_MN][4]; /* S then dS; dP */
        tc_mma_abt<E>(s, qa, Ks, lm);
        tc_mma_abt<E>(dp, oa, Vs, lm);
        /* every key of the tile before every query of the warp, all inside T: no mask */
        if (k0 + TC_MK - 1 <= qw && qw + 15 < T)
            tc_mma_ds<false>(s, dp, li, di, qw + g, k0 + 2 * t4, T, sl2, scale);
        else
            tc_mma_ds<true>(s, dp, li, di, qw + g, k0 + 2 * t4, T, sl2, scale);
        tc_mma_pv<E>(dq, s, Ks, lm);
    }
    tc_mma_add_out<E, D16>(a.dqkv, a.dq16, (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS, p.C3, qw,
                           T, dq, p.lane);
}

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
