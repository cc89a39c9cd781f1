/* zerotrain: the CPU op table. Holds the context (thread count, attention settings, scratch)
 * and host memory; the compute ops live in gpt2_cpu.c, matmul_cpu.c and optim_cpu.c.
 * Everything runs synchronously on the calling thread plus OpenMP workers. */
#define _POSIX_C_SOURCE 200809L

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/settings.h"
#include "common/timeutil.h"
#include "cpu_int.h"

#define ZT_CPU_ALIGN 256
/* Default ctx->par_min: below this many items a parallel region costs more than it saves. */
#define ZT_CPU_PAR_MIN 32768
/* memset/memcpy are split over threads in chunks of this many bytes. */
#define ZT_CPU_COPY_CHUNK ((size_t)1 << 20)

int zt_cpu_threads_for(const zt_kctx *ctx, size_t n)
{
    return (ctx->nthreads > 1 && n >= ctx->par_min) ? ctx->nthreads : 1;
}

float *zt_cpu_scratch(zt_kctx *ctx, size_t nfloats)
{
    if (nfloats <= ctx->scratch_floats) return ctx->scratch;
    if (nfloats > SIZE_MAX / sizeof(float)) return NULL;
    float *p = zt_aligned_alloc(64, nfloats * sizeof(float));
    if (!p) return NULL;
    zt_free(ctx->scratch);
    ctx->scratch = p;
    ctx->scratch_floats = nfloats;
    return p;
}

static zt_status cpu_ctx_create(zt_kctx **out, int device, zt_err *err)
{
    (void)device;
    *out = NULL;
    zt_kctx *ctx = zt_calloc(1, sizeof(*ctx));
    if (!ctx) {
        return zt_err_set(
            err, ZT_ERR_NOMEM,
            "cannot allocate the CPU kernel context: out of memory; free memory or lower the batch size");
    }
    int nt = omp_get_max_threads();
    ctx->nthreads = nt > 0 ? nt : 1;
    ctx->attn_mode = ZT_CPU_ATTN_OUTER;
    if (strcmp(zt_setting_choice(ZT_SET_CPU_ATTN), "inner") == 0)
        ctx->attn_mode = ZT_CPU_ATTN_INNER;
    ctx->par_min = ZT_CPU_PAR_MIN;
    /* a bad value warns, since a typo would otherwise silently change the speed */
    ctx->attn_block = (int)zt_setting_int(ZT_SET_CPU_ATTN_BLOCK);
    ctx->optimes = zt_optimes_env();
    *out = ctx;
    return ZT_OK;
}

static void cpu_ctx_destroy(zt_kctx *ctx)
{
    if (!ctx) return;
    zt_free(ctx->scratch);
    zt_free(ctx);
}

/* op times: the ops run synchronously, so the clock is where the stream is */
static void cpu_mark(zt_kctx *ctx, const char *label)
{
    if (!ctx->optimes) return;
    double now = (double)zt_now_ns() * 1e-6;
    if (ctx->mark_label) zt_optimes_add(&ctx->times, ctx->mark_label, now - ctx->mark_ms);
    ctx->mark_label = label;
    ctx->mark_ms = now;
}

static void cpu_marks_take(zt_kctx *ctx, zt_optimes *out)
{
    cpu_mark(ctx, NULL);
    *out = ctx->times;
    ctx->times.n = 0;
}

static void *cpu_alloc(zt_kctx *ctx, size_t bytes)
{
    (void)ctx;
    /* round up so that vector loops may touch a whole last cache line */
    size_t n = bytes ? (bytes + ZT_CPU_ALIGN - 1) / ZT_CPU_ALIGN * ZT_CPU_ALIGN : ZT_CPU_ALIGN;
    if (n < bytes) return NULL;
    return zt_aligned_alloc(ZT_CPU_ALIGN, n);
}

static void cpu_free(zt_kctx *ctx, void *p)
{
    (void)ctx;
    zt_free(p);
}

