/* zerotrain: the GPT-2 model as llm.c defines it, laid out in ZeRO units. The parameters of
 * one unit (the embeddings, each transformer block, the final LayerNorm) are one contiguous
 * flat buffer, so a unit is what ZeRO pads, shards, gathers and reduces. This module knows
 * the tensors of each unit, their llm.c order, their initialisation, and runs each unit's
 * forward and backward through the op table. It owns no memory of its own. */
#ifndef ZT_ENGINE_GPT2_H
#define ZT_ENGINE_GPT2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../kernels/ops.h"

typedef struct zt_gpt2_dims {
    int L;  /* layers */
    int C;  /* channels */
    int NH; /* heads */
    int T;  /* max sequence length (wpe rows) */
    int V;  /* vocabulary */
    int Vp; /* padded vocabulary (wte rows) */
} zt_gpt2_dims;

/* The 16 llm.c tensor kinds, in llm.c file order. */
enum {
    ZT_T_WTE = 0, ZT_T_WPE, ZT_T_LN1W, ZT_T_LN1B, ZT_T_QKVW, ZT_T_QKVB, ZT_T_ATTPROJW,
    ZT_T_ATTPROJB, ZT_T_LN2W, ZT_T_LN2B, ZT_T_FCW, ZT_T_FCB, ZT_T_FCPROJW, ZT_T_FCPROJB,
    ZT_T_LNFW, ZT_T_LNFB, ZT_T_KIND_COUNT
};

/* llm.c's name of a tensor kind ("wte", "qkvw", ...); "?" for a number that is not a kind. */
const char *zt_gpt2_kind_name(int kind);

/* One tensor of one unit. */
typedef struct zt_gpt2_tensor {
    int kind;       /* ZT_T_* */
    int layer;      /* block index for per-layer kinds, else -1 */
    int unit;       /* which unit holds it */
    size_t offset;  /* element offset inside the unit */
    size_t numel;
    bool decay;     /* 2-D weights (embeddings, attention, MLP) get weight decay */
} zt_gpt2_tensor;

typedef struct zt_gpt2_layout {
    zt_gpt2_dims d;
    int n_units;          /* L + 2: unit 0 embeddings, 1..L blocks, L+1 final LayerNorm */
    size_t *unit_numel;   /* (n_units) */
    int n_tensors;        /* 2 + 12L + 2 */
    zt_gpt2_tensor *tensors; /* in unit order, then offset order */
    int *unit_first_tensor;  /* (n_units + 1) index into tensors */
    size_t num_params;    /* sum of unit_numel (includes the padded wte rows) */
} zt_gpt2_layout;

/* Fills the layout for dims; frees with zt_gpt2_layout_free. ZT_ERR_NOMEM on failure. */
zt_status zt_gpt2_layout_init(zt_gpt2_layout *lay, const zt_gpt2_dims *d);
void zt_gpt2_layout_free(zt_gpt2_layout *lay);
/* The unit of block l. */
static inline int zt_gpt2_block_unit(int l)
{
    return 1 + l;
}
static inline int zt_gpt2_final_unit(const zt_gpt2_layout *lay)
{
    return lay->n_units - 1;
}
/* Parameters counted as llm.c counts them (wte with V rows, not Vp): N in 6·N·tokens. */
size_t zt_gpt2_num_params_unpadded(const zt_gpt2_layout *lay);

/* Views into one unit's flat buffer (any float buffer laid out like the unit). */
typedef struct zt_gpt2_embed {
    float *wte; /* (Vp, C) */
    float *wpe; /* (T, C) */
} zt_gpt2_embed;
typedef struct zt_gpt2_block {
    float *ln1w, *ln1b;         /* (C) */
    float *qkvw;                /* (3C, C) */
    float *qkvb;                /* (3C) */
    float *attprojw;            /* (C, C) */
    float *attprojb;            /* (C) */
    float *ln2w, *ln2b;         /* (C) */
    float *fcw;                 /* (4C, C) */
    float *fcb;                 /* (4C) */
    float *fcprojw;             /* (C, 4C) */
    float *fcprojb;             /* (C) */
} zt_gpt2_block;
typedef struct zt_gpt2_final {
    float *lnfw, *lnfb; /* (C) */
} zt_gpt2_final;

