/* zerotrain bench: every op of the CUDA table at GPT-2 124M's shapes (n_layer 12, n_embd 768,
 * n_head 12, block 1024, vocabulary padded to 50304, micro batch 8 unless --batch), timed on the
 * GPU, next to the ceilings measured in the same run: device-to-device copy bandwidth (bytes
 * read plus written) and the rate of a large matmul with each input rounding (exact fp32, TF32,
 * bf16 from 16-bit copies, and bf16 as cuBLASLt converts fp32 operands: see ZT_CUDA_MATMUL and
 * ZT_CUDA_GEMM_STAGE; the matmuls and attention run in each, the fused attention of
 * ZT_CUDA_ATTN=fused in fp32 and on bf16 tensor cores). Each op
 * prints its time, its rate (TFLOP/s for matmuls and attention, GB/s of the fewest bytes it must
 * move otherwise) and that rate as a share of its ceiling: the gap METHOD.md asks for first.
 * Timing: the op is queued `reps` times, then one sync; the best of 3 such rounds, after one
 * warm-up round. Exits 77 without a GPU. Usage: bench_kernels_gpu [--batch B] [--quick] [--small]
 * --small: every op once (one round, no warm-up) at a small model's shapes (L2 C128 NH2 T64,
 * vocabulary 500/512; 256^3 ceiling, 1M-parameter optimizer), the run the CUDA emulation makes in
 * CI (bench_kernels_gpu_emu) so that the bench itself is proven before a GPU's time is spent on
 * it. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/timeutil.h"
#include "engine/gpt2.h"
#include "kernels/ops.h"
#include "tests/bench/bench_shapes.h"
#ifdef ZT_BENCH_CUDA_INTERNALS /* a build with kernels/cuda/: rows of its internal kernels */
#include "kernels/cuda/cuda_int.h"
#endif

static int C = 768, NH = 12, T = 1024, VP = 50304, V = 50257;
static int CEIL_M = 8192;                /* the ceiling matmul's size */
static size_t COPY_FLOATS = (size_t)1 << 28; /* 1 GiB each way */
static size_t OPT_PARAMS = 124475904;    /* GPT-2 124M */

static const zt_ops *G;
static zt_kctx *K;   /* the context the ops run in: K0, or KTF for TF32 */
static zt_kctx *K0;  /* ZT_CUDA_MATMUL unset: the dtype given to set_matmul_dtype decides */
static zt_kctx *KTF; /* ZT_CUDA_MATMUL=tf32 (no job precision picks TF32) */
static zt_kctx *KNS; /* ZT_CUDA_GEMM_STAGE=0: 16-bit matmuls read the fp32 operands */
static zt_kctx *KF;  /* ZT_CUDA_ATTN=fused: the fused attention (tensor cores for bf16) */
static zt_kctx *KD;  /* ZT_CUDA_ATTN=cudnn: cuDNN's fused attention where the homes allow */
static zt_kctx *KDA; /* and ZT_CUDA_ATTN_DQ=atomic: its backward summing dQ by atomics */
static zt_kctx *KLG; /* ZT_CUDA_LN_BWD=grouped: LayerNorm's backward by the column-sum kernel */
/* and with the tensor-core attention's other kernels (ZT_CUDA_ATTN_FWD, _BWD, _DQ) */
static const struct {
    const char *fwd, *bwd, *dq, *label;
} KV_ATTN[] = {
    {"wmma", "wmma", "", "wmma"},
    {"", "wmma", "gemm", "wmma, dQ by GEMM"},
    {"", "", "gemm", "dQ by GEMM"},
    {"", "", "atomic", "dQ by atomics"},
    {"", "mma2", "", "dK dV at 2 blocks an SM"},
    {"mma4", "", "", "forward at 4 blocks an SM"},
};
#define N_KV_ATTN (sizeof(KV_ATTN) / sizeof(KV_ATTN[0]))
static zt_kctx *KV[N_KV_ATTN];
static int WARMUP = 1, ROUNDS = 3; /* TIME_IT's rounds: untimed, then timed (the best kept) */
static int REPS = 20;
static double BW = 0; /* ceiling: GB/s */

/* The matmul input modes and their ceilings in TFLOP/s (a matmul of 8192^3). Device memory
 * is the GPU's, so either context's ops may use any buffer; TIME_IT syncs the one in use. */
enum { NMODES = 4, MODE_UNSTAGED = 3 };
static const struct {
    const char *name;
    zt_dtype dtype;
    int ctx; /* 0 K0, 1 KTF, 2 KNS */
} MODES[NMODES] = {
    {"fp32", ZT_F32, 0}, {"TF32", ZT_F32, 1}, {"bf16", ZT_BF16, 0}, {"bf16 unstaged", ZT_BF16, 2}};
