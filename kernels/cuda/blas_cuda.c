/* zerotrain: the CUDA ops built on cuBLASLt: the linear layer (bias, and GELU for the MLP's
 * first layer, fused as epilogues) and causal self-attention, whose Q K^T, P V and gradients
 * are strided-batched GEMMs over the heads of one sequence on views of the (B, T, 3C) qkv
 * tensor. fp32 in and out, fp32 accumulate; the inputs rounded to the context's zt_cuda_mm
 * (the compute type: exact fp32, TF32, bf16 or fp16 tensor cores), the linear layer's 16-bit
 * ones into 16-bit copies first (staging, below). Algorithm choices are
 * cached per shape: the heuristic's first, or with ZT_CUDA_GEMM_TUNE=1 the fastest of its first
 * ZT_CUDA_TUNE_ALGOS, timed at the shape's first call. Tuning is off by default because timings
 * vary from run to run, and so would the choice and the low bits of every result (two runs of
 * one job stop being bitwise equal); on an H200 it made some backward GEMMs 5 to 22% faster
 * and the 8192^3 bf16 product 15% slower (a candidate that timed well when first met). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <string.h>

#include "common/log.h"
#include "cuda_int.h"

/* Largest of 16, 8, 4 (2 for 16-bit elements) bytes that divides the address of p and, when
 * batched, the byte stride between the matrices of the batch (every matrix of the batch must
 * meet the alignment); esize: bytes per element. */
static int ptr_align(const void *p, long long stride, int batch, int esize)
{
    uintptr_t a = (uintptr_t)p;
    if (batch > 1) a |= (uintptr_t)(stride * (long long)esize);
    return (a % 16 == 0) ? 16 : (a % 8 == 0) ? 8 : (a % 4 == 0) ? 4 : 2;
}

/* cuBLASLt's type of g's A and B */
static cudaDataType mm_type(int mm16)
{
    return mm16 == ZT_MM_BF16 ? CUDA_R_16BF : mm16 == ZT_MM_FP16 ? CUDA_R_16F : CUDA_R_32F;
}

static cudaDataType in_type(const zt_cuda_gemm *g)
{
    return mm_type(g->in16);
}

/* g's D (C16 where out16) and its GELU input (aux16 where out16) */
static void *d_ptr(const zt_cuda_gemm *g)
{
    return g->out16 ? g->C16 : (void *)g->C;
}

static const void *aux_ptr(const zt_cuda_gemm *g)
{
    return g->out16 ? g->aux16 : (const void *)g->aux;
}

/* The zt_dtype of a 16-bit zt_cuda_mm, and back (ZT_MM_FP32 for any other type) */
static zt_dtype mm_dtype(int mm16)
{
    return mm16 == ZT_MM_FP16 ? ZT_F16 : ZT_BF16;
}

int zt_cuda_dtype_mm(zt_dtype dt)
{
    return dt == ZT_BF16 ? ZT_MM_BF16 : dt == ZT_F16 ? ZT_MM_FP16 : ZT_MM_FP32;
}

/* A cuBLASLt column-major matrix layout for a row-major matrix stored `rows` x `cols` with
 * leading dimension ld: the same bytes are the column-major cols x rows matrix. */
static cublasStatus_t layout_init(cublasLtMatrixLayoutOpaque_t *l, cudaDataType type, int rows,
                                  int cols, int ld, int batch, long long stride)
{
    cublasStatus_t s =
        cublasLtMatrixLayoutInit(l, type, (uint64_t)cols, (uint64_t)rows, (int64_t)ld);
    if (s != CUBLAS_STATUS_SUCCESS || batch <= 1) return s;
    int32_t bc = batch;
    int64_t st = stride;
    s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc));
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st,
                                             sizeof(st));
    return s;
}

/* Elements from C's first to its last, batch included. */
static size_t c_extent(const zt_cuda_gemm *g)
{
    return (size_t)(g->batch - 1) * (size_t)g->sC + (size_t)(g->M - 1) * (size_t)g->ldc +
           (size_t)g->N;
}

/* Times candidates n of the heuristic's results on g's own inputs and returns the fastest
 * (index into res; 0 when nothing could be timed). The products go to g's C where they
 * overwrite it (beta 0: the call that follows writes it again; a GELU epilogue's aux likewise),
 * else to a temporary of C's size, zeroed (outside the arenas: where it does not fit, the
 * heuristic's first is kept); inputs are only read. A candidate that fails is passed over.
 * Runs once per shape (the cache keeps the choice). */
static int tune(zt_kctx *ctx, const zt_cuda_gemm *g, cublasLtMatmulDesc_t op,
                cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                const cublasLtMatmulHeuristicResult_t *res, int n)
{
    void *D = d_ptr(g), *tmp = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    int best = 0;
    float best_ms = INFINITY;
    if (g->beta != 0.0f) {
        size_t bytes = c_extent(g) * sizeof(float);
        if (cudaMalloc(&tmp, bytes) != cudaSuccess ||
            cudaMemsetAsync(tmp, 0, bytes, ctx->stream) != cudaSuccess)
            goto done;
        D = tmp;
    }
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) goto done;
    for (int i = 0; i < n; i++) {
        bool ok = true;
        for (int r = 0; r <= ZT_CUDA_TUNE_REPS && ok; r++) { /* round 0 warms up */
            if (r == 1) ok = cudaEventRecord(ev[0], ctx->stream) == cudaSuccess;
            ok = ok && cublasLtMatmul(ctx->lt, op, &g->alpha, g->B, la, g->A, lb, &g->beta, D, lc,
                                      D, lc, &res[i].algo, ctx->lt_ws, ZT_CUDA_LT_WORKSPACE,
                                      ctx->stream) == CUBLAS_STATUS_SUCCESS;
        }
        float ms = 0.0f;
        if (ok && cudaEventRecord(ev[1], ctx->stream) == cudaSuccess &&
            cudaEventSynchronize(ev[1]) == cudaSuccess &&
            cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess && ms < best_ms) {
            best_ms = ms;
            best = i;
        }
    }
done:
    for (int k = 0; k < 2; k++)
        if (ev[k]) cudaEventDestroy(ev[k]);
    if (tmp) cudaFree(tmp);
    (void)cudaGetLastError(); /* a failed allocation here is not the program's failure */
    return best;
}

/* Looks up (or asks the heuristic for, and caches) the algorithm for key. Returns the entry,
 * whose `usable` says whether cuBLASLt offered one. "No algorithm" (none returned,
 * NOT_SUPPORTED, INVALID_VALUE) is cached and reported once, since the caller's fallback is
 * slower; any other failure of the heuristic (ALLOC_FAILED, INTERNAL_ERROR, ...) may pass, so
 * it is not cached: this call falls back and the next one asks again. */
static zt_cuda_gemm_entry *algo_for(zt_kctx *ctx, const zt_cuda_gemm_key *key,
                                    const zt_cuda_gemm *g, cublasLtMatmulDesc_t op,
                                    cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                    cublasLtMatrixLayout_t lc)
{
    for (int i = 0; i < ctx->gemm_n; i++)
        if (memcmp(&ctx->gemm_cache[i].key, key, sizeof(*key)) == 0) return &ctx->gemm_cache[i];
    int slot;
    if (ctx->gemm_n < ZT_CUDA_GEMM_CACHE) {
        slot = ctx->gemm_n++;
    } else {
        slot = ctx->gemm_next;
        ctx->gemm_next = (ctx->gemm_next + 1) % ZT_CUDA_GEMM_CACHE;
    }
    zt_cuda_gemm_entry *e = &ctx->gemm_cache[slot];
    memset(e, 0, sizeof(*e));
    e->key = *key;
    cublasLtMatmulPreferenceOpaque_t pref;
    uint64_t ws = ZT_CUDA_LT_WORKSPACE;
    uint32_t al[4] = {(uint32_t)key->alignA, (uint32_t)key->alignB, (uint32_t)key->alignC,
                      (uint32_t)key->alignC};
    cublasStatus_t s = cublasLtMatmulPreferenceInit(&pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof(ws));
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                 &al[0], sizeof(al[0]));
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                 &al[1], sizeof(al[1]));
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                 &al[2], sizeof(al[2]));
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                 &al[3], sizeof(al[3]));
    cublasLtMatmulHeuristicResult_t res[ZT_CUDA_TUNE_ALGOS];
    int nres = 0, nok = 0;
    memset(res, 0, sizeof(res));
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, op, la, lb, lc, lc, &pref,
                                           ctx->gemm_tune ? ZT_CUDA_TUNE_ALGOS : 1, res, &nres);
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < nres; i++) /* the usable ones, in order */
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ZT_CUDA_LT_WORKSPACE)
            res[nok++] = res[i];
    if (nok > 0) {
        e->algo = res[nok > 1 ? tune(ctx, g, op, la, lb, lc, res, nok) : 0].algo;
        e->usable = 1;
    } else if (s == CUBLAS_STATUS_SUCCESS || s == CUBLAS_STATUS_NOT_SUPPORTED ||
               s == CUBLAS_STATUS_INVALID_VALUE) {
        ZT_WARN(
            "kernels",
            "GPU %d: cuBLASLt has no algorithm for %c%c M=%d N=%d K=%d batch=%d bias=%d epilogue=%d inputs %s%s (%s, %d results); this shape runs a slower fallback",
            ctx->device, key->ta, key->tb, key->M, key->N, key->K, key->batch, key->has_bias,
            key->gelu, zt_cuda_mm_name(key->mm), key->in16 ? " (16-bit copies)" : "",
            cublasLtGetStatusString(s), nres);
    } else {
        ZT_WARN(
            "kernels",
            "GPU %d: cuBLASLt's heuristic failed for %c%c M=%d N=%d K=%d batch=%d: %s; this call runs a slower fallback and the next one asks again",
            ctx->device, key->ta, key->tb, key->M, key->N, key->K, key->batch,
            cublasLtGetStatusString(s));
        memset(&e->key, 0xff, sizeof(e->key)); /* matches no shape: forgotten */
    }
    return e;
}

