/* zerotrain: causal attention by cuDNN's fused scaled-dot-product attention (the default where
 * zerotrain's tensor-core kernels would run on the 16-bit homes; ZT_CUDA_ATTN=fused keeps them).
 *
 * cuDNN has no single "attention" call on Hopper: its fused flash-attention engines are found by
 * matching an operation graph of matmuls, pointwise ops and reductions written in its backend
 * (graph) API, the graph the cuDNN frontend library writes for an SDPA node. kernels/attn_graph.c
 * writes that graph as data for zerotrain's layout (qkv (B, T, 3C) with the heads side by side,
 * so Q, K and V are strided views of one tensor; out and dO (B, T, C); lse (B, NH, T), natural
 * log of the sum of exp of the scaled scores, which is cuDNN's "Stats"; a test evaluates it on
 * the CPU); this file lowers it to cuDNN's descriptors, asks cuDNN's heuristics for an engine
 * and keeps the execution plan per shape.
 *
 * The library is opened with dlopen, as cuBLASLt is (cublaslt_dl.c): nothing links it, and a
 * process whose attention never runs on the 16-bit homes never loads its ~400 MiB of engines.
 * The plans can also be built without a GPU, for device properties given as cuDNN's JSON
 * (zt_cuda_dnn_plan_check): that is how the tests on machines without a GPU see that cuDNN accepts
 * the graphs on sm_90. The backward's dQ comes by default from the graph whose engine keeps the
 * scores' gradients in its workspace (2 bytes a score: a GPT-2 sequence's 25 MiB, so runs of a few
 * sequences in the attention's scratch), which gives the same bits every run, as the rest of a step
 * does; ZT_CUDA_ATTN_DQ=atomic asks for the graph that sums dQ in fp32 by atomics instead (no such
 * workspace, but dQ's last bits vary from run to run), as it does of zerotrain's kernels. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cuda_int.h"
#include "kernels/attn_graph.h"

#ifdef ZT_HAVE_CUDNN
#include <cudnn_graph.h>

/* ---- the library, opened once per process ---- */

#define ZT_DNN_FUNCS(X)                                                                            \
    X(cudnnGetVersion)                                                                             \
    X(cudnnCreate)                                                                                 \
    X(cudnnDestroy)                                                                                \
    X(cudnnSetStream)                                                                              \
    X(cudnnGetErrorString)                                                                         \
    X(cudnnGetLastErrorString)                                                                     \
    X(cudnnBackendCreateDescriptor)                                                                \
    X(cudnnBackendDestroyDescriptor)                                                               \
    X(cudnnBackendSetAttribute)                                                                    \
    X(cudnnBackendGetAttribute)                                                                    \
    X(cudnnBackendFinalize)                                                                        \
    X(cudnnBackendExecute)

static struct {
#define ZT_DNN_PTR(name) __typeof__(name) *name;
    ZT_DNN_FUNCS(ZT_DNN_PTR)
#undef ZT_DNN_PTR
} dnn;

static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;
static char dnn_error[512];
static int dnn_ok;

#define ZT_DNN_STR2(x) #x
#define ZT_DNN_STR(x) ZT_DNN_STR2(x)
#define ZT_DNN_SONAME "libcudnn.so." ZT_DNN_STR(CUDNN_MAJOR)
/* the backend version whose graph this file writes (the SDPA engines of 9.x take it) */
#define ZT_DNN_MIN_VERSION 90000

