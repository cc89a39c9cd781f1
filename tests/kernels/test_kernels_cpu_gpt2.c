/* zerotrain tests: the CPU GPT-2 ops (kernels/cpu) forward and backward against plain
 * double-precision references written here llm.c-style, with finite-difference checks of each
 * backward on the reference and on the op itself. Runs under OMP_NUM_THREADS=1 and 2; every
 * check runs once with the default parallel threshold and once with threading forced. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/cpu_int.h"
#include "kernels/ops.h"
#include "tests/kernels/kcheck.h"
#include "tests/kernels/optimes_check.h"

static const zt_ops *OPS;
static zt_kctx *CTX;

/* Tolerances (relative to |want| + rms(want)) of float ops against double references. */
#define RT_EXACT 1e-6
#define RT_FWD 1e-5
#define RT_BWD 3e-5
/* finite differences: on the double reference, and directly on the float op */
#define FD_H_REF 1e-5
#define FD_RT_REF 1e-5
#define FD_H_OP 1e-2f
#define FD_RT_OP 2e-2
#define FD_SAMPLES 24

static void prefill(float *g, double *gd, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)kc_normal();
        gd[i] = g[i];
    }
}

/* ======================================================================================== */
/* encoder */

static void ref_encoder_forward(double *out, const int32_t *inp, const double *wte,
                                const double *wpe, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[((size_t)b * T + t) * C + c] =
                    wte[(size_t)inp[b * T + t] * C + c] + wpe[(size_t)t * C + c];
}

static void ref_encoder_backward(double *dwte, double *dwpe, const double *dout, const int32_t *inp,
                                 int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double d = dout[((size_t)b * T + t) * C + c];
                dwte[(size_t)inp[b * T + t] * C + c] += d;
                dwpe[(size_t)t * C + c] += d;
            }
}

typedef struct {
    int B, T, C;
    const int32_t *inp;
    double *wte_d, *wpe_d, *out_d;
    float *wte, *wpe, *out;
    const double *w;
} enc_state;

static double enc_loss_ref(void *p)
{
    enc_state *s = p;
    ref_encoder_forward(s->out_d, s->inp, s->wte_d, s->wpe_d, s->B, s->T, s->C);
    return kc_dot_dd(s->out_d, s->w, (size_t)s->B * s->T * s->C);
}

static double enc_loss_op(void *p)
{
    enc_state *s = p;
    OPS->encoder_forward(CTX, s->out, s->inp, s->wte, s->wpe, s->B, s->T, s->C);
    return kc_dot_fd(s->out, s->w, (size_t)s->B * s->T * s->C);
}

static void test_encoder(int B, int T, int C, int Vp)
{
    size_t N = (size_t)B * T, NC = N * C, VC = (size_t)Vp * C, TC = (size_t)T * C;
    int32_t *inp = zt_calloc(N, sizeof(int32_t));
    for (size_t i = 0; i < N; i++) /* few distinct tokens: many rows hit the same wte row */
        inp[i] = (int32_t)kc_index((size_t)(Vp < 5 ? Vp : 5));
    inp[N - 1] = Vp - 1;
    float *wte = kc_frandn(VC, 1.0), *wpe = kc_frandn(TC, 1.0), *out = kc_falloc(NC);
    double *wte_d = kc_widen(wte, VC), *wpe_d = kc_widen(wpe, TC), *out_d = kc_dalloc(NC);

    OPS->encoder_forward(CTX, out, inp, wte, wpe, B, T, C);
    ref_encoder_forward(out_d, inp, wte_d, wpe_d, B, T, C);
    kc_check_close("encoder_forward out", out, out_d, NC, RT_EXACT, 0);

    float *dout = kc_frandn(NC, 1.0);
    double *dout_d = kc_widen(dout, NC);
    float *dwte = kc_falloc(VC), *dwpe = kc_falloc(TC);
    double *dwte_d = kc_dalloc(VC), *dwpe_d = kc_dalloc(TC);
    prefill(dwte, dwte_d, VC);
    prefill(dwpe, dwpe_d, TC);
    OPS->encoder_backward(CTX, dwte, dwpe, dout, inp, B, T, C);
    ref_encoder_backward(dwte_d, dwpe_d, dout_d, inp, B, T, C);
    kc_check_close("encoder_backward dwte (accumulated)", dwte, dwte_d, VC, RT_FWD, 0);
    kc_check_close("encoder_backward dwpe (accumulated)", dwpe, dwpe_d, TC, RT_FWD, 0);

    /* NULL outputs are skipped, the other one still accumulates */
    float *dwpe2 = kc_falloc(TC);
    double *dwpe2_d = kc_dalloc(TC), *scratch_d = kc_dalloc(VC);
    prefill(dwpe2, dwpe2_d, TC);
    OPS->encoder_backward(CTX, NULL, dwpe2, dout, inp, B, T, C);
    ref_encoder_backward(scratch_d, dwpe2_d, dout_d, inp, B, T, C);
    kc_check_close("encoder_backward dwpe with dwte NULL", dwpe2, dwpe2_d, TC, RT_FWD, 0);
    OPS->encoder_backward(CTX, NULL, NULL, dout, inp, B, T, C);

    /* finite differences of L = sum(dout * out) */
    enc_state st = {B, T, C, inp, wte_d, wpe_d, out_d, wte, wpe, out, dout_d};
    double *g_wte = kc_dalloc(VC), *g_wpe = kc_dalloc(TC);
    ref_encoder_backward(g_wte, g_wpe, dout_d, inp, B, T, C);
    kc_fd_check_d("encoder ref dwte", enc_loss_ref, &st, wte_d, g_wte, VC, FD_SAMPLES, FD_H_REF,
                  FD_RT_REF);
    kc_fd_check_d("encoder ref dwpe", enc_loss_ref, &st, wpe_d, g_wpe, TC, FD_SAMPLES, FD_H_REF,
                  FD_RT_REF);
    float *gf_wte = kc_falloc(VC), *gf_wpe = kc_falloc(TC);
    memset(gf_wte, 0, VC * sizeof(float));
    memset(gf_wpe, 0, TC * sizeof(float));
    OPS->encoder_backward(CTX, gf_wte, gf_wpe, dout, inp, B, T, C);
    kc_fd_check_f("encoder op dwte", enc_loss_op, &st, wte, gf_wte, VC, FD_SAMPLES, FD_H_OP,
                  FD_RT_OP);
    kc_fd_check_f("encoder op dwpe", enc_loss_op, &st, wpe, gf_wpe, TC, FD_SAMPLES, FD_H_OP,
                  FD_RT_OP);

    zt_free(inp), zt_free(wte), zt_free(wpe), zt_free(out), zt_free(wte_d), zt_free(wpe_d);
    zt_free(out_d), zt_free(dout), zt_free(dout_d), zt_free(dwte), zt_free(dwpe);
    zt_free(dwte_d), zt_free(dwpe_d), zt_free(dwpe2), zt_free(dwpe2_d), zt_free(scratch_d);
    zt_free(g_wte), zt_free(g_wpe), zt_free(gf_wte), zt_free(gf_wpe);
}

/* ======================================================================================== */
/* LayerNorm */

static void ref_layernorm_forward(double *out, double *mean, double *rstd, const double *inp,
                                  const double *w, const double *b, int N, int C)
{
    for (int i = 0; i < N; i++) {
        const double *x = inp + (size_t)i * C;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (x[c] - m) * (x[c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++)
            out[(size_t)i * C + c] = (x[c] - m) * s * w[c] + b[c];
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = s;
    }
}

static void ref_layernorm_backward(double *dinp, double *dw, double *db, const double *dout,
                                   const double *inp, const double *w, int N, int C)
{
    for (int i = 0; i < N; i++) {
        const double *x = inp + (size_t)i * C;
        const double *dy = dout + (size_t)i * C;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (x[c] - m) * (x[c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + 1e-5);
        double a = 0.0, bb = 0.0;
        for (int c = 0; c < C; c++) {
            double n = (x[c] - m) * s;
            a += w[c] * dy[c];
            bb += w[c] * dy[c] * n;
        }
        a /= C;
        bb /= C;
        for (int c = 0; c < C; c++) {
            double n = (x[c] - m) * s;
            dinp[(size_t)i * C + c] += (w[c] * dy[c] - a - n * bb) * s;
            dw[c] += n * dy[c];
            db[c] += dy[c];
        }
    }
}

typedef struct {
    int N, C;
    double *inp_d, *w_d, *b_d, *out_d;
    float *inp, *w, *b, *out, *mean, *rstd;
    const double *wt;
} ln_state;

static double ln_loss_ref(void *p)
{
    ln_state *s = p;
    ref_layernorm_forward(s->out_d, NULL, NULL, s->inp_d, s->w_d, s->b_d, s->N, s->C);
    return kc_dot_dd(s->out_d, s->wt, (size_t)s->N * s->C);
}

static double ln_loss_op(void *p)
{
    ln_state *s = p;
    OPS->layernorm_forward(CTX, s->out, s->mean, s->rstd, s->inp, s->w, s->b, s->N, s->C);
    return kc_dot_fd(s->out, s->wt, (size_t)s->N * s->C);
}

/* The MLP's first layer with its GELU is bitwise matmul_forward then gelu_forward, with and
 * without a bias. */
static void test_matmul_gelu(int N, int C, int OC)
{
    size_t NO = (size_t)N * OC;
    float *x = kc_frandn((size_t)N * C, 1.0), *w = kc_frandn((size_t)OC * C, 0.3);
    float *bias = kc_frandn((size_t)OC, 1.0);
    float *pre = kc_falloc(NO), *out = kc_falloc(NO), *pre2 = kc_falloc(NO), *out2 = kc_falloc(NO);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const float *b = with_bias ? bias : NULL;
        OPS->matmul_forward(CTX, pre, x, w, b, N, C, OC);
        OPS->gelu_forward(CTX, out, pre, NO);
        memset(out2, 0xff, NO * 4); /* NaN everywhere the op must write */
        memset(pre2, 0xff, NO * 4);
        OPS->matmul_gelu_forward(CTX, out2, pre2, x, w, b, N, C, OC);
        ASSERT_TRUE(memcmp(pre, pre2, NO * 4) == 0);
        ASSERT_TRUE(memcmp(out, out2, NO * 4) == 0);
    }
    zt_free(x), zt_free(w), zt_free(bias), zt_free(pre), zt_free(out), zt_free(pre2);
    zt_free(out2);
    printf("matmul_gelu_forward N=%d C=%d OC=%d: bitwise the two ops\n", N, C, OC);
}

/* A matmul from a LayerNorm's input is bitwise layernorm_forward then matmul_forward (the
 * statistics too), and its backward layernorm_forward then matmul_backward, onto prefilled
 * gradients; the scratch given as NaN. */
static void test_layernorm_matmul(int N, int C, int OC)
{
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, WC = (size_t)OC * C;
    float *x = kc_frandn(NC, 1.0), *lnw = kc_frandn((size_t)C, 1.0);
    float *lnb = kc_frandn((size_t)C, 0.5), *w = kc_frandn(WC, 0.3);
    float *bias = kc_frandn((size_t)OC, 1.0), *dy = kc_frandn(NO, 1.0);
    float *ln = kc_falloc(NC), *ln2 = kc_falloc(NC), *out = kc_falloc(NO), *out2 = kc_falloc(NO);
    float *st = kc_falloc(4 * (size_t)N), *dx = kc_frandn(NC, 1.0), *dw = kc_frandn(WC, 1.0);
    float *db = kc_frandn((size_t)OC, 1.0), *dx2 = kc_fcopy(dx, NC), *dw2 = kc_fcopy(dw, WC);
    float *db2 = kc_fcopy(db, (size_t)OC);
    OPS->layernorm_forward(CTX, ln, st, st + N, x, lnw, lnb, N, C);
    OPS->matmul_forward(CTX, out, ln, w, bias, N, C, OC);
    memset(ln2, 0xff, NC * 4); /* NaN: nothing of it is read */
    OPS->layernorm_matmul_forward(CTX, out2, ln2, st + 2 * N, st + 3 * N, x, lnw, lnb, w, bias, N,
                                  C, OC);
    ASSERT_TRUE(memcmp(out, out2, NO * 4) == 0);
    ASSERT_TRUE(memcmp(st, st + 2 * N, 2 * (size_t)N * 4) == 0);
    OPS->matmul_backward(CTX, dx, dw, db, dy, ln, w, N, C, OC);
    memset(ln2, 0xff, NC * 4);
    OPS->layernorm_matmul_backward(CTX, dx2, dw2, db2, dy, ln2, x, lnw, lnb, w, N, C, OC);
    ASSERT_TRUE(memcmp(dx, dx2, NC * 4) == 0);
    ASSERT_TRUE(memcmp(dw, dw2, WC * 4) == 0);
    ASSERT_TRUE(memcmp(db, db2, (size_t)OC * 4) == 0);
    zt_free(x), zt_free(lnw), zt_free(lnb), zt_free(w), zt_free(bias), zt_free(dy), zt_free(ln);
    zt_free(ln2), zt_free(out), zt_free(out2), zt_free(st), zt_free(dx), zt_free(dw), zt_free(db);
    zt_free(dx2), zt_free(dw2), zt_free(db2);
    printf("layernorm_matmul N=%d C=%d OC=%d: bitwise the two ops\n", N, C, OC);
}

/* The MLP's second layer from GELU's input is bitwise gelu_forward then matmul_forward, with
 * and without a bias; GELU's output goes to the scratch it is given. */
static void test_gelu_matmul(int N, int C, int OC)
{
    size_t NC = (size_t)N * C, NO = (size_t)N * OC;
    float *pre = kc_frandn(NC, 2.0), *w = kc_frandn((size_t)OC * C, 0.3);
    float *bias = kc_frandn((size_t)OC, 1.0), *act = kc_falloc(NC), *act2 = kc_falloc(NC);
    float *out = kc_falloc(NO), *out2 = kc_falloc(NO);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const float *b = with_bias ? bias : NULL;
        OPS->gelu_forward(CTX, act, pre, NC);
        OPS->matmul_forward(CTX, out, act, w, b, N, C, OC);
        memset(out2, 0xff, NO * 4); /* NaN everywhere the op must write */
        memset(act2, 0xff, NC * 4);
        OPS->gelu_matmul_forward(CTX, out2, act2, pre, w, b, N, C, OC);
        ASSERT_TRUE(memcmp(out, out2, NO * 4) == 0);
    }
    zt_free(pre), zt_free(w), zt_free(bias), zt_free(act), zt_free(act2), zt_free(out);
    zt_free(out2);
    printf("gelu_matmul_forward N=%d C=%d OC=%d: bitwise the two ops\n", N, C, OC);
}

