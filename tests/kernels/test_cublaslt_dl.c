/* Tests kernels/cuda/cublaslt_dl.c: cuBLASLt is opened at run time, not linked (it costs
 * every process about 200 MiB of resident memory as it loads). Needs the CUDA toolkit's
 * libraries, not a GPU: every entry point resolves, calls reach the library, and a process
 * that never makes a CUDA context never maps it. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_int.h"
#include "tests/test.h"

static int maps_cublaslt(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[1024];
    int found = 0;
    while (fgets(line, sizeof(line), f))
        found |= strstr(line, "libcublasLt") != NULL;
    fclose(f);
    return found;
}

int main(void)
{
    ASSERT_EQ_INT(maps_cublaslt(), 0);
    zt_err err;
    zt_err_clear(&err);
    ASSERT_OK(zt_cuda_lt_load(&err));
    ASSERT_EQ_INT(maps_cublaslt(), 1);
    /* a call that needs no GPU goes through to the library */
    const char *s = cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE);
    printf("cublasLtGetStatusString(INVALID_VALUE) = %s\n", s);
    ASSERT_TRUE(strcmp(s, "cuBLASLt is not loaded") != 0 && strstr(s, "unsupported value"));
    cublasLtMatmulDescOpaque_t op;
    ASSERT_EQ_INT(cublasLtMatmulDescInit(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    cublasOperation_t t = CUBLAS_OP_T;
    ASSERT_EQ_INT(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)),
                  CUBLAS_STATUS_SUCCESS);
    ASSERT_OK(zt_cuda_lt_load(&err)); /* once per process; again is a no-op */
    printf("ok\n");
    return 0;
}
