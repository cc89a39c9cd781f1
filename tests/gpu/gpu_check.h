/* zerotrain tests: what every part of test_gpu_ops shares: the two tables and their contexts,
 * the tolerances, GPU buffers to and from the host, and the checks of a GPU result against the
 * CPU's. Header-only, like tests/kernels/kcheck.h; test_gpu_ops.c includes it (with its parts)
 * into one program whose seeded random stream and failure handling span every part. */
#ifndef ZT_TESTS_GPU_GPU_CHECK_H
#define ZT_TESTS_GPU_GPU_CHECK_H

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
#endif
