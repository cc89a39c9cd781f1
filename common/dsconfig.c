/* zerotrain: the DeepSpeed config inside a job file. One table of every
 * key DeepSpeed knows, block by block (name, type, DeepSpeed's default, what zerotrain does
 * with it: used, no effect here and why, or refused and what to use instead), drives the
 * checks, the start-up summary and docs/deepspeed.md. DeepSpeed's own rules decide what is
 * accepted: top-level keys it does not know are ignored (and named in the summary), the blocks
 * it validates strictly refuse unknown keys with the closest one suggested. The sections are
 * read by dsconfig_read.c and dsconfig_optim.c. */
#define _POSIX_C_SOURCE 200809L
#include "dsconfig.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "dsconfig_int.h"

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
#define WHY_PIPELINE "the NVMe swap always reads ahead and writes back behind the update"
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
    USE("aio", VT_OBJ, NULL, "how NVMe swap files are read and written"),
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

static const keyspec zero_keys[] = {
    USE("stage", VT_INT, "0", "0-3"),
    USE("offload_optimizer", VT_OBJ, NULL, "device \"cpu\": the optimizer step on the host"),
    USE("offload_param", VT_OBJ, NULL,
        "stage 3, device \"cpu\": CPU ranks keep parameters in host memory already; \"nvme\": in swap files"),
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
    USE("device", VT_STR, "\"none\"", "\"none\", \"cpu\" or \"nvme\""),
    USE("ratio", VT_NUM, "1", "the fraction of the shard updated on the host (Twin-Flow)"),
    NOEFF("pin_memory", VT_BOOL, "false", "the host buffers of GPU ranks are always pinned"),
    USE("nvme_path", VT_STR_OR_NULL, "null",
        "with device \"nvme\" (required): where each rank keeps its swap files"),
    USE("buffer_count", VT_INT, "4",
        "with device \"nvme\": buffer sets streaming the step (read ahead, update, write back)"),
    NOEFF("pipeline_read", VT_BOOL, "false", WHY_PIPELINE),
    NOEFF("pipeline_write", VT_BOOL, "false", WHY_PIPELINE),
    NOEFF("pipeline", VT_BOOL, "false", WHY_PIPELINE),
    NOEFF("fast_init", VT_BOOL, "false", "swap files are reserved at full size at start-up"),
};

static const keyspec offload_param_keys[] = {
    USE("device", VT_STR, "\"none\"", "\"none\", \"cpu\" or \"nvme\""),
    NOEFF("pin_memory", VT_BOOL, "false", "the host buffers of GPU ranks are always pinned"),
    USE("nvme_path", VT_STR_OR_NULL, "null",
        "with device \"nvme\" (required): where each rank keeps its parameter swap file"),
    USE("buffer_count", VT_INT, "5",
        "with device \"nvme\": host buffers a unit's parameter shard is read into ahead of use"),
    USE("buffer_size", VT_INT, "1e8",
        "with device \"nvme\": elements a buffer may hold; at least the largest unit's shard"),
    USE("max_in_cpu", VT_INT, "1e9",
        "with device \"nvme\": elements of the shard kept in host memory (the first units)"),
};

static const keyspec aio_keys[] = {
    USE("block_size", VT_INT, "1048576", "bytes per swap request, a multiple of 4096"),
    USE("queue_depth", VT_INT, "8", "swap requests in flight"),
    USE("thread_count", VT_INT, "1", "I/O threads where the kernel refuses io_uring"),
    NOEFF("intra_op_parallelism", VT_INT, "1", "one thread submits a rank's swap requests"),
    USE("single_submit", VT_BOOL, "false", "submit swap requests one at a time"),
    USE("overlap_events", VT_BOOL, "true", "refill the queue as each request completes"),
    NOEFF("use_gds", VT_BOOL, "false",
          "GPUDirect Storage is not used: swap data moves through host buffers"),
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

const dsblock *ds_block(const char *path)
{
    for (size_t i = 0; i < NKEYS(blocks); i++)
        if (strcmp(blocks[i].path, path) == 0) return &blocks[i];
    return NULL;
}

zt_status ds_check_block(pctx *c, json_t *obj, const char *path)
{
    const dsblock *b = ds_block(path);
    return jf_check_keys(c, obj, b->keys, b->n, b->mode, NULL, NULL);
}

const char *zt_ds_top_key_hint(const char *key)
{
    for (size_t i = 0; i < NKEYS(top_keys); i++)
        if (strcmp(top_keys[i].name, key) == 0)
            return "it is a DeepSpeed key; move it inside \"deepspeed\"";
    return NULL;
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
