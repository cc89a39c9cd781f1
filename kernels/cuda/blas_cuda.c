/* zerotrain: the CUDA ops built on the GEMM of blas_gemm.c: the linear layer (bias, and GELU for
 * the MLP's first layer, fused as epilogues or as the staging of their inputs), the classifier
 * with its loss, and causal self-attention, whose Q K^T, P V and gradients are strided-batched
 * GEMMs over the heads of one sequence on views of the (B, T, 3C) qkv tensor. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <string.h>

#include "blas_int.h"
#include "common/log.h"
#include "cuda_int.h"

static zt_cuda_gemm linear_gemm(float *out, const float *inp, const float *weight,
                                const float *bias, int N, int C, int OC)
{
    zt_cuda_gemm g;
    memset(&g, 0, sizeof(g));
    g.ta = 'N', g.tb = 'T', g.M = N, g.N = OC, g.K = C, g.alpha = 1.0f, g.beta = 0.0f;
    g.A = inp, g.lda = C, g.B = weight, g.ldb = C, g.C = out, g.ldc = OC, g.batch = 1;
    g.bias = bias;
    return g;
}

/* g with a residual input res (NULL: none) added as its C (ops.h's matmul16_forward) */
static zt_cuda_gemm with_res(zt_cuda_gemm g, const float *res)
{
    if (res) g.Cin = res, g.beta = 1.0f;
    return g;
}

/* The buffer of a linear layer's backward from one set of 16-bit copies (zt_cuda_stage_bwd_elems
 * for up to N rows, C inputs, OC outputs): the weight (OC x C) whole at *sw, rounded here, then
 * room for blocks of *mb rows of the output gradient (mb x OC) at *sd and of the inputs (mb x C)
 * at *si; *mb is N where that fits the cap whole, else the most rows that fit. false (nothing
 * queued) where staging is off or no block of ZT_CUDA_STAGE_MIN_BLOCK rows fits beside the
 * weight. */
static bool bwd_copies(zt_kctx *ctx, const float *weight, int N, int C, int OC, uint16_t **sw,
                       uint16_t **sd, uint16_t **si, int *mb)
{
    if (!zt_blas_stage_usable(ctx) || N <= 0 || C <= 0 || OC <= 0) return false;
    size_t w = zt_cuda_stage_pad((size_t)OC * (size_t)C);
    if (!zt_blas_stage_reserve(
            ctx, zt_cuda_stage_bwd_elems((size_t)N, (size_t)C, (size_t)OC, ctx->stage_max)) ||
        w + 128 >= ctx->stage_cap)
        return false;
    size_t whole = zt_cuda_stage_bwd_elems((size_t)N, (size_t)C, (size_t)OC, SIZE_MAX);
    *mb = whole <= ctx->stage_cap
              ? N
              : zt_blas_stage_fit(ctx->stage_cap - w - 128, (size_t)OC + (size_t)C, N);
    if (*mb <= 0) return false;
    *sw = ctx->stage;
    *sd = *sw + w;
    *si = *sd + zt_cuda_stage_pad((size_t)*mb * (size_t)OC);
    zt_blas_stage_block(ctx, *sw, weight, C, 'N', 0, OC, 0, C);
    return true;
}

/* A linear layer's two backward products from one set of 16-bit copies: the weight (OC x C)
 * whole, then dout and inp by blocks of mb token rows, each block giving its rows of dinp
 * (dinp += dout W; with pre, dinp = GELU'(pre) (dout W), the DGELU epilogue) and its share of
 * dweight (dweight += dout^T inp: blocks after the first add onto what the first wrote), so
 * that dout, the largest operand, is rounded once instead of once per product. With afn, inp's
 * values are afn's, rounded into its copy as they are computed (inp is only written, with them,
 * where a product falls back to the fp32 operands). With dbias, the
 * pass that rounds a block of dout also adds its column sums to dbias (zt_cuda_stage_cast_bias:
 * with one block, the bits of zt_cuda_bias_backward over all rows). The buffer:
 * zt_cuda_stage_bwd_elems. false (nothing queued, dbias untouched) where no block of at least
 * ZT_CUDA_STAGE_MIN_BLOCK rows fits beside the weight: the products go one by one.
 * With h (the MLP's 16-bit home, each tensor of the staging's type): dout16 is dout already
 * rounded, read in place (dbias from its values; dout is then fp32 room for them where a
 * product falls back); dinp16 receives dinp = GELU'(pre16) (dout W) rounded (the DGELU with a
 * 16-bit output, aux pre16; dinp is then fp32 room, and inp's rows hold pre16 widened where
 * that product falls back), or without pre16 dinp = dout W rounded (a 16-bit output; dinp
 * room). h->set: dinp is written (a GEMM with beta 0), not added to. */
typedef struct {
    void *dinp16;
    const void *pre16;
    const void *dout16;
    bool set; /* dinp written (dout W), not added */
} bwd16;

