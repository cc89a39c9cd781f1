/* zerotrain: the element-wise and row-wise GPT-2 ops on the CPU: embeddings, LayerNorm, GELU,
 * residual, fused softmax + cross-entropy. Rows are spread over OpenMP threads; inner loops are
 * written for gcc's auto-vectorizer (omp simd reductions, zt_v_expf instead of libm). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_int.h"
#include "vmath.h"

#define ZT_LN_EPS 1e-5f
#define ZT_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define ZT_GELU_C 0.044715f
/* exp argument cap in GELU: keeps 1/(1+e) a normal float (slow subnormals otherwise). */
#define ZT_GELU_ARG_MAX 80.0f

/* [lo, hi) of `n` items for thread `tid` of `nth`, cut at multiples of `align` items. */
static void split_range(size_t n, size_t align, int tid, int nth, size_t *lo, size_t *hi)
{
    size_t blocks = (n + align - 1) / align;
    size_t b0 = blocks * (size_t)tid / (size_t)nth;
    size_t b1 = blocks * (size_t)(tid + 1) / (size_t)nth;
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

/* ---------------------------------------------------------------------------------------- */
/* encoder */

void zt_cpu_encoder_forward(zt_kctx *ctx, float *out, const int32_t *inp, const float *wte,
                            const float *wpe, int B, int T, int C)
{
    size_t N = (size_t)B * (size_t)T;
    size_t Cs = (size_t)C;
    int nt = zt_cpu_threads_for(ctx, N * Cs);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t i = 0; i < N; i++) {
        float *restrict o = out + i * Cs;
        const float *restrict we = wte + (size_t)inp[i] * Cs; /* ids checked by the loader */
        const float *restrict pe = wpe + (i % (size_t)T) * Cs;
#pragma omp simd
        for (size_t c = 0; c < Cs; c++)
            o[c] = we[c] + pe[c];
    }
}

