#!/usr/bin/env python3
"""DeepSpeed tuning keys that zerotrain honours change memory and pieces, not results:
stage3_max_live_parameters bounds the stage-3 gather slots (fewer buffer bytes in zctl plan and
in the step line) and sub_group_size the offloaded optimizer's segments; both train to the same
parameters, bit for bit (ZT_PARAM_DIGEST), as the defaults, in fp32 and bf16, with offload and
activation checkpointing."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BIN = os.environ.get("ZT_BIN", "./bin")
ZCTL = os.path.join(BIN, "zctl")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(tmp, name, ds_extra, zero_extra):
    zero = {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}
    zero.update(zero_extra)
    ds = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "zero_optimization": zero}
    ds.update(ds_extra)
    job = {"name": name,
           "model": {"n_layer": 3, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 256},
           "data": {"train": os.path.join(tmp, "data", "synth_train_*.bin")},
           "train": {"steps": 3, "checkpoint_dir": os.path.join(tmp, "ckpt", name)},
           "resources": {"ranks": 2}, "deepspeed": ds}
    path = os.path.join(tmp, name + ".json")
    json.dump(job, open(path, "w"))
    env = dict(os.environ, OMP_NUM_THREADS="1", ZT_PARAM_DIGEST="1")
    r = subprocess.run([ZCTL, "run", "--nproc", "2", path], capture_output=True, text=True,
                       env=env, timeout=300)
    if r.returncode != 0:
        fail("%s: zctl run exited %d:\n%s" % (name, r.returncode, r.stderr[-2000:]))
    log = open(os.path.join(tmp, "ckpt", name, "logs", "rank_00000.log")).read()
    digest = re.findall(r"param_digest=([0-9a-f]+)", log)
    buffers = [int(x) for x in re.findall(r" mem_buffers=(\d+)", r.stdout)]
    p = subprocess.run([ZCTL, "-o", "json", "plan", path], capture_output=True, text=True)
    if p.returncode != 0 or not digest or not buffers:
        fail("%s: no digest, step line or plan:\n%s%s" % (name, log[-1500:], p.stderr))
    plan = [row for row in json.loads(p.stdout)["rows"] if row["job"]][0]
    return digest[-1], buffers[-1], plan["bytes"]["buffers"]


def main():
    tmp = tempfile.mkdtemp(prefix="zt_ds_mech_")
    try:
        subprocess.run([ZCTL, "data", "synth", "--out", os.path.join(tmp, "data"),
                        "--train-tokens", "100k", "--val-tokens", "0"], check=True,
                       capture_output=True)
        n = 0
        for label, ds_extra in (("fp32", {}), ("bf16", {"bf16": {"enabled": True}}),
                                ("fp32 ckpt", {"activation_checkpointing": {}})):
            base = run(tmp, "base%d" % n, ds_extra, {})
            live = run(tmp, "live%d" % n, ds_extra, {"stage3_max_live_parameters": 1})
            seg = run(tmp, "seg%d" % n, ds_extra, {"sub_group_size": 100})
            if live[0] != base[0] or seg[0] != base[0]:
                fail("%s: parameters differ: default %s, max_live 1 %s, sub_group_size 100 %s" %
                     (label, base[0], live[0], seg[0]))
            if not (live[1] < base[1] and live[2] < base[2] and live[1] == live[2]):
                fail("%s: buffers: default %d (plan %d), max_live 1 %d (plan %d)" %
                     (label, base[1], base[2], live[1], live[2]))
            print("  %-9s digest %s for all three; buffers %d -> %d bytes with "
                  "stage3_max_live_parameters 1 (the plan says the same)" %
                  (label, base[0], base[1], live[1]))
            n += 1
        print("%d passed, 0 failed" % n)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
