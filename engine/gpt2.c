/* zerotrain: GPT-2 in ZeRO units — layout, initialisation and per-unit forward/backward
 * through the op table (see gpt2.h). */
#include "gpt2.h"

#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/rng.h"
#include "../kernels/cuda/cuda_plan.h"

/* Per-block tensor kinds in unit order, with their shapes in units of C. */
static const int block_kinds[12] = {ZT_T_LN1W,     ZT_T_LN1B,     ZT_T_QKVW, ZT_T_QKVB,
                                    ZT_T_ATTPROJW, ZT_T_ATTPROJB, ZT_T_LN2W, ZT_T_LN2B,
                                    ZT_T_FCW,      ZT_T_FCB,      ZT_T_FCPROJW, ZT_T_FCPROJB};

static size_t kind_numel(const zt_gpt2_dims *d, int kind)
{
    size_t C = (size_t)d->C;
    switch (kind) {
    case ZT_T_WTE: return (size_t)d->Vp * C;
    case ZT_T_WPE: return (size_t)d->T * C;
    case ZT_T_LN1W: case ZT_T_LN1B: case ZT_T_ATTPROJB: case ZT_T_LN2W: case ZT_T_LN2B:
    case ZT_T_FCPROJB: case ZT_T_LNFW: case ZT_T_LNFB: return C;
    case ZT_T_QKVW: return 3 * C * C;
    case ZT_T_QKVB: return 3 * C;
    case ZT_T_ATTPROJW: return C * C;
    case ZT_T_FCW: return 4 * C * C;
    case ZT_T_FCB: return 4 * C;
    case ZT_T_FCPROJW: return 4 * C * C;
    default: return 0;
    }
}

static bool kind_decays(int kind)
{
    return kind == ZT_T_WTE || kind == ZT_T_WPE || kind == ZT_T_QKVW || kind == ZT_T_ATTPROJW ||
           kind == ZT_T_FCW || kind == ZT_T_FCPROJW;
}

zt_status zt_gpt2_layout_init(zt_gpt2_layout *lay, const zt_gpt2_dims *d)
{
    memset(lay, 0, sizeof(*lay));
    lay->d = *d;
    lay->n_units = d->L + 2;
    lay->n_tensors = 2 + 12 * d->L + 2;
    lay->unit_numel = zt_calloc((size_t)lay->n_units, sizeof(*lay->unit_numel));
    lay->tensors = zt_calloc((size_t)lay->n_tensors, sizeof(*lay->tensors));
    lay->unit_first_tensor = zt_calloc((size_t)lay->n_units + 1, sizeof(*lay->unit_first_tensor));
    if (!lay->unit_numel || !lay->tensors || !lay->unit_first_tensor) {
        zt_gpt2_layout_free(lay);
        return ZT_ERR_NOMEM;
    }
    int ti = 0;
    for (int u = 0; u < lay->n_units; u++) {
        lay->unit_first_tensor[u] = ti;
        int kinds[12], nk = 0, layer = -1;
        if (u == 0) {
            kinds[nk++] = ZT_T_WTE;
            kinds[nk++] = ZT_T_WPE;
        } else if (u == lay->n_units - 1) {
            kinds[nk++] = ZT_T_LNFW;
            kinds[nk++] = ZT_T_LNFB;
        } else {
            layer = u - 1;
            for (int i = 0; i < 12; i++)
                kinds[nk++] = block_kinds[i];
        }
        size_t off = 0;
        for (int i = 0; i < nk; i++) {
            zt_gpt2_tensor *t = &lay->tensors[ti++];
            t->kind = kinds[i];
            t->layer = layer;
            t->unit = u;
            t->offset = off;
            t->numel = kind_numel(d, kinds[i]);
            t->decay = kind_decays(kinds[i]);
            off += t->numel;
        }
        lay->unit_numel[u] = off;
        lay->num_params += off;
    }
    lay->unit_first_tensor[lay->n_units] = ti;
    return ZT_OK;
}

void zt_gpt2_layout_free(zt_gpt2_layout *lay)
{
    if (!lay)
        return;
    zt_free(lay->unit_numel);
    zt_free(lay->tensors);
    zt_free(lay->unit_first_tensor);
    lay->unit_numel = NULL;
    lay->tensors = NULL;
    lay->unit_first_tensor = NULL;
}

size_t zt_gpt2_num_params_unpadded(const zt_gpt2_layout *lay)
{
    return lay->num_params - (size_t)(lay->d.Vp - lay->d.V) * (size_t)lay->d.C;
}

