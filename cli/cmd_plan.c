/* zerotrain: `zctl plan job.json` — before anything runs, the memory one rank will need for
 * every ZeRO stage and offload choice of this job (model states, activations, buffers,
 * communication, the checkpoint snapshot, the process itself), computed from the engine's own
 * allocation table (zt_engine_plan), and which of them fit a given device memory. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cliopt.h"
#include "cli/commands.h"
#include "common/alloc.h"
#include "common/dsconfig.h"
#include "common/jobfile.h"
#include "engine/autobatch.h"
#include "engine/engine.h"

ZT_COMMAND(plan, zt_cmd_plan, "predict per-rank memory for each ZeRO stage and offload choice")

static void usage(FILE *f)
{
    fprintf(f, "usage: zctl plan JOB.json [--nproc N] [--device-memory SIZE]\n"
               "       zctl plan --deepspeed-keys   (every DeepSpeed key and what zerotrain does with it)\n"
               "\n"
               "Prints the memory one rank will allocate for every ZeRO stage (0-3) with and\n"
               "without optimizer offload, for the job's model, precision, micro batch and rank\n"
               "count (or --nproc N). The job's own configuration is marked with '*'.\n"
               "'total' is the rank's peak: device and host memory, the start-up transient and,\n"
               "on the CPU path, the process itself (code, libraries, heap).\n"
               "--device-memory SIZE (e.g. 80GiB, 24GB, 512MiB) flags what does not fit: the\n"
               "device part on cuda, the total on the CPU.\n"
               "A micro batch that is \"auto\" is picked as the ranks would pick it: the largest\n"
               "that fits the rank's memory (or --device-memory) with a 10%% margin.\n"
               "The DeepSpeed config's summary (ignored keys, keys with no effect here, the\n"
               "values filled for \"auto\") comes first.\n");
}

/* "80GiB", "80GB", "80G", "512MiB", "1e9" -> bytes; -1 on error. */
static double parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},          {"b", 1},        {"k", 1e3},    {"kb", 1e3},
                 {"kib", 1024.0},  {"m", 1e6},      {"mb", 1e6},   {"mib", 1048576.0},
                 {"g", 1e9},       {"gb", 1e9},     {"gib", 1073741824.0},
                 {"t", 1e12},      {"tb", 1e12},    {"tib", 1099511627776.0}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcasecmp(end, units[i].suffix) == 0)
            return v * units[i].mult;
    return -1;
}

static double mib(int64_t b)
{
    return (double)b / 1048576.0;
}

/* Device bytes of a category. */
static double dev(const zt_mem_plan *p, zt_mem_category c)
{
    return mib(p->bytes[c] - p->host_bytes[c]);
}

