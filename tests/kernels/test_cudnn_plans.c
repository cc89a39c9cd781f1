/* Tests kernels/cuda/attn_cudnn.c's graphs without a GPU: cuDNN is given the device properties
 * of an H100 (sm_90) and an A100 (sm_80) as its JSON, asked for an engine for the forward and
 * backward attention graphs that ZT_CUDA_ATTN=cudnn runs, and made to build the engine's plan
 * up to loading its kernels, which needs a driver (the toolkit's stub driver stands in, so that
 * cuDNN's kernel loader finds one; without it cuDNN offers no engine). That proves cuDNN
 * recognises the graphs as its fused attention on both architectures, in bf16 and fp16, at
 * GPT-2's shapes and at an odd one, the backward both with dQ written by its product (the
 * default) and summed in fp32 (ZT_CUDA_ATTN_DQ=atomic); a V100 (sm_70, which cuDNN's fused
 * attention does not run on) must be refused. On the H100 the default's engine must be the one
 * that keeps the scores' gradients in its workspace (2 bytes a score: its deterministic
 * algorithm), the other's the one that needs none (its atomics add into the fp32 sum). What the
 * graph means is test_attn_graph's (on the CPU); that cuDNN computes it, test_gpu_ops' cudnn cases
 * (tests/gpu/gpu_ops_attn.h) on a GPU. Skips where cuDNN or the stub driver is missing. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "common/timeutil.h"
#include "kernels/cuda/cuda_int.h"
#include "tests/test.h"

typedef struct device {
    const char *name;
    int ver, sms, optin, l2;
    long long mem;
    int pci;
} device;

static const device H100 = {"NVIDIA H100 80GB HBM3", 900,   132, 232448, 52428800,
                            85031714816LL,           0x2330};
static const device A100 = {"NVIDIA A100-SXM4-80GB", 800,   108, 166912, 41943040,
                            85198045184LL,           0x20b2};
static const device V100 = {"Tesla V100-SXM2-16GB", 700, 80, 98304, 6291456, 17069309952LL, 0x1db1};

/* cuDNN's JSON of a device's properties (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION) */
static void props(char *buf, size_t cap, const device *d)
{
    snprintf(buf, cap,
             "{\"deviceName\": \"%s\", \"deviceVer\": %d, \"driverVer\": 13000, "
             "\"multiProcessorCount\": %d, \"maxSharedMemoryPerBlockOptin\": %d, "
             "\"l2CacheSize\": %d, \"totalGlobalMem\": %lld, \"pciDeviceId\": %d, "
             "\"maxGridSize\": [2147483647, 65535, 65535], \"maxBlockSize\": [1024, 1024, 64], "
             "\"regsPerBlock\": 65536, \"smClockRateKHz\": 1755000, \"memClockRateKHz\": 2619000, "
             "\"warpSize\": 32, \"maxSharedMemoryPerBlock\": 49152, "
             "\"reservedSharedMemoryPerBlock\": 1024, \"maxRegistersPerSM\": 65536, "
             "\"maxCtasPerSM\": 32, \"maxThreadsPerBlock\": 1024, \"maxThreadsPerSM\": 2048, "
             "\"isTccDriver\": 0, \"supportCoopLaunch\": 1, \"cudaDeviceId\": 0}",
             d->name, d->ver, d->sms, d->optin, d->l2, d->mem, d->pci);
}

enum { FWD, BWD, BWD_SUM }; /* the forward; the backward, dQ by its product or summed in fp32 */

/* A plan made for d; on the H100 the backward's workspace: with dQ by its product at least the
 * scores' gradients (2 bytes each, T in tiles of 64), with dQ summed in fp32 less than one
 * sequence's of them */
