#!/usr/bin/env python3
"""End to end, cancel: `zctl cancel ID` on a running 2-rank job. The job and its attempt end
CANCELED, the agent stops both workers (SIGTERM) and forgets them, and its slots are free for
the next job, which runs to completion."""
import e2e_util as e


def body(c):
    c.start_coord()
    c.start_agent("a1", "cpu:2")
    c.make_data()
    job = c.write_job("forever", steps=1000000, ckpt_every=0)
    jid = c.submit(job)
    e.wait_for(lambda: c.job(jid)["job"]["step"] >= 5, 60, "the job to train a few steps",
               interval=0.1)
    att = c.job(jid)["attempts"][-1]["id"]
    pids = e.wait_for(lambda: (lambda p: p if len(p) == 2 else None)(c.worker_pids("a1", att)),
                      10, "both workers in the agent's status")

    r = c.zctl("cancel", jid)
    e.check("CANCELED" in r.stdout + r.stderr, "zctl cancel output:\n" + r.stdout + r.stderr)
    j = c.wait_job(jid, ("CANCELED",), 10)
    e.check_eq(j["attempts"][-1]["state"], "CANCELED", "attempt state")
    e.wait_for(lambda: not any(e.pid_alive(p) for p in pids.values()), 10,
               f"the workers {sorted(pids.values())} to stop")
    e.wait_for(lambda: not (c.agent_status("a1") or {"workers": [1]})["workers"], 5,
               "the agent to forget the canceled workers")
    log = c.agent_log("a1")
    e.check("stopping rank 0 of attempt" in log and "stopping rank 1 of attempt" in log,
            "the agent did not stop the workers itself")
    r = c.zctl("wait", jid, check_rc=False)
    e.check_eq(r.returncode, 3, "zctl wait exit code for a canceled job")

    # the slots are free again
    job = c.write_job("after", steps=10)
    r = c.zctl("submit", job, "--follow", timeout=120)
    e.check("COMPLETED" in (r.stdout + r.stderr).splitlines()[-1], "next job:\n" + r.stdout)


if __name__ == "__main__":
    e.run("e2e_cancel", body)
