#!/usr/bin/env python3
"""DeepSpeed configs as projects publish them (tests/common/jobfiles/ds/published/, sources in
SOURCES.md) run unchanged (but for an nvme_path, pointed at a directory of the test's own): each
one, named by a job file as its "deepspeed" member, plans with `zctl plan` and trains two steps
of a tiny model on two CPU ranks with `zctl run`, and rank 0's log carries the start-up summary.
The configs under refused/ ask for what zerotrain does not offer and are refused by `zctl plan`
with every problem at its line and column."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("ZT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ZT_BIN", "./bin")
ZCTL = os.path.join(BIN, "zctl")
PUB = os.path.join(SRC, "tests", "common", "jobfiles", "ds", "published")

# what the summary of some configs must say (substrings of rank 0's "[deepspeed]" lines)
EXPECT = {
    "dsexamples_imagenet_fp16_z1.json": ["ignored (DeepSpeed does not know them either): cuda_visible_devices"],
    "llamafactory_z2.json": ["no effect here: zero_optimization.round_robin_gradients = true"],
    "axolotl_zero3_bf16.json": ["auto: train_micro_batch_size_per_gpu = 4 (the job's train.micro_batch_size)"],
    "hf_transformers_zero3.json": ["auto: scheduler.params.warmup_max_lr = 0.001 (the optimizer's lr)",
                                   "zero_optimization.stage3_gather_fp16_weights_on_model_save"],
    "accelerate_zero3.json": ["auto: scheduler.params.total_num_steps = 2 (the job's train.steps)"],
}
# what each refused config must be told (substrings of zctl plan's error)
REFUSED = {
    "dsexamples_bing_bert_lamb.json": ["\"Lamb\" is an optimizer zerotrain does not offer",
                                       "sparse_attention: zerotrain does not offer this"],
    "dsexamples_bing_bert_onebitlamb.json": ["\"OneBitLamb\" is an optimizer zerotrain does not offer"],
    "dsexamples_megatron_v115_infinity_nvme.json": ["stage3_param_persitence_threshold: unknown key"],
    "dsexamples_qanet_onecycle.json": ["\"OneCycle\" is a schedule zerotrain does not offer"],
}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def job_for(tmp, cfg_path, name, as_published=False):
    cfg = json.load(open(cfg_path))
    # the published nvme_path (/local_nvme, ...) does not exist here: a copy points at tmp/nvme
    zo = cfg.get("zero_optimization")
    offs = [zo[k] for k in ("offload_optimizer", "offload_param")
            if isinstance(zo, dict) and isinstance(zo.get(k), dict) and "nvme_path" in zo[k]]
    if offs and not as_published:
        os.makedirs(os.path.join(tmp, "nvme"), exist_ok=True)
        for o in offs:
            o["nvme_path"] = os.path.join(tmp, "nvme")
        cfg_path = os.path.join(tmp, name + "_ds.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=1)
    train = {"steps": 2, "checkpoint_dir": os.path.join(tmp, "ckpt", name)}
    tb, mb = cfg.get("train_batch_size"), cfg.get("train_micro_batch_size_per_gpu")
    # what the Hugging Face Trainer would fill: the micro batch, when the config leaves it open
    if not isinstance(tb, int) and not isinstance(mb, int):
        train["micro_batch_size"] = 4
    job = {"name": name,
           "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 256},
           "data": {"train": os.path.join(tmp, "data", "synth_train_*.bin")},
           "train": train,
           "resources": {"ranks": 2},
           "deepspeed": cfg_path}
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(job, f, indent=1)
    return path


def main():
    tmp = tempfile.mkdtemp(prefix="zt_ds_published_")
    ok = False
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        r = subprocess.run([ZCTL, "data", "synth", "--out", os.path.join(tmp, "data"),
                            "--train-tokens", "200k", "--val-tokens", "0"],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            fail("zctl data synth: " + r.stderr)
        names = sorted(n for n in os.listdir(PUB) if n.endswith(".json"))
        if len(names) < 15:
            fail("only %d published configs under %s" % (len(names), PUB))
        for n in names:
            name = re.sub(r"[^A-Za-z0-9_-]", "_", n[:-5])
            job = job_for(tmp, os.path.join(PUB, n), name)
            p = subprocess.run([ZCTL, "plan", job], capture_output=True, text=True, env=env,
                               timeout=120)
            if p.returncode != 0:
                fail("%s: zctl plan exited %d:\n%s%s" % (n, p.returncode, p.stdout, p.stderr))
            r = subprocess.run([ZCTL, "run", "--nproc", "2", job], capture_output=True,
                               text=True, env=env, timeout=300)
            if r.returncode != 0 or "step=2 loss=" not in r.stdout:
                fail("%s: zctl run exited %d:\n%s%s" % (n, r.returncode, r.stdout[-3000:],
                                                        r.stderr[-3000:]))
            log = open(os.path.join(tmp, "ckpt", name, "logs", "rank_00000.log")).read()
            summary = [l.split("[deepspeed] ", 1)[1] for l in log.splitlines()
                       if "[deepspeed] " in l]
            for want in EXPECT.get(n, []):
                if not any(want in l for l in summary):
                    fail("%s: the summary lacks \"%s\":\n%s" % (n, want, "\n".join(summary)))
            if summary and "deepspeed config:" not in p.stdout:
                fail("%s: zctl plan does not show the summary:\n%s" % (n, p.stdout))
            print("  %-48s planned, trained 2 steps; %d summary line%s" %
                  (n, len(summary), "" if len(summary) == 1 else "s"))
        # the logging blocks that work here: wall_clock_breakdown and csv_monitor
        cfg = os.path.join(tmp, "monitor_ds.json")
        json.dump({"train_micro_batch_size_per_gpu": 2, "wall_clock_breakdown": True,
                   "csv_monitor": {"enabled": True, "output_path": "monitor", "job_name": "run1"},
                   "tensorboard": {"enabled": True, "output_path": "tb"}}, open(cfg, "w"))
        job = job_for(tmp, cfg, "monitor")
        r = subprocess.run([ZCTL, "run", "--nproc", "2", job], capture_output=True, text=True,
                           env=env, timeout=120)
        if r.returncode != 0:
            fail("monitor: zctl run exited %d:\n%s" % (r.returncode, r.stderr[-2000:]))
        log = open(os.path.join(tmp, "ckpt", "monitor", "logs", "rank_00000.log")).read()
        split = re.findall(r"step (\d+) time \(ms\) \| forward: [0-9.]+ \| backward: [0-9.]+ \| "
                           r"optimizer: [0-9.]+ \| communication: [0-9.]+ \| step: [0-9.]+", log)
        if split != ["1", "2"]:
            fail("wall_clock_breakdown: %s in:\n%s" % (split, log[-2000:]))
        if "no effect here: tensorboard: the metrics go to the coordinator" not in log:
            fail("tensorboard is not named in the summary:\n" + log[-2000:])
        want_losses = re.findall(r"^step=\d+ loss=([0-9.]+)", r.stdout, re.M)
        rows = open(os.path.join(tmp, "monitor", "run1", "Train_Samples_train_loss.csv")).read()
        lines = rows.splitlines()
        if lines[0] != "step,train_loss" or [l.split(",")[0] for l in lines[1:]] != ["4", "8"] or \
                [abs(float(l.split(",")[1]) - float(w)) < 1e-6
                 for l, w in zip(lines[1:], want_losses)] != [True, True]:
            fail("csv_monitor wrote:\n%s\nfor the losses %s" % (rows, want_losses))
        if not os.path.exists(os.path.join(tmp, "monitor", "run1", "Train_Samples_lr.csv")):
            fail("csv_monitor wrote no lr file")
        print("  wall_clock_breakdown and csv_monitor: a time split and a CSV row per step")

        refused_dir = os.path.join(PUB, "refused")
        for n in sorted(os.listdir(refused_dir)):
            if not n.endswith(".json"):
                continue
            job = job_for(tmp, os.path.join(refused_dir, n), re.sub(r"\W", "_", n[:-5]),
                          as_published=True)
            p = subprocess.run([ZCTL, "plan", job], capture_output=True, text=True, env=env)
            if p.returncode != 2:
                fail("%s: zctl plan exited %d, want 2:\n%s%s" % (n, p.returncode, p.stdout,
                                                                  p.stderr))
            for want in REFUSED.get(n, ["does not offer"]):
                if want not in p.stderr:
                    fail("%s: the error lacks \"%s\":\n%s" % (n, want, p.stderr))
            if not re.search(re.escape(n) + r":\d+:\d+: ", p.stderr):
                fail("%s: the error does not name the line and column:\n%s" % (n, p.stderr))
            print("  refused/%-40s refused: %s" % (n, p.stderr.strip().splitlines()[0][-90:]))
        print("%d passed, 0 failed" % (len(names) + len(os.listdir(refused_dir)) - 0))
        ok = True
    finally:
        if ok or not os.environ.get("ZT_KEEP_TMP"):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