static bool backward_staged(zt_kctx *ctx, float *dinp, const float *pre, const zt_cuda_afn *afn,
                            const bwd16 *h, float *dweight, float *dbias, const float *dout,
                            float *inp, const float *weight, int N, int C, int OC)
{
    uint16_t *sw, *sd, *si;
    int mb;
    if (!dinp || !dweight || !bwd_copies(ctx, weight, N, C, OC, &sw, &sd, &si, &mb)) return false;
    const uint16_t *d16 = h ? h->dout16 : NULL;
    zt_dtype dt = zt_blas_mm_dtype(ctx->mm);
    for (int m0 = 0; m0 < N; m0 += mb) {
        int mn = N - m0 < mb ? N - m0 : mb;
        const uint16_t *sdb = sd; /* this block's copy of dout */
        if (d16) {
            sdb = d16 + (size_t)m0 * OC;
            if (dbias) zt_cuda_bias_backward16(ctx, dbias, sdb, ctx->mm, mn, OC);
        } else if (dbias) {
            zt_cuda_stage_cast_bias(ctx, sd, ctx->mm, dout + (size_t)m0 * OC, mn, OC, dbias);
        } else {
            zt_blas_stage_block(ctx, sd, dout, OC, 'N', m0, mn, 0, OC);
        }
        const uint16_t *sib = si;              /* this block's copy of inp */
        if (afn && afn->kind == ZT_AFN_HOME16) /* the staging's type already: read in place */
            sib = (const uint16_t *)afn->src16 + (size_t)m0 * C;
        else if (afn)
            zt_blas_afn_stage(ctx, si, afn, C, m0, mn, 0, C);
        else
            zt_blas_stage_block(ctx, si, inp, C, 'N', m0, mn, 0, C);
        /* dinp rows [m0, m0 + mn) (mn x C) += dout rows (mn x OC) @ weight (OC x C) */
        zt_cuda_gemm d;
        memset(&d, 0, sizeof(d));
        d.ta = 'N', d.tb = 'N', d.M = mn, d.N = C, d.K = OC, d.alpha = 1.0f;
        d.beta = pre || (h && (h->dinp16 || h->set)) ? 0.0f : 1.0f, d.batch = 1;
        d.A = dout + (size_t)m0 * OC, d.lda = OC, d.B = weight, d.ldb = C;
        d.C = dinp + (size_t)m0 * C, d.ldc = C;
        if (pre) d.aux = (float *)pre + (size_t)m0 * C, d.dgelu = 1;
        if (h && h->dinp16) {
            d.out16 = ctx->mm;
            d.C16 = (uint16_t *)h->dinp16 + (size_t)m0 * C;
            if (h->pre16) d.dgelu = 1, d.aux16 = (const uint16_t *)h->pre16 + (size_t)m0 * C;
        }
        /* dweight (OC x C) += dout rows^T (OC x mn) @ inp rows (mn x C) */
        zt_cuda_gemm g;
        memset(&g, 0, sizeof(g));
        g.ta = 'T', g.tb = 'N', g.M = OC, g.N = C, g.K = mn, g.alpha = 1.0f, g.beta = 1.0f;
        g.batch = 1, g.A = dout + (size_t)m0 * OC, g.lda = OC, g.B = inp + (size_t)m0 * C;
        g.ldb = C, g.C = dweight, g.ldc = C;
        zt_cuda_gemm parts[2] = {d, g};
        bool widened = false; /* d16: dout's rows in fp32 */
        for (int i = 0; i < 2; i++) {
            zt_cuda_gemm st = parts[i];
            st.in16 = ctx->mm;
            st.A = sdb, st.B = i == 0 ? (const void *)sw : (const void *)sib;
            if (zt_blas_gemm_lt(ctx, &st, false) == ZT_LT_NO_ALGO) {
                /* the fp32 operands' rows, now */
                if (d16 && !widened)
                    zt_cuda_cast(ctx, (float *)dout + (size_t)m0 * OC, (int)ZT_F32, sdb, (int)dt,
                                 (size_t)mn * (size_t)OC);
                widened = d16 != NULL;
                if (i == 1 && afn) zt_blas_afn_fp32(ctx, inp, afn, m0, mn, C);
                if (i == 0 && d.out16) {
                    /* the product in fp32 (with the DGELU on GELU's input widened into inp's
                     * rows, free until the second product), then rounded into dinp16 */
                    zt_cuda_gemm f = d;
                    size_t n = (size_t)mn * (size_t)C;
                    f.out16 = 0, f.C16 = NULL, f.aux16 = NULL;
                    if (d.dgelu) {
                        float *x = inp + (size_t)m0 * C;
                        zt_cuda_cast(ctx, x, (int)ZT_F32, d.aux16, (int)dt, n);
                        f.aux = x;
                    }
                    zt_blas_gemm_unstaged(ctx, &f);
                    zt_cuda_cast(ctx, d.C16, (int)dt, f.C, (int)ZT_F32, n);
                } else {
                    zt_blas_gemm_unstaged(ctx, &parts[i]);
                }
            }
            if (ctx->st != ZT_OK) return true;
        }
    }
    return true;
}

/* Whether dt is the 16-bit type ctx's matmuls take (and its staging and tensor-core attention
 * work in) */
static bool mm16_is(const zt_kctx *ctx, zt_dtype dt)
{
    return (ctx->mm == ZT_MM_BF16 && dt == ZT_BF16) || (ctx->mm == ZT_MM_FP16 && dt == ZT_F16);
}

/* The classifier (ops.h, classifier_forward_backward) through one set of 16-bit copies: wte
 * rounded once for all chunks; per chunk of mb rows, x's rows rounded once for the forward
 * product and dwte's, and the cross-entropy writing its dlogits rounded into the copy that dx's
 * and dwte's products read (zt_cuda_crossentropy16: the bits the staging of the fp32 dlogits
 * gives), so the largest tensor of the step is written once in 16 bits instead of written in
 * fp32, read and written again. The buffer is the one the lm head's backward takes
 * (bwd_copies with `rows`): chunks of `rows` where that fits whole (the products of the ops one
 * by one, on the same copies), else of the most rows that fit. A product cuBLASLt has no
 * algorithm for runs on the fp32 operands (a chunk's backward: on dlogits computed again in
 * fp32, in place). false (nothing queued) where staging is off or not fused
 * (ZT_CUDA_STAGE_FUSED=0), or no chunk of ZT_CUDA_STAGE_MIN_BLOCK rows fits beside wte: the ops
 * one by one. */
