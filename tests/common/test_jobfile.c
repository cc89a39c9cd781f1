/* Tests common/jobfile.c: the job file and the DeepSpeed config inside it. A table of small
 * bad job texts checks each class of error for its status, its file:line:col (the '@' in a
 * text marks where the message must point) and the key parts of its message; valid jobs are
 * checked field by field, the batch triad against DeepSpeed's own table, and every valid job
 * round-trips through zt_job_to_json. */
#define _POSIX_C_SOURCE 200809L
#include "common/jobfile.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "tests/test.h"

#ifndef ZT_JOBFILES_DIR
#error "ZT_JOBFILES_DIR must name tests/common/jobfiles"
#endif

/* ---- building blocks for small job texts (each section on its own line) ---- */
#define BASE_MODEL                                                                                 \
    "\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"block_size\": 16, \"vocab_size\": 100"
#define L_MODEL "  \"model\": {" BASE_MODEL "},\n"
#define L_DATA "  \"data\": {\"train\": \"d/train_*.bin\"},\n"
#define L_TRAIN "  \"train\": {\"steps\": 10},\n"
#define L_DS "  \"deepspeed\": {\"train_micro_batch_size_per_gpu\": 2}\n"
/* a job whose deepspeed object holds `body` after a valid micro batch */
#define DS(body)                                                                                   \
    "{\n" L_MODEL L_DATA L_TRAIN "  \"deepspeed\": {\"train_micro_batch_size_per_gpu\": 2" body    \
    "\n  }\n}\n"
/* a job whose deepspeed object is exactly `body` */
#define DSRAW(body) "{\n" L_MODEL L_DATA L_TRAIN "  \"deepspeed\": {" body "}\n}\n"
/* a job whose model section is `m` */
#define MODEL(m) "{\n  \"model\": {" m "},\n" L_DATA L_TRAIN L_DS "}\n"
/* a valid job with extra top-level members `top` (each ending in ",\n") */
#define TOP(top) "{\n" top L_MODEL L_DATA L_TRAIN L_DS "}\n"

#define MINIMAL TOP("")

typedef struct bad_case {
    const char *name;
    const char *text; /* '@' marks where the message must point */
    zt_status status;
    const char *want[3];
} bad_case;

