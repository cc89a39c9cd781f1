/* zerotrain: `zctl agents` (nodes, slots, free memory, last heartbeat). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/rpc_cli.h"
#include "common/alloc.h"
#include "proto/pbjson.h"

ZT_COMMAND(agents, zt_cmd_agents, "list the coordinator's agents: slots, free memory, heartbeats")

int zt_cmd_agents(int argc, char **argv)
{
    if (zt_cli_wants_help(argc, argv) || argc > 1) {
        printf(
            "usage: zctl agents\n\nLists the agents the coordinator knows: state, device, slots (free/total),\nworkers, GPU memory and the last heartbeat.\n");
        return argc > 1 && !zt_cli_wants_help(argc, argv) ? ZT_CLI_EXIT_USAGE : 0;
    }
    zt_rpc_client *c = zt_cli_connect();
    if (!c) return 1;
    Zt__V1__ListAgentsRequest q = ZT__V1__LIST_AGENTS_REQUEST__INIT;
    Zt__V1__ListAgentsReply *r = NULL;
    int rc = 1;
    if (zt_cli_call(c, "ListAgents", &q.base, &zt__v1__list_agents_reply__descriptor, (void **)&r,
                    NULL) != ZT_OK)
        goto out;
    rc = 0;
    if (zt_cli.json) {
        zt_cli_print_json(&r->base, false);
        goto out;
    }
    if (!r->n_agents) {
        printf("no agents registered: start one with 'zagent --coordinator %s --slots cpu:2'\n",
               zt_cli.coordinator);
        goto out;
    }
    printf("%-16s %-6s %-6s %-10s %-8s %-14s %s\n", "NAME", "STATE", "DEVICE", "SLOTS", "WORKERS",
           "HEARTBEAT", "GPUS (free/total)");
    for (size_t i = 0; i < r->n_agents; i++) {
        const Zt__V1__Agent *a = r->agents[i];
        char slots[24], ago[32], gpus[256] = "";
        snprintf(slots, sizeof(slots), "%d/%d free", a->free_slots, a->slots);
        zt_cli_fmt_ago(a->last_heartbeat_ms, ago, sizeof(ago));
        size_t n = 0;
        for (size_t g = 0; g < a->n_gpus && n < sizeof(gpus); g++) {
            char fr[24], tot[24];
            n += (size_t)snprintf(gpus + n, sizeof(gpus) - n, "%s%d:%s/%s", g ? " " : "",
                                  a->gpus[g]->index,
                                  zt_fmt_bytes(a->gpus[g]->memory_free, fr, sizeof(fr)),
                                  zt_fmt_bytes(a->gpus[g]->memory_total, tot, sizeof(tot)));
        }
        printf("%-16.16s %-6s %-6s %-10s %-8zu %-14s %s\n", a->name,
               zt_pb_enum_short_name(&zt__v1__agent_state__descriptor, a->state),
               zt_pb_enum_short_name(&zt__v1__device__descriptor, a->device), slots, a->n_workers,
               ago, gpus[0] ? gpus : "-");
    }
out:
    zt_pb_free(r);
    zt_rpc_client_destroy(c);
    return rc;
}
