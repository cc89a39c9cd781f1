/* zerotrain tests: the CPU optimizer and precision ops (kernels/cpu/optim_cpu.c) and the
 * vectorizable math they and the GPT-2 ops use (kernels/cpu/vmath.h): exp accuracy in ulp,
 * bf16/fp16 conversions bit for bit against common/dtype.h, cast, accumulate, scale,
 * sumsq_nonfinite with NaN and Inf, and AdamW / Adam-L2 against the formula over several steps. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/dtype.h"
#include "kernels/cpu/cpu_int.h"
#include "kernels/cpu/vmath.h"
#include "kernels/ops.h"
#include "tests/kernels/kcheck.h"

static const zt_ops *OPS;
static zt_kctx *CTX;

static const zt_dtype DTYPES[3] = {ZT_F32, ZT_BF16, ZT_F16};

/* ---- exp ---- */

static double ulp_error(float got, double want)
{
    float w = (float)want;
    double ulp = (double)nextafterf(fabsf(w), INFINITY) - (double)fabsf(w);
    return fabs((double)got - want) / ulp;
}

static void test_exp(void)
{
    double worst = 0.0;
    float worst_x = 0.0f;
    const int n = 2000000;
    for (int i = 0; i <= n; i++) {
        /* an even grid over the whole domain plus random points near 0 */
        float x = (i & 1) ? (float)(ZT_V_EXP_LO + (ZT_V_EXP_HI - ZT_V_EXP_LO) * i / (double)n)
                          : (float)(kc_normal() * 2.0);
        if (x < ZT_V_EXP_LO || x > ZT_V_EXP_HI) continue;
        double e = ulp_error(zt_v_expf(x), exp((double)x));
        if (e > worst) {
            worst = e;
            worst_x = x;
        }
    }
    printf("zt_v_expf: max error %.3f ulp (at x = %.9g)\n", worst, (double)worst_x);
    if (worst > 2.0)
        ZT_FAIL("zt_v_expf is %.3f ulp off at x = %.9g (want <= 2 ulp)", worst, (double)worst_x);
    ASSERT_TRUE(zt_v_expf(0.0f) == 1.0f);
    ASSERT_TRUE(zt_v_expf(-INFINITY) == 0.0f);
    ASSERT_TRUE(zt_v_expf(-100.0f) == 0.0f);
    ASSERT_TRUE(zt_v_expf(-87.34f) == 0.0f); /* below FLT_MIN: flushed, never subnormal */
    ASSERT_TRUE(zt_v_expf(ZT_V_EXP_LO) >= 1.1754942e-38f);
    ASSERT_TRUE(isnan(zt_v_expf(NAN)));
    ASSERT_TRUE(isfinite(zt_v_expf(1000.0f)) && zt_v_expf(1000.0f) > 1e38f);
    ASSERT_NEAR(zt_v_expf(1.0f), 2.718281828459045, 2e-7, 0);
    ASSERT_NEAR(zt_v_expf(-1.0f), 0.36787944117144233, 2e-7, 0);
}

/* ---- sqrt (exhaustively checked once offline; here 4M spread patterns and the edges) ---- */

static void test_sqrt(void)
{
    for (uint64_t i = 0; i < 4000000u + 4096; i++) {
        uint32_t u = i < 4000000u ? (uint32_t)(i * 2654435761u) & 0x7fffffffu
                                  : (uint32_t)(i - 4000000u); /* zero and the smallest subnormals */
        if (u > 0x7f800000u) continue;                        /* NaN: checked below */
        float x = zt_v_float(u);
        float got = zt_v_sqrtf(x), want = sqrtf(x);
        if (zt_v_bits(got) != zt_v_bits(want))
            ZT_FAIL("zt_v_sqrtf(%a) = %a, sqrtf says %a", (double)x, (double)got, (double)want);
    }
    ASSERT_TRUE(zt_v_sqrtf(INFINITY) == INFINITY);
    ASSERT_TRUE(zt_v_bits(zt_v_sqrtf(-0.0f)) == 0x80000000u);
    ASSERT_TRUE(isnan(zt_v_sqrtf(NAN)));
    ASSERT_TRUE(isnan(zt_v_sqrtf(-1.0f)));
    ASSERT_TRUE(isnan(zt_v_sqrtf(-1e-40f)));
}

/* ---- conversions ---- */

