#!/usr/bin/env python3
"""zagent with a scripted worker (--worker), to reach what zworker rarely does: the
environment a worker gets (rank, world, session, rendezvous, report fd, OMP_NUM_THREADS),
output that is not UTF-8, a 20000-character line, a flood of lines beyond --log-queue (dropped,
counted and marked), report-fd lines (phase, step, checkpoint shards the coordinator commits),
exit codes (retryable and not), and a worker that ignores SIGTERM (SIGKILL after
--stop-grace)."""
import json
import os
import time

import e2e_util as e

WORKER = r"""#!/bin/bash
job="$1"
name=$(grep -o '"name": *"[a-z0-9]*"' "$job" | head -1 | sed 's/.*"\([a-z0-9]*\)"$/\1/')
echo "hello rank=$ZT_RANK world=$ZT_WORLD_SIZE local=$ZT_LOCAL_RANK session=$ZT_SESSION rdzv=${ZT_RENDEZVOUS:-none} omp=$OMP_NUM_THREADS report_fd=$ZT_REPORT_FD job_id=$ZT_JOB_ID token=${ZT_TOKEN:-none}"
echo "rank=$ZT_RANK phase=training" >&3
case "$name" in
io)
  printf 'bad utf8: \xff\xfe ok \xe2\x82\xac\n'
  head -c 20000 /dev/zero | tr '\0' 'x'; echo
  echo "rank=$ZT_RANK step=1 loss=2.5 tok_s=100 coll_seq=1 mem_params=10" >&3
  echo "to stderr" >&2
  if [ "$ZT_RANK" = 1 ]; then touch r1.ready; else
    # rank 0 floods the queue once rank 1's first lines are in it (same attempt dir)
    for i in $(seq 1 100); do [ -e r1.ready ] && break; sleep 0.05; done
    sleep 0.1
    for i in $(seq 1 400); do echo "flood $i"; done
  fi
  # the job's checkpoint_dir, from the resolved job file (the last argument)
  job="${@: -1}"
  ck=$(sed -n 's/.*"checkpoint_dir": *"\([^"]*\)".*/\1/p' "$job")
  d="$ck/step_00000001"; mkdir -p "$d"; echo x > "$d/rank_0000$ZT_RANK.zts"
  echo "rank=$ZT_RANK ckpt step=1 file=$d/rank_0000$ZT_RANK.zts bytes=2 crc32c=deadbeef" >&3
  sleep 0.5
  exit 0;;
retry) exit 1;;
fatal) exit 2;;
stubborn) trap '' TERM; echo "ignoring SIGTERM"; exec sleep 1000;;
esac
"""


def logs(c, jid):
    r = c.zctl("-o", "json", "logs", jid, "--no-events")
    return [json.loads(l) for l in r.stdout.splitlines() if l.strip()]


