/* zerotrain: the DeepSpeed config inside a job file. One table of every
 * key DeepSpeed knows, block by block (name, type, DeepSpeed's default, what zerotrain does
 * with it: used, no effect here and why, or refused and what to use instead), drives the
 * checks, the start-up summary and docs/deepspeed.md. DeepSpeed's own rules decide what is
 * accepted: top-level keys it does not know are ignored (and named in the summary), the blocks
 * it validates strictly refuse unknown keys with the closest one suggested. */
#define _POSIX_C_SOURCE 200809L
#include "dsconfig.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "jobfile_int.h"

#define KEEP(expr)                                                                                 \
    do {                                                                                           \
        zt_status s_ = (expr);                                                                     \
        if (s_ != ZT_OK && st == ZT_OK) st = s_;                                                   \
    } while (0)

/* Table entries. */
#define USE(name, type, dflt, doc)                                                                 \
    {                                                                                              \
        name, KEY_USED, type, 0, 0, dflt, doc                                                      \
    }
#define NOEFF(name, type, dflt, why)                                                               \
    {                                                                                              \
        name, KEY_NO_EFFECT, type, 0, 0, dflt, why                                                 \
    }
#define REF(name, type, allow, num, dflt, instead)                                                 \
    {                                                                                              \
        name, KEY_REFUSED, type, allow, num, dflt, instead                                         \
    }
#define ALIAS(name, of)                                                                            \
    {                                                                                              \
        name, KEY_ALIAS, VT_ANY, 0, 0, NULL, of                                                    \
    }

#define WHY_METRICS "the metrics go to the coordinator, the dashboard and /metrics"
#define WHY_NVME "used by NVMe offload only, which zerotrain does not offer; use device \"cpu\""
#define WHY_DP "zerotrain trains with ZeRO data parallelism only"

/* ---- the key table ---------------------------------------------------------------------- */

static const keyspec top_keys[] = {
    USE("train_batch_size", VT_INT, NULL,
        "global batch; \"auto\": the job's train.batch_size, else micro x accumulation x ranks"),
    USE("train_micro_batch_size_per_gpu", VT_INT, NULL,
        "\"auto\": the job's train.micro_batch_size, else the largest that fits the rank's memory (the planner)"),
    USE("gradient_accumulation_steps", VT_INT, "1", "\"auto\": derived, else 1"),
    USE("optimizer", VT_OBJ, NULL, "Adam and AdamW"),
    USE("scheduler", VT_OBJ, NULL, "WarmupLR, WarmupDecayLR, WarmupCosineLR"),
    USE("gradient_clipping", VT_NUM, "0", "global L2 norm clipping; 0 is off"),
    USE("fp16", VT_OBJ, NULL, "mixed precision with dynamic or fixed loss scaling"),
    USE("bf16", VT_OBJ, NULL, "bf16 mixed precision"),
    ALIAS("bfloat16", "bf16"),
    USE("zero_optimization", VT_OBJ, NULL, "ZeRO stages 0-3 and offload"),
    USE("activation_checkpointing", VT_OBJ, NULL,
        "present: each block's activations are recomputed in backward"),
    USE("data_types", VT_OBJ, NULL, "grad_accum_dtype"),
    USE("steps_per_print", VT_INT, "10",
        "ranks above 0 log their memory every this many steps (rank 0 prints every step)"),
    USE("wall_clock_breakdown", VT_BOOL, "false",
        "rank 0 logs each step's time split (forward, backward, optimizer, communication)"),
    USE("csv_monitor", VT_OBJ, NULL,
        "enabled: rank 0 writes DeepSpeed's CSV files under output_path/job_name"),
    NOEFF("tensorboard", VT_OBJ, NULL, WHY_METRICS),
    NOEFF("wandb", VT_OBJ, NULL, WHY_METRICS),
    NOEFF("comet", VT_OBJ, NULL, WHY_METRICS),
    NOEFF("flops_profiler", VT_OBJ, NULL, "every step line carries TFLOP/s and MFU; " WHY_METRICS),
    NOEFF("comms_logger", VT_OBJ, NULL,
          "every step line carries the bytes and time of the collectives"),
    NOEFF("memory_breakdown", VT_BOOL, "false", "every step line carries memory by category"),
    NOEFF("dump_state", VT_BOOL, "false", "zctl plan shows the resolved configuration"),
    NOEFF("prescale_gradients", VT_BOOL, "false",
          "the averaged gradient is the same; zerotrain divides once, after the reduction"),
    NOEFF("gradient_predivide_factor", VT_NUM, "1",
          "the averaged gradient is the same; zerotrain divides once, after the reduction"),
    NOEFF("sparse_gradients", VT_BOOL, "false", "the embedding's gradient is kept dense"),
    NOEFF("disable_allgather", VT_BOOL, "false", "stages 1-2 always all-gather the parameters"),
    NOEFF("dataloader_drop_last", VT_BOOL, "false",
          "zerotrain's sample order is fixed and never drops samples"),
    NOEFF("zero_allow_untested_optimizer", VT_BOOL, "false",
          "zerotrain's Adam and AdamW are tested with every stage"),
    NOEFF("zero_force_ds_cpu_optimizer", VT_BOOL, "true",
          "the offloaded optimizer is always zerotrain's own host AdamW"),
    NOEFF("communication_data_type", VT_STR_OR_NULL, "null",
          "zerotrain's collectives use the training precision's types"),
    NOEFF("seq_parallel_communication_data_type", VT_STR_OR_NULL, "null", WHY_DP),
    NOEFF("checkpoint", VT_OBJ, NULL,
          "checkpoints are set in the job's train section (checkpoint_every, checkpoint_dir)"),
    NOEFF("load_universal_checkpoint", VT_BOOL, "false",
          "zerotrain's checkpoints resume on any rank count and stage as they are"),
    NOEFF("aio", VT_OBJ, NULL, WHY_NVME),
    NOEFF("autotuning", VT_OBJ, NULL,
          "give train_micro_batch_size_per_gpu \"auto\" and the planner picks it before launch"),
    NOEFF("nebula", VT_OBJ, NULL, "checkpoints are written by zerotrain's own format"),
    NOEFF("compile", VT_OBJ, NULL, "zerotrain's kernels are compiled ahead of time"),
    NOEFF("graph_harvesting", VT_BOOL, "false", "zerotrain's kernels are compiled ahead of time"),
    NOEFF("timers", VT_OBJ, NULL, "every step line carries the step's time split"),
    NOEFF("use_data_before_expert_parallelism", VT_BOOL, "false", WHY_DP),
    REF("amp", VT_OBJ, ALLOW_DISABLED, 0, NULL, "use fp16 or bf16"),
    REF("torch_autocast", VT_OBJ, ALLOW_DISABLED, 0, NULL, "use fp16 or bf16"),
    REF("pipeline", VT_OBJ, 0, 0, NULL, WHY_DP ", no pipeline parallelism"),
    REF("tensor_parallel", VT_OBJ, 0, 0, NULL, WHY_DP ", no tensor parallelism"),
    REF("sequence_parallel_size", VT_INT, ALLOW_NUM, 1, "1", WHY_DP ", no sequence parallelism"),
    REF("sparse_attention", VT_OBJ, 0, 0, NULL,
        "zerotrain's attention is dense causal attention (flash-style kernels)"),
    REF("moe", VT_OBJ, ALLOW_DISABLED, 0, NULL, "zerotrain trains dense GPT-2 models"),
    REF("hybrid_engine", VT_OBJ, ALLOW_DISABLED, 0, NULL,
        "the hybrid engine serves RLHF generation, which zerotrain does not do"),
    REF("elasticity", VT_OBJ, ALLOW_DISABLED, 0, NULL,
        "resume a checkpoint on another rank count instead (zctl run --resume, or restarts)"),
    REF("compression_training", VT_OBJ, 0, 0, NULL, "zerotrain does not compress models"),
    REF("data_efficiency", VT_OBJ, ALLOW_DISABLED, 0, NULL,
        "zerotrain's sample order is fixed (a function of the step)"),
    REF("curriculum_learning", VT_OBJ, ALLOW_DISABLED, 0, NULL,
        "zerotrain's sample order is fixed (a function of the step)"),
    REF("eigenvalue", VT_OBJ, ALLOW_DISABLED, 0, NULL, "zerotrain does not offer it"),
    REF("progressive_layer_drop", VT_OBJ, ALLOW_DISABLED, 0, NULL, "zerotrain does not offer it"),
    REF("quantize_training", VT_OBJ, ALLOW_DISABLED, 0, NULL,
        "zerotrain trains in fp32, bf16 or fp16"),
    REF("weight_quantization", VT_OBJ, 0, 0, NULL, "zerotrain trains in fp32, bf16 or fp16"),
    REF("fp8", VT_OBJ, ALLOW_DISABLED, 0, NULL, "zerotrain trains in fp32, bf16 or fp16"),
};

