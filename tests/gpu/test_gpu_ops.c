/* zerotrain tests: every op of the CUDA table (kernels/cuda) against the CPU table on fresh
 * random inputs (the seed is printed; ZT_TEST_SEED=n repeats a run), several shapes including
 * odd ones, backward ops accumulating into prefilled buffers, NULL outputs, in-place
 * cross-entropy, bit-exact optimizer and precision ops, the matmul input modes
 * (ZT_CUDA_MATMUL), which attention ZT_CUDA_ATTN picks, the copy stream's copies and their order,
 * and error reporting. Exits 77 when
 * the build has no CUDA or no GPU is usable (after checking the message). The cases live in
 * gpu_ops_*.h by op family, run here in one order. The same program, linked with
 * tests/gpu/emu instead of the CUDA runtime, is test_gpu_ops_emu: the CUDA backend's code on
 * the CPU, in every CI run (with ZT_TEST_QUICK, a shorter list: QUICK). */
#define _POSIX_C_SOURCE 200809L

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_ops_attn.h"
#include "tests/gpu/gpu_ops_gpt2.h"
#include "tests/gpu/gpu_ops_linear.h"
#include "tests/gpu/gpu_ops_matmul.h"
#include "tests/gpu/gpu_ops_optim.h"
#include "tests/kernels/optimes_check.h"

/* ---- memory, copies, sync ---- */

static void test_memory(void)
{
    ASSERT_STREQ(GPU->name, "cuda");
    ASSERT_TRUE(GPU->stream(GC) != NULL);
    size_t n = 1000003;
    float *h = kc_frandn(n, 1.0);
    float *d = upf(h, n);
    float *d2 = dalloc(n * sizeof(float));
    ASSERT_EQ_INT((uintptr_t)d % 256, 0);
    GPU->copy_d2d(GC, d2, d, n * sizeof(float));
    float *pin = GPU->host_alloc(GC, n * sizeof(float));
    ASSERT_TRUE(pin != NULL);
    GPU->copy_d2h(GC, pin, d2, n * sizeof(float)); /* complete on return */
    ASSERT_TRUE(memcmp(pin, h, n * sizeof(float)) == 0);
    GPU->memset0(GC, (char *)d2 + 4 * 17, 4 * 1000);
    memset(h + 17, 0, 4 * 1000);
    check_bits("memset0", d2, h, n, 4);
    /* a zero-byte copy or memset is a no-op; alloc(0) gives a usable pointer */
    GPU->copy_h2d(GC, d2, h, 0);
    GPU->memset0(GC, d2, 0);
    void *z = GPU->alloc(GC, 0);
    ASSERT_TRUE(z != NULL);
    dfree(z);
    gsync("memory");
    GPU->host_free(GC, pin);
    dfree(d);
    dfree(d2);
    zt_free(h);
    GPU->free(GC, NULL);
    GPU->host_free(GC, NULL);
    printf("memory: ok\n");
}

/* ---- the copy stream ---- */

/* copy_async against a plain copy, both ways, and its order: a kernel queued after fence_wait
 * reads what the copy stream brought up; a copy that starts after a fence recorded on the
 * compute stream takes what the kernels before the fence wrote; copies on the copy stream keep
 * their order. 16 MiB on a GPU: long enough for a kernel that did not wait to read stale data;
 * 1 MiB on the emulation, whose kernels run on the CPU. */