static void dnn_open(void)
{
    void *h = dlopen(ZT_DNN_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(dnn_error, sizeof(dnn_error), "cannot load %s: %s", ZT_DNN_SONAME, dlerror());
        return;
    }
    void *sym;
#define ZT_DNN_SYM(name)                                                                           \
    sym = dlsym(h, #name);                                                                         \
    memcpy(&dnn.name, &sym, sizeof(sym));                                                          \
    if (!sym) {                                                                                    \
        snprintf(dnn_error, sizeof(dnn_error), "%s has no %s (a cuDNN older than %d?)",            \
                 ZT_DNN_SONAME, #name, CUDNN_MAJOR);                                               \
        return;                                                                                    \
    }
    ZT_DNN_FUNCS(ZT_DNN_SYM)
#undef ZT_DNN_SYM
    size_t v = dnn.cudnnGetVersion();
    if (v < ZT_DNN_MIN_VERSION) {
        snprintf(dnn_error, sizeof(dnn_error), "%s is version %zu; the attention needs %d or later",
                 ZT_DNN_SONAME, v, ZT_DNN_MIN_VERSION);
        return;
    }
    dnn_ok = 1;
}

static bool dnn_load(char *why, size_t cap)
{
    pthread_once(&dnn_once, dnn_open);
    if (!dnn_ok) snprintf(why, cap, "%s", dnn_error);
    return dnn_ok;
}

/* ---- building a graph: every descriptor made is kept for the plan's life ---- */

#define ZT_DNN_MADE 160
#define ZT_DNN_OPS 48

typedef struct dnn_g {
    cudnnBackendDescriptor_t made[ZT_DNN_MADE];
    cudnnBackendDescriptor_t ops[ZT_DNN_OPS];
    int nmade, nops;
    int64_t engine; /* the plan's engine (cuDNN's global index), -1 none */
    char err[640];  /* the first failure ("" none) */
} dnn_g;

static void g_fail(dnn_g *g, cudnnStatus_t s, const char *what)
{
    if (g->err[0]) return;
    char last[384];
    dnn.cudnnGetLastErrorString(last, sizeof(last));
    snprintf(g->err, sizeof(g->err), "%s: %s%s%s", what, dnn.cudnnGetErrorString(s),
             last[0] ? ": " : "", last);
}

static cudnnBackendDescriptor_t g_new(dnn_g *g, cudnnBackendDescriptorType_t t, const char *what)
{
    if (g->err[0]) return NULL;
    if (g->nmade == ZT_DNN_MADE) {
        snprintf(g->err, sizeof(g->err), "%s: more than %d descriptors", what, ZT_DNN_MADE);
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t s = dnn.cudnnBackendCreateDescriptor(t, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
        g_fail(g, s, what);
        return NULL;
    }
    g->made[g->nmade++] = d;
    return d;
}

static void g_set(dnn_g *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                  cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what)
{
    if (g->err[0] || !d) return;
    cudnnStatus_t s = dnn.cudnnBackendSetAttribute(d, a, t, n, v);
    if (s != CUDNN_STATUS_SUCCESS) g_fail(g, s, what);
}

/* d's attribute a = the descriptor x */
static void g_ref(dnn_g *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                  cudnnBackendDescriptor_t x, const char *what)
{
    g_set(g, d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
}

/* d's attribute a = the data type t */
static void g_dtype(dnn_g *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                    cudnnDataType_t t, const char *what)
{
    g_set(g, d, a, CUDNN_TYPE_DATA_TYPE, 1, &t, what);
}

static void g_fin(dnn_g *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->err[0] || !d) return;
    cudnnStatus_t s = dnn.cudnnBackendFinalize(d);
    if (s != CUDNN_STATUS_SUCCESS) g_fail(g, s, what);
}

static void g_free(dnn_g *g)
{
    if (!g) return;
    for (int i = g->nmade - 1; i >= 0; i--)
        dnn.cudnnBackendDestroyDescriptor(g->made[i]);
    zt_free(g);
}

static cudnnDataType_t g_type(zt_ag_type t, cudnnDataType_t io)
{
    switch (t) {
    case ZT_AG_IO:
        return io;
    case ZT_AG_I32:
        return CUDNN_DATA_INT32;
    case ZT_AG_BOOL:
        return CUDNN_DATA_BOOLEAN;
    default:
        return CUDNN_DATA_FLOAT;
    }
}

/* The graph's tensor t, its 16-bit type io */
static cudnnBackendDescriptor_t g_tensor(dnn_g *g, const zt_ag_tensor *t, cudnnDataType_t io)
{
    cudnnBackendDescriptor_t d = g_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor descriptor");
    int64_t align = 16;
    g_dtype(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, g_type(t->type, io), "tensor type");
    g_set(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t->dim, "tensor dimensions");
    g_set(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t->str, "tensor strides");
    g_set(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t->uid, "tensor id");
    g_set(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    g_set(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &t->virt, "tensor virtual");
    if (t->byval)
        g_set(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &t->byval,
              "tensor by value");
    g_fin(g, d, "finalizing a tensor");
    return d;
}

static void g_op(dnn_g *g, cudnnBackendDescriptor_t op, const char *what)
{
    g_fin(g, op, what);
    if (g->err[0]) return;
    if (g->nops == ZT_DNN_OPS) {
        snprintf(g->err, sizeof(g->err), "%s: more than %d operations", what, ZT_DNN_OPS);
        return;
    }
    g->ops[g->nops++] = op;
}

/* y = mode(x, b, t) (b, t NULL where the mode takes fewer); axis >= 0 for GEN_INDEX; prec the
 * type it computes in */
static void g_pw(dnn_g *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                 cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                 cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t pw = g_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "a pointwise");
    g_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    g_dtype(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, prec, "pointwise type");
    if (axis >= 0)
        g_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    g_fin(g, pw, "finalizing a pointwise");
    cudnnBackendDescriptor_t op =
        g_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "a pointwise operation");
    g_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise desc");
    g_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
    if (b) g_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise b");
    if (t) g_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise t");
    g_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
    g_op(g, op, "finalizing a pointwise operation");
}

/* c = a b over the last two dimensions, in fp32 */
static void g_mm(dnn_g *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t c)
{
    cudnnBackendDescriptor_t mm = g_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "a matmul");
    g_dtype(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT, "matmul type");
    g_fin(g, mm, "finalizing a matmul");
    cudnnBackendDescriptor_t op =
        g_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "a matmul operation");
    g_ref(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "matmul desc");
    g_ref(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul a");
    g_ref(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul b");
    g_ref(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul c");
    g_op(g, op, "finalizing a matmul operation");
}

/* y = the reduction of x over the dimensions where y has 1, in fp32 */
static void g_red(dnn_g *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                  cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t r = g_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "a reduction");
    g_set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
          "reduction mode");
    g_dtype(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT, "reduction type");
    g_fin(g, r, "finalizing a reduction");
    cudnnBackendDescriptor_t op =
        g_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "a reduction operation");
    g_ref(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, "reduction desc");
    g_ref(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
    g_ref(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
    g_op(g, op, "finalizing a reduction operation");
}

/* y = x seen with y's dimensions and strides (a transpose) */
static void g_reshape(dnn_g *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t op =
        g_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "a reshape operation");
    g_ref(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape x");
    g_ref(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape y");
    g_op(g, op, "finalizing a reshape operation");
}

/* ---- the attention's graph (kernels/attn_graph.h) in cuDNN's descriptors ---- */

static void g_lower(dnn_g *g, const zt_attn_graph *a, cudnnDataType_t io)
{
    cudnnBackendDescriptor_t td[ZT_AG_TENSORS];
    for (int i = 0; i < a->nt; i++)
        td[i] = g_tensor(g, &a->t[i], io);
    static const cudnnPointwiseMode_t pw[] = {
        [ZT_AG_MUL] = CUDNN_POINTWISE_MUL,           [ZT_AG_ADD] = CUDNN_POINTWISE_ADD,
        [ZT_AG_SUB] = CUDNN_POINTWISE_SUB,           [ZT_AG_DIV] = CUDNN_POINTWISE_DIV,
        [ZT_AG_EXP] = CUDNN_POINTWISE_EXP,           [ZT_AG_LOG] = CUDNN_POINTWISE_LOG,
        [ZT_AG_IDENTITY] = CUDNN_POINTWISE_IDENTITY, [ZT_AG_GEN_INDEX] = CUDNN_POINTWISE_GEN_INDEX,
        [ZT_AG_CMP_GE] = CUDNN_POINTWISE_CMP_GE,     [ZT_AG_SELECT] = CUDNN_POINTWISE_BINARY_SELECT,
    };
    for (int i = 0; i < a->nop; i++) {
        const zt_ag_op *o = &a->op[i];
        cudnnBackendDescriptor_t x = td[o->x], y = td[o->y];
        switch (o->kind) {
        case ZT_AG_MATMUL:
            g_mm(g, x, td[o->b], y);
            break;
        case ZT_AG_RED_MAX:
            g_red(g, CUDNN_REDUCE_TENSOR_MAX, x, y);
            break;
        case ZT_AG_RED_ADD:
            g_red(g, CUDNN_REDUCE_TENSOR_ADD, x, y);
            break;
        case ZT_AG_RESHAPE:
            g_reshape(g, x, y);
            break;
        default:
            g_pw(g, pw[o->kind], g_type(o->prec, io), o->kind == ZT_AG_GEN_INDEX ? o->axis : -1, x,
                 o->b >= 0 ? td[o->b] : NULL, o->t >= 0 ? td[o->t] : NULL, y);
        }
    }
}

/* The forward's or backward's graph (dQ summed in fp32 with sum) of n sequences of T tokens, NH
 * heads in g */
static void g_attention(dnn_g *g, bool bwd, bool sum, bool fp16, int n, int T, int NH)
{
    zt_attn_graph *a = zt_malloc(sizeof(*a));
    if (!a) {
        snprintf(g->err, sizeof(g->err), "out of host memory");
        return;
    }
    if (bwd)
        zt_attn_graph_backward(a, n, T, NH, sum);
    else
        zt_attn_graph_forward(a, n, T, NH);
    g_lower(g, a, fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16);
    zt_free(a);
}

/* The graph finalized, cuDNN's heuristics asked, and the first engine configuration that
 * finalizes as a plan kept (its workspace in *ws); handle NULL: without a GPU, for the device
 * properties prop, where a plan that got as far as loading its kernels (which needs a driver)
 * counts (not executable: for zt_cuda_dnn_plan_check). NULL with g->err set where none does. */
static cudnnBackendDescriptor_t g_plan(dnn_g *g, cudnnHandle_t handle,
                                       cudnnBackendDescriptor_t prop, int64_t *ws)
{
    const cudnnBackendAttributeType_t D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    cudnnBackendDescriptor_t og =
        g_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the operation graph");
    g_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, D, g->nops, g->ops, "the graph's operations");
    if (handle)
        g_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
              "the graph's handle");
    g_fin(g, og, "finalizing the operation graph");
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    char tried[480] = "";
    for (int mi = 0; mi < 2 && !g->err[0]; mi++) {
        cudnnBackendDescriptor_t heur =
            g_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "the heuristics query");
        g_ref(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og, "the heuristics' graph");
        g_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi],
              "the heuristics' mode");
        if (prop) g_ref(g, heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, prop, "the heuristics' device");
        g_fin(g, heur, "finalizing the heuristics query");
        int64_t count = 0;
        if (!g->err[0]) {
            cudnnStatus_t st = dnn.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, D,
                                                            0, &count, NULL);
            if (st != CUDNN_STATUS_SUCCESS) g_fail(g, st, "counting the heuristics' results");
        }
        if (count > 8) count = 8;
        cudnnBackendDescriptor_t cfg[8];
        for (int64_t i = 0; i < count; i++)
            cfg[i] = g_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine configuration");
        int64_t got = 0;
        if (count > 0 && !g->err[0]) {
            cudnnStatus_t st = dnn.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, D,
                                                            count, &got, cfg);
            if (st != CUDNN_STATUS_SUCCESS) g_fail(g, st, "reading the heuristics' results");
        }
        for (int64_t i = 0; i < got && !g->err[0]; i++) {
            cudnnBackendDescriptor_t plan =
                g_new(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "an execution plan");
            if (handle)
                g_set(g, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
                      "the plan's handle");
            g_ref(g, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg[i], "the plan's engine");
            if (g->err[0]) break;
            cudnnStatus_t st = dnn.cudnnBackendFinalize(plan);
            /* without a GPU (prop) the plan is made up to loading its kernels: it counts */
            bool unloaded = prop && st == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER;
            if (st == CUDNN_STATUS_SUCCESS || unloaded) {
                cudnnBackendDescriptor_t eng =
                    g_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "the plan's engine");
                int64_t got1 = 0;
                g->engine = -1;
                if (eng && dnn.cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, D, 1,
                                                        &got1, &eng) == CUDNN_STATUS_SUCCESS)
                    (void)dnn.cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                                       CUDNN_TYPE_INT64, 1, &got1, &g->engine);
                *ws = 0;
                st = unloaded
                         ? dnn.cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE,
                                                        CUDNN_TYPE_INT64, 1, NULL, ws)
                         : dnn.cudnnBackendGetAttribute(plan,
                                                        CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                        CUDNN_TYPE_INT64, 1, NULL, ws);
                if (st != CUDNN_STATUS_SUCCESS) g_fail(g, st, "the plan's workspace size");
                return g->err[0] ? NULL : plan;
            }
            if (!tried[0]) { /* the first refusal says most */
                char last[384];
                dnn.cudnnGetLastErrorString(last, sizeof(last));
                snprintf(tried, sizeof(tried), "%s%s%s", dnn.cudnnGetErrorString(st),
                         last[0] ? ": " : "", last);
            }
        }
    }
    if (!g->err[0])
        snprintf(g->err, sizeof(g->err), "no cuDNN engine runs this graph%s%s",
                 tried[0] ? "; the first refused: " : "", tried);
    return NULL;
}

