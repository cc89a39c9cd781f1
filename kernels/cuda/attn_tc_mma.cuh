/* zerotrain: the mma.sync generation of attn_tc_cuda.cu's tensor-core attention, the default
 * (ZT_CUDA_ATTN_FWD and ZT_CUDA_ATTN_BWD unset or "mma"): the algorithm of the wmma kernels
 * (attn_tc_wmma.cuh) in FlashAttention-2's layout, the scores, the softmax, P and dS in
 * registers, tiles of 64 rows read by ldmatrix. Included once, by attn_tc_cuda.cu, after the
 * helpers it uses. */

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
 * the compiler the 246 it asks on sm_90, 8 warps an SM, where it is latency-bound and
 * slower than at 3 (docs/performance.md). With dQ by atomics (DQA) it stays at 2, where it
 * measured best. */
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