zt_gpt2_embed zt_gpt2_embed_view(const zt_gpt2_layout *lay, float *unit);
zt_gpt2_block zt_gpt2_block_view(const zt_gpt2_layout *lay, float *unit);
zt_gpt2_final zt_gpt2_final_view(const zt_gpt2_layout *lay, float *unit);

/* GPT-2 initialisation of unit u into out (host memory, unit_numel floats), deterministic in
 * (seed, u) alone so that every rank count builds the same model: weights N(0, 0.02),
 * attention and MLP output projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1,
 * padded wte rows 0. */
void zt_gpt2_init_unit(const zt_gpt2_layout *lay, int u, uint64_t seed, float *out);

/* Where llm.c tensor `kind` (layer `layer`, -1 for non-per-layer kinds) lives: its unit and
 * element offset; its size in *numel. Note wpe in a file may have more rows than T. */
void zt_gpt2_locate(const zt_gpt2_layout *lay, int kind, int layer, int *unit, size_t *offset,
                    size_t *numel);

/* Activations of one block for a micro-batch (B, T). Pointers into memory the caller owns. */
typedef struct zt_gpt2_block_acts {
    float *ln1_mean, *ln1_rstd;       /* (B,T) (B,T); LN1's output is recomputed */
    float *qkv;                       /* (B,T,3C) */
    float *atty;                      /* (B,T,C) */
    float *lse;                       /* (B,NH,T) attention's log-sum-exp per query */
    float *res2;                      /* (B,T,C) */
    float *ln2_mean, *ln2_rstd;       /* (B,T) (B,T); LN2's output is recomputed */
    float *fch;                       /* (B,T,4C) GELU's input; its output is recomputed */
    /* A mixed-precision job's 16-bit homes of qkv and atty (none as carved): qkv's GEMM writes
     * qkv rounded into its home and attention reads it there, attention writes atty rounded
     * into its home, and backward reads both there, as attproj reads atty (qkv and atty then
     * only room) */
    zt_attn_home home;
    /* and of fch (type home.dtype; NULL as carved): fc writes its output rounded there, GELU
     * and GELU' read it there (the MLP's 16-bit ops, ops.h; fch is then not used) */
    void *fch16;
} zt_gpt2_block_acts;
/* Floats one block's activations need; carve them out of a buffer with _block_acts_carve. */
size_t zt_gpt2_block_acts_floats(const zt_gpt2_dims *d, int B, int T);
void zt_gpt2_block_acts_carve(zt_gpt2_block_acts *a, const zt_gpt2_dims *d, int B, int T,
                              float *mem);
/* The same in two parts: what stays fp32 in a mixed-precision job (the LayerNorm statistics,
 * lse, and res2 of the fp32 residual stream, as PyTorch's autocast keeps them) and the linear
 * layers' and attention's outputs qkv, atty and fch, contiguous in that order (8 C per token),
 * which it keeps in 16 bits between forward and backward (its one fp32 working set holds qkv
 * and atty: zt_gpt2_block_acts_lp_work_floats). */
size_t zt_gpt2_block_acts_f32_floats(const zt_gpt2_dims *d, int B, int T);
size_t zt_gpt2_block_acts_lp_floats(const zt_gpt2_dims *d, int B, int T);
size_t zt_gpt2_block_acts_lp_work_floats(const zt_gpt2_dims *d, int B, int T);
void zt_gpt2_block_acts_carve_split(zt_gpt2_block_acts *a, const zt_gpt2_dims *d, int B, int T,
                                    float *f32, float *lp);

/* Scratch shared by all blocks of a micro-batch: backward's activation gradients, the outputs it
 * recomputes and attention's working memory; forward parks the LayerNorms' outputs in d_btc2,
 * its two projections in d_btc and GELU's output in d_fch while they are needed. */
typedef struct zt_gpt2_scratch {
    float *d_btc;   /* (B,T,C) */
    float *d_btc2;  /* (B,T,C) */
    float *d_qkv;   /* (B,T,3C) */
    float *d_fch;   /* (B,T,4C) */
    float *d_fch2;  /* (B,T,4C) */
    float *attn;    /* zt_attention_scratch_floats: attention's working memory */
} zt_gpt2_scratch;
size_t zt_gpt2_scratch_floats(const zt_gpt2_dims *d, int B, int T);
void zt_gpt2_scratch_carve(zt_gpt2_scratch *s, const zt_gpt2_dims *d, int B, int T, float *mem);