static void test_copy_stream(void)
{
#ifdef ZT_TEST_EMU
    size_t n = (size_t)1 << 18;
#else
    size_t n = (size_t)1 << 22;
#endif
    size_t bytes = n * sizeof(float);
    float *h = kc_frandn(n, 1.0);
    float *pin = GPU->host_alloc(GC, bytes), *back = GPU->host_alloc(GC, bytes);
    ASSERT_TRUE(pin != NULL && back != NULL);
    memcpy(pin, h, bytes);
    float *d = dalloc(bytes), *acc = dalloc(bytes);
    GPU->memset0(GC, acc, bytes);
    /* up, after the compute stream's memset, and a kernel behind it: acc = 0 + h = h */
    GPU->fence_record(GC, 0);
    GPU->copy_async(GC, d, pin, bytes, 0, 1);
    GPU->fence_wait(GC, 1);
    GPU->accumulate(GC, acc, ZT_F32, d, 1.0f, n);
    check_bits("copy_async up, then a kernel after its fence", acc, h, n, 4);
    /* down, after the kernels before a fence: 2h */
    GPU->scale(GC, acc, 2.0f, n);
    GPU->fence_record(GC, 2);
    GPU->copy_async(GC, back, acc, bytes, 2, 3);
    gsync("copy_async down");
    for (size_t i = 0; i < n; i++)
        if (back[i] != 2.0f * h[i])
            ZT_FAIL("copy_async down: element %zu of %zu is %g, want %g", i, n, back[i],
                    2.0f * h[i]);
    /* two copies to one place on the copy stream: the later wins; a fence never recorded (9)
     * is passed at once */
    GPU->copy_async(GC, d, pin, bytes, 9, 4);
    GPU->copy_async(GC, d, back, bytes, -1, 4);
    GPU->fence_wait(GC, 4);
    GPU->copy_d2d(GC, acc, d, bytes);
    check_bits("copy_async in order", acc, back, n, 4);
    /* the same through a plain copy */
    GPU->copy_h2d(GC, d, pin, bytes);
    check_bits("copy_h2d, as copy_async", d, h, n, 4);
    /* the CPU table: a plain copy, fences that do nothing */
    float *c = zt_malloc(bytes);
    ASSERT_TRUE(c != NULL);
    CPU->fence_record(CC, 0);
    CPU->copy_async(CC, c, h, bytes, 0, 1);
    CPU->fence_wait(CC, 1);
    ASSERT_TRUE(memcmp(c, h, bytes) == 0);
    zt_free(c);
    /* a fence out of range is recorded and reported by sync */
    zt_err err;
    zt_kctx *ec = NULL;
    ASSERT_OK(GPU->ctx_create(&ec, 0, &err));
    GPU->fence_wait(ec, ZT_COPY_FENCES);
    zt_err_clear(&err);
    zt_status st = GPU->sync(ec, &err);
    printf("fence out of range: %s\n", zt_err_msg(&err));
    ASSERT_EQ_INT(st, ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "fence 16");
    GPU->ctx_destroy(ec);
    GPU->host_free(GC, pin);
    GPU->host_free(GC, back);
    dfree(d);
    dfree(acc);
    zt_free(h);
    printf("copy stream: ok\n");
}

/* ---- errors ---- */

static void test_errors(void)
{
    zt_err err;
    zt_kctx *bad = NULL;
    zt_status st = GPU->ctx_create(&bad, 9999, &err);
    printf("ctx_create(9999): %s\n", zt_err_msg(&err));
    ASSERT_EQ_INT(st, ZT_ERR_NO_DEVICE);
    ASSERT_TRUE(bad == NULL);
    ASSERT_CONTAINS(err.msg, "9999");
    GPU->ctx_destroy(NULL);

    /* a bad argument is recorded and reported by sync, and stays reported */
    zt_kctx *ec = NULL;
    ASSERT_OK(GPU->ctx_create(&ec, 0, &err));
    void *d = GPU->alloc(ec, 64);
    ASSERT_TRUE(d != NULL);
    GPU->cast(ec, d, (zt_dtype)7, d, ZT_F32, 4);
    zt_err_clear(&err);
    st = GPU->sync(ec, &err);
    printf("bad dtype: %s\n", zt_err_msg(&err));
    ASSERT_EQ_INT(st, ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "cast");
    zt_err_clear(&err);
    ASSERT_EQ_INT(GPU->sync(ec, &err), ZT_ERR_INVALID);
    /* an impossible allocation is a NULL, not a recorded failure */
    zt_kctx *oc = NULL;
    ASSERT_OK(GPU->ctx_create(&oc, 0, &err));
    ASSERT_TRUE(GPU->alloc(oc, (size_t)1 << 60) == NULL);
    ASSERT_TRUE(GPU->host_alloc(oc, (size_t)1 << 60) == NULL);
    GPU->scale(oc, d, 2.0f, 16);
    ASSERT_OK(GPU->sync(oc, &err));
    GPU->ctx_destroy(oc);
    GPU->free(ec, d);
    GPU->ctx_destroy(ec);
    printf("errors: ok\n");
}

