/* zerotrain tests: test_gpu_ops' cases of the optimizer and precision ops, bit for bit
 * against the CPU: AdamW, cast, accumulate, scale and the sum of squares. */
#ifndef ZT_TESTS_GPU_GPU_OPS_OPTIM_H
#define ZT_TESTS_GPU_GPU_OPS_OPTIM_H

#include "tests/gpu/gpu_check.h"

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
#endif