static void cpu_memset0(zt_kctx *ctx, void *p, size_t bytes)
{
    size_t nchunks = (bytes + ZT_CPU_COPY_CHUNK - 1) / ZT_CPU_COPY_CHUNK;
    int nt = (ctx->nthreads > 1 && nchunks >= 4) ? ctx->nthreads : 1;
    char *c = p;
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t k = 0; k < nchunks; k++) {
        size_t off = k * ZT_CPU_COPY_CHUNK;
        size_t len = bytes - off < ZT_CPU_COPY_CHUNK ? bytes - off : ZT_CPU_COPY_CHUNK;
        memset(c + off, 0, len);
    }
}

static void cpu_copy(zt_kctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (dst == src || bytes == 0) return;
    size_t nchunks = (bytes + ZT_CPU_COPY_CHUNK - 1) / ZT_CPU_COPY_CHUNK;
    int nt = (ctx->nthreads > 1 && nchunks >= 4) ? ctx->nthreads : 1;
    char *d = dst;
    const char *s = src;
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel : nt > 1)
    for (size_t k = 0; k < nchunks; k++) {
        size_t off = k * ZT_CPU_COPY_CHUNK;
        size_t len = bytes - off < ZT_CPU_COPY_CHUNK ? bytes - off : ZT_CPU_COPY_CHUNK;
        memcpy(d + off, s + off, len);
    }
}

/* One stream: a copy is complete on return, so there is nothing to fence. */
static void cpu_fence(zt_kctx *ctx, int f)
{
    (void)ctx;
    (void)f;
}

static void cpu_copy_async(zt_kctx *ctx, void *dst, const void *src, size_t bytes, int after,
                           int done)
{
    (void)after;
    (void)done;
    cpu_copy(ctx, dst, src, bytes);
}

static void *cpu_stream(zt_kctx *ctx)
{
    (void)ctx;
    return NULL;
}

/* Everything already ran; what is left to report is a matmul that oneDNN refused. */
static zt_status cpu_sync(zt_kctx *ctx, zt_err *err)
{
    (void)ctx;
    int first;
    long n = zt_cpu_take_sgemm_failures(&first);
    if (n > 0)
        return zt_err_set(
            err, ZT_ERR_INTERNAL,
            "%ld matrix multiplication(s) failed in oneDNN (first status %d), so this step's results are wrong; the log names the shapes: report it as a bug with that line",
            n, first);
    return ZT_OK;
}

static void cpu_set_matmul_dtype(zt_kctx *ctx, zt_dtype dtype)
{
    (void)ctx, (void)dtype; /* oneDNN sgemm: fp32 whatever the parameters' storage */
}

/* MemAvailable and MemTotal of /proc/meminfo: what the kernel could give without swapping. */
static bool cpu_mem_info(zt_kctx *ctx, size_t *avail, size_t *total)
{
    (void)ctx;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return false;
    char line[256];
    unsigned long long kb;
    int found = 0;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *avail = (size_t)kb * 1024;
            found |= 1;
        } else if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
            *total = (size_t)kb * 1024;
            found |= 2;
        }
    }
    fclose(f);
    return found == 3;
}

/* oneDNN's sgemm has no GELU post-op on this path: the two ops, bitwise. */
static void cpu_matmul_gelu_forward(zt_kctx *ctx, float *out, float *pre, const float *inp,
                                    const float *weight, const float *bias, int N, int C, int OC)
{
    zt_cpu_matmul_forward(ctx, pre, inp, weight, bias, N, C, OC);
    if (N > 0 && OC > 0) zt_cpu_gelu_forward(ctx, out, pre, (size_t)N * (size_t)OC);
}

/* The two ops, bitwise: the LayerNorm into ln, then the product. */
static void cpu_layernorm_matmul_forward(zt_kctx *ctx, float *out, float *ln, float *mean,
                                         float *rstd, const float *x, const float *lnw,
                                         const float *lnb, const float *weight, const float *bias,
                                         int N, int C, int OC)
{
    zt_cpu_layernorm_forward(ctx, ln, mean, rstd, x, lnw, lnb, N, C);
    zt_cpu_matmul_forward(ctx, out, ln, weight, bias, N, C, OC);
}

