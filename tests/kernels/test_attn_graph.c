/* Tests kernels/attn_graph.c: the attention graph that ZT_CUDA_ATTN=cudnn hands cuDNN, evaluated
 * on the CPU by the ops' documented meaning (attn_graph.h) and compared with the CPU op table's
 * attention_forward and attention_backward. Exact (the graph's 16-bit tensors kept in fp32): the
 * same values within fp32 sums' rounding, so a wrong input, mask, scale, stride or transpose in
 * the graph shows as an error of the order of the values. Rounded (bf16, fp16): within the
 * rounding of P, dS and the outputs. That cuDNN accepts the graph is test_cudnn_plans'; that it
 * computes the graph's meaning, test_gpu_ops' on a GPU. Runs without CUDA. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/dtype.h"
#include "kernels/attn_graph.h"
#include "kernels/ops.h"
#include "tests/kernels/kcheck.h"
#include "tests/test.h"

/* how the graph's ZT_AG_IO tensors hold their values: ZT_F32 (exact) or rounded to a type */
static zt_dtype IO;

static float io_round(float v)
{
    if (IO == ZT_F32) return v;
    uint16_t h;
    zt_store_f32(&h, IO, 0, v);
    return zt_load_f32(&h, IO, 0);
}

/* one past the largest element offset a tensor reaches */
static size_t span(const zt_ag_tensor *t)
{
    size_t m = 0;
    for (int d = 0; d < 4; d++)
        m += (size_t)(t->dim[d] - 1) * (size_t)t->str[d];
    return m + 1;
}

/* the offset of index i in t, broadcast along t's dimensions of 1 */
static size_t at(const zt_ag_tensor *t, const int64_t i[4])
{
    size_t o = 0;
    for (int d = 0; d < 4; d++)
        o += (size_t)(t->dim[d] == 1 ? 0 : i[d]) * (size_t)t->str[d];
    return o;
}

/* calls f(i) for every index of dims */
#define EACH(dims, i)                                                                              \
    for (i[0] = 0; i[0] < (dims)[0]; i[0]++)                                                       \
        for (i[1] = 0; i[1] < (dims)[1]; i[1]++)                                                   \
            for (i[2] = 0; i[2] < (dims)[2]; i[2]++)                                               \
                for (i[3] = 0; i[3] < (dims)[3]; i[3]++)

/* Evaluates g: mem[uid] is where the tensor of that id lives (floats, laid out by its strides;
 * scalars: one float), virtual tensors get buffers of their own */
