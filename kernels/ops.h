/* zerotrain: the op table. Every compute kernel the engine runs goes through one table of
 * function pointers with two implementations: kernels/cpu/ (C, oneDNN sgemm for matmuls) and
 * kernels/cuda/ (.cu). The engine picks a table at start-up and never branches on the backend.
 *
 * Conventions for every op:
 *  - Pointers are backend memory (host memory for cpu, device memory for cuda) unless noted.
 *  - Activations and compute-precision parameters are fp32 here; 16-bit storage is widened
 *    by the cast/accumulate ops, and the optimizer op takes 16-bit gradients directly.
 *  - Shapes: B batch, T sequence length, C channels, NH heads, V vocab, Vp padded vocab,
 *    N rows (B*T), OC output channels. Row-major; weights are [out, in] as in llm.c.
 *  - Backward ops ACCUMULATE (+=) into every gradient output (parameters and inputs), so the
 *    caller zeroes gradients once; a NULL gradient output is skipped.
 *  - Ops run asynchronously on the context's stream (cuda) or synchronously (cpu); call sync
 *    before reading results on the host. copy_d2h is complete when it returns; the source of
 *    a copy_h2d from host memory must stay unchanged until the next sync.
 *  - CUDA matmuls keep fp32 in memory and accumulate in fp32; their inputs are rounded as the
 *    job's parameters are (set_matmul_dtype): exact fp32 for fp32 jobs, bf16 or fp16 tensor
 *    cores for bf16/fp16 jobs, the products of PyTorch's autocast; ZT_CUDA_MATMUL=fp32, tf32,
 *    bf16 or fp16 forces one. 16-bit inputs are rounded into 16-bit copies in a staging buffer
 *    that cuBLASLt then reads (ZT_CUDA_GEMM_STAGE, kernels/cuda/cuda_plan.h).
 *  - Ops are thread-safe across distinct contexts, not within one. */
#ifndef ZT_KERNELS_OPS_H
#define ZT_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/dtype.h"
#include "../common/status.h"

/* Backend context: thread settings and scratch (cpu), stream and library handles (cuda). */
typedef struct zt_kctx zt_kctx;

/* A mixed-precision job's 16-bit homes of attention's input qkv and output out (B,T,3C and
 * B,T,C, type dtype: ZT_BF16 or ZT_F16; each NULL where there is none): where the engine keeps
 * them between a block's forward and its backward (attention_forward, attention_backward). */
typedef struct zt_attn_home {
    void *qkv, *out;
    zt_dtype dtype;
    /* qkv's home already holds qkv, written there by qkv's matmul (layernorm_matmul_forward16):
     * attention_forward reads it there, its fp32 qkv being room (contents undefined on exit) */
    bool qkv_set;
} zt_attn_home;

/* Arguments of one AdamW/Adam update over a contiguous range (torch.optim.AdamW semantics).
 * grad is multiplied by grad_scale first (unscaling and clipping folded in); then
 *   l2_mode:  g += weight_decay * p            (Adam with L2, DeepSpeed adam_w_mode=false)
 *   m = b1*m + (1-b1)*g ; v = b2*v + (1-b2)*g*g
 *   u = (m / bc1) / (sqrt(v / bc2) + eps)      bc1 = 1-b1^t, bc2 = 1-b2^t
 *   adamw:    p = p - lr*weight_decay*p - lr*u  (decoupled decay applied first, as torch)
 *   l2_mode:  p = p - lr*u                                                                   */
typedef struct zt_adamw_args {
    float lr, beta1, beta2, eps, weight_decay;
    float bc1, bc2;
    float grad_scale;
    int l2_mode;
} zt_adamw_args;

/* Op times (ZT_OP_TIMES=1): the time of each interval between two marks, summed per label (the
 * label of the mark that starts it), labels in the order first seen. */
