/* Tests engine/gpt2.c's random initialisation against the README's GPT-2 init: weights
 * N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1,
 * padded vocabulary rows 0; the same seed gives the same bytes, another seed others, and a
 * unit's values depend only on (seed, unit). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "engine/gpt2.h"
#include "tests/test.h"

static const char *KIND[] = {"wte",   "wpe",   "ln1w",  "ln1b",    "qkvw",     "qkvb",
                             "attpw", "attpb", "ln2w",  "ln2b",    "fcw",      "fcb",
                             "fcpw",  "fcpb",  "lnfw",  "lnfb"};

/* mean and standard deviation of n floats */
static void stats(const float *p, size_t n, double *mean, double *std)
{
    double s = 0, ss = 0;
    for (size_t i = 0; i < n; i++)
        s += p[i];
    *mean = s / (double)n;
    for (size_t i = 0; i < n; i++)
        ss += (p[i] - *mean) * (p[i] - *mean);
    *std = sqrt(ss / (double)(n - 1));
}

int main(void)
{
    zt_gpt2_dims d = {.L = 3, .C = 64, .NH = 4, .T = 32, .V = 100, .Vp = 128};
    zt_gpt2_layout lay;
    ASSERT_OK(zt_gpt2_layout_init(&lay, &d));
    const double std_w = 0.02, std_resid = 0.02 / sqrt(2.0 * d.L);
    int checked[ZT_T_KIND_COUNT] = {0};
    for (int u = 0; u < lay.n_units; u++) {
        float *a = zt_malloc(lay.unit_numel[u] * sizeof(float));
        float *b = zt_malloc(lay.unit_numel[u] * sizeof(float));
        ASSERT_TRUE(a && b);
        zt_gpt2_init_unit(&lay, u, 1337, a);
        zt_gpt2_init_unit(&lay, u, 1337, b);
        ASSERT_TRUE(memcmp(a, b, lay.unit_numel[u] * sizeof(float)) == 0);
        zt_gpt2_init_unit(&lay, u, 1338, b);
        ASSERT_TRUE(memcmp(a, b, lay.unit_numel[u] * sizeof(float)) != 0 || u == lay.n_units - 1);
        for (int ti = lay.unit_first_tensor[u]; ti < lay.unit_first_tensor[u + 1]; ti++) {
            const zt_gpt2_tensor *t = &lay.tensors[ti];
            const float *p = a + t->offset;
            size_t n = t->numel;
            double mean, sd;
            switch (t->kind) {
            case ZT_T_LN1W: case ZT_T_LN2W: case ZT_T_LNFW:
                for (size_t i = 0; i < n; i++)
                    ASSERT_TRUE(p[i] == 1.0f);
                break;
            case ZT_T_LN1B: case ZT_T_LN2B: case ZT_T_LNFB: case ZT_T_QKVB: case ZT_T_ATTPROJB:
            case ZT_T_FCB: case ZT_T_FCPROJB:
                for (size_t i = 0; i < n; i++)
                    ASSERT_TRUE(p[i] == 0.0f);
                break;
            case ZT_T_WTE: {
                size_t real = (size_t)d.V * (size_t)d.C;
                ASSERT_EQ_INT((long long)n, (long long)d.Vp * d.C);
                for (size_t i = real; i < n; i++)
                    ASSERT_TRUE(p[i] == 0.0f); /* padded rows */
                n = real;
            } /* the real rows are N(0, 0.02) */
                __attribute__((fallthrough));
            case ZT_T_WPE: case ZT_T_QKVW: case ZT_T_FCW: case ZT_T_ATTPROJW: case ZT_T_FCPROJW: {
                double want = t->kind == ZT_T_ATTPROJW || t->kind == ZT_T_FCPROJW ? std_resid
                                                                                    : std_w;
                stats(p, n, &mean, &sd);
                printf("  %-5s layer %2d: n %6zu mean %+.2e std %.5f (want %.5f)\n",
                       KIND[t->kind], t->layer, n, mean, sd, want);
                /* sampling error of the std is about want/sqrt(2n): 2% for n >= 1250 */
                ASSERT_NEAR(sd, want, 0.05, 0.0);
                ASSERT_NEAR(mean, 0.0, 0.0, 5.0 * want / sqrt((double)n));
                break;
            }
            default:
                ASSERT_TRUE(0);
            }
            checked[t->kind]++;
        }
        zt_free(a);
        zt_free(b);
    }
    for (int k = 0; k < ZT_T_KIND_COUNT; k++)
        ASSERT_TRUE(checked[k] > 0);
    zt_gpt2_layout_free(&lay);
    printf("ok\n");
    return 0;
}
