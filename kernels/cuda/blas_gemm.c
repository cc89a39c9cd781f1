/* zerotrain: the CUDA backend's GEMM on cuBLASLt (zt_cuda_gemm_run): fp32 in and out, fp32
 * accumulate, the inputs rounded to the context's zt_cuda_mm (the compute type: exact fp32,
 * TF32, bf16 or fp16 tensor cores), 16-bit ones into 16-bit copies first (staging, below).
 * Algorithm choices are cached per shape: the heuristic's first, or with ZT_CUDA_GEMM_TUNE=1 the
 * fastest of its first ZT_CUDA_TUNE_ALGOS, timed at the shape's first call. Tuning is off by
 * default because timings vary from run to run, and so would the choice and the low bits of
 * every result (two runs of one job stop being bitwise equal); what it gains and loses on a GPU
 * is in docs/performance.md. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <string.h>

#include "blas_int.h"
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
zt_dtype zt_blas_mm_dtype(int mm16)
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

/* One cuBLASLt call set up: its descriptors and the cached algorithm. */
typedef struct {
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t la, lb, lc;
    zt_cuda_gemm_entry *e;
    int gelu;
} lt_call;

/* Sets up the cuBLASLt call for g (bias as an epilogue when use_bias, GELU with its input kept
 * in aux when g->aux) and finds its algorithm: ZT_LT_READY, or ZT_LT_NO_ALGO (cuBLASLt has none:
 * the entry remembers it), or ZT_LT_DONE with a failure recorded. */
static zt_lt_result lt_prepare(zt_kctx *ctx, const zt_cuda_gemm *g, bool use_bias, lt_call *c)
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
    if (b16 && !g->bias16) return ZT_LT_NO_ALGO;
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
        return ZT_LT_DONE;
    }
    c->e = algo_for(ctx, &key, g, op, la, lb, lc);
    return c->e->usable ? ZT_LT_READY : ZT_LT_NO_ALGO;
}

/* Queues the call lt_prepare set up for g. A problem cuBLASLt refuses now is remembered in the
 * algorithm cache so that later calls go straight to the caller's fallback (ZT_LT_NO_ALGO). */
static zt_lt_result lt_launch(zt_kctx *ctx, const zt_cuda_gemm *g, bool use_bias, lt_call *c)
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
        return ZT_LT_NO_ALGO;
    }
    if (s != CUBLAS_STATUS_SUCCESS) {
        zt_cuda_fail(
            ctx, ZT_ERR_CUDA, "GPU %d: cublasLtMatmul (%c%c M=%d N=%d K=%d batch=%d) failed: %s",
            ctx->device, g->ta, g->tb, g->M, g->N, g->K, g->batch, cublasLtGetStatusString(s));
    }
    return ZT_LT_DONE;
}

/* One cuBLASLt call for g: lt_prepare, then lt_launch. */
zt_lt_result zt_blas_gemm_lt(zt_kctx *ctx, const zt_cuda_gemm *g, bool use_bias)
{
    lt_call c;
    zt_lt_result r = lt_prepare(ctx, g, use_bias, &c);
    return r == ZT_LT_READY ? lt_launch(ctx, g, use_bias, &c) : r;
}

/* zt_cuda_gemm_run on g's own (fp32) operands */
void zt_blas_gemm_unstaged(zt_kctx *ctx, const zt_cuda_gemm *g)
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
        if (g->K > 0 && zt_blas_gemm_lt(ctx, g, g->bias != NULL) == ZT_LT_DONE) return;
        zt_cuda_gemm f = *g;
        f.Cin = NULL;
        f.beta = 0.0f;
        zt_blas_gemm_unstaged(ctx, &f);
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
        zt_blas_gemm_unstaged(ctx, &f);
        zt_cuda_cast(ctx, g->C16, (int)zt_blas_mm_dtype(g->out16), g->C, (int)ZT_F32,
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
        if (g->K > 0 && g->ldc % 8 == 0 && zt_blas_gemm_lt(ctx, g, g->bias != NULL) == ZT_LT_DONE)
            return;
        zt_cuda_gemm plain = *g;
        plain.aux = NULL;
        plain.dgelu = 0;
        size_t n = (size_t)g->M * (size_t)g->N;
        if (g->dgelu) { /* the product into C, then GELU' of aux onto it */
            zt_blas_gemm_unstaged(ctx, &plain);
            zt_cuda_gelu_grad_inplace(ctx, g->C, g->aux, n);
            return;
        }
        plain.C = g->aux;
        zt_blas_gemm_unstaged(ctx, &plain);
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
    if (zt_blas_gemm_lt(ctx, g, g->bias != NULL) == ZT_LT_DONE) return;
    if (g->bias && g->batch == 1 && g->beta == 0.0f && g->ldc == g->N) {
        /* no fused-bias algorithm: start C from the bias and accumulate onto it */
        zt_cuda_bias_fill(ctx, g->C, g->bias, g->M, g->N);
        zt_cuda_gemm plain = *g;
        plain.bias = NULL;
        plain.beta = 1.0f;
        if (zt_blas_gemm_lt(ctx, &plain, false) == ZT_LT_DONE) return;
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
            if (zt_blas_gemm_lt(ctx, &one, false) != ZT_LT_DONE) break;
            if (i + 1 == g->batch) return;
        }
    }
    zt_cuda_fail(
        ctx, ZT_ERR_CUDA,
        "GPU %d: cuBLASLt offers no algorithm for the matmul %c%c M=%d N=%d K=%d lda=%d ldb=%d ldc=%d batch=%d; report this with the model shape",
        ctx->device, g->ta, g->tb, g->M, g->N, g->K, g->lda, g->ldb, g->ldc, g->batch);
}

