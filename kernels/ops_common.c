/* zerotrain: what the op table's contract defines for every backend alike. */
#include "ops.h"

#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/settings.h"

bool zt_optimes_env(void)
{
    return zt_setting_bool(ZT_SET_OP_TIMES);
}

void zt_optimes_add(zt_optimes *t, const char *label, double ms)
{
    int i = 0;
    while (i < t->n && t->label[i] != label && strcmp(t->label[i], label) != 0)
        i++;
    if (i == t->n) {
        if (t->n < ZT_OPTIMES_LABELS - 1) {
            t->label[i] = label;
            t->ms[i] = 0.0;
            t->n++;
        } else { /* the last slot sums every label past the others */
            i = ZT_OPTIMES_LABELS - 1;
            if (t->n < ZT_OPTIMES_LABELS) {
                t->label[i] = "other";
                t->ms[i] = 0.0;
                t->n = ZT_OPTIMES_LABELS;
            }
        }
    }
    t->ms[i] += ms;
}

int zt_attention_chunk_seqs(int B, int T, int NH)
{
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    size_t per_seq = 2 * (size_t)NH * (size_t)T * (size_t)T;
    size_t fit = ZT_ATTENTION_SCRATCH_BUDGET / per_seq;
    if (fit < 1) fit = 1;
    return fit < (size_t)B ? (int)fit : B;
}

size_t zt_attention_scratch_floats(int B, int T, int NH)
{
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    /* per (sequence, head, token) of a chunk: two rows of T scores, and at least 136 floats:
     * the CUDA tensor-core attention's 16-bit copies of q, k, v and dO (head size 64) and its
     * delta take 129, and it aligns them (zt_cuda_attn_tc_floats) */
    size_t row = 2 * (size_t)T > 136 ? 2 * (size_t)T : 136;
    return (size_t)zt_attention_chunk_seqs(B, T, NH) * (size_t)NH * (size_t)T * row;
}

/* dt16 ZT_F32: the logits as the product leaves them (zt_classifier_by_ops) */
void zt_classifier16_by_ops(const zt_ops *ops, zt_kctx *ctx, zt_dtype dt16, float *losses,
                            float *dx, float *dwte, float *logits, const float *x, const float *wte,
                            const int32_t *targets, int N, int rows, int C, int V, int Vp,
                            float dloss)
{
    if (rows <= 0) return;
    for (int r0 = 0; r0 < N; r0 += rows) {
        int m = N - r0 < rows ? N - r0 : rows;
        const float *xr = x + (size_t)r0 * C;
        ops->matmul_forward(ctx, logits, xr, wte, NULL, m, C, Vp);
        if (dt16 != ZT_F32) ops->round16(ctx, logits, dt16, (size_t)m * (size_t)Vp);
        ops->crossentropy_forward_backward(ctx, losses + r0, dx ? logits : NULL, logits,
                                           targets + r0, m, V, Vp, dloss);
        if (dx)
            ops->matmul_backward(ctx, dx + (size_t)r0 * C, dwte, NULL, logits, xr, wte, m, C, Vp);
    }
}

void zt_classifier_by_ops(const zt_ops *ops, zt_kctx *ctx, float *losses, float *dx, float *dwte,
                          float *logits, const float *x, const float *wte, const int32_t *targets,
                          int N, int rows, int C, int V, int Vp, float dloss)
{
    zt_classifier16_by_ops(ops, ctx, ZT_F32, losses, dx, dwte, logits, x, wte, targets, N, rows, C,
                           V, Vp, dloss);
}
