/* zerotrain: the job file (README.md "The job file") and the DeepSpeed config inside it,
 * parsed and validated into one plain struct that the engine, zctl, the planner and the
 * coordinator share. Every error names the file, the JSON line and column, and what to do. */
#ifndef ZT_COMMON_JOBFILE_H
#define ZT_COMMON_JOBFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "device.h"
#include "status.h"

#define ZT_PATH_MAX 1024
#define ZT_NAME_MAX 128
/* train.comm_timeout_ms: default and bounds (ms) */
#define ZT_JOB_DEFAULT_COMM_TIMEOUT_MS 300000
#define ZT_JOB_MIN_COMM_TIMEOUT_MS 100
#define ZT_JOB_MAX_COMM_TIMEOUT_MS 86400000
/* train.max_skipped_steps: default */
#define ZT_JOB_DEFAULT_MAX_SKIPPED_STEPS 100

typedef enum { ZT_OPTIM_ADAMW = 0, ZT_OPTIM_ADAM = 1 } zt_optim_type;

typedef enum {
    ZT_SCHED_NONE = 0, /* constant lr */
    ZT_SCHED_WARMUP_LR,
    ZT_SCHED_WARMUP_DECAY_LR,
    ZT_SCHED_WARMUP_COSINE_LR,
} zt_sched_type;

typedef enum { ZT_WARMUP_LOG = 0, ZT_WARMUP_LINEAR = 1 } zt_warmup_type;

typedef enum { ZT_PREC_FP32 = 0, ZT_PREC_BF16 = 1, ZT_PREC_FP16 = 2 } zt_precision;

typedef struct zt_model_cfg {
    char arch[16];          /* "gpt2" */
    int n_layer, n_head, n_embd;
    int block_size;         /* max sequence length T */
    int vocab_size;         /* V */
    int padded_vocab_size;  /* Vp: given, or V rounded up to a multiple of 128 */
    bool init_random;       /* "random" */
    char init_path[ZT_PATH_MAX]; /* llm.c model file (resolved to an absolute path) if !init_random */
    uint64_t seed;          /* default 1337 */
} zt_model_cfg;

typedef struct zt_data_cfg {
    char train[ZT_PATH_MAX]; /* glob pattern, resolved against the job file's directory */
    char val[ZT_PATH_MAX];   /* "" when absent */
} zt_data_cfg;

typedef struct zt_train_cfg {
    int64_t steps;            /* optimizer steps, required, > 0 */
    int64_t eval_every;       /* 0 = never (default) */
    int64_t eval_steps;       /* batches per evaluation, default 10 */
    int64_t checkpoint_every; /* 0 = only the final save (default) */
    char checkpoint_dir[ZT_PATH_MAX]; /* resolved; default "<jobdir>/ckpt/<name>" */
    int keep_checkpoints;     /* 0 = keep all; default 3 */
    /* A checkpoint to start from (a step_* directory, or a checkpoint directory's newest
     * complete one), resolved like checkpoint_dir; "" when absent. zworker uses it when it is
     * not told to resume and checkpoint_dir holds no checkpoint of this job; one inside
     * checkpoint_dir also takes that directory over (docs/formats.md "owner.json"). */
    char resume_from[ZT_PATH_MAX];
    /* Consecutive optimizer steps skipped for non-finite values after which the run stops
     * with ZT_ERR_NONFINITE; 0 = never. Default ZT_JOB_DEFAULT_MAX_SKIPPED_STEPS. */
    int64_t max_skipped_steps;
    /* Per-collective timeout in ms, 100 to 86400000 (24 h); default 300000 (5 minutes). A dead
     * or hung rank fails every collective that waits for it after this long. The environment's
     * ZT_COMM_TIMEOUT_MS (which `zctl run --timeout-ms` sets) overrides it for one launch, so
     * an operator can change it without editing the job. */
    int comm_timeout_ms;
    /* Fill the DeepSpeed keys that are "auto" or absent (the role Hugging Face's Trainer plays):
     * 0 / -1 / false when not given. */
    int64_t batch_size;       /* train_batch_size */
    int64_t micro_batch_size; /* train_micro_batch_size_per_gpu */
    int64_t warmup_steps;     /* scheduler warmup_num_steps; -1 = not given */
    bool precision_given;
    zt_precision precision;   /* fp16.enabled / bf16.enabled */
} zt_train_cfg;

