"""The engine's host-memory budget (ZT_HOST_MEMORY_LIMIT) through the real zctl run, one CPU
rank at stage 1 with the whole optimizer shard offloaded (small swap segments, ZT_OFFLOAD_PIECE):
1. A budget halfway between `zctl plan`'s totals for the optimizer in host memory (device
   "cpu") and on disk (device "nvme") refuses the host-memory job before step 1: exit code 4,
   an error naming the budget, the need, its categories and offload_optimizer "nvme".
2. The NVMe job under the same budget trains, bit-identical (per-step losses and the exported
   model) to the same job without a budget.
3. A budget that is not a size is refused before step 1 with an error that names the value."""
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

CFG = dict(L=2, NH=4, C=128, T=32, V=256, Vp=256)
# small NVMe segments: the swap's buffer sets then take less host memory than the states they
# stream, at this model size too
PIECE = "777"


def main():
    failures = []
    check = zu.checker(failures)

    with tempfile.TemporaryDirectory(prefix="zt-budget-") as tmp:
        rng = np.random.default_rng(7)
        os.makedirs(f"{tmp}/data")
        os.makedirs(f"{tmp}/swap")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 4000))
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=5))

        def job(name, device):
            off = {"device": device, "ratio": 1.0}
            if device == "nvme":
                off.update(nvme_path=f"{tmp}/swap", buffer_count=2)
            j = {"name": name,
                 "model": {"arch": "gpt2", "n_layer": CFG["L"], "n_head": CFG["NH"],
                           "n_embd": CFG["C"], "block_size": CFG["T"], "vocab_size": CFG["V"],
                           "init": f"{tmp}/init.bin"},
                 "data": {"train": f"{tmp}/data/t_*.bin"},
                 "train": {"steps": 3, "checkpoint_dir": f"{tmp}/ckpt/{name}"},
                 "resources": {"ranks": 1},
                 "deepspeed": {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                               "zero_optimization": {"stage": 1, "offload_optimizer": off}}}
            zu.write_job(f"{tmp}/{name}.json", j)
            return j

        def plan_total(j):
            p = zu.run_zctl(["plan", f"{tmp}/{j['name']}.json", "-o", "json"], cwd=tmp,
                            env={"ZT_OFFLOAD_PIECE": PIECE})
            check(p.returncode == 0, f"zctl plan {j['name']}: {p.stderr[-800:]}")
            return [r for r in json.loads(p.stdout)["rows"] if r["job"]][0]["total_bytes"]

        def run(j, budget=None):
            env = {"OMP_NUM_THREADS": "1", "ZT_OFFLOAD_PIECE": PIECE}
            if budget is not None:
                env["ZT_HOST_MEMORY_LIMIT"] = budget
            return zu.run_zctl(["run", f"{tmp}/{j['name']}.json"], cwd=tmp, env=env)

        def outcome(j, r):
            """(losses by step, sha256 of the exported model), or None"""
            if r.returncode != 0:
                return None
            steps = {int(s["step"]): s["loss"] for s in zu.parse_step_lines(r.stdout)}
            out = f"{tmp}/{j['name']}.bin"
            e = zu.run_zctl(["ckpt", "export", f"{tmp}/ckpt/{j['name']}", "--format", "llmc",
                             "-o", out])
            if e.returncode != 0:
                return None
            with open(out, "rb") as f:
                return steps, hashlib.sha256(f.read()).hexdigest()

        host, nvme = job("host", "cpu"), job("nvme", "nvme")
        need_host, need_nvme = plan_total(host), plan_total(nvme)
        check(need_host > need_nvme + 2048,
              f"the plans leave no room for a budget between them: host {need_host}, "
              f"nvme {need_nvme}")
        budget = f"{(need_host + need_nvme) // 2 // 1024}KiB"
        print(f"plans: optimizer in host memory {need_host} B, on NVMe {need_nvme} B; "
              f"budget {budget}", flush=True)

        # 1. refused before step 1
        r = run(host, budget)
        err = r.stdout + r.stderr
        check(r.returncode != 0, "the host-memory job ran under a budget it does not fit")
        check("exited with code 4" in err,
              f"the refused rank's exit code 4 is not reported:\n{err[-1500:]}")
        check(zu.parse_step_lines(r.stdout) == [], "the refused job ran steps")
        for words in ("ZT_HOST_MEMORY_LIMIT allows", "of host memory", "optimizer",
                      "offload_optimizer.device \"nvme\"", "micro batch"):
            check(words in err, f"the refusal does not say {words!r}:\n{err[-1500:]}")
        print("host-memory job under the budget: refused", flush=True)

        # 2. the NVMe job trains under it, bit-identical to no budget
        got = outcome(nvme, run(nvme, budget))
        check(got is not None, "the NVMe job failed under the budget")
        free = job("nvme_free", "nvme")
        want = outcome(free, run(free))
        check(got is not None and want is not None and got == want,
              f"the NVMe job under the budget differs from it without one ({got} vs {want})")
        check(got is not None and len(got[0]) == 3, f"the NVMe job ran {got and got[0]}")
        print("NVMe job under the budget: trained, bit-identical to no budget", flush=True)

        # 3. a budget that is not a size
        for bad in ("lots", "12XB", "-5"):
            b = job(f"bad{len(bad)}", "nvme")
            r = run(b, bad)
            err = r.stdout + r.stderr
            check(r.returncode != 0 and f"ZT_HOST_MEMORY_LIMIT=\"{bad}\" is not a size" in err,
                  f"budget {bad!r}: not refused clearly (rc {r.returncode}):\n{err[-1000:]}")
            check(zu.parse_step_lines(r.stdout) == [], f"budget {bad!r}: the job ran steps")
        print("budgets that are not sizes: refused", flush=True)

    zu.finish(failures)


if __name__ == "__main__":
    main()