static float *tensor_ptr(const zt_gpt2_layout *lay, float *unit, int u, int idx)
{
    return unit + lay->tensors[lay->unit_first_tensor[u] + idx].offset;
}

zt_gpt2_embed zt_gpt2_embed_view(const zt_gpt2_layout *lay, float *unit)
{
    zt_gpt2_embed e = {tensor_ptr(lay, unit, 0, 0), tensor_ptr(lay, unit, 0, 1)};
    return e;
}

zt_gpt2_block zt_gpt2_block_view(const zt_gpt2_layout *lay, float *unit)
{
    zt_gpt2_block b;
    float **slots[12] = {&b.ln1w, &b.ln1b, &b.qkvw, &b.qkvb, &b.attprojw, &b.attprojb,
                         &b.ln2w, &b.ln2b, &b.fcw,  &b.fcb,  &b.fcprojw,  &b.fcprojb};
    for (int i = 0; i < 12; i++)
        *slots[i] = tensor_ptr(lay, unit, 1, i);
    return b;
}

zt_gpt2_final zt_gpt2_final_view(const zt_gpt2_layout *lay, float *unit)
{
    int u = lay->n_units - 1;
    zt_gpt2_final f = {tensor_ptr(lay, unit, u, 0), tensor_ptr(lay, unit, u, 1)};
    return f;
}

void zt_gpt2_init_unit(const zt_gpt2_layout *lay, int u, uint64_t seed, float *out)
{
    const zt_gpt2_dims *d = &lay->d;
    double std_resid = 0.02 / sqrt(2.0 * (double)d->L);
    for (int ti = lay->unit_first_tensor[u]; ti < lay->unit_first_tensor[u + 1]; ti++) {
        const zt_gpt2_tensor *t = &lay->tensors[ti];
        float *p = out + t->offset;
        /* one stream per (kind, layer): a tensor's values do not depend on the unit split */
        zt_rng rng;
        zt_rng_seed(&rng, seed, (uint64_t)t->kind * 100003u + (uint64_t)(t->layer + 1));
        switch (t->kind) {
        case ZT_T_LN1W: case ZT_T_LN2W: case ZT_T_LNFW:
            for (size_t i = 0; i < t->numel; i++)
                p[i] = 1.0f;
            break;
        case ZT_T_WTE: {
            size_t real = (size_t)d->V * (size_t)d->C;
            for (size_t i = 0; i < t->numel; i++)
                p[i] = i < real ? (float)(0.02 * zt_rng_normal(&rng)) : 0.0f;
            break;
        }
        case ZT_T_WPE: case ZT_T_QKVW: case ZT_T_FCW:
            for (size_t i = 0; i < t->numel; i++)
                p[i] = (float)(0.02 * zt_rng_normal(&rng));
            break;
        case ZT_T_ATTPROJW: case ZT_T_FCPROJW:
            for (size_t i = 0; i < t->numel; i++)
                p[i] = (float)(std_resid * zt_rng_normal(&rng));
            break;
        default: /* biases */
            memset(p, 0, t->numel * sizeof(float));
            break;
        }
    }
}

const char *zt_gpt2_kind_name(int kind)
{
    static const char *const names[ZT_T_KIND_COUNT] = {
        "wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
        "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb",
    };
    return kind >= 0 && kind < ZT_T_KIND_COUNT ? names[kind] : "?";
}

void zt_gpt2_locate(const zt_gpt2_layout *lay, int kind, int layer, int *unit, size_t *offset,
                    size_t *numel)
{
    int u = 0;
    if (kind == ZT_T_LNFW || kind == ZT_T_LNFB)
        u = lay->n_units - 1;
    else if (kind != ZT_T_WTE && kind != ZT_T_WPE)
        u = 1 + layer;
    for (int ti = lay->unit_first_tensor[u]; ti < lay->unit_first_tensor[u + 1]; ti++) {
        if (lay->tensors[ti].kind == kind) {
            *unit = u;
            *offset = lay->tensors[ti].offset;
            *numel = lay->tensors[ti].numel;
            return;
        }
    }
    *unit = -1;
    *offset = 0;
    *numel = 0;
}

/* ---- activations ---- */

size_t zt_gpt2_block_acts_f32_floats(const zt_gpt2_dims *d, int B, int T)
{
    return (size_t)B * T * (4 + (size_t)d->C) + (size_t)B * d->NH * T;
}

size_t zt_gpt2_block_acts_lp_floats(const zt_gpt2_dims *d, int B, int T)
{
    return (size_t)B * T * 8 * (size_t)d->C;
}