static void test_conversions(void)
{
    /* every fp16 and bf16 bit pattern widens exactly as dtype.h does */
    for (uint32_t h = 0; h < 65536; h++) {
        float a = zt_v_f32_from_f16((uint16_t)h), b = zt_f32_from_f16((uint16_t)h);
        if (zt_v_bits(a) != zt_v_bits(b))
            ZT_FAIL("fp16 %04x widens to %08x, dtype.h says %08x", h, zt_v_bits(a), zt_v_bits(b));
        a = zt_v_f32_from_bf16((uint16_t)h), b = zt_f32_from_bf16((uint16_t)h);
        if (zt_v_bits(a) != zt_v_bits(b))
            ZT_FAIL("bf16 %04x widens to %08x, dtype.h says %08x", h, zt_v_bits(a), zt_v_bits(b));
    }
    /* narrowing: 4M spread float bit patterns, and every pattern near the fp16 edges */
    static const uint32_t edges[] = {0x00000000u, 0x33000000u, 0x33000001u, 0x387fe000u,
                                     0x38800000u, 0x38ffffffu, 0x477fefffu, 0x477ff000u,
                                     0x477fffffu, 0x47800000u, 0x7f7fffffu, 0x7f800000u,
                                     0x7f800001u, 0x7fc00000u, 0x3f800000u, 0x3f801000u};
    for (uint64_t i = 0; i < 4000000u + 16 * 4096; i++) {
        uint32_t u;
        if (i < 4000000u)
            u = (uint32_t)(i * 2654435761u);
        else
            u = edges[(i - 4000000u) / 4096] + (uint32_t)((i - 4000000u) % 4096) - 2048u;
        for (int s = 0; s < 2; s++, u ^= 0x80000000u) {
            float f = zt_v_float(u);
            if (zt_v_f16_from_f32(f) != zt_f16_from_f32(f))
                ZT_FAIL("float %08x narrows to fp16 %04x, dtype.h says %04x", u,
                        zt_v_f16_from_f32(f), zt_f16_from_f32(f));
            if (zt_v_bf16_from_f32(f) != zt_bf16_from_f32(f))
                ZT_FAIL("float %08x narrows to bf16 %04x, dtype.h says %04x", u,
                        zt_v_bf16_from_f32(f), zt_bf16_from_f32(f));
        }
    }
}

/* Random float values with specials and values that round differently in 16 bits. */
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

static uint32_t elem_bits(const void *p, zt_dtype t, size_t i)
{
    return t == ZT_F32 ? zt_v_bits(((const float *)p)[i]) : ((const uint16_t *)p)[i];
}

/* ---- cast ---- */

static void test_cast(size_t n)
{
    float *f = kc_falloc(n);
    fill_special(f, n);
    void *src = kc_falloc(n), *dst = kc_falloc(n), *back = kc_falloc(n);
    for (int si = 0; si < 3; si++) {
        zt_dtype st = DTYPES[si];
        for (size_t i = 0; i < n; i++) /* the source, rounded by dtype.h */
            zt_store_f32(src, st, i, f[i]);
        for (int di = 0; di < 3; di++) {
            zt_dtype dt = DTYPES[di];
            memset(dst, 0xa5, n * sizeof(float));
            OPS->cast(CTX, dst, dt, src, st, n);
            for (size_t i = 0; i < n; i++) {
                float v = zt_load_f32(src, st, i);
                uint32_t want;
                if (dt == ZT_F32)
                    want = zt_v_bits(v);
                else
                    want = dt == ZT_BF16 ? zt_bf16_from_f32(v) : zt_f16_from_f32(v);
                uint32_t got = elem_bits(dst, dt, i);
                if (got != want)
                    ZT_FAIL("cast %s -> %s, n=%zu, element %zu (%.9g): got bits %08x, want %08x",
                            zt_dtype_name(st), zt_dtype_name(dt), n, i, (double)v, got, want);
            }
            /* round trip back to the source type: exact for widening, and narrowing-widening
             * of a 16-bit value is the identity */
            if (zt_dtype_size(dt) >= zt_dtype_size(st) && !(st == ZT_BF16 && dt == ZT_F16) &&
                !(st == ZT_F16 && dt == ZT_BF16)) {
                OPS->cast(CTX, back, st, dst, dt, n);
                for (size_t i = 0; i < n; i++) {
                    uint32_t a = elem_bits(src, st, i), b = elem_bits(back, st, i);
                    if (a != b && !isnan(zt_load_f32(src, st, i)))
                        ZT_FAIL("round trip %s -> %s -> %s, element %zu: %08x became %08x",
                                zt_dtype_name(st), zt_dtype_name(dt), zt_dtype_name(st), i, a, b);
                }
            }
        }
    }
    zt_free(f), zt_free(src), zt_free(dst), zt_free(back);
}

/* ---- accumulate, scale ---- */