static void cpu_attention_backward16(zt_kctx *ctx, void *dqkv16, zt_dtype dt16, float *dqkv,
                                     float *scratch, float *dout, const void *dout16, float *qkv,
                                     float *out, const float *lse, const zt_attn_home *home, int B,
                                     int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    size_t n = (size_t)B * T * 3 * (size_t)C;
    if (dout16) zt_cpu_cast(ctx, dout, ZT_F32, dout16, dt16, (size_t)B * T * (size_t)C);
    cpu_memset0(ctx, dqkv, n * sizeof(float));
    zt_cpu_attention_backward(ctx, dqkv, scratch, dout, qkv, out, lse, home, B, T, C, NH);
    zt_cpu_cast(ctx, dqkv16, dt16, dqkv, ZT_F32, n);
}

static void cpu_layernorm_matmul_forward16(zt_kctx *ctx, void *out16, zt_dtype dt16, float *out,
                                           float *ln, float *mean, float *rstd, const float *x,
                                           const float *lnw, const float *lnb, const float *weight,
                                           const float *bias, int N, int C, int OC)
{
    cpu_layernorm_matmul_forward(ctx, out, ln, mean, rstd, x, lnw, lnb, weight, bias, N, C, OC);
    if (N > 0 && OC > 0) zt_cpu_cast(ctx, out16, dt16, out, ZT_F32, (size_t)N * (size_t)OC);
}

/* The two ops, bitwise: the LayerNorm again into ln, then the product's backward. */
static void cpu_layernorm_matmul_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                          const float *dout, float *ln, const float *x,
                                          const float *lnw, const float *lnb, const float *weight,
                                          int N, int C, int OC)
{
    if (dweight) zt_cpu_layernorm_forward(ctx, ln, NULL, NULL, x, lnw, lnb, N, C);
    zt_cpu_matmul_backward(ctx, dinp, dweight, dbias, dout, ln, weight, N, C, OC);
}

/* The two ops, bitwise: GELU's output into act, then the product. */
static void cpu_gelu_matmul_forward(zt_kctx *ctx, float *out, float *act, const float *pre,
                                    const float *weight, const float *bias, int N, int C, int OC)
{
    if (N > 0 && C > 0) zt_cpu_gelu_forward(ctx, act, pre, (size_t)N * (size_t)C);
    zt_cpu_matmul_forward(ctx, out, act, weight, bias, N, C, OC);
}

/* out = res + out where res is given: the residual add after a product (ops.h) */
static void add_res(zt_kctx *ctx, float *out, const float *res, int N, int OC)
{
    if (res && N > 0 && OC > 0) zt_cpu_residual_forward(ctx, out, res, out, (size_t)N * (size_t)OC);
}

/* The ops, bitwise: the input's values into act (cast), the product, the residual add. */
static void cpu_matmul16_forward(zt_kctx *ctx, float *out, float *act, const void *in16,
                                 zt_dtype dt16, const float *weight, const float *bias,
                                 const float *res, int N, int C, int OC)
{
    if (N > 0 && C > 0) zt_cpu_cast(ctx, act, ZT_F32, in16, dt16, (size_t)N * (size_t)C);
    zt_cpu_matmul_forward(ctx, out, act, weight, bias, N, C, OC);
    add_res(ctx, out, res, N, OC);
}

static void cpu_matmul16_backward(zt_kctx *ctx, float *dinp, void *dinp16, float *dweight,
                                  float *dbias, const float *dout, float *act, const void *in16,
                                  zt_dtype dt16, const float *weight, int N, int C, int OC)
{
    size_t nin = N > 0 && C > 0 ? (size_t)N * (size_t)C : 0;
    if (dweight && nin) zt_cpu_cast(ctx, act, ZT_F32, in16, dt16, nin);
    if (dinp && nin) cpu_memset0(ctx, dinp, nin * sizeof(float));
    zt_cpu_matmul_backward(ctx, dinp, dweight, dbias, dout, act, weight, N, C, OC);
    if (dinp16 && dinp && nin) zt_cpu_cast(ctx, dinp16, dt16, dinp, ZT_F32, nin);
}

/* The ops, bitwise: GELU's output into inp, the product into zeros, then GELU' in place
 * (what gelu_backward into zeros computes). */