typedef enum {
    LT_DONE,    /* queued, or failed and recorded */
    LT_NO_ALGO, /* cuBLASLt has no algorithm or rejects the problem: nothing queued or recorded */
    LT_READY,   /* lt_prepare: descriptors and algorithm ready for lt_launch */
} lt_result;

/* One cuBLASLt call set up: its descriptors and the cached algorithm. */
typedef struct {
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t la, lb, lc;
    zt_cuda_gemm_entry *e;
    int gelu;
} lt_call;

/* Sets up the cuBLASLt call for g (bias as an epilogue when use_bias, GELU with its input kept
 * in aux when g->aux) and finds its algorithm: LT_READY, or LT_NO_ALGO (cuBLASLt has none: the
 * entry remembers it), or LT_DONE with a failure recorded. */
static lt_result lt_prepare(zt_kctx *ctx, const zt_cuda_gemm *g, bool use_bias, lt_call *c)
{
    /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's A is our B */
    cublasOperation_t opa = g->tb == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = g->ta == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N;
    zt_cuda_gemm_key key;
    memset(&key, 0, sizeof(key));
    key.ta = g->ta;
    key.tb = g->tb;
    key.M = g->M;
    key.N = g->N;
    key.K = g->K;
    key.lda = g->lda;
    key.ldb = g->ldb;
    key.ldc = g->ldc;
    key.batch = g->batch;
    key.has_bias = use_bias;
    key.beta_zero = g->beta == 0.0f;
    key.mm = ctx->mm;
    key.in16 = g->in16;
    key.out16 = g->out16;
    int esize = g->in16 ? 2 : 4, osize = g->out16 ? 2 : 4;
    const void *aux = aux_ptr(g);
    key.alignA = ptr_align(g->B, g->sB, g->batch, esize); /* cuBLASLt's A */
    key.alignB = ptr_align(g->A, g->sA, g->batch, esize);
    key.alignC = ptr_align(d_ptr(g), g->sC, g->batch, osize);
    if (g->Cin) { /* C and D are held to the same alignment */
        int ac = ptr_align(g->Cin, 0, 1, 4);
        if (ac < key.alignC) key.alignC = ac;
    }
    /* a 16-bit D takes only a bias of its own type (zt_cuda_gemm's bias16) */
    bool b16 = use_bias && g->out16;
    if (b16 && !g->bias16) return LT_NO_ALGO;
    key.alignBias = !use_bias ? 0
                    : b16     ? ptr_align(g->bias16, 0, 1, 2)
                              : ptr_align(g->bias, 0, 1, 4);
    key.gelu = !aux ? 0 : g->dgelu ? 2 : 1;
    key.alignAux = aux ? ptr_align(aux, 0, 1, osize) : 0;
    if (g->batch > 1) {
        key.sA = g->sA;
        key.sB = g->sB;
        key.sC = g->sC;
    }

    cublasLtMatmulDescOpaque_t *op = &c->op;
    cublasLtMatrixLayoutOpaque_t *la = &c->la, *lb = &c->lb, *lc = &c->lc;
    c->gelu = key.gelu;
    /* 16-bit operands are multiplied as they are (fp32 accumulation); fp32 ones are rounded to
     * the context's type as cuBLASLt loads them */
    cublasComputeType_t ct = g->in16                 ? CUBLAS_COMPUTE_32F
                             : ctx->mm == ZT_MM_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                             : ctx->mm == ZT_MM_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                             : ctx->mm == ZT_MM_FP16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                                     : CUBLAS_COMPUTE_32F;
    cublasStatus_t s = cublasLtMatmulDescInit(op, ct, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
    if (s == CUBLAS_STATUS_SUCCESS && (use_bias || aux)) {
        cublasLtEpilogue_t epi = !aux       ? CUBLASLT_EPILOGUE_BIAS
                                 : g->dgelu ? CUBLASLT_EPILOGUE_DGELU
                                 : use_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                            : CUBLASLT_EPILOGUE_GELU_AUX;
        s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
        /* the bias of D's type (cuBLASLt's default) */
        const void *bias = b16 ? (const void *)g->bias16 : (const void *)g->bias;
        if (s == CUBLAS_STATUS_SUCCESS && use_bias)
            s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                               sizeof(bias));
        if (s == CUBLAS_STATUS_SUCCESS && aux) {
            /* aux has D's column-major layout and type: ld = ldc */
            int64_t ld = g->ldc;
            s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                               sizeof(aux));
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                                   sizeof(ld));
        }
    }
    /* stored shapes (row-major): B is K x N ('N') or N x K ('T'); A is M x K or K x M */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout_init(la, in_type(g), g->tb == 'N' ? g->K : g->N, g->tb == 'N' ? g->N : g->K,
                        g->ldb, g->batch, g->sB);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout_init(lb, in_type(g), g->ta == 'N' ? g->M : g->K, g->ta == 'N' ? g->K : g->M,
                        g->lda, g->batch, g->sA);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout_init(lc, mm_type(g->out16), g->M, g->N, g->ldc, g->batch, g->sC);
    if (s != CUBLAS_STATUS_SUCCESS) {
        zt_cuda_fail(
            ctx, ZT_ERR_CUDA,
            "GPU %d: setting up a cuBLASLt matmul (%c%c M=%d N=%d K=%d batch=%d) failed: %s",
            ctx->device, g->ta, g->tb, g->M, g->N, g->K, g->batch, cublasLtGetStatusString(s));
        return LT_DONE;
    }
    c->e = algo_for(ctx, &key, g, op, la, lb, lc);
    return c->e->usable ? LT_READY : LT_NO_ALGO;
}

/* Queues the call lt_prepare set up for g. A problem cuBLASLt refuses now is remembered in the
 * algorithm cache so that later calls go straight to the caller's fallback (LT_NO_ALGO). */
static lt_result lt_launch(zt_kctx *ctx, const zt_cuda_gemm *g, bool use_bias, lt_call *c)
{
    const void *C = g->Cin ? (const void *)g->Cin : d_ptr(g);
    cublasStatus_t s = cublasLtMatmul(ctx->lt, &c->op, &g->alpha, g->B, &c->la, g->A, &c->lb,
                                      &g->beta, C, &c->lc, d_ptr(g), &c->lc, &c->e->algo,
                                      ctx->lt_ws, ZT_CUDA_LT_WORKSPACE, ctx->stream);
    if (s == CUBLAS_STATUS_INVALID_VALUE || s == CUBLAS_STATUS_NOT_SUPPORTED) {
        /* the heuristic's own choice refused: reported once (the entry remembers it), since a
         * wrong mapping of ours would otherwise only show as a slower run */
        ZT_WARN(
            "kernels",
            "GPU %d: cublasLtMatmul rejects %c%c M=%d N=%d K=%d batch=%d bias=%d epilogue=%d inputs %s%s with the heuristic's algorithm: %s; this shape runs a slower fallback",
            ctx->device, g->ta, g->tb, g->M, g->N, g->K, g->batch, use_bias, c->gelu,
            zt_cuda_mm_name(ctx->mm), g->in16 ? " (16-bit copies)" : "",
            cublasLtGetStatusString(s));
        c->e->usable = 0;
        return LT_NO_ALGO;
    }
    if (s != CUBLAS_STATUS_SUCCESS) {
        zt_cuda_fail(
            ctx, ZT_ERR_CUDA, "GPU %d: cublasLtMatmul (%c%c M=%d N=%d K=%d batch=%d) failed: %s",
            ctx->device, g->ta, g->tb, g->M, g->N, g->K, g->batch, cublasLtGetStatusString(s));
    }
    return LT_DONE;
}

/* One cuBLASLt call for g: lt_prepare, then lt_launch. */
static lt_result gemm_lt(zt_kctx *ctx, const zt_cuda_gemm *g, bool use_bias)
{
    lt_call c;
    lt_result r = lt_prepare(ctx, g, use_bias, &c);
    return r == LT_READY ? lt_launch(ctx, g, use_bias, &c) : r;
}

