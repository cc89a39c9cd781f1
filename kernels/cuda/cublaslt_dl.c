/* zerotrain: cuBLASLt loaded when the first CUDA context is made, not at program start.
 * Linking libcublasLt costs every process about 200 MiB of resident memory as it loads (CPU
 * workers, zctl and the tests included), so the build does not link it: this file defines
 * the cuBLASLt entry points that blas_gemm.c and ops_cuda.c call (the inline *Init helpers of
 * cublasLt.h call the *_internal ones) and forwards each to the library that
 * zt_cuda_lt_load() opened with dlopen. The prototypes come from cublasLt.h itself, so a
 * mismatch does not compile. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_int.h"

#define ZT_LT_STR2(x) #x
#define ZT_LT_STR(x) ZT_LT_STR2(x)
#define ZT_LT_SONAME "libcublasLt.so." ZT_LT_STR(CUBLAS_VER_MAJOR)

/* X(name): every cuBLASLt function zerotrain calls */
#define ZT_LT_FUNCS(X)                                                                             \
    X(cublasLtCreate)                                                                              \
    X(cublasLtDestroy)                                                                             \
    X(cublasLtGetStatusString)                                                                     \
    X(cublasLtMatmul)                                                                              \
    X(cublasLtMatmulAlgoGetHeuristic)                                                              \
    X(cublasLtMatmulDescInit_internal)                                                             \
    X(cublasLtMatmulDescSetAttribute)                                                              \
    X(cublasLtMatmulPreferenceInit_internal)                                                       \
    X(cublasLtMatmulPreferenceSetAttribute)                                                        \
    X(cublasLtMatrixLayoutInit_internal)                                                           \
    X(cublasLtMatrixLayoutSetAttribute)

static struct {
#define ZT_LT_PTR(name) __typeof__(name) *name;
    ZT_LT_FUNCS(ZT_LT_PTR)
#undef ZT_LT_PTR
} lt;

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static char lt_error[512];
static int lt_ok;

static void lt_open(void)
{
    void *h = dlopen(ZT_LT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(lt_error, sizeof(lt_error), "cannot load %s: %s", ZT_LT_SONAME, dlerror());
        return;
    }
    void *sym;
#define ZT_LT_SYM(name)                                                                            \
    sym = dlsym(h, #name);                                                                         \
    memcpy(&lt.name, &sym, sizeof(sym)); /* POSIX: a data pointer holds a function's address */   \
    if (!sym) {                                                                                \
        snprintf(lt_error, sizeof(lt_error), "%s has no %s (a cuBLASLt older than %d?)",           \
                 ZT_LT_SONAME, #name, CUBLAS_VER_MAJOR);                                           \
        return;                                                                                    \
    }
    ZT_LT_FUNCS(ZT_LT_SYM)
#undef ZT_LT_SYM
    lt_ok = 1;
}

zt_status zt_cuda_lt_load(zt_err *err)
{
    pthread_once(&lt_once, lt_open);
    if (lt_ok)
        return ZT_OK;
    return zt_err_set(
        err, ZT_ERR_CUDA,
        "%s; install the CUDA toolkit's cuBLAS libraries (libcublasLt) or put their directory on LD_LIBRARY_PATH",
        lt_error);
}

/* ---- the entry points: each forwards once the library is loaded ---- */

#define LT_READY() (pthread_once(&lt_once, lt_open), lt_ok)

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    return LT_READY() ? lt.cublasLtCreate(h) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    return LT_READY() ? lt.cublasLtDestroy(h) : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char *cublasLtGetStatusString(cublasStatus_t s)
{
    return LT_READY() ? lt.cublasLtGetStatusString(s) : "cuBLASLt is not loaded";
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t stream)
{
    return LT_READY() ? lt.cublasLtMatmul(h, op, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D,
                                          Ddesc, algo, ws, ws_bytes, stream)
                      : CUBLAS_STATUS_NOT_INITIALIZED;
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
    return LT_READY() ? lt.cublasLtMatmulAlgoGetHeuristic(h, op, Adesc, Bdesc, Cdesc, Ddesc, pref,
                                                          requested, results, returned)
                      : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t desc, size_t size,
                                               cublasComputeType_t ct, cudaDataType_t st)
{
    return LT_READY() ? lt.cublasLtMatmulDescInit_internal(desc, size, ct, st)
                      : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    return LT_READY() ? lt.cublasLtMatmulDescSetAttribute(desc, attr, buf, size)
                      : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size)
{
    return LT_READY() ? lt.cublasLtMatmulPreferenceInit_internal(pref, size)
                      : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size)
{
    return LT_READY() ? lt.cublasLtMatmulPreferenceSetAttribute(pref, attr, buf, size)
                      : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t l, size_t size,
                                                 cudaDataType type, uint64_t rows, uint64_t cols,
                                                 int64_t ld)
{
    return LT_READY() ? lt.cublasLtMatrixLayoutInit_internal(l, size, type, rows, cols, ld)
                      : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size)
{
    return LT_READY() ? lt.cublasLtMatrixLayoutSetAttribute(l, attr, buf, size)
                      : CUBLAS_STATUS_NOT_INITIALIZED;
}