int zt_cmd_plan(int argc, char **argv)
{
    const char *job_path = NULL;
    int nproc = 0;
    double devmem = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--deepspeed-keys") == 0) {
            char *md = zt_ds_doc_markdown();
            if (!md) {
                zt_cli_error("out of memory");
                return 1;
            }
            fputs(md, stdout);
            zt_free(md);
            return 0;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--nproc", &v)) != 0) {
            if (m < 0 || zt_cli_parse_int("--nproc", v, 1, 4096, &nproc) != 0)
                return 2;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--device-memory", &v)) != 0) {
            if (m < 0)
                return 2;
            devmem = parse_size(v);
            if (devmem <= 0) {
                zt_cli_error("plan: cannot read --device-memory \"%s\"; write it like 80GiB, 24GB or 512MiB", v);
                return 2;
            }
        } else if (argv[i][0] == '-') {
            zt_cli_error("plan: unknown option %s; see 'zctl plan --help'", argv[i]);
            return 2;
        } else if (!job_path) {
            job_path = argv[i];
        } else {
            zt_cli_error("plan: one job file only");
            return 2;
        }
    }
    if (!job_path) {
        usage(stderr);
        return 2;
    }
    zt_err err;
    zt_err_clear(&err);
    zt_job *job = calloc(1, sizeof(*job));
    if (!job) {
        zt_cli_error("out of memory");
        return 1;
    }
    if (zt_job_load(job, job_path, &err) != ZT_OK ||
        (nproc && zt_job_resolve_batch(job, nproc, &err) != ZT_OK)) {
        zt_cli_error("%s", zt_err_msg(&err));
        free(job);
        return 2;
    }
    if (job->ds.micro_auto) {
        int world0 = nproc ? nproc : job->resources.ranks;
        if (zt_auto_batch_pick(job, world0, 0, (int64_t)devmem, &err) != ZT_OK) {
            zt_cli_error("%s", zt_err_msg(&err));
            free(job);
            return 1;
        }
    }
    if (!zt_cli.json && job->ds.notes[0]) {
        printf("deepspeed config:\n");
        zt_ds_notes_print(stdout, job->ds.notes, "  ");
    }
    int world = job->ds.world_size;
    const zt_zero_cfg own = job->ds.zero;
    const char *prec = job->ds.fp16.enabled ? "fp16" : job->ds.bf16 ? "bf16" : "fp32";
    /* rows per stage: no offload, the whole shard on the host, and the job's own offload when
     * it is another (a ratio below 1, or NVMe) */
    enum { OFF_NONE, OFF_CPU, OFF_NVME };
    int kinds[3] = {OFF_NONE, OFF_CPU, own.offload_optimizer.nvme ? OFF_NVME : OFF_CPU};
    double ratios[3] = {0, 1.0, own.offload_optimizer.ratio};
    int nratios = own.offload_optimizer.enabled &&
                          (own.offload_optimizer.nvme || own.offload_optimizer.ratio != 1.0)
                      ? 3
                      : 2;
    zt_mem_plan p;
    int rc = 0;
    if (!zt_cli.json) {
        zt_job probe = *job;
        if (zt_engine_plan(&probe, world, &p, &err) != ZT_OK) {
            zt_cli_error("%s", zt_err_msg(&err));
            free(job);
            return 1;
        }
        printf("plan for %s: %.2fM parameters (Psi), %d rank%s, %s, micro batch %lld%s x block %d%s\n",
               job->name, (double)p.num_params / 1e6, world, world == 1 ? "" : "s", prec,
               (long long)job->ds.micro_batch, job->ds.micro_auto ? " (auto)" : "",
               job->model.block_size,
               job->ds.activation_checkpointing.enabled ? ", activation checkpointing" : "");
        printf("MiB per rank     params  master   grads   optim  activ. buffers    comm |  device    host    disk   total\n");
    } else {
        printf("{\"job\":\"%s\",\"ranks\":%d,\"precision\":\"%s\",\"rows\":[", job->name, world, prec);
    }
    int row = 0;
    for (int stage = 0; stage < 4; stage++) {
        for (int ri = 0; ri < nratios; ri++) {
            zt_job v = *job;
            v.ds.zero.stage = stage;
            v.ds.zero.offload_optimizer.enabled = kinds[ri] != OFF_NONE;
            v.ds.zero.offload_optimizer.nvme = kinds[ri] == OFF_NVME;
            v.ds.zero.offload_optimizer.ratio = ratios[ri];
            if (zt_engine_plan(&v, world, &p, &err) != ZT_OK) {
                zt_cli_error("%s", zt_err_msg(&err));
                free(job);
                return 1;
            }
            bool mine = stage == own.stage &&
                        (kinds[ri] == OFF_NONE
                             ? !own.offload_optimizer.enabled
                             : own.offload_optimizer.enabled &&
                                   own.offload_optimizer.nvme == (kinds[ri] == OFF_NVME) &&
                                   own.offload_optimizer.ratio == ratios[ri]);
            int64_t total = p.total_bytes;
            bool cpu = job->resources.device == ZT_DEVICE_CPU;
            bool fits = devmem <= 0 || (double)(cpu ? total : p.device_total) <= devmem;
            char label[32];
            if (kinds[ri] == OFF_NONE)
                snprintf(label, sizeof(label), "none");
            else
                snprintf(label, sizeof(label), "%s %.2f", kinds[ri] == OFF_NVME ? "nvme" : "cpu",
                         ratios[ri]);
            if (zt_cli.json) {
                printf("%s{\"stage\":%d,\"offload\":\"%s\",\"job\":%s,\"device_bytes\":%lld,\"host_bytes\":%lld,\"disk_bytes\":%lld,\"init_bytes\":%lld,\"peak_bytes\":%lld,\"runtime_bytes\":%lld,\"backend_bytes\":%lld,\"total_bytes\":%lld,\"fits\":%s,\"bytes\":{",
                       row ? "," : "", stage, label, mine ? "true" : "false",
                       (long long)p.device_total, (long long)p.host_total,
                       (long long)p.disk_bytes, (long long)p.init_bytes, (long long)p.peak_total,
                       (long long)p.runtime_bytes, (long long)p.backend_bytes, (long long)total,
                       fits ? "true" : "false");
                for (int c = 0; c < ZT_MEM_CATEGORY_COUNT; c++)
                    printf("%s\"%s\":%lld", c ? "," : "", zt_mem_category_name((zt_mem_category)c),
                           (long long)p.bytes[c]);
                printf("}}");
            } else {
                printf("%c stage %d %-9s %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f | %7.1f %7.1f %7.1f %7.1f%s\n",
                       mine ? '*' : ' ', stage, label, dev(&p, ZT_MEM_PARAMS),
                       dev(&p, ZT_MEM_MASTER), dev(&p, ZT_MEM_GRADS), dev(&p, ZT_MEM_OPTIM),
                       dev(&p, ZT_MEM_ACTIVATIONS), dev(&p, ZT_MEM_BUFFERS), dev(&p, ZT_MEM_COMM),
                       mib(p.device_total), mib(p.host_total), mib(p.disk_bytes), mib(total),
                       fits ? "" : "  DOES NOT FIT");
            }
            if (mine && !fits)
                rc = 1;
            row++;
        }
    }
    if (zt_cli.json) {
        printf("]}\n");
    } else {
        char cuda_note[160];
        snprintf(cuda_note, sizeof(cuda_note),
                 "; device also holds the CUDA kernels' workspace and scratch (%.1f MiB), not the CUDA context itself or NCCL's buffers",
                 mib(p.backend_bytes));
        printf("columns are device memory; host = offloaded master weights, moments and their staging buffers (with NVMe: the swap's buffer sets instead of the states), the checkpoint snapshot (12 bytes per element of the rank's shard) and the collectives' staging; disk = NVMe offload's swap files, read and written once each step.\n");
        printf("total = the rank's peak: device + host%s, or at start-up the buffers without the snapshot + %.1f MiB to initialise (one unit in fp32%s), whichever is larger%s.\n",
               job->resources.device == ZT_DEVICE_CPU
                   ? " + the process itself once it trains (code, libraries, oneDNN kernels, heap: a measured constant)"
                   : "",
               mib(p.init_bytes), job->model.init_random ? "" : " and the init file",
               job->resources.device == ZT_DEVICE_CPU ? "" : cuda_note);
        if (devmem > 0)
            printf("device memory %.1f MiB: the job's configuration %s\n", devmem / 1048576.0,
                   rc ? "DOES NOT FIT; pick a higher stage, offload, or a smaller micro batch" : "fits");
    }
    free(job);
    return rc;
}