static const keyspec fp16_keys[] = {
    USE("enabled", VT_BOOL, "false", "\"auto\": the job's train.precision"),
    USE("loss_scale", VT_NUM, "0", "0 is dynamic loss scaling"),
    USE("initial_scale_power", VT_INT, "16", NULL),
    USE("loss_scale_window", VT_INT, "1000", NULL),
    USE("hysteresis", VT_INT, "2", NULL),
    USE("consecutive_hysteresis", VT_BOOL, "false", NULL),
    USE("min_loss_scale", VT_NUM, "1", NULL),
    NOEFF("auto_cast", VT_BOOL, "false", "the model's inputs are token ids; nothing to cast"),
    REF("fp16_master_weights_and_grads", VT_BOOL, ALLOW_FALSE, 0, "false",
        "zerotrain keeps fp32 master weights"),
    ALIAS("master_weights_and_grads", "fp16_master_weights_and_grads"),
};

static const keyspec bf16_keys[] = {
    USE("enabled", VT_BOOL, "false", "\"auto\": the job's train.precision"),
    NOEFF("immediate_grad_update", VT_BOOL, "false",
          "gradients accumulate as data_types.grad_accum_dtype says"),
    NOEFF("check_grad_overflow", VT_BOOL, "true",
          "zerotrain always checks gradients for non-finite values and skips such steps"),
    REF("bf16_master_weights_and_grads", VT_BOOL, ALLOW_FALSE, 0, "false",
        "zerotrain keeps fp32 master weights"),
    REF("bf16_optimizer_states", VT_BOOL, ALLOW_FALSE, 0, "false", "zerotrain keeps fp32 moments"),
};

static const keyspec optimizer_keys[] = {
    USE("type", VT_STR, NULL, "\"Adam\" or \"AdamW\""),
    USE("params", VT_OBJ, NULL, NULL),
    NOEFF("legacy_fusion", VT_BOOL, "false", "zerotrain's Adam is its own fused kernel"),
};

static const keyspec adam_keys[] = {
    USE("lr", VT_NUM, "0.001", "\"auto\": DeepSpeed's default"),
    USE("betas", VT_LIST, "[0.9, 0.999]", NULL),
    USE("eps", VT_NUM, "1e-8", NULL),
    USE("weight_decay", VT_NUM, "0", "applies to 2-D weights only"),
    USE("adam_w_mode", VT_BOOL, "true", "false: weight decay added to the gradient (L2)"),
    USE("max_grad_norm", VT_NUM, NULL,
        "read as gradient_clipping when that is not given (DeepSpeed refuses it)"),
    NOEFF("torch_adam", VT_BOOL, "false", "zerotrain's Adam computes torch.optim.AdamW's update"),
    NOEFF("set_grad_none", VT_BOOL, "true", "gradient buffers are reused, never freed"),
    NOEFF("foreach", VT_ANY, "null", "zerotrain's Adam is its own fused kernel"),
    NOEFF("fused", VT_ANY, "null", "zerotrain's Adam is its own fused kernel"),
    NOEFF("capturable", VT_BOOL, "false", "zerotrain's Adam is its own fused kernel"),
    NOEFF("differentiable", VT_BOOL, "false", "the optimizer step is not differentiated"),
    NOEFF("fp32_optimizer_states", VT_BOOL, "true", "moments are always fp32"),
    REF("amsgrad", VT_BOOL, ALLOW_FALSE, 0, "false", "zerotrain's Adam has no AMSGrad variant"),
    REF("bias_correction", VT_BOOL, ALLOW_TRUE, 0, "true",
        "zerotrain's Adam always corrects the moments' bias"),
    REF("maximize", VT_BOOL, ALLOW_FALSE, 0, "false", "training minimises the loss"),
};

static const keyspec scheduler_keys[] = {
    USE("type", VT_STR, NULL, "WarmupLR, WarmupDecayLR or WarmupCosineLR"),
    USE("params", VT_OBJ, NULL, NULL),
};

/* The parameters of each schedule (scheduler.params), in one table so that a parameter given
 * to the wrong schedule can say where it belongs. */
typedef struct sched_info {
    const char *name;
    zt_sched_type type;
    const char *params[8];
} sched_info;