static void cpu_matmul_gelu_backward(zt_kctx *ctx, float *dpre, float *dweight, float *dbias,
                                     const float *dout, float *inp, const float *weight,
                                     const float *pre, int N, int C, int OC)
{
    if (N <= 0 || C <= 0) return;
    size_t n = (size_t)N * (size_t)C;
    if (dweight) zt_cpu_gelu_forward(ctx, inp, pre, n);
    cpu_memset0(ctx, dpre, n * sizeof(float));
    zt_cpu_matmul_backward(ctx, dpre, dweight, dbias, dout, inp, weight, N, C, OC);
    zt_cpu_gelu_grad_inplace(ctx, dpre, pre, n);
}

/* The MLP's ops with its 16-bit home: the casts and the fp32 ops, bitwise. */
static void cpu_matmul_forward16(zt_kctx *ctx, void *out16, zt_dtype dt16, float *act,
                                 const float *inp, const float *weight, const float *bias, int N,
                                 int C, int OC)
{
    zt_cpu_matmul_forward(ctx, act, inp, weight, bias, N, C, OC);
    if (N > 0 && OC > 0) zt_cpu_cast(ctx, out16, dt16, act, ZT_F32, (size_t)N * (size_t)OC);
}

static void cpu_gelu16_matmul_forward(zt_kctx *ctx, float *out, float *act, const void *pre16,
                                      zt_dtype dt16, const float *weight, const float *bias,
                                      const float *res, int N, int C, int OC)
{
    if (N > 0 && C > 0) {
        size_t n = (size_t)N * (size_t)C;
        zt_cpu_cast(ctx, act, ZT_F32, pre16, dt16, n);
        zt_cpu_gelu_forward(ctx, act, act, n); /* elementwise: in place */
    }
    zt_cpu_matmul_forward(ctx, out, act, weight, bias, N, C, OC);
    add_res(ctx, out, res, N, OC);
}

/* matmul_gelu_backward's steps with pre in act: the product into zeros in dact, GELU' in
 * place, then GELU's output over act for the weight's gradient */
static void cpu_matmul_gelu16_backward(zt_kctx *ctx, void *dpre16, float *dweight, float *dbias,
                                       const float *dout, float *act, float *dact,
                                       const float *weight, const void *pre16, zt_dtype dt16, int N,
                                       int C, int OC)
{
    if (N <= 0 || C <= 0) return;
    size_t n = (size_t)N * (size_t)C;
    zt_cpu_cast(ctx, act, ZT_F32, pre16, dt16, n);
    cpu_memset0(ctx, dact, n * sizeof(float));
    zt_cpu_matmul_backward(ctx, dact, NULL, NULL, dout, NULL, weight, N, C, OC);
    zt_cpu_gelu_grad_inplace(ctx, dact, act, n);
    zt_cpu_cast(ctx, dpre16, dt16, dact, ZT_F32, n);
    if (!dweight && !dbias) return;
    zt_cpu_gelu_forward(ctx, act, act, n);
    zt_cpu_matmul_backward(ctx, NULL, dweight, dbias, dout, act, weight, N, C, OC);
}

static void cpu_layernorm_matmul16_backward(zt_kctx *ctx, float *dinp, void *dinp16, float *dweight,
                                            float *dbias, const void *dout16, zt_dtype dt16,
                                            float *dact, float *ln, const float *x,
                                            const float *lnw, const float *lnb, const float *weight,
                                            int N, int C, int OC)
{
    size_t nin = N > 0 && C > 0 ? (size_t)N * (size_t)C : 0;
    if (dinp && nin) cpu_memset0(ctx, dinp, nin * sizeof(float));
    if (N > 0 && OC > 0) zt_cpu_cast(ctx, dact, ZT_F32, dout16, dt16, (size_t)N * (size_t)OC);
    cpu_layernorm_matmul_backward(ctx, dinp, dweight, dbias, dact, ln, x, lnw, lnb, weight, N, C,
                                  OC);
    if (dinp16 && dinp && nin) zt_cpu_cast(ctx, dinp16, dt16, dinp, ZT_F32, nin);
}