/* zt_cuda_gemm_run on g's own (fp32) operands */
static void gemm_unstaged(zt_kctx *ctx, const zt_cuda_gemm *g)
{
    if (g->M <= 0 || g->N <= 0 || g->batch <= 0) return;
    if (g->Cin) {
        /* a residual input: cuBLASLt's C, else the product then the residual add (the bits of
         * the two ops) */
        if (g->batch != 1 || g->ldc != g->N || g->beta != 1.0f || g->aux || g->out16) {
            zt_cuda_fail(
                ctx, ZT_ERR_UNSUPPORTED,
                "GPU %d: a GEMM with a residual input needs batch 1, ldc == N, beta 1, an fp32 output and no GELU (got batch %d, ldc %d, N %d, beta %g); this is a bug in the caller",
                ctx->device, g->batch, g->ldc, g->N, (double)g->beta);
            return;
        }
        if (g->K > 0 && gemm_lt(ctx, g, g->bias != NULL) == LT_DONE) return;
        zt_cuda_gemm f = *g;
        f.Cin = NULL;
        f.beta = 0.0f;
        gemm_unstaged(ctx, &f);
        zt_cuda_residual_forward(ctx, g->C, g->Cin, g->C, (size_t)g->M * (size_t)g->N);
        return;
    }
    if (g->out16) { /* the product in fp32 into C (room), then rounded into C16 */
        if (g->aux16 || g->batch != 1 || g->ldc != g->N || g->beta != 0.0f) {
            zt_cuda_fail(
                ctx, ZT_ERR_UNSUPPORTED,
                "GPU %d: a GEMM with a 16-bit output falls back only with batch 1, ldc == N, beta 0 and no GELU (got batch %d, ldc %d, N %d, beta %g); this is a bug in the caller",
                ctx->device, g->batch, g->ldc, g->N, (double)g->beta);
            return;
        }
        zt_cuda_gemm f = *g;
        f.out16 = 0;
        f.C16 = NULL;
        gemm_unstaged(ctx, &f);
        zt_cuda_cast(ctx, g->C16, (int)mm_dtype(g->out16), g->C, (int)ZT_F32,
                     (size_t)g->M * (size_t)g->N);
        return;
    }
    if (g->aux) {
        /* the GELU epilogue (its aux leading dimension must be a multiple of 8), else the
         * product into aux and GELU over it; both need one matrix of whole N-column rows
         * (ldc == N) and no C to add (beta 0), which is all matmul_gelu_forward asks */
        if (g->batch != 1 || g->ldc != g->N || g->beta != 0.0f || (g->dgelu && g->bias)) {
            zt_cuda_fail(
                ctx, ZT_ERR_UNSUPPORTED,
                "GPU %d: a GELU GEMM needs batch 1, ldc == N and beta 0, and its gradient no bias (got batch %d, ldc %d, N %d, beta %g, dgelu %d, bias %d); this is a bug in the caller",
                ctx->device, g->batch, g->ldc, g->N, (double)g->beta, g->dgelu, g->bias != NULL);
            return;
        }
        if (g->K > 0 && g->ldc % 8 == 0 && gemm_lt(ctx, g, g->bias != NULL) == LT_DONE) return;
        zt_cuda_gemm plain = *g;
        plain.aux = NULL;
        plain.dgelu = 0;
        size_t n = (size_t)g->M * (size_t)g->N;
        if (g->dgelu) { /* the product into C, then GELU' of aux onto it */
            gemm_unstaged(ctx, &plain);
            zt_cuda_gelu_grad_inplace(ctx, g->C, g->aux, n);
            return;
        }
        plain.C = g->aux;
        gemm_unstaged(ctx, &plain);
        zt_cuda_gelu_forward(ctx, g->C, g->aux, n);
        return;
    }
    if (g->K <= 0) { /* empty product: C = beta C (+ bias) */
        if (g->batch == 1 && g->beta == 0.0f && g->ldc == g->N)
            zt_cuda_bias_fill(ctx, g->C, g->bias, g->M, g->N);
        else if (g->beta != 1.0f || g->bias)
            zt_cuda_fail(ctx, ZT_ERR_UNSUPPORTED,
                         "GPU %d: a GEMM with K = 0 and beta %g is not supported by this backend",
                         ctx->device, (double)g->beta);
        return;
    }
    if (gemm_lt(ctx, g, g->bias != NULL) == LT_DONE) return;
    if (g->bias && g->batch == 1 && g->beta == 0.0f && g->ldc == g->N) {
        /* no fused-bias algorithm: start C from the bias and accumulate onto it */
        zt_cuda_bias_fill(ctx, g->C, g->bias, g->M, g->N);
        zt_cuda_gemm plain = *g;
        plain.bias = NULL;
        plain.beta = 1.0f;
        if (gemm_lt(ctx, &plain, false) == LT_DONE) return;
    }
    if (g->batch > 1 && !g->bias) {
        /* no batched algorithm for these strides (the heads of one sequence interleave): one
         * GEMM per matrix; slower, same result */
        if (!ctx->warned_unbatched) {
            ctx->warned_unbatched = 1;
            ZT_WARN(
                "kernels",
                "GPU %d: cuBLASLt has no strided-batched algorithm for %c%c M=%d N=%d K=%d batch=%d (strides %lld/%lld/%lld); running one GEMM per matrix, which is slower",
                ctx->device, g->ta, g->tb, g->M, g->N, g->K, g->batch, g->sA, g->sB, g->sC);
        }
        zt_cuda_gemm one = *g;
        one.batch = 1;
        one.sA = one.sB = one.sC = 0;
        for (int i = 0; i < g->batch; i++) {
            one.A = (const float *)g->A + (size_t)i * (size_t)g->sA;
            one.B = (const float *)g->B + (size_t)i * (size_t)g->sB;
            one.C = g->C + (size_t)i * (size_t)g->sC;
            if (gemm_lt(ctx, &one, false) != LT_DONE) break;
            if (i + 1 == g->batch) return;
        }
    }
    zt_cuda_fail(
        ctx, ZT_ERR_CUDA,
        "GPU %d: cuBLASLt offers no algorithm for the matmul %c%c M=%d N=%d K=%d lda=%d ldb=%d ldc=%d batch=%d; report this with the model shape",
        ctx->device, g->ta, g->tb, g->M, g->N, g->K, g->lda, g->ldb, g->ldc, g->batch);
}

/* ---------------------------------------------------------------------------------------- */
/* 16-bit staging (ops.h, ZT_CUDA_GEMM_STAGE): a product with 16-bit inputs rounds op(A) and
 * op(B) into ctx->stage (op(B)'s block first, padded to 256 bytes, then op(A)'s) and has
 * cuBLASLt multiply the copies. Operands that do not fit the cap go in blocks, in this order
 * of preference, each staging every element once: rows of C (op(B) whole), columns of C (op(A)
 * whole), depth (each block's product added onto C: beta 1 after the first, the bias with the
 * first). A GELU epilogue needs each sum whole and each row of aux whole, and a 16-bit output
 * (out16) each sum whole and rows of it whole where they fall back, so they take rows only; a
 * residual input (Cin) rows or depth (whole rows where a block falls back to the two ops). No
 * block worth a product (under ZT_CUDA_STAGE_MIN_BLOCK): the fp32 operands as before. */
#define ZT_CUDA_STAGE_MIN_BLOCK 64
#define ZT_CUDA_STAGE_GRAIN 64 /* block sizes are multiples of it (or the whole dimension) */

typedef struct {
    int mb, nb, kb; /* block sizes along M, N, K */
} stage_blocks;

static int stage_fit(size_t room, size_t per, int whole)
{
    size_t n = per ? room / per : 0;
    if (n >= (size_t)whole) return whole;
    n = n / ZT_CUDA_STAGE_GRAIN * ZT_CUDA_STAGE_GRAIN;
    return n >= ZT_CUDA_STAGE_MIN_BLOCK ? (int)n : 0;
}

/* Whether g's bias goes in as a 16-bit copy (staged after op(B)'s block: a 16-bit D takes only
 * a bias of its own type) */
static bool stage_bias16(const zt_cuda_gemm *g)
{
    return g->out16 && g->bias;
}

/* The blocks of g within cap 16-bit elements; false when staging is not worth it. */
static bool stage_plan(const zt_cuda_gemm *g, size_t cap, stage_blocks *b)
{
    size_t M = (size_t)g->M, N = (size_t)g->N, K = (size_t)g->K;
    size_t pb = zt_cuda_stage_pad(K * N) + (stage_bias16(g) ? zt_cuda_stage_pad(N) : 0);
    size_t pa = zt_cuda_stage_pad(M * K);
    b->mb = g->M, b->nb = g->N, b->kb = g->K;
    if (pb + M * K <= cap) return true;
    if (pb < cap && (b->mb = stage_fit(cap - pb, K, g->M)) > 0) return true; /* rows */
    b->mb = g->M;
    if (g->aux || g->out16) return false;
    /* columns: op(B)'s blocks padded (at most 127 elements) */
    if (!g->Cin && pa + 128 < cap && (b->nb = stage_fit(cap - pa - 128, K, g->N)) > 0) return true;
    b->nb = g->N;
    /* depth: pad(kb N) + M kb <= cap */
    return cap > 128 && (b->kb = stage_fit(cap - 128, M + N, g->K)) > 0;
}

/* Makes ctx->stage hold at least n elements (the old buffer is released once the stream is
 * done with it); false where the GPU has no room (reported once per size: the products run
 * unstaged) */
static bool stage_reserve(zt_kctx *ctx, size_t n)
{
    if (ctx->stage_cap >= n) return true;
    if (ctx->stage_refused && n >= ctx->stage_refused) return false;
    if (ctx->stage) {
        if (zt_cuda_check(ctx, cudaStreamSynchronize(ctx->stream),
                          "waiting for the stream before growing the matmul staging buffer"))
            return false;
        zt_cuda_check(ctx, cudaFree(ctx->stage), "freeing the matmul staging buffer");
        ctx->stage = NULL;
        ctx->stage_cap = 0;
    }
    void *p = NULL;
    if (cudaMalloc(&p, n * sizeof(uint16_t)) != cudaSuccess) {
        (void)cudaGetLastError(); /* not the program's failure: the products run unstaged */
        ctx->stage_refused = n;
        ZT_WARN(
            "kernels",
            "GPU %d: no room for %zu MiB of 16-bit matmul operands; these products read fp32 (slower). ZT_CUDA_GEMM_STAGE_MIB lowers the buffer's cap",
            ctx->device, (n * sizeof(uint16_t)) >> 20);
        return false;
    }
    ctx->stage = p;
    ctx->stage_cap = n;
    return true;
}

/* Rounds the block of a row-major matrix X (row stride ld) that holds op(X)'s rows [r0, r0 +
 * rn) and columns [c0, c0 + cn) into dst as a contiguous matrix of X's orientation (leading
 * dimension cn for t 'N', rn for 'T'). */
static void stage_block(zt_kctx *ctx, uint16_t *dst, const void *X, int ld, char t, int r0, int rn,
                        int c0, int cn)
{
    const float *x = X;
    if (t == 'N')
        zt_cuda_stage_cast(ctx, dst, ctx->mm, x + (size_t)r0 * ld + c0, rn, cn, (size_t)ld);
    else
        zt_cuda_stage_cast(ctx, dst, ctx->mm, x + (size_t)c0 * ld + r0, cn, rn, (size_t)ld);
}

/* The part of g for C's rows [m0, m0 + mn), columns [n0, n0 + nn) and depth [k0, k0 + kn):
 * g's own pointers, beta 1 and no bias after the first depth block. */
static zt_cuda_gemm stage_part(const zt_cuda_gemm *g, int m0, int mn, int n0, int nn, int k0,
                               int kn)
{
    zt_cuda_gemm p = *g;
    const float *A = g->A, *B = g->B;
    p.M = mn, p.N = nn, p.K = kn;
    p.A = g->ta == 'N' ? A + (size_t)m0 * g->lda + k0 : A + (size_t)k0 * g->lda + m0;
    p.B = g->tb == 'N' ? B + (size_t)k0 * g->ldb + n0 : B + (size_t)n0 * g->ldb + k0;
    size_t c0 = (size_t)m0 * g->ldc + n0;
    p.C = g->C + c0;
    if (g->aux) p.aux = g->aux + c0;
    if (g->C16) p.C16 = (uint16_t *)g->C16 + c0;
    if (g->aux16) p.aux16 = (const uint16_t *)g->aux16 + c0;
    if (g->Cin) p.Cin = g->Cin + c0;
    if (k0 > 0) {
        p.beta = 1.0f;
        p.bias = NULL;
        p.Cin = NULL;
    } else if (g->bias) {
        p.bias = g->bias + n0;
    }
    return p;
}

