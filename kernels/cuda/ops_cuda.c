/* zerotrain: the CUDA op table. Holds the context (device, non-blocking stream, cuBLASLt handle
 * and workspace, scratch), device and pinned memory, stream-ordered copies, and the translation
 * of CUDA failures into zt_status at this boundary; the compute ops live in blas_cuda.c and
 * blas_gemm.c (GEMMs, attention), gpt2_cuda.cu, layernorm_cuda.cu, gelu_cuda.cu, loss_cuda.cu
 * and optim_cuda.cu (kernels). */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/settings.h"
#include "cuda_int.h"

/* ---------------------------------------------------------------------------------------- */
/* errors */

void zt_cuda_fail(zt_kctx *ctx, zt_status st, const char *fmt, ...)
{
    char buf[ZT_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (ctx->st != ZT_OK) {
        ZT_DEBUG("kernels", "cuda: further failure after the first one: %s", buf);
        return;
    }
    ctx->st = st;
    snprintf(ctx->msg, sizeof(ctx->msg), "%s", buf);
}

/* What to do about e: a fault poisons the CUDA context for good, other errors do not. */
static const char *cuda_advice(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
        return "a kernel faulted and this process's GPU state is lost: restart the worker; run it under compute-sanitizer --tool memcheck to find the kernel";
    case cudaErrorMemoryAllocation:
        return "the GPU is out of memory: lower the micro batch or use a higher ZeRO stage or offload (zctl plan shows the needs)";
    default:
        return "check the GPU's health (nvidia-smi) and the driver";
    }
}

bool zt_cuda_check(zt_kctx *ctx, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return false;
    (void)cudaGetLastError(); /* clear the slot so a later launch check does not see it */
    zt_cuda_fail(ctx, ZT_ERR_CUDA, "GPU %d: %s failed: %s (%s); %s", ctx->device, what,
                 cudaGetErrorString(e), cudaGetErrorName(e), cuda_advice(e));
    return true;
}

void zt_cuda_check_launch(zt_kctx *ctx, const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        zt_cuda_fail(ctx, ZT_ERR_CUDA, "GPU %d: launching kernel %s failed: %s (%s); %s",
                     ctx->device, kernel, cudaGetErrorString(e), cudaGetErrorName(e),
                     cuda_advice(e));
    }
}