#define ZT_OPTIMES_LABELS 64
typedef struct zt_optimes {
    int n;
    const char *label[ZT_OPTIMES_LABELS];
    double ms[ZT_OPTIMES_LABELS];
} zt_optimes;
/* ZT_OP_TIMES: true for "1", false unset, empty or "0" (another value warns, false). */
bool zt_optimes_env(void);
/* Adds ms to label's total (labels past the first ZT_OPTIMES_LABELS - 1 go to one "other"). */
void zt_optimes_add(zt_optimes *t, const char *label, double ms);

/* Fence slots of a context's copy stream (zt_ops.copy_async). */
#define ZT_COPY_FENCES 16

typedef struct zt_ops {
    const char *name; /* "cpu" or "cuda" */

    /* ---- context and memory ---- */
    /* Creates a context (device = GPU ordinal for cuda, ignored for cpu). */
    zt_status (*ctx_create)(zt_kctx **out, int device, zt_err *err);
    void (*ctx_destroy)(zt_kctx *ctx); /* NULL is a no-op */
    /* Backend memory, 256-byte aligned; NULL on failure. */
    void *(*alloc)(zt_kctx *ctx, size_t bytes);
    void (*free)(zt_kctx *ctx, void *p);
    /* Host memory the backend copies fastest (pinned on cuda); NULL on failure. */
    void *(*host_alloc)(zt_kctx *ctx, size_t bytes);
    void (*host_free)(zt_kctx *ctx, void *p);
    void (*memset0)(zt_kctx *ctx, void *p, size_t bytes);
    void (*copy_h2d)(zt_kctx *ctx, void *dst, const void *src, size_t bytes);
    void (*copy_d2h)(zt_kctx *ctx, void *dst, const void *src, size_t bytes);
    void (*copy_d2d)(zt_kctx *ctx, void *dst, const void *src, size_t bytes);
    /* The native stream handle (cudaStream_t on cuda, NULL on cpu), for the comm backend. */
    void *(*stream)(zt_kctx *ctx);
    /* Waits for everything queued on the context, the copy stream's copies included; reports
     * an asynchronous failure. */
    zt_status (*sync)(zt_kctx *ctx, zt_err *err);

    /* ---- the copy stream: transfers beside the compute stream ---- */
    /* Fences are slots 0 .. ZT_COPY_FENCES-1, each standing for the last point of a stream
     * recorded into it (a slot never recorded is passed at once). fence_record records slot f
     * where the compute stream now is. copy_async queues bytes from src to dst (pinned host
     * memory from host_alloc and backend memory, either way) on the context's copy stream,
     * starting once fence `after` is passed (-1: no wait; the copy stream keeps its own order),
     * and records fence `done` after it. fence_wait makes the compute stream's work queued from
     * now on start after fence f. The host may touch a copy's host side only after sync. On cpu
     * there is one stream: copy_async copies at once and the fences do nothing. */
    void (*fence_record)(zt_kctx *ctx, int f);
    void (*copy_async)(zt_kctx *ctx, void *dst, const void *src, size_t bytes, int after,
                       int done);
    void (*fence_wait)(zt_kctx *ctx, int f);
    /* The precision of the job's compute parameters (ZT_F32, ZT_BF16, ZT_F16): the matmuls may
     * round their inputs to that format (on cuda, unless ZT_CUDA_MATMUL says otherwise); the
     * cpu backend always multiplies in fp32. */
    void (*set_matmul_dtype)(zt_kctx *ctx, zt_dtype dtype);
    /* Memory the backend could still hand out and all it has, in bytes (cudaMemGetInfo on cuda;
     * MemAvailable and MemTotal on cpu); false where it cannot tell. For error messages. */
    bool (*mem_info)(zt_kctx *ctx, size_t *avail, size_t *total);
    /* Op times, where the context was created with ZT_OP_TIMES=1 (else both do nothing and
     * marks_take gives none): mark ends the interval the last mark started and starts one named
     * label (a string that outlives the context; NULL: none) where the stream now is (on cuda an
     * event, on cpu the clock); marks_take ends the last, waits for the stream, and gives each
     * label's total since the last take (then forgotten). For finding where a step goes; the
     * marks themselves cost a few microseconds each. */
    void (*mark)(zt_kctx *ctx, const char *label);
    void (*marks_take)(zt_kctx *ctx, zt_optimes *out);

    /* ---- GPT-2 forward/backward ---- */
    /* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] */
    void (*encoder_forward)(zt_kctx *ctx, float *out /* (B,T,C) */, const int32_t *inp /* (B,T) */,
                            const float *wte /* (Vp,C) */, const float *wpe /* (maxT,C) */, int B,
                            int T, int C);
    void (*encoder_backward)(zt_kctx *ctx, float *dwte, float *dwpe, const float *dout,
                             const int32_t *inp, int B, int T, int C);

    /* LayerNorm over the last dim, eps 1e-5; mean and rstd are saved for backward (either may
     * be NULL when not wanted, as when backward recomputes the output). */
    void (*layernorm_forward)(zt_kctx *ctx, float *out /* (N,C) */, float *mean /* (N) */,
                              float *rstd /* (N) */, const float *inp /* (N,C) */,
                              const float *weight /* (C) */, const float *bias /* (C) */, int N,
                              int C);
    void (*layernorm_backward)(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);
    /* layernorm_backward of the dout whose values dout16 holds (type dt16: the 16-bit input
     * gradient of the matmul that reads the LayerNorm's output, as autocast's backward has it);
     * dact (N,C) is room for them in fp32 (contents undefined on exit; on cpu bitwise the cast
     * into dact, then layernorm_backward). The cuda backend reads dout16 itself. */
    void (*layernorm_backward16)(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                 const void *dout16 /* (N,C) */, zt_dtype dt16,
                                 float *dact /* (N,C) */, const float *inp, const float *weight,
                                 const float *mean, const float *rstd, int N, int C);

    /* res = a + b, then out = LayerNorm(res) as layernorm_forward: the block's residual and the
     * next LayerNorm in one pass (bitwise the two ops in sequence). res may alias a or b. */
    void (*residual_layernorm_forward)(zt_kctx *ctx, float *res /* (N,C) */, float *out,
                                       float *mean, float *rstd, const float *a, const float *b,
                                       const float *weight, const float *bias, int N, int C);

    /* out = inp @ weight^T + bias (bias may be NULL). */
    void (*matmul_forward)(zt_kctx *ctx, float *out /* (N,OC) */, const float *inp /* (N,C) */,
                           const float *weight /* (OC,C) */, const float *bias /* (OC) */, int N,
                           int C, int OC);
    void (*matmul_backward)(zt_kctx *ctx, float *dinp /* (N,C) */, float *dweight /* (OC,C) */,
                            float *dbias /* (OC) */, const float *dout /* (N,OC) */,
                            const float *inp, const float *weight, int N, int C, int OC);
    /* matmul_forward and matmul_backward of the input whose values in16 holds rounded to dt16
     * (ZT_BF16 or ZT_F16; an attention output's home): `act` (N,C) is room the op may fill
     * with them in fp32 (contents undefined on exit). The cuda backend with staged 16-bit
     * inputs of that type reads in16 in place as its copy (whole rows; else copies it into
     * its staging) instead of rounding an fp32 input. Unlike matmul_backward, matmul16_backward
     * WRITES dinp (dout @ weight: bitwise the product added into zeros, but for the sign of a
     * zero), so that the caller clears nothing and the GEMM reads no dinp; dweight and dbias
     * accumulate. matmul16_backward's dinp16 (not NULL): dinp written rounded to dt16 there
     * instead (the cast of the fp32 dinp; the cuda GEMM writes it itself), dinp then room: the
     * attention output's gradient as autocast hands it to the attention's backward.
     * matmul16_forward's and gelu16_matmul_forward's res (N,OC) (NULL: none) is a residual
     * input: out = res + the product, the block's residual add in the same op, out not
     * overlapping res (bitwise the product then residual_forward(out, res, out) on cpu; the cuda
     * GEMM takes res as its C, beta 1, and adds it before the bias, where the two ops add it
     * after: within an ulp of theirs, without the product written and read again). */
    void (*matmul16_forward)(zt_kctx *ctx, float *out /* (N,OC) */, float *act /* (N,C) */,
                             const void *in16 /* (N,C) */, zt_dtype dt16,
                             const float *weight /* (OC,C) */, const float *bias /* (OC) */,
                             const float *res /* (N,OC) */, int N, int C, int OC);
    void (*matmul16_backward)(zt_kctx *ctx, float *dinp /* (N,C) */, void *dinp16 /* (N,C) */,
                              float *dweight /* (OC,C) */, float *dbias /* (OC) */,
                              const float *dout /* (N,OC) */, float *act /* (N,C) */,
                              const void *in16 /* (N,C) */, zt_dtype dt16, const float *weight,
                              int N, int C, int OC);
    /* pre = inp @ weight^T + bias (bias may be NULL), out = GELU(pre) as gelu_forward: the MLP's
     * first layer and its activation in one pass where the backend can (cuBLASLt's GELU
     * epilogue on cuda, which may round GELU differently; bitwise the two ops on cpu). The
     * engine does not run it: fc alone then gelu_matmul_forward (GELU rounded into fcproj's
     * 16-bit copy) take less time on a GPU (docs/performance.md). Kept for bench_kernels_gpu's
     * comparison and the staged linear-layer tests, which still exercise cuBLASLt's GELU
     * epilogue through it. */
    void (*matmul_gelu_forward)(zt_kctx *ctx, float *out /* (N,OC) */, float *pre /* (N,OC) */,
                                const float *inp /* (N,C) */, const float *weight /* (OC,C) */,
                                const float *bias /* (OC) */, int N, int C, int OC);

    /* out = LayerNorm(x) @ weight^T + bias (bias may be NULL), the LayerNorm as
     * layernorm_forward computes it (mean and rstd saved where non-NULL), which the op writes to
     * `ln` where it needs it in fp32 (contents undefined on exit): bitwise layernorm_forward into
     * ln then matmul_forward on cpu; the cuda backend with staged 16-bit inputs rounds the
     * LayerNorm straight into its copy (the same bits). */
    void (*layernorm_matmul_forward)(zt_kctx *ctx, float *out /* (N,OC) */, float *ln /* (N,C) */,
                                     float *mean /* (N) */, float *rstd /* (N) */,
                                     const float *x /* (N,C) */, const float *lnw /* (C) */,
                                     const float *lnb /* (C) */, const float *weight /* (OC,C) */,
                                     const float *bias /* (OC) */, int N, int C, int OC);
    /* layernorm_matmul_forward with its output rounded to dt16 (ZT_BF16 or ZT_F16) into out16:
     * the 16-bit home of qkv, which attention then reads there (zt_attn_home.qkv_set); `out`
     * (N,OC) is room the op may fill with the fp32 values (contents undefined on exit). On cpu
     * bitwise layernorm_matmul_forward into out then the cast; the cuda backend with staged
     * inputs of dt16 has its GEMM write the 16-bit output itself (from the same fp32 products,
     * the bias rounded to dt16 first: cuBLASLt adds to a 16-bit output only a bias of its type,
     * as PyTorch's autocast rounds it). */
    void (*layernorm_matmul_forward16)(zt_kctx *ctx, void *out16 /* (N,OC) */, zt_dtype dt16,
                                       float *out /* (N,OC) */, float *ln /* (N,C) */,
                                       float *mean /* (N) */, float *rstd /* (N) */,
                                       const float *x /* (N,C) */, const float *lnw /* (C) */,
                                       const float *lnb /* (C) */, const float *weight /* (OC,C) */,
                                       const float *bias /* (OC) */, int N, int C, int OC);
    /* matmul_backward of that product, its input LayerNorm(x) recomputed by the op (bitwise
     * layernorm_forward's, into `ln` where it needs it in fp32, contents undefined on exit):
     *   dinp += dout @ weight, dweight += dout^T @ LayerNorm(x), dbias += column sums of dout */
    void (*layernorm_matmul_backward)(zt_kctx *ctx, float *dinp /* (N,C) */,
                                      float *dweight /* (OC,C) */, float *dbias /* (OC) */,
                                      const float *dout /* (N,OC) */, float *ln /* (N,C) */,
                                      const float *x /* (N,C) */, const float *lnw /* (C) */,
                                      const float *lnb /* (C) */, const float *weight /* (OC,C) */,
                                      int N, int C, int OC);

    /* out = GELU(pre) @ weight^T + bias (bias may be NULL): the MLP's second layer from its
     * first layer's output before the activation, GELU as gelu_forward computes it, which the
     * op writes to `act` where it needs it in fp32 (contents undefined on exit): bitwise
     * gelu_forward into act then matmul_forward on cpu; the cuda backend with staged 16-bit
     * inputs rounds GELU(pre) straight into its copy (the same bits). */
    void (*gelu_matmul_forward)(zt_kctx *ctx, float *out /* (N,OC) */, float *act /* (N,C) */,
                                const float *pre /* (N,C) */, const float *weight /* (OC,C) */,
                                const float *bias /* (OC) */, int N, int C, int OC);

    /* The backward of out = GELU(pre) @ weight^T + bias through that GELU, in one pass where
     * the backend can (cuBLASLt's DGELU epilogue on cuda, which may round GELU' differently;
     * bitwise gelu_forward into inp, matmul_backward into zeros, then gelu_backward into zeros
     * on cpu):
     *   dpre = GELU'(pre) * (dout @ weight)   WRITTEN, not accumulated (the caller's buffer)
     *   dweight += dout^T @ inp, dbias += column sums of dout   (as matmul_backward)
     * where inp = GELU(pre) as gelu_forward computes it, which the op computes itself: `inp` is
     * scratch the op may write those values to (contents undefined on exit; the cuda backend
     * with staged 16-bit inputs rounds GELU(pre) straight into its copy instead). NULL dweight
     * or dbias is skipped. */
    void (*matmul_gelu_backward)(zt_kctx *ctx, float *dpre /* (N,C) */, float *dweight /* (OC,C) */,
                                 float *dbias /* (OC) */, const float *dout /* (N,OC) */,
                                 float *inp /* (N,C) */, const float *weight /* (OC,C) */,
                                 const float *pre /* (N,C) */, int N, int C, int OC);

    /* The MLP of a mixed-precision job whose first layer's output (GELU's input, `pre`) lives
     * in a 16-bit home of type dt16 (ZT_BF16 or ZT_F16) between forward and backward, as under
     * PyTorch's autocast: never in fp32 on the cuda backend with staged inputs of that type.
     * matmul_forward16: out16 = matmul_forward's output rounded to dt16; `act` (N,OC) is room
     * the op may fill with the fp32 values (contents undefined on exit). The cuda backend's GEMM
     * writes the 16-bit output itself (the bias rounded to dt16 first, as
     * layernorm_matmul_forward16's). */
    void (*matmul_forward16)(zt_kctx *ctx, void *out16 /* (N,OC) */, zt_dtype dt16,
                             float *act /* (N,OC) */, const float *inp /* (N,C) */,
                             const float *weight /* (OC,C) */, const float *bias /* (OC) */, int N,
                             int C, int OC);
    /* gelu_matmul_forward of the values pre16 holds: out = GELU(pre) @ weight^T + bias, act
     * (N,C) room as there (bitwise the cast into act then gelu_matmul_forward on cpu); res as
     * matmul16_forward's. */
    void (*gelu16_matmul_forward)(zt_kctx *ctx, float *out /* (N,OC) */, float *act /* (N,C) */,
                                  const void *pre16 /* (N,C) */, zt_dtype dt16,
                                  const float *weight /* (OC,C) */, const float *bias /* (OC) */,
                                  const float *res /* (N,OC) */, int N, int C, int OC);
    /* matmul_gelu_backward of the values pre16 holds, its dpre WRITTEN rounded to dt16 into
     * dpre16 (not aliasing the rest); act and dact (N,C each) are room (contents undefined on
     * exit). On cpu bitwise: pre16 cast into act, matmul_gelu_backward into dact, dact cast
     * into dpre16. The cuda backend's DGELU epilogue reads pre16 and writes dpre16 itself
     * (cuBLASLt's GELU', as matmul_gelu_backward's). */
    void (*matmul_gelu16_backward)(zt_kctx *ctx, void *dpre16 /* (N,C) */,
                                   float *dweight /* (OC,C) */, float *dbias /* (OC) */,
                                   const float *dout /* (N,OC) */, float *act /* (N,C) */,
                                   float *dact /* (N,C) */, const float *weight /* (OC,C) */,
                                   const void *pre16 /* (N,C) */, zt_dtype dt16, int N, int C,
                                   int OC);
    /* layernorm_matmul_backward of the dout whose values dout16 holds (type dt16), dinp
     * WRITTEN as matmul16_backward's; dact (N,OC) is room for them in fp32 (contents undefined
     * on exit; bitwise zeros into dinp, the cast into dact, then layernorm_matmul_backward on
     * cpu). The cuda backend with staged inputs of dt16 reads dout16 in place as its copy of
     * dout (dbias from its values). dinp16 (not NULL): dinp is written rounded to dt16 there
     * instead (on cpu the cast of the fp32 dinp; the cuda GEMM writes it itself), dinp then
     * room, for layernorm_backward16. */
    void (*layernorm_matmul16_backward)(zt_kctx *ctx, float *dinp /* (N,C) */,
                                        void *dinp16 /* (N,C) */, float *dweight /* (OC,C) */,
                                        float *dbias /* (OC) */, const void *dout16 /* (N,OC) */,
                                        zt_dtype dt16, float *dact /* (N,OC) */,
                                        float *ln /* (N,C) */, const float *x /* (N,C) */,
                                        const float *lnw /* (C) */, const float *lnb /* (C) */,
                                        const float *weight /* (OC,C) */, int N, int C, int OC);

    /* Causal multi-head self-attention, scale 1/sqrt(C/NH), without keeping the T x T
     * probabilities: forward saves each query row's log-sum-exp, lse = log sum_j<=i exp(s_ij)
     * with s_ij = scale q_i.k_j, and backward recomputes P_ij = exp(s_ij - lse_i). qkv holds q,
     * k, v side by side per token (llm.c layout). Both take `scratch` of
     * zt_attention_scratch_floats(B, T, NH) floats, contents undefined on entry and exit.
     * home (NULL: none): the 16-bit homes of qkv and out, so that the caller neither keeps
     * nor restores fp32 copies for backward. Forward leaves qkv rounded into home->qkv and out
     * into home->out (as cast would), the fp32 `out` then being room the op may fill (contents
     * undefined on exit); with home->qkv_set it takes qkv from its home instead, the fp32 `qkv`
     * being such room (the attention of the rounded values, as autocast's). Backward reads qkv
     * and out from their homes, its `qkv` and `out` then being such room. The cuda backend's
     * tensor-core attention, whose 16-bit type is the homes', rounds qkv into its home once in
     * forward (reads it there with qkv_set) and writes out there directly, and reads both there
     * in backward (the same bits as the fp32 tensors rounded). */
    void (*attention_forward)(zt_kctx *ctx, float *out /* (B,T,C) */, float *lse /* (B,NH,T) */,
                              float *scratch, float *qkv /* (B,T,3C) */, const zt_attn_home *home,
                              int B, int T, int C, int NH);
    /* out and lse are the forward's; dS = P (dP - rowsum(dO * out)) scale. */
    void (*attention_backward)(zt_kctx *ctx, float *dqkv /* (B,T,3C) */, float *scratch,
                               const float *dout /* (B,T,C) */, float *qkv, float *out,
                               const float *lse, const zt_attn_home *home, int B, int T, int C,
                               int NH);
    /* attention_backward with dqkv WRITTEN rounded to dt16 (ZT_BF16 or ZT_F16) into dqkv16,
     * not accumulated, for qkv's backward to read in place (layernorm_matmul16_backward);
     * `dqkv` (B,T,3C) is room (contents undefined on exit). Bitwise on cpu: zeros into dqkv,
     * attention_backward, the cast. The cuda backend's tensor-core kernels of dt16 write it
     * themselves where dQ comes from its own kernel (the bits of the cast; the other dQ
     * variants sum in fp32 first). dout16 (not NULL): dout's values, rounded to dt16
     * (matmul16_backward's dinp16), from which delta is computed too, as in autocast's
     * attention backward; `dout` is then room (contents undefined on exit; on cpu bitwise the
     * cast into it, then the op). The tensor-core kernels read dout16 itself. */
    void (*attention_backward16)(zt_kctx *ctx, void *dqkv16 /* (B,T,3C) */, zt_dtype dt16,
                                 float *dqkv /* (B,T,3C) */, float *scratch,
                                 float *dout /* (B,T,C) */, const void *dout16 /* (B,T,C) */,
                                 float *qkv, float *out, const float *lse, const zt_attn_home *home,
                                 int B, int T, int C, int NH);

    /* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    void (*gelu_forward)(zt_kctx *ctx, float *out, const float *inp, size_t n);
    void (*gelu_backward)(zt_kctx *ctx, float *dinp, const float *inp, const float *dout,
                          size_t n);

    void (*residual_forward)(zt_kctx *ctx, float *out, const float *a, const float *b, size_t n);
    void (*residual_backward)(zt_kctx *ctx, float *da, float *db, const float *dout, size_t n);

    /* Fused softmax + cross-entropy over the first V of Vp logits per row.
     * losses[i] = -log softmax(logits[i,0:V])[targets[i]].
     * If dlogits is non-NULL it receives (softmax - onehot(target)) * dloss on [0,V) and 0 on
     * [V,Vp); dlogits may alias logits (in place). The padded logits never enter the softmax. */
    void (*crossentropy_forward_backward)(zt_kctx *ctx, float *losses /* (N) */,
                                          float *dlogits /* (N,Vp) */,
                                          const float *logits /* (N,Vp) */,
                                          const int32_t *targets /* (N) */, int N, int V, int Vp,
                                          float dloss);

    /* The classifier and its loss over N rows of x, in chunks of at most `rows` rows through
     * `logits` (rows x Vp floats, contents undefined on exit): per chunk logits = x wte^T
     * (matmul_forward without bias), losses as crossentropy_forward_backward and, where dx is
     * non-NULL, the chunk's backward (dloss folded into dlogits): dx += dlogits wte, and
     * dwte += dlogits^T x unless dwte is NULL. The table's ops in that order on cpu
     * (zt_classifier_by_ops); on cuda with staged 16-bit inputs wte is rounded once for all
     * chunks and the cross-entropy writes its dlogits rounded, straight into the copy the
     * backward's products read (where a chunk of `rows` fits the staging cap with wte, the
     * bits of the ops one by one; else in chunks that fit). */
    void (*classifier_forward_backward)(zt_kctx *ctx, float *losses /* (N) */,
                                        float *dx /* (N,C) */, float *dwte /* (Vp,C) */,
                                        float *logits /* (rows,Vp) */, const float *x /* (N,C) */,
                                        const float *wte /* (Vp,C) */,
                                        const int32_t *targets /* (N) */, int N, int rows, int C,
                                        int V, int Vp, float dloss);

    /* classifier_forward_backward of a mixed-precision job: the logits rounded to dt16 (ZT_BF16
     * or ZT_F16) before the loss and its gradient, as autocast's 16-bit lm head leaves them for
     * a cross-entropy that widens them. On cpu zt_classifier16_by_ops; the cuda backend with
     * staged inputs of dt16 has its GEMM write the logits in 16 bits (in `logits`' room), which
     * the cross-entropy reads (the same values: within an ulp of the GEMM's fp32 sums on a GPU,
     * whose 16-bit output may come from another kernel). */
    void (*classifier16_forward_backward)(zt_kctx *ctx, zt_dtype dt16, float *losses /* (N) */,
                                          float *dx /* (N,C) */, float *dwte /* (Vp,C) */,
                                          float *logits /* (rows,Vp) */, const float *x /* (N,C) */,
                                          const float *wte /* (Vp,C) */,
                                          const int32_t *targets /* (N) */, int N, int rows, int C,
                                          int V, int Vp, float dloss);

    /* ---- optimizer and precision ---- */
    /* AdamW over n elements: master fp32 params, gradient in grad_dtype, fp32 moments.
     * If param_lp is non-NULL the updated value is also written there in lp_dtype
     * (the 16-bit compute copy). */
    void (*adamw)(zt_kctx *ctx, float *param, const void *grad, zt_dtype grad_dtype, float *m,
                  float *v, size_t n, const zt_adamw_args *args, void *param_lp,
                  zt_dtype lp_dtype);
    /* x[i] = x[i] rounded to dt16 (ZT_BF16 or ZT_F16, nearest even) and widened again. */
    void (*round16)(zt_kctx *ctx, float *x, zt_dtype dt16, size_t n);
    /* dst[i] = (dst_dtype) src[i]  (round to nearest even). */
    void (*cast)(zt_kctx *ctx, void *dst, zt_dtype dst_dtype, const void *src, zt_dtype src_dtype,
                 size_t n);
    /* dst[i] += scale * src[i], dst in dst_dtype (16-bit dst is widened, added, rounded). */
    void (*accumulate)(zt_kctx *ctx, void *dst, zt_dtype dst_dtype, const float *src, float scale,
                       size_t n);
    /* x[i] *= s */
    void (*scale)(zt_kctx *ctx, float *x, float s, size_t n);
    /* out[0] += sum of x[i]^2 over finite elements, out[1] += count of non-finite elements;
     * out is HOST memory, valid after sync. Sums are kept in double. */
    void (*sumsq_nonfinite)(zt_kctx *ctx, const void *x, zt_dtype dtype, size_t n,
                            double out[2]);
} zt_ops;

