#!/usr/bin/env python3
"""End to end, a node stops or dies. Stopped with SIGTERM, zagent stops its workers and reports
their exits before it leaves, so the attempt fails at once and runs again when it is back.
Killed with SIGKILL while its job trains, its workers die with it (parent-death signal), the
coordinator marks the agent LOST after the heartbeat timeout and fails the attempt; the job
waits in the queue until capacity returns (the agent restarts under the same name) and then
resumes from its checkpoint and completes. A job with max_restarts 0 fails instead when its
agent is lost."""
import time

import e2e_util as e

HB_TIMEOUT_S = 2
STEPS, EVERY = (60, 20) if e.QUICK else (1000, 100)


def kill_agent_mid_run(c, jid):
    e.wait_for(lambda: c.committed(jid), 60, f"a committed checkpoint of job {jid}",
               interval=0.02)
    att = c.job(jid)["attempts"][-1]["id"]
    pids = e.wait_for(lambda: (lambda p: p if len(p) == 2 else None)(c.worker_pids("a1", att)),
                      10, "both workers in the agent's status")
    c.kill_agent("a1")
    t0 = time.time()
    e.wait_for(lambda: not any(e.pid_alive(p) for p in pids.values()), 5,
               f"the workers {sorted(pids.values())} to die with their agent")
    print(f"job {jid}: agent killed; its workers {sorted(pids.values())} were gone after "
          f"{time.time() - t0:.2f} s")
    return t0


def agent_state(c, name):
    for a in c.zctl_json("agents")["agents"]:
        if a["name"] == name:
            return a["state"]
    return None


def graceful_stop(c):
    """SIGTERM to the agent: it stops its workers and reports their exits in a last heartbeat,
    so the attempt fails at once (no heartbeat timeout); restarted, it runs the next attempt."""
    job = c.write_job("term", steps=STEPS, ckpt_every=EVERY, max_restarts=1)
    jid = c.submit(job)
    e.wait_for(lambda: c.committed(jid), 60, f"a committed checkpoint of job {jid}",
               interval=0.02)
    att = c.job(jid)["attempts"][-1]["id"]
    pids = c.worker_pids("a1", att)
    t0 = time.time()
    e.check_eq(c.stop_agent("a1"), 0, "zagent exit code on SIGTERM")
    e.check(not any(e.pid_alive(p) for p in pids.values()), "workers outlived their agent")
    j = c.wait_job(jid, ("QUEUED", "SCHEDULED"), HB_TIMEOUT_S + 10)
    took = time.time() - t0
    a1 = j["attempts"][0]
    e.check_eq(a1["state"], "FAILED", "attempt state after the agent stopped")
    e.check("signal 15" in a1["reason"], "attempt reason: " + a1["reason"])
    e.check(took < HB_TIMEOUT_S, f"the attempt failed {took:.1f} s after SIGTERM: the exits were "
            f"not reported before the agent left")
    print(f"job {jid}: agent stopped; attempt failed {took:.2f} s later: {a1['reason']}")
    c.start_agent("a1", "cpu:2")
    j = c.wait_job(jid, ("COMPLETED", "FAILED"), 120)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state after the agent restarted")


def body(c):
    c.start_coord()
    c.start_agent("a1", "cpu:2")
    c.make_data()
    graceful_stop(c)

    job = c.write_job("lost", steps=STEPS, ckpt_every=EVERY, max_restarts=1)
    jid = c.submit(job)
    t0 = kill_agent_mid_run(c, jid)
    e.wait_for(lambda: agent_state(c, "a1") == "LOST", HB_TIMEOUT_S + 10, "agent a1 to be LOST")
    lost_after = time.time() - t0
    e.check(lost_after >= HB_TIMEOUT_S * 0.8, f"LOST after {lost_after:.1f} s, before the "
            f"{HB_TIMEOUT_S} s heartbeat timeout")
    j = c.wait_job(jid, ("QUEUED",), 10)
    e.check("lost" in j["attempts"][-1]["reason"], "attempt reason: " + j["attempts"][-1]["reason"])
    e.check_eq(j["attempts"][-1]["state"], "FAILED", "state of the attempt on the lost agent")
    time.sleep(1.0)
    j = c.job(jid)
    e.check_eq(j["job"]["state"], "QUEUED", "job state with no capacity")
    e.check_eq(len(j["attempts"]), 1, "attempts before the agent is back")
    print(f"agent LOST after {lost_after:.1f} s; job {jid} waits: {j['job']['pending_reason']}")

    c.start_agent("a1", "cpu:2")  # capacity returns
    j = c.wait_job(jid, ("COMPLETED", "FAILED"), 120)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state after the agent came back")
    e.check_eq(len(j["attempts"]), 2, "attempts")
    a2 = max(j["attempts"], key=lambda a: a["number"])
    e.check(a2["resume_step"] >= EVERY, f"the new attempt resumed from step {a2['resume_step']}")
    e.check_eq(j["job"]["step"], STEPS, "final step")

    # restarts exhausted: the job fails
    job = c.write_job("lost0", steps=STEPS, ckpt_every=EVERY, max_restarts=0)
    jid = c.submit(job)
    kill_agent_mid_run(c, jid)
    j = c.wait_job(jid, ("FAILED", "COMPLETED", "QUEUED"), HB_TIMEOUT_S + 15)
    e.check_eq(j["job"]["state"], "FAILED", "job without restarts after its agent was lost")
    e.check("no restarts left" in j["job"]["reason"] and "lost" in j["job"]["reason"],
            "reason: " + j["job"]["reason"])
    print(f"job {jid}: {j['job']['reason']}")


if __name__ == "__main__":
    e.run("e2e_agent_lost", body, hb_timeout=f"{HB_TIMEOUT_S}s")
