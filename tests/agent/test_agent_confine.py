#!/usr/bin/env python3
"""End to end, agents confine jobs (zcoord, zagent and zctl on loopback, a scripted worker that
leaves a mark when it starts): a job whose paths lie inside the agent's --allow-path runs; one
whose data directory lies outside, or reaches outside through a symbolic link inside the root
(a linked directory, one linked file among the matches), whose checkpoint directory lies
below a dangling link to outside, or whose train.resume_from leads outside, fails at once without any worker started (no mark, no rank
log, no "started rank" in the agent's log), is not retried, and carries the reason (the key,
the path, what it resolves to, the roots) in the job's logs and the agent's log. At start-up
zagent prints the roots (the working directory by default), refuses a root that does not exist,
and, run as root, refuses to start without --run-as or --allow-root; as root, --run-as nobody
starts the worker as nobody (uid, HOME, USER) in an attempt directory nobody owns."""
import json
import os
import pwd
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import e2e_util as e  # noqa: E402

WORKER = r"""#!/bin/bash
echo "worker uid=$(id -u) home=$HOME user=${USER:-} cwd=$PWD"
id -u > "$ZT_MARKS/job_${ZT_JOB_ID}_rank_${ZT_RANK}"
exit 0
"""


def zagent(c, *args, env=None):
    return subprocess.run([os.path.join(e.BIN, "zagent")] + list(args), capture_output=True,
                          text=True, env=env or c.env, cwd=c.tmp, timeout=20)


def layout(c):
    """root/ is allowed, out/ is not; links inside root lead out."""
    def path(*p):
        return os.path.join(c.tmp, *p)

    for d in ("root/data", "root/mixed", "out/data", "marks"):
        os.makedirs(path(d))
    for f in ("root/data/train_0.bin", "root/data/val_0.bin", "root/mixed/train_0.bin",
              "out/data/train_0.bin", "out/secret.bin"):
        with open(path(f), "w") as fh:
            fh.write("x")
    os.symlink(path("out/data"), path("root/evil"))
    os.symlink(path("out/secret.bin"), path("root/mixed/train_1.bin"))
    os.symlink(path("out/not_yet"), path("root/dangling"))
    worker = path("worker.sh")
    with open(worker, "w") as fh:
        fh.write(WORKER)
    os.chmod(worker, 0o755)
    return path, worker


def write_job(c, name, train, ckpt, val=None, resume_from=None):
    job = {
        "name": name,
        "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64,
                  "vocab_size": 256, "init": "random", "seed": 7},
        "data": {"train": train},
        "train": {"steps": 2, "checkpoint_dir": ckpt},
        "resources": {"ranks": 1, "ranks_per_node": 1, "device": "cpu"},
        "max_restarts": 2,
        "deepspeed": {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4},
    }
    if val:
        job["data"]["val"] = val
    if resume_from:
        job["train"]["resume_from"] = resume_from
    p = os.path.join(c.tmp, f"{name}.json")
    with open(p, "w") as fh:
        json.dump(job, fh)
    return p


def logs(c, jid):
    r = c.zctl("-o", "json", "logs", jid, "--no-events")
    return [json.loads(l)["text"] for l in r.stdout.splitlines() if l.strip()]


def startup(c, path):
    # a root that does not exist: one clear line, exit 2
    r = zagent(c, "--allow-path", path("nope"), "--work-dir", path("w0"))
    e.check_eq(r.returncode, 2, "exit code with a missing --allow-path")
    e.check("the allowed path " + path("nope") + " cannot be resolved" in r.stderr,
            "message: " + r.stderr)
    if os.geteuid() == 0:
        env = dict(c.env)
        env.pop("ZT_ALLOW_ROOT", None)
        r = zagent(c, "--work-dir", path("w0"), env=env)
        e.check_eq(r.returncode, 2, "exit code of a root zagent without --run-as")
        e.check("zagent runs as root: give --run-as USER so workers do not run as root"
                in r.stderr, "message: " + r.stderr)
    else:
        r = zagent(c, "--run-as", "root", "--work-dir", path("w0"))
        e.check_eq(r.returncode, 2, "exit code of --run-as root by a non-root zagent")
        e.check("only root can start workers as another user" in r.stderr, r.stderr)
    # by default: the working directory (the test directory), printed at start-up
    c.start_agent("dflt", "cpu:1")
    want = "jobs confined to: " + os.path.realpath(c.tmp) + " (the working directory"
    e.check(want in c.agent_log("dflt"), f"the agent's log lacks {want!r}:\n{c.agent_log('dflt')}")
    e.check_eq(c.stop_agent("dflt"), 0, "exit code of the default agent")


