"""train.max_skipped_steps through `zctl run` (the real zworker, 2 ranks, CPU): a model file whose
wte holds NaN (and qkvw of layer 1 an Inf) skips every step, so with max_skipped_steps 3 the run
stops after step 3 with a non-zero exit and one message naming where the first non-finite value
was (the parameters at load, wte, with its count) and what to check; the same job with the
healthy weights completes; max_skipped_steps 0 never stops (every step skipped, exit 0); a
non-finite gradient injected into an otherwise healthy run (ZT_INJECT_NONFINITE) is named as the
gradient norm of its step; and a bad max_skipped_steps is refused naming the key."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

CFG = dict(L=2, NH=2, C=32, T=16, V=100, Vp=128)
failures = []
check = zu.checker(failures)


def job(name, init, steps=6, max_skipped=None):
    j = {"name": name,
         "model": {"arch": "gpt2", "n_layer": CFG["L"], "n_head": CFG["NH"], "n_embd": CFG["C"],
                   "block_size": CFG["T"], "vocab_size": CFG["V"], "init": init},
         "data": {"train": "data/t_*.bin"},
         "train": {"steps": steps, "checkpoint_dir": f"ckpt/{name}"},
         "resources": {"ranks": 2},
         "deepspeed": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                       "optimizer": {"type": "AdamW", "params": {"lr": 2e-3}},
                       "zero_optimization": {"stage": 1}}}
    if max_skipped is not None:
        j["train"]["max_skipped_steps"] = max_skipped
    return j


def main():
    with tempfile.TemporaryDirectory(prefix="zt-nonfinite-") as tmp:
        rng = np.random.default_rng(3)
        os.makedirs(f"{tmp}/data")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 2000))
        params = zu.random_model(CFG, seed=5)
        zu.write_model(f"{tmp}/good.bin", CFG, params)
        params["wte"][3, :7] = np.nan
        params["qkvw"][1, 0, 0] = np.inf
        zu.write_model(f"{tmp}/nan.bin", CFG, params)

        def run(j, env=None):
            zu.write_job(f"{tmp}/{j['name']}.json", j)
            e = {"OMP_NUM_THREADS": "1"}
            e.update(env or {})
            return zu.run_zctl(["run", f"{tmp}/{j['name']}.json"], cwd=tmp, env=e, timeout=300)

        # NaN weights, max_skipped_steps 3: stops after step 3 naming wte and its count
        r = run(job("nan", "nan.bin", max_skipped=3))
        steps = zu.parse_step_lines(r.stdout)
        want = ("3 consecutive steps skipped for non-finite values (train.max_skipped_steps=3); "
                "the first non-finite value was in parameters at load: wte has 7 non-finite values; "
                "check the model file")
        check(r.returncode != 0, f"nan: a run whose every step is skipped exited {r.returncode}")
        check(want in r.stderr, f"nan: the error does not say '{want}':\n{r.stderr[-1500:]}")
        check([s["skipped"] for s in steps] == ["1", "2"],
              f"nan: step lines before the stop {[(s['step'], s['skipped']) for s in steps]}")
        print(f"nan: exit {r.returncode}, '{want[:80]}...'")

        # the same job with healthy weights completes
        r = run(job("good", "good.bin", max_skipped=3))
        steps = zu.parse_step_lines(r.stdout)
        check(r.returncode == 0 and len(steps) == 6 and all(s["skipped"] == "0" for s in steps),
              f"good: exit {r.returncode}, {len(steps)} step lines:\n{r.stderr[-800:]}")
        print(f"good: exit {r.returncode}, {len(steps)} steps, none skipped")

        # 0: never stop (every step skipped, the run completes as it did before the key)
        r = run(job("never", "nan.bin", max_skipped=0))
        steps = zu.parse_step_lines(r.stdout)
        check(r.returncode == 0 and [s["skipped"] for s in steps] == [str(i) for i in range(1, 7)],
              f"never: exit {r.returncode}, skipped {[s['skipped'] for s in steps]}:\n{r.stderr[-800:]}")
        print(f"never: exit {r.returncode}, all {len(steps)} steps skipped")

        # a non-finite gradient in a healthy run is named as the gradient norm of its step
        r = run(job("inject", "good.bin", max_skipped=1), env={"ZT_INJECT_NONFINITE": "1:2"})
        want = ("1 consecutive steps skipped for non-finite values (train.max_skipped_steps=1); "
                "the first non-finite value was in the gradient norm at step 2")
        check(r.returncode != 0 and want in r.stderr,
              f"inject: exit {r.returncode}, no '{want}':\n{r.stderr[-1500:]}")
        check("lower the learning rate" in r.stderr, f"inject: no advice:\n{r.stderr[-800:]}")
        print(f"inject: exit {r.returncode}, named the gradient norm at step 2")
        # the default (100) lets one skipped step pass
        r = run(job("inject_default", "good.bin"), env={"ZT_INJECT_NONFINITE": "1:2"})
        steps = zu.parse_step_lines(r.stdout)
        check(r.returncode == 0 and len(steps) == 6 and steps[-1]["skipped"] == "1",
              f"inject_default: exit {r.returncode}, {len(steps)} steps:\n{r.stderr[-800:]}")

        # bad values are refused naming the key
        for bad in (-1, 2.5, "3"):
            r = run(job("badkey", "good.bin", max_skipped=bad))
            check(r.returncode == 2 and "train.max_skipped_steps: must be" in r.stderr,
                  f"max_skipped_steps {bad!r}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
        print("bad max_skipped_steps values refused")
    zu.finish(failures)


if __name__ == "__main__":
    main()