def body(c):
    c.start_coord()
    worker = os.path.join(c.tmp, "worker.sh")
    with open(worker, "w") as f:
        f.write(WORKER)
    os.chmod(worker, 0o755)
    env = dict(c.env, ZT_TOKEN="")  # no token here; and none must reach workers anyway
    env.pop("OMP_NUM_THREADS")
    c.start_agent("a1", "cpu:2", extra=["--worker", worker, "--log-queue", "100",
                                         "--stop-grace", "1s"], env=env)
    os.makedirs(os.path.join(c.tmp, "data"), exist_ok=True)

    # ---- output, reports and environment ----
    jid = c.submit(c.write_job("io", steps=1, max_restarts=0))
    j = c.wait_job(jid, ("COMPLETED", "FAILED"), 60)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state")
    att = j["attempts"][0]["id"]

    def accounted(x):
        """Every flood line is either in the logs or counted by a drop marker (the queue may
        fill, drain and fill again: one marker per run of dropped lines), and rank 1's last
        line is in."""
        if not any(y["text"] == "to stderr" and y["rank"] == 1 for y in x):
            return None
        r0 = [y["text"] for y in x if y["rank"] == 0]
        marks = [t for t in r0 if "were dropped here" in t]
        sent = sum(1 for t in r0 if t.startswith("flood "))
        return x if marks and sent + sum(int(m.split()[1]) for m in marks) + 2 >= 400 else None

    ents = e.wait_for(lambda: accounted(logs(c, jid)), 15,
                      "every flood line sent or counted by a drop marker")
    texts = {0: [], 1: []}
    for x in ents:
        if x["rank"] in texts:
            texts[x["rank"]].append(x)
    hello = {r: [x["text"] for x in texts[r] if x["text"].startswith("hello")][0] for r in (0, 1)}
    rdzv = set()
    for r in (0, 1):
        kv = dict(t.split("=", 1) for t in hello[r].split()[1:])
        e.check_eq(kv["rank"], str(r), "ZT_RANK")
        e.check_eq(kv["world"], "2", "ZT_WORLD_SIZE")
        e.check_eq(kv["local"], str(r), "ZT_LOCAL_RANK")
        e.check_eq(kv["session"], str(att), "ZT_SESSION (the attempt id)")
        e.check_eq(kv["report_fd"], "3", "ZT_REPORT_FD")
        e.check_eq(kv["job_id"], str(jid), "ZT_JOB_ID from the coordinator's env")
        e.check_eq(kv["token"], "none", "ZT_TOKEN leaked to the worker")
        e.check_eq(kv["omp"], str(max(1, os.cpu_count() // 2)), "OMP_NUM_THREADS for cpu:2")
        e.check(kv["rdzv"].startswith("tcp://127.0.0.1:"), "ZT_RENDEZVOUS " + kv["rdzv"])
        rdzv.add(kv["rdzv"])
    e.check_eq(len(rdzv), 1, "ranks got different rendezvous addresses")

    t0 = [x for x in texts[0] if x["source"] == "STDOUT"]
    bad = [x["text"] for x in t0 if x["text"].startswith("bad utf8")]
    e.check_eq(bad, ["bad utf8: ?? ok \u20ac"], "a line with invalid UTF-8")
    long = [x["text"] for x in t0 if x["text"].startswith("xxxx")]
    e.check_eq([len(t) for t in long], [8192, 8192, 20000 - 2 * 8192], "a 20000-character line")
    e.check(any(x["source"] == "STDERR" and x["text"] == "to stderr" for x in texts[0]),
            "stderr line")
    flood = [x for x in t0 if x["text"].startswith("flood ")]
    marker = [x["text"] for x in texts[0] if "were dropped here" in x["text"]]
    e.check(len(flood) < 400 and marker, f"{len(flood)} of 400 flood lines, marker {marker}")
    # the queue may fill, drain and fill again: one marker per run of dropped lines
    n_dropped = sum(int(m.split()[1]) for m in marker)
    e.check(len(flood) + n_dropped + 2 >= 400, f"{len(flood)} sent + {n_dropped} dropped")
    e.check(all("rank_00000.log" in m for m in marker),
            "the marker does not say where the full output is")
    local = os.path.join(c.work_dir("a1"), f"attempt_{att}", "rank_00000.log")
    with open(local, "rb") as f:
        raw = f.read()
    e.check(b"flood 400\n" in raw and b"\xff\xfe" in raw, "the local log is not complete and raw")
    st = c.agent_status("a1")["reports"]
    e.check(st["logs_dropped"] >= n_dropped, f"status counts {st['logs_dropped']} dropped")

    cps = c.committed(jid)
    e.check_eq([cp["step"] for cp in cps], [1], "committed checkpoints")
    e.check_eq(sorted(s["crc32c"] for s in cps[0]["shard"]), [0xdeadbeef] * 2, "shard crc32c")
    e.check_eq(cps[0]["path"], os.path.join(c.tmp, "ckpt_io", "step_00000001"),
               "checkpoint path")
    e.check_eq(c.job(jid)["job"]["step"], 1, "step reported through the report fd")

    # ---- exit codes ----
    jid = c.submit(c.write_job("retry", steps=1, max_restarts=1))
    j = c.wait_job(jid, ("FAILED", "COMPLETED"), 60)
    e.check_eq(len(j["attempts"]), 2, "attempts of a job whose workers exit 1 (retryable)")
    e.check("exited with code 1" in j["attempts"][0]["reason"], j["attempts"][0]["reason"])
    jid = c.submit(c.write_job("fatal", steps=1, max_restarts=3))
    j = c.wait_job(jid, ("FAILED", "COMPLETED"), 60)
    e.check_eq(len(j["attempts"]), 1, "attempts of a job whose workers exit 2 (not retryable)")
    e.check("not retryable" in j["job"]["reason"], j["job"]["reason"])

    # ---- SIGTERM ignored: SIGKILL after the grace period ----
    jid = c.submit(c.write_job("stubborn", steps=1))
    c.wait_job(jid, ("RUNNING",), 30)
    pids = e.wait_for(lambda: (lambda p: p if len(p) == 2 else None)(c.worker_pids("a1")), 10,
                      "two stubborn workers")
    t0 = time.time()
    c.zctl("cancel", jid)
    e.wait_for(lambda: not any(e.pid_alive(p) for p in pids.values()), 10,
               "the stubborn workers to be killed")
    took = time.time() - t0
    e.check(took >= 0.9, f"the workers died {took:.2f} s after the cancel: before the grace")
    e.check("did not stop within 1000 ms of SIGTERM; sending SIGKILL" in c.agent_log("a1"),
            "no SIGKILL note in the agent's log")
    e.check_eq(c.stop_agent("a1"), 0, "zagent exit code")


if __name__ == "__main__":
    e.run("e2e_agent_worker_io", body)