static void test_accumulate(size_t n)
{
    float *src = kc_frandn(n, 1.0), *init = kc_frandn(n, 4.0);
    void *dst = kc_falloc(n);
    const float scale = 0.37f;
    for (int di = 0; di < 3; di++) {
        zt_dtype dt = DTYPES[di];
        for (size_t i = 0; i < n; i++)
            zt_store_f32(dst, dt, i, init[i]);
        OPS->accumulate(CTX, dst, dt, src, scale, n);
        OPS->accumulate(CTX, dst, dt, src, -0.5f, n); /* twice: it really adds onto dst */
        size_t exact = 0;
        /* reference: two steps, each computed exactly, rounded to float, then to the dtype */
        void *ref = kc_falloc(n);
        for (size_t i = 0; i < n; i++)
            zt_store_f32(ref, dt, i, init[i]);
        for (int step = 0; step < 2; step++) {
            double sc = step == 0 ? scale : -0.5;
            for (size_t i = 0; i < n; i++) {
                double v = (double)zt_load_f32(ref, dt, i) + sc * (double)src[i];
                zt_store_f32(ref, dt, i, (float)v);
            }
        }
        for (size_t i = 0; i < n; i++) {
            float got = zt_load_f32(dst, dt, i), want = zt_load_f32(ref, dt, i);
            if (elem_bits(dst, dt, i) == elem_bits(ref, dt, i)) {
                exact++;
                continue;
            }
            /* within one unit of the last place of the destination type */
            float ulp = dt == ZT_F32 ? 1.2e-7f : dt == ZT_BF16 ? 7.9e-3f : 9.8e-4f;
            if (!(fabsf(got - want) <= 1.01f * ulp * fabsf(want) + 1e-30f))
                ZT_FAIL("accumulate into %s, n=%zu, element %zu: got %.9g, want %.9g",
                        zt_dtype_name(dt), n, i, (double)got, (double)want);
        }
        if (exact < n - n / 100)
            ZT_FAIL("accumulate into %s: only %zu of %zu elements rounded like the reference",
                    zt_dtype_name(dt), exact, n);
        zt_free(ref);
    }
    zt_free(src), zt_free(init), zt_free(dst);
}

static void test_scale(size_t n)
{
    float *x = kc_frandn(n, 1.0), *y = kc_fcopy(x, n);
    OPS->scale(CTX, y, -0.125f, n);
    for (size_t i = 0; i < n; i++)
        if (y[i] != x[i] * -0.125f)
            ZT_FAIL("scale: element %zu: got %.9g, want %.9g", i, (double)y[i],
                    (double)(x[i] * -0.125f));
    zt_free(x), zt_free(y);
}

/* ---- sumsq_nonfinite ---- */

static void test_sumsq(size_t n)
{
    float *f = kc_frandn(n, 3.0);
    int special = n > 10;
    if (special) {
        f[1] = NAN, f[n - 1] = INFINITY, f[n / 2] = -INFINITY, f[n / 3] = -NAN;
        f[2] = 1e30f; /* finite in fp32 and bf16 (its square is not, in float); inf in fp16 */
    }
    void *x = kc_falloc(n);
    for (int di = 0; di < 3; di++) {
        zt_dtype dt = DTYPES[di];
        for (size_t i = 0; i < n; i++)
            zt_store_f32(x, dt, i, f[i]);
        double want = 1.5, bad = 2.0; /* out accumulates onto what is there */
        for (size_t i = 0; i < n; i++) {
            double v = zt_load_f32(x, dt, i);
            if (isfinite(v))
                want += v * v;
            else
                bad += 1.0;
        }
        if (special) ASSERT_EQ_INT((long long)bad, 2 + 4 + (dt == ZT_F16));
        double out[2] = {1.5, 2.0};
        OPS->sumsq_nonfinite(CTX, x, dt, n, out);
        ASSERT_NEAR(out[0], want, 1e-12, 0);
        ASSERT_EQ_INT((long long)out[1], (long long)bad);
    }
    zt_free(f), zt_free(x);
}

/* ---- AdamW ---- */

typedef struct {
    const char *name;
    float lr, b1, b2, eps, wd, gs;
    int l2;
    zt_dtype gt;
    int lp; /* write param_lp */
    zt_dtype lpt;
} adam_case;