size_t zt_gpt2_block_acts_lp_work_floats(const zt_gpt2_dims *d, int B, int T)
{
    return (size_t)B * T * 4 * (size_t)d->C;
}

size_t zt_gpt2_block_acts_floats(const zt_gpt2_dims *d, int B, int T)
{
    return zt_gpt2_block_acts_f32_floats(d, B, T) + zt_gpt2_block_acts_lp_floats(d, B, T);
}

void zt_gpt2_block_acts_carve_split(zt_gpt2_block_acts *a, const zt_gpt2_dims *d, int B, int T,
                                    float *f32, float *lp)
{
    size_t BT = (size_t)B * T, C = (size_t)d->C;
    a->ln1_mean = f32; f32 += BT;
    a->ln1_rstd = f32; f32 += BT;
    a->ln2_mean = f32; f32 += BT;
    a->ln2_rstd = f32; f32 += BT;
    a->res2 = f32; f32 += BT * C;
    a->lse = f32;
    a->qkv = lp; lp += BT * 3 * C;
    a->atty = lp; lp += BT * C;
    a->fch = lp;
    a->home.qkv = a->home.out = NULL;
    a->home.dtype = ZT_F32;
    a->fch16 = NULL;
}

void zt_gpt2_block_acts_carve(zt_gpt2_block_acts *a, const zt_gpt2_dims *d, int B, int T,
                              float *m)
{
    zt_gpt2_block_acts_carve_split(a, d, B, T, m, m + zt_gpt2_block_acts_f32_floats(d, B, T));
}

size_t zt_gpt2_scratch_floats(const zt_gpt2_dims *d, int B, int T)
{
    size_t BT = (size_t)B * T, C = (size_t)d->C;
    return BT * C * 2 + BT * 3 * C + BT * 4 * C * 2 + zt_attention_scratch_floats(B, T, d->NH);
}

void zt_gpt2_scratch_carve(zt_gpt2_scratch *s, const zt_gpt2_dims *d, int B, int T, float *m)
{
    size_t BT = (size_t)B * T, C = (size_t)d->C;
    s->d_btc = m; m += BT * C;
    s->d_btc2 = m; m += BT * C;
    s->d_qkv = m; m += BT * 3 * C;
    s->d_fch = m; m += BT * 4 * C;
    s->d_fch2 = m; m += BT * 4 * C;
    s->attn = m;
}

int zt_gpt2_head_rows(const zt_gpt2_dims *d, int B, int T)
{
    size_t N = (size_t)B * T, fit = ZT_GPT2_LOGITS_BUDGET / (size_t)(d->Vp > 0 ? d->Vp : 1);
    if (fit < 1) fit = 1;
    return (int)(fit < N ? fit : N);
}

size_t zt_gpt2_head_acts_floats(const zt_gpt2_dims *d, int B, int T, int rows)
{
    size_t BT = (size_t)B * T;
    return BT * 2 + (size_t)rows * d->Vp + BT;
}

size_t zt_gpt2_stage_elems(const zt_gpt2_dims *d, int B, int T, int rows, size_t cap)
{
    size_t N = (size_t)B * T, C = (size_t)d->C;
    /* (rows, inputs, outputs) of qkv, attproj, fc, fcproj and the classifier */
    const size_t lin[5][3] = {
        {N, C, 3 * C}, {N, C, C}, {N, C, 4 * C}, {N, 4 * C, C}, {(size_t)rows, C, (size_t)d->Vp}};
    size_t most = 0;
    for (int i = 0; i < 5; i++) {
        size_t r = lin[i][0], in = lin[i][1], out = lin[i][2];
        /* forward (M N K) = (r out in), dinp (r in out), dweight (out in r), or the backward's
         * two from one set of copies */
        size_t s[4] = {zt_cuda_stage_elems(r, out, in, cap), zt_cuda_stage_elems(r, in, out, cap),
                       zt_cuda_stage_elems(out, in, r, cap),
                       zt_cuda_stage_bwd_elems(r, in, out, cap)};
        for (int k = 0; k < 4; k++)
            most = s[k] > most ? s[k] : most;
    }
    return most;
}

void zt_gpt2_head_acts_carve(zt_gpt2_head_acts *a, const zt_gpt2_dims *d, int B, int T, int rows,
                             float *m)
{
    size_t BT = (size_t)B * T;
    a->lnf_mean = m; m += BT;
    a->lnf_rstd = m; m += BT;
    a->logits = m; m += (size_t)rows * d->Vp;
    a->losses = m;
    a->rows = rows;
    a->logits_dt = ZT_F32;
}

