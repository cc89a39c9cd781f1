#!/usr/bin/env python3
"""End to end, a node stops or dies. Stopped with SIGTERM, zagent stops its workers and reports
their exits in a last heartbeat that says it is leaving: the coordinator marks it LOST at once
(reason "agent stopped", no heartbeat timeout), fails the attempt that had ranks there with that
reason, and the job runs again on another agent; an idle agent that stops is LOST within a
second too.
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


def lost_within(c, name, since, limit_s):
    """Seconds from `since` to the start of the first `zctl agents` that shows name LOST (zctl
    itself takes a while to start, more so in sanitizer builds: the call's start is what
    counts); fails when calls started limit_s after `since` still show it otherwise."""
    while True:
        start = time.time()
        state = agent_state(c, name)
        if state == "LOST":
            return start - since
        e.check(start - since < limit_s, f"agent {name} still {state} {start - since:.2f} s "
                f"after it stopped")
        time.sleep(0.02)


def graceful_stop(c):
    """SIGTERM to the agent: it stops its workers and reports their exits in a last heartbeat
    marked leaving, so it is LOST and the attempt fails at once (no heartbeat timeout); the job
    restarts on the other agent. Then that one, idle, stops: LOST at once, with its reason."""
    job = c.write_job("term", steps=STEPS, ckpt_every=EVERY, max_restarts=1)
    jid = c.submit(job)
    e.wait_for(lambda: c.committed(jid), 60, f"a committed checkpoint of job {jid}",
               interval=0.02)
    att = c.job(jid)["attempts"][-1]["id"]
    pids = c.worker_pids("a1", att)
    c.start_agent("a2", "cpu:2")  # capacity elsewhere
    t0 = time.time()
    e.check_eq(c.stop_agent("a1"), 0, "zagent exit code on SIGTERM")
    exited = time.time()
    e.check(not any(e.pid_alive(p) for p in pids.values()), "workers outlived their agent")
    lost = lost_within(c, "a1", exited, 5.0)  # the reasons checked below prove the cause
    j = c.wait_job(jid, ("QUEUED", "SCHEDULED", "RUNNING"), HB_TIMEOUT_S + 10)
    took = time.time() - t0
    a1 = j["attempts"][0]
    e.check_eq(a1["state"], "FAILED", "attempt state after the agent stopped")
    e.check("agent a1 lost (rank" in a1["reason"] and "agent stopped" in a1["reason"],
            "attempt reason: " + a1["reason"])
    # the reason above ("agent stopped") is what proves the leave was heard: a heartbeat
    # timeout records "no heartbeat" instead; the wall time is only reported (a loaded machine
    # stretches the worker shutdown and every zctl call)
    print(f"job {jid}: re-queued {took:.2f} s after SIGTERM (heartbeat timeout {HB_TIMEOUT_S} s)")
    exits = {rk["rank"]: rk["status"].get("exit_signal", 0) or rk["status"].get("exit_code", 0)
             for rk in a1["ranks"]}
    print(f"job {jid}: agent a1 exited {exited - t0:.2f} s after SIGTERM and was LOST "
          f"{lost:.3f} s later; attempt failed: {a1['reason']}; rank exits {exits}")
    j = c.wait_job(jid, ("COMPLETED", "FAILED"), 120)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state after it moved to a2")
    e.check_eq(len(j["attempts"]), 2, "attempts")
    a2 = max(j["attempts"], key=lambda a: a["number"])
    e.check_eq(sorted({rk["agent"] for rk in a2["ranks"]}), ["a2"], "agents of the new attempt")
    e.check(a2["resume_step"] >= EVERY, f"the new attempt resumed from step {a2['resume_step']}")

    # idle: LOST as soon as its leaving heartbeat is handled, with an event that says why
    e.check_eq(agent_state(c, "a2"), "ALIVE", "a2 before it stops")
    e.check_eq(c.stop_agent("a2"), 0, "exit code of the idle agent")
    idle = lost_within(c, "a2", time.time(), 5.0)
    e.check("agent a2: ALIVE -> LOST: agent stopped" in c.coord_log(),
            "zcoord did not log the agent event")
    print(f"idle agent a2 LOST {idle:.3f} s after it exited")
    c.start_agent("a1", "cpu:2")


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
