/* zerotrain: what only kernels/cuda/ may see: the CUDA context (stream, cuBLASLt handle,
 * workspace, scratch, pending host results, first recorded error) and the launchers that the
 * .cu files export to the C files that assemble the zt_ops table (ops_cuda.c, blas_cuda.c).
 * Every op follows kernels/ops.h; this header adds nothing to that contract. */
#ifndef ZT_KERNELS_CUDA_CUDA_INT_H
#define ZT_KERNELS_CUDA_CUDA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../ops.h"
#include "cuda_plan.h"

/* The context's device buffers are sized in cuda_plan.h (ZT_CUDA_LT_WORKSPACE, ..., which
 * zt_cuda_context_device_bytes adds up). */
/* Cached cuBLASLt algorithm choices (shapes seen; evicted round-robin when full). */
#define ZT_CUDA_GEMM_CACHE 128
/* cuBLASLt candidates timed at a shape's first call (ZT_CUDA_GEMM_TUNE), and runs of each */
#define ZT_CUDA_TUNE_ALGOS 8
#define ZT_CUDA_TUNE_REPS 3
/* Blocks of the first pass of a norm reduction (partials fit the scratch many times over). */
#define ZT_CUDA_RED_BLOCKS 1024
/* Op-time marks held before their events are read (a full set is folded: a wait for the
 * stream, so keep it above a step's marks) */
#define ZT_CUDA_MARKS 1024
/* zt_kctx.attn_fused when ZT_CUDA_ATTN is unset: fused for 16-bit matmul inputs only */
#define ZT_CUDA_ATTN_AUTO (-1)
/* ctx->attn_cudnn: cuDNN's attention asked for (ZT_CUDA_ATTN=cudnn), or by default */
#define ZT_DNN_ASKED 1
#define ZT_DNN_DEFAULT 2

/* How the matmuls multiply: their inputs and outputs stay fp32 in memory and they accumulate
 * in fp32; the inputs are rounded to the format named here, which picks the tensor cores that
 * run them: by cuBLASLt as it loads them, or for the 16-bit formats by blas_gemm.c into
 * 16-bit copies first (ZT_CUDA_GEMM_STAGE, cuda_plan.h). ZT_CUDA_MATMUL names one; unset, the
 * job's precision decides (set_matmul_dtype): fp32 jobs exact, bf16 jobs bf16, fp16 jobs fp16,
 * the products PyTorch's autocast and DeepSpeed's 16-bit modes compute. */
typedef enum {
    ZT_MM_FP32, /* CUBLAS_COMPUTE_32F: exact fp32 (CUDA cores) */
    ZT_MM_TF32, /* CUBLAS_COMPUTE_32F_FAST_TF32: 10 mantissa bits, fp32's range */
    ZT_MM_BF16, /* CUBLAS_COMPUTE_32F_FAST_16BF: 7 mantissa bits, fp32's range */
    ZT_MM_FP16, /* CUBLAS_COMPUTE_32F_FAST_16F: 10 mantissa bits, |x| < 65520, else inf */
} zt_cuda_mm;

/* "fp32", "tf32", "bf16", "fp16" */
const char *zt_cuda_mm_name(int mm);

/* What a GEMM's A is made of where its 16-bit copy is rounded straight from another tensor
 * (zt_cuda_gemm.afn; the ops that take GELU's or LayerNorm's output as a matmul input): GELU
 * of src (A's layout), or the LayerNorm of src's rows (A whole rows of K = the LayerNorm's C)
 * with weight w and bias b, writing mean and rstd where non-NULL; the bits of gelu_forward or
 * layernorm_forward then the staging. Or A's values already rounded, in src16 (A's layout, of
 * type dtype: the staging's own, copied; matmul16_forward and _backward), or GELU of src16's
 * values (A's layout, type dtype: gelu16_matmul_forward, matmul_gelu16_backward). */
enum { ZT_AFN_GELU = 1, ZT_AFN_LAYERNORM, ZT_AFN_HOME16, ZT_AFN_GELU16 };
typedef struct zt_cuda_afn {
    int kind;
    const float *src, *w, *b;
    float *mean, *rstd;
    const void *src16;
    int dtype;
} zt_cuda_afn;

/* One row-major (batched) GEMM as the CPU backend writes it:
 *   C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b]  (+ bias[j] on every row of C when bias)
 * op(A) is M x K, op(B) is K x N, C is M x N; ta/tb are 'N' or 'T'; s* are batch strides in
 * elements. */