typedef struct zt_resources_cfg {
    int ranks;          /* default 1 */
    int ranks_per_node; /* default = ranks */
    zt_device device;   /* default cpu */
} zt_resources_cfg;

typedef struct zt_optim_cfg {
    zt_optim_type type; /* "Adam" with adam_w_mode true (default) is stored as ADAMW */
    double lr;          /* default 1e-3 */
    double beta1, beta2;/* default 0.9, 0.999 */
    double eps;         /* default 1e-8 */
    double weight_decay;/* default 0 */
    bool adam_w_mode;   /* decoupled decay; false => L2 added to the gradient */
} zt_optim_cfg;

typedef struct zt_sched_cfg {
    zt_sched_type type;
    double warmup_min_lr;   /* WarmupLR/WarmupDecayLR, default 0 */
    double warmup_max_lr;   /* default 0.001 */
    int64_t warmup_num_steps; /* default 1000 */
    zt_warmup_type warmup_type; /* default log */
    int64_t total_num_steps;  /* WarmupDecayLR, WarmupCosineLR: required */
    double warmup_min_ratio;  /* WarmupCosineLR, default 0 */
    double cos_min_ratio;     /* WarmupCosineLR, default 1e-4 */
} zt_sched_cfg;

typedef struct zt_fp16_cfg {
    bool enabled;
    double loss_scale;        /* 0 = dynamic (default) */
    int initial_scale_power;  /* default 16 (zerotrain applies the documented defaults) */
    int loss_scale_window;    /* default 1000 */
    int hysteresis;           /* default 2 */
    bool consecutive_hysteresis; /* default false */
    double min_loss_scale;    /* default 1 */
} zt_fp16_cfg;

typedef struct zt_offload_cfg {
    bool enabled;     /* device "cpu" or "nvme" */
    bool nvme;        /* device "nvme": the host part's state lives in files under nvme_path */
    bool pin_memory;  /* default false */
    double ratio;     /* fraction updated on the host, default 1.0, in [0,1] */
    char nvme_path[ZT_PATH_MAX]; /* resolved; "" unless nvme */
    int buffer_count;            /* NVMe swap buffer sets: default 4 (optimizer), 5 (param) */
    int64_t buffer_size;         /* offload_param: elements per swap buffer, default 1e8 */
    int64_t max_in_cpu;          /* offload_param: elements kept in host memory, default 1e9 */
} zt_offload_cfg;

/* DeepSpeed's "aio" block: how NVMe swap files are read and written. */
typedef struct zt_aio_cfg {
    int64_t block_size;  /* bytes per request, default 1 MiB, a multiple of 4096 */
    int queue_depth;     /* requests in flight, default 8 */
    int thread_count;    /* I/O threads where io_uring is unavailable, default 1 */
    bool single_submit;  /* default false */
    bool overlap_events; /* default true */
} zt_aio_cfg;

typedef struct zt_zero_cfg {
    int stage;                        /* 0..3, default 0 */
    int64_t reduce_bucket_size;       /* elements, default 5e8 */
    int64_t allgather_bucket_size;    /* elements, default 5e8 */
    bool overlap_comm;                /* default false (true for stage 3) */
    bool contiguous_gradients;        /* default true */
    zt_offload_cfg offload_optimizer;
    zt_offload_cfg offload_param;     /* accepted for stage 3 only */
    int64_t stage3_prefetch_bucket_size;        /* default 5e7 */
    int64_t stage3_param_persistence_threshold; /* default 1e5 (accepted; units are gathered whole) */
    int64_t stage3_max_reuse_distance;          /* default 1e9; 0 = free every unit after use */
    int64_t stage3_max_live_parameters; /* default 1e9; bounds the gathered blocks held at once */
    int64_t sub_group_size;   /* default 1e9; the offloaded optimizer's segment (at most 2^20) */
} zt_zero_cfg;

typedef struct zt_actckpt_cfg {
    bool enabled;               /* the "activation_checkpointing" block is present */
    bool partition_activations; /* default false */
    bool cpu_checkpointing;     /* default false */
} zt_actckpt_cfg;

