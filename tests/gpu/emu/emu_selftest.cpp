/* zerotrain tests: kernels that exercise the CUDA emulation itself (test_cuda_emu.c): a block
 * reduction through shared memory and shuffles, a 3-D grid's indices, and two kernels with
 * barriers that not every thread reaches, which the emulator must refuse. */
#include "cuda_emu.h"

extern "C" {
void emu_block_sums(float *out, const float *in, int n, unsigned blocks, unsigned threads);
void emu_indices(int *out, dim3 grid, dim3 block);
void emu_bad_sync(float *out);
void emu_bad_shfl(float *out);
void emu_launch_config(unsigned threads);
}

static __global__ void block_sums_kernel(float *out, const float *in, int n)
{
    __shared__ float sh[32];
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v += in[i];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (unsigned w = 0; w < blockDim.x / 32; w++)
            s += sh[w];
        out[blockIdx.x] = s;
    }
}

static __global__ void indices_kernel(int *out)
{
    unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned per = blockDim.x * blockDim.y * blockDim.z;
    out[block * per + thread] += (int)(block * per + thread) + 1;
}

static __global__ void bad_sync_kernel(float *out)
{
    if (threadIdx.x >= 40) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

static __global__ void bad_shfl_kernel(float *out)
{
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

static __global__ void nothing_kernel(float *out)
{
    (void)out;
}

void emu_block_sums(float *out, const float *in, int n, unsigned blocks, unsigned threads)
{
    ZT_EMU_LAUNCH("block_sums", block_sums_kernel, blocks, threads, 0, out, in, n);
}

void emu_indices(int *out, dim3 grid, dim3 block)
{
    ZT_EMU_LAUNCH("indices", indices_kernel, grid, block, 0, out);
}

void emu_bad_sync(float *out)
{
    ZT_EMU_LAUNCH("bad_sync", bad_sync_kernel, 1, 64, 0, out);
}

void emu_bad_shfl(float *out)
{
    ZT_EMU_LAUNCH("bad_shfl", bad_shfl_kernel, 1, 32, 0, out);
}

void emu_launch_config(unsigned threads)
{
    ZT_EMU_LAUNCH("nothing", nothing_kernel, 1, threads, 0, nullptr);
}