typedef struct zt_cuda_gemm {
    char ta, tb;
    int M, N, K;
    float alpha, beta;
    const void *A, *B; /* fp32, or 16-bit as in16 says */
    int in16;          /* 0: A and B are fp32; ZT_MM_BF16 or ZT_MM_FP16: 16-bit copies (staged) */
    float *C;
    /* non-NULL (batch 1, ldc == N, beta 1, fp32 D, no GELU): beta * Cin in place of beta * C,
     * C then only written (a residual input: out = res + the product, the res the cuBLASLt
     * call's C and out its D) */
    const float *Cin;
    const float *bias; /* (N) or NULL; only with batch == 1 */
    float *aux;        /* non-NULL: C = GELU(product + bias), aux = product + bias (ldc) */
    int dgelu;         /* with aux: C = GELU'(aux) * product instead, aux only read (no bias) */
    /* ZT_MM_BF16 or ZT_MM_FP16 (batch 1, beta 0): D is C16, in that type (ldc), rounded from
     * the fp32 sums; with dgelu its GELU input is aux16, of that type too (aux NULL). A bias
     * goes in as bias16, a copy of it in D's type: cuBLASLt adds to a 16-bit D only a bias of
     * D's type (an fp32 one is refused, INVALID_VALUE, on an H200 with cuBLAS 13), as PyTorch's
     * autocast rounds the bias of a bf16 linear layer; without bias16 such a product falls
     * back. C is then fp32 room of D's shape where a product falls back (the product there,
     * with the fp32 bias, then rounded into C16). 0: D is C. */
    int out16;
    void *C16;
    const void *aux16;
    const uint16_t *bias16;
    /* non-NULL (batch 1, fp32 A with ta 'N' and lda K): A's values are afn's; staging rounds
     * them straight into A's copy, and A receives them in fp32 only where a product falls back
     * to the fp32 operands. Not for zt_cuda_gemm_run. */
    const zt_cuda_afn *afn;
    int lda, ldb, ldc;
    long long sA, sB, sC;
    int batch;
} zt_cuda_gemm;

/* The part of a GEMM that decides which cuBLASLt algorithm runs (pointer alignments
 * included), compared bytewise: build it zeroed. */
typedef struct zt_cuda_gemm_key {
    int ta, tb, M, N, K, lda, ldb, ldc, batch, has_bias, beta_zero, mm, in16, out16;
    int gelu; /* 0 none, 1 GELU_AUX (forward), 2 DGELU (backward) */
    int alignA, alignB, alignC, alignBias, alignAux;
    long long sA, sB, sC;
} zt_cuda_gemm_key;

typedef struct zt_cuda_gemm_entry {
    zt_cuda_gemm_key key;
    cublasLtMatmulAlgo_t algo;
    int usable; /* 0: no algorithm for this key (fallback path) */
} zt_cuda_gemm_entry;

/* Opens libcublasLt (once per process; cublaslt_dl.c): call before the first cuBLASLt call.
 * ZT_ERR_CUDA with the loader's message when the library cannot be loaded. Thread-safe. */
zt_status zt_cuda_lt_load(zt_err *err);

/* how the tensor-core attention's backward gets dQ (ZT_CUDA_ATTN_DQ) */
enum { ZT_ATTN_DQ_KERNEL, ZT_ATTN_DQ_GEMM, ZT_ATTN_DQ_ATOMIC };
/* attn_bwd_mma's value for ZT_CUDA_ATTN_BWD=mma2, attn_fwd_mma's for ZT_CUDA_ATTN_FWD=mma4 */
#define ZT_ATTN_BWD_MMA2 2
#define ZT_ATTN_FWD_MMA4 4