static const sched_info sched_table[] = {
    {"WarmupLR",
     ZT_SCHED_WARMUP_LR,
     {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"}},
    {"WarmupDecayLR",
     ZT_SCHED_WARMUP_DECAY_LR,
     {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps",
      "last_batch_iteration"}},
    {"WarmupCosineLR",
     ZT_SCHED_WARMUP_COSINE_LR,
     {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type",
      "last_batch_iteration"}},
};

static const keyspec sched_param_keys[] = {
    USE("warmup_min_lr", VT_NUM, "0", "\"auto\": 0"),
    USE("warmup_max_lr", VT_NUM, "0.001", "\"auto\": the optimizer's lr"),
    USE("warmup_num_steps", VT_INT, "1000", "\"auto\": the job's train.warmup_steps"),
    USE("warmup_type", VT_STR, "\"log\"", "\"log\" or \"linear\""),
    USE("total_num_steps", VT_INT, NULL, "\"auto\": the job's train.steps"),
    USE("warmup_min_ratio", VT_NUM, "0", NULL),
    USE("cos_min_ratio", VT_NUM, "0.0001", NULL),
    NOEFF("last_batch_iteration", VT_INT, "-1", "the schedule is restored from checkpoints"),
};

static const char *const unsupported_schedulers[] = {
    "OneCycle",
    "LRRangeTest",
    /* torch.optim.lr_scheduler, which DeepSpeed falls back to */
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "SequentialLR",
    "CosineAnnealingLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
    "CyclicLR",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "PolynomialLR",
};

static const char *const unsupported_optimizers[] = {
    /* DeepSpeed's own (lowercased) */
    "lamb",
    "onebitadam",
    "zerooneadam",
    "onebitlamb",
    "adagrad",
    "lion",
    "muadam",
    "muadamw",
    "musgd",
    "muon",
    /* torch.optim, which DeepSpeed falls back to */
    "sgd",
    "rmsprop",
    "adadelta",
    "adamax",
    "asgd",
    "lbfgs",
    "nadam",
    "radam",
    "rprop",
    "sparseadam",
    "adafactor",
};

static const keyspec zero_keys[] = {
    USE("stage", VT_INT, "0", "0-3"),
    USE("offload_optimizer", VT_OBJ, NULL, "device \"cpu\": the optimizer step on the host"),
    USE("offload_param", VT_OBJ, NULL,
        "stage 3, device \"cpu\": CPU ranks keep parameters in host memory already"),
    USE("sub_group_size", VT_INT, "1e9",
        "the offloaded optimizer's segment (elements), at most 2^20 so that the pipeline overlaps"),
    USE("stage3_max_live_parameters", VT_INT, "1e9",
        "stage 3: bounds the elements of gathered blocks held at once (1 to 3 blocks)"),
    ALIAS("max_live_parameters", "stage3_max_live_parameters"),
    USE("stage3_max_reuse_distance", VT_INT, "1e9",
        "stage 3: 0 frees a gathered block after each use"),
    ALIAS("max_reuse_distance", "stage3_max_reuse_distance"),
    USE("cpu_offload", VT_BOOL, "false", "deprecated form of offload_optimizer.device \"cpu\""),
    USE("cpu_offload_param", VT_BOOL, "false", "deprecated form of offload_param.device \"cpu\""),
    ALIAS("cpu_offload_params", "cpu_offload_param"),
    USE("cpu_offload_use_pin_memory", VT_BOOL, "false", "deprecated form of offload_*.pin_memory"),
    NOEFF(
        "reduce_bucket_size", VT_INT, "5e8",
        "gradients are reduce-scattered block by block as backward finishes each; the block is the bucket"),
    NOEFF("allgather_bucket_size", VT_INT, "5e8",
          "parameters are all-gathered block by block; the block is the bucket"),
    NOEFF("overlap_comm", VT_BOOL, NULL, "reductions and stage-3 gathers always overlap compute"),
    NOEFF("contiguous_gradients", VT_BOOL, "true", "a rank's gradient shard is one buffer"),
    NOEFF("reduce_scatter", VT_BOOL, "true",
          "zerotrain always reduce-scatters gradients; the result is the same"),
    NOEFF("use_multi_rank_bucket_allreduce", VT_BOOL, "true",
          "zerotrain always reduce-scatters gradients"),
    NOEFF("allgather_partitions", VT_BOOL, "true", "parameters are always all-gathered"),
    NOEFF("load_from_fp32_weights", VT_BOOL, "true",
          "checkpoints always restore the fp32 master weights"),
    NOEFF("elastic_checkpoint", VT_BOOL, "false",
          "checkpoints resume on any rank count and stage as they are"),
    NOEFF("ignore_unused_parameters", VT_BOOL, "true", "every parameter of GPT-2 gets a gradient"),
    NOEFF("round_robin_gradients", VT_BOOL, "false",
          "gradient shards are already contiguous slices of each block"),
    NOEFF("stage3_prefetch_bucket_size", VT_INT, "5e7",
          "stage 3 gathers the next block while the current one computes"),
    ALIAS("prefetch_bucket_size", "stage3_prefetch_bucket_size"),
    NOEFF("stage3_param_persistence_threshold", VT_INT, "1e5",
          "stage 3 gathers whole blocks, small parameters with their block"),
    ALIAS("param_persistence_threshold", "stage3_param_persistence_threshold"),
    NOEFF("stage3_model_persistence_threshold", VT_INT, "sys.maxsize",
          "stage 3 gathers whole blocks, small parameters with their block"),
    ALIAS("model_persistence_threshold", "stage3_model_persistence_threshold"),
    NOEFF("stage3_gather_16bit_weights_on_model_save", VT_BOOL, "false",
          "zctl ckpt export always writes the whole model"),
    ALIAS("gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"),
    ALIAS("stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"),
    NOEFF("stage3_module_granularity_threshold", VT_INT, "0",
          "stage 3 gathers whole transformer blocks"),
    ALIAS("module_granularity_threshold", "stage3_module_granularity_threshold"),
    NOEFF("stage3_use_all_reduce_for_fetch_params", VT_BOOL, "false",
          "stage 3 gathers parameters with all-gather"),
    ALIAS("use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params"),
    NOEFF("memory_efficient_linear", VT_BOOL, "true", "zerotrain's linear layers are its own"),
    NOEFF("override_module_apply", VT_BOOL, "true", "zerotrain builds its own model"),
    NOEFF("pipeline_loading_checkpoint", VT_BOOL, "false", WHY_DP),
    NOEFF("log_trace_cache_warnings", VT_BOOL, "false", "stage 3's order of blocks is fixed"),
    NOEFF("enable_sanity_checks", VT_BOOL, "false", "zerotrain checks its collectives always"),
    NOEFF("zeropp_loco_param", VT_ANY, "null", "LoCo applies to quantized gradients only"),
    REF("legacy_stage1", VT_BOOL, ALLOW_FALSE, 0, "false", "DeepSpeed removed it too"),
    REF("zero_hpz_partition_size", VT_INT, ALLOW_NUM, 1, "1",
        "ZeRO++ hierarchical partitioning is not offered; shard over all ranks"),
    REF("zero_quantized_weights", VT_BOOL, ALLOW_FALSE, 0, "false",
        "ZeRO++ quantized communication is not offered; collectives carry the training precision"),
    REF("zero_quantized_nontrainable_weights", VT_BOOL, ALLOW_FALSE, 0, "false",
        "ZeRO++ quantized communication is not offered"),
    REF("zero_quantized_gradients", VT_BOOL, ALLOW_FALSE, 0, "false",
        "ZeRO++ quantized communication is not offered"),
    REF("mics_shard_size", VT_INT, ALLOW_NUM, -1, "-1",
        "MiCS is not offered; ZeRO shards over all ranks"),
    REF("mics_hierarchical_params_gather", VT_BOOL, ALLOW_FALSE, 0, "false", "MiCS is not offered"),
};

static const keyspec offload_optimizer_keys[] = {
    USE("device", VT_STR, "\"none\"", "\"none\" or \"cpu\" (\"nvme\" is refused)"),
    USE("ratio", VT_NUM, "1", "the fraction of the shard updated on the host (Twin-Flow)"),
    NOEFF("pin_memory", VT_BOOL, "false", "the host buffers of GPU ranks are always pinned"),
    NOEFF("nvme_path", VT_STR_OR_NULL, "null", WHY_NVME),
    NOEFF("buffer_count", VT_INT, "4", WHY_NVME),
    NOEFF("pipeline_read", VT_BOOL, "false", WHY_NVME),
    NOEFF("pipeline_write", VT_BOOL, "false", WHY_NVME),
    NOEFF("pipeline", VT_BOOL, "false", WHY_NVME),
    NOEFF("fast_init", VT_BOOL, "false", WHY_NVME),
};

static const keyspec offload_param_keys[] = {
    USE("device", VT_STR, "\"none\"", "\"none\" or \"cpu\" (\"nvme\" is refused)"),
    NOEFF("pin_memory", VT_BOOL, "false", "the host buffers of GPU ranks are always pinned"),
    NOEFF("nvme_path", VT_STR_OR_NULL, "null", WHY_NVME),
    NOEFF("buffer_count", VT_INT, "5", WHY_NVME),
    NOEFF("buffer_size", VT_INT, "1e8", WHY_NVME),
    NOEFF("max_in_cpu", VT_INT, "1e9", WHY_NVME),
};

static const keyspec aio_keys[] = {
    NOEFF("block_size", VT_INT, "1048576", WHY_NVME),
    NOEFF("queue_depth", VT_INT, "8", WHY_NVME),
    NOEFF("thread_count", VT_INT, "1", WHY_NVME),
    NOEFF("intra_op_parallelism", VT_INT, "1", WHY_NVME),
    NOEFF("single_submit", VT_BOOL, "false", WHY_NVME),
    NOEFF("overlap_events", VT_BOOL, "true", WHY_NVME),
    NOEFF("use_gds", VT_BOOL, "false", WHY_NVME),
};

static const keyspec actckpt_keys[] = {
    USE("partition_activations", VT_BOOL, "false", "accepted; one rank keeps whole activations"),
    USE("cpu_checkpointing", VT_BOOL, "false", "accepted; checkpoints stay in device memory"),
    NOEFF("contiguous_memory_optimization", VT_BOOL, "false",
          "checkpointed activations sit in one arena"),
    NOEFF("number_checkpoints", VT_ANY, "null", "every block is a checkpoint"),
    NOEFF("synchronize_checkpoint_boundary", VT_BOOL, "false", "nothing to synchronise"),
    NOEFF("profile", VT_BOOL, "false", "every step line carries the step's time split"),
};

static const keyspec data_types_keys[] = {
    USE("grad_accum_dtype", VT_STR, "null", "fp32 (default unless fp16), or the 16-bit type"),
};

static const keyspec csv_keys[] = {
    USE("enabled", VT_BOOL, "false", NULL),
    USE("output_path", VT_STR, "\"\"", "relative paths resolve against the job file's directory"),
    USE("job_name", VT_STR, "\"DeepSpeedJobName\"", NULL),
};

static const keyspec tensorboard_keys[] = {
    NOEFF("enabled", VT_BOOL, "false", WHY_METRICS),
    NOEFF("output_path", VT_STR, "\"\"", WHY_METRICS),
    NOEFF("job_name", VT_STR, "\"DeepSpeedJobName\"", WHY_METRICS),
};

static const keyspec wandb_keys[] = {
    NOEFF("enabled", VT_BOOL, "false", WHY_METRICS),
    NOEFF("group", VT_ANY, "null", WHY_METRICS),
    NOEFF("team", VT_ANY, "null", WHY_METRICS),
    NOEFF("project", VT_ANY, "\"deepspeed\"", WHY_METRICS),
};

static const keyspec comet_keys[] = {
    NOEFF("enabled", VT_BOOL, "false", WHY_METRICS),
    NOEFF("samples_log_interval", VT_INT, "100", WHY_METRICS),
    NOEFF("project", VT_ANY, "null", WHY_METRICS),
    NOEFF("workspace", VT_ANY, "null", WHY_METRICS),
    NOEFF("api_key", VT_ANY, "null", WHY_METRICS),
    NOEFF("experiment_name", VT_ANY, "null", WHY_METRICS),
    NOEFF("experiment_key", VT_ANY, "null", WHY_METRICS),
    NOEFF("online", VT_ANY, "null", WHY_METRICS),
    NOEFF("mode", VT_ANY, "null", WHY_METRICS),
};

/* Every block, for the checks and for docs/deepspeed.md. */
typedef struct dsblock {
    const char *path; /* "" for the top level */
    const keyspec *keys;
    size_t n;
    int mode; /* JF_STRICT: DeepSpeed refuses unknown keys here; JF_LENIENT: it ignores them */
} dsblock;

static const dsblock blocks[] = {
    {"", top_keys, NKEYS(top_keys), JF_LENIENT},
    {"fp16", fp16_keys, NKEYS(fp16_keys), JF_STRICT},
    {"bf16", bf16_keys, NKEYS(bf16_keys), JF_STRICT},
    {"optimizer", optimizer_keys, NKEYS(optimizer_keys), JF_STRICT},
    {"optimizer.params", adam_keys, NKEYS(adam_keys), JF_STRICT},
    {"scheduler", scheduler_keys, NKEYS(scheduler_keys), JF_STRICT},
    {"scheduler.params", sched_param_keys, NKEYS(sched_param_keys), JF_STRICT},
    {"zero_optimization", zero_keys, NKEYS(zero_keys), JF_STRICT},
    {"zero_optimization.offload_optimizer", offload_optimizer_keys, NKEYS(offload_optimizer_keys),
     JF_STRICT},
    {"zero_optimization.offload_param", offload_param_keys, NKEYS(offload_param_keys), JF_STRICT},
    {"aio", aio_keys, NKEYS(aio_keys), JF_STRICT},
    {"activation_checkpointing", actckpt_keys, NKEYS(actckpt_keys), JF_LENIENT},
    {"data_types", data_types_keys, NKEYS(data_types_keys), JF_LENIENT},
    {"csv_monitor", csv_keys, NKEYS(csv_keys), JF_STRICT},
    {"tensorboard", tensorboard_keys, NKEYS(tensorboard_keys), JF_STRICT},
    {"wandb", wandb_keys, NKEYS(wandb_keys), JF_STRICT},
    {"comet", comet_keys, NKEYS(comet_keys), JF_STRICT},
};

static const dsblock *block_of(const char *path)
{
    for (size_t i = 0; i < NKEYS(blocks); i++)
        if (strcmp(blocks[i].path, path) == 0) return &blocks[i];
    return NULL;
}

static zt_status check_block(pctx *c, json_t *obj, const char *path)
{
    const dsblock *b = block_of(path);
    return jf_check_keys(c, obj, b->keys, b->n, b->mode, NULL, NULL);
}

const char *zt_ds_top_key_hint(const char *key)
{
    for (size_t i = 0; i < NKEYS(top_keys); i++)
        if (strcmp(top_keys[i].name, key) == 0)
            return "it is a DeepSpeed key; move it inside \"deepspeed\"";
    return NULL;
}

/* ---- sections ---------------------------------------------------------------------------- */

static zt_status parse_fp16(pctx *c, json_t *ds, zt_job *job)
{
    zt_fp16_cfg *f = &job->ds.fp16;
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_fp16_cfg defaults = {.enabled = false,
                                         .loss_scale = 0,
                                         .initial_scale_power = 16,
                                         .loss_scale_window = 1000,
                                         .hysteresis = 2,
                                         .consecutive_hysteresis = false,
                                         .min_loss_scale = 1};
    memcpy(f, &defaults, sizeof(*f));
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "fp16", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "fp16");
    KEEP(check_block(c, o, "fp16"));
    KEEP(jf_get_bool(c, o, "enabled", &f->enabled));
    if (jf_auto_given(c, o, "enabled")) {
        f->enabled = job->train.precision_given && job->train.precision == ZT_PREC_FP16;
        jf_auto_note(c, "enabled", JF_V_BOOL, &f->enabled,
                     job->train.precision_given ? "the job's train.precision" : "fp32 by default");
    }
    KEEP(jf_get_num(c, o, "loss_scale", 0, 0, NUM_GE, &f->loss_scale));
    KEEP(jf_get_int(c, o, "initial_scale_power", 0, 64, &f->initial_scale_power));
    KEEP(jf_get_int(c, o, "loss_scale_window", 1, INT_MAX, &f->loss_scale_window));
    KEEP(jf_get_int(c, o, "hysteresis", 1, INT_MAX, &f->hysteresis));
    KEEP(jf_get_bool(c, o, "consecutive_hysteresis", &f->consecutive_hysteresis));
    KEEP(jf_get_num(c, o, "min_loss_scale", 0, 0, NUM_GT, &f->min_loss_scale));
    jf_pop(c);
    return st;
}

/* bf16 (or its alias bfloat16); *key_out names the one given, for later messages. */
static zt_status parse_bf16(pctx *c, json_t *ds, zt_job *job, const char **key_out)
{
    bool *enabled = &job->ds.bf16;
    *enabled = false;
    *key_out = jf_pick_alias(c, ds, top_keys, NKEYS(top_keys), "bf16");
    json_t *o;
    zt_status st = jf_get_obj(c, ds, *key_out, &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, *key_out);
    KEEP(check_block(c, o, "bf16"));
    KEEP(jf_get_bool(c, o, "enabled", enabled));
    if (jf_auto_given(c, o, "enabled")) {
        *enabled = job->train.precision_given && job->train.precision == ZT_PREC_BF16;
        jf_auto_note(c, "enabled", JF_V_BOOL, enabled,
                     job->train.precision_given ? "the job's train.precision" : "fp32 by default");
    }
    jf_pop(c);
    return st;
}

static zt_status parse_betas(pctx *c, json_t *params, zt_optim_cfg *opt)
{
    json_t *v = jf_member(params, "betas");
    if (!v) return ZT_OK;
    if (!json_is_array(v) || json_array_size(v) != 2) {
        char got[64];
        if (json_is_array(v))
            snprintf(got, sizeof(got), "a list of %zu", json_array_size(v));
        else
            jf_describe(v, got, sizeof(got));
        return jf_fail_key(c, "betas",
                           "must be a list of two numbers [beta1, beta2], each in [0, 1) (got %s)",
                           got);
    }
    double b[2] = {opt->beta1, opt->beta2};
    zt_status st = ZT_OK;
    jf_push(c, "betas");
    for (size_t i = 0; i < 2; i++) {
        json_t *e = json_array_get(v, i);
        char got[64];
        jf_describe(e, got, sizeof(got));
        zt_status s1;
        if (!json_is_number(e))
            s1 = jf_fail_index(c, (long)i, "must be a number (got %s)", got);
        else
            s1 = jf_check_num(c, NULL, (long)i, json_number_value(e), 0, 1, NUM_RANGE_HO, got);
        if (s1 == ZT_OK)
            b[i] = json_number_value(e);
        else if (st == ZT_OK)
            st = s1;
    }
    jf_pop(c);
    opt->beta1 = b[0];
    opt->beta2 = b[1];
    return st;
}

static zt_status parse_optimizer(pctx *c, json_t *ds, zt_ds_cfg *d)
{
    zt_optim_cfg *opt = &d->optimizer;
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_optim_cfg defaults = {.type = ZT_OPTIM_ADAMW,
                                          .lr = 1e-3,
                                          .beta1 = 0.9,
                                          .beta2 = 0.999,
                                          .eps = 1e-8,
                                          .weight_decay = 0,
                                          .adam_w_mode = true};
    memcpy(opt, &defaults, sizeof(*opt));
    json_t *o, *p;
    zt_status st = jf_get_obj(c, ds, "optimizer", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "optimizer");
    KEEP(check_block(c, o, "optimizer"));
    bool named_adamw = true, known = false;
    char type[64];
    bool present = false;
    KEEP(jf_require(c, o, "type", "\"AdamW\" or \"Adam\""));
    KEEP(jf_get_str(c, o, "type", type, sizeof(type), &present));
    if (!present) {
    } else if (jf_in_list_ci(type, (const char *const[]){"adam"}, 1)) {
        named_adamw = false;
        known = true;
    } else if (jf_in_list_ci(type, (const char *const[]){"adamw"}, 1)) {
        known = true;
    } else if (jf_in_list_ci(type, unsupported_optimizers, NKEYS(unsupported_optimizers))) {
        KEEP(jf_fail_key(
            c, "type",
            "\"%s\" is an optimizer zerotrain does not offer; use \"AdamW\" (or \"Adam\" with adam_w_mode false for L2 decay)",
            type));
    } else {
        const char *near = jf_closest(type, (const char *const[]){"Adam", "AdamW"}, 2);
        if (near)
            KEEP(jf_fail_key(c, "type", "unknown optimizer \"%s\"; did you mean \"%s\"?", type,
                             near));
        else
            KEEP(jf_fail_key(c, "type", "unknown optimizer \"%s\"; use \"AdamW\" or \"Adam\"",
                             type));
    }
    KEEP(jf_get_obj(c, o, "params", &p));
    if (p && known) {
        jf_push(c, "params");
        KEEP(check_block(c, p, "optimizer.params"));
        KEEP(jf_get_num(c, p, "lr", 0, 0, NUM_GE, &opt->lr));
        if (jf_auto_given(c, p, "lr")) jf_auto_note(c, "lr", JF_V_NUM, &opt->lr, NULL);
        KEEP(parse_betas(c, p, opt));
        KEEP(jf_get_num(c, p, "eps", 0, 0, NUM_GT, &opt->eps));
        KEEP(jf_get_num(c, p, "weight_decay", 0, 0, NUM_GE, &opt->weight_decay));
        if (jf_auto_given(c, p, "weight_decay"))
            jf_auto_note(c, "weight_decay", JF_V_NUM, &opt->weight_decay, NULL);
        KEEP(jf_get_bool(c, p, "adam_w_mode", &opt->adam_w_mode));
        double mgn = -1;
        KEEP(jf_get_num(c, p, "max_grad_norm", 0, 0, NUM_GE, &mgn));
        if (mgn >= 0) {
            if (!jf_member(ds, "gradient_clipping"))
                d->gradient_clipping = mgn;
            else if (d->gradient_clipping != mgn)
                KEEP(jf_fail_key(
                    c, "max_grad_norm",
                    "differs from the top-level gradient_clipping (%g against %g); keep gradient_clipping only",
                    mgn, d->gradient_clipping));
        }
        jf_pop(c);
    }
    /* DeepSpeed: decoupled decay when the type is adamw or adam_w_mode is set (default). */
    opt->type = named_adamw || opt->adam_w_mode ? ZT_OPTIM_ADAMW : ZT_OPTIM_ADAM;
    opt->adam_w_mode = opt->type == ZT_OPTIM_ADAMW;
    jf_pop(c);
    return st;
}

static bool sched_has(const sched_info *info, const char *param)
{
    for (size_t i = 0; i < NKEYS(info->params) && info->params[i]; i++)
        if (strcmp(info->params[i], param) == 0) return true;
    return false;
}

/* A schedule parameter given to the wrong schedule says which schedules take it. */
static const char *sched_key_hint(const char *key, const void *arg)
{
    (void)arg;
    if (strcmp(key, "warmup_min_lr") == 0 || strcmp(key, "warmup_max_lr") == 0)
        return "it is a parameter of WarmupLR and WarmupDecayLR, not of this schedule";
    if (strcmp(key, "total_num_steps") == 0)
        return "it is a parameter of WarmupDecayLR and WarmupCosineLR, not of this schedule";
    if (strcmp(key, "warmup_min_ratio") == 0 || strcmp(key, "cos_min_ratio") == 0)
        return "it is a parameter of WarmupCosineLR, not of this schedule";
    return NULL;
}

static zt_status parse_sched_params(pctx *c, json_t *p, const sched_info *info, zt_job *job)
{
    zt_sched_cfg *s = &job->ds.scheduler;
    keyspec ks[NKEYS(info->params)];
    size_t n = 0;
    for (size_t i = 0; i < NKEYS(sched_param_keys); i++)
        if (sched_has(info, sched_param_keys[i].name)) ks[n++] = sched_param_keys[i];
    zt_status st = ZT_OK;
    if (p) KEEP(jf_check_keys(c, p, ks, n, JF_STRICT, sched_key_hint, NULL));
    if (sched_has(info, "warmup_min_lr")) {
        KEEP(jf_get_num(c, p, "warmup_min_lr", 0, 0, NUM_GE, &s->warmup_min_lr));
        if (jf_auto_given(c, p, "warmup_min_lr"))
            jf_auto_note(c, "warmup_min_lr", JF_V_NUM, &s->warmup_min_lr,
                         "as Hugging Face fills it");
        KEEP(jf_get_num(c, p, "warmup_max_lr", 0, 0, NUM_GE, &s->warmup_max_lr));
        if (jf_auto_given(c, p, "warmup_max_lr")) {
            s->warmup_max_lr = job->ds.optimizer.lr;
            jf_auto_note(c, "warmup_max_lr", JF_V_NUM, &s->warmup_max_lr, "the optimizer's lr");
        }
    }
    KEEP(jf_get_i64(c, p, "warmup_num_steps", 0, INT64_MAX, &s->warmup_num_steps));
    if (jf_auto_given(c, p, "warmup_num_steps") ||
        (!jf_member(p, "warmup_num_steps") && job->train.warmup_steps >= 0)) {
        if (job->train.warmup_steps >= 0) s->warmup_num_steps = job->train.warmup_steps;
        jf_auto_note(c, "warmup_num_steps", JF_V_I64, &s->warmup_num_steps,
                     job->train.warmup_steps >= 0 ? "the job's train.warmup_steps"
                                                  : "DeepSpeed's default");
    }
    char wt[64];
    bool present;
    KEEP(jf_get_str(c, p, "warmup_type", wt, sizeof(wt), &present));
    if (present) {
        if (strcmp(wt, "log") == 0)
            s->warmup_type = ZT_WARMUP_LOG;
        else if (strcmp(wt, "linear") == 0)
            s->warmup_type = ZT_WARMUP_LINEAR;
        else
            KEEP(jf_fail_key(
                c, "warmup_type",
                "must be \"log\" or \"linear\" (got \"%s\"); DeepSpeed would fall back to \"log\" with a warning",
                wt));
    }
    if (sched_has(info, "total_num_steps")) {
        if (jf_auto_given(c, p, "total_num_steps") || !json_object_get(p, "total_num_steps")) {
            s->total_num_steps = job->train.steps;
            jf_auto_note(c, "total_num_steps", JF_V_I64, &s->total_num_steps,
                         "the job's train.steps");
        }
        KEEP(jf_get_i64(c, p, "total_num_steps", 1, INT64_MAX, &s->total_num_steps));
    }
    if (info->type == ZT_SCHED_WARMUP_COSINE_LR) {
        KEEP(jf_get_num(c, p, "warmup_min_ratio", 0, 1, NUM_RANGE, &s->warmup_min_ratio));
        KEEP(jf_get_num(c, p, "cos_min_ratio", 0, 1, NUM_RANGE, &s->cos_min_ratio));
        if (s->total_num_steps > 0 && s->total_num_steps <= s->warmup_num_steps)
            KEEP(jf_fail_key(
                c, "total_num_steps",
                "must be greater than warmup_num_steps (got %lld <= %lld%s); lower warmup_num_steps (or set the job's train.warmup_steps) or raise total_num_steps",
                (long long)s->total_num_steps, (long long)s->warmup_num_steps,
                jf_member(p, "warmup_num_steps") ? "" : ", the default"));
    }
    return st;
}

static zt_status parse_scheduler(pctx *c, json_t *ds, zt_job *job)
{
    zt_sched_cfg *s = &job->ds.scheduler;
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_sched_cfg defaults = {.type = ZT_SCHED_NONE,
                                          .warmup_min_lr = 0,
                                          .warmup_max_lr = 0.001,
                                          .warmup_num_steps = 1000,
                                          .warmup_type = ZT_WARMUP_LOG,
                                          .total_num_steps = 0,
                                          .warmup_min_ratio = 0,
                                          .cos_min_ratio = 1e-4};
    memcpy(s, &defaults, sizeof(*s));
    json_t *o, *p;
    zt_status st = jf_get_obj(c, ds, "scheduler", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "scheduler");
    KEEP(check_block(c, o, "scheduler"));
    KEEP(jf_require(c, o, "type", "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\""));
    char type[64];
    bool present = false;
    KEEP(jf_get_str(c, o, "type", type, sizeof(type), &present));
    const sched_info *info = NULL;
    for (size_t i = 0; present && i < NKEYS(sched_table) && !info; i++)
        if (strcmp(sched_table[i].name, type) == 0) info = &sched_table[i];
    if (present && !info) {
        const char *names[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
        const char *near = jf_closest(type, names, NKEYS(names));
        if (near)
            KEEP(jf_fail_key(c, "type", "unknown scheduler \"%s\"; did you mean \"%s\"?", type,
                             near));
        else if (jf_in_list_ci(type, unsupported_schedulers, NKEYS(unsupported_schedulers)))
            KEEP(jf_fail_key(
                c, "type",
                "\"%s\" is a schedule zerotrain does not offer; use \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"",
                type));
        else
            KEEP(jf_fail_key(
                c, "type",
                "unknown scheduler \"%s\"; use \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"",
                type));
    }
    if (info) {
        s->type = info->type;
        KEEP(jf_get_obj(c, o, "params", &p));
        jf_push(c, "params");
        KEEP(parse_sched_params(c, p, info, job));
        jf_pop(c);
    }
    jf_pop(c);
    return st;
}

/* offload_optimizer / offload_param "device": "none" or "cpu". */
static zt_status parse_offload_device(pctx *c, json_t *o, bool *enabled)
{
    char dev[64];
    bool present;
    zt_status st = jf_get_str(c, o, "device", dev, sizeof(dev), &present);
    if (st != ZT_OK || !present) return st;
    if (strcmp(dev, "none") == 0)
        *enabled = false;
    else if (strcmp(dev, "cpu") == 0)
        *enabled = true;
    else if (strcmp(dev, "nvme") == 0)
        return jf_fail_key(
            c, "device",
            "\"nvme\": offloading to NVMe is not offered; use \"cpu\" (host memory) or \"none\"");
    else
        return jf_fail_key(c, "device", "must be \"none\" or \"cpu\" (got \"%s\")", dev);
    return ZT_OK;
}

static zt_status parse_offload(pctx *c, json_t *zo, const char *key, zt_offload_cfg *off)
{
    bool is_opt = strcmp(key, "offload_optimizer") == 0;
    json_t *o;
    zt_status st = jf_get_obj(c, zo, key, &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, key);
    KEEP(check_block(
        c, o, is_opt ? "zero_optimization.offload_optimizer" : "zero_optimization.offload_param"));
    KEEP(parse_offload_device(c, o, &off->enabled));
    KEEP(jf_get_bool(c, o, "pin_memory", &off->pin_memory));
    if (is_opt) KEEP(jf_get_num(c, o, "ratio", 0, 1, NUM_RANGE, &off->ratio));
    jf_pop(c);
    return st;
}

/* Reads the (possibly aliased) zero_optimization key `key` as an integer. */
static zt_status get_zero_i64(pctx *c, json_t *o, const char *key, int64_t lo, int64_t *out)
{
    const char *name = jf_pick_alias(c, o, zero_keys, NKEYS(zero_keys), key);
    return jf_get_i64(c, o, name, lo, INT64_MAX, out);
}

/* HF's fills for bucket sizes given as "auto" (transformers' deepspeed integration): from the
 * model's width. */
static void zero_bucket_auto(pctx *c, json_t *o, const char *key, int64_t *out, int64_t value,
                             const char *from)
{
    const char *name = jf_pick_alias(c, o, zero_keys, NKEYS(zero_keys), key);
    if (!jf_auto_given(c, o, name)) return;
    *out = value;
    jf_auto_note(c, name, JF_V_I64, out, from);
}

static zt_status parse_zero(pctx *c, json_t *ds, zt_job *job)
{
    zt_zero_cfg *z = &job->ds.zero;
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_zero_cfg defaults = {.stage = 0,
                                         .reduce_bucket_size = 500000000,
                                         .allgather_bucket_size = 500000000,
                                         .overlap_comm = false,
                                         .contiguous_gradients = true,
                                         .offload_optimizer = {false, false, 1.0},
                                         .offload_param = {false, false, 1.0},
                                         .stage3_prefetch_bucket_size = 50000000,
                                         .stage3_param_persistence_threshold = 100000,
                                         .stage3_max_reuse_distance = 1000000000,
                                         .stage3_max_live_parameters = 1000000000,
                                         .sub_group_size = 1000000000};
    memcpy(z, &defaults, sizeof(*z));
    json_t *v = jf_member(ds, "zero_optimization");
    if (v && json_is_boolean(v)) { /* legacy form: true means stage 1 */
        z->stage = json_is_true(v) ? 1 : 0;
        return ZT_OK;
    }
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "zero_optimization", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "zero_optimization");
    KEEP(check_block(c, o, "zero_optimization"));
    KEEP(jf_get_int(c, o, "stage", 0, 3, &z->stage));
    int64_t C = job->model.n_embd;
    KEEP(jf_get_i64(c, o, "reduce_bucket_size", 0, INT64_MAX, &z->reduce_bucket_size));
    zero_bucket_auto(c, o, "reduce_bucket_size", &z->reduce_bucket_size, C * C,
                     "n_embd^2, as Hugging Face fills it");
    KEEP(jf_get_i64(c, o, "allgather_bucket_size", 0, INT64_MAX, &z->allgather_bucket_size));
    if (z->allgather_bucket_size % 2 != 0)
        KEEP(jf_fail_key(
            c, "allgather_bucket_size",
            "must be even (got %lld); DeepSpeed requires a multiple of nccl_start_alignment_factor, 2",
            (long long)z->allgather_bucket_size));
    z->overlap_comm = z->stage == 3;
    KEEP(jf_get_bool(c, o, "overlap_comm", &z->overlap_comm));
    KEEP(jf_get_bool(c, o, "contiguous_gradients", &z->contiguous_gradients));
    /* the deprecated booleans first, so that the blocks win where both are given */
    bool legacy = false;
    KEEP(jf_get_bool(c, o, "cpu_offload", &legacy));
    if (legacy) z->offload_optimizer.enabled = true;
    const char *cop = jf_pick_alias(c, o, zero_keys, NKEYS(zero_keys), "cpu_offload_param");
    legacy = false;
    KEEP(jf_get_bool(c, o, cop, &legacy));
    if (legacy) z->offload_param.enabled = true;
    legacy = false;
    KEEP(jf_get_bool(c, o, "cpu_offload_use_pin_memory", &legacy));
    if (legacy) z->offload_optimizer.pin_memory = z->offload_param.pin_memory = true;
    KEEP(parse_offload(c, o, "offload_optimizer", &z->offload_optimizer));
    KEEP(parse_offload(c, o, "offload_param", &z->offload_param));
    if (z->offload_param.enabled && z->stage != 3) {
        const char *where = json_object_get(o, "offload_param") ? "offload_param" : cop;
        KEEP(jf_fail_key(
            c, where,
            "offloading parameters needs zero_optimization.stage 3 (stage is %d); remove it or set \"stage\": 3",
            z->stage));
    }
    KEEP(get_zero_i64(c, o, "stage3_prefetch_bucket_size", 0, &z->stage3_prefetch_bucket_size));
    zero_bucket_auto(c, o, "stage3_prefetch_bucket_size", &z->stage3_prefetch_bucket_size,
                     (int64_t)(0.9 * (double)(C * C)), "0.9 n_embd^2, as Hugging Face fills it");
    KEEP(get_zero_i64(c, o, "stage3_param_persistence_threshold", 0,
                      &z->stage3_param_persistence_threshold));
    zero_bucket_auto(c, o, "stage3_param_persistence_threshold",
                     &z->stage3_param_persistence_threshold, 10 * C,
                     "10 n_embd, as Hugging Face fills it");
    KEEP(get_zero_i64(c, o, "stage3_max_reuse_distance", 0, &z->stage3_max_reuse_distance));
    KEEP(get_zero_i64(c, o, "stage3_max_live_parameters", 0, &z->stage3_max_live_parameters));
    KEEP(jf_get_i64(c, o, "sub_group_size", 0, INT64_MAX, &z->sub_group_size));
    /* aliases of keys with no effect: only the check for two spellings at once */
    static const char *const aliased[] = {
        "stage3_model_persistence_threshold", "stage3_gather_16bit_weights_on_model_save",
        "stage3_module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params"};
    for (size_t i = 0; i < NKEYS(aliased); i++)
        (void)jf_pick_alias(c, o, zero_keys, NKEYS(zero_keys), aliased[i]);
    jf_pop(c);
    return st;
}

static zt_status parse_actckpt(pctx *c, json_t *ds, zt_actckpt_cfg *a)
{
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_actckpt_cfg defaults = {false, false, false};
    memcpy(a, &defaults, sizeof(*a));
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "activation_checkpointing", &o);
    if (st != ZT_OK || !o) return st;
    a->enabled = true;
    jf_push(c, "activation_checkpointing");
    KEEP(check_block(c, o, "activation_checkpointing"));
    KEEP(jf_get_bool(c, o, "partition_activations", &a->partition_activations));
    KEEP(jf_get_bool(c, o, "cpu_checkpointing", &a->cpu_checkpointing));
    jf_pop(c);
    return st;
}

