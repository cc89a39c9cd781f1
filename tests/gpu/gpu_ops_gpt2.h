/* zerotrain tests: test_gpu_ops' cases of the GPT-2 row and element ops: the embeddings,
 * LayerNorm (with the residual before it and a matmul after it, and each backward kernel), GELU
 * with its matmuls, the residual, the bias gradient from 16 bits, and the cross-entropy. */
#ifndef ZT_TESTS_GPU_GPU_OPS_GPT2_H
#define ZT_TESTS_GPU_GPU_OPS_GPT2_H

#include "tests/gpu/gpu_check.h"

/* ---- encoder ---- */

static void test_encoder(int B, int T, int C, int V)
{
    char what[128];
    size_t N = (size_t)B * T, NC = N * C;
    int32_t *ids = rand_ids(N, V);
    float *wte = kc_frandn((size_t)V * C, 1.0), *wpe = kc_frandn((size_t)T * C, 1.0);
    float *out = kc_falloc(NC);
    CPU->encoder_forward(CC, out, ids, wte, wpe, B, T, C);
    int32_t *d_ids = up(ids, N * sizeof(int32_t));
    float *d_wte = upf(wte, (size_t)V * C), *d_wpe = upf(wpe, (size_t)T * C);
    float *d_out = dalloc(NC * sizeof(float));
    GPU->encoder_forward(GC, d_out, d_ids, d_wte, d_wpe, B, T, C);
    snprintf(what, sizeof(what), "encoder_forward B=%d T=%d C=%d", B, T, C);
    check_f(what, d_out, out, NC, RT_EXACT, 0);

    /* backward into prefilled gradients, then each output alone */
    float *dout = kc_frandn(NC, 1.0);
    float *dwte = kc_frandn((size_t)V * C, 1.0), *dwpe = kc_frandn((size_t)T * C, 1.0);
    float *d_dout = upf(dout, NC), *d_dwte = upf(dwte, (size_t)V * C);
    float *d_dwpe = upf(dwpe, (size_t)T * C);
    CPU->encoder_backward(CC, dwte, dwpe, dout, ids, B, T, C);
    GPU->encoder_backward(GC, d_dwte, d_dwpe, d_dout, d_ids, B, T, C);
    CPU->encoder_backward(CC, dwte, NULL, dout, ids, B, T, C);
    GPU->encoder_backward(GC, d_dwte, NULL, d_dout, d_ids, B, T, C);
    CPU->encoder_backward(CC, NULL, dwpe, dout, ids, B, T, C);
    GPU->encoder_backward(GC, NULL, d_dwpe, d_dout, d_ids, B, T, C);
    snprintf(what, sizeof(what), "encoder_backward dwte B=%d T=%d C=%d", B, T, C);
    check_f(what, d_dwte, dwte, (size_t)V * C, RT_EXACT, 0);
    snprintf(what, sizeof(what), "encoder_backward dwpe B=%d T=%d C=%d", B, T, C);
    check_f(what, d_dwpe, dwpe, (size_t)T * C, RT_EXACT, 0);
    dfree(d_ids), dfree(d_wte), dfree(d_wpe), dfree(d_out), dfree(d_dout), dfree(d_dwte);
    dfree(d_dwpe);
    zt_free(ids), zt_free(wte), zt_free(wpe), zt_free(out), zt_free(dout), zt_free(dwte);
    zt_free(dwpe);
    printf("encoder B=%d T=%d C=%d V=%d: ok\n", B, T, C, V);
}

/* ---- layernorm ---- */

/* the fused residual + LayerNorm against the CPU's (which is bitwise its two ops) */
/* The MLP's first layer with its GELU against the CPU's two ops: cuBLASLt's GELU epilogue where
 * OC is a multiple of 8, the product then the GELU kernel elsewhere; with and without bias. */
static void test_matmul_gelu(int N, int C, int OC)
{
    char what[128];
    size_t NO = (size_t)N * OC;
    float *x = kc_frandn((size_t)N * C, 1.0), *w = kc_frandn((size_t)OC * C, 0.3);
    float *bias = kc_frandn((size_t)OC, 1.0), *pre = kc_falloc(NO), *out = kc_falloc(NO);
    float *d_x = upf(x, (size_t)N * C), *d_w = upf(w, (size_t)OC * C);
    float *d_bias = upf(bias, (size_t)OC), *d_pre = dalloc(NO * 4), *d_out = dalloc(NO * 4);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        CPU->matmul_gelu_forward(CC, out, pre, x, w, with_bias ? bias : NULL, N, C, OC);
        GPU->matmul_gelu_forward(GC, d_out, d_pre, d_x, d_w, with_bias ? d_bias : NULL, N, C,
                                 OC);
        snprintf(what, sizeof(what), "matmul_gelu_forward pre N=%d C=%d OC=%d bias=%d", N, C, OC,
                 with_bias);
        check_f(what, d_pre, pre, NO, RT_GEMM, 1e-6);
        snprintf(what, sizeof(what), "matmul_gelu_forward out N=%d C=%d OC=%d bias=%d", N, C, OC,
                 with_bias);
        check_f(what, d_out, out, NO, 1e-4, 1e-5);
    }
    dfree(d_x), dfree(d_w), dfree(d_bias), dfree(d_pre), dfree(d_out);
    zt_free(x), zt_free(w), zt_free(bias), zt_free(pre), zt_free(out);
    printf("matmul_gelu N=%d C=%d OC=%d: ok\n", N, C, OC);
}

