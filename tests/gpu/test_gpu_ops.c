/* zerotrain tests: every op of the CUDA table (kernels/cuda) against the CPU table on fresh
 * random inputs (the seed is printed; ZT_TEST_SEED=n repeats a run), several shapes including
 * odd ones, backward ops accumulating into prefilled buffers, NULL outputs, in-place
 * cross-entropy, bit-exact optimizer and precision ops, the matmul input modes
 * (ZT_CUDA_MATMUL), which attention ZT_CUDA_ATTN picks, and error reporting. Exits 77 when
 * the build has no CUDA or no GPU is usable (after checking the message). The same file,
 * linked with tests/gpu/emu instead of the CUDA runtime, is test_gpu_ops_emu: the CUDA
 * backend's code on the CPU, in every CI run (with ZT_TEST_QUICK, a shorter list: QUICK). */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "kernels/cuda/cuda_plan.h"
#include "kernels/ops.h"
#include "tests/kernels/kcheck.h"
#include "tests/kernels/optimes_check.h"

static const zt_ops *CPU, *GPU;
static zt_kctx *CC, *GC;

/* ZT_TEST_QUICK on the emulation (the sanitizer build's run and the second schedule's, see
 * tests/gpu/emu/emu.cmake): fewer or smaller shapes where the full list repeats a path at a
 * cost, so that every kernel, variant, dtype and edge still runs at least once. */
static bool QUICK;

/* Tolerances relative to |want| + rms(want) (kc_check_close). Element-wise ops differ from the
 * CPU only by expf's last bits; reductions and GEMMs sum in another order. */
#define RT_EXACT 1e-6
#define RT_FWD 1e-5
#define RT_RED 2e-5
#define RT_GEMM 2e-5

/* ---- helpers ---- */

static void gsync(const char *what)
{
    zt_err err;
    zt_err_clear(&err);
    zt_status st = GPU->sync(GC, &err);
    if (st != ZT_OK) ZT_FAIL("%s: GPU sync failed: %s", what, zt_err_msg(&err));
}

static void *dalloc(size_t bytes)
{
    void *p = GPU->alloc(GC, bytes);
    if (!p) ZT_FAIL("GPU alloc of %zu bytes failed", bytes);
    return p;
}

static void *up(const void *h, size_t bytes)
{
    void *d = dalloc(bytes);
    GPU->copy_h2d(GC, d, h, bytes);
    return d;
}

static float *upf(const float *h, size_t n)
{
    return up(h, (n ? n : 1) * sizeof(float));
}

static void dfree(void *d)
{
    GPU->free(GC, d);
}

/* GPU floats d (n) against CPU floats want (n), both less base (n) when not NULL (what an
 * accumulating op added): the rms of the error within rms_tol of the rms of want (16-bit
 * arithmetic, whose single elements stray further; check_f bounds those) */
static double check_rms(const char *what, const float *d, const float *want, const float *base,
                        size_t n, double rms_tol)
{
    float *got = kc_falloc(n);
    GPU->copy_d2h(GC, got, d, n * sizeof(float));
    gsync(what);
    double e2 = 0.0, w2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        double w = (double)want[i] - (base ? (double)base[i] : 0.0);
        double e = (double)got[i] - (double)want[i];
        e2 += e * e;
        w2 += w * w;
    }
    double rel = sqrt(e2 / (w2 > 0 ? w2 : 1.0));
    if (!(rel <= rms_tol)) ZT_FAIL("%s: rms error %.3g of the rms, more than %g", what, rel, rms_tol);
    printf("%s: rms error %.2e of the rms\n", what, rel);
    zt_free(got);
    return rel;
}

/* GPU floats d (n) against CPU floats want (n) */
static void check_f(const char *what, const float *d, const float *want, size_t n, double rtol,
                    double atol)
{
    float *got = kc_falloc(n);
    GPU->copy_d2h(GC, got, d, n * sizeof(float));
    gsync(what);
    double *w = kc_widen(want, n);
    kc_check_close(what, got, w, n, rtol, atol);
    zt_free(w);
    zt_free(got);
}

static uint32_t elem_bits(const void *p, size_t esz, size_t i)
{
    if (esz == 4) {
        uint32_t u;
        memcpy(&u, (const char *)p + 4 * i, 4);
        return u;
    }
    return ((const uint16_t *)p)[i];
}

/* GPU buffer d against host want, bit for bit (esz 4 or 2) */
static void check_bits(const char *what, const void *d, const void *want, size_t n, size_t esz)
{
    void *got = kc_falloc((n * esz + 3) / 4 + 1);
    GPU->copy_d2h(GC, got, d, n * esz);
    gsync(what);
    for (size_t i = 0; i < n; i++) {
        uint32_t a = elem_bits(got, esz, i), b = elem_bits(want, esz, i);
        if (a != b)
            ZT_FAIL("%s: element %zu of %zu: GPU bits %08x, CPU bits %08x", what, i, n, a, b);
    }
    zt_free(got);
}

/* GPU buffer d, an op's output with a residual input res (host, N x OC), against want, the
 * same op's output without it (host), and the bias (OC, or NULL): want + res within rel (2^-16
 * where both products round the same operands) of the terms' magnitudes (+1: the inputs are
 * of unit scale), not bit for bit, since cuBLASLt adds res before the bias where the two ops
 * add it after (and, staged by depth, before the later blocks' products), and on a GPU the
 * product with a C to add may be another algorithm's; a residual missed, added twice or from
 * another row is off by its own size. */
static void check_res(const char *what, const void *d, const float *want, const float *res,
                      const float *bias, int N, int OC, double rel)
{
    size_t n = (size_t)N * (size_t)OC;
    float *got = kc_falloc(n);
    GPU->copy_d2h(GC, got, d, n * 4);
    gsync(what);
    for (size_t i = 0; i < n; i++) {
        double b = bias ? fabs((double)bias[i % (size_t)OC]) : 0.0;
        double terms = fabs((double)want[i]) + fabs((double)res[i]) + 2.0 * b + 1.0;
        double e = (double)want[i] + (double)res[i];
        if (!(fabs((double)got[i] - e) <= rel * terms))
            ZT_FAIL("%s: element %zu of %zu: %.9g where the product %.9g plus the residual %.9g "
                    "is %.9g (tolerance %.3g)",
                    what, i, n, (double)got[i], (double)want[i], (double)res[i], e, rel * terms);
    }
    zt_free(got);
}

/* got against want over n floats: bit for bit where rms_tol is 0, else the rms of the error
 * within rms_tol of the rms of want */
static void host_match(const char *what, const char *part, const float *got, const float *want,
                       size_t n, double rms_tol)
{
    double e2 = 0.0, w2 = 0.0;
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)got[i] - (double)want[i];
        e2 += e * e;
        w2 += (double)want[i] * want[i];
        diff += memcmp(&got[i], &want[i], 4) != 0;
    }
    double rel = sqrt(e2 / (w2 > 0 ? w2 : 1.0));
    if (rms_tol == 0.0 && diff)
        ZT_FAIL("%s %s: %zu of %zu elements differ (rms error %.3g)", what, part, diff, n, rel);
    if (!(rel <= rms_tol) && rms_tol > 0.0)
        ZT_FAIL("%s %s: rms error %.3g of the rms, bound %.3g", what, part, rel, rms_tol);
}

static int32_t *rand_ids(size_t n, int V)
{
    int32_t *ids = zt_malloc((n ? n : 1) * sizeof(int32_t));
    if (!ids) ZT_FAIL("out of memory");
    for (size_t i = 0; i < n; i++) /* skewed so that tokens repeat within a batch */
        ids[i] = (int32_t)(kc_index(4) == 0 ? kc_index(3) : kc_index((size_t)V));
    return ids;
}

/* ---- memory, copies, sync ---- */

static void test_memory(void)
{
    ASSERT_STREQ(GPU->name, "cuda");
    ASSERT_TRUE(GPU->stream(GC) != NULL);
    size_t n = 1000003;
    float *h = kc_frandn(n, 1.0);
    float *d = upf(h, n);
    float *d2 = dalloc(n * sizeof(float));
    ASSERT_EQ_INT((uintptr_t)d % 256, 0);
    GPU->copy_d2d(GC, d2, d, n * sizeof(float));
    float *pin = GPU->host_alloc(GC, n * sizeof(float));
    ASSERT_TRUE(pin != NULL);
    GPU->copy_d2h(GC, pin, d2, n * sizeof(float)); /* complete on return */
    ASSERT_TRUE(memcmp(pin, h, n * sizeof(float)) == 0);
    GPU->memset0(GC, (char *)d2 + 4 * 17, 4 * 1000);
    memset(h + 17, 0, 4 * 1000);
    check_bits("memset0", d2, h, n, 4);
    /* a zero-byte copy or memset is a no-op; alloc(0) gives a usable pointer */
    GPU->copy_h2d(GC, d2, h, 0);
    GPU->memset0(GC, d2, 0);
    void *z = GPU->alloc(GC, 0);
    ASSERT_TRUE(z != NULL);
    dfree(z);
    gsync("memory");
    GPU->host_free(GC, pin);
    dfree(d);
    dfree(d2);
    zt_free(h);
    GPU->free(GC, NULL);
    GPU->host_free(GC, NULL);
    printf("memory: ok\n");
}

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

#ifdef ZT_TEST_EMU
/* emu_runtime.c: how many kernel launches (0) and cuBLASLt matmuls (1) the process made */
unsigned long long zt_emu_counted(int which);
/* and the launches of kernels whose names contain part */
unsigned long long zt_emu_launches_named(const char *part);
#define EMU_GEMMS() zt_emu_counted(1)
#define EMU_LAUNCHES() zt_emu_counted(0)
#define EMU_NAMED(part) zt_emu_launches_named(part)
#define EMU_COUNTS 1 /* the emulation counts them */
#else
#define EMU_GEMMS() 0ULL
#define EMU_LAUNCHES() 0ULL
#define EMU_NAMED(part) ((void)(part), 0ULL)
#define EMU_COUNTS 0
#endif

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

/* The staged products against unstaged ones for the blockings of blas_cuda.c: whole operands,
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

/* ---- attention ---- */

static zt_kctx *GF; /* a second CUDA context, with ZT_CUDA_ATTN=fused */
/* fused, with the tensor-core attention's other kernels (ZT_CUDA_ATTN_FWD, _BWD, _DQ) */
static const struct {
    const char *fwd, *bwd, *dq, *label;
} ATTN_VARIANTS[] = {
    {"wmma", "wmma", "", "wmma forward and backward"},
    {"wmma", "wmma", "gemm", "wmma dK dV, dQ by GEMM"},
    {"", "", "gemm", "mma dK dV, dQ by GEMM"},
    {"", "", "atomic", "mma dK dV, dQ by atomics"},
    {"", "mma2", "", "mma dK dV at 2 blocks an SM"},
    {"mma4", "", "", "mma forward at 4 blocks an SM"},
};
#define N_ATTN_VARIANTS (sizeof(ATTN_VARIANTS) / sizeof(ATTN_VARIANTS[0]))
static zt_kctx *GV[N_ATTN_VARIANTS];
static zt_kctx *GT; /* a third, with ZT_CUDA_GEMM_TUNE=1 */