void zt_cuda_flush(zt_kctx *ctx)
{
    int n = ctx->red_pending;
    ctx->red_pending = 0;
    if (n > 0 &&
        zt_cuda_check(ctx,
                      cudaMemcpyAsync(ctx->red_host, ctx->red_dev, (size_t)n * 2 * sizeof(double),
                                      cudaMemcpyDeviceToHost, ctx->stream),
                      "copying norm results to the host"))
        n = 0;
    if (zt_cuda_check(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize")) return;
    for (int i = 0; i < n; i++) {
        ctx->red_out[i][0] += ctx->red_host[2 * i];
        ctx->red_out[i][1] += ctx->red_host[2 * i + 1];
    }
}

/* ---------------------------------------------------------------------------------------- */
/* context */

static void cuda_ctx_destroy(zt_kctx *ctx);

const char *zt_cuda_mm_name(int mm)
{
    static const char *const names[] = {"fp32", "tf32", "bf16", "fp16"};
    return mm >= ZT_MM_FP32 && mm <= ZT_MM_FP16 ? names[mm] : "?";
}

/* ZT_CUDA_MATMUL: unset or "" -1 (the job's precision decides, see set_matmul_dtype), else
 * "fp32", "tf32", "bf16" or "fp16"; anything else warns and counts as unset. */
static int mm_from_env(void)
{
    const char *s = zt_setting_choice(ZT_SET_CUDA_MATMUL);
    for (int mm = ZT_MM_FP32; s && mm <= ZT_MM_FP16; mm++)
        if (strcmp(s, zt_cuda_mm_name(mm)) == 0) return mm;
    return -1;
}

/* ZT_CUDA_ATTN: "fused" (attn_cuda.cu's kernels where the head size fits), "chunked" (cuBLASLt
 * GEMMs over the scratch), "cudnn", unset or empty: fused where the matmuls take 16-bit inputs
 * (the tensor-core kernels of attn_tc_cuda.cu, faster than chunked for GPT-2 124M in bf16),
 * chunked otherwise (as fast in fp32; docs/performance.md), and where those kernels would run
 * on the tensors' 16-bit homes, cuDNN's fused attention in their place (attn_cudnn_from_env).
 * Anything else warns and counts as unset. */
static int attn_fused_from_env(void)
{
    const char *s = zt_setting_choice(ZT_SET_CUDA_ATTN);
    if (s && strcmp(s, "chunked") == 0) return 0;
    if (s && strcmp(s, "fused") == 0) return 1;
    return ZT_CUDA_ATTN_AUTO;
}

/* Whether cuDNN's fused attention (attn_cudnn.c) runs where the tensor-core kernels would run
 * on the 16-bit homes: ZT_DNN_ASKED for ZT_CUDA_ATTN=cudnn, ZT_DNN_DEFAULT unset (or a value
 * ignored), 0 for "fused" and "chunked" or in a build without cuDNN's headers (which warns
 * where it was asked for). The default because a GPT-2 124M bf16 job trains faster with it
 * than with the kernels (docs/performance.md). Where the library cannot be loaded at run time,
 * the kernels run (said once). */
static int attn_cudnn_from_env(void)
{
    const char *s = zt_setting_env(ZT_SET_CUDA_ATTN); /* attn_fused_from_env warned */
    if (s && (strcmp(s, "fused") == 0 || strcmp(s, "chunked") == 0)) return 0;
    bool asked = s && strcmp(s, "cudnn") == 0;
    if (zt_cuda_dnn_built()) return asked ? ZT_DNN_ASKED : ZT_DNN_DEFAULT;
    if (asked)
        ZT_WARN("kernels", "ignoring ZT_CUDA_ATTN=cudnn: this build has no cuDNN (its headers "
                           "were not found next to the CUDA toolkit's); the attention runs on "
                           "zerotrain's own kernels");
    return 0;
}

/* ZT_CUDA_ATTN_DQ: how the tensor-core attention's backward gets dQ: "kernel" (unset or empty:
 * a second kernel recomputing the scores), "gemm" (the dK dV kernel writes dS to the scratch
 * and cuBLASLt multiplies it by K) or "atomic" (the mma.sync dK dV kernel, whatever
 * ZT_CUDA_ATTN_BWD says, adds each key block's share of dQ with atomics, as FlashAttention-2
 * does: no second pass, but the sums' order, so dQ's last bits, vary from run to run).
 * Anything else warns and counts as unset. Where cuDNN runs the attention (by default),
 * "atomic" also has its backward sum dQ by atomics (else its deterministic graph runs;
 * attn_cudnn.c). */
static int attn_dq_from_env(void)
{
    const char *s = zt_setting_choice(ZT_SET_CUDA_ATTN_DQ);
    if (strcmp(s, "gemm") == 0) return ZT_ATTN_DQ_GEMM;
    if (strcmp(s, "atomic") == 0) return ZT_ATTN_DQ_ATOMIC;
    return ZT_ATTN_DQ_KERNEL;
}

/* ZT_CUDA_ATTN_FWD and ZT_CUDA_ATTN_BWD: the tensor-core attention's forward and backward
 * kernels: "mma" (unset or empty: mma.sync with the scores in registers) or "wmma" (the warp
 * matrix functions, scores through shared memory); for the backward also "mma2" (the mma dK dV
 * kernel at the 246 registers it would take, 2 blocks an SM: slower than "mma", which holds it
 * to 168 for 3); for the forward "mma4" (held to 128 registers for 4 blocks an SM, where it
 * takes 135 for 3). Anything else warns and counts as unset. mma is the default: faster than
 * wmma forward and backward, and end to end (docs/performance.md). */
static int attn_mma_from_env(zt_setting id)
{
    const char *s = zt_setting_choice(id);
    if (strcmp(s, "wmma") == 0) return 0;
    if (strcmp(s, "mma2") == 0) return ZT_ATTN_BWD_MMA2;
    if (strcmp(s, "mma4") == 0) return ZT_ATTN_FWD_MMA4;
    return 1;
}

/* ZT_CUDA_LN_BWD: LayerNorm's backward by the kernel that loads a row whole before using it
 * ("row", unset or empty; where C is a multiple of 4 up to 1024 and the tensors are aligned) or
 * by the one that holds the column sums in registers and updates dinp 8 columns at a time
 * ("grouped", which runs anyway where the row kernel does not fit); layernorm_cuda.cu. Anything
 * else warns and counts as unset. */
static int ln_bwd_row_from_env(void)
{
    return strcmp(zt_setting_choice(ZT_SET_CUDA_LN_BWD), "grouped") != 0;
}

static zt_status cuda_ctx_create(zt_kctx **out, int device, zt_err *err)
{
    *out = NULL;
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev <= 0) {
        (void)cudaGetLastError();
        return zt_err_set(
            err, ZT_ERR_NO_DEVICE,
            "no usable CUDA GPU: cudaGetDeviceCount says %s; check the driver and CUDA_VISIBLE_DEVICES, or set resources.device to \"cpu\"",
            ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    }
    if (device < 0 || device >= ndev) {
        return zt_err_set(
            err, ZT_ERR_NO_DEVICE,
            "GPU %d does not exist: %d GPU(s) are visible (ordinals 0..%d); check CUDA_VISIBLE_DEVICES and the local rank",
            device, ndev, ndev - 1);
    }
    zt_kctx *ctx = zt_calloc(1, sizeof(*ctx));
    if (!ctx) {
        return zt_err_set(
            err, ZT_ERR_NOMEM,
            "cannot allocate the CUDA kernel context: out of host memory; free memory and retry");
    }
    ctx->device = device;
    ctx->mm_env = mm_from_env();
    ctx->mm = ctx->mm_env >= 0 ? ctx->mm_env : ZT_MM_FP32;
    ctx->attn_fused = attn_fused_from_env();
    ctx->attn_cudnn = attn_cudnn_from_env();
    ctx->attn_dq = attn_dq_from_env();
    ctx->ln_bwd_row = ln_bwd_row_from_env();
    ctx->attn_fwd_mma = attn_mma_from_env(ZT_SET_CUDA_ATTN_FWD);
    ctx->attn_bwd_mma = attn_mma_from_env(ZT_SET_CUDA_ATTN_BWD);
    ctx->gemm_tune = zt_setting_bool(ZT_SET_CUDA_GEMM_TUNE);
    ctx->stage_on = zt_cuda_stage_env();
    /* ZT_CUDA_STAGE_FUSED=0: every 16-bit copy by a pass of its own instead of fused into its
     * neighbour (tests/bench/gpu_train.py's zt-unfused row; bitwise the same results) */
    ctx->stage_fused = zt_setting_bool(ZT_SET_CUDA_STAGE_FUSED);
    ctx->stage_max = zt_cuda_stage_cap_elems();
    ctx->optimes = zt_optimes_env();
    zt_status st = ZT_OK;
    const char *what = NULL;
    cublasStatus_t bs;
    ctx->gemm_cache = zt_calloc(ZT_CUDA_GEMM_CACHE, sizeof(*ctx->gemm_cache));
    if (!ctx->gemm_cache) {
        st = zt_err_set(err, ZT_ERR_NOMEM,
                        "cannot allocate the CUDA kernel context: out of host memory");
        goto fail;
    }
    if ((ce = cudaSetDevice(device)) != cudaSuccess) {
        what = "cudaSetDevice";
        goto cuda_fail;
    }
    if ((ce = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        what = "cudaStreamCreateWithFlags";
        goto cuda_fail;
    }
    if ((ce = cudaStreamCreateWithFlags(&ctx->copy_stream, cudaStreamNonBlocking)) !=
        cudaSuccess) {
        what = "creating the copy stream (cudaStreamCreateWithFlags)";
        goto cuda_fail;
    }
    for (int i = 0; i < ZT_COPY_FENCES; i++)
        if ((ce = cudaEventCreateWithFlags(&ctx->fence[i], cudaEventDisableTiming)) !=
            cudaSuccess) {
            what = "creating the copy stream's events (cudaEventCreateWithFlags)";
            goto cuda_fail;
        }
    if ((st = zt_cuda_lt_load(err)) != ZT_OK) goto fail;
    if ((bs = cublasLtCreate(&ctx->lt)) != CUBLAS_STATUS_SUCCESS) {
        st = zt_err_set(
            err, ZT_ERR_CUDA,
            "GPU %d: cublasLtCreate failed: %s; check the CUDA installation (libcublasLt)", device,
            cublasLtGetStatusString(bs));
        ctx->lt = NULL;
        goto fail;
    }
    if ((ce = cudaMalloc(&ctx->lt_ws, ZT_CUDA_LT_WORKSPACE)) != cudaSuccess) {
        what = "allocating the cuBLASLt workspace";
        goto cuda_fail;
    }
    if ((ce = cudaMalloc((void **)&ctx->scratch, ZT_CUDA_SCRATCH_FLOATS * sizeof(float))) !=
        cudaSuccess) {
        what = "allocating the kernel scratch";
        goto cuda_fail;
    }
    if ((ce = cudaMalloc((void **)&ctx->red_dev, ZT_CUDA_RED_SLOTS * 2 * sizeof(double))) !=
        cudaSuccess) {
        what = "allocating the reduction slots";
        goto cuda_fail;
    }
    if ((ce = cudaMallocHost((void **)&ctx->red_host, ZT_CUDA_RED_SLOTS * 2 * sizeof(double))) !=
        cudaSuccess) {
        what = "allocating pinned host memory";
        goto cuda_fail;
    }
    /* can this GPU run the kernels of this build (sm_80/sm_90 code)? */
    zt_cuda_probe(ctx, ctx->scratch);
    if ((ce = cudaGetLastError()) != cudaSuccess ||
        (ce = cudaStreamSynchronize(ctx->stream)) != cudaSuccess) {
        struct cudaDeviceProp prop;
        memset(&prop, 0, sizeof(prop));
        (void)cudaGetDeviceProperties(&prop, device);
        (void)cudaGetLastError();
        st = zt_err_set(
            err, ZT_ERR_NO_DEVICE,
            "GPU %d (%s, compute capability %d.%d) cannot run zerotrain's kernels: %s; this build targets compute capability 8.0 and 9.0 (CMAKE_CUDA_ARCHITECTURES), rebuild for this GPU or use device \"cpu\"",
            device, prop.name, prop.major, prop.minor, cudaGetErrorString(ce));
        goto fail;
    }
    if (ctx->optimes) {
        ctx->mark_ev = zt_calloc(ZT_CUDA_MARKS, sizeof(*ctx->mark_ev));
        ctx->mark_label = zt_calloc(ZT_CUDA_MARKS, sizeof(*ctx->mark_label));
        if (!ctx->mark_ev || !ctx->mark_label) {
            st =
                zt_err_set(err, ZT_ERR_NOMEM,
                           "cannot allocate the op times' marks (ZT_OP_TIMES): out of host memory");
            goto fail;
        }
    }
    if (ctx->mm_env >= 0)
        ZT_INFO("kernels", "GPU %d: matmuls with %s inputs (ZT_CUDA_MATMUL)", device,
                zt_cuda_mm_name(ctx->mm));
    *out = ctx;
    return ZT_OK;

cuda_fail:
    (void)cudaGetLastError();
    st = zt_err_set(
        err, ce == cudaErrorMemoryAllocation ? ZT_ERR_NOMEM : ZT_ERR_CUDA,
        "GPU %d: %s failed while creating the kernel context: %s (%s); check that the GPU is free and healthy (nvidia-smi)",
        device, what, cudaGetErrorString(ce), cudaGetErrorName(ce));
fail:
    cuda_ctx_destroy(ctx);
    return st;
}

static void cuda_ctx_destroy(zt_kctx *ctx)
{
    if (!ctx) return;
    if (ctx->stream) (void)cudaStreamSynchronize(ctx->stream);
    if (ctx->copy_stream) (void)cudaStreamSynchronize(ctx->copy_stream);
    if (ctx->lt) cublasLtDestroy(ctx->lt);
    zt_cuda_dnn_free(ctx);
    cudaFree(ctx->lt_ws);
    cudaFree(ctx->scratch);
    cudaFree(ctx->red_dev);
    cudaFree(ctx->enc_dev);
    cudaFree(ctx->stage);
    if (ctx->red_host) cudaFreeHost(ctx->red_host);
    if (ctx->enc_host) cudaFreeHost(ctx->enc_host);
    for (int i = 0; i < ctx->mark_made; i++)
        cudaEventDestroy(ctx->mark_ev[i]);
    for (int i = 0; i < ZT_COPY_FENCES; i++)
        if (ctx->fence[i]) cudaEventDestroy(ctx->fence[i]);
    if (ctx->copy_stream) cudaStreamDestroy(ctx->copy_stream);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
    (void)cudaGetLastError();
    zt_free(ctx->mark_ev);
    zt_free(ctx->mark_label);
    zt_free(ctx->enc_count);
    zt_free(ctx->gemm_cache);
    zt_free(ctx);
}

/* ---------------------------------------------------------------------------------------- */
/* memory and copies */

static void *cuda_alloc(zt_kctx *ctx, size_t bytes)
{
    (void)ctx;
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is reported by the NULL, not by the next op */
        return NULL;
    }
    return p;
}

static void cuda_free(zt_kctx *ctx, void *p)
{
    if (p) zt_cuda_check(ctx, cudaFree(p), "cudaFree");
}

static void *cuda_host_alloc(zt_kctx *ctx, size_t bytes)
{
    (void)ctx;
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(zt_kctx *ctx, void *p)
{
    if (p) zt_cuda_check(ctx, cudaFreeHost(p), "cudaFreeHost");
}

static void cuda_memset0(zt_kctx *ctx, void *p, size_t bytes)
{
    if (bytes) zt_cuda_check(ctx, cudaMemsetAsync(p, 0, bytes, ctx->stream), "cudaMemsetAsync");
}

/* Host to device, queued on the stream. A pageable source may be reused on return (the driver
 * stages it); a pinned source (host_alloc) must stay unchanged until the next sync. */
static void cuda_copy_h2d(zt_kctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        zt_cuda_check(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx->stream),
                      "copying host to device (cudaMemcpyAsync)");
}

/* Device to host; complete on return (like the CPU backend), since callers read dst next. */
static void cuda_copy_d2h(zt_kctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return;
    if (zt_cuda_check(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx->stream),
                      "copying device to host (cudaMemcpyAsync)"))
        return;
    zt_cuda_check(ctx, cudaStreamSynchronize(ctx->stream),
                  "waiting for a device-to-host copy (cudaStreamSynchronize)");
}

static void cuda_copy_d2d(zt_kctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        zt_cuda_check(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx->stream),
                      "copying device to device (cudaMemcpyAsync)");
}