/* A linear layer of a 16-bit input (matmul16_forward and _backward) is bitwise cast into the
 * scratch it is given (NaN here) then matmul_forward or matmul_backward, bf16 and fp16, with
 * and without a bias, and with a residual input then residual_forward; NULL dweight and dbias
 * are skipped. */
static void test_matmul16(int N, int C, int OC)
{
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, WC = (size_t)OC * C;
    float *x = kc_frandn(NC, 1.0), *w = kc_frandn(WC, 0.3), *bias = kc_frandn((size_t)OC, 1.0);
    float *dout = kc_frandn(NO, 1.0), *act = kc_falloc(NC), *act2 = kc_falloc(NC);
    float *out = kc_falloc(NO), *out2 = kc_falloc(NO), *dx = kc_falloc(NC), *dx2 = kc_falloc(NC);
    float *dw = kc_falloc(WC), *dw2 = kc_falloc(WC), *db = kc_falloc((size_t)OC);
    float *db2 = kc_falloc((size_t)OC), *res = kc_frandn(NO, 1.0);
    uint16_t *x16 = zt_malloc(NC * 2 + 2), *r16 = zt_malloc(NC * 2 + 2),
             *h16 = zt_malloc(NC * 2 + 2);
    ASSERT_TRUE(x16 && r16 && h16);
    static const zt_dtype types[] = {ZT_BF16, ZT_F16};
    for (int ti = 0; ti < 2; ti++) {
        OPS->cast(CTX, x16, types[ti], x, ZT_F32, NC);
        OPS->cast(CTX, act, ZT_F32, x16, types[ti], NC);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *b = with_bias ? bias : NULL;
            OPS->matmul_forward(CTX, out, act, w, b, N, C, OC);
            memset(out2, 0xff, NO * 4);
            memset(act2, 0xff, NC * 4);
            OPS->matmul16_forward(CTX, out2, act2, x16, types[ti], w, b, NULL, N, C, OC);
            ASSERT_TRUE(memcmp(out, out2, NO * 4) == 0);
            OPS->residual_forward(CTX, out, res, out, NO);
            memset(out2, 0xff, NO * 4);
            memset(act2, 0xff, NC * 4);
            OPS->matmul16_forward(CTX, out2, act2, x16, types[ti], w, b, res, N, C, OC);
            ASSERT_TRUE(memcmp(out, out2, NO * 4) == 0);
        }
        /* dx written (NaN before), dw and db accumulated */
        memset(dx, 0, NC * 4), memset(dw, 0, WC * 4), memset(db, 0, (size_t)OC * 4);
        memset(dx2, 0xff, NC * 4), memset(dw2, 0, WC * 4), memset(db2, 0, (size_t)OC * 4);
        memset(act2, 0xff, NC * 4);
        OPS->matmul_backward(CTX, dx, dw, db, dout, act, w, N, C, OC);
        OPS->matmul16_backward(CTX, dx2, NULL, dw2, db2, dout, act2, x16, types[ti], w, N, C, OC);
        ASSERT_TRUE(memcmp(dx, dx2, NC * 4) == 0 && memcmp(dw, dw2, WC * 4) == 0 &&
                    memcmp(db, db2, (size_t)OC * 4) == 0);
        memset(dx2, 0xff, NC * 4);
        memset(act2, 0xff, NC * 4);
        OPS->matmul16_backward(CTX, dx2, NULL, NULL, NULL, dout, act2, x16, types[ti], w, N, C, OC);
        ASSERT_TRUE(memcmp(dx, dx2, NC * 4) == 0);
        /* dx written rounded (dinp16 over NaN, dx room): the cast of the fp32 dx */
        OPS->cast(CTX, r16, types[ti], dx, ZT_F32, NC);
        memset(h16, 0xff, NC * 2), memset(dx2, 0xff, NC * 4);
        OPS->matmul16_backward(CTX, dx2, h16, NULL, NULL, dout, act2, x16, types[ti], w, N, C, OC);
        ASSERT_TRUE(memcmp(r16, h16, NC * 2) == 0);
    }
    zt_free(x), zt_free(w), zt_free(bias), zt_free(dout), zt_free(act), zt_free(act2);
    zt_free(out), zt_free(out2), zt_free(dx), zt_free(dx2), zt_free(dw), zt_free(dw2);
    zt_free(db), zt_free(db2), zt_free(x16), zt_free(r16), zt_free(h16), zt_free(res);
    printf("matmul16 N=%d C=%d OC=%d: bitwise cast then the ops\n", N, C, OC);
}

/* The MLP's ops with its 16-bit home (fch) are bitwise the casts and the fp32 ops: fc's output
 * rounded (matmul_forward16, and from a LayerNorm as qkv's: layernorm_matmul_forward16), fcproj of
 * GELU of the home (gelu16_matmul_forward, and with a residual input: then residual_forward),
 * fcproj's backward through GELU' of the home with the
 * gradient rounded (matmul_gelu16_backward; NULL dweight and dbias skipped), fc's backward from the
 * rounded gradient (layernorm_matmul16_backward, its input's gradient written over NaN, and
 * written rounded: dinp16), LayerNorm's backward of that rounded gradient (layernorm_backward16);
 * the rooms given as NaN, the weights' gradients accumulated onto prefilled values. N x C inputs,
 * H the MLP's width. */