typedef struct zt_csv_monitor_cfg {
    bool enabled;
    char output_path[ZT_PATH_MAX]; /* resolved; DeepSpeed's "" is the job file's directory */
    char job_name[ZT_NAME_MAX];    /* default "DeepSpeedJobName" */
} zt_csv_monitor_cfg;

/* The start-up summary: one line each for ignored keys, keys with no effect here (and why),
 * logging blocks, and every "auto" value filled. */
#define ZT_DS_NOTES_MAX 4096

typedef struct zt_ds_cfg {
    /* The batch triad as given (0 = absent) and as resolved for world_size. */
    int64_t given_train_batch_size, given_micro_batch, given_grad_accum;
    int64_t train_batch_size, micro_batch, grad_accum;
    int world_size; /* the world size the triad was resolved for */
    /* The micro batch is "auto": the planner picks it for the rank's device
     * (zt_engine_auto_micro_batch), which stores its pick in micro_picked (0 = not yet picked;
     * the triad is then resolved with 1, to validate the rest). */
    bool micro_auto;
    int64_t micro_picked;
    zt_optim_cfg optimizer;
    zt_sched_cfg scheduler;
    double gradient_clipping; /* 0 = off (DeepSpeed's code default) */
    zt_fp16_cfg fp16;
    bool bf16;
    zt_precision precision;  /* derived from fp16/bf16 */
    zt_zero_cfg zero;
    zt_aio_cfg aio;
    zt_actckpt_cfg activation_checkpointing;
    bool grad_accum_fp32;    /* data_types.grad_accum_dtype; default fp32, except fp16 (16-bit) */
    int64_t steps_per_print; /* default 10 */
    bool wall_clock_breakdown; /* rank 0 logs each step's time split */
    zt_csv_monitor_cfg csv_monitor;
    char notes[ZT_DS_NOTES_MAX]; /* the summary, lines separated by '\n'; "" when none */
} zt_ds_cfg;

typedef struct zt_job {
    char name[ZT_NAME_MAX];
    char job_path[ZT_PATH_MAX]; /* absolute path of the job file ("" when parsed from text) */
    char base_dir[ZT_PATH_MAX]; /* directory relative paths resolve against */
    zt_model_cfg model;
    zt_data_cfg data;
    zt_train_cfg train;
    zt_resources_cfg resources;
    int max_restarts; /* default 0 */
    zt_ds_cfg ds;
} zt_job;

/* Parses and validates a job file. The batch triad is resolved for job->resources.ranks.
 * Every problem is collected (up to a cap) before it returns: on failure it returns
 * ZT_ERR_CONFIG (or ZT_ERR_IO / ZT_ERR_NOT_FOUND for an unreadable file) and err->msg holds
 * one line per problem, in file order, each like
 *   "job.json:7:15: deepspeed.zero_optimization.stag: unknown key; did you mean \"stage\"?"
 * Thread-safe. */
zt_status zt_job_load(zt_job *job, const char *path, zt_err *err);

/* Same from text; base_dir resolves relative paths (NULL = current directory) and
 * origin names the text in messages (e.g. "job 17"). */
zt_status zt_job_parse(zt_job *job, const char *text, const char *origin, const char *base_dir,
                       zt_err *err);

/* zt_job_parse for a job that arrived over the network (zcoord's SubmitJob): it opens no
 * file. A "deepspeed" that names a file is a problem saying to submit with zctl, which sends
 * the DeepSpeed config inline; the rest is read and reported as zt_job_parse does. */
zt_status zt_job_parse_inline(zt_job *job, const char *text, const char *origin,
                              const char *base_dir, zt_err *err);

/* Resolves the batch triad for world_size (DeepSpeed's rules, deepspeed-semantics §1.1) from
 * the given values. On inconsistency the message names all three values and the world size. */
zt_status zt_job_resolve_batch(zt_job *job, int world_size, zt_err *err);

/* Writes the resolved job (every default filled in) as JSON; caller frees with zt_free.
 * zt_job_parse of the result gives back an equal struct. NULL on allocation failure. */
char *zt_job_to_json(const zt_job *job);

#endif
