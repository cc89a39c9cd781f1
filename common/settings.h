/* zerotrain: the table of every ZT_* environment variable the programs read: its name, type,
 * default, bounds and what it does (the same words as docs/env.md, which tests/common/
 * test_settings.c holds to it). Every read of a ZT_* variable goes through zt_setting_*. */
#ifndef ZT_COMMON_SETTINGS_H
#define ZT_COMMON_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>

/* How a value is read. The accessors that warn and fall back (zt_setting_int, _real, _bool,
 * _choice) parse INT, REAL, BOOL and CHOICE; the other types are read by their programs'
 * own parsers (zcoord, zagent), which refuse a bad value with an error naming its origin. */
typedef enum {
    ZT_SETTING_STR,      /* any text */
    ZT_SETTING_INT,      /* a decimal integer in [min, max] */
    ZT_SETTING_REAL,     /* a number in (min, max] */
    ZT_SETTING_BOOL,     /* 0 or 1 */
    ZT_SETTING_CHOICE,   /* one of the '|'-separated choices */
    ZT_SETTING_DURATION, /* a number with ms, s, m or h; bounds in ms */
    ZT_SETTING_SIZE,     /* bytes; zcoord's take B, KiB, MiB, GiB; bounds in bytes */
    ZT_SETTING_LIST,     /* ':'-separated items */
} zt_setting_type;

/* Who sets a variable, and a flag for its warning. */
enum {
    ZT_SETTING_USER = 0,   /* the user, or a deployment */
    ZT_SETTING_PARENT = 1, /* a process's inputs, set by zagent or zctl run */
    ZT_SETTING_HOOK = 2,   /* read by the product, set only by tests */
    ZT_SETTING_USE_MASK = 3,
    ZT_SETTING_ONCE = 4, /* a bad value warns once per process, not at each read */
};

/* X(ID, name, type, use, default, min, max, choices, subsystem, expected, what it does)
 *   default  the value an unset or empty variable means ("": none; the caller decides)
 *   choices  CHOICE: the accepted values, '|'-separated
 *   subsys   the log subsystem of the warning a bad value gives (NULL: "settings")
 *   expected the warning's words after "expected " (NULL: made from the type and bounds)
 *   what     the "effect" column of docs/env.md, word for word
 * The rows follow docs/env.md's order: its main table, then its test hooks. */
