/* zerotrain: causal attention as an operation graph (attn_graph.h). The graph is the one the
 * cuDNN frontend library writes for a causal SDPA node (its "composite" form on Hopper and
 * Ampere), in zerotrain's layout. */
#include "attn_graph.h"

#include <string.h>

/* The shapes of n sequences of T tokens, NH heads of 64 (qkv (n, T, 3C), C = 64 NH) */
typedef struct ag_shape {
    int64_t q[4], qs[4];   /* Q, V, dQ, dK, dV: (n, NH, T, 64) in qkv */
    int64_t kt[4], kts[4]; /* K^T, V^T: (n, NH, 64, T) in qkv */
    int64_t o[4], os[4];   /* O, dO: (n, NH, T, 64) in (n, T, C) */
    int64_t s[4], ss[4];   /* scores (n, NH, T, T) */
    int64_t st[4], sts[4]; /* scores transposed: (n, NH, T keys, T queries) */
    int64_t r[4], rs[4];   /* a value per row: (n, NH, T, 1) */
    int64_t qf[4], qfs[4]; /* dQ's fp32 sum: (n, NH, T, 64), packed */
} ag_shape;

static ag_shape ag_shape_of(int64_t n, int64_t T, int64_t NH)
{
    int64_t C = 64 * NH, C3 = 3 * C;
    ag_shape s = {
        .q = {n, NH, T, 64},
        .qs = {T * C3, 64, C3, 1},
        .kt = {n, NH, 64, T},
        .kts = {T * C3, 64, 1, C3},
        .o = {n, NH, T, 64},
        .os = {T * C, 64, C, 1},
        .s = {n, NH, T, T},
        .ss = {NH * T * T, T * T, T, 1},
        .st = {n, NH, T, T},
        .sts = {NH * T * T, T * T, 1, T},
        .r = {n, NH, T, 1},
        .rs = {NH * T, T, 1, 1},
        .qf = {n, NH, T, 64},
        .qfs = {NH * T * 64, T * 64, 64, 1},
    };
    return s;
}

/* A tensor (uid 0: the next virtual one); its index */
static int ag_tensor(zt_attn_graph *g, int64_t uid, zt_ag_type type, const int64_t dim[4],
                     const int64_t str[4])
{
    zt_ag_tensor *t = &g->t[g->nt];
    memset(t, 0, sizeof(*t));
    t->virt = uid == 0;
    t->uid = uid ? uid : ZT_AG_VIRTUAL + g->nt;
    t->type = type;
    memcpy(t->dim, dim, sizeof(t->dim));
    memcpy(t->str, str, sizeof(t->str));
    return g->nt++;
}

static int ag_virt(zt_attn_graph *g, zt_ag_type type, const int64_t dim[4], const int64_t str[4])
{
    return ag_tensor(g, 0, type, dim, str);
}

/* A float scalar passed by value */
static int ag_scalar(zt_attn_graph *g, int64_t uid)
{
    static const int64_t one[4] = {1, 1, 1, 1};
    int i = ag_tensor(g, uid, ZT_AG_F32, one, one);
    g->t[i].byval = true;
    return i;
}

static void ag_op(zt_attn_graph *g, zt_ag_kind kind, zt_ag_type prec, int axis, int x, int b, int t,
                  int y)
{
    g->op[g->nop++] =
        (zt_ag_op){.kind = kind, .prec = prec, .axis = axis, .x = x, .b = b, .t = t, .y = y};
}

/* y = kind(x, b) in fp32 (b -1 for the unary ones) */
static void ag_pw(zt_attn_graph *g, zt_ag_kind kind, int x, int b, int y)
{
    ag_op(g, kind, ZT_AG_F32, -1, x, b, -1, y);
}

/* S = Q K^T scaled and masked (a key after the query: -inf) as the frontend's SDPA node writes
 * it: row and column indices, row >= column, a select */