/* attention on the context GC, named `mode` in failures; results within rtol of the CPU's
 * (relative to |want| + rms) and, unless rms_tol is 0, their rms error within rms_tol: errs[0]
 * and errs[1] (NULL: not wanted) get those of the output and of dqkv's increment */
static void attention_case(int B, int T, int C, int NH, const char *mode, double rtol,
                           double rms_tol, double *errs)
{
    char what[160];
    size_t N = (size_t)B * T, n3 = N * 3 * C, nC = N * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    float *qkv = kc_frandn(n3, 1.0);
    float *out = kc_falloc(nC), *lse = kc_falloc(nL), *scr = kc_falloc(nS);
    float *nan_fill = kc_falloc(nS);
    for (size_t i = 0; i < nS; i++)
        nan_fill[i] = NAN; /* scratch contents are undefined on entry: NaN must not leak */
    CPU->attention_forward(CC, out, lse, scr, qkv, NULL, B, T, C, NH);
    float *d_qkv = upf(qkv, n3), *d_out = dalloc(nC * 4), *d_lse = dalloc(nL * 4);
    float *d_scr = upf(nan_fill, nS);
    GPU->attention_forward(GC, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
    snprintf(what, sizeof(what), "attention_forward %s out B=%d T=%d C=%d NH=%d (chunks of %d)",
             mode, B, T, C, NH, zt_attention_chunk_seqs(B, T, NH));
    check_f(what, d_out, out, nC, rtol, 1e-6);
    double e_out = rms_tol > 0 ? check_rms(what, d_out, out, NULL, nC, rms_tol) : 0.0;
    snprintf(what, sizeof(what), "attention_forward %s lse B=%d T=%d C=%d NH=%d", mode, B, T, C,
             NH);
    /* with 16-bit inputs an lse of T = 1 is one rounded score, whose error (about 1e-3 in bf16)
     * can pass rtol of its own small size: seen in fp16 at 8e-4 against 4.3e-3 */
    check_f(what, d_lse, lse, nL, rtol, rms_tol > 0 ? 1e-2 : 1e-5);

    float *dout = kc_frandn(nC, 1.0), *dqkv = kc_frandn(n3, 1.0), *dqkv0 = kc_falloc(n3);
    memcpy(dqkv0, dqkv, n3 * sizeof(float));
    float *d_dout = upf(dout, nC), *d_dqkv = upf(dqkv, n3);
    /* the CPU's out and lse, so only the backward differs */
    float *d_out2 = upf(out, nC), *d_lse2 = upf(lse, nL);
    GPU->copy_h2d(GC, d_scr, nan_fill, nS * sizeof(float)); /* undefined on entry again */
    CPU->attention_backward(CC, dqkv, scr, dout, qkv, out, lse, NULL, B, T, C, NH);
    GPU->attention_backward(GC, d_dqkv, d_scr, d_dout, d_qkv, d_out2, d_lse2, NULL, B, T, C, NH);
    /* a NULL dqkv is a no-op */
    GPU->attention_backward(GC, NULL, d_scr, d_dout, d_qkv, d_out2, d_lse2, NULL, B, T, C, NH);
    snprintf(what, sizeof(what), "attention_backward %s dqkv B=%d T=%d C=%d NH=%d", mode, B, T,
             C, NH);
    check_f(what, d_dqkv, dqkv, n3, rtol, 1e-6);
    double e_dqkv = rms_tol > 0 ? check_rms(what, d_dqkv, dqkv, dqkv0, n3, rms_tol) : 0.0;
    if (errs) {
        errs[0] = e_out;
        errs[1] = e_dqkv;
    }
    dfree(d_qkv), dfree(d_out), dfree(d_lse), dfree(d_scr), dfree(d_dout), dfree(d_dqkv);
    dfree(d_out2), dfree(d_lse2);
    zt_free(qkv), zt_free(out), zt_free(lse), zt_free(scr), zt_free(dout), zt_free(dqkv);
    zt_free(nan_fill), zt_free(dqkv0);
    printf("attention %s B=%d T=%d C=%d NH=%d: ok\n", mode, B, T, C, NH);
}

/* Both CUDA attentions against the CPU: the chunked one, and the fused kernels where the head
 * size is theirs (elsewhere the fused context runs the chunked code), in fp32 and, for 16-bit
 * matmul inputs, on tensor cores: Q, K, V, dO, P and dS rounded to bf16 (2^-9 relative each)
 * leave an rms error of 2e-3 to 7e-3 of the rms (a wrong tile or rescale: ~1), single elements
 * up to ~3e-2 of |want| + rms; rounded to fp16 (2^-12), errors several times smaller: the
 * fp16 kernels must beat the bf16 ones by half on each shape (they would equal them if fp16
 * contexts ran the bf16 kernels). */
static void test_attention(int B, int T, int C, int NH)
{
    attention_case(B, T, C, NH, "chunked", RT_GEMM, 0, NULL);
    if (C != 64 * NH) return;
    zt_kctx *chunked = GC;
    GC = GF;
    attention_case(B, T, C, NH, "fused", RT_GEMM, 0, NULL);
    /* the emulated tensor cores multiply whole tiles in every lane: quick, only the shapes of
     * up to 64 K query-key pairs per head */
    bool quick = QUICK, skip_tc = quick && (long long)B * T * T > 65536;
    if (!skip_tc) {
        double eb[2], eh[2];
        GPU->set_matmul_dtype(GF, ZT_BF16);
        attention_case(B, T, C, NH, "fused bf16", 0.1, 2e-2, eb);
        GPU->set_matmul_dtype(GF, ZT_F16);
        attention_case(B, T, C, NH, "fused fp16", 0.05, 1e-2, eh);
        GPU->set_matmul_dtype(GF, ZT_F32);
        /* the other kernels: the forward and the backward on mma.sync (scores in registers,
         * tiles of 64), dQ from dS^T by cuBLASLt instead of the dQ kernel; the same arithmetic
         * but for the order of the sums, so the same bounds. On the emulation the products did
         * run (the fused attention runs none otherwise) where the op's scratch holds a
         * sequence's dS^T (T x T per head beside its copies: from T = 88; shorter sequences
         * take the dQ kernel) */
        for (size_t v = 0; v < N_ATTN_VARIANTS; v++) {
            GC = GV[v];
            /* quick: bf16 only (fp16 runs the same kernels in the other type) */
            for (int half = 0; half < (quick ? 1 : 2); half++) {
                double ev[2];
                char mode[96];
                snprintf(mode, sizeof(mode), "fused %s, %s", half ? "fp16" : "bf16",
                         ATTN_VARIANTS[v].label);
                GPU->set_matmul_dtype(GC, half ? ZT_F16 : ZT_BF16);
                unsigned long long g0 = EMU_GEMMS();
                attention_case(B, T, C, NH, mode, half ? 0.05 : 0.1, half ? 1e-2 : 2e-2, ev);
                if (EMU_COUNTS && !strcmp(ATTN_VARIANTS[v].dq, "gemm") && T >= 128 &&
                    EMU_GEMMS() == g0)
                    ZT_FAIL("attention B=%d T=%d NH=%d with ZT_CUDA_ATTN_DQ=gemm ran no GEMM", B, T,
                            NH);
            }
        }
        GC = GF;
        /* compared where errors are many: with under 16 queries a sequence has a handful of
         * dS values, whose single rounding errors make up most of dq's and dk's (seen at T = 1:
         * fp16 9.9e-4 against bf16 1.7e-3) */
        for (int k = 0; k < 2 && (long long)B * T >= 16; k++)
            if (!(eh[k] < 0.5 * eb[k]))
                ZT_FAIL("attention B=%d T=%d NH=%d: fp16 tensor cores' rms error of %s %.3g is "
                        "not below half of bf16's %.3g",
                        B, T, NH, k ? "dqkv" : "out", eh[k], eb[k]);
    }
    GC = chunked;
}

/* Which attention ZT_CUDA_ATTN picks, seen from the scratch: the chunked path writes its
 * NH T T scores there, the fused kernels nothing for fp32 inputs and their 16-bit copy of qkv
 * (3 B T C / 2 floats, other than NH T T here) for 16-bit ones. "fused" (in every matmul mode)
 * picks the fused kernels, "chunked" the chunked path; unset, empty or a value that names
 * neither (warned, ignored) the fused ones for 16-bit matmul inputs, chunked for fp32. */
static void test_attention_choice(void)
{
    int B = 1, T = 64, C = 64, NH = 1;
    size_t n3 = (size_t)B * T * 3 * C, nS = zt_attention_scratch_floats(B, T, NH);
    float *qkv = kc_frandn(n3, 1.0), *scr = kc_falloc(nS);
    static const struct {
        const char *env;
        zt_dtype mm;
        int fused;
    } cases[] = {{NULL, ZT_F32, 0},    {"chunked", ZT_F32, 0},  {"flash", ZT_F32, 0},
                 {"fused", ZT_F32, 1}, {"fused", ZT_BF16, 1},   {"", ZT_BF16, 1},
                 {NULL, ZT_F16, 1},    {"chunked", ZT_BF16, 0}, {"flash", ZT_BF16, 1}};
    zt_kctx *keep = GC;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        if (cases[k].env)
            setenv("ZT_CUDA_ATTN", cases[k].env, 1);
        else
            unsetenv("ZT_CUDA_ATTN");
        zt_err err;
        zt_status st = GPU->ctx_create(&GC, 0, &err);
        unsetenv("ZT_CUDA_ATTN");
        if (st != ZT_OK)
            ZT_FAIL("ctx_create with ZT_CUDA_ATTN=%s: %s", cases[k].env, zt_err_msg(&err));
        GPU->set_matmul_dtype(GC, cases[k].mm);
        for (size_t i = 0; i < nS; i++)
            scr[i] = NAN;
        float *d_qkv = upf(qkv, n3), *d_scr = upf(scr, nS);
        float *d_out = dalloc((size_t)B * T * C * 4), *d_lse = dalloc((size_t)B * NH * T * 4);
        GPU->attention_forward(GC, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
        GPU->copy_d2h(GC, scr, d_scr, nS * sizeof(float));
        gsync("attention choice");
        size_t untouched = 0;
        for (size_t i = 0; i < nS; i++)
            untouched += isnan(scr[i]) != 0;
        printf("ZT_CUDA_ATTN=%s, %s inputs: %zu of %zu scratch floats untouched\n",
               cases[k].env ? cases[k].env : "(unset)", zt_dtype_name(cases[k].mm), untouched, nS);
        size_t fused = cases[k].mm == ZT_F32 ? 0 : (size_t)B * T * 3 * C / 2;
        size_t want = cases[k].fused ? fused : (size_t)NH * T * T;
        ASSERT_TRUE(fused != (size_t)NH * T * T);
        ASSERT_TRUE(nS - untouched == want);
        dfree(d_qkv), dfree(d_scr), dfree(d_out), dfree(d_lse);
        GPU->ctx_destroy(GC);
    }
    GC = keep;
    zt_free(qkv), zt_free(scr);
}

/* attention_forward on c and the kernels it launched (on the emulation) */
static unsigned long long attn_fwd_launches(zt_kctx *c, float *out, float *lse, float *scr,
                                            float *qkv, const zt_attn_home *home, int B, int T,
                                            int C, int NH)
{
    unsigned long long l0 = EMU_LAUNCHES();
    GPU->attention_forward(c, out, lse, scr, qkv, home, B, T, C, NH);
    return EMU_LAUNCHES() - l0;
}

/* The shape of the attention cases below (the homes, the kernel variables, cuDNN): two
 * sequences of 128 (quick: 96, a tile of 64 and a tail; from 88 the dQ product runs), two heads
 * of 64 */
#define AE_B 2
#define AE_T (QUICK ? 96 : 128)
#define AE_C 128
#define AE_NH 2

/* The 16-bit homes of qkv and out (attention's home: qkv's alone, out's alone, both) on
 * context c with matmul inputs mm: forward leaves them rounded there (the bits of cast)
 * beside the lse (and, where out has no home, the out) of a forward without them; backward
 * from the homes, its qkv and out arguments NaN, gives the dqkv of a backward from qkv and out
 * rounded through them, bit for bit. Where the tensor-core kernels take the homes as their
 * own (direct: their 16-bit type is the homes' and the homes are 16-byte aligned), on the
 * emulation forward launches what it launches without them and backward one kernel fewer where
 * qkv has a home (no rounding of qkv); elsewhere one cast more for each home, each way. With
 * both homes, attention_backward16 (d16: the kernels write the 16-bit gradient themselves); and
 * the forward with qkv set in its home. skew: bytes the homes (and the 16-bit gradient) start
 * past 16-byte alignment. */
static void attention_home_case(zt_kctx *c, zt_dtype mm, zt_dtype dt16, bool direct, bool d16,
                                size_t skew, const char *label)
{
    int B = AE_B, T = AE_T, C = AE_C, NH = AE_NH;
    char what[200];
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    zt_kctx *keep = GC;
    GC = c;
    GPU->set_matmul_dtype(c, mm);
    float *qkv = kc_frandn(n3, 1.0), *dout = kc_frandn(nC, 1.0), *dq0 = kc_frandn(n3, 1.0);
    float *nan3 = kc_falloc(n3), *out = kc_falloc(nC), *lse = kc_falloc(nL), *dq = kc_falloc(n3);
    uint16_t *wq = zt_malloc(n3 * 2), *wo = zt_malloc(nC * 2);
    ASSERT_TRUE(wq && wo);
    for (size_t i = 0; i < n3; i++)
        nan3[i] = NAN;
    float *d_qkv = upf(qkv, n3), *d_dout = upf(dout, nC), *d_scr = dalloc(nS * 4);
    float *d_out = dalloc(nC * 4), *d_lse = dalloc(nL * 4), *d_out2 = dalloc(nC * 4);
    float *d_lse2 = dalloc(nL * 4), *d_qr = dalloc(n3 * 4), *d_or = dalloc(nC * 4);
    float *d_dqa = dalloc(n3 * 4), *d_dqb = dalloc(n3 * 4), *d_nanq = dalloc(n3 * 4);
    float *d_nano = dalloc(nC * 4);
    char *hq0 = dalloc(n3 * 2 + 16), *ho0 = dalloc(nC * 2 + 16), *g0 = dalloc(n3 * 2 + 16);
    void *d_hq = hq0 + skew, *d_ho = ho0 + skew, *d_w = dalloc(n3 * 2), *d_g16 = g0 + skew;
    for (int which = 1; which <= 3; which++) { /* 1 qkv's home, 2 out's, 3 both */
        zt_attn_home home = {which & 1 ? d_hq : NULL, which & 2 ? d_ho : NULL, dt16, false};
        int nh = (which & 1) + (which >> 1);
        char tag[96];
        snprintf(tag, sizeof(tag), "%s, %s %s home(s)", label,
                 which == 1   ? "qkv's"
                 : which == 2 ? "out's"
                              : "both",
                 zt_dtype_name(dt16));
        unsigned long long lw = attn_fwd_launches(c, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
        GPU->copy_h2d(c, d_out2, nan3, nC * 4);
        unsigned long long lh =
            attn_fwd_launches(c, d_out2, d_lse2, d_scr, d_qkv, &home, B, T, C, NH);
        unsigned long long l0;
        GPU->cast(c, d_w, dt16, d_qkv, ZT_F32, n3);
        GPU->copy_d2h(c, wq, d_w, n3 * 2);
        GPU->cast(c, d_w, dt16, d_out, ZT_F32, nC);
        GPU->copy_d2h(c, wo, d_w, nC * 2);
        GPU->copy_d2h(c, out, d_out, nC * 4);
        GPU->copy_d2h(c, lse, d_lse, nL * 4);
        gsync("attention with homes");
        snprintf(what, sizeof(what), "attention_forward %s: lse", tag);
        check_bits(what, d_lse2, lse, nL, 4);
        snprintf(what, sizeof(what), "attention_forward %s: out", tag);
        if (!home.out) check_bits(what, d_out2, out, nC, 4);
        snprintf(what, sizeof(what), "attention_forward %s: qkv's home", tag);
        if (home.qkv) check_bits(what, d_hq, wq, n3, 2);
        snprintf(what, sizeof(what), "attention_forward %s: out's home", tag);
        if (home.out) check_bits(what, d_ho, wo, nC, 2);
        if (EMU_COUNTS && lh != lw + (direct ? 0 : (unsigned)nh))
            ZT_FAIL("attention_forward %s: %llu launches, %llu without the homes", tag, lh, lw);

        /* what restores would give */
        if (home.qkv)
            GPU->cast(c, d_qr, ZT_F32, d_hq, dt16, n3);
        else
            GPU->copy_d2d(c, d_qr, d_qkv, n3 * 4);
        if (home.out)
            GPU->cast(c, d_or, ZT_F32, d_ho, dt16, nC);
        else
            GPU->copy_d2d(c, d_or, d_out, nC * 4);
        GPU->copy_h2d(c, d_dqa, dq0, n3 * 4);
        GPU->copy_h2d(c, d_dqb, dq0, n3 * 4);
        GPU->copy_h2d(c, d_nanq, nan3, n3 * 4);
        GPU->copy_h2d(c, d_nano, nan3, nC * 4);
        l0 = EMU_LAUNCHES();
        GPU->attention_backward(c, d_dqa, d_scr, d_dout, d_qr, d_or, d_lse, NULL, B, T, C, NH);
        lw = EMU_LAUNCHES() - l0;
        l0 = EMU_LAUNCHES();
        GPU->attention_backward(c, d_dqb, d_scr, d_dout, home.qkv ? d_nanq : d_qkv,
                                home.out ? d_nano : d_out, d_lse, &home, B, T, C, NH);
        lh = EMU_LAUNCHES() - l0;
        GPU->copy_d2h(c, dq, d_dqa, n3 * 4);
        gsync("attention backward from homes");
        snprintf(what, sizeof(what), "attention_backward %s: dqkv", tag);
        check_bits(what, d_dqb, dq, n3, 4);
        if (EMU_COUNTS && lh + (direct && home.qkv ? 1 : 0) != lw + (direct ? 0 : (unsigned)nh))
            ZT_FAIL("attention_backward %s: %llu launches, %llu without the homes", tag, lh, lw);
        if (which == 3) {
            /* attention_backward16: the bits of the gradient from zeros rounded, its fp32 room
             * NaN (left so where the kernels write the 16-bit gradient themselves: d16, with
             * the launches of attention_backward; else a cast more) */
            GPU->memset0(c, d_dqa, n3 * 4);
            GPU->attention_backward(c, d_dqa, d_scr, d_dout, d_nanq, d_nano, d_lse, &home, B, T, C,
                                    NH);
            GPU->cast(c, d_w, dt16, d_dqa, ZT_F32, n3);
            GPU->copy_d2h(c, wq, d_w, n3 * 2);
            GPU->copy_h2d(c, d_dqb, nan3, n3 * 4);
            l0 = EMU_LAUNCHES();
            GPU->attention_backward16(c, d_g16, dt16, d_dqb, d_scr, d_dout, NULL, d_nanq, d_nano,
                                      d_lse, &home, B, T, C, NH);
            unsigned long long l16 = EMU_LAUNCHES() - l0;
            gsync("attention_backward16");
            snprintf(what, sizeof(what), "attention_backward16 %s: the rounded gradient", tag);
            check_bits(what, d_g16, wq, n3, 2);
            if (d16) check_bits(what, d_dqb, nan3, n3, 4);
            if (EMU_COUNTS && l16 != lh + (d16 ? 0 : 1))
                ZT_FAIL("%s: %llu launches, %llu for attention_backward", what, l16, lh);
            /* dO given rounded (dout16, skewed as the homes; dout NaN room): the bits of dout as
             * its widened values (delta from them too), read in place where aligned */
            char *o0 = dalloc(nC * 2 + 16);
            void *d_do16 = o0 + skew;
            float *d_dow = dalloc(nC * 4);
            GPU->cast(c, d_do16, dt16, d_dout, ZT_F32, nC);
            GPU->cast(c, d_dow, ZT_F32, d_do16, dt16, nC);
            GPU->attention_backward16(c, d_g16, dt16, d_dqb, d_scr, d_dow, NULL, d_nanq, d_nano,
                                      d_lse, &home, B, T, C, NH);
            GPU->copy_d2h(c, wq, d_g16, n3 * 2);
            GPU->copy_h2d(c, d_dow, nan3, nC * 4), GPU->copy_h2d(c, d_g16, nan3, n3 * 2);
            GPU->attention_backward16(c, d_g16, dt16, d_dqb, d_scr, d_dow, d_do16, d_nanq, d_nano,
                                      d_lse, &home, B, T, C, NH);
            gsync("attention_backward16 of a 16-bit dO");
            snprintf(what, sizeof(what), "attention_backward16 %s, dO in 16 bits", tag);
            check_bits(what, d_g16, wq, n3, 2);
            dfree(o0), dfree(d_dow);
        }
        printf("attention %s: ok\n", tag);
    }
    /* qkv_set: qkv's home holds qkv rounded already (as qkv's GEMM leaves it) and the fp32 qkv
     * is NaN room: the lse of a forward from the widened values, out's home their output rounded,
     * qkv's home left as it was; direct, one launch fewer (no rounding of qkv), else a widening
     * and out's cast more */
    zt_attn_home home = {d_hq, d_ho, dt16, true};
    snprintf(what, sizeof(what), "%s, qkv set in its %s home", label, zt_dtype_name(dt16));
    GPU->cast(c, d_hq, dt16, d_qkv, ZT_F32, n3);
    GPU->cast(c, d_qr, ZT_F32, d_hq, dt16, n3);
    unsigned long long lw = attn_fwd_launches(c, d_out, d_lse, d_scr, d_qr, NULL, B, T, C, NH);
    GPU->copy_h2d(c, d_nanq, nan3, n3 * 4);
    unsigned long long lh = attn_fwd_launches(c, d_out2, d_lse2, d_scr, d_nanq, &home, B, T, C, NH);
    GPU->copy_d2h(c, wq, d_hq, n3 * 2); /* checked against the rounding below */
    GPU->cast(c, d_w, dt16, d_qr, ZT_F32, n3);
    GPU->cast(c, d_hq, dt16, d_out, ZT_F32, nC);
    GPU->copy_d2h(c, wo, d_hq, nC * 2);
    GPU->copy_d2h(c, lse, d_lse, nL * 4);
    gsync("attention with qkv set in its home");
    check_bits(what, d_lse2, lse, nL, 4);
    check_bits(what, d_ho, wo, nC, 2);
    check_bits(what, d_w, wq, n3, 2);
    if (EMU_COUNTS && lh != (direct ? lw - 1 : lw + 2))
        ZT_FAIL("attention_forward %s: %llu launches, %llu from fp32 without homes", what, lh, lw);
    printf("attention %s: ok\n", what);
    dfree(d_qkv), dfree(d_dout), dfree(d_scr), dfree(d_out), dfree(d_lse), dfree(d_out2);
    dfree(d_lse2), dfree(d_qr), dfree(d_or), dfree(d_dqa), dfree(d_dqb), dfree(d_nanq);
    dfree(d_nano), dfree(hq0), dfree(ho0), dfree(d_w), dfree(g0);
    zt_free(qkv), zt_free(dout), zt_free(dq0), zt_free(nan3), zt_free(out), zt_free(lse);
    zt_free(dq), zt_free(wq), zt_free(wo);
    GPU->set_matmul_dtype(c, ZT_F32);
    GC = keep;
}

/* Every path with a home: the tensor-core kernels in their own type (each variant but dQ by
 * atomics, whose sums come in any order on a GPU), with homes off 16-byte alignment (cast, not
 * taken) and in the other type, the fp32 fused kernels, the chunked attention. */
static void test_attention_home(void)
{
    attention_home_case(GF, ZT_BF16, ZT_BF16, true, true, 0, "fused bf16");
    attention_home_case(GF, ZT_F16, ZT_F16, true, true, 0, "fused fp16");
    attention_home_case(GF, ZT_BF16, ZT_BF16, false, false, 2, "fused bf16, homes 2 bytes off");
    attention_home_case(GF, ZT_BF16, ZT_F16, false, false, 0, "fused bf16");
    attention_home_case(GF, ZT_F32, ZT_BF16, false, false, 0, "fused fp32");
    attention_home_case(GC, ZT_BF16, ZT_BF16, false, false, 0, "chunked bf16");
    for (size_t v = 0; v < N_ATTN_VARIANTS; v++)
        if (strcmp(ATTN_VARIANTS[v].dq, "atomic") != 0)
            attention_home_case(GV[v], ZT_BF16, ZT_BF16, true, !*ATTN_VARIANTS[v].dq, 0,
                                ATTN_VARIANTS[v].label);
}

/* A 16-bit GPU buffer d against host want16 (type dt): bit for bit where exact, else within a
 * unit in the last place of the type (a GEMM with a 16-bit output may sum in another order) */
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
static unsigned long long attention_env_run(const char *name, const char *value, const float *qkv,
                                            const float *dout, float *res, char *log, size_t n)
{
    int B = AE_B, T = AE_T, C = AE_C, NH = AE_NH;
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    FILE *f = tmpfile();
    ASSERT_TRUE(f != NULL);
    zt_log_set_file(f);
    setenv("ZT_CUDA_ATTN", "fused", 1);
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    zt_kctx *c = NULL;
    zt_err err;
    zt_status st = GPU->ctx_create(&c, 0, &err);
    unsetenv(name);
    unsetenv("ZT_CUDA_ATTN");
    zt_log_set_file(stderr);
    if (st != ZT_OK)
        ZT_FAIL("ctx_create with %s=%s: %s", name, value ? value : "(unset)", zt_err_msg(&err));
    rewind(f);
    size_t got = fread(log, 1, n - 1, f);
    log[got] = '\0';
    fclose(f);
    GPU->set_matmul_dtype(c, ZT_BF16);
    zt_kctx *keep = GC;
    GC = c;
    unsigned long long g0 = EMU_GEMMS();
    float *d_qkv = upf(qkv, n3), *d_dout = upf(dout, nC), *d_out = dalloc(nC * 4);
    float *d_lse = dalloc(nL * 4), *d_scr = dalloc(nS * 4), *d_dq = dalloc(n3 * 4);
    GPU->attention_forward(c, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
    GPU->memset0(c, d_dq, n3 * 4);
    GPU->attention_backward(c, d_dq, d_scr, d_dout, d_qkv, d_out, d_lse, NULL, B, T, C, NH);
    GPU->copy_d2h(c, res, d_out, nC * 4);
    GPU->copy_d2h(c, res + nC, d_lse, nL * 4);
    GPU->copy_d2h(c, res + nC + nL, d_dq, n3 * 4);
    gsync("attention under a variable");
    dfree(d_qkv), dfree(d_dout), dfree(d_out), dfree(d_lse), dfree(d_scr), dfree(d_dq);
    GC = keep;
    GPU->ctx_destroy(c);
    return EMU_GEMMS() - g0;
}

/* ZT_CUDA_ATTN_FWD, _BWD and _DQ: a value that names no kernel warns, naming the variable, the
 * value and what it takes, and counts as unset (the bits of unset, and on the emulation none
 * of the other kernels launched); each value that names a kernel is taken without a word:
 * "mma" and "kernel" (the defaults) give the bits of unset, "wmma", "gemm" and "atomic" launch
 * their kernels (seen on the emulation) and the wmma forward gives other bits (its tiles of 32
 * keys rescale the outputs at other keys). On the emulation, whose products sum in order of k, the
 * wmma backward gives the bits of the mma backward: the same P and dS, summed in the same
 * order. */
static void test_attention_env(void)
{
    static const struct {
        const char *name, *dflt, *other, *expect;
        const char *launch; /* a name part of the kernels "other" launches (NULL: GEMMs) */
        int bits; /* "other" gives: 1 other bits than unset, 0 on the emulation the same, -1
                     either */
    } vars[] = {
        {"ZT_CUDA_ATTN_FWD", "mma", "wmma", "expected 'mma', 'mma4' or 'wmma'", "tensor cores", 1},
        {"ZT_CUDA_ATTN_FWD", "mma", "mma4", "expected 'mma', 'mma4' or 'wmma'", "4 blocks an SM",
         0},
        {"ZT_CUDA_ATTN_BWD", "mma", "wmma", "expected 'mma', 'mma2' or 'wmma'", "tensor cores", 0},
        {"ZT_CUDA_ATTN_BWD", "mma", "mma2", "expected 'mma', 'mma2' or 'wmma'", "2 blocks an SM",
         0},
        {"ZT_CUDA_ATTN_DQ", "kernel", "gemm", "expected 'kernel', 'gemm' or 'atomic'", NULL, -1},
        {"ZT_CUDA_ATTN_DQ", "kernel", "atomic", "expected 'kernel', 'gemm' or 'atomic'", "dK dV dQ",
         -1},
    };
    size_t nC = (size_t)AE_B * AE_T * AE_C;
    size_t n = nC * 4 + (size_t)AE_B * AE_NH * AE_T; /* out, lse, dqkv */
    float *qkv = kc_frandn(3 * nC, 1.0), *dout = kc_frandn(nC, 1.0);
    float *unset = kc_falloc(n), *res = kc_falloc(n);
    char log[4096], want[96];
    if (attention_env_run(vars[0].name, NULL, qkv, dout, unset, log, sizeof(log)) != 0)
        ZT_FAIL("the fused attention ran GEMMs with every variable unset");
    ASSERT_TRUE(strstr(log, "ignoring") == NULL);
    for (size_t v = 0; v < sizeof(vars) / sizeof(vars[0]); v++) {
        const char *nm = vars[v].name;
        const char *part = vars[v].launch ? vars[v].launch : "tensor cores";
        unsigned long long l0 = EMU_NAMED(part);
        unsigned long long g = attention_env_run(nm, "bogus", qkv, dout, res, log, sizeof(log));
        snprintf(want, sizeof(want), "ignoring %s=bogus", nm);
        ASSERT_CONTAINS(log, want);
        ASSERT_CONTAINS(log, vars[v].expect);
        if (g != 0 || EMU_NAMED(part) != l0 || memcmp(res, unset, n * sizeof(float)) != 0)
            ZT_FAIL("%s=bogus: not as unset (%llu GEMMs, other kernels or other bits)", nm, g);
        g = attention_env_run(nm, vars[v].dflt, qkv, dout, res, log, sizeof(log));
        ASSERT_TRUE(strstr(log, "ignoring") == NULL);
        if (g != 0 || EMU_NAMED(part) != l0 || memcmp(res, unset, n * sizeof(float)) != 0)
            ZT_FAIL("%s=%s: not as unset (%llu GEMMs, other kernels or other bits)", nm,
                    vars[v].dflt, g);
        g = attention_env_run(nm, vars[v].other, qkv, dout, res, log, sizeof(log));
        ASSERT_TRUE(strstr(log, "ignoring") == NULL);
        bool same = memcmp(res, unset, n * sizeof(float)) == 0;
        if (vars[v].bits == 1 && same)
            ZT_FAIL("%s=%s: the bits of unset (not taken)", nm, vars[v].other);
        if (EMU_COUNTS) {
            if (vars[v].launch ? EMU_NAMED(part) == l0 : g == 0)
                ZT_FAIL("%s=%s: its kernels did not run", nm, vars[v].other);
            if (vars[v].bits == 0 && !same)
                ZT_FAIL("%s=%s: other bits than unset on the emulation", nm, vars[v].other);
        }
        printf("%s: bogus warned and ignored, %s as unset, %s taken\n", nm, vars[v].dflt,
               vars[v].other);
    }
    zt_free(qkv), zt_free(dout), zt_free(unset), zt_free(res);
}

/* The tensor-core attention rounds its operands into 16-bit copies four floats at a time from
 * 16-byte aligned rows, one at a time otherwise: tensors 4 bytes off that alignment give the
 * same bits. */
static void test_attention_misaligned(void)
{
    int B = 2, T = 70, C = 128, NH = 2;
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    zt_kctx *keep = GC;
    GC = ctx_with_mm("bf16");
    float *qkv = kc_frandn(n3, 1.0), *dout = kc_frandn(nC, 1.0);
    float *out[2], *dq[2];
    for (int off = 0; off < 2; off++) {
        float *d_qkv = upf_off(qkv, n3, off), *d_dout = upf_off(dout, nC, off);
        float *d_out = (float *)dalloc((nC + 1) * 4) + off, *d_lse = dalloc(nL * 4);
        float *d_scr = dalloc(nS * 4), *d_dq = (float *)dalloc((n3 + 1) * 4) + off;
        GPU->attention_forward(GC, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
        GPU->memset0(GC, d_dq, n3 * 4);
        GPU->attention_backward(GC, d_dq, d_scr, d_dout, d_qkv, d_out, d_lse, NULL, B, T, C, NH);
        out[off] = kc_falloc(nC), dq[off] = kc_falloc(n3);
        GPU->copy_d2h(GC, out[off], d_out, nC * 4);
        GPU->copy_d2h(GC, dq[off], d_dq, n3 * 4);
        gsync("attention, misaligned tensors");
        dfree(d_qkv - off), dfree(d_dout - off), dfree(d_out - off), dfree(d_lse), dfree(d_scr);
        dfree(d_dq - off);
    }
    if (memcmp(out[0], out[1], nC * 4) != 0 || memcmp(dq[0], dq[1], n3 * 4) != 0)
        ZT_FAIL(
            "tensor-core attention: 4-byte aligned tensors give other bits than 16-byte aligned ones");
    GPU->ctx_destroy(GC);
    GC = keep;
    zt_free(qkv), zt_free(dout), zt_free(out[0]), zt_free(out[1]), zt_free(dq[0]), zt_free(dq[1]);
    printf("attention on 4-byte aligned tensors: the bits of aligned ones, ok\n");
}

#if defined(ZT_TEST_EMU) || defined(ZT_TEST_CUDA) /* a build with kernels/cuda/ */
/* kernels/cuda/attn_tc_cuda.cu with a given scratch (cuda_int.h) */
void zt_cuda_attn_tc_forward(zt_kctx *ctx, float *out, float *lse, float *scratch,
                             size_t scratch_floats, const float *qkv, uint16_t *home,
                             uint16_t *out16, int B, int T, int C, int NH);
void zt_cuda_attn_tc_backward(zt_kctx *ctx, float *dqkv, uint16_t *dq16, float *scratch,
                              size_t scratch_floats, const float *dout, const uint16_t *dout16,
                              const float *qkv, const uint16_t *home, const float *out,
                              const uint16_t *out16, const float *lse, int B, int T, int C, int NH);
size_t zt_cuda_attn_tc_floats(int nseq, int T, int C, int NH);

/* ctx_with_mm with ZT_CUDA_ATTN=fused: zerotrain's attention kernels even on the 16-bit homes
 * (where cuDNN's would run by default) */
static zt_kctx *ctx_kernels_mm(const char *mode)
{
    setenv("ZT_CUDA_ATTN", "fused", 1);
    zt_kctx *c = ctx_with_mm(mode);
    unsetenv("ZT_CUDA_ATTN");
    return c;
}

/* kernels/cuda/attn_cudnn.c (cuda_int.h) */
bool zt_cuda_dnn_built(void);
unsigned long long zt_cuda_dnn_runs(const zt_kctx *ctx);

/* One shape on the ZT_CUDA_ATTN=cudnn context c in dt: the forward with both homes and the
 * backward writing the 16-bit gradient from a 16-bit dO (the engine's bf16 and fp16 path)
 * against the CPU's fp32 op, within the tensor-core kernels' bounds (attention_case); cuDNN
 * must have run both (two executions or more: runs of sequences where the scratch is short).
 * same_bits (dQ by its product, the default): a second backward gives the same bits. false,
 * nothing checked, where cuDNN did not run and the log says it cannot be loaded. */
static bool attention_cudnn_case(zt_kctx *c, zt_dtype dt, int B, int T, int C, int NH,
                                 bool same_bits)
{
    char what[160];
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    /* element by element within rtol of (|want| + the rms): at T 1024 bf16's rounding of the
     * inputs, P and dS alone puts dK's worst element at 0.088 of that (fp16: 0.012;
     * tests/gpu/attn_bf16_error.py, at B 2 NH 12 with the same draws' scale), and cuDNN's
     * came to 0.128 on an H200; the rms check is the tight one */
    double rtol = dt == ZT_BF16 ? (T >= 512 ? 0.25 : 0.1) : (T >= 512 ? 0.1 : 0.05);
    double rms = dt == ZT_BF16 ? 2e-2 : 1e-2;
    zt_kctx *keep = GC;
    GC = c;
    GPU->set_matmul_dtype(c, dt);
    float *qkv = kc_frandn(n3, 1.0), *dout = kc_frandn(nC, 1.0), *nan3 = kc_falloc(n3);
    float *out = kc_falloc(nC), *lse = kc_falloc(nL), *dq = kc_falloc(n3), *scr = kc_falloc(nS);
    for (size_t i = 0; i < n3; i++)
        nan3[i] = NAN, dq[i] = 0.0f; /* the CPU's backward adds into dq */
    float *nanS = kc_falloc(nS);
    for (size_t i = 0; i < nS; i++)
        nanS[i] = NAN;
    CPU->attention_forward(CC, out, lse, scr, qkv, NULL, B, T, C, NH);
    CPU->attention_backward(CC, dq, scr, dout, qkv, out, lse, NULL, B, T, C, NH);
    float *d_qkv = upf(qkv, n3), *d_dout = upf(dout, nC), *d_scr = upf(nanS, nS);
    float *d_room = upf(nan3, n3), *d_nanq = upf(nan3, n3), *d_nano = upf(nan3, nC);
    float *d_lse = dalloc(nL * 4), *d_w = dalloc(n3 * 4);
    void *d_hq = dalloc(n3 * 2), *d_ho = dalloc(nC * 2), *d_g16 = dalloc(n3 * 2);
    void *d_do16 = dalloc(nC * 2);
    GPU->cast(c, d_do16, dt, d_dout, ZT_F32, nC);
    zt_attn_home home = {d_hq, d_ho, dt, false};
    unsigned long long r0 = zt_cuda_dnn_runs(c);
    GPU->attention_forward(c, d_nano, d_lse, d_scr, d_qkv, &home, B, T, C, NH);
    GPU->attention_backward16(c, d_g16, dt, d_room, d_scr, d_nano, d_do16, d_nanq, d_nano, d_lse,
                              &home, B, T, C, NH);
    gsync("attention by cuDNN");
    unsigned long long runs = zt_cuda_dnn_runs(c) - r0;
    bool ran = runs >= 2;
    if (ran) {
        snprintf(what, sizeof(what), "attention_forward cuDNN %s out B=%d T=%d C=%d NH=%d",
                 zt_dtype_name(dt), B, T, C, NH);
        GPU->cast(c, d_w, ZT_F32, d_ho, dt, nC);
        check_f(what, d_w, out, nC, rtol, 1e-6);
        check_rms(what, d_w, out, NULL, nC, rms);
        snprintf(what, sizeof(what), "attention_forward cuDNN %s lse B=%d T=%d C=%d NH=%d",
                 zt_dtype_name(dt), B, T, C, NH);
        check_f(what, d_lse, lse, nL, rtol, 1e-2);
        snprintf(what, sizeof(what), "attention_backward16 cuDNN %s dqkv B=%d T=%d C=%d NH=%d",
                 zt_dtype_name(dt), B, T, C, NH);
        GPU->cast(c, d_w, ZT_F32, d_g16, dt, n3);
        check_f(what, d_w, dq, n3, rtol, 1e-6);
        check_rms(what, d_w, dq, NULL, n3, rms);
        if (same_bits) { /* the backward again, its gradient's bits against the first's */
            uint16_t *g1 = zt_malloc(n3 * 2), *g2 = zt_malloc(n3 * 2);
            ASSERT_TRUE(g1 && g2);
            GPU->copy_d2h(c, g1, d_g16, n3 * 2);
            GPU->attention_backward16(c, d_g16, dt, d_room, d_scr, d_nano, d_do16, d_nanq, d_nano,
                                      d_lse, &home, B, T, C, NH);
            GPU->copy_d2h(c, g2, d_g16, n3 * 2);
            gsync("attention by cuDNN, the backward again");
            if (memcmp(g1, g2, n3 * 2) != 0)
                ZT_FAIL("attention_backward16 cuDNN %s B=%d T=%d C=%d NH=%d: a second run gave "
                        "other bits (dQ by its product should be deterministic)",
                        zt_dtype_name(dt), B, T, C, NH);
            zt_free(g1), zt_free(g2);
        }
        printf("attention by cuDNN %s B=%d T=%d C=%d NH=%d, dQ %s (%llu executions): ok\n",
               zt_dtype_name(dt), B, T, C, NH,
               same_bits ? "by its product, the same bits twice" : "summed in fp32", runs);
    }
    dfree(d_qkv), dfree(d_dout), dfree(d_scr), dfree(d_room), dfree(d_nanq), dfree(d_nano);
    dfree(d_lse), dfree(d_w), dfree(d_hq), dfree(d_ho), dfree(d_g16), dfree(d_do16);
    zt_free(qkv), zt_free(dout), zt_free(nan3), zt_free(out), zt_free(lse), zt_free(dq);
    zt_free(scr), zt_free(nanS);
    GPU->set_matmul_dtype(c, ZT_F32);
    GC = keep;
    return ran;
}

/* ZT_CUDA_ATTN=cudnn (kernels/cuda/attn_cudnn.c). Without the homes the kernels run: the bits
 * of unset. A build without cuDNN's headers (the emulation's) warns that it ignores the value.
 * With them, on a GPU: cuDNN's forward and backward against the CPU in bf16 and fp16, at a
 * short shape, a length no tile divides, and GPT-2's heads, the backward's bits the same twice;
 * with ZT_CUDA_ATTN_DQ=atomic (dQ summed in fp32 by cuDNN's atomics) in bf16 at two of them;
 * and cuDNN running by default (unset) but not with ZT_CUDA_ATTN=fused. A GPU machine whose
 * cuDNN cannot be loaded says so and skips those (the log's reason printed). */
static void test_attention_cudnn(void)
{
    size_t nC = (size_t)AE_B * AE_T * AE_C;
    size_t n = nC * 4 + (size_t)AE_B * AE_NH * AE_T;
    float *qkv = kc_frandn(3 * nC, 1.0), *dout = kc_frandn(nC, 1.0);
    float *unset = kc_falloc(n), *res = kc_falloc(n);
    char log[4096];
    attention_env_run("ZT_CUDA_ATTN", NULL, qkv, dout, unset, log, sizeof(log));
    attention_env_run("ZT_CUDA_ATTN", "cudnn", qkv, dout, res, log, sizeof(log));
    if (memcmp(res, unset, n * sizeof(float)) != 0)
        ZT_FAIL("ZT_CUDA_ATTN=cudnn without homes: not the bits of the kernels");
    zt_free(qkv), zt_free(dout), zt_free(unset), zt_free(res);
    if (!zt_cuda_dnn_built()) {
        ASSERT_CONTAINS(log, "ignoring ZT_CUDA_ATTN=cudnn");
        ASSERT_CONTAINS(log, "no cuDNN");
        printf("ZT_CUDA_ATTN=cudnn without cuDNN's headers: warned and ignored, ok\n");
        return;
    }
    ASSERT_TRUE(strstr(log, "ignoring") == NULL);
    FILE *f = tmpfile();
    ASSERT_TRUE(f != NULL);
    zt_log_set_file(f);
    setenv("ZT_CUDA_ATTN", "cudnn", 1);
    zt_kctx *c = NULL;
    zt_err err;
    zt_status st = GPU->ctx_create(&c, 0, &err);
    unsetenv("ZT_CUDA_ATTN");
    bool ran = st == ZT_OK && attention_cudnn_case(c, ZT_BF16, 2, 128, 128, 2, true);
    zt_log_set_file(stderr);
    rewind(f);
    size_t got = fread(log, 1, sizeof(log) - 1, f);
    log[got] = '\0';
    fclose(f);
    if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_ATTN=cudnn: %s", zt_err_msg(&err));
    if (!ran) {
        if (!strstr(log, "cannot load")) {
            GPU->ctx_destroy(c);
            ZT_FAIL("ZT_CUDA_ATTN=cudnn: cuDNN did not run the attention: %s", log);
        }
        printf("SKIP attention by cuDNN: this machine's cuDNN cannot be loaded: %s", log);
        GPU->ctx_destroy(c);
        return;
    }
    ASSERT_TRUE(attention_cudnn_case(c, ZT_F16, 2, 128, 128, 2, true));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 3, 37, 128, 2, true));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 2, 1024, 768, 12, true));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_F16, 2, 1024, 768, 12, true));
    /* GPT-2's 25 MB a sequence of the scores' gradients: 8 sequences go in runs (the scratch
     * holds 3) */
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 8, 1024, 768, 12, true));
    GPU->ctx_destroy(c);
    setenv("ZT_CUDA_ATTN", "cudnn", 1);
    setenv("ZT_CUDA_ATTN_DQ", "atomic", 1);
    st = GPU->ctx_create(&c, 0, &err);
    unsetenv("ZT_CUDA_ATTN");
    unsetenv("ZT_CUDA_ATTN_DQ");
    if (st != ZT_OK)
        ZT_FAIL("ctx_create with ZT_CUDA_ATTN=cudnn ZT_CUDA_ATTN_DQ=atomic: %s", zt_err_msg(&err));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 3, 37, 128, 2, false));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 2, 1024, 768, 12, false));
    GPU->ctx_destroy(c);
    /* the default (unset) runs cuDNN where it can; ZT_CUDA_ATTN=fused never does */
    static const char *const envs[] = {NULL, "fused"};
    for (int e = 0; e < 2; e++) {
        if (envs[e])
            setenv("ZT_CUDA_ATTN", envs[e], 1);
        else
            unsetenv("ZT_CUDA_ATTN");
        st = GPU->ctx_create(&c, 0, &err);
        unsetenv("ZT_CUDA_ATTN");
        if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_ATTN=%s: %s", envs[e], zt_err_msg(&err));
        bool by_dnn = attention_cudnn_case(c, ZT_BF16, 2, 128, 128, 2, true);
        if (by_dnn != (envs[e] == NULL))
            ZT_FAIL("ZT_CUDA_ATTN=%s: cuDNN %s the attention on the homes",
                    envs[e] ? envs[e] : "(unset)", by_dnn ? "ran" : "did not run");
        GPU->ctx_destroy(c);
    }
    printf("attention by cuDNN by default, by the kernels with ZT_CUDA_ATTN=fused: ok\n");
}

