/* zerotrain tests: the CUDA emulation (tests/gpu/emu) that runs kernels/cuda/ on the CPU in
 * CI: reductions through shuffles and shared memory come out right, every thread of a 3-D
 * grid runs exactly once, a bad launch configuration is a cudaGetLastError, and a barrier that
 * not every thread reaches stops the process with a message naming the kernel (as the GPU
 * would hang or compute garbage). The warp matrix functions multiply as the programming guide
 * defines them, in every layout, and refuse a misaligned pointer and a divergent call. The
 * schedule (the order of a block's threads between barriers) exposes a race. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/dtype.h"
#include "cuda_emu.h"
#include "tests/test.h"

void emu_block_sums(float *out, const float *in, int n, unsigned blocks, unsigned threads);
void emu_indices(int *out, dim3 grid, dim3 block);
void emu_bad_sync(float *out);
void emu_bad_shfl(float *out);
void emu_launch_config(unsigned threads);
void emu_wmma_product(float *d, const float *a, const float *b, int a_col, int b_col, int half);
void emu_wmma_misaligned(float *out);
void emu_wmma_divergent(float *out);
void emu_neighbour(float *out, int barrier);
void emu_cp_async(float *out, const float *in, int wait);
void emu_cp_async_unwaited(float *out);
void emu_warps_ahead(float *out);

static void test_block_sums(int n, unsigned blocks, unsigned threads)
{
    float *in = malloc((size_t)n * sizeof(float)), *out = malloc(blocks * sizeof(float));
    ASSERT_TRUE(in && out);
    for (int i = 0; i < n; i++)
        in[i] = (float)(i % 7) - 3.0f + 0.25f * (float)(i % 3); /* sums exact in float */
    emu_block_sums(out, in, n, blocks, threads);
    ASSERT_EQ_INT(cudaGetLastError(), cudaSuccess);
    double want = 0.0, got = 0.0;
    for (int i = 0; i < n; i++)
        want += in[i];
    for (unsigned b = 0; b < blocks; b++)
        got += out[b];
    ASSERT_NEAR(got, want, 0, 1e-9);
    free(in);
    free(out);
}

static void test_indices(dim3 grid, dim3 block)
{
    size_t n = (size_t)grid.x * grid.y * grid.z * block.x * block.y * block.z;
    int *out = calloc(n, sizeof(int));
    ASSERT_TRUE(out != NULL);
    emu_indices(out, grid, block);
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ_INT(out[i], (int)i + 1);
    free(out);
}

/* x rounded to bf16 or (half) fp16 */
static float round16(float x, int half)
{
    return half ? zt_f32_from_f16(zt_f16_from_f32(x)) : zt_f32_from_bf16(zt_bf16_from_f32(x));
}

/* A 16 x 16 x 16 product with the inputs in each layout, in bf16 or (half) fp16: the product
 * of the rounded inputs plus 1, exactly as fp32 sums in order of k (bf16 and fp16 products are
 * exact in fp32) */
static void test_wmma_product(int a_col, int b_col, int half)
{
    float a[256], b[256], d[256];
    for (int e = 0; e < 256; e++) {
        a[e] = (float)((e * 37) % 101) / 7.0f - 7.0f; /* not bf16-exact: the rounding shows */
        b[e] = (float)((e * 53) % 89) / 9.0f - 5.0f;
    }
    emu_wmma_product(d, a, b, a_col, b_col, half);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = 1.0f;
            for (int k = 0; k < 16; k++) {
                float x = round16(a_col ? a[k * 16 + i] : a[i * 16 + k], half);
                float y = round16(b_col ? b[j * 16 + k] : b[k * 16 + j], half);
                s += x * y;
            }
            ASSERT_NEAR(d[i * 16 + j], s, 0, 0);
        }
}

/* The schedule decides what a racy kernel computes and nothing else: a kernel that reads a
 * neighbour's shared memory without a barrier gets different values under forward, reverse and
 * random order (each thread runs once under each: the indices come out right); with the barrier
 * every schedule gives the right values. */
static void test_schedules(void)
{
    static const char *const specs[] = {"forward", "reverse", "random:7", "random"};
    float got[4][128];
    for (int barrier = 0; barrier < 2; barrier++) {
        for (int k = 0; k < 4; k++) {
            zt_emu_schedule(specs[k]);
            test_indices((dim3){3, 1, 1}, (dim3){40, 3, 1});
            emu_neighbour(got[k], barrier);
            ASSERT_EQ_INT(cudaGetLastError(), cudaSuccess);
        }
        int right[4] = {0};
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 128; i++)
                right[k] += got[k][i] == (float)((i % 64 + 1) % 64 + 1000 * (i / 64));
        printf("%s barrier: right values forward %d, reverse %d, random:7 %d, random %d of 128\n",
               barrier ? "with" : "without", right[0], right[1], right[2], right[3]);
        for (int k = 0; k < 4; k++)
            ASSERT_TRUE(barrier ? right[k] == 128 : right[k] < 128);
        if (!barrier) { /* forward: only the last thread sees a neighbour's (thread 0's) write */
            ASSERT_EQ_INT(right[0], 2);
            ASSERT_EQ_INT(right[1], 126); /* reverse: all but the last thread do */
            ASSERT_TRUE(right[2] > 2 && right[2] < 126);
        }
    }
    zt_emu_schedule("random");
}

