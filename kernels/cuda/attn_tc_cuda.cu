/* zerotrain: the fused causal attention of ZT_CUDA_ATTN=fused on tensor cores, for jobs whose
 * matmuls take 16-bit inputs (zt_cuda_mm bf16 or fp16): attn_cuda.cu's algorithm (online
 * softmax forward; backward without atomics, one kernel for dK and dV and one for dQ, both
 * recomputing P = exp(s - lse) and dS = P (dO.V - delta) scale, delta = dO.out) with every
 * product on 16-bit tensor cores, as FlashAttention-2 does under bf16 and fp16: Q, K, V and dO
 * are rounded to the context's 16-bit type (E: bf16, or fp16 for fp16 contexts) as a tile is
 * loaded, P and dS as they enter their products; the softmax, the running sums, delta and lse
 * stay fp32, and so do the results in memory. Head size 64.
 *
 * The products are the m16n8k16 matrix instruction (mma.sync, sm_80 and later), whose
 * fragment layouts the PTX ISA specifies (tc_mma below), so everything a warp owns stays in
 * registers: a block is 4 warps and owns 64 rows (queries, or keys for dK and dV), 16 per
 * warp, whose Q (or K and V, or Q and dO) fragments are read once; it walks the other side in
 * tiles of 64 rows in shared memory, stored with the contraction index contiguous (a tile and,
 * where a product needs it, its transpose). A warp's 16 x 64 scores come out of the
 * instruction in accumulator layout, which is the layout of the next product's A operand, so
 * the softmax, the masking and the rescaling of the output run on registers, and P or dS go
 * into the next product without a trip through memory. Results are written (added, for dqkv)
 * by the lane that holds them; rows at or past T are never touched. */
#include "cuda_int.h"

#include <stdint.h>
#include <string.h>

#ifndef ZT_CUDA_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define TC_UNROLL _Pragma("unroll")
#else
#define TC_UNROLL
#endif

#define TC_HS 64                 /* the head size compiled */
#define TC_WARPS 4
#define TC_THREADS (32 * TC_WARPS)
#define TC_BR (16 * TC_WARPS)    /* rows a block owns */
#define TC_BC 64                 /* rows of a walked tile */
#define TC_LD (TC_HS + 8)        /* 16-bit row stride of a tile (and of a transposed one) */
#define TC_TILE (TC_BC * TC_LD)  /* 16-bit elements of a tile */
#define TC_NT (TC_BC / 8)        /* n8 accumulator tiles across a walked tile, or across hs */
#define TC_KS (TC_HS / 16)       /* k16 steps over the head size, or over a walked tile */
#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f

static_assert(TC_BC == TC_HS, "a tile and its transpose share the row stride");
static_assert(TC_BR <= TC_BC && TC_BC % TC_BR == 0, "the diagonal tile starts at a block's rows");

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

/* lo and hi rounded to E and packed as the instruction takes them: lo in the low half */
template <class E> static __device__ __forceinline__ uint32_t tc_pack(float lo, float hi)
{
    E a = tc_round<E>(lo), b = tc_round<E>(hi);
    unsigned short ua, ub;
    memcpy(&ua, &a, sizeof(ua));
    memcpy(&ub, &b, sizeof(ub));
    return (uint32_t)ua | (uint32_t)ub << 16;
}

/* the two 16-bit elements at p (4-byte aligned) as one register */
template <class E> static __device__ __forceinline__ uint32_t tc_ld2(const E *p)
{
#ifdef ZT_CUDA_EMU
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
#else
    return *(const uint32_t *)p;
#endif
}

/* d (16 x 8, fp32) += a (16 x 16) b (16 x 8) on the tensor cores, collective over the warp.
 * Fragment layouts (g = lane / 4, t = lane % 4; two 16-bit elements per register, the one of
 * lower column or k first): a[0] = A(g, 2t..), a[1] = A(g+8, 2t..), a[2] = A(g, 2t+8..),
 * a[3] = A(g+8, 2t+8..); b0 = B(2t.., g), b1 = B(2t+8.., g); d[0..1] = D(g, 2t..),
 * d[2..3] = D(g+8, 2t..). So two n8 accumulators side by side, packed, are an A fragment. */
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
__device__ __forceinline__ void tc_mma<__nv_bfloat16>(float d[4], const uint32_t a[4],
                                                      uint32_t b0, uint32_t b1)
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