static bool stage_usable(const zt_kctx *ctx)
{
    return ctx->stage_on && (ctx->mm == ZT_MM_BF16 || ctx->mm == ZT_MM_FP16);
}

/* Rounds the block of A = afn's values that holds rows [m0, m0 + mn) and columns [k0, k0 + kn)
 * into dst (leading dimension kn), A's row stride ld; a LayerNorm takes whole rows (k0 0, kn
 * its C), writing their statistics where afn asks. */
static void afn_stage(zt_kctx *ctx, uint16_t *dst, const zt_cuda_afn *f, int ld, int m0, int mn,
                      int k0, int kn)
{
    if (f->kind == ZT_AFN_HOME16) /* the staging's type already: copied (where not read in
                                   * place: blocks of depth) */
        zt_cuda_check(ctx,
                      cudaMemcpy2DAsync(dst, (size_t)kn * 2,
                                        (const uint16_t *)f->src16 + (size_t)m0 * ld + k0,
                                        (size_t)ld * 2, (size_t)kn * 2, (size_t)mn,
                                        cudaMemcpyDeviceToDevice, ctx->stream),
                      "copying a 16-bit input into the staging");
    else if (f->kind == ZT_AFN_GELU)
        zt_cuda_stage_gelu(ctx, dst, ctx->mm, f->src + (size_t)m0 * ld + k0, mn, kn, (size_t)ld);
    else if (f->kind == ZT_AFN_GELU16)
        zt_cuda_stage_gelu16(ctx, dst, ctx->mm, (const uint16_t *)f->src16 + (size_t)m0 * ld + k0,
                             zt_cuda_dtype_mm((zt_dtype)f->dtype), mn, kn, (size_t)ld);
    else
        zt_cuda_stage_layernorm(ctx, dst, ctx->mm, f->mean ? f->mean + m0 : NULL,
                                f->rstd ? f->rstd + m0 : NULL, f->src + (size_t)m0 * ld, f->w, f->b,
                                mn, kn);
}

/* Rows [m0, m0 + mn) of A = afn's values in fp32 (row stride K): gelu_forward's or
 * layernorm_forward's (of the widened 16-bit values for GELU16) */
static void afn_fp32(zt_kctx *ctx, float *A, const zt_cuda_afn *f, int m0, int mn, int K)
{
    size_t o = (size_t)m0 * (size_t)K, n = (size_t)mn * (size_t)K;
    if (f->kind == ZT_AFN_HOME16 || f->kind == ZT_AFN_GELU16) {
        zt_cuda_cast(ctx, A + o, (int)ZT_F32, (const uint16_t *)f->src16 + o, f->dtype, n);
        if (f->kind == ZT_AFN_GELU16) /* in place */
            zt_cuda_gelu_forward(ctx, A + o, A + o, n);
    } else if (f->kind == ZT_AFN_GELU) {
        zt_cuda_gelu_forward(ctx, A + o, f->src + o, n);
    } else {
        zt_cuda_layernorm_forward(ctx, A + o, f->mean ? f->mean + m0 : NULL,
                                  f->rstd ? f->rstd + m0 : NULL, f->src + o, f->w, f->b, mn, K);
    }
}

/* g through 16-bit copies of its operands; false (nothing queued) where g does not go that
 * way: the caller runs it on its fp32 operands (with afn, A's values computed first; a
 * LayerNorm's copy needs whole rows, so no split in depth). A block cuBLASLt has no algorithm
 * for runs on its fp32 operands (with afn, A's values computed whole at the first such
 * block). */
static bool gemm_staged(zt_kctx *ctx, const zt_cuda_gemm *g)
{
    if (!stage_usable(ctx) || g->in16 || g->batch != 1 || g->M <= 0 || g->N <= 0 || g->K <= 0)
        return false;
    stage_blocks bl;
    if (!stage_reserve(
            ctx, zt_cuda_stage_elems((size_t)g->M, (size_t)g->N, (size_t)g->K, ctx->stage_max)) ||
        !stage_plan(g, ctx->stage_cap, &bl) ||
        (g->afn && g->afn->kind == ZT_AFN_LAYERNORM && bl.kb != g->K))
        return false;
    /* op(B)'s block, the bias's 16-bit copy where D is 16-bit (out16 takes whole columns: one
     * copy), op(A)'s block */
    uint16_t *sb = ctx->stage;
    uint16_t *sbias = sb + zt_cuda_stage_pad((size_t)bl.kb * (size_t)bl.nb);
    uint16_t *sa = sbias + (stage_bias16(g) ? zt_cuda_stage_pad((size_t)bl.nb) : 0);
    int a_at[2] = {-1, -1}, b_at[2] = {-1, -1}; /* (m0, k0) and (k0, n0) now in the stage */
    bool act = false;                           /* with afn: A holds its values */
    for (int n0 = 0; n0 < g->N; n0 += bl.nb) {
        for (int k0 = 0; k0 < g->K; k0 += bl.kb) {
            for (int m0 = 0; m0 < g->M; m0 += bl.mb) {
                int mn = g->M - m0 < bl.mb ? g->M - m0 : bl.mb;
                int nn = g->N - n0 < bl.nb ? g->N - n0 : bl.nb;
                int kn = g->K - k0 < bl.kb ? g->K - k0 : bl.kb;
                zt_cuda_gemm part = stage_part(g, m0, mn, n0, nn, k0, kn);
                zt_cuda_gemm s = part;
                s.in16 = ctx->mm;
                s.A = sa, s.B = sb;
                s.lda = g->ta == 'N' ? kn : mn;
                s.ldb = g->tb == 'N' ? nn : kn;
                /* a 16-bit input of the staging's type in whole rows is read in place */
                bool home = g->afn && g->afn->kind == ZT_AFN_HOME16 && g->ta == 'N' && kn == g->K &&
                            g->lda == g->K;
                if (home) s.A = (const uint16_t *)g->afn->src16 + (size_t)m0 * g->K;
                if (stage_bias16(&s)) s.bias16 = sbias;
                lt_call c;
                lt_result r = lt_prepare(ctx, &s, s.bias != NULL, &c);
                if (r == LT_READY) {
                    if (!home && (a_at[0] != m0 || a_at[1] != k0)) {
                        if (g->afn)
                            afn_stage(ctx, sa, g->afn, g->lda, m0, mn, k0, kn);
                        else
                            stage_block(ctx, sa, g->A, g->lda, g->ta, m0, mn, k0, kn);
                        a_at[0] = m0, a_at[1] = k0;
                    }
                    if (b_at[0] != k0 || b_at[1] != n0) {
                        stage_block(ctx, sb, g->B, g->ldb, g->tb, k0, kn, n0, nn);
                        if (s.bias16)
                            zt_cuda_stage_cast(ctx, sbias, g->out16, s.bias, 1, nn, (size_t)nn);
                        b_at[0] = k0, b_at[1] = n0;
                    }
                    r = lt_launch(ctx, &s, s.bias != NULL, &c);
                }
                if (r == LT_NO_ALGO) {
                    if (g->afn && !act) {
                        afn_fp32(ctx, (float *)g->A, g->afn, 0, g->M, g->K);
                        act = true;
                    }
                    gemm_unstaged(ctx, &part);
                }
                if (ctx->st != ZT_OK) return true;
            }
        }
    }
    return true;
}

void zt_cuda_gemm_run(zt_kctx *ctx, const zt_cuda_gemm *g)
{
    if (!gemm_staged(ctx, g)) gemm_unstaged(ctx, g);
}

bool zt_cuda_gemm16_run(zt_kctx *ctx, const zt_cuda_gemm *g)
{
    return gemm_lt(ctx, g, false) != LT_NO_ALGO;
}

/* The linear layer's forward product: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias */
static zt_cuda_gemm linear_gemm(float *out, const float *inp, const float *weight,
                                const float *bias, int N, int C, int OC)
{
    zt_cuda_gemm g;
    memset(&g, 0, sizeof(g));
    g.ta = 'N', g.tb = 'T', g.M = N, g.N = OC, g.K = C, g.alpha = 1.0f, g.beta = 0.0f;
    g.A = inp, g.lda = C, g.B = weight, g.ldb = C, g.C = out, g.ldc = OC, g.batch = 1;
    g.bias = bias;
    return g;
}

/* g with a residual input res (NULL: none) added as its C (ops.h's matmul16_forward) */
static zt_cuda_gemm with_res(zt_cuda_gemm g, const float *res)
{
    if (res) g.Cin = res, g.beta = 1.0f;
    return g;
}

/* The buffer of a linear layer's backward from one set of 16-bit copies (zt_cuda_stage_bwd_elems
 * for up to N rows, C inputs, OC outputs): the weight (OC x C) whole at *sw, rounded here, then
 * room for blocks of *mb rows of the output gradient (mb x OC) at *sd and of the inputs (mb x C)
 * at *si; *mb is N where that fits the cap whole, else the most rows that fit. false (nothing
 * queued) where staging is off or no block of ZT_CUDA_STAGE_MIN_BLOCK rows fits beside the
 * weight. */
static bool bwd_copies(zt_kctx *ctx, const float *weight, int N, int C, int OC, uint16_t **sw,
                       uint16_t **sd, uint16_t **si, int *mb)
{
    if (!stage_usable(ctx) || N <= 0 || C <= 0 || OC <= 0) return false;
    size_t w = zt_cuda_stage_pad((size_t)OC * (size_t)C);
    if (!stage_reserve(ctx,
                       zt_cuda_stage_bwd_elems((size_t)N, (size_t)C, (size_t)OC, ctx->stage_max)) ||
        w + 128 >= ctx->stage_cap)
        return false;
    size_t whole = zt_cuda_stage_bwd_elems((size_t)N, (size_t)C, (size_t)OC, SIZE_MAX);
    *mb = whole <= ctx->stage_cap ? N
                                  : stage_fit(ctx->stage_cap - w - 128, (size_t)OC + (size_t)C, N);
    if (*mb <= 0) return false;
    *sw = ctx->stage;
    *sd = *sw + w;
    *si = *sd + zt_cuda_stage_pad((size_t)*mb * (size_t)OC);
    stage_block(ctx, *sw, weight, C, 'N', 0, OC, 0, C);
    return true;
}