static void evaluate(const zt_attn_graph *g, float *const mem[ZT_AG_DQACC + 1])
{
    float *buf[ZT_AG_TENSORS];
    for (int k = 0; k < g->nt; k++) {
        const zt_ag_tensor *t = &g->t[k];
        if (t->virt) {
            buf[k] = kc_falloc(span(t));
        } else {
            ASSERT_TRUE(t->uid > 0 && t->uid <= ZT_AG_DQACC && mem[t->uid] != NULL);
            buf[k] = mem[t->uid];
        }
    }
    for (int k = 0; k < g->nop; k++) {
        const zt_ag_op *o = &g->op[k];
        const zt_ag_tensor *X = &g->t[o->x], *Y = &g->t[o->y];
        const zt_ag_tensor *Bt = o->b >= 0 ? &g->t[o->b] : NULL,
                           *Tt = o->t >= 0 ? &g->t[o->t] : NULL;
        float *x = buf[o->x], *y = buf[o->y], *b = o->b >= 0 ? buf[o->b] : NULL;
        float *t = o->t >= 0 ? buf[o->t] : NULL;
        bool round = Y->type == ZT_AG_IO;
        int64_t i[4];
        switch (o->kind) {
        case ZT_AG_MATMUL: {
            ASSERT_TRUE(X->dim[3] == Bt->dim[2] && X->dim[2] == Y->dim[2] &&
                        Bt->dim[3] == Y->dim[3]);
            EACH(Y->dim, i)
            {
                double s = 0.0;
                int64_t xi[4] = {i[0], i[1], i[2], 0}, bi[4] = {i[0], i[1], 0, i[3]};
                for (int64_t kk = 0; kk < X->dim[3]; kk++) {
                    xi[3] = bi[2] = kk;
                    s += (double)x[at(X, xi)] * (double)b[at(Bt, bi)];
                }
                y[at(Y, i)] = round ? io_round((float)s) : (float)s;
            }
            break;
        }
        case ZT_AG_RED_MAX:
        case ZT_AG_RED_ADD: {
            size_t n = span(Y);
            double *acc = zt_malloc(n * sizeof(double));
            ASSERT_TRUE(acc != NULL);
            for (size_t j = 0; j < n; j++)
                acc[j] = o->kind == ZT_AG_RED_MAX ? -INFINITY : 0.0;
            EACH(X->dim, i)
            {
                double v = x[at(X, i)];
                size_t j = at(Y, i);
                acc[j] = o->kind == ZT_AG_RED_MAX ? (v > acc[j] ? v : acc[j]) : acc[j] + v;
            }
            EACH(Y->dim, i)
            y[at(Y, i)] = round ? io_round((float)acc[at(Y, i)]) : (float)acc[at(Y, i)];
            zt_free(acc);
            break;
        }
        case ZT_AG_RESHAPE: /* the same memory seen through Y's dims and strides */
            ASSERT_TRUE(span(X) == span(Y));
            for (size_t j = 0; j < span(Y); j++)
                y[j] = round ? io_round(x[j]) : x[j];
            break;
        default:
            EACH(Y->dim, i)
            {
                float xv = x[at(X, i)], bv = b ? b[at(Bt, i)] : 0.0f, tv = t ? t[at(Tt, i)] : 0.0f;
                float v = 0.0f;
                switch (o->kind) {
                case ZT_AG_MUL:
                    v = xv * bv;
                    break;
                case ZT_AG_ADD:
                    v = xv + bv;
                    break;
                case ZT_AG_SUB:
                    v = xv - bv;
                    break;
                case ZT_AG_DIV:
                    v = xv / bv;
                    break;
                case ZT_AG_EXP:
                    v = expf(xv);
                    break;
                case ZT_AG_LOG:
                    v = logf(xv);
                    break;
                case ZT_AG_IDENTITY:
                    v = xv;
                    break;
                case ZT_AG_GEN_INDEX:
                    v = (float)i[o->axis];
                    break;
                case ZT_AG_CMP_GE:
                    v = xv >= bv ? 1.0f : 0.0f;
                    break;
                case ZT_AG_SELECT:
                    v = tv != 0.0f ? xv : bv;
                    break;
                default:
                    ZT_FAIL("op %d of unknown kind %d", k, (int)o->kind);
                }
                y[at(Y, i)] = round ? io_round(v) : v;
            }
        }
    }
    for (int k = 0; k < g->nt; k++)
        if (g->t[k].virt) zt_free(buf[k]);
}

/* rms of got - want over rms of want */
static double rel_rms(const float *got, const float *want, size_t n)
{
    double e = 0.0, w = 0.0;
    for (size_t j = 0; j < n; j++) {
        double d = (double)got[j] - (double)want[j];
        e += d * d;
        w += (double)want[j] * want[j];
    }
    return sqrt(e / (w > 0.0 ? w : 1.0));
}

static void check(const char *what, const float *got, const float *want, size_t n, double tol)
{
    double r = rel_rms(got, want, n);
    printf("  %s: rms error %.2e of the rms (bound %.0e)\n", what, r, tol);
    if (!(r <= tol)) ZT_FAIL("%s: rms error %.3g of the rms, more than %g", what, r, tol);
}

/* The graph of n sequences of T tokens, NH heads, its 16-bit tensors as `io` has them, against
 * the CPU op table on the same (rounded) inputs */