struct zt_kctx {
    int device;
    cudaStream_t stream; /* non-blocking; every op runs here */
    cudaStream_t copy_stream; /* non-blocking; copy_async's transfers */
    cudaEvent_t fence[ZT_COPY_FENCES]; /* copy_async's fences (timing disabled) */
    cublasLtHandle_t lt;
    void *lt_ws;    /* ZT_CUDA_LT_WORKSPACE bytes */
    int mm;         /* zt_cuda_mm of the matmuls: set_matmul_dtype, ZT_CUDA_MATMUL */
    int mm_env;     /* ZT_CUDA_MATMUL: -1 unset, else the zt_cuda_mm it names */
    int attn_fused; /* ZT_CUDA_ATTN: 1 fused (attn_cuda.cu's kernels where they fit), 0 chunked,
                     * ZT_CUDA_ATTN_AUTO fused for 16-bit matmul inputs only (zt_cuda_attn_fused) */
    int attn_dq;    /* ZT_CUDA_ATTN_DQ: how the tensor-core backward gets dQ (ZT_ATTN_DQ_) */
    int attn_fwd_mma; /* ZT_CUDA_ATTN_FWD: the tensor-core forward on mma.sync (1, default;
                       * ZT_ATTN_FWD_MMA4: at 4 blocks an SM), or 0 */
    int attn_bwd_mma; /* ZT_CUDA_ATTN_BWD: the tensor-core backward on mma.sync (1, default;
                       * ZT_ATTN_BWD_MMA2: its dK dV kernel at 2 blocks an SM), or 0 */
    int attn_cudnn;   /* cuDNN's fused attention where it can run: ZT_DNN_ASKED or _DEFAULT */
    int ln_bwd_row;   /* ZT_CUDA_LN_BWD: LayerNorm's backward by its row kernel where it fits
                       * (1, default) or by the column-sum kernel (0; layernorm_cuda.cu) */
    struct zt_dnn *dnn; /* its handle and plans (attn_cudnn.c), made at first use */

    float *scratch; /* ZT_CUDA_SCRATCH_FLOATS, device, stream-ordered reuse */

    /* sumsq_nonfinite: slot k of red_dev holds (sum, count); red_out[k] is where the host adds
     * it at the next sync */
    double *red_dev;  /* (ZT_CUDA_RED_SLOTS, 2) device */
    double *red_host; /* same, pinned */
    double *red_out[ZT_CUDA_RED_SLOTS];
    int red_pending;

    /* encoder_backward: token ids downloaded and grouped on the host (deterministic sums) */
    int32_t *enc_host; /* pinned */
    size_t enc_host_cap;
    int32_t *enc_dev;
    size_t enc_dev_cap;
    int32_t *enc_count; /* host counting-sort buckets */
    size_t enc_count_cap;

    zt_cuda_gemm_entry *gemm_cache; /* ZT_CUDA_GEMM_CACHE entries */
    int gemm_n, gemm_next;
    int gemm_tune; /* ZT_CUDA_GEMM_TUNE=1: time cuBLASLt's candidates for each new shape */
    /* 16-bit copies of the matmuls' operands (cuda_plan.h, ZT_CUDA_GEMM_STAGE): grown to the
     * largest product seen, at most stage_max elements; a size cudaMalloc refused is not asked
     * again */
    int stage_on;    /* ZT_CUDA_GEMM_STAGE not 0 */
    /* ZT_CUDA_STAGE_FUSED not 0: copies made by passes that run anyway (the classifier's
     * cross-entropy, GELU), not by passes of their own */
    int stage_fused;
    uint16_t *stage; /* stage_cap elements, device */
    size_t stage_cap, stage_max, stage_refused;
    int warned_unbatched; /* the per-matrix fallback of batched GEMMs was reported */

    /* op times (ZT_OP_TIMES): an event for each mark since the last fold (mark_made of them
     * created so far, ZT_CUDA_MARKS at most) with its label; the totals folded so far */
    bool optimes;
    cudaEvent_t *mark_ev;
    const char **mark_label;
    int mark_n, mark_made;
    zt_optimes times;

    /* first failure since creation; kept (sync keeps returning it) because results computed
     * after a failed op are not trustworthy */
    zt_status st;
    char msg[ZT_ERRMSG_MAX];
};

/* ---- errors (ops_cuda.c) ---- */

/* Records a failure unless one is already recorded (later ones are logged at debug level).
 * Not thread-safe (one context, one calling thread). */
