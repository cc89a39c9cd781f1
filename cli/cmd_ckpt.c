/* zerotrain: `zctl ckpt` — export a checkpoint as one consolidated model file (llm.c or
 * safetensors), inspect and verify a checkpoint, and list a job's checkpoints through the
 * coordinator. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "cli/cliopt.h"
#include "cli/commands.h"
#include "cli/rpc_cli.h"
#include "common/alloc.h"
#include "engine/ckpt_export.h"
#include "engine/ckpt_format.h"
#include "proto/pbjson.h"

ZT_COMMAND(ckpt, zt_cmd_ckpt, "checkpoints: list, inspect, export (llmc, safetensors)")

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zctl ckpt export CKPT --format llmc|safetensors -o FILE [--dtype fp32|bf16]\n"
            "       zctl ckpt inspect CKPT\n"
            "       zctl ckpt list JOB_ID\n"
            "\n"
            "CKPT is a checkpoint directory (its newest complete step is used) or one of its\n"
            "step_* directories. export streams a consolidated model one tensor at a time and\n"
            "verifies every shard's checksum first; --dtype bf16 rounds each value to nearest\n"
            "even (llm.c version 5 / safetensors BF16). inspect prints what a checkpoint holds\n"
            "and verifies every checksum; list asks the coordinator for a job's checkpoints.\n");
}

static int cmd_export(int argc, char **argv)
{
    const char *dir = NULL, *format = NULL, *out = NULL, *dtype = "fp32";
    for (int i = 2; i < argc; i++) {
        int m;
        if ((m = zt_cli_take_opt(argc, argv, &i, "--format", &format)) != 0 ||
            (m = zt_cli_take_opt(argc, argv, &i, "--dtype", &dtype)) != 0 ||
            (m = zt_cli_take_opt(argc, argv, &i, "--output", &out)) != 0 ||
            (m = zt_cli_take_opt(argc, argv, &i, "-o", &out)) != 0) {
            if (m < 0)
                return 2;
        } else if (argv[i][0] == '-') {
            zt_cli_error("ckpt export: unknown option %s; see 'zctl ckpt --help'", argv[i]);
            return 2;
        } else if (!dir)
            dir = argv[i];
        else {
            zt_cli_error("ckpt export: one checkpoint only (got %s and %s)", dir, argv[i]);
            return 2;
        }
    }
    if (!dir || !format || !out) {
        zt_cli_error("ckpt export needs a checkpoint, --format llmc|safetensors and -o FILE");
        return 2;
    }
    zt_dtype dt;
    if (strcmp(dtype, "fp32") == 0)
        dt = ZT_F32;
    else if (strcmp(dtype, "bf16") == 0)
        dt = ZT_BF16;
    else {
        zt_cli_error("ckpt export: --dtype takes fp32 or bf16, not \"%s\"", dtype);
        return 2;
    }
    zt_err err;
    zt_err_clear(&err);
    if (zt_ckpt_export(dir, format, dt, out, &err) != ZT_OK) {
        zt_cli_error("%s", zt_err_msg(&err));
        return 1;
    }
    if (zt_cli.json)
        printf("{\"checkpoint\":\"%s\",\"format\":\"%s\",\"dtype\":\"%s\",\"output\":\"%s\"}\n",
               dir, format, dtype, out);
    else
        printf("wrote %s (%s, %s) from %s\n", out, format, dtype, dir);
    return 0;
}

static int cmd_inspect(int argc, char **argv)
{
    if (argc != 3 || argv[2][0] == '-') {
        zt_cli_error("usage: zctl ckpt inspect CKPT");
        return 2;
    }
    zt_err err;
    zt_err_clear(&err);
    if (zt_ckpt_inspect(argv[2], stdout, zt_cli.json, &err) != ZT_OK) {
        fflush(stdout);
        zt_cli_error("%s", zt_err_msg(&err));
        return 1;
    }
    if (!zt_cli.json)
        printf("all checksums verified\n");
    return 0;
}

/* `zctl ckpt list JOB_ID [--all]` (argv[0] is "list"): a job's checkpoints, newest first,
 * with the reason of each BAD one (it failed verification when a worker loaded it). */
