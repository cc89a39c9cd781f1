"""`zctl plan` predicts what a run measures: for several stages, precisions, offload ratios and
activation checkpointing, the plan's per-rank total (device + host) for the job's own
configuration is within 10% of the peak the engine reports for a real step; the plan flags a
configuration that does not fit --device-memory and exits non-zero; bad sizes are refused."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

CASES = [
    dict(ranks=2, stage=0, prec=None, offload=None, ckpt=False),
    dict(ranks=2, stage=2, prec="bf16", offload=0.5, ckpt=False),
    dict(ranks=4, stage=3, prec="fp16", offload=None, ckpt=True),
    dict(ranks=4, stage=1, prec="bf16", offload=1.0, ckpt=True),
]


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-plan-") as tmp:
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--train-tokens", "50000",
                         "--val-tokens", "0"])
        assert r.returncode == 0, r.stderr
        for i, c in enumerate(CASES):
            ds = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8 // c["ranks"],
                  "zero_optimization": {"stage": c["stage"]}}
            if c["prec"]:
                ds[c["prec"]] = {"enabled": True}
            if c["offload"] is not None:
                ds["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "ratio": c["offload"]}
            if c["ckpt"]:
                ds["activation_checkpointing"] = {}
            job = {"name": f"plan{i}",
                   "model": {"n_layer": 3, "n_head": 4, "n_embd": 64, "block_size": 64,
                             "vocab_size": 256},
                   "data": {"train": "data/synth_train_*.bin"},
                   "train": {"steps": 1, "checkpoint_dir": f"ckpt/plan{i}"},
                   "resources": {"ranks": c["ranks"]}, "deepspeed": ds}
            zu.write_job(f"{tmp}/plan{i}.json", job)
            p = zu.run_zctl(["plan", f"{tmp}/plan{i}.json", "-o", "json"])
            assert p.returncode == 0, p.stderr
            rows = [r for r in json.loads(p.stdout)["rows"] if r["job"]]
            assert len(rows) == 1, rows
            predicted = rows[0]["device_bytes"] + rows[0]["host_bytes"]
            r = zu.run_zctl(["run", f"{tmp}/plan{i}.json"], cwd=tmp, env={"OMP_NUM_THREADS": "1"})
            assert r.returncode == 0, r.stderr
            measured = int(zu.parse_step_lines(r.stdout)[0]["mem_peak"])
            dev = abs(predicted - measured) / measured
            print(f"{c}: plan {predicted / 2**20:.2f} MiB, measured peak {measured / 2**20:.2f} MiB ({dev:.1%})")
            if dev > 0.10:
                failures.append(f"case {c}: plan {predicted} vs measured {measured}")
        # a device too small for the job's configuration
        small = zu.run_zctl(["plan", f"{tmp}/plan0.json", "--device-memory", "1MiB"])
        if small.returncode != 1 or "DOES NOT FIT" not in small.stdout:
            failures.append(f"plan with 1MiB: rc {small.returncode}\n{small.stdout}")
        bad = zu.run_zctl(["plan", f"{tmp}/plan0.json", "--device-memory", "eighty"])
        if bad.returncode != 2 or "--device-memory" not in bad.stderr:
            failures.append(f"plan with a bad size: rc {bad.returncode} {bad.stderr}")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