/* ---- forward / backward ---- */

/* Op times (ops.h mark, ZT_OP_TIMES=1): each mark names the ops up to the next one; a function
 * ends with "engine", the engine's own work between them (ZeRO's gathers, copies, waits). */
static void mark(const zt_ops *ops, zt_kctx *k, const char *label)
{
    ops->mark(k, label);
}

void zt_gpt2_embed_forward(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                           const zt_gpt2_embed *p, const int32_t *inputs, float *x0, int B, int T)
{
    mark(ops, k, "encoder_fwd");
    ops->encoder_forward(k, x0, inputs, p->wte, p->wpe, B, T, lay->d.C);
    mark(ops, k, "engine");
}

void zt_gpt2_embed_backward(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                            const zt_gpt2_embed *g, const int32_t *inputs, const float *dx0,
                            int B, int T)
{
    mark(ops, k, "encoder_bwd");
    ops->encoder_backward(k, g->wte, g->wpe, dx0, inputs, B, T, lay->d.C);
    mark(ops, k, "engine");
}

void zt_gpt2_block_forward(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                           const zt_gpt2_block *p, zt_gpt2_block_acts *a,
                           const zt_gpt2_scratch *s, const float *x_in, float *x_out, int B,
                           int T)
{
    int C = lay->d.C, NH = lay->d.NH, N = B * T;
    size_t nC = (size_t)N * C;
    /* What backward can recompute cheaply from what is kept (the LayerNorms' outputs from their
     * inputs, GELU's output from its input) and what it never reads (the projections before
     * their residual adds) lives in backward's scratch, free until backward zeroes it. */
    float *ln = s->d_btc2, *proj = s->d_btc;
    /* With its 16-bit home qkv's GEMM writes it there rounded, where attention reads it (a->qkv
     * room) */
    zt_attn_home hq = a->home;
    mark(ops, k, "ln1_qkv_fwd");
    if (hq.qkv) {
        ops->layernorm_matmul_forward16(k, hq.qkv, hq.dtype, a->qkv, ln, a->ln1_mean, a->ln1_rstd,
                                        x_in, p->ln1w, p->ln1b, p->qkvw, p->qkvb, N, C, 3 * C);
        hq.qkv_set = true;
    } else {
        ops->layernorm_matmul_forward(k, a->qkv, ln, a->ln1_mean, a->ln1_rstd, x_in, p->ln1w,
                                      p->ln1b, p->qkvw, p->qkvb, N, C, 3 * C);
    }
    const zt_attn_home *h = hq.qkv || hq.out ? &hq : NULL;
    mark(ops, k, "attn_fwd");
    ops->attention_forward(k, a->atty, a->lse, s->attn, a->qkv, h, B, T, C, NH);
    /* With the attention output's home attproj's GEMM adds the residual itself (x_in its C),
     * writing res2 without the projection written and read again */
    mark(ops, k, "attproj_fwd");
    bool res2_set = h && h->out;
    if (res2_set)
        ops->matmul16_forward(k, a->res2, a->atty, h->out, h->dtype, p->attprojw, p->attprojb, x_in,
                              N, C, C);
    else
        ops->matmul_forward(k, proj, a->atty, p->attprojw, p->attprojb, N, C, C);
    /* fch is the MLP's input to GELU; the op computes GELU's output for fcproj (into d_fch
     * where it needs it in fp32). With its 16-bit home fc writes it there rounded (d_fch room),
     * and LN2 goes straight into fc's 16-bit copy as LN1 into qkv's (ln room): the residual
     * alone first where attproj did not add it, the bits of the fused residual and LayerNorm
     * (its LayerNorm is the same code), without LN2's fp32 output written and read again; and
     * fcproj's GEMM adds the block's last residual (res2 its C) */
    if (a->fch16) {
        if (!res2_set) {
            mark(ops, k, "res_ln2_fwd");
            ops->residual_forward(k, a->res2, x_in, proj, nC);
        }
        mark(ops, k, "fc_fwd");
        ops->layernorm_matmul_forward16(k, a->fch16, a->home.dtype, s->d_fch, ln, a->ln2_mean,
                                        a->ln2_rstd, a->res2, p->ln2w, p->ln2b, p->fcw, p->fcb, N,
                                        C, 4 * C);
        mark(ops, k, "gelu_fcproj_fwd");
        ops->gelu16_matmul_forward(k, x_out, s->d_fch, a->fch16, a->home.dtype, p->fcprojw,
                                   p->fcprojb, a->res2, N, 4 * C, C);
    } else {
        mark(ops, k, "res_ln2_fwd");
        if (res2_set)
            ops->layernorm_forward(k, ln, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N,
                                   C);
        else
            ops->residual_layernorm_forward(k, a->res2, ln, a->ln2_mean, a->ln2_rstd, x_in, proj,
                                            p->ln2w, p->ln2b, N, C);
        mark(ops, k, "fc_fwd");
        ops->matmul_forward(k, a->fch, ln, p->fcw, p->fcb, N, C, 4 * C);
        mark(ops, k, "gelu_fcproj_fwd");
        ops->gelu_matmul_forward(k, proj, s->d_fch, a->fch, p->fcprojw, p->fcprojb, N, 4 * C, C);
        mark(ops, k, "res_fwd");
        ops->residual_forward(k, x_out, a->res2, proj, nC);
    }
    mark(ops, k, "engine");
}

