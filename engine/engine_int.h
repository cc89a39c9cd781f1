/* zerotrain: what only the engine's own files and ckpt*.c may see — the engine's state (ZeRO
 * partition, model-state buffers, working slots, activations, counters) and the functions its
 * files share. */
#ifndef ZT_ENGINE_ENGINE_INT_H
#define ZT_ENGINE_ENGINE_INT_H

#include <pthread.h>
#include <string.h>

#include "../common/settings.h"
#include "comm/comm.h"
#include "data/dataloader.h"
#include "engine.h"
#include "gpt2.h"
#include "memacct.h"
#include "nvme/aio.h"
#include "optim.h"
#include "zero.h"

/* A working copy of one unit's parameters in fp32 (stage 3 gathers, 16-bit widening). */
typedef struct zt_pslot {
    int unit;      /* -1: empty */
    int busy;      /* acquired, not released */
    int gathering; /* an all-gather into gbuf is in flight */
    zt_comm_req *req;
    void *gbuf;    /* stage 3: gathered unit in the parameter dtype (P_u elements) */
    float *cbuf;   /* fp32 compute copy (== gbuf when the parameter dtype is fp32) */
    size_t cap;    /* elements */
    uint64_t stamp;
} zt_pslot;

/* Scratch where one unit's backward accumulates its fp32 gradient. */
typedef struct zt_gslot {
    int unit;       /* -1: free */
    int pending;    /* a reduce-scatter is in flight */
    zt_comm_req *req;
    float *buf;     /* P_u fp32 */
    void *buf16;    /* P_u in the 16-bit gradient dtype (16-bit reduce-scatter) */
    void *stage;    /* offload_param: S_u in gdt, the unit's slice of the host gradient shard
                     * while this rank's chunk is added to it on the device */
    bool first;     /* its gradient is of the step's first micro-step (the shard holds zeros) */
    size_t cap;
} zt_gslot;

/* A contiguous run of optimizer elements inside one tensor. */
typedef struct zt_optseg {
    int unit;
    size_t j;       /* offset inside the unit's optimizer region (region starts at base_u) */
    size_t len;
    bool decay;
    bool host;      /* updated on the host side (offload) */
    size_t side_off;/* offset into that side's master/moment arrays */
} zt_optseg;

struct zt_engine {
    zt_job job;
    zt_engine_opts opts;
    int rank, world;
    const zt_ops *ops;
    zt_kctx *k;
    zt_comm *comm;
    zt_gpt2_dims dims;
    zt_gpt2_layout lay;
    zt_memacct mem;
    zt_dataset *train_ds, *val_ds;

    /* precision */
    zt_dtype pdt;   /* compute parameter storage */
    zt_dtype gdt;   /* gradient accumulation */
    bool mixed;     /* fp32 master copy kept (pdt != fp32) */
    bool params_host; /* offload_param on a CUDA rank: the parameter shard in pinned host memory
                       * (and the gradient shard: zt_engine_grads_host) */
    bool grads_first; /* the micro-step running is the step's first (set by step.c) */
    bool ckpt_act;  /* activation checkpointing */
    bool act16;     /* mixed precision: blocks' qkv, atty, fch kept in pdt (see acts16) */

    /* the ZeRO partition: what is sharded, where each unit lies, which collectives run. Its
     * geometry tables are viewed here: unit u is padded to P[u] = S[u] * world elements and
     * this rank's optimizer region of it starts at unit position base[u]. */
    zt_zero *zero;
    int nu;
    const size_t *P, *S, *base;
    size_t max_unit_p;        /* max P[u] over blocks and the final unit */

    /* model states (backend memory), as the partition shards them */
    void *params;   /* zt_zero_param_elems in pdt */
    void *grads;    /* zt_zero_grad_elems in gdt */
    float *master;  /* device-side fp32 master for the optimizer region (mixed only) */
    float *m, *v;   /* device-side moments (zt_zero_device_elems) */
    /* offload (host memory, zt_zero_host_elems) */
    float *h_master, *h_m, *h_v; /* NULL with NVMe offload: their segments live in swap files */
    void *h_grad;   /* host copy of the host part's gradients (gdt); none with offload_param */
    void *h_lp;     /* updated values to copy back (pdt; mixed precision or NVMe offload) */
    void *h_swapbuf; /* NVMe offload: the swap's buffer sets (offload_nvme.c) */
    struct zt_nvme *nvme; /* NVMe offload's swap files; NULL without */
    void *h_pswapbuf; /* offload_param "nvme": the parameter swap's host buffers (param_nvme.c) */
    struct zt_pnvme *pnvme; /* offload_param "nvme": the shard's swapped units; NULL without */