static void *cuda_stream(zt_kctx *ctx)
{
    return (void *)ctx->stream;
}

/* ---- the copy stream ---- */

static bool fence_ok(zt_kctx *ctx, int f)
{
    if (f >= 0 && f < ZT_COPY_FENCES) return true;
    zt_cuda_fail(ctx, ZT_ERR_INVALID, "GPU %d: copy stream fence %d is out of range 0..%d",
                 ctx->device, f, ZT_COPY_FENCES - 1);
    return false;
}

static void cuda_fence_record(zt_kctx *ctx, int f)
{
    if (fence_ok(ctx, f))
        zt_cuda_check(ctx, cudaEventRecord(ctx->fence[f], ctx->stream),
                      "recording a fence on the compute stream (cudaEventRecord)");
}

/* Pinned host memory makes the copy truly asynchronous: it runs on the copy engine while the
 * compute stream computes. */
static void cuda_copy_async(zt_kctx *ctx, void *dst, const void *src, size_t bytes, int after,
                            int done)
{
    if (after >= 0 &&
        (!fence_ok(ctx, after) ||
         zt_cuda_check(ctx, cudaStreamWaitEvent(ctx->copy_stream, ctx->fence[after], 0),
                       "ordering the copy stream (cudaStreamWaitEvent)")))
        return;
    if (bytes && zt_cuda_check(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                                    ctx->copy_stream),
                               "copying on the copy stream (cudaMemcpyAsync)"))
        return;
    if (fence_ok(ctx, done))
        zt_cuda_check(ctx, cudaEventRecord(ctx->fence[done], ctx->copy_stream),
                      "recording a fence on the copy stream (cudaEventRecord)");
}