static const char *precision_name(zt_precision p)
{
    return p == ZT_PREC_FP16 ? "fp16" : p == ZT_PREC_BF16 ? "bf16" : "fp32";
}

/* data_types.grad_accum_dtype: fp32, or the 16-bit type in use. */
static zt_status parse_data_types(pctx *c, json_t *ds, zt_ds_cfg *d)
{
    d->grad_accum_fp32 = d->precision != ZT_PREC_FP16;
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "data_types", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "data_types");
    KEEP(check_block(c, o, "data_types"));
    char dt[64];
    bool present = false;
    KEEP(jf_get_str(c, o, "grad_accum_dtype", dt, sizeof(dt), &present));
    static const char *const fp32_names[] = {"fp32", "float32", "float", "torch.float32"};
    static const char *const fp16_names[] = {"fp16", "float16", "half", "torch.float16"};
    static const char *const bf16_names[] = {"bf16", "bfloat16", "torch.bfloat16"};
    zt_precision want = d->precision;
    if (!present) {
    } else if (jf_in_list_ci(dt, fp32_names, NKEYS(fp32_names))) {
        d->grad_accum_fp32 = true;
    } else if (jf_in_list_ci(dt, fp16_names, NKEYS(fp16_names)) ||
               jf_in_list_ci(dt, bf16_names, NKEYS(bf16_names))) {
        want = jf_in_list_ci(dt, fp16_names, NKEYS(fp16_names)) ? ZT_PREC_FP16 : ZT_PREC_BF16;
        if (want != d->precision) {
            if (d->precision == ZT_PREC_FP32)
                KEEP(jf_fail_key(
                    c, "grad_accum_dtype",
                    "\"%s\" needs %s training, but neither fp16 nor bf16 is enabled; use \"fp32\" or enable %s",
                    dt, precision_name(want), precision_name(want)));
            else
                KEEP(jf_fail_key(
                    c, "grad_accum_dtype",
                    "\"%s\" does not match the training precision %s; use \"fp32\" or \"%s\"", dt,
                    precision_name(d->precision), precision_name(d->precision)));
        } else {
            d->grad_accum_fp32 = false;
        }
    } else {
        KEEP(jf_fail_key(c, "grad_accum_dtype",
                         "must be \"fp32\", \"fp16\" or \"bf16\" (got \"%s\")", dt));
    }
    jf_pop(c);
    return st;
}

