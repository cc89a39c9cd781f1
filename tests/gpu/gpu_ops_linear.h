/* zerotrain tests: test_gpu_ops' cases of the linear layers of a mixed-precision job: the
 * classifier with its loss, the 16-bit homes of a matmul's input and output, the residual
 * added by the GEMM, and the MLP in 16 bits. */
#ifndef ZT_TESTS_GPU_GPU_OPS_LINEAR_H
#define ZT_TESTS_GPU_GPU_OPS_LINEAR_H

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_ops_matmul.h"

/* ---- the classifier (classifier_forward_backward) ---- */

/* Host results of one classifier run: losses, dx (from dx0), dwte (from dw0) */
typedef struct {
    float *loss, *dx, *dw;
} cls_out;

enum { CLS_EVAL, CLS_TRAIN, CLS_TRAIN_NO_DW };

/* The classifier on context c over the host inputs: the op itself, or with by_ops the table's
 * ops one by one (zt_classifier_by_ops, the unfused reference); the logits rounded to l16
 * unless it is ZT_F32 (classifier16_forward_backward, zt_classifier16_by_ops) */
static cls_out cls_run16(zt_kctx *c, zt_dtype l16, bool by_ops, int mode, const float *x,
                         const float *w, const int32_t *tg, const float *dx0, const float *dw0,
                         int N, int rows, int C, int V, int Vp)
{
    size_t NC = (size_t)N * C, WC = (size_t)Vp * C;
    int r = rows < N ? rows : N;
    float *d_x = upf(x, NC), *d_w = upf(w, WC), *d_dx = upf(dx0, NC), *d_dw = upf(dw0, WC);
    float *d_lg = dalloc((size_t)r * Vp * 4), *d_loss = dalloc((size_t)N * 4);
    int32_t *d_tg = up(tg, (size_t)N * 4);
    float *dxp = mode == CLS_EVAL ? NULL : d_dx, *dwp = mode == CLS_TRAIN ? d_dw : NULL;
    float dloss = 1.0f / (float)N;
    if (by_ops && l16 != ZT_F32)
        zt_classifier16_by_ops(GPU, c, l16, d_loss, dxp, dwp, d_lg, d_x, d_w, d_tg, N, rows, C, V,
                               Vp, dloss);
    else if (l16 != ZT_F32)
        GPU->classifier16_forward_backward(c, l16, d_loss, dxp, dwp, d_lg, d_x, d_w, d_tg, N, rows,
                                           C, V, Vp, dloss);
    else if (by_ops)
        zt_classifier_by_ops(GPU, c, d_loss, dxp, dwp, d_lg, d_x, d_w, d_tg, N, rows, C, V, Vp,
                             dloss);
    else
        GPU->classifier_forward_backward(c, d_loss, dxp, dwp, d_lg, d_x, d_w, d_tg, N, rows, C, V,
                                         Vp, dloss);
    cls_out o = {kc_falloc((size_t)N), kc_falloc(NC), kc_falloc(WC)};
    GPU->copy_d2h(c, o.loss, d_loss, (size_t)N * 4);
    GPU->copy_d2h(c, o.dx, d_dx, NC * 4);
    GPU->copy_d2h(c, o.dw, d_dw, WC * 4);
    zt_err err;
    if (GPU->sync(c, &err) != ZT_OK) ZT_FAIL("classifier: sync failed: %s", zt_err_msg(&err));
    dfree(d_x), dfree(d_w), dfree(d_dx), dfree(d_dw), dfree(d_lg), dfree(d_loss), dfree(d_tg);
    return o;
}