void zt_gpt2_block_backward(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                            const zt_gpt2_block *p, const zt_gpt2_block *g,
                            const zt_gpt2_block_acts *a, const zt_gpt2_scratch *s,
                            const float *x_in, float *dres, int B, int T)
{
    int C = lay->d.C, NH = lay->d.NH, N = B * T;
    size_t nC = (size_t)N * C, n3C = (size_t)N * 3 * C;
    /* x_out = res2 + fcproj: dres already is d(res2) from the residual path and d(fcproj).
     * d(fch) = GELU'(fch) * (dres @ fcprojw), written into d_fch2; GELU's output again (for dW
     * of fcproj) computed by the op, into d_fch where it needs it in fp32 */
    /* fc's backward from LN2's output again (bitwise the forward's: same input, same op). With
     * fch's 16-bit home, d(fch) is written rounded into d_qkv (free until attention's backward:
     * N x 4C 16-bit elements in its N x 3C floats), d_fch and d_fch2 room; fc's input gradient
     * is written rounded too (as autocast's linear gives it), into the rest of d_qkv, where
     * LN2's backward reads it (d_btc room). */
    mark(ops, k, "gelu_fcproj_bwd");
    if (a->fch16) {
        void *dfch16 = s->d_qkv, *dln16 = s->d_qkv + 2 * nC;
        ops->matmul_gelu16_backward(k, dfch16, g->fcprojw, g->fcprojb, dres, s->d_fch, s->d_fch2,
                                    p->fcprojw, a->fch16, a->home.dtype, N, 4 * C, C);
        mark(ops, k, "ln2_fc_bwd");
        ops->layernorm_matmul16_backward(k, s->d_btc, dln16, g->fcw, g->fcb, dfch16, a->home.dtype,
                                         s->d_fch2, s->d_btc2, a->res2, p->ln2w, p->ln2b, p->fcw, N,
                                         C, 4 * C);
        mark(ops, k, "ln2_bwd");
        ops->layernorm_backward16(k, dres, g->ln2w, g->ln2b, dln16, a->home.dtype, s->d_btc,
                                  a->res2, p->ln2w, a->ln2_mean, a->ln2_rstd, N, C);
    } else {
        ops->matmul_gelu_backward(k, s->d_fch2, g->fcprojw, g->fcprojb, dres, s->d_fch, p->fcprojw,
                                  a->fch, N, 4 * C, C);
        mark(ops, k, "ln2_fc_bwd");
        ops->memset0(k, s->d_btc, nC * sizeof(float));
        ops->layernorm_matmul_backward(k, s->d_btc, g->fcw, g->fcb, s->d_fch2, s->d_btc2, a->res2,
                                       p->ln2w, p->ln2b, p->fcw, N, C, 4 * C);
        mark(ops, k, "ln2_bwd");
        ops->layernorm_backward(k, dres, g->ln2w, g->ln2b, s->d_btc, a->res2, p->ln2w, a->ln2_mean,
                                a->ln2_rstd, N, C);
    }
    /* res2 = x_in + attproj: dres is now d(res2) = d(attproj) = the residual part of d(x_in) */
    const zt_attn_home *h = a->home.qkv || a->home.out ? &a->home : NULL;
    /* With both homes attproj's input gradient is written rounded (as autocast hands it to the
     * attention's backward) into d_fch past where d(qkv) will go (d_btc2 room), and the
     * attention reads it there */
    void *dout16 = h && h->out && h->qkv ? s->d_fch + 3 * nC : NULL;
    mark(ops, k, "attproj_bwd");
    if (h && h->out) {
        ops->matmul16_backward(k, s->d_btc2, dout16, g->attprojw, g->attprojb, dres, a->atty,
                               h->out, h->dtype, p->attprojw, N, C, C);
    } else {
        ops->memset0(k, s->d_btc2, nC * sizeof(float));
        ops->matmul_backward(k, s->d_btc2, g->attprojw, g->attprojb, dres, a->atty, p->attprojw, N,
                             C, C);
    }
    if (h && h->qkv) {
        /* d(qkv) written rounded into d_fch (free since the MLP's backward: N x 3C 16-bit
         * elements in its N x 4C floats), where qkv's backward reads it in place (d_qkv room),
         * and that writes its input gradient rounded past it, for LN1's backward (d_btc room) */
        void *dqkv16 = s->d_fch, *dln16 = s->d_fch + 2 * nC;
        mark(ops, k, "attn_bwd");
        ops->attention_backward16(k, dqkv16, h->dtype, s->d_qkv, s->attn, s->d_btc2, dout16, a->qkv,
                                  a->atty, a->lse, h, B, T, C, NH);
        mark(ops, k, "ln1_qkv_bwd");
        ops->layernorm_matmul16_backward(k, s->d_btc, dln16, g->qkvw, g->qkvb, dqkv16, h->dtype,
                                         s->d_qkv, s->d_btc2, x_in, p->ln1w, p->ln1b, p->qkvw, N, C,
                                         3 * C);
        mark(ops, k, "ln1_bwd");
        ops->layernorm_backward16(k, dres, g->ln1w, g->ln1b, dln16, h->dtype, s->d_btc, x_in,
                                  p->ln1w, a->ln1_mean, a->ln1_rstd, N, C);
    } else {
        mark(ops, k, "attn_bwd");
        ops->memset0(k, s->d_qkv, n3C * sizeof(float));
        ops->attention_backward(k, s->d_qkv, s->attn, s->d_btc2, a->qkv, a->atty, a->lse, h, B, T,
                                C, NH);
        mark(ops, k, "ln1_qkv_bwd");
        ops->memset0(k, s->d_btc, nC * sizeof(float));
        ops->layernorm_matmul_backward(k, s->d_btc, g->qkvw, g->qkvb, s->d_qkv, s->d_btc2, x_in,
                                       p->ln1w, p->ln1b, p->qkvw, N, C, 3 * C);
        mark(ops, k, "ln1_bwd");
        ops->layernorm_backward(k, dres, g->ln1w, g->ln1b, s->d_btc, x_in, p->ln1w, a->ln1_mean,
                                a->ln1_rstd, N, C);
    }
    mark(ops, k, "engine");
}