/* one row a variable, its words on the line below; clang-format would spread them wide */
/* clang-format off */
#define ZT_SETTINGS(X) \
    X(COORDINATOR, "ZT_COORDINATOR", ZT_SETTING_STR, ZT_SETTING_USER, "127.0.0.1:50051", 0, 0, NULL, NULL, NULL, \
      "`zctl`, `zagent`: the coordinator's gRPC address (`host:port` or `unix:/path`); `--coordinator`") \
    X(TOKEN, "ZT_TOKEN", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zctl`: a user token; `zagent`: the agent join token; `zcoord`: the token of user `admin`; each where no token file is given. `zagent` removes it from its workers' environment") \
    X(TOKEN_FILE, "ZT_TOKEN_FILE", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "the same read from a file; `--token-file`. Without any token `zcoord` binds loopback only. The file must be a regular file that only its owner may access (`chmod 600`), holding one line of 16 to 4096 printable ASCII characters without spaces (one trailing newline is dropped, nothing else); anything else is refused at start-up with the reason") \
    X(USERS_FILE, "ZT_USERS_FILE", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zcoord`: file of named user tokens, one `NAME TOKEN` per line (`#` comments), owner-only like a token file; `--users-file`. Events and jobs name the user") \
    X(AGENT_TOKEN_FILE, "ZT_AGENT_TOKEN_FILE", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zcoord`: file holding the agent join token, with which `zagent` registers and gets its agent key; `--agent-token-file`. Without it, a `zcoord` that has user tokens takes no agents") \
    X(AGENT_TOKEN, "ZT_AGENT_TOKEN", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zcoord`: the agent join token itself, where no `--agent-token-file` is given") \
    X(TLS_CA, "ZT_TLS_CA", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zctl`, `zagent`: PEM CA certificate; talk TLS to the coordinator and verify it; `--tls-ca`") \
    X(LOG_LEVEL, "ZT_LOG_LEVEL", ZT_SETTING_CHOICE, ZT_SETTING_USER | ZT_SETTING_ONCE, "info", 0, 0, "error|warn|info|debug", "log", "error, warn, info or debug", \
      "every program: `error`, `warn`, `info` or `debug`; `--log-level` for `zcoord` and `zagent`") \
    X(DB, "ZT_DB", ZT_SETTING_STR, ZT_SETTING_USER, "zerotrain.db", 0, 0, NULL, NULL, NULL, \
      "`zcoord`: the SQLite database file; `--db`. One `zcoord` per database: it holds an exclusive lock on `<db>.lock` (its pid and addresses inside) while it runs, and a second one exits naming the first") \
    X(GRPC_ADDR, "ZT_GRPC_ADDR", ZT_SETTING_STR, ZT_SETTING_USER, "127.0.0.1:50051", 0, 0, NULL, NULL, NULL, \
      "`zcoord`: gRPC listen address (port 0 picks one); `--grpc`") \
    X(HTTP_ADDR, "ZT_HTTP_ADDR", ZT_SETTING_STR, ZT_SETTING_USER, "127.0.0.1:8080", 0, 0, NULL, NULL, NULL, \
      "`zcoord`: HTTP listen address of the dashboard, `/api/v1`, `/metrics` and `/healthz` (`off`: none); `--http`") \
    X(TLS_CERT, "ZT_TLS_CERT", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zcoord`: PEM certificate chain; serve TLS (gRPC and HTTP); `zagent`: its client certificate for mutual TLS (the common name is its name); `--tls-cert`") \
    X(TLS_KEY, "ZT_TLS_KEY", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zcoord`, `zagent`: PEM private key for `ZT_TLS_CERT` (`zagent` refuses a key file others may read); `--tls-key`") \
    X(TLS_CLIENT_CA, "ZT_TLS_CLIENT_CA", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zcoord`: PEM roots of agents' client certificates (mutual TLS): a certificate for NAME stands for agent NAME's join token and agent key; `--tls-client-ca`") \
    X(HEARTBEAT_INTERVAL, "ZT_HEARTBEAT_INTERVAL", ZT_SETTING_DURATION, ZT_SETTING_USER, "1s", 50, 60000, NULL, NULL, NULL, \
      "`zcoord`: how often agents heartbeat (50 ms to 60 s); `--heartbeat-interval`") \
    X(HEARTBEAT_TIMEOUT, "ZT_HEARTBEAT_TIMEOUT", ZT_SETTING_DURATION, ZT_SETTING_USER, "10s", 200, 3600000, NULL, NULL, NULL, \
      "`zcoord`: silence after which an agent is LOST and its attempts fail; `--heartbeat-timeout`") \
    X(HANG_TIMEOUT, "ZT_HANG_TIMEOUT", ZT_SETTING_DURATION, ZT_SETTING_USER, "10m", 500, 86400000, NULL, NULL, NULL, \
      "`zcoord`: no step progress after which an attempt fails as hung; `--hang-timeout`") \
    X(RESTART_BACKOFF, "ZT_RESTART_BACKOFF", ZT_SETTING_DURATION, ZT_SETTING_USER, "2s", 0, 3600000, NULL, NULL, NULL, \
      "`zcoord`: delay before a job's first restart, doubled at each restart; `--restart-backoff`") \
    X(RESTART_BACKOFF_MAX, "ZT_RESTART_BACKOFF_MAX", ZT_SETTING_DURATION, ZT_SETTING_USER, "5m", 0, 86400000, NULL, NULL, NULL, \
      "`zcoord`: the longest restart delay; `--restart-backoff-max`") \
    X(MAX_MESSAGE, "ZT_MAX_MESSAGE", ZT_SETTING_SIZE, ZT_SETTING_USER, "4MiB", 4096, 1 << 30, NULL, NULL, NULL, \
      "`zcoord`: the largest RPC message accepted; `--max-message`") \
    X(POLLERS, "ZT_POLLERS", ZT_SETTING_INT, ZT_SETTING_USER, "2", 1, 64, NULL, NULL, NULL, \
      "`zcoord`: threads polling the gRPC completion queue; `--pollers`") \
    X(METRICS_MAX_POINTS, "ZT_METRICS_MAX_POINTS", ZT_SETTING_INT, ZT_SETTING_USER, "2000", 10, 10000000, NULL, NULL, NULL, \
      "`zcoord`: stored metric rows per job before downsampling; `--metrics-max-points`") \
    X(LOGS_MAX_LINES, "ZT_LOGS_MAX_LINES", ZT_SETTING_INT, ZT_SETTING_USER, "100000", 100, 100000000, NULL, NULL, NULL, \
      "`zcoord`: stored log lines per job (the oldest are dropped); `--logs-max-lines`") \
    X(MAX_LOG_STREAMS, "ZT_MAX_LOG_STREAMS", ZT_SETTING_INT, ZT_SETTING_USER, "64", 1, 100000, NULL, NULL, NULL, \
      "`zcoord`: `GetLogs` streams (`zctl logs -f`) open at once; `--max-log-streams`") \
    X(MAX_WATCHERS, "ZT_MAX_WATCHERS", ZT_SETTING_INT, ZT_SETTING_USER, "1024", 1, 1000000, NULL, NULL, NULL, \
      "`zcoord`: `WatchJob` and `Health.Watch` streams open at once; `--max-watchers`") \
    X(MAX_WATCHERS_PER_JOB, "ZT_MAX_WATCHERS_PER_JOB", ZT_SETTING_INT, ZT_SETTING_USER, "64", 1, 1000000, NULL, NULL, NULL, \
      "`zcoord`: `WatchJob` streams open at once on one job; `--max-watchers-per-job`") \
    X(MAX_RDZV_WAITERS, "ZT_MAX_RDZV_WAITERS", ZT_SETTING_INT, ZT_SETTING_USER, "16384", 1, 10000000, NULL, NULL, NULL, \
      "`zcoord`: `Rendezvous` calls waiting at once; `--max-rdzv-waiters`") \
    X(MAX_RDZV_WAITERS_PER_RANK, "ZT_MAX_RDZV_WAITERS_PER_RANK", ZT_SETTING_INT, ZT_SETTING_USER, "2", 1, 1000, NULL, NULL, NULL, \
      "`zcoord`: `Rendezvous` calls waiting on one attempt, per rank of it; `--max-rdzv-waiters-per-rank`") \
    X(READY_FILE, "ZT_READY_FILE", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zcoord`: writes `{\"grpc\": ADDR, \"http\": ADDR, \"pid\": N}` there once serving; `--ready-file`") \
    X(SLOTS, "ZT_SLOTS", ZT_SETTING_STR, ZT_SETTING_USER, "cpu:1", 0, 0, NULL, NULL, NULL, \
      "`zagent`: `cpu:N`, `cuda:auto` (one per GPU found) or `cuda:N`; `--slots`") \
    X(AGENT_NAME, "ZT_AGENT_NAME", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zagent`: agent name, unique per node and stable across restarts; `--name`") \
    X(WORK_DIR, "ZT_WORK_DIR", ZT_SETTING_STR, ZT_SETTING_USER, "zagent-work", 0, 0, NULL, NULL, NULL, \
      "`zagent`: per-attempt job files and rank logs (`attempt_<id>/rank_NNNNN.log`); `--work-dir`") \
    X(WORKER, "ZT_WORKER", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zagent` (`--worker`) and `zctl run`: the `zworker` binary to start") \
    X(HEARTBEAT_MS, "ZT_HEARTBEAT_MS", ZT_SETTING_INT, ZT_SETTING_USER, "0", 0, 60000, NULL, NULL, NULL, \
      "`zagent`: heartbeat interval in ms, 50 to 60000; `--heartbeat-ms`") \
    X(ADVERTISE_HOST, "ZT_ADVERTISE_HOST", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zagent`: the address peers use to reach this node's rank-0 worker; `--advertise-host`") \
    X(STOP_GRACE, "ZT_STOP_GRACE", ZT_SETTING_DURATION, ZT_SETTING_USER, "10s", 0, 3600000, NULL, NULL, NULL, \
      "`zagent`: SIGTERM to SIGKILL when a worker is stopped; `--stop-grace`") \
    X(LOG_QUEUE, "ZT_LOG_QUEUE", ZT_SETTING_INT, ZT_SETTING_USER, "10000", 10, 10000000, NULL, NULL, NULL, \
      "`zagent`: worker output lines queued for the coordinator before new ones are dropped; `--log-queue`") \
    X(STATUS_FILE, "ZT_STATUS_FILE", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zagent`: rewrite this JSON file with the agent's state after each heartbeat; `--status-file`") \
    X(ALLOW_PATH, "ZT_ALLOW_PATH", ZT_SETTING_LIST, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zagent`: `:`-separated directories the paths of a job (data globs and the files they match, `model.init`, `train.checkpoint_dir`, `train.resume_from`, the CSV monitor's `output_path`, the checkpoint an attempt resumes from) must resolve inside, symbolic links followed; otherwise the attempt fails, not retried, before any worker starts, and the job's logs say which path and why. Each must exist at start-up; `--allow-path DIR`, repeatable (flags replace the variable)") \
    X(RUN_AS, "ZT_RUN_AS", ZT_SETTING_STR, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zagent` running as root: start workers as this user (name or uid), with its groups and `HOME`, `USER`, `LOGNAME`; the attempt directory is handed to it. A non-root `zagent` may only name itself; `--run-as`") \
    X(ALLOW_ROOT, "ZT_ALLOW_ROOT", ZT_SETTING_BOOL, ZT_SETTING_USER, "", 0, 0, NULL, NULL, NULL, \
      "`zagent`: `1` lets a root `zagent` without `--run-as` start (its workers then run as root); without it, or `--run-as`, a root `zagent` refuses to start; `--allow-root`") \
    X(RANK, "ZT_RANK", ZT_SETTING_INT, ZT_SETTING_PARENT, "0", 0, 1 << 24, NULL, NULL, NULL, \
      "`zworker`: this process's rank (set by `zagent` and `zctl run`)") \
    X(WORLD_SIZE, "ZT_WORLD_SIZE", ZT_SETTING_INT, ZT_SETTING_PARENT, "1", 0, 1 << 24, NULL, NULL, NULL, \
      "`zworker`: the number of ranks (set by `zagent` and `zctl run`)") \
    X(LOCAL_RANK, "ZT_LOCAL_RANK", ZT_SETTING_INT, ZT_SETTING_PARENT, "0", 0, 1 << 24, NULL, NULL, NULL, \
      "`zworker`: the rank on this node; on CUDA, the GPU it uses (set by `zagent` and `zctl run`)") \
    X(LOCAL_WORLD_SIZE, "ZT_LOCAL_WORLD_SIZE", ZT_SETTING_INT, ZT_SETTING_PARENT, "", 0, 1 << 24, NULL, NULL, NULL, \
      "`zworker`: ranks on this node, which share its memory when the micro batch is `\"auto\"`") \
    X(RENDEZVOUS, "ZT_RENDEZVOUS", ZT_SETTING_STR, ZT_SETTING_PARENT, "", 0, 0, NULL, NULL, NULL, \
      "`zworker`: `tcp://host:port` of rank 0, where the ranks meet (set by `zagent` and `zctl run`)") \
    X(SESSION, "ZT_SESSION", ZT_SETTING_STR, ZT_SETTING_PARENT, "", 0, 0, NULL, NULL, NULL, \
      "`zworker`: the attempt's id; ranks of different attempts never connect to each other") \
    X(REPORT_FD, "ZT_REPORT_FD", ZT_SETTING_INT, ZT_SETTING_PARENT, "", 0, 1 << 24, NULL, NULL, NULL, \
      "`zworker`: file descriptor for machine-readable reports to the agent (`zagent` sets 3)") \
    X(COMM_STALL_MS, "ZT_COMM_STALL_MS", ZT_SETTING_INT, ZT_SETTING_USER, "2000", 0, INT_MAX, NULL, NULL, NULL, \
      "`zworker`: a collective unfinished this long is reported to the agent (a stall report, for the hang diagnosis); `0` turns the reports off") \
    X(COMM_TIMEOUT_MS, "ZT_COMM_TIMEOUT_MS", ZT_SETTING_INT, ZT_SETTING_USER, "", 1, INT_MAX, NULL, NULL, NULL, \
      "`zworker`: collective timeout in ms for this launch; `zctl run --timeout-ms` sets it") \
    X(JOB_ID, "ZT_JOB_ID", ZT_SETTING_INT, ZT_SETTING_PARENT, "", 0, INT64_MAX, NULL, NULL, NULL, \
      "`zworker`: the coordinator's job id, recorded in `checkpoint_dir/owner.json`; a directory that names another job is refused (`docs/formats.md`). Set by the coordinator through `zagent`") \
    X(SUBMIT_KEY, "ZT_SUBMIT_KEY", ZT_SETTING_STR, ZT_SETTING_PARENT, "", 0, 0, NULL, NULL, NULL, \
      "`zworker`: the job's submit key, recorded in `owner.json`") \
    X(CKPT_TAKEOVER, "ZT_CKPT_TAKEOVER", ZT_SETTING_BOOL, ZT_SETTING_USER, "0", 0, 0, NULL, NULL, NULL, \
      "`zworker`: `1` takes over a `checkpoint_dir` that belongs to another job (its `owner.json` is rewritten for this one) instead of refusing to start") \
    X(MEMORY_LIMIT, "ZT_MEMORY_LIMIT", ZT_SETTING_SIZE, ZT_SETTING_USER, "", 1, INT64_MAX, NULL, NULL, NULL, \
      "engine, `zctl plan`: bytes that cap a rank's memory (CPU or GPU) when the planner picks an `\"auto\"` micro batch") \
    X(HOST_MEMORY_LIMIT, "ZT_HOST_MEMORY_LIMIT", ZT_SETTING_SIZE, ZT_SETTING_USER, "", 1, INT64_MAX, NULL, NULL, NULL, \
      "engine: the host memory one rank may use, in bytes or a size (`1235MiB`, `2GB`); a rank whose plan needs more of it (as `zctl plan` counts host memory: on the CPU the whole rank) stops at start-up with exit code 4") \
    X(PEAK_TFLOPS, "ZT_PEAK_TFLOPS", ZT_SETTING_REAL, ZT_SETTING_USER, "", 0, 1000000, NULL, NULL, NULL, \
      "engine: the device's peak TFLOP/s; when set, the step line carries `mfu=`") \
    X(OP_TIMES, "ZT_OP_TIMES", ZT_SETTING_BOOL, ZT_SETTING_USER, "0", 0, 0, NULL, "kernels", "0 or 1; op times stay off", \
      "kernels: `1` splits each step by op; the step line then carries `op_<name>_ms=` (CUDA events, or the clock on the CPU)") \
    X(ACTIVATIONS_FP32, "ZT_ACTIVATIONS_FP32", ZT_SETTING_BOOL, ZT_SETTING_USER | ZT_SETTING_ONCE, "0", 0, 0, NULL, "engine", "0 or 1", \
      "engine: `1` keeps a bf16 or fp16 job's saved activations in fp32 instead of 16 bits") \
    X(HEAD_ROWS, "ZT_HEAD_ROWS", ZT_SETTING_INT, ZT_SETTING_USER, "", 1, INT_MAX, NULL, NULL, NULL, \
      "engine: rows of one chunk of the classifier (at most B × T); smaller saves memory, larger makes fewer passes over `wte`") \
    X(AIO_BACKEND, "ZT_AIO_BACKEND", ZT_SETTING_CHOICE, ZT_SETTING_USER, "auto", 0, 0, "auto|io_uring|threads", "nvme", "auto, io_uring or threads", \
      "engine: how NVMe offload's swap files are read and written, `io_uring`, `threads` (`pread`/`pwrite` on `aio.thread_count` threads) or `auto` (io_uring where the kernel allows it)") \
    X(CPU_ATTN, "ZT_CPU_ATTN", ZT_SETTING_CHOICE, ZT_SETTING_USER, "outer", 0, 0, "outer|inner", "kernels", "'outer' or 'inner'", \
      "CPU kernels: `outer` runs one (sequence, head) pair per thread with single-threaded products; `inner` runs the pairs in turn with oneDNN's threaded products") \
    X(CPU_ATTN_BLOCK, "ZT_CPU_ATTN_BLOCK", ZT_SETTING_INT, ZT_SETTING_USER, "64", 8, 1 << 20, NULL, "kernels", NULL, \
      "CPU kernels: rows of a causal block of the attention (8 to 2^20)") \
    X(CUDA_MATMUL, "ZT_CUDA_MATMUL", ZT_SETTING_CHOICE, ZT_SETTING_USER, "", 0, 0, "fp32|tf32|bf16|fp16", "kernels", "fp32, tf32, bf16 or fp16; the job's precision decides", \
      "CUDA: the matmuls' input type, `fp32`, `tf32`, `bf16` or `fp16` (bf16 jobs multiply in bf16, fp16 jobs in fp16, fp32 jobs in exact fp32)") \
    X(CUDA_GEMM_STAGE, "ZT_CUDA_GEMM_STAGE", ZT_SETTING_BOOL, ZT_SETTING_USER | ZT_SETTING_ONCE, "1", 0, 0, NULL, "kernels", "0 or 1", \
      "CUDA: `0` has cuBLASLt convert fp32 operands as it loads them instead of rounding them first into 16-bit copies") \
    X(CUDA_GEMM_STAGE_MIB, "ZT_CUDA_GEMM_STAGE_MIB", ZT_SETTING_REAL, ZT_SETTING_USER | ZT_SETTING_ONCE, "512", 0, 65536, NULL, "kernels", "a size in MiB above 0 and up to 65536; using 512", \
      "CUDA: MiB of the staging buffer for the 16-bit copies (counted by `zctl plan`); larger operands go through it in blocks") \
    X(CUDA_STAGE_FUSED, "ZT_CUDA_STAGE_FUSED", ZT_SETTING_BOOL, ZT_SETTING_USER, "1", 0, 0, NULL, "kernels", "0 or 1", \
      "CUDA: `0` makes every 16-bit copy by a pass of its own instead of inside the passes that run anyway (the same bits)") \
    X(CUDA_GEMM_TUNE, "ZT_CUDA_GEMM_TUNE", ZT_SETTING_BOOL, ZT_SETTING_USER, "0", 0, 0, NULL, "kernels", "0 or 1", \
      "CUDA: `1` times cuBLASLt's first 8 candidate algorithms at a shape's first call and keeps the fastest; two runs are then no longer bitwise equal") \
    X(CUDA_ATTN, "ZT_CUDA_ATTN", ZT_SETTING_CHOICE, ZT_SETTING_USER, "", 0, 0, "cudnn|fused|chunked", "kernels", "'fused', 'chunked' or 'cudnn'", \
      "CUDA: the attention, `cudnn`, `fused` (zerotrain's flash-style kernels) or `chunked` (cuBLASLt products over a scratch buffer)") \
    X(CUDA_ATTN_FWD, "ZT_CUDA_ATTN_FWD", ZT_SETTING_CHOICE, ZT_SETTING_USER, "mma", 0, 0, "mma|mma4|wmma", "kernels", "'mma', 'mma4' or 'wmma'", \
      "CUDA: the tensor-core forward kernel, `mma` (`mma.sync`), `mma4` (held to 128 registers for 4 blocks an SM) or `wmma` (warp matrix functions)") \
    X(CUDA_ATTN_BWD, "ZT_CUDA_ATTN_BWD", ZT_SETTING_CHOICE, ZT_SETTING_USER, "mma", 0, 0, "mma|mma2|wmma", "kernels", "'mma', 'mma2' or 'wmma'", \
      "CUDA: the tensor-core backward kernel, `mma` (dK dV kernel held to 168 registers, 3 blocks an SM), `mma2` (246 registers, 2 blocks) or `wmma`") \
    X(CUDA_ATTN_DQ, "ZT_CUDA_ATTN_DQ", ZT_SETTING_CHOICE, ZT_SETTING_USER, "kernel", 0, 0, "kernel|gemm|atomic", "kernels", "'kernel', 'gemm' or 'atomic'", \
      "CUDA: how the backward gets dQ, `kernel` (a second kernel), `gemm` (from dS by one cuBLASLt product per sequence) or `atomic` (added by atomics, also cuDNN's atomic graph; dQ's last bits then vary from run to run)") \
    X(CUDA_LN_BWD, "ZT_CUDA_LN_BWD", ZT_SETTING_CHOICE, ZT_SETTING_USER, "row", 0, 0, "row|grouped", "kernels", "'row' or 'grouped'", \
      "CUDA: LayerNorm's backward kernel, `row` (a row loaded whole, column sums in shared memory; widths a multiple of 4 up to 1024) or `grouped` (column sums in registers, any width up to 1024)") \
    X(ALLOC_FAIL_AFTER, "ZT_ALLOC_FAIL_AFTER", ZT_SETTING_INT, ZT_SETTING_HOOK, "", 0, INT64_MAX, NULL, NULL, NULL, \
      "every program: the allocation after N successful ones fails (out-of-memory paths)") \
    X(INJECT_CRASH, "ZT_INJECT_CRASH", ZT_SETTING_STR, ZT_SETTING_HOOK, "", 0, 0, NULL, NULL, NULL, \
      "engine: `rank:step`; that rank dies in the middle of that step") \
    X(INJECT_NONFINITE, "ZT_INJECT_NONFINITE", ZT_SETTING_STR, ZT_SETTING_HOOK, "", 0, 0, NULL, NULL, NULL, \
      "engine: `rank:step`; that rank's gradients are non-finite at that step") \
    X(INJECT_SWAP_CORRUPT, "ZT_INJECT_SWAP_CORRUPT", ZT_SETTING_STR, ZT_SETTING_HOOK, "", 0, 0, NULL, NULL, NULL, \
      "engine: `rank:step`; one byte of that rank's NVMe `master.swp` (with `offload_param` \"nvme\": of `params.swp`) is flipped on disk before that step's update") \
    X(INJECT_SWAP_UNLINK, "ZT_INJECT_SWAP_UNLINK", ZT_SETTING_STR, ZT_SETTING_HOOK, "", 0, 0, NULL, NULL, NULL, \
      "engine: `rank:step`; that rank's NVMe swap files (`params.swp` too) are deleted before that step's update") \
    X(OFFLOAD_PIECE, "ZT_OFFLOAD_PIECE", ZT_SETTING_INT, ZT_SETTING_HOOK, "", 1, INT64_MAX, NULL, NULL, NULL, \
      "engine: elements of a segment of the offloaded optimizer, to cut a small model finer") \
    X(DUMP_STATE_AFTER_LOAD, "ZT_DUMP_STATE_AFTER_LOAD", ZT_SETTING_STR, ZT_SETTING_HOOK, "", 0, 0, NULL, NULL, NULL, \
      "`zworker`: rank 0 writes every unit's master weights and moments (unpadded fp32) to this file after loading") \
    X(PARAM_DIGEST, "ZT_PARAM_DIGEST", ZT_SETTING_STR, ZT_SETTING_HOOK, "", 0, 0, NULL, NULL, NULL, \
      "`zworker`: after training, each rank logs `param_digest=` (CRC32C of its parameters)") \
    X(TEST_COMMIT_DELAY_MS, "ZT_TEST_COMMIT_DELAY_MS", ZT_SETTING_INT, ZT_SETTING_HOOK, "", 0, INT_MAX, NULL, NULL, NULL, \
      "`zcoord`: delays each store commit by this many ms")