static const bad_case bad_cases[] = {
    /* ---- syntax ---- */
    {"trailing comma", "{\n  \"name\": \"x\",\n@}\n", ZT_ERR_CONFIG, {"string or '}' expected"}},
    {"bad literal",
     DS(",\n    \"fp16\": {\"enabled\": tr@u}"),
     ZT_ERR_CONFIG,
     {"invalid token near 'tru'"}},
    {"unclosed", "{\n  \"name\": \"x\"\n@", ZT_ERR_CONFIG, {"end of file"}},
    {"duplicate top",
     "{\n  \"name\": \"a\",\n" L_MODEL "  @\"name\": \"b\"\n}",
     ZT_ERR_CONFIG,
     {": name: duplicate key (first at line 2, column 3); keep only one"}},
    {"duplicate nested",
     DS(",\n    \"zero_optimization\": {\"stage\": 1,\n       @\"stage\": 2}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.stage: duplicate key (first at line 6, column 27)"}},
    {"empty", "", ZT_ERR_CONFIG, {"t.json: the job file is empty; it must hold one JSON object"}},
    {"blank", " \n\t \n", ZT_ERR_CONFIG, {"the job file is empty"}},
    {"array root",
     "\n  @[1, 2]",
     ZT_ERR_CONFIG,
     {"the job file must be a JSON object {...}, not an array"}},
    {"big integer",
     TOP("  \"max_restarts\": 9999999999999999999@9,\n"),
     ZT_ERR_CONFIG,
     {"too big integer"}},

    /* ---- unknown keys, with suggestions, at several depths ---- */
    {"unknown top",
     "{\n  @\"modle\": {},\n" L_DATA L_TRAIN L_DS "}",
     ZT_ERR_CONFIG,
     {": modle: unknown key; did you mean \"model\"?"}},
    {"unknown top no match",
     TOP("  @\"colour\": \"blue\",\n"),
     ZT_ERR_CONFIG,
     {": colour: unknown key; remove it (keys allowed here: name, model, data, train, resources, max_restarts, deepspeed)"}},
    {"deepspeed key at top",
     TOP("  @\"train_batch_size\": 8,\n"),
     ZT_ERR_CONFIG,
     {": train_batch_size: unknown key; it is a DeepSpeed key; move it inside \"deepspeed\""}},
    {"unknown model",
     MODEL(BASE_MODEL ", @\"n_embed\": 8"),
     ZT_ERR_CONFIG,
     {": model.n_embed: unknown key; did you mean \"n_embd\"?"}},
    {"unknown model case",
     MODEL(BASE_MODEL ", @\"Seed\": 8"),
     ZT_ERR_CONFIG,
     {": model.Seed: unknown key; did you mean \"seed\"?"}},
    {"unknown data",
     "{\n" L_MODEL "  \"data\": {@\"training\": \"x\"},\n" L_TRAIN L_DS "}",
     ZT_ERR_CONFIG,
     {": data.training: unknown key; did you mean \"train\"?"}},
    {"unknown train",
     "{\n" L_MODEL L_DATA "  \"train\": {@\"step\": 10},\n" L_DS "}",
     ZT_ERR_CONFIG,
     {": train.step: unknown key; did you mean \"steps\"?"}},
    {"unknown resources",
     TOP("  \"resources\": {@\"rank\": 2},\n"),
     ZT_ERR_CONFIG,
     {": resources.rank: unknown key; did you mean \"ranks\"?"}},
    {"unknown zero",
     DS(",\n    \"zero_optimization\": {\n      \"stage\": 1,\n      @\"stag\": 2}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.stag: unknown key; did you mean \"stage\"?"}},
    {"unknown offload",
     DS(",\n    \"zero_optimization\": {\"offload_optimizer\": {@\"devic\": \"cpu\"}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.offload_optimizer.devic: unknown key; did you mean \"device\"?"}},
    {"unknown adam param",
     DS(",\n    \"optimizer\": {\"type\": \"AdamW\", \"params\": {@\"weight_decy\": 0.1}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.optimizer.params.weight_decy: unknown key; did you mean \"weight_decay\"?"}},
    {"unknown aio",
     DS(",\n    \"aio\": {@\"queue_dept\": 8}"),
     ZT_ERR_CONFIG,
     {": deepspeed.aio.queue_dept: unknown key; did you mean \"queue_depth\"?"}},
    {"unknown tensorboard",
     DS(",\n    \"tensorboard\": {\"enabled\": true, @\"outputpath\": \"tb\"}"),
     ZT_ERR_CONFIG,
     {": deepspeed.tensorboard.outputpath: unknown key; did you mean \"output_path\"?"}},
    {"unknown fp16",
     DS(",\n    \"fp16\": {@\"initial_scale\": 8}"),
     ZT_ERR_CONFIG,
     {": deepspeed.fp16.initial_scale: unknown key; did you mean \"initial_scale_power\"?"}},
    {"sched param of other type",
     DS(",\n    \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 10, \"warmup_num_steps\": 2, @\"warmup_max_lr\": 0.1}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.scheduler.params.warmup_max_lr: unknown key; it is a parameter of WarmupLR and WarmupDecayLR"}},
    {"sched total for WarmupLR",
     DS(",\n    \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {@\"total_num_steps\": 10}}"),
     ZT_ERR_CONFIG,
     {"unknown key; it is a parameter of WarmupDecayLR and WarmupCosineLR"}},

    /* ---- known DeepSpeed keys that zerotrain does not support ---- */
    {"amp",
     DS(",\n    @\"amp\": {\"enabled\": true}"),
     ZT_ERR_CONFIG,
     {": deepspeed.amp: zerotrain does not offer this; remove it or set \"enabled\": false (use fp16 or bf16)"}},
    {"pipeline",
     DS(",\n    @\"pipeline\": {}"),
     ZT_ERR_CONFIG,
     {"deepspeed.pipeline: zerotrain does not offer this; remove it (zerotrain trains with ZeRO data parallelism only"}},
    {"hpz",
     DS(",\n    \"zero_optimization\": {@\"zero_hpz_partition_size\": 8}"),
     ZT_ERR_CONFIG,
     {"does not offer this; remove it or set it to 1"}},
    {"quantized weights",
     DS(",\n    \"zero_optimization\": {@\"zero_quantized_weights\": true}"),
     ZT_ERR_CONFIG,
     {"zero_quantized_weights: zerotrain does not offer this; remove it or set it to false"}},
    {"nvme without a path",
     DS(",\n    \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {@\"device\": \"nvme\"}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.offload_optimizer.device: \"nvme\" needs \"nvme_path\": the directory (on a local disk) where each rank keeps its swap files"}},
    {"nvme parameters without a path",
     DS(",\n    \"zero_optimization\": {\"stage\": 3, \"offload_param\": {@\"device\": \"nvme\"}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.offload_param.device: \"nvme\" needs \"nvme_path\": the directory (on a local disk) where each rank keeps its swap files"}},
    {"nvme parameters at stage 2",
     DS(",\n    \"zero_optimization\": {\"stage\": 2, @\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/x\"}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.offload_param: offloading parameters needs zero_optimization.stage 3 (stage is 2)"}},
    {"aio block size",
     DS(",\n    \"aio\": {@\"block_size\": 5000}"),
     ZT_ERR_CONFIG,
     {": deepspeed.aio.block_size: must be a multiple of 4096 for direct I/O (got 5000); DeepSpeed's default is 1048576"}},
    {"aio queue depth",
     DS(",\n    \"aio\": {@\"queue_depth\": 0}"),
     ZT_ERR_CONFIG,
     {": deepspeed.aio.queue_depth: "}},
    {"lamb",
     DS(",\n    \"optimizer\": {@\"type\": \"Lamb\"}"),
     ZT_ERR_CONFIG,
     {": deepspeed.optimizer.type: \"Lamb\" is an optimizer zerotrain does not offer; use \"AdamW\""}},
    {"onebitadam",
     DS(",\n    \"optimizer\": {@\"type\": \"OneBitAdam\"}"),
     ZT_ERR_CONFIG,
     {"\"OneBitAdam\" is an optimizer zerotrain does not offer"}},
    {"lion",
     DS(",\n    \"optimizer\": {@\"type\": \"Lion\"}"),
     ZT_ERR_CONFIG,
     {"\"Lion\" is an optimizer zerotrain does not offer"}},
    {"typo optimizer",
     DS(",\n    \"optimizer\": {@\"type\": \"Adamm\"}"),
     ZT_ERR_CONFIG,
     {"unknown optimizer \"Adamm\"; did you mean \"Adam\"?"}},
    {"tensor parallel",
     DS(",\n    @\"tensor_parallel\": {\"autotp_size\": 2}"),
     ZT_ERR_CONFIG,
     {": deepspeed.tensor_parallel: zerotrain does not offer this; remove it (zerotrain trains with ZeRO data parallelism only, no tensor parallelism)"}},
    {"amsgrad",
     DS(",\n    \"optimizer\": {\"type\": \"Adam\", \"params\": {@\"amsgrad\": true}}"),
     ZT_ERR_CONFIG,
     {"amsgrad: zerotrain does not offer this; remove it or set it to false"}},
    {"onecycle",
     DS(",\n    \"scheduler\": {@\"type\": \"OneCycle\", \"params\": {}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.scheduler.type: \"OneCycle\" is a schedule zerotrain does not offer"}},
    {"lrrangetest",
     DS(",\n    \"scheduler\": {@\"type\": \"LRRangeTest\"}"),
     ZT_ERR_CONFIG,
     {"\"LRRangeTest\" is a schedule zerotrain does not offer"}},
    {"scheduler case",
     DS(",\n    \"scheduler\": {@\"type\": \"warmuplr\"}"),
     ZT_ERR_CONFIG,
     {"unknown scheduler \"warmuplr\"; did you mean \"WarmupLR\"?"}},
    {"bf16 and alias",
     DS(",\n    \"bf16\": {\"enabled\": true},\n    @\"bfloat16\": {\"enabled\": true}"),
     ZT_ERR_CONFIG,
     {": deepspeed.bfloat16: is another name for \"bf16\", which is also given; keep one"}},

    /* ---- types ---- */
    {"n_layer string",
     MODEL(
         "@\"n_layer\": \"2\", \"n_head\": 2, \"n_embd\": 8, \"block_size\": 16, \"vocab_size\": 100"),
     ZT_ERR_CONFIG,
     {": model.n_layer: must be a positive integer (got \"2\")"}},
    {"n_layer fraction",
     MODEL(
         "@\"n_layer\": 2.5, \"n_head\": 2, \"n_embd\": 8, \"block_size\": 16, \"vocab_size\": 100"),
     ZT_ERR_CONFIG,
     {": model.n_layer: must be a positive integer (got 2.5)"}},
    {"steps huge",
     "{\n" L_MODEL L_DATA "  \"train\": {@\"steps\": 1e30},\n" L_DS "}",
     ZT_ERR_CONFIG,
     {": train.steps: must be a positive integer (got 1e+30)"}},
    {"long string value",
     MODEL(
         "@\"n_layer\": \"0123456789012345678901234567890123456789012345678901234567890123456789\", \"n_head\": 2, \"n_embd\": 8, \"block_size\": 16, \"vocab_size\": 100"),
     ZT_ERR_CONFIG,
     {"model.n_layer: must be a positive integer (got \"012345678901234567890123456789012345678901234567890123456...\")"}},
    {"control chars in value",
     TOP("  \"resources\": {@\"device\": \"g\\tp\\nu\"},\n"),
     ZT_ERR_CONFIG,
     {"resources.device: must be \"cpu\" or \"cuda\" (got \"g?p?u\")"}},
    {"control chars in key",
     TOP("  \"resources\": {@\"ra\\nks\": 1},\n"),
     ZT_ERR_CONFIG,
     {": resources.ra?ks: unknown key; did you mean \"ranks\"?"}},
    {"model not object",
     "{\n  @\"model\": \"gpt2\",\n" L_DATA L_TRAIN L_DS "}",
     ZT_ERR_CONFIG,
     {": model: must be an object {...} (got \"gpt2\")"}},
    {"overlap string",
     DS(",\n    \"zero_optimization\": {@\"overlap_comm\": \"yes\"}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.overlap_comm: must be true or false (got \"yes\")"}},
    {"fp16 enabled 1",
     DS(",\n    \"fp16\": {@\"enabled\": 1}"),
     ZT_ERR_CONFIG,
     {"fp16.enabled: must be true or false (got 1)"}},
    {"lr string",
     DS(",\n    \"optimizer\": {\"type\": \"AdamW\", \"params\": {@\"lr\": \"fast\"}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.optimizer.params.lr: must be a number (got \"fast\")"}},
    {"betas short",
     DS(",\n    \"optimizer\": {\"type\": \"AdamW\", \"params\": {@\"betas\": [0.9]}}"),
     ZT_ERR_CONFIG,
     {"params.betas: must be a list of two numbers [beta1, beta2], each in [0, 1) (got a list of 1)"}},
    {"betas element type",
     DS(",\n    \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9, @\"x\"]}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.optimizer.params.betas[1]: must be a number (got \"x\")"}},
    {"deepspeed number",
     "{\n" L_MODEL L_DATA L_TRAIN "  @\"deepspeed\": 3\n}",
     ZT_ERR_CONFIG,
     {": deepspeed: must be an object {...} or the path of a DeepSpeed JSON file (got 3)"}},
    {"zero_optimization list",
     DS(",\n    @\"zero_optimization\": [1]"),
     ZT_ERR_CONFIG,
     {"must be an object {...} (got an array)"}},
    {"name type", TOP("  @\"name\": 7,\n"), ZT_ERR_CONFIG, {": name: must be a string (got 7)"}},
    {"init empty",
     MODEL(BASE_MODEL ", @\"init\": \"\""),
     ZT_ERR_CONFIG,
     {"model.init: must be a non-empty string"}},

    /* ---- out of range ---- */
    {"n_layer zero",
     MODEL(
         "@\"n_layer\": 0, \"n_head\": 2, \"n_embd\": 8, \"block_size\": 16, \"vocab_size\": 100"),
     ZT_ERR_CONFIG,
     {"model.n_layer: must be a positive integer (got 0)"}},
    {"n_head divides",
     MODEL(
         "\"n_layer\": 2, @\"n_head\": 5, \"n_embd\": 128, \"block_size\": 16, \"vocab_size\": 100"),
     ZT_ERR_CONFIG,
     {": model.n_head: must be a positive integer that divides n_embd (got 5 for n_embd 128)"}},
    {"vocab too big",
     MODEL(
         "\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"block_size\": 16, @\"vocab_size\": 70000"),
     ZT_ERR_CONFIG,
     {": model.vocab_size: must be an integer from 1 to 65536 (got 70000)"}},
    {"padded too small",
     MODEL(BASE_MODEL ", @\"padded_vocab_size\": 64"),
     ZT_ERR_CONFIG,
     {": model.padded_vocab_size: must be >= vocab_size (got 64 for vocab_size 100)"}},
    {"arch",
     MODEL(BASE_MODEL ", @\"arch\": \"llama\""),
     ZT_ERR_CONFIG,
     {": model.arch: unsupported architecture \"llama\"; zerotrain implements \"gpt2\" only"}},
    {"seed negative",
     MODEL(BASE_MODEL ", @\"seed\": -1"),
     ZT_ERR_CONFIG,
     {"model.seed: must be a non-negative integer (got -1)"}},
    {"steps negative",
     "{\n" L_MODEL L_DATA "  \"train\": {@\"steps\": -1},\n" L_DS "}",
     ZT_ERR_CONFIG,
     {"train.steps: must be a positive integer (got -1)"}},
    {"keep negative",
     "{\n" L_MODEL L_DATA "  \"train\": {\"steps\": 1, @\"keep_checkpoints\": -2},\n" L_DS "}",
     ZT_ERR_CONFIG,
     {"train.keep_checkpoints: must be a non-negative integer (got -2)"}},
    {"eval_steps zero",
     "{\n" L_MODEL L_DATA "  \"train\": {\"steps\": 1, @\"eval_steps\": 0},\n" L_DS "}",
     ZT_ERR_CONFIG,
     {"train.eval_steps: must be a positive integer (got 0)"}},
    {"comm timeout zero",
     "{\n" L_MODEL L_DATA "  \"train\": {\"steps\": 1, @\"comm_timeout_ms\": 0},\n" L_DS "}",
     ZT_ERR_CONFIG,
     {"train.comm_timeout_ms: must be an integer from 100 to 86400000 (got 0)"}},
    {"comm timeout too long",
     "{\n" L_MODEL L_DATA "  \"train\": {\"steps\": 1, @\"comm_timeout_ms\": 9e7},\n" L_DS "}",
     ZT_ERR_CONFIG,
     {"train.comm_timeout_ms: must be an integer from 100 to 86400000 (got 9e+07)"}},
    {"comm timeout fraction",
     "{\n" L_MODEL L_DATA "  \"train\": {\"steps\": 1, @\"comm_timeout_ms\": 1500.5},\n" L_DS
     "}",
     ZT_ERR_CONFIG,
     {"train.comm_timeout_ms: must be an integer from 100 to 86400000 (got 1500.5)"}},
    {"comm timeout string",
     "{\n" L_MODEL L_DATA "  \"train\": {\"steps\": 1, @\"comm_timeout_ms\": \"5s\"},\n" L_DS
     "}",
     ZT_ERR_CONFIG,
     {"train.comm_timeout_ms: must be an integer from 100 to 86400000 (got \"5s\")"}},
    {"comm timeout misspelt",
     "{\n" L_MODEL L_DATA "  \"train\": {\"steps\": 1, @\"comm_timeout\": 5000},\n" L_DS "}",
     ZT_ERR_CONFIG,
     {"train.comm_timeout: unknown key", "did you mean \"comm_timeout_ms\"?"}},
    {"max_restarts negative",
     TOP("  @\"max_restarts\": -1,\n"),
     ZT_ERR_CONFIG,
     {": max_restarts: must be a non-negative integer (got -1)"}},
    {"ranks zero",
     TOP("  \"resources\": {@\"ranks\": 0},\n"),
     ZT_ERR_CONFIG,
     {"resources.ranks: must be a positive integer (got 0)"}},
    {"ranks_per_node",
     TOP("  \"resources\": {\"ranks\": 2, @\"ranks_per_node\": 4},\n"),
     ZT_ERR_CONFIG,
     {": resources.ranks_per_node: must be at most ranks (got 4 for ranks 2)"}},
    {"device",
     TOP("  \"resources\": {@\"device\": \"gpu\"},\n"),
     ZT_ERR_CONFIG,
     {": resources.device: must be \"cpu\" or \"cuda\" (got \"gpu\")"}},
    {"name chars",
     TOP("  @\"name\": \"my job\",\n"),
     ZT_ERR_CONFIG,
     {": name: must start with a letter or digit and hold only letters, digits, '-', '_' and '.' (got \"my job\")"}},
    {"stage 4",
     DS(",\n    \"zero_optimization\": {@\"stage\": 4}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.stage: must be an integer from 0 to 3 (got 4)"}},
    {"allgather odd",
     DS(",\n    \"zero_optimization\": {@\"allgather_bucket_size\": 5}"),
     ZT_ERR_CONFIG,
     {"allgather_bucket_size: must be even (got 5)"}},
    {"ratio",
     DS(",\n    \"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\", @\"ratio\": 1.5}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.offload_optimizer.ratio: must be a number in [0, 1] (got 1.5)"}},
    {"offload_param stage 2",
     DS(",\n    \"zero_optimization\": {\"stage\": 2, @\"offload_param\": {\"device\": \"cpu\"}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.zero_optimization.offload_param: offloading parameters needs zero_optimization.stage 3 (stage is 2)"}},
    {"offload device",
     DS(",\n    \"zero_optimization\": {\"offload_optimizer\": {@\"device\": \"gpu\"}}"),
     ZT_ERR_CONFIG,
     {"must be \"none\", \"cpu\" or \"nvme\" (got \"gpu\")"}},
    {"lr negative",
     DS(",\n    \"optimizer\": {\"type\": \"AdamW\", \"params\": {@\"lr\": -0.1}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.optimizer.params.lr: must be a number >= 0 (got -0.1)"}},
    {"eps zero",
     DS(",\n    \"optimizer\": {\"type\": \"AdamW\", \"params\": {@\"eps\": 0}}"),
     ZT_ERR_CONFIG,
     {"params.eps: must be a number > 0 (got 0)"}},
    {"weight decay negative",
     DS(",\n    \"optimizer\": {\"type\": \"AdamW\", \"params\": {@\"weight_decay\": -1}}"),
     ZT_ERR_CONFIG,
     {"must be a number >= 0 (got -1)"}},
    {"beta2 one",
     DS(",\n    \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9, @1.0]}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.optimizer.params.betas[1]: must be a number in [0, 1) (got 1)"}},
    {"beta1 negative",
     DS(",\n    \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [@-0.1, 0.9]}}"),
     ZT_ERR_CONFIG,
     {"betas[0]: must be a number in [0, 1) (got -0.1)"}},
    {"hysteresis",
     DS(",\n    \"fp16\": {\"enabled\": true, @\"hysteresis\": 0}"),
     ZT_ERR_CONFIG,
     {": deepspeed.fp16.hysteresis: must be a positive integer (got 0)"}},
    {"min loss scale",
     DS(",\n    \"fp16\": {\"enabled\": true, @\"min_loss_scale\": 0}"),
     ZT_ERR_CONFIG,
     {"fp16.min_loss_scale: must be a number > 0 (got 0)"}},
    {"loss scale negative",
     DS(",\n    \"fp16\": {@\"loss_scale\": -1}"),
     ZT_ERR_CONFIG,
     {"fp16.loss_scale: must be a number >= 0"}},
    {"scale power",
     DS(",\n    \"fp16\": {@\"initial_scale_power\": 100}"),
     ZT_ERR_CONFIG,
     {"must be an integer from 0 to 64 (got 100)"}},
    {"clipping negative",
     DS(",\n    @\"gradient_clipping\": -1"),
     ZT_ERR_CONFIG,
     {": deepspeed.gradient_clipping: must be a number >= 0 (got -1)"}},
    {"steps_per_print",
     DS(",\n    @\"steps_per_print\": 0"),
     ZT_ERR_CONFIG,
     {"steps_per_print: must be a positive integer (got 0)"}},
    {"warmup negative",
     DS(",\n    \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {@\"warmup_num_steps\": -5}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.scheduler.params.warmup_num_steps: must be a non-negative integer (got -5)"}},
    {"warmup type",
     DS(",\n    \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {@\"warmup_type\": \"cosine\"}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.scheduler.params.warmup_type: must be \"log\" or \"linear\" (got \"cosine\")"}},
    {"cosine without params",
     DS(",\n    @\"scheduler\": {\"type\": \"WarmupCosineLR\"}"),
     ZT_ERR_CONFIG,
     {"scheduler.params.total_num_steps: must be greater than warmup_num_steps (got 10 <= 1000, the default)"}},
    {"cosine total <= warmup",
     DS(",\n    \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {@\"total_num_steps\": 100}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.scheduler.params.total_num_steps: must be greater than warmup_num_steps (got 100 <= 1000, the default)"}},
    {"cos ratio",
     DS(",\n    \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 10, \"warmup_num_steps\": 1, @\"cos_min_ratio\": 2}}"),
     ZT_ERR_CONFIG,
     {"cos_min_ratio: must be a number in [0, 1] (got 2)"}},
    {"scheduler no type",
     DS(",\n    @\"scheduler\": {\"params\": {}}"),
     ZT_ERR_CONFIG,
     {": deepspeed.scheduler.type: missing; add it (\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\")"}},
    {"optimizer no type",
     DS(",\n    @\"optimizer\": {}"),
     ZT_ERR_CONFIG,
     {": deepspeed.optimizer.type: missing; add it"}},

    /* ---- precision ---- */
    {"fp16 and bf16",
     DS(",\n    \"fp16\": {\"enabled\": true},\n    \"bf16\": {@\"enabled\": true}"),
     ZT_ERR_CONFIG,
     {": deepspeed.bf16.enabled: fp16 and bf16 cannot both be enabled", "enable at most one"}},
    {"fp16 and bfloat16",
     DS(",\n    \"bfloat16\": {@\"enabled\": true},\n    \"fp16\": {\"enabled\": true}"),
     ZT_ERR_CONFIG,
     {": deepspeed.bfloat16.enabled: fp16 and bf16 cannot both be enabled"}},
    {"accum bf16 under fp16",
     DS(",\n    \"fp16\": {\"enabled\": true},\n    \"data_types\": {@\"grad_accum_dtype\": \"bf16\"}"),
     ZT_ERR_CONFIG,
     {": deepspeed.data_types.grad_accum_dtype: \"bf16\" does not match the training precision fp16; use \"fp32\" or \"fp16\""}},
    {"accum fp16 under fp32",
     DS(",\n    \"data_types\": {@\"grad_accum_dtype\": \"fp16\"}"),
     ZT_ERR_CONFIG,
     {"\"fp16\" needs fp16 training, but neither fp16 nor bf16 is enabled; use \"fp32\" or enable fp16"}},
    {"accum dtype",
     DS(",\n    \"data_types\": {@\"grad_accum_dtype\": \"int8\"}"),
     ZT_ERR_CONFIG,
     {"must be \"fp32\", \"fp16\" or \"bf16\" (got \"int8\")"}},

    /* ---- missing sections and keys ---- */
    {"no model",
     "@{\n" L_DATA L_TRAIN L_DS "}",
     ZT_ERR_CONFIG,
     {"t.json:1:1: model: missing; add the model"}},
    {"no data", "@{\n" L_MODEL L_TRAIN L_DS "}", ZT_ERR_CONFIG, {"t.json:1:1: data: missing"}},
    {"no data.train",
     "{\n" L_MODEL "  @\"data\": {\"val\": \"v.bin\"},\n" L_TRAIN L_DS "}",
     ZT_ERR_CONFIG,
     {": data.train: missing; add it (a glob of training shards"}},
    {"no steps",
     "{\n" L_MODEL L_DATA "  @\"train\": {\"eval_every\": 5},\n" L_DS "}",
     ZT_ERR_CONFIG,
     {": train.steps: missing; add it"}},
    {"no n_embd",
     "{\n  @\"model\": {\"n_layer\": 2, \"n_head\": 2, \"block_size\": 16, \"vocab_size\": 100},\n" L_DATA
         L_TRAIN L_DS "}",
     ZT_ERR_CONFIG,
     {": model.n_embd: missing; add it (a positive integer)"}},
    {"no deepspeed",
     "{\n" L_MODEL L_DATA "  \"train\": {\"steps\": 10}\n}",
     ZT_ERR_CONFIG,
     {"t.json:1:1: deepspeed: missing; add the DeepSpeed config"}},
    {"no batch",
     DSRAW("\n    @\"gradient_accumulation_steps\": 2"),
     ZT_ERR_CONFIG,
     {"deepspeed: give train_batch_size or train_micro_batch_size_per_gpu"}},
    {"batch zero",
     DSRAW("\n    @\"train_batch_size\": 0"),
     ZT_ERR_CONFIG,
     {": deepspeed.train_batch_size: must be a positive integer (got 0)"}},

    /* ---- the batch triad (ranks 2) ---- */
    {"triad all three",
     "{\n" L_MODEL L_DATA L_TRAIN
     "  \"resources\": {\"ranks\": 2},\n  \"deepspeed\": {@\"train_batch_size\": 33, \"train_micro_batch_size_per_gpu\": 17, \"gradient_accumulation_steps\": 2}\n}",
     ZT_ERR_CONFIG,
     {": deepspeed: train_batch_size 33 != train_micro_batch_size_per_gpu 17 * gradient_accumulation_steps 2 * ranks 2; make train_batch_size = micro * accumulation * ranks, or give only two of the three"}},
    {"triad derived zero",
     "{\n" L_MODEL L_DATA L_TRAIN
     "  \"resources\": {\"ranks\": 2},\n  \"deepspeed\": {\"train_micro_batch_size_per_gpu\": 17, @\"train_batch_size\": 33}\n}",
     ZT_ERR_CONFIG,
     {"deepspeed: train_batch_size 33 != train_micro_batch_size_per_gpu 17 * gradient_accumulation_steps 0 (derived) * ranks 2; train_batch_size must be a positive multiple of train_micro_batch_size_per_gpu * ranks = 34"}},
};

