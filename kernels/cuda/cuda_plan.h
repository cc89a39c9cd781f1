/* zerotrain: what a plan needs to know of the CUDA backend without a CUDA build: the device
 * memory a context holds beside the table's allocations, and the sizes of the matmuls' 16-bit
 * staging. Compiled into every build (cuda_plan.c); the engine sizes its jobs by it. */
#ifndef ZT_KERNELS_CUDA_PLAN_H
#define ZT_KERNELS_CUDA_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "../../common/dtype.h"

/* Device memory the CUDA backend's context holds beyond what is allocated through the table:
 * cuBLASLt's workspace, the kernel scratch, the reduction slots, and encoder_backward's token
 * groups for micro-batches of B x T tokens. */
#define ZT_CUDA_LT_WORKSPACE ((size_t)32 << 20)  /* Hopper wants 32 MiB for its best kernels */
#define ZT_CUDA_SCRATCH_FLOATS ((size_t)1 << 20) /* partial sums: column reductions, norms */
#define ZT_CUDA_RED_SLOTS 256 /* sumsq_nonfinite results waiting for the next sync */
/* int32 entries of encoder_backward's device token groups for n tokens (tok, start, order) */
#define ZT_CUDA_TOKEN_GROUP_INTS(n) (3 * (size_t)(n) + 2)
size_t zt_cuda_context_device_bytes(int B, int T);

/* The CUDA matmuls with 16-bit inputs round each operand into a 16-bit copy first (a device
 * buffer of the context, grown to the largest product seen and capped), so that cuBLASLt runs
 * its kernels for 16-bit operands: with fp32 operands it converts them as it loads them, at
 * about half the tensor cores' rate (docs/performance.md). A product whose operands exceed the
 * cap runs in blocks of rows, columns or depth; a linear layer's backward takes its two
 * products from one set of copies (dout rounded once). ZT_CUDA_GEMM_STAGE=0 turns
 * this off; ZT_CUDA_GEMM_STAGE_MIB sets the cap (default ZT_CUDA_STAGE_MIB: the 16-bit copy of a
 * whole chunk of the classifier's logits, ZT_GPT2_LOGITS_BUDGET, so that its backward runs in
 * one block). Where a pass that runs anyway can make a copy, it does (LayerNorm's and GELU's
 * outputs as matmul inputs, the classifier's dlogits; ZT_CUDA_STAGE_FUSED=0 gives each copy a
 * pass of its own, the same bits). */
#define ZT_CUDA_STAGE_MIB 512
/* ZT_CUDA_GEMM_STAGE: false for "0", else true (a value other than 0 or 1 warns). */
bool zt_cuda_stage_env(void);
/* Whether the matmuls of a job whose compute parameters are `pdt` stage their inputs: 16-bit
 * inputs (ZT_CUDA_MATMUL, else pdt) and ZT_CUDA_GEMM_STAGE not 0. */
bool zt_cuda_stage_wanted(zt_dtype pdt);
/* The cap in 16-bit elements (ZT_CUDA_GEMM_STAGE_MIB; a bad value warns and gives the default;
 * at least ZT_CUDA_STAGE_MIN_ELEMS). */
#define ZT_CUDA_STAGE_MIN_ELEMS ((size_t)4096)
size_t zt_cuda_stage_cap_elems(void);
/* The staging buffer's first region (op(B) of a product, padded to 256 bytes) and the
 * elements it needs for a whole M x N x K product (a 16-bit copy of the bias included), at
 * most cap. */
size_t zt_cuda_stage_pad(size_t elems);
size_t zt_cuda_stage_elems(size_t M, size_t N, size_t K, size_t cap);
/* The elements a linear layer's backward (N rows, C inputs, OC outputs) wants for its two
 * products from one set of copies (the weight, then dout and inp by blocks of rows), at most
 * cap. */
size_t zt_cuda_stage_bwd_elems(size_t N, size_t C, size_t OC, size_t cap);

#endif