static bool classifier_staged(zt_kctx *ctx, zt_dtype dt16, float *losses, float *dx, float *dwte,
                              float *logits, const float *x, const float *wte,
                              const int32_t *targets, int N, int rows, int C, int V, int Vp,
                              float dloss)
{
    uint16_t *sw, *sd, *sx;
    int mb;
    if (!ctx->stage_fused || N <= 0 || !bwd_copies(ctx, wte, rows, C, Vp, &sw, &sd, &sx, &mb))
        return false;
    for (int r0 = 0; r0 < N; r0 += mb) {
        int m = N - r0 < mb ? N - r0 : mb;
        const float *xr = x + (size_t)r0 * C;
        zt_blas_stage_block(ctx, sx, xr, C, 'N', 0, m, 0, C);
        /* logits (m x Vp) = x rows (m x C) @ wte (Vp x C)^T; with dt16 a 16-bit D over the
         * buffer's start (l16), else, where cuBLASLt has no such product, fp32 then rounded */
        zt_cuda_gemm f = linear_gemm(logits, xr, wte, NULL, m, C, Vp), fs = f;
        fs.in16 = ctx->mm, fs.A = sx, fs.B = sw;
        uint16_t *l16 = NULL;
        if (dt16 != ZT_F32) fs.out16 = ctx->mm, fs.C16 = l16 = (uint16_t *)logits;
        if (zt_blas_gemm_lt(ctx, &fs, false) == ZT_LT_NO_ALGO) {
            l16 = NULL;
            zt_blas_gemm_unstaged(ctx, &f);
            if (dt16 != ZT_F32) zt_cuda_round16(ctx, logits, dt16, (size_t)m * (size_t)Vp);
        }
        if (ctx->st != ZT_OK) return true;
        if (!dx) {
            if (l16)
                zt_cuda_crossentropy16in(ctx, losses + r0, NULL, ctx->mm, l16, targets + r0, m, V,
                                         Vp, dloss);
            else
                zt_cuda_crossentropy(ctx, losses + r0, NULL, logits, targets + r0, m, V, Vp, dloss);
            continue;
        }
        /* dx rows (m x C) += dlogits (m x Vp) @ wte (Vp x C); dwte (Vp x C) += dlogits^T @ x
         * rows; A = logits where the products run on fp32 dlogits */
        zt_cuda_gemm d;
        memset(&d, 0, sizeof(d));
        d.ta = 'N', d.tb = 'N', d.M = m, d.N = C, d.K = Vp, d.alpha = 1.0f, d.beta = 1.0f;
        d.batch = 1, d.A = logits, d.lda = Vp, d.B = wte, d.ldb = C;
        d.C = dx + (size_t)r0 * C, d.ldc = C;
        zt_cuda_gemm g;
        memset(&g, 0, sizeof(g));
        g.ta = 'T', g.tb = 'N', g.M = Vp, g.N = C, g.K = m, g.alpha = 1.0f, g.beta = 1.0f;
        g.batch = 1, g.A = logits, g.lda = Vp, g.B = xr, g.ldb = C, g.C = dwte, g.ldc = C;
        zt_cuda_gemm ds = d, gs = g;
        ds.in16 = gs.in16 = ctx->mm;
        ds.A = gs.A = sd, ds.B = sw, gs.B = sx;
        if (l16)
            zt_cuda_crossentropy16in(ctx, losses + r0, sd, ctx->mm, l16, targets + r0, m, V, Vp,
                                     dloss);
        else
            zt_cuda_crossentropy16(ctx, losses + r0, sd, ctx->mm, logits, targets + r0, m, V, Vp,
                                   dloss);
        zt_lt_result rd = zt_blas_gemm_lt(ctx, &ds, false);
        zt_lt_result rg =
            dwte && rd != ZT_LT_NO_ALGO ? zt_blas_gemm_lt(ctx, &gs, false) : ZT_LT_DONE;
        if (ctx->st != ZT_OK) return true;
        if (rd == ZT_LT_NO_ALGO || rg == ZT_LT_NO_ALGO) {
            if (l16) { /* the fp32 logits again (the 16-bit ones sit where they would go) */
                zt_blas_gemm_unstaged(ctx, &f);
                zt_cuda_round16(ctx, logits, dt16, (size_t)m * (size_t)Vp);
            }
            zt_cuda_crossentropy(ctx, losses + r0, logits, logits, targets + r0, m, V, Vp, dloss);
            if (rd == ZT_LT_NO_ALGO) zt_blas_gemm_unstaged(ctx, &d);
            if (dwte) zt_blas_gemm_unstaged(ctx, &g);
            if (ctx->st != ZT_OK) return true;
        }
    }
    return true;
}

void zt_cuda_classifier(zt_kctx *ctx, float *losses, float *dx, float *dwte, float *logits,
                        const float *x, const float *wte, const int32_t *targets, int N, int rows,
                        int C, int V, int Vp, float dloss)
{
    if (classifier_staged(ctx, ZT_F32, losses, dx, dwte, logits, x, wte, targets, N, rows, C, V, Vp,
                          dloss))
        return;
    zt_classifier_by_ops(zt_ops_cuda(), ctx, losses, dx, dwte, logits, x, wte, targets, N, rows, C,
                         V, Vp, dloss);
}