/* The tensor-core kernels work through as many sequences at a time as the scratch holds the
 * 16-bit copies (and deltas) of: with room for two, five sequences (quick: three) go in runs of
 * 2, 2, 1 (2, 1) and give the bits of one run of all (the op's full scratch), forward and
 * backward, also with 16-bit homes of qkv and out (each run's part of them written in forward,
 * the bits of cast, and read in backward, qkv and out there NaN; backward's bits those of out
 * rounded), where no copy of qkv is made and so the same room holds all: one run (counted on
 * the emulation by the forward's and the deltas' launches); a scratch that holds no sequence
 * is refused with an error, not overrun. */
static void test_attention_tc_runs(void)
{
    int B = QUICK ? 3 : 5, T = 70, C = 128, NH = 2;
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH), small = zt_cuda_attn_tc_floats(2, T, C, NH);
    ASSERT_TRUE(nS >= zt_cuda_attn_tc_floats(1, T, C, NH) && small < nS);
    zt_kctx *keep = GC;
    GC = ctx_kernels_mm("bf16");
    float *qkv = kc_frandn(n3, 1.0), *dout = kc_frandn(nC, 1.0), *want = kc_falloc(n3);
    float *want_out = kc_falloc(nC), *want_lse = kc_falloc(nL);
    float *d_qkv = upf(qkv, n3), *d_dout = upf(dout, nC), *d_out = dalloc(nC * 4);
    float *d_lse = dalloc(nL * 4), *d_scr = dalloc((nS + 1) * 4), *d_dq = dalloc(n3 * 4);
    GPU->attention_forward(GC, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
    GPU->memset0(GC, d_dq, n3 * 4);
    GPU->attention_backward(GC, d_dq, d_scr, d_dout, d_qkv, d_out, d_lse, NULL, B, T, C, NH);
    GPU->copy_d2h(GC, want, d_dq, n3 * 4);
    GPU->copy_d2h(GC, want_out, d_out, nC * 4);
    GPU->copy_d2h(GC, want_lse, d_lse, nL * 4);
    uint16_t *want16 = zt_malloc(n3 * 2), *wo16 = zt_malloc(nC * 2), *d_home = dalloc(n3 * 2);
    uint16_t *d_ho = dalloc(nC * 2);
    float *nan3 = kc_falloc(n3), *want_h = kc_falloc(n3), *d_or = dalloc(nC * 4);
    ASSERT_TRUE(want16 && wo16);
    for (size_t i = 0; i < n3; i++)
        nan3[i] = NAN;
    float *d_nan = upf(nan3, n3);
    GPU->cast(GC, d_home, ZT_BF16, d_qkv, ZT_F32, n3);
    GPU->copy_d2h(GC, want16, d_home, n3 * 2);
    GPU->cast(GC, d_ho, ZT_BF16, d_out, ZT_F32, nC);
    GPU->copy_d2h(GC, wo16, d_ho, nC * 2);
    GPU->cast(GC, d_or, ZT_F32, d_ho, ZT_BF16, nC); /* backward's out from its home */
    GPU->memset0(GC, d_dq, n3 * 4);
    GPU->attention_backward(GC, d_dq, d_scr, d_dout, d_qkv, d_or, d_lse, NULL, B, T, C, NH);
    GPU->copy_d2h(GC, want_h, d_dq, n3 * 4);
    uint16_t *d_g16 = dalloc(n3 * 2), *wg16 = zt_malloc(n3 * 2), *wgd16 = zt_malloc(n3 * 2);
    uint16_t *d_do16 = dalloc(nC * 2);
    float *d_dow = dalloc(nC * 4);
    ASSERT_TRUE(wg16 && wgd16);
    GPU->cast(GC, d_do16, ZT_BF16, d_dout, ZT_F32, nC);
    GPU->cast(GC, d_dow, ZT_F32, d_do16, ZT_BF16, nC);
    GPU->cast(GC, d_g16, ZT_BF16, d_dq, ZT_F32, n3);
    GPU->copy_d2h(GC, wg16, d_g16, n3 * 2);
    gsync("attention, one run");
    for (int off = 0; off < 4; off++) { /* a scratch 16-byte aligned, then 4 bytes past that */
        uint16_t *home = off >= 2 ? d_home : NULL, *o16 = off >= 2 ? d_ho : NULL;
        GPU->memset0(GC, d_out, nC * 4);
        GPU->memset0(GC, d_lse, nL * 4);
        GPU->memset0(GC, d_home, n3 * 2);
        GPU->memset0(GC, d_ho, nC * 2);
        unsigned long long f0 = EMU_NAMED("attention_forward (fused");
        zt_cuda_attn_tc_forward(GC, d_out, d_lse, d_scr + off % 2, small, d_qkv, home, o16, B, T, C,
                                NH);
        int want_runs = home ? 1 : (B + 1) / 2; /* the runs' forward kernels, and deltas */
        if (EMU_COUNTS && EMU_NAMED("attention_forward (fused") - f0 != (unsigned)want_runs)
            ZT_FAIL("attention forward in runs (home %d): %llu runs, want %d", home != NULL,
                    EMU_NAMED("attention_forward (fused") - f0, want_runs);
        if (!o16) check_bits("attention forward in runs of two sequences", d_out, want_out, nC, 4);
        check_bits("attention forward in runs of two sequences (lse)", d_lse, want_lse, nL, 4);
        if (home) {
            check_bits("attention forward in runs of two sequences (home)", home, want16, n3, 2);
            check_bits("attention forward in runs of two sequences (out's home)", o16, wo16, nC, 2);
        }
        GPU->memset0(GC, d_dq, n3 * 4);
        unsigned long long b0 = EMU_NAMED("attention_backward (delta");
        zt_cuda_attn_tc_backward(GC, d_dq, NULL, d_scr + off % 2, small, d_dout, NULL,
                                 home ? d_nan : d_qkv, home, o16 ? d_nan : d_out, o16, d_lse, B, T,
                                 C, NH);
        if (EMU_COUNTS && EMU_NAMED("attention_backward (delta") - b0 != (unsigned)want_runs)
            ZT_FAIL("attention backward in runs (home %d): %llu runs, want %d", home != NULL,
                    EMU_NAMED("attention_backward (delta") - b0, want_runs);
        check_bits("attention backward in runs of two sequences", d_dq, o16 ? want_h : want, n3, 4);
        if (!home) continue;
        /* the gradient written rounded (each run's part): the cast of the fp32 one */
        GPU->memset0(GC, d_g16, n3 * 2);
        zt_cuda_attn_tc_backward(GC, d_nan, d_g16, d_scr + off % 2, small, d_dout, NULL, d_nan,
                                 home, d_nan, o16, d_lse, B, T, C, NH);
        check_bits("attention backward in runs of two sequences, 16-bit", d_g16, wg16, n3, 2);
        /* dO in 16 bits, each run's rows read in place (dout NaN): the bits of one run with
         * dout its widened values */
        zt_cuda_attn_tc_backward(GC, d_nan, d_g16, d_scr, nS, d_dow, NULL, d_nan, home, d_nan, o16,
                                 d_lse, B, T, C, NH);
        GPU->copy_d2h(GC, wgd16, d_g16, n3 * 2);
        GPU->memset0(GC, d_g16, n3 * 2);
        zt_cuda_attn_tc_backward(GC, d_nan, d_g16, d_scr + off % 2, small, d_nan, d_do16, d_nan,
                                 home, d_nan, o16, d_lse, B, T, C, NH);
        check_bits("attention backward in runs of two sequences, dO in 16 bits", d_g16, wgd16, n3,
                   2);
    }
    /* room for less than one sequence: an error, and nothing written */
    zt_kctx *ec = ctx_kernels_mm("bf16");
    GPU->memset0(GC, d_dq, n3 * 4);
    gsync("attention, zeros");
    zt_cuda_attn_tc_backward(ec, d_dq, NULL, d_scr, zt_cuda_attn_tc_floats(1, T, C, NH) - 4, d_dout,
                             NULL, d_qkv, NULL, d_out, NULL, d_lse, B, T, C, NH);
    zt_err err;
    zt_err_clear(&err);
    ASSERT_EQ_INT(GPU->sync(ec, &err), ZT_ERR_INVALID);
    printf("scratch too small: %s\n", zt_err_msg(&err));
    ASSERT_CONTAINS(err.msg, "holds the 16-bit copies of no sequence");
    GPU->ctx_destroy(ec);
    float *zero = kc_falloc(n3);
    memset(zero, 0, n3 * 4);
    check_bits("attention backward refused", d_dq, zero, n3, 4);
    dfree(d_qkv), dfree(d_dout), dfree(d_out), dfree(d_lse), dfree(d_scr), dfree(d_dq);
    dfree(d_home), dfree(d_nan), dfree(d_ho), dfree(d_or), dfree(d_g16), zt_free(wg16);
    dfree(d_do16), dfree(d_dow), zt_free(wgd16);
    GPU->ctx_destroy(GC);
    GC = keep;
    zt_free(qkv), zt_free(dout), zt_free(want), zt_free(want_out), zt_free(want_lse), zt_free(zero);
    zt_free(want16), zt_free(nan3), zt_free(wo16), zt_free(want_h);
    printf("attention in runs of sequences, ok\n");
}
#endif

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

