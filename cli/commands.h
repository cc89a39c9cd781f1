/* zerotrain: what zctl's subcommands share. Each cli/cmd_*.c defines one or more commands
 * and names each in a line of the form
 *     ZT_COMMAND(name, function, "one-line summary")
 * at file scope; the build collects those lines into zctl's command table, so adding a
 * command never touches a shared file. A command is int f(int argc, char **argv) where
 * argv[0] is the command name and the global options are already removed; it returns the
 * process exit code (0 ok, 1 failure, 2 usage error). */
#ifndef ZT_CLI_COMMANDS_H
#define ZT_CLI_COMMANDS_H

#include <stdbool.h>

#define ZT_COMMAND(name, fn, summary)

/* Global options, accepted before or after the subcommand. */
typedef struct zt_cli_globals {
    const char *coordinator; /* --coordinator, else ZT_COORDINATOR, else 127.0.0.1:50051 */
    const char *token_file;  /* --token-file */
    const char *token;       /* read from token_file, else ZT_TOKEN; NULL when none */
    const char *tls_ca;      /* --tls-ca PEM file; NULL = plaintext */
    bool json;               /* -o json */
    const char *argv0;
} zt_cli_globals;

extern zt_cli_globals zt_cli;

/* Prints "zctl: " + message to stderr (for errors that end a command). */
void zt_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* True when argv holds -h or --help. */
bool zt_cli_wants_help(int argc, char **argv);

#endif