/* The A fragments of a warp's 16 rows of a tile m (row stride TC_LD), for the TC_KS k16 steps
 * over its TC_HS columns. */
template <class E>
static __device__ __forceinline__ void tc_frag_a(uint32_t a[TC_KS][4], const E *m, int lane)
{
    int g = lane / 4, t = lane % 4;
    TC_UNROLL
    for (int kk = 0; kk < TC_KS; kk++) {
        const E *p = m + g * TC_LD + 16 * kk + 2 * t;
        a[kk][0] = tc_ld2(p);
        a[kk][1] = tc_ld2(p + 8 * TC_LD);
        a[kk][2] = tc_ld2(p + 8);
        a[kk][3] = tc_ld2(p + 8 * TC_LD + 8);
    }
}

/* acc (16 x 64 as TC_NT n8 accumulators) = a x^T, a a warp's 16 x 64 as A fragments, x a
 * 64 x 64 tile (row stride TC_LD): column n of the product is row n of x. */
template <class E>
static __device__ __forceinline__ void tc_abt(float acc[TC_NT][4], const uint32_t a[TC_KS][4],
                                              const E *x, int lane)
{
    int g = lane / 4, t = lane % 4;
    TC_UNROLL
    for (int n = 0; n < TC_NT; n++) {
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
        const E *p = x + (8 * n + g) * TC_LD + 2 * t;
        TC_UNROLL
        for (int kk = 0; kk < TC_KS; kk++)
            tc_mma<E>(acc[n], a[kk], tc_ld2(p + 16 * kk), tc_ld2(p + 16 * kk + 8));
    }
}

/* acc (16 x 64) += p xt^T, p a warp's 16 x 64 in accumulator layout (P or dS, rounded to E
 * here), xt the transpose of the 64 x 64 right-hand tile (row n of xt is column n of it). */