    zt_optseg *segs;
    int nsegs;
    /* An optimizer step whose host part still runs in the background (offload.c; NVMe offload
     * without a parameter all-gather after the step), NULL when none; see
     * zt_engine_optim_ready. */
    struct zt_optim_bg *optim_bg;
    double t_opt_bg; /* how long the last optimizer step finished in the background ran */

    /* one allocation per category and side (backend 0, host 1); the buffers are carved from them */
    void *arena[ZT_MEM_CATEGORY_COUNT][2];
    size_t arena_bytes[ZT_MEM_CATEGORY_COUNT][2];

    /* working buffers */
    zt_pslot pslots[4]; /* [0] for unit 0, [1..3] for the rest */
    int npslots;
    uint64_t pstamp;
    zt_gslot gslots[3]; /* [0] for unit 0, [1..2] for the rest, in rotation */
    int ngslots;
    int gnext;          /* the general gradient slot taken next (1 or 2) */
    float *head_gf, *head_g0; /* gradients of units L+1 and 0, acquired from the head (in
                               * forward) to the end of their use in backward */
    float *d_red;       /* backend buffer for the small per-step all-reduce */

    /* activations for one micro-batch */
    int B, T;
    int32_t *d_inp, *d_tgt;      /* backend (B,T) */
    int32_t *h_inp, *h_tgt;      /* host (B,T) */
    float *x;                    /* (L+1, B,T,C) residual stream */
    float *x_tmp;                /* (B,T,C) recompute output */
    zt_gpt2_block_acts *acts;    /* L sets, or 1 with activation checkpointing */
    float *acts_mem;             /* act16: the sets' fp32 parts, then one fp32 working set
                                  * (qkv and atty) */
    void *acts16;                /* act16: each set's qkv, atty, fch in pdt */
    zt_gpt2_head_acts head;
    int head_rows; /* rows of logits per chunk (zt_gpt2_head_rows) */
    float *head_mem;
    zt_gpt2_scratch scr;
    float *scr_mem;
    float *dres;                 /* (B,T,C) */
    float *h_losses;             /* host (B,T) */

    /* training state */
    int64_t steps_done;          /* optimizer steps taken (skipped ones included) */
    int64_t applied_steps;       /* steps whose update was applied */
    int64_t skipped_total;
    int64_t skipped_run;         /* consecutive skipped steps, up to the last one */
    /* where this rank first saw a non-finite value ("parameters at load: wte has 12
     * non-finite values", "the loss at step 3", ...); "" while none was seen */
    char first_nonfinite[192];
    int nonfinite_tensors;       /* parameter tensors that held non-finite values at load */
    zt_loss_scaler scaler;
    double peak_flops;           /* device peak for MFU, 0 = unknown */
    /* per-step accumulators; forward includes the head's backward */
    double t_fwd, t_bwd, t_opt, t_comm;
    zt_optimes optimes;          /* the last step's op times (ZT_OP_TIMES=1; else none) */
    int64_t inject_step;         /* test hook: ZT_INJECT_NONFINITE=rank:step */
    int64_t crash_step;          /* test hook: ZT_INJECT_CRASH=rank:step */
    int64_t last_ckpt_step;

    /* the checkpoint being written in the background (ckpt.c) */
    struct ckpt_writer *ck_writer;
    pthread_t ck_thread;
    bool ck_threaded;
    unsigned char *ck_buf;  /* host snapshot of this rank's shard (header + payload) */
    size_t ck_buf_bytes;
    bool ck_all_written;  /* every rank's pending shard is durable (from the step's all-reduce) */
    int64_t ck_step, ck_applied, ck_skipped;
    zt_loss_scaler ck_scaler;
    double ck_blocked_s;
    bool ck_odd_warned;  /* prune warned of step_* entries it leaves alone (once a run) */
    int64_t ck_charged;        /* bytes of ck_buf charged to ZT_MEM_CKPT (engine.c) */
    uint64_t comm_buf_charged; /* the communicator's own buffers charged to ZT_MEM_COMM */
};

/* The engine's files, from the bottom up; each calls only into those listed before it (and
 * zero.h): plan.c, state.c, ckpt*.c, slots.c, offload.c, step.c, engine.c. */

/* Sets the caller's `zt_status st` to expr and, unless it is ZT_OK, jumps to the cleanup label
 * the call site names. */
#define ZT_CHECK(expr, label)                                                                      \
    do {                                                                                           \
        st = (expr);                                                                               \
        if (st != ZT_OK)                                                                           \
            goto label;                                                                            \
    } while (0)