static zt_status parse_csv_monitor(pctx *c, json_t *ds, zt_job *job)
{
    zt_csv_monitor_cfg *m = &job->ds.csv_monitor;
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "csv_monitor", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "csv_monitor");
    KEEP(check_block(c, o, "csv_monitor"));
    KEEP(jf_get_bool(c, o, "enabled", &m->enabled));
    snprintf(m->job_name, sizeof(m->job_name), "DeepSpeedJobName");
    KEEP(jf_get_str(c, o, "job_name", m->job_name, sizeof(m->job_name), NULL));
    if (strchr(m->job_name, '/') || strcmp(m->job_name, "..") == 0 || strcmp(m->job_name, ".") == 0)
        KEEP(
            jf_fail_key(c, "job_name",
                        "must be a plain name, not a path (got \"%s\"); put folders in output_path",
                        m->job_name));
    /* output_path "" (DeepSpeed's default) is the job file's directory */
    json_t *op = jf_member(o, "output_path");
    if (op && json_is_string(op) && json_string_length(op) == 0)
        snprintf(m->output_path, sizeof(m->output_path), "%s", job->base_dir);
    else if (op)
        KEEP(jf_get_path(c, o, "output_path", job->base_dir, m->output_path, NULL));
    else
        snprintf(m->output_path, sizeof(m->output_path), "%s", job->base_dir);
    if (!m->enabled) memset(m, 0, sizeof(*m));
    jf_pop(c);
    return st;
}