static void test_mlp16(int N, int C, int H)
{
    size_t NC = (size_t)N * C, NH = (size_t)N * H, WH = (size_t)H * C;
    float *x = kc_frandn(NC, 1.0), *w1 = kc_frandn(WH, 0.3), *b1 = kc_frandn((size_t)H, 1.0);
    float *w2 = kc_frandn(WH, 0.3), *b2 = kc_frandn((size_t)C, 1.0), *dy = kc_frandn(NC, 1.0);
    float *lnw = kc_frandn((size_t)C, 1.0), *lnb = kc_frandn((size_t)C, 0.5);
    float *pre = kc_falloc(NH), *r1 = kc_falloc(NH), *r2 = kc_falloc(NH), *r3 = kc_falloc(NH);
    float *o1 = kc_falloc(NC), *o2 = kc_falloc(NC), *dw1 = kc_frandn(WH, 1.0);
    float *dw2 = kc_falloc(WH), *db1 = kc_frandn((size_t)C, 1.0), *db2 = kc_falloc((size_t)C);
    float *dx1 = kc_frandn(NC, 1.0), *dx2 = kc_falloc(NC), *ln = kc_falloc(NC);
    float *dbh1 = kc_frandn((size_t)H, 1.0), *dbh2 = kc_falloc((size_t)H);
    uint16_t *p16 = zt_malloc(NH * 2), *q16 = zt_malloc(NH * 2), *d16 = zt_malloc(NH * 2);
    uint16_t *e16 = zt_malloc(NH * 2), *g16 = zt_malloc(NC * 2), *h16 = zt_malloc(NC * 2);
    float *gw1 = kc_frandn((size_t)C, 1.0), *gw2 = kc_falloc((size_t)C);
    float *gb1 = kc_frandn((size_t)C, 1.0), *gb2 = kc_falloc((size_t)C);
    float *m1 = kc_falloc((size_t)N), *s1 = kc_falloc((size_t)N), *m2 = kc_falloc((size_t)N);
    float *s2 = kc_falloc((size_t)N);
    ASSERT_TRUE(p16 && q16 && d16 && e16 && g16 && h16);
    static const zt_dtype types[] = {ZT_BF16, ZT_F16};
    for (int ti = 0; ti < 2; ti++) {
        zt_dtype dt = types[ti];
        /* the same layer's output from a LayerNorm, rounded (qkv's home) */
        OPS->layernorm_matmul_forward(CTX, pre, ln, m1, s1, x, lnw, lnb, w1, b1, N, C, H);
        OPS->cast(CTX, p16, dt, pre, ZT_F32, NH);
        memset(r1, 0xff, NH * 4), memset(ln, 0xff, NC * 4);
        OPS->layernorm_matmul_forward16(CTX, q16, dt, r1, ln, m2, s2, x, lnw, lnb, w1, b1, N, C, H);
        ASSERT_TRUE(memcmp(p16, q16, NH * 2) == 0 && memcmp(m1, m2, (size_t)N * 4) == 0 &&
                    memcmp(s1, s2, (size_t)N * 4) == 0);
        /* forward: fc into the home, then fcproj of GELU of it */
        OPS->matmul_forward(CTX, pre, x, w1, b1, N, C, H);
        OPS->cast(CTX, p16, dt, pre, ZT_F32, NH);
        memset(r1, 0xff, NH * 4);
        OPS->matmul_forward16(CTX, q16, dt, r1, x, w1, b1, N, C, H);
        ASSERT_TRUE(memcmp(p16, q16, NH * 2) == 0);
        OPS->cast(CTX, pre, ZT_F32, p16, dt, NH);
        OPS->gelu_matmul_forward(CTX, o1, r2, pre, w2, b2, N, H, C);
        memset(r1, 0xff, NH * 4);
        OPS->gelu16_matmul_forward(CTX, o2, r1, p16, dt, w2, b2, NULL, N, H, C);
        ASSERT_TRUE(memcmp(o1, o2, NC * 4) == 0);
        OPS->residual_forward(CTX, o1, dy, o1, NC); /* dy: any residual */
        memset(r1, 0xff, NH * 4), memset(o2, 0xff, NC * 4);
        OPS->gelu16_matmul_forward(CTX, o2, r1, p16, dt, w2, b2, dy, N, H, C);
        ASSERT_TRUE(memcmp(o1, o2, NC * 4) == 0);
        /* fcproj's backward: dpre rounded, dweight and dbias accumulated */
        memcpy(dw2, dw1, WH * 4), memcpy(db2, db1, (size_t)C * 4);
        OPS->matmul_gelu_backward(CTX, r3, dw1, db1, dy, r2, w2, pre, N, H, C);
        OPS->cast(CTX, d16, dt, r3, ZT_F32, NH);
        memset(r1, 0xff, NH * 4), memset(r2, 0xff, NH * 4), memset(e16, 0xff, NH * 2);
        OPS->matmul_gelu16_backward(CTX, e16, dw2, db2, dy, r1, r2, w2, p16, dt, N, H, C);
        ASSERT_TRUE(memcmp(d16, e16, NH * 2) == 0 && memcmp(dw1, dw2, WH * 4) == 0 &&
                    memcmp(db1, db2, (size_t)C * 4) == 0);
        memset(e16, 0xff, NH * 2);
        OPS->matmul_gelu16_backward(CTX, e16, NULL, NULL, dy, r1, r2, w2, p16, dt, N, H, C);
        ASSERT_TRUE(memcmp(d16, e16, NH * 2) == 0);
        /* fc's backward from the rounded gradient */
        OPS->cast(CTX, r3, ZT_F32, d16, dt, NH);
        /* dx written (NaN before), dw and db accumulated */
        memset(dx1, 0, NC * 4), memset(dx2, 0xff, NC * 4);
        memcpy(dw2, dw1, WH * 4), memcpy(dbh2, dbh1, (size_t)H * 4);
        OPS->layernorm_matmul_backward(CTX, dx1, dw1, dbh1, r3, ln, x, lnw, lnb, w1, N, C, H);
        memset(r1, 0xff, NH * 4), memset(ln, 0xff, NC * 4);
        OPS->layernorm_matmul16_backward(CTX, dx2, NULL, dw2, dbh2, d16, dt, r1, ln, x, lnw, lnb,
                                         w1, N, C, H);
        ASSERT_TRUE(memcmp(dx1, dx2, NC * 4) == 0 && memcmp(dw1, dw2, WH * 4) == 0 &&
                    memcmp(dbh1, dbh2, (size_t)H * 4) == 0);
        /* its input's gradient rounded (dinp16 over NaN; dinp room), and LN's backward of that:
         * the widened values into layernorm_backward, the room NaN */
        OPS->cast(CTX, g16, dt, dx1, ZT_F32, NC);
        memset(h16, 0xff, NC * 2), memset(dx2, 0xff, NC * 4);
        OPS->layernorm_matmul16_backward(CTX, dx2, h16, NULL, NULL, d16, dt, r1, ln, x, lnw, lnb,
                                         w1, N, C, H);
        ASSERT_TRUE(memcmp(g16, h16, NC * 2) == 0);
        OPS->cast(CTX, o1, ZT_F32, g16, dt, NC);
        memcpy(r2, dy, NC * 4), memcpy(o2, dy, NC * 4);
        memcpy(gw2, gw1, (size_t)C * 4), memcpy(gb2, gb1, (size_t)C * 4);
        OPS->layernorm_backward(CTX, r2, gw1, gb1, o1, x, lnw, m1, s1, N, C);
        memset(dx2, 0xff, NC * 4);
        OPS->layernorm_backward16(CTX, o2, gw2, gb2, g16, dt, dx2, x, lnw, m1, s1, N, C);
        ASSERT_TRUE(memcmp(r2, o2, NC * 4) == 0 && memcmp(gw1, gw2, (size_t)C * 4) == 0 &&
                    memcmp(gb1, gb2, (size_t)C * 4) == 0);
    }
    zt_free(x), zt_free(w1), zt_free(b1), zt_free(w2), zt_free(b2), zt_free(dy), zt_free(lnw);
    zt_free(lnb), zt_free(pre), zt_free(r1), zt_free(r2), zt_free(r3), zt_free(o1), zt_free(o2);
    zt_free(dw1), zt_free(dw2), zt_free(db1), zt_free(db2), zt_free(dx1), zt_free(dx2);
    zt_free(ln), zt_free(dbh1), zt_free(dbh2), zt_free(p16), zt_free(q16), zt_free(d16);
    zt_free(e16), zt_free(m1), zt_free(s1), zt_free(m2), zt_free(s2), zt_free(g16), zt_free(h16);
    zt_free(gw1), zt_free(gw2), zt_free(gb1), zt_free(gb2);
    printf("mlp16 N=%d C=%d H=%d: bitwise the casts and the fp32 ops\n", N, C, H);
}

/* The MLP's second layer backward through its GELU is bitwise gelu_forward, matmul_backward
 * into zeros then gelu_backward into zeros, GELU's output computed by the op into the scratch
 * it is given (NaN here: nothing of it is read); dweight and dbias accumulate, NULL ones are
 * skipped. */
static void test_matmul_gelu_backward(int N, int C, int OC)
{
    size_t NC = (size_t)N * C, WC = (size_t)OC * C;
    float *pre = kc_frandn(NC, 2.0), *inp = kc_falloc(NC), *w = kc_frandn(WC, 0.3);
    float *dout = kc_frandn((size_t)N * OC, 1.0), *dw0 = kc_frandn(WC, 1.0);
    float *db0 = kc_frandn((size_t)OC, 1.0);
    float *tmp = kc_falloc(NC), *dpre = kc_falloc(NC), *dw = kc_falloc(WC);
    float *db = kc_falloc((size_t)OC), *dpre2 = kc_falloc(NC), *dw2 = kc_falloc(WC);
    float *db2 = kc_falloc((size_t)OC);
    OPS->gelu_forward(CTX, inp, pre, NC);
    memcpy(dw, dw0, WC * 4), memcpy(db, db0, (size_t)OC * 4);
    memset(tmp, 0, NC * 4), memset(dpre, 0, NC * 4);
    OPS->matmul_backward(CTX, tmp, dw, db, dout, inp, w, N, C, OC);
    OPS->gelu_backward(CTX, dpre, pre, tmp, NC);
    memcpy(dw2, dw0, WC * 4), memcpy(db2, db0, (size_t)OC * 4);
    memset(dpre2, 0xff, NC * 4); /* NaN everywhere the op must write */
    memset(tmp, 0xff, NC * 4);
    OPS->matmul_gelu_backward(CTX, dpre2, dw2, db2, dout, tmp, w, pre, N, C, OC);
    ASSERT_TRUE(memcmp(dpre, dpre2, NC * 4) == 0);
    ASSERT_TRUE(memcmp(dw, dw2, WC * 4) == 0);
    ASSERT_TRUE(memcmp(db, db2, (size_t)OC * 4) == 0);
    memset(dpre2, 0xff, NC * 4);
    memset(tmp, 0xff, NC * 4);
    OPS->matmul_gelu_backward(CTX, dpre2, NULL, NULL, dout, tmp, w, pre, N, C, OC);
    ASSERT_TRUE(memcmp(dpre, dpre2, NC * 4) == 0);
    zt_free(pre), zt_free(inp), zt_free(w), zt_free(dout), zt_free(dw0), zt_free(db0);
    zt_free(tmp), zt_free(dpre), zt_free(dw), zt_free(db), zt_free(dpre2), zt_free(dw2);
    zt_free(db2);
    printf("matmul_gelu_backward N=%d C=%d OC=%d: bitwise the two ops\n", N, C, OC);
}

/* The fused residual + LayerNorm is bitwise residual_forward then layernorm_forward, also with
 * the sum written over one of its inputs. */
static void test_residual_layernorm(int N, int C)
{
    size_t NC = (size_t)N * C;
    float *a = kc_frandn(NC, 1.0), *b = kc_frandn(NC, 1.0), *w = kc_frandn(C, 1.0);
    float *bias = kc_frandn(C, 1.0);
    for (size_t i = 0; i < NC; i++)
        a[i] += (float)(i / C % 4);
    float *res = kc_falloc(NC), *out = kc_falloc(NC), *mean = kc_falloc(N), *rstd = kc_falloc(N);
    float *res2 = kc_falloc(NC), *out2 = kc_falloc(NC), *mean2 = kc_falloc(N),
          *rstd2 = kc_falloc(N);
    OPS->residual_forward(CTX, res, a, b, NC);
    OPS->layernorm_forward(CTX, out, mean, rstd, res, w, bias, N, C);
    OPS->residual_layernorm_forward(CTX, res2, out2, mean2, rstd2, a, b, w, bias, N, C);
    ASSERT_TRUE(memcmp(res, res2, NC * 4) == 0);
    ASSERT_TRUE(memcmp(out, out2, NC * 4) == 0);
    ASSERT_TRUE(memcmp(mean, mean2, (size_t)N * 4) == 0);
    ASSERT_TRUE(memcmp(rstd, rstd2, (size_t)N * 4) == 0);
    /* in place over a, statistics not wanted */
    memset(out2, 0, NC * 4);
    OPS->residual_layernorm_forward(CTX, a, out2, NULL, NULL, a, b, w, bias, N, C);
    ASSERT_TRUE(memcmp(res, a, NC * 4) == 0);
    ASSERT_TRUE(memcmp(out, out2, NC * 4) == 0);
    zt_free(a), zt_free(b), zt_free(w), zt_free(bias), zt_free(res), zt_free(out);
    zt_free(mean), zt_free(rstd), zt_free(res2), zt_free(out2), zt_free(mean2), zt_free(rstd2);
    printf("residual_layernorm_forward N=%d C=%d: bitwise the two ops\n", N, C);
}