/* ---------------------------------------------------------------------------------------- */
/* 16-bit staging (cuda_plan.h, ZT_CUDA_GEMM_STAGE): a product with 16-bit inputs rounds op(A) and
 * op(B) into ctx->stage (op(B)'s block first, padded to 256 bytes, then op(A)'s) and has
 * cuBLASLt multiply the copies. Operands that do not fit the cap go in blocks, in this order
 * of preference, each staging every element once: rows of C (op(B) whole), columns of C (op(A)
 * whole), depth (each block's product added onto C: beta 1 after the first, the bias with the
 * first). A GELU epilogue needs each sum whole and each row of aux whole, and a 16-bit output
 * (out16) each sum whole and rows of it whole where they fall back, so they take rows only; a
 * residual input (Cin) rows or depth (whole rows where a block falls back to the two ops). No
 * block worth a product (under ZT_CUDA_STAGE_MIN_BLOCK): the fp32 operands as before. */

typedef struct {
    int mb, nb, kb; /* block sizes along M, N, K */
} stage_blocks;

int zt_blas_stage_fit(size_t room, size_t per, int whole)
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
    if (pb < cap && (b->mb = zt_blas_stage_fit(cap - pb, K, g->M)) > 0) return true; /* rows */
    b->mb = g->M;
    if (g->aux || g->out16) return false;
    /* columns: op(B)'s blocks padded (at most 127 elements) */
    if (!g->Cin && pa + 128 < cap && (b->nb = zt_blas_stage_fit(cap - pa - 128, K, g->N)) > 0)
        return true;
    b->nb = g->N;
    /* depth: pad(kb N) + M kb <= cap */
    return cap > 128 && (b->kb = zt_blas_stage_fit(cap - 128, M + N, g->K)) > 0;
}

/* Makes ctx->stage hold at least n elements (the old buffer is released once the stream is
 * done with it); false where the GPU has no room (reported once per size: the products run
 * unstaged) */
bool zt_blas_stage_reserve(zt_kctx *ctx, size_t n)
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
void zt_blas_stage_block(zt_kctx *ctx, uint16_t *dst, const void *X, int ld, char t, int r0, int rn,
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

bool zt_blas_stage_usable(const zt_kctx *ctx)
{
    return ctx->stage_on && (ctx->mm == ZT_MM_BF16 || ctx->mm == ZT_MM_FP16);
}

/* Rounds the block of A = afn's values that holds rows [m0, m0 + mn) and columns [k0, k0 + kn)
 * into dst (leading dimension kn), A's row stride ld; a LayerNorm takes whole rows (k0 0, kn
 * its C), writing their statistics where afn asks. */
void zt_blas_afn_stage(zt_kctx *ctx, uint16_t *dst, const zt_cuda_afn *f, int ld, int m0, int mn,
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
void zt_blas_afn_fp32(zt_kctx *ctx, float *A, const zt_cuda_afn *f, int m0, int mn, int K)
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
bool zt_blas_gemm_staged(zt_kctx *ctx, const zt_cuda_gemm *g)
{
    if (!zt_blas_stage_usable(ctx) || g->in16 || g->batch != 1 || g->M <= 0 || g->N <= 0 ||
        g->K <= 0)
        return false;
    stage_blocks bl;
    if (!zt_blas_stage_reserve(
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
                zt_lt_result r = lt_prepare(ctx, &s, s.bias != NULL, &c);
                if (r == ZT_LT_READY) {
                    if (!home && (a_at[0] != m0 || a_at[1] != k0)) {
                        if (g->afn)
                            zt_blas_afn_stage(ctx, sa, g->afn, g->lda, m0, mn, k0, kn);
                        else
                            zt_blas_stage_block(ctx, sa, g->A, g->lda, g->ta, m0, mn, k0, kn);
                        a_at[0] = m0, a_at[1] = k0;
                    }
                    if (b_at[0] != k0 || b_at[1] != n0) {
                        zt_blas_stage_block(ctx, sb, g->B, g->ldb, g->tb, k0, kn, n0, nn);
                        if (s.bias16)
                            zt_cuda_stage_cast(ctx, sbias, g->out16, s.bias, 1, nn, (size_t)nn);
                        b_at[0] = k0, b_at[1] = n0;
                    }
                    r = lt_launch(ctx, &s, s.bias != NULL, &c);
                }
                if (r == ZT_LT_NO_ALGO) {
                    if (g->afn && !act) {
                        zt_blas_afn_fp32(ctx, (float *)g->A, g->afn, 0, g->M, g->K);
                        act = true;
                    }
                    zt_blas_gemm_unstaged(ctx, &part);
                }
                if (ctx->st != ZT_OK) return true;
            }
        }
    }
    return true;
}

void zt_cuda_gemm_run(zt_kctx *ctx, const zt_cuda_gemm *g)
{
    if (!zt_blas_gemm_staged(ctx, g)) zt_blas_gemm_unstaged(ctx, g);
}

bool zt_cuda_gemm16_run(zt_kctx *ctx, const zt_cuda_gemm *g)
{
    return zt_blas_gemm_lt(ctx, g, false) != ZT_LT_NO_ALGO;
}

/* The linear layer's forward product: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias */
