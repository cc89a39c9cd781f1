"""tests/bench/zero_scaling: tokens/s and the step-time split (forward, backward, optimizer,
exposed communication) for ZeRO stages 0-3 at 1, 2 and 4 ranks on the CPU, one table, with
per-rank model-state memory and bytes sent per step. Same model and global batch everywhere
(GPT-2 L4 C256 T128, batch 16), one OpenMP thread per rank.
Usage: zero_scaling.py [--steps N] [--warmup N]"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="zt-bench-zero-") as tmp:
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--train-tokens", "300000",
                         "--val-tokens", "0"])
        assert r.returncode == 0, r.stderr
        rows = []
        for ranks in (1, 2, 4):
            for stage in range(4):
                name = f"s{stage}_r{ranks}"
                job = {"name": name,
                       "model": {"n_layer": 4, "n_head": 4, "n_embd": 256, "block_size": 128,
                                 "vocab_size": 256},
                       "data": {"train": "data/synth_train_*.bin"},
                       "train": {"steps": args.steps + args.warmup, "checkpoint_dir": f"ckpt/{name}"},
                       "resources": {"ranks": ranks},
                       "deepspeed": {"train_batch_size": 16,
                                     "train_micro_batch_size_per_gpu": 16 // ranks,
                                     "zero_optimization": {"stage": stage}}}
                zu.write_job(f"{tmp}/{name}.json", job)
                res = zu.run_zctl(["run", f"{tmp}/{name}.json"], cwd=tmp, env={"OMP_NUM_THREADS": "1"})
                if res.returncode != 0:
                    sys.exit(f"{name} failed:\n{res.stderr}")
                st = zu.parse_step_lines(res.stdout)[args.warmup:]

                def mean(k):
                    return sum(float(s[k]) for s in st) / len(st)
                rows.append((stage, ranks, 16 * 128 / (mean("step_ms") / 1e3), mean("step_ms"),
                             mean("fwd_ms"), mean("bwd_ms"), mean("opt_ms"), mean("comm_ms"),
                             int(st[-1]["mem_model_states"]), int(st[-1]["comm_bytes"])))
        print("zero_scaling: GPT-2 L4 C256 T128, global batch 16, fp32, 1 thread per rank, "
              f"{os.cpu_count()} cores")
        print(f"{'stage':>5} {'ranks':>5} {'tok/s':>8} {'step ms':>8} {'fwd':>7} {'bwd':>7} "
              f"{'optim':>7} {'comm':>7} {'states MiB':>10} {'sent MiB':>9}")
        for s, n, tps, step, f, b, o, c, ms, cb in rows:
            print(f"{s:>5} {n:>5} {tps:>8.0f} {step:>8.1f} {f:>7.1f} {b:>7.1f} {o:>7.1f} {c:>7.1f} "
                  f"{ms / 2**20:>10.2f} {cb / 2**20:>9.2f}")
        print("comm = time the step waited on collectives (overlapped time is not counted); "
              "fwd/bwd include the waits inside them.")


if __name__ == "__main__":
    main()