static void test_layernorm(int N, int C)
{
    size_t NC = (size_t)N * C;
    float *inp = kc_frandn(NC, 1.0), *w = kc_frandn(C, 1.0), *b = kc_frandn(C, 1.0);
    for (size_t i = 0; i < NC; i++) /* rows with an offset: mean must really be removed */
        inp[i] += (float)(i / C % 3);
    float *out = kc_falloc(NC), *mean = kc_falloc(N), *rstd = kc_falloc(N);
    double *inp_d = kc_widen(inp, NC), *w_d = kc_widen(w, C), *b_d = kc_widen(b, C);
    double *out_d = kc_dalloc(NC), *mean_d = kc_dalloc(N), *rstd_d = kc_dalloc(N);

    OPS->layernorm_forward(CTX, out, mean, rstd, inp, w, b, N, C);
    ref_layernorm_forward(out_d, mean_d, rstd_d, inp_d, w_d, b_d, N, C);
    kc_check_close("layernorm_forward out", out, out_d, NC, RT_FWD, 0);
    kc_check_close("layernorm_forward mean", mean, mean_d, N, RT_FWD, 0);
    kc_check_close("layernorm_forward rstd", rstd, rstd_d, N, RT_FWD, 0);
    { /* without statistics: the same output, bitwise */
        float *out2 = kc_falloc(NC);
        OPS->layernorm_forward(CTX, out2, NULL, NULL, inp, w, b, N, C);
        ASSERT_TRUE(memcmp(out, out2, NC * sizeof(float)) == 0);
        zt_free(out2);
    }

    float *dout = kc_frandn(NC, 1.0);
    double *dout_d = kc_widen(dout, NC);
    float *dinp = kc_falloc(NC), *dw = kc_falloc(C), *db = kc_falloc(C);
    double *dinp_d = kc_dalloc(NC), *dw_d = kc_dalloc(C), *db_d = kc_dalloc(C);
    prefill(dinp, dinp_d, NC);
    prefill(dw, dw_d, C);
    prefill(db, db_d, C);
    OPS->layernorm_backward(CTX, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    ref_layernorm_backward(dinp_d, dw_d, db_d, dout_d, inp_d, w_d, N, C);
    kc_check_close("layernorm_backward dinp (accumulated)", dinp, dinp_d, NC, RT_BWD, 0);
    kc_check_close("layernorm_backward dweight (accumulated)", dw, dw_d, C, RT_BWD, 0);
    kc_check_close("layernorm_backward dbias (accumulated)", db, db_d, C, RT_BWD, 0);

    /* each gradient output alone (the others NULL) */
    double *g_inp = kc_dalloc(NC), *g_w = kc_dalloc(C), *g_b = kc_dalloc(C);
    ref_layernorm_backward(g_inp, g_w, g_b, dout_d, inp_d, w_d, N, C);
    float *z = kc_falloc(NC);
    memset(z, 0, NC * sizeof(float));
    OPS->layernorm_backward(CTX, z, NULL, NULL, dout, inp, w, mean, rstd, N, C);
    kc_check_close("layernorm_backward dinp alone", z, g_inp, NC, RT_BWD, 0);
    memset(z, 0, NC * sizeof(float));
    OPS->layernorm_backward(CTX, NULL, z, NULL, dout, inp, w, mean, rstd, N, C);
    kc_check_close("layernorm_backward dweight alone", z, g_w, C, RT_BWD, 0);
    memset(z, 0, NC * sizeof(float));
    OPS->layernorm_backward(CTX, NULL, NULL, z, dout, inp, w, mean, rstd, N, C);
    kc_check_close("layernorm_backward dbias alone", z, g_b, C, RT_BWD, 0);
    OPS->layernorm_backward(CTX, NULL, NULL, NULL, dout, inp, w, mean, rstd, N, C);

    ln_state st = {N, C, inp_d, w_d, b_d, out_d, inp, w, b, out, mean, rstd, dout_d};
    kc_fd_check_d("layernorm ref dinp", ln_loss_ref, &st, inp_d, g_inp, NC, FD_SAMPLES, FD_H_REF,
                  FD_RT_REF);
    kc_fd_check_d("layernorm ref dweight", ln_loss_ref, &st, w_d, g_w, C, FD_SAMPLES, FD_H_REF,
                  FD_RT_REF);
    kc_fd_check_d("layernorm ref dbias", ln_loss_ref, &st, b_d, g_b, C, FD_SAMPLES, FD_H_REF,
                  FD_RT_REF);
    float *gi = kc_falloc(NC), *gw = kc_falloc(C), *gb = kc_falloc(C);
    memset(gi, 0, NC * sizeof(float));
    memset(gw, 0, C * sizeof(float));
    memset(gb, 0, C * sizeof(float));
    OPS->layernorm_forward(CTX, out, mean, rstd, inp, w, b, N, C);
    OPS->layernorm_backward(CTX, gi, gw, gb, dout, inp, w, mean, rstd, N, C);
    kc_fd_check_f("layernorm op dinp", ln_loss_op, &st, inp, gi, NC, FD_SAMPLES, FD_H_OP, FD_RT_OP);
    kc_fd_check_f("layernorm op dweight", ln_loss_op, &st, w, gw, C, FD_SAMPLES, FD_H_OP, FD_RT_OP);
    kc_fd_check_f("layernorm op dbias", ln_loss_op, &st, b, gb, C, FD_SAMPLES, FD_H_OP, FD_RT_OP);

    zt_free(inp), zt_free(w), zt_free(b), zt_free(out), zt_free(mean), zt_free(rstd);
    zt_free(inp_d), zt_free(w_d), zt_free(b_d), zt_free(out_d), zt_free(mean_d), zt_free(rstd_d);
    zt_free(dout), zt_free(dout_d), zt_free(dinp), zt_free(dw), zt_free(db), zt_free(dinp_d);
    zt_free(dw_d), zt_free(db_d), zt_free(g_inp), zt_free(g_w), zt_free(g_b), zt_free(z);
    zt_free(gi), zt_free(gw), zt_free(gb);
}

/* ======================================================================================== */
/* matmul */

static void ref_matmul_forward(double *out, const double *inp, const double *w, const double *b,
                               int N, int C, int OC)
{
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int c = 0; c < C; c++)
                s += inp[(size_t)i * C + c] * w[(size_t)o * C + c];
            out[(size_t)i * OC + o] = s;
        }
}

static void ref_matmul_backward(double *dinp, double *dw, double *db, const double *dout,
                                const double *inp, const double *w, int N, int C, int OC)
{
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double d = dout[(size_t)i * OC + o];
            for (int c = 0; c < C; c++) {
                dinp[(size_t)i * C + c] += d * w[(size_t)o * C + c];
                dw[(size_t)o * C + c] += d * inp[(size_t)i * C + c];
            }
            db[o] += d;
        }
}

typedef struct {
    int N, C, OC;
    double *inp_d, *w_d, *b_d, *out_d;
    float *inp, *w, *b, *out;
    const double *wt;
} mm_state;

static double mm_loss_ref(void *p)
{
    mm_state *s = p;
    ref_matmul_forward(s->out_d, s->inp_d, s->w_d, s->b_d, s->N, s->C, s->OC);
    return kc_dot_dd(s->out_d, s->wt, (size_t)s->N * s->OC);
}

static double mm_loss_op(void *p)
{
    mm_state *s = p;
    OPS->matmul_forward(CTX, s->out, s->inp, s->w, s->b, s->N, s->C, s->OC);
    return kc_dot_fd(s->out, s->wt, (size_t)s->N * s->OC);
}

static void test_matmul(int N, int C, int OC)
{
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NO = (size_t)N * OC;
    float *inp = kc_frandn(NC, 1.0), *w = kc_frandn(OCC, 0.2), *b = kc_frandn(OC, 1.0);
    float *out = kc_falloc(NO);
    double *inp_d = kc_widen(inp, NC), *w_d = kc_widen(w, OCC), *b_d = kc_widen(b, OC);
    double *out_d = kc_dalloc(NO);

    OPS->matmul_forward(CTX, out, inp, w, b, N, C, OC);
    ref_matmul_forward(out_d, inp_d, w_d, b_d, N, C, OC);
    kc_check_close("matmul_forward out (bias)", out, out_d, NO, RT_FWD, 0);
    OPS->matmul_forward(CTX, out, inp, w, NULL, N, C, OC);
    ref_matmul_forward(out_d, inp_d, w_d, NULL, N, C, OC);
    kc_check_close("matmul_forward out (no bias)", out, out_d, NO, RT_FWD, 0);

    float *dout = kc_frandn(NO, 1.0);
    double *dout_d = kc_widen(dout, NO);
    float *dinp = kc_falloc(NC), *dw = kc_falloc(OCC), *db = kc_falloc(OC);
    double *dinp_d = kc_dalloc(NC), *dw_d = kc_dalloc(OCC), *db_d = kc_dalloc(OC);
    prefill(dinp, dinp_d, NC);
    prefill(dw, dw_d, OCC);
    prefill(db, db_d, OC);
    OPS->matmul_backward(CTX, dinp, dw, db, dout, inp, w, N, C, OC);
    ref_matmul_backward(dinp_d, dw_d, db_d, dout_d, inp_d, w_d, N, C, OC);
    kc_check_close("matmul_backward dinp (accumulated)", dinp, dinp_d, NC, RT_BWD, 0);
    kc_check_close("matmul_backward dweight (accumulated)", dw, dw_d, OCC, RT_BWD, 0);
    kc_check_close("matmul_backward dbias (accumulated)", db, db_d, OC, RT_BWD, 0);

    double *g_inp = kc_dalloc(NC), *g_w = kc_dalloc(OCC), *g_b = kc_dalloc(OC);
    ref_matmul_backward(g_inp, g_w, g_b, dout_d, inp_d, w_d, N, C, OC);
    size_t zn = NC > OCC ? NC : OCC;
    float *z = kc_falloc(zn);
    memset(z, 0, zn * sizeof(float));
    OPS->matmul_backward(CTX, z, NULL, NULL, dout, inp, w, N, C, OC);
    kc_check_close("matmul_backward dinp alone", z, g_inp, NC, RT_BWD, 0);
    memset(z, 0, zn * sizeof(float));
    OPS->matmul_backward(CTX, NULL, z, NULL, dout, inp, w, N, C, OC);
    kc_check_close("matmul_backward dweight alone", z, g_w, OCC, RT_BWD, 0);
    memset(z, 0, zn * sizeof(float));
    OPS->matmul_backward(CTX, NULL, NULL, z, dout, inp, w, N, C, OC);
    kc_check_close("matmul_backward dbias alone", z, g_b, OC, RT_BWD, 0);

    mm_state st = {N, C, OC, inp_d, w_d, b_d, out_d, inp, w, b, out, dout_d};
    kc_fd_check_d("matmul ref dinp", mm_loss_ref, &st, inp_d, g_inp, NC, FD_SAMPLES, FD_H_REF,
                  FD_RT_REF);
    kc_fd_check_d("matmul ref dweight", mm_loss_ref, &st, w_d, g_w, OCC, FD_SAMPLES, FD_H_REF,
                  FD_RT_REF);
    kc_fd_check_d("matmul ref dbias", mm_loss_ref, &st, b_d, g_b, OC, FD_SAMPLES, FD_H_REF,
                  FD_RT_REF);
    float *gi = kc_falloc(NC), *gw = kc_falloc(OCC), *gb = kc_falloc(OC);
    memset(gi, 0, NC * sizeof(float));
    memset(gw, 0, OCC * sizeof(float));
    memset(gb, 0, OC * sizeof(float));
    OPS->matmul_backward(CTX, gi, gw, gb, dout, inp, w, N, C, OC);
    kc_fd_check_f("matmul op dinp", mm_loss_op, &st, inp, gi, NC, FD_SAMPLES, FD_H_OP, FD_RT_OP);
    kc_fd_check_f("matmul op dweight", mm_loss_op, &st, w, gw, OCC, FD_SAMPLES, FD_H_OP, FD_RT_OP);
    kc_fd_check_f("matmul op dbias", mm_loss_op, &st, b, gb, OC, FD_SAMPLES, FD_H_OP, FD_RT_OP);

    zt_free(inp), zt_free(w), zt_free(b), zt_free(out), zt_free(inp_d), zt_free(w_d);
    zt_free(b_d), zt_free(out_d), zt_free(dout), zt_free(dout_d), zt_free(dinp), zt_free(dw);
    zt_free(db), zt_free(dinp_d), zt_free(dw_d), zt_free(db_d), zt_free(g_inp), zt_free(g_w);
    zt_free(g_b), zt_free(z), zt_free(gi), zt_free(gw), zt_free(gb);
}

/* ======================================================================================== */
/* attention (llm.c's loops, in double) */

static void ref_attention_forward(double *out, double *att, double *lse, const double *qkv, int B,
                                  int T, int C, int NH)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    size_t C3 = 3 * (size_t)C;
    double *pre = kc_dalloc(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                double mx = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++)
                        s += q[i] * k[i];
                    pre[t2] = s * scale;
                    if (pre[t2] > mx) mx = pre[t2];
                }
                double sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    pre[t2] = exp(pre[t2] - mx);
                    sum += pre[t2];
                }
                if (lse) lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
                double *a = att + (((size_t)b * NH + h) * T + t) * T;
                for (int t2 = 0; t2 < T; t2++)
                    a[t2] = t2 <= t ? pre[t2] / sum : 0.0;
                double *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) {
                    double s = 0.0;
                    for (int t2 = 0; t2 <= t; t2++)
                        s += a[t2] * qkv[((size_t)b * T + t2) * C3 + 2 * C + (size_t)h * hs + i];
                    o[i] = s;
                }
            }
    zt_free(pre);
}