void zt_cuda_fail(zt_kctx *ctx, zt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records e (as ZT_ERR_CUDA, naming `what` and cudaGetErrorString) when it is not cudaSuccess
 * and clears the runtime's last-error slot; returns true on error. */
bool zt_cuda_check(zt_kctx *ctx, cudaError_t e, const char *what);
/* After a kernel launch: records a launch failure of `kernel`. */
void zt_cuda_check_launch(zt_kctx *ctx, const char *kernel);
/* Waits for the stream and folds pending sumsq results into their host outputs; records a
 * failure. Used by sync and when the result table is full. */
void zt_cuda_flush(zt_kctx *ctx);

/* ---- GEMMs (blas_gemm.c) ---- */

/* Runs one GEMM on the context's stream through cuBLASLt (algorithm cached per shape);
 * a failure is recorded. M, N or K == 0 are handled (no cuBLASLt call). */
void zt_cuda_gemm_run(zt_kctx *ctx, const zt_cuda_gemm *g);
/* Runs g, whose A and B are 16-bit (g->in16 their type), through cuBLASLt: true when queued
 * (or failed and recorded), false when cuBLASLt has no algorithm for it (nothing queued). */
bool zt_cuda_gemm16_run(zt_kctx *ctx, const zt_cuda_gemm *g);

/* ---- kernels (gpt2_cuda.cu, layernorm_cuda.cu, gelu_cuda.cu, loss_cuda.cu, optim_cuda.cu):
 * launchers on ctx->stream ---- */

void zt_cuda_encoder_forward(zt_kctx *ctx, float *out, const int32_t *inp, const float *wte,
                             const float *wpe, int B, int T, int C);
/* dwpe[t,:] += sum over b of dout[b,t,:], in order of b (bitwise the CPU's order). */
void zt_cuda_encoder_dwpe(zt_kctx *ctx, float *dwpe, const float *dout, int B, int T, int C);
/* dwte[tok[u],:] += dout[pos,:] for pos = order[start[u]] ... order[start[u+1]-1], in that
 * order; tok, start and order are device arrays (nu, nu+1, N). */
void zt_cuda_encoder_dwte(zt_kctx *ctx, float *dwte, const float *dout, const int32_t *tok,
                          const int32_t *start, const int32_t *order, int nu, int C);
void zt_cuda_layernorm_forward(zt_kctx *ctx, float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int N, int C);
void zt_cuda_residual_layernorm_forward(zt_kctx *ctx, float *res, float *out, float *mean,
                                        float *rstd, const float *a, const float *b,
                                        const float *weight, const float *bias, int N, int C);
/* layernorm_forward's output rounded to mm16's type (ZT_MM_BF16 or ZT_MM_FP16) into dst (N x C,
 * contiguous), mean and rstd written where non-NULL: the bits of zt_cuda_layernorm_forward then
 * zt_cuda_stage_cast, in one pass. */
void zt_cuda_stage_layernorm(zt_kctx *ctx, uint16_t *dst, int mm16, float *mean, float *rstd,
                             const float *inp, const float *weight, const float *bias, int N,
                             int C);
void zt_cuda_layernorm_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, int N, int C);
/* The same of a dout of mm16's type (ZT_MM_BF16 or ZT_MM_FP16), read widened (the bits of the
 * widening cast then zt_cuda_layernorm_backward); false (nothing queued) where C is past what
 * the one-pass kernel takes or no parameter gradient is wanted: the caller widens it. */
/* The zt_cuda_mm of a parameter type: ZT_MM_BF16 for ZT_BF16, ZT_MM_FP16 for ZT_F16, else
 * ZT_MM_FP32 */
int zt_cuda_dtype_mm(zt_dtype dt);
bool zt_cuda_layernorm_backward16(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                  const uint16_t *dout, int mm16, const float *inp,
                                  const float *weight, const float *mean, const float *rstd, int N,
                                  int C);
/* dbias[c] += sum over rows of dout[:, c] (deterministic two-pass column sum). */
void zt_cuda_bias_backward(zt_kctx *ctx, float *dbias, const float *dout, int N, int OC);
/* The same over a 16-bit dout of mm16's type (ZT_MM_BF16 or ZT_MM_FP16), widened. */
void zt_cuda_bias_backward16(zt_kctx *ctx, float *dbias, const uint16_t *dout, int mm16, int N,
                             int OC);
/* zt_cuda_bias_backward over dout (N x OC, contiguous), the same sums in the same order, and
 * dst = dout rounded as zt_cuda_stage_cast rounds it: one pass over dout for both. */
void zt_cuda_stage_cast_bias(zt_kctx *ctx, uint16_t *dst, int mm16, const float *dout, int N,
                             int OC, float *dbias);
/* out[i, :] = bias (or 0 when bias is NULL), i < N. */
void zt_cuda_bias_fill(zt_kctx *ctx, float *out, const float *bias, int N, int OC);
void zt_cuda_gelu_forward(zt_kctx *ctx, float *out, const float *inp, size_t n);
/* dst (rows x cols, contiguous) = GELU of pre's rows (row stride ld) rounded to mm16's type
 * (ZT_MM_BF16 or ZT_MM_FP16): the bits of zt_cuda_gelu_forward then zt_cuda_stage_cast, in one
 * pass. */
