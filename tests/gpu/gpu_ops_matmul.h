/* zerotrain tests: test_gpu_ops' cases of the matmuls: misaligned views, the matmul input
 * modes (ZT_CUDA_MATMUL) and the job's precision, cuBLASLt's heuristic failing, and the 16-bit
 * staging of the operands (ZT_CUDA_GEMM_STAGE) with its blocks. */
#ifndef ZT_TESTS_GPU_GPU_OPS_MATMUL_H
#define ZT_TESTS_GPU_GPU_OPS_MATMUL_H

#include "tests/gpu/gpu_check.h"

/* ---- matmul ---- */

/* Device copy of h placed `off` floats into a fresh allocation (misaligned views). */
static float *upf_off(const float *h, size_t n, int off)
{
    float *d = dalloc((n + (size_t)off) * sizeof(float));
    GPU->copy_h2d(GC, d + off, h, n * sizeof(float));
    return d + off;
}

/* off: every GPU operand starts `off` floats into its allocation (1: only 4-byte aligned) */
static void test_matmul_at(int N, int C, int OC, int off)
{
    char what[128];
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *x = kc_frandn(NC, 1.0), *w = kc_frandn(OCC, 0.5), *b = kc_frandn((size_t)OC, 1.0);
    float *out = kc_falloc(NO), *out_nb = kc_falloc(NO);
    CPU->matmul_forward(CC, out, x, w, b, N, C, OC);
    CPU->matmul_forward(CC, out_nb, x, w, NULL, N, C, OC);
    float *d_x = upf_off(x, NC, off), *d_w = upf_off(w, OCC, off);
    float *d_b = upf_off(b, (size_t)OC, off);
    float *d_out = (float *)dalloc((NO + (size_t)off) * 4) + off;
    GPU->matmul_forward(GC, d_out, d_x, d_w, d_b, N, C, OC);
    snprintf(what, sizeof(what), "matmul_forward N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_out, out, NO, RT_GEMM, 1e-6);
    GPU->matmul_forward(GC, d_out, d_x, d_w, NULL, N, C, OC);
    snprintf(what, sizeof(what), "matmul_forward (no bias) N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_out, out_nb, NO, RT_GEMM, 1e-6);

    float *dy = kc_frandn(NO, 1.0), *dx = kc_frandn(NC, 1.0), *dw = kc_frandn(OCC, 1.0);
    float *db = kc_frandn((size_t)OC, 1.0);
    float *d_dy = upf_off(dy, NO, off), *d_dx = upf_off(dx, NC, off);
    float *d_dw = upf_off(dw, OCC, off), *d_db = upf_off(db, (size_t)OC, off);
    CPU->matmul_backward(CC, dx, dw, db, dy, x, w, N, C, OC);
    GPU->matmul_backward(GC, d_dx, d_dw, d_db, d_dy, d_x, d_w, N, C, OC);
    CPU->matmul_backward(CC, NULL, dw, NULL, dy, x, w, N, C, OC);
    GPU->matmul_backward(GC, NULL, d_dw, NULL, d_dy, d_x, d_w, N, C, OC);
    CPU->matmul_backward(CC, dx, NULL, db, dy, x, w, N, C, OC);
    GPU->matmul_backward(GC, d_dx, NULL, d_db, d_dy, d_x, d_w, N, C, OC);
    snprintf(what, sizeof(what), "matmul_backward dinp N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_dx, dx, NC, RT_GEMM, 1e-6);
    snprintf(what, sizeof(what), "matmul_backward dweight N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_dw, dw, OCC, RT_GEMM, 1e-6);
    snprintf(what, sizeof(what), "matmul_backward dbias N=%d C=%d OC=%d", N, C, OC);
    check_f(what, d_db, db, (size_t)OC, RT_RED, 1e-6);
    dfree(d_x - off), dfree(d_w - off), dfree(d_b - off), dfree(d_out - off);
    dfree(d_dy - off), dfree(d_dx - off), dfree(d_dw - off), dfree(d_db - off);
    zt_free(x), zt_free(w), zt_free(b), zt_free(out), zt_free(out_nb), zt_free(dy), zt_free(dx);
    zt_free(dw), zt_free(db);
    printf("matmul N=%d C=%d OC=%d offset %d: ok\n", N, C, OC, off);
}

static void test_matmul(int N, int C, int OC)
{
    test_matmul_at(N, C, OC, 0);
}

/* A context whose matmuls ZT_CUDA_MATMUL=mode sets (NULL: unset) */
static zt_kctx *ctx_with_mm(const char *mode)
{
    if (mode)
        setenv("ZT_CUDA_MATMUL", mode, 1);
    else
        unsetenv("ZT_CUDA_MATMUL");
    zt_kctx *c = NULL;
    zt_err err;
    zt_status st = GPU->ctx_create(&c, 0, &err);
    unsetenv("ZT_CUDA_MATMUL");
    if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_MATMUL=%s: %s", mode, zt_err_msg(&err));
    return c;
}

/* The largest error, relative to the rms of the exact result, of one matmul_forward in
 * context c on x (N, C) and w (OC, C) that the host holds. */
static double matmul_err(zt_kctx *c, int N, int C, int OC, const float *x, const float *w)
{
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NO = (size_t)N * OC;
    float *out = kc_falloc(NO), *got = kc_falloc(NO);
    CPU->matmul_forward(CC, out, x, w, NULL, N, C, OC);
    double *want = kc_widen(out, NO);
    float *d_x = GPU->alloc(c, NC * 4), *d_w = GPU->alloc(c, OCC * 4), *d_o = GPU->alloc(c, NO * 4);
    ASSERT_TRUE(d_x && d_w && d_o);
    GPU->copy_h2d(c, d_x, x, NC * 4);
    GPU->copy_h2d(c, d_w, w, OCC * 4);
    GPU->matmul_forward(c, d_o, d_x, d_w, NULL, N, C, OC);
    GPU->copy_d2h(c, got, d_o, NO * 4);
    zt_err err;
    ASSERT_OK(GPU->sync(c, &err));
    double maxrel = 0.0, rms = kc_rms_d(want, NO);
    for (size_t i = 0; i < NO; i++)
        maxrel = fmax(maxrel, fabs(got[i] - want[i]) / rms);
    GPU->free(c, d_x), GPU->free(c, d_w), GPU->free(c, d_o);
    zt_free(out), zt_free(got), zt_free(want);
    return maxrel;
}

/* ZT_CUDA_MATMUL: each reduced-precision mode is close to fp32 (within what its inputs'
 * mantissa allows over a long reduction) but not equal. cuBLASLt may run a 16-bit compute type
 * on TF32 instead; the emulation always rounds to the type, so there bf16 must be the coarser
 * and fp16 must lose small inputs (below 2^-14 its mantissa shrinks) where TF32 does not. */
static void test_matmul_modes(void)
{
    int N = 512, C = 1024, OC = 512;
    float *x = kc_frandn((size_t)N * C, 1.0), *w = kc_frandn((size_t)OC * C, 1.0);
    float *xs = kc_falloc((size_t)N * C);
    for (size_t i = 0; i < (size_t)N * C; i++)
        xs[i] = ldexpf(x[i], -20);
    static const struct {
        const char *mode;
        double bound;
    } modes[] = {{"tf32", 5e-3}, {"bf16", 4e-2}, {"fp16", 5e-3}};
    double e[3], es[3];
    for (int k = 0; k < 3; k++) {
        zt_kctx *c = ctx_with_mm(modes[k].mode);
        GPU->set_matmul_dtype(c, ZT_F32); /* the environment wins over the job */
        e[k] = matmul_err(c, N, C, OC, x, w);
        es[k] = matmul_err(c, N, C, OC, xs, w);
        GPU->ctx_destroy(c);
        printf("matmul %s inputs: max error %.2e of rms (inputs scaled by 2^-20: %.2e)\n",
               modes[k].mode, e[k], es[k]);
        ASSERT_TRUE(e[k] < modes[k].bound);
        ASSERT_TRUE(e[k] > 1e-5); /* rounded: exact fp32 stays near 1e-7 */
    }
    ASSERT_TRUE(es[0] < 5e-3); /* TF32 has fp32's range */
#ifdef ZT_TEST_EMU
    ASSERT_TRUE(e[1] > 4.0 * e[0]); /* 7 mantissa bits against 10 */
    ASSERT_TRUE(es[2] > 1e-2);      /* fp16 subnormals */
#endif
    /* a value that names no mode is ignored: the job's precision decides */
    zt_kctx *c = ctx_with_mm("bfloat16");
    GPU->set_matmul_dtype(c, ZT_F32);
    ASSERT_TRUE(matmul_err(c, N, C, OC, x, w) < 1e-5);
    GPU->ctx_destroy(c);
    zt_free(x), zt_free(w), zt_free(xs);
}

/* The job's precision picks the matmul mode (set_matmul_dtype): bf16 parameters give bf16
 * inputs, fp16 fp16, fp32 exact fp32, and ZT_CUDA_MATMUL=fp32 keeps exact fp32 whatever the
 * parameters. */
static void test_matmul_dtype(void)
{
    int N = 256, C = 1024, OC = 256;
    float *x = kc_frandn((size_t)N * C, 1.0), *w = kc_frandn((size_t)OC * C, 1.0);
    for (int forced = 0; forced < 2; forced++) {
        zt_kctx *c = ctx_with_mm(forced ? "fp32" : NULL);
        GPU->set_matmul_dtype(c, ZT_BF16);
        double e16 = matmul_err(c, N, C, OC, x, w);
        GPU->set_matmul_dtype(c, ZT_F16);
        double eh = matmul_err(c, N, C, OC, x, w);
        GPU->set_matmul_dtype(c, ZT_F32);
        double e32 = matmul_err(c, N, C, OC, x, w);
        GPU->ctx_destroy(c);
        printf("matmul dtype%s: bf16 parameters %.2e, fp16 %.2e, fp32 %.2e of rms\n",
               forced ? " (ZT_CUDA_MATMUL=fp32)" : "", e16, eh, e32);
        ASSERT_TRUE(e16 < 4e-2 && eh < 5e-3);
        ASSERT_TRUE(e32 < 1e-5);
        /* rounded inputs only where they should be */
        ASSERT_TRUE(forced ? e16 < 1e-5 && eh < 1e-5 : e16 > 1e-5 && eh > 1e-5);
    }
    zt_free(x), zt_free(w);
}

#ifdef ZT_TEST_EMU
/* emu_cublaslt.c's test hooks */
void zt_emu_lt_fail_heuristics(int n, int status);
unsigned long zt_emu_lt_heuristic_queries(void);

/* A heuristic query that fails for a passing reason (ALLOC_FAILED here) costs that call its
 * fused algorithm, not the shape's for good: the result is right either way, and the next call
 * of the shape asks again while a shape already asked for does not. */
static void test_heuristic_failure(void)
{
    int N = 5, C = 24, OC = 40; /* a shape no other case uses */
    size_t NO = (size_t)N * OC;
    float *x = kc_frandn((size_t)N * C, 1.0), *w = kc_frandn((size_t)OC * C, 0.3);
    float *bias = kc_frandn((size_t)OC, 1.0), *out = kc_falloc(NO);
    CPU->matmul_forward(CC, out, x, w, bias, N, C, OC);
    float *d_x = upf(x, (size_t)N * C), *d_w = upf(w, (size_t)OC * C), *d_b = upf(bias, OC);
    float *d_out = dalloc(NO * 4);
    unsigned long q0 = zt_emu_lt_heuristic_queries();
    zt_emu_lt_fail_heuristics(1, 3 /* CUBLAS_STATUS_ALLOC_FAILED */);
    GPU->matmul_forward(GC, d_out, d_x, d_w, d_b, N, C, OC); /* falls back: bias, then GEMM */
    check_f("matmul_forward after a failed heuristic query", d_out, out, NO, RT_GEMM, 1e-6);
    unsigned long q1 = zt_emu_lt_heuristic_queries();
    ASSERT_TRUE(q1 >= q0 + 2); /* the failed query and the fallback's own */
    GPU->matmul_forward(GC, d_out, d_x, d_w, d_b, N, C, OC);
    check_f("matmul_forward, the query repeated", d_out, out, NO, RT_GEMM, 1e-6);
    unsigned long q2 = zt_emu_lt_heuristic_queries();
    ASSERT_TRUE(q2 == q1 + 1); /* asked again for the fused-bias algorithm, and got it */
    GPU->matmul_forward(GC, d_out, d_x, d_w, d_b, N, C, OC);
    ASSERT_TRUE(zt_emu_lt_heuristic_queries() == q2); /* now cached */
    gsync("heuristic failure");
    dfree(d_x), dfree(d_w), dfree(d_b), dfree(d_out);
    zt_free(x), zt_free(w), zt_free(bias), zt_free(out);
    printf("heuristic failure: not cached, ok\n");
}
#endif

/* ---- 16-bit staging of the matmuls' operands (ZT_CUDA_GEMM_STAGE) ---- */

/* A context whose matmuls take mm inputs (ZT_CUDA_MATMUL), with ZT_CUDA_GEMM_STAGE=stage (NULL:
 * unset) and a staging cap of `cap` 16-bit elements (0: the default) */
static zt_kctx *ctx_stage(const char *mm, const char *stage, size_t cap)
{
    char mib[64];
    setenv("ZT_CUDA_MATMUL", mm, 1);
    if (stage) setenv("ZT_CUDA_GEMM_STAGE", stage, 1);
    if (cap) {
        snprintf(mib, sizeof(mib), "%.17g", (double)cap / (double)(1 << 19));
        setenv("ZT_CUDA_GEMM_STAGE_MIB", mib, 1);
    }
    zt_kctx *c = NULL;
    zt_err err;
    zt_status st = GPU->ctx_create(&c, 0, &err);
    unsetenv("ZT_CUDA_MATMUL");
    unsetenv("ZT_CUDA_GEMM_STAGE");
    unsetenv("ZT_CUDA_GEMM_STAGE_MIB");
    if (st != ZT_OK)
        ZT_FAIL("ctx_create (matmuls %s, staging %s): %s", mm, stage ? stage : "-",
                zt_err_msg(&err));
    return c;
}

/* The linear layer's products on one set of host operands (N x C inputs, OC outputs) */
enum {
    LIN_FWD,
    LIN_DX,
    LIN_DW,
    LIN_DB,
    LIN_GELU,
    LIN_PRE,
    LIN_DPRE,
    LIN_GDW,
    LIN_GDB,
    LIN_GMM,     /* gelu_matmul_forward of pre */
    LIN_GMM_OPS, /* the same by gelu_forward then matmul_forward */
    LIN_LMM,     /* layernorm_matmul_forward of x */
    LIN_LMEAN,   /* and its statistics */
    LIN_LRSTD,
    LIN_LDX, /* layernorm_matmul_backward */
    LIN_LDW,
    LIN_LDB,
    LIN_N
};
typedef struct {
    int N, C, OC;
    float *x, *w, *b, *dy, *dx0, *dw0, *pre, *db0, *lnw, *lnb;
    float *out[LIN_N];           /* results */
    unsigned long long gemms[2]; /* emulation: matmuls of matmul_forward, matmul_backward */
    unsigned long long launches; /* emulation: kernel launches of matmul_forward */
    unsigned long long bwd_launches; /* and of matmul_backward */
} lin_case;

static size_t lin_len(const lin_case *k, int i)
{
    size_t NC = (size_t)k->N * k->C, NO = (size_t)k->N * k->OC;
    return i == LIN_DX || i == LIN_DPRE || i == LIN_LDX  ? NC
           : i == LIN_DW || i == LIN_GDW || i == LIN_LDW ? (size_t)k->OC * k->C
           : i == LIN_DB || i == LIN_GDB || i == LIN_LDB ? (size_t)k->OC
           : i == LIN_LMEAN || i == LIN_LRSTD            ? (size_t)k->N
                                                         : NO;
}

/* Runs the linear layer's ops in context c with every operand `off` floats into its
 * allocation: matmul_forward with bias, matmul_backward onto prefilled dx, dw and dbias,
 * matmul_gelu_forward with bias, matmul_gelu_backward's dpre, dweight and dbias (onto
 * prefilled ones), gelu_matmul_forward of pre with bias and its two ops one by one,
 * layernorm_matmul_forward of x with its statistics and layernorm_matmul_backward (onto
 * prefilled dx, dw and dbias). */
static void lin_run(zt_kctx *c, lin_case *k, int off)
{
    size_t NC = (size_t)k->N * k->C, NO = (size_t)k->N * k->OC, WC = (size_t)k->OC * k->C;
    const float *host[10] = {k->x,   k->w,   k->b,   k->dy,  k->dx0,
                             k->dw0, k->pre, k->db0, k->lnw, k->lnb};
    size_t len[10] = {NC, WC, (size_t)k->OC, NO,           NC,
                      WC, NC, (size_t)k->OC, (size_t)k->C, (size_t)k->C};
    float *d[10], *r[LIN_N];
    for (int i = 0; i < 10; i++) {
        d[i] = (float *)dalloc((len[i] + (size_t)off) * 4) + off;
        GPU->copy_h2d(c, d[i], host[i], len[i] * 4);
    }
    for (int i = 0; i < LIN_N; i++)
        r[i] = (float *)dalloc((lin_len(k, i) + (size_t)off) * 4) + off;
    GPU->copy_d2d(c, r[LIN_DX], d[4], NC * 4);
    GPU->copy_d2d(c, r[LIN_DW], d[5], WC * 4);
    GPU->copy_d2d(c, r[LIN_GDW], d[5], WC * 4);
    GPU->copy_d2d(c, r[LIN_DB], d[7], (size_t)k->OC * 4);
    GPU->copy_d2d(c, r[LIN_GDB], d[7], (size_t)k->OC * 4);
    GPU->copy_d2d(c, r[LIN_LDX], d[4], NC * 4);
    GPU->copy_d2d(c, r[LIN_LDW], d[5], WC * 4);
    GPU->copy_d2d(c, r[LIN_LDB], d[7], (size_t)k->OC * 4);
    unsigned long long g0 = EMU_GEMMS(), l0 = EMU_LAUNCHES();
    GPU->matmul_forward(c, r[LIN_FWD], d[0], d[1], d[2], k->N, k->C, k->OC);
    unsigned long long g1 = EMU_GEMMS();
    k->launches = EMU_LAUNCHES() - l0;
    l0 = EMU_LAUNCHES();
    GPU->matmul_backward(c, r[LIN_DX], r[LIN_DW], r[LIN_DB], d[3], d[0], d[1], k->N, k->C, k->OC);
    k->bwd_launches = EMU_LAUNCHES() - l0;
    k->gemms[0] = g1 - g0;
    k->gemms[1] = EMU_GEMMS() - g1;
    GPU->matmul_gelu_forward(c, r[LIN_GELU], r[LIN_PRE], d[0], d[1], d[2], k->N, k->C, k->OC);
    float *scr = (float *)dalloc((NC + (size_t)off) * 4) + off; /* GELU(pre), if it wants */
    GPU->matmul_gelu_backward(c, r[LIN_DPRE], r[LIN_GDW], r[LIN_GDB], d[3], scr, d[1], d[6], k->N,
                              k->C, k->OC);
    GPU->gelu_matmul_forward(c, r[LIN_GMM], scr, d[6], d[1], d[2], k->N, k->C, k->OC);
    GPU->gelu_forward(c, scr, d[6], NC);
    GPU->matmul_forward(c, r[LIN_GMM_OPS], scr, d[1], d[2], k->N, k->C, k->OC);
    GPU->layernorm_matmul_forward(c, r[LIN_LMM], scr, r[LIN_LMEAN], r[LIN_LRSTD], d[0], d[8], d[9],
                                  d[1], d[2], k->N, k->C, k->OC);
    GPU->layernorm_matmul_backward(c, r[LIN_LDX], r[LIN_LDW], r[LIN_LDB], d[3], scr, d[0], d[8],
                                   d[9], d[1], k->N, k->C, k->OC);
    for (int i = 0; i < LIN_N; i++) {
        k->out[i] = kc_falloc(lin_len(k, i));
        GPU->copy_d2h(c, k->out[i], r[i], lin_len(k, i) * 4);
    }
    zt_err err;
    if (GPU->sync(c, &err) != ZT_OK) ZT_FAIL("linear layer: sync failed: %s", zt_err_msg(&err));
    for (int i = 0; i < 10; i++)
        dfree(d[i] - off);
    for (int i = 0; i < LIN_N; i++)
        dfree(r[i] - off);
    dfree(scr - off);
}

static void lin_free(lin_case *k)
{
    for (int i = 0; i < LIN_N; i++) {
        zt_free(k->out[i]);
        k->out[i] = NULL;
    }
}

/* Staged results `got` against the unstaged ones `want` of the same inputs: within 1e-2 of the
 * rms (errors of a wrong block are of order 1; cuBLASLt's own rounding of fp32 inputs need not
 * be round-to-nearest), and on the emulation, where both round to nearest and sum in one order
 * of k, bit for bit, except the products split in depth (`depth`: added block by block, within
 * 1e-5). */
static void lin_compare(const char *what, const lin_case *got, const lin_case *want, unsigned depth)
{
    static const char *const names[LIN_N] = {"forward",
                                             "dinp",
                                             "dweight",
                                             "dbias",
                                             "gelu out",
                                             "gelu pre",
                                             "gelu dpre",
                                             "gelu dweight",
                                             "gelu dbias",
                                             "gelu matmul",
                                             "gelu matmul by its ops",
                                             "layernorm matmul",
                                             "layernorm mean",
                                             "layernorm rstd",
                                             "layernorm matmul dinp",
                                             "layernorm matmul dweight",
                                             "layernorm matmul dbias"};
    for (int i = 0; i < LIN_N; i++) {
        size_t n = lin_len(got, i);
        double e2 = 0.0, w2 = 0.0;
        size_t diff = 0;
        for (size_t j = 0; j < n; j++) {
            double e = (double)got->out[i][j] - (double)want->out[i][j];
            e2 += e * e;
            w2 += (double)want->out[i][j] * want->out[i][j];
            diff += memcmp(&got->out[i][j], &want->out[i][j], 4) != 0;
        }
        double rel = sqrt(e2 / (w2 > 0 ? w2 : 1.0));
        bool split = depth & (1u << i);
        if (!(rel <= 1e-2))
            ZT_FAIL("%s %s: rms error %.3g of the rms against unstaged", what, names[i], rel);
#ifdef ZT_TEST_EMU
        if (split && !(rel <= 1e-5))
            ZT_FAIL("%s %s (split in depth): rms error %.3g against unstaged", what, names[i], rel);
        if (!split && diff)
            ZT_FAIL("%s %s: %zu of %zu elements differ from unstaged (rms error %.3g)", what,
                    names[i], diff, n, rel);
#else
        (void)split;
#endif
    }
    printf("%s: as unstaged (matmuls: forward %llu, backward %llu)\n", what, got->gemms[0],
           got->gemms[1]);
}

/* The staged products against unstaged ones for the blockings of blas_gemm.c: whole operands,
 * rows of C (op(B) whole), columns (op(A) whole), depth (added block by block, dweight below),
 * none possible (the fp32 operands), GELU epilogues by rows only; bf16 and fp16, aligned and
 * misaligned operands. Caps are in 16-bit elements: op(B) padded to 128, then op(A). The bias
 * gradients come from the passes that round dout: with one block of rows the bits of the
 * unstaged column sums, with several (summed block by block, like a split in depth) within
 * 1e-5 on the emulation. */
#define SPLIT_ROWS                                                                                 \
    (1u << LIN_DW | 1u << LIN_GDW | 1u << LIN_DB | 1u << LIN_GDB | 1u << LIN_LDW | 1u << LIN_LDB)
static void test_matmul_staged(void)
{
    static const struct {
        const char *mm;
        int N, C, OC;
        size_t cap;     /* 0: the default (whole operands here) */
        int off;        /* floats into each allocation */
        unsigned depth; /* products split in depth (bits of LIN_*) */
        int fwd_blocks; /* matmul_forward's matmuls; 0: not checked */
        int bwd_blocks; /* row blocks of the backward from one set of copies; 0: not that way */
        int bias_splits; /* of those, blocks whose bias sums run in splits of rows (a second
                            launch adds them up: over 64 rows) */
    } cases[] = {
        {"bf16", 300, 200, 136, 0, 0, 0, 1, 1, 1},
        /* forward by 128 rows; GELU by rows; the backward (weight 27264, 336 per row) by 64
         * rows, dweight (K = 300) and dbias added block by block */
        {"bf16", 300, 200, 136, 27264 + 200 * 128, 0, SPLIT_ROWS, 3, 5, 0},
        {"fp16", 300, 200, 136, 27264 + 200 * 128, 0, SPLIT_ROWS, 3, 5, 0},
        {"bf16", 300, 200, 136, 27264 + 200 * 128, 1, SPLIT_ROWS, 3, 5, 0},
        /* the weight alone is over the cap: forward by 128 columns, dinp by 64 of depth,
         * dweight by 192 rows, GELU unstaged */
        {"bf16", 64, 96, 1000, 6144 + 128 + 96 * 128, 0, 1u << LIN_DX | 1u << LIN_LDX, 8, 0, 0},
        /* the smallest cap: no block is worth a product, everything unstaged */
        {"bf16", 300, 200, 136, ZT_CUDA_STAGE_MIN_ELEMS, 0, 0, 1, 0, 0},
    };
    /* the cap: MiB of 16-bit elements, at least the minimum; a value that is not a size in
     * range warns and gives the default */
    static const struct {
        const char *env;
        size_t want;
    } caps[] = {{NULL, (size_t)ZT_CUDA_STAGE_MIB << 19},
                {"1", (size_t)1 << 19},
                {"0.5", (size_t)1 << 18},
                {"0.001", ZT_CUDA_STAGE_MIN_ELEMS},
                {"abc", (size_t)ZT_CUDA_STAGE_MIB << 19},
                {"-2", (size_t)ZT_CUDA_STAGE_MIB << 19},
                {"1e9", (size_t)ZT_CUDA_STAGE_MIB << 19},
                {"4x", (size_t)ZT_CUDA_STAGE_MIB << 19}};
    for (size_t t = 0; t < sizeof(caps) / sizeof(caps[0]); t++) {
        if (caps[t].env)
            setenv("ZT_CUDA_GEMM_STAGE_MIB", caps[t].env, 1);
        else
            unsetenv("ZT_CUDA_GEMM_STAGE_MIB");
        size_t got = zt_cuda_stage_cap_elems();
        unsetenv("ZT_CUDA_GEMM_STAGE_MIB");
        if (got != caps[t].want)
            ZT_FAIL("ZT_CUDA_GEMM_STAGE_MIB=%s: cap %zu elements, want %zu",
                    caps[t].env ? caps[t].env : "(unset)", got, caps[t].want);
    }
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        lin_case k = {.N = cases[t].N, .C = cases[t].C, .OC = cases[t].OC};
        size_t NC = (size_t)k.N * k.C, WC = (size_t)k.OC * k.C;
        k.x = kc_frandn(NC, 1.0), k.w = kc_frandn(WC, 0.3), k.b = kc_frandn((size_t)k.OC, 1.0);
        k.dy = kc_frandn((size_t)k.N * k.OC, 1.0), k.dx0 = kc_frandn(NC, 1.0);
        k.dw0 = kc_frandn(WC, 1.0), k.pre = kc_frandn(NC, 2.0);
        k.db0 = kc_frandn((size_t)k.OC, 1.0);
        k.lnw = kc_frandn((size_t)k.C, 1.0), k.lnb = kc_frandn((size_t)k.C, 0.5);
        lin_case ref = k;
        zt_kctx *cu = ctx_stage(cases[t].mm, "0", 0),
                *cs = ctx_stage(cases[t].mm, NULL, cases[t].cap);
        lin_run(cu, &ref, cases[t].off);
        unsigned long long ln0 = EMU_NAMED("of LayerNorm's output");
        unsigned long long ge0 = EMU_NAMED("of GELU's output");
        lin_run(cs, &k, cases[t].off);
        /* the copies of LayerNorm's and GELU's outputs made as they are computed */
        if (EMU_COUNTS && cases[t].cap != ZT_CUDA_STAGE_MIN_ELEMS)
            ASSERT_TRUE(EMU_NAMED("of LayerNorm's output") > ln0 &&
                        EMU_NAMED("of GELU's output") > ge0);
        char what[160];
        snprintf(what, sizeof(what), "staged %s matmuls N=%d C=%d OC=%d cap %zu offset %d",
                 cases[t].mm, k.N, k.C, k.OC, cases[t].cap, cases[t].off);
        lin_compare(what, &k, &ref, cases[t].depth);
        /* gelu_matmul_forward's copy rounded from GELU(pre) straight: the bits of gelu_forward
         * then matmul_forward (on a GPU, up to how GELU's arithmetic is contracted) */
        host_match(what, "gelu matmul against its ops", k.out[LIN_GMM], k.out[LIN_GMM_OPS],
                   (size_t)k.N * k.OC, EMU_COUNTS ? 0.0 : 1e-6);
        /* ZT_CUDA_STAGE_FUSED=0: GELU's output written in fp32, then rounded by a pass of its
         * own (no launch of the fused kernel): the same bits */
        setenv("ZT_CUDA_STAGE_FUSED", "0", 1);
        zt_kctx *cf = ctx_stage(cases[t].mm, NULL, cases[t].cap);
        unsetenv("ZT_CUDA_STAGE_FUSED");
        lin_case u = k;
        unsigned long long gl = EMU_NAMED("of GELU's output");
        lin_run(cf, &u, cases[t].off);
        if (EMU_COUNTS) ASSERT_TRUE(EMU_NAMED("of GELU's output") == gl);
        for (int i = 0; i < LIN_N; i++)
            host_match(what, "ZT_CUDA_STAGE_FUSED=0", u.out[i], k.out[i], lin_len(&k, i),
                       EMU_COUNTS ? 0.0 : 1e-6);
        lin_free(&u);
        GPU->ctx_destroy(cf);
#ifdef ZT_TEST_EMU
        /* the blocks did run: one matmul each, unstaged one matmul in all, staging launches */
        ASSERT_TRUE(ref.gemms[0] == 1 && ref.launches == 0);
        ASSERT_TRUE(k.gemms[0] == (unsigned long long)cases[t].fwd_blocks);
        if (cases[t].cap != ZT_CUDA_STAGE_MIN_ELEMS) ASSERT_TRUE(k.launches >= 2);
        if (cases[t].depth) ASSERT_TRUE(k.gemms[1] > 2);
        /* from one set of copies: the weight rounded once, dout and inp once per block (dout
         * once in all, not once per product), two products per block */
        if (cases[t].bwd_blocks) {
            ASSERT_EQ_INT((int)k.gemms[1], 2 * cases[t].bwd_blocks);
            ASSERT_EQ_INT((int)k.bwd_launches, 1 + 2 * cases[t].bwd_blocks + cases[t].bias_splits);
        }
#endif
        GPU->ctx_destroy(cu);
        GPU->ctx_destroy(cs);
        lin_free(&k);
        lin_free(&ref);
        zt_free(k.x), zt_free(k.w), zt_free(k.b), zt_free(k.dy), zt_free(k.dx0), zt_free(k.dw0);
        zt_free(k.pre), zt_free(k.db0), zt_free(k.lnw), zt_free(k.lnb);
    }
#ifdef ZT_TEST_EMU
    /* no algorithm for the 16-bit product of gelu_matmul_forward, layernorm_matmul_forward or
     * layernorm_matmul_backward's dweight (shapes no other case uses): the input's values in
     * fp32 into the scratch, the product on them, the same bits; a cap of 64 rows for the
     * backward's blocks (weight 2688, 104 a row), 128 for the forward's */
    int N = 200, C = 48, OC = 56;
    size_t cap = 2688 + 128 + 64 * 104;
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, WC = (size_t)OC * C;
    float *pre = kc_frandn(NC, 2.0), *w = kc_frandn(WC, 0.3), *b = kc_frandn((size_t)OC, 1.0);
    float *lnw = kc_frandn((size_t)C, 1.0), *dy = kc_frandn(NO, 1.0);
    float *d_pre = upf(pre, NC), *d_w = upf(w, WC), *d_b = upf(b, (size_t)OC);
    float *d_lnw = upf(lnw, (size_t)C), *d_dy = upf(dy, NO);
    float *d_act = dalloc(NC * 4), *d_out = dalloc(NO * 4), *d_dx = dalloc(NC * 4);
    float *d_dw = dalloc(WC * 4);
    static const char *const what[3] = {"gelu_matmul_forward", "layernorm_matmul_forward",
                                        "layernorm_matmul_backward"};
    for (int op = 0; op < 3; op++) {
        size_t n = op == 2 ? WC : NO;
        float *got[2] = {kc_falloc(n), kc_falloc(n)};
        for (int i = 0; i < 2; i++) {
            zt_kctx *c = ctx_stage("bf16", NULL, cap);
            GPU->memset0(c, d_dw, WC * 4);
            GPU->memset0(c, d_act, NC * 4); /* nothing of an earlier run's */
            /* the backward's dinp product asked for first (a dinp-only backward has the same),
             * so that the failure falls on dweight's, whose input the op computes */
            if (op == 2) GPU->matmul_backward(c, d_dx, NULL, NULL, d_dy, d_pre, d_w, N, C, OC);
            if (i == 1) zt_emu_lt_fail_heuristics(1, 15 /* CUBLAS_STATUS_NOT_SUPPORTED */);
            if (op == 0)
                GPU->gelu_matmul_forward(c, d_out, d_act, d_pre, d_w, d_b, N, C, OC);
            else if (op == 1)
                GPU->layernorm_matmul_forward(c, d_out, d_act, NULL, NULL, d_pre, d_lnw, d_b, d_w,
                                              d_b, N, C, OC);
            else
                GPU->layernorm_matmul_backward(c, d_dx, d_dw, NULL, d_dy, d_act, d_pre, d_lnw, d_b,
                                               d_w, N, C, OC);
            GPU->copy_d2h(c, got[i], op == 2 ? d_dw : d_out, n * 4);
            zt_err err;
            if (GPU->sync(c, &err) != ZT_OK) ZT_FAIL("%s: %s", what[op], zt_err_msg(&err));
            GPU->ctx_destroy(c);
        }
        host_match(what[op], "without a 16-bit algorithm", got[1], got[0], n, 0.0);
        zt_free(got[0]), zt_free(got[1]);
    }
    dfree(d_pre), dfree(d_w), dfree(d_b), dfree(d_lnw), dfree(d_dy), dfree(d_act), dfree(d_out);
    dfree(d_dx), dfree(d_dw);
    zt_free(pre), zt_free(w), zt_free(b), zt_free(lnw), zt_free(dy);
#endif
}
#endif