/* ---- plans per shape, per context ---- */

#define ZT_DNN_PLANS 8

typedef struct dnn_plan {
    int bwd, sum, fp16, n, T, NH; /* the graph (sum: dQ summed in fp32) and shape it runs */
    dnn_g *g;                /* its descriptors; NULL where building it failed */
    cudnnBackendDescriptor_t plan;
    int64_t ws; /* bytes of workspace it asks */
} dnn_plan;

struct zt_dnn {
    cudnnHandle_t handle;
    dnn_plan plans[ZT_DNN_PLANS];
    int nplans, next;
    unsigned long long runs; /* executions so far (zt_cuda_dnn_runs) */
    bool warned;             /* a fallback to the kernels was reported */
    bool broken;             /* the library or the handle failed: the kernels from now on */
};

void zt_cuda_dnn_free(zt_kctx *ctx)
{
    struct zt_dnn *d = ctx->dnn;
    if (!d) return;
    for (int i = 0; i < d->nplans; i++)
        g_free(d->plans[i].g);
    if (d->handle) dnn.cudnnDestroy(d->handle);
    zt_free(d);
    ctx->dnn = NULL;
}

/* Once per context: why the kernels run instead (a warning where cuDNN was asked for, a note
 * where it is the default) */
static void dnn_fallback(zt_kctx *ctx, const char *why)
{
    if (ctx->dnn && ctx->dnn->warned) return;
    if (ctx->dnn) ctx->dnn->warned = true;
    if (ctx->attn_cudnn == ZT_DNN_ASKED)
        ZT_WARN("kernels",
                "ZT_CUDA_ATTN=cudnn: the attention runs on zerotrain's own kernels instead: %s "
                "(CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr has cuDNN say more)",
                why);
    else
        ZT_INFO("kernels",
                "the attention runs on zerotrain's own kernels, not cuDNN's (the default): %s "
                "(CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr has cuDNN say more; "
                "ZT_CUDA_ATTN=fused chooses the kernels without trying cuDNN)",
                why);
}

