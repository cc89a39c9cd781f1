/* zerotrain tests: the CUDA emulation of the warp matrix functions (nvcuda::wmma of mma.h, the
 * 16 x 16 x 16 shape with bf16 or fp16 inputs and fp32 accumulators), of the PTX instructions
 * mma.sync m16n8k16 and ldmatrix x4 (zt_emu_mma16816, zt_emu_ldmatrix_x4: the kernels call them
 * where the GPU build has inline PTX) and __syncwarp, for the tensor-core kernels of
 * kernels/cuda/ (cuda_bf16.h's and cuda_fp16.h's host code give __nv_bfloat16 and __half).
 * Included by cuda_emu.h (C++ only).
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

/* The calling lane's warp in its block (at most 32 warps). */
static inline unsigned zt_emu_warp(void)
{
    unsigned w =
        (threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) / 32;
    if (w >= 32) {
        fprintf(stderr, "cuda-emu: a warp matrix instruction in a block of over 1024 threads\n");
        abort();
    }
    return w;
}

/* The 16-bit value of type E in the low half of bits, as a float. */
template <class E> static inline float zt_emu_mma_value(uint32_t bits)
{
    uint16_t h = (uint16_t)bits;
    E v;
    memcpy(static_cast<void *>(&v), &h, sizeof(h));
    return zt_emu_wmma_value(v);
}

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (inline PTX on the GPU): d
 * (16 x 8, fp32) += a (16 x 16) b (16 x 8), 16-bit inputs of type E packed two to a register,
 * the lower half first, in the PTX ISA's fragment layouts (g = lane / 4, t = lane % 4):
 *   a[0] = A(g, 2t..2t+1)  a[1] = A(g+8, 2t..)  a[2] = A(g, 2t+8..)  a[3] = A(g+8, 2t+8..)
 *   b0 = B(2t..2t+1, g)    b1 = B(2t+8.., g)
 *   d[0..1] = D(g, 2t..2t+1)  d[2..3] = D(g+8, 2t..2t+1)
 * Collective over the warp: every lane leaves its registers in the warp's place, then (a
 * barrier of the warp) computes its own four results (products exact in fp32, summed in order
 * of k) from its two rows of A and two columns of B, each widened once. Reads only registers:
 * optimised and left out of the sanitizers, as mma_sync below. */
template <class E>
__attribute__((optimize("O2"), no_sanitize("address", "undefined"))) static inline void
zt_emu_mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    static_assert(sizeof(E) == 2, "16-bit inputs");
    /* [call parity][warp of the block][lane]: a lane may enter the next call (and write its
     * registers) while others still read this call's, never the one after (it waits for all
     * at the next call's barrier), so two alternating places need no barrier after the reads */
    static __thread uint32_t ra[2][32][32][4], rb[2][32][32][2];
    static __thread unsigned char parity[32][32];
    unsigned lane = zt_emu_lane(), warp = zt_emu_warp(), c = parity[warp][lane];
    parity[warp][lane] ^= 1u;
    memcpy(ra[c][warp][lane], a, sizeof(ra[c][warp][lane]));
    rb[c][warp][lane][0] = b0;
    rb[c][warp][lane][1] = b1;
    (void)zt_emu_shfl(0xffffffffu, 0, 0); /* every lane's registers are in */
    int g = (int)lane / 4, t = (int)lane % 4;
    float av[2][16], bv[2][16]; /* A's rows g and g + 8, B's columns 2t and 2t + 1 */
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++) {
            uint32_t wa = ra[c][warp][4 * g + (k % 8) / 2][h + 2 * (k >= 8)];
            uint32_t wb = rb[c][warp][4 * (2 * t + h) + (k % 8) / 2][k >= 8];
            av[h][k] = zt_emu_mma_value<E>(k % 2 ? wa >> 16 : wa);
            bv[h][k] = zt_emu_mma_value<E>(k % 2 ? wb >> 16 : wb);
        }
    float out[4];
    for (int e = 0; e < 4; e++) { /* D(g + 8 (e / 2), 2t + e % 2) */
        float s = d[e];
        for (int k = 0; k < 16; k++)
            s += av[e / 2][k] * bv[e % 2][k];
        out[e] = s;
    }
    memcpy(d, out, sizeof(out));
}

/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (inline PTX on the GPU): four 8 x 8
 * matrices of 16-bit elements, the rows of matrix j at the addresses lanes 8j..8j+7 pass
 * (16-byte aligned: one row each); lane l gets in r[j] the elements (l / 4, 2 (l % 4)) and
 * (l / 4, 2 (l % 4) + 1) of matrix j, or with trans those of its transpose: (2 (l % 4), l / 4)
 * and (2 (l % 4) + 1, l / 4). Collective over the warp; the rows are read after every lane has
 * passed its address (a barrier of the warp), so a row another warp writes without a barrier
 * between is a race; a lane may still be reading while others go on, as on the GPU. */
static inline void zt_emu_ldmatrix_x4(uint32_t r[4], const void *p, bool trans)
{
    /* [call parity][warp of the block][lane], as zt_emu_mma16816's registers */
    static __thread const unsigned char *rows[2][32][32];
    static __thread unsigned char parity[32][32];
    unsigned lane = zt_emu_lane(), warp = zt_emu_warp(), c = parity[warp][lane];
    parity[warp][lane] ^= 1u;
    if ((uintptr_t)p % 16 != 0) {
        fprintf(stderr,
                "cuda-emu: ldmatrix row %p in block (%u,%u,%u) thread %u is not 16-byte "
                "aligned\n",
                p, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
        abort();
    }
    rows[c][warp][lane] = (const unsigned char *)p;
    (void)zt_emu_shfl(0xffffffffu, 0, 0); /* every lane's row is given */
    unsigned g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; j++) {
        uint16_t lo, hi;
        if (!trans) {
            memcpy(&lo, rows[c][warp][8 * j + g] + 4 * t, 2);
            memcpy(&hi, rows[c][warp][8 * j + g] + 4 * t + 2, 2);
        } else {
            memcpy(&lo, rows[c][warp][8 * j + 2 * t] + 2 * g, 2);
            memcpy(&hi, rows[c][warp][8 * j + 2 * t + 1] + 2 * g, 2);
        }
        r[j] = (uint32_t)lo | (uint32_t)hi << 16;
    }
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