void zt_cpu_encoder_backward(zt_kctx *ctx, float *dwte, float *dwpe, const float *dout,
                             const int32_t *inp, int B, int T, int C)
{
    size_t Ts = (size_t)T, Cs = (size_t)C, Bs = (size_t)B;
    int nt = zt_cpu_threads_for(ctx, Bs * Ts * Cs);
    /* Threads own whole rows: token rows by token id modulo the thread count, position rows by
     * range, so rows that share a token never race and every access is a full contiguous row.
     * The op is tiny at GPT-2's shapes: neither this nor splitting columns gains from a second
     * thread. */
#pragma omp parallel num_threads(nt) if (parallel : nt > 1)
    {
        uint32_t tid = (uint32_t)omp_get_thread_num(), nth = (uint32_t)omp_get_num_threads();
        if (dwte) {
            for (size_t i = 0; i < Bs * Ts; i++) {
                if ((uint32_t)inp[i] % nth != tid) continue;
                float *restrict dw = dwte + (size_t)inp[i] * Cs;
                const float *restrict d = dout + i * Cs;
#pragma omp simd
                for (size_t c = 0; c < Cs; c++)
                    dw[c] += d[c];
            }
        }
        if (dwpe) {
            size_t t0, t1;
            split_range(Ts, 1, (int)tid, (int)nth, &t0, &t1);
            for (size_t t = t0; t < t1; t++) {
                float *restrict dp = dwpe + t * Cs;
                for (size_t b = 0; b < Bs; b++) {
                    const float *restrict d = dout + (b * Ts + t) * Cs;
#pragma omp simd
                    for (size_t c = 0; c < Cs; c++)
                        dp[c] += d[c];
                }
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* LayerNorm */

ZT_CPU_CLONES static void layernorm_forward_row(float *restrict o, float *m_out, float *rs_out,
                                                const float *restrict x,
                                                const float *restrict weight,
                                                const float *restrict bias, size_t Cs)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (size_t c = 0; c < Cs; c++)
        s += x[c];
    float m = s / (float)Cs;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (size_t c = 0; c < Cs; c++) {
        float d = x[c] - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(v / (float)Cs + ZT_LN_EPS);
#pragma omp simd
    for (size_t c = 0; c < Cs; c++)
        o[c] = fmaf((x[c] - m) * rs, weight[c], bias[c]);
    if (m_out) *m_out = m;
    if (rs_out) *rs_out = rs;
}

void zt_cpu_layernorm_forward(zt_kctx *ctx, float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C)
{
    size_t Cs = (size_t)C;
    int nt = zt_cpu_threads_for(ctx, (size_t)N * Cs);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (int i = 0; i < N; i++)
        layernorm_forward_row(out + (size_t)i * Cs, mean ? mean + i : NULL, rstd ? rstd + i : NULL,
                              inp + (size_t)i * Cs, weight, bias, Cs);
}

/* r = a + b for one row (r may alias a or b), then its LayerNorm: the row is still in L1 */
ZT_CPU_CLONES static void residual_layernorm_row(float *r, float *restrict o, float *m_out,
                                                 float *rs_out, const float *a, const float *b,
                                                 const float *restrict weight,
                                                 const float *restrict bias, size_t Cs)
{
#pragma omp simd
    for (size_t c = 0; c < Cs; c++)
        r[c] = a[c] + b[c];
    layernorm_forward_row(o, m_out, rs_out, r, weight, bias, Cs);
}

void zt_cpu_residual_layernorm_forward(zt_kctx *ctx, float *res, float *out, float *mean,
                                       float *rstd, const float *a, const float *b,
                                       const float *weight, const float *bias, int N, int C)
{
    size_t Cs = (size_t)C;
    int nt = zt_cpu_threads_for(ctx, (size_t)N * Cs);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * Cs;
        residual_layernorm_row(res + o, out + o, mean ? mean + i : NULL, rstd ? rstd + i : NULL,
                               a + o, b + o, weight, bias, Cs);
    }
}

/* Rows [r0, r1) of the LayerNorm backward. dinp, dw, db may each be NULL; dw and db are
 * accumulators for this range's parameter gradients. */
ZT_CPU_CLONES static void layernorm_backward_rows(float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *weight, const float *mean,
                                    const float *rstd, size_t r0, size_t r1, size_t C)
{
    float invC = 1.0f / (float)C;
    for (size_t i = r0; i < r1; i++) {
        const float *restrict x = inp + i * C;
        const float *restrict dy = dout + i * C;
        float m = mean[i], rs = rstd[i];
        if (dinp) {
            float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
            for (size_t c = 0; c < C; c++) {
                float dn = weight[c] * dy[c];
                a += dn;
                b += dn * ((x[c] - m) * rs);
            }
            a *= invC;
            b *= invC;
            float *restrict dx = dinp + i * C;
#pragma omp simd
            for (size_t c = 0; c < C; c++) {
                float n = (x[c] - m) * rs;
                dx[c] += (weight[c] * dy[c] - a - n * b) * rs;
            }
        }
        if (db) {
            float *restrict dbr = db;
#pragma omp simd
            for (size_t c = 0; c < C; c++)
                dbr[c] += dy[c];
        }
        if (dw) {
            float *restrict dwr = dw;
#pragma omp simd
            for (size_t c = 0; c < C; c++)
                dwr[c] = fmaf((x[c] - m) * rs, dy[c], dwr[c]);
        }
    }
}

/* Rows per block of parameter-gradient partial sums: short float sums stay accurate. */
#define ZT_LN_ROWS_PER_BLOCK 64

void zt_cpu_layernorm_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C)
{
    size_t Cs = (size_t)C, Ns = (size_t)N;
    int nt = zt_cpu_threads_for(ctx, Ns * Cs);
    size_t nblocks = (Ns + ZT_LN_ROWS_PER_BLOCK - 1) / ZT_LN_ROWS_PER_BLOCK;
    /* per thread: running sums (dw, db) and the current block's sums (dw, db) */
    float *part = (dweight || dbias) ? zt_cpu_scratch(ctx, (size_t)nt * 4 * Cs) : NULL;
    if (!part) {
        /* nothing to sum over rows, or no scratch: serial, straight into the outputs */
        layernorm_backward_rows(dinp, dweight, dbias, dout, inp, weight, mean, rstd, 0, Ns, Cs);
        return;
    }
#pragma omp parallel num_threads(nt) if (parallel : nt > 1)
    {
        int tid = omp_get_thread_num();
        size_t b0, b1;
        split_range(nblocks, 1, tid, omp_get_num_threads(), &b0, &b1);
        float *restrict acc = part + (size_t)tid * 4 * Cs; /* acc[0,C) dw, acc[C,2C) db */
        float *restrict blk = acc + 2 * Cs;
        memset(acc, 0, 2 * Cs * sizeof(float));
        for (size_t k = b0; k < b1; k++) {
            size_t r0 = k * ZT_LN_ROWS_PER_BLOCK;
            size_t r1 = r0 + ZT_LN_ROWS_PER_BLOCK < Ns ? r0 + ZT_LN_ROWS_PER_BLOCK : Ns;
            memset(blk, 0, 2 * Cs * sizeof(float));
            layernorm_backward_rows(dinp, blk, blk + Cs, dout, inp, weight, mean, rstd, r0, r1, Cs);
#pragma omp simd
            for (size_t c = 0; c < 2 * Cs; c++)
                acc[c] += blk[c];
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *acc = part + (size_t)t * 4 * Cs;
        if (dweight) {
#pragma omp simd
            for (size_t c = 0; c < Cs; c++)
                dweight[c] += acc[c];
        }
        if (dbias) {
#pragma omp simd
            for (size_t c = 0; c < Cs; c++)
                dbias[c] += acc[Cs + c];
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* GELU, tanh form. 0.5 (1 + tanh(u)) is the logistic function of 2u, so
 * gelu(x) = x / (1 + e) with e = exp(-2u): the same function without tanh's cancellation near
 * -1. With s = 1/(1+e) and 1 - s = e s (no cancellation either): d/dx = s + 2 x u'(x) s (1-s). */

static inline float gelu_e(float x)
{
    float u = ZT_GELU_K * (x + ZT_GELU_C * x * x * x);
    float arg = -2.0f * u;
    arg = arg > ZT_GELU_ARG_MAX ? ZT_GELU_ARG_MAX : arg;
    return zt_v_expf(arg);
}

/* Elements of one GELU work item (a clone call, see cpu_int.h). */
#define ZT_GELU_CHUNK 4096

ZT_CPU_CLONES static void gelu_forward_chunk(float *out, const float *inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = x / (1.0f + gelu_e(x));
    }
}

/* GELU'(x) */
static inline float gelu_grad(float x)
{
    float e = gelu_e(x);
    float s = 1.0f / (1.0f + e);
    float du = ZT_GELU_K * (1.0f + 3.0f * ZT_GELU_C * x * x);
    return s + 2.0f * x * du * ((s * e) * s);
}

ZT_CPU_CLONES static void gelu_backward_chunk(float *dinp, const float *inp, const float *dout,
                                              size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        dinp[i] = fmaf(gelu_grad(inp[i]), dout[i], dinp[i]);
}

/* d = GELU'(inp) d in place, bitwise gelu_backward_chunk into zeros */
ZT_CPU_CLONES static void gelu_grad_chunk(float *d, const float *inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        d[i] = fmaf(gelu_grad(inp[i]), d[i], 0.0f);
}

typedef enum { GELU_FWD, GELU_BWD, GELU_GRAD } gelu_kind;

/* The chunks of one GELU op over the context's threads: out = GELU(inp) (fwd),
 * out += GELU'(inp) dout (bwd), out = GELU'(inp) out (grad). */
static void gelu_run(zt_kctx *ctx, gelu_kind kind, float *out, const float *inp,
                     const float *dout, size_t n)
{
    int nt = zt_cpu_threads_for(ctx, n);
    size_t nc = (n + ZT_GELU_CHUNK - 1) / ZT_GELU_CHUNK;
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t off = c * ZT_GELU_CHUNK, len = n - off < ZT_GELU_CHUNK ? n - off : ZT_GELU_CHUNK;
        if (kind == GELU_FWD)
            gelu_forward_chunk(out + off, inp + off, len);
        else if (kind == GELU_BWD)
            gelu_backward_chunk(out + off, inp + off, dout + off, len);
        else
            gelu_grad_chunk(out + off, inp + off, len);
    }
}

void zt_cpu_gelu_forward(zt_kctx *ctx, float *out, const float *inp, size_t n)
{
    gelu_run(ctx, GELU_FWD, out, inp, NULL, n);
}

void zt_cpu_gelu_backward(zt_kctx *ctx, float *dinp, const float *inp, const float *dout, size_t n)
{
    if (dinp) gelu_run(ctx, GELU_BWD, dinp, inp, dout, n);
}

void zt_cpu_gelu_grad_inplace(zt_kctx *ctx, float *d, const float *inp, size_t n)
{
    gelu_run(ctx, GELU_GRAD, d, inp, NULL, n);
}

/* ---------------------------------------------------------------------------------------- */
/* residual */

void zt_cpu_residual_forward(zt_kctx *ctx, float *out, const float *a, const float *b, size_t n)
{
    int nt = zt_cpu_threads_for(ctx, n);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void zt_cpu_residual_backward(zt_kctx *ctx, float *da, float *db, const float *dout, size_t n)
{
    int nt = zt_cpu_threads_for(ctx, n);
    if (da && db) {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (parallel : nt > 1)
        for (size_t i = 0; i < n; i++) {
            da[i] += dout[i];
            db[i] += dout[i];
        }
    } else if (da || db) {
        float *d = da ? da : db;
#pragma omp parallel for simd num_threads(nt) schedule(static) if (parallel : nt > 1)
        for (size_t i = 0; i < n; i++)
            d[i] += dout[i];
    }
}

/* ---------------------------------------------------------------------------------------- */
/* softmax + cross-entropy */

/* One row; no restrict: dlogits may alias logits (every loop reads index j before writing it) */
ZT_CPU_CLONES static void crossentropy_row(float *loss, float *d, const float *l, int32_t t,
                                           size_t Vs, size_t Vps, float dloss)
{
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (size_t j = 0; j < Vs; j++)
        mx = l[j] > mx ? l[j] : mx;
    int valid = t >= 0 && (size_t)t < Vs;
    float lt = valid ? l[t] : NAN; /* a bad target gives a NaN loss, not a crash */
    float sum = 0.0f;
    if (d) {
#pragma omp simd reduction(+ : sum)
        for (size_t j = 0; j < Vs; j++) {
            float e = zt_v_expf(l[j] - mx);
            d[j] = e;
            sum += e;
        }
    } else {
#pragma omp simd reduction(+ : sum)
        for (size_t j = 0; j < Vs; j++)
            sum += zt_v_expf(l[j] - mx);
    }
    *loss = logf(sum) - (lt - mx);
    if (d) {
        float k = dloss / sum;
#pragma omp simd
        for (size_t j = 0; j < Vs; j++)
            d[j] *= k;
        if (valid) d[t] -= dloss;
        for (size_t j = Vs; j < Vps; j++)
            d[j] = 0.0f;
    }
}

void zt_cpu_crossentropy_forward_backward(zt_kctx *ctx, float *losses, float *dlogits,
                                          const float *logits, const int32_t *targets, int N, int V,
                                          int Vp, float dloss)
{
    size_t Vs = (size_t)V, Vps = (size_t)Vp;
    int nt = zt_cpu_threads_for(ctx, (size_t)N * Vs);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (int i = 0; i < N; i++)
        crossentropy_row(losses + i, dlogits ? dlogits + (size_t)i * Vps : NULL,
                         logits + (size_t)i * Vps, targets[i], Vs, Vps, dloss);
}