/* Attention's working memory works through whole sequences a chunk at a time: two T x T
 * matrices per (sequence, head) pair of a chunk (at least 136 T floats: the CUDA tensor-core
 * attention's 16-bit copies for short sequences), as many sequences as fit in
 * ZT_ATTENTION_SCRATCH_BUDGET floats and at least one. The same on every backend (the CPU one
 * uses a few row blocks of it per thread), so a plan needs no backend. */
#define ZT_ATTENTION_SCRATCH_BUDGET ((size_t)32 << 20) /* floats: 128 MiB */
/* Sequences per chunk, in [1, B] (0 when B <= 0). */
int zt_attention_chunk_seqs(int B, int T, int NH);
/* Floats of scratch attention_forward and attention_backward need for (B, T, NH). */
size_t zt_attention_scratch_floats(int B, int T, int NH);

/* classifier_forward_backward by the table's own ops, one chunk after another: matmul_forward,
 * crossentropy_forward_backward in place, matmul_backward (the cpu backend's, and the cuda
 * backend's where its inputs are not staged). */
void zt_classifier_by_ops(const zt_ops *ops, zt_kctx *ctx, float *losses, float *dx, float *dwte,
                          float *logits, const float *x, const float *wte, const int32_t *targets,
                          int N, int rows, int C, int V, int Vp, float dloss);
/* classifier16_forward_backward by the table's ops: the same with round16 of each chunk's
 * logits before the cross-entropy (dt16 ZT_F32: none, zt_classifier_by_ops). */
void zt_classifier16_by_ops(const zt_ops *ops, zt_kctx *ctx, zt_dtype dt16, float *losses,
                            float *dx, float *dwte, float *logits, const float *x, const float *wte,
                            const int32_t *targets, int N, int rows, int C, int V, int Vp,
                            float dloss);

/* The CPU table; always present. */
const zt_ops *zt_ops_cpu(void);
/* The CUDA table, or NULL when built without CUDA. */
const zt_ops *zt_ops_cuda(void);

#endif
