/* zerotrain tests: the CUDA emulation of the warp matrix functions (nvcuda::wmma of mma.h, the
 * 16 x 16 x 16 shape with bf16 or fp16 inputs and fp32 accumulators) and __syncwarp, for the
 * tensor-core kernels of kernels/cuda/ (cuda_bf16.h's and cuda_fp16.h's host code give
 * __nv_bfloat16 and __half). Included by cuda_emu.h (C++ only).
 *
 * A fragment's element-to-lane mapping is unspecified on the GPU, so code may only load,
 * store, fill and multiply whole fragments (and apply one operation to every element); here
 * every lane holds the whole tile, which gives the same results for such code. What the
 * programming guide requires is checked, and a violation stops the process naming it: every
 * call is collective (all 32 lanes of the warp reach it, with the same pointer and leading
 * dimension), pointers are 256-bit aligned, ldm is a multiple of 16 bytes. A store writes each
 * element from one lane only (element e from lane e % 32), so a lane that reads what another
 * stored without __syncwarp between may read stale memory, as on the GPU. The products of bf16
 * or fp16 values are exact in fp32 and summed in fp32 in order of k (a GPU's tensor cores add in
 * another order). */
#ifndef ZT_TESTS_GPU_EMU_WMMA_EMU_H
#define ZT_TESTS_GPU_EMU_WMMA_EMU_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include <cuda_bf16.h> /* __nv_bfloat16 and its conversions, host versions */
#include <cuda_fp16.h> /* __half, likewise */

static inline float zt_emu_wmma_value(float v)
{
    return v;
}

static inline float zt_emu_wmma_value(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

static inline float zt_emu_wmma_value(__half v)
{
    return __half2float(v);
}

/* __syncwarp(): a barrier of the 32 lanes of the warp (full mask only) */
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    if (mask != 0xffffffffu) {
        fprintf(stderr, "cuda-emu: __syncwarp with mask %#x: only the full mask is emulated\n",
                mask);
        abort();
    }
    (void)zt_emu_shfl(mask, 0, 0);
}

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/* The tile of one use: matrix_a is M x K, matrix_b K x N, the accumulator M x N; element
 * (r, c) at x[r * cols + c], held as float (a 16-bit fragment's values are exact in it). */
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "only the 16 x 16 x 16 shape is emulated");
    static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
    static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
    static constexpr int num_elements = rows * cols;
    float x[num_elements];
};

/* Stops the process unless all 32 lanes of the calling warp pass the same p and ldm, that p
 * is 256-bit aligned and ldm a multiple of 16 bytes; the call is a barrier of the warp. */
static inline void zt_emu_wmma_check(const char *fn, const void *p, unsigned ldm, size_t elem)
{
    /* one exchange for both: user-space addresses are below 2^48 */
    uint64_t mine = (uint64_t)(uintptr_t)p | (uint64_t)(ldm & 0xffffu) << 48;
    const char *bad = NULL;
    if (zt_emu_shfl(0xffffffffu, mine, 0) != mine || ldm > 0xffffu)
        bad = "the lanes of the warp pass different arguments";
    else if ((uintptr_t)p % 32 != 0) bad = "the pointer is not 256-bit aligned";
    else if ((ldm * elem) % 16 != 0) bad = "ldm is not a multiple of 16 bytes";
    if (bad) {
        fprintf(stderr, "cuda-emu: wmma::%s(%p, ldm %u) in block (%u,%u,%u) thread %u: %s\n",
                fn, p, ldm, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, bad);
        abort();
    }
}

template <class Use, int M, int N, int K, class T, class Layout, class V>
static inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, V v)
{
    for (int e = 0; e < f.num_elements; e++)
        f.x[e] = zt_emu_wmma_value(v);
}

/* matrix_a / matrix_b from memory laid out as the fragment's Layout says */
template <class Use, int M, int N, int K, class T, class Layout>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f, const T *p, unsigned ldm)
{
    static_assert(std::is_same<Layout, row_major>::value ||
                      std::is_same<Layout, col_major>::value,
                  "a matrix_a or matrix_b fragment has a layout");
    zt_emu_wmma_check("load_matrix_sync", p, ldm, sizeof(T));
    bool rm = std::is_same<Layout, row_major>::value;
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++)
            f.x[r * f.cols + c] = zt_emu_wmma_value(rm ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]);
}

template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p,
                                    unsigned ldm, layout_t layout)
{
    zt_emu_wmma_check("load_matrix_sync", p, ldm, sizeof(float));
    bool rm = layout == mem_row_major;
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++)
            f.x[r * f.cols + c] = rm ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f,
                                     unsigned ldm, layout_t layout)
{
    zt_emu_wmma_check("store_matrix_sync", p, ldm, sizeof(float));
    bool rm = layout == mem_row_major;
    unsigned lane = zt_emu_lane();
    for (int e = (int)lane; e < f.num_elements; e += 32) {
        int r = e / f.cols, c = e % f.cols;
        p[rm ? (size_t)r * ldm + c : (size_t)c * ldm + r] = f.x[e];
    }
}

/* d = a b + c. Every lane multiplies the whole tiles, so this loop is most of what an
 * emulated tensor-core kernel costs: it is optimised and left out of the sanitizers in every
 * build (it reads only the fragments, never the program's memory). */
template <int M, int N, int K, class T, class LA, class LB>
__attribute__((optimize("O2"), no_sanitize("address", "undefined"))) static inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                            const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c)
{
    (void)zt_emu_shfl(0xffffffffu, 0, 0); /* collective */
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = c.x[i * N + j];
            for (int k = 0; k < K; k++)
                s += a.x[i * K + k] * b.x[k * N + j];
            out[i * N + j] = s;
        }
    memcpy(d.x, out, sizeof(out));
}

} // namespace wmma
} // namespace nvcuda

#endif
