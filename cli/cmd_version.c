/* zerotrain: `zctl version` (also `zctl --version`). */
#include <stdio.h>

#include "cli/commands.h"

ZT_COMMAND(version, zt_cmd_version, "print the version")

int zt_cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("zctl (zerotrain) %s\n", ZT_VERSION);
    return 0;
}