/* clang-format on */

typedef enum {
#define ZT_SETTING_ENUM(id, ...) ZT_SET_##id,
    ZT_SETTINGS(ZT_SETTING_ENUM)
#undef ZT_SETTING_ENUM
        ZT_SET_COUNT
} zt_setting;

typedef struct zt_setting_info {
    const char *name; /* "ZT_..." */
    zt_setting_type type;
    int use; /* ZT_SETTING_USER, _PARENT or _HOOK, | ZT_SETTING_ONCE */
    const char *def;
    int64_t min, max;
    const char *choices;
    const char *subsys;
    const char *expect;
    const char *what;
} zt_setting_info;

/* The table's row for id (NULL when id is out of range). Thread-safe. */
const zt_setting_info *zt_setting_about(zt_setting id);
/* The id named "ZT_..." or -1. */
int zt_setting_find(const char *name);

/* The variable's value as the environment holds it: NULL when unset or empty. Each call reads
 * the environment (tests set variables between calls); thread-safe as getenv is. */
const char *zt_setting_raw(zt_setting id);
/* The environment's value as it is: NULL only when unset, "" when set empty (for the readers
 * to which a variable set at all means something). */
const char *zt_setting_env(zt_setting id);
/* The value, or the table's default when unset or empty ("" for none). */
const char *zt_setting_str(zt_setting id);

/* The accessors below parse the value at each call. A value that does not parse or lies out of
 * bounds logs "ignoring NAME=VALUE: expected ..." as a warning (once per process for rows
 * marked ZT_SETTING_ONCE) and gives the default. */

/* INT: the value in [min, max]; the default (0 when none) otherwise. */
int64_t zt_setting_int(zt_setting id);
/* REAL: the value in (min, max]; the default (0 when none) otherwise. */
double zt_setting_real(zt_setting id);
/* BOOL: "1" true, "0" false; the default ("1" true, else false) otherwise. */
bool zt_setting_bool(zt_setting id);
/* CHOICE: the value when it is one of the choices; the default (NULL when none) otherwise. */
const char *zt_setting_choice(zt_setting id);

/* Logs the warning for a bad value of id (for rows whose value its reader parses itself). */
void zt_setting_warn(zt_setting id, const char *value);

#endif
