#!/usr/bin/env python3
"""End to end, the demo: scripts/demo.sh (what `make demo` runs) with a short job in a temporary
DEMO_DIR exits 0, prints the dashboard's address first and the loss next to the entropy floor; a
coordinator started afterwards on the demo's database shows the job COMPLETED with one rank on
each agent, its metrics and its committed checkpoints; no process the demo started is left
running. Then Ctrl-C (SIGINT to the script) in the middle of training stops every process within
seconds and the script exits non-zero."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.request

import e2e_util as e

SRC = os.environ.get("ZT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.path.abspath(e.BIN))
STEPS = 20


def start_demo(c, name, steps, out):
    demo_dir = os.path.join(c.tmp, name)
    env = dict(c.env, DEMO_DIR=demo_dir, DEMO_DATA=os.path.join(c.tmp, "data"),
               DEMO_STEPS=str(steps))
    for k in ("ZT_COORDINATOR", "OMP_NUM_THREADS", "DEMO_KEEP"):
        env.pop(k, None)
    f = open(out, "wb")
    c.logs.append(out)
    # SIGINT at its default in the script, so that its trap works even when ctest ignores it
    p = subprocess.Popen([os.path.join(SRC, "scripts", "demo.sh"), BUILD], stdout=f,
                         stderr=subprocess.STDOUT, env=env, cwd=c.tmp,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    f.close()
    return p, demo_dir


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def started_pids(demo_dir):
    """{name: pid} of the daemons the demo wrote to DEMO_DIR/pids."""
    pids = {}
    for line in read(os.path.join(demo_dir, "pids")).splitlines():
        name, pid = line.split()
        pids[name] = int(pid)
    return pids


def processes_in(path):
    """pgrep -f PATH: the processes whose command line names the path."""
    r = subprocess.run(["pgrep", "-af", path], capture_output=True, text=True)
    return r.stdout.strip()


def check_all_gone(demo_dir, extra_pids, within):
    daemons = started_pids(demo_dir)
    e.check_eq(sorted(daemons), ["agent-1", "agent-2", "zcoord"], "daemons in DEMO_DIR/pids")
    pids = dict(daemons, **extra_pids)
    def alive():
        return [f"{name} (pid {pid})" for name, pid in pids.items() if e.pid_alive(pid)]

    end = time.time() + within
    while alive() and time.time() < end:
        time.sleep(0.05)
    e.check(not alive(), f"still running {within} s after the demo ended: {', '.join(alive())}")
    left = processes_in(demo_dir)
    e.check(left == "", f"processes naming {demo_dir} still run:\n{left}")


def body(c):
    # ---- the demo runs to the end --------------------------------------------------------
    out = os.path.join(c.tmp, "demo.out")
    t0 = time.time()
    p, demo_dir = start_demo(c, "demo", STEPS, out)
    rc = p.wait(240)
    text = read(out)
    print(f"measure: demo_wall_s={time.time() - t0:.1f} (DEMO_STEPS={STEPS})")
    e.check_eq(rc, 0, "demo.sh exit code; its output:\n" + text)

    lines = [l for l in text.splitlines() if l.strip()]
    with open(os.path.join(demo_dir, "zcoord.ready")) as f:
        ready = json.load(f)
    e.check(lines[0].startswith(f"dashboard: http://{ready['http']}/"),
            f"the first line is not the dashboard's address {ready['http']}:\n{text}")
    m = re.search(r"^final validation loss (\d+\.\d+) vs entropy floor (\d+\.\d+) nats/token",
                  text, re.M)
    e.check(m, "no 'final validation loss X vs entropy floor Y' line:\n" + text)
    e.check(float(m.group(1)) > float(m.group(2)) > 0, "loss and floor: " + m.group(0))
    e.check(re.search(r"step \d+/%d" % STEPS, text), "the follow output shows no progress:\n" + text)
    for want in ("zctl jobs", "zctl logs 1", "zctl ckpt export"):
        e.check(want in text, f"the next commands lack '{want}':\n{text}")
    e.check(re.search(r"^ +ZT_COORDINATOR=\S+ \S*zctl jobs$", text, re.M),
            "'zctl jobs' is not shown with ZT_COORDINATOR:\n" + text)

    # nothing left: the daemons, the workers (their pids from the agents' last status files)
    check_all_gone(demo_dir, {}, 5)

    # the coordinator's record, read back from the demo's database
    for suffix in ("", "-wal"):
        if os.path.exists(os.path.join(demo_dir, "zcoord.db" + suffix)):
            with open(os.path.join(demo_dir, "zcoord.db" + suffix), "rb") as src, \
                    open(os.path.join(c.tmp, "zt.db" + suffix), "wb") as dst:
                dst.write(src.read())
    c.start_coord(extra=("--http", "127.0.0.1:0"))
    j = c.job(1)
    e.check_eq(j["job"]["state"], "COMPLETED", "job state")
    e.check_eq(j["job"]["step"], STEPS, "job step")
    att = j["attempts"][-1]
    e.check_eq(att["state"], "SUCCEEDED", "attempt state")
    agents = {rk["rank"]: rk["agent"] for rk in att["ranks"]}
    e.check_eq(sorted(agents.values()), ["agent-1", "agent-2"], "agents of the two ranks")
    for rk in att["ranks"]:
        e.check_eq(rk["status"]["exit_code"], 0, f"exit code of rank {rk['rank']}")
        e.check(not e.pid_alive(rk["status"]["pid"]), f"worker of rank {rk['rank']} still runs")

    cps = c.committed(1)
    steps = sorted(cp["step"] for cp in cps)
    e.check(STEPS in steps and len(steps) >= 2, f"committed checkpoints at steps {steps}")
    for cp in cps:
        e.check_eq(cp["shards"], 2, f"shards of the step-{cp['step']} checkpoint")
        e.check(os.path.isdir(cp["path"]), f"checkpoint {cp['path']} is not on disk")

    with open(os.path.join(c.tmp, "zcoord.ready")) as f:
        http = json.load(f)["http"]
    with urllib.request.urlopen(f"http://{http}/api/v1/jobs/1/metrics", timeout=10) as r:
        metrics = json.load(r)
    e.check_eq(metrics["steps"][-1], STEPS, "last step of the recorded metrics")
    e.check_eq(len(metrics["series"]["loss"]), len(metrics["steps"]), "loss points")
    e.check("val_loss" in metrics["series"], "no val_loss series: " + ", ".join(metrics["series"]))

    # ---- Ctrl-C in the middle of training -------------------------------------------------
    out = os.path.join(c.tmp, "demo_int.out")
    p, demo_dir = start_demo(c, "demo_int", 400, out)
    e.wait_for(lambda: re.search(r"step \d+/400", read(out)) or p.poll() is not None, 120,
               "the demo to report a step", interval=0.1)
    e.check(p.poll() is None, "the demo ended before Ctrl-C:\n" + read(out))
    workers = {}
    for n in (1, 2):
        try:
            with open(os.path.join(demo_dir, f"agent-{n}.status.json")) as f:
                st = json.load(f)
        except (OSError, ValueError):
            continue
        for w in st.get("workers", []):
            if w["pid"] > 0:
                workers[f"worker-{n}-{w['rank']}"] = w["pid"]
    e.check(workers, "no running worker in the agents' status files")
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    rc = p.wait(30)
    took = time.time() - t0
    print(f"measure: ctrl_c_to_exit_s={took:.1f}")
    e.check(rc != 0, "demo.sh exited 0 after SIGINT")
    e.check(took < 15, f"demo.sh took {took:.1f} s to stop after SIGINT")
    check_all_gone(demo_dir, workers, 5)


if __name__ == "__main__":
    e.run("e2e_demo", body)