static void check(const device *d, bool fp16, int which, int n, int T, int NH)
{
    char js[2048], why[1024] = "";
    props(js, sizeof(js), d);
    int64_t ws = -1;
    uint64_t t0 = zt_now_ns();
    bool ok = zt_cuda_dnn_plan_check(js, fp16, which != FWD, which == BWD_SUM, n, T, NH, &ws, why,
                                     sizeof(why));
    printf("sm_%d %s %-12s %3d x %4d tokens, %2d heads: %s (%.2f s)%s%s\n", d->ver / 10,
           fp16 ? "fp16" : "bf16",
           which == FWD   ? "forward"
           : which == BWD ? "backward"
                          : "backward+sum",
           n, T, NH, ok ? "plan made" : "REFUSED", (double)(zt_now_ns() - t0) * 1e-9,
           ok ? "" : ": ", ok ? "" : why);
    if (ok) printf("  %s, workspace %lld bytes\n", why, (long long)ws);
    ASSERT_TRUE(ok);
    ASSERT_TRUE(ws >= 0);
    if (d != &H100) return;
    int64_t T64 = (T + 63) / 64 * 64, scores = (int64_t)NH * T64 * T64 * 2;
    if (which == BWD && ws < n * scores)
        ZT_FAIL("backward of %d x %d tokens, %d heads, dQ by its product: workspace %lld bytes, "
                "not the %lld of the scores' gradients (not the deterministic engine?)",
                n, T, NH, (long long)ws, (long long)(n * scores));
    if (which == BWD_SUM && ws >= scores)
        ZT_FAIL("backward of %d x %d tokens, %d heads, dQ summed in fp32: workspace %lld bytes "
                "(the scores' gradients kept?)",
                n, T, NH, (long long)ws);
}

int main(void)
{
    /* cuDNN's engines want a driver to be loadable; without one (no GPU here) the toolkit's
     * stub, whose soname is libcuda.so.1, answers for it (and fails their loading) */
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) &&
        !dlopen(ZT_CUDA_STUB_DRIVER, RTLD_NOW | RTLD_GLOBAL)) {
        printf("SKIP: neither a driver nor the stub driver (%s) loads\n", ZT_CUDA_STUB_DRIVER);
        return ZT_TEST_SKIP;
    }
    if (!zt_cuda_dnn_built()) {
        printf("SKIP: built without cuDNN's headers\n");
        return ZT_TEST_SKIP;
    }
    char js[2048], why[1024] = "";
    int64_t ws;
    props(js, sizeof(js), &V100);
    bool ok = zt_cuda_dnn_plan_check(js, false, false, false, 2, 128, 2, &ws, why, sizeof(why));
    if (!ok && strncmp(why, "cannot load", 11) == 0) {
        printf("SKIP: %s\n", why);
        return ZT_TEST_SKIP;
    }
    /* an architecture cuDNN's fused attention does not run on is refused, with the reason */
    printf("sm_70: %s: %s\n", ok ? "accepted" : "refused", why);
    ASSERT_TRUE(!ok);
    ASSERT_TRUE(strstr(why, "no cuDNN engine runs this graph") != NULL);

    /* GPT-2 124M at micro batch 8 whole, bf16 and fp16 */
    /* (volatile: the loops go on past a failed case's longjmp) */
    for (volatile int fp16 = 0; fp16 < 2; fp16++)
        for (volatile int which = FWD; which <= BWD_SUM; which++)
            ZT_TEST_RUN(check(&H100, fp16, which, 8, 1024, 12));
    /* the runs the engine makes of them: the default's workspaces (25 MB a sequence) in the
     * op's scratch (100 MB: 3, 3 and 2 sequences), or at micro batch 128, as gpu_train runs it,
     * in the fp32 gradient's room (1.2 GB: 43, 43, 42); with dQ summed in fp32 (3 MB a
     * sequence) 128 whole in that room, or where only the scratch is at hand 26 and a last 24 */
    static const struct {
        int which, n;
    } runs[] = {{BWD, 3},       {BWD, 2},      {BWD, 43},     {BWD, 42},
                {BWD_SUM, 128}, {BWD_SUM, 26}, {BWD_SUM, 24}, {FWD, 128}};
    for (volatile size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++)
        ZT_TEST_RUN(check(&H100, false, runs[i].which, runs[i].n, 1024, 12));
    for (volatile int which = FWD; which <= BWD_SUM; which++) /* a length no tile divides */
        ZT_TEST_RUN(check(&H100, false, which, 3, 37, 2));
    for (volatile int which = FWD; which <= BWD_SUM; which++)
        ZT_TEST_RUN(check(&A100, false, which, 8, 1024, 12));
    if (*zt_test_failed_parts()) return 1;
    printf("ok\n");
    return 0;
}