static int ag_scores(zt_attn_graph *g, const ag_shape *h, int q, int kt, int scale)
{
    int s = ag_virt(g, ZT_AG_F32, h->s, h->ss);
    ag_op(g, ZT_AG_MATMUL, ZT_AG_F32, -1, q, kt, -1, s);
    int s2 = ag_virt(g, ZT_AG_F32, h->s, h->ss);
    ag_pw(g, ZT_AG_MUL, s, scale, s2);
    int row = ag_virt(g, ZT_AG_I32, h->s, h->ss), col = ag_virt(g, ZT_AG_I32, h->s, h->ss);
    ag_op(g, ZT_AG_GEN_INDEX, ZT_AG_F32, 2, s2, -1, -1, row);
    ag_op(g, ZT_AG_GEN_INDEX, ZT_AG_F32, 3, s2, -1, -1, col);
    int keep = ag_virt(g, ZT_AG_BOOL, h->s, h->ss);
    ag_op(g, ZT_AG_CMP_GE, ZT_AG_BOOL, -1, row, col, -1, keep);
    int s3 = ag_virt(g, ZT_AG_F32, h->s, h->ss);
    ag_op(g, ZT_AG_SELECT, ZT_AG_F32, -1, s2, ag_scalar(g, ZT_AG_NEGINF), keep, s3);
    return s3;
}

void zt_attn_graph_forward(zt_attn_graph *g, int64_t n, int64_t T, int64_t NH)
{
    ag_shape h = ag_shape_of(n, T, NH);
    g->nt = g->nop = 0;
    int q = ag_tensor(g, ZT_AG_Q, ZT_AG_IO, h.q, h.qs);
    int kt = ag_tensor(g, ZT_AG_K, ZT_AG_IO, h.kt, h.kts);
    int v = ag_tensor(g, ZT_AG_V, ZT_AG_IO, h.q, h.qs);
    int o = ag_tensor(g, ZT_AG_O, ZT_AG_IO, h.o, h.os);
    int stats = ag_tensor(g, ZT_AG_STATS, ZT_AG_F32, h.r, h.rs);
    int s = ag_scores(g, &h, q, kt, ag_scalar(g, ZT_AG_SCALE));
    int m = ag_virt(g, ZT_AG_F32, h.r, h.rs);
    ag_op(g, ZT_AG_RED_MAX, ZT_AG_F32, -1, s, -1, -1, m);
    int d = ag_virt(g, ZT_AG_F32, h.s, h.ss);
    ag_pw(g, ZT_AG_SUB, s, m, d);
    int e = ag_virt(g, ZT_AG_F32, h.s, h.ss);
    ag_pw(g, ZT_AG_EXP, d, -1, e);
    int z = ag_virt(g, ZT_AG_F32, h.r, h.rs);
    ag_op(g, ZT_AG_RED_ADD, ZT_AG_F32, -1, e, -1, -1, z);
    int lz = ag_virt(g, ZT_AG_F32, h.r, h.rs);
    ag_pw(g, ZT_AG_LOG, z, -1, lz);
    ag_pw(g, ZT_AG_ADD, m, lz, stats);
    int p = ag_virt(g, ZT_AG_IO, h.s, h.ss); /* rounded: the product's input type */
    ag_pw(g, ZT_AG_DIV, e, z, p);
    ag_op(g, ZT_AG_MATMUL, ZT_AG_F32, -1, p, v, -1, o);
}

