/* zerotrain tests: a CPU reference of exactly the cuBLASLt calls zerotrain makes (the list in
 * kernels/cuda/cublaslt_dl.c, and that file's zt_cuda_lt_load), linked only into the CUDA
 * emulation test build in place of cublaslt_dl.c. It is not a mock of the GPU: it lets CI run
 * blas_gemm.c's real argument mapping (row-major to column-major, transposes, strided batches,
 * epilogues, the heuristic, the algorithm cache and the fallbacks) and compare the products with
 * the CPU op table. It follows the documented cuBLASLt semantics: a call the real library
 * rejects gets the documented status, never a computed result; an algorithm used on pointers
 * less aligned than it was chosen for fails as a GPU would. It is stricter where zerotrain
 * never goes (empty matrices, attributes zerotrain does not set). Thread-safe (a handle runs
 * one product at a time); the only global state is two test hooks (zt_emu_lt_*, below). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "common/dtype.h"
#include "cuda_int.h"
#include "emu_int.h"

/* Magics that mark initialised objects (an uninitialised descriptor is caught) */
#define LT_HANDLE_MAGIC UINT64_C(0x7a74656d754c7448) /* "zTemuLtH" */
#define LT_DESC_MAGIC UINT64_C(0x7a74656d754c7444)
#define LT_LAYOUT_MAGIC UINT64_C(0x7a74656d754c744c)
#define LT_PREF_MAGIC UINT64_C(0x7a74656d754c7450)
#define LT_ALGO_MAGIC UINT64_C(0x7a74656d754c7441)

/* The widest alignment (bytes) an algorithm needs of a pointer: 16-byte vector loads. */
#define LT_MAX_ALIGN 16u
/* Alignment the heuristic assumes when the preference does not say (documented default). */
#define LT_DEFAULT_ALIGN 256u

/* Blocking of the product: rows of D per panel, columns of D per tile, depth per pass (a
 * panel's LT_IB x LT_KB floats stay in cache while the tile's columns stream through). */
#define LT_IB 128
#define LT_JB 64
#define LT_KB 256

/* The handle keeps the products' scratch (packed operands) from one call to the next: fresh
 * megabytes on every call would cost their page faults each time, under AddressSanitizer most
 * (its allocator maps large blocks anew and quarantines freed ones). */
struct cublasLtContext {
    uint64_t magic;
    pthread_mutex_t lock; /* one product at a time uses the scratch */
    float *scratch;
    size_t cap; /* floats */
};

typedef struct {
    uint64_t magic;
    int32_t compute; /* cublasComputeType_t */
    int32_t scale;   /* cudaDataType_t */
    int32_t transa, transb;
    uint32_t epilogue; /* cublasLtEpilogue_t */
    const void *bias;
    int32_t bias_type; /* CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: -1 (D's type) or a cudaDataType */
    void *aux;
    int64_t aux_ld;
} lt_desc;

typedef struct {
    uint64_t magic;
    int32_t type; /* cudaDataType */
    int32_t batch;
    uint64_t rows, cols;
    int64_t ld;
    int64_t stride; /* elements between the matrices of a batch */
} lt_layout;

typedef struct {
    uint64_t magic;
    uint64_t max_ws;
    uint32_t align[4]; /* promised minimum alignment of A, B, C, D in bytes */
} lt_pref;

/* What an algorithm from the heuristic binds: its compute type and the pointer alignments it
 * was chosen for (those the preference promised, and those of the bias and aux pointers the
 * descriptor held at the query). */
enum { AL_A, AL_B, AL_C, AL_D, AL_BIAS, AL_AUX, AL_N };
typedef struct {
    uint64_t magic;
    int32_t compute;
    int32_t in; /* the inputs' type */
    uint32_t align[AL_N];
} lt_algo;

