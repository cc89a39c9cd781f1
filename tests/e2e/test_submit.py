#!/usr/bin/env python3
"""End to end, the happy path: zcoord and one zagent --slots cpu:2; `zctl submit --follow` of a
2-rank job on a synthetic corpus shows progress and exits 0 once the job is COMPLETED; `zctl
job`, `zctl logs` and `zctl ckpt list` show the attempt, the workers' output and the committed
checkpoints; the newest checkpoint exports (llm.c and safetensors). Also prints the time from
submission to the first step and the heartbeat round trip."""
import json
import os
import re
import struct
import time

import e2e_util as e


def body(c):
    c.start_coord()
    c.start_agent("a1", "cpu:2")
    c.make_data()
    job = c.write_job("happy", steps=60, ckpt_every=20, eval_every=30)

    r = c.zctl("submit", job, "--follow", timeout=180)
    jid = int(r.stdout.split()[2])
    out = r.stdout + r.stderr
    e.check("COMPLETED" in out.splitlines()[-1], "the follow output does not end COMPLETED:\n" + out)
    e.check(re.search(r"step \d+/60 loss \d", out), "the follow output shows no progress:\n" + out)
    e.check("-> RUNNING" in out, "the follow output shows no RUNNING state:\n" + out)

    j = c.job(jid)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state")
    e.check_eq(j["job"]["step"], 60, "job step")
    e.check_eq(len(j["attempts"]), 1, "attempts")
    att = j["attempts"][0]
    e.check_eq(att["state"], "SUCCEEDED", "attempt state")
    e.check_eq(sorted(r["rank"] for r in att["ranks"]), [0, 1], "ranks")
    for rk in att["ranks"]:
        e.check_eq(rk["agent"], "a1", f"agent of rank {rk['rank']}")
        e.check_eq(rk["status"]["phase"], "EXITED", f"phase of rank {rk['rank']}")
        e.check_eq(rk["status"]["exit_code"], 0, f"exit code of rank {rk['rank']}")
        e.check(rk["status"]["pid"] > 0, f"rank {rk['rank']} has no pid")
    human = c.zctl("job", jid).stdout
    for want in ("COMPLETED", "attempt 1", "rank 0", "rank 1", "a1"):
        e.check(want in human, f"'zctl job {jid}' lacks '{want}':\n{human}")

    # the worker output reaches the coordinator (batched: allow a moment), and matches the
    # rank logs the agent keeps
    wdir = os.path.join(c.work_dir("a1"), f"attempt_{att['id']}")
    with open(os.path.join(wdir, "rank_00000.log")) as f:
        local0 = f.read()
    local_steps = e.step_lines(local0)
    e.check_eq(sorted(local_steps), list(range(1, 61)), "steps in the local rank-0 log")
    logs = e.wait_for(lambda: (lambda t: t if "step=60 loss=" in t else None)(
        c.zctl("logs", jid).stdout), 15, "rank 0's last step line in zctl logs")
    remote_steps = e.step_lines("\n".join(l.split("] ", 1)[1] for l in logs.splitlines()
                                          if "[rank 0]" in l))
    e.check_eq(remote_steps, local_steps, "step lines in zctl logs vs the agent's rank-0 log")
    e.check("[rank 1 err]" in logs or "[rank 1]" in logs, "no rank 1 output in zctl logs")
    e.check(os.path.exists(os.path.join(wdir, "rank_00001.log")), "no local rank-1 log")
    with open(os.path.join(wdir, "job.json")) as f:
        spec = json.load(f)
    e.check(os.path.isabs(spec["train"]["checkpoint_dir"]), "job.json paths are not absolute")

    cps = c.committed(jid)
    steps = [cp["step"] for cp in cps]
    e.check(60 in steps and 40 in steps, f"committed checkpoints {steps}, expected 40 and 60")
    for cp in cps:
        e.check_eq(cp["shards"], 2, f"shards of step {cp['step']}")
    human = c.zctl("ckpt", "list", jid).stdout
    e.check("COMMITTED" in human and "step_00000060" in human, "zctl ckpt list:\n" + human)

    newest = cps[0]["path"]
    out = os.path.join(c.tmp, "model.bin")
    c.zctl("ckpt", "export", newest, "--format", "llmc", "-o", out)
    with open(out, "rb") as f:
        magic, version = struct.unpack("<ii", f.read(8))
    e.check_eq(magic, 20240326, "llm.c export magic")
    st = os.path.join(c.tmp, "model.safetensors")
    c.zctl("ckpt", "export", newest, "--format", "safetensors", "-o", st)
    with open(st, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    e.check("transformer.wte.weight" in header, "safetensors export lacks transformer.wte.weight")

    # the DeepSpeed summary reaches the worker through the coordinator: an ignored key, a key
    # with no effect here and the planner's "auto" micro batch show in the job's logs
    with open(job) as f:
        spec = json.load(f)
    spec["name"] = "auto"
    spec["train"]["steps"] = 2
    spec["train"]["checkpoint_dir"] = "ckpt_auto"
    spec["train"]["batch_size"] = 16
    # the DeepSpeed config as a file next to the job: zctl sends it inline (the coordinator
    # opens no file a job names)
    with open(os.path.join(c.tmp, "ds_auto.json"), "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": "auto", "comms_config": {},
                   "zero_optimization": {"stage": 2, "round_robin_gradients": True}}, f)
    spec["deepspeed"] = "ds_auto.json"
    auto_job = os.path.join(c.tmp, "auto.json")
    with open(auto_job, "w") as f:
        json.dump(spec, f)
    r = c.zctl("submit", auto_job)
    ajid = int(r.stdout.split()[2])
    e.check("deepspeed config:" in r.stdout and "deepspeed.comms_config" in r.stdout,
            "zctl submit does not show the DeepSpeed summary:\n" + r.stdout)
    c.wait_job(ajid, ("COMPLETED",), 120)
    logs = c.zctl("logs", ajid).stdout
    for want in ("ignored (DeepSpeed does not know them either): deepspeed.comms_config",
                 "no effect here: deepspeed.zero_optimization.round_robin_gradients = true",
                 "auto: deepspeed.train_micro_batch_size_per_gpu = "):
        e.check(want in logs, f"the job's logs lack \"{want}\":\n{logs[-3000:]}")

    # every problem of a job file comes back from SubmitJob at once, each at its line
    spec["name"] = "bad"
    spec["train"]["precision"] = "fp8"
    spec["deepspeed"] = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Lamb"},
                         "zero_optimization": {"stage": 5, "stag": 1}}
    bad_job = os.path.join(c.tmp, "bad.json")
    with open(bad_job, "w") as f:
        json.dump(spec, f, indent=1)
    r = c.zctl("submit", bad_job, check_rc=False)
    e.check(r.returncode != 0, "a bad job was accepted:\n" + r.stdout)
    for want in ("train.precision: must be", "optimizer.type: \"Lamb\" is an optimizer",
                 "zero_optimization.stage: must be an integer from 0 to 3",
                 "zero_optimization.stag: unknown key; did you mean \"stage\"?"):
        e.check(re.search(r"bad\.json:\d+:\d+: [a-z_.]*" + re.escape(want), r.stderr),
                f"zctl submit does not show \"{want}\" at its line:\n{r.stderr}")

    # measured figures
    entries = [json.loads(l) for l in c.zctl("-o", "json", "logs", jid).stdout.splitlines()
               if l.strip()]
    first = min(x["time_ms"] for x in entries if x["text"].startswith("step=1 "))
    print(f"measure: submit_to_first_step_ms={first - j['job']['submitted_ms']} "
          f"(heartbeat interval 200 ms)")
    st = c.agent_status("a1")
    print(f"measure: heartbeat_rtt_ms p50={st['heartbeat_rtt_ms']['p50']:.3f} "
          f"p99={st['heartbeat_rtt_ms']['p99']:.3f} max={st['heartbeat_rtt_ms']['max']:.3f} "
          f"samples={st['heartbeat_rtt_ms']['samples']}")
    e.check_eq(st["reports"]["logs_dropped"], 0, "dropped log lines")
    e.check_eq(c.stop_agent("a1"), 0, "zagent exit code after SIGTERM")
    e.check("stopped:" in c.agent_log("a1"), "zagent did not log its stop")


if __name__ == "__main__":
    e.run("e2e_submit", body)
