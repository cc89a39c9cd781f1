#!/usr/bin/env python3
"""End to end, hang diagnosis: a 4-rank job on two agents (two ranks each); once a checkpoint
is committed, rank 1 is frozen with SIGSTOP. The other ranks report the collective they wait
in; within the hang timeout the attempt fails with a reason that names rank 1, where it
stopped and what ranks 0, 2 and 3 wait in (one collective, or the next one for those that
could finish the ring collective rank 1 stopped in). Every worker of the attempt is gone afterwards (the
stopped one killed, not left behind), the reason is in `zctl job`'s text and in the job's
events (`zctl logs`), and the job completes from its last checkpoint with every loss equal,
bit for bit, to an uninterrupted run's."""
import json
import os
import re
import signal
import time

import e2e_util as e

STEPS, EVERY = (40, 10) if e.QUICK else (120, 20)
HANG = 8.0  # the coordinator's hang timeout, seconds


def four_ranks(c, name, **kw):
    path = c.write_job(name, steps=STEPS, ckpt_every=EVERY, ranks=4, ranks_per_node=2, **kw)
    with open(path) as f:
        job = json.load(f)
    job["deepspeed"]["train_batch_size"] = 16
    # collectives wait far longer than the hang timeout: the coordinator diagnoses the hang,
    # not a collective timeout in the workers
    job["train"]["comm_timeout_ms"] = 120000
    with open(path, "w") as f:
        json.dump(job, f, indent=1)
    return path


def body(c):
    c.start_coord()
    c.start_agent("a1", "cpu:2")
    c.start_agent("a2", "cpu:2")
    c.make_data()

    want = c.run_reference(four_ranks(c, "ref", keep=2), STEPS, nproc=4, timeout=600)

    jid = c.submit(four_ranks(c, "hang", keep=2, max_restarts=2))
    first = e.wait_for(lambda: c.committed(jid), 120, "a committed checkpoint", interval=0.05)
    att1 = c.job(jid)["attempts"][-1]["id"]

    def all_pids():
        p = {}
        for a in ("a1", "a2"):
            p.update(c.worker_pids(a, att1))
        return p if len(p) == 4 else None

    pids = e.wait_for(all_pids, 15, "four workers in the agents' status")
    os.kill(pids[1], signal.SIGSTOP)
    t_stop = time.time()
    print(f"stopped rank 1 (pid {pids[1]}) of attempt {att1} after the checkpoint of step "
          f"{first[0]['step']}")

    def failed_attempt():
        j = c.job(jid)
        a = [x for x in j["attempts"] if x["id"] == att1][0]
        return a if a["state"] == "FAILED" else None

    a1 = e.wait_for(failed_attempt, HANG + 30, "the attempt to fail on the hang", interval=0.1)
    took = time.time() - t_stop
    reason = a1["reason"]
    print(f"attempt {att1} failed {took:.1f} s after SIGSTOP: {reason}")
    m = re.match(r"hang: rank 1 stopped in (\w+) at step (\d+) \(last collective (\w+) #(\d+)\); "
                 r"(.*) for rank 1 \(", reason)
    e.check(m is not None, "the reason does not name rank 1 and the others' collective: " + reason)
    part, step, prev_op, prev_seq, waits = m.groups()
    e.check(part in ("forward", "backward", "optimizer", "evaluation", "checkpoint"),
            "part " + part)
    # every other rank, in the collective it waits in: one, or (when rank 1 stopped inside a
    # ring collective that some of them could finish) the one after it
    waiting, seqs = set(), []
    for who, op, seq in re.findall(r"(ranks? [\d, -]+) waits? in (\w+) #(\d+)", waits):
        waiting |= {int(x) for x in re.findall(r"\d+", who)}
        seqs.append(int(seq))
    e.check_eq(sorted(waiting), [0, 2, 3], "the ranks named as waiting")
    e.check_eq(min(seqs), int(prev_seq) + 1, "the first waited collective follows the last one")
    e.check(max(seqs) <= min(seqs) + 1, f"the waited collectives {seqs} are one apart at most")
    e.check(int(step) > first[0]["step"], f"step {step} is after the committed checkpoint")
    e.check(took < HANG + 15, f"diagnosed {took:.1f} s after SIGSTOP (hang timeout {HANG} s)")

    # every worker of the failed attempt is gone, the stopped one included
    for r, pid in sorted(pids.items()):
        e.wait_for(lambda: not e.pid_alive(pid), 30, f"rank {r} (pid {pid}) to be gone")

    text = c.zctl("job", jid).stdout
    e.check("hang: rank 1 stopped" in text, "zctl job does not show the diagnosis:\n" + text)
    logs = c.zctl("logs", jid).stdout
    e.check("hang: rank 1 stopped" in logs, "the job's events do not hold the diagnosis")

    j = c.wait_job(jid, ("COMPLETED", "FAILED", "CANCELED"), 300)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state")
    a2 = sorted(j["attempts"], key=lambda a: a["number"])[-1]
    e.check_eq(a2["state"], "SUCCEEDED", "last attempt")
    e.check(a2["resume_step"] >= first[0]["step"], f"resumed from step {a2['resume_step']}")
    got = {}
    for a in ("a1", "a2"):
        path = os.path.join(c.work_dir(a), f"attempt_{a2['id']}", "rank_00000.log")
        if os.path.exists(path):
            with open(path) as f:
                got = e.step_lines(f.read())
    e.check_resumed_losses(got, want, a2["resume_step"] + 1, STEPS)
    print(f"resumed at step {a2['resume_step']}; final loss {got[STEPS]} equals the "
          f"uninterrupted run's ({want[STEPS]})")


if __name__ == "__main__":
    e.run("e2e_hang", body, hang_timeout=f"{HANG:.0f}s")
