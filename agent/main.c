/* zerotrain: zagent, the node agent process (see agent.h). Parses the settings, builds the
 * agent and runs its loop; also the hidden `--exec-worker` mode that every worker starts
 * through (parent-death signal, then exec of zworker). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/log.h"

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--exec-worker") == 0) return zt_agent_exec_worker(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    zt_agent_config cfg;
    bool help = false;
    zt_err err = {0};
    if (zt_agent_config_parse(&cfg, argc, argv, &help, &err) != ZT_OK) {
        fprintf(stderr, "zagent: %s\n", zt_err_msg(&err));
        return ZT_AGENT_EXIT_USAGE;
    }
    if (help) {
        zt_agent_usage(stdout);
        return ZT_AGENT_EXIT_OK;
    }
    zt_log_set_identity(cfg.name, -1);
    char roots[2048] = "";
    size_t used = 0;
    for (int i = 0; i < cfg.n_allow_paths && used < sizeof(roots); i++)
        used += (size_t)snprintf(roots + used, sizeof(roots) - used, "%s%s", i ? ", " : "",
                                 cfg.allow_paths[i]);
    ZT_INFO("agent", "jobs confined to: %s%s", roots,
            cfg.allow_paths_default ? " (the working directory; --allow-path DIR sets others)"
                                    : "");
    if (cfg.drop_privileges)
        ZT_INFO("agent", "workers run as user %s (uid %u, gid %u, %d groups)", cfg.run_as,
                (unsigned)cfg.run_as_uid, (unsigned)cfg.run_as_gid, cfg.n_run_as_groups);
    else if (geteuid() == 0)
        ZT_WARN("agent", "zagent runs as root with --allow-root: its workers run as root too");
    zt_agent *a = NULL;
    if (zt_agent_create(&a, &cfg, &err) != ZT_OK) {
        fprintf(stderr, "zagent: %s\n", zt_err_msg(&err));
        zt_agent_config_free(&cfg);
        return ZT_AGENT_EXIT_FAIL;
    }
    int rc = zt_agent_run(a);
    zt_agent_destroy(a);
    return rc;
}