/* The context's cuDNN state, made at first use; NULL (reported) where cuDNN cannot run */
static struct zt_dnn *dnn_of(zt_kctx *ctx)
{
    if (ctx->dnn) return ctx->dnn->broken ? NULL : ctx->dnn;
    char why[600];
    struct zt_dnn *d = zt_calloc(1, sizeof(*d));
    if (!d) {
        dnn_fallback(ctx, "out of host memory");
        return NULL;
    }
    ctx->dnn = d;
    if (!dnn_load(why, sizeof(why))) {
        d->broken = true;
        dnn_fallback(ctx, why);
        return NULL;
    }
    cudnnStatus_t s = dnn.cudnnCreate(&d->handle);
    if (s == CUDNN_STATUS_SUCCESS) s = dnn.cudnnSetStream(d->handle, ctx->stream);
    if (s != CUDNN_STATUS_SUCCESS) {
        snprintf(why, sizeof(why), "cudnnCreate on GPU %d: %s", ctx->device,
                 dnn.cudnnGetErrorString(s));
        d->broken = true;
        dnn_fallback(ctx, why);
        return NULL;
    }
    ZT_INFO("kernels", "attention by cuDNN %zu (%s; ZT_CUDA_ATTN=fused runs zerotrain's kernels)",
            dnn.cudnnGetVersion(),
            ctx->attn_cudnn == ZT_DNN_ASKED ? "ZT_CUDA_ATTN=cudnn" : "the default");
    return d;
}