void zt_gpt2_head(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                  const zt_gpt2_final *pf, const float *wte, const zt_gpt2_final *gf, float *dwte,
                  zt_gpt2_head_acts *a, const zt_gpt2_scratch *s, const float *x_L,
                  const int32_t *targets, float dloss, float *dres, int B, int T)
{
    int C = lay->d.C, Vp = lay->d.Vp, N = B * T;
    size_t nC = (size_t)N * C;
    float *lnf = s->d_btc2, *dlnf = s->d_btc;
    mark(ops, k, "lnf_fwd");
    ops->layernorm_forward(k, lnf, a->lnf_mean, a->lnf_rstd, x_L, pf->lnfw, pf->lnfb, N, C);
    mark(ops, k, "classifier");
    if (gf) ops->memset0(k, dlnf, nC * sizeof(float));
    if (a->logits_dt != ZT_F32)
        ops->classifier16_forward_backward(k, a->logits_dt, a->losses, gf ? dlnf : NULL,
                                           gf ? dwte : NULL, a->logits, lnf, wte, targets, N,
                                           a->rows, C, lay->d.V, Vp, dloss);
    else
        ops->classifier_forward_backward(k, a->losses, gf ? dlnf : NULL, gf ? dwte : NULL,
                                         a->logits, lnf, wte, targets, N, a->rows, C, lay->d.V, Vp,
                                         dloss);
    if (gf) {
        mark(ops, k, "lnf_bwd");
        ops->memset0(k, dres, nC * sizeof(float));
        ops->layernorm_backward(k, dres, gf->lnfw, gf->lnfb, dlnf, x_L, pf->lnfw, a->lnf_mean,
                                a->lnf_rstd, N, C);
    }
    mark(ops, k, "engine");
}
