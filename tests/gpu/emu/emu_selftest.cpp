/* zerotrain tests: kernels that exercise the CUDA emulation itself (test_cuda_emu.c): a block
 * reduction through shared memory and shuffles, a 3-D grid's indices, two kernels with
 * barriers that not every thread reaches, which the emulator must refuse, and the warp matrix
 * functions: a product in each layout, a misaligned and a divergent call (refused); a kernel
 * with a race on shared memory, and without; one with a race between warps; asynchronous
 * copies to shared memory, waited for and not. */
#include "cuda_emu.h"

extern "C" {
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
}

namespace wmma = nvcuda::wmma;

static __nv_bfloat16 to16(float x, __nv_bfloat16)
{
    return __float2bfloat16_rn(x);
}

static __half to16(float x, __half)
{
    return __float2half_rn(x);
}

/* d (16 x 16, row-major) = a b + 1 over one warp: a and b (16 x 16 floats, row-major or, with
 * a_col / b_col, column-major) rounded to E (bf16 or fp16) in shared memory, padded rows of 24 */
template <class E, class LA, class LB>
static __global__ void wmma_product_kernel(float *d, const float *a, const float *b)
{
    __shared__ __align__(32) E as[16 * 24], bs[16 * 24];
    __shared__ __align__(32) float ds[16 * 20];
    for (int e = threadIdx.x; e < 256; e += 32) {
        as[(e / 16) * 24 + e % 16] = to16(a[e], E());
        bs[(e / 16) * 24 + e % 16] = to16(b[e], E());
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, E, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, E, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 1.0f);
    wmma::load_matrix_sync(fa, as, 24);
    wmma::load_matrix_sync(fb, bs, 24);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(ds, acc, 20, wmma::mem_row_major);
    __syncwarp();
    for (int e = threadIdx.x; e < 256; e += 32)
        d[e] = ds[(e / 16) * 20 + e % 16];
}

static __global__ void wmma_misaligned_kernel(float *out)
{
    __shared__ __align__(32) float ds[16 * 20];
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::store_matrix_sync(ds + 2, acc, 20, wmma::mem_row_major); /* 8 bytes off */
    out[threadIdx.x] = ds[threadIdx.x];
}

static __global__ void wmma_divergent_kernel(float *out)
{
    __shared__ __align__(32) float ds[2][16 * 16];
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::store_matrix_sync(ds[threadIdx.x % 2], acc, 16, wmma::mem_row_major);
    out[threadIdx.x] = ds[0][threadIdx.x];
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

/* out[t] = what thread t + 1 put in shared memory: a race without the barrier */
static __global__ void neighbour_kernel(float *out, int barrier)
{
    __shared__ float sh[64];
    sh[threadIdx.x] = (float)(threadIdx.x + 1000 * blockIdx.x);
    if (barrier) __syncthreads();
    out[blockIdx.x * 64 + threadIdx.x] = sh[(threadIdx.x + 1) % 64];
    __syncthreads(); /* the next block's threads write sh after every read of this one */
    sh[threadIdx.x] = -1.0f;
}

/* Thread t copies in[t] (in[] 16-byte aligned; rows of four floats for t < 32, zeros for the
 * rest) into shared memory asynchronously, in two groups (the even threads' rows, then the
 * odd ones), and writes out[t] = its neighbour's row's first float, read after waiting for
 * `wait` groups less than it committed (2: none waited) and a barrier. */
static __global__ void cp_async_kernel(float *out, const float *in, int wait)
{
    __shared__ __align__(16) float sh[64][4];
    int t = (int)threadIdx.x;
    sh[t][0] = -1.0f;
    __syncthreads();
    if (t % 2 == 0) __pipeline_memcpy_async(sh[t], in + 4 * t, 16, t < 32 ? 0 : 16);
    __pipeline_commit();
    if (t % 2 == 1) __pipeline_memcpy_async(sh[t], in + 4 * t, 16, t < 32 ? 0 : 16);
    __pipeline_commit();
    __pipeline_wait_prior((size_t)wait);
    __syncthreads();
    out[t] = sh[(t + 1) % 64][0];
    __syncthreads(); /* every read is done before the rest lands */
    __pipeline_wait_prior(0);
}

static __global__ void cp_async_unwaited_kernel(float *out)
{
    __shared__ __align__(16) float sh[4];
    __pipeline_memcpy_async(sh, out, 16);
}

/* Warp 1 reads what warp 0 writes after four warp barriers of its own, with no block barrier
 * between: a race between warps */
static __global__ void warps_ahead_kernel(float *out)
{
    __shared__ float sh[32];
    int lane = (int)threadIdx.x % 32;
    if (threadIdx.x < 32) sh[lane] = 0.0f;
    __syncthreads();
    if (threadIdx.x < 32) {
        for (int k = 0; k < 4; k++)
            __syncwarp();
        sh[lane] = 1.0f;
    } else {
        __syncwarp();
        out[lane] = sh[lane];
    }
    __syncthreads();
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

template <class E>
static void wmma_product(float *d, const float *a, const float *b, int a_col, int b_col)
{
    if (!a_col && !b_col)
        ZT_EMU_LAUNCH("wmma_product", (wmma_product_kernel<E, wmma::row_major, wmma::row_major>),
                      1, 32, 0, d, a, b);
    else if (!a_col)
        ZT_EMU_LAUNCH("wmma_product", (wmma_product_kernel<E, wmma::row_major, wmma::col_major>),
                      1, 32, 0, d, a, b);
    else if (!b_col)
        ZT_EMU_LAUNCH("wmma_product", (wmma_product_kernel<E, wmma::col_major, wmma::row_major>),
                      1, 32, 0, d, a, b);
    else
        ZT_EMU_LAUNCH("wmma_product", (wmma_product_kernel<E, wmma::col_major, wmma::col_major>),
                      1, 32, 0, d, a, b);
}

void emu_wmma_product(float *d, const float *a, const float *b, int a_col, int b_col, int half)
{
    if (half)
        wmma_product<__half>(d, a, b, a_col, b_col);
    else
        wmma_product<__nv_bfloat16>(d, a, b, a_col, b_col);
}

void emu_wmma_misaligned(float *out)
{
    ZT_EMU_LAUNCH("wmma_misaligned", wmma_misaligned_kernel, 1, 32, 0, out);
}

void emu_wmma_divergent(float *out)
{
    ZT_EMU_LAUNCH("wmma_divergent", wmma_divergent_kernel, 1, 32, 0, out);
}

void emu_cp_async(float *out, const float *in, int wait)
{
    ZT_EMU_LAUNCH("cp_async", cp_async_kernel, 1, 64, 0, out, in, wait);
}

void emu_cp_async_unwaited(float *out)
{
    ZT_EMU_LAUNCH("cp_async_unwaited", cp_async_unwaited_kernel, 1, 1, 0, out);
}

void emu_warps_ahead(float *out)
{
    ZT_EMU_LAUNCH("warps_ahead", warps_ahead_kernel, 1, 64, 0, out);
}

void emu_neighbour(float *out, int barrier)
{
    ZT_EMU_LAUNCH("neighbour", neighbour_kernel, 2, 64, 0, out, barrier);
}