/* Final LayerNorm + classifier: the logits exist one chunk of `rows` rows at a time (the
 * LayerNorm's output and its gradient live in the blocks' scratch, free after their forward).
 * Each chunk passes over wte twice (and rounds it twice on CUDA) and adds into dwte: chunks of
 * 1 GiB rather than 256 MiB gave 1.12x tokens/s for GPT-2 124M in bf16 at micro batch 128 on an
 * H100 (docs/performance.md), for 0.75 GiB more at peak. ZT_HEAD_ROWS overrides it. */
#define ZT_GPT2_LOGITS_BUDGET ((size_t)256 << 20) /* floats of one chunk of logits: 1 GiB */
typedef struct zt_gpt2_head_acts {
    float *lnf_mean, *lnf_rstd; /* (B,T) (B,T) */
    float *logits;              /* (rows,Vp); dlogits in place */
    float *losses;              /* (B,T) */
    int rows;
    /* ZT_F32 as carved; a mixed-precision job's 16-bit type: the logits are rounded to it
     * before the loss (classifier16_forward_backward), as autocast's lm head leaves them */
    zt_dtype logits_dt;
} zt_gpt2_head_acts;
/* Rows of logits per chunk: all B*T when they fit in ZT_GPT2_LOGITS_BUDGET, else as many as
 * do (at least 1). */
int zt_gpt2_head_rows(const zt_gpt2_dims *d, int B, int T);
size_t zt_gpt2_head_acts_floats(const zt_gpt2_dims *d, int B, int T, int rows);
/* The 16-bit elements of the CUDA matmuls' staging buffer (kernels/cuda/cuda_plan.h, ZT_CUDA_GEMM_STAGE) for a
 * micro-batch of B x T and classifier chunks of `rows`: its largest linear-layer product,
 * forward or backward, at most cap. */
size_t zt_gpt2_stage_elems(const zt_gpt2_dims *d, int B, int T, int rows, size_t cap);
void zt_gpt2_head_acts_carve(zt_gpt2_head_acts *a, const zt_gpt2_dims *d, int B, int T, int rows,
                             float *mem);

/* x0 = wte[inputs] + wpe. */
void zt_gpt2_embed_forward(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                           const zt_gpt2_embed *p, const int32_t *inputs, float *x0, int B,
                           int T);
/* dwte, dwpe += from dx0. */
void zt_gpt2_embed_backward(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                            const zt_gpt2_embed *g, const int32_t *inputs, const float *dx0,
                            int B, int T);
/* x_out = block(x_in), keeping activations in a; s lends attention its working memory. */
void zt_gpt2_block_forward(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                           const zt_gpt2_block *p, zt_gpt2_block_acts *a,
                           const zt_gpt2_scratch *s, const float *x_in, float *x_out, int B,
                           int T);
/* On entry dres holds dL/dx_out; on exit dL/dx_in. Parameter gradients accumulate into g. */
void zt_gpt2_block_backward(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                            const zt_gpt2_block *p, const zt_gpt2_block *g,
                            const zt_gpt2_block_acts *a, const zt_gpt2_scratch *s,
                            const float *x_in, float *dres, int B, int T);
/* Final LayerNorm, tied classifier, fused softmax/cross-entropy, a chunk of rows at a time:
 * losses always. With gf non-NULL (training) also the head's backward, chunk by chunk while the
 * chunk's dlogits exist: dwte and gf's LayerNorm gradients accumulate (+=), dres receives
 * dL/dx_L (overwritten). dloss is the gradient of the loss w.r.t. each row's loss. */
void zt_gpt2_head(const zt_ops *ops, zt_kctx *k, const zt_gpt2_layout *lay,
                  const zt_gpt2_final *pf, const float *wte, const zt_gpt2_final *gf, float *dwte,
                  zt_gpt2_head_acts *a, const zt_gpt2_scratch *s, const float *x_L,
                  const int32_t *targets, float dloss, float *dres, int B, int T);

#endif
