/* zerotrain: zctl, the user's command line. Parses the global options (anywhere on the line),
 * then hands the rest to the subcommand named in the generated command table. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "common/alloc.h"
#include "common/log.h"
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
    fprintf(f, "\nglobal options (before or after the command):\n"
               "  --coordinator ADDR  coordinator address (env ZT_COORDINATOR, default "
               "127.0.0.1:50051)\n"
               "  --token-file FILE   file holding the API token (env ZT_TOKEN)\n"
               "  --tls-ca FILE       CA certificate to verify the coordinator's TLS\n"
               "  -o json             machine-readable output\n"
               "\n'zctl <command> --help' describes a command.\n");
}

static char *read_token_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return zt_strdup(buf);
}

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
        const char **slot = NULL;
        if (strcmp(a, "--coordinator") == 0)
            slot = &zt_cli.coordinator;
        else if (strcmp(a, "--token-file") == 0)
            slot = &zt_cli.token_file;
        else if (strcmp(a, "--tls-ca") == 0)
            slot = &zt_cli.tls_ca;
        if (slot) {
            if (i + 1 >= argc) {
                zt_cli_error("%s needs a value", a);
                return 2;
            }
            *slot = argv[++i];
            continue;
        }
        if (strncmp(a, "--coordinator=", 14) == 0) {
            zt_cli.coordinator = a + 14;
            continue;
        }
        if (strncmp(a, "--token-file=", 13) == 0) {
            zt_cli.token_file = a + 13;
            continue;
        }
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
    if (!zt_cli.coordinator)
        zt_cli.coordinator = getenv("ZT_COORDINATOR");
    if (!zt_cli.coordinator || !*zt_cli.coordinator)
        zt_cli.coordinator = "127.0.0.1:50051";
    if (zt_cli.token_file) {
        zt_cli.token = read_token_file(zt_cli.token_file);
        if (!zt_cli.token) {
            zt_cli_error("cannot read the token file %s; check the path given to --token-file",
                         zt_cli.token_file);
            return 2;
        }
    } else if (getenv("ZT_TOKEN") && *getenv("ZT_TOKEN")) {
        zt_cli.token = getenv("ZT_TOKEN");
    }

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
