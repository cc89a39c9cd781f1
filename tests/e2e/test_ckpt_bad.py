#!/usr/bin/env python3
"""End to end, a checkpoint that fails verification on load: a 2-rank job trains past two
committed checkpoints; rank 1 is killed (SIGKILL) and, before the restart, bytes in the middle
of the newest committed checkpoint's rank_00001.zts are flipped. The next attempt's workers
find the shard corrupt and exit 5; the coordinator marks the checkpoint BAD (an event with the
worker's reason), and the attempt after resumes from the older committed one at once, without
using up max_restarts (1); the job completes and every loss after that resume equals the
uninterrupted `zctl run`'s, bit for bit. Then the variant where no good checkpoint is left
(every committed one is corrupted): each becomes BAD in turn and the job fails, saying the
newest checkpoint is corrupt and none older is left, instead of starting over from step 0."""
import os
import signal
import time

import e2e_util as e

STEPS, EVERY = (60, 10) if e.QUICK else (1200, 100)
BACKOFF = 4.0  # restart backoff (s): the kill, the corruption and the check fit in it


def corrupt_shard(path):
    """Flips 64 bytes in the middle of the file (its payload: a chunk checksum catches it)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        data = f.read(64)
        f.seek(size // 2)
        f.write(bytes(b ^ 0x5A for b in data))
        f.flush()
        os.fsync(f.fileno())
    return size // 2


def kill_rank1_and_settle(c, jid, committed_wanted):
    """Waits for committed_wanted committed checkpoints, SIGKILLs rank 1 of the running
    attempt, waits for the attempt to fail and rank 0 to stop (nothing more is written), and
    returns (attempt 1 id, committed checkpoints newest first) as they stand then."""
    e.wait_for(lambda: len(c.committed(jid)) >= committed_wanted, 120,
               f"{committed_wanted} committed checkpoints", interval=0.02)
    att1 = c.job(jid)["attempts"][-1]["id"]
    pids = e.wait_for(lambda: (lambda p: p if len(p) == 2 else None)(c.worker_pids("a1", att1)),
                      10, "both workers in the agent's status")
    t0 = time.time()
    os.kill(pids[1], signal.SIGKILL)
    e.wait_for(lambda: not e.pid_alive(pids[0]), 15, "rank 0 of the failed attempt to stop")
    e.wait_for(lambda: c.job(jid)["attempts"][0]["state"] == "FAILED", 15, "attempt 1 to fail")
    time.sleep(0.5)  # a shard report the agent had in flight
    cps = c.committed(jid)
    e.check(time.time() - t0 < BACKOFF - 1, "the kill took too long to settle before the restart")
    e.check(len(cps) >= committed_wanted, f"committed checkpoints: {cps}")
    return att1, cps


def fallback(c, want):
    job = c.write_job("bad", steps=STEPS, ckpt_every=EVERY, keep=3, max_restarts=1)
    jid = c.submit(job)
    att1, cps = kill_rank1_and_settle(c, jid, 2)
    newest, older = cps[0], cps[1]
    shard = os.path.join(newest["path"], "rank_00001.zts")
    at = corrupt_shard(shard)
    print(f"killed rank 1 of attempt {att1}; flipped 64 bytes at offset {at} of {shard}")

    j = c.wait_job(jid, ("COMPLETED", "FAILED", "CANCELED"), 300)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state (reason: %s)" % j["job"]["reason"])
    e.check_eq(j["job"]["restarts"], 1, "restarts counted against max_restarts")
    atts = sorted(j["attempts"], key=lambda a: a["number"])
    e.check_eq([a["number"] for a in atts], [1, 2, 3], "attempt numbers")
    a1, a2, a3 = atts
    e.check_eq(a1["state"], "FAILED", "attempt 1")
    e.check_eq(a2["resume_path"], newest["path"], "attempt 2 resumed from")
    e.check_eq(a2["state"], "FAILED", "attempt 2")
    e.check(f"exited with code 5 (checkpoint {newest['path']} failed verification)"
            in a2["reason"], "attempt 2's reason: " + a2["reason"])
    codes = {rk.get("rank", 0): rk["status"].get("exit_code", 0) for rk in a2["ranks"]}
    e.check(5 in codes.values(), f"exit codes of attempt 2: {codes}")
    e.check_eq(a3["state"], "SUCCEEDED", "attempt 3")
    e.check_eq(a3["resume_path"], older["path"], "attempt 3 resumed from")
    e.check_eq(a3["resume_step"], older["step"], "attempt 3's resume step")

    logs = c.zctl("logs", jid).stdout
    bad = [l for l in logs.splitlines() if "COMMITTED -> BAD" in l]
    e.check_eq(len(bad), 1, "BAD events:\n" + "\n".join(bad))
    e.check(f"step {newest['step']} at {newest['path']} failed verification when attempt 2 "
            "resumed from it" in bad[0] and "rank_00001.zts" in bad[0], "BAD event: " + bad[0])
    e.check("not counted against max_restarts" in logs, "the fallback restart:\n" + logs)
    print(bad[0].strip())
    # the BAD row stays unless attempt 3 wrote that step again (it makes it PARTIAL anew)
    rows = {cp["step"]: cp for cp in c.zctl_json("ckpt", "list", jid, "--all")["checkpoints"]}
    if newest["step"] > STEPS - EVERY * 3 and rows[newest["step"]]["state"] == "BAD":
        e.check("rank_00001.zts" in rows[newest["step"]].get("bad_reason", ""),
                str(rows[newest["step"]]))

    path = os.path.join(c.work_dir("a1"), f"attempt_{a3['id']}", "rank_00000.log")
    with open(path) as f:
        text = f.read()
    e.check("resuming from " + a3["resume_path"] in text, "attempt 3 was not given --resume")
    got = e.step_lines(text)
    e.check_resumed_losses(got, want, older["step"] + 1, STEPS)
    print(f"job {jid}: step {newest['step']} BAD, resumed from step {older['step']}; final loss "
          f"{got[STEPS]} equals the uninterrupted run's ({want[STEPS]})")


def none_left(c):
    job = c.write_job("allbad", steps=STEPS, ckpt_every=EVERY, keep=3, max_restarts=1)
    jid = c.submit(job)
    att1, cps = kill_rank1_and_settle(c, jid, 1)
    for cp in cps:
        corrupt_shard(os.path.join(cp["path"], "rank_00001.zts"))
    print(f"killed rank 1 of attempt {att1}; corrupted steps {[cp['step'] for cp in cps]}")
    j = c.wait_job(jid, ("COMPLETED", "FAILED", "CANCELED"), 120)
    e.check_eq(j["job"]["state"], "FAILED", "job state")
    oldest = cps[-1]
    reason = j["job"]["reason"]
    e.check(f"the newest checkpoint (step {oldest['step']} at {oldest['path']}) is corrupt and "
            "no older committed checkpoint is left, so the job does not start over from step 0"
            in reason and "rank_00001.zts" in reason, "job reason: " + reason)
    e.check_eq(j["job"]["restarts"], 1, "restarts")
    e.check_eq(len(j["attempts"]), 1 + len(cps), "attempts (one per corrupt checkpoint)")
    e.check(all(a.get("resume_path") for a in j["attempts"][1:]), "an attempt started from scratch")
    rows = c.zctl_json("ckpt", "list", jid)["checkpoints"]
    e.check_eq([(r["step"], r["state"]) for r in rows], [(cp["step"], "BAD") for cp in cps],
               "zctl ckpt list")
    human = c.zctl("ckpt", "list", jid).stdout
    e.check(f"step {oldest['step']} is BAD (failed verification on load; never resumed from): "
            in human, human)
    print(f"job {jid}: FAILED: {reason}")


def body(c):
    c.start_coord()
    c.start_agent("a1", "cpu:2")
    c.make_data()
    want = c.run_reference(c.write_job("ref", steps=STEPS, ckpt_every=EVERY, keep=3), STEPS)
    fallback(c, want)
    none_left(c)


if __name__ == "__main__":
    e.run("e2e_ckpt_bad", body, backoff=f"{BACKOFF:g}s")