void zt_cuda_stage_gelu(zt_kctx *ctx, uint16_t *dst, int mm16, const float *pre, int rows, int cols,
                        size_t ld);
/* The same from a 16-bit pre of pre_mm16's type (ZT_MM_BF16 or ZT_MM_FP16), widened. */
void zt_cuda_stage_gelu16(zt_kctx *ctx, uint16_t *dst, int mm16, const uint16_t *pre, int pre_mm16,
                          int rows, int cols, size_t ld);
void zt_cuda_gelu_backward(zt_kctx *ctx, float *dinp, const float *inp, const float *dout,
                           size_t n);
/* d = GELU'(inp) d in place (gelu_backward into zeros, bitwise) */
void zt_cuda_gelu_grad_inplace(zt_kctx *ctx, float *d, const float *inp, size_t n);
void zt_cuda_residual_forward(zt_kctx *ctx, float *out, const float *a, const float *b, size_t n);
void zt_cuda_residual_backward(zt_kctx *ctx, float *da, float *db, const float *dout, size_t n);
void zt_cuda_crossentropy(zt_kctx *ctx, float *losses, float *dlogits, const float *logits,
                          const int32_t *targets, int N, int V, int Vp, float dloss);
/* zt_cuda_crossentropy with dlogits written rounded to mm16's type (ZT_MM_BF16 or
 * ZT_MM_FP16) into d16 (N x Vp, not aliasing logits): the bits zt_cuda_stage_cast gives of the
 * fp32 dlogits. */
void zt_cuda_crossentropy16(zt_kctx *ctx, float *losses, uint16_t *d16, int mm16,
                            const float *logits, const int32_t *targets, int N, int V, int Vp,
                            float dloss);
/* zt_cuda_crossentropy16 of 16-bit logits l16 of mm16's type (dlogits into d16 unless NULL; not
 * aliasing l16): the bits of it on the widened values. */
void zt_cuda_crossentropy16in(zt_kctx *ctx, float *losses, uint16_t *d16, int mm16,
                              const uint16_t *l16, const int32_t *targets, int N, int V, int Vp,
                              float dloss);
/* x[i] rounded to dt16 and widened again (the op table's round16; optim_cuda.cu) */
void zt_cuda_round16(zt_kctx *ctx, float *x, zt_dtype dt16, size_t n);
/* The op table's gelu_matmul_forward, layernorm_matmul_forward(16), layernorm_matmul_backward,
 * classifier_forward_backward and the MLP's ops with its 16-bit home (blas_cuda.c). */
void zt_cuda_matmul_forward16(zt_kctx *ctx, void *out16, zt_dtype dt16, float *act,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C, int OC);
void zt_cuda_gelu16_matmul_forward(zt_kctx *ctx, float *out, float *act, const void *pre16,
                                   zt_dtype dt16, const float *weight, const float *bias,
                                   const float *res, int N, int C, int OC);
void zt_cuda_matmul_gelu16_backward(zt_kctx *ctx, void *dpre16, float *dweight, float *dbias,
                                    const float *dout, float *act, float *dact, const float *weight,
                                    const void *pre16, zt_dtype dt16, int N, int C, int OC);
void zt_cuda_layernorm_matmul16_backward(zt_kctx *ctx, float *dinp, void *dinp16, float *dweight,
                                         float *dbias, const void *dout16, zt_dtype dt16,
                                         float *dact, float *ln, const float *x, const float *lnw,
                                         const float *lnb, const float *weight, int N, int C,
                                         int OC);
void zt_cuda_gelu_matmul_forward(zt_kctx *ctx, float *out, float *act, const float *pre,
                                 const float *weight, const float *bias, int N, int C, int OC);
void zt_cuda_layernorm_matmul_forward(zt_kctx *ctx, float *out, float *ln, float *mean, float *rstd,
                                      const float *x, const float *lnw, const float *lnb,
                                      const float *weight, const float *bias, int N, int C, int OC);
void zt_cuda_layernorm_matmul_forward16(zt_kctx *ctx, void *out16, zt_dtype dt16, float *out,
                                        float *ln, float *mean, float *rstd, const float *x,
                                        const float *lnw, const float *lnb, const float *weight,
                                        const float *bias, int N, int C, int OC);