/* The fill of the batch triad from the job's train section, before DeepSpeed's rules. */
static zt_status fill_batch(pctx *c, json_t *ds, zt_job *job)
{
    zt_ds_cfg *d = &job->ds;
    zt_status st = ZT_OK;
    const zt_train_cfg *t = &job->train;
    if (t->batch_size) {
        if (d->given_train_batch_size && d->given_train_batch_size != t->batch_size)
            KEEP(jf_fail_key(
                c, "train_batch_size",
                "is %lld but the job's train.batch_size is %lld; give one of them, or make them equal",
                (long long)d->given_train_batch_size, (long long)t->batch_size));
        d->given_train_batch_size = t->batch_size;
        if (jf_auto_given(c, ds, "train_batch_size") || !json_object_get(ds, "train_batch_size"))
            jf_auto_note(c, "train_batch_size", JF_V_I64, &d->given_train_batch_size,
                         "the job's train.batch_size");
    }
    if (t->micro_batch_size) {
        if (d->given_micro_batch && d->given_micro_batch != t->micro_batch_size)
            KEEP(jf_fail_key(
                c, "train_micro_batch_size_per_gpu",
                "is %lld but the job's train.micro_batch_size is %lld; give one of them, or make them equal",
                (long long)d->given_micro_batch, (long long)t->micro_batch_size));
        d->given_micro_batch = t->micro_batch_size;
        if (jf_auto_given(c, ds, "train_micro_batch_size_per_gpu") ||
            !json_object_get(ds, "train_micro_batch_size_per_gpu"))
            jf_auto_note(c, "train_micro_batch_size_per_gpu", JF_V_I64, &d->given_micro_batch,
                         "the job's train.micro_batch_size");
    }
    /* "auto" (or absent with no other batch key): the planner picks it when the rank starts */
    bool mb_auto = jf_auto_given(c, ds, "train_micro_batch_size_per_gpu");
    bool mb_absent = !json_object_get(ds, "train_micro_batch_size_per_gpu");
    bool derived = d->given_train_batch_size && d->given_grad_accum; /* DeepSpeed's rule */
    if (!d->given_micro_batch && !derived &&
        (mb_auto || (mb_absent && !d->given_train_batch_size && !d->given_grad_accum))) {
        d->micro_auto = true;
        jf_auto_note(c, "train_micro_batch_size_per_gpu", JF_V_TEXT,
                     "the largest that fits the rank's memory",
                     "chosen by the planner when the ranks start");
    }
    if (jf_auto_given(c, ds, "train_batch_size") && !t->batch_size)
        jf_auto_note(c, "train_batch_size", JF_V_I64, &d->train_batch_size,
                     "micro batch x accumulation x ranks");
    if (jf_auto_given(c, ds, "gradient_accumulation_steps"))
        jf_auto_note(c, "gradient_accumulation_steps", JF_V_I64, &d->grad_accum,
                     "derived from the batch sizes");
    return st;
}

