/* zerotrain: zctl, the user's command line. Parses the global options (anywhere on the line),
 * then hands the rest to the subcommand named in the generated command table. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/rpc_cli.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/settings.h"
#include "zctl_commands.h" /* generated: zt_cli_command_table[] */

zt_cli_globals zt_cli;

void zt_cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("zctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool zt_cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return true;
    return false;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: zctl [global options] <command> [args]\n\ncommands:\n");
    for (const zt_cli_command *c = zt_cli_command_table; c->name; c++)
        fprintf(f, "  %-10s %s\n", c->name, c->summary);
    fprintf(f,
            "\nglobal options (before or after the command; the flag wins over the environment):\n"
            "  --coordinator ADDR  coordinator address (env ZT_COORDINATOR, default "
            "127.0.0.1:50051)\n"
            "  --token-file FILE   file holding the API token (env ZT_TOKEN_FILE; or the\n"
            "                      token itself in ZT_TOKEN)\n"
            "  --tls-ca FILE       CA certificate to verify the coordinator's TLS (env ZT_TLS_CA)\n"
            "  -o json             machine-readable output\n"
            "\n'zctl <command> --help' describes a command.\n");
}

/* The global options that take a value, as "--name VALUE" or "--name=VALUE". */
static const struct {
    const char *flag;
    const char **slot;
} value_opts[] = {
    {"--coordinator", &zt_cli.coordinator},
    {"--token-file", &zt_cli.token_file},
    {"--tls-ca", &zt_cli.tls_ca},
};

int main(int argc, char **argv)
{
    zt_cli.argv0 = argv[0];
    zt_log_set_level(ZT_LOG_WARN);
    zt_log_set_identity(NULL, -1);
    /* Pull global options out of argv wherever they are; keep the rest in order. */
    char **rest = zt_calloc((size_t)argc + 1, sizeof(*rest));
    if (!rest) {
        zt_cli_error("out of memory");
        return 1;
    }
    int nrest = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool taken = false;
        for (size_t k = 0; k < sizeof(value_opts) / sizeof(value_opts[0]) && !taken; k++) {
            size_t n = strlen(value_opts[k].flag);
            if (strncmp(a, value_opts[k].flag, n) != 0 || (a[n] != '\0' && a[n] != '=')) continue;
            taken = true;
            if (a[n] == '=') {
                *value_opts[k].slot = a + n + 1;
            } else if (i + 1 < argc) {
                *value_opts[k].slot = argv[++i];
            } else {
                zt_cli_error("%s needs a value", a);
                zt_free(rest);
                return 2;
            }
        }
        if (taken) continue;
        /* "-o json|text" is the global output format; "-o FILE" belongs to the command
         * (zctl ckpt export ... -o FILE) */
        if ((strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) && i + 1 < argc &&
            (strcmp(argv[i + 1], "json") == 0 || strcmp(argv[i + 1], "text") == 0)) {
            zt_cli.json = strcmp(argv[++i], "json") == 0;
            continue;
        }
        if (strcmp(a, "-ojson") == 0 || strcmp(a, "--output=json") == 0) {
            zt_cli.json = true;
            continue;
        }
        rest[nrest++] = argv[i];
    }
    /* the environment, as zagent reads it: ZT_COORDINATOR, ZT_TOKEN_FILE (else ZT_TOKEN),
     * ZT_TLS_CA */
    if (!zt_cli.coordinator) zt_cli.coordinator = zt_setting_str(ZT_SET_COORDINATOR);
    if (!*zt_cli.coordinator) zt_cli.coordinator = zt_setting_about(ZT_SET_COORDINATOR)->def;
    if (!zt_cli.token_file && zt_setting_raw(ZT_SET_TOKEN_FILE)) {
        zt_cli.token_file = zt_setting_raw(ZT_SET_TOKEN_FILE);
        zt_cli_token_file_origin = "ZT_TOKEN_FILE";
    }
    if (!zt_cli.tls_ca && zt_setting_raw(ZT_SET_TLS_CA)) {
        zt_cli.tls_ca = zt_setting_raw(ZT_SET_TLS_CA);
        zt_cli_tls_ca_origin = "ZT_TLS_CA";
    }
    if (zt_cli.tls_ca && !*zt_cli.tls_ca) zt_cli.tls_ca = NULL;
    if (zt_cli.token_file && !*zt_cli.token_file) zt_cli.token_file = NULL;
    /* the token file is read when a command connects (commands without a coordinator do not
     * need it); it wins over ZT_TOKEN */
    if (!zt_cli.token_file && zt_setting_raw(ZT_SET_TOKEN))
        zt_cli.token = zt_setting_raw(ZT_SET_TOKEN);

    if (nrest == 0 || strcmp(rest[0], "-h") == 0 || strcmp(rest[0], "--help") == 0 ||
        strcmp(rest[0], "help") == 0) {
        usage(nrest == 0 ? stderr : stdout);
        return nrest == 0 ? 2 : 0;
    }
    if (strcmp(rest[0], "--version") == 0 || strcmp(rest[0], "version") == 0) {
        printf("zctl (zerotrain) %s\n", ZT_VERSION);
        return 0;
    }
    for (const zt_cli_command *c = zt_cli_command_table; c->name; c++) {
        if (strcmp(c->name, rest[0]) == 0) {
            int rc = c->fn(nrest, rest);
            zt_free(rest);
            return rc;
        }
    }
    zt_cli_error("unknown command '%s'; run 'zctl --help' for the list", rest[0]);
    zt_free(rest);
    return 2;
}