/* Whether ctx's backward sums dQ in fp32 (ZT_CUDA_ATTN_DQ=atomic) */
static int dnn_sum(const zt_kctx *ctx, int bwd)
{
    return bwd && ctx->attn_dq == ZT_ATTN_DQ_ATOMIC;
}

/* The plan for a shape, built at its first call (a failure is kept: not tried again) */
static dnn_plan *dnn_plan_of(zt_kctx *ctx, struct zt_dnn *d, int bwd, int n, int T, int NH,
                             const dnn_plan *keep)
{
    int fp16 = ctx->mm == ZT_MM_FP16, sum = dnn_sum(ctx, bwd);
    for (int i = 0; i < d->nplans; i++) {
        dnn_plan *p = &d->plans[i];
        if (p->bwd == bwd && p->sum == sum && p->fp16 == fp16 && p->n == n && p->T == T &&
            p->NH == NH)
            return p;
    }
    dnn_plan *p;
    if (d->nplans < ZT_DNN_PLANS) {
        p = &d->plans[d->nplans++];
    } else { /* round robin, sparing the plan the caller holds */
        if (&d->plans[d->next] == keep) d->next = (d->next + 1) % ZT_DNN_PLANS;
        p = &d->plans[d->next];
        d->next = (d->next + 1) % ZT_DNN_PLANS;
        g_free(p->g);
    }
    memset(p, 0, sizeof(*p));
    p->bwd = bwd, p->sum = sum, p->fp16 = fp16, p->n = n, p->T = T, p->NH = NH;
    dnn_g *g = zt_calloc(1, sizeof(*g));
    if (!g) return p;
    g_attention(g, bwd, sum, fp16, n, T, NH);
    uint64_t t0 = zt_now_ns();
    p->plan = g_plan(g, d->handle, NULL, &p->ws);
    if (!p->plan) {
        char why[800];
        snprintf(why, sizeof(why), "no plan for the %s of %d sequences of %d tokens, %d heads: %s",
                 bwd ? "backward" : "forward", n, T, NH, g->err);
        dnn_fallback(ctx, why);
        g_free(g);
        return p;
    }
    p->g = g;
    ZT_INFO("kernels",
            "cuDNN attention %s plan for %d x %d tokens, %d heads: %.1f s, engine %lld, "
            "workspace %lld bytes",
            !bwd  ? "forward"
            : sum ? "backward (dQ summed by atomics)"
                  : "backward",
            n, T, NH, (double)(zt_now_ns() - t0) * 1e-9, (long long)g->engine, (long long)p->ws);
    return p;
}