static double CEIL[NMODES];

static void use_mode(int k)
{
    K = MODES[k].ctx == 1 ? KTF : MODES[k].ctx == 2 ? KNS : K0;
    G->set_matmul_dtype(K, MODES[k].dtype);
}

static void die(const char *what)
{
    zt_err err;
    if (G->sync(K, &err) != ZT_OK)
        fprintf(stderr, "bench_kernels_gpu: %s: %s\n", what, err.msg);
    else
        fprintf(stderr, "bench_kernels_gpu: %s failed\n", what);
    exit(1);
}

static void *dalloc(size_t bytes)
{
    void *p = G->alloc(K, bytes);
    if (!p) die("out of GPU memory");
    return p;
}

/* device floats filled with small deterministic values (never zeros: they run faster) */
static float *drand(size_t n, float scale)
{
    float *h = zt_malloc(n * sizeof(float));
    if (!h) die("out of host memory");
    uint64_t s = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = scale * ((float)(s >> 40) / (float)(1u << 24) - 0.5f);
    }
    float *d = dalloc(n * sizeof(float));
    G->copy_h2d(K, d, h, n * sizeof(float));
    zt_err err;
    if (G->sync(K, &err) != ZT_OK) die("upload");
    zt_free(h);
    return d;
}

/* seconds per call of stmt: `REPS` calls queued then one sync, the best of ROUNDS after WARMUP */
#define TIME_IT(out, stmt)                                                                         \
    do {                                                                                           \
        zt_err err_;                                                                               \
        double best_ = 1e30;                                                                       \
        for (int round_ = 0; round_ < WARMUP + ROUNDS; round_++) {                                 \
            double t0_ = zt_now_s();                                                               \
            for (int r_ = 0; r_ < REPS; r_++) {                                                    \
                stmt;                                                                              \
            }                                                                                      \
            if (G->sync(K, &err_) != ZT_OK) die(#stmt);                                            \
            double dt_ = (zt_now_s() - t0_) / REPS;                                                \
            if (round_ >= WARMUP && dt_ < best_) best_ = dt_;                                      \
        }                                                                                          \
        (out) = best_;                                                                             \
    } while (0)

/* a rate in input mode k, as a share of that mode's ceiling */
static void report_flops(const char *what, int k, double sec, double flops)
{
    char name[112];
    snprintf(name, sizeof name, "%s %s", what, MODES[k].name);
    double tf = flops / sec * 1e-12;
    printf("  %-40s %9.3f ms %8.1f TFLOP/s %6.1f%% of %s matmul\n", name, sec * 1e3, tf,
           100.0 * tf / CEIL[k], MODES[k].name);
}

static void report_bytes(const char *what, double sec, double bytes)
{
    double gb = bytes / sec * 1e-9;
    printf("  %-40s %9.3f ms %8.1f GB/s    %6.1f%% of copy\n", what, sec * 1e3, gb,
           100.0 * gb / BW);
}

static void ceilings(void)
{
    size_t n = COPY_FLOATS;
    float *a = dalloc(n * 4), *b = dalloc(n * 4);
    G->memset0(K, a, n * 4);
    double s;
    TIME_IT(s, G->copy_d2d(K, b, a, n * 4));
    BW = 2.0 * n * 4 / s * 1e-9;
    char cw[64];
    snprintf(cw, sizeof cw, "copy %.0f MiB device to device", (double)n * 4 / 1048576.0);
    printf("  %-40s %9.3f ms %8.1f GB/s    (ceiling)\n", cw, s * 1e3, BW);
    G->free(K, a), G->free(K, b);
    int M = CEIL_M;
    float *x = drand((size_t)M * M, 1.0f), *w = drand((size_t)M * M, 1.0f);
    float *y = dalloc((size_t)M * M * 4);
    double fl = 2.0 * M * (double)M * M;
    for (int k = 0; k < NMODES; k++) {
        use_mode(k);
        TIME_IT(s, G->matmul_forward(K, y, x, w, NULL, M, M, M));
        CEIL[k] = fl / s * 1e-12;
        char what[64];
        snprintf(what, sizeof what, "matmul %d^3 %s", M, MODES[k].name);
        printf("  %-40s %9.3f ms %8.1f TFLOP/s (ceiling)\n", what, s * 1e3, CEIL[k]);
    }
    use_mode(0);
    G->free(K, x), G->free(K, w), G->free(K, y);
}

int main(int argc, char **argv)
{
    int B = 8;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) B = atoi(argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0) REPS = 5;
        else if (strcmp(argv[i], "--small") == 0) {
            C = 128, NH = 2, T = 64, VP = 512, V = 500, CEIL_M = 256;
            COPY_FLOATS = (size_t)1 << 18, OPT_PARAMS = (size_t)1 << 20, REPS = 1, B = 2;
            WARMUP = 0, ROUNDS = 1;
        } else {
            fprintf(stderr, "usage: bench_kernels_gpu [--batch B] [--quick] [--small]\n");
            return 2;
        }
    }
    if (B < 1) B = 1;
    G = zt_ops_cuda();
    if (!G) {
        printf("SKIP: this build has no CUDA backend\n");
        return 77;
    }
    zt_err err;
    unsetenv("ZT_CUDA_MATMUL"); /* K0: the job's dtype decides, chunked attention */
    setenv("ZT_CUDA_ATTN", "chunked", 1);
    zt_status st = G->ctx_create(&K0, 0, &err);
    if (st == ZT_ERR_NO_DEVICE) {
        printf("SKIP: %s\n", err.msg);
        return 77;
    }
    if (st == ZT_OK) {
        setenv("ZT_CUDA_MATMUL", "tf32", 1);
        st = G->ctx_create(&KTF, 0, &err);
        unsetenv("ZT_CUDA_MATMUL");
    }
    if (st == ZT_OK) {
        setenv("ZT_CUDA_GEMM_STAGE", "0", 1);
        st = G->ctx_create(&KNS, 0, &err);
        unsetenv("ZT_CUDA_GEMM_STAGE");
    }
    unsetenv("ZT_CUDA_ATTN");
    if (st == ZT_OK) {
        setenv("ZT_CUDA_ATTN", "fused", 1);
        st = G->ctx_create(&KF, 0, &err);
        for (size_t v = 0; v < N_KV_ATTN && st == ZT_OK; v++) {
            setenv("ZT_CUDA_ATTN_FWD", KV_ATTN[v].fwd, 1);
            setenv("ZT_CUDA_ATTN_BWD", KV_ATTN[v].bwd, 1);
            setenv("ZT_CUDA_ATTN_DQ", KV_ATTN[v].dq, 1);
            st = G->ctx_create(&KV[v], 0, &err);
            unsetenv("ZT_CUDA_ATTN_FWD");
            unsetenv("ZT_CUDA_ATTN_BWD");
            unsetenv("ZT_CUDA_ATTN_DQ");
        }
        setenv("ZT_CUDA_ATTN", "cudnn", 1);
        if (st == ZT_OK) st = G->ctx_create(&KD, 0, &err);
        setenv("ZT_CUDA_ATTN_DQ", "atomic", 1);
        if (st == ZT_OK) st = G->ctx_create(&KDA, 0, &err);
        unsetenv("ZT_CUDA_ATTN_DQ");
        unsetenv("ZT_CUDA_ATTN");
    }
    if (st == ZT_OK) {
        setenv("ZT_CUDA_LN_BWD", "grouped", 1);
        st = G->ctx_create(&KLG, 0, &err);
        unsetenv("ZT_CUDA_LN_BWD");
    }
    if (st != ZT_OK) {
        fprintf(stderr, "bench_kernels_gpu: %s\n", err.msg);
        return 1;
    }
    K = K0;
    size_t N = (size_t)B * T, NC = N * C;
    printf("bench_kernels_gpu: %s shapes (C %d, NH %d, vocabulary %d/%d), micro batch %d x "
           "block %d (N = %zu rows)\n",
           C == 768 ? "GPT-2 124M" : "small", C, NH, V, VP, B, T, N);
    ceilings();

    double s;
    float *x = drand(NC * 4, 1.0f), *y = drand(NC * 4, 1.0f), *z = drand(NC * 4, 1.0f);
    float *dx = drand(NC * 4, 1.0f), *w = drand((size_t)VP * C, 0.05f);
    float *bias = drand((size_t)4 * C, 0.1f), *dw = drand((size_t)VP * C, 0.0f);
    float *db = drand((size_t)4 * C, 0.0f), *mean = drand(N, 0.1f), *rstd = drand(N, 1.0f);
    float *wpe = drand((size_t)T * C, 0.02f);
    int32_t *tok_h = zt_calloc(N, sizeof(int32_t));
    for (size_t i = 0; i < N; i++)
        tok_h[i] = (int32_t)((i * 7919) % V);
    int32_t *tok = dalloc(N * sizeof(int32_t));
    G->copy_h2d(K, tok, tok_h, N * sizeof(int32_t));

    TIME_IT(s, G->encoder_forward(K, y, tok, w, wpe, B, T, C));
    report_bytes("encoder_forward", s, 3.0 * NC * 4);
    TIME_IT(s, G->encoder_backward(K, dw, dx, x, tok, B, T, C));
    report_bytes("encoder_backward", s, 4.0 * NC * 4);
    TIME_IT(s, G->layernorm_forward(K, y, mean, rstd, x, w, bias, (int)N, C));
    report_bytes("layernorm_forward", s, 2.0 * NC * 4);
    TIME_IT(s, G->residual_layernorm_forward(K, z, y, mean, rstd, x, dx, w, bias, (int)N, C));
    report_bytes("residual_layernorm_forward", s, 4.0 * NC * 4);
    TIME_IT(s, G->layernorm_backward(K, dx, dw, db, z, x, w, mean, rstd, (int)N, C));
    report_bytes("layernorm_backward", s, 4.0 * NC * 4);
    /* the same of a bf16 dout (the 16-bit input gradient of the matmul after it) */
    void *z16 = dalloc(NC * 2);
    G->cast(K, z16, ZT_BF16, z, ZT_F32, NC);
    TIME_IT(s,
            G->layernorm_backward16(K, dx, dw, db, z16, ZT_BF16, y, x, w, mean, rstd, (int)N, C));
    report_bytes("layernorm_backward16", s, 3.5 * NC * 4);
    /* the same two by the kernel ZT_CUDA_LN_BWD=grouped picks (the row kernel's predecessor) */
    K = KLG;
    TIME_IT(s, G->layernorm_backward(K, dx, dw, db, z, x, w, mean, rstd, (int)N, C));
    report_bytes("layernorm_backward (grouped)", s, 4.0 * NC * 4);
    TIME_IT(s,
            G->layernorm_backward16(K, dx, dw, db, z16, ZT_BF16, y, x, w, mean, rstd, (int)N, C));
    report_bytes("layernorm_backward16 (grouped)", s, 3.5 * NC * 4);
    K = K0;
    G->free(K, z16);

    const zt_bench_matmul mm[] = ZT_BENCH_GPT2_MATMULS(C, VP);
    float *big = dalloc(N * VP * 4); /* the logits */
    float *mlp = dalloc(NC * 10 * 4); /* the MLP's 16-bit home, room, gradient (below) */
    for (int md = 0; md < NMODES; md++) {
        use_mode(md);
        for (size_t k = 0; k < sizeof(mm) / sizeof(mm[0]); k++) {
            char what[96];
            const float *bb = k == 4 ? NULL : bias;
            float *out = k == 4 ? big : y;
            double fl = 2.0 * N * mm[k].in * mm[k].out;
            TIME_IT(s, G->matmul_forward(K, out, x, w, bb, (int)N, mm[k].in, mm[k].out));
            snprintf(what, sizeof what, "matmul_forward %s", mm[k].name);
            report_flops(what, md, s, fl);
            TIME_IT(s, G->matmul_backward(K, dx, dw, k == 4 ? NULL : db, out, x, w, (int)N,
                                          mm[k].in, mm[k].out));
            snprintf(what, sizeof what, "matmul_backward %s", mm[k].name);
            report_flops(what, md, s, 2 * fl);
            if (MODES[md].dtype != ZT_BF16) continue;
            /* its parts, for the 16-bit inputs that jobs use: dinp, dweight, then dbias */
            TIME_IT(s,
                    G->matmul_backward(K, dx, NULL, NULL, out, x, w, (int)N, mm[k].in, mm[k].out));
            snprintf(what, sizeof what, "  dinp only %s", mm[k].name);
            report_flops(what, md, s, fl);
            TIME_IT(s,
                    G->matmul_backward(K, NULL, dw, NULL, out, x, w, (int)N, mm[k].in, mm[k].out));
            snprintf(what, sizeof what, "  dweight only %s", mm[k].name);
            report_flops(what, md, s, fl);
            if (k == 4) continue;
            TIME_IT(s,
                    G->matmul_backward(K, NULL, NULL, db, out, x, w, (int)N, mm[k].in, mm[k].out));
            snprintf(what, sizeof what, "  dbias only %s", mm[k].name);
            report_bytes(what, s, (double)N * mm[k].out * 4);
        }
        /* the MLP's first layer with GELU as cuBLASLt's epilogue (next to matmul_forward fc
         * above plus gelu_forward below) */
        double fl = 2.0 * N * C * 4.0 * C;
        TIME_IT(s, G->matmul_gelu_forward(K, y, big, x, w, bias, (int)N, C, 4 * C));
        report_flops("matmul_gelu_forward fc", md, s, fl);
        /* what the engine runs instead: fc alone (matmul_forward fc above), then the second
         * layer from GELU's input, GELU's output rounded straight into the 16-bit copy where
         * staged (next to gelu_forward below plus matmul_forward fcproj above); its backward
         * likewise computes GELU's output itself */
        TIME_IT(s, G->gelu_matmul_forward(K, y, z, big, w, bias, (int)N, 4 * C, C));
        report_flops("gelu_matmul_forward fcproj", md, s, fl);
        TIME_IT(s, G->matmul_gelu_backward(K, z, dw, db, y, dx, w, big, (int)N, 4 * C, C));
        report_flops("matmul_gelu_backward fcproj", md, s, 2 * fl);
        /* qkv from the LayerNorm's input (next to layernorm_forward plus matmul_forward qkv),
         * and its backward with the LayerNorm recomputed (next to layernorm_forward plus
         * matmul_backward qkv) */
        double qfl = 2.0 * N * C * 3.0 * C;
        TIME_IT(s, G->layernorm_matmul_forward(K, y, z, mean, rstd, x, w, bias, w, bias, (int)N, C,
                                               3 * C));
        report_flops("layernorm_matmul_forward qkv", md, s, qfl);
        /* as bf16 jobs run it: qkv's GEMM writing its 16-bit home (in mlp) */
        TIME_IT(s, G->layernorm_matmul_forward16(K, mlp, ZT_BF16, y, z, mean, rstd, x, w, bias, w,
                                                 bias, (int)N, C, 3 * C));
        report_flops("layernorm_matmul_forward16 qkv", md, s, qfl);
        TIME_IT(s,
                G->layernorm_matmul_backward(K, dx, dw, db, y, z, x, w, bias, w, (int)N, C, 3 * C));
        report_flops("layernorm_matmul_backward qkv", md, s, 2 * qfl);
        /* attproj from the attention output's 16-bit home (next to matmul_forward and
         * matmul_backward attproj: copied into the staging instead of rounded from fp32) */
        double afl1 = 2.0 * N * C * C;
        TIME_IT(s, G->matmul16_forward(K, y, z, big, ZT_BF16, w, bias, NULL, (int)N, C, C));
        report_flops("matmul16_forward attproj", md, s, afl1);
        /* as bf16 jobs run it: the block's residual (x here) added by the GEMM as its C (next to
         * the row above plus residual_forward) */
        TIME_IT(s, G->matmul16_forward(K, y, z, big, ZT_BF16, w, bias, x, (int)N, C, C));
        report_flops("matmul16_forward attproj, residual added", md, s, afl1);
        TIME_IT(s, G->matmul16_backward(K, dx, NULL, dw, db, y, z, big, ZT_BF16, w, (int)N, C, C));
        report_flops("matmul16_backward attproj", md, s, 2 * afl1);
        /* the MLP with fch in its 16-bit home, as bf16 jobs run it (next to matmul_forward fc,
         * gelu_matmul_forward fcproj, matmul_gelu_backward fcproj and matmul_backward fc):
         * fc's GEMM writes the home, GELU's copy reads it, the DGELU reads it and writes the
         * gradient in 16 bits, which fc's backward reads in place. In mlp: the home, fp32
         * room, the gradient. */
        uint16_t *h16 = (uint16_t *)mlp, *dh16 = (uint16_t *)(mlp + 8 * NC);
        float *room = mlp + 4 * NC;
        TIME_IT(s, G->matmul_forward16(K, h16, ZT_BF16, z, x, w, bias, (int)N, C, 4 * C));
        report_flops("matmul_forward16 fc", md, s, fl);
        TIME_IT(s,
                G->gelu16_matmul_forward(K, y, z, h16, ZT_BF16, w, bias, NULL, (int)N, 4 * C, C));
        report_flops("gelu16_matmul_forward fcproj", md, s, fl);
        TIME_IT(s, G->gelu16_matmul_forward(K, y, z, h16, ZT_BF16, w, bias, x, (int)N, 4 * C, C));
        report_flops("gelu16_matmul_forward fcproj, residual added", md, s, fl);
        TIME_IT(s, G->matmul_gelu16_backward(K, dh16, dw, db, y, z, room, w, h16, ZT_BF16, (int)N,
                                             4 * C, C));
        report_flops("matmul_gelu16_backward fcproj", md, s, 2 * fl);
        TIME_IT(s, G->layernorm_matmul16_backward(K, dx, NULL, dw, db, dh16, ZT_BF16, room, z, x, w,
                                                  bias, w, (int)N, C, 4 * C));
        report_flops("layernorm_matmul16_backward fc", md, s, 2 * fl);
        /* its input's gradient written in 16 bits (into y, free here) */
        TIME_IT(s, G->layernorm_matmul16_backward(K, dx, y, dw, db, dh16, ZT_BF16, room, z, x, w,
                                                  bias, w, (int)N, C, 4 * C));
        report_flops("layernorm_matmul16_backward fc, 16-bit dinp", md, s, 2 * fl);
        TIME_IT(s, G->layernorm_matmul_backward(K, dx, dw, db, room, z, x, w, bias, w, (int)N, C,
                                                4 * C));
        report_flops("layernorm_matmul_backward fc", md, s, 2 * fl);
    }
    use_mode(0);

    /* attention: causal FLOPs (half of the full T x T products); backward's recomputation of
     * Q K^T is not counted, so its rate is that of the work a kept P would leave */
    size_t nlse = (size_t)B * NH * T, nscr = zt_attention_scratch_floats(B, T, NH);
    float *lse = dalloc(nlse * 4), *scr = dalloc(nscr * 4);
    float *qkv = drand(N * 3 * C, 1.0f), *dqkv = drand(N * 3 * C, 0.0f);
    double afl = 2.0 * 2.0 * B * NH * (double)T * T * (C / NH) / 2.0;
    for (int md = 0; md < NMODES; md++) {
        if (md == MODE_UNSTAGED) continue; /* the attention's products are never staged */
        use_mode(md);
        TIME_IT(s, G->attention_forward(K, y, lse, scr, qkv, NULL, B, T, C, NH));
        report_flops("attention_forward", md, s, afl);
        TIME_IT(s, G->attention_backward(K, dqkv, scr, x, qkv, y, lse, NULL, B, T, C, NH));
        report_flops("attention_backward", md, s, 2 * afl);
    }
    /* the fused kernels (ZT_CUDA_ATTN=fused): fp32, and bf16 tensor cores for 16-bit inputs */
    for (int md = 0; md < NMODES; md += 2) {
        K = KF;
        G->set_matmul_dtype(K, MODES[md].dtype);
        TIME_IT(s, G->attention_forward(K, y, lse, scr, qkv, NULL, B, T, C, NH));
        report_flops("attention_forward fused", md, s, afl);
        TIME_IT(s, G->attention_backward(K, dqkv, scr, x, qkv, y, lse, NULL, B, T, C, NH));
        report_flops("attention_backward fused", md, s, 2 * afl);
        if (MODES[md].dtype == ZT_BF16) { /* qkv read from its home, as bf16 jobs run it */
            zt_attn_home hq = {mlp, NULL, ZT_BF16, true};
            G->cast(K, mlp, ZT_BF16, qkv, ZT_F32, N * 3 * C);
            TIME_IT(s, G->attention_forward(K, y, lse, scr, qkv, &hq, B, T, C, NH));
            report_flops("attention_forward fused, qkv in its home", md, s, afl);
            TIME_IT(s, G->attention_backward(K, dqkv, scr, x, qkv, y, lse, &hq, B, T, C, NH));
            report_flops("attention_backward fused, qkv in its home", md, s, 2 * afl);
            /* and the gradient written in 16 bits (no fp32 dqkv for qkv's backward to round) */
            TIME_IT(s, G->attention_backward16(K, mlp + 2 * NC, ZT_BF16, dqkv, scr, x, NULL, qkv, y,
                                               lse, &hq, B, T, C, NH));
            report_flops("attention_backward16 fused, qkv in its home", md, s, 2 * afl);
            /* and dO in 16 bits (attproj's dinp16, as bf16 jobs run it): read in place, delta
             * from it (z room) */
            G->cast(K, mlp + 4 * NC, ZT_BF16, x, ZT_F32, NC);
            TIME_IT(s, G->attention_backward16(K, mlp + 2 * NC, ZT_BF16, dqkv, scr, z, mlp + 4 * NC,
                                               qkv, y, lse, &hq, B, T, C, NH));
            report_flops("attention_backward16 fused, qkv in its home, dO in 16 bits", md, s,
                         2 * afl);
            /* out in its home too (mlp + 5 NC), as bf16 jobs run it: zerotrain's kernels, then
             * cuDNN's fused attention (ZT_CUDA_ATTN=cudnn; where it cannot run, a warning above
             * says so and the row times the kernels), its backward with dQ by its product (the
             * same bits every run), then summing dQ by atomics (ZT_CUDA_ATTN_DQ=atomic) */
            zt_attn_home hb = {mlp, mlp + 5 * NC, ZT_BF16, true};
            for (int k = 0; k < 3; k++) {
                char what[96];
                const char *who = k == 2 ? "cuDNN (dQ by atomics)" : k ? "cuDNN" : "fused";
                K = k == 2 ? KDA : k ? KD : KF;
                G->set_matmul_dtype(K, ZT_BF16);
                snprintf(what, sizeof(what), "attention_forward %s, both homes", who);
                if (k < 2) { /* the same forward in both cuDNN contexts */
                    TIME_IT(s, G->attention_forward(K, y, lse, scr, qkv, &hb, B, T, C, NH));
                    report_flops(what, md, s, afl);
                }
                snprintf(what, sizeof(what), "attention_backward16 %s, both homes, dO in 16 bits",
                         who);
                TIME_IT(s, G->attention_backward16(K, mlp + 2 * NC, ZT_BF16, dqkv, scr, z,
                                                   mlp + 4 * NC, qkv, y, lse, &hb, B, T, C, NH));
                report_flops(what, md, s, 2 * afl);
            }
            /* cuDNN's default backward on 3 of the sequences: at GPT-2's shapes the op's
             * scratch holds 3 sequences' workspaces (25 MB each), so this is one execution where
             * the row above made runs of 3, 3 and 2: its speed apart from the runs' cost (the
             * FLOP/s of the 3 sequences) */
            if (B > 3) {
                K = KD;
                G->set_matmul_dtype(K, ZT_BF16);
                TIME_IT(s, G->attention_backward16(K, mlp + 2 * NC, ZT_BF16, dqkv, scr, z,
                                                   mlp + 4 * NC, qkv, y, lse, &hb, 3, T, C, NH));
                report_flops("attention_backward16 cuDNN, both homes, dO in 16 bits, 3 sequences",
                             md, s, 2 * afl * 3 / B);
            }
            K = KF;
        }
        for (size_t v = 0; v < N_KV_ATTN && MODES[md].dtype == ZT_BF16; v++) { /* beside them */
            char what[96];
            K = KV[v];
            G->set_matmul_dtype(K, MODES[md].dtype);
            if (*KV_ATTN[v].fwd) {
                snprintf(what, sizeof(what), "attention_forward fused, %s", KV_ATTN[v].label);
                TIME_IT(s, G->attention_forward(K, y, lse, scr, qkv, NULL, B, T, C, NH));
                report_flops(what, md, s, afl);
            }
            snprintf(what, sizeof(what), "attention_backward fused, %s", KV_ATTN[v].label);
            TIME_IT(s, G->attention_backward(K, dqkv, scr, x, qkv, y, lse, NULL, B, T, C, NH));
            report_flops(what, md, s, 2 * afl);
        }
    }
    use_mode(0);
    printf("  (attention keeps B x NH x T = %.2f MiB of log-sum-exps per layer; scratch %.0f MiB, "
           "chunks of %d sequences)\n",
           nlse * 4.0 / 1048576.0, nscr * 4.0 / 1048576.0, zt_attention_chunk_seqs(B, T, NH));
    G->free(K, lse), G->free(K, scr);

    size_t n4 = NC * 4;
    TIME_IT(s, G->gelu_forward(K, y, x, n4));
    report_bytes("gelu_forward (N x 4C)", s, 2.0 * n4 * 4);
    TIME_IT(s, G->gelu_backward(K, dx, x, z, n4));
    report_bytes("gelu_backward (N x 4C)", s, 4.0 * n4 * 4);
    TIME_IT(s, G->residual_forward(K, y, x, z, NC));
    report_bytes("residual_forward", s, 3.0 * NC * 4);
    TIME_IT(s, G->crossentropy_forward_backward(K, mean, big, big, tok, (int)N, V, VP, 1.0f));
    report_bytes("crossentropy_forward_backward (in place)", s, 2.0 * N * VP * 4);