/* With staged inputs of dt16 the GEMM writes 16-bit logits that the cross-entropy reads; else
 * the ops one by one with the logits rounded in place. */
void zt_cuda_classifier16(zt_kctx *ctx, zt_dtype dt16, float *losses, float *dx, float *dwte,
                          float *logits, const float *x, const float *wte, const int32_t *targets,
                          int N, int rows, int C, int V, int Vp, float dloss)
{
    if (mm16_is(ctx, dt16) && classifier_staged(ctx, dt16, losses, dx, dwte, logits, x, wte,
                                                targets, N, rows, C, V, Vp, dloss))
        return;
    zt_classifier16_by_ops(zt_ops_cuda(), ctx, dt16, losses, dx, dwte, logits, x, wte, targets, N,
                           rows, C, V, Vp, dloss);
}

/* Row-major C = alpha op(A) op(B) + beta C (+ bias), batched over `batch` matrices whose
 * starts are sA, sB, sC elements apart: the CPU backend's sgemm, on the context's stream. */
static void gemm(zt_kctx *ctx, char ta, char tb, int M, int N, int K, float alpha, const float *A,
                 int lda, long long sA, const float *B, int ldb, long long sB, float beta, float *C,
                 int ldc, long long sC, int batch, const float *bias)
{
    zt_cuda_gemm g;
    memset(&g, 0, sizeof(g));
    g.ta = ta, g.tb = tb, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
    g.A = A, g.lda = lda, g.sA = sA, g.B = B, g.ldb = ldb, g.sB = sB, g.C = C, g.ldc = ldc;
    g.sC = sC, g.batch = batch, g.bias = bias;
    zt_cuda_gemm_run(ctx, &g);
}

/* gemm on the fp32 operands as they are (the chunked attention's products: a plan counts
 * staging for the linear layers only, zt_gpt2_stage_elems) */
static void gemm_fp32(zt_kctx *ctx, char ta, char tb, int M, int N, int K, float alpha,
                      const float *A, int lda, long long sA, const float *B, int ldb, long long sB,
                      float beta, float *C, int ldc, long long sC, int batch)
{
    zt_cuda_gemm g;
    memset(&g, 0, sizeof(g));
    g.ta = ta, g.tb = tb, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
    g.A = A, g.lda = lda, g.sA = sA, g.B = B, g.ldb = ldb, g.sB = sB, g.C = C, g.ldc = ldc;
    g.sC = sC, g.batch = batch;
    zt_blas_gemm_unstaged(ctx, &g);
}

/* ---------------------------------------------------------------------------------------- */
/* linear layer */

void zt_cuda_matmul_forward(zt_kctx *ctx, float *out, const float *inp, const float *weight,
                            const float *bias, int N, int C, int OC)
{
    zt_cuda_gemm g = linear_gemm(out, inp, weight, bias, N, C, OC);
    zt_cuda_gemm_run(ctx, &g);
}

void zt_cuda_matmul_gelu_forward(zt_kctx *ctx, float *out, float *pre, const float *inp,
                                 const float *weight, const float *bias, int N, int C, int OC)
{
    zt_cuda_gemm g = linear_gemm(out, inp, weight, bias, N, C, OC);
    g.aux = pre;
    zt_cuda_gemm_run(ctx, &g);
}

void zt_cuda_matmul_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight, int N, int C,
                             int OC)
{
    /* inp is only read without afn */
    if (backward_staged(ctx, dinp, NULL, NULL, NULL, dweight, dbias, dout, (float *)inp, weight, N,
                        C, OC))
        return;
    /* dinp (N, C) += dout (N, OC) @ weight (OC, C) */
    if (dinp)
        gemm(ctx, 'N', 'N', N, C, OC, 1.0f, dout, OC, 0, weight, C, 0, 1.0f, dinp, C, 0, 1, NULL);
    /* dweight (OC, C) += dout^T (OC, N) @ inp (N, C) */
    if (dweight)
        gemm(ctx, 'T', 'N', OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dweight, C, 0, 1, NULL);
    if (dbias) zt_cuda_bias_backward(ctx, dbias, dout, N, OC);
}

void zt_cuda_matmul_gelu_backward(zt_kctx *ctx, float *dpre, float *dweight, float *dbias,
                                  const float *dout, float *inp, const float *weight,
                                  const float *pre, int N, int C, int OC)
{
    /* dpre (N, C) = GELU'(pre) * (dout (N, OC) @ weight (OC, C)): the DGELU epilogue reads
     * pre (its aux, never written with dgelu) */
    zt_cuda_afn f = {.kind = ZT_AFN_GELU, .src = pre};
    const zt_cuda_afn *fa = ctx->stage_fused ? &f : NULL; /* inp's copy from GELU(pre) */
    bool need = dweight && N > 0 && C > 0;
    if (need && !fa) zt_blas_afn_fp32(ctx, inp, &f, 0, N, C);
    if (backward_staged(ctx, dpre, pre, fa, NULL, dweight, dbias, dout, inp, weight, N, C, OC))
        return;
    if (need && fa) zt_blas_afn_fp32(ctx, inp, &f, 0, N, C);
    zt_cuda_gemm g;
    memset(&g, 0, sizeof(g));
    g.ta = 'N', g.tb = 'N', g.M = N, g.N = C, g.K = OC, g.alpha = 1.0f, g.beta = 0.0f;
    g.A = dout, g.lda = OC, g.B = weight, g.ldb = C, g.C = dpre, g.ldc = C, g.batch = 1;
    g.aux = (float *)pre, g.dgelu = 1;
    zt_cuda_gemm_run(ctx, &g);
    zt_cuda_matmul_backward(ctx, NULL, dweight, dbias, dout, inp, weight, N, C, OC);
}