static void cuda_fence_wait(zt_kctx *ctx, int f)
{
    if (fence_ok(ctx, f))
        zt_cuda_check(ctx, cudaStreamWaitEvent(ctx->stream, ctx->fence[f], 0),
                      "waiting for a copy-stream fence (cudaStreamWaitEvent)");
}

/* The compute stream first: a failure there (a faulting kernel) is the one reported. */
static zt_status cuda_sync(zt_kctx *ctx, zt_err *err)
{
    zt_cuda_flush(ctx);
    zt_cuda_check(ctx, cudaStreamSynchronize(ctx->copy_stream),
                  "waiting for the copy stream (cudaStreamSynchronize)");
    if (ctx->st != ZT_OK) return zt_err_set(err, ctx->st, "%s", ctx->msg);
    return ZT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* op times (ZT_OP_TIMES) */

/* Adds the intervals between the marks recorded since the last fold to their labels' totals
 * (waiting for the last mark's event), keeping that mark as the start of the open interval. */
static void marks_fold(zt_kctx *ctx)
{
    int n = ctx->mark_n;
    if (n == 0) return;
    cudaEvent_t *ev = ctx->mark_ev;
    if (zt_cuda_check(ctx, cudaEventSynchronize(ev[n - 1]), "waiting for an op-time mark")) {
        ctx->mark_n = 0;
        return;
    }
    for (int i = 0; i + 1 < n; i++) {
        float ms = 0.0f;
        if (!ctx->mark_label[i]) continue;
        if (zt_cuda_check(ctx, cudaEventElapsedTime(&ms, ev[i], ev[i + 1]),
                          "timing an op-time interval (cudaEventElapsedTime)"))
            break;
        zt_optimes_add(&ctx->times, ctx->mark_label[i], (double)ms);
    }
    cudaEvent_t last = ev[n - 1];
    ev[n - 1] = ev[0];
    ev[0] = last;
    ctx->mark_label[0] = ctx->mark_label[n - 1];
    ctx->mark_n = 1;
}

static void cuda_mark(zt_kctx *ctx, const char *label)
{
    if (!ctx->optimes) return;
    if (!label && (ctx->mark_n == 0 || !ctx->mark_label[ctx->mark_n - 1])) return;
    if (ctx->mark_n == ZT_CUDA_MARKS) marks_fold(ctx);
    int i = ctx->mark_n;
    if (i == ctx->mark_made) {
        if (zt_cuda_check(ctx, cudaEventCreate(&ctx->mark_ev[i]), "creating an op-time event"))
            return;
        ctx->mark_made++;
    }
    if (zt_cuda_check(ctx, cudaEventRecord(ctx->mark_ev[i], ctx->stream),
                      "recording an op-time mark"))
        return;
    ctx->mark_label[i] = label;
    ctx->mark_n++;
}

static void cuda_marks_take(zt_kctx *ctx, zt_optimes *out)
{
    cuda_mark(ctx, NULL);
    marks_fold(ctx);
    ctx->mark_n = 0;
    *out = ctx->times;
    ctx->times.n = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* ops that need host work around their kernels */

/* LayerNorm's backward of a 16-bit dout: read in place by the one-pass kernel where it takes
 * it, else widened into dact first (the same bits) */
static void cuda_layernorm_backward16(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                      const void *dout16, zt_dtype dt16, float *dact,
                                      const float *inp, const float *weight, const float *mean,
                                      const float *rstd, int N, int C)
{
    int mm16 = zt_cuda_dtype_mm(dt16);
    if (mm16 != ZT_MM_FP32 && zt_cuda_layernorm_backward16(ctx, dinp, dweight, dbias, dout16, mm16,
                                                           inp, weight, mean, rstd, N, C))
        return;
    if (N > 0 && C > 0)
        zt_cuda_cast(ctx, dact, (int)ZT_F32, dout16, (int)dt16, (size_t)N * (size_t)C);
    zt_cuda_layernorm_backward(ctx, dinp, dweight, dbias, dact, inp, weight, mean, rstd, N, C);
}

static void cuda_sumsq_nonfinite(zt_kctx *ctx, const void *x, zt_dtype dtype, size_t n,
                                 double out[2])
{
    if (n == 0) return;
    if (ctx->red_pending == ZT_CUDA_RED_SLOTS) zt_cuda_flush(ctx);
    int k = ctx->red_pending++;
    ctx->red_out[k] = out;
    zt_cuda_sumsq(ctx, ctx->red_dev + 2 * (size_t)k, x, (int)dtype, n);
}

/* The zt_dtype arguments cross into the .cu launchers as int (cuda_int.h says why). */
static void cuda_adamw(zt_kctx *ctx, float *param, const void *grad, zt_dtype grad_dtype, float *m,
                       float *v, size_t n, const zt_adamw_args *args, void *param_lp,
                       zt_dtype lp_dtype)
{
    zt_cuda_adamw(ctx, param, grad, (int)grad_dtype, m, v, n, args, param_lp, (int)lp_dtype);
}

static void cuda_cast(zt_kctx *ctx, void *dst, zt_dtype dst_dtype, const void *src,
                      zt_dtype src_dtype, size_t n)
{
    zt_cuda_cast(ctx, dst, (int)dst_dtype, src, (int)src_dtype, n);
}

static void cuda_accumulate(zt_kctx *ctx, void *dst, zt_dtype dst_dtype, const float *src,
                            float scale, size_t n)
{
    zt_cuda_accumulate(ctx, dst, (int)dst_dtype, src, scale, n);
}

/* Grows a pinned host buffer of int32 to at least n elements (contents dropped). The stream
 * must be idle (no queued copy may still read the old buffer). */
static bool grow_host_i32(zt_kctx *ctx, int32_t **p, size_t *cap, size_t n)
{
    if (n <= *cap) return true;
    if (*p) cudaFreeHost(*p);
    *p = NULL;
    *cap = 0;
    if (zt_cuda_check(ctx, cudaMallocHost((void **)p, n * sizeof(int32_t)),
                      "allocating pinned memory for encoder_backward"))
        return false;
    *cap = n;
    return true;
}

static bool grow_dev_i32(zt_kctx *ctx, int32_t **p, size_t *cap, size_t n)
{
    if (n <= *cap) return true;
    cudaFree(*p); /* synchronizes the device: nothing still reads it */
    *p = NULL;
    *cap = 0;
    if (zt_cuda_check(ctx, cudaMalloc((void **)p, n * sizeof(int32_t)),
                      "allocating device memory for encoder_backward"))
        return false;
    *cap = n;
    return true;
}

/* The token-embedding gradient sums, for each token, its rows of dout in position order, so
 * that the result is deterministic (no float atomics) and bitwise the CPU backend's. The
 * grouping (a counting sort of positions by token) is done on the host: the ids come down
 * once (B*T int32), the groups go up; this waits for the stream once per call. */
static void cuda_encoder_backward(zt_kctx *ctx, float *dwte, float *dwpe, const float *dout,
                                  const int32_t *inp, int B, int T, int C)
{
    if (B <= 0 || T <= 0 || C <= 0) return;
    if (dwpe) zt_cuda_encoder_dwpe(ctx, dwpe, dout, B, T, C);
    if (!dwte) return;
    size_t N = (size_t)B * (size_t)T;
    if (zt_cuda_check(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize")) return;
    /* host layout: ids [0,N) | nu | tok [nu] | start [nu+1] | order [N]; at most 4N+2 */
    if (!grow_host_i32(ctx, &ctx->enc_host, &ctx->enc_host_cap, 4 * N + 2) ||
        !grow_dev_i32(ctx, &ctx->enc_dev, &ctx->enc_dev_cap, ZT_CUDA_TOKEN_GROUP_INTS(N)))
        return;
    int32_t *ids = ctx->enc_host;
    if (zt_cuda_check(
            ctx,
            cudaMemcpyAsync(ids, inp, N * sizeof(int32_t), cudaMemcpyDeviceToHost, ctx->stream),
            "copying token ids to the host") ||
        zt_cuda_check(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize"))
        return;
    int32_t maxid = -1;
    for (size_t i = 0; i < N; i++)
        if (ids[i] > maxid) maxid = ids[i];
    if (maxid < 0) return; /* no valid token (negative ids are skipped, as they have no row) */
    size_t nb = (size_t)maxid + 2;
    if (nb > ctx->enc_count_cap) {
        zt_free(ctx->enc_count);
        ctx->enc_count_cap = 0;
        ctx->enc_count = zt_malloc(nb * sizeof(int32_t));
        if (!ctx->enc_count) {
            zt_cuda_fail(ctx, ZT_ERR_NOMEM,
                         "encoder_backward: out of host memory for %zu token buckets", nb);
            return;
        }
        ctx->enc_count_cap = nb;
    }
    int32_t *cnt = ctx->enc_count;
    memset(cnt, 0, nb * sizeof(int32_t));
    for (size_t i = 0; i < N; i++)
        if (ids[i] >= 0) cnt[ids[i]]++;
    int32_t nu = 0;
    for (size_t v = 0; v + 1 < nb; v++)
        nu += cnt[v] > 0;
    int32_t *grp = ids + N;
    int32_t *tok = grp + 1, *start = tok + nu, *order = start + nu + 1;
    grp[0] = nu;
    /* cnt[v] becomes the first slot of token v in order[] (exclusive scan) */
    int32_t pos = 0, u = 0;
    for (size_t v = 0; v + 1 < nb; v++) {
        int32_t c = cnt[v];
        cnt[v] = pos;
        if (c > 0) {
            tok[u] = (int32_t)v;
            start[u] = pos;
            u++;
        }
        pos += c;
    }
    start[nu] = pos;
    for (size_t i = 0; i < N; i++) /* stable: positions ascend within a token */
        if (ids[i] >= 0) order[cnt[ids[i]]++] = (int32_t)i;
    size_t len = 2 * (size_t)nu + 1 + (size_t)pos; /* tok, start, order */
    int32_t *d_tok = ctx->enc_dev;
    if (zt_cuda_check(
            ctx,
            cudaMemcpyAsync(d_tok, tok, len * sizeof(int32_t), cudaMemcpyHostToDevice, ctx->stream),
            "copying token groups to the device"))
        return;
    zt_cuda_encoder_dwte(ctx, dwte, dout, d_tok, d_tok + nu, d_tok + 2 * nu + 1, nu, C);
}

/* ---------------------------------------------------------------------------------------- */
/* table */

/* blas_cuda.c */
void zt_cuda_matmul_forward(zt_kctx *ctx, float *out, const float *inp, const float *weight,
                            const float *bias, int N, int C, int OC);
void zt_cuda_matmul_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight, int N, int C,
                             int OC);
void zt_cuda_matmul_gelu_backward(zt_kctx *ctx, float *dpre, float *dweight, float *dbias,
                                  const float *dout, float *inp, const float *weight,
                                  const float *pre, int N, int C, int OC);
void zt_cuda_matmul_gelu_forward(zt_kctx *ctx, float *out, float *pre, const float *inp,
                                 const float *weight, const float *bias, int N, int C, int OC);
void zt_cuda_attention_forward(zt_kctx *ctx, float *out, float *lse, float *scratch, float *qkv,
                               const zt_attn_home *home, int B, int T, int C, int NH);
void zt_cuda_attention_backward(zt_kctx *ctx, float *dqkv, float *scratch, const float *dout,
                                float *qkv, float *out, const float *lse, const zt_attn_home *home,
                                int B, int T, int C, int NH);
void zt_cuda_attention_backward16(zt_kctx *ctx, void *dqkv16, zt_dtype dt16, float *dqkv,
                                  float *scratch, float *dout, const void *dout16, float *qkv,
                                  float *out, const float *lse, const zt_attn_home *home, int B,
                                  int T, int C, int NH);
void zt_cuda_matmul16_forward(zt_kctx *ctx, float *out, float *act, const void *in16, zt_dtype dt16,
                              const float *weight, const float *bias, const float *res, int N,
                              int C, int OC);
void zt_cuda_matmul16_backward(zt_kctx *ctx, float *dinp, void *dinp16, float *dweight,
                               float *dbias, const float *dout, float *act, const void *in16,
                               zt_dtype dt16, const float *weight, int N, int C, int OC);

static void cuda_set_matmul_dtype(zt_kctx *ctx, zt_dtype dtype)
{
    int mm = ctx->mm_env >= 0 ? ctx->mm_env : zt_cuda_dtype_mm(dtype);
    if (mm != ctx->mm)
        ZT_INFO("kernels", "GPU %d: matmuls with %s inputs (%s parameters%s)", ctx->device,
                zt_cuda_mm_name(mm), zt_dtype_name(dtype),
                ctx->mm_env >= 0 ? ", ZT_CUDA_MATMUL set" : "");
    ctx->mm = mm;
}

static bool cuda_mem_info(zt_kctx *ctx, size_t *avail, size_t *total)
{
    (void)ctx;
    if (cudaMemGetInfo(avail, total) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

static const zt_ops cuda_ops = {
    .name = "cuda",
    .ctx_create = cuda_ctx_create,
    .ctx_destroy = cuda_ctx_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .memset0 = cuda_memset0,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .copy_d2d = cuda_copy_d2d,
    .stream = cuda_stream,
    .sync = cuda_sync,
    .fence_record = cuda_fence_record,
    .copy_async = cuda_copy_async,
    .fence_wait = cuda_fence_wait,
    .set_matmul_dtype = cuda_set_matmul_dtype,
    .mem_info = cuda_mem_info,
    .mark = cuda_mark,
    .marks_take = cuda_marks_take,
    .encoder_forward = zt_cuda_encoder_forward,
    .encoder_backward = cuda_encoder_backward,
    .layernorm_forward = zt_cuda_layernorm_forward,
    .residual_layernorm_forward = zt_cuda_residual_layernorm_forward,
    .layernorm_backward = zt_cuda_layernorm_backward,
    .layernorm_backward16 = cuda_layernorm_backward16,
    .matmul_forward = zt_cuda_matmul_forward,
    .matmul_backward = zt_cuda_matmul_backward,
    .matmul_gelu_backward = zt_cuda_matmul_gelu_backward,
    .matmul_gelu_forward = zt_cuda_matmul_gelu_forward,
    .gelu_matmul_forward = zt_cuda_gelu_matmul_forward,
    .layernorm_matmul_forward = zt_cuda_layernorm_matmul_forward,
    .layernorm_matmul_forward16 = zt_cuda_layernorm_matmul_forward16,
    .layernorm_matmul_backward = zt_cuda_layernorm_matmul_backward,
    .matmul16_forward = zt_cuda_matmul16_forward,
    .matmul16_backward = zt_cuda_matmul16_backward,
    .matmul_forward16 = zt_cuda_matmul_forward16,
    .gelu16_matmul_forward = zt_cuda_gelu16_matmul_forward,
    .matmul_gelu16_backward = zt_cuda_matmul_gelu16_backward,
    .layernorm_matmul16_backward = zt_cuda_layernorm_matmul16_backward,
    .attention_forward = zt_cuda_attention_forward,
    .attention_backward = zt_cuda_attention_backward,
    .attention_backward16 = zt_cuda_attention_backward16,
    .gelu_forward = zt_cuda_gelu_forward,
    .gelu_backward = zt_cuda_gelu_backward,
    .residual_forward = zt_cuda_residual_forward,
    .residual_backward = zt_cuda_residual_backward,
    .crossentropy_forward_backward = zt_cuda_crossentropy,
    .classifier_forward_backward = zt_cuda_classifier,
    .classifier16_forward_backward = zt_cuda_classifier16,
    .adamw = cuda_adamw,
    .round16 = zt_cuda_round16,
    .cast = cuda_cast,
    .accumulate = cuda_accumulate,
    .scale = zt_cuda_scale,
    .sumsq_nonfinite = cuda_sumsq_nonfinite,
};

const zt_ops *zt_ops_cuda(void)
{
    return &cuda_ops;
}