void zt_cuda_layernorm_matmul_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                       const float *dout, float *ln, const float *x,
                                       const float *lnw, const float *lnb, const float *weight,
                                       int N, int C, int OC);
void zt_cuda_classifier(zt_kctx *ctx, float *losses, float *dx, float *dwte, float *logits,
                        const float *x, const float *wte, const int32_t *targets, int N, int rows,
                        int C, int V, int Vp, float dloss);
void zt_cuda_classifier16(zt_kctx *ctx, zt_dtype dt16, float *losses, float *dx, float *dwte,
                          float *logits, const float *x, const float *wte, const int32_t *targets,
                          int N, int rows, int C, int V, int Vp, float dloss);
/* Attention's row kernels work on the T x T matrices of a chunk of whole sequences: rows in
 * (sequence, head, query) order from the chunk's first sequence (row r is query r % T, lse[r]
 * its log-sum-exp), each zeroed above the diagonal. */
/* Causal softmax in place in att, writing lse. */
void zt_cuda_attn_softmax(zt_kctx *ctx, float *att, float *lse, size_t rows, int T);
/* The probabilities back from scores: att = exp(att - lse[r]) in place. */
void zt_cuda_attn_probs(zt_kctx *ctx, float *att, const float *lse, size_t rows, int T);
/* dS = P * (dP - delta) * scale in place in d (dP there, P in att), delta = dout_i . out_i over
 * the row's head: dout and out are (B,T,C) tensors offset to the chunk's first sequence. */
void zt_cuda_attn_dscores(zt_kctx *ctx, float *d, const float *att, const float *dout,
                          const float *out, size_t rows, int T, int NH, int C, float scale);

/* Fused causal attention (attn_cuda.cu): the op table's attention_forward and
 * attention_backward without the scratch, for the shapes zt_cuda_attn_fused_fits accepts (the
 * compiled head size). */
bool zt_cuda_attn_fused_fits(int B, int T, int C, int NH);
/* Whether ctx runs the fused kernels for this shape: they fit, and ctx->attn_fused asks for
 * them (ZT_CUDA_ATTN_AUTO: where the matmuls take 16-bit inputs). */
bool zt_cuda_attn_fused(const zt_kctx *ctx, int B, int T, int C, int NH);
/* scratch: the op's, scratch_floats long (zt_attention_scratch_floats). home, out16 (NULL:
 * none): the 16-bit homes of qkv and out in ctx->mm's type ((B,T,3C), (B,T,C); only where the
 * tensor-core kernels run): forward rounds qkv into its home instead of into the scratch (or,
 * where qkv is NULL, reads it there as it is) and writes out into out16 instead of out;
 * backward reads them there and leaves qkv and out alone. dq16 (backward; NULL: none; only for
 * the tensor-core kernels with dQ by its own kernel, 4-byte aligned): where the gradient is
 * WRITTEN rounded to ctx->mm's type (B,T,3C) instead of added into dqkv, which is then room
 * (cuDNN's workspaces go there, where it runs the attention). */
void zt_cuda_attn_fused_forward(zt_kctx *ctx, float *out, float *lse, float *scratch,
                                size_t scratch_floats, const float *qkv, uint16_t *home,
                                uint16_t *out16, int B, int T, int C, int NH);
/* dout16 (NULL: none; only where the tensor-core kernels run): dO in their 16-bit type, read
 * there instead of a copy rounded from dout (and delta from it) */
void zt_cuda_attn_fused_backward(zt_kctx *ctx, float *dqkv, uint16_t *dq16, float *scratch,
                                 size_t scratch_floats, const float *dout, const uint16_t *dout16,
                                 const float *qkv, const uint16_t *home, const float *out,
                                 const uint16_t *out16, const float *lse, int B, int T, int C,
                                 int NH);
/* The same on tensor cores (attn_tc_cuda.cu), which the two above run for contexts whose
 * matmuls take 16-bit inputs: bf16 for ctx->mm ZT_MM_BF16, fp16 for ZT_MM_FP16. */
void zt_cuda_attn_tc_forward(zt_kctx *ctx, float *out, float *lse, float *scratch,
                             size_t scratch_floats, const float *qkv, uint16_t *home,
                             uint16_t *out16, int B, int T, int C, int NH);
