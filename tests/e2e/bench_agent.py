#!/usr/bin/env python3
"""Bench (label bench): what zagent costs and how quickly it acts, on loopback with the real
binaries. Prints one `measure:` line per figure:
- submit_to_first_step_ms: from SubmitJob to rank 0's first step line (the agent learns of the
  placement at its next heartbeat), median of 15 jobs submitted at random phases of the heartbeat, at heartbeat intervals of 1 s (zcoord's
  default) and 200 ms;
- heartbeat_rtt_ms: Heartbeat round trip as the agent measures it (p50/p99/max);
- zagent CPU (% of one core) and memory (RSS, peak RSS) with 2 idle workers (a worker that
  sleeps), and while 2 real workers train and their output is forwarded."""
import os
import random
import statistics
import time

import e2e_util as e

HZ = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def mem_kb(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    return out


def first_step_latency(c, name, n, hb_s):
    lat = []
    rnd = random.Random(1)
    for i in range(n):
        # each job its own file and checkpoint_dir (a checkpoint directory belongs to the job
        # that first wrote it: the same file twice is refused)
        job = c.write_job(f"{name}{i}", steps=5)
        # submissions at random phases of the heartbeat (right after a job ends the agent has
        # just sent a heartbeat: the next one is a whole interval away)
        time.sleep(rnd.uniform(0, hb_s))
        jid = c.submit(job)
        c.wait_job(jid, ("COMPLETED",), 120)
        j = c.job(jid)
        entries = [x for x in (e.json.loads(l) for l in c.zctl("-o", "json", "logs", jid)
                               .stdout.splitlines() if l.strip())]
        first = min(x["time_ms"] for x in entries if x["text"].startswith("step=1 "))
        lat.append(first - j["job"]["submitted_ms"])
    return lat


def stop_and_forget(c, name):
    """Stops an agent and waits until the coordinator no longer schedules on it (LOST): a
    stopped agent stays ALIVE until its heartbeat timeout."""
    c.stop_agent(name)
    e.wait_for(lambda: any(a["name"] == name and a["state"] == "LOST"
                           for a in c.zctl_json("agents")["agents"]), 30, f"{name} to be LOST")


def body(c):
    c.start_coord()
    c.make_data()

    # 1 s heartbeats (the default), then 200 ms
    c.start_agent("slow", "cpu:2", extra=["--heartbeat-ms", "1000"])
    lat = first_step_latency(c, "lat-slow", 15, 1.0)
    print(f"measure: submit_to_first_step_ms median={statistics.median(lat):.0f} "
          f"min={min(lat)} max={max(lat)} (heartbeat 1000 ms, 15 jobs)")
    stop_and_forget(c, "slow")
    c.start_agent("fast", "cpu:2", extra=["--heartbeat-ms", "200"])
    lat = first_step_latency(c, "lat-fast", 15, 0.2)
    print(f"measure: submit_to_first_step_ms median={statistics.median(lat):.0f} "
          f"min={min(lat)} max={max(lat)} (heartbeat 200 ms, 15 jobs)")
    stop_and_forget(c, "fast")

    # two idle workers: a "worker" that only sleeps
    idle = os.path.join(c.tmp, "idle_worker.sh")
    with open(idle, "w") as f:
        f.write("#!/bin/sh\nexec sleep 100000\n")
    os.chmod(idle, 0o755)
    p = c.start_agent("idle", "cpu:2", extra=["--worker", idle, "--heartbeat-ms", "1000"])
    jid = c.submit(c.write_job("idle", steps=1000))
    e.wait_for(lambda: len(c.worker_pids("idle")) == 2, 30, "two idle workers")
    time.sleep(2)
    t0, c0 = time.time(), cpu_s(p.pid)
    time.sleep(20)
    t1, c1 = time.time(), cpu_s(p.pid)
    m = mem_kb(p.pid)
    st = c.agent_status("idle")
    print(f"measure: zagent_idle_cpu_percent={(c1 - c0) / (t1 - t0) * 100:.3f} over "
          f"{t1 - t0:.0f} s with 2 idle workers (heartbeat 1000 ms)")
    print(f"measure: zagent_rss_kib={m['VmRSS']} peak_rss_kib={m['VmHWM']} (2 idle workers)")
    print(f"measure: heartbeat_rtt_ms p50={st['heartbeat_rtt_ms']['p50']:.3f} "
          f"p99={st['heartbeat_rtt_ms']['p99']:.3f} max={st['heartbeat_rtt_ms']['max']:.3f} "
          f"samples={st['heartbeat_rtt_ms']['samples']} (2 workers reported)")
    c.zctl("cancel", jid)
    stop_and_forget(c, "idle")

    # two training workers whose every line is forwarded
    p = c.start_agent("busy", "cpu:2", extra=["--heartbeat-ms", "1000"])
    jid = c.submit(c.write_job("busy", steps=2500, ckpt_every=500))
    e.wait_for(lambda: len(c.worker_pids("busy")) == 2, 30, "two workers")
    t0, c0 = time.time(), cpu_s(p.pid)
    j = c.wait_job(jid, ("COMPLETED",), 300)
    t1, c1 = time.time(), cpu_s(p.pid)
    m = mem_kb(p.pid)
    st = c.agent_status("busy")["reports"]
    print(f"measure: zagent_busy_cpu_percent={(c1 - c0) / (t1 - t0) * 100:.2f} over "
          f"{t1 - t0:.1f} s, 2 workers training {j['job']['step']} steps; "
          f"{st['logs_sent']} lines and {st['steps_sent']} step reports forwarded, "
          f"{st['logs_dropped']} dropped; rss_kib={m['VmRSS']} peak_rss_kib={m['VmHWM']}")


if __name__ == "__main__":
    e.run("bench_agent", body, hang_timeout="10m")