_Static_assert(sizeof(lt_desc) <= sizeof(cublasLtMatmulDescOpaque_t), "lt_desc too big");
_Static_assert(sizeof(lt_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "lt_layout too big");
_Static_assert(sizeof(lt_pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "lt_pref too big");
_Static_assert(sizeof(lt_algo) <= sizeof(cublasLtMatmulAlgo_t), "lt_algo too big");

/* How the inputs are rounded before they are multiplied (the compute type's down-conversion;
 * cuBLASLt may also pick TF32 for the 16-bit types, this emulation always rounds to them) */
enum lt_rnd { RND_NONE, RND_TF32, RND_BF16, RND_FP16 };

/* One problem as cuBLASLt sees it: D (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C */
typedef struct {
    int64_t m, n, k;
    int batch;
    bool ta, tb; /* op(X) = X^T */
    int rnd; /* the inputs' rounding: lt_rnd */
    int in;  /* A's and B's cudaDataType: CUDA_R_32F, or 16-bit (read as they are) */
    int out; /* C's, D's and aux's cudaDataType: CUDA_R_32F, or A's 16-bit type (rounded) */
    int bias_type; /* the bias's cudaDataType: D's */
    bool bias, gelu;
    bool dgelu; /* D = GELU'(aux) * product: aux is read */
} lt_problem;

/* ---- objects: descriptors live in the caller's opaque storage, copied with memcpy ---- */

static bool desc_get(const cublasLtMatmulDescOpaque_t *p, lt_desc *d)
{
    if (!p) return false;
    memcpy(d, p, sizeof(*d));
    return d->magic == LT_DESC_MAGIC;
}

static bool layout_get(const cublasLtMatrixLayoutOpaque_t *p, lt_layout *l)
{
    if (!p) return false;
    memcpy(l, p, sizeof(*l));
    return l->magic == LT_LAYOUT_MAGIC;
}

static bool pref_get(const cublasLtMatmulPreferenceOpaque_t *p, lt_pref *f)
{
    if (!p) return false;
    memcpy(f, p, sizeof(*f));
    return f->magic == LT_PREF_MAGIC;
}

/* The documented defaults: no workspace, 256-byte alignment of A, B, C and D. */
static void pref_default(lt_pref *f)
{
    memset(f, 0, sizeof(*f));
    f->magic = LT_PREF_MAGIC;
    f->max_ws = 0;
    for (int i = 0; i < 4; i++)
        f->align[i] = LT_DEFAULT_ALIGN;
}

static bool handle_ok(cublasLtHandle_t h)
{
    return h && h->magic == LT_HANDLE_MAGIC;
}

/* cublaslt_dl.c's loader (ops_cuda.c calls it before cublasLtCreate): nothing to load here */
zt_status zt_cuda_lt_load(zt_err *err)
{
    (void)err;
    return ZT_OK;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasLtContext *c = calloc(1, sizeof(*c));
    if (!c) return CUBLAS_STATUS_ALLOC_FAILED;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    c->magic = LT_HANDLE_MAGIC;
    *h = c;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    pthread_mutex_destroy(&h->lock);
    free(h->scratch);
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN (not a cublasStatus_t)";
}

/* The *Init_internal functions: cublasLt.h documents CUBLAS_STATUS_ALLOC_FAILED when `size`
 * (the sizeof of the caller's opaque type, which the inline *Init helpers pass) is too small.
 * Compute and scale types are checked where the real library checks them: at the heuristic
 * and the matmul. */
cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t desc, size_t size,
                                               cublasComputeType_t ct, cudaDataType_t st)
{
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    if (size < sizeof(cublasLtMatmulDescOpaque_t)) return CUBLAS_STATUS_ALLOC_FAILED;
    lt_desc d;
    memset(&d, 0, sizeof(d));
    d.magic = LT_DESC_MAGIC;
    d.compute = (int32_t)ct;
    d.scale = (int32_t)st;
    d.transa = CUBLAS_OP_N;
    d.transb = CUBLAS_OP_N;
    d.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d.bias_type = -1;
    memset(desc, 0, sizeof(*desc));
    memcpy(desc, &d, sizeof(d));
    return CUBLAS_STATUS_SUCCESS;
}

/* CUDA_R_32F, and CUDA_R_16BF or CUDA_R_16F for A and B (NOT_SUPPORTED otherwise); rows, cols >= 1
 * (stricter than cuBLASLt: zt_cuda_gemm_run returns before making an empty layout, so one is a
 * mapping bug); ld >= rows as documented for CUBLASLT_ORDER_COL; sizes beyond int32 are not
 * supported. */
cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t l, size_t size,
                                                 cudaDataType type, uint64_t rows, uint64_t cols,
                                                 int64_t ld)
{
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    if (size < sizeof(cublasLtMatrixLayoutOpaque_t)) return CUBLAS_STATUS_ALLOC_FAILED;
    if (type != CUDA_R_32F && type != CUDA_R_16BF && type != CUDA_R_16F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (rows < 1 || cols < 1 || ld < 1 || (uint64_t)ld < rows) return CUBLAS_STATUS_INVALID_VALUE;
    if (rows > INT32_MAX || cols > INT32_MAX) return CUBLAS_STATUS_NOT_SUPPORTED;
    lt_layout x;
    memset(&x, 0, sizeof(x));
    x.magic = LT_LAYOUT_MAGIC;
    x.type = (int32_t)type;
    x.batch = 1;
    x.rows = rows;
    x.cols = cols;
    x.ld = ld;
    memset(l, 0, sizeof(*l));
    memcpy(l, &x, sizeof(x));
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size)
{
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    if (size < sizeof(cublasLtMatmulPreferenceOpaque_t)) return CUBLAS_STATUS_ALLOC_FAILED;
    lt_pref f;
    pref_default(&f);
    memset(pref, 0, sizeof(*pref));
    memcpy(pref, &f, sizeof(f));
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- attributes: each with its documented type, and exactly that type's size ---- */

/* Copies an attribute value that must be exactly `want` bytes (the size of *v in GET_ATTR). */
static cublasStatus_t get_attr(const void *buf, size_t size, void *v, size_t want)
{
    if (size != want) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(v, buf, want);
    return CUBLAS_STATUS_SUCCESS;
}
#define GET_ATTR(buf, size, v) get_attr((buf), (size), (v), sizeof(*(v)))

/* cublasOperation_t as int32_t: N or T (C is T for real data; CONJG is not supported by
 * cuBLAS, any other value is not an operation). */
static cublasStatus_t get_op(const void *buf, size_t size, int32_t *v)
{
    int32_t x;
    cublasStatus_t s = GET_ATTR(buf, size, &x);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (x == CUBLAS_OP_C) x = CUBLAS_OP_T;
    if (x != CUBLAS_OP_N && x != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
    *v = x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    lt_desc d;
    if (!desc_get(desc, &d) || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: s = get_op(buf, size, &d.transa); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: s = get_op(buf, size, &d.transb); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
        uint32_t e;
        s = GET_ATTR(buf, size, &e);
        if (s != CUBLAS_STATUS_SUCCESS) break;
        if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS &&
            e != CUBLASLT_EPILOGUE_GELU_AUX && e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
            e != CUBLASLT_EPILOGUE_DGELU) {
            s = CUBLAS_STATUS_NOT_SUPPORTED;
            break;
        }
        d.epilogue = e;
        break;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: {
        void *p;
        s = GET_ATTR(buf, size, &p);
        if (s == CUBLAS_STATUS_SUCCESS) d.bias = p;
        break;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
        int32_t t;
        s = GET_ATTR(buf, size, &t);
        if (s == CUBLAS_STATUS_SUCCESS) d.bias_type = t;
        break;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: s = GET_ATTR(buf, size, &d.aux); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: s = GET_ATTR(buf, size, &d.aux_ld); break;
    default: s = CUBLAS_STATUS_NOT_SUPPORTED; break;
    }
    if (s == CUBLAS_STATUS_SUCCESS) memcpy(desc, &d, sizeof(d));
    return s;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size)
{
    lt_layout x;
    if (!layout_get(l, &x) || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
        int32_t b;
        s = GET_ATTR(buf, size, &b);
        if (s == CUBLAS_STATUS_SUCCESS && b < 1) s = CUBLAS_STATUS_INVALID_VALUE;
        if (s == CUBLAS_STATUS_SUCCESS) x.batch = b;
        break;
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: s = GET_ATTR(buf, size, &x.stride); break;
    default: s = CUBLAS_STATUS_NOT_SUPPORTED; break;
    }
    if (s == CUBLAS_STATUS_SUCCESS) memcpy(l, &x, sizeof(x));
    return s;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size)
{
    lt_pref f;
    if (!pref_get(pref, &f) || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: s = GET_ATTR(buf, size, &f.max_ws); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: s = GET_ATTR(buf, size, &f.align[0]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: s = GET_ATTR(buf, size, &f.align[1]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: s = GET_ATTR(buf, size, &f.align[2]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: s = GET_ATTR(buf, size, &f.align[3]); break;
    default: s = CUBLAS_STATUS_NOT_SUPPORTED; break;
    }
    if (s == CUBLAS_STATUS_SUCCESS) memcpy(pref, &f, sizeof(f));
    return s;
}

/* ---- the problem ---- */

/* Checks that the descriptors describe one product cuBLASLt can run and fills p. Shapes or
 * batch counts in conflict: INVALID_VALUE; types and epilogue constraints it does not run:
 * NOT_SUPPORTED. */
static cublasStatus_t problem_check(const lt_desc *d, const lt_layout *a, const lt_layout *b,
                                    const lt_layout *c, const lt_layout *dd, lt_problem *p)
{
    memset(p, 0, sizeof(*p));
    switch (d->compute) {
    case CUBLAS_COMPUTE_32F: p->rnd = RND_NONE; break;
    case CUBLAS_COMPUTE_32F_FAST_TF32: p->rnd = RND_TF32; break;
    case CUBLAS_COMPUTE_32F_FAST_16BF: p->rnd = RND_BF16; break;
    case CUBLAS_COMPUTE_32F_FAST_16F: p->rnd = RND_FP16; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* fp32 everywhere, or 16-bit A and B of one type with C and D both fp32 or both of A's
     * type under CUBLAS_COMPUTE_32F (the combinations of the documented table zerotrain uses);
     * the bias of D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE may name it; an fp32 bias
     * with a 16-bit D is refused with INVALID_VALUE, as cuBLAS 13 did on an H200), the GELU
     * input (aux) always of D's type */
    if (a->type != b->type || c->type != dd->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (dd->type != CUDA_R_32F && dd->type != a->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->type != CUDA_R_32F && d->compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    p->in = a->type;
    p->out = dd->type;
    p->bias_type = d->bias_type == -1 ? dd->type : d->bias_type;
    if (p->bias_type != dd->type) return CUBLAS_STATUS_INVALID_VALUE;
    p->ta = d->transa == CUBLAS_OP_T;
    p->tb = d->transb == CUBLAS_OP_T;
    uint64_t m = p->ta ? a->cols : a->rows, ka = p->ta ? a->rows : a->cols;
    uint64_t kb = p->tb ? b->cols : b->rows, n = p->tb ? b->rows : b->cols;
    if (ka != kb || dd->rows != m || dd->cols != n) return CUBLAS_STATUS_INVALID_VALUE;
    if (c->rows != dd->rows || c->cols != dd->cols) return CUBLAS_STATUS_INVALID_VALUE;
    if (a->batch != dd->batch || b->batch != dd->batch || c->batch != dd->batch)
        return CUBLAS_STATUS_INVALID_VALUE;
    p->m = (int64_t)m;
    p->n = (int64_t)n;
    p->k = (int64_t)ka;
    p->batch = dd->batch;
    p->bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS ||
              d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    p->gelu = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
              d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    p->dgelu = d->epilogue == CUBLASLT_EPILOGUE_DGELU;
    if (p->gelu || p->dgelu) {
        /* documented: the GELU input's leading dimension must be divisible by 8 and no less
         * than D's rows. A batched GELU_AUX needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
         * which zerotrain never sets (and this emulation does not accept). */
        if (d->aux_ld < p->m || d->aux_ld % 8 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
        if (p->batch > 1) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Largest power of two that divides v, at most LT_MAX_ALIGN (0 for v == 0). */
static uint32_t pow2_part(uint64_t v)
{
    if (v == 0) return 0;
    uint64_t p = v & (~v + 1);
    return p > LT_MAX_ALIGN ? LT_MAX_ALIGN : (uint32_t)p;
}

/* The alignment a pointer seen by the heuristic lets an algorithm assume (a NULL one: the
 * widest, as the real heuristic may). */
static uint32_t ptr_alignment(const void *p)
{
    return p ? pow2_part((uint64_t)(uintptr_t)p) : LT_MAX_ALIGN;
}

/* Bytes of one element of A and B; of C, D and aux */
static uint32_t in_size(const lt_problem *p)
{
    return p->in == CUDA_R_32F ? 4u : 2u;
}

static uint32_t out_size(const lt_problem *p)
{
    return p->out == CUDA_R_32F ? 4u : 2u;
}

/* The one algorithm this emulation offers; NOT_SUPPORTED when a promised alignment does not
 * allow even accesses of whole elements. */
static cublasStatus_t algo_make(const lt_desc *d, const lt_pref *f, const lt_problem *p,
                                lt_algo *al)
{
    memset(al, 0, sizeof(*al));
    al->magic = LT_ALGO_MAGIC;
    al->compute = d->compute;
    al->in = p->in;
    for (int i = 0; i < 4; i++) {
        al->align[i] = pow2_part(f->align[i]);
        if (al->align[i] < (i < 2 ? in_size(p) : out_size(p))) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    al->align[AL_BIAS] = ptr_alignment(d->bias);
    al->align[AL_AUX] = ptr_alignment(d->aux);
    return CUBLAS_STATUS_SUCCESS;
}

/* Test hooks: the next n heuristic queries fail with `status` (a transient failure such as
 * CUBLAS_STATUS_ALLOC_FAILED), and how many queries were made. */
static _Atomic int lt_fail_n, lt_fail_status;
static _Atomic unsigned long lt_queries;

void zt_emu_lt_fail_heuristics(int n, int status)
{
    lt_fail_status = status;
    lt_fail_n = n;
}

unsigned long zt_emu_lt_heuristic_queries(void)
{
    return lt_queries;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned)
{
    if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested < 1 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    lt_queries++;
    for (int n = lt_fail_n; n > 0;)
        if (atomic_compare_exchange_weak(&lt_fail_n, &n, n - 1))
            return (cublasStatus_t)lt_fail_status;
    lt_desc d;
    lt_layout a, b, c, dd;
    lt_pref f;
    if (!desc_get(op, &d) || !layout_get(Adesc, &a) || !layout_get(Bdesc, &b) ||
        !layout_get(Ddesc, &dd) || !pref_get(pref, &f))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!Cdesc)
        c = dd;
    else if (!layout_get(Cdesc, &c))
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_problem p;
    cublasStatus_t s = problem_check(&d, &a, &b, &c, &dd, &p);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    lt_algo al;
    s = algo_make(&d, &f, &p, &al);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    /* up to three candidates (the same algorithm), so that a caller's choice among several,
     * timing included, runs here too */
    int n = requested < 3 ? requested : 3;
    for (int i = 0; i < n; i++) {
        memset(&results[i], 0, sizeof(results[i]));
        memcpy(&results[i].algo, &al, sizeof(al));
        results[i].workspaceSize = 0; /* within any MAX_WORKSPACE_BYTES */
        results[i].state = CUBLAS_STATUS_SUCCESS;
        results[i].wavesCount = 1.0f;
    }
    *returned = n;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the product ---- */

/* fp32 to TF32 (10 explicit mantissa bits), round to nearest even; NaN and Inf unchanged. */
static inline float tf32_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u += 0x0fffu + ((u >> 13) & 1u);
    u &= ~(uint32_t)0x1fffu;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* Element i of an input of type `in` (cudaDataType), widened to fp32 */
static inline float in_load(const void *x, int64_t i, int in)
{
    if (in == CUDA_R_32F) return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return in == CUDA_R_16BF ? zt_f32_from_bf16(h) : zt_f32_from_f16(h);
}

/* Element i of C, D or aux of type `out` (cudaDataType) in fp32; v stored there, rounded to
 * nearest even */
static inline float out_load(const void *x, int64_t i, int out)
{
    return in_load(x, i, out);
}

static inline void out_store(void *x, int64_t i, int out, float v)
{
    if (out == CUDA_R_32F)
        ((float *)x)[i] = v;
    else
        ((uint16_t *)x)[i] = out == CUDA_R_16BF ? zt_bf16_from_f32(v) : zt_f16_from_f32(v);
}

/* x rounded as the inputs of p are */
static inline float in_round(float x, int rnd)
{
    switch (rnd) {
    case RND_TF32: return tf32_round(x);
    case RND_BF16: return zt_f32_from_bf16(zt_bf16_from_f32(x));
    case RND_FP16: return zt_f32_from_f16(zt_f16_from_f32(x));
    default: return x;
    }
}

/* Rows and columns of D per micro-tile (panels are padded with zero rows and columns to
 * them): the micro-kernel keeps LT_MR x LT_NR accumulators in registers. */
#define LT_MR 8
#define LT_NR 4

static int64_t round_up(int64_t v, int64_t to)
{
    return (v + to - 1) / to * to;
}

/* dst (c x r, column stride ldd) = the transpose of src (r x c, column stride lds), rounded
 * (in_round); in 32 x 32 blocks, so that both sides stay in cache. */
static void transpose(float *restrict dst, int64_t ldd, const void *restrict src, int64_t lds,
                      int64_t r, int64_t c, int rnd, int in)
{
    for (int64_t j0 = 0; j0 < c; j0 += 32)
        for (int64_t i0 = 0; i0 < r; i0 += 32) {
            int64_t j1 = c - j0 < 32 ? c : j0 + 32, i1 = r - i0 < 32 ? r : i0 + 32;
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = i0; i < i1; i++)
                    dst[j + i * ldd] = in_round(in_load(src, i + j * lds, in), rnd);
        }
}

/* op(A) (m x k) into panels of LT_IB rows, each padded with zero rows to a multiple of LT_MR:
 * panel i0 (wp rows) at P + i0 k holds (i, kk) at [kk wp + i - i0], so that each column of a
 * panel is contiguous. */
static void pack_a(float *restrict P, const void *restrict A, int64_t lda, const lt_problem *p)
{
    int64_t m = p->m, k = p->k;
    for (int64_t i0 = 0; i0 < m; i0 += LT_IB) {
        int64_t w = m - i0 < LT_IB ? m - i0 : LT_IB, wp = round_up(w, LT_MR);
        float *Pb = P + i0 * k;
        if (!p->ta) { /* op(A)(i, kk) = A[i + kk lda] */
            for (int64_t kk = 0; kk < k; kk++) {
                float *dst = Pb + kk * wp;
                if (p->in != CUDA_R_32F)
                    for (int64_t i = 0; i < w; i++)
                        dst[i] = in_load(A, kk * lda + i0 + i, p->in);
                else if (p->rnd != RND_NONE)
                    for (int64_t i = 0; i < w; i++)
                        dst[i] = in_round(((const float *)A)[kk * lda + i0 + i], p->rnd);
                else
                    memcpy(dst, (const float *)A + kk * lda + i0, (size_t)w * sizeof(float));
                for (int64_t i = w; i < wp; i++)
                    dst[i] = 0.0f;
            }
        } else { /* op(A)(i, kk) = A[kk + i lda] */
            transpose(Pb, wp, (const char *)A + i0 * lda * in_size(p), lda, k, w, p->rnd, p->in);
            for (int64_t kk = 0; kk < k; kk++)
                for (int64_t i = w; i < wp; i++)
                    Pb[kk * wp + i] = 0.0f;
        }
    }
}

/* op(B) (k x n) into Q with its columns contiguous, (kk, j) at Q[kk + j k], and zero columns
 * up to a multiple of LT_NR. */
static void pack_b(float *restrict Q, const void *restrict B, int64_t ldb, const lt_problem *p)
{
    int64_t k = p->k, n = p->n;
    if (!p->tb) { /* op(B)(kk, j) = B[kk + j ldb] */
        for (int64_t j = 0; j < n; j++) {
            float *dst = Q + j * k;
            if (p->in != CUDA_R_32F)
                for (int64_t kk = 0; kk < k; kk++)
                    dst[kk] = in_load(B, j * ldb + kk, p->in);
            else if (p->rnd != RND_NONE)
                for (int64_t kk = 0; kk < k; kk++)
                    dst[kk] = in_round(((const float *)B)[j * ldb + kk], p->rnd);
            else
                memcpy(dst, (const float *)B + j * ldb, (size_t)k * sizeof(float));
        }
    } else { /* op(B)(kk, j) = B[j + kk ldb] */
        transpose(Q, k, B, ldb, n, k, p->rnd, p->in);
    }
    memset(Q + n * k, 0, (size_t)((round_up(n, LT_NR) - n) * k) * sizeof(float));
}

/* The micro-kernel: out (LT_MR x LT_NR, column stride ldo) += a (LT_MR rows, column stride
 * lda) times q (LT_NR columns, column stride ldq) over kk < kw. Each of its sums adds its terms
 * in order of kk in fp32 from zero, in accumulators that stay in registers: 12 loads per 32
 * multiply-adds, which is what counts under the sanitizers, where every load is checked. A
 * column of `a` is copied whole (one 32-byte access, not eight). */
static void micro(float *restrict out, int64_t ldo, const float *restrict a, int64_t lda,
                  const float *restrict q, int64_t ldq, int64_t kw)
{
    _Static_assert(LT_NR == 4, "micro() is written for 4 columns");
    float c0[LT_MR] = {0}, c1[LT_MR] = {0}, c2[LT_MR] = {0}, c3[LT_MR] = {0};
    const float *q0 = q, *q1 = q + ldq, *q2 = q1 + ldq, *q3 = q2 + ldq;
    for (int64_t kk = 0; kk < kw; kk++) {
        float ak[LT_MR];
        memcpy(ak, a + kk * lda, sizeof(ak));
        float b0 = q0[kk], b1 = q1[kk], b2 = q2[kk], b3 = q3[kk];
        for (int i = 0; i < LT_MR; i++) {
            float x = ak[i];
            c0[i] += x * b0;
            c1[i] += x * b1;
            c2[i] += x * b2;
            c3[i] += x * b3;
        }
    }
    for (int i = 0; i < LT_MR; i++) {
        out[i] += c0[i];
        out[ldo + i] += c1[i];
        out[2 * ldo + i] += c2[i];
        out[3 * ldo + i] += c3[i];
    }
}

/* cuBLASLt's GELU: the tanh form */
static inline float gelu_tanh(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* its derivative */
static inline float gelu_tanh_grad(float x)
{
    float k = 0.7978845608028654f, t = tanhf(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

/* Pointers and scalars of one matrix of the batch */
typedef struct {
    const void *A, *B; /* of the problem's input type */
    const void *C;     /* C, D and aux of its output type */
    void *D;
    int out, bias_type;
    int64_t lda, ldb, ldc, ldd;
    float alpha, beta;
    const void *bias; /* (m) or NULL */
    void *aux;        /* GELU input, or NULL */
    int64_t aux_ld;
    bool dgelu; /* aux is read: D = GELU'(aux) * (alpha product) */
} lt_operands;

/* Scratch of one cublasLtMatmul, in floats */
static size_t scratch_p(const lt_problem *p)
{
    return (size_t)round_up(p->m, LT_MR) * (size_t)p->k;
}

static size_t scratch_q(const lt_problem *p)
{
    return (size_t)p->k * (size_t)round_up(p->n, LT_NR);
}

#define LT_ACC ((size_t)LT_IB * LT_JB)

/* D (and aux) for rows [i0, i0 + w) and columns [j0, j0 + jw) from the tile's products in acc
 * (column stride wp): alpha, then beta C (C not read when beta == 0: cuBLAS says C need not
 * hold valid numbers then), then the bias, then GELU with its input kept in aux. */
static void epilogue(const lt_operands *o, const float *acc, int64_t wp, int64_t i0, int64_t w,
                     int64_t j0, int64_t jw)
{
    for (int64_t jj = 0; jj < jw; jj++) {
        int64_t j = j0 + jj;
        const float *a = acc + jj * wp;
        int64_t dcol = j * o->ldd + i0, ccol = j * o->ldc + i0, xcol = j * o->aux_ld + i0;
        for (int64_t i = 0; i < w; i++) {
            float v = o->alpha * a[i];
            if (o->beta != 0.0f) v += o->beta * out_load(o->C, ccol + i, o->out);
            if (o->bias) v += out_load(o->bias, i0 + i, o->bias_type);
            if (o->aux && o->dgelu) {
                v *= gelu_tanh_grad(out_load(o->aux, xcol + i, o->out));
            } else if (o->aux) {
                out_store(o->aux, xcol + i, o->out, v);
                v = gelu_tanh(v);
            }
            out_store(o->D, dcol + i, o->out, v);
        }
    }
}

/* D = alpha op(A) op(B) + beta C (+ bias) (then GELU, its input to aux) for one matrix of the
 * batch; P, Q, acc: scratch_p, scratch_q and LT_ACC floats. The product runs in tiles of
 * LT_IB x LT_JB, each sum in fp32 as slices of LT_KB terms (each summed in order of k) added in
 * order of k: a fixed order, as a GPU's split of k gives one. */
static void matmul_one(const lt_problem *p, const lt_operands *o, float *P, float *Q, float *acc)
{
    int64_t m = p->m, n = p->n, k = p->k;
    pack_a(P, o->A, o->lda, p);
    pack_b(Q, o->B, o->ldb, p);
    /* tiles (i0, j0) and micro-tiles in one loop each: gcc's static profile estimate gives up
     * (counts 0, code optimised for size) on a deeper nest */
    int64_t ti = (m + LT_IB - 1) / LT_IB, tj = (n + LT_JB - 1) / LT_JB;
    for (int64_t t = 0; t < ti * tj; t++) {
        int64_t i0 = t / tj * LT_IB, j0 = t % tj * LT_JB;
        int64_t w = m - i0 < LT_IB ? m - i0 : LT_IB, wp = round_up(w, LT_MR);
        int64_t jw = n - j0 < LT_JB ? n - j0 : LT_JB, jwp = round_up(jw, LT_NR);
        int64_t mi = wp / LT_MR, nu = mi * (jwp / LT_NR);
        const float *Pb = P + i0 * k;
        memset(acc, 0, (size_t)(wp * jwp) * sizeof(float));
        for (int64_t k0 = 0; k0 < k; k0 += LT_KB) {
            int64_t kw = k - k0 < LT_KB ? k - k0 : LT_KB;
            for (int64_t u = 0; u < nu; u++) {
                int64_t jj = u / mi * LT_NR, ii = u % mi * LT_MR;
                micro(acc + jj * wp + ii, wp, Pb + k0 * wp + ii, wp, Q + (j0 + jj) * k + k0, k,
                      kw);
            }
        }
        epilogue(o, acc, wp, i0, w, j0, jw);
    }
}

/* A pointer below the alignment the algorithm was chosen for faults on a GPU (misaligned
 * address, a sticky CUDA error): EXECUTION_FAILED, with a message, which blas_gemm.c records
 * as a failure where it would quietly fall back on INVALID_VALUE or NOT_SUPPORTED. Every
 * matrix of a batch (stride elements apart) must meet the alignment. */
static bool check_align(const char *what, const void *p, int64_t stride, int batch, uint32_t align,
                        uint32_t esize)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (batch > 1) a |= (uint64_t)stride * esize;
    if (a % align == 0) return true;
    fprintf(
        stderr,
        "emu_cublaslt: cublasLtMatmul: %s at %p (batch %d, stride %lld elements) is not %u-byte aligned as the algorithm from cublasLtMatmulAlgoGetHeuristic assumes: a GPU faults here (misaligned address)\n",
        what, p, batch, (long long)stride, (unsigned)align);
    return false;
}

static bool size_mul(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t stream)
{
    (void)ws; /* the emulated algorithm needs no workspace */
    (void)ws_bytes;
    if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    zt_emu_count(ZT_EMU_GEMM);
    zt_emu_stream_wait(stream); /* then the product is complete when this returns */
    lt_desc d;
    lt_layout a, b, c, dd;
    if (!desc_get(op, &d) || !layout_get(Adesc, &a) || !layout_get(Bdesc, &b) ||
        !layout_get(Ddesc, &dd))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!Cdesc) /* documented: an omitted Cdesc is taken to be Ddesc */
        c = dd;
    else if (!layout_get(Cdesc, &c))
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_problem p;
    cublasStatus_t s = problem_check(&d, &a, &b, &c, &dd, &p);
    if (s != CUBLAS_STATUS_SUCCESS) return s;

    lt_algo al;
    if (algo) {
        memcpy(&al, algo, sizeof(al));
        if (al.magic != LT_ALGO_MAGIC || al.compute != d.compute || al.in != p.in)
            return CUBLAS_STATUS_INVALID_VALUE;
    } else { /* documented: NULL runs an implicit heuristic query with default preferences */
        lt_pref f;
        pref_default(&f);
        s = algo_make(&d, &f, &p, &al);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }

    if (!alpha || !beta || !A || !B || !D) return CUBLAS_STATUS_INVALID_VALUE;
    lt_operands o;
    memset(&o, 0, sizeof(o));
    memcpy(&o.alpha, alpha, sizeof(o.alpha)); /* CUBLASLT_POINTER_MODE_HOST, CUDA_R_32F */
    memcpy(&o.beta, beta, sizeof(o.beta));
    if (!C && o.beta != 0.0f) return CUBLAS_STATUS_INVALID_VALUE; /* C is read */
    /* in place (C == D): C's layout must be D's */
    if (C == D && (c.ld != dd.ld || (p.batch > 1 && c.stride != dd.stride)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (p.bias && !d.bias) return CUBLAS_STATUS_INVALID_VALUE;
    if ((p.gelu || p.dgelu) && !d.aux) return CUBLAS_STATUS_INVALID_VALUE;
    /* what DGELU makes of beta C is not documented; zerotrain never asks */
    if (p.dgelu && o.beta != 0.0f) return CUBLAS_STATUS_NOT_SUPPORTED;

    int nb = p.batch;
    uint32_t es = in_size(&p), eo = out_size(&p);
    if (!check_align("A", A, a.stride, nb, al.align[AL_A], es) ||
        !check_align("B", B, b.stride, nb, al.align[AL_B], es) ||
        (C && !check_align("C", C, c.stride, nb, al.align[AL_C], eo)) ||
        !check_align("D", D, dd.stride, nb, al.align[AL_D], eo) ||
        (p.bias && !check_align("the bias", d.bias, 0, 1, al.align[AL_BIAS],
                                p.bias_type == CUDA_R_32F ? 4 : 2)) ||
        ((p.gelu || p.dgelu) && !check_align("the GELU aux", d.aux, 0, 1, al.align[AL_AUX], eo)))
        return CUBLAS_STATUS_EXECUTION_FAILED;

    /* m, n, k < 2^31: the float counts fit a size_t, their bytes may not */
    size_t np = scratch_p(&p), nq = scratch_q(&p), need = np + nq + LT_ACC, bytes;
    if (need < np || !size_mul(need, sizeof(float), &bytes)) return CUBLAS_STATUS_ALLOC_FAILED;
    pthread_mutex_lock(&h->lock);
    if (h->cap < need) {
        free(h->scratch);
        h->cap = 0;
        h->scratch = malloc(bytes);
        if (!h->scratch) {
            pthread_mutex_unlock(&h->lock);
            return CUBLAS_STATUS_ALLOC_FAILED;
        }
        h->cap = need;
    }
    float *P = h->scratch, *Q = P + np, *acc = Q + nq;
    o.lda = a.ld;
    o.ldb = b.ld;
    o.ldc = c.ld;
    o.ldd = dd.ld;
    o.bias = p.bias ? d.bias : NULL;
    o.out = p.out;
    o.bias_type = p.bias_type;
    o.aux = p.gelu || p.dgelu ? d.aux : NULL;
    o.dgelu = p.dgelu;
    o.aux_ld = d.aux_ld;
    for (int i = 0; i < nb; i++) {
        lt_operands ob = o;
        ob.A = (const char *)A + (ptrdiff_t)i * a.stride * es;
        ob.B = (const char *)B + (ptrdiff_t)i * b.stride * es;
        ob.C = C ? (const char *)C + (ptrdiff_t)i * c.stride * eo : NULL;
        ob.D = (char *)D + (ptrdiff_t)i * dd.stride * eo;
        matmul_one(&p, &ob, P, Q, acc);
    }
    pthread_mutex_unlock(&h->lock);
    return CUBLAS_STATUS_SUCCESS;
}