/* A linear layer's two backward products from one set of 16-bit copies: the weight (OC x C)
 * whole, then dout and inp by blocks of mb token rows, each block giving its rows of dinp
 * (dinp += dout W; with pre, dinp = GELU'(pre) (dout W), the DGELU epilogue) and its share of
 * dweight (dweight += dout^T inp: blocks after the first add onto what the first wrote), so
 * that dout, the largest operand, is rounded once instead of once per product. With afn, inp's
 * values are afn's, rounded into its copy as they are computed (inp is only written, with them,
 * where a product falls back to the fp32 operands). With dbias, the
 * pass that rounds a block of dout also adds its column sums to dbias (zt_cuda_stage_cast_bias:
 * with one block, the bits of zt_cuda_bias_backward over all rows). The buffer:
 * zt_cuda_stage_bwd_elems. false (nothing queued, dbias untouched) where no block of at least
 * ZT_CUDA_STAGE_MIN_BLOCK rows fits beside the weight: the products go one by one.
 * With h (the MLP's 16-bit home, each tensor of the staging's type): dout16 is dout already
 * rounded, read in place (dbias from its values; dout is then fp32 room for them where a
 * product falls back); dinp16 receives dinp = GELU'(pre16) (dout W) rounded (the DGELU with a
 * 16-bit output, aux pre16; dinp is then fp32 room, and inp's rows hold pre16 widened where
 * that product falls back), or without pre16 dinp = dout W rounded (a 16-bit output; dinp
 * room). h->set: dinp is written (a GEMM with beta 0), not added to. */
typedef struct {
    void *dinp16;
    const void *pre16;
    const void *dout16;
    bool set; /* dinp written (dout W), not added */
} bwd16;

static bool backward_staged(zt_kctx *ctx, float *dinp, const float *pre, const zt_cuda_afn *afn,
                            const bwd16 *h, float *dweight, float *dbias, const float *dout,
                            float *inp, const float *weight, int N, int C, int OC)
{
    uint16_t *sw, *sd, *si;
    int mb;
    if (!dinp || !dweight || !bwd_copies(ctx, weight, N, C, OC, &sw, &sd, &si, &mb)) return false;
    const uint16_t *d16 = h ? h->dout16 : NULL;
    zt_dtype dt = mm_dtype(ctx->mm);
    for (int m0 = 0; m0 < N; m0 += mb) {
        int mn = N - m0 < mb ? N - m0 : mb;
        const uint16_t *sdb = sd; /* this block's copy of dout */
        if (d16) {
            sdb = d16 + (size_t)m0 * OC;
            if (dbias) zt_cuda_bias_backward16(ctx, dbias, sdb, ctx->mm, mn, OC);
        } else if (dbias) {
            zt_cuda_stage_cast_bias(ctx, sd, ctx->mm, dout + (size_t)m0 * OC, mn, OC, dbias);
        } else {
            stage_block(ctx, sd, dout, OC, 'N', m0, mn, 0, OC);
        }
        const uint16_t *sib = si;              /* this block's copy of inp */
        if (afn && afn->kind == ZT_AFN_HOME16) /* the staging's type already: read in place */
            sib = (const uint16_t *)afn->src16 + (size_t)m0 * C;
        else if (afn)
            afn_stage(ctx, si, afn, C, m0, mn, 0, C);
        else
            stage_block(ctx, si, inp, C, 'N', m0, mn, 0, C);
        /* dinp rows [m0, m0 + mn) (mn x C) += dout rows (mn x OC) @ weight (OC x C) */
        zt_cuda_gemm d;
        memset(&d, 0, sizeof(d));
        d.ta = 'N', d.tb = 'N', d.M = mn, d.N = C, d.K = OC, d.alpha = 1.0f;
        d.beta = pre || (h && (h->dinp16 || h->set)) ? 0.0f : 1.0f, d.batch = 1;
        d.A = dout + (size_t)m0 * OC, d.lda = OC, d.B = weight, d.ldb = C;
        d.C = dinp + (size_t)m0 * C, d.ldc = C;
        if (pre) d.aux = (float *)pre + (size_t)m0 * C, d.dgelu = 1;
        if (h && h->dinp16) {
            d.out16 = ctx->mm;
            d.C16 = (uint16_t *)h->dinp16 + (size_t)m0 * C;
            if (h->pre16) d.dgelu = 1, d.aux16 = (const uint16_t *)h->pre16 + (size_t)m0 * C;
        }
        /* dweight (OC x C) += dout rows^T (OC x mn) @ inp rows (mn x C) */
        zt_cuda_gemm g;
        memset(&g, 0, sizeof(g));
        g.ta = 'T', g.tb = 'N', g.M = OC, g.N = C, g.K = mn, g.alpha = 1.0f, g.beta = 1.0f;
        g.batch = 1, g.A = dout + (size_t)m0 * OC, g.lda = OC, g.B = inp + (size_t)m0 * C;
        g.ldb = C, g.C = dweight, g.ldc = C;
        zt_cuda_gemm parts[2] = {d, g};
        bool widened = false; /* d16: dout's rows in fp32 */
        for (int i = 0; i < 2; i++) {
            zt_cuda_gemm st = parts[i];
            st.in16 = ctx->mm;
            st.A = sdb, st.B = i == 0 ? (const void *)sw : (const void *)sib;
            if (gemm_lt(ctx, &st, false) == LT_NO_ALGO) {
                /* the fp32 operands' rows, now */
                if (d16 && !widened)
                    zt_cuda_cast(ctx, (float *)dout + (size_t)m0 * OC, (int)ZT_F32, sdb, (int)dt,
                                 (size_t)mn * (size_t)OC);
                widened = d16 != NULL;
                if (i == 1 && afn) afn_fp32(ctx, inp, afn, m0, mn, C);
                if (i == 0 && d.out16) {
                    /* the product in fp32 (with the DGELU on GELU's input widened into inp's
                     * rows, free until the second product), then rounded into dinp16 */
                    zt_cuda_gemm f = d;
                    size_t n = (size_t)mn * (size_t)C;
                    f.out16 = 0, f.C16 = NULL, f.aux16 = NULL;
                    if (d.dgelu) {
                        float *x = inp + (size_t)m0 * C;
                        zt_cuda_cast(ctx, x, (int)ZT_F32, d.aux16, (int)dt, n);
                        f.aux = x;
                    }
                    gemm_unstaged(ctx, &f);
                    zt_cuda_cast(ctx, d.C16, (int)dt, f.C, (int)ZT_F32, n);
                } else {
                    gemm_unstaged(ctx, &parts[i]);
                }
            }
            if (ctx->st != ZT_OK) return true;
        }
    }
    return true;
}

/* Whether dt is the 16-bit type ctx's matmuls take (and its staging and tensor-core attention
 * work in) */
static bool mm16_is(const zt_kctx *ctx, zt_dtype dt)
{
    return (ctx->mm == ZT_MM_BF16 && dt == ZT_BF16) || (ctx->mm == ZT_MM_FP16 && dt == ZT_F16);
}

/* The classifier (ops.h, classifier_forward_backward) through one set of 16-bit copies: wte
 * rounded once for all chunks; per chunk of mb rows, x's rows rounded once for the forward
 * product and dwte's, and the cross-entropy writing its dlogits rounded into the copy that dx's
 * and dwte's products read (zt_cuda_crossentropy16: the bits the staging of the fp32 dlogits
 * gives), so the largest tensor of the step is written once in 16 bits instead of written in
 * fp32, read and written again. The buffer is the one the lm head's backward takes
 * (bwd_copies with `rows`): chunks of `rows` where that fits whole (the products of the ops one
 * by one, on the same copies), else of the most rows that fit. A product cuBLASLt has no
 * algorithm for runs on the fp32 operands (a chunk's backward: on dlogits computed again in
 * fp32, in place). false (nothing queued) where staging is off or not fused
 * (ZT_CUDA_STAGE_FUSED=0), or no chunk of ZT_CUDA_STAGE_MIN_BLOCK rows fits beside wte: the ops
 * one by one. */