template <class E>
static __device__ __forceinline__ void tc_pv(float acc[TC_NT][4], const float p[TC_NT][4],
                                             const E *xt, int lane)
{
    int g = lane / 4, t = lane % 4;
    TC_UNROLL
    for (int kk = 0; kk < TC_KS; kk++) {
        uint32_t a[4] = {tc_pack<E>(p[2 * kk][0], p[2 * kk][1]),
                         tc_pack<E>(p[2 * kk][2], p[2 * kk][3]),
                         tc_pack<E>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                         tc_pack<E>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
        TC_UNROLL
        for (int n = 0; n < TC_NT; n++) {
            const E *q = xt + (8 * n + g) * TC_LD + 16 * kk + 2 * t;
            tc_mma<E>(acc[n], a, tc_ld2(q), tc_ld2(q + 8));
        }
    }
}

/* dst (when not NULL) and dstT (its transpose, when not NULL), both 16-bit with row stride
 * TC_LD, = the TC_BC x TC_HS rows row0.. of src (row stride ld), 0 past T. Collective over the
 * block; a warp reads 32 consecutive floats of a row. */
template <class E>
static __device__ __forceinline__ void tc_load(E *dst, E *dstT, const float *src, size_t ld,
                                               int row0, int T)
{
    for (int e = threadIdx.x; e < TC_BC * TC_HS; e += TC_THREADS) {
        int r = e / TC_HS, c = e % TC_HS, i = row0 + r;
        E v = tc_round<E>(i < T ? src[(size_t)i * ld + c] : 0.0f);
        if (dst) dst[r * TC_LD + c] = v;
        if (dstT) dstT[c * TC_LD + r] = v;
    }
}

/* dl[r] = delta = dO.out (fp32, from memory) and ls[r] = lse * log2(e) of the TC_BC queries
 * from q0 (0 past T): a warp per query at a time. dout and out at (b, h), row stride C. */
static __device__ __forceinline__ void tc_delta(float *dl, float *ls, const float *dout,
                                                const float *out, const float *lse_bh, int q0,
                                                int T, int C)
{
    static_assert(TC_HS == 64, "two columns per lane");
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    for (int r = warp; r < TC_BC; r += TC_WARPS) {
        int i = q0 + r;
        float d = 0.0f;
        if (i < T) {
            const float *o = dout + (size_t)i * C, *y = out + (size_t)i * C;
            d = o[lane] * y[lane] + o[lane + 32] * y[lane + 32];
        }
        for (int w = 16; w; w >>= 1)
            d += __shfl_xor_sync(0xffffffffu, d, w);
        if (lane == 0) {
            dl[r] = d;
            ls[r] = i < T ? lse_bh[i] * TC_LOG2E : 0.0f;
        }
    }
}

/* dst rows row0 (and row0 + 8) (row stride ld) += a warp's 16 x 64 accumulators: the lane's
 * own elements; rows at or past T are left alone. */
static __device__ __forceinline__ void tc_add_out(float *dst, size_t ld, int row0, int T,
                                                  const float acc[TC_NT][4], int lane)
{
    int g = lane / 4, t = lane % 4;
    TC_UNROLL
    for (int h = 0; h < 2; h++) {
        int i = row0 + g + 8 * h;
        if (i >= T) continue;
        float *o = dst + (size_t)i * ld + 2 * t;
        TC_UNROLL
        for (int n = 0; n < TC_NT; n++) {
            o[8 * n] += acc[n][2 * h];
            o[8 * n + 1] += acc[n][2 * h + 1];
        }
    }
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

/* Whether element e (0..3) of n8 accumulator n of a tile whose column 0 is c0 pairs row
 * (r0 + g, or + 8 for e >= 2) with column c0 + 8 n + 2 t + e % 2 under the causal mask, the
 * query being the row (rows_are_queries) or the column; both below T. */
static __device__ __forceinline__ bool tc_seen(int r0, int c0, int n, int e, int lane, int T,
                                               bool rows_are_queries)
{
    int r = r0 + lane / 4 + 8 * (e / 2), c = c0 + 8 * n + 2 * (lane % 4) + e % 2;
    int i = rows_are_queries ? r : c, j = rows_are_queries ? c : r;
    return j <= i && i < T;
}

/* Forward. grid (query tiles, B NH). */
template <class E>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_fwd_kernel(float *out, float *lse, const float *qkv, int T, int NH, float scale)
{
    __shared__ __align__(16) E sm[2 * TC_TILE]; /* Q, then K and V^T */
    E *Ks = sm, *Vt = sm + TC_TILE;
    tc_pos p = tc_pos_of(qkv, T, NH, true);
    int qw = p.row0 + 16 * p.warp, g = p.lane / 4, t = p.lane % 4;
    float sl2 = scale * TC_LOG2E;

    uint32_t aq[TC_KS][4];
    tc_load<E>(sm, NULL, p.base, p.C3, p.row0, T);
    __syncthreads();
    tc_frag_a<E>(aq, sm + 16 * p.warp * TC_LD, p.lane);
    float o[TC_NT][4];
    TC_UNROLL
    for (int n = 0; n < TC_NT; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    /* per row (g, g + 8): running maximum (log2 units) and this lane's part of the sum */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    int kend = min(T, p.row0 + TC_BR); /* keys the block's last query sees */
    for (int k0 = 0; k0 < kend; k0 += TC_BC) {
        __syncthreads(); /* the previous tile (or Q) is used up */
        tc_load<E>(Ks, NULL, p.base + p.C, p.C3, k0, T);
        tc_load<E>(NULL, Vt, p.base + 2 * p.C, p.C3, k0, T);
        __syncthreads();
        float s[TC_NT][4];
        tc_abt<E>(s, aq, Ks, p.lane);
        float mx[2] = {-INFINITY, -INFINITY};
        TC_UNROLL
        for (int n = 0; n < TC_NT; n++)
            TC_UNROLL
            for (int e = 0; e < 4; e++) {
                /* keys past T sit past every query below T: masked as the future */
                s[n][e] = tc_seen(qw, k0, n, e, p.lane, T, true) ? s[n][e] * sl2 : -INFINITY;
                mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
            }
        float alpha[2], ref[2];
        TC_UNROLL
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            float mnew = fmaxf(m[h], mx[h]);
            /* a row with no key yet (or past T) keeps m = -inf and adds nothing */
            ref[h] = mnew == -INFINITY ? 0.0f : mnew;
            alpha[h] = exp2f(m[h] - ref[h]);
            m[h] = mnew;
            l[h] *= alpha[h];
        }
        TC_UNROLL
        for (int n = 0; n < TC_NT; n++)
            TC_UNROLL
            for (int e = 0; e < 4; e++) {
                s[n][e] = exp2f(s[n][e] - ref[e / 2]);
                l[e / 2] += s[n][e];
                o[n][e] *= alpha[e / 2];
            }
        tc_pv<E>(o, s, Vt, p.lane);
    }
    TC_UNROLL
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        int i = qw + g + 8 * h;
        if (i >= T) continue;
        float *y = out + ((size_t)p.b * T + i) * p.C + (size_t)p.h * TC_HS + 2 * t;
        TC_UNROLL
        for (int n = 0; n < TC_NT; n++) {
            y[8 * n] = o[n][2 * h] / l[h];
            y[8 * n + 1] = o[n][2 * h + 1] / l[h];
        }
        if (t == 0) lse[(size_t)p.bh * T + i] = (m[h] + log2f(l[h])) * TC_LN2;
    }
}

/* Backward, dK and dV. grid (key tiles, B NH), the first (longest) key tiles first. The scores
 * are computed transposed (S^T = K Q^T, dP^T = V dO^T: rows are the warp's keys), so P^T and
 * dS^T are A operands of dV += P^T dO and dK += dS^T Q. */
template <class E>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_bwd_kv_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                     const float *lse, int T, int NH, float scale)
{
    __shared__ __align__(16) E sm[4 * TC_TILE]; /* K and V, then Q, Q^T, dO, dO^T */
    __shared__ float dl[TC_BC], ls[TC_BC];
    E *Qs = sm, *Qt = sm + TC_TILE, *dOs = sm + 2 * TC_TILE, *dOt = sm + 3 * TC_TILE;
    tc_pos p = tc_pos_of(qkv, T, NH, false);
    int jw = p.row0 + 16 * p.warp;
    float sl2 = scale * TC_LOG2E;
    size_t hoff = (size_t)p.b * T * p.C + (size_t)p.h * TC_HS; /* (b, h) in dout and out */

    uint32_t ak[TC_KS][4], av[TC_KS][4];
    tc_load<E>(sm, NULL, p.base + p.C, p.C3, p.row0, T);
    tc_load<E>(sm + TC_TILE, NULL, p.base + 2 * p.C, p.C3, p.row0, T);
    __syncthreads();
    tc_frag_a<E>(ak, sm + 16 * p.warp * TC_LD, p.lane);
    tc_frag_a<E>(av, sm + TC_TILE + 16 * p.warp * TC_LD, p.lane);
    float dk[TC_NT][4], dv[TC_NT][4];
    TC_UNROLL
    for (int n = 0; n < TC_NT; n++)
        TC_UNROLL
        for (int e = 0; e < 4; e++)
            dk[n][e] = dv[n][e] = 0.0f;
    for (int q0 = p.row0 - p.row0 % TC_BC; q0 < T; q0 += TC_BC) { /* queries >= the first key */
        __syncthreads(); /* the previous tile (or K and V) is used up */
        tc_load<E>(Qs, Qt, p.base, p.C3, q0, T);
        tc_load<E>(dOs, dOt, dout + hoff, (size_t)p.C, q0, T);
        tc_delta(dl, ls, dout + hoff, out + hoff, lse + (size_t)p.bh * T, q0, T, p.C);
        __syncthreads();
        float st[TC_NT][4], dpt[TC_NT][4];
        tc_abt<E>(st, ak, Qs, p.lane);
        tc_abt<E>(dpt, av, dOs, p.lane);
        TC_UNROLL
        for (int n = 0; n < TC_NT; n++)
            TC_UNROLL
            for (int e = 0; e < 4; e++) {
                int ii = 8 * n + 2 * (p.lane % 4) + e % 2; /* the query, in the tile */
                float pe = 0.0f, ds = 0.0f;
                if (tc_seen(jw, q0, n, e, p.lane, T, false)) {
                    pe = exp2f(st[n][e] * sl2 - ls[ii]);
                    ds = pe * (dpt[n][e] - dl[ii]) * scale;
                }
                st[n][e] = pe;
                dpt[n][e] = ds;
            }
        tc_pv<E>(dv, st, dOt, p.lane);
        tc_pv<E>(dk, dpt, Qt, p.lane);
    }
    float *gk = dqkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS;
    tc_add_out(gk + p.C, p.C3, jw, T, dk, p.lane);
    tc_add_out(gk + 2 * p.C, p.C3, jw, T, dv, p.lane);
}