static void ref_attention_backward(double *dqkv, const double *dout, const double *qkv,
                                   const double *att, int B, int T, int C, int NH)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    size_t C3 = 3 * (size_t)C;
    double *datt = kc_dalloc(T), *dpre = kc_dalloc(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *a = att + (((size_t)b * NH + h) * T + t) * T;
                const double *d = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t row = ((size_t)b * T + t2) * C3 + (size_t)h * hs;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) {
                        s += qkv[row + 2 * C + i] * d[i];
                        dqkv[row + 2 * C + i] += a[t2] * d[i];
                    }
                    datt[t2] = s;
                }
                for (int t3 = 0; t3 <= t; t3++) {
                    double s = 0.0;
                    for (int t2 = 0; t2 <= t; t2++)
                        s += a[t2] * ((t2 == t3 ? 1.0 : 0.0) - a[t3]) * datt[t2];
                    dpre[t3] = s;
                }
                size_t qrow = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t krow = ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        dqkv[qrow + i] += qkv[krow + i] * dpre[t2] * scale;
                        dqkv[krow + i] += qkv[qrow + i] * dpre[t2] * scale;
                    }
                }
            }
    zt_free(datt);
    zt_free(dpre);
}

typedef struct {
    int B, T, C, NH;
    double *qkv_d, *out_d, *att_d;
    float *qkv, *out, *lse, *scratch;
    const double *wt;
} att_state;

static double att_loss_ref(void *p)
{
    att_state *s = p;
    ref_attention_forward(s->out_d, s->att_d, NULL, s->qkv_d, s->B, s->T, s->C, s->NH);
    return kc_dot_dd(s->out_d, s->wt, (size_t)s->B * s->T * s->C);
}

static double att_loss_op(void *p)
{
    att_state *s = p;
    OPS->attention_forward(CTX, s->out, s->lse, s->scratch, s->qkv, NULL, s->B, s->T, s->C, s->NH);
    return kc_dot_fd(s->out, s->wt, (size_t)s->B * s->T * s->C);
}

static void test_attention(int B, int T, int C, int NH)
{
    size_t NQ = (size_t)B * T * 3 * C, NO = (size_t)B * T * C, NA = (size_t)B * NH * T * T;
    size_t NL = (size_t)B * NH * T, NS = zt_attention_scratch_floats(B, T, NH);
    ASSERT_TRUE(NS >= 2 * (size_t)NH * T * T); /* room for a whole sequence at least */
    float *qkv = kc_frandn(NQ, 1.0), *out = kc_falloc(NO), *lse = kc_falloc(NL);
    double *qkv_d = kc_widen(qkv, NQ), *out_d = kc_dalloc(NO), *att_d = kc_dalloc(NA);
    double *lse_d = kc_dalloc(NL);
    float *dout = kc_frandn(NO, 1.0), *scratch = kc_falloc(NS), *dqkv = kc_falloc(NQ);
    double *dout_d = kc_widen(dout, NO), *dqkv_d = kc_dalloc(NQ), *pre_d = kc_dalloc(NQ);
    ref_attention_forward(out_d, att_d, lse_d, qkv_d, B, T, C, NH);
    prefill(dqkv, pre_d, NQ);
    memcpy(dqkv_d, pre_d, NQ * sizeof(double));
    ref_attention_backward(dqkv_d, dout_d, qkv_d, att_d, B, T, C, NH);

    /* every threading mode, thread count and causal block size gives the same result */
    static const int blocks[] = {64, 16, 5, 1 << 20};
    zt_cpu_attn_mode saved_mode = CTX->attn_mode;
    int saved_block = CTX->attn_block, saved_threads = CTX->nthreads;
    for (int mode = 0; mode < 3; mode++) {
        for (size_t bi = 0; bi < sizeof(blocks) / sizeof(blocks[0]); bi++) {
            CTX->attn_mode = mode == 1 ? ZT_CPU_ATTN_INNER : ZT_CPU_ATTN_OUTER;
            CTX->nthreads = mode == 2 ? 7 : saved_threads; /* more threads than cores */
            CTX->attn_block = blocks[bi];
            char what[160];
            for (size_t i = 0; i < NS; i++)
                scratch[i] = NAN; /* contents undefined on entry */
            OPS->attention_forward(CTX, out, lse, scratch, qkv, NULL, B, T, C, NH);
            snprintf(what, sizeof what, "attention_forward out (mode %d, block %d)", mode,
                     blocks[bi]);
            kc_check_close(what, out, out_d, NO, RT_FWD, 0);
            snprintf(what, sizeof what, "attention_forward lse (mode %d, block %d)", mode,
                     blocks[bi]);
            kc_check_close(what, lse, lse_d, NL, RT_FWD, 0);
            for (size_t i = 0; i < NQ; i++)
                dqkv[i] = (float)pre_d[i];
            for (size_t i = 0; i < NS; i++)
                scratch[i] = NAN;
            OPS->attention_backward(CTX, dqkv, scratch, dout, qkv, out, lse, NULL, B, T, C, NH);
            snprintf(what, sizeof what, "attention_backward dqkv accumulated (mode %d, block %d)",
                     mode, blocks[bi]);
            kc_check_close(what, dqkv, dqkv_d, NQ, RT_BWD, 0);
        }
    }
    CTX->attn_mode = saved_mode;
    CTX->attn_block = saved_block;
    CTX->nthreads = saved_threads;
    OPS->attention_backward(CTX, NULL, scratch, dout, qkv, out, lse, NULL, B, T, C,
                            NH); /* skipped */

    double *g = kc_dalloc(NQ);
    ref_attention_backward(g, dout_d, qkv_d, att_d, B, T, C, NH);
    att_state st = {B, T, C, NH, qkv_d, out_d, att_d, qkv, out, lse, scratch, dout_d};
    kc_fd_check_d("attention ref dqkv", att_loss_ref, &st, qkv_d, g, NQ, FD_SAMPLES * 2, FD_H_REF,
                  FD_RT_REF);
    float *gf = kc_falloc(NQ);
    memset(gf, 0, NQ * sizeof(float));
    OPS->attention_forward(CTX, out, lse, scratch, qkv, NULL, B, T, C, NH);
    OPS->attention_backward(CTX, gf, scratch, dout, qkv, out, lse, NULL, B, T, C, NH);
    kc_fd_check_f("attention op dqkv", att_loss_op, &st, qkv, gf, NQ, FD_SAMPLES * 2, FD_H_OP,
                  FD_RT_OP);

    /* the 16-bit homes of qkv and out (each alone, then both): forward leaves them rounded
     * there (the bits of cast) beside the same lse (and out where out has no home); backward
     * from the homes, its qkv and out arguments NaN, gives the bits of a backward from qkv and
     * out rounded through them */
    static const zt_dtype types[] = {ZT_BF16, ZT_F16};
    uint16_t *hq = zt_malloc(NQ * 2), *ho = zt_malloc(NO * 2), *wq = zt_malloc(NQ * 2);
    uint16_t *wo = zt_malloc(NO * 2), *hg = zt_malloc(NQ * 2), *do16 = zt_malloc(NO * 2);
    float *out2 = kc_falloc(NO), *lse2 = kc_falloc(NL), *qr = kc_falloc(NQ), *gh = kc_falloc(NQ);
    float *orr = kc_falloc(NO), *dow = kc_falloc(NO);
    ASSERT_TRUE(hq && ho && wq && wo && hg && do16);
    for (size_t ti = 0; ti < 2; ti++) {
        for (int which = 1; which <= 3; which++) { /* 1 qkv, 2 out, 3 both */
            zt_dtype dt = types[ti];
            zt_attn_home home = {which & 1 ? hq : NULL, which & 2 ? ho : NULL, dt, false};
            char what[96];
            snprintf(what, sizeof what, "attention with %s %s home(s)",
                     which == 1   ? "qkv's"
                     : which == 2 ? "out's"
                                  : "both",
                     zt_dtype_name(dt));
            OPS->attention_forward(CTX, out, lse, scratch, qkv, NULL, B, T, C, NH);
            for (size_t i = 0; i < NO; i++)
                out2[i] = NAN;
            OPS->attention_forward(CTX, out2, lse2, scratch, qkv, &home, B, T, C, NH);
            OPS->cast(CTX, wq, dt, qkv, ZT_F32, NQ);
            OPS->cast(CTX, wo, dt, out, ZT_F32, NO);
            if (memcmp(lse2, lse, NL * 4) != 0 || (!home.out && memcmp(out2, out, NO * 4) != 0))
                ZT_FAIL("%s: forward's out or lse differ from those without it", what);
            if ((home.qkv && memcmp(hq, wq, NQ * 2) != 0) ||
                (home.out && memcmp(ho, wo, NO * 2) != 0))
                ZT_FAIL("%s: not the bits of cast", what);
            /* what a restore would give */
            if (home.qkv)
                OPS->cast(CTX, qr, ZT_F32, hq, dt, NQ);
            else
                memcpy(qr, qkv, NQ * 4);
            if (home.out)
                OPS->cast(CTX, orr, ZT_F32, ho, dt, NO);
            else
                memcpy(orr, out, NO * 4);
            memset(gf, 0, NQ * sizeof(float));
            OPS->attention_backward(CTX, gf, scratch, dout, qr, orr, lse, NULL, B, T, C, NH);
            for (size_t i = 0; i < NQ; i++)
                qr[i] = home.qkv ? NAN : qkv[i];
            for (size_t i = 0; i < NO; i++)
                orr[i] = home.out ? NAN : out[i];
            memset(gh, 0, NQ * sizeof(float));
            OPS->attention_backward(CTX, gh, scratch, dout, qr, orr, lse, &home, B, T, C, NH);
            if (memcmp(gh, gf, NQ * 4) != 0)
                ZT_FAIL("%s: backward's dqkv differs from that of the rounded tensors", what);
        }
    }
    /* qkv_set: qkv's home holds qkv rounded already and the fp32 qkv is NaN room: the lse of
     * a forward from the widened values, out's home their output rounded, qkv's home as it was */
    for (size_t ti = 0; ti < 2; ti++) {
        zt_dtype dt = types[ti];
        zt_attn_home home = {hq, ho, dt, true};
        OPS->cast(CTX, hq, dt, qkv, ZT_F32, NQ);
        memcpy(wq, hq, NQ * 2);
        OPS->cast(CTX, qr, ZT_F32, hq, dt, NQ);
        OPS->attention_forward(CTX, out, lse, scratch, qr, NULL, B, T, C, NH);
        OPS->cast(CTX, wo, dt, out, ZT_F32, NO);
        for (size_t i = 0; i < NQ; i++)
            gh[i] = NAN;
        OPS->attention_forward(CTX, out2, lse2, scratch, gh, &home, B, T, C, NH);
        if (memcmp(lse2, lse, NL * 4) != 0 || memcmp(ho, wo, NO * 2) != 0 ||
            memcmp(hq, wq, NQ * 2) != 0)
            ZT_FAIL("attention with qkv set in its %s home: not the forward of the widened "
                    "values",
                    zt_dtype_name(dt));
        /* attention_backward16 from the homes: the gradient from zeros, rounded; room NaN */
        memset(gf, 0, NQ * sizeof(float));
        OPS->attention_backward(CTX, gf, scratch, dout, qr, orr, lse, &home, B, T, C, NH);
        OPS->cast(CTX, wq, dt, gf, ZT_F32, NQ);
        for (size_t i = 0; i < NQ; i++)
            gh[i] = NAN;
        OPS->attention_backward16(CTX, hg, dt, gh, scratch, dout, NULL, qr, orr, lse, &home, B, T,
                                  C, NH);
        if (memcmp(hg, wq, NQ * 2) != 0)
            ZT_FAIL("attention_backward16 with %s homes: not the rounded gradient",
                    zt_dtype_name(dt));
        /* dO given rounded (dout16; dout NaN room): the same with dout its widened values */
        OPS->cast(CTX, do16, dt, dout, ZT_F32, NO);
        OPS->cast(CTX, dow, ZT_F32, do16, dt, NO);
        memset(gf, 0, NQ * sizeof(float));
        OPS->attention_backward(CTX, gf, scratch, dow, qr, orr, lse, &home, B, T, C, NH);
        OPS->cast(CTX, wq, dt, gf, ZT_F32, NQ);
        for (size_t i = 0; i < NO; i++)
            dow[i] = NAN;
        OPS->attention_backward16(CTX, hg, dt, gh, scratch, dow, do16, qr, orr, lse, &home, B, T, C,
                                  NH);
        if (memcmp(hg, wq, NQ * 2) != 0)
            ZT_FAIL("attention_backward16 of a %s dO: not that of its widened values",
                    zt_dtype_name(dt));
    }
    zt_free(hq), zt_free(ho), zt_free(wq), zt_free(wo), zt_free(out2), zt_free(lse2);
    zt_free(qr), zt_free(gh), zt_free(orr), zt_free(hg), zt_free(do16), zt_free(dow);

    zt_free(qkv), zt_free(out), zt_free(lse), zt_free(qkv_d), zt_free(out_d), zt_free(att_d);
    zt_free(lse_d), zt_free(dout), zt_free(scratch), zt_free(dqkv), zt_free(dout_d);
    zt_free(dqkv_d), zt_free(pre_d), zt_free(g), zt_free(gf);
}