static int cmd_list(int argc, char **argv)
{
    if (zt_cli_wants_help(argc, argv)) {
        printf(
            "usage: zctl ckpt list JOB_ID [--all]\n\nLists a job's committed checkpoints (every rank's shard recorded: usable for a\nrestart) and bad ones (they failed verification when a worker loaded them: never\nresumed from again; the reason follows the table), newest first; --all adds partial\nones and deleted ones (removed by keep_checkpoints, never resumed from).\n");
        return 0;
    }
    Zt__V1__ListCheckpointsRequest q = ZT__V1__LIST_CHECKPOINTS_REQUEST__INIT;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--all") == 0)
            q.include_partial = q.include_deleted = true;
        else if (!q.job_id && argv[i][0] != '-') {
            if (!(q.job_id = zt_cli_parse_job_id(argv[i]))) return ZT_CLI_EXIT_USAGE;
        } else {
            zt_cli_error("ckpt list: unexpected argument '%s'; see 'zctl ckpt list --help'",
                         argv[i]);
            return ZT_CLI_EXIT_USAGE;
        }
    }
    if (!q.job_id) {
        zt_cli_error("usage: zctl ckpt list JOB_ID [--all]");
        return ZT_CLI_EXIT_USAGE;
    }
    zt_rpc_client *c = zt_cli_connect();
    if (!c) return 1;
    Zt__V1__ListCheckpointsReply *r = NULL;
    int rc = 1;
    if (zt_cli_call(c, "ListCheckpoints", &q.base, &zt__v1__list_checkpoints_reply__descriptor,
                    (void **)&r, NULL) != ZT_OK)
        goto out;
    rc = 0;
    if (zt_cli.json) {
        zt_cli_print_json(&r->base, false);
        goto out;
    }
    if (!r->n_checkpoints) {
        printf("job %lld has no %scheckpoints yet\n", (long long)q.job_id,
               q.include_partial ? "" : "committed ");
        goto out;
    }
    printf("%-10s %-10s %-8s %-10s %-20s %s\n", "STEP", "STATE", "SHARDS", "SIZE", "WRITTEN",
           "PATH");
    size_t bad = 0;
    for (size_t i = 0; i < r->n_checkpoints; i++) {
        const Zt__V1__Checkpoint *k = r->checkpoints[i];
        char sh[24], sz[24], t[32];
        snprintf(sh, sizeof(sh), "%d/%d", k->shards, k->world_size);
        printf("%-10lld %-10s %-8s %-10s %-20s %s\n", (long long)k->step,
               zt_pb_enum_short_name(&zt__v1__checkpoint_state__descriptor, k->state), sh,
               zt_fmt_bytes(k->bytes, sz, sizeof(sz)),
               zt_cli_fmt_time(k->committed_ms ? k->committed_ms : k->created_ms, t, sizeof(t)),
               k->path);
        bad += k->state == ZT__V1__CHECKPOINT_STATE__CHECKPOINT_STATE_BAD;
    }
    if (bad) printf("\n");
    for (size_t i = 0; i < r->n_checkpoints; i++) {
        const Zt__V1__Checkpoint *k = r->checkpoints[i];
        if (k->state == ZT__V1__CHECKPOINT_STATE__CHECKPOINT_STATE_BAD)
            printf("step %lld is BAD (failed verification on load; never resumed from): %s\n",
                   (long long)k->step, k->bad_reason[0] ? k->bad_reason : "no reason recorded");
    }
out:
    zt_pb_free(r);
    zt_rpc_client_destroy(c);
    return rc;
}

int zt_cmd_ckpt(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "list") == 0)
        return cmd_list(argc - 1, argv + 1);
    if (zt_cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "export") == 0)
        return cmd_export(argc, argv);
    if (strcmp(argv[1], "inspect") == 0)
        return cmd_inspect(argc, argv);
    zt_cli_error("ckpt: unknown subcommand '%s'; use list, inspect or export", argv[1]);
    return 2;
}
