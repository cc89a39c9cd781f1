/* zerotrain: option parsing shared by zctl's subcommands: "--name VALUE" and "--name=VALUE"
 * alike, and number checks whose messages name the option, the accepted range and the value.
 * Every function prints its own error (through zt_cli_error) and the caller returns 2. */
#ifndef ZT_CLI_CLIOPT_H
#define ZT_CLI_CLIOPT_H

#include <stdint.h>

/* Matches argv[*i] against "--name VALUE" or "--name=VALUE". Returns 1 and sets *value (and
 * advances *i past a separate value) on a match, 0 when argv[*i] is another option, -1 when
 * the option has no value ("--name needs a value" printed). */
int zt_cli_take_opt(int argc, char **argv, int *i, const char *name, const char **value);

/* A whole number in [0, max] with an optional decimal k/M/G suffix. 0 on success, -1 after
 * printing "OPT takes a whole number from 0 to MAX, not 'S'". */
int zt_cli_parse_u64(const char *opt, const char *s, uint64_t max, uint64_t *out);

/* A whole number in [lo, hi] (no suffix). 0 on success, -1 after printing the range. */
int zt_cli_parse_int(const char *opt, const char *s, long lo, long hi, int *out);

#endif