/* The scratch's chunking: whole sequences, within the budget, at least one. */
static void test_attention_scratch(void)
{
    ASSERT_EQ_INT(zt_attention_chunk_seqs(0, 64, 4), 0);
    ASSERT_EQ_INT(zt_attention_chunk_seqs(3, 64, 4), 3);
    /* GPT-2 124M at block 1024: 24 Mi floats a sequence, one fits in the 32 Mi budget */
    ASSERT_EQ_INT(zt_attention_chunk_seqs(8, 1024, 12), 1);
    ASSERT_TRUE(zt_attention_scratch_floats(8, 1024, 12) == (size_t)24 << 20);
    /* a sequence bigger than the budget still gets one */
    ASSERT_EQ_INT(zt_attention_chunk_seqs(2, 4096, 16), 1);
    for (int B = 1; B < 40; B += 3) {
        int c = zt_attention_chunk_seqs(B, 256, 12);
        ASSERT_TRUE(c >= 1 && c <= B);
        ASSERT_TRUE(zt_attention_scratch_floats(B, 256, 12) <= ZT_ATTENTION_SCRATCH_BUDGET);
    }
}

/* ======================================================================================== */
/* GELU and residual */

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */

/* 0.5 (1 + tanh(u)) in double. Written plainly it cancels for u << 0 (1 + tanh(-18) is
 * below double's resolution of 1), so there it uses the equal 2 e^{2u} / (1 + e^{2u}) / 2. */
static double ref_half_one_plus_tanh(double u)
{
    if (u >= 0.0) return 0.5 * (1.0 + tanh(u));
    double e = exp(2.0 * u);
    return e / (1.0 + e);
}

static double ref_gelu(double x)
{
    return x * ref_half_one_plus_tanh(GELU_K * (x + 0.044715 * x * x * x));
}

static double ref_gelu_grad(double x)
{
    double u = GELU_K * (x + 0.044715 * x * x * x);
    double ch = cosh(u);
    return ref_half_one_plus_tanh(u) +
           x * 0.5 * (1.0 / (ch * ch)) * GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
}

typedef struct {
    size_t n;
    double *x_d;
    float *x, *out;
    const double *wt;
} gelu_state;

static double gelu_loss_ref(void *p)
{
    gelu_state *s = p;
    double l = 0.0;
    for (size_t i = 0; i < s->n; i++)
        l += ref_gelu(s->x_d[i]) * s->wt[i];
    return l;
}

static double gelu_loss_op(void *p)
{
    gelu_state *s = p;
    OPS->gelu_forward(CTX, s->out, s->x, s->n);
    return kc_dot_fd(s->out, s->wt, s->n);
}

static void test_gelu(size_t n)
{
    float *x = kc_frandn(n, 3.0), *out = kc_falloc(n);
    if (n > 8) { /* far tails and exact zero */
        x[0] = 0.0f, x[1] = -12.0f, x[2] = 12.0f, x[3] = -30.0f, x[4] = 50.0f, x[5] = -1e-30f;
        x[6] = 1e-6f, x[7] = -5.5f;
    }
    double *x_d = kc_widen(x, n), *want = kc_dalloc(n);
    OPS->gelu_forward(CTX, out, x, n);
    for (size_t i = 0; i < n; i++)
        want[i] = ref_gelu(x_d[i]);
    /* accurate to float precision element by element: a few ulp, plus what rounding u to
     * float costs through exp (condition number |2u|), as in any float evaluation */
    for (size_t i = 0; i < n; i++) {
        double u = GELU_K * (x_d[i] + 0.044715 * x_d[i] * x_d[i] * x_d[i]);
        ASSERT_NEAR(out[i], want[i], 6e-8 * (8.0 + 8.0 * fabs(u)), 1e-30);
    }

    float *dout = kc_frandn(n, 1.0), *dinp = kc_falloc(n);
    double *dinp_d = kc_dalloc(n), *g = kc_dalloc(n), *dout_d = kc_widen(dout, n);
    prefill(dinp, dinp_d, n);
    for (size_t i = 0; i < n; i++) {
        g[i] = ref_gelu_grad(x_d[i]);
        dinp_d[i] += g[i] * dout_d[i];
    }
    OPS->gelu_backward(CTX, dinp, x, dout, n);
    kc_check_close("gelu_backward dinp (accumulated)", dinp, dinp_d, n, 2e-6, 0);
    for (size_t i = 0; i < n; i++) /* the local derivative itself, element by element */
        g[i] *= dout_d[i];
    OPS->gelu_backward(CTX, NULL, x, dout, n);

    gelu_state st = {n, x_d, x, out, dout_d};
    kc_fd_check_d("gelu ref dinp", gelu_loss_ref, &st, x_d, g, n, FD_SAMPLES, FD_H_REF, FD_RT_REF);
    memset(dinp, 0, n * sizeof(float));
    OPS->gelu_backward(CTX, dinp, x, dout, n);
    kc_fd_check_f("gelu op dinp", gelu_loss_op, &st, x, dinp, n, FD_SAMPLES, 1e-3f, FD_RT_OP);

    zt_free(x), zt_free(out), zt_free(x_d), zt_free(want), zt_free(dout), zt_free(dinp);
    zt_free(dinp_d), zt_free(g), zt_free(dout_d);
}

typedef struct {
    size_t n;
    float *a, *b, *out;
    const double *wt;
} res_state;

static double res_loss_op(void *p)
{
    res_state *s = p;
    OPS->residual_forward(CTX, s->out, s->a, s->b, s->n);
    return kc_dot_fd(s->out, s->wt, s->n);
}

static void test_residual(size_t n)
{
    float *a = kc_frandn(n, 1.0), *b = kc_frandn(n, 1.0), *out = kc_falloc(n);
    double *want = kc_dalloc(n);
    OPS->residual_forward(CTX, out, a, b, n);
    for (size_t i = 0; i < n; i++)
        want[i] = (double)(a[i] + b[i]); /* exactly the float sum */
    kc_check_close("residual_forward", out, want, n, 0, 0);

    float *dout = kc_frandn(n, 1.0), *da = kc_falloc(n), *db = kc_falloc(n);
    double *da_d = kc_dalloc(n), *db_d = kc_dalloc(n), *dout_d = kc_widen(dout, n);
    prefill(da, da_d, n);
    prefill(db, db_d, n);
    for (size_t i = 0; i < n; i++) {
        da_d[i] += dout_d[i];
        db_d[i] += dout_d[i];
    }
    OPS->residual_backward(CTX, da, db, dout, n);
    kc_check_close("residual_backward da (accumulated)", da, da_d, n, RT_EXACT, 0);
    kc_check_close("residual_backward db (accumulated)", db, db_d, n, RT_EXACT, 0);
    OPS->residual_backward(CTX, NULL, db, dout, n);
    for (size_t i = 0; i < n; i++)
        db_d[i] += dout_d[i];
    kc_check_close("residual_backward db with da NULL", db, db_d, n, RT_EXACT, 0);
    OPS->residual_backward(CTX, da, NULL, dout, n);
    for (size_t i = 0; i < n; i++)
        da_d[i] += dout_d[i];
    kc_check_close("residual_backward da with db NULL", da, da_d, n, RT_EXACT, 0);
    OPS->residual_backward(CTX, NULL, NULL, dout, n);

    /* finite differences (the reference of a sum is the sum: check the op only) */
    res_state st = {n, a, b, out, dout_d};
    float *ga = kc_falloc(n), *gb = kc_falloc(n);
    memset(ga, 0, n * sizeof(float));
    memset(gb, 0, n * sizeof(float));
    OPS->residual_backward(CTX, ga, gb, dout, n);
    kc_fd_check_f("residual op da", res_loss_op, &st, a, ga, n, FD_SAMPLES, FD_H_OP, FD_RT_OP);
    kc_fd_check_f("residual op db", res_loss_op, &st, b, gb, n, FD_SAMPLES, FD_H_OP, FD_RT_OP);

    zt_free(a), zt_free(b), zt_free(out), zt_free(want), zt_free(dout), zt_free(da);
    zt_free(db), zt_free(da_d), zt_free(db_d), zt_free(dout_d), zt_free(ga), zt_free(gb);
}

/* ======================================================================================== */
/* cross-entropy */

typedef struct {
    int N, V, Vp;
    float dloss;
    const int32_t *targets;
    double *logits_d, *losses_d;
    float *logits, *losses;
} ce_state;

static double ce_loss_ref(void *p)
{
    ce_state *s = p;
    kc_ref_crossentropy(s->losses_d, NULL, s->logits_d, s->targets, s->N, s->V, s->Vp, 1.0);
    double l = 0.0;
    for (int i = 0; i < s->N; i++)
        l += s->losses_d[i] * s->dloss;
    return l;
}

static double ce_loss_op(void *p)
{
    ce_state *s = p;
    OPS->crossentropy_forward_backward(CTX, s->losses, NULL, s->logits, s->targets, s->N, s->V,
                                       s->Vp, s->dloss);
    double l = 0.0;
    for (int i = 0; i < s->N; i++)
        l += (double)s->losses[i] * s->dloss;
    return l;
}

