#!/usr/bin/env python3
"""End to end, the coordinator restarts: zcoord is killed with SIGKILL while a 2-rank job
trains and started again on the same database and port. The workers train on meanwhile, the
agent reconnects with the same registration (no restart of the job), the reports queued while
the coordinator was away arrive, and the job completes in its first attempt."""
import time

import e2e_util as e

STEPS, EVERY = (60, 20) if e.QUICK else (1000, 100)


def body(c):
    c.start_coord()
    c.start_agent("a1", "cpu:2")
    c.make_data()
    job = c.write_job("steady", steps=STEPS, ckpt_every=EVERY)
    jid = c.submit(job)
    e.wait_for(lambda: c.job(jid)["job"]["step"] >= 20, 60, "the job to train", interval=0.05)
    att = c.job(jid)["attempts"][-1]["id"]
    pids = c.worker_pids("a1", att)
    e.check_eq(len(pids), 2, "running workers")

    c.kill_coord()
    t0 = time.time()
    before = max(w["step"] for w in c.agent_status("a1")["workers"] if w["attempt_id"] == att)
    time.sleep(1.5)
    # the workers train on: still running, or (a fast machine) done with every step, exit 0
    st = c.agent_status("a1")
    ws = {w["rank"]: w for w in st["workers"] if w["attempt_id"] == att}
    for rank, pid in pids.items():
        # a worker that just finished may not be in the agent's log yet: give it a moment
        def alive_or_done(pid=pid):
            return e.pid_alive(pid) or f"(pid {pid}) exited with code 0" in c.agent_log("a1")
        try:
            e.wait_for(alive_or_done, 5, f"rank {rank} to run on or exit 0", interval=0.1)
        except AssertionError:
            e.check(False, f"rank {rank} (pid {pid}) died with the coordinator: {ws.get(rank)}")
    after = max(w["step"] for w in ws.values())
    e.check(after > before, f"the workers did not train while zcoord was down (step {before} "
            f"before, {after} after)")
    e.check(st["heartbeats_failed"] >= 1, "the agent did not notice the coordinator was gone")
    c.start_coord()
    print(f"zcoord down for {time.time() - t0:.1f} s")

    j = c.wait_job(jid, ("COMPLETED", "FAILED"), 120)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state")
    e.check_eq(len(j["attempts"]), 1, "attempts (the job must not have restarted)")
    e.check_eq(j["job"]["restarts"], 0, "restarts")
    e.check_eq(j["job"]["step"], STEPS, "final step")
    log = c.agent_log("a1")
    e.check("cannot reach the coordinator" in log, "no warning about the missing coordinator")
    e.check("answers heartbeats again" in log, "no note that the coordinator came back")
    e.check("registering again" not in log, "the agent had to register again")
    # the shard reports sent while it was down were retried: every checkpoint is complete
    steps = sorted(cp["step"] for cp in c.committed(jid))
    e.check(STEPS in steps and len(steps) >= 2, f"committed checkpoints {steps}")
    e.check_eq(c.agent_status("a1")["incarnation"], 1, "incarnation")


if __name__ == "__main__":
    e.run("e2e_coord_restart", body, hb_timeout="10s")