#ifdef ZT_BENCH_CUDA_INTERNALS
    /* as the classifier runs it for bf16 jobs: 16-bit logits in, 16-bit dlogits out, 4 bytes an
     * element at best (its two passes over a row read it twice: what L2 does not keep comes
     * from memory again and shows as a smaller share of copy) */
    uint16_t *l16 = dalloc(N * VP * 2);
    G->cast(K, l16, ZT_BF16, big, ZT_F32, N * VP);
    TIME_IT(s, zt_cuda_crossentropy16in(K, mean, (uint16_t *)big, ZT_MM_BF16, l16, tok, (int)N, V,
                                        VP, 1.0f));
    report_bytes("crossentropy, bf16 logits and dlogits", s, 2.0 * N * VP * 2);
    G->free(K, l16);
    /* the passes beside a bf16 job's linear layers: GELU of fch's home into fcproj's copy
     * (forward, and again in backward), an fp32 dout's copy with its bias gradient (attproj's
     * and fcproj's backward), a 16-bit dout's bias gradient (fc's and qkv's); the logits'
     * buffer as room (4C <= VP) */
    uint16_t *s16 = (uint16_t *)big, *p16 = (uint16_t *)big + n4;
    G->cast(K, p16, ZT_BF16, x, ZT_F32, n4);
    TIME_IT(s, zt_cuda_stage_gelu16(K, s16, ZT_MM_BF16, p16, ZT_MM_BF16, (int)N, 4 * C,
                                    (size_t)(4 * C)));
    report_bytes("staging of GELU's output (N x 4C, bf16)", s, 4.0 * n4);
    TIME_IT(s, zt_cuda_stage_cast_bias(K, s16, ZT_MM_BF16, x, (int)N, C, db));
    report_bytes("staging with the bias gradient (N x C)", s, 6.0 * NC);
    TIME_IT(s, zt_cuda_bias_backward16(K, db, p16, ZT_MM_BF16, (int)N, 4 * C));
    report_bytes("bias gradient from bf16 (N x 4C)", s, 2.0 * n4);