static void test_crossentropy(int N, int V, int Vp)
{
    size_t NV = (size_t)N * Vp;
    float dloss = 1.0f / (float)N;
    float *logits = kc_frandn(NV, 2.0);
    for (int i = 0; i < N; i++) /* huge padded logits must not enter the softmax */
        for (int j = V; j < Vp; j++)
            logits[(size_t)i * Vp + j] = (j & 1) ? 3e38f : -3e38f;
    logits[3] += 40.0f; /* a row with one dominant logit */
    int32_t *targets = zt_calloc(N, sizeof(int32_t));
    for (int i = 0; i < N; i++)
        targets[i] = (int32_t)kc_index((size_t)V);
    targets[0] = V - 1;
    double *logits_d = kc_widen(logits, NV), *losses_d = kc_dalloc(N), *dl_d = kc_dalloc(NV);
    float *losses = kc_falloc(N), *dl = kc_falloc(NV);
    for (size_t i = 0; i < NV; i++)
        dl[i] = NAN; /* must be fully written, padding included */
    kc_ref_crossentropy(losses_d, dl_d, logits_d, targets, N, V, Vp, dloss);
    OPS->crossentropy_forward_backward(CTX, losses, dl, logits, targets, N, V, Vp, dloss);
    kc_check_close("crossentropy losses", losses, losses_d, N, RT_FWD, 0);
    kc_check_close("crossentropy dlogits", dl, dl_d, NV, RT_FWD, 0);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++)
            if (dl[(size_t)i * Vp + j] != 0.0f)
                ZT_FAIL("crossentropy: padded dlogits[%d][%d] = %g, want 0", i, j,
                        (double)dl[(size_t)i * Vp + j]);

    /* losses only */
    float *losses2 = kc_falloc(N);
    OPS->crossentropy_forward_backward(CTX, losses2, NULL, logits, targets, N, V, Vp, dloss);
    kc_check_close("crossentropy losses without dlogits", losses2, losses_d, N, RT_FWD, 0);

    /* in place: dlogits == logits */
    float *inplace = kc_fcopy(logits, NV);
    OPS->crossentropy_forward_backward(CTX, losses2, inplace, inplace, targets, N, V, Vp, dloss);
    kc_check_close("crossentropy losses (in place)", losses2, losses_d, N, RT_FWD, 0);
    kc_check_close("crossentropy dlogits (in place)", inplace, dl_d, NV, RT_FWD, 0);

    /* finite differences of sum(dloss * losses) with respect to the real logits */
    ce_state st = {N, V, Vp, dloss, targets, logits_d, losses_d, logits, losses2};
    double *g = kc_dalloc(NV);
    kc_ref_crossentropy(losses_d, g, logits_d, targets, N, V, Vp, dloss);
    /* sample only columns < V (the padded ones are +-3e38, no finite step exists there) */
    for (int s = 0; s < FD_SAMPLES; s++) {
        size_t i = kc_index((size_t)N) * Vp + kc_index((size_t)V);
        double x0 = logits_d[i];
        logits_d[i] = x0 + FD_H_REF;
        double lp = ce_loss_ref(&st);
        logits_d[i] = x0 - FD_H_REF;
        double lm = ce_loss_ref(&st);
        logits_d[i] = x0;
        ASSERT_NEAR((lp - lm) / (2 * FD_H_REF), g[i], 1e-5, 1e-7 * dloss);
        float f0 = logits[i];
        logits[i] = f0 + 1e-2f;
        lp = ce_loss_op(&st);
        logits[i] = f0 - 1e-2f;
        lm = ce_loss_op(&st);
        logits[i] = f0;
        ASSERT_NEAR((lp - lm) / ((double)(f0 + 1e-2f) - (double)(f0 - 1e-2f)), dl[i], 2e-2,
                    2e-3 * dloss);
    }

    /* an out-of-range target gives a NaN loss for that row, not a crash */
    targets[1] = V;
    OPS->crossentropy_forward_backward(CTX, losses2, dl, logits, targets, N, V, Vp, dloss);
    ASSERT_TRUE(isnan(losses2[1]));
    ASSERT_NEAR(losses2[0], losses_d[0], RT_FWD, 0);

    zt_free(logits), zt_free(targets), zt_free(logits_d), zt_free(losses_d), zt_free(dl_d);
    zt_free(losses), zt_free(dl), zt_free(losses2), zt_free(inplace), zt_free(g);
}

/* ======================================================================================== */
/* classifier: logits = x wte^T, cross-entropy, and its backward, in chunks of rows */

/* The op over N rows in chunks of `rows` against double references, the backward onto
 * prefilled dx and dwte: the chunking must not show (a chunk's rows, offsets and the last,
 * shorter chunk). Then evaluation (losses only, dx and dwte untouched) and dwte NULL. */
static void test_classifier(int N, int rows, int C, int V, int Vp)
{
    size_t NC = (size_t)N * C, WC = (size_t)Vp * C, NV = (size_t)N * Vp;
    float dloss = 1.0f / (float)N;
    float *x = kc_frandn(NC, 1.0), *w = kc_frandn(WC, 0.5);
    int32_t *tg = zt_calloc(N, sizeof(int32_t));
    for (int i = 0; i < N; i++)
        tg[i] = (int32_t)kc_index((size_t)V);
    float *dx = kc_falloc(NC), *dw = kc_falloc(WC), *loss = kc_falloc(N);
    double *dx_d = kc_dalloc(NC), *dw_d = kc_dalloc(WC), *loss_d = kc_dalloc(N);
    prefill(dx, dx_d, NC);
    prefill(dw, dw_d, WC);
    float *dx0 = kc_fcopy(dx, NC), *dw0 = kc_fcopy(dw, WC);
    /* the reference: the whole logits at once */
    double *x_d = kc_widen(x, NC), *w_d = kc_widen(w, WC);
    double *lg = kc_dalloc(NV), *dl = kc_dalloc(NV);
    for (int i = 0; i < N; i++)
        for (int v = 0; v < Vp; v++) {
            double a = 0.0;
            for (int c = 0; c < C; c++)
                a += x_d[(size_t)i * C + c] * w_d[(size_t)v * C + c];
            lg[(size_t)i * Vp + v] = a;
        }
    kc_ref_crossentropy(loss_d, dl, lg, tg, N, V, Vp, dloss);
    for (int i = 0; i < N; i++)
        for (int v = 0; v < Vp; v++) {
            double g = dl[(size_t)i * Vp + v];
            for (int c = 0; c < C; c++) {
                dx_d[(size_t)i * C + c] += g * w_d[(size_t)v * C + c];
                dw_d[(size_t)v * C + c] += g * x_d[(size_t)i * C + c];
            }
        }
    int r = rows < N ? rows : N;
    float *logits = kc_falloc((size_t)r * Vp);
    char what[128];
    OPS->classifier_forward_backward(CTX, loss, dx, dw, logits, x, w, tg, N, rows, C, V, Vp, dloss);
    snprintf(what, sizeof(what), "classifier N=%d rows=%d C=%d V=%d Vp=%d", N, rows, C, V, Vp);
    kc_check_close(what, loss, loss_d, N, RT_FWD, 0);
    kc_check_close(what, dx, dx_d, NC, RT_BWD, 0);
    kc_check_close(what, dw, dw_d, WC, RT_BWD, 0);
    /* evaluation: the same losses, no gradient touched */
    float *loss2 = kc_falloc(N), *dx2 = kc_fcopy(dx0, NC), *dw2 = kc_fcopy(dw0, WC);
    OPS->classifier_forward_backward(CTX, loss2, NULL, NULL, logits, x, w, tg, N, rows, C, V, Vp,
                                     dloss);
    ASSERT_TRUE(memcmp(loss2, loss, (size_t)N * 4) == 0);
    /* dwte NULL: dx alone, bit for bit */
    OPS->classifier_forward_backward(CTX, loss2, dx2, NULL, logits, x, w, tg, N, rows, C, V, Vp,
                                     dloss);
    ASSERT_TRUE(memcmp(dx2, dx, NC * 4) == 0);
    ASSERT_TRUE(memcmp(dw2, dw0, WC * 4) == 0);
    zt_free(x), zt_free(w), zt_free(tg), zt_free(dx), zt_free(dw), zt_free(loss), zt_free(dx_d);
    zt_free(dw_d), zt_free(loss_d), zt_free(dx0), zt_free(dw0), zt_free(x_d), zt_free(w_d);
    zt_free(lg), zt_free(dl), zt_free(logits), zt_free(loss2), zt_free(dx2), zt_free(dw2);
}

/* The classifier with 16-bit logits (classifier16_forward_backward) is bitwise the table's ops
 * chunk by chunk with each chunk's logits cast to the 16-bit type and back (round16 is that
 * round trip), evaluation giving the same losses; and its losses are not the fp32 logits'. */
static void test_classifier16(int N, int rows, int C, int V, int Vp)
{
    size_t NC = (size_t)N * C, WC = (size_t)Vp * C;
    int r = rows < N ? rows : N;
    size_t RV = (size_t)r * Vp;
    float dloss = 1.0f / (float)N;
    float *x = kc_frandn(NC, 1.0), *w = kc_frandn(WC, 0.5), *dx0 = kc_frandn(NC, 1.0);
    float *dw0 = kc_frandn(WC, 1.0);
    int32_t *tg = zt_calloc(N, sizeof(int32_t));
    for (int i = 0; i < N; i++)
        tg[i] = (int32_t)kc_index((size_t)V);
    float *lg = kc_falloc(RV), *lr = kc_falloc(RV), *loss = kc_falloc(N), *loss2 = kc_falloc(N);
    float *loss32 = kc_falloc(N);
    uint16_t *h = zt_malloc(RV * 2 + 2);
    ASSERT_TRUE(h != NULL);
    static const zt_dtype types[] = {ZT_BF16, ZT_F16};
    for (int ti = 0; ti < 2; ti++) {
        zt_dtype dt = types[ti];
        /* round16: the cast there and back */
        float *y = kc_frandn(RV, 30.0), *y2 = kc_fcopy(y, RV);
        OPS->round16(CTX, y, dt, RV);
        OPS->cast(CTX, h, dt, y2, ZT_F32, RV);
        OPS->cast(CTX, y2, ZT_F32, h, dt, RV);
        ASSERT_TRUE(memcmp(y, y2, RV * 4) == 0);
        zt_free(y), zt_free(y2);
        /* the reference, chunk by chunk */
        float *dx = kc_fcopy(dx0, NC), *dw = kc_fcopy(dw0, WC);
        for (int r0 = 0; r0 < N; r0 += r) {
            int m = N - r0 < r ? N - r0 : r;
            const float *xr = x + (size_t)r0 * C;
            size_t n = (size_t)m * Vp;
            OPS->matmul_forward(CTX, lr, xr, w, NULL, m, C, Vp);
            OPS->cast(CTX, h, dt, lr, ZT_F32, n);
            OPS->cast(CTX, lr, ZT_F32, h, dt, n);
            OPS->crossentropy_forward_backward(CTX, loss2 + r0, lr, lr, tg + r0, m, V, Vp, dloss);
            OPS->matmul_backward(CTX, dx + (size_t)r0 * C, dw, NULL, lr, xr, w, m, C, Vp);
        }
        float *dx2 = kc_fcopy(dx0, NC), *dw2 = kc_fcopy(dw0, WC);
        OPS->classifier16_forward_backward(CTX, dt, loss, dx2, dw2, lg, x, w, tg, N, rows, C, V, Vp,
                                           dloss);
        ASSERT_TRUE(memcmp(loss, loss2, (size_t)N * 4) == 0);
        ASSERT_TRUE(memcmp(dx, dx2, NC * 4) == 0 && memcmp(dw, dw2, WC * 4) == 0);
        OPS->classifier16_forward_backward(CTX, dt, loss2, NULL, NULL, lg, x, w, tg, N, rows, C, V,
                                           Vp, dloss);
        ASSERT_TRUE(memcmp(loss, loss2, (size_t)N * 4) == 0);
        OPS->classifier_forward_backward(CTX, loss32, NULL, NULL, lg, x, w, tg, N, rows, C, V, Vp,
                                         dloss);
        ASSERT_TRUE(memcmp(loss, loss32, (size_t)N * 4) != 0);
        zt_free(dx), zt_free(dw), zt_free(dx2), zt_free(dw2);
    }
    zt_free(x), zt_free(w), zt_free(dx0), zt_free(dw0), zt_free(tg), zt_free(lg), zt_free(lr);
    zt_free(loss), zt_free(loss2), zt_free(loss32), zt_free(h);
    printf("classifier16 N=%d rows=%d: bitwise the ops with the logits rounded\n", N, rows);
}

/* ======================================================================================== */
/* table, memory */