#define DNN_ALIGN(x) (((x) + 255) & ~(size_t)255)

/* Bytes of the scratch a run of n sequences takes besides the plan's own workspace */
static size_t dnn_run_bytes(int bwd, int sum, int n, int T, int NH)
{
    if (!bwd) return 0;
    size_t rows = (size_t)n * NH * T;
    /* softmax_sum, and dQ's fp32 sum where the graph has one */
    return DNN_ALIGN(rows * 4) + (sum ? DNN_ALIGN(rows * 64 * 4) : 0);
}

/* How a call goes: runs of n sequences by plan `full`, the last of B % n by plan `last` */
typedef struct dnn_runs {
    int n;
    dnn_plan *full, *last;
} dnn_runs;

static bool dnn_fits(const dnn_plan *p, size_t bytes)
{
    return DNN_ALIGN((size_t)p->ws) + dnn_run_bytes(p->bwd, p->sum, p->n, p->T, p->NH) <= bytes;
}

/* Plans for as many sequences a run as the scratch (bytes) holds the workspaces of (all B, else
 * runs of even length), both made before anything runs; false (reported) where there are none,
 * or where runs after the first would start their lse (n NH T floats on) off the 16-byte
 * alignment the graphs declare. */
static bool dnn_runs_of(zt_kctx *ctx, struct zt_dnn *d, int bwd, int B, int T, int NH, size_t bytes,
                        dnn_runs *r)
{
    char why[200];
    int n = B, sum = dnn_sum(ctx, bwd);
    /* a sequence's share at first sight: with the scores' gradients in the workspace, 2 bytes a
     * score in tiles of 64 (what cuDNN 9 asks), so that the first plan made is the one used */
    size_t T64 = ((size_t)T + 63) / 64 * 64;
    size_t per0 = dnn_run_bytes(bwd, sum, 1, T, NH) + (bwd && !sum ? NH * T64 * T64 * 2 : 0);
    if (per0 && (size_t)B * per0 > bytes && bytes >= per0) { /* runs of even length at once */
        size_t fit = bytes / per0;
        int runs = (int)(((size_t)B + fit - 1) / fit);
        n = (B + runs - 1) / runs;
    }
    r->full = r->last = NULL;
    for (int tries = 0; tries < 3 && n > 0 && !r->full; tries++) {
        dnn_plan *p = dnn_plan_of(ctx, d, bwd, n, T, NH, NULL);
        if (!p->plan) return false;
        if (dnn_fits(p, bytes)) {
            r->full = p;
            break;
        }
        /* a sequence's share, the plan's workspace counted as growing with the run (as it
         * does where it holds the scores' gradients, or on Ampere dQ's sum; on Hopper with dQ
         * summed by atomics it is 256 bytes) */
        size_t per = per0 + DNN_ALIGN((size_t)p->ws) / (size_t)n + 1;
        size_t fit = bytes / per;
        if (fit < 1) break;
        int runs = (int)(((size_t)B + fit - 1) / fit);
        int m = (B + runs - 1) / runs;
        n = m < n ? m : n - 1;
    }
    if (!r->full) {
        snprintf(why, sizeof(why), "the attention's scratch (%zu bytes) holds no run's workspace",
                 bytes);
        dnn_fallback(ctx, why);
        return false;
    }
    r->n = n;
    if (B > n && (size_t)n * NH * T % 4) {
        snprintf(why, sizeof(why),
                 "runs of %d sequences of %d tokens, %d heads would start their lse off 16-byte "
                 "alignment",
                 n, T, NH);
        dnn_fallback(ctx, why);
        return false;
    }
    if (B % n) {
        r->last = dnn_plan_of(ctx, d, bwd, B % n, T, NH, r->full);
        if (!r->last->plan) return false;
        if (!dnn_fits(r->last, bytes)) {
            snprintf(why, sizeof(why),
                     "the attention's scratch (%zu bytes) holds no workspace for a last run of "
                     "%d sequences",
                     bytes, B % n);
            dnn_fallback(ctx, why);
            return false;
        }
    }
    return true;
}