/* Backward, dQ. grid (query tiles, B NH), the last (longest) query tiles first. */
template <class E>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_bwd_q_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                    const float *lse, int T, int NH, float scale)
{
    __shared__ __align__(16) E sm[3 * TC_TILE]; /* Q and dO, then K, K^T and V */
    __shared__ float dl[TC_BC], ls[TC_BC];
    E *Ks = sm, *Kt = sm + TC_TILE, *Vs = sm + 2 * TC_TILE;
    tc_pos p = tc_pos_of(qkv, T, NH, true);
    int qw = p.row0 + 16 * p.warp, g = p.lane / 4;
    float sl2 = scale * TC_LOG2E;
    size_t hoff = (size_t)p.b * T * p.C + (size_t)p.h * TC_HS;

    uint32_t aq[TC_KS][4], ado[TC_KS][4];
    tc_load<E>(sm, NULL, p.base, p.C3, p.row0, T);
    tc_load<E>(sm + TC_TILE, NULL, dout + hoff, (size_t)p.C, p.row0, T);
    tc_delta(dl, ls, dout + hoff, out + hoff, lse + (size_t)p.bh * T, p.row0, T, p.C);
    __syncthreads();
    tc_frag_a<E>(aq, sm + 16 * p.warp * TC_LD, p.lane);
    tc_frag_a<E>(ado, sm + TC_TILE + 16 * p.warp * TC_LD, p.lane);
    float lrow[2] = {ls[16 * p.warp + g], ls[16 * p.warp + g + 8]};
    float drow[2] = {dl[16 * p.warp + g], dl[16 * p.warp + g + 8]};
    float dq[TC_NT][4];
    TC_UNROLL
    for (int n = 0; n < TC_NT; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    int kend = min(T, p.row0 + TC_BR);
    for (int k0 = 0; k0 < kend; k0 += TC_BC) {
        __syncthreads(); /* the previous tile (or Q and dO) is used up */
        tc_load<E>(Ks, Kt, p.base + p.C, p.C3, k0, T);
        tc_load<E>(Vs, NULL, p.base + 2 * p.C, p.C3, k0, T);
        __syncthreads();
        float s[TC_NT][4], dp[TC_NT][4];
        tc_abt<E>(s, aq, Ks, p.lane);
        tc_abt<E>(dp, ado, Vs, p.lane);
        TC_UNROLL
        for (int n = 0; n < TC_NT; n++)
            TC_UNROLL
            for (int e = 0; e < 4; e++) {
                float ds = 0.0f;
                if (tc_seen(qw, k0, n, e, p.lane, T, true))
                    ds = exp2f(s[n][e] * sl2 - lrow[e / 2]) * (dp[n][e] - drow[e / 2]) * scale;
                s[n][e] = ds;
            }
        tc_pv<E>(dq, s, Kt, p.lane);
    }
    tc_add_out(dqkv + (size_t)p.b * T * p.C3 + (size_t)p.h * TC_HS, p.C3, qw, T, dq, p.lane);
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

extern "C" void zt_cuda_attn_tc_backward(zt_kctx *ctx, float *dqkv, const float *dout,
                                         const float *qkv, const float *out, const float *lse,
                                         int B, int T, int C, int NH)
{
    float scale = 1.0f / sqrtf((float)(C / NH));
    dim3 grid((unsigned)((T + TC_BR - 1) / TC_BR), (unsigned)(B * NH));
    if (ctx->mm == ZT_MM_FP16) {
        ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dK dV, fp16 tensor cores)",
                       tc_bwd_kv_kernel<__half>, grid, TC_THREADS, dqkv, dout, qkv, out, lse, T,
                       NH, scale);
        ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dQ, fp16 tensor cores)",
                       tc_bwd_q_kernel<__half>, grid, TC_THREADS, dqkv, dout, qkv, out, lse, T, NH,
                       scale);
    } else {
        ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dK dV, bf16 tensor cores)",
                       tc_bwd_kv_kernel<__nv_bfloat16>, grid, TC_THREADS, dqkv, dout, qkv, out,
                       lse, T, NH, scale);
        ZT_CUDA_LAUNCH(ctx, "attention_backward (fused dQ, bf16 tensor cores)",
                       tc_bwd_q_kernel<__nv_bfloat16>, grid, TC_THREADS, dqkv, dout, qkv, out,
                       lse, T, NH, scale);
    }
}