/* ---- optimizer and precision ops: bit for bit ---- */

static const zt_dtype DTYPES[3] = {ZT_F32, ZT_BF16, ZT_F16};

static void fill_special(float *x, size_t n)
{
    static const float specials[] = {
        0.0f,  -0.0f, INFINITY, -INFINITY, NAN,         65504.0f,     65520.0f, 1e-8f,
        6e-8f, 3e-8f, 1e-45f,   3.4e38f,   1.00390625f, 1.001953125f, -2.5f,    1e5f};
    for (size_t i = 0; i < n; i++) {
        if (i % 7 == 3)
            x[i] = specials[(i / 7) % (sizeof(specials) / sizeof(specials[0]))];
        else
            x[i] = (float)(kc_normal() * pow(10.0, (double)(kc_index(9)) - 4.0));
    }
}

static void test_adamw(size_t n)
{
    char what[160];
    float *p0 = kc_frandn(n, 0.5);
    for (int gi = 0; gi < 3; gi++)
        for (int li = 0; li < 3; li++)
            for (int l2 = 0; l2 < 2; l2++) {
                zt_dtype gt = DTYPES[gi], lt = DTYPES[li];
                int with_lp = li > 0;
                float *p = kc_fcopy(p0, n), *m = kc_falloc(n), *v = kc_falloc(n);
                memset(m, 0, n * 4), memset(v, 0, n * 4);
                void *g = kc_falloc(n), *lp = kc_falloc(n);
                float *d_p = upf(p, n), *d_m = upf(m, n), *d_v = upf(v, n);
                void *d_g = dalloc(n * 4), *d_lp = dalloc(n * 4);
                for (int t = 1; t <= 3; t++) {
                    for (size_t i = 0; i < n; i++)
                        zt_store_f32(g, gt, i, (float)(kc_normal() * 1e-2));
                    GPU->copy_h2d(GC, d_g, g, n * zt_dtype_size(gt));
                    zt_adamw_args a = {.lr = 3e-4f * (float)t,
                                       .beta1 = 0.9f,
                                       .beta2 = 0.95f,
                                       .eps = 1e-8f,
                                       .weight_decay = 0.1f,
                                       .bc1 = (float)(1.0 - pow(0.9, t)),
                                       .bc2 = (float)(1.0 - pow(0.95, t)),
                                       .grad_scale = 0.731f,
                                       .l2_mode = l2};
                    CPU->adamw(CC, p, g, gt, m, v, n, &a, with_lp ? lp : NULL, lt);
                    GPU->adamw(GC, d_p, d_g, gt, d_m, d_v, n, &a, with_lp ? d_lp : NULL, lt);
                }
                snprintf(what, sizeof(what), "adamw param n=%zu grad %s lp %s l2 %d", n,
                         zt_dtype_name(gt), with_lp ? zt_dtype_name(lt) : "none", l2);
                check_bits(what, d_p, p, n, 4);
                check_bits("adamw exp_avg", d_m, m, n, 4);
                check_bits("adamw exp_avg_sq", d_v, v, n, 4);
                if (with_lp) {
                    snprintf(what, sizeof(what), "adamw 16-bit copy %s", zt_dtype_name(lt));
                    check_bits(what, d_lp, lp, n, zt_dtype_size(lt));
                }
                dfree(d_p), dfree(d_m), dfree(d_v), dfree(d_g), dfree(d_lp);
                zt_free(p), zt_free(m), zt_free(v), zt_free(g), zt_free(lp);
            }
    zt_free(p0);
    printf("adamw n=%zu (3 grad types x 3 copy types x adamw/l2, 3 steps): bit-exact\n", n);
}