void zt_cuda_attn_tc_backward(zt_kctx *ctx, float *dqkv, uint16_t *dq16, float *scratch,
                              size_t scratch_floats, const float *dout, const uint16_t *dout16,
                              const float *qkv, const uint16_t *home, const float *out,
                              const uint16_t *out16, const float *lse, int B, int T, int C, int NH);
/* cuDNN's fused attention (attn_cudnn.c), for contexts with attn_cudnn, in place of the
 * tensor-core kernels where the tensors have their 16-bit homes: forward reads qkv16 (B,T,3C)
 * and writes out16 (B,T,C) and lse (B,NH,T); backward WRITES the gradient of qkv rounded into
 * dq16 (B,T,3C) from dout16, qkv16, out16 and lse: dQ by the graph that leaves the same bits
 * every run (its scores' gradients in the workspace, 2 bytes each), or with ctx->attn_dq
 * ZT_ATTN_DQ_ATOMIC by the one that sums dQ in fp32 by atomics (attn_graph.h). Both take the
 * op's scratch (bytes long) as cuDNN's workspace, in runs of sequences where it does not hold
 * all B. false (nothing queued; the reason reported once per context) where cuDNN cannot run
 * it: not loadable, no plan for the shape, misaligned tensors, a head size other than 64. A
 * failure of cuDNN's execution is recorded on ctx. */
bool zt_cuda_dnn_forward(zt_kctx *ctx, uint16_t *out16, float *lse, const uint16_t *qkv16, int B,
                         int T, int C, int NH, void *scratch, size_t bytes);
bool zt_cuda_dnn_backward(zt_kctx *ctx, uint16_t *dq16, const uint16_t *dout16,
                          const uint16_t *qkv16, const uint16_t *out16, const float *lse, int B,
                          int T, int C, int NH, void *scratch, size_t bytes);
/* cuDNN executions on ctx so far (tests: whether it ran) */
unsigned long long zt_cuda_dnn_runs(const zt_kctx *ctx);
/* Frees ctx->dnn (ctx_destroy) */
void zt_cuda_dnn_free(zt_kctx *ctx);
/* Whether this build has cuDNN's headers (else cuDNN's attention never runs) */
bool zt_cuda_dnn_built(void);
/* Without a GPU: whether cuDNN accepts the forward (bwd false) or backward graph (dQ summed in
 * fp32 with dq_sum, attn_graph.h) of n sequences of T tokens, NH heads of 64 (bf16, or fp16) on
 * the device whose properties prop_json gives (cuDNN's JSON of them): true, the plan's
 * workspace in *ws, where an engine's plan is made, or made up to loading its kernels, which
 * needs a driver; else false, why. */
bool zt_cuda_dnn_plan_check(const char *prop_json, bool fp16, bool bwd, bool dq_sum, int n, int T,
                            int NH, int64_t *ws, char *why, size_t cap);

/* Floats of scratch the tensor-core backward needs to work through runs of nseq sequences (the
 * 16-bit copies of their qkv and dout, delta; the forward needs less). */
size_t zt_cuda_attn_tc_floats(int nseq, int T, int C, int NH);

/* The optimizer and precision launchers take each zt_dtype as an int and validate it
 * themselves: C++ may not even load an enum holding a value outside its enumerators, and a bad
 * type from a caller must be a recorded ZT_ERR_INVALID. */
void zt_cuda_adamw(zt_kctx *ctx, float *param, const void *grad, int grad_dtype, float *m, float *v,
                   size_t n, const zt_adamw_args *args, void *param_lp, int lp_dtype);
void zt_cuda_cast(zt_kctx *ctx, void *dst, int dst_dtype, const void *src, int src_dtype, size_t n);
/* dst (rows x cols, contiguous) = src (rows x cols, row stride ld floats) rounded to the 16-bit
 * type of mm16 (ZT_MM_BF16 or ZT_MM_FP16), to nearest even as zt_cuda_cast rounds: the
 * matmuls' staged operands. */
void zt_cuda_stage_cast(zt_kctx *ctx, uint16_t *dst, int mm16, const float *src, int rows, int cols,
                        size_t ld);
void zt_cuda_accumulate(zt_kctx *ctx, void *dst, int dst_dtype, const float *src, float scale,
                        size_t n);
void zt_cuda_scale(zt_kctx *ctx, float *x, float s, size_t n);
/* Sum of squares (finite elements, double) and non-finite count of x into device slot
 * red[0..1] (written, not added). */