def refused(c, path, name, train, ckpt, needles, resume_from=None):
    """Submits a job the agent must refuse; checks that no worker started and why."""
    jid = c.submit(write_job(c, name, train, ckpt, resume_from=resume_from))
    j = c.wait_job(jid, ("COMPLETED", "FAILED"), 60)
    e.check_eq(j["job"]["state"], "FAILED", f"{name}: job state")
    e.check_eq(len(j["attempts"]), 1, f"{name}: attempts (a refusal is not retried)")
    att = j["attempts"][0]
    e.check("could not be started" in att["reason"], f"{name}: attempt reason {att['reason']!r}")
    # the agent's reason reaches the coordinator (WorkerStatus.exit_reason): the record says why
    e.check(f"job {jid}: " in att["reason"] and "outside the agent's allowed paths" in att["reason"],
            f"{name}: the attempt's reason does not say why: {att['reason']!r}")
    e.check(not os.path.exists(path("marks", f"job_{jid}_rank_0")), f"{name}: a worker started")
    e.check(not os.path.exists(os.path.join(c.work_dir("a1"), f"attempt_{att['id']}",
                                            "rank_00000.log")), f"{name}: a rank log exists")
    alog = c.agent_log("a1")
    e.check(f"started rank 0/1 of attempt {att['id']} " not in alog,
            f"{name}: the agent started a worker:\n{alog}")
    head = f"cannot start rank 0 of attempt {att['id']}: job {jid}: "
    e.check(head in alog, f"{name}: the agent's log lacks {head!r}:\n{alog}")

    def said():
        lines = [t for t in logs(c, jid) if head in t]
        return lines[0] if lines else None

    line = e.wait_for(said, 10, f"{name}: the refusal in the job's logs")
    root = os.path.realpath(path("root"))
    for want in needles + [f"outside the agent's allowed paths ({root})",
                           "start zagent with --allow-path DIR"]:
        e.check(want in line, f"{name}: {line!r} lacks {want!r}")
    print(f"{name}: {line}")


def body(c):
    c.start_coord()
    path, worker = layout(c)
    startup(c, path)
    real = os.path.realpath
    env = dict(c.env, ZT_MARKS=path("marks"))
    c.start_agent("a1", "cpu:2", extra=["--allow-path", path("root"), "--worker", worker],
                  env=env)
    e.check("jobs confined to: " + real(path("root")) in c.agent_log("a1"),
            "the agent does not print its root")

    # inside: runs
    jid = c.submit(write_job(c, "inside", path("root/data/train_*.bin"), path("root/ckpt/in"),
                             val=path("root/data/val_*.bin")))
    j = c.wait_job(jid, ("COMPLETED", "FAILED"), 60)
    e.check_eq(j["job"]["state"], "COMPLETED", "a job inside the roots")
    e.check(os.path.exists(path("marks", f"job_{jid}_rank_0")), "the worker did not start")

    refused(c, path, "outside", path("out/data/train_*.bin"), path("root/ckpt/o"),
            [f"data.train {path('out/data/train_*.bin')} resolves to "
             f"{real(path('out/data'))}/train_*.bin", "move the data inside them"])
    refused(c, path, "linkdir", path("root/evil/train_*.bin"), path("root/ckpt/l"),
            [f"data.train {path('root/evil/train_*.bin')} resolves to "
             f"{real(path('out/data'))}/train_*.bin"])
    refused(c, path, "linkfile", path("root/mixed/train_*.bin"), path("root/ckpt/m"),
            [f"matches {path('root/mixed/train_1.bin')}, which resolves to "
             f"{real(path('out/secret.bin'))}"])
    refused(c, path, "ckptlink", path("root/data/train_*.bin"), path("root/dangling/ck"),
            [f"train.checkpoint_dir {path('root/dangling/ck')} resolves to "
             f"{real(path('out'))}/not_yet/ck", "choose a checkpoint_dir inside them"])
    refused(c, path, "resumefrom", path("root/data/train_*.bin"), path("root/ckpt/r"),
            [f"train.resume_from {path('root/evil/step_00000001')} resolves to "
             f"{real(path('out/data'))}/step_00000001"],
            resume_from=path("root/evil/step_00000001"))
    e.check_eq(c.stop_agent("a1"), 0, "exit code of a1")

    if os.geteuid() != 0:
        print("--run-as: not root here; the user change is not tested")
        return
    # nobody must be able to reach the worker: every directory above it searchable by others
    # (a chroot made with mktemp -d has a root directory of mode 0700, which nobody cannot pass)
    d = os.path.dirname(worker)
    while True:
        if not os.stat(d).st_mode & 0o001 and d != c.tmp:
            print(f"--run-as: {d} is not searchable by other users here; the user change is not "
                  f"tested")
            return
        if d == "/":
            break
        d = os.path.dirname(d)
    # as root with --run-as nobody: the worker runs as nobody, at home in its attempt directory
    nobody = pwd.getpwnam("nobody")
    os.chmod(c.tmp, 0o755)
    os.chmod(path("marks"), 0o777)
    env = dict(c.env, ZT_MARKS=path("marks"))
    env.pop("ZT_ALLOW_ROOT", None)
    c.start_agent("a2", "cpu:1", extra=["--allow-path", path("root"), "--worker", worker,
                                        "--run-as", "nobody"], env=env)
    e.check(f"workers run as user nobody (uid {nobody.pw_uid}" in c.agent_log("a2"),
            "the agent does not say whom workers run as")
    jid = c.submit(write_job(c, "asnobody", path("root/data/train_*.bin"), path("root/ckpt/n")))
    j = c.wait_job(jid, ("COMPLETED", "FAILED"), 60)
    e.check_eq(j["job"]["state"], "COMPLETED", "the job run as nobody")
    with open(path("marks", f"job_{jid}_rank_0")) as fh:
        e.check_eq(fh.read().strip(), str(nobody.pw_uid), "the worker's uid")
    att = j["attempts"][0]["id"]
    adir = os.path.join(c.work_dir("a2"), f"attempt_{att}")
    e.check_eq(os.stat(adir).st_uid, nobody.pw_uid, "owner of the attempt directory")
    hello = e.wait_for(lambda: [t for t in logs(c, jid) if t.startswith("worker uid=")], 10,
                       "the worker's first line in the job's logs")[0]
    e.check_eq(hello, f"worker uid={nobody.pw_uid} home={nobody.pw_dir} user=nobody cwd={adir}",
               "what the worker saw")
    e.check_eq(c.stop_agent("a2"), 0, "exit code of a2")


if __name__ == "__main__":
    e.run("agent_confine", body)
