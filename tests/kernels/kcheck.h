/* zerotrain tests: shared helpers of the CPU kernel tests: a seeded RNG, float/double array
 * helpers, closeness checks that print the worst element, and finite-difference checks of a
 * scalar loss. Header-only; each test program includes it once. */
#ifndef ZT_TESTS_KERNELS_KCHECK_H
#define ZT_TESTS_KERNELS_KCHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "tests/test.h"

/* ---- RNG (splitmix64) ---- */
static uint64_t kc_rng_state = 0x5eed1234abcdull;

static inline uint64_t kc_next(void)
{
    uint64_t z = (kc_rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static inline double kc_uniform(void)
{
    return (double)(kc_next() >> 11) * (1.0 / 9007199254740992.0);
}

static inline double kc_normal(void)
{
    double u1 = kc_uniform(), u2 = kc_uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static inline size_t kc_index(size_t n)
{
    return (size_t)(kc_next() % (uint64_t)n);
}

/* ---- arrays ---- */
static inline float *kc_falloc(size_t n)
{
    float *p = zt_aligned_alloc(256, (n ? n : 1) * sizeof(float));
    if (!p) ZT_FAIL("out of memory allocating %zu floats", n);
    return p;
}

static inline double *kc_dalloc(size_t n)
{
    double *p = zt_calloc(n ? n : 1, sizeof(double));
    if (!p) ZT_FAIL("out of memory allocating %zu doubles", n);
    return p;
}

static inline float *kc_frandn(size_t n, double scale)
{
    float *p = kc_falloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(kc_normal() * scale);
    return p;
}

static inline float *kc_fcopy(const float *src, size_t n)
{
    float *p = kc_falloc(n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

static inline double *kc_widen(const float *src, size_t n)
{
    double *p = kc_dalloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = src[i];
    return p;
}

static inline double kc_rms_d(const double *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0.0;
}

/* Softmax + cross-entropy in double over rows of Vp logits of which the first V count: the
 * losses (NaN for a target outside [0, V)) and, when dlogits is not NULL, (softmax -
 * onehot(target)) * dloss on [0, V) and 0 on [V, Vp). */
static inline void kc_ref_crossentropy(double *losses, double *dlogits, const double *logits,
                                       const int32_t *targets, int N, int V, int Vp, double dloss)
{
    for (int i = 0; i < N; i++) {
        const double *l = logits + (size_t)i * Vp;
        int t = targets[i];
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < V; j++)
            mx = l[j] > mx ? l[j] : mx;
        for (int j = 0; j < V; j++)
            sum += exp(l[j] - mx);
        losses[i] = t >= 0 && t < V ? -(l[t] - mx - log(sum)) : NAN;
        if (dlogits)
            for (int j = 0; j < Vp; j++)
                dlogits[(size_t)i * Vp + j] =
                    j < V ? (exp(l[j] - mx) / sum - (j == t ? 1.0 : 0.0)) * dloss : 0.0;
    }
}

/* Each got[i] within rtol*(|want[i]| + rms(want)) + atol of want[i]; on failure prints the
 * worst element (index, both values) and exits. */
static inline void kc_check_close(const char *what, const float *got, const double *want, size_t n,
                                  double rtol, double atol)
{
    double rms = kc_rms_d(want, n);
    size_t worst = 0;
    double worst_ratio = 0.0;
    for (size_t i = 0; i < n; i++) {
        double tol = rtol * (fabs(want[i]) + rms) + atol;
        double err = fabs((double)got[i] - want[i]);
        if (err <= tol) continue;
        double ratio = tol > 0 ? err / tol : INFINITY; /* NaN when err is NaN */
        if (!(ratio <= worst_ratio)) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    if (!(worst_ratio <= 1.0)) {
        ZT_FAIL(
            "%s: element %zu of %zu: got %.9g, want %.9g (diff %.3g, tolerance rtol %g of |want| + rms %.3g, atol %g)",
            what, worst, n, (double)got[worst], want[worst], fabs((double)got[worst] - want[worst]),
            rtol, rms, atol);
    }
}

/* Same for double results (reference against reference). */
static inline void kc_check_close_d(const char *what, const double *got, const double *want,
                                    size_t n, double rtol, double atol)
{
    double rms = kc_rms_d(want, n);
    for (size_t i = 0; i < n; i++) {
        double tol = rtol * (fabs(want[i]) + rms) + atol;
        if (!(fabs(got[i] - want[i]) <= tol)) {
            ZT_FAIL("%s: element %zu of %zu: got %.12g, want %.12g (diff %.3g, tol %.3g)", what, i,
                    n, got[i], want[i], fabs(got[i] - want[i]), tol);
        }
    }
}

/* ---- finite differences ----
 * loss(state) evaluates a scalar; the check perturbs `samples` random elements of x (double or
 * float) by +-h, and compares (L+ - L-)/2h with grad[i] within rtol*(|grad[i]| + rms(grad)). */
typedef double (*kc_loss_fn)(void *state);

static inline void kc_fd_check_d(const char *what, kc_loss_fn loss, void *state, double *x,
                                 const double *grad, size_t n, int samples, double h, double rtol)
{
    double rms = kc_rms_d(grad, n);
    for (int s = 0; s < samples && n > 0; s++) {
        size_t i = kc_index(n);
        double x0 = x[i];
        x[i] = x0 + h;
        double lp = loss(state);
        x[i] = x0 - h;
        double lm = loss(state);
        x[i] = x0;
        double fd = (lp - lm) / (2.0 * h);
        double tol = rtol * (fabs(grad[i]) + rms) + 1e-12;
        if (!(fabs(fd - grad[i]) <= tol)) {
            ZT_FAIL(
                "%s: finite difference at element %zu: analytic %.10g, numeric %.10g (diff %.3g, tol %.3g)",
                what, i, grad[i], fd, fabs(fd - grad[i]), tol);
        }
    }
}

static inline void kc_fd_check_f(const char *what, kc_loss_fn loss, void *state, float *x,
                                 const float *grad, size_t n, int samples, float h, double rtol)
{
    double *g = kc_widen(grad, n);
    double rms = kc_rms_d(g, n);
    for (int s = 0; s < samples && n > 0; s++) {
        size_t i = kc_index(n);
        float x0 = x[i];
        x[i] = x0 + h;
        double lp = loss(state);
        x[i] = x0 - h;
        double lm = loss(state);
        x[i] = x0;
        double step = ((double)(x0 + h) - (double)(x0 - h)); /* the step actually taken */
        double fd = (lp - lm) / step;
        double tol = rtol * (fabs(g[i]) + rms) + 1e-9;
        if (!(fabs(fd - g[i]) <= tol)) {
            ZT_FAIL(
                "%s: finite difference on the op at element %zu: analytic %.8g, numeric %.8g (diff %.3g, tol %.3g)",
                what, i, g[i], fd, fabs(fd - g[i]), tol);
        }
    }
    zt_free(g);
}

/* sum_i w[i] * y[i] in double */
static inline double kc_dot_fd(const float *y, const double *w, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)y[i] * w[i];
    return s;
}

static inline double kc_dot_dd(const double *y, const double *w, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += y[i] * w[i];
    return s;
}

#endif