/* The precision from the job's train.precision where fp16/bf16 do not say. */
static zt_status fill_precision(pctx *c, json_t *ds, zt_job *job, const char *bf16_key)
{
    zt_ds_cfg *d = &job->ds;
    zt_status st = ZT_OK;
    if (!job->train.precision_given) return ZT_OK;
    zt_precision want = job->train.precision;
    json_t *f = jf_member(ds, "fp16"), *b = jf_member(ds, bf16_key);
    bool fp16_said = f && json_is_object(f) && jf_member(f, "enabled");
    bool bf16_said = b && json_is_object(b) && jf_member(b, "enabled");
    if ((fp16_said && d->fp16.enabled && want != ZT_PREC_FP16) ||
        (bf16_said && d->bf16 && want != ZT_PREC_BF16))
        return jf_fail_key(
            c, d->fp16.enabled ? "fp16" : bf16_key,
            "enables %s but the job's train.precision is \"%s\"; make them agree or set \"enabled\": \"auto\"",
            d->fp16.enabled ? "fp16" : "bf16", precision_name(want));
    if (!fp16_said && !bf16_said) {
        d->fp16.enabled = want == ZT_PREC_FP16;
        d->bf16 = want == ZT_PREC_BF16;
    }
    return st;
}

/* Every problem of the batch triad, placed at the first batch key given. */
static zt_status check_batch(pctx *c, json_t *ds, zt_job *job)
{
    zt_err berr;
    zt_err_clear(&berr);
    zt_status st = zt_job_resolve_batch(job, job->resources.ranks, &berr);
    if (st == ZT_OK) return ZT_OK;
    const char *key =
        json_object_get(ds, "train_batch_size")                 ? "train_batch_size"
        : json_object_get(ds, "train_micro_batch_size_per_gpu") ? "train_micro_batch_size_per_gpu"
        : json_object_get(ds, "gradient_accumulation_steps")    ? "gradient_accumulation_steps"
                                                                : NULL;
    return jf_fail_at(c, st, key, berr.msg);
}

/* The DeepSpeed object `ds`, whose path is c's current one. */
static zt_status parse_ds(pctx *c, json_t *ds, zt_job *job)
{
    zt_ds_cfg *d = &job->ds;
    zt_status st = ZT_OK;
    KEEP(check_block(c, ds, ""));
    KEEP(
        jf_get_int_max(c, ds, "train_batch_size", 1, INT_MAX, INT_MAX, &d->given_train_batch_size));
    KEEP(jf_get_int_max(c, ds, "train_micro_batch_size_per_gpu", 1, INT_MAX, INT_MAX,
                        &d->given_micro_batch));
    KEEP(jf_get_int_max(c, ds, "gradient_accumulation_steps", 1, INT_MAX, INT_MAX,
                        &d->given_grad_accum));
    d->steps_per_print = 10;
    KEEP(jf_get_i64(c, ds, "steps_per_print", 1, INT64_MAX, &d->steps_per_print));
    d->gradient_clipping = 0;
    KEEP(jf_get_num(c, ds, "gradient_clipping", 0, 0, NUM_GE, &d->gradient_clipping));
    if (jf_auto_given(c, ds, "gradient_clipping"))
        jf_auto_note(c, "gradient_clipping", JF_V_NUM, &d->gradient_clipping, NULL);
    KEEP(jf_get_bool(c, ds, "wall_clock_breakdown", &d->wall_clock_breakdown));
    KEEP(parse_fp16(c, ds, job));
    const char *bf16_key = "bf16";
    KEEP(parse_bf16(c, ds, job, &bf16_key));
    KEEP(fill_precision(c, ds, job, bf16_key));
    if (d->fp16.enabled && d->bf16) {
        jf_push(c, bf16_key);
        KEEP(jf_fail_key(
            c, "enabled",
            "fp16 and bf16 cannot both be enabled (DeepSpeed: \"bfloat16 and fp16 modes cannot be simultaneously enabled\"); enable at most one"));
        jf_pop(c);
        d->bf16 = false;
    }
    d->precision = d->fp16.enabled ? ZT_PREC_FP16 : d->bf16 ? ZT_PREC_BF16 : ZT_PREC_FP32;
    KEEP(parse_optimizer(c, ds, d));
    KEEP(parse_scheduler(c, ds, job));
    KEEP(parse_zero(c, ds, job));
    KEEP(parse_actckpt(c, ds, &d->activation_checkpointing));
    KEEP(parse_data_types(c, ds, d));
    KEEP(parse_csv_monitor(c, ds, job));
    /* blocks that have no effect here are still checked as DeepSpeed checks them */
    static const char *const quiet[] = {"aio", "tensorboard", "wandb", "comet"};
    for (size_t i = 0; i < NKEYS(quiet); i++) {
        json_t *o = jf_member(ds, quiet[i]);
        if (!o || !json_is_object(o)) continue;
        const dsblock *b = block_of(quiet[i]);
        jf_push(c, quiet[i]);
        KEEP(jf_check_keys(c, o, b->keys, b->n, JF_QUIET, NULL, NULL));
        jf_pop(c);
    }
    KEEP(fill_batch(c, ds, job));
    KEEP(check_batch(c, ds, job));
    return st;
}

zt_status zt_ds_parse(pctx *c, json_t *root, zt_job *job)
{
    json_t *v = jf_member(root, "deepspeed");
    if (!v)
        return jf_fail_key(
            c, "deepspeed",
            "missing; add the DeepSpeed config (an object, or the path of a DeepSpeed JSON file) with at least \"train_micro_batch_size_per_gpu\"");
    if (json_is_object(v)) {
        jf_push(c, "deepspeed");
        zt_status st = parse_ds(c, v, job);
        jf_pop(c);
        return st;
    }
    if (!json_is_string(v)) {
        char got[64];
        jf_describe(v, got, sizeof(got));
        return jf_fail_key(c, "deepspeed",
                           "must be an object {...} or the path of a DeepSpeed JSON file (got %s)",
                           got);
    }
    if (c->no_files)
        return jf_fail_key(
            c, "deepspeed",
            "names a file, and the coordinator opens no file a job names; submit with 'zctl submit', which sends the DeepSpeed config inline, or put the config object here");
    char path[ZT_PATH_MAX];
    zt_status st = jf_get_path(c, root, "deepspeed", job->base_dir, path, NULL);
    if (st != ZT_OK) return st;
    char *text = NULL;
    size_t len = 0;
    zt_err ferr;
    zt_err_clear(&ferr);
    st = jf_read_text(path, path, "DeepSpeed config", &text, &len, &ferr);
    if (st != ZT_OK)
        return jf_fail_key_code(c, st, "deepspeed", "%s (relative paths resolve against %s)",
                                ferr.msg, job->base_dir);
    json_t *ds = NULL;
    st = jf_load_json(text, len, path, "DeepSpeed config", &ds, &ferr);
    if (st != ZT_OK) {
        pctx dc = {.origin = path, .origin_index = 1, .text = text, .len = len, .rep = c->rep};
        jf_fail_at(&dc, st, NULL, ferr.msg);
    } else {
        pctx dc = {.origin = path, .origin_index = 1, .text = text, .len = len, .rep = c->rep};
        st = parse_ds(&dc, ds, job);
        json_decref(ds);
    }
    zt_free(text);
    return st;
}