/* Elements zt_engine_load_unit casts at a time to 16 bits. */
#define ZT_LOAD_PIECE ((size_t)1 << 16)

/* Bytes of one parameter and one gradient element. */
static inline size_t zt_engine_psize(const zt_engine *e)
{
    return zt_dtype_size(e->pdt);
}

static inline size_t zt_engine_gsize(const zt_engine *e)
{
    return zt_dtype_size(e->gdt);
}

/* Unit position pos of unit u, in the parameter buffer (pos in the buffer's span of u). With
 * offload_param "nvme" only units kept in host memory are there: see zt_engine_param_ptr. */
static inline void *zt_engine_param_at(zt_engine *e, int u, size_t pos)
{
    return (char *)e->params + zt_zero_param_index(e->zero, u, pos) * zt_engine_psize(e);
}

/* Unit position pos of unit u, in the (reduced) gradient buffer. */
static inline void *zt_engine_grad_at(zt_engine *e, int u, size_t pos)
{
    return (char *)e->grads + zt_zero_grad_index(e->zero, u, pos) * zt_engine_gsize(e);
}

/* Element j of unit u's optimizer region, in the parameter buffer. */
static inline void *zt_engine_param_loc(zt_engine *e, int u, size_t j)
{
    return zt_engine_param_at(e, u, e->base[u] + j);
}

/* Element j of unit u's optimizer region, in the (reduced) gradient buffer. */
static inline void *zt_engine_grad_loc(zt_engine *e, int u, size_t j)
{
    return zt_engine_grad_at(e, u, e->base[u] + j);
}

/* Writes bytes into the parameter buffer at dst from host memory: a copy to the device, or with
 * offload_param on a CUDA rank a host copy (the shard lives in pinned host memory). */
static inline void zt_engine_params_put(zt_engine *e, void *dst, const void *src, size_t bytes)
{
    if (e->params_host)
        memcpy(dst, src, bytes);
    else
        e->ops->copy_h2d(e->k, dst, src, bytes);
}

/* offload_param on a CUDA rank: the gradient shard lives in pinned host memory too; each
 * unit's reduced chunk goes down on the copy stream after its reduce-scatter (slots.c). */
static inline bool zt_engine_grads_host(const zt_engine *e)
{
    return e->params_host && zt_zero_micro(e->zero) == ZT_ZERO_MICRO_REDUCE_SCATTER;
}

/* Compute copies are the parameters themselves (full and fp32): no parameter slots. */
static inline bool zt_engine_params_direct(const zt_engine *e)
{
    return !zt_zero_params_sharded(e->zero) && e->pdt == ZT_F32;
}

/* Backward accumulates straight into the gradients (full and fp32): no gradient slots. */
static inline bool zt_engine_grads_direct(const zt_engine *e)
{
    return !zt_zero_grads_sharded(e->zero) && e->gdt == ZT_F32;
}

/* Waits until the optimizer step running in the background (offload.c) has updated unit u's
 * parameters and sent them back, or with u < 0 until the whole step is done (its write-backs
 * included): what reads parameters or optimizer states between steps calls this first. Returns
 * the background step's failure, and keeps returning it. A no-op when no step runs in the
 * background. Engine thread only. */
zt_status zt_engine_optim_ready(zt_engine *e, int u, zt_err *err);

/* ---- plan.c: the buffer plan, its arenas and memory accounting ---- */

/* The fields every engine (and every plan) derives from the job and its place in the run. */
void zt_engine_init_fields(zt_engine *e, const zt_job *job, int world, int rank);
/* The ZeRO partition of this rank (e->zero) and the views of its tables; needs e->lay. */
zt_status zt_engine_setup_partition(zt_engine *e, zt_err *err);
/* Allocates the arenas and carves every buffer, working slot and activation from them; an
 * arena that does not fit fails with ZT_ERR_NOMEM and a report of what to change. */
zt_status zt_engine_setup_buffers(zt_engine *e, zt_err *err);
void zt_engine_free_buffers(zt_engine *e);
/* Brings the communicator's own staging and scratch (it grows them on first use) into the
 * comm category. */
void zt_engine_charge_comm(zt_engine *e);
/* Backend memory for communication, charged to the comm category. */
void *zt_engine_comm_alloc(zt_engine *e, size_t bytes);
void zt_engine_comm_free(zt_engine *e, void *p, size_t bytes);

/* ---- state.c: this rank's optimizer region (also what ckpt.c reads and writes) ---- */