static bool dnn_aligned(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

/* The scratch as a workspace from its first 256-byte boundary: its bytes left in *bytes */
static uint8_t *dnn_ws(void *scratch, size_t *bytes)
{
    uint8_t *ws = (uint8_t *)(((uintptr_t)scratch + 255) & ~(uintptr_t)255);
    size_t skip = (size_t)(ws - (uint8_t *)scratch);
    *bytes = *bytes > skip ? *bytes - skip : 0;
    return ws;
}

static void dnn_execute(zt_kctx *ctx, struct zt_dnn *d, const dnn_plan *p, int nt,
                        const int64_t *uids, void *const *ptrs, void *ws)
{
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = dnn.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = dnn.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                         nt, uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = dnn.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                         CUDNN_TYPE_VOID_PTR, nt, ptrs);
    if (s == CUDNN_STATUS_SUCCESS)
        s = dnn.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                         1, &ws);
    if (s == CUDNN_STATUS_SUCCESS) s = dnn.cudnnBackendFinalize(vp);
    if (s == CUDNN_STATUS_SUCCESS) s = dnn.cudnnBackendExecute(d->handle, p->plan, vp);
    if (s == CUDNN_STATUS_SUCCESS) d->runs++;
    if (s != CUDNN_STATUS_SUCCESS) {
        char last[384];
        dnn.cudnnGetLastErrorString(last, sizeof(last));
        zt_cuda_fail(ctx, ZT_ERR_CUDA,
                     "attention_%s (cuDNN, %d sequences of %d tokens): %s%s%s; "
                     "ZT_CUDA_ATTN=fused runs zerotrain's own kernels instead",
                     p->bwd ? "backward" : "forward", p->n, p->T, dnn.cudnnGetErrorString(s),
                     last[0] ? ": " : "", last);
    }
    if (vp) dnn.cudnnBackendDestroyDescriptor(vp);
}

bool zt_cuda_dnn_forward(zt_kctx *ctx, uint16_t *out16, float *lse, const uint16_t *qkv16, int B,
                         int T, int C, int NH, void *scratch, size_t bytes)
{
    struct zt_dnn *d = dnn_of(ctx);
    if (!d) return false;
    if (!dnn_aligned(out16) || !dnn_aligned(qkv16) || !dnn_aligned(lse) || C != 64 * NH) {
        dnn_fallback(ctx, "qkv, out or lse is not 16-byte aligned, or the head size is not 64");
        return false;
    }
    uint8_t *ws = dnn_ws(scratch, &bytes);
    dnn_runs r;
    if (!dnn_runs_of(ctx, d, 0, B, T, NH, bytes, &r)) return false;
    float scale = 1.0f / sqrtf(64.0f), neginf = -INFINITY;
    for (int b0 = 0; b0 < B && ctx->st == ZT_OK; b0 += r.n) {
        size_t tok = (size_t)b0 * T;
        const uint16_t *q = qkv16 + tok * 3 * C;
        static const int64_t uids[7] = {ZT_AG_Q,     ZT_AG_K,     ZT_AG_V,     ZT_AG_O,
                                        ZT_AG_STATS, ZT_AG_SCALE, ZT_AG_NEGINF};
        void *ptrs[7] = {(void *)q,       (void *)(q + C),           (void *)(q + 2 * C),
                         out16 + tok * C, lse + (size_t)b0 * NH * T, &scale,
                         &neginf};
        dnn_execute(ctx, d, B - b0 < r.n ? r.last : r.full, 7, uids, ptrs, ws);
    }
    return true;
}