/* ---- the summary ------------------------------------------------------------------------- */

static void notes_line(char *out, size_t cap, size_t *used, const char *prefix, const char *text)
{
    if (!text[0]) return;
    if (*used) jf_append(out, cap, used, "\n");
    jf_append(out, cap, used, prefix);
    jf_append(out, cap, used, text);
}

static void auto_value(const jf_auto *a, char *out, size_t cap)
{
    switch (a->type) {
    case JF_V_INT:
        snprintf(out, cap, "%d", *(const int *)a->value);
        break;
    case JF_V_I64:
        snprintf(out, cap, "%lld", (long long)*(const int64_t *)a->value);
        break;
    case JF_V_NUM:
        jf_format_double(*(const double *)a->value, out, cap);
        break;
    case JF_V_BOOL:
        snprintf(out, cap, "%s", *(const bool *)a->value ? "true" : "false");
        break;
    case JF_V_TEXT:
        snprintf(out, cap, "%s", (const char *)a->value);
        break;
    }
}

void zt_ds_notes_build(const jf_report *rep, zt_job *job)
{
    char *out = job->ds.notes;
    size_t cap = sizeof(job->ds.notes), used = 0;
    memset(out, 0, cap);
    notes_line(out, cap, &used, "ignored (DeepSpeed does not know them either): ", rep->ignored);
    char line[ZT_DS_NOTES_MAX];
    const char *p = rep->noeffect;
    while (*p) { /* one line per key */
        const char *e = strchr(p, '\n');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k >= sizeof(line)) k = sizeof(line) - 1;
        memcpy(line, p, k);
        line[k] = '\0';
        notes_line(out, cap, &used, "no effect here: ", line);
        p += k + (e ? 1 : 0);
    }
    notes_line(out, cap, &used, "", rep->info);
    for (size_t i = 0; i < rep->nautos; i++) {
        const jf_auto *a = &rep->autos[i];
        char val[128];
        auto_value(a, val, sizeof(val));
        snprintf(line, sizeof(line), "%s = %s (%s)", a->path, val,
                 a->from ? a->from : "DeepSpeed's default");
        notes_line(out, cap, &used, "auto: ", line);
    }
}

void zt_ds_notes_print(FILE *f, const char *notes, const char *indent)
{
    for (const char *p = notes; *p;) {
        const char *e = strchr(p, '\n');
        int k = e ? (int)(e - p) : (int)strlen(p);
        fprintf(f, "%s%.*s\n", indent, k, p);
        p += k + (e ? 1 : 0);
    }
}

/* ---- docs/deepspeed.md ------------------------------------------------------------------- */

static const char *type_text(int t)
{
    switch (t) {
    case VT_BOOL:
        return "bool";
    case VT_INT:
        return "int";
    case VT_NUM:
        return "number";
    case VT_STR:
        return "string";
    case VT_OBJ:
        return "object";
    case VT_LIST:
        return "list";
    case VT_STR_OR_NULL:
        return "string or null";
    default:
        return "any";
    }
}

static void md_put(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void md_put(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    if (!*buf) return;
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if ((size_t)n < *cap - *len) {
            *len += (size_t)n;
            return;
        }
        char *p = zt_realloc(*buf, *cap * 2);
        if (!p) {
            zt_free(*buf);
            *buf = NULL;
            return;
        }
        *buf = p;
        *cap *= 2;
    }
}

char *zt_ds_doc_markdown(void)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = zt_malloc(cap);
    if (!buf) return NULL;
    buf[0] = '\0';
    md_put(
        &buf, &len, &cap,
        "# DeepSpeed configs in zerotrain\n\n"
        "A job's `deepspeed` member is a DeepSpeed config object, or the path of a DeepSpeed "
        "JSON file, read with DeepSpeed's meanings and defaults. zerotrain follows DeepSpeed's "
        "own rules for what it accepts:\n\n"
        "- a top-level key DeepSpeed does not know is ignored and named in the start-up summary "
        "(`ignored: ...`), with the closest known key when one is near;\n"
        "- inside the blocks DeepSpeed validates strictly (marked *strict* below) an unknown key "
        "is an error with the closest known key suggested;\n"
        "- every key DeepSpeed knows is **used**, has **no effect** here (accepted and named in "
        "the summary with the reason when it is not at DeepSpeed's default), or is **refused** "
        "because it asks for something zerotrain does not offer (accepted only with the value "
        "that turns it off);\n"
        "- `\"auto\"` means: fill it. The batch sizes come from the job's `train.batch_size` "
        "and `train.micro_batch_size`; a micro batch that is still `\"auto\"` (or absent with "
        "no other batch key) is picked by the planner when the ranks start: the largest whose "
        "memory plan fits the rank's device with a 10%% margin and divides the global batch when "
        "one is fixed. Schedule lengths come from `train.steps` and `train.warmup_steps`, "
        "precision from `train.precision`, `warmup_max_lr` from the optimizer's lr, bucket "
        "sizes from the model's width (as Hugging Face fills them); anything else takes "
        "DeepSpeed's default. Each fill is printed in the summary (`auto: ...`), shown by "
        "`zctl plan` and kept in checkpoints.\n\n"
        "All problems of a config are reported at once, in file order, each as "
        "`file:line:col: key.path: what is wrong; what to do`.\n\n"
        "This page is generated from the key table in `common/dsconfig.c` "
        "(`zctl plan --deepspeed-keys`); a test checks that it matches.\n");
    for (size_t b = 0; b < NKEYS(blocks); b++) {
        const dsblock *bl = &blocks[b];
        md_put(&buf, &len, &cap, "\n## %s%s\n\n", bl->path[0] ? bl->path : "top level",
               bl->mode == JF_STRICT ? " (strict)" : " (unknown keys ignored)");
        md_put(
            &buf, &len, &cap,
            "| key | type | DeepSpeed's default | here | what zerotrain does |\n| --- | --- | --- | --- | --- |\n");
        for (size_t i = 0; i < bl->n; i++) {
            const keyspec *k = &bl->keys[i];
            const char *status = k->kind == KEY_USED        ? "used"
                                 : k->kind == KEY_NO_EFFECT ? "no effect"
                                 : k->kind == KEY_REFUSED   ? "refused"
                                                            : "alias";
            char doc[512];
            if (k->kind == KEY_ALIAS)
                snprintf(doc, sizeof(doc), "same as `%s`", k->doc);
            else if (k->kind == KEY_REFUSED) {
                char off[64] = "";
                if (k->allow & ALLOW_DISABLED)
                    snprintf(off, sizeof(off), "accepted with \"enabled\": false; ");
                else if (k->allow & ALLOW_FALSE)
                    snprintf(off, sizeof(off), "accepted when false; ");
                else if (k->allow & ALLOW_TRUE)
                    snprintf(off, sizeof(off), "accepted when true; ");
                else if (k->allow & ALLOW_NUM) {
                    char num[32];
                    jf_format_double(k->num, num, sizeof(num));
                    snprintf(off, sizeof(off), "accepted when %s; ", num);
                }
                snprintf(doc, sizeof(doc), "%s%s", off, k->doc ? k->doc : "");
            } else
                snprintf(doc, sizeof(doc), "%s", k->doc ? k->doc : "");
            md_put(&buf, &len, &cap, "| `%s` | %s | %s | %s | %s |\n", k->name, type_text(k->type),
                   k->dflt ? k->dflt : "", status, doc);
        }
    }
    md_put(&buf, &len, &cap,
           "\n## Where zerotrain differs from DeepSpeed\n\n"
           "- Optimizer step k uses the schedule at t = k-1: no off-by-two, and WarmupCosineLR "
           "does not start at lr 0.\n"
           "- The fp16 loss scaler always uses the documented defaults (2^16, hysteresis 2) and "
           "unscales with the scale the backward pass used.\n"
           "- Non-finite gradients skip the step in every precision (bf16 and fp32 too), counted "
           "and reported.\n"
           "- Stages 1-2 reduce-scatter gradients (2x the parameters per step, not DeepSpeed's "
           "all-reduce of buckets).\n"
           "- Checkpoints resume on any rank count and stage without a conversion.\n"
           "- The offload `ratio` splits the optimizer shard by elements, at any size and stage.\n"
           "- `max_grad_norm` in the optimizer's params is read as `gradient_clipping` (DeepSpeed "
           "refuses it).\n"
           "- An `\"auto\"` micro batch is picked before launch from the memory plan, where "
           "DeepSpeed needs its autotuner or the Hugging Face Trainer.\n");
    md_put(&buf, &len, &cap,
           "\n## optimizer.type and scheduler.type\n\n"
           "`Adam` and `AdamW` (DeepSpeed's rule: `Adam` is AdamW unless `adam_w_mode` is "
           "false). Other optimizers (Lamb, OneBitAdam, Adagrad, Lion, the torch.optim ones) are "
           "refused. Schedules: `WarmupLR`, `WarmupDecayLR`, `WarmupCosineLR`; OneCycle, "
           "LRRangeTest and torch's schedules are refused.\n");
    return buf;
}