void zt_attn_graph_backward(zt_attn_graph *g, int64_t n, int64_t T, int64_t NH, bool dq_sum)
{
    ag_shape h = ag_shape_of(n, T, NH);
    g->nt = g->nop = 0;
    int q = ag_tensor(g, ZT_AG_Q, ZT_AG_IO, h.q, h.qs);
    int kt = ag_tensor(g, ZT_AG_K, ZT_AG_IO, h.kt, h.kts);
    int vt = ag_tensor(g, ZT_AG_V, ZT_AG_IO, h.kt, h.kts);
    int o = ag_tensor(g, ZT_AG_O, ZT_AG_IO, h.o, h.os);
    int dout = ag_tensor(g, ZT_AG_DO, ZT_AG_IO, h.o, h.os);
    int stats = ag_tensor(g, ZT_AG_STATS, ZT_AG_F32, h.r, h.rs);
    int dq = ag_tensor(g, ZT_AG_DQ, ZT_AG_IO, h.q, h.qs);
    int dk = ag_tensor(g, ZT_AG_DK, ZT_AG_IO, h.q, h.qs);
    int dv = ag_tensor(g, ZT_AG_DV, ZT_AG_IO, h.q, h.qs);
    int scale = ag_scalar(g, ZT_AG_SCALE);
    /* softmax_sum = rowsum(dO * O), a real tensor in the workspace */
    int doo = ag_virt(g, ZT_AG_F32, h.o, h.os);
    ag_pw(g, ZT_AG_MUL, dout, o, doo);
    int rs = ag_virt(g, ZT_AG_F32, h.r, h.rs);
    ag_op(g, ZT_AG_RED_ADD, ZT_AG_F32, -1, doo, -1, -1, rs);
    int sum = ag_tensor(g, ZT_AG_SUM, ZT_AG_F32, h.r, h.rs);
    ag_pw(g, ZT_AG_MUL, rs, ag_scalar(g, ZT_AG_ONE), sum);
    /* P = exp(S - Stats); dV = P^T dO */
    int s = ag_scores(g, &h, q, kt, scale);
    int d = ag_virt(g, ZT_AG_F32, h.s, h.ss);
    ag_pw(g, ZT_AG_SUB, s, stats, d);
    int p = ag_virt(g, ZT_AG_F32, h.s, h.ss);
    ag_pw(g, ZT_AG_EXP, d, -1, p);
    int pt = ag_virt(g, ZT_AG_IO, h.st, h.sts);
    ag_op(g, ZT_AG_RESHAPE, ZT_AG_F32, -1, p, -1, -1, pt);
    ag_op(g, ZT_AG_MATMUL, ZT_AG_F32, -1, pt, dout, -1, dv);
    /* dS = P (dO V^T - softmax_sum) scale; dK = dS^T Q */
    int dp = ag_virt(g, ZT_AG_F32, h.s, h.ss);
    ag_op(g, ZT_AG_MATMUL, ZT_AG_F32, -1, dout, vt, -1, dp);
    int dp2 = ag_virt(g, ZT_AG_F32, h.s, h.ss);
    ag_pw(g, ZT_AG_SUB, dp, sum, dp2);
    int ds = ag_virt(g, ZT_AG_F32, h.s, h.ss);
    ag_pw(g, ZT_AG_MUL, dp2, p, ds);
    int ds2 = ag_virt(g, ZT_AG_F32, h.s, h.ss);
    ag_pw(g, ZT_AG_MUL, ds, scale, ds2);
    int dst = ag_virt(g, ZT_AG_IO, h.st, h.sts);
    ag_op(g, ZT_AG_RESHAPE, ZT_AG_F32, -1, ds2, -1, -1, dst);
    ag_op(g, ZT_AG_MATMUL, ZT_AG_F32, -1, dst, q, -1, dk);
    /* dQ = dS K: written rounded by the product, or summed in fp32 (the workspace), then
     * written rounded */
    int k = ag_virt(g, ZT_AG_F32, h.q, h.qs);
    ag_op(g, ZT_AG_RESHAPE, ZT_AG_F32, -1, kt, -1, -1, k);
    if (!dq_sum) {
        ag_op(g, ZT_AG_MATMUL, ZT_AG_F32, -1, ds2, k, -1, dq);
        return;
    }
    int acc = ag_tensor(g, ZT_AG_DQACC, ZT_AG_F32, h.qf, h.qfs);
    ag_op(g, ZT_AG_MATMUL, ZT_AG_F32, -1, ds2, k, -1, acc);
    ag_pw(g, ZT_AG_IDENTITY, acc, -1, dq);
}