/* Region = this rank's optimizer elements of a unit, starting at unit position base[u]; j
 * indexes inside the region. Errors come from NVMe offload's swap files only (ZT_ERR_IO,
 * ZT_ERR_CORRUPT, ZT_ERR_NOSPACE). */
/* fp32 truth (master weights, or parameters) of region elements [j, j+len) of unit u. */
zt_status zt_engine_region_get(zt_engine *e, int u, size_t j, size_t len, float *out,
                               zt_err *err);
/* Sets them, and nothing else: with a master copy, the 16-bit parameters keep their values. */
zt_status zt_engine_region_set(zt_engine *e, int u, size_t j, size_t len, const float *in,
                               zt_err *err);
zt_status zt_engine_moments_get(zt_engine *e, int u, size_t j, size_t len, float *m, float *v,
                                zt_err *err);
zt_status zt_engine_moments_set(zt_engine *e, int u, size_t j, size_t len, const float *m,
                                const float *v, zt_err *err);
/* Loads the full fp32 values of unit u (P_u, host) into this rank's parameters and region. */
zt_status zt_engine_load_unit(zt_engine *e, int u, const float *vals, zt_err *err);
/* Real elements of unit u's optimizer region on this rank. */
size_t zt_engine_region_len(const zt_engine *e, int u);
/* All P_u values of unit u gathered from every rank (collective): section 0 the fp32 master
 * weights, 1 exp_avg, 2 exp_avg_sq. */
zt_status zt_engine_gather_unit(zt_engine *e, int u, int section, float *out, zt_err *err);

/* ---- slots.c: compute copies of parameters, gradients before their reduction ---- */

/* The fp32 compute copy of unit u's parameters; stays valid until zt_engine_param_release. */
zt_status zt_engine_param_acquire(zt_engine *e, int u, float **out, zt_err *err);
/* Starts gathering unit u ahead of use (gathered per use); a no-op otherwise or without a free
 * slot. */
zt_status zt_engine_param_prefetch(zt_engine *e, int u, zt_err *err);
void zt_engine_param_release(zt_engine *e, int u);
/* Parameters changed: every cached compute copy is stale. */
zt_status zt_engine_params_invalidate(zt_engine *e, zt_err *err);
/* The fp32 buffer where unit u's backward accumulates its gradient this micro-step. */
zt_status zt_engine_grad_acquire(zt_engine *e, int u, float **out, zt_err *err);
/* Unit u's gradient for this micro-step is complete: fold it into the accumulation buffer,
 * or start its reduce-scatter, as the partition says. */
zt_status zt_engine_grad_finish(zt_engine *e, int u, zt_err *err);
/* Completes every reduce-scatter still in flight and frees every gradient slot. */
zt_status zt_engine_grads_drain(zt_engine *e, zt_err *err);

/* ---- offload.c: the optimizer's segments and their update, on the device and the host ---- */

/* The optimizer's segments (e->segs): tensor pieces of the region, split at the device/host
 * boundary and, on the host side, into pieces of the offload pipeline. */
zt_status zt_engine_setup_segments(zt_engine *e, zt_err *err);
/* Applies AdamW with args a to every segment: the device part on the backend, the offloaded
 * part on a host thread, pipelined with the gradients' and updated values' transfers. With NVMe
 * offload and no all-gather after the step it returns once the gradients are in host memory and
 * the device part is queued; the host part then finishes in the background (zt_engine_optim_ready
 * waits for it). It first waits for the previous step's background part. */
zt_status zt_engine_optim_apply(zt_engine *e, const zt_adamw_args *a, zt_err *err);
/* Waits for a step running in the background, ignoring its failure, and frees what it holds
 * (engine destruction). */
void zt_engine_optim_close(zt_engine *e);
/* Elements of the largest host segment: DeepSpeed's sub_group_size, at most 2^20. */
size_t zt_engine_offload_piece(const zt_engine *e);

/* ---- offload_nvme.c: the host part's states in swap files (offload_optimizer "nvme") ---- */

/* Host bytes of the swap's buffer sets for host segments of at most piece elements (0 without
 * NVMe offload), and the bytes its files take on disk. */
size_t zt_engine_nvme_buffer_bytes(const zt_engine *e, size_t piece);
uint64_t zt_engine_nvme_disk_bytes(const zt_engine *e);
/* Opens the swap files of this rank (after the segments and buffers); a no-op without NVMe
 * offload. Close removes them. */
zt_status zt_engine_nvme_open(zt_engine *e, zt_err *err);
void zt_engine_nvme_close(zt_engine *e);
/* Reads (set false) or writes n fp32 values of state section 0-2 at host-side offset off. */
zt_status zt_engine_nvme_io(zt_engine *e, size_t off, size_t n, int section, float *buf, bool set,
                            zt_err *err);
