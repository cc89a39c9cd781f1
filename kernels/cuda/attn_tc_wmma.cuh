/* zerotrain: the wmma generation of attn_tc_cuda.cu's tensor-core attention
 * (ZT_CUDA_ATTN_FWD=wmma, ZT_CUDA_ATTN_BWD=wmma): the forward, the dK dV and the dQ kernels on
 * the warp matrix functions (mma.h, 16 x 16 x 16, fp32 accumulators). Included once, by
 * attn_tc_cuda.cu, after the helpers it uses.
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
 * the dQ kernel runs. */

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