void zt_cuda_sumsq(zt_kctx *ctx, double *red, const void *x, int dtype, size_t n);
/* Writes one float into device memory with a kernel (ctx_create's can-this-GPU-run-our-code
 * probe). */
void zt_cuda_probe(zt_kctx *ctx, float *dst);

#ifdef __cplusplus
}
#endif

#if defined(__CUDACC__) || (defined(ZT_CUDA_EMU) && defined(__cplusplus))
/* ---- device helpers shared by the .cu files (and by their CPU emulation in tests/gpu/emu) */
#include <math.h>

#define ZT_CUDA_THREADS 256

/* A loop over a per-thread array unrolled, so that the array lives in registers (the
 * emulation's compiler has no such pragma and keeps arrays in memory anyway). */
#ifdef __CUDACC__
#define ZT_UNROLL _Pragma("unroll")
#else
#define ZT_UNROLL
#endif

/* kernel<<<grid, block, 0, stream>>>(args...), or its emulation on the CPU. */
#ifdef ZT_CUDA_EMU
#define ZT_CUDA_KERNEL(name, kernel, grid, block, stream, ...)                                     \
    ZT_EMU_LAUNCH(name, kernel, grid, block, stream, __VA_ARGS__)
#else
#define ZT_CUDA_KERNEL(name, kernel, grid, block, stream, ...)                                     \
    kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

/* Launches kernel<<<grid, block, 0, ctx->stream>>>(args...) and records a launch failure under
 * `name`. The runtime's last-error slot is cleared first: a library (cuBLASLt, NCCL) may leave
 * a non-sticky error there that has nothing to do with this launch. */
#define ZT_CUDA_LAUNCH(ctx, name, kernel, grid, block, ...)                                        \
    do {                                                                                           \
        (void)cudaGetLastError();                                                                  \
        ZT_CUDA_KERNEL(name, kernel, grid, block, (ctx)->stream, __VA_ARGS__);                     \
        zt_cuda_check_launch((ctx), (name));                                                       \
    } while (0)

/* The most blocks zt_cuda_blocks gives. The emulation's few make its grid-stride loops take
 * several items a thread at the tests' sizes, as a GPU's do over a large model's tensors. */
#ifdef ZT_CUDA_EMU
#define ZT_CUDA_MAX_BLOCKS 64
#else
#define ZT_CUDA_MAX_BLOCKS 65536
#endif

/* Blocks for a grid-stride loop over n items with ZT_CUDA_THREADS threads per block. */
static inline unsigned zt_cuda_blocks(size_t n)
{
    size_t b = (n + ZT_CUDA_THREADS - 1) / ZT_CUDA_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b < ZT_CUDA_MAX_BLOCKS ? b : ZT_CUDA_MAX_BLOCKS);
}

/* Where item i of a grid-stride loop over rows of w items lies (row r, column c), stepped by the
 * loop's stride with two divisions per thread (zt_grid_rc_at) instead of two 64-bit ones per
 * item: those cost more than the rest of a staging kernel's work (~70 instructions each). */
typedef struct {
    size_t r, c;   /* item i's row and column */
    size_t dr, dc; /* the stride's rows and columns */
} zt_grid_rc;

static __device__ __forceinline__ zt_grid_rc zt_grid_rc_at(size_t i, size_t w, size_t stride)
{
    zt_grid_rc p;
    p.r = i / w, p.c = i % w, p.dr = stride / w, p.dc = stride % w;
    return p;
}

static __device__ __forceinline__ void zt_grid_rc_next(zt_grid_rc *p, size_t w)
{
    p->r += p->dr, p->c += p->dc;
    if (p->c >= w) p->c -= w, p->r++;
}

static __device__ __forceinline__ float zt_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double zt_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* max that never picks a NaN over a number (as the CPU's `x > m ? x : m`) */
static __device__ __forceinline__ float zt_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sum / max for blockDim.x a multiple of 32 (at most 1024); every thread gets the
 * result. sh: 32 floats of shared memory, reusable right after the call returns. */
static __device__ __forceinline__ float zt_block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = zt_warp_sum(v);
    __syncthreads(); /* the previous use of sh is over */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return zt_warp_sum(v);
}

static __device__ __forceinline__ float zt_block_max(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = zt_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return zt_warp_max(v);
}

static __device__ __forceinline__ double zt_block_sum_d(double v, double *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = zt_warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return zt_warp_sum_d(v);
}
#endif /* __CUDACC__ || ZT_CUDA_EMU */

#endif
