/* zerotrain: what only blas_gemm.c and blas_cuda.c share: a cuBLASLt call's outcome, and the
 * 16-bit staging of matmul operands that the linear layers and the classifier drive themselves
 * (a backward's or a chunk's copies made once for two products). */
#ifndef ZT_KERNELS_CUDA_BLAS_INT_H
#define ZT_KERNELS_CUDA_BLAS_INT_H

#include "cuda_int.h"

/* The smallest block of rows, columns or depth worth a staged product: below it the fp32
 * operands go to cuBLASLt as they are. */
#define ZT_CUDA_STAGE_MIN_BLOCK 64
#define ZT_CUDA_STAGE_GRAIN 64 /* block sizes are multiples of it (or the whole dimension) */

typedef enum {
    ZT_LT_DONE,    /* queued, or failed and recorded */
    ZT_LT_NO_ALGO, /* cuBLASLt has no algorithm or rejects it: nothing queued or recorded */
    ZT_LT_READY,   /* lt_prepare: descriptors and algorithm ready for lt_launch */
} zt_lt_result;

/* Runs g on cuBLASLt (bias as an epilogue where use_bias) on its operands as they are. */
zt_lt_result zt_blas_gemm_lt(zt_kctx *ctx, const zt_cuda_gemm *g, bool use_bias);

/* zt_cuda_gemm_run on g's own (fp32) operands */
void zt_blas_gemm_unstaged(zt_kctx *ctx, const zt_cuda_gemm *g);
/* g through 16-bit copies of its operands; false (nothing queued) where g does not go that
 * way: the caller runs it on its fp32 operands. */
bool zt_blas_gemm_staged(zt_kctx *ctx, const zt_cuda_gemm *g);

/* The zt_dtype of a zt_cuda_mm 16-bit mode. */
zt_dtype zt_blas_mm_dtype(int mm16);

/* The block size along a dimension of `whole` elements, `per` 16-bit elements each, that fits
 * `room`: whole, else a multiple of ZT_CUDA_STAGE_GRAIN of at least ZT_CUDA_STAGE_MIN_BLOCK,
 * else 0. */
int zt_blas_stage_fit(size_t room, size_t per, int whole);
/* Whether ctx's matmuls stage their inputs (staging on, 16-bit compute type). */
bool zt_blas_stage_usable(const zt_kctx *ctx);
/* Makes ctx->stage hold at least n elements (the old buffer is released once the stream is
 * done with it); false where the GPU has no room (reported once per size: the products run
 * unstaged) */
bool zt_blas_stage_reserve(zt_kctx *ctx, size_t n);
/* Rounds the block of a row-major matrix X (row stride ld) that holds op(X)'s rows [r0, r0 +
 * rn) and columns [c0, c0 + cn) into dst as a contiguous matrix of X's orientation (leading
 * dimension cn for t 'N', rn for 'T'). */
void zt_blas_stage_block(zt_kctx *ctx, uint16_t *dst, const void *X, int ld, char t, int r0, int rn,
                         int c0, int cn);
/* Rounds the block of A = afn's values that holds rows [m0, m0 + mn) and columns [k0, k0 + kn)
 * into dst (leading dimension kn), A's row stride ld; a LayerNorm takes whole rows. */
void zt_blas_afn_stage(zt_kctx *ctx, uint16_t *dst, const zt_cuda_afn *f, int ld, int m0, int mn,
                       int k0, int kn);
/* Rows [m0, m0 + mn) of A = afn's values in fp32 (row stride K). */
void zt_blas_afn_fp32(zt_kctx *ctx, float *A, const zt_cuda_afn *f, int m0, int mn, int K);

#endif
