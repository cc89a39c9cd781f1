/* zerotrain: causal attention written as an operation graph of matmuls, pointwise ops and
 * reductions: the graph kernels/cuda/attn_cudnn.c hands cuDNN (its attention, by default), whose
 * fused flash-attention engines recognise it, kept as plain data so that a test can also evaluate
 * it on the CPU against the op table's attention (tests/kernels/test_attn_graph.c): what cuDNN is
 * asked to compute is then checked without a GPU.
 *
 * Tensors are 4-d (dims and strides in elements). Q, K, V are views of the (n, T, 3C) qkv with
 * heads side by side (K and V by ZT_AG_K's and ZT_AG_V's strides from C and 2C elements on), out
 * and dO of (n, T, C), the lse (Stats) of (n, NH, T) floats; the gradients of Q, K, V views of
 * a (n, T, 3C) as qkv; the head size is 64. Semantics of the ops, as cuDNN's backend has them:
 * MATMUL y = x b over the last two dimensions; pointwise ops element by element, an operand with
 * a dimension of 1 broadcast along it; GEN_INDEX y = the element's index along `axis`; SELECT
 * y = t ? x : b; reductions over the dimensions where y has 1; RESHAPE y = x's memory seen with
 * y's dimensions and strides. A tensor of type ZT_AG_IO holds values rounded to the job's 16-bit
 * type (bf16 or fp16). */
#ifndef ZT_KERNELS_ATTN_GRAPH_H
#define ZT_KERNELS_ATTN_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

/* the ids of the tensors a run binds to memory (the rest are virtual) */
enum {
    ZT_AG_Q = 1,
    ZT_AG_K,     /* K in the forward; K^T's view in both */
    ZT_AG_V,     /* V in the forward, V^T's view in the backward */
    ZT_AG_O,     /* out */
    ZT_AG_STATS, /* lse */
    ZT_AG_SCALE, /* float scalar, by value: 1 / sqrt(64) */
    ZT_AG_NEGINF,
    ZT_AG_DO,
    ZT_AG_DQ,
    ZT_AG_DK,
    ZT_AG_DV,
    ZT_AG_ONE,   /* float scalar, by value: 1 */
    ZT_AG_SUM,   /* backward: rowsum(dO * O), (n, NH, T, 1) floats of workspace */
    ZT_AG_DQACC, /* backward with dq_sum: dQ summed in fp32, (n, NH, T, 64) packed, workspace */
    ZT_AG_VIRTUAL = 100
};

typedef enum { ZT_AG_F32, ZT_AG_IO, ZT_AG_I32, ZT_AG_BOOL } zt_ag_type;

typedef enum {
    ZT_AG_MATMUL,
    ZT_AG_RED_MAX,
    ZT_AG_RED_ADD,
    ZT_AG_RESHAPE,
    ZT_AG_MUL,
    ZT_AG_ADD,
    ZT_AG_SUB,
    ZT_AG_DIV,
    ZT_AG_EXP,
    ZT_AG_LOG,
    ZT_AG_IDENTITY,
    ZT_AG_GEN_INDEX,
    ZT_AG_CMP_GE,
    ZT_AG_SELECT
} zt_ag_kind;

typedef struct zt_ag_tensor {
    int64_t uid;
    zt_ag_type type;
    int64_t dim[4], str[4];
    bool virt;  /* only inside the graph */
    bool byval; /* a scalar passed by value */
} zt_ag_tensor;

typedef struct zt_ag_op {
    zt_ag_kind kind;
    zt_ag_type prec; /* pointwise: the type it computes in */
    int axis;        /* GEN_INDEX */
    int x, b, t, y;  /* tensor indices (b, t: -1 where unused) */
} zt_ag_op;

#define ZT_AG_TENSORS 48
#define ZT_AG_OPS 32

typedef struct zt_attn_graph {
    zt_ag_tensor t[ZT_AG_TENSORS];
    zt_ag_op op[ZT_AG_OPS];
    int nt, nop; /* in the order they are made: every op after its inputs' */
} zt_attn_graph;

/* The forward (S = Q K^T scale masked to -inf above the diagonal; Stats = max + log(sum
 * exp(S - max)); O = (exp(S - max) / sum, rounded) V) and the backward (softmax_sum =
 * rowsum(dO O); P = exp(S - Stats); dV = P^T dO; dS = P (dO V^T - softmax_sum) scale; dK = dS^T
 * Q; dQ = dS K) of n sequences of T tokens, NH heads of 64. dq_sum: dQ summed in an fp32 tensor
 * of its own (ZT_AG_DQACC), then rounded, which cuDNN's Hopper engines fill by atomic adds from
 * the blocks of keys (the sums' order, so dQ's last bits, vary from run to run); else dQ
 * written by its product, which those engines compute from the scores' gradients kept in their
 * workspace (the frontend's "dP workspace": 2 bytes a score, T rounded up to 64; the same bits
 * every run, its deterministic algorithm). */
void zt_attn_graph_forward(zt_attn_graph *g, int64_t n, int64_t T, int64_t NH);
void zt_attn_graph_backward(zt_attn_graph *g, int64_t n, int64_t T, int64_t NH, bool dq_sum);

#endif
