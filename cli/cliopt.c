/* zerotrain: option parsing shared by zctl's subcommands (see cliopt.h). */
#include "cli/cliopt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"

int zt_cli_take_opt(int argc, char **argv, int *i, const char *name, const char **value)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        zt_cli_error("%s needs a value", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int zt_cli_parse_u64(const char *opt, const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-' || *s == '+')
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        goto bad;
    uint64_t mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1000, end++;
    else if (*end == 'M')
        mul = 1000000, end++;
    else if (*end == 'G')
        mul = 1000000000, end++;
    if (*end != '\0' || (mul > 1 && v > max / mul) || v * mul > max)
        goto bad;
    *out = v * mul;
    return 0;
bad:
    zt_cli_error("%s takes a whole number from 0 to %" PRIu64 ", not '%s'", opt, max, s);
    return -1;
}

int zt_cli_parse_int(const char *opt, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        zt_cli_error("%s takes a whole number from %ld to %ld, not '%s'", opt, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}
