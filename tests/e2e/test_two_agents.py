#!/usr/bin/env python3
"""End to end, gang scheduling across nodes: two agents with one CPU slot each; a 2-rank job
with ranks_per_node 1 is placed on both at once, rank 0's agent publishes tcp://host:port
through the coordinator's Rendezvous call, rank 1's agent waits for it and hands it to its
worker, and the job completes with the same losses as a local `zctl run --nproc 2`."""
import os

import e2e_util as e


def body(c):
    c.start_coord()
    c.start_agent("n1", "cpu:1")
    c.start_agent("n2", "cpu:1")
    c.make_data()
    job = c.write_job("gang", steps=30, ckpt_every=10, ranks=2, ranks_per_node=1)

    r = c.zctl("submit", job, "--follow", timeout=180)
    e.check("COMPLETED" in (r.stdout + r.stderr).splitlines()[-1], "follow output:\n" + r.stdout)
    jid = int(r.stdout.split()[2])
    j = c.job(jid)
    att = j["attempts"][0]
    agents = {rk["rank"]: rk["agent"] for rk in att["ranks"]}
    e.check_eq(sorted(agents.values()), ["n1", "n2"], "agents of the two ranks")
    for rk in att["ranks"]:
        e.check_eq(rk["local_rank"], 0, f"local rank of rank {rk['rank']}")
        e.check_eq(rk["status"]["exit_code"], 0, f"exit code of rank {rk['rank']}")

    # each agent ran its own rank; both workers met at rank 0's address
    logs = {}
    for rank, agent in agents.items():
        path = os.path.join(c.work_dir(agent), f"attempt_{att['id']}", f"rank_{rank:05d}.log")
        with open(path) as f:
            logs[rank] = f.read()
        other = 1 - rank
        e.check(not os.path.exists(os.path.join(c.work_dir(agent), f"attempt_{att['id']}",
                                                f"rank_{other:05d}.log")),
                f"agent {agent} also ran rank {other}")
    rdzv = [l.split("rendezvous ", 1)[1].split(",")[0].strip()
            for l in (logs[0] + logs[1]).splitlines() if l.startswith("[zagent]") and
            "rendezvous tcp://" in l]
    e.check_eq(len(rdzv), 2, "rendezvous lines in the two rank logs")
    e.check_eq(rdzv[0], rdzv[1], "rendezvous address of rank 0 and rank 1")
    e.check(rdzv[0].startswith("tcp://127.0.0.1:"), "rendezvous address " + rdzv[0])

    ag = {a["name"]: a for a in c.zctl_json("agents")["agents"]}
    for name in ("n1", "n2"):
        e.check_eq(ag[name]["state"], "ALIVE", f"state of {name}")
        e.check_eq(ag[name]["slots"], 1, f"slots of {name}")

    # the same job locally: the same numbers (same ranks, same stage)
    ref = c.write_job("gangref", steps=30, ckpt_every=10, ranks=2, ranks_per_node=1)
    c.zctl("run", "--nproc", "2", ref, timeout=180)
    with open(os.path.join(c.tmp, "ckpt_gangref", "logs", "rank_00000.log")) as f:
        want = e.step_lines(f.read())
    got = e.step_lines(logs[0])
    e.check_eq(sorted(got), list(range(1, 31)), "steps of rank 0")
    e.check_eq(got, want, "losses across two agents vs zctl run --nproc 2")


if __name__ == "__main__":
    e.run("e2e_two_agents", body)