/* out (N, OC) = A (N, C) @ weight (OC, C)^T + bias where A's values are f's: matmul_forward's
 * product with A in the caller's scratch `act`, its copy rounded from f where staged (and
 * fused), act written with them otherwise; res (N, OC, or NULL) added as the GEMM's C */
static void linear_from(zt_kctx *ctx, float *out, float *act, const zt_cuda_afn *f,
                        const float *weight, const float *bias, const float *res, int N, int C,
                        int OC)
{
    zt_cuda_gemm g = with_res(linear_gemm(out, act, weight, bias, N, C, OC), res);
    g.afn = f;
    if (ctx->stage_fused && zt_blas_gemm_staged(ctx, &g)) return;
    if (N > 0 && C > 0) zt_blas_afn_fp32(ctx, act, f, 0, N, C);
    g.afn = NULL;
    zt_cuda_gemm_run(ctx, &g);
}

void zt_cuda_gelu_matmul_forward(zt_kctx *ctx, float *out, float *act, const float *pre,
                                 const float *weight, const float *bias, int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_GELU, .src = pre};
    linear_from(ctx, out, act, &f, weight, bias, NULL, N, C, OC);
}

/* Whether a 16-bit input of type dt16 is the staging's own type: matmuls staged in it, with
 * fused copies */
static bool in16_stageable(const zt_kctx *ctx, zt_dtype dt16)
{
    return ctx->stage_fused && mm16_is(ctx, dt16);
}

void zt_cuda_matmul16_forward(zt_kctx *ctx, float *out, float *act, const void *in16, zt_dtype dt16,
                              const float *weight, const float *bias, const float *res, int N,
                              int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_HOME16, .src16 = in16, .dtype = (int)dt16};
    if (in16_stageable(ctx, dt16)) {
        linear_from(ctx, out, act, &f, weight, bias, res, N, C, OC);
        return;
    }
    if (N > 0 && C > 0) zt_blas_afn_fp32(ctx, act, &f, 0, N, C);
    zt_cuda_gemm g = with_res(linear_gemm(out, act, weight, bias, N, C, OC), res);
    zt_cuda_gemm_run(ctx, &g);
}

/* n floats of a gradient cleared for a fallback that adds into it, in an op that writes it
 * (what: which gradient); false where that failed (ctx's error set) */
static bool grad_clear(zt_kctx *ctx, float *g, size_t n, const char *what)
{
    return !g || !n ||
           !zt_cuda_check(ctx, cudaMemsetAsync(g, 0, n * sizeof(float), ctx->stream), what);
}

/* dinp (N x C): a linear layer's input gradient */
static void dinp_clear(zt_kctx *ctx, float *dinp, int N, int C)
{
    if (N > 0 && C > 0)
        grad_clear(ctx, dinp, (size_t)N * (size_t)C, "clearing a linear layer's input gradient");
}

void zt_cuda_matmul16_backward(zt_kctx *ctx, float *dinp, void *dinp16, float *dweight,
                               float *dbias, const float *dout, float *act, const void *in16,
                               zt_dtype dt16, const float *weight, int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_HOME16, .src16 = in16, .dtype = (int)dt16};
    bwd16 h = {.dinp16 = dinp16, .set = true};
    if (in16_stageable(ctx, dt16) &&
        backward_staged(ctx, dinp, NULL, &f, &h, dweight, dbias, dout, act, weight, N, C, OC))
        return;
    if (dweight && N > 0 && C > 0) zt_blas_afn_fp32(ctx, act, &f, 0, N, C);
    dinp_clear(ctx, dinp, N, C);
    zt_cuda_matmul_backward(ctx, dinp, dweight, dbias, dout, act, weight, N, C, OC);
    if (dinp16 && dinp && N > 0 && C > 0)
        zt_cuda_cast(ctx, dinp16, (int)dt16, dinp, (int)ZT_F32, (size_t)N * (size_t)C);
}

/* The MLP with its 16-bit home (ops.h): fc's output rounded by the GEMM itself (a 16-bit D),
 * GELU of it rounded into fcproj's copy, the DGELU with the home as its input writing the
 * gradient rounded, which fc's backward then reads in place as its dout copy. Where the home is
 * not the staging's type, or staging is off or unfused: the fp32 ops on the widened values,
 * rounded where the op's output is 16-bit. */
void zt_cuda_matmul_forward16(zt_kctx *ctx, void *out16, zt_dtype dt16, float *act,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C, int OC)
{
    if (in16_stageable(ctx, dt16)) {
        zt_cuda_gemm g = linear_gemm(act, inp, weight, bias, N, C, OC);
        g.out16 = ctx->mm, g.C16 = out16;
        if (zt_blas_gemm_staged(ctx, &g)) return;
    }
    zt_cuda_matmul_forward(ctx, act, inp, weight, bias, N, C, OC);
    if (N > 0 && OC > 0)
        zt_cuda_cast(ctx, out16, (int)dt16, act, (int)ZT_F32, (size_t)N * (size_t)OC);
}

void zt_cuda_gelu16_matmul_forward(zt_kctx *ctx, float *out, float *act, const void *pre16,
                                   zt_dtype dt16, const float *weight, const float *bias,
                                   const float *res, int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_GELU16, .src16 = pre16, .dtype = (int)dt16};
    linear_from(ctx, out, act, &f, weight, bias, res, N, C, OC);
}