static void test_cast_accumulate_scale(size_t n)
{
    char what[128];
    float *f = kc_falloc(n);
    fill_special(f, n);
    void *src = kc_falloc(n), *dst = kc_falloc(n);
    void *d_src = dalloc(n * 4), *d_dst = dalloc(n * 4);
    for (int si = 0; si < 3; si++) {
        zt_dtype st = DTYPES[si];
        for (size_t i = 0; i < n; i++)
            zt_store_f32(src, st, i, f[i]);
        GPU->copy_h2d(GC, d_src, src, n * zt_dtype_size(st));
        for (int di = 0; di < 3; di++) {
            zt_dtype dt = DTYPES[di];
            CPU->cast(CC, dst, dt, src, st, n);
            GPU->memset0(GC, d_dst, n * 4);
            GPU->cast(GC, d_dst, dt, d_src, st, n);
            snprintf(what, sizeof(what), "cast %s -> %s n=%zu", zt_dtype_name(st),
                     zt_dtype_name(dt), n);
            check_bits(what, d_dst, dst, n, zt_dtype_size(dt));
        }
    }
    /* accumulate twice into each dtype (it really adds), then scale */
    float *s = kc_frandn(n, 1.0), *init = kc_frandn(n, 4.0);
    float *d_s = upf(s, n);
    for (int di = 0; di < 3; di++) {
        zt_dtype dt = DTYPES[di];
        for (size_t i = 0; i < n; i++)
            zt_store_f32(dst, dt, i, init[i]);
        GPU->copy_h2d(GC, d_dst, dst, n * zt_dtype_size(dt));
        CPU->accumulate(CC, dst, dt, s, 0.37f, n);
        CPU->accumulate(CC, dst, dt, s, -0.5f, n);
        GPU->accumulate(GC, d_dst, dt, d_s, 0.37f, n);
        GPU->accumulate(GC, d_dst, dt, d_s, -0.5f, n);
        snprintf(what, sizeof(what), "accumulate into %s n=%zu", zt_dtype_name(dt), n);
        check_bits(what, d_dst, dst, n, zt_dtype_size(dt));
    }
    CPU->scale(CC, s, -1.37f, n);
    GPU->scale(GC, d_s, -1.37f, n);
    check_bits("scale", d_s, s, n, 4);
    dfree(d_src), dfree(d_dst), dfree(d_s);
    zt_free(f), zt_free(src), zt_free(dst), zt_free(s), zt_free(init);
    printf("cast, accumulate, scale n=%zu: bit-exact\n", n);
}