int main(void)
{
    CPU = zt_ops_cpu();
    GPU = zt_ops_cuda();
    if (!GPU) {
        printf("SKIP: this build has no CUDA backend\n");
        return ZT_TEST_SKIP;
    }
    unsetenv("ZT_CUDA_MATMUL"); /* exact fp32 matmuls for the comparisons (fp32 is the default) */
    setenv("ZT_CUDA_ATTN", "chunked", 1); /* GC: the chunked attention in every matmul mode */
    zt_err err;
    zt_err_clear(&err);
    zt_status st = GPU->ctx_create(&GC, 0, &err);
    unsetenv("ZT_CUDA_ATTN");
    if (st == ZT_ERR_NO_DEVICE) {
        /* the no-GPU path itself: a clear message, no context */
        ASSERT_TRUE(GC == NULL);
        ASSERT_TRUE(strlen(err.msg) > 20);
        ASSERT_CONTAINS(err.msg, "GPU");
        printf("SKIP: no usable GPU (%s)\n", err.msg);
        return ZT_TEST_SKIP;
    }
    if (st != ZT_OK) ZT_FAIL("ctx_create(0): %s", zt_err_msg(&err));
    ASSERT_OK(CPU->ctx_create(&CC, 0, &err));
    setenv("ZT_CUDA_ATTN", "fused", 1);
    st = GPU->ctx_create(&GF, 0, &err);
    unsetenv("ZT_CUDA_ATTN");
    if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_ATTN=fused: %s", zt_err_msg(&err));
    for (size_t v = 0; v < N_ATTN_VARIANTS; v++) {
        setenv("ZT_CUDA_ATTN", "fused", 1);
        setenv("ZT_CUDA_ATTN_FWD", ATTN_VARIANTS[v].fwd, 1);
        setenv("ZT_CUDA_ATTN_BWD", ATTN_VARIANTS[v].bwd, 1);
        setenv("ZT_CUDA_ATTN_DQ", ATTN_VARIANTS[v].dq, 1);
        st = GPU->ctx_create(&GV[v], 0, &err);
        unsetenv("ZT_CUDA_ATTN");
        unsetenv("ZT_CUDA_ATTN_FWD");
        unsetenv("ZT_CUDA_ATTN_BWD");
        unsetenv("ZT_CUDA_ATTN_DQ");
        if (st != ZT_OK)
            ZT_FAIL("ctx_create with the attention's %s: %s", ATTN_VARIANTS[v].label,
                    zt_err_msg(&err));
    }
    setenv("ZT_CUDA_GEMM_TUNE", "1", 1);
    st = GPU->ctx_create(&GT, 0, &err);
    unsetenv("ZT_CUDA_GEMM_TUNE");
    if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_GEMM_TUNE=1: %s", zt_err_msg(&err));

    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    const char *s = getenv("ZT_TEST_SEED");
    if (s && *s) seed = strtoull(s, NULL, 10);
    printf("seed=%llu (ZT_TEST_SEED=%llu repeats this run)\n", (unsigned long long)seed,
           (unsigned long long)seed);
#ifdef ZT_TEST_EMU
    const char *q = getenv("ZT_TEST_QUICK");
    QUICK = q && *q && strcmp(q, "0") != 0;
    if (QUICK) printf("ZT_TEST_QUICK: the quick list of shapes\n");
#endif
    kc_rng_state = seed;

    ZT_TEST_RUN(test_memory());
    ZT_TEST_RUN(test_copy_stream());
    ZT_TEST_RUN(check_optimes(GPU));
    ZT_TEST_RUN(test_encoder(2, 7, 13, 17));
    ZT_TEST_RUN(test_encoder(4, 64, 96, 300));
    ZT_TEST_RUN(test_encoder(3, 33, 768, 50));
    ZT_TEST_RUN(test_layernorm(1, 1));
    ZT_TEST_RUN(test_layernorm(5, 7));
    ZT_TEST_RUN(test_layernorm(64, 768));
    ZT_TEST_RUN(test_layernorm(37, 1000));
    ZT_TEST_RUN(test_layernorm(300, 2049));
    ZT_TEST_RUN(test_layernorm(9000, 64)); /* many rows a warp in one pass (18 a split) */
    ZT_TEST_RUN(test_layernorm_backward_kernels(70, 768));
    ZT_TEST_RUN(test_layernorm_backward_kernels(33, 1000)); /* the last lanes' columns idle */
    ZT_TEST_RUN(test_layernorm_backward_kernels(9000, 68));
    ZT_TEST_RUN(test_residual_layernorm(5, 7));
    ZT_TEST_RUN(test_residual_layernorm(64, 768));
    ZT_TEST_RUN(test_residual_layernorm(300, 2049));
    /* the linear layer on the context that times cuBLASLt's candidates for each new shape:
     * its results must be the untuned ones (accumulating products are timed into a
     * temporary, not into the gradients). Quick: GPT-2's shapes on the untuned context (on the
     * emulation the timing runs a shape's product a dozen times at its first call), and small
     * widths that take cuBLASLt's GELU and DGELU epilogues on the tuning one, so that the
     * timing still meets every kind of product */
    zt_kctx *untuned = GC;
    GC = GT;
    ZT_TEST_RUN(test_matmul(1, 1, 1));
    ZT_TEST_RUN(test_matmul(7, 13, 5));
    ZT_TEST_RUN(test_matmul(33, 65, 129));
    ZT_TEST_RUN(test_matmul(1000, 3, 7));
    ZT_TEST_RUN(test_matmul_gelu(33, 65, 12));
    ZT_TEST_RUN(test_matmul_gelu_backward(33, 65, 12));
    ZT_TEST_RUN(test_gelu_matmul(33, 65, 12));
    ZT_TEST_RUN(test_layernorm_matmul(33, 65, 12));
    ZT_TEST_RUN(test_matmul_at(33, 64, 128, 1));
    if (QUICK) {
        ZT_TEST_RUN(test_matmul_gelu(40, 64, 96));
        ZT_TEST_RUN(test_matmul_gelu_backward(40, 96, 64));
    }
    GC = QUICK ? untuned : GT;
    ZT_TEST_RUN(test_matmul(64, 768, 2304));
    ZT_TEST_RUN(test_matmul(96, 64, 50304));
    ZT_TEST_RUN(test_matmul_gelu(64, 768, 3072));
    ZT_TEST_RUN(test_matmul_gelu_backward(64, 3072, 768));
    ZT_TEST_RUN(test_gelu_matmul(64, 3072, 768));
    ZT_TEST_RUN(test_layernorm_matmul(64, 768, 2304));
    ZT_TEST_RUN(test_matmul_at(128, 768, 768, 2));
    GC = untuned;
    ZT_TEST_RUN(test_matmul_modes());
#ifdef ZT_TEST_EMU
    ZT_TEST_RUN(test_heuristic_failure());
#endif
    ZT_TEST_RUN(test_matmul_dtype());
    ZT_TEST_RUN(test_matmul_staged());
    ZT_TEST_RUN(test_classifier());
    ZT_TEST_RUN(test_attention(1, 1, 4, 1));
    ZT_TEST_RUN(test_attention(2, 7, 12, 3));
    ZT_TEST_RUN(test_attention(1, 129, 96, 2));
    ZT_TEST_RUN(test_attention(2, 64, 128, 4));
    ZT_TEST_RUN(test_attention(2, 256, 768, 12));
    /* more sequences than one scratch chunk holds: chunks of 5 and a last one of 2, then
     * chunks of one sequence each (quick: chunks of 2 and a last one of 1, on a quarter of
     * the scores) */
    if (QUICK) {
        ZT_TEST_RUN(test_attention(3, 1024, 96, 6));
    } else {
        ZT_TEST_RUN(test_attention(7, 512, 384, 12));
        ZT_TEST_RUN(test_attention(3, 1024, 256, 16));
    }
    /* the fused kernels' edges: one token, tails of their 64-row blocks and 32-row tiles, a
     * long sequence */
    ZT_TEST_RUN(test_attention(1, 1, 64, 1));
    ZT_TEST_RUN(test_attention(2, 7, 128, 2));
    ZT_TEST_RUN(test_attention(1, 129, 192, 3));
    ZT_TEST_RUN(test_attention(3, 95, 64, 1));
    ZT_TEST_RUN(test_attention(1, 1024, 128, 2));
    ZT_TEST_RUN(test_attention_choice());
    ZT_TEST_RUN(test_attention_home());
    ZT_TEST_RUN(test_matmul16());
#ifdef ZT_TEST_EMU
    ZT_TEST_RUN(test_residual_fallback());
#endif
    ZT_TEST_RUN(test_mlp16());
    ZT_TEST_RUN(test_attention_env());
    ZT_TEST_RUN(test_attention_misaligned());
#if defined(ZT_TEST_EMU) || defined(ZT_TEST_CUDA)
    ZT_TEST_RUN(test_attention_tc_runs());
    ZT_TEST_RUN(test_attention_cudnn());
    ZT_TEST_RUN(test_bias_backward16(1, 4));
    ZT_TEST_RUN(test_bias_backward16(64, 3072));
    ZT_TEST_RUN(test_bias_backward16(300, 3072));
    ZT_TEST_RUN(test_bias_backward16(333, 50));
    ZT_TEST_RUN(test_bias_backward16(9000, 772));
#endif
    ZT_TEST_RUN(test_gelu_residual(1));
    ZT_TEST_RUN(test_gelu_residual(1000));
    ZT_TEST_RUN(test_gelu_residual(100003));
    ZT_TEST_RUN(test_crossentropy(1, 1, 128));
    ZT_TEST_RUN(test_crossentropy(5, 17, 128));
    ZT_TEST_RUN(test_crossentropy(33, 1000, 1024));
    ZT_TEST_RUN(test_crossentropy(16, 50257, 50304));
    ZT_TEST_RUN(test_adamw(1));
    ZT_TEST_RUN(test_adamw(100003));
    ZT_TEST_RUN(test_cast_accumulate_scale(7));
    ZT_TEST_RUN(test_cast_accumulate_scale(100003));
    ZT_TEST_RUN(test_sumsq(1));
    /* more partial sums than the final block has threads (quick: 293 of them, else 977) */
    ZT_TEST_RUN(test_sumsq(QUICK ? 300007 : 1000003));
    ZT_TEST_RUN(test_errors());

    if (*zt_test_failed_parts()) {
        fprintf(stderr, "%d part(s) failed (above)\n", *zt_test_failed_parts());
        return 1;
    }
    GPU->ctx_destroy(GF);
    for (size_t v = 0; v < N_ATTN_VARIANTS; v++)
        GPU->ctx_destroy(GV[v]);
    GPU->ctx_destroy(GT);
    GPU->ctx_destroy(GC);
    CPU->ctx_destroy(CC);
    printf("ok\n");
    return 0;
}