void zt_cuda_matmul_gelu16_backward(zt_kctx *ctx, void *dpre16, float *dweight, float *dbias,
                                    const float *dout, float *act, float *dact, const float *weight,
                                    const void *pre16, zt_dtype dt16, int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_GELU16, .src16 = pre16, .dtype = (int)dt16};
    bwd16 h = {.dinp16 = dpre16, .pre16 = pre16};
    if (in16_stageable(ctx, dt16) &&
        backward_staged(ctx, dact, NULL, &f, &h, dweight, dbias, dout, act, weight, N, C, OC))
        return;
    if (N <= 0 || C <= 0) return;
    size_t n = (size_t)N * (size_t)C;
    /* act = pre; dact = GELU'(pre) (dout W), rounded into dpre16; act = GELU(pre) in place for
     * the weight's gradient */
    zt_cuda_cast(ctx, act, (int)ZT_F32, pre16, (int)dt16, n);
    zt_cuda_matmul_gelu_backward(ctx, dact, NULL, NULL, dout, NULL, weight, act, N, C, OC);
    zt_cuda_cast(ctx, dpre16, (int)dt16, dact, (int)ZT_F32, n);
    if (!dweight && !dbias) return;
    zt_cuda_gelu_forward(ctx, act, act, n);
    zt_cuda_matmul_backward(ctx, NULL, dweight, dbias, dout, act, weight, N, C, OC);
}

void zt_cuda_layernorm_matmul16_backward(zt_kctx *ctx, float *dinp, void *dinp16, float *dweight,
                                         float *dbias, const void *dout16, zt_dtype dt16,
                                         float *dact, float *ln, const float *x, const float *lnw,
                                         const float *lnb, const float *weight, int N, int C,
                                         int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_LAYERNORM, .src = x, .w = lnw, .b = lnb};
    bwd16 h = {.dout16 = dout16, .dinp16 = dinp16, .set = true};
    if (in16_stageable(ctx, dt16) &&
        backward_staged(ctx, dinp, NULL, &f, &h, dweight, dbias, dact, ln, weight, N, C, OC))
        return;
    dinp_clear(ctx, dinp, N, C);
    if (N > 0 && OC > 0)
        zt_cuda_cast(ctx, dact, (int)ZT_F32, dout16, (int)dt16, (size_t)N * (size_t)OC);
    zt_cuda_layernorm_matmul_backward(ctx, dinp, dweight, dbias, dact, ln, x, lnw, lnb, weight, N,
                                      C, OC);
    if (dinp16 && dinp && N > 0 && C > 0)
        zt_cuda_cast(ctx, dinp16, (int)dt16, dinp, (int)ZT_F32, (size_t)N * (size_t)C);
}

void zt_cuda_layernorm_matmul_forward(zt_kctx *ctx, float *out, float *ln, float *mean, float *rstd,
                                      const float *x, const float *lnw, const float *lnb,
                                      const float *weight, const float *bias, int N, int C, int OC)
{
    zt_cuda_afn f = {
        .kind = ZT_AFN_LAYERNORM, .src = x, .w = lnw, .b = lnb, .mean = mean, .rstd = rstd};
    linear_from(ctx, out, ln, &f, weight, bias, NULL, N, C, OC);
}

/* qkv's 16-bit home written by the GEMM itself, as matmul_forward16's */
void zt_cuda_layernorm_matmul_forward16(zt_kctx *ctx, void *out16, zt_dtype dt16, float *out,
                                        float *ln, float *mean, float *rstd, const float *x,
                                        const float *lnw, const float *lnb, const float *weight,
                                        const float *bias, int N, int C, int OC)
{
    zt_cuda_afn f = {
        .kind = ZT_AFN_LAYERNORM, .src = x, .w = lnw, .b = lnb, .mean = mean, .rstd = rstd};
    if (in16_stageable(ctx, dt16)) {
        zt_cuda_gemm g = linear_gemm(out, ln, weight, bias, N, C, OC);
        g.afn = &f, g.out16 = ctx->mm, g.C16 = out16;
        if (zt_blas_gemm_staged(ctx, &g)) return;
    }
    zt_cuda_layernorm_matmul_forward(ctx, out, ln, mean, rstd, x, lnw, lnb, weight, bias, N, C, OC);
    if (N > 0 && OC > 0)
        zt_cuda_cast(ctx, out16, (int)dt16, out, (int)ZT_F32, (size_t)N * (size_t)OC);
}

void zt_cuda_layernorm_matmul_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                       const float *dout, float *ln, const float *x,
                                       const float *lnw, const float *lnb, const float *weight,
                                       int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_LAYERNORM, .src = x, .w = lnw, .b = lnb};
    if (ctx->stage_fused &&
        backward_staged(ctx, dinp, NULL, &f, NULL, dweight, dbias, dout, ln, weight, N, C, OC))
        return;
    if (dweight && N > 0 && C > 0) zt_blas_afn_fp32(ctx, ln, &f, 0, N, C);
    zt_cuda_matmul_backward(ctx, dinp, dweight, dbias, dout, ln, weight, N, C, OC);
}

