/* zerotrain: the CPU ops built on oneDNN's dnnl_sgemm: the linear layer (forward, backward)
 * and causal self-attention, whose Q K^T, P V and their gradients are sgemms on strided views
 * of the (B, T, 3C) qkv tensor. Causal blocks above the diagonal are never computed. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdatomic.h>
#include <string.h>

#include "common/log.h"
#include "cpu_int.h"
#include "vmath.h"

/* Failed sgemm calls since the last sync (zt_cpu_take_sgemm_failures); any thread may add. */
static _Atomic long sgemm_failures;
static _Atomic int sgemm_first_status;

long zt_cpu_take_sgemm_failures(int *first_status)
{
    long n = atomic_exchange(&sgemm_failures, 0);
    *first_status = atomic_load(&sgemm_first_status);
    return n;
}

/* Row-major C = alpha op(A) op(B) + beta C through oneDNN. oneDNN runs it on the OpenMP
 * threads of the calling thread, or on this thread alone inside a parallel region. A failure
 * is logged once and counted: the next sync of the context fails the step. */
static void sgemm(char ta, char tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                  size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (M == 0 || N == 0 || (K == 0 && beta == 1.0f)) return;
    dnnl_status_t st = dnnl_sgemm(ta, tb, (dnnl_dim_t)M, (dnnl_dim_t)N, (dnnl_dim_t)K, alpha, A,
                                  (dnnl_dim_t)lda, B, (dnnl_dim_t)ldb, beta, C, (dnnl_dim_t)ldc);
    if (st != dnnl_success && atomic_fetch_add(&sgemm_failures, 1) == 0) {
        atomic_store(&sgemm_first_status, (int)st);
        ZT_ERROR(
            "kernels",
            "dnnl_sgemm(%c, %c, M=%zu, N=%zu, K=%zu, lda=%zu, ldb=%zu, ldc=%zu) failed with oneDNN status %d; the step fails",
            ta, tb, M, N, K, lda, ldb, ldc, (int)st);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* linear layer */

void zt_cpu_matmul_forward(zt_kctx *ctx, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int C, int OC)
{
    size_t Ns = (size_t)N, OCs = (size_t)OC;
    float beta = 0.0f;
    if (bias) {
        /* start from the bias and let sgemm add onto it: one pass fewer than adding after */
        int nt = zt_cpu_threads_for(ctx, Ns * OCs);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
        for (size_t i = 0; i < Ns; i++)
            memcpy(out + i * OCs, bias, OCs * sizeof(float));
        beta = 1.0f;
    }
    sgemm('N', 'T', Ns, OCs, (size_t)C, 1.0f, inp, (size_t)C, weight, (size_t)C, beta, out, OCs);
}

/* Column block of the bias gradient: dbias[c0,c1) += sum over rows of dout[:, c0:c1), summed in
 * blocks of rows so that float rounding stays near that of a pairwise sum. */
#define ZT_COLSUM_COLS 256
#define ZT_COLSUM_ROWS 64

ZT_CPU_CLONES static void colsum_block(float *dbias, const float *dout, size_t N, size_t OC,
                                       size_t c0, size_t c1)
{
    float acc[ZT_COLSUM_COLS], blk[ZT_COLSUM_COLS];
    for (size_t cb = c0; cb < c1; cb += ZT_COLSUM_COLS) {
        size_t w = c1 - cb < ZT_COLSUM_COLS ? c1 - cb : ZT_COLSUM_COLS;
        memset(acc, 0, w * sizeof(float));
        for (size_t r0 = 0; r0 < N; r0 += ZT_COLSUM_ROWS) {
            size_t r1 = r0 + ZT_COLSUM_ROWS < N ? r0 + ZT_COLSUM_ROWS : N;
            memset(blk, 0, w * sizeof(float));
            for (size_t r = r0; r < r1; r++) {
                const float *restrict d = dout + r * OC + cb;
#pragma omp simd
                for (size_t c = 0; c < w; c++)
                    blk[c] += d[c];
            }
#pragma omp simd
            for (size_t c = 0; c < w; c++)
                acc[c] += blk[c];
        }
        float *restrict db = dbias + cb;
#pragma omp simd
        for (size_t c = 0; c < w; c++)
            db[c] += acc[c];
    }
}

void zt_cpu_matmul_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int N, int C,
                            int OC)
{
    size_t Ns = (size_t)N, Cs = (size_t)C, OCs = (size_t)OC;
    if (dinp) /* dinp += dout W */
        sgemm('N', 'N', Ns, Cs, OCs, 1.0f, dout, OCs, weight, Cs, 1.0f, dinp, Cs);
    if (dweight) /* dW += dout^T inp */
        sgemm('T', 'N', OCs, Cs, Ns, 1.0f, dout, OCs, inp, Cs, 1.0f, dweight, Cs);
    if (dbias) {
        int nt = zt_cpu_threads_for(ctx, Ns * OCs);
        if ((size_t)nt * 64 > OCs) nt = 1;
#pragma omp parallel num_threads(nt) if (parallel : nt > 1)
        {
            /* threads own column ranges (multiples of 16 floats) */
            int tid = omp_get_thread_num(), nth = omp_get_num_threads();
            size_t blocks = (OCs + 15) / 16;
            size_t c0 = blocks * (size_t)tid / (size_t)nth * 16;
            size_t c1 = blocks * (size_t)(tid + 1) / (size_t)nth * 16;
            c0 = c0 < OCs ? c0 : OCs;
            c1 = c1 < OCs ? c1 : OCs;
            colsum_block(dbias, dout, Ns, OCs, c0, c1);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* attention. For one (b, h): Q, K, V are T x hs views of qkv with row stride 3C. Rows are
 * processed in blocks [i0, i1); a block only needs keys 0..i1-1, so the causal upper triangle
 * costs at most one diagonal block per row block. A block's scores and their gradients live in
 * two bs x T matrices of the thread's part of the scratch; nothing T x T is kept: forward
 * saves each row's log-sum-exp and backward recomputes the probabilities from it. */

typedef struct attn_shape {
    size_t T, C, C3, hs, NH, bs;
    float scale;
} attn_shape;

static attn_shape attn_shape_of(const zt_kctx *ctx, int T, int C, int NH)
{
    attn_shape sh = {.T = (size_t)T,
                     .C = (size_t)C,
                     .C3 = 3 * (size_t)C,
                     .hs = (size_t)(C / NH),
                     .NH = (size_t)NH,
                     .bs = (size_t)ctx->attn_block};
    if (sh.bs > sh.T) sh.bs = sh.T;
    sh.scale = 1.0f / sqrtf((float)sh.hs);
    return sh;
}

/* Threads that work on (b, h) pairs side by side: each needs 2 bs T floats of the scratch,
 * which holds at least NH of them (zt_attention_scratch_floats). */
static int attn_threads(const zt_kctx *ctx, const attn_shape *sh, size_t pairs, size_t scratch)
{
    if (ctx->attn_mode != ZT_CPU_ATTN_OUTER || pairs < 2) return 1;
    size_t fit = scratch / (2 * sh->bs * sh->T);
    size_t nt = (size_t)ctx->nthreads;
    nt = nt < pairs ? nt : pairs;
    nt = nt < fit ? nt : fit;
    return nt > 1 ? (int)nt : 1;
}

/* Row i of S (keys 0..i of n) to its causal softmax in place, returning the row's log-sum-exp;
 * zeros for j in (i, n). */
ZT_CPU_CLONES static float causal_softmax_row(float *restrict s, size_t i, size_t n)
{
    size_t k = i + 1;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (size_t j = 0; j < k; j++)
        mx = s[j] > mx ? s[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (size_t j = 0; j < k; j++) {
        float e = zt_v_expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (size_t j = 0; j < k; j++)
        s[j] *= inv;
    if (k < n) memset(s + k, 0, (n - k) * sizeof(float));
    return mx + logf(sum);
}

/* Row i of S back to probabilities exp(s - lse), zeros for j in (i, n). */
ZT_CPU_CLONES static void causal_probs_row(float *restrict s, float lse, size_t i, size_t n)
{
    size_t k = i + 1;
#pragma omp simd
    for (size_t j = 0; j < k; j++)
        s[j] = zt_v_expf(s[j] - lse);
    if (k < n) memset(s + k, 0, (n - k) * sizeof(float));
}

/* dP row to dS = P (dP - delta) scale, delta = dO_i . O_i; zeros for j in (i, n). */
ZT_CPU_CLONES static void causal_dscores_row(float *restrict d, const float *restrict p,
                                             const float *restrict dO, const float *restrict O,
                                             size_t hs, float scale, size_t i, size_t n)
{
    float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
    for (size_t c = 0; c < hs; c++)
        delta += dO[c] * O[c];
    size_t k = i + 1;
#pragma omp simd
    for (size_t j = 0; j < k; j++)
        d[j] = p[j] * (d[j] - delta) * scale;
    if (k < n) memset(d + k, 0, (n - k) * sizeof(float));
}

static void attn_forward_pair(const attn_shape *sh, float *out, float *lse, float *work,
                              const float *qkv, size_t b, size_t h)
{
    size_t T = sh->T, C = sh->C, C3 = sh->C3, hs = sh->hs;
    const float *q = qkv + b * T * C3 + h * hs;
    const float *k = q + C;
    const float *v = q + 2 * C;
    float *o = out + b * T * C + h * hs;
    float *l = lse + (b * sh->NH + h) * T;
    for (size_t i0 = 0; i0 < T; i0 += sh->bs) {
        size_t i1 = i0 + sh->bs < T ? i0 + sh->bs : T;
        size_t m = i1 - i0;
        /* P = softmax(scale Q K^T) for rows [i0, i1), keys [0, i1) */
        sgemm('N', 'T', m, i1, hs, sh->scale, q + i0 * C3, C3, k, C3, 0.0f, work, T);
        for (size_t i = i0; i < i1; i++)
            l[i] = causal_softmax_row(work + (i - i0) * T, i, i1);
        /* out = P V */
        sgemm('N', 'N', m, hs, i1, 1.0f, work, T, v, C3, 0.0f, o + i0 * C, C);
    }
}

void zt_cpu_attention_forward(zt_kctx *ctx, float *out, float *lse, float *scratch, float *qkv,
                              const zt_attn_home *home, int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    size_t n = (size_t)B * T * C;
    if (home && home->qkv && home->qkv_set)
        zt_cpu_cast(ctx, qkv, ZT_F32, home->qkv, home->dtype, 3 * n);
    else if (home && home->qkv)
        zt_cpu_cast(ctx, home->qkv, home->dtype, qkv, ZT_F32, 3 * n);
    attn_shape sh = attn_shape_of(ctx, T, C, NH);
    size_t pairs = (size_t)B * sh.NH, part = 2 * sh.bs * sh.T;
    int nt = attn_threads(ctx, &sh, pairs, zt_attention_scratch_floats(B, T, NH));
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (parallel : nt > 1)
    for (size_t p = 0; p < pairs; p++)
        attn_forward_pair(&sh, out, lse, scratch + (size_t)omp_get_thread_num() * part, qkv,
                          p / sh.NH, p % sh.NH);
    if (home && home->out) zt_cpu_cast(ctx, home->out, home->dtype, out, ZT_F32, n);
}

static void attn_backward_pair(const attn_shape *sh, float *dqkv, float *work, const float *dout,
                               const float *qkv, const float *out, const float *lse, size_t b,
                               size_t h)
{
    size_t T = sh->T, C = sh->C, C3 = sh->C3, hs = sh->hs;
    const float *q = qkv + b * T * C3 + h * hs;
    const float *k = q + C;
    const float *v = q + 2 * C;
    float *dq = dqkv + b * T * C3 + h * hs;
    float *dk = dq + C;
    float *dv = dq + 2 * C;
    const float *dO = dout + b * T * C + h * hs;
    const float *O = out + b * T * C + h * hs;
    const float *l = lse + (b * sh->NH + h) * T;
    float *P = work, *D = work + sh->bs * T;
    for (size_t i0 = 0; i0 < T; i0 += sh->bs) {
        size_t i1 = i0 + sh->bs < T ? i0 + sh->bs : T;
        size_t m = i1 - i0;
        /* P = exp(scale Q K^T - lse), recomputed */
        sgemm('N', 'T', m, i1, hs, sh->scale, q + i0 * C3, C3, k, C3, 0.0f, P, T);
        for (size_t i = i0; i < i1; i++)
            causal_probs_row(P + (i - i0) * T, l[i], i, i1);
        /* dP = dO V^T */
        sgemm('N', 'T', m, i1, hs, 1.0f, dO + i0 * C, C, v, C3, 0.0f, D, T);
        /* dV[0:i1] += P^T dO (P is zero above the diagonal) */
        sgemm('T', 'N', i1, hs, m, 1.0f, P, T, dO + i0 * C, C, 1.0f, dv, C3);
        for (size_t i = i0; i < i1; i++)
            causal_dscores_row(D + (i - i0) * T, P + (i - i0) * T, dO + i * C, O + i * C, hs,
                               sh->scale, i, i1);
        /* dQ += dS K ; dK[0:i1] += dS^T Q */
        sgemm('N', 'N', m, hs, i1, 1.0f, D, T, k, C3, 1.0f, dq + i0 * C3, C3);
        sgemm('T', 'N', i1, hs, m, 1.0f, D, T, q + i0 * C3, C3, 1.0f, dk, C3);
    }
}

void zt_cpu_attention_backward(zt_kctx *ctx, float *dqkv, float *scratch, const float *dout,
                               float *qkv, float *out, const float *lse, const zt_attn_home *home,
                               int B, int T, int C, int NH)
{
    if (!dqkv || B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    size_t n = (size_t)B * T * C;
    if (home && home->qkv) zt_cpu_cast(ctx, qkv, ZT_F32, home->qkv, home->dtype, 3 * n);
    if (home && home->out) zt_cpu_cast(ctx, out, ZT_F32, home->out, home->dtype, n);
    attn_shape sh = attn_shape_of(ctx, T, C, NH);
    size_t pairs = (size_t)B * sh.NH, part = 2 * sh.bs * sh.T;
    int nt = attn_threads(ctx, &sh, pairs, zt_attention_scratch_floats(B, T, NH));
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (parallel : nt > 1)
    for (size_t p = 0; p < pairs; p++)
        attn_backward_pair(&sh, dqkv, scratch + (size_t)omp_get_thread_num() * part, dout, qkv, out,
                           lse, p / sh.NH, p % sh.NH);
}