static void cpu_layernorm_backward16(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                                     const void *dout16, zt_dtype dt16, float *dact,
                                     const float *inp, const float *weight, const float *mean,
                                     const float *rstd, int N, int C)
{
    if (N > 0 && C > 0) zt_cpu_cast(ctx, dact, ZT_F32, dout16, dt16, (size_t)N * (size_t)C);
    zt_cpu_layernorm_backward(ctx, dinp, dweight, dbias, dact, inp, weight, mean, rstd, N, C);
}

static void cpu_classifier16(zt_kctx *ctx, zt_dtype dt16, float *losses, float *dx, float *dwte,
                             float *logits, const float *x, const float *wte,
                             const int32_t *targets, int N, int rows, int C, int V, int Vp,
                             float dloss)
{
    zt_classifier16_by_ops(zt_ops_cpu(), ctx, dt16, losses, dx, dwte, logits, x, wte, targets, N,
                           rows, C, V, Vp, dloss);
}

static void cpu_classifier(zt_kctx *ctx, float *losses, float *dx, float *dwte, float *logits,
                           const float *x, const float *wte, const int32_t *targets, int N,
                           int rows, int C, int V, int Vp, float dloss)
{
    zt_classifier_by_ops(zt_ops_cpu(), ctx, losses, dx, dwte, logits, x, wte, targets, N, rows, C,
                         V, Vp, dloss);
}

static const zt_ops cpu_ops = {
    .name = "cpu",
    .ctx_create = cpu_ctx_create,
    .ctx_destroy = cpu_ctx_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .memset0 = cpu_memset0,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .stream = cpu_stream,
    .sync = cpu_sync,
    .fence_record = cpu_fence,
    .copy_async = cpu_copy_async,
    .fence_wait = cpu_fence,
    .set_matmul_dtype = cpu_set_matmul_dtype,
    .mem_info = cpu_mem_info,
    .mark = cpu_mark,
    .marks_take = cpu_marks_take,
    .encoder_forward = zt_cpu_encoder_forward,
    .encoder_backward = zt_cpu_encoder_backward,
    .layernorm_forward = zt_cpu_layernorm_forward,
    .residual_layernorm_forward = zt_cpu_residual_layernorm_forward,
    .layernorm_backward = zt_cpu_layernorm_backward,
    .layernorm_backward16 = cpu_layernorm_backward16,
    .matmul_forward = zt_cpu_matmul_forward,
    .matmul_backward = zt_cpu_matmul_backward,
    .matmul16_forward = cpu_matmul16_forward,
    .matmul16_backward = cpu_matmul16_backward,
    .matmul_forward16 = cpu_matmul_forward16,
    .gelu16_matmul_forward = cpu_gelu16_matmul_forward,
    .matmul_gelu16_backward = cpu_matmul_gelu16_backward,
    .layernorm_matmul16_backward = cpu_layernorm_matmul16_backward,
    .matmul_gelu_backward = cpu_matmul_gelu_backward,
    .matmul_gelu_forward = cpu_matmul_gelu_forward,
    .gelu_matmul_forward = cpu_gelu_matmul_forward,
    .layernorm_matmul_forward = cpu_layernorm_matmul_forward,
    .layernorm_matmul_forward16 = cpu_layernorm_matmul_forward16,
    .layernorm_matmul_backward = cpu_layernorm_matmul_backward,
    .attention_forward = zt_cpu_attention_forward,
    .attention_backward = zt_cpu_attention_backward,
    .attention_backward16 = cpu_attention_backward16,
    .gelu_forward = zt_cpu_gelu_forward,
    .gelu_backward = zt_cpu_gelu_backward,
    .residual_forward = zt_cpu_residual_forward,
    .residual_backward = zt_cpu_residual_backward,
    .crossentropy_forward_backward = zt_cpu_crossentropy_forward_backward,
    .classifier_forward_backward = cpu_classifier,
    .classifier16_forward_backward = cpu_classifier16,
    .round16 = zt_cpu_round16,
    .adamw = zt_cpu_adamw,
    .cast = zt_cpu_cast,
    .accumulate = zt_cpu_accumulate,
    .scale = zt_cpu_scale,
    .sumsq_nonfinite = zt_cpu_sumsq_nonfinite,
};

const zt_ops *zt_ops_cpu(void)
{
    return &cpu_ops;
}