/* ---------------------------------------------------------------------------------------- */
/* attention. For sequence b, head h: Q, K, V are T x hs views of qkv (row stride 3C, head h at
 * column h*hs); the scores and their gradients are T x T per (b, h) in the scratch. One
 * strided-batched GEMM covers the NH heads of a sequence (head stride hs in qkv and out, T*T in
 * the scratch). attn_cuda.cu's fused kernels run instead where zt_cuda_attn_fused says (by
 * default for 16-bit matmul inputs; ZT_CUDA_ATTN chooses). Sequences go through in chunks of
 * zt_attention_chunk_seqs: region S of the scratch holds a chunk's scores (then
 * probabilities), region D their gradients. The full T x T products are computed and the row
 * kernels zero the causal upper triangle, so the following GEMMs may run over whole rows. */

/* S = scale Q K^T for sequences [b0, b1), sequence b at S + (b - b0) NH T T: the scores forward
 * computes and backward recomputes, by the same calls. */
static void attn_scores(zt_kctx *ctx, float *S, const float *qkv, int b0, int b1, int T, int C,
                        int NH)
{
    int hs = C / NH, C3 = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = b0; b < b1; b++) {
        const float *q = qkv + (size_t)b * T * C3;
        gemm_fp32(ctx, 'N', 'T', T, T, hs, scale, q, C3, hs, q + C, C3, hs, 0.0f,
                  S + (size_t)(b - b0) * NH * TT, T, TT, NH);
    }
}

static void attn_chunked_forward(zt_kctx *ctx, float *out, float *lse, float *scratch,
                                 const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    int chunk = zt_attention_chunk_seqs(B, T, NH);
    long long TT = (long long)T * T;
    size_t seq = (size_t)NH * (size_t)TT; /* scratch floats per sequence and region */
    float *S = scratch;
    for (int b0 = 0; b0 < B; b0 += chunk) {
        int b1 = B - b0 < chunk ? B : b0 + chunk;
        attn_scores(ctx, S, qkv, b0, b1, T, C, NH);
        zt_cuda_attn_softmax(ctx, S, lse + (size_t)b0 * NH * T, (size_t)(b1 - b0) * NH * T, T);
        for (int b = b0; b < b1; b++) { /* out = P V */
            const float *q = qkv + (size_t)b * T * C3;
            gemm_fp32(ctx, 'N', 'N', T, hs, T, 1.0f, S + (size_t)(b - b0) * seq, T, TT, q + 2 * C,
                      C3, hs, 0.0f, out + (size_t)b * T * C, C, hs, NH);
        }
    }
}

static void attn_chunked_backward(zt_kctx *ctx, float *dqkv, float *scratch, const float *dout,
                                  const float *qkv, const float *out, const float *lse, int B,
                                  int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    int chunk = zt_attention_chunk_seqs(B, T, NH);
    long long TT = (long long)T * T;
    size_t seq = (size_t)NH * (size_t)TT;
    float scale = 1.0f / sqrtf((float)hs);
    float *S = scratch, *D = scratch + (size_t)chunk * seq;
    for (int b0 = 0; b0 < B; b0 += chunk) {
        int b1 = B - b0 < chunk ? B : b0 + chunk;
        size_t rows = (size_t)(b1 - b0) * NH * T;
        attn_scores(ctx, S, qkv, b0, b1, T, C, NH); /* as the forward computed them */
        /* P = exp(S - lse), zero above the diagonal */
        zt_cuda_attn_probs(ctx, S, lse + (size_t)b0 * NH * T, rows, T);
        for (int b = b0; b < b1; b++) {
            const float *q = qkv + (size_t)b * T * C3;
            float *dq = dqkv + (size_t)b * T * C3;
            const float *dO = dout + (size_t)b * T * C;
            /* dP = dO V^T */
            gemm_fp32(ctx, 'N', 'T', T, T, hs, 1.0f, dO, C, hs, q + 2 * C, C3, hs, 0.0f,
                      D + (size_t)(b - b0) * seq, T, TT, NH);
            /* dV += P^T dO */
            gemm_fp32(ctx, 'T', 'N', T, hs, T, 1.0f, S + (size_t)(b - b0) * seq, T, TT, dO, C, hs,
                      1.0f, dq + 2 * C, C3, hs, NH);
        }
        /* dS = P * (dP - dO.out) * scale, zero above the diagonal */
        zt_cuda_attn_dscores(ctx, D, S, dout + (size_t)b0 * T * C, out + (size_t)b0 * T * C, rows,
                             T, NH, C, scale);
        for (int b = b0; b < b1; b++) {
            const float *q = qkv + (size_t)b * T * C3;
            float *dq = dqkv + (size_t)b * T * C3;
            const float *dS = D + (size_t)(b - b0) * seq;
            /* dQ += dS K */
            gemm_fp32(ctx, 'N', 'N', T, hs, T, 1.0f, dS, T, TT, q + C, C3, hs, 1.0f, dq, C3, hs,
                      NH);
            /* dK += dS^T Q */
            gemm_fp32(ctx, 'T', 'N', T, hs, T, 1.0f, dS, T, TT, q, C3, hs, 1.0f, dq + C, C3, hs,
                      NH);
        }
    }
}

/* Whether the attention takes the 16-bit homes (NULL: none) as its own copies: the
 * tensor-core kernels run, their 16-bit type is the homes', and the homes are 16-byte aligned
 * as the kernels' vector copies need (the engine's are; elsewhere the homes are cast). */
static bool attn_home_direct(const zt_kctx *ctx, int B, int T, int C, int NH,
                             const zt_attn_home *home)
{
    return home && zt_cuda_attn_fused(ctx, B, T, C, NH) && mm16_is(ctx, home->dtype) &&
           ((uintptr_t)home->qkv % 16 | (uintptr_t)home->out % 16) == 0;
}