static void test_sumsq(size_t n)
{
    float *f = kc_falloc(n);
    fill_special(f, n);
    void *x = kc_falloc(n), *d_x = dalloc(n * 4);
    for (int di = 0; di < 3; di++) {
        zt_dtype dt = DTYPES[di];
        for (size_t i = 0; i < n; i++)
            zt_store_f32(x, dt, i, f[i]);
        GPU->copy_h2d(GC, d_x, x, n * zt_dtype_size(dt));
        double want[2] = {1.5, 2.0}, got[2] = {1.5, 2.0}, part[2] = {0.0, 0.0};
        CPU->sumsq_nonfinite(CC, x, dt, n, want);
        GPU->sumsq_nonfinite(GC, d_x, dt, n, got); /* adds onto what out holds */
        /* two halves into another output, and a zero-length call, before one sync */
        size_t h = n / 2, es = zt_dtype_size(dt);
        GPU->sumsq_nonfinite(GC, d_x, dt, h, part);
        GPU->sumsq_nonfinite(GC, (char *)d_x + h * es, dt, n - h, part);
        GPU->sumsq_nonfinite(GC, d_x, dt, 0, part);
        gsync("sumsq_nonfinite");
        printf("sumsq %s n=%zu: CPU %.17g / %.0f, GPU %.17g / %.0f\n", zt_dtype_name(dt), n,
               want[0], want[1], got[0], got[1]);
        ASSERT_NEAR(got[0], want[0], 1e-12, 0);
        ASSERT_EQ_INT((long long)got[1], (long long)want[1]);
        ASSERT_NEAR(part[0] + 1.5, want[0], 1e-12, 0);
        ASSERT_EQ_INT((long long)part[1] + 2, (long long)want[1]);
    }
    /* more calls than result slots before a sync: the table is flushed early, nothing lost */
    double many[2] = {0.0, 0.0}, want[2] = {0.0, 0.0};
    size_t k = n < 1000 ? n : 1000;
    for (int i = 0; i < 600; i++) {
        GPU->sumsq_nonfinite(GC, d_x, ZT_F16, k, many);
        CPU->sumsq_nonfinite(CC, x, ZT_F16, k, want);
    }
    gsync("sumsq_nonfinite x600");
    ASSERT_NEAR(many[0], want[0], 1e-12, 0);
    ASSERT_EQ_INT((long long)many[1], (long long)want[1]);
    dfree(d_x);
    zt_free(f), zt_free(x);
    printf("sumsq_nonfinite n=%zu: ok\n", n);
}