/* A matmul from a LayerNorm's input against the CPU's two ops: forward with its statistics,
 * backward onto prefilled gradients, the scratch given as NaN. */
static void test_layernorm_matmul(int N, int C, int OC)
{
    char what[128];
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, WC = (size_t)OC * C;
    float *x = kc_frandn(NC, 1.0), *lnw = kc_frandn((size_t)C, 1.0);
    float *lnb = kc_frandn((size_t)C, 0.5), *w = kc_frandn(WC, 0.3);
    float *bias = kc_frandn((size_t)OC, 1.0), *dy = kc_frandn(NO, 1.0);
    float *dx = kc_frandn(NC, 1.0), *dw = kc_frandn(WC, 1.0), *db = kc_frandn((size_t)OC, 1.0);
    float *ln = kc_falloc(NC), *out = kc_falloc(NO), *mean = kc_falloc((size_t)N);
    float *rstd = kc_falloc((size_t)N);
    for (size_t i = 0; i < NC; i++)
        ln[i] = NAN;
    float *d_x = upf(x, NC), *d_lnw = upf(lnw, (size_t)C), *d_lnb = upf(lnb, (size_t)C);
    float *d_w = upf(w, WC), *d_bias = upf(bias, (size_t)OC), *d_dy = upf(dy, NO);
    float *d_dx = upf(dx, NC), *d_dw = upf(dw, WC), *d_db = upf(db, (size_t)OC);
    float *d_ln = upf(ln, NC), *d_out = dalloc(NO * 4), *d_mean = dalloc((size_t)N * 4);
    float *d_rstd = dalloc((size_t)N * 4);
    CPU->layernorm_matmul_forward(CC, out, ln, mean, rstd, x, lnw, lnb, w, bias, N, C, OC);
    GPU->layernorm_matmul_forward(GC, d_out, d_ln, d_mean, d_rstd, d_x, d_lnw, d_lnb, d_w, d_bias,
                                  N, C, OC);
    snprintf(what, sizeof(what), "layernorm_matmul_forward N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_out, out, NO, 1e-4, 1e-5);
    check_f(what, d_mean, mean, (size_t)N, RT_RED, 1e-6);
    check_f(what, d_rstd, rstd, (size_t)N, RT_RED, 1e-6);
    GPU->copy_h2d(GC, d_ln, ln, NC * 4); /* NaN again */
    CPU->layernorm_matmul_backward(CC, dx, dw, db, dy, ln, x, lnw, lnb, w, N, C, OC);
    GPU->layernorm_matmul_backward(GC, d_dx, d_dw, d_db, d_dy, d_ln, d_x, d_lnw, d_lnb, d_w, N, C,
                                   OC);
    snprintf(what, sizeof(what), "layernorm_matmul_backward N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_dx, dx, NC, RT_GEMM, 1e-6);
    check_f(what, d_dw, dw, WC, 1e-4, 1e-5);
    check_f(what, d_db, db, (size_t)OC, RT_RED, 1e-6);
    dfree(d_x), dfree(d_lnw), dfree(d_lnb), dfree(d_w), dfree(d_bias), dfree(d_dy), dfree(d_dx);
    dfree(d_dw), dfree(d_db), dfree(d_ln), dfree(d_out), dfree(d_mean), dfree(d_rstd);
    zt_free(x), zt_free(lnw), zt_free(lnb), zt_free(w), zt_free(bias), zt_free(dy), zt_free(dx);
    zt_free(dw), zt_free(db), zt_free(ln), zt_free(out), zt_free(mean), zt_free(rstd);
    printf("layernorm_matmul N=%d C=%d OC=%d: ok\n", N, C, OC);
}

/* The MLP's second layer from GELU's input against the CPU's two ops (GELU's output into the
 * scratch, NaN here), with and without bias. */
static void test_gelu_matmul(int N, int C, int OC)
{
    char what[128];
    size_t NC = (size_t)N * C, NO = (size_t)N * OC;
    float *pre = kc_frandn(NC, 2.0), *w = kc_frandn((size_t)OC * C, 0.3);
    float *bias = kc_frandn((size_t)OC, 1.0), *act = kc_falloc(NC), *out = kc_falloc(NO);
    for (size_t i = 0; i < NC; i++)
        act[i] = NAN;
    float *d_pre = upf(pre, NC), *d_w = upf(w, (size_t)OC * C), *d_bias = upf(bias, (size_t)OC);
    float *d_act = upf(act, NC), *d_out = dalloc(NO * 4);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        CPU->gelu_matmul_forward(CC, out, act, pre, w, with_bias ? bias : NULL, N, C, OC);
        GPU->gelu_matmul_forward(GC, d_out, d_act, d_pre, d_w, with_bias ? d_bias : NULL, N, C, OC);
        snprintf(what, sizeof(what), "gelu_matmul_forward N=%d C=%d OC=%d bias=%d", N, C, OC,
                 with_bias);
        check_f(what, d_out, out, NO, 1e-4, 1e-5);
    }
    dfree(d_pre), dfree(d_w), dfree(d_bias), dfree(d_act), dfree(d_out);
    zt_free(pre), zt_free(w), zt_free(bias), zt_free(act), zt_free(out);
    printf("gelu_matmul N=%d C=%d OC=%d: ok\n", N, C, OC);
}

/* The MLP's second layer backward through its GELU against the CPU's (bitwise its ops):
 * cuBLASLt's DGELU epilogue where C is a multiple of 8, the product then the GELU' kernel
 * elsewhere; dpre written over NaN, dweight and dbias accumulated onto prefilled values; GELU's
 * output for dweight computed by the op (its scratch given as NaN). */
static void test_matmul_gelu_backward(int N, int C, int OC)
{
    char what[128];
    size_t NC = (size_t)N * C, WC = (size_t)OC * C, NO = (size_t)N * OC;
    float *pre = kc_frandn(NC, 2.0), *inp = kc_falloc(NC), *w = kc_frandn(WC, 0.3);
    float *dout = kc_frandn(NO, 1.0), *dw = kc_frandn(WC, 1.0), *db = kc_frandn((size_t)OC, 1.0);
    float *dpre = kc_falloc(NC), *nan_fill = kc_falloc(NC);
    for (size_t i = 0; i < NC; i++)
        nan_fill[i] = NAN;
    CPU->gelu_forward(CC, inp, pre, NC);
    float *d_pre = upf(pre, NC), *d_inp = upf(inp, NC), *d_w = upf(w, WC), *d_dout = upf(dout, NO);
    float *d_dw = upf(dw, WC), *d_db = upf(db, (size_t)OC), *d_dpre = upf(nan_fill, NC);
    GPU->copy_h2d(GC, d_inp, nan_fill, NC * 4);
    CPU->matmul_gelu_backward(CC, dpre, dw, db, dout, inp, w, pre, N, C, OC);
    GPU->matmul_gelu_backward(GC, d_dpre, d_dw, d_db, d_dout, d_inp, d_w, d_pre, N, C, OC);
    snprintf(what, sizeof(what), "matmul_gelu_backward dpre N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_dpre, dpre, NC, 1e-4, 1e-5);
    snprintf(what, sizeof(what), "matmul_gelu_backward dweight N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_dw, dw, WC, RT_GEMM, 1e-6);
    snprintf(what, sizeof(what), "matmul_gelu_backward dbias N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_db, db, (size_t)OC, RT_RED, 1e-6);
    dfree(d_pre), dfree(d_inp), dfree(d_w), dfree(d_dout), dfree(d_dw), dfree(d_db);
    dfree(d_dpre);
    zt_free(pre), zt_free(inp), zt_free(w), zt_free(dout), zt_free(dw), zt_free(db);
    zt_free(dpre), zt_free(nan_fill);
    printf("matmul_gelu_backward N=%d C=%d OC=%d: ok\n", N, C, OC);
}

static void test_residual_layernorm(int N, int C)
{
    char what[128];
    size_t NC = (size_t)N * C;
    float *a = kc_frandn(NC, 2.0), *b = kc_frandn(NC, 1.0);
    float *w = kc_frandn((size_t)C, 1.0), *bias = kc_frandn((size_t)C, 1.0);
    float *res = kc_falloc(NC), *out = kc_falloc(NC), *mean = kc_falloc((size_t)N);
    float *rstd = kc_falloc((size_t)N);
    CPU->residual_layernorm_forward(CC, res, out, mean, rstd, a, b, w, bias, N, C);
    float *d_a = upf(a, NC), *d_b = upf(b, NC), *d_w = upf(w, (size_t)C);
    float *d_bias = upf(bias, (size_t)C), *d_res = dalloc(NC * 4), *d_out = dalloc(NC * 4);
    float *d_mean = dalloc((size_t)N * 4), *d_rstd = dalloc((size_t)N * 4);
    GPU->residual_layernorm_forward(GC, d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C);
    snprintf(what, sizeof(what), "residual_layernorm_forward res N=%d C=%d", N, C);
    check_f(what, d_res, res, NC, RT_EXACT, 0);
    snprintf(what, sizeof(what), "residual_layernorm_forward out N=%d C=%d", N, C);
    check_f(what, d_out, out, NC, RT_RED, 1e-6);
    snprintf(what, sizeof(what), "residual_layernorm_forward rstd N=%d C=%d", N, C);
    check_f(what, d_rstd, rstd, (size_t)N, RT_RED, 0);
    /* in place over a */
    GPU->residual_layernorm_forward(GC, d_a, d_out, NULL, NULL, d_a, d_b, d_w, d_bias, N, C);
    snprintf(what, sizeof(what), "residual_layernorm_forward in place N=%d C=%d", N, C);
    check_f(what, d_a, res, NC, RT_EXACT, 0);
    dfree(d_a), dfree(d_b), dfree(d_w), dfree(d_bias), dfree(d_res), dfree(d_out);
    dfree(d_mean), dfree(d_rstd);
    zt_free(a), zt_free(b), zt_free(w), zt_free(bias), zt_free(res), zt_free(out);
    zt_free(mean), zt_free(rstd);
    printf("residual_layernorm N=%d C=%d: ok\n", N, C);
}

static void test_layernorm(int N, int C)
{
    char what[128];
    size_t NC = (size_t)N * C;
    float *x = kc_frandn(NC, 2.0), *w = kc_frandn((size_t)C, 1.0), *b = kc_frandn((size_t)C, 1.0);
    for (size_t i = 0; i < NC; i++) /* rows with an offset, as residual streams have */
        x[i] += (float)((i / (size_t)C) % 5);
    float *out = kc_falloc(NC), *mean = kc_falloc((size_t)N), *rstd = kc_falloc((size_t)N);
    CPU->layernorm_forward(CC, out, mean, rstd, x, w, b, N, C);
    float *d_x = upf(x, NC), *d_w = upf(w, (size_t)C), *d_b = upf(b, (size_t)C);
    float *d_out = dalloc(NC * 4), *d_mean = dalloc((size_t)N * 4), *d_rstd = dalloc((size_t)N * 4);
    GPU->layernorm_forward(GC, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
    snprintf(what, sizeof(what), "layernorm_forward out N=%d C=%d", N, C);
    check_f(what, d_out, out, NC, RT_RED, 1e-6);
    snprintf(what, sizeof(what), "layernorm_forward mean N=%d C=%d", N, C);
    check_f(what, d_mean, mean, (size_t)N, RT_RED, 1e-6);
    snprintf(what, sizeof(what), "layernorm_forward rstd N=%d C=%d", N, C);
    check_f(what, d_rstd, rstd, (size_t)N, RT_RED, 0);
    /* mean and rstd may be NULL */
    GPU->layernorm_forward(GC, d_out, NULL, NULL, d_x, d_w, d_b, N, C);
    snprintf(what, sizeof(what), "layernorm_forward (no stats) N=%d C=%d", N, C);
    check_f(what, d_out, out, NC, RT_RED, 1e-6);

    float *dy = kc_frandn(NC, 1.0), *dx = kc_frandn(NC, 1.0);
    float *dw = kc_frandn((size_t)C, 1.0), *db = kc_frandn((size_t)C, 1.0);
    float *d_dy = upf(dy, NC), *d_dx = upf(dx, NC), *d_dw = upf(dw, (size_t)C);
    float *d_db = upf(db, (size_t)C);
    /* the GPU uses the CPU's statistics so that only the backward is compared */
    float *d_mean2 = upf(mean, (size_t)N), *d_rstd2 = upf(rstd, (size_t)N);
    CPU->layernorm_backward(CC, dx, dw, db, dy, x, w, mean, rstd, N, C);
    GPU->layernorm_backward(GC, d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean2, d_rstd2, N, C);
    CPU->layernorm_backward(CC, NULL, dw, NULL, dy, x, w, mean, rstd, N, C);
    GPU->layernorm_backward(GC, NULL, d_dw, NULL, d_dy, d_x, d_w, d_mean2, d_rstd2, N, C);
    CPU->layernorm_backward(CC, dx, NULL, db, dy, x, w, mean, rstd, N, C);
    GPU->layernorm_backward(GC, d_dx, NULL, d_db, d_dy, d_x, d_w, d_mean2, d_rstd2, N, C);
    /* dinp = rstd (w dy - mean(w dy) - xhat mean(w dy xhat)): terms of rstd |w dy| that cancel
     * where a row's variance is near 0 (C = 1: rstd = 1/sqrt(eps), about 316, and dinp's
     * increment 0), so a rounding of those terms (the GPU contracts them into fmas, seen on an
     * H100: 3.4e-6 off at C = 1) is the error's scale, not dinp's own size */
    double terms = 0;
    for (size_t i = 0; i < NC; i++)
        terms = fmax(terms, (double)rstd[i / (size_t)C] * fabs((double)w[i % (size_t)C] * dy[i]));
    snprintf(what, sizeof(what), "layernorm_backward dinp N=%d C=%d", N, C);
    check_f(what, d_dx, dx, NC, RT_RED, 1e-6 + 4 * FLT_EPSILON * terms);
    snprintf(what, sizeof(what), "layernorm_backward dweight N=%d C=%d", N, C);
    check_f(what, d_dw, dw, (size_t)C, RT_RED, 1e-6);
    snprintf(what, sizeof(what), "layernorm_backward dbias N=%d C=%d", N, C);
    check_f(what, d_db, db, (size_t)C, RT_RED, 1e-6);
    dfree(d_x), dfree(d_w), dfree(d_b), dfree(d_out), dfree(d_mean), dfree(d_rstd);
    dfree(d_dy), dfree(d_dx), dfree(d_dw), dfree(d_db), dfree(d_mean2), dfree(d_rstd2);
    zt_free(x), zt_free(w), zt_free(b), zt_free(out), zt_free(mean), zt_free(rstd);
    zt_free(dy), zt_free(dx), zt_free(dw), zt_free(db);
    printf("layernorm N=%d C=%d: ok\n", N, C);
}

/* LayerNorm's backward by each of its kernels on one shape, against the CPU: the row kernel
 * (the default where C is a multiple of 4 up to 1024 and the tensors are 16-byte aligned), the
 * grouped one (ZT_CUDA_LN_BWD=grouped), and the grouped one again where dinp and inp sit one
 * float off alignment; the row kernel run twice gives the same bits. */
static void test_layernorm_backward_kernels(int N, int C)
{
    char what[160];
    size_t NC = (size_t)N * C;
    float *x = kc_frandn(NC, 2.0), *w = kc_frandn((size_t)C, 1.0), *b = kc_frandn((size_t)C, 1.0);
    float *dy = kc_frandn(NC, 1.0), *dx0 = kc_frandn(NC, 1.0);
    float *dw0 = kc_frandn((size_t)C, 1.0), *db0 = kc_frandn((size_t)C, 1.0);
    float *out = kc_falloc(NC), *mean = kc_falloc((size_t)N), *rstd = kc_falloc((size_t)N);
    CPU->layernorm_forward(CC, out, mean, rstd, x, w, b, N, C);
    float *dx = kc_fcopy(dx0, NC), *dw = kc_fcopy(dw0, (size_t)C), *db = kc_fcopy(db0, (size_t)C);
    CPU->layernorm_backward(CC, dx, dw, db, dy, x, w, mean, rstd, N, C);
    double terms = 0; /* test_layernorm's scale of dinp's error */
    for (size_t i = 0; i < NC; i++)
        terms = fmax(terms, (double)rstd[i / (size_t)C] * fabs((double)w[i % (size_t)C] * dy[i]));

    /* contexts with ZT_CUDA_LN_BWD=grouped, and with a value it does not know (a warning; the
     * default) */
    zt_kctx *cx[3] = {GC, NULL, NULL};
    const char *env[3] = {NULL, "grouped", "rows"};
    zt_err err;
    for (int e = 1; e < 3; e++) {
        setenv("ZT_CUDA_LN_BWD", env[e], 1);
        zt_status st = GPU->ctx_create(&cx[e], 0, &err);
        unsetenv("ZT_CUDA_LN_BWD");
        if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_LN_BWD=%s: %s", env[e], zt_err_msg(&err));
    }
    static const struct {
        int ctx, off, row, again;
        const char *how;
    } ways[] = {{0, 0, 1, 0, "row kernel"},
                {0, 0, 1, 1, "row kernel, again"},
                {1, 0, 0, 0, "grouped (ZT_CUDA_LN_BWD)"},
                {2, 0, 1, 0, "row kernel (ZT_CUDA_LN_BWD=rows, ignored)"},
                {0, 1, 0, 0, "grouped (dinp and inp misaligned)"}};
    float *d_w = upf(w, (size_t)C), *d_dy = upf(dy, NC);
    float *d_mean = upf(mean, (size_t)N), *d_rstd = upf(rstd, (size_t)N);
    float *d_first = dalloc(NC * 4);
    for (size_t k = 0; k < sizeof(ways) / sizeof(ways[0]); k++) {
        zt_kctx *c = cx[ways[k].ctx];
        int off = ways[k].off;
        float *d_xb = dalloc((NC + 1) * 4), *d_dxb = dalloc((NC + 1) * 4);
        float *d_x = d_xb + off, *d_dx = d_dxb + off;
        float *d_dw = upf(dw0, (size_t)C), *d_db = upf(db0, (size_t)C);
        GPU->copy_h2d(GC, d_x, x, NC * 4), GPU->copy_h2d(GC, d_dx, dx0, NC * 4);
        gsync("layernorm_backward kernels: uploads");
        unsigned long long rows0 = EMU_NAMED("row kernel");
        GPU->layernorm_backward(c, d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, N, C);
        if (GPU->sync(c, &err) != ZT_OK)
            ZT_FAIL("layernorm_backward %s: %s", ways[k].how, zt_err_msg(&err));
        if (EMU_COUNTS && (EMU_NAMED("row kernel") > rows0) != (ways[k].row != 0))
            ZT_FAIL("layernorm_backward N=%d C=%d: the row kernel %s where %s was wanted", N, C,
                    ways[k].row ? "did not run" : "ran", ways[k].how);
        snprintf(what, sizeof(what), "layernorm_backward dinp N=%d C=%d, %s", N, C, ways[k].how);
        check_f(what, d_dx, dx, NC, RT_RED, 1e-6 + 4 * FLT_EPSILON * terms);
        snprintf(what, sizeof(what), "layernorm_backward dweight N=%d C=%d, %s", N, C, ways[k].how);
        check_f(what, d_dw, dw, (size_t)C, RT_RED, 1e-6);
        snprintf(what, sizeof(what), "layernorm_backward dbias N=%d C=%d, %s", N, C, ways[k].how);
        check_f(what, d_db, db, (size_t)C, RT_RED, 1e-6);
        if (ways[k].again) {
            float *h = kc_falloc(NC);
            GPU->copy_d2h(GC, h, d_first, NC * 4);
            snprintf(what, sizeof(what), "layernorm_backward dinp N=%d C=%d, run twice", N, C);
            check_bits(what, d_dx, h, NC, 4);
            zt_free(h);
        } else if (k == 0) {
            GPU->copy_d2d(GC, d_first, d_dx, NC * 4);
        }
        dfree(d_xb), dfree(d_dxb), dfree(d_dw), dfree(d_db);
    }
    GPU->ctx_destroy(cx[1]), GPU->ctx_destroy(cx[2]);
    dfree(d_w), dfree(d_dy), dfree(d_mean), dfree(d_rstd), dfree(d_first);
    zt_free(x), zt_free(w), zt_free(b), zt_free(dy), zt_free(dx0), zt_free(dw0), zt_free(db0);
    zt_free(out), zt_free(mean), zt_free(rstd), zt_free(dx), zt_free(dw), zt_free(db);
    printf("layernorm_backward kernels N=%d C=%d: ok\n", N, C);
}

/* ---- bias gradients from 16-bit dout ---- */

#if defined(ZT_TEST_EMU) || defined(ZT_TEST_CUDA) /* a build with kernels/cuda/ */
/* kernels/cuda/cuda_int.h (zt_cuda_mm: 2 bf16, 3 fp16) */
void zt_cuda_bias_backward(zt_kctx *ctx, float *dbias, const float *dout, int N, int OC);
void zt_cuda_bias_backward16(zt_kctx *ctx, float *dbias, const uint16_t *dout, int mm16, int N,
                             int OC);

/* The bias gradient from a bf16 or fp16 dout (four columns a thread where OC is a multiple of 4
 * and dout 8-byte aligned, else one) onto a prefilled one, bit for bit that of the fp32 op on
 * the widened values: the same sums in the same order; dout aligned and 2 bytes past it. */
static void test_bias_backward16(int N, int OC)
{
    size_t n = (size_t)N * OC;
    float *x = kc_frandn(n, 1.0), *db0 = kc_frandn((size_t)OC, 1.0);
    float *got = kc_falloc((size_t)OC), *want = kc_falloc((size_t)OC);
    uint16_t *h = zt_malloc((n + 1) * sizeof(uint16_t));
    if (!h) ZT_FAIL("out of memory");
    for (int t = 0; t < 2; t++) {
        zt_dtype dt = t ? ZT_F16 : ZT_BF16;
        for (size_t i = 0; i < n; i++) { /* the values the 16-bit copy holds */
            zt_store_f32(h, dt, i, x[i]);
            x[i] = zt_load_f32(h, dt, i);
        }
        float *d_x = upf(x, n), *d_want = upf(db0, (size_t)OC), *d_got = upf(db0, (size_t)OC);
        zt_cuda_bias_backward(GC, d_want, d_x, N, OC);
        GPU->copy_d2h(GC, want, d_want, (size_t)OC * 4);
        for (int off = 0; off < 2; off++) {
            uint16_t *d_h = (uint16_t *)dalloc((n + 1) * sizeof(uint16_t)) + off;
            GPU->copy_h2d(GC, d_h, h, n * sizeof(uint16_t));
            GPU->copy_h2d(GC, d_got, db0, (size_t)OC * 4);
            zt_cuda_bias_backward16(GC, d_got, d_h, t ? 3 : 2, N, OC);
            GPU->copy_d2h(GC, got, d_got, (size_t)OC * 4);
            gsync("bias_backward16");
            for (int c = 0; c < OC; c++)
                if (memcmp(&got[c], &want[c], 4) != 0)
                    ZT_FAIL("bias_backward16 %s N=%d OC=%d dout %s: column %d %.9g, the fp32 op's "
                            "%.9g",
                            zt_dtype_name(dt), N, OC,
                            off ? "2 bytes past 8-byte alignment" : "aligned", c, (double)got[c],
                            (double)want[c]);
            dfree(d_h - off);
        }
        dfree(d_x), dfree(d_want), dfree(d_got);
    }
    zt_free(x), zt_free(db0), zt_free(got), zt_free(want), zt_free(h);
    printf("bias_backward16 N=%d OC=%d: ok\n", N, OC);
}
#endif

/* ---- gelu, residual ---- */

static void test_gelu_residual(size_t n)
{
    char what[128];
    float *x = kc_falloc(n);
    for (size_t i = 0; i < n; i++) /* wide range: tails where exp saturates, near zero */
        x[i] = (float)(kc_normal() * (i % 3 == 0 ? 8.0 : i % 3 == 1 ? 1.0 : 1e-3));
    float *y = kc_falloc(n), *dy = kc_frandn(n, 1.0), *dx = kc_frandn(n, 1.0);
    CPU->gelu_forward(CC, y, x, n);
    float *d_x = upf(x, n), *d_y = dalloc(n * 4), *d_dy = upf(dy, n), *d_dx = upf(dx, n);
    GPU->gelu_forward(GC, d_y, d_x, n);
    snprintf(what, sizeof(what), "gelu_forward n=%zu", n);
    check_f(what, d_y, y, n, RT_FWD, 1e-7);
    CPU->gelu_backward(CC, dx, x, dy, n);
    GPU->gelu_backward(GC, d_dx, d_x, d_dy, n);
    GPU->gelu_backward(GC, NULL, d_x, d_dy, n);
    snprintf(what, sizeof(what), "gelu_backward n=%zu", n);
    check_f(what, d_dx, dx, n, RT_FWD, 1e-7);

    float *a = kc_frandn(n, 1.0), *b = kc_frandn(n, 1.0), *o = kc_falloc(n);
    float *da = kc_frandn(n, 1.0), *db = kc_frandn(n, 1.0);
    CPU->residual_forward(CC, o, a, b, n);
    float *d_a = upf(a, n), *d_b = upf(b, n), *d_o = dalloc(n * 4);
    float *d_da = upf(da, n), *d_db = upf(db, n);
    GPU->residual_forward(GC, d_o, d_a, d_b, n);
    snprintf(what, sizeof(what), "residual_forward n=%zu", n);
    check_bits(what, d_o, o, n, 4);
    CPU->residual_backward(CC, da, db, dy, n);
    GPU->residual_backward(GC, d_da, d_db, d_dy, n);
    CPU->residual_backward(CC, da, NULL, dy, n);
    GPU->residual_backward(GC, d_da, NULL, d_dy, n);
    CPU->residual_backward(CC, NULL, db, dy, n);
    GPU->residual_backward(GC, NULL, d_db, d_dy, n);
    snprintf(what, sizeof(what), "residual_backward da n=%zu", n);
    check_bits(what, d_da, da, n, 4);
    snprintf(what, sizeof(what), "residual_backward db n=%zu", n);
    check_bits(what, d_db, db, n, 4);
    dfree(d_x), dfree(d_y), dfree(d_dy), dfree(d_dx), dfree(d_a), dfree(d_b), dfree(d_o);
    dfree(d_da), dfree(d_db);
    zt_free(x), zt_free(y), zt_free(dy), zt_free(dx), zt_free(a), zt_free(b), zt_free(o);
    zt_free(da), zt_free(db);
    printf("gelu, residual n=%zu: ok\n", n);
}

/* ---- cross-entropy ---- */

static void test_crossentropy(int N, int V, int Vp)
{
    char what[160];
    size_t n = (size_t)N * Vp;
    float *logits = kc_frandn(n, 3.0);
    for (size_t i = 0; i < (size_t)N; i++) /* padded columns hold garbage that must not count */
        for (int j = V; j < Vp; j++)
            logits[i * Vp + j] = 1e4f;
    int32_t *tg = rand_ids((size_t)N, V);
    if (N > 2) tg[N - 1] = -1; /* a bad target: NaN loss, no fault */
    if (N > 2) /* a row of -inf logits but for every 97th and its target: their softmax */
        for (int j = 0; j < V; j++)
            if (j % 97 != 0 && j != tg[0]) logits[j] = -INFINITY;
    float dloss = 1.0f / (float)N;
    /* the reference is computed in double, not by the CPU kernel: its float sum of V terms
     * may run in one chain (sanitizer builds), whose error once reached 1.5e-4 of a
     * probability of 0.74 (V 50257, ZT_TEST_SEED=12532029469 under ASan), past the bound
     * below (the CPU kernel is tested against PyTorch) */
    double *logits_d = kc_widen(logits, n), *loss_d = kc_dalloc((size_t)N), *want_d = kc_dalloc(n);
    kc_ref_crossentropy(loss_d, want_d, logits_d, tg, N, V, Vp, dloss);
    float *loss = kc_falloc((size_t)N), *want = kc_falloc(n);
    for (size_t i = 0; i < n; i++)
        want[i] = (float)want_d[i];
    for (int i = 0; i < N; i++)
        loss[i] = (float)loss_d[i];
    float *d_l = upf(logits, n), *d_dl = upf(logits, n), *d_loss = dalloc((size_t)N * 4);
    int32_t *d_tg = up(tg, (size_t)N * 4);
    /* dlogits 4 bytes past a 16-byte boundary while the logits are on one: the gradient
     * element by element, not by the logits' quads */
    float *d_dlu = dalloc((n + 1) * 4);
    float *got = kc_falloc((size_t)N);
    const char *modes[4] = {"separate dlogits", "in place", "no dlogits",
                            "dlogits not 16-byte aligned"};
    for (int mode = 0; mode < 4; mode++) {
        GPU->memset0(GC, d_loss, (size_t)N * 4);
        if (mode == 0 || mode == 3) {
            float *dl = mode == 0 ? d_dl : d_dlu + 1;
            GPU->memset0(GC, dl, n * 4);
            GPU->crossentropy_forward_backward(GC, d_loss, dl, d_l, d_tg, N, V, Vp, dloss);
        } else if (mode == 1) {
            GPU->copy_h2d(GC, d_dl, logits, n * 4);
            GPU->crossentropy_forward_backward(GC, d_loss, d_dl, d_dl, d_tg, N, V, Vp, dloss);
        } else {
            GPU->crossentropy_forward_backward(GC, d_loss, NULL, d_l, d_tg, N, V, Vp, dloss);
        }
        GPU->copy_d2h(GC, got, d_loss, (size_t)N * 4);
        gsync("crossentropy");
        for (int i = 0; i < N; i++) {
            if (isnan(loss[i]) || isnan(got[i])) {
                if (!(isnan(loss[i]) && isnan(got[i])))
                    ZT_FAIL("crossentropy (%s) N=%d V=%d: row %d loss GPU %g, CPU %g", modes[mode],
                            N, V, i, (double)got[i], (double)loss[i]);
                continue;
            }
            ASSERT_NEAR(got[i], loss[i], RT_RED, 1e-6);
        }
        if (mode != 2) { /* the bad-target row has a gradient too: the softmax, no one-hot */
            snprintf(what, sizeof(what), "crossentropy dlogits (%s) N=%d V=%d Vp=%d", modes[mode],
                     N, V, Vp);
            /* every gradient carries the relative error of the GPU's float sum of V terms
             * (per-thread chains, then a tree) */
            double rt = RT_FWD + 8.0 * sqrt((double)V) * 0x1p-24;
            check_f(what, mode == 3 ? d_dlu + 1 : d_dl, want, n, rt, 1e-9);
        }
    }
    dfree(d_l), dfree(d_dl), dfree(d_dlu), dfree(d_loss), dfree(d_tg);
    zt_free(logits), zt_free(tg), zt_free(loss), zt_free(want), zt_free(got);
    zt_free(logits_d), zt_free(loss_d), zt_free(want_d);
    printf("crossentropy N=%d V=%d Vp=%d: ok\n", N, V, Vp);
}
#endif