void zt_cuda_attention_forward(zt_kctx *ctx, float *out, float *lse, float *scratch, float *qkv,
                               const zt_attn_home *home, int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    size_t n = (size_t)B * T * C;
    bool direct = attn_home_direct(ctx, B, T, C, NH, home);
    bool set = home && home->qkv && home->qkv_set; /* qkv is read from its home */
    if (set && !direct)                            /* the fp32 values, for kernels that read them */
        zt_cuda_cast(ctx, qkv, (int)ZT_F32, home->qkv, (int)home->dtype, 3 * n);
    else if (home && home->qkv && !direct)
        zt_cuda_cast(ctx, home->qkv, (int)home->dtype, qkv, (int)ZT_F32, 3 * n);
    if (zt_cuda_attn_fused(ctx, B, T, C, NH))
        zt_cuda_attn_fused_forward(ctx, out, lse, scratch, zt_attention_scratch_floats(B, T, NH),
                                   set && direct ? NULL : qkv,
                                   direct ? (uint16_t *)home->qkv : NULL,
                                   direct ? (uint16_t *)home->out : NULL, B, T, C, NH);
    else
        attn_chunked_forward(ctx, out, lse, scratch, qkv, B, T, C, NH);
    if (home && home->out && !direct)
        zt_cuda_cast(ctx, home->out, (int)home->dtype, out, (int)ZT_F32, n);
}

/* attention_backward, or with dq16 (NULL: none) attention_backward16 by the tensor-core
 * kernels writing the rounded gradient there themselves; with dout16 (NULL: none) those
 * kernels read dO there (the caller has seen that they run, in its type, on aligned rows) */
static void attention_backward(zt_kctx *ctx, float *dqkv, uint16_t *dq16, float *scratch,
                               const float *dout, const uint16_t *dout16, float *qkv, float *out,
                               const float *lse, const zt_attn_home *home, int B, int T, int C,
                               int NH)
{
    size_t n = (size_t)B * T * C;
    bool direct = attn_home_direct(ctx, B, T, C, NH, home);
    /* the fp32 values, for kernels that read them */
    if (home && home->qkv && !direct)
        zt_cuda_cast(ctx, qkv, (int)ZT_F32, home->qkv, (int)home->dtype, 3 * n);
    if (home && home->out && !direct)
        zt_cuda_cast(ctx, out, (int)ZT_F32, home->out, (int)home->dtype, n);
    if (zt_cuda_attn_fused(ctx, B, T, C, NH))
        zt_cuda_attn_fused_backward(ctx, dqkv, dq16, scratch, zt_attention_scratch_floats(B, T, NH),
                                    dout, dout16, qkv, direct ? (const uint16_t *)home->qkv : NULL,
                                    out, direct ? (const uint16_t *)home->out : NULL, lse, B, T, C,
                                    NH);
    else
        attn_chunked_backward(ctx, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH);
}

void zt_cuda_attention_backward(zt_kctx *ctx, float *dqkv, float *scratch, const float *dout,
                                float *qkv, float *out, const float *lse, const zt_attn_home *home,
                                int B, int T, int C, int NH)
{
    if (!dqkv || B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    attention_backward(ctx, dqkv, NULL, scratch, dout, NULL, qkv, out, lse, home, B, T, C, NH);
}

/* The tensor-core kernels write the rounded gradient themselves where they run in dt16, dQ by
 * its own kernel (the others sum dQ in fp32 first) and dqkv16 is 4-byte aligned (their paired
 * stores); elsewhere the fp32 gradient from zeros in the room, then the cast. They read dout16
 * in place where they run in its type and it is 16-byte aligned (their vector copies); else it
 * is widened into dout first. Where cuDNN runs the attention (by default) and can take the homes,
 * the 16-bit gradient is offered to it whatever ZT_CUDA_ATTN_DQ says (atomic: its graph that sums
 * dQ by atomics; where it declines, the kernels with dQ by its own kernel). */
void zt_cuda_attention_backward16(zt_kctx *ctx, void *dqkv16, zt_dtype dt16, float *dqkv,
                                  float *scratch, float *dout, const void *dout16, float *qkv,
                                  float *out, const float *lse, const zt_attn_home *home, int B,
                                  int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    bool tc = zt_cuda_attn_fused(ctx, B, T, C, NH) && mm16_is(ctx, dt16);
    const uint16_t *d16 = tc && dout16 && (uintptr_t)dout16 % 16 == 0 ? dout16 : NULL;
    if (dout16 && !d16)
        zt_cuda_cast(ctx, dout, (int)ZT_F32, dout16, (int)dt16, (size_t)B * T * (size_t)C);
    bool dnn = ctx->attn_cudnn && d16 && attn_home_direct(ctx, B, T, C, NH, home);
    if (tc && (ctx->attn_dq == ZT_ATTN_DQ_KERNEL || dnn) && (uintptr_t)dqkv16 % 4 == 0) {
        attention_backward(ctx, dqkv, dqkv16, scratch, dout, d16, qkv, out, lse, home, B, T, C, NH);
        return;
    }
    size_t n3 = (size_t)B * T * 3 * (size_t)C;
    if (!grad_clear(ctx, dqkv, n3, "clearing the attention's gradient")) return;
    attention_backward(ctx, dqkv, NULL, scratch, dout, d16, qkv, out, lse, home, B, T, C, NH);
    zt_cuda_cast(ctx, dqkv16, (int)dt16, dqkv, (int)ZT_F32, n3);
}