static void test_table_and_memory(void)
{
    const zt_ops *o = OPS;
    ASSERT_STREQ(o->name, "cpu");
#define CHECK_FN(f)                                                                                \
    do {                                                                                           \
        if (!o->f) ZT_FAIL("op table entry %s is NULL", #f);                                       \
    } while (0)
    CHECK_FN(ctx_create);
    CHECK_FN(ctx_destroy);
    CHECK_FN(alloc);
    CHECK_FN(free);
    CHECK_FN(host_alloc);
    CHECK_FN(host_free);
    CHECK_FN(memset0);
    CHECK_FN(copy_h2d);
    CHECK_FN(copy_d2h);
    CHECK_FN(copy_d2d);
    CHECK_FN(stream);
    CHECK_FN(sync);
    CHECK_FN(encoder_forward);
    CHECK_FN(encoder_backward);
    CHECK_FN(layernorm_forward);
    CHECK_FN(residual_layernorm_forward);
    CHECK_FN(layernorm_backward);
    CHECK_FN(layernorm_backward16);
    CHECK_FN(mark);
    CHECK_FN(marks_take);
    CHECK_FN(matmul_forward);
    CHECK_FN(matmul_backward);
    CHECK_FN(matmul16_forward);
    CHECK_FN(matmul16_backward);
    CHECK_FN(matmul_forward16);
    CHECK_FN(layernorm_matmul_forward16);
    CHECK_FN(gelu16_matmul_forward);
    CHECK_FN(matmul_gelu16_backward);
    CHECK_FN(layernorm_matmul16_backward);
    CHECK_FN(matmul_gelu_forward);
    CHECK_FN(matmul_gelu_backward);
    CHECK_FN(gelu_matmul_forward);
    CHECK_FN(layernorm_matmul_forward);
    CHECK_FN(layernorm_matmul_backward);
    CHECK_FN(attention_forward);
    CHECK_FN(attention_backward16);
    CHECK_FN(classifier16_forward_backward);
    CHECK_FN(round16);
    CHECK_FN(attention_backward);
    CHECK_FN(gelu_forward);
    CHECK_FN(gelu_backward);
    CHECK_FN(residual_forward);
    CHECK_FN(residual_backward);
    CHECK_FN(crossentropy_forward_backward);
    CHECK_FN(classifier_forward_backward);
    CHECK_FN(adamw);
    CHECK_FN(cast);
    CHECK_FN(accumulate);
    CHECK_FN(scale);
    CHECK_FN(sumsq_nonfinite);
#undef CHECK_FN

    ASSERT_TRUE(o->stream(CTX) == NULL);
    zt_err err;
    ASSERT_OK(o->sync(CTX, &err));
    o->ctx_destroy(NULL);

    size_t sizes[] = {0, 1, 255, 257, (size_t)9 << 20};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        unsigned char *a = o->alloc(CTX, n), *h = o->host_alloc(CTX, n), *c = o->alloc(CTX, n);
        ASSERT_TRUE(a && h && c);
        ASSERT_EQ_INT((uintptr_t)a % 256, 0);
        ASSERT_EQ_INT((uintptr_t)h % 256, 0);
        for (size_t i = 0; i < n; i++)
            h[i] = (unsigned char)(i * 7 + 1);
        o->copy_h2d(CTX, a, h, n);
        o->copy_d2d(CTX, c, a, n);
        memset(h, 0, n);
        o->copy_d2h(CTX, h, c, n);
        for (size_t i = 0; i < n; i++)
            if (h[i] != (unsigned char)(i * 7 + 1))
                ZT_FAIL("copy of %zu bytes: byte %zu is %d, want %d", n, i, h[i],
                        (unsigned char)(i * 7 + 1));
        o->memset0(CTX, c, n);
        for (size_t i = 0; i < n; i++)
            if (c[i] != 0) ZT_FAIL("memset0 of %zu bytes: byte %zu is %d", n, i, c[i]);
        o->free(CTX, a);
        o->free(CTX, c);
        o->host_free(CTX, h);
    }
    o->free(CTX, NULL);
    o->host_free(CTX, NULL);
}

/* ======================================================================================== */
/* zero-sized work is a no-op, not a crash (buffers are sentinels that must stay untouched) */

static void test_empty(void)
{
    float *buf = kc_falloc(64);
    for (int i = 0; i < 64; i++)
        buf[i] = 7.0f;
    int32_t tok[4] = {0, 0, 0, 0};
    double out[2] = {1.0, 2.0};
    zt_adamw_args a = {.lr = 1e-3f,
                       .beta1 = 0.9f,
                       .beta2 = 0.999f,
                       .eps = 1e-8f,
                       .bc1 = 0.1f,
                       .bc2 = 0.001f,
                       .grad_scale = 1.0f};
    OPS->encoder_forward(CTX, buf, tok, buf, buf, 0, 4, 8);
    OPS->encoder_backward(CTX, buf, buf, buf, tok, 0, 4, 8);
    OPS->layernorm_forward(CTX, buf, buf, buf, buf, buf, buf, 0, 8);
    OPS->residual_layernorm_forward(CTX, buf, buf, buf, buf, buf, buf, buf, buf, 0, 8);
    OPS->layernorm_backward(CTX, buf, buf, buf, buf, buf, buf, buf, buf, 0, 8);
    OPS->matmul_forward(CTX, buf, buf, buf, buf, 0, 8, 8);
    OPS->matmul_backward(CTX, buf, NULL, NULL, buf, buf, buf, 0, 8, 8);
    OPS->matmul_gelu_forward(CTX, buf, buf, buf, buf, buf, 0, 8, 8);
    OPS->matmul_gelu_backward(CTX, buf, NULL, NULL, buf, buf, buf, buf, 0, 8, 8);
    OPS->gelu_matmul_forward(CTX, buf, buf, buf, buf, buf, 0, 8, 8);
    OPS->layernorm_matmul_forward(CTX, buf, buf, buf, buf, buf, buf, buf, buf, buf, 0, 8, 8);
    OPS->layernorm_matmul_backward(CTX, buf, NULL, NULL, buf, buf, buf, buf, buf, buf, 0, 8, 8);
    OPS->classifier_forward_backward(CTX, buf, buf, buf, buf, buf, buf, tok, 0, 4, 4, 3, 4, 1.0f);
    OPS->attention_forward(CTX, buf, buf, buf, buf, NULL, 0, 4, 8, 2);
    OPS->attention_backward(CTX, buf, buf, buf, buf, buf, buf, NULL, 0, 4, 8, 2);
    OPS->gelu_forward(CTX, buf, buf, 0);
    OPS->gelu_backward(CTX, buf, buf, buf, 0);
    OPS->residual_forward(CTX, buf, buf, buf, 0);
    OPS->residual_backward(CTX, buf, buf, buf, 0);
    OPS->crossentropy_forward_backward(CTX, buf, buf, buf, tok, 0, 4, 8, 1.0f);
    OPS->adamw(CTX, buf, buf, ZT_F32, buf, buf, 0, &a, buf, ZT_BF16);
    OPS->cast(CTX, buf, ZT_F16, buf, ZT_F32, 0);
    OPS->accumulate(CTX, buf, ZT_BF16, buf, 1.0f, 0);
    OPS->scale(CTX, buf, 0.0f, 0);
    OPS->sumsq_nonfinite(CTX, buf, ZT_F32, 0, out);
    OPS->memset0(CTX, buf, 0);
    OPS->copy_d2d(CTX, buf, buf + 8, 0);
    for (int i = 0; i < 64; i++)
        if (buf[i] != 7.0f) ZT_FAIL("a zero-sized op wrote element %d: %g", i, (double)buf[i]);
    ASSERT_TRUE(out[0] == 1.0 && out[1] == 2.0);
    /* matmul_backward with N = 0 still adds nothing to dweight and dbias */
    OPS->matmul_backward(CTX, buf, buf, buf + 32, buf, buf, buf, 0, 4, 4);
    for (int i = 0; i < 64; i++)
        if (buf[i] != 7.0f)
            ZT_FAIL("matmul_backward with N = 0 changed element %d: %g", i, (double)buf[i]);
    zt_free(buf);
}

/* ======================================================================================== */

/* big: also the shapes large enough to go parallel by default (skipped in the second pass,
 * where every shape is forced parallel) */
static void run_all(int big)
{
    test_encoder(2, 7, 48, 11);
    test_encoder(1, 1, 16, 1);
    if (big) test_encoder(3, 37, 96, 64);

    test_layernorm(7, 48);
    test_layernorm(1, 1);
    test_layernorm(37, 256);
    test_matmul_gelu(1, 1, 1);
    test_matmul_gelu(37, 64, 256);
    test_matmul_gelu(300, 77, 12);
    test_matmul16(1, 1, 1);
    test_matmul16(37, 64, 48);
    test_mlp16(1, 1, 4);
    test_mlp16(37, 24, 96);
    test_gelu_matmul(1, 1, 1);
    test_gelu_matmul(37, 256, 64);
    test_gelu_matmul(300, 12, 77);
    test_layernorm_matmul(1, 1, 1);
    test_layernorm_matmul(37, 256, 64);
    test_layernorm_matmul(300, 12, 77);
    test_matmul_gelu_backward(1, 1, 1);
    test_matmul_gelu_backward(37, 256, 64);
    test_matmul_gelu_backward(300, 12, 77);
    test_residual_layernorm(1, 1);
    test_residual_layernorm(37, 256);
    test_residual_layernorm(300, 77);
    if (big) test_layernorm(300, 200);

    test_matmul(7, 48, 144);
    test_matmul(37, 64, 19);
    test_matmul(1, 3, 1);
    if (big) test_matmul(300, 96, 130);

    test_attention_scratch();
    test_attention(2, 7, 48, 3);
    test_attention(2, 33, 32, 2);
    test_attention(1, 1, 8, 1);
    if (big) test_attention(1, 70, 48, 3);

    test_gelu(1000);
    test_gelu(3);
    if (big) test_gelu(100003);

    test_residual(1001);
    if (big) test_residual(70001);

    test_crossentropy(7, 50, 64);
    test_crossentropy(37, 256, 256);
    test_classifier(20, 20, 16, 50, 64);
    test_classifier(20, 7, 16, 50, 64); /* chunks of 7, 7 and 6 */
    test_classifier(5, 64, 24, 30, 32); /* one chunk, smaller than rows */
    test_classifier16(20, 20, 16, 50, 64);
    test_classifier16(20, 7, 16, 50, 64);
    if (big) test_crossentropy(130, 300, 384);
}

/* A matmul that oneDNN refuses (a row count beyond what it can index) must not pass silently:
 * the context's next sync fails, naming what happened, and the one after is clean again. */
static void test_sgemm_failure_reported(void)
{
    zt_err err;
    zt_err_clear(&err);
    ASSERT_OK(OPS->sync(CTX, &err));
    float w[4] = {0}, x[4] = {0}, y[4] = {0};
    OPS->matmul_forward(CTX, y, x, w, NULL, -1, 2, 2);
    ASSERT_EQ_INT(OPS->sync(CTX, &err), ZT_ERR_INTERNAL);
    ASSERT_CONTAINS(err.msg, "failed in oneDNN");
    printf("  ok: %s\n", err.msg);
    ASSERT_OK(OPS->sync(CTX, &err));
}

int main(void)
{
    OPS = zt_ops_cpu();
    ASSERT_TRUE(OPS != NULL);
    zt_err err;
    ASSERT_OK(OPS->ctx_create(&CTX, 0, &err));
    printf("cpu ops: %d thread(s)\n", CTX->nthreads);
    test_table_and_memory();
    test_empty();
    test_sgemm_failure_reported();
    check_optimes(OPS);
    run_all(1);
    if (CTX->nthreads > 1) {
        /* again with every op going parallel, whatever its size */
        CTX->par_min = 1;
        run_all(0);
    }
    OPS->ctx_destroy(CTX);
    printf("ok\n");
    return 0;
}