/* Finds the '@' marker: copies text without it into out and returns its line:col (0:0 when
 * there is none). Columns count bytes, which is right for the ASCII texts above. */
/* ---- accepted with a note in the start-up summary (DeepSpeed's rules) ---- */

typedef struct ok_case {
    const char *name;
    const char *text;
    const char *notes[2]; /* substrings of job.ds.notes ("" = no check) */
} ok_case;

static const ok_case ok_cases[] = {
    {"hybrid engine off by default",
     DS(",\n    \"hybrid_engine\": {}, \"amp\": {\"enabled\": false}"),
     {""}},
    {"unknown ds",
     DS(",\n    \"gradient_accumulation\": 2"),
     {"ignored (DeepSpeed does not know them either): deepspeed.gradient_accumulation (did you mean \"gradient_accumulation_steps\"?)"}},
    {"unknown ds micro",
     DSRAW("\n    \"train_micro_batch_size\": 2"),
     {"did you mean \"train_micro_batch_size_per_gpu\"?"}},
    {"unknown actckpt",
     DS(",\n    \"activation_checkpointing\": {\"partition_activation\": true}"),
     {"deepspeed.activation_checkpointing.partition_activation (did you mean \"partition_activations\"?)"}},
    {"tensorboard on",
     DS(",\n    \"tensorboard\": {\"enabled\": true}"),
     {"no effect here: deepspeed.tensorboard: the metrics go to the coordinator"}},
    {"checkpoint",
     DS(",\n    \"checkpoint\": {\"load_universal\": true}"),
     {"no effect here: deepspeed.checkpoint: checkpoints are set in the job's train section"}},
    {"wall clock on",
     DS(",\n    \"wall_clock_breakdown\": true"),
     {""}},
    {"prescale on",
     DS(",\n    \"prescale_gradients\": true"),
     {"no effect here: deepspeed.prescale_gradients = true: the averaged gradient is the same"}},
    {"predivide",
     DS(",\n    \"gradient_predivide_factor\": 1.0"),
     {""}},
    {"comm dtype",
     DS(",\n    \"communication_data_type\": \"fp16\""),
     {"no effect here: deepspeed.communication_data_type = \"fp16\""}},
    {"sub_group_size",
     DS(",\n    \"zero_optimization\": {\"stage\": 3, \"sub_group_size\": 1e9}"),
     {""}},
    {"round robin on",
     DS(",\n    \"zero_optimization\": {\"round_robin_gradients\": true}"),
     {"no effect here: deepspeed.zero_optimization.round_robin_gradients = true"}},
    {"cpu_offload legacy",
     DS(",\n    \"zero_optimization\": {\"cpu_offload\": true}"),
     {""}},
    {"nvme path without nvme",
     DS(",\n    \"zero_optimization\": {\"offload_param\": {\"nvme_path\": \"/nvme\"}}"),
     {""}},
    {"max_grad_norm",
     DS(",\n    \"optimizer\": {\"type\": \"Adam\", \"params\": {\"max_grad_norm\": 1.0}}"),
     {""}},
    {"torch_adam",
     DS(",\n    \"optimizer\": {\"type\": \"Adam\", \"params\": {\"torch_adam\": true}}"),
     {"deepspeed.optimizer.params.torch_adam = true"}},
    {"legacy_fusion",
     DS(",\n    \"optimizer\": {\"type\": \"Adam\", \"legacy_fusion\": true}"),
     {"deepspeed.optimizer.legacy_fusion = true"}},
    {"last_batch_iteration",
     DS(",\n    \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"last_batch_iteration\": 5}}"),
     {"deepspeed.scheduler.params.last_batch_iteration = 5: the schedule is restored from checkpoints"}},
    {"auto_cast on",
     DS(",\n    \"fp16\": {\"enabled\": true, \"auto_cast\": true}"),
     {"deepspeed.fp16.auto_cast = true"}},
    {"bf16 immediate",
     DS(",\n    \"bf16\": {\"immediate_grad_update\": true}"),
     {"deepspeed.bf16.immediate_grad_update = true"}},
    {"comm timeout in deepspeed",
     DS(", \"comm_timeout_ms\": 5000"),
     {"ignored (DeepSpeed does not know them either): deepspeed.comm_timeout_ms"}},
    {"bucket zero",
     DS(",\n    \"zero_optimization\": {\"reduce_bucket_size\": 0}"),
     {"deepspeed.zero_optimization.reduce_bucket_size = 0"}},
    {"decay without total",
     DS(",\n    \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_num_steps\": 5}}"),
     {"auto: deepspeed.scheduler.params.total_num_steps = 10 (the job's train.steps)"}},
    {"empty deepspeed",
     "{\n" L_MODEL L_DATA L_TRAIN "  \"deepspeed\": {}\n}",
     {"auto: deepspeed.train_micro_batch_size_per_gpu = the largest that fits the rank's memory"}},
};