/* Asynchronous copies land when their thread waits for their group under the "reverse"
 * schedule: every value after a wait for both groups (zeros where the copy zero-fills), only
 * the first group's after a wait that leaves the last group pending, none without a wait (each
 * read sees the -1 stored before); under "forward" they land at once (all values, waited for or
 * not), as the GPU may land them anywhere between. */
static void test_cp_async(void)
{
    _Alignas(16) static float in[256];
    float got[64];
    for (int i = 0; i < 256; i++)
        in[i] = (float)(i + 1);
    for (int early = 0; early < 2; early++) {
        zt_emu_schedule(early ? "forward" : "reverse");
        for (int wait = 0; wait < 3; wait++) {
            emu_cp_async(got, in, wait);
            ASSERT_EQ_INT(cudaGetLastError(), cudaSuccess);
            for (int t = 0; t < 64; t++) {
                int n = (t + 1) % 64; /* the neighbour whose row thread t read */
                bool landed = early || wait == 0 || (wait == 1 && n % 2 == 0);
                float want = !landed ? -1.0f : n < 32 ? (float)(4 * n + 1) : 0.0f;
                ASSERT_NEAR(got[t], want, 0, 0);
            }
        }
    }
    zt_emu_schedule("random");
}

/* A warp runs ahead of another by any number of warp barriers: under "forward" the first warp
 * that can go goes on alone (warp 0 writes before warp 1 reads), under "reverse" the last, so
 * a race between warps shows as a result that depends on the schedule. */
static void test_warps_ahead(void)
{
    float got[2][32];
    for (int k = 0; k < 2; k++) {
        zt_emu_schedule(k ? "reverse" : "forward");
        emu_warps_ahead(got[k]);
        ASSERT_EQ_INT(cudaGetLastError(), cudaSuccess);
    }
    zt_emu_schedule("random");
    for (int lane = 0; lane < 32; lane++) {
        ASSERT_NEAR(got[0][lane], 1.0, 0, 0);
        ASSERT_NEAR(got[1][lane], 0.0, 0, 0);
    }
}

static void bad_schedule(float *out)
{
    (void)out;
    zt_emu_schedule("sideways");
}

/* Runs fn in a child; it must abort with `needle` on stderr. */
static void expect_abort(void (*fn)(float *), const char *needle)
{
    int fd[2];
    ASSERT_TRUE(pipe(fd) == 0);
    fflush(stdout);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        signal(SIGABRT, SIG_DFL);
        static float out[64];
        fn(out);
        _exit(0);
    }
    close(fd[1]);
    char buf[4096];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof(buf) - 1 && (r = read(fd[0], buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = 0;
    close(fd[0]);
    int status = 0;
    ASSERT_TRUE(waitpid(pid, &status, 0) == pid);
    printf("child: %s", buf);
    ASSERT_TRUE(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
    ASSERT_CONTAINS(buf, needle);
}

int main(void)
{
    test_block_sums(1, 1, 32);
    test_block_sums(1000, 3, 256);
    test_block_sums(100003, 7, 1024);
    test_indices((dim3){3, 2, 2}, (dim3){8, 4, 2});
    test_indices((dim3){5, 1, 1}, (dim3){33, 1, 1});
    emu_launch_config(1025);
    ASSERT_EQ_INT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    ASSERT_EQ_INT(cudaGetLastError(), cudaSuccess);
    emu_launch_config(0);
    ASSERT_EQ_INT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    expect_abort(emu_bad_sync, "kernel bad_sync, block (0,0,0): 24 of 64 threads exited");
    expect_abort(emu_bad_shfl, "lane 5 of warp 0 has exited");
    for (int l = 0; l < 8; l++)
        test_wmma_product(l & 1, (l >> 1) & 1, l >> 2);
    expect_abort(emu_wmma_misaligned, "store_matrix_sync");
    expect_abort(emu_wmma_misaligned, "not 256-bit aligned");
    expect_abort(emu_wmma_divergent, "the lanes of the warp pass different arguments");
    test_schedules();
    test_cp_async();
    test_warps_ahead();
    expect_abort(emu_cp_async_unwaited, "exits with 1 asynchronous copies");
    expect_abort(bad_schedule, "\"sideways\" is not forward, reverse, random or random:SEED");
    printf("ok\n");
    return 0;
}
