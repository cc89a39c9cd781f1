#!/usr/bin/env python3
"""End to end, failure and restart: once a checkpoint is committed, one worker of a running
2-rank job is killed with SIGKILL. The attempt fails, the other rank is stopped, a new attempt
resumes from the newest committed checkpoint (its resume step is checked) and the job
completes; every loss after the resume equals the uninterrupted run's, bit for bit (same rank
count and stage)."""
import os
import signal

import e2e_util as e

STEPS, EVERY = (60, 20) if e.QUICK else (1200, 100)


def body(c):
    c.start_coord()
    c.start_agent("a1", "cpu:2")
    c.make_data()

    # the uninterrupted run, locally, with the same job
    want = c.run_reference(c.write_job("ref", steps=STEPS, ckpt_every=EVERY, keep=2), STEPS)

    job = c.write_job("crash", steps=STEPS, ckpt_every=EVERY, keep=2, max_restarts=2)
    jid = c.submit(job)
    first = e.wait_for(lambda: c.committed(jid), 60, "a committed checkpoint", interval=0.02)
    seen_step = first[0]["step"]
    j = c.job(jid)
    att1 = j["attempts"][-1]["id"]
    pids = e.wait_for(lambda: (lambda p: p if len(p) == 2 else None)(c.worker_pids("a1", att1)),
                      10, "both workers in the agent's status")
    os.kill(pids[1], signal.SIGKILL)
    print(f"killed rank 1 (pid {pids[1]}) of attempt {att1} after the checkpoint of step "
          f"{seen_step} was committed")
    # the other rank does not train on alone: it fails on its lost peer or its agent stops it
    e.wait_for(lambda: not e.pid_alive(pids[0]), 15, "rank 0 of the failed attempt to stop")

    j = c.wait_job(jid, ("COMPLETED", "FAILED", "CANCELED"), 180)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state")
    e.check_eq(j["job"]["restarts"], 1, "restarts")
    e.check_eq(len(j["attempts"]), 2, "attempts")
    a1, a2 = sorted(j["attempts"], key=lambda a: a["number"])
    e.check_eq(a1["state"], "FAILED", "first attempt")
    r1 = {rk["rank"]: rk["status"] for rk in a1["ranks"]}
    e.check_eq(r1[1]["exit_signal"], 9, "signal that ended rank 1 of the first attempt")
    e.check_eq(a2["state"], "SUCCEEDED", "second attempt")
    e.check(a2["resume_path"].endswith("step_%08d" % a2["resume_step"]),
            f"resume path {a2['resume_path']} vs step {a2['resume_step']}")
    e.check(a2["resume_step"] >= seen_step, f"resumed from step {a2['resume_step']}, but step "
            f"{seen_step} was committed before the failure")
    e.check_eq(a2["resume_step"] % EVERY, 0, "resume step on the checkpoint grid")

    # the second attempt's rank 0 starts right after its resume step and matches the
    # uninterrupted run everywhere
    path = os.path.join(c.work_dir("a1"), f"attempt_{a2['id']}", "rank_00000.log")
    with open(path) as f:
        text = f.read()
    e.check("resuming from " + a2["resume_path"] in text, "the worker was not given --resume")
    got = e.step_lines(text)
    e.check_resumed_losses(got, want, a2["resume_step"] + 1, STEPS)
    print(f"resumed at step {a2['resume_step']}; final loss {got[STEPS]} equals the "
          f"uninterrupted run's ({want[STEPS]})")


if __name__ == "__main__":
    e.run("e2e_restart", body)
