#!/usr/bin/env python3
"""The planner's "auto" micro batch (engine/autobatch.c). With a memory limit for the rank
(ZT_MEMORY_LIMIT), `zctl plan` picks the largest micro batch whose plan fits 90% of it and says
what one more would need; that figure is over the limit's 90%, and the pick trains without
going over the limit: the peak resident memory the kernel measured for the worker
(ru_maxrss over waited-for descendants) stays under it. A fixed global batch is kept: the pick
divides each rank's share, and a resume on another rank count picks again (micro batch and
accumulation re-derived) and continues with the losses an uninterrupted run gives, up to the
rounding of another split of the same batch. Under a sanitizer (ZT_TEST_SANITIZED=1) resident
memory means nothing and that check is skipped."""
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

BIN = os.environ.get("ZT_BIN", "./bin")
ZCTL = os.path.join(BIN, "zctl")
SANITIZED = bool(os.environ.get("ZT_TEST_SANITIZED"))
MIB = 1 << 20


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def size(text):
    v, unit = text.split()
    return float(v) * {"B": 1, "KiB": 1 << 10, "MiB": MIB, "GiB": 1 << 30}[unit]


def write_job(tmp, name, train, ds):
    job = {"name": name,
           "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64, "vocab_size": 256},
           "data": {"train": os.path.join(tmp, "data", "synth_train_*.bin")},
           "train": dict({"steps": 2, "checkpoint_dir": os.path.join(tmp, "ckpt", name)}, **train),
           "resources": {"ranks": 1},
           "deepspeed": ds}
    path = os.path.join(tmp, name + ".json")
    json.dump(job, open(path, "w"), indent=1)
    return path


def losses(out):
    return [float(m) for m in re.findall(r"^step=\d+ loss=([0-9.]+)", out, re.M)]


def main():
    tmp = tempfile.mkdtemp(prefix="zt_auto_batch_")
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([ZCTL, "data", "synth", "--out", os.path.join(tmp, "data"),
                        "--train-tokens", "300k", "--val-tokens", "0"], check=True,
                       capture_output=True, env=env)

        # 1. the largest micro batch that fits, and one more does not
        limit = 64 * MIB
        job = write_job(tmp, "fit", {}, {"train_micro_batch_size_per_gpu": "auto",
                                          "train_batch_size": "auto",
                                          "gradient_accumulation_steps": "auto"})
        lenv = dict(env, ZT_MEMORY_LIMIT=str(limit))
        p = subprocess.run([ZCTL, "plan", job], capture_output=True, text=True, env=lenv)
        if p.returncode != 0:
            fail("zctl plan: " + p.stdout + p.stderr)
        m = re.search(r"auto: deepspeed.train_micro_batch_size_per_gpu = (\d+) \(the largest that fits "
                      r"ZT_MEMORY_LIMIT 64\.0 MiB with a 10% margin: it needs ([0-9.]+ \w+), "
                      r"(\d+) would need ([0-9.]+ \w+)\)", p.stdout)
        if not m:
            fail("zctl plan does not show the pick:\n" + p.stdout)
        mb, need, more, more_need = int(m.group(1)), size(m.group(2)), int(m.group(3)), size(m.group(4))
        if more != mb + 1 or need > 0.9 * limit or more_need <= 0.9 * limit:
            fail("pick %d needs %.1f MiB, %d needs %.1f MiB; the room is %.1f MiB" %
                 (mb, need / MIB, more, more_need / MIB, 0.9 * limit / MIB))
        if "micro batch %d (auto)" % mb not in p.stdout:
            fail("the plan's header does not use the pick:\n" + p.stdout)
        if "auto: deepspeed.train_batch_size = %d (micro batch x accumulation x ranks)" % mb not in p.stdout:
            fail("the global batch is not the pick's:\n" + p.stdout)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        r = subprocess.run([ZCTL, "run", "--nproc", "1", job], capture_output=True, text=True,
                           env=lenv)
        if r.returncode != 0 or len(losses(r.stdout)) != 2:
            fail("zctl run: %d\n%s%s" % (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        log = open(os.path.join(tmp, "ckpt", "fit", "logs", "rank_00000.log")).read()
        if "[deepspeed] auto: deepspeed.train_micro_batch_size_per_gpu = %d " % mb not in log:
            fail("the worker did not pick %d:\n%s" % (mb, log[-3000:]))
        if not SANITIZED and peak > limit:
            fail("the worker's peak resident memory %.1f MiB is over the limit %.1f MiB" %
                 (peak / MIB, limit / MIB))
        print("  limit %.0f MiB: micro batch %d (plan %.1f MiB; %d would need %.1f MiB); "
              "trained with a peak of %.1f MiB (before: %.1f MiB)" %
              (limit / MIB, mb, need / MIB, more, more_need / MIB, peak / MIB, before / 1024))

        # 2. a fixed global batch: the pick divides the rank's share; a resume on one rank
        #    picks again and keeps the batch and the losses
        limit2 = 48 * MIB
        lenv2 = dict(env, ZT_MEMORY_LIMIT=str(limit2))
        ds = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}
        full = write_job(tmp, "full", {"batch_size": 48, "steps": 4}, ds)
        r_full = subprocess.run([ZCTL, "run", "--nproc", "2", full], capture_output=True,
                                text=True, env=lenv2)
        part = write_job(tmp, "part", {"batch_size": 48, "steps": 2}, ds)
        r_a = subprocess.run([ZCTL, "run", "--nproc", "2", part], capture_output=True, text=True,
                             env=lenv2)
        rest = write_job(tmp, "rest", {"batch_size": 48, "steps": 4}, ds)
        r_b = subprocess.run([ZCTL, "run", "--nproc", "1", "--resume",
                              os.path.join(tmp, "ckpt", "part"), rest],
                             capture_output=True, text=True, env=lenv2)
        for name, r in (("full", r_full), ("half", r_a), ("resume", r_b)):
            if r.returncode != 0:
                fail("%s: %d\n%s%s" % (name, r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        picks = {}
        for name, n in (("full", 2), ("rest", 1)):
            log = open(os.path.join(tmp, "ckpt", name, "logs", "rank_00000.log")).read()
            mbs = re.findall(r"auto: deepspeed.train_micro_batch_size_per_gpu = (\d+) ", log)
            gas = re.findall(r"auto: deepspeed.gradient_accumulation_steps = (\d+) ", log)
            if not mbs or not gas:
                fail("%s: no pick in the log:\n%s" % (name, log[-3000:]))
            picks[name] = (int(mbs[-1]), int(gas[-1]), n)
        for name, (mb2, gas2, n) in picks.items():
            if mb2 * gas2 * n != 48:
                fail("%s: micro %d x accumulation %d x %d ranks is not the global batch 48" %
                     (name, mb2, gas2, n))
        if picks["full"][0] == picks["rest"][0] and picks["full"][1] == picks["rest"][1]:
            fail("the resume on one rank did not re-derive the split: %s" % picks)
        lf, lb = losses(r_full.stdout), losses(r_a.stdout) + losses(r_b.stdout)
        if len(lf) != 4 or len(lb) != 4 or any(abs(a - b) > 1e-4 for a, b in zip(lf, lb)):
            fail("losses differ: uninterrupted %s, resumed %s" % (lf, lb))
        print("  global batch 48: 2 ranks x micro %d x accumulation %d, resumed on 1 rank x "
              "micro %d x accumulation %d; losses %s == %s" %
              (picks["full"][0], picks["full"][1], picks["rest"][0], picks["rest"][1], lf, lb))
        print("2 passed, 0 failed")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