static void test_adamw(const adam_case *c, size_t n)
{
    const int steps = 6;
    float *p = kc_frandn(n, 1.0), *m = kc_falloc(n), *v = kc_falloc(n);
    memset(m, 0, n * sizeof(float));
    memset(v, 0, n * sizeof(float));
    double *pd = kc_widen(p, n), *md = kc_dalloc(n), *vd = kc_dalloc(n);
    void *g = kc_falloc(n), *lp = kc_falloc(n);
    for (int t = 1; t <= steps; t++) {
        for (size_t i = 0; i < n; i++) { /* gradients of varying scale, some exactly zero */
            float gi = (i % 11 == 5) ? 0.0f : (float)(kc_normal() * (t == 3 ? 1e-3 : 0.3));
            zt_store_f32(g, c->gt, i, gi);
        }
        zt_adamw_args a = {.lr = c->lr,
                           .beta1 = c->b1,
                           .beta2 = c->b2,
                           .eps = c->eps,
                           .weight_decay = c->wd,
                           .grad_scale = c->gs,
                           .l2_mode = c->l2};
        a.bc1 = (float)(1.0 - pow((double)c->b1, t));
        a.bc2 = (float)(1.0 - pow((double)c->b2, t));
        memset(lp, 0xa5, n * sizeof(float));
        OPS->adamw(CTX, p, g, c->gt, m, v, n, &a, c->lp ? lp : NULL, c->lpt);
        /* the formula, in double, from the same float inputs */
        for (size_t i = 0; i < n; i++) {
            double gi = (double)zt_load_f32(g, c->gt, i) * (double)c->gs;
            if (c->l2) gi += (double)c->wd * pd[i];
            md[i] = (double)c->b1 * md[i] + (1.0 - (double)c->b1) * gi;
            vd[i] = (double)c->b2 * vd[i] + (1.0 - (double)c->b2) * gi * gi;
            double u = (md[i] / (double)a.bc1) / (sqrt(vd[i] / (double)a.bc2) + (double)c->eps);
            if (!c->l2) pd[i] -= (double)c->lr * (double)c->wd * pd[i];
            pd[i] -= (double)c->lr * u;
        }
        char what[160];
        snprintf(what, sizeof what, "adamw %s n=%zu step %d: param", c->name, n, t);
        kc_check_close(what, p, pd, n, 1e-6, 2e-7 * c->lr * t);
        snprintf(what, sizeof what, "adamw %s n=%zu step %d: m", c->name, n, t);
        kc_check_close(what, m, md, n, 1e-6, 0);
        snprintf(what, sizeof what, "adamw %s n=%zu step %d: v", c->name, n, t);
        kc_check_close(what, v, vd, n, 1e-6, 0);
        if (c->lp)
            for (size_t i = 0; i < n; i++) {
                uint32_t got = elem_bits(lp, c->lpt, i);
                uint32_t want = c->lpt == ZT_F32    ? zt_v_bits(p[i])
                                : c->lpt == ZT_BF16 ? zt_bf16_from_f32(p[i])
                                                    : zt_f16_from_f32(p[i]);
                if (got != want)
                    ZT_FAIL("adamw %s: param_lp[%zu] (%s) is %08x, want %08x (param %.9g)", c->name,
                            i, zt_dtype_name(c->lpt), got, want, (double)p[i]);
            }
    }
    zt_free(p), zt_free(m), zt_free(v), zt_free(pd), zt_free(md), zt_free(vd), zt_free(g);
    zt_free(lp);
}

static void run_all(void)
{
    static const size_t sizes[] = {1, 7, 2049, 100003};
    static const adam_case cases[] = {
        {"adamw fp32 grads", 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 0, ZT_F32, 0, ZT_F32},
        {"adamw no decay, bf16 grads scaled, bf16 copy", 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.5f, 0,
         ZT_BF16, 1, ZT_BF16},
        {"adam l2, fp16 grads, fp16 copy", 1e-3f, 0.8f, 0.99f, 1e-6f, 0.05f, 0.25f, 1, ZT_F16, 1,
         ZT_F16},
        {"adam l2 no decay, fp32 grads, fp32 copy", 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, 2.0f, 1,
         ZT_F32, 1, ZT_F32},
        {"adamw, fp16 grads, bf16 copy", 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 0, ZT_F16, 1,
         ZT_BF16},
    };
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        test_cast(n);
        test_accumulate(n);
        test_scale(n);
        test_sumsq(n);
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
            test_adamw(&cases[c], n);
    }
}

int main(void)
{
    OPS = zt_ops_cpu();
    zt_err err;
    ASSERT_OK(OPS->ctx_create(&CTX, 0, &err));
    printf("cpu ops: %d thread(s)\n", CTX->nthreads);
    test_exp();
    test_sqrt();
    test_conversions();
    run_all();
    if (CTX->nthreads > 1) {
        CTX->par_min = 1;
        run_all();
    }
    OPS->ctx_destroy(CTX);
    printf("ok\n");
    return 0;
}
