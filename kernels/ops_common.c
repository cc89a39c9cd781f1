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

size_t zt_cuda_context_device_bytes(int B, int T)
{
    size_t n = (size_t)(B > 0 ? B : 0) * (size_t)(T > 0 ? T : 0);
    return ZT_CUDA_LT_WORKSPACE + ZT_CUDA_SCRATCH_FLOATS * sizeof(float) +
           ZT_CUDA_RED_SLOTS * 2 * sizeof(double) + ZT_CUDA_TOKEN_GROUP_INTS(n) * sizeof(int32_t);
}

bool zt_cuda_stage_env(void)
{
    return zt_setting_bool(ZT_SET_CUDA_GEMM_STAGE); /* warns once: a plan asks many times */
}

bool zt_cuda_stage_wanted(zt_dtype pdt)
{
    if (!zt_cuda_stage_env()) return false;
    /* ZT_CUDA_MATMUL as ops_cuda.c reads it: a value naming no mode counts as unset */
    const char *mm = zt_setting_env(ZT_SET_CUDA_MATMUL);
    if (mm && (strcmp(mm, "bf16") == 0 || strcmp(mm, "fp16") == 0)) return true;
    if (mm && (strcmp(mm, "fp32") == 0 || strcmp(mm, "tf32") == 0)) return false;
    return pdt == ZT_BF16 || pdt == ZT_F16;
}

size_t zt_cuda_stage_cap_elems(void)
{
    size_t def = (size_t)ZT_CUDA_STAGE_MIB << 19; /* MiB of 2-byte elements */
    if (!zt_setting_raw(ZT_SET_CUDA_GEMM_STAGE_MIB)) return def;
    /* a bad value warns once (a plan asks many times) and gives the table's default, which
     * tests/common/test_settings.c holds to ZT_CUDA_STAGE_MIB */
    double mib = zt_setting_real(ZT_SET_CUDA_GEMM_STAGE_MIB);
    size_t n = (size_t)(mib * (double)((size_t)1 << 19));
    return n < ZT_CUDA_STAGE_MIN_ELEMS ? ZT_CUDA_STAGE_MIN_ELEMS : n;
}

size_t zt_cuda_stage_pad(size_t elems)
{
    return (elems + 127) / 128 * 128;
}

size_t zt_cuda_stage_elems(size_t M, size_t N, size_t K, size_t cap)
{
    /* op(B), a 16-bit copy of the bias (a product with a 16-bit output), op(A) */
    size_t need = zt_cuda_stage_pad(K * N) + zt_cuda_stage_pad(N) + M * K;
    return need < cap ? need : cap;
}

size_t zt_cuda_stage_bwd_elems(size_t N, size_t C, size_t OC, size_t cap)
{
    size_t need = zt_cuda_stage_pad(OC * C) + zt_cuda_stage_pad(N * OC) + N * C;
    return need < cap ? need : cap;
}
