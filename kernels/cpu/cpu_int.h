/* zerotrain: what only kernels/cpu/ (and its tests and bench) may see: the CPU context, its
 * scratch, and the op implementations that ops_cpu.c gathers into the zt_ops table.
 * Every op follows the contract in kernels/ops.h; this header adds nothing to it. */
#ifndef ZT_KERNELS_CPU_CPU_INT_H
#define ZT_KERNELS_CPU_CPU_INT_H

#include <stddef.h>
#include <stdint.h>

#include "../ops.h"

/* A build tuned for the build machine (ZT_NATIVE, -march=native) compiles every loop for it.
 * A portable build compiles the element-wise kernels' per-chunk and per-row functions three
 * times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 and FMA) and the baseline, and the loader
 * picks the best the CPU has (an ifunc). Without them every fmaf is a library call, which
 * makes the host AdamW of an offloaded step many times slower.
 * Applied to functions called per chunk or row, not to ones that open an OpenMP region (the
 * region's body is outlined before cloning and would stay baseline). Each clone computes the
 * same element-wise results; reductions may round differently between clones (vector width),
 * never between two runs on one machine. */
#if defined(__x86_64__) && !defined(__AVX2__) && !defined(__clang__) && defined(__gnu_linux__)
#define ZT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ZT_CPU_CLONES
#endif

/* How attention spreads over threads. */
typedef enum {
    ZT_CPU_ATTN_OUTER = 0, /* one (b, h) pair per thread, each sgemm single-threaded */
    ZT_CPU_ATTN_INNER = 1, /* pairs one after another, sgemm threaded by oneDNN */
} zt_cpu_attn_mode;

struct zt_kctx {
    int nthreads;               /* OpenMP threads for the element-wise ops (>= 1) */
    zt_cpu_attn_mode attn_mode; /* see above; OUTER unless ZT_CPU_ATTN=inner */
    int attn_block;             /* causal row-block size of attention (ZT_CPU_ATTN_BLOCK) */
    size_t par_min;             /* fewer items than this run on one thread (tests lower it) */
    float *scratch;             /* per-thread partial sums, grown on demand */
    size_t scratch_floats;
    /* op times (ZT_OP_TIMES): the open interval's label (NULL: none) and start, the totals */
    bool optimes;
    const char *mark_label;
    double mark_ms;
    zt_optimes times;
};

/* Returns at least nfloats floats of the context's scratch (64-byte aligned, contents
 * undefined), or NULL when it cannot grow; callers then take a serial path that needs none.
 * Not thread-safe (one context, one calling thread). */
float *zt_cpu_scratch(zt_kctx *ctx, size_t nfloats);

/* Threads to use for work of `n` elementary items: 1 below a size where starting a parallel
 * region costs more than it saves, else ctx->nthreads. */
int zt_cpu_threads_for(const zt_kctx *ctx, size_t n);

/* dnnl_sgemm calls that failed since the last call (and the oneDNN status of the first);
 * resets the count. Thread-safe. The context's sync turns a non-zero count into an error. */
long zt_cpu_take_sgemm_failures(int *first_status);

/* gpt2_cpu.c */
void zt_cpu_encoder_forward(zt_kctx *ctx, float *out, const int32_t *inp, const float *wte,
                            const float *wpe, int B, int T, int C);
void zt_cpu_encoder_backward(zt_kctx *ctx, float *dwte, float *dwpe, const float *dout,
                             const int32_t *inp, int B, int T, int C);
void zt_cpu_layernorm_forward(zt_kctx *ctx, float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C);
void zt_cpu_residual_layernorm_forward(zt_kctx *ctx, float *res, float *out, float *mean,
                                       float *rstd, const float *a, const float *b,
                                       const float *weight, const float *bias, int N, int C);
void zt_cpu_layernorm_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);
void zt_cpu_gelu_forward(zt_kctx *ctx, float *out, const float *inp, size_t n);
void zt_cpu_gelu_backward(zt_kctx *ctx, float *dinp, const float *inp, const float *dout, size_t n);
/* d = GELU'(inp) d in place (gelu_backward into zeros, bitwise) */
void zt_cpu_gelu_grad_inplace(zt_kctx *ctx, float *d, const float *inp, size_t n);
void zt_cpu_residual_forward(zt_kctx *ctx, float *out, const float *a, const float *b, size_t n);
void zt_cpu_residual_backward(zt_kctx *ctx, float *da, float *db, const float *dout, size_t n);
void zt_cpu_crossentropy_forward_backward(zt_kctx *ctx, float *losses, float *dlogits,
                                          const float *logits, const int32_t *targets, int N, int V,
                                          int Vp, float dloss);

/* matmul_cpu.c */
void zt_cpu_matmul_forward(zt_kctx *ctx, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int C, int OC);
void zt_cpu_matmul_backward(zt_kctx *ctx, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int N, int C,
                            int OC);
void zt_cpu_attention_forward(zt_kctx *ctx, float *out, float *lse, float *scratch, float *qkv,
                              const zt_attn_home *home, int B, int T, int C, int NH);
void zt_cpu_attention_backward(zt_kctx *ctx, float *dqkv, float *scratch, const float *dout,
                               float *qkv, float *out, const float *lse, const zt_attn_home *home,
                               int B, int T, int C, int NH);

/* optim_cpu.c */
void zt_cpu_adamw(zt_kctx *ctx, float *param, const void *grad, zt_dtype grad_dtype, float *m,
                  float *v, size_t n, const zt_adamw_args *args, void *param_lp, zt_dtype lp_dtype);
void zt_cpu_cast(zt_kctx *ctx, void *dst, zt_dtype dst_dtype, const void *src, zt_dtype src_dtype,
                 size_t n);
void zt_cpu_round16(zt_kctx *ctx, float *x, zt_dtype dt16, size_t n);
void zt_cpu_accumulate(zt_kctx *ctx, void *dst, zt_dtype dst_dtype, const float *src, float scale,
                       size_t n);
void zt_cpu_scale(zt_kctx *ctx, float *x, float s, size_t n);
void zt_cpu_sumsq_nonfinite(zt_kctx *ctx, const void *x, zt_dtype dtype, size_t n, double out[2]);

#endif