/* ---- errors ---- */

static void test_errors(void)
{
    zt_err err;
    zt_kctx *bad = NULL;
    zt_status st = GPU->ctx_create(&bad, 9999, &err);
    printf("ctx_create(9999): %s\n", zt_err_msg(&err));
    ASSERT_EQ_INT(st, ZT_ERR_NO_DEVICE);
    ASSERT_TRUE(bad == NULL);
    ASSERT_CONTAINS(err.msg, "9999");
    GPU->ctx_destroy(NULL);

    /* a bad argument is recorded and reported by sync, and stays reported */
    zt_kctx *ec = NULL;
    ASSERT_OK(GPU->ctx_create(&ec, 0, &err));
    void *d = GPU->alloc(ec, 64);
    ASSERT_TRUE(d != NULL);
    GPU->cast(ec, d, (zt_dtype)7, d, ZT_F32, 4);
    zt_err_clear(&err);
    st = GPU->sync(ec, &err);
    printf("bad dtype: %s\n", zt_err_msg(&err));
    ASSERT_EQ_INT(st, ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "cast");
    zt_err_clear(&err);
    ASSERT_EQ_INT(GPU->sync(ec, &err), ZT_ERR_INVALID);
    /* an impossible allocation is a NULL, not a recorded failure */
    zt_kctx *oc = NULL;
    ASSERT_OK(GPU->ctx_create(&oc, 0, &err));
    ASSERT_TRUE(GPU->alloc(oc, (size_t)1 << 60) == NULL);
    ASSERT_TRUE(GPU->host_alloc(oc, (size_t)1 << 60) == NULL);
    GPU->scale(oc, d, 2.0f, 16);
    ASSERT_OK(GPU->sync(oc, &err));
    GPU->ctx_destroy(oc);
    GPU->free(ec, d);
    GPU->ctx_destroy(ec);
    printf("errors: ok\n");
}

