/* zerotrain bench helper: the machine's matmul peak — a large oneDNN dnnl_sgemm timed on the
 * threads OMP_NUM_THREADS allows. Prints "sgemm_gflops=<x> n=<n> threads=<t>". Used by the
 * training benchmarks as the denominator of their FLOP/s fractions. */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/timeutil.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2048;
    if (n < 64)
        n = 64;
    size_t nn = (size_t)n * n;
    float *a = zt_aligned_alloc(64, nn * 4), *b = zt_aligned_alloc(64, nn * 4),
          *c = zt_aligned_alloc(64, nn * 4);
    if (!a || !b || !c) {
        fprintf(stderr, "sgemm_peak: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
        c[i] = 0.0f;
    }
    dnnl_sgemm('N', 'T', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); /* warm up */
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = zt_now_s();
        dnnl_sgemm('N', 'T', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = zt_now_s() - t0;
        double gf = 2.0 * n * (double)n * n / dt / 1e9;
        if (gf > best)
            best = gf;
    }
    printf("sgemm_gflops=%.1f n=%d threads=%d\n", best, n, omp_get_max_threads());
    zt_free(a);
    zt_free(b);
    zt_free(c);
    return 0;
}