bool zt_cuda_dnn_backward(zt_kctx *ctx, uint16_t *dq16, const uint16_t *dout16,
                          const uint16_t *qkv16, const uint16_t *out16, const float *lse, int B,
                          int T, int C, int NH, void *scratch, size_t bytes)
{
    struct zt_dnn *d = dnn_of(ctx);
    if (!d) return false;
    if (!dnn_aligned(dq16) || !dnn_aligned(dout16) || !dnn_aligned(qkv16) || !dnn_aligned(out16) ||
        !dnn_aligned(lse) || C != 64 * NH) {
        dnn_fallback(ctx, "qkv, out, lse, dout or qkv's gradient is not 16-byte aligned, or the "
                          "head size is not 64");
        return false;
    }
    uint8_t *ws = dnn_ws(scratch, &bytes);
    dnn_runs r;
    if (!dnn_runs_of(ctx, d, 1, B, T, NH, bytes, &r)) return false;
    float scale = 1.0f / sqrtf(64.0f), neginf = -INFINITY, one = 1.0f;
    for (int b0 = 0; b0 < B && ctx->st == ZT_OK; b0 += r.n) {
        const dnn_plan *p = B - b0 < r.n ? r.last : r.full;
        size_t tok = (size_t)b0 * T, rows = (size_t)p->n * NH * T;
        /* softmax_sum and (p->sum) dQ's fp32 sum after the plan's own workspace */
        uint8_t *sum = ws + DNN_ALIGN((size_t)p->ws), *acc = sum + DNN_ALIGN(rows * 4);
        const uint16_t *q = qkv16 + tok * 3 * C;
        uint16_t *g = dq16 + tok * 3 * C;
        /* before 9.6 the engines add into dQ's sum as they find it (the frontend clears it) */
        if (p->sum && dnn.cudnnGetVersion() < 90600 &&
            zt_cuda_check(ctx, cudaMemsetAsync(acc, 0, rows * 64 * 4, ctx->stream),
                          "clearing cuDNN's dQ sum"))
            return true;
        static const int64_t uids[14] = {
            ZT_AG_Q,  ZT_AG_K,  ZT_AG_V,  ZT_AG_O,  ZT_AG_STATS, ZT_AG_SCALE, ZT_AG_NEGINF,
            ZT_AG_DO, ZT_AG_DQ, ZT_AG_DK, ZT_AG_DV, ZT_AG_ONE,   ZT_AG_SUM,   ZT_AG_DQACC};
        void *ptrs[14] = {(void *)q,
                          (void *)(q + C),
                          (void *)(q + 2 * C),
                          (void *)(out16 + tok * C),
                          (void *)(lse + (size_t)b0 * NH * T),
                          &scale,
                          &neginf,
                          (void *)(dout16 + tok * C),
                          g,
                          g + C,
                          g + 2 * C,
                          &one,
                          sum,
                          acc};
        dnn_execute(ctx, d, p, p->sum ? 14 : 13, uids, ptrs, ws); /* ZT_AG_DQACC last */
    }
    return true;
}
#endif /* ZT_HAVE_CUDNN */

/* ---- without a GPU: the plans for given device properties ---- */

bool zt_cuda_dnn_plan_check(const char *prop_json, bool fp16, bool bwd, bool dq_sum, int n, int T,
                            int NH, int64_t *ws, char *why, size_t cap)
{
#ifdef ZT_HAVE_CUDNN
    if (!dnn_load(why, cap)) return false;
    dnn_g *g = zt_calloc(1, sizeof(*g));
    if (!g) {
        snprintf(why, cap, "out of host memory");
        return false;
    }
    cudnnBackendDescriptor_t prop =
        g_new(g, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "the device properties");
    g_set(g, prop, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
          (int64_t)strlen(prop_json), prop_json, "the device properties' JSON");
    g_fin(g, prop, "finalizing the device properties");
    g_attention(g, bwd, dq_sum, fp16, n, T, NH);
    cudnnBackendDescriptor_t plan = g_plan(g, NULL, prop, ws);
    if (!plan)
        snprintf(why, cap, "%s", g->err);
    else
        snprintf(why, cap, "cuDNN engine %lld", (long long)g->engine);
    g_free(g);
    return plan != NULL;
#else
    (void)prop_json, (void)fp16, (void)bwd, (void)dq_sum, (void)n, (void)T, (void)NH, (void)ws;
    snprintf(why, cap, "built without cuDNN's headers (cudnn_graph.h)");
    return false;
#endif
}

#ifndef ZT_HAVE_CUDNN
/* Built without cuDNN's headers: the context never asks (zt_cuda_dnn_built) */
void zt_cuda_dnn_free(zt_kctx *ctx)
{
    (void)ctx;
}

bool zt_cuda_dnn_forward(zt_kctx *ctx, uint16_t *out16, float *lse, const uint16_t *qkv16, int B,
                         int T, int C, int NH, void *scratch, size_t bytes)
{
    (void)ctx, (void)out16, (void)lse, (void)qkv16, (void)B, (void)T, (void)C, (void)NH,
        (void)scratch, (void)bytes;
    return false;
}

bool zt_cuda_dnn_backward(zt_kctx *ctx, uint16_t *dq16, const uint16_t *dout16,
                          const uint16_t *qkv16, const uint16_t *out16, const float *lse, int B,
                          int T, int C, int NH, void *scratch, size_t bytes)
{
    (void)ctx, (void)dq16, (void)dout16, (void)qkv16, (void)out16, (void)lse, (void)B, (void)T,
        (void)C, (void)NH, (void)scratch, (void)bytes;
    return false;
}
#endif

unsigned long long zt_cuda_dnn_runs(const zt_kctx *ctx)
{
#ifdef ZT_HAVE_CUDNN
    return ctx->dnn ? ctx->dnn->runs : 0;
#else
    (void)ctx;
    return 0;
#endif
}

bool zt_cuda_dnn_built(void)
{
#ifdef ZT_HAVE_CUDNN
    return true;
#else
    return false;
#endif
}