#endif
    /* the classifier with its loss and backward over the micro-batch, in the engine's chunks
     * (ZT_GPT2_LOGITS_BUDGET), bf16: the op (wte rounded once, the cross-entropy writing 16-bit
     * dlogits for the products) next to its ops one by one */
    use_mode(2);
    int rows = (int)(ZT_GPT2_LOGITS_BUDGET / VP < N ? ZT_GPT2_LOGITS_BUDGET / VP : N);
    double cfl = 3.0 * 2.0 * (double)N * C * VP, s_ops;
    TIME_IT(s, G->classifier_forward_backward(K, mean, y, dw, big, x, w, tok, (int)N, rows, C, V,
                                              VP, 1.0f / (float)N));
    report_flops("classifier_forward_backward", 2, s, cfl);
    TIME_IT(s_ops, zt_classifier_by_ops(G, K, mean, y, dw, big, x, w, tok, (int)N, rows, C, V, VP,
                                        1.0f / (float)N));
    report_flops("  its ops one by one", 2, s_ops, cfl);
    printf("  (chunks of %d rows; the op %.2fx its ops)\n", rows, s_ops / s);
    /* as bf16 jobs run it: the logits in 16 bits, the GEMM writing them, the cross-entropy
     * reading them */
    double s32 = s;
    TIME_IT(s, G->classifier16_forward_backward(K, ZT_BF16, mean, y, dw, big, x, w, tok, (int)N,
                                                rows, C, V, VP, 1.0f / (float)N));
    report_flops("classifier16_forward_backward", 2, s, cfl);
    printf("  (16-bit logits %.2fx the fp32 logits' op)\n", s32 / s);
    use_mode(0);
    G->free(K, big);
    G->free(K, mlp);

    /* the optimizer over all of GPT-2 124M's parameters (--small: 1M) */
    size_t P = OPT_PARAMS;
    float *p = drand(P, 0.02f), *g = drand(P, 1e-3f), *m = drand(P, 1e-4f), *v = drand(P, 1e-6f);
    uint16_t *lp = dalloc(P * 2);
    G->cast(K, lp, ZT_BF16, g, ZT_F32, P);
    zt_adamw_args a = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                       .weight_decay = 0.1f, .bc1 = 0.1f, .bc2 = 0.05f, .grad_scale = 1.0f};
    REPS = REPS > 5 ? 5 : REPS;
    char pw[96];
    double pm = (double)P / 1e6;
    TIME_IT(s, G->adamw(K, p, g, ZT_F32, m, v, P, &a, NULL, ZT_F32));
    snprintf(pw, sizeof pw, "adamw %.0fM (fp32 grads)", pm);
    report_bytes(pw, s, 28.0 * P);
    TIME_IT(s, G->adamw(K, p, lp, ZT_BF16, m, v, P, &a, lp, ZT_BF16));
    snprintf(pw, sizeof pw, "adamw %.0fM (bf16 grads, bf16 copy out)", pm);
    report_bytes(pw, s, 28.0 * P);
    TIME_IT(s, G->cast(K, lp, ZT_BF16, p, ZT_F32, P));
    snprintf(pw, sizeof pw, "cast fp32 -> bf16 %.0fM", pm);
    report_bytes(pw, s, 6.0 * P);
    double out2[2] = {0, 0};
    TIME_IT(s, G->sumsq_nonfinite(K, g, ZT_F32, P, out2));
    snprintf(pw, sizeof pw, "sumsq_nonfinite %.0fM fp32", pm);
    report_bytes(pw, s, 4.0 * P);
    if (G->sync(K, &err) != ZT_OK) die("final sync");
    void *bufs[] = {x, y, z, dx, w, bias, dw, db, mean, rstd, wpe, tok, qkv, dqkv, p, g, m, v, lp};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        G->free(K, bufs[i]);
    G->ctx_destroy(KTF);
    G->ctx_destroy(KNS);
    G->ctx_destroy(KF);
    G->ctx_destroy(KD);
    G->ctx_destroy(KDA);
    G->ctx_destroy(KLG);
    for (size_t v = 0; v < N_KV_ATTN; v++)
        G->ctx_destroy(KV[v]);
    G->ctx_destroy(K);
    zt_free(tok_h);
    printf("bench_kernels_gpu: done\n");
    return 0;
}