static void graph_case(const zt_ops *cpu, zt_kctx *cc, zt_dtype io, int n, int T, int NH)
{
    int C = 64 * NH;
    size_t n3 = (size_t)n * T * 3 * C, nC = (size_t)n * T * C, nL = (size_t)n * NH * T;
    printf("%s, %d x %d tokens, %d heads:\n", io == ZT_F32 ? "exact" : zt_dtype_name(io), n, T, NH);
    IO = io;
    float *qkv = kc_frandn(n3, 1.0), *dout = kc_frandn(nC, 1.0);
    for (size_t j = 0; j < n3; j++)
        qkv[j] = io_round(qkv[j]);
    for (size_t j = 0; j < nC; j++)
        dout[j] = io_round(dout[j]);
    float *out = kc_falloc(nC), *lse = kc_falloc(nL), *dq = kc_falloc(n3);
    float *gout = kc_falloc(nC), *glse = kc_falloc(nL), *gdq = kc_falloc(n3);
    float *scr = kc_falloc(zt_attention_scratch_floats(n, T, NH));
    float *sum = kc_falloc(nL), *acc = kc_falloc(nL * 64);
    float scale = 1.0f / sqrtf(64.0f), neginf = -INFINITY, one = 1.0f;
    cpu->attention_forward(cc, out, lse, scr, qkv, NULL, n, T, C, NH);

    zt_attn_graph *g = zt_malloc(sizeof(*g));
    ASSERT_TRUE(g != NULL);
    zt_attn_graph_forward(g, n, T, NH);
    float *mem[ZT_AG_DQACC + 1] = {0};
    mem[ZT_AG_Q] = qkv, mem[ZT_AG_K] = qkv + C, mem[ZT_AG_V] = qkv + 2 * C;
    mem[ZT_AG_O] = gout, mem[ZT_AG_STATS] = glse;
    mem[ZT_AG_SCALE] = &scale, mem[ZT_AG_NEGINF] = &neginf;
    evaluate(g, mem);
    bool exact = io == ZT_F32;
    check("forward: out", gout, out, nC, exact ? 1e-5 : io == ZT_BF16 ? 1e-2 : 2e-3);
    check("forward: lse", glse, lse, nL, 1e-5);

    /* backward from the graph's own out and lse, as a run has them (the op adds into dq) */
    memset(dq, 0, n3 * sizeof(float));
    cpu->attention_backward(cc, dq, scr, dout, qkv, gout, glse, NULL, n, T, C, NH);
    double tol = exact ? 1e-5 : io == ZT_BF16 ? 2e-2 : 4e-3;
    /* dQ summed in fp32 (acc), then rounded; and dQ written by its product (acc not bound) */
    for (int dq_sum = 1; dq_sum >= 0; dq_sum--) {
        printf(" dQ %s:\n", dq_sum ? "summed in fp32" : "written by its product");
        zt_attn_graph_backward(g, n, T, NH, dq_sum);
        bool uses_acc = false;
        for (int k = 0; k < g->nt; k++)
            uses_acc |= g->t[k].uid == ZT_AG_DQACC;
        if (uses_acc != (dq_sum != 0))
            ZT_FAIL("backward with dq_sum %d: the fp32 sum of dQ is %sin the graph", dq_sum,
                    uses_acc ? "" : "not ");
        mem[ZT_AG_V] = qkv + 2 * C; /* V^T's view starts there too */
        mem[ZT_AG_DO] = dout, mem[ZT_AG_DQ] = gdq, mem[ZT_AG_DK] = gdq + C;
        mem[ZT_AG_DV] = gdq + 2 * C;
        mem[ZT_AG_ONE] = &one, mem[ZT_AG_SUM] = sum, mem[ZT_AG_DQACC] = dq_sum ? acc : NULL;
        for (size_t j = 0; j < n3; j++) /* every element written by the graph */
            gdq[j] = NAN;
        evaluate(g, mem);
        check("backward: the gradient of qkv", gdq, dq, n3, tol);
        /* each of dQ, dK and dV apart (a graph that swapped two would pass the whole) */
        for (int part = 0; part < 3; part++) {
            float *gp = kc_falloc(nC), *wp = kc_falloc(nC);
            for (size_t r = 0; r < (size_t)n * T; r++)
                for (int c = 0; c < C; c++) {
                    gp[r * C + c] = gdq[r * 3 * C + part * C + c];
                    wp[r * C + c] = dq[r * 3 * C + part * C + c];
                }
            char what[64];
            snprintf(what, sizeof(what), "backward: d%c", "QKV"[part]);
            check(what, gp, wp, nC, tol);
            zt_free(gp), zt_free(wp);
        }
    }
    zt_free(g), zt_free(qkv), zt_free(dout), zt_free(out), zt_free(lse), zt_free(dq);
    zt_free(gout), zt_free(glse), zt_free(gdq), zt_free(scr), zt_free(sum), zt_free(acc);
}

int main(void)
{
    const zt_ops *cpu = zt_ops_cpu();
    zt_kctx *cc = NULL;
    zt_err err;
    ASSERT_OK(cpu->ctx_create(&cc, 0, &err));
    kc_rng_state = 20261127;
    /* shapes: a length no tile of 64 divides, one head; two heads, two sequences */
    graph_case(cpu, cc, ZT_F32, 2, 37, 2);
    graph_case(cpu, cc, ZT_F32, 1, 96, 1);
    graph_case(cpu, cc, ZT_BF16, 2, 37, 2);
    graph_case(cpu, cc, ZT_F16, 2, 37, 2);
    cpu->ctx_destroy(cc);
    printf("ok\n");
    return 0;
}
