/* zerotrain tests: the CUDA emulation (tests/gpu/emu) that runs kernels/cuda/ on the CPU in
 * CI: reductions through shuffles and shared memory come out right, every thread of a 3-D
 * grid runs exactly once, a bad launch configuration is a cudaGetLastError, and a barrier that
 * not every thread reaches stops the process with a message naming the kernel (as the GPU
 * would hang or compute garbage). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_emu.h"
#include "tests/test.h"

void emu_block_sums(float *out, const float *in, int n, unsigned blocks, unsigned threads);
void emu_indices(int *out, dim3 grid, dim3 block);
void emu_bad_sync(float *out);
void emu_bad_shfl(float *out);
void emu_launch_config(unsigned threads);

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
    printf("ok\n");
    return 0;
}