static bool classifier_staged(zt_kctx *ctx, zt_dtype dt16, float *losses, float *dx, float *dwte,
                              float *logits, const float *x, const float *wte,
                              const int32_t *targets, int N, int rows, int C, int V, int Vp,
                              float dloss)
{
    uint16_t *sw, *sd, *sx;
    int mb;
    if (!ctx->stage_fused || N <= 0 || !bwd_copies(ctx, wte, rows, C, Vp, &sw, &sd, &sx, &mb))
        return false;
    for (int r0 = 0; r0 < N; r0 += mb) {
        int m = N - r0 < mb ? N - r0 : mb;
        const float *xr = x + (size_t)r0 * C;
        stage_block(ctx, sx, xr, C, 'N', 0, m, 0, C);
        /* logits (m x Vp) = x rows (m x C) @ wte (Vp x C)^T; with dt16 a 16-bit D over the
         * buffer's start (l16), else, where cuBLASLt has no such product, fp32 then rounded */
        zt_cuda_gemm f = linear_gemm(logits, xr, wte, NULL, m, C, Vp), fs = f;
        fs.in16 = ctx->mm, fs.A = sx, fs.B = sw;
        uint16_t *l16 = NULL;
        if (dt16 != ZT_F32) fs.out16 = ctx->mm, fs.C16 = l16 = (uint16_t *)logits;
        if (gemm_lt(ctx, &fs, false) == LT_NO_ALGO) {
            l16 = NULL;
            gemm_unstaged(ctx, &f);
            if (dt16 != ZT_F32) zt_cuda_round16(ctx, logits, dt16, (size_t)m * (size_t)Vp);
        }
        if (ctx->st != ZT_OK) return true;
        if (!dx) {
            if (l16)
                zt_cuda_crossentropy16in(ctx, losses + r0, NULL, ctx->mm, l16, targets + r0, m, V,
                                         Vp, dloss);
            else
                zt_cuda_crossentropy(ctx, losses + r0, NULL, logits, targets + r0, m, V, Vp, dloss);
            continue;
        }
        /* dx rows (m x C) += dlogits (m x Vp) @ wte (Vp x C); dwte (Vp x C) += dlogits^T @ x
         * rows; A = logits where the products run on fp32 dlogits */
        zt_cuda_gemm d;
        memset(&d, 0, sizeof(d));
        d.ta = 'N', d.tb = 'N', d.M = m, d.N = C, d.K = Vp, d.alpha = 1.0f, d.beta = 1.0f;
        d.batch = 1, d.A = logits, d.lda = Vp, d.B = wte, d.ldb = C;
        d.C = dx + (size_t)r0 * C, d.ldc = C;
        zt_cuda_gemm g;
        memset(&g, 0, sizeof(g));
        g.ta = 'T', g.tb = 'N', g.M = Vp, g.N = C, g.K = m, g.alpha = 1.0f, g.beta = 1.0f;
        g.batch = 1, g.A = logits, g.lda = Vp, g.B = xr, g.ldb = C, g.C = dwte, g.ldc = C;
        zt_cuda_gemm ds = d, gs = g;
        ds.in16 = gs.in16 = ctx->mm;
        ds.A = gs.A = sd, ds.B = sw, gs.B = sx;
        if (l16)
            zt_cuda_crossentropy16in(ctx, losses + r0, sd, ctx->mm, l16, targets + r0, m, V, Vp,
                                     dloss);
        else
            zt_cuda_crossentropy16(ctx, losses + r0, sd, ctx->mm, logits, targets + r0, m, V, Vp,
                                   dloss);
        lt_result rd = gemm_lt(ctx, &ds, false);
        lt_result rg = dwte && rd != LT_NO_ALGO ? gemm_lt(ctx, &gs, false) : LT_DONE;
        if (ctx->st != ZT_OK) return true;
        if (rd == LT_NO_ALGO || rg == LT_NO_ALGO) {
            if (l16) { /* the fp32 logits again (the 16-bit ones sit where they would go) */
                gemm_unstaged(ctx, &f);
                zt_cuda_round16(ctx, logits, dt16, (size_t)m * (size_t)Vp);
            }
            zt_cuda_crossentropy(ctx, losses + r0, logits, logits, targets + r0, m, V, Vp, dloss);
            if (rd == LT_NO_ALGO) gemm_unstaged(ctx, &d);
            if (dwte) gemm_unstaged(ctx, &g);
            if (ctx->st != ZT_OK) return true;
        }
    }
    return true;
}

void zt_cuda_classifier(zt_kctx *ctx, float *losses, float *dx, float *dwte, float *logits,
                        const float *x, const float *wte, const int32_t *targets, int N, int rows,
                        int C, int V, int Vp, float dloss)
{
    if (classifier_staged(ctx, ZT_F32, losses, dx, dwte, logits, x, wte, targets, N, rows, C, V, Vp,
                          dloss))
        return;
    zt_classifier_by_ops(zt_ops_cuda(), ctx, losses, dx, dwte, logits, x, wte, targets, N, rows, C,
                         V, Vp, dloss);
}

/* With staged inputs of dt16 the GEMM writes 16-bit logits that the cross-entropy reads; else
 * the ops one by one with the logits rounded in place. */
void zt_cuda_classifier16(zt_kctx *ctx, zt_dtype dt16, float *losses, float *dx, float *dwte,
                          float *logits, const float *x, const float *wte, const int32_t *targets,
                          int N, int rows, int C, int V, int Vp, float dloss)
{
    if (mm16_is(ctx, dt16) && classifier_staged(ctx, dt16, losses, dx, dwte, logits, x, wte,
                                                targets, N, rows, C, V, Vp, dloss))
        return;
    zt_classifier16_by_ops(zt_ops_cuda(), ctx, dt16, losses, dx, dwte, logits, x, wte, targets, N,
                           rows, C, V, Vp, dloss);
}

/* Row-major C = alpha op(A) op(B) + beta C (+ bias), batched over `batch` matrices whose
 * starts are sA, sB, sC elements apart: the CPU backend's sgemm, on the context's stream. */
static void gemm(zt_kctx *ctx, char ta, char tb, int M, int N, int K, float alpha, const float *A,
                 int lda, long long sA, const float *B, int ldb, long long sB, float beta, float *C,
                 int ldc, long long sC, int batch, const float *bias)
{
    zt_cuda_gemm g;
    memset(&g, 0, sizeof(g));
    g.ta = ta, g.tb = tb, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
    g.A = A, g.lda = lda, g.sA = sA, g.B = B, g.ldb = ldb, g.sB = sB, g.C = C, g.ldc = ldc;
    g.sC = sC, g.batch = batch, g.bias = bias;
    zt_cuda_gemm_run(ctx, &g);
}

/* gemm on the fp32 operands as they are (the chunked attention's products: a plan counts
 * staging for the linear layers only, zt_gpt2_stage_elems) */
static void gemm_fp32(zt_kctx *ctx, char ta, char tb, int M, int N, int K, float alpha,
                      const float *A, int lda, long long sA, const float *B, int ldb, long long sB,
                      float beta, float *C, int ldc, long long sC, int batch)
{
    zt_cuda_gemm g;
    memset(&g, 0, sizeof(g));
    g.ta = ta, g.tb = tb, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
    g.A = A, g.lda = lda, g.sA = sA, g.B = B, g.ldb = ldb, g.sB = sB, g.C = C, g.ldc = ldc;
    g.sC = sC, g.batch = batch;
    gemm_unstaged(ctx, &g);
}

/* ---------------------------------------------------------------------------------------- */
/* linear layer */

void zt_cuda_matmul_forward(zt_kctx *ctx, float *out, const float *inp, const float *weight,
                            const float *bias, int N, int C, int OC)
{
    zt_cuda_gemm g = linear_gemm(out, inp, weight, bias, N, C, OC);
    zt_cuda_gemm_run(ctx, &g);
}

void zt_cuda_matmul_gelu_forward(zt_kctx *ctx, float *out, float *pre, const float *inp,
                                 const float *weight, const float *bias, int N, int C, int OC)
{
    zt_cuda_gemm g = linear_gemm(out, inp, weight, bias, N, C, OC);
    g.aux = pre;
    zt_cuda_gemm_run(ctx, &g);
}

void zt_cuda_matmul_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight, int N, int C,
                             int OC)
{
    /* inp is only read without afn */
    if (backward_staged(ctx, dinp, NULL, NULL, NULL, dweight, dbias, dout, (float *)inp, weight, N,
                        C, OC))
        return;
    /* dinp (N, C) += dout (N, OC) @ weight (OC, C) */
    if (dinp)
        gemm(ctx, 'N', 'N', N, C, OC, 1.0f, dout, OC, 0, weight, C, 0, 1.0f, dinp, C, 0, 1, NULL);
    /* dweight (OC, C) += dout^T (OC, N) @ inp (N, C) */
    if (dweight)
        gemm(ctx, 'T', 'N', OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dweight, C, 0, 1, NULL);
    if (dbias) zt_cuda_bias_backward(ctx, dbias, dout, N, OC);
}

void zt_cuda_matmul_gelu_backward(zt_kctx *ctx, float *dpre, float *dweight, float *dbias,
                                  const float *dout, float *inp, const float *weight,
                                  const float *pre, int N, int C, int OC)
{
    /* dpre (N, C) = GELU'(pre) * (dout (N, OC) @ weight (OC, C)): the DGELU epilogue reads
     * pre (its aux, never written with dgelu) */
    zt_cuda_afn f = {.kind = ZT_AFN_GELU, .src = pre};
    const zt_cuda_afn *fa = ctx->stage_fused ? &f : NULL; /* inp's copy from GELU(pre) */
    bool need = dweight && N > 0 && C > 0;
    if (need && !fa) afn_fp32(ctx, inp, &f, 0, N, C);
    if (backward_staged(ctx, dpre, pre, fa, NULL, dweight, dbias, dout, inp, weight, N, C, OC))
        return;
    if (need && fa) afn_fp32(ctx, inp, &f, 0, N, C);
    zt_cuda_gemm g;
    memset(&g, 0, sizeof(g));
    g.ta = 'N', g.tb = 'N', g.M = N, g.N = C, g.K = OC, g.alpha = 1.0f, g.beta = 0.0f;
    g.A = dout, g.lda = OC, g.B = weight, g.ldb = C, g.C = dpre, g.ldc = C, g.batch = 1;
    g.aux = (float *)pre, g.dgelu = 1;
    zt_cuda_gemm_run(ctx, &g);
    zt_cuda_matmul_backward(ctx, NULL, dweight, dbias, dout, inp, weight, N, C, OC);
}

/* out (N, OC) = A (N, C) @ weight (OC, C)^T + bias where A's values are f's: matmul_forward's
 * product with A in the caller's scratch `act`, its copy rounded from f where staged (and
 * fused), act written with them otherwise; res (N, OC, or NULL) added as the GEMM's C */
static void linear_from(zt_kctx *ctx, float *out, float *act, const zt_cuda_afn *f,
                        const float *weight, const float *bias, const float *res, int N, int C,
                        int OC)
{
    zt_cuda_gemm g = with_res(linear_gemm(out, act, weight, bias, N, C, OC), res);
    g.afn = f;
    if (ctx->stage_fused && gemm_staged(ctx, &g)) return;
    if (N > 0 && C > 0) afn_fp32(ctx, act, f, 0, N, C);
    g.afn = NULL;
    zt_cuda_gemm_run(ctx, &g);
}

void zt_cuda_gelu_matmul_forward(zt_kctx *ctx, float *out, float *act, const float *pre,
                                 const float *weight, const float *bias, int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_GELU, .src = pre};
    linear_from(ctx, out, act, &f, weight, bias, NULL, N, C, OC);
}