int main(void)
{
    CPU = zt_ops_cpu();
    GPU = zt_ops_cuda();
    if (!GPU) {
        printf("SKIP: this build has no CUDA backend\n");
        return ZT_TEST_SKIP;
    }
    unsetenv("ZT_CUDA_MATMUL"); /* exact fp32 matmuls for the comparisons (fp32 is the default) */
    setenv("ZT_CUDA_ATTN", "chunked", 1); /* GC: the chunked attention in every matmul mode */
    zt_err err;
    zt_err_clear(&err);
    zt_status st = GPU->ctx_create(&GC, 0, &err);
    unsetenv("ZT_CUDA_ATTN");
    if (st == ZT_ERR_NO_DEVICE) {
        /* the no-GPU path itself: a clear message, no context */
        ASSERT_TRUE(GC == NULL);
        ASSERT_TRUE(strlen(err.msg) > 20);
        ASSERT_CONTAINS(err.msg, "GPU");
        printf("SKIP: no usable GPU (%s)\n", err.msg);
        return ZT_TEST_SKIP;
    }
    if (st != ZT_OK) ZT_FAIL("ctx_create(0): %s", zt_err_msg(&err));
    ASSERT_OK(CPU->ctx_create(&CC, 0, &err));
    setenv("ZT_CUDA_ATTN", "fused", 1);
    st = GPU->ctx_create(&GF, 0, &err);
    unsetenv("ZT_CUDA_ATTN");
    if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_ATTN=fused: %s", zt_err_msg(&err));
    for (size_t v = 0; v < N_ATTN_VARIANTS; v++) {
        setenv("ZT_CUDA_ATTN", "fused", 1);
        setenv("ZT_CUDA_ATTN_FWD", ATTN_VARIANTS[v].fwd, 1);
        setenv("ZT_CUDA_ATTN_BWD", ATTN_VARIANTS[v].bwd, 1);
        setenv("ZT_CUDA_ATTN_DQ", ATTN_VARIANTS[v].dq, 1);
        st = GPU->ctx_create(&GV[v], 0, &err);
        unsetenv("ZT_CUDA_ATTN");
        unsetenv("ZT_CUDA_ATTN_FWD");
        unsetenv("ZT_CUDA_ATTN_BWD");
        unsetenv("ZT_CUDA_ATTN_DQ");
        if (st != ZT_OK)
            ZT_FAIL("ctx_create with the attention's %s: %s", ATTN_VARIANTS[v].label,
                    zt_err_msg(&err));
    }
    setenv("ZT_CUDA_GEMM_TUNE", "1", 1);
    st = GPU->ctx_create(&GT, 0, &err);
    unsetenv("ZT_CUDA_GEMM_TUNE");
    if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_GEMM_TUNE=1: %s", zt_err_msg(&err));

    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    const char *s = getenv("ZT_TEST_SEED");
    if (s && *s) seed = strtoull(s, NULL, 10);
    printf("seed=%llu (ZT_TEST_SEED=%llu repeats this run)\n", (unsigned long long)seed,
           (unsigned long long)seed);
#ifdef ZT_TEST_EMU
    const char *q = getenv("ZT_TEST_QUICK");
    QUICK = q && *q && strcmp(q, "0") != 0;
    if (QUICK) printf("ZT_TEST_QUICK: the quick list of shapes\n");
#endif
    kc_rng_state = seed;

    ZT_TEST_RUN(test_memory());
    ZT_TEST_RUN(check_optimes(GPU));
    ZT_TEST_RUN(test_encoder(2, 7, 13, 17));
    ZT_TEST_RUN(test_encoder(4, 64, 96, 300));
    ZT_TEST_RUN(test_encoder(3, 33, 768, 50));
    ZT_TEST_RUN(test_layernorm(1, 1));
    ZT_TEST_RUN(test_layernorm(5, 7));
    ZT_TEST_RUN(test_layernorm(64, 768));
    ZT_TEST_RUN(test_layernorm(37, 1000));
    ZT_TEST_RUN(test_layernorm(300, 2049));
    ZT_TEST_RUN(test_layernorm(9000, 64)); /* many rows a warp in one pass (18 a split) */
    ZT_TEST_RUN(test_layernorm_backward_kernels(70, 768));
    ZT_TEST_RUN(test_layernorm_backward_kernels(33, 1000)); /* the last lanes' columns idle */
    ZT_TEST_RUN(test_layernorm_backward_kernels(9000, 68));
    ZT_TEST_RUN(test_residual_layernorm(5, 7));
    ZT_TEST_RUN(test_residual_layernorm(64, 768));
    ZT_TEST_RUN(test_residual_layernorm(300, 2049));
    /* the linear layer on the context that times cuBLASLt's candidates for each new shape:
     * its results must be the untuned ones (accumulating products are timed into a
     * temporary, not into the gradients). Quick: GPT-2's shapes on the untuned context (on the
     * emulation the timing runs a shape's product a dozen times at its first call), and small
     * widths that take cuBLASLt's GELU and DGELU epilogues on the tuning one, so that the
     * timing still meets every kind of product */
    zt_kctx *untuned = GC;
    GC = GT;
    ZT_TEST_RUN(test_matmul(1, 1, 1));
    ZT_TEST_RUN(test_matmul(7, 13, 5));
    ZT_TEST_RUN(test_matmul(33, 65, 129));
    ZT_TEST_RUN(test_matmul(1000, 3, 7));
    ZT_TEST_RUN(test_matmul_gelu(33, 65, 12));
    ZT_TEST_RUN(test_matmul_gelu_backward(33, 65, 12));
    ZT_TEST_RUN(test_gelu_matmul(33, 65, 12));
    ZT_TEST_RUN(test_layernorm_matmul(33, 65, 12));
    ZT_TEST_RUN(test_matmul_at(33, 64, 128, 1));
    if (QUICK) {
        ZT_TEST_RUN(test_matmul_gelu(40, 64, 96));
        ZT_TEST_RUN(test_matmul_gelu_backward(40, 96, 64));
    }
    GC = QUICK ? untuned : GT;
    ZT_TEST_RUN(test_matmul(64, 768, 2304));
    ZT_TEST_RUN(test_matmul(96, 64, 50304));
    ZT_TEST_RUN(test_matmul_gelu(64, 768, 3072));
    ZT_TEST_RUN(test_matmul_gelu_backward(64, 3072, 768));
    ZT_TEST_RUN(test_gelu_matmul(64, 3072, 768));
    ZT_TEST_RUN(test_layernorm_matmul(64, 768, 2304));
    ZT_TEST_RUN(test_matmul_at(128, 768, 768, 2));
    GC = untuned;
    ZT_TEST_RUN(test_matmul_modes());
#ifdef ZT_TEST_EMU
    ZT_TEST_RUN(test_heuristic_failure());
#endif
    ZT_TEST_RUN(test_matmul_dtype());
    ZT_TEST_RUN(test_matmul_staged());
    ZT_TEST_RUN(test_classifier());
    ZT_TEST_RUN(test_attention(1, 1, 4, 1));
    ZT_TEST_RUN(test_attention(2, 7, 12, 3));
    ZT_TEST_RUN(test_attention(1, 129, 96, 2));
    ZT_TEST_RUN(test_attention(2, 64, 128, 4));
    ZT_TEST_RUN(test_attention(2, 256, 768, 12));
    /* more sequences than one scratch chunk holds: chunks of 5 and a last one of 2, then
     * chunks of one sequence each (quick: chunks of 2 and a last one of 1, on a quarter of
     * the scores) */
    if (QUICK) {
        ZT_TEST_RUN(test_attention(3, 1024, 96, 6));
    } else {
        ZT_TEST_RUN(test_attention(7, 512, 384, 12));
        ZT_TEST_RUN(test_attention(3, 1024, 256, 16));
    }
    /* the fused kernels' edges: one token, tails of their 64-row blocks and 32-row tiles, a
     * long sequence */
    ZT_TEST_RUN(test_attention(1, 1, 64, 1));
    ZT_TEST_RUN(test_attention(2, 7, 128, 2));
    ZT_TEST_RUN(test_attention(1, 129, 192, 3));
    ZT_TEST_RUN(test_attention(3, 95, 64, 1));
    ZT_TEST_RUN(test_attention(1, 1024, 128, 2));
    ZT_TEST_RUN(test_attention_choice());
    ZT_TEST_RUN(test_attention_home());
    ZT_TEST_RUN(test_matmul16());
#ifdef ZT_TEST_EMU
    ZT_TEST_RUN(test_residual_fallback());
#endif
    ZT_TEST_RUN(test_mlp16());
    ZT_TEST_RUN(test_attention_env());
    ZT_TEST_RUN(test_attention_misaligned());
#if defined(ZT_TEST_EMU) || defined(ZT_TEST_CUDA)
    ZT_TEST_RUN(test_attention_tc_runs());
    ZT_TEST_RUN(test_attention_cudnn());
    ZT_TEST_RUN(test_bias_backward16(1, 4));
    ZT_TEST_RUN(test_bias_backward16(64, 3072));
    ZT_TEST_RUN(test_bias_backward16(300, 3072));
    ZT_TEST_RUN(test_bias_backward16(333, 50));
    ZT_TEST_RUN(test_bias_backward16(9000, 772));
#endif
    ZT_TEST_RUN(test_gelu_residual(1));
    ZT_TEST_RUN(test_gelu_residual(1000));
    ZT_TEST_RUN(test_gelu_residual(100003));
    ZT_TEST_RUN(test_crossentropy(1, 1, 128));
    ZT_TEST_RUN(test_crossentropy(5, 17, 128));
    ZT_TEST_RUN(test_crossentropy(33, 1000, 1024));
    ZT_TEST_RUN(test_crossentropy(16, 50257, 50304));
    ZT_TEST_RUN(test_adamw(1));
    ZT_TEST_RUN(test_adamw(100003));
    ZT_TEST_RUN(test_cast_accumulate_scale(7));
    ZT_TEST_RUN(test_cast_accumulate_scale(100003));
    ZT_TEST_RUN(test_sumsq(1));
    /* more partial sums than the final block has threads (quick: 293 of them, else 977) */
    ZT_TEST_RUN(test_sumsq(QUICK ? 300007 : 1000003));
    ZT_TEST_RUN(test_errors());

    if (*zt_test_failed_parts()) {
        fprintf(stderr, "%d part(s) failed (above)\n", *zt_test_failed_parts());
        return 1;
    }
    GPU->ctx_destroy(GF);
    for (size_t v = 0; v < N_ATTN_VARIANTS; v++)
        GPU->ctx_destroy(GV[v]);
    GPU->ctx_destroy(GT);
    GPU->ctx_destroy(GC);
    CPU->ctx_destroy(CC);
    printf("ok\n");
    return 0;
}