static void test_ok_cases(void)
{
    for (size_t i = 0; i < sizeof(ok_cases) / sizeof(ok_cases[0]); i++) {
        const ok_case *oc = &ok_cases[i];
        zt_job job;
        zt_err err;
        zt_err_clear(&err);
        zt_status st = zt_job_parse(&job, oc->text, "t.json", "/base", &err);
        if (st != ZT_OK) ZT_FAIL("case \"%s\": %s", oc->name, err.msg);
        for (int k = 0; k < 2 && oc->notes[k]; k++)
            if (!strstr(job.ds.notes, oc->notes[k]))
                ZT_FAIL("case \"%s\": notes \"%s\" do not contain \"%s\"", oc->name,
                        job.ds.notes, oc->notes[k]);
    }
    printf("  %zu configs DeepSpeed accepts are accepted, with their notes\n",
           sizeof(ok_cases) / sizeof(ok_cases[0]));
}

static void strip_marker(const char *text, char *out, int *line, int *col)
{
    int l = 1, c = 1;
    *line = *col = 0;
    for (; *text; text++) {
        if (*text == '@' && *line == 0) {
            *line = l;
            *col = c;
            continue;
        }
        *out++ = *text;
        if (*text == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *out = '\0';
}

static void test_bad_cases(void)
{
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const bad_case *bc = &bad_cases[i];
        char *text = zt_malloc(strlen(bc->text) + 1);
        int line, col;
        strip_marker(bc->text, text, &line, &col);
        zt_job job;
        memset(&job, 0x5a, sizeof(job));
        zt_err err;
        zt_err_clear(&err);
        zt_status st = zt_job_parse(&job, text, "t.json", "/base", &err);
        if (st != bc->status)
            ZT_FAIL("case \"%s\": status %s, want %s (message: %s)\n%s", bc->name,
                    zt_status_name(st), zt_status_name(bc->status), err.msg, text);
        ASSERT_EQ_INT(err.status, st);
        char prefix[64];
        if (line)
            snprintf(prefix, sizeof(prefix), "t.json:%d:%d: ", line, col);
        else
            snprintf(prefix, sizeof(prefix), "t.json");
        if (strncmp(err.msg, prefix, strlen(prefix)) != 0)
            ZT_FAIL("case \"%s\": message \"%s\" does not start with \"%s\"", bc->name, err.msg,
                    prefix);
        for (int k = 0; k < 3 && bc->want[k]; k++)
            if (!strstr(err.msg, bc->want[k]))
                ZT_FAIL("case \"%s\": message \"%s\" does not contain \"%s\"", bc->name, err.msg,
                        bc->want[k]);
        /* a failed parse leaves no half-filled job behind */
        zt_job zero;
        memset(&zero, 0, sizeof(zero));
        ASSERT_TRUE(memcmp(&job, &zero, sizeof(job)) == 0);
        zt_free(text);
    }
    printf("  %zu bad job texts rejected with the expected messages\n",
           sizeof(bad_cases) / sizeof(bad_cases[0]));
}

/* ---- valid jobs ---- */

static void parse_ok(zt_job *job, const char *text, const char *base)
{
    zt_err err;
    zt_err_clear(&err);
    zt_status st = zt_job_parse(job, text, "t.json", base, &err);
    if (st != ZT_OK) ZT_FAIL("parse failed: %s\n%s", err.msg, text);
}

/* zt_job_to_json, then zt_job_parse of that text, gives back the same struct, and writing it
 * again gives the same text. */
static void check_round_trip(const zt_job *job)
{
    char *json = zt_job_to_json(job);
    ASSERT_TRUE(json != NULL);
    zt_job back;
    zt_err err;
    zt_err_clear(&err);
    zt_status st = zt_job_parse(&back, json, "roundtrip", job->base_dir, &err);
    if (st != ZT_OK) ZT_FAIL("re-parse failed: %s\n%s", err.msg, json);
    zt_job a = *job;
    memset(a.job_path, 0, sizeof(a.job_path));
    if (memcmp(&a, &back, sizeof(a)) != 0) {
        size_t off = 0;
        while (((const unsigned char *)&a)[off] == ((const unsigned char *)&back)[off])
            off++;
        char *json2 = zt_job_to_json(&back);
        ZT_FAIL("round trip changed the job at byte %zu (ds starts at %zu):\n%s\nvs\n%s", off,
                offsetof(zt_job, ds), json, json2 ? json2 : "(null)");
    }
    char *json2 = zt_job_to_json(&back);
    ASSERT_STREQ(json, json2);
    zt_free(json);
    zt_free(json2);
}

static void test_minimal_defaults(void)
{
    zt_job job;
    parse_ok(&job, MINIMAL, "/base/dir");
    ASSERT_STREQ(job.name, "job");
    ASSERT_STREQ(job.job_path, "");
    ASSERT_STREQ(job.base_dir, "/base/dir");
    ASSERT_STREQ(job.model.arch, "gpt2");
    ASSERT_EQ_INT(job.model.n_layer, 2);
    ASSERT_EQ_INT(job.model.n_head, 2);
    ASSERT_EQ_INT(job.model.n_embd, 8);
    ASSERT_EQ_INT(job.model.block_size, 16);
    ASSERT_EQ_INT(job.model.vocab_size, 100);
    ASSERT_EQ_INT(job.model.padded_vocab_size, 128);
    ASSERT_TRUE(job.model.init_random);
    ASSERT_STREQ(job.model.init_path, "");
    ASSERT_EQ_INT(job.model.seed, 1337);
    ASSERT_STREQ(job.data.train, "/base/dir/d/train_*.bin");
    ASSERT_STREQ(job.data.val, "");
    ASSERT_EQ_INT(job.train.steps, 10);
    ASSERT_EQ_INT(job.train.eval_every, 0);
    ASSERT_EQ_INT(job.train.eval_steps, 10);
    ASSERT_EQ_INT(job.train.checkpoint_every, 0);
    ASSERT_STREQ(job.train.checkpoint_dir, "/base/dir/ckpt/job");
    ASSERT_EQ_INT(job.train.keep_checkpoints, 3);
    ASSERT_EQ_INT(job.train.comm_timeout_ms, 300000);
    ASSERT_EQ_INT(job.resources.ranks, 1);
    ASSERT_EQ_INT(job.resources.ranks_per_node, 1);
    ASSERT_EQ_INT(job.resources.device, ZT_DEVICE_CPU);
    ASSERT_EQ_INT(job.max_restarts, 0);

    const zt_ds_cfg *d = &job.ds;
    ASSERT_EQ_INT(d->given_train_batch_size, 0);
    ASSERT_EQ_INT(d->given_micro_batch, 2);
    ASSERT_EQ_INT(d->given_grad_accum, 0);
    ASSERT_EQ_INT(d->train_batch_size, 2);
    ASSERT_EQ_INT(d->micro_batch, 2);
    ASSERT_EQ_INT(d->grad_accum, 1);
    ASSERT_EQ_INT(d->world_size, 1);
    ASSERT_EQ_INT(d->optimizer.type, ZT_OPTIM_ADAMW);
    ASSERT_TRUE(d->optimizer.adam_w_mode);
    ASSERT_NEAR(d->optimizer.lr, 1e-3, 0, 0);
    ASSERT_NEAR(d->optimizer.beta1, 0.9, 0, 0);
    ASSERT_NEAR(d->optimizer.beta2, 0.999, 0, 0);
    ASSERT_NEAR(d->optimizer.eps, 1e-8, 0, 0);
    ASSERT_NEAR(d->optimizer.weight_decay, 0, 0, 0);
    ASSERT_EQ_INT(d->scheduler.type, ZT_SCHED_NONE);
    ASSERT_NEAR(d->scheduler.warmup_min_lr, 0, 0, 0);
    ASSERT_NEAR(d->scheduler.warmup_max_lr, 0.001, 0, 0);
    ASSERT_EQ_INT(d->scheduler.warmup_num_steps, 1000);
    ASSERT_EQ_INT(d->scheduler.warmup_type, ZT_WARMUP_LOG);
    ASSERT_EQ_INT(d->scheduler.total_num_steps, 0);
    ASSERT_NEAR(d->scheduler.warmup_min_ratio, 0, 0, 0);
    ASSERT_NEAR(d->scheduler.cos_min_ratio, 1e-4, 0, 0);
    ASSERT_NEAR(d->gradient_clipping, 0, 0, 0);
    ASSERT_TRUE(!d->fp16.enabled);
    ASSERT_NEAR(d->fp16.loss_scale, 0, 0, 0);
    ASSERT_EQ_INT(d->fp16.initial_scale_power, 16);
    ASSERT_EQ_INT(d->fp16.loss_scale_window, 1000);
    ASSERT_EQ_INT(d->fp16.hysteresis, 2);
    ASSERT_TRUE(!d->fp16.consecutive_hysteresis);
    ASSERT_NEAR(d->fp16.min_loss_scale, 1, 0, 0);
    ASSERT_TRUE(!d->bf16);
    ASSERT_EQ_INT(d->precision, ZT_PREC_FP32);
    ASSERT_EQ_INT(d->zero.stage, 0);
    ASSERT_EQ_INT(d->zero.reduce_bucket_size, 500000000);
    ASSERT_EQ_INT(d->zero.allgather_bucket_size, 500000000);
    ASSERT_TRUE(!d->zero.overlap_comm);
    ASSERT_TRUE(d->zero.contiguous_gradients);
    ASSERT_TRUE(!d->zero.offload_optimizer.enabled);
    ASSERT_TRUE(!d->zero.offload_optimizer.pin_memory);
    ASSERT_NEAR(d->zero.offload_optimizer.ratio, 1.0, 0, 0);
    ASSERT_TRUE(!d->zero.offload_param.enabled);
    ASSERT_EQ_INT(d->zero.stage3_prefetch_bucket_size, 50000000);
    ASSERT_EQ_INT(d->zero.stage3_param_persistence_threshold, 100000);
    ASSERT_TRUE(!d->activation_checkpointing.enabled);
    ASSERT_TRUE(!d->activation_checkpointing.partition_activations);
    ASSERT_TRUE(!d->activation_checkpointing.cpu_checkpointing);
    ASSERT_TRUE(d->grad_accum_fp32);
    ASSERT_EQ_INT(d->steps_per_print, 10);
    check_round_trip(&job);

    /* base_dir NULL is the current directory; a relative one is taken from it */
    char cwd[ZT_PATH_MAX], want[ZT_PATH_MAX + 32];
    ASSERT_TRUE(getcwd(cwd, sizeof(cwd)) != NULL);
    parse_ok(&job, MINIMAL, NULL);
    ASSERT_STREQ(job.base_dir, cwd);
    snprintf(want, sizeof(want), "%s/d/train_*.bin", strcmp(cwd, "/") ? cwd : "");
    ASSERT_STREQ(job.data.train, want);
    parse_ok(&job, MINIMAL, "sub/./dir/");
    snprintf(want, sizeof(want), "%s/sub/dir", strcmp(cwd, "/") ? cwd : "");
    ASSERT_STREQ(job.base_dir, want);
}

static void test_full_fixture(void)
{
    zt_job job;
    zt_err err;
    zt_err_clear(&err);
    const char *dir = ZT_JOBFILES_DIR;
    char path[ZT_PATH_MAX], want[3 * ZT_PATH_MAX];
    snprintf(path, sizeof(path), "%s/full.json", dir);
    zt_status st = zt_job_load(&job, path, &err);
    if (st != ZT_OK) ZT_FAIL("load %s: %s", path, err.msg);
    ASSERT_STREQ(job.job_path, path);
    ASSERT_STREQ(job.base_dir, dir);
    ASSERT_STREQ(job.name, "full-run_1");
    ASSERT_EQ_INT(job.model.n_layer, 4);
    ASSERT_EQ_INT(job.model.n_head, 4);
    ASSERT_EQ_INT(job.model.n_embd, 128);
    ASSERT_EQ_INT(job.model.block_size, 64);
    ASSERT_EQ_INT(job.model.vocab_size, 300);
    ASSERT_EQ_INT(job.model.padded_vocab_size, 512);
    ASSERT_TRUE(!job.model.init_random);
    snprintf(want, sizeof(want), "%s/models/init.bin", dir);
    ASSERT_STREQ(job.model.init_path, want);
    ASSERT_EQ_INT(job.model.seed, 42);
    snprintf(want, sizeof(want), "%s/data/synth_train_*.bin", dir);
    ASSERT_STREQ(job.data.train, want);
    snprintf(want, sizeof(want), "%s/data/synth_val_*.bin", dir);
    ASSERT_STREQ(job.data.val, want);
    ASSERT_EQ_INT(job.train.steps, 200);
    ASSERT_EQ_INT(job.train.eval_every, 50);
    ASSERT_EQ_INT(job.train.eval_steps, 5);
    ASSERT_EQ_INT(job.train.checkpoint_every, 25);
    ASSERT_STREQ(job.train.checkpoint_dir, "/tmp/zt-ckpt/full");
    ASSERT_EQ_INT(job.train.keep_checkpoints, 0);
    ASSERT_EQ_INT(job.train.comm_timeout_ms, 45000);
    ASSERT_EQ_INT(job.resources.ranks, 4);
    ASSERT_EQ_INT(job.resources.ranks_per_node, 2);
    ASSERT_EQ_INT(job.resources.device, ZT_DEVICE_CUDA);
    ASSERT_EQ_INT(job.max_restarts, 3);

    const zt_ds_cfg *d = &job.ds;
    ASSERT_EQ_INT(d->given_train_batch_size, 64);
    ASSERT_EQ_INT(d->given_micro_batch, 0);
    ASSERT_EQ_INT(d->given_grad_accum, 2);
    ASSERT_EQ_INT(d->train_batch_size, 64);
    ASSERT_EQ_INT(d->micro_batch, 8);
    ASSERT_EQ_INT(d->grad_accum, 2);
    ASSERT_EQ_INT(d->world_size, 4);
    ASSERT_EQ_INT(d->steps_per_print, 5);
    ASSERT_NEAR(d->gradient_clipping, 1.0, 0, 0);
    /* "adam" (any case) with adam_w_mode false is L2 Adam */
    ASSERT_EQ_INT(d->optimizer.type, ZT_OPTIM_ADAM);
    ASSERT_TRUE(!d->optimizer.adam_w_mode);
    ASSERT_NEAR(d->optimizer.lr, 3e-4, 0, 0);
    ASSERT_NEAR(d->optimizer.beta1, 0.8, 0, 0);
    ASSERT_NEAR(d->optimizer.beta2, 0.95, 0, 0);
    ASSERT_NEAR(d->optimizer.eps, 1e-6, 0, 0);
    ASSERT_NEAR(d->optimizer.weight_decay, 0.1, 0, 0);
    ASSERT_EQ_INT(d->scheduler.type, ZT_SCHED_WARMUP_DECAY_LR);
    ASSERT_NEAR(d->scheduler.warmup_min_lr, 1e-5, 0, 0);
    ASSERT_NEAR(d->scheduler.warmup_max_lr, 3e-4, 0, 0);
    ASSERT_EQ_INT(d->scheduler.warmup_num_steps, 20);
    ASSERT_EQ_INT(d->scheduler.warmup_type, ZT_WARMUP_LINEAR);
    ASSERT_EQ_INT(d->scheduler.total_num_steps, 200);
    ASSERT_TRUE(d->fp16.enabled);
    ASSERT_EQ_INT(d->fp16.initial_scale_power, 12);
    ASSERT_EQ_INT(d->fp16.loss_scale_window, 500);
    ASSERT_EQ_INT(d->fp16.hysteresis, 3);
    ASSERT_TRUE(d->fp16.consecutive_hysteresis);
    ASSERT_NEAR(d->fp16.min_loss_scale, 0.5, 0, 0);
    ASSERT_TRUE(!d->bf16);
    ASSERT_EQ_INT(d->precision, ZT_PREC_FP16);
    ASSERT_EQ_INT(d->zero.stage, 2);
    ASSERT_EQ_INT(d->zero.reduce_bucket_size, 200000000); /* 2e8, a JSON real */
    ASSERT_EQ_INT(d->zero.allgather_bucket_size, 200000000);
    ASSERT_TRUE(d->zero.overlap_comm);
    ASSERT_TRUE(!d->zero.contiguous_gradients);
    ASSERT_TRUE(d->zero.offload_optimizer.enabled);
    ASSERT_TRUE(d->zero.offload_optimizer.pin_memory);
    ASSERT_NEAR(d->zero.offload_optimizer.ratio, 0.25, 0, 0);
    ASSERT_TRUE(!d->zero.offload_param.enabled);
    ASSERT_EQ_INT(d->zero.stage3_prefetch_bucket_size, 1000);
    ASSERT_EQ_INT(d->zero.stage3_param_persistence_threshold, 10);
    ASSERT_TRUE(d->activation_checkpointing.enabled);
    ASSERT_TRUE(d->activation_checkpointing.partition_activations);
    ASSERT_TRUE(!d->activation_checkpointing.cpu_checkpointing);
    ASSERT_TRUE(!d->grad_accum_fp32);
    check_round_trip(&job);

    /* Re-resolving for other world sizes keeps the given values (TB 64, GAS 2). */
    ASSERT_OK(zt_job_resolve_batch(&job, 8, &err));
    ASSERT_EQ_INT(d->micro_batch, 4);
    ASSERT_EQ_INT(d->world_size, 8);
    ASSERT_EQ_INT(d->given_micro_batch, 0);
    ASSERT_EQ_INT(zt_job_resolve_batch(&job, 3, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(
        err.msg,
        "deepspeed: train_batch_size 64 != train_micro_batch_size_per_gpu 10 (derived) * gradient_accumulation_steps 2 * ranks 3");
    ASSERT_CONTAINS(err.msg, "multiple of gradient_accumulation_steps * ranks = 6");
    ASSERT_EQ_INT(d->micro_batch, 4); /* a failed resolution changes nothing */
    ASSERT_EQ_INT(d->world_size, 8);
    ASSERT_OK(zt_job_resolve_batch(&job, 32, &err));
    ASSERT_EQ_INT(d->micro_batch, 1);
    ASSERT_EQ_INT(zt_job_resolve_batch(&job, 64, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "train_micro_batch_size_per_gpu 0 (derived)");
    ASSERT_EQ_INT(zt_job_resolve_batch(&job, 0, &err), ZT_ERR_INVALID);
    ASSERT_EQ_INT(zt_job_resolve_batch(NULL, 1, &err), ZT_ERR_INVALID);
}

static void test_dsfile(void)
{
    zt_job job;
    zt_err err;
    zt_err_clear(&err);
    char path[ZT_PATH_MAX], want[3 * ZT_PATH_MAX];
    /* Load through a relative path from another directory: everything still resolves
     * against the job file's own directory. */
    char cwd[ZT_PATH_MAX];
    ASSERT_TRUE(getcwd(cwd, sizeof(cwd)) != NULL);
    ASSERT_TRUE(chdir(ZT_JOBFILES_DIR "/ds") == 0);
    zt_status st = zt_job_load(&job, "../with_dsfile.json", &err);
    ASSERT_TRUE(chdir(cwd) == 0);
    if (st != ZT_OK) ZT_FAIL("load with_dsfile.json: %s", err.msg);
    snprintf(want, sizeof(want), "%s/with_dsfile.json", ZT_JOBFILES_DIR);
    ASSERT_STREQ(job.job_path, want);
    ASSERT_STREQ(job.base_dir, ZT_JOBFILES_DIR);
    ASSERT_STREQ(job.name, "with_dsfile");
    snprintf(want, sizeof(want), "%s/train_*.bin", ZT_JOBFILES_DIR);
    ASSERT_STREQ(job.data.train, want);
    snprintf(want, sizeof(want), "%s/ckpt/with_dsfile", ZT_JOBFILES_DIR);
    ASSERT_STREQ(job.train.checkpoint_dir, want);
    const zt_ds_cfg *d = &job.ds;
    ASSERT_EQ_INT(d->given_micro_batch, 3);
    ASSERT_EQ_INT(d->given_grad_accum, 0); /* "auto" */
    ASSERT_EQ_INT(d->train_batch_size, 6);
    ASSERT_EQ_INT(d->grad_accum, 1);
    ASSERT_TRUE(d->bf16);
    ASSERT_EQ_INT(d->precision, ZT_PREC_BF16);
    ASSERT_TRUE(d->grad_accum_fp32); /* fp32 by default with bf16 */
    ASSERT_EQ_INT(d->optimizer.type, ZT_OPTIM_ADAMW);
    ASSERT_NEAR(d->optimizer.lr, 1e-3, 0, 0); /* "auto" */
    ASSERT_NEAR(d->optimizer.weight_decay, 0.01, 0, 0);
    ASSERT_EQ_INT(d->scheduler.type, ZT_SCHED_WARMUP_COSINE_LR);
    ASSERT_EQ_INT(d->scheduler.total_num_steps, 10);
    ASSERT_EQ_INT(d->scheduler.warmup_num_steps, 2);
    ASSERT_NEAR(d->scheduler.warmup_min_ratio, 0.1, 0, 0);
    ASSERT_NEAR(d->scheduler.cos_min_ratio, 0.01, 0, 0);
    ASSERT_EQ_INT(d->zero.stage, 3);
    ASSERT_TRUE(d->zero.overlap_comm); /* stage 3 default */
    ASSERT_TRUE(d->zero.offload_optimizer.enabled);
    ASSERT_TRUE(!d->zero.offload_optimizer.pin_memory);
    ASSERT_TRUE(d->zero.offload_param.enabled);
    ASSERT_TRUE(d->zero.offload_param.pin_memory);
    check_round_trip(&job);

    /* an error inside the DeepSpeed file names that file and its own line:col */
    snprintf(path, sizeof(path), "%s/bad_dsfile.json", ZT_JOBFILES_DIR);
    ASSERT_EQ_INT(zt_job_load(&job, path, &err), ZT_ERR_CONFIG);
    snprintf(want, sizeof(want),
             "%s/ds/bad.json:5:8: zero_optimization.stag: unknown key; did you mean \"stage\"?",
             ZT_JOBFILES_DIR);
    ASSERT_STREQ(err.msg, want);

    snprintf(path, sizeof(path), "%s/syntax_dsfile.json", ZT_JOBFILES_DIR);
    ASSERT_EQ_INT(zt_job_load(&job, path, &err), ZT_ERR_CONFIG);
    snprintf(want, sizeof(want), "%s/ds/syntax.json:3:25: invalid token near 'tru'",
             ZT_JOBFILES_DIR);
    ASSERT_STREQ(err.msg, want);

    /* a missing DeepSpeed file points at the "deepspeed" key of the job file */
    snprintf(path, sizeof(path), "%s/missing_dsfile.json", ZT_JOBFILES_DIR);
    ASSERT_EQ_INT(zt_job_load(&job, path, &err), ZT_ERR_NOT_FOUND);
    snprintf(
        want, sizeof(want),
        "%s:5:3: deepspeed: %s/ds/nope.json: cannot open DeepSpeed config: No such file or directory",
        path, ZT_JOBFILES_DIR);
    ASSERT_CONTAINS(err.msg, want);
    ASSERT_CONTAINS(err.msg, "relative paths resolve against " ZT_JOBFILES_DIR);

    /* a DeepSpeed path in a job parsed from text resolves against the given base_dir */
    parse_ok(&job, "{\n" L_MODEL L_DATA L_TRAIN "  \"deepspeed\": \"ds/zero3_offload.json\"\n}",
             ZT_JOBFILES_DIR);
    ASSERT_EQ_INT(job.ds.zero.stage, 3);
}

static void test_load_errors(void)
{
    zt_job job;
    zt_err err;
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_job_load(&job, "/nonexistent/dir/job.json", &err), ZT_ERR_NOT_FOUND);
    ASSERT_STREQ(
        err.msg,
        "/nonexistent/dir/job.json: cannot open job file: No such file or directory; check the path");

    ASSERT_EQ_INT(zt_job_load(&job, ZT_JOBFILES_DIR "/empty.json", &err), ZT_ERR_CONFIG);
    ASSERT_STREQ(err.msg, ZT_JOBFILES_DIR
                 "/empty.json: the job file is empty; it must hold one JSON object {...}");
    ASSERT_EQ_INT(zt_job_load(&job, ZT_JOBFILES_DIR "/blank.json", &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "blank.json: the job file holds only whitespace");

    ASSERT_EQ_INT(zt_job_load(&job, ZT_JOBFILES_DIR, &err), ZT_ERR_IO);
    ASSERT_CONTAINS(err.msg, "is a directory, not a job file");

    ASSERT_EQ_INT(zt_job_load(&job, "", &err), ZT_ERR_INVALID);
    ASSERT_EQ_INT(zt_job_load(NULL, "x", &err), ZT_ERR_INVALID);
    ASSERT_EQ_INT(zt_job_parse(&job, NULL, "x", NULL, &err), ZT_ERR_INVALID);
    /* a NULL error record is allowed */
    ASSERT_EQ_INT(zt_job_parse(&job, "{}", "x", NULL, NULL), ZT_ERR_CONFIG);

    /* columns count characters like jansson's: "é" is two bytes but one column */
    ASSERT_EQ_INT(
        zt_job_parse(&job, "{\"name\": \"\xc3\xa9\", \"modle\": {}}", "t.json", "/", &err),
        ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "\nt.json:1:15: modle: unknown key; did you mean \"model\"?");
    ASSERT_EQ_INT(zt_job_parse(&job, "{\"name\": \"\xc3\xa9\", x}", "t.json", "/", &err),
                  ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "t.json:1:15: ");

    /* five different problems, one in each of five places, come back together in file order;
     * a sixth key with a typo in a lenient block is only named in the summary */
    const char *five =
        "{\n"
        "  \"model\": {\"n_layer\": 0, \"n_head\": 4, \"n_embd\": 128, \"block_size\": 64, \"vocab_size\": 256},\n"
        "  \"data\": {\"train\": \"d/*.bin\"},\n"
        "  \"train\": {\"steps\": 10, \"precision\": \"fp8\"},\n"
        "  \"deepspeed\": {\"train_micro_batch_size_per_gpu\": 2,\n"
        "    \"optimizer\": {\"type\": \"Lamb\"},\n"
        "    \"zero_optimization\": {\"stage\": 3, \"stag3_prefetch\": 1, \"zero_quantized_gradients\": true}}\n"
        "}\n";
    ASSERT_EQ_INT(zt_job_parse(&job, five, "t.json", "/", &err), ZT_ERR_CONFIG);
    const char *want[] = {
        "t.json:2:13: model.n_layer: must be a positive integer (got 0)\n",
        "t.json:4:26: train.precision: must be \"fp32\", \"bf16\" or \"fp16\" (got \"fp8\")\n",
        "t.json:6:19: deepspeed.optimizer.type: \"Lamb\" is an optimizer zerotrain does not offer",
        "t.json:7:39: deepspeed.zero_optimization.stag3_prefetch: unknown key",
        "t.json:7:60: deepspeed.zero_optimization.zero_quantized_gradients: zerotrain does not offer this",
    };
    const char *at = err.msg;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const char *hit = strstr(at, want[i]);
        if (!hit) ZT_FAIL("problem %zu \"%s\" not found in order in:\n%s", i, want[i], err.msg);
        at = hit + 1;
    }
    ASSERT_TRUE(strstr(err.msg, "Lamb") != NULL && strchr(err.msg, '\n') != NULL);

    /* the coordinator's parse opens no file a job names: a "deepspeed" path is a problem
     * that says what to do, and the same config inline is read as usual */
    ASSERT_EQ_INT(zt_job_parse_inline(&job,
                                      "{\n" L_MODEL L_DATA L_TRAIN
                                      "  \"deepspeed\": \"/etc/shadow\"\n}\n",
                                      "t.json", "/", &err),
                  ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "t.json:5:3: deepspeed: names a file, and the coordinator opens no file a job names; submit with 'zctl submit'");
    ASSERT_EQ_INT(zt_job_parse_inline(&job, MINIMAL, "t.json", "/", &err), ZT_OK);

    /* a file far larger than any job file is refused before it is parsed */
    char tmpd[] = "/tmp/zt_jobfile_XXXXXX";
    ASSERT_TRUE(mkdtemp(tmpd) != NULL);
    char big[ZT_PATH_MAX];
    snprintf(big, sizeof(big), "%s/big.json", tmpd);
    FILE *bf = fopen(big, "w");
    ASSERT_TRUE(bf != NULL);
    fputc('{', bf);
    static char spaces[1 << 16];
    memset(spaces, ' ', sizeof(spaces));
    for (int i = 0; i < 17 * 16; i++)
        fwrite(spaces, 1, sizeof(spaces), bf);
    fputc('}', bf);
    fclose(bf);
    zt_status bst = zt_job_load(&job, big, &err);
    unlink(big);
    rmdir(tmpd);
    ASSERT_EQ_INT(bst, ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "big.json: the job file is larger than 16 MiB");

    /* a UTF-8 byte order mark at the start is skipped (with a note on the log); positions in
     * messages count from after it, as an editor that hides it shows them */
    char bomd[] = "/tmp/zt_jobfile_XXXXXX";
    ASSERT_TRUE(mkdtemp(bomd) != NULL);
    char bomp[ZT_PATH_MAX];
    snprintf(bomp, sizeof(bomp), "%s/bom.json", bomd);
    FILE *bomf = fopen(bomp, "w");
    ASSERT_TRUE(bomf != NULL);
    fputs("\xef\xbb\xbf" MINIMAL, bomf);
    fclose(bomf);
    zt_status bomst = zt_job_load(&job, bomp, &err);
    if (bomst != ZT_OK) ZT_FAIL("a job file with a BOM: %s", err.msg);
    ASSERT_EQ_INT(job.train.steps, 10);
    bomf = fopen(bomp, "w");
    ASSERT_TRUE(bomf != NULL);
    fputs("\xef\xbb\xbf{\"modle\": {}}", bomf);
    fclose(bomf);
    bomst = zt_job_load(&job, bomp, &err);
    unlink(bomp);
    rmdir(bomd);
    ASSERT_EQ_INT(bomst, ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "bom.json:1:2: modle: unknown key");

    /* an unreadable file (skipped when running as root, who can read anything) */
    if (geteuid() != 0) {
        char tmpl[] = "/tmp/zt_jobfile_XXXXXX";
        ASSERT_TRUE(mkdtemp(tmpl) != NULL);
        char p[ZT_PATH_MAX];
        snprintf(p, sizeof(p), "%s/j.json", tmpl);
        FILE *f = fopen(p, "w");
        ASSERT_TRUE(f != NULL);
        fputs(MINIMAL, f);
        fclose(f);
        chmod(p, 0);
        zt_status st = zt_job_load(&job, p, &err);
        unlink(p);
        rmdir(tmpl);
        ASSERT_EQ_INT(st, ZT_ERR_IO);
        ASSERT_CONTAINS(err.msg, "Permission denied");
    }
}

/* ---- the batch triad: DeepSpeed's TestBatchConfig table (world size 2), every subset ---- */

typedef struct triad_case {
    int64_t tb, mb, gas;
    /* expected result for subsets {all, tb+mb, tb+gas, mb+gas}: 1 = resolves to (tb, mb,
     * gas) exactly, 0 = fails, -1 = resolves but to other values */
    int outcome[4];
} triad_case;

static void test_triad(void)
{
    static const triad_case cases[] = {
        {32, 16, 1, {1, 1, 1, 1}},
        {32, 8, 2, {1, 1, 1, 1}},
        {33, 17, 2, {0, 0, 0, -1}},  /* mb+gas gives tb 68 */
        {32, 18, 1, {0, 0, -1, -1}}, /* tb+gas gives mb 16; mb+gas gives tb 36 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const triad_case *tc = &cases[i];
        for (int s = 0; s < 4; s++) {
            zt_job job;
            memset(&job, 0, sizeof(job));
            job.ds.given_train_batch_size = s != 3 ? tc->tb : 0;
            job.ds.given_micro_batch = s != 2 ? tc->mb : 0;
            job.ds.given_grad_accum = s != 1 ? tc->gas : 0;
            zt_err err;
            zt_err_clear(&err);
            zt_status st = zt_job_resolve_batch(&job, 2, &err);
            bool exact = st == ZT_OK && job.ds.train_batch_size == tc->tb &&
                         job.ds.micro_batch == tc->mb && job.ds.grad_accum == tc->gas;
            int got = st != ZT_OK ? 0 : exact ? 1 : -1;
            if (got != tc->outcome[s])
                ZT_FAIL(
                    "triad %lld/%lld/%lld subset %d: outcome %d, want %d (%s; got %lld/%lld/%lld)",
                    (long long)tc->tb, (long long)tc->mb, (long long)tc->gas, s, got,
                    tc->outcome[s], err.msg, (long long)job.ds.train_batch_size,
                    (long long)job.ds.micro_batch, (long long)job.ds.grad_accum);
            if (st != ZT_OK) {
                ASSERT_EQ_INT(st, ZT_ERR_CONFIG);
                /* the message names all three values and the world size */
                ASSERT_CONTAINS(err.msg, "train_batch_size ");
                ASSERT_CONTAINS(err.msg, "train_micro_batch_size_per_gpu ");
                ASSERT_CONTAINS(err.msg, "gradient_accumulation_steps ");
                ASSERT_CONTAINS(err.msg, "* ranks 2;");
                ASSERT_EQ_INT(job.ds.world_size, 0);
            } else {
                ASSERT_EQ_INT(job.ds.world_size, 2);
                ASSERT_EQ_INT(job.ds.train_batch_size, job.ds.micro_batch * job.ds.grad_accum * 2);
            }
        }
        /* single values: tb only gives gas 1, mb = tb / ws; mb only gives tb = mb * ws */
        zt_job job;
        memset(&job, 0, sizeof(job));
        zt_err err;
        job.ds.given_train_batch_size = tc->tb;
        zt_status st = zt_job_resolve_batch(&job, 2, &err);
        ASSERT_EQ_INT(st, tc->tb % 2 == 0 ? ZT_OK : ZT_ERR_CONFIG);
        if (st == ZT_OK) {
            ASSERT_EQ_INT(job.ds.grad_accum, 1);
            ASSERT_EQ_INT(job.ds.micro_batch, tc->tb / 2);
        } else {
            ASSERT_CONTAINS(err.msg, "must be a positive multiple of ranks 2");
        }
        memset(&job, 0, sizeof(job));
        job.ds.given_micro_batch = tc->mb;
        ASSERT_OK(zt_job_resolve_batch(&job, 2, &err));
        ASSERT_EQ_INT(job.ds.train_batch_size, tc->mb * 2);
        ASSERT_EQ_INT(job.ds.grad_accum, 1);
    }
    /* gas alone is not enough */
    zt_job job;
    memset(&job, 0, sizeof(job));
    job.ds.given_grad_accum = 4;
    zt_err err;
    ASSERT_EQ_INT(zt_job_resolve_batch(&job, 2, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "give train_batch_size or train_micro_batch_size_per_gpu");
    /* products that overflow are inconsistencies, not wrap-arounds */
    job.ds.given_micro_batch = INT64_MAX / 2;
    ASSERT_EQ_INT(zt_job_resolve_batch(&job, 4, &err), ZT_ERR_CONFIG);
    /* the parser resolves for resources.ranks */
    parse_ok(
        &job,
        "{\n" L_MODEL L_DATA L_TRAIN
        "  \"resources\": {\"ranks\": 2},\n  \"deepspeed\": {\"train_batch_size\": 32, \"gradient_accumulation_steps\": 2}\n}",
        "/b");
    ASSERT_EQ_INT(job.ds.micro_batch, 8);
    ASSERT_EQ_INT(job.ds.world_size, 2);
    check_round_trip(&job);
}

/* Values that are accepted: "auto", disabled switches, numbers written as reals, aliases. */
static void test_accepted(void)
{
    zt_job job;
    parse_ok(
        &job,
        DSRAW(
            "\n    \"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": 4,\n"
            "    \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\",\n"
            "    \"steps_per_print\": \"auto\", \"wall_clock_breakdown\": false,\n"
            "    \"memory_breakdown\": false, \"dump_state\": false, \"prescale_gradients\": false,\n"
            "    \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\", \"eps\": \"auto\", \"weight_decay\": \"auto\"}},\n"
            "    \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": \"auto\", \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\"}},\n"
            "    \"fp16\": {\"enabled\": \"auto\", \"auto_cast\": false, \"loss_scale_window\": \"auto\"},\n"
            "    \"bf16\": {\"enabled\": \"auto\"},\n"
            "    \"zero_optimization\": {\"stage\": \"auto\", \"sub_group_size\": \"auto\", \"reduce_bucket_size\": \"auto\",\n"
            "                          \"stage3_gather_16bit_weights_on_model_save\": false, \"zero_hpz_partition_size\": 1},\n"
            "    \"flops_profiler\": {\"enabled\": false, \"profile_step\": 1},\n"
            "    \"comms_logger\": {\"enabled\": false}\n  "),
        "/b");
    ASSERT_EQ_INT(job.ds.given_train_batch_size, 0);
    ASSERT_EQ_INT(job.ds.given_grad_accum, 0);
    ASSERT_EQ_INT(job.ds.train_batch_size, 4);
    ASSERT_NEAR(job.ds.optimizer.lr, 1e-3, 0, 0);
    ASSERT_NEAR(job.ds.optimizer.beta2, 0.999, 0, 0);
    ASSERT_EQ_INT(job.ds.scheduler.type, ZT_SCHED_WARMUP_LR);
    ASSERT_EQ_INT(job.ds.scheduler.warmup_num_steps, 1000);
    ASSERT_TRUE(!job.ds.fp16.enabled);
    ASSERT_EQ_INT(job.ds.fp16.loss_scale_window, 1000);
    ASSERT_EQ_INT(job.ds.zero.stage, 0);
    /* Hugging Face's fill for an "auto" bucket: n_embd^2 */
    ASSERT_EQ_INT(job.ds.zero.reduce_bucket_size, (int64_t)job.model.n_embd * job.model.n_embd);
    ASSERT_CONTAINS(job.ds.notes, "auto: deepspeed.zero_optimization.reduce_bucket_size = ");
    ASSERT_CONTAINS(job.ds.notes, "auto: deepspeed.optimizer.params.lr = 0.001 (DeepSpeed's default)");
    ASSERT_EQ_INT(job.ds.steps_per_print, 10);
    check_round_trip(&job);

    /* "auto" micro batch with the global batch and the accumulation given: derived, as
     * DeepSpeed derives it, not planned */
    parse_ok(&job,
             DSRAW("\n    \"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,\n"
                   "    \"train_micro_batch_size_per_gpu\": \"auto\""),
             "/b");
    ASSERT_TRUE(!job.ds.micro_auto);
    ASSERT_EQ_INT(job.ds.micro_batch, 8);
    /* the job's train section fills what the config leaves "auto": precision, batch sizes,
     * schedule lengths; an explicit value that disagrees is a problem naming both */
    parse_ok(&job,
             "{\n" L_MODEL L_DATA
             "  \"train\": {\"steps\": 50, \"batch_size\": 8, \"warmup_steps\": 5, \"precision\": \"bf16\"},\n"
             "  \"deepspeed\": {\"train_micro_batch_size_per_gpu\": \"auto\", \"train_batch_size\": \"auto\",\n"
             "    \"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"},\n"
             "    \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}}}\n}\n",
             "/b");
    ASSERT_TRUE(job.ds.bf16 && !job.ds.fp16.enabled);
    ASSERT_EQ_INT(job.ds.precision, ZT_PREC_BF16);
    ASSERT_EQ_INT(job.ds.given_train_batch_size, 8);
    ASSERT_TRUE(job.ds.micro_auto);
    ASSERT_EQ_INT(job.ds.scheduler.warmup_num_steps, 5);
    ASSERT_EQ_INT(job.ds.scheduler.total_num_steps, 50);
    ASSERT_CONTAINS(job.ds.notes, "auto: deepspeed.bf16.enabled = true (the job's train.precision)");
    ASSERT_CONTAINS(job.ds.notes, "auto: deepspeed.scheduler.params.total_num_steps = 50 (the job's train.steps)");
    ASSERT_CONTAINS(job.ds.notes, "auto: deepspeed.train_batch_size = 8 (the job's train.batch_size)");
    check_round_trip(&job);
    zt_err err;
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_job_parse(&job,
                               "{\n" L_MODEL L_DATA
                               "  \"train\": {\"steps\": 5, \"batch_size\": 8, \"precision\": \"fp16\"},\n"
                               "  \"deepspeed\": {\"train_batch_size\": 16, \"bf16\": {\"enabled\": true}}\n}\n",
                               "t.json", "/", &err),
                  ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "deepspeed.train_batch_size: is 16 but the job's train.batch_size is 8");
    ASSERT_CONTAINS(err.msg, "deepspeed.bf16: enables bf16 but the job's train.precision is \"fp16\"");

    /* legacy "zero_optimization": true is stage 1; "bfloat16" is bf16; "Adam" is AdamW;
     * bf16 may accumulate in bf16 */
    parse_ok(&job,
             DS(",\n    \"zero_optimization\": true, \"bfloat16\": {\"enabled\": true},\n"
                "    \"optimizer\": {\"type\": \"Adam\", \"params\": {\"weight_decay\": 0.1}},\n"
                "    \"data_types\": {\"grad_accum_dtype\": \"bf16\"}, \"gradient_clipping\": 0.5"),
             "/b");
    ASSERT_EQ_INT(job.ds.zero.stage, 1);
    ASSERT_TRUE(!job.ds.zero.overlap_comm);
    ASSERT_TRUE(job.ds.bf16);
    ASSERT_EQ_INT(job.ds.precision, ZT_PREC_BF16);
    ASSERT_TRUE(!job.ds.grad_accum_fp32);
    ASSERT_EQ_INT(job.ds.optimizer.type, ZT_OPTIM_ADAMW);
    ASSERT_TRUE(job.ds.optimizer.adam_w_mode);
    ASSERT_NEAR(job.ds.gradient_clipping, 0.5, 0, 0);
    check_round_trip(&job);

    /* "AdamW" stays decoupled even with adam_w_mode false (DeepSpeed's rule); fp16 accumulates
     * in fp16 by default; WarmupLR with every parameter */
    parse_ok(
        &job,
        DS(",\n    \"optimizer\": {\"type\": \"ADAMW\", \"params\": {\"adam_w_mode\": false, \"lr\": 0.1, \"betas\": [0, 0.5]}},\n"
           "    \"fp16\": {\"enabled\": true, \"loss_scale\": 128},\n"
           "    \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.01, \"warmup_max_lr\": 0.1, \"warmup_num_steps\": 0, \"warmup_type\": \"log\", \"last_batch_iteration\": -1}}"),
        "/b");
    ASSERT_EQ_INT(job.ds.optimizer.type, ZT_OPTIM_ADAMW);
    ASSERT_TRUE(job.ds.optimizer.adam_w_mode);
    ASSERT_NEAR(job.ds.optimizer.beta1, 0, 0, 0);
    ASSERT_TRUE(job.ds.fp16.enabled);
    ASSERT_NEAR(job.ds.fp16.loss_scale, 128, 0, 0);
    ASSERT_TRUE(!job.ds.grad_accum_fp32);
    ASSERT_EQ_INT(job.ds.scheduler.warmup_num_steps, 0);
    ASSERT_NEAR(job.ds.scheduler.warmup_min_lr, 0.01, 0, 0);
    check_round_trip(&job);

    /* zero_optimization stage 3 with offload_param and an explicit overlap_comm false;
     * model.init path and a name; awkward doubles survive the round trip */
    parse_ok(
        &job,
        "{\n  \"name\": \"r.2\",\n  \"model\": {" BASE_MODEL
        ", \"init\": \"/abs/m.bin\", \"seed\": 9007199254740993},\n" L_DATA
        "  \"train\": {\"steps\": 3, \"checkpoint_dir\": \"c\\\"q\\\\d\"},\n"
        "  \"deepspeed\": {\"train_micro_batch_size_per_gpu\": 1,\n"
        "    \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.1, \"eps\": 1.0000000000000002e-300, \"weight_decay\": -0.0}},\n"
        "    \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": false, \"offload_param\": {\"device\": \"none\"}},\n"
        "    \"activation_checkpointing\": {}}\n}",
        "/b");
    ASSERT_STREQ(job.name, "r.2");
    ASSERT_TRUE(!job.model.init_random);
    ASSERT_STREQ(job.model.init_path, "/abs/m.bin");
    ASSERT_EQ_INT(job.model.seed, 9007199254740993LL);
    ASSERT_STREQ(job.train.checkpoint_dir, "/b/c\"q\\d");
    ASSERT_EQ_INT(job.ds.zero.stage, 3);
    ASSERT_TRUE(!job.ds.zero.overlap_comm);
    ASSERT_TRUE(job.ds.activation_checkpointing.enabled);
    check_round_trip(&job);

    /* NVMe optimizer offload: the path resolved against the job's directory, the buffer count
     * and the aio block kept through the round trip */
    parse_ok(&job,
             "{\n  \"name\": \"nv\",\n  \"model\": {" BASE_MODEL "},\n" L_DATA
             "  \"train\": {\"steps\": 3},\n"
             "  \"deepspeed\": {\"train_micro_batch_size_per_gpu\": 1,\n"
             "    \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", "
             "\"nvme_path\": \"swap\", \"buffer_count\": 3, \"ratio\": 0.5}},\n"
             "    \"aio\": {\"block_size\": 262144, \"queue_depth\": 16, \"single_submit\": true}}\n}",
             "/b");
    ASSERT_TRUE(job.ds.zero.offload_optimizer.enabled);
    ASSERT_TRUE(job.ds.zero.offload_optimizer.nvme);
    ASSERT_STREQ(job.ds.zero.offload_optimizer.nvme_path, "/b/swap");
    ASSERT_EQ_INT(job.ds.zero.offload_optimizer.buffer_count, 3);
    ASSERT_EQ_INT(job.ds.aio.block_size, 262144);
    ASSERT_EQ_INT(job.ds.aio.queue_depth, 16);
    ASSERT_EQ_INT(job.ds.aio.thread_count, 1);
    ASSERT_TRUE(job.ds.aio.single_submit);
    ASSERT_TRUE(job.ds.aio.overlap_events);
    check_round_trip(&job);

    /* NVMe parameter offload (stage 3): its path, buffers and host-memory share */
    parse_ok(&job,
             "{\n  \"name\": \"nvp\",\n  \"model\": {" BASE_MODEL "},\n" L_DATA
             "  \"train\": {\"steps\": 3},\n"
             "  \"deepspeed\": {\"train_micro_batch_size_per_gpu\": 1,\n"
             "    \"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", "
             "\"nvme_path\": \"pswap\", \"buffer_count\": 3, \"buffer_size\": 1e6, "
             "\"max_in_cpu\": 5000, \"pin_memory\": true}}}\n}",
             "/b");
    ASSERT_TRUE(job.ds.zero.offload_param.enabled);
    ASSERT_TRUE(job.ds.zero.offload_param.nvme);
    ASSERT_TRUE(!job.ds.zero.offload_optimizer.enabled);
    ASSERT_STREQ(job.ds.zero.offload_param.nvme_path, "/b/pswap");
    ASSERT_EQ_INT(job.ds.zero.offload_param.buffer_count, 3);
    ASSERT_EQ_INT(job.ds.zero.offload_param.buffer_size, 1000000);
    ASSERT_EQ_INT(job.ds.zero.offload_param.max_in_cpu, 5000);
    check_round_trip(&job);
}

/* Every allocation failing in turn: errors come back, nothing crashes or leaks (ASan). */
static void test_alloc_failures(void)
{
    char path[ZT_PATH_MAX];
    snprintf(path, sizeof(path), "%s/bad_dsfile.json", ZT_JOBFILES_DIR);
    zt_job job;
    zt_err err;
    for (long n = 0; n < 40; n++) {
        zt_alloc_fail_after(n);
        zt_status st = zt_job_load(&job, path, &err);
        zt_alloc_fail_after(-1);
        ASSERT_TRUE(st == ZT_ERR_CONFIG || st == ZT_ERR_NOMEM);
    }
    ASSERT_OK(zt_job_parse(&job, MINIMAL, "t", "/b", &err));
    for (long n = 0; n < 8; n++) {
        zt_alloc_fail_after(n);
        char *json = zt_job_to_json(&job);
        zt_alloc_fail_after(-1);
        zt_free(json);
    }
}

int main(void)
{
    test_bad_cases();
    test_ok_cases();
    test_minimal_defaults();
    test_full_fixture();
    test_dsfile();
    test_load_errors();
    test_triad();
    test_accepted();
    test_alloc_failures();
    printf("test_jobfile: ok\n");
    return 0;
}