/* Whether a 16-bit input of type dt16 is the staging's own type: matmuls staged in it, with
 * fused copies */
static bool in16_stageable(const zt_kctx *ctx, zt_dtype dt16)
{
    return ctx->stage_fused && mm16_is(ctx, dt16);
}

void zt_cuda_matmul16_forward(zt_kctx *ctx, float *out, float *act, const void *in16, zt_dtype dt16,
                              const float *weight, const float *bias, const float *res, int N,
                              int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_HOME16, .src16 = in16, .dtype = (int)dt16};
    if (in16_stageable(ctx, dt16)) {
        linear_from(ctx, out, act, &f, weight, bias, res, N, C, OC);
        return;
    }
    if (N > 0 && C > 0) afn_fp32(ctx, act, &f, 0, N, C);
    zt_cuda_gemm g = with_res(linear_gemm(out, act, weight, bias, N, C, OC), res);
    zt_cuda_gemm_run(ctx, &g);
}

/* n floats of a gradient cleared for a fallback that adds into it, in an op that writes it
 * (what: which gradient); false where that failed (ctx's error set) */
static bool grad_clear(zt_kctx *ctx, float *g, size_t n, const char *what)
{
    return !g || !n ||
           !zt_cuda_check(ctx, cudaMemsetAsync(g, 0, n * sizeof(float), ctx->stream), what);
}

/* dinp (N x C): a linear layer's input gradient */
static void dinp_clear(zt_kctx *ctx, float *dinp, int N, int C)
{
    if (N > 0 && C > 0)
        grad_clear(ctx, dinp, (size_t)N * (size_t)C, "clearing a linear layer's input gradient");
}

void zt_cuda_matmul16_backward(zt_kctx *ctx, float *dinp, void *dinp16, float *dweight,
                               float *dbias, const float *dout, float *act, const void *in16,
                               zt_dtype dt16, const float *weight, int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_HOME16, .src16 = in16, .dtype = (int)dt16};
    bwd16 h = {.dinp16 = dinp16, .set = true};
    if (in16_stageable(ctx, dt16) &&
        backward_staged(ctx, dinp, NULL, &f, &h, dweight, dbias, dout, act, weight, N, C, OC))
        return;
    if (dweight && N > 0 && C > 0) afn_fp32(ctx, act, &f, 0, N, C);
    dinp_clear(ctx, dinp, N, C);
    zt_cuda_matmul_backward(ctx, dinp, dweight, dbias, dout, act, weight, N, C, OC);
    if (dinp16 && dinp && N > 0 && C > 0)
        zt_cuda_cast(ctx, dinp16, (int)dt16, dinp, (int)ZT_F32, (size_t)N * (size_t)C);
}

/* The MLP with its 16-bit home (ops.h): fc's output rounded by the GEMM itself (a 16-bit D),
 * GELU of it rounded into fcproj's copy, the DGELU with the home as its input writing the
 * gradient rounded, which fc's backward then reads in place as its dout copy. Where the home is
 * not the staging's type, or staging is off or unfused: the fp32 ops on the widened values,
 * rounded where the op's output is 16-bit. */
void zt_cuda_matmul_forward16(zt_kctx *ctx, void *out16, zt_dtype dt16, float *act,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C, int OC)
{
    if (in16_stageable(ctx, dt16)) {
        zt_cuda_gemm g = linear_gemm(act, inp, weight, bias, N, C, OC);
        g.out16 = ctx->mm, g.C16 = out16;
        if (gemm_staged(ctx, &g)) return;
    }
    zt_cuda_matmul_forward(ctx, act, inp, weight, bias, N, C, OC);
    if (N > 0 && OC > 0)
        zt_cuda_cast(ctx, out16, (int)dt16, act, (int)ZT_F32, (size_t)N * (size_t)OC);
}

void zt_cuda_gelu16_matmul_forward(zt_kctx *ctx, float *out, float *act, const void *pre16,
                                   zt_dtype dt16, const float *weight, const float *bias,
                                   const float *res, int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_GELU16, .src16 = pre16, .dtype = (int)dt16};
    linear_from(ctx, out, act, &f, weight, bias, res, N, C, OC);
}

void zt_cuda_matmul_gelu16_backward(zt_kctx *ctx, void *dpre16, float *dweight, float *dbias,
                                    const float *dout, float *act, float *dact, const float *weight,
                                    const void *pre16, zt_dtype dt16, int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_GELU16, .src16 = pre16, .dtype = (int)dt16};
    bwd16 h = {.dinp16 = dpre16, .pre16 = pre16};
    if (in16_stageable(ctx, dt16) &&
        backward_staged(ctx, dact, NULL, &f, &h, dweight, dbias, dout, act, weight, N, C, OC))
        return;
    if (N <= 0 || C <= 0) return;
    size_t n = (size_t)N * (size_t)C;
    /* act = pre; dact = GELU'(pre) (dout W), rounded into dpre16; act = GELU(pre) in place for
     * the weight's gradient */
    zt_cuda_cast(ctx, act, (int)ZT_F32, pre16, (int)dt16, n);
    zt_cuda_matmul_gelu_backward(ctx, dact, NULL, NULL, dout, NULL, weight, act, N, C, OC);
    zt_cuda_cast(ctx, dpre16, (int)dt16, dact, (int)ZT_F32, n);
    if (!dweight && !dbias) return;
    zt_cuda_gelu_forward(ctx, act, act, n);
    zt_cuda_matmul_backward(ctx, NULL, dweight, dbias, dout, act, weight, N, C, OC);
}

void zt_cuda_layernorm_matmul16_backward(zt_kctx *ctx, float *dinp, void *dinp16, float *dweight,
                                         float *dbias, const void *dout16, zt_dtype dt16,
                                         float *dact, float *ln, const float *x, const float *lnw,
                                         const float *lnb, const float *weight, int N, int C,
                                         int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_LAYERNORM, .src = x, .w = lnw, .b = lnb};
    bwd16 h = {.dout16 = dout16, .dinp16 = dinp16, .set = true};
    if (in16_stageable(ctx, dt16) &&
        backward_staged(ctx, dinp, NULL, &f, &h, dweight, dbias, dact, ln, weight, N, C, OC))
        return;
    dinp_clear(ctx, dinp, N, C);
    if (N > 0 && OC > 0)
        zt_cuda_cast(ctx, dact, (int)ZT_F32, dout16, (int)dt16, (size_t)N * (size_t)OC);
    zt_cuda_layernorm_matmul_backward(ctx, dinp, dweight, dbias, dact, ln, x, lnw, lnb, weight, N,
                                      C, OC);
    if (dinp16 && dinp && N > 0 && C > 0)
        zt_cuda_cast(ctx, dinp16, (int)dt16, dinp, (int)ZT_F32, (size_t)N * (size_t)C);
}

void zt_cuda_layernorm_matmul_forward(zt_kctx *ctx, float *out, float *ln, float *mean, float *rstd,
                                      const float *x, const float *lnw, const float *lnb,
                                      const float *weight, const float *bias, int N, int C, int OC)
{
    zt_cuda_afn f = {
        .kind = ZT_AFN_LAYERNORM, .src = x, .w = lnw, .b = lnb, .mean = mean, .rstd = rstd};
    linear_from(ctx, out, ln, &f, weight, bias, NULL, N, C, OC);
}

/* qkv's 16-bit home written by the GEMM itself, as matmul_forward16's */
void zt_cuda_layernorm_matmul_forward16(zt_kctx *ctx, void *out16, zt_dtype dt16, float *out,
                                        float *ln, float *mean, float *rstd, const float *x,
                                        const float *lnw, const float *lnb, const float *weight,
                                        const float *bias, int N, int C, int OC)
{
    zt_cuda_afn f = {
        .kind = ZT_AFN_LAYERNORM, .src = x, .w = lnw, .b = lnb, .mean = mean, .rstd = rstd};
    if (in16_stageable(ctx, dt16)) {
        zt_cuda_gemm g = linear_gemm(out, ln, weight, bias, N, C, OC);
        g.afn = &f, g.out16 = ctx->mm, g.C16 = out16;
        if (gemm_staged(ctx, &g)) return;
    }
    zt_cuda_layernorm_matmul_forward(ctx, out, ln, mean, rstd, x, lnw, lnb, weight, bias, N, C, OC);
    if (N > 0 && OC > 0)
        zt_cuda_cast(ctx, out16, (int)dt16, out, (int)ZT_F32, (size_t)N * (size_t)OC);
}

void zt_cuda_layernorm_matmul_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                       const float *dout, float *ln, const float *x,
                                       const float *lnw, const float *lnb, const float *weight,
                                       int N, int C, int OC)
{
    zt_cuda_afn f = {.kind = ZT_AFN_LAYERNORM, .src = x, .w = lnw, .b = lnb};
    if (ctx->stage_fused &&
        backward_staged(ctx, dinp, NULL, &f, NULL, dweight, dbias, dout, ln, weight, N, C, OC))
        return;
    if (dweight && N > 0 && C > 0) afn_fp32(ctx, ln, &f, 0, N, C);
    zt_cuda_matmul_backward(ctx, dinp, dweight, dbias, dout, ln, weight, N, C, OC);
}

/* ---------------------------------------------------------------------------------------- */
/* attention. For sequence b, head h: Q, K, V are T x hs views of qkv (row stride 3C, head h at
 * column h*hs); the scores and their gradients are T x T per (b, h) in the scratch. One
 * strided-batched GEMM covers the NH heads of a sequence (head stride hs in qkv and out, T*T in
 * the scratch). attn_cuda.cu's fused kernels run instead where zt_cuda_attn_fused says (by
 * default for 16-bit matmul inputs; ZT_CUDA_ATTN chooses). Sequences go through in chunks of
 * zt_attention_chunk_seqs: region S of the scratch holds a chunk's scores (then
 * probabilities), region D their gradients. The full T x T products are computed and the row
 * kernels zero the causal upper triangle, so the following GEMMs may run over whole rows. */

/* S = scale Q K^T for sequences [b0, b1), sequence b at S + (b - b0) NH T T: the scores forward
 * computes and backward recomputes, by the same calls. */
