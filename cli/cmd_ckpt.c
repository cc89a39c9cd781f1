/* zerotrain: `zctl ckpt` — export a checkpoint as one consolidated model file (llm.c or
 * safetensors), inspect and verify a checkpoint, and list a job's checkpoints through the
 * coordinator. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "cli/cliopt.h"
#include "cli/commands.h"
#include "cli/rpc_cli.h"
#include "engine/ckpt.h"

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

int zt_cmd_ckpt(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "list") == 0)
        return zt_cli_ckpt_list(argc - 1, argv + 1);
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