static cls_out cls_run(zt_kctx *c, bool by_ops, int mode, const float *x, const float *w,
                       const int32_t *tg, const float *dx0, const float *dw0, int N, int rows,
                       int C, int V, int Vp)
{
    return cls_run16(c, ZT_F32, by_ops, mode, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
}

static void cls_free(cls_out *o)
{
    zt_free(o->loss), zt_free(o->dx), zt_free(o->dw);
}

static void cls_match(const char *what, const cls_out *got, const cls_out *want, int N, int C,
                      int Vp, double rms_tol)
{
    host_match(what, "losses", got->loss, want->loss, (size_t)N, rms_tol);
    host_match(what, "dx", got->dx, want->dx, (size_t)N * C, rms_tol);
    host_match(what, "dwte", got->dw, want->dw, (size_t)Vp * C, rms_tol);
}

/* The classifier op against the ops one by one on the same context and against the CPU: with
 * staged 16-bit inputs (wte rounded once, dlogits written rounded by the cross-entropy) the
 * same bits where a chunk fits the cap whole, and where it does not (chunks of what fits)
 * the same on the emulation (one order of sums per element; dwte's blocks coincide here);
 * evaluation's losses the training's; dwte NULL leaves dx as it was; unstaged contexts run
 * the ops one by one. On the emulation, a heuristic that has no algorithm for a 16-bit
 * backward product: that chunk's dlogits again in fp32, the same results. */
static void test_classifier(void)
{
    static const struct {
        const char *mm;
        int N, rows, C, V, Vp;
        size_t cap; /* 16-bit elements; 0: the default */
        int chunks; /* of the staged path; 0: not staged */
        int runs;   /* 0 every run, 1 the full list only, 2 the quick one only */
    } cases[] = {
        {"bf16", 300, 128, 64, 1000, 1024, 0, 3, 1},
        {"fp16", 300, 128, 64, 1000, 1024, 0, 3, 1},
        /* wte (65536, padded) and 64 rows of dlogits and x (1088 a row) under the cap */
        {"bf16", 300, 128, 64, 1000, 1024, 65536 + 128 + 64 * 1088, 5, 1},
        {"bf16", 5, 128, 96, 50, 64, 0, 1, 0},
        {"fp32", 300, 128, 64, 1000, 1024, 0, 0, 1},
        /* GPT-2's vocabulary: the cross-entropy's batches of quads (ZT_XENT_BATCH) and tails */
        {"bf16", 12, 128, 64, 50257, 50304, 0, 1, 1},
        /* quick: the same paths on fewer rows (the emulation runs a block of 512 threads a
         * row): chunks of 16 and a last one of 8; under the cap, one of 64 and the rest */
        {"bf16", 40, 16, 64, 1000, 1024, 0, 3, 2},
        {"fp16", 40, 16, 64, 1000, 1024, 0, 3, 2},
        {"bf16", 100, 128, 64, 1000, 1024, 65536 + 128 + 64 * 1088, 2, 2},
        {"fp32", 40, 16, 64, 1000, 1024, 0, 0, 2},
        {"bf16", 4, 128, 64, 50257, 50304, 0, 1, 2},
    };
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        if (cases[t].runs == (QUICK ? 1 : 2)) continue;
        int N = cases[t].N, rows = cases[t].rows, C = cases[t].C, V = cases[t].V;
        int Vp = cases[t].Vp, chunks = cases[t].chunks;
        size_t NC = (size_t)N * C, WC = (size_t)Vp * C;
        float *x = kc_frandn(NC, 1.0), *w = kc_frandn(WC, 0.5);
        float *dx0 = kc_frandn(NC, 1.0), *dw0 = kc_frandn(WC, 1.0);
        int32_t *tg = rand_ids((size_t)N, V);
        char what[160];
        snprintf(what, sizeof(what), "classifier %s N=%d rows=%d C=%d V=%d Vp=%d cap %zu",
                 cases[t].mm, N, rows, C, V, Vp, cases[t].cap);
        zt_kctx *c = ctx_stage(cases[t].mm, NULL, cases[t].cap);
        unsigned long long l0 = EMU_NAMED("matmul staging"), g0 = EMU_GEMMS();
        unsigned long long x0 = EMU_NAMED("dlogits)");
        cls_out op = cls_run(c, false, CLS_TRAIN, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
        if (EMU_COUNTS && chunks) { /* wte once, x once a chunk; three products a chunk */
            ASSERT_EQ_INT((int)(EMU_NAMED("matmul staging") - l0), 1 + chunks);
            ASSERT_EQ_INT((int)(EMU_GEMMS() - g0), 3 * chunks);
            ASSERT_EQ_INT((int)(EMU_NAMED("dlogits)") - x0), chunks);
        }
        if (EMU_COUNTS && !chunks) ASSERT_TRUE(EMU_NAMED("dlogits)") == x0);
        cls_out ops = cls_run(c, true, CLS_TRAIN, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
        cls_out ev = cls_run(c, false, CLS_EVAL, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
        cls_out nd = cls_run(c, false, CLS_TRAIN_NO_DW, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
        /* bit for bit on the emulation; on a GPU where the chunks are the ops' own */
        bool bits = EMU_COUNTS || !chunks || cases[t].cap == 0;
        cls_match(what, &op, &ops, N, C, Vp, bits ? 0.0 : 1e-3);
        host_match(what, "evaluation losses", ev.loss, op.loss, (size_t)N, 0.0);
        host_match(what, "evaluation dx", ev.dx, dx0, NC, 0.0);
        host_match(what, "evaluation dwte", ev.dw, dw0, WC, 0.0);
        host_match(what, "dx without dwte", nd.dx, op.dx, NC, 0.0);
        host_match(what, "dwte left out", nd.dw, dw0, WC, 0.0);
        /* the CPU's fp32 products: bf16's rounding of the inputs, 2^-9, over C terms */
        float *cdx = kc_fcopy(dx0, NC), *cdw = kc_fcopy(dw0, WC), *closs = kc_falloc((size_t)N);
        float *clg = kc_falloc((size_t)(rows < N ? rows : N) * Vp);
        CPU->classifier_forward_backward(CC, closs, cdx, cdw, clg, x, w, tg, N, rows, C, V, Vp,
                                         1.0f / (float)N);
        cls_out cpu = {closs, cdx, cdw};
        double tol = strcmp(cases[t].mm, "bf16") == 0   ? 1e-2
                     : strcmp(cases[t].mm, "fp16") == 0 ? 2e-3
                                                        : 1e-5;
        cls_match(what, &op, &cpu, N, C, Vp, tol);
        if (chunks && cases[t].cap == 0) {
            /* ZT_CUDA_STAGE_FUSED=0: the ops one by one, the same bits */
            setenv("ZT_CUDA_STAGE_FUSED", "0", 1);
            zt_kctx *cf = ctx_stage(cases[t].mm, NULL, 0);
            unsetenv("ZT_CUDA_STAGE_FUSED");
            unsigned long long x1 = EMU_NAMED("dlogits)");
            cls_out uf = cls_run(cf, false, CLS_TRAIN, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
            if (EMU_COUNTS) ASSERT_TRUE(EMU_NAMED("dlogits)") == x1);
            cls_match("classifier with ZT_CUDA_STAGE_FUSED=0", &uf, &op, N, C, Vp, 0.0);
            cls_free(&uf);
            GPU->ctx_destroy(cf);
            /* a value other than 0 or 1 warns and counts as unset: fused */
            setenv("ZT_CUDA_STAGE_FUSED", "yes", 1);
            cf = ctx_stage(cases[t].mm, NULL, 0);
            unsetenv("ZT_CUDA_STAGE_FUSED");
            x1 = EMU_NAMED("dlogits)");
            uf = cls_run(cf, false, CLS_TRAIN, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
            if (EMU_COUNTS) ASSERT_EQ_INT((int)(EMU_NAMED("dlogits)") - x1), chunks);
            cls_match("classifier with ZT_CUDA_STAGE_FUSED=yes", &uf, &op, N, C, Vp, 0.0);
            cls_free(&uf);
            GPU->ctx_destroy(cf);
        }
        {
            /* the logits rounded to 16 bits (the matmuls' type, bf16 for fp32 matmuls: the ops
             * one by one): the op against its ops one by one (bitwise on the emulation; on a GPU
             * the 16-bit logits may come from another kernel than the fp32 ones), evaluation's
             * losses, the CPU's; the staged op's cross-entropy reads the 16-bit logits; other
             * losses than the fp32 logits give */
            zt_dtype l16 = strcmp(cases[t].mm, "fp16") == 0 ? ZT_F16 : ZT_BF16;
            unsigned long long y0 = EMU_NAMED(" logits)");
            cls_out o16 =
                cls_run16(c, l16, false, CLS_TRAIN, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
            if (EMU_COUNTS) ASSERT_EQ_INT((int)(EMU_NAMED(" logits)") - y0), chunks);
            cls_out r16 = cls_run16(c, l16, true, CLS_TRAIN, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
            cls_out e16 = cls_run16(c, l16, false, CLS_EVAL, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
            char w16[200];
            snprintf(w16, sizeof(w16), "%s, %s logits", what, zt_dtype_name(l16));
            cls_match(w16, &o16, &r16, N, C, Vp, bits ? 0.0 : 2e-3);
            host_match(w16, "evaluation losses", e16.loss, o16.loss, (size_t)N, 0.0);
            float *c16x = kc_fcopy(dx0, NC), *c16w = kc_fcopy(dw0, WC);
            float *c16l = kc_falloc((size_t)N);
            CPU->classifier16_forward_backward(CC, l16, c16l, c16x, c16w, clg, x, w, tg, N, rows, C,
                                               V, Vp, 1.0f / (float)N);
            cls_out cpu16 = {c16l, c16x, c16w};
            cls_match(w16, &o16, &cpu16, N, C, Vp, tol);
            size_t differ = 0;
            for (int i = 0; i < N; i++)
                differ += o16.loss[i] != op.loss[i];
            if (differ == 0) ZT_FAIL("%s: the losses of the fp32 logits", w16);
#ifdef ZT_TEST_EMU
            if (chunks) { /* a 16-bit backward product without an algorithm, as below */
                zt_kctx *f = ctx_stage(cases[t].mm, NULL, cases[t].cap);
                cls_out e =
                    cls_run16(f, l16, false, CLS_EVAL, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
                zt_emu_lt_fail_heuristics(1, 15 /* CUBLAS_STATUS_NOT_SUPPORTED */);
                cls_out fb =
                    cls_run16(f, l16, false, CLS_TRAIN, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
                cls_match(w16, &fb, &r16, N, C, Vp, 0.0);
                cls_free(&e), cls_free(&fb);
                GPU->ctx_destroy(f);
            }
#endif
            cls_free(&o16), cls_free(&r16), cls_free(&e16), cls_free(&cpu16);
        }
#ifdef ZT_TEST_EMU
        if (chunks) {
            /* no algorithm for the first 16-bit backward product (the forward's shapes cached
             * by an evaluation first): the chunks whose shape it is run on fp32 dlogits */
            zt_kctx *f = ctx_stage(cases[t].mm, NULL, cases[t].cap);
            cls_out e = cls_run(f, false, CLS_EVAL, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
            unsigned long long ce0 = EMU_NAMED("crossentropy_forward_backward");
            unsigned long long ce16 = EMU_NAMED("dlogits)");
            zt_emu_lt_fail_heuristics(1, 15 /* CUBLAS_STATUS_NOT_SUPPORTED */);
            cls_out fb = cls_run(f, false, CLS_TRAIN, x, w, tg, dx0, dw0, N, rows, C, V, Vp);
            /* a chunk's 16-bit cross-entropy, then its fp32 one for the fallback */
            ASSERT_TRUE(EMU_NAMED("crossentropy_forward_backward") - ce0 >
                        EMU_NAMED("dlogits)") - ce16);
            cls_match("classifier, 16-bit backward without an algorithm", &fb, &ops, N, C, Vp, 0.0);
            cls_free(&e), cls_free(&fb);
            GPU->ctx_destroy(f);
        }
#endif
        cls_free(&op), cls_free(&ops), cls_free(&ev), cls_free(&nd);
        zt_free(clg), zt_free(cdx), zt_free(cdw), zt_free(closs);
        GPU->ctx_destroy(c);
        zt_free(x), zt_free(w), zt_free(dx0), zt_free(dw0), zt_free(tg);
        printf("%s: ok\n", what);
    }
}

static void check16(const char *what, const void *d, const uint16_t *want16, zt_dtype dt, size_t n,
                    bool exact)
{
    if (exact) {
        check_bits(what, d, want16, n, 2);
        return;
    }
    uint16_t *g16 = zt_malloc(n * 2 + 2);
    float *got = kc_falloc(n), *want = kc_falloc(n);
    if (!g16) ZT_FAIL("out of memory");
    GPU->copy_d2h(GC, g16, d, n * 2);
    gsync(what);
    CPU->cast(CC, got, ZT_F32, g16, dt, n);
    CPU->cast(CC, want, ZT_F32, want16, dt, n);
    double *w = kc_widen(want, n);
    kc_check_close(what, got, w, n, dt == ZT_BF16 ? 1.6e-2 : 2e-3, 1e-3);
    zt_free(w), zt_free(got), zt_free(want), zt_free(g16);
}

/* matmul16_forward and _backward (a 16-bit input: an attention output's home) give the bits
 * of cast into fp32 then matmul_forward or matmul_backward on the same context: staged bf16
 * and fp16 contexts, where the home is read in place by whole rows (else copied into the
 * staging) and the fp32 scratch is left alone (NaN), with the staging whole, in blocks of
 * rows, by columns with the weight over the cap and by depth (whose backwards run unstaged:
 * the scratch filled); a home of the other 16-bit type,
 * fp32 matmuls, and copies by their own passes (ZT_CUDA_STAGE_FUSED=0), which fill the scratch
 * and run the op. The forward with a residual input too (check_res), its scratch left alone
 * as without one but where staged by columns (which a residual input does not take). */
static void test_matmul16(void)
{
    static const struct {
        const char *mm;
        zt_dtype dt;
        int N, C, OC;
        size_t cap;
        const char *fused;
        int copied; /* 1 forward, 2 backward: the home copied, the scratch left alone */
        bool cols;  /* staged by columns: not with a residual input (fp32 operands here) */
    } cases[] = {
        {"bf16", ZT_BF16, 300, 200, 136, 0, NULL, 3, false},
        {"fp16", ZT_F16, 300, 200, 136, 0, NULL, 3, false},
        {"bf16", ZT_BF16, 300, 200, 136, 27264 + 200 * 128, NULL, 3, false},
        {"bf16", ZT_BF16, 64, 96, 1000, 6144 + 128 + 96 * 128, NULL, 1, true},
        {"bf16", ZT_BF16, 300, 200, 136, 128 + 436 * 64, NULL, 1, false}, /* forward by depth */
        {"bf16", ZT_F16, 300, 200, 136, 0, NULL, 0, false},
        {"fp32", ZT_BF16, 300, 200, 136, 0, NULL, 0, false},
        {"bf16", ZT_BF16, 300, 200, 136, 0, "0", 0, false},
    };
    zt_kctx *keep = GC;
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        int N = cases[t].N, C = cases[t].C, OC = cases[t].OC;
        size_t NC = (size_t)N * C, NO = (size_t)N * OC, WC = (size_t)OC * C;
        char what[160];
        if (cases[t].fused) setenv("ZT_CUDA_STAGE_FUSED", cases[t].fused, 1);
        GC = ctx_stage(cases[t].mm, NULL, cases[t].cap);
        unsetenv("ZT_CUDA_STAGE_FUSED");
        float *x = kc_frandn(NC, 1.0), *w = kc_frandn(WC, 0.3), *b = kc_frandn((size_t)OC, 1.0);
        float *dy = kc_frandn(NO, 1.0), *nan = kc_falloc(NC), *h_o = kc_falloc(NO);
        float *h_dx = kc_falloc(NC), *h_dw = kc_falloc(WC), *h_db = kc_falloc((size_t)OC);
        for (size_t i = 0; i < NC; i++)
            nan[i] = NAN;
        float *d_x = upf(x, NC), *d_w = upf(w, WC), *d_b = upf(b, (size_t)OC), *d_dy = upf(dy, NO);
        float *d_xr = dalloc(NC * 4), *d_act = upf(nan, NC), *d_o1 = dalloc(NO * 4);
        float *d_o2 = dalloc(NO * 4), *d_dx1 = dalloc(NC * 4), *d_dx2 = dalloc(NC * 4);
        float *d_dw1 = dalloc(WC * 4), *d_dw2 = dalloc(WC * 4), *d_db1 = dalloc((size_t)OC * 4);
        float *d_db2 = dalloc((size_t)OC * 4);
        void *d_x16 = dalloc(NC * 2);
        GPU->cast(GC, d_x16, cases[t].dt, d_x, ZT_F32, NC);
        GPU->cast(GC, d_xr, ZT_F32, d_x16, cases[t].dt, NC);
        GPU->matmul_forward(GC, d_o1, d_xr, d_w, d_b, N, C, OC);
        GPU->matmul16_forward(GC, d_o2, d_act, d_x16, cases[t].dt, d_w, d_b, NULL, N, C, OC);
        GPU->copy_d2h(GC, h_o, d_o1, NO * 4);
        gsync("matmul16_forward");
        snprintf(what, sizeof(what), "matmul16_forward, %s matmuls, a %s input, N=%d C=%d OC=%d",
                 cases[t].mm, zt_dtype_name(cases[t].dt), N, C, OC);
        check_bits(what, d_o2, h_o, NO, 4);
        if (cases[t].copied & 1) check_bits(what, d_act, nan, NC, 4); /* the scratch untouched */
        /* with a residual input (the block's x): added by the GEMM as its C */
        {
            float *res = kc_frandn(NO, 2.0), *d_res = upf(res, NO);
            char whatr[192];
            GPU->copy_h2d(GC, d_o2, nan, NO < NC ? NO * 4 : NC * 4); /* NaN where it reaches */
            unsigned long long r0 = EMU_NAMED("residual_forward");
            GPU->matmul16_forward(GC, d_o2, d_act, d_x16, cases[t].dt, d_w, d_b, d_res, N, C, OC);
            snprintf(whatr, sizeof(whatr), "%s, a residual input", what);
            /* staged by columns, the product without it; with it (no columns) on the fp32
             * operands, which on a GPU cuBLASLt's CUBLAS_COMPUTE_32F_FAST_16BF does not round
             * as the copies are: the two differ by bf16's precision over 96 products, which
             * the terms do not bound (an H200: 0.008 where the terms come to 1.8, against
             * 2^-8 of them; 2^-5 leaves 7 times that, while a residual missed or from another
             * row is off by its own size, ~2) */
            double rel = 0x1p-16;
#ifndef ZT_TEST_EMU
            if (cases[t].cols) rel = 0x1p-5;
#endif
            check_res(whatr, d_o2, h_o, res, b, N, OC, rel);
            if (EMU_NAMED("residual_forward") != r0) /* added by the GEMM */
                ZT_FAIL("%s: %llu residual_forward kernels", whatr,
                        EMU_NAMED("residual_forward") - r0);
            if ((cases[t].copied & 1) && !cases[t].cols) check_bits(whatr, d_act, nan, NC, 4);
            dfree(d_res), zt_free(res);
        }
        /* dx written (NaN before), dw and db accumulated */
        GPU->memset0(GC, d_dx1, NC * 4), GPU->copy_h2d(GC, d_dx2, nan, NC * 4);
        GPU->memset0(GC, d_dw1, WC * 4), GPU->memset0(GC, d_dw2, WC * 4);
        GPU->memset0(GC, d_db1, (size_t)OC * 4), GPU->memset0(GC, d_db2, (size_t)OC * 4);
        GPU->copy_h2d(GC, d_act, nan, NC * 4);
        GPU->matmul_backward(GC, d_dx1, d_dw1, d_db1, d_dy, d_xr, d_w, N, C, OC);
        GPU->matmul16_backward(GC, d_dx2, NULL, d_dw2, d_db2, d_dy, d_act, d_x16, cases[t].dt, d_w,
                               N, C, OC);
        GPU->copy_d2h(GC, h_dx, d_dx1, NC * 4);
        GPU->copy_d2h(GC, h_dw, d_dw1, WC * 4);
        GPU->copy_d2h(GC, h_db, d_db1, (size_t)OC * 4);
        gsync("matmul16_backward");
        snprintf(what, sizeof(what), "matmul16_backward, %s matmuls, a %s input, N=%d C=%d OC=%d",
                 cases[t].mm, zt_dtype_name(cases[t].dt), N, C, OC);
        check_bits(what, d_dx2, h_dx, NC, 4);
        check_bits(what, d_dw2, h_dw, WC, 4);
        check_bits(what, d_db2, h_db, (size_t)OC, 4);
        if (cases[t].copied & 2) check_bits(what, d_act, nan, NC, 4);
        /* dx written rounded (dinp16 over NaN, dx room): the rounding of the fp32 dx (within an
         * ulp on a GPU, whose 16-bit GEMM may be another kernel) */
        void *d_r16 = dalloc(NC * 2), *d_h16 = dalloc(NC * 2);
        uint16_t *hr16 = zt_malloc(NC * 2 + 2);
        if (!hr16) ZT_FAIL("out of memory");
        GPU->cast(GC, d_r16, cases[t].dt, d_dx1, ZT_F32, NC);
        GPU->copy_d2h(GC, hr16, d_r16, NC * 2);
        GPU->copy_h2d(GC, d_h16, nan, NC * 2), GPU->copy_h2d(GC, d_dx2, nan, NC * 4);
        GPU->matmul16_backward(GC, d_dx2, d_h16, NULL, NULL, d_dy, d_act, d_x16, cases[t].dt, d_w,
                               N, C, OC);
        char what16[224];
        snprintf(what16, sizeof(what16), "%s, 16-bit dx", what);
#ifdef ZT_TEST_EMU
        check16(what16, d_h16, hr16, cases[t].dt, NC, true);
#else
        check16(what16, d_h16, hr16, cases[t].dt, NC, false);
#endif
        dfree(d_r16), dfree(d_h16), zt_free(hr16);
        printf("%s: ok\n", what);
        dfree(d_x), dfree(d_w), dfree(d_b), dfree(d_dy), dfree(d_xr), dfree(d_act), dfree(d_o1);
        dfree(d_o2), dfree(d_dx1), dfree(d_dx2), dfree(d_dw1), dfree(d_dw2), dfree(d_db1);
        dfree(d_db2), dfree(d_x16);
        zt_free(x), zt_free(w), zt_free(b), zt_free(dy), zt_free(nan), zt_free(h_o);
        zt_free(h_dx), zt_free(h_dw), zt_free(h_db);
        GPU->ctx_destroy(GC);
    }
    GC = keep;
}

#ifdef ZT_TEST_EMU
/* A residual input where cuBLASLt has no algorithm for the GEMM with it (the heuristic's
 * NOT_SUPPORTED, which the shape's cache entry keeps): the product, then the residual add, the
 * bits of the op without it plus the residual, on the query's call and the cached one. */
static void test_residual_fallback(void)
{
    int N = 7, C = 24, OC = 40; /* a shape no other case uses */
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, WC = (size_t)OC * C;
    float *x = kc_frandn(NC, 1.0), *w = kc_frandn(WC, 0.3), *bias = kc_frandn((size_t)OC, 1.0);
    float *res = kc_frandn(NO, 1.0), *want = kc_falloc(NO);
    float *d_x = upf(x, NC), *d_w = upf(w, WC), *d_b = upf(bias, (size_t)OC), *d_r = upf(res, NO);
    float *d_act = dalloc(NC * 4), *d_out = dalloc(NO * 4);
    void *d_x16 = dalloc(NC * 2);
    GPU->cast(GC, d_x16, ZT_BF16, d_x, ZT_F32, NC);
    GPU->matmul16_forward(GC, d_out, d_act, d_x16, ZT_BF16, d_w, d_b, NULL, N, C, OC);
    GPU->copy_d2h(GC, want, d_out, NO * 4);
    gsync("matmul16_forward without a residual input");
    for (size_t i = 0; i < NO; i++)
        want[i] = want[i] + res[i];
    unsigned long long r0 = EMU_NAMED("residual_forward");
    zt_emu_lt_fail_heuristics(1, 15 /* CUBLAS_STATUS_NOT_SUPPORTED */);
    for (int k = 0; k < 2; k++) {
        GPU->matmul16_forward(GC, d_out, d_act, d_x16, ZT_BF16, d_w, d_b, d_r, N, C, OC);
        check_bits("matmul16_forward with a residual input cuBLASLt has no algorithm for", d_out,
                   want, NO, 4);
    }
    ASSERT_TRUE(EMU_NAMED("residual_forward") == r0 + 2);
    dfree(d_x), dfree(d_w), dfree(d_b), dfree(d_r), dfree(d_act), dfree(d_out), dfree(d_x16);
    zt_free(x), zt_free(w), zt_free(bias), zt_free(res), zt_free(want);
    printf("residual input without an algorithm: the product then the add, ok\n");
}
#endif

/* The MLP's ops with its 16-bit home (fch) against the casts and the fp32 ops on the same
 * context: matmul_forward16 (fc's output rounded by the GEMM itself where direct; and
 * layernorm_matmul_forward16, qkv's, from a LayerNorm rounded into its copy),
 * gelu16_matmul_forward, matmul_gelu16_backward (the DGELU writing the rounded gradient from
 * the home) and layernorm_matmul16_backward (the rounded gradient read in place as dout's
 * copy, dbias from it). Where the home is the staging's own type (direct) the fp32 rooms stay
 * NaN; the rest is bitwise, but for the two 16-bit GEMM outputs on a GPU (another kernel may
 * sum in another order: within an ulp). Staged bf16 and fp16, whole and in blocks of rows, a
 * width whose aux is no multiple of 8 (cuBLASLt's DGELU refuses it: the fallback's rows) and
 * one no multiple of 4 (GELU16's copy one element a thread), a home of the other type, fp32
 * matmuls, unfused copies; gelu16_matmul_forward with a residual input too (check_res). */
static void test_mlp16(void)
{
    static const struct {
        const char *mm;
        zt_dtype dt;
        int N, C, H;
        size_t cap;
        const char *fused;
        int direct; /* 1 the forward ops, 2 the backward ones: staged from the home itself */
    } cases[] = {
        {"bf16", ZT_BF16, 300, 72, 288, 0, NULL, 3},
        {"fp16", ZT_F16, 300, 72, 288, 0, NULL, 3},
        {"bf16", ZT_BF16, 300, 72, 288, 20736 + 128 + 128 * 360, NULL, 3}, /* backward: rows */
        {"bf16", ZT_BF16, 300, 72, 288, 20736 + 128 * 72, NULL, 1}, /* fc rows, fcproj depth */
        {"bf16", ZT_BF16, 130, 52, 204, 0, NULL, 3},
        {"fp16", ZT_F16, 130, 50, 202, 0, NULL, 3},
        {"bf16", ZT_F16, 300, 72, 288, 0, NULL, 0},
        {"fp32", ZT_BF16, 300, 72, 288, 0, NULL, 0},
        {"bf16", ZT_BF16, 300, 72, 288, 0, "0", 0},
    };
    zt_kctx *keep = GC;
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        int N = cases[t].N, C = cases[t].C, H = cases[t].H;
        zt_dtype dt = cases[t].dt;
        size_t NC = (size_t)N * C, NH = (size_t)N * H, WH = (size_t)H * C;
        int direct = cases[t].direct;
        bool exact_f = !(direct & 1), exact_b = !(direct & 2);
        /* widths a GPU's 16-bit GEMMs surely take (the emulation takes all but the DGELU's aux
         * of a width no multiple of 8, as documented): the rooms untouched */
        bool wide = C % 8 == 0 && H % 8 == 0, untouched_f = (direct & 1) && wide;
        bool untouched_b = (direct & 2) && wide;
#ifdef ZT_TEST_EMU
        exact_f = exact_b = true; /* one product routine for every output type */
#endif
        char what[192];
        if (cases[t].fused) setenv("ZT_CUDA_STAGE_FUSED", cases[t].fused, 1);
        GC = ctx_stage(cases[t].mm, NULL, cases[t].cap);
        unsetenv("ZT_CUDA_STAGE_FUSED");
        float *x = kc_frandn(NC, 1.0), *w1 = kc_frandn(WH, 0.3), *b1 = kc_frandn((size_t)H, 1.0);
        float *w2 = kc_frandn(WH, 0.3), *b2 = kc_frandn((size_t)C, 1.0);
        float *dy = kc_frandn(NC, 1.0), *lnw = kc_frandn((size_t)C, 1.0);
        float *lnb = kc_frandn((size_t)C, 0.5), *nan = kc_falloc(NH), *h_o = kc_falloc(NC);
        float *h_dw = kc_falloc(WH), *h_db = kc_falloc((size_t)H), *h_dx = kc_falloc(NC);
        uint16_t *h16 = zt_malloc(NH * 2 + 2);
        if (!h16) ZT_FAIL("out of memory");
        for (size_t i = 0; i < NH; i++)
            nan[i] = NAN;
        float *d_x = upf(x, NC), *d_w1 = upf(w1, WH), *d_b1 = upf(b1, (size_t)H);
        float *d_w2 = upf(w2, WH), *d_b2 = upf(b2, (size_t)C), *d_dy = upf(dy, NC);
        float *d_lnw = upf(lnw, (size_t)C), *d_lnb = upf(lnb, (size_t)C);
        float *d_pre = dalloc(NH * 4), *d_r1 = upf(nan, NH), *d_r2 = upf(nan, NH);
        float *d_o1 = dalloc(NC * 4), *d_o2 = dalloc(NC * 4), *d_ln = upf(nan, NC);
        float *d_dw1 = dalloc(WH * 4), *d_dw2 = dalloc(WH * 4), *d_db1 = dalloc((size_t)H * 4);
        float *d_db2 = dalloc((size_t)H * 4), *d_dx1 = dalloc(NC * 4), *d_dx2 = dalloc(NC * 4);
        void *d_p16 = dalloc(NH * 2), *d_q16 = dalloc(NH * 2), *d_e16 = dalloc(NH * 2);
        snprintf(what, sizeof(what), "%s matmuls, a %s home%s, N=%d C=%d H=%d", cases[t].mm,
                 zt_dtype_name(dt), cases[t].fused ? ", copies unfused" : "", N, C, H);

        /* fc: its output rounded; where the GEMM writes it itself (direct), from the bias
         * rounded to dt first (cuBLASLt's 16-bit D takes only a bias of its type) */
        float *b1r = kc_falloc((size_t)H);
        uint16_t *b16 = zt_malloc((size_t)H * 2 + 2);
        if (!b16) ZT_FAIL("out of memory");
        CPU->cast(CC, b16, dt, b1, ZT_F32, (size_t)H);
        CPU->cast(CC, b1r, ZT_F32, b16, dt, (size_t)H);
        float *d_b1r = upf((direct & 1) ? b1r : b1, (size_t)H);
        zt_free(b16), zt_free(b1r);
        GPU->matmul_forward(GC, d_pre, d_x, d_w1, d_b1r, N, C, H);
        GPU->cast(GC, d_p16, dt, d_pre, ZT_F32, NH);
        GPU->copy_d2h(GC, h16, d_p16, NH * 2);
        GPU->matmul_forward16(GC, d_q16, dt, d_r1, d_x, d_w1, d_b1, N, C, H);
        gsync("matmul_forward16");
        char part[256];
        snprintf(part, sizeof(part), "matmul_forward16, %s", what);
        check16(part, d_q16, h16, dt, NH, exact_f);
        if (untouched_f) check_bits(part, d_r1, nan, NH, 4);
        /* the same from a LayerNorm (qkv's home): its statistics too */
        float *d_m1 = dalloc((size_t)N * 4), *d_s1 = dalloc((size_t)N * 4);
        float *d_m2 = dalloc((size_t)N * 4), *d_s2 = dalloc((size_t)N * 4);
        float *h_m = kc_falloc((size_t)N), *h_s = kc_falloc((size_t)N);
        GPU->layernorm_matmul_forward(GC, d_r2, d_ln, d_m1, d_s1, d_x, d_lnw, d_lnb, d_w1, d_b1r, N,
                                      C, H);
        GPU->cast(GC, d_e16, dt, d_r2, ZT_F32, NH);
        uint16_t *h16l = zt_malloc(NH * 2 + 2);
        if (!h16l) ZT_FAIL("out of memory");
        GPU->copy_d2h(GC, h16l, d_e16, NH * 2);
        GPU->copy_d2h(GC, h_m, d_m1, (size_t)N * 4);
        GPU->copy_d2h(GC, h_s, d_s1, (size_t)N * 4);
        GPU->copy_h2d(GC, d_r2, nan, NH * 4), GPU->copy_h2d(GC, d_ln, nan, NC * 4);
        GPU->layernorm_matmul_forward16(GC, d_e16, dt, d_r2, d_ln, d_m2, d_s2, d_x, d_lnw, d_lnb,
                                        d_w1, d_b1, N, C, H);
        gsync("layernorm_matmul_forward16");
        snprintf(part, sizeof(part), "layernorm_matmul_forward16, %s", what);
        check16(part, d_e16, h16l, dt, NH, exact_f);
        check_bits(part, d_m2, h_m, (size_t)N, 4);
        check_bits(part, d_s2, h_s, (size_t)N, 4);
        if (untouched_f) check_bits(part, d_r2, nan, NH, 4), check_bits(part, d_ln, nan, NC, 4);
        dfree(d_m1), dfree(d_s1), dfree(d_b1r), dfree(d_m2), dfree(d_s2), zt_free(h_m),
            zt_free(h_s);
        zt_free(h16l);

        GPU->copy_d2d(GC, d_p16, d_q16, NH * 2); /* the home from here on: the op's own */
        GPU->cast(GC, d_pre, ZT_F32, d_p16, dt, NH);

        /* fcproj of GELU of the home */
        GPU->copy_h2d(GC, d_r1, nan, NH * 4);
        GPU->gelu_matmul_forward(GC, d_o1, d_r2, d_pre, d_w2, d_b2, N, H, C);
        GPU->copy_d2h(GC, h_o, d_o1, NC * 4);
        GPU->gelu16_matmul_forward(GC, d_o2, d_r1, d_p16, dt, d_w2, d_b2, NULL, N, H, C);
        snprintf(part, sizeof(part), "gelu16_matmul_forward, %s", what);
        check_bits(part, d_o2, h_o, NC, 4);
        if (untouched_f) check_bits(part, d_r1, nan, NH, 4);
        /* with a residual input (res2): added by the GEMM as its C (dy: any values) */
        GPU->copy_h2d(GC, d_o2, nan, NC * 4);
        unsigned long long r0 = EMU_NAMED("residual_forward");
        GPU->gelu16_matmul_forward(GC, d_o2, d_r1, d_p16, dt, d_w2, d_b2, d_dy, N, H, C);
        snprintf(part, sizeof(part), "gelu16_matmul_forward with a residual input, %s", what);
        check_res(part, d_o2, h_o, dy, b2, N, C, 0x1p-16);
        if (EMU_NAMED("residual_forward") != r0) /* added by the GEMM, never a kernel of its own */
            ZT_FAIL("%s: %llu residual_forward kernels", part, EMU_NAMED("residual_forward") - r0);
        if (untouched_f) check_bits(part, d_r1, nan, NH, 4);

        /* fcproj's backward through GELU' of the home */
        GPU->memset0(GC, d_dw1, WH * 4), GPU->memset0(GC, d_dw2, WH * 4);
        GPU->memset0(GC, d_db1, (size_t)C * 4), GPU->memset0(GC, d_db2, (size_t)C * 4);
        GPU->matmul_gelu_backward(GC, d_r2, d_dw1, d_db1, d_dy, d_r1, d_w2, d_pre, N, H, C);
        GPU->cast(GC, d_q16, dt, d_r2, ZT_F32, NH);
        GPU->copy_d2h(GC, h16, d_q16, NH * 2);
        GPU->copy_d2h(GC, h_dw, d_dw1, WH * 4);
        GPU->copy_d2h(GC, h_db, d_db1, (size_t)C * 4);
        GPU->copy_h2d(GC, d_r1, nan, NH * 4), GPU->copy_h2d(GC, d_r2, nan, NH * 4);
        GPU->matmul_gelu16_backward(GC, d_e16, d_dw2, d_db2, d_dy, d_r1, d_r2, d_w2, d_p16, dt, N,
                                    H, C);
        gsync("matmul_gelu16_backward");
        snprintf(part, sizeof(part), "matmul_gelu16_backward, %s", what);
        check16(part, d_e16, h16, dt, NH, exact_b);
        check_bits(part, d_dw2, h_dw, WH, 4);
        check_bits(part, d_db2, h_db, (size_t)C, 4);
        if (untouched_b) check_bits(part, d_r2, nan, NH, 4);

        /* fc's backward from the rounded gradient (the op's own, from here on) */
        GPU->cast(GC, d_r2, ZT_F32, d_e16, dt, NH);
        GPU->memset0(GC, d_dw1, WH * 4), GPU->memset0(GC, d_dw2, WH * 4);
        GPU->memset0(GC, d_db1, (size_t)H * 4), GPU->memset0(GC, d_db2, (size_t)H * 4);
        GPU->memset0(GC, d_dx1, NC * 4), GPU->copy_h2d(GC, d_dx2, nan, NC * 4); /* written */
        GPU->layernorm_matmul_backward(GC, d_dx1, d_dw1, d_db1, d_r2, d_ln, d_x, d_lnw, d_lnb, d_w1,
                                       N, C, H);
        GPU->copy_d2h(GC, h_dx, d_dx1, NC * 4);
        GPU->copy_d2h(GC, h_dw, d_dw1, WH * 4);
        GPU->copy_d2h(GC, h_db, d_db1, (size_t)H * 4);
        GPU->copy_h2d(GC, d_r1, nan, NH * 4);
        GPU->layernorm_matmul16_backward(GC, d_dx2, NULL, d_dw2, d_db2, d_e16, dt, d_r1, d_ln, d_x,
                                         d_lnw, d_lnb, d_w1, N, C, H);
        snprintf(part, sizeof(part), "layernorm_matmul16_backward, %s", what);
        check_bits(part, d_dx2, h_dx, NC, 4);
        check_bits(part, d_dw2, h_dw, WH, 4);
        check_bits(part, d_db2, h_db, (size_t)H, 4);
        if (untouched_b) check_bits(part, d_r1, nan, NH, 4);

        /* its input's gradient rounded (dinp16 over NaN, dinp room): the rounding of the fp32
         * one (within an ulp on a GPU, whose 16-bit GEMM may be another kernel) */
        void *d_g16 = dalloc(NC * 2), *d_h16 = dalloc(NC * 2);
        uint16_t *hg16 = zt_malloc(NC * 2 + 2);
        if (!hg16) ZT_FAIL("out of memory");
        GPU->cast(GC, d_g16, dt, d_dx1, ZT_F32, NC);
        GPU->copy_d2h(GC, hg16, d_g16, NC * 2);
        GPU->copy_h2d(GC, d_h16, nan, NC * 2), GPU->copy_h2d(GC, d_dx2, nan, NC * 4);
        GPU->layernorm_matmul16_backward(GC, d_dx2, d_h16, NULL, NULL, d_e16, dt, d_r1, d_ln, d_x,
                                         d_lnw, d_lnb, d_w1, N, C, H);
        snprintf(part, sizeof(part), "layernorm_matmul16_backward (16-bit dinp), %s", what);
        check16(part, d_h16, hg16, dt, NC, exact_b);
        /* LayerNorm's backward of that (the op's own): bitwise layernorm_backward of its widened
         * values, dinp and the parameters' gradients accumulated; the room untouched, the
         * one-pass kernel reading the 16-bit values itself (C <= 1024 here) */
        float *d_m = dalloc((size_t)N * 4), *d_s = dalloc((size_t)N * 4);
        GPU->layernorm_forward(GC, d_o1, d_m, d_s, d_x, d_lnw, d_lnb, N, C);
        GPU->cast(GC, d_o2, ZT_F32, d_h16, dt, NC);
        GPU->copy_d2d(GC, d_dx1, d_dy, NC * 4), GPU->copy_d2d(GC, d_dx2, d_dy, NC * 4);
        GPU->copy_d2d(GC, d_dw1, d_w1, (size_t)C * 4),
            GPU->copy_d2d(GC, d_dw2, d_w1, (size_t)C * 4);
        GPU->copy_d2d(GC, d_db1, d_b1, (size_t)C * 4),
            GPU->copy_d2d(GC, d_db2, d_b1, (size_t)C * 4);
        GPU->layernorm_backward(GC, d_dx1, d_dw1, d_db1, d_o2, d_x, d_lnw, d_m, d_s, N, C);
        GPU->copy_d2h(GC, h_dx, d_dx1, NC * 4);
        GPU->copy_d2h(GC, h_dw, d_dw1, (size_t)C * 4);
        GPU->copy_d2h(GC, h_db, d_db1, (size_t)C * 4);
        GPU->copy_h2d(GC, d_r1, nan, NC * 4);
        GPU->layernorm_backward16(GC, d_dx2, d_dw2, d_db2, d_h16, dt, d_r1, d_x, d_lnw, d_m, d_s, N,
                                  C);
        snprintf(part, sizeof(part), "layernorm_backward16, %s", what);
        check_bits(part, d_dx2, h_dx, NC, 4);
        check_bits(part, d_dw2, h_dw, (size_t)C, 4);
        check_bits(part, d_db2, h_db, (size_t)C, 4);
        check_bits(part, d_r1, nan, NC, 4);
        dfree(d_g16), dfree(d_h16), dfree(d_m), dfree(d_s), zt_free(hg16);
        printf("mlp16, %s: ok\n", what);
        dfree(d_x), dfree(d_w1), dfree(d_b1), dfree(d_w2), dfree(d_b2), dfree(d_dy), dfree(d_lnw);
        dfree(d_lnb), dfree(d_pre), dfree(d_r1), dfree(d_r2), dfree(d_o1), dfree(d_o2);
        dfree(d_ln), dfree(d_dw1), dfree(d_dw2), dfree(d_db1), dfree(d_db2), dfree(d_dx1);
        dfree(d_dx2), dfree(d_p16), dfree(d_q16), dfree(d_e16);
        zt_free(x), zt_free(w1), zt_free(b1), zt_free(w2), zt_free(b2), zt_free(dy), zt_free(lnw);
        zt_free(lnb), zt_free(nan), zt_free(h_o), zt_free(h_dw), zt_free(h_db), zt_free(h_dx);
        zt_free(h16);
        GPU->ctx_destroy(GC);
    }
    GC = keep;
}

/* The out, lse and dqkv of a bf16 fused attention (AE_ shapes) of qkv and dout in a context
 * created with `name`=`value` (value NULL: unset) beside ZT_CUDA_ATTN=fused, on the host in
 * res (out, then lse, then dqkv); what the context creation logged into `log` (size n). */
#endif