static void attn_scores(zt_kctx *ctx, float *S, const float *qkv, int b0, int b1, int T, int C,
                        int NH)
{
    int hs = C / NH, C3 = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = b0; b < b1; b++) {
        const float *q = qkv + (size_t)b * T * C3;
        gemm_fp32(ctx, 'N', 'T', T, T, hs, scale, q, C3, hs, q + C, C3, hs, 0.0f,
                  S + (size_t)(b - b0) * NH * TT, T, TT, NH);
    }
}

static void attn_chunked_forward(zt_kctx *ctx, float *out, float *lse, float *scratch,
                                 const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    int chunk = zt_attention_chunk_seqs(B, T, NH);
    long long TT = (long long)T * T;
    size_t seq = (size_t)NH * (size_t)TT; /* scratch floats per sequence and region */
    float *S = scratch;
    for (int b0 = 0; b0 < B; b0 += chunk) {
        int b1 = B - b0 < chunk ? B : b0 + chunk;
        attn_scores(ctx, S, qkv, b0, b1, T, C, NH);
        zt_cuda_attn_softmax(ctx, S, lse + (size_t)b0 * NH * T, (size_t)(b1 - b0) * NH * T, T);
        for (int b = b0; b < b1; b++) { /* out = P V */
            const float *q = qkv + (size_t)b * T * C3;
            gemm_fp32(ctx, 'N', 'N', T, hs, T, 1.0f, S + (size_t)(b - b0) * seq, T, TT, q + 2 * C,
                      C3, hs, 0.0f, out + (size_t)b * T * C, C, hs, NH);
        }
    }
}

static void attn_chunked_backward(zt_kctx *ctx, float *dqkv, float *scratch, const float *dout,
                                  const float *qkv, const float *out, const float *lse, int B,
                                  int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    int chunk = zt_attention_chunk_seqs(B, T, NH);
    long long TT = (long long)T * T;
    size_t seq = (size_t)NH * (size_t)TT;
    float scale = 1.0f / sqrtf((float)hs);
    float *S = scratch, *D = scratch + (size_t)chunk * seq;
    for (int b0 = 0; b0 < B; b0 += chunk) {
        int b1 = B - b0 < chunk ? B : b0 + chunk;
        size_t rows = (size_t)(b1 - b0) * NH * T;
        attn_scores(ctx, S, qkv, b0, b1, T, C, NH); /* as the forward computed them */
        /* P = exp(S - lse), zero above the diagonal */
        zt_cuda_attn_probs(ctx, S, lse + (size_t)b0 * NH * T, rows, T);
        for (int b = b0; b < b1; b++) {
            const float *q = qkv + (size_t)b * T * C3;
            float *dq = dqkv + (size_t)b * T * C3;
            const float *dO = dout + (size_t)b * T * C;
            /* dP = dO V^T */
            gemm_fp32(ctx, 'N', 'T', T, T, hs, 1.0f, dO, C, hs, q + 2 * C, C3, hs, 0.0f,
                      D + (size_t)(b - b0) * seq, T, TT, NH);
            /* dV += P^T dO */
            gemm_fp32(ctx, 'T', 'N', T, hs, T, 1.0f, S + (size_t)(b - b0) * seq, T, TT, dO, C, hs,
                      1.0f, dq + 2 * C, C3, hs, NH);
        }
        /* dS = P * (dP - dO.out) * scale, zero above the diagonal */
        zt_cuda_attn_dscores(ctx, D, S, dout + (size_t)b0 * T * C, out + (size_t)b0 * T * C, rows,
                             T, NH, C, scale);
        for (int b = b0; b < b1; b++) {
            const float *q = qkv + (size_t)b * T * C3;
            float *dq = dqkv + (size_t)b * T * C3;
            const float *dS = D + (size_t)(b - b0) * seq;
            /* dQ += dS K */
            gemm_fp32(ctx, 'N', 'N', T, hs, T, 1.0f, dS, T, TT, q + C, C3, hs, 1.0f, dq, C3, hs,
                      NH);
            /* dK += dS^T Q */
            gemm_fp32(ctx, 'T', 'N', T, hs, T, 1.0f, dS, T, TT, q, C3, hs, 1.0f, dq + C, C3, hs,
                      NH);
        }
    }
}

/* Whether the attention takes the 16-bit homes (NULL: none) as its own copies: the
 * tensor-core kernels run, their 16-bit type is the homes', and the homes are 16-byte aligned
 * as the kernels' vector copies need (the engine's are; elsewhere the homes are cast). */
static bool attn_home_direct(const zt_kctx *ctx, int B, int T, int C, int NH,
                             const zt_attn_home *home)
{
    return home && zt_cuda_attn_fused(ctx, B, T, C, NH) && mm16_is(ctx, home->dtype) &&
           ((uintptr_t)home->qkv % 16 | (uintptr_t)home->out % 16) == 0;
}

void zt_cuda_attention_forward(zt_kctx *ctx, float *out, float *lse, float *scratch, float *qkv,
                               const zt_attn_home *home, int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    size_t n = (size_t)B * T * C;
    bool direct = attn_home_direct(ctx, B, T, C, NH, home);
    bool set = home && home->qkv && home->qkv_set; /* qkv is read from its home */
    if (set && !direct)                            /* the fp32 values, for kernels that read them */
        zt_cuda_cast(ctx, qkv, (int)ZT_F32, home->qkv, (int)home->dtype, 3 * n);
    else if (home && home->qkv && !direct)
        zt_cuda_cast(ctx, home->qkv, (int)home->dtype, qkv, (int)ZT_F32, 3 * n);
    if (zt_cuda_attn_fused(ctx, B, T, C, NH))
        zt_cuda_attn_fused_forward(ctx, out, lse, scratch, zt_attention_scratch_floats(B, T, NH),
                                   set && direct ? NULL : qkv,
                                   direct ? (uint16_t *)home->qkv : NULL,
                                   direct ? (uint16_t *)home->out : NULL, B, T, C, NH);
    else
        attn_chunked_forward(ctx, out, lse, scratch, qkv, B, T, C, NH);
    if (home && home->out && !direct)
        zt_cuda_cast(ctx, home->out, (int)home->dtype, out, (int)ZT_F32, n);
}

/* attention_backward, or with dq16 (NULL: none) attention_backward16 by the tensor-core
 * kernels writing the rounded gradient there themselves; with dout16 (NULL: none) those
 * kernels read dO there (the caller has seen that they run, in its type, on aligned rows) */
static void attention_backward(zt_kctx *ctx, float *dqkv, uint16_t *dq16, float *scratch,
                               const float *dout, const uint16_t *dout16, float *qkv, float *out,
                               const float *lse, const zt_attn_home *home, int B, int T, int C,
                               int NH)
{
    size_t n = (size_t)B * T * C;
    bool direct = attn_home_direct(ctx, B, T, C, NH, home);
    /* the fp32 values, for kernels that read them */
    if (home && home->qkv && !direct)
        zt_cuda_cast(ctx, qkv, (int)ZT_F32, home->qkv, (int)home->dtype, 3 * n);
    if (home && home->out && !direct)
        zt_cuda_cast(ctx, out, (int)ZT_F32, home->out, (int)home->dtype, n);
    if (zt_cuda_attn_fused(ctx, B, T, C, NH))
        zt_cuda_attn_fused_backward(ctx, dqkv, dq16, scratch, zt_attention_scratch_floats(B, T, NH),
                                    dout, dout16, qkv, direct ? (const uint16_t *)home->qkv : NULL,
                                    out, direct ? (const uint16_t *)home->out : NULL, lse, B, T, C,
                                    NH);
    else
        attn_chunked_backward(ctx, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH);
}

void zt_cuda_attention_backward(zt_kctx *ctx, float *dqkv, float *scratch, const float *dout,
                                float *qkv, float *out, const float *lse, const zt_attn_home *home,
                                int B, int T, int C, int NH)
{
    if (!dqkv || B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    attention_backward(ctx, dqkv, NULL, scratch, dout, NULL, qkv, out, lse, home, B, T, C, NH);
}

/* The tensor-core kernels write the rounded gradient themselves where they run in dt16, dQ by
 * its own kernel (the others sum dQ in fp32 first) and dqkv16 is 4-byte aligned (their paired
 * stores); elsewhere the fp32 gradient from zeros in the room, then the cast. They read dout16
 * in place where they run in its type and it is 16-byte aligned (their vector copies); else it
 * is widened into dout first. Where cuDNN runs the attention (by default) and can take the homes,
 * the 16-bit gradient is offered to it whatever ZT_CUDA_ATTN_DQ says (atomic: its graph that sums
 * dQ by atomics; where it declines, the kernels with dQ by its own kernel). */
void zt_cuda_attention_backward16(zt_kctx *ctx, void *dqkv16, zt_dtype dt16, float *dqkv,
                                  float *scratch, float *dout, const void *dout16, float *qkv,
                                  float *out, const float *lse, const zt_attn_home *home, int B,
                                  int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    bool tc = zt_cuda_attn_fused(ctx, B, T, C, NH) && mm16_is(ctx, dt16);
    const uint16_t *d16 = tc && dout16 && (uintptr_t)dout16 % 16 == 0 ? dout16 : NULL;
    if (dout16 && !d16)
        zt_cuda_cast(ctx, dout, (int)ZT_F32, dout16, (int)dt16, (size_t)B * T * (size_t)C);
    bool dnn = ctx->attn_cudnn && d16 && attn_home_direct(ctx, B, T, C, NH, home);
    if (tc && (ctx->attn_dq == ZT_ATTN_DQ_KERNEL || dnn) && (uintptr_t)dqkv16 % 4 == 0) {
        attention_backward(ctx, dqkv, dqkv16, scratch, dout, d16, qkv, out, lse, home, B, T, C, NH);
        return;
    }
    size_t n3 = (size_t)B * T * 3 * (size_t)C;
    if (!grad_clear(ctx, dqkv, n3, "clearing the attention's gradient")) return;
    attention_backward(ctx, dqkv, NULL, scratch, dout, d16, qkv, out, lse, home, B, T, C, NH);
    zt_cuda_cast(ctx, dqkv16, (int)dt16, dqkv, (int)ZT_F32, n3);
}