/* The step's stream over host segments k = 0, 1, ... in order: begin starts the first reads;
 * seg_get waits for segment k's master and moments; seg_put writes them back and reads ahead;
 * end waits for everything in flight (also after a failure, given as st) and returns the first
 * error. */
zt_status zt_engine_nvme_step_begin(zt_engine *e, zt_err *err);
zt_status zt_engine_nvme_seg_get(zt_engine *e, int k, float **master, float **m, float **v,
                                 zt_err *err);
zt_status zt_engine_nvme_seg_put(zt_engine *e, int k, zt_err *err);
zt_status zt_engine_nvme_step_end(zt_engine *e, zt_status st, zt_err *err);
/* What both swaps share: nvme_path/<job>[-<job id>]/rank_NNNNN<suffix>, this rank's swap
 * directory (ZT_ERR_NOT_FOUND, naming block's nvme_path, when nvme_path is not a directory;
 * ZT_ERR_CONFIG when the name is too long); an I/O context from the job's "aio" block; whether
 * test hook var ("rank:step") names this rank and the step about to update. */
zt_status zt_engine_nvme_dir(const zt_engine *e, const char *block, const char *nvme_path,
                             const char *suffix, char *out, size_t cap, zt_err *err);
zt_status zt_engine_nvme_aio_open(const zt_engine *e, zt_aio **out, zt_err *err);
bool zt_engine_nvme_hook_now(const zt_engine *e, zt_setting var);
/* Test hook ZT_INJECT_SWAP_CORRUPT: flips the byte at offset 100 of the swap file at path, on disk. */
void zt_engine_nvme_hook_flip(const char *path);

/* ---- param_nvme.c: the stage-3 parameter shard in a swap file (offload_param "nvme") ---- */

/* The first units of the shard, up to offload_param.max_in_cpu elements, stay in e->params;
 * units [zt_engine_pnvme_first, nu) live in the swap file and are read into buffer_count host
 * buffers as they are used. Without offload_param "nvme", first is nu. */
int zt_engine_pnvme_first(const zt_engine *e);
/* Elements of e->params (the units kept in host memory), host bytes of the swap's buffers
 * (0 when nothing is swapped) and the bytes its file takes on disk. */
size_t zt_engine_pnvme_resident_elems(const zt_engine *e);
size_t zt_engine_pnvme_buffer_bytes(const zt_engine *e);
uint64_t zt_engine_pnvme_disk_bytes(const zt_engine *e);
/* Opens this rank's parameter swap (after the buffers, before the parameters are loaded); a
 * no-op without offload_param "nvme". Errors name the path and say what to do: ZT_ERR_NOSPACE,
 * ZT_ERR_UNSUPPORTED (no direct I/O), ZT_ERR_NOT_FOUND, ZT_ERR_CONFIG (buffer_size
 * below a unit's shard), ZT_ERR_EXISTS, ZT_ERR_IO. Close removes the file. */
zt_status zt_engine_pnvme_open(zt_engine *e, zt_err *err);
void zt_engine_pnvme_close(zt_engine *e);

/* How a caller uses the parameters it asks for. */
typedef enum zt_param_use {
    ZT_PARAM_READ,      /* reads them */
    ZT_PARAM_WRITE,     /* reads and changes them */
    ZT_PARAM_OVERWRITE, /* sets every element of the unit's shard before reading any */
} zt_param_use;
/* Unit position pos of unit u in this rank's parameters (as zt_engine_param_at), wherever they
 * are: a swapped unit is read into a buffer first (its next units read ahead, units changed
 * before written back behind). The pointer, and the whole span of u behind it, stays valid until
 * the next call of this function or of zt_engine_pnvme_step_begin; on a CUDA rank a copy to
 * the device queued from it may run until the next sync (this function syncs before it changes
 * a buffer handed out). Errors come from the swap (ZT_ERR_IO, ZT_ERR_CORRUPT, ZT_ERR_NOSPACE)
 * and the sync. Engine thread only. */
zt_status zt_engine_param_ptr(zt_engine *e, int u, size_t pos, zt_param_use use, void **out,
                              zt_err *err);
/* Before a step's update: the test hooks ZT_INJECT_SWAP_CORRUPT/UNLINK for params.swp, and
 * ZT_ERR_IO when the swap file was deleted. A no-op without a parameter swap. */
zt_status zt_engine_pnvme_step_begin(zt_engine *e, zt_err *err);

#endif
