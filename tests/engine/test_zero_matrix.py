"""ZeRO equivalence matrix: stages 0-3 x ranks 1-4 x two (micro, accumulation) splits of one
train_batch_size, fp32, against the single-rank stage-0 run: per-step losses within 1e-5
relative, final parameters within 1e-4 relative L2 per tensor, every rank's gathered
parameters bitwise equal (param_digest), model-state bytes per rank within 5% (plus padding)
of the ZeRO formula, and bytes sent per step exactly what the ring schedule of docs/zero.md
costs (zero_expect.step_bytes: 2 Psi for stages 0-1, a reduce-scatter per micro-step for
stage 2, for stage 3 at the default stage3_max_reuse_distance one gather per unit and step
since every unit stays in its slot, and with reuse 0 a gather for each use: about 3 Psi),
times 4 bytes and the ring factor (N-1)/N; the step's ratio to 2 Psi / 3 Psi is printed.
ZT_TEST_QUICK=1 runs a subset (used under the sanitizers)."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402
import zero_expect as zx  # noqa: E402  (tests/engine, this script's directory)

CFG = dict(L=2, NH=2, C=32, T=16, V=120, Vp=128)
TB = 12
STEPS = 6
SPLITS = {1: [12, 3], 2: [6, 2], 3: [4, 2], 4: [3, 1]}  # micro batch choices per rank count


def job_for(name, stage, ranks, micro, reuse=None):
    job = {
        "name": name,
        "model": {"arch": "gpt2", "n_layer": CFG["L"], "n_head": CFG["NH"], "n_embd": CFG["C"],
                  "block_size": CFG["T"], "vocab_size": CFG["V"], "init": "init.bin"},
        "data": {"train": "data/t_*.bin"},
        "train": {"steps": STEPS, "checkpoint_dir": f"ckpt/{name}"},
        "resources": {"ranks": ranks},
        "deepspeed": {
            "train_batch_size": TB, "train_micro_batch_size_per_gpu": micro,
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
            "gradient_clipping": 0.5,
            "zero_optimization": {"stage": stage},
        },
    }
    if reuse is not None:
        job["deepspeed"]["zero_optimization"]["stage3_max_reuse_distance"] = reuse
    return job


def expected_model_states(stage, n, psi):
    """fp32 (no separate master): 4 params + 4 grads + 8 moments, sharded per stage."""
    return {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[stage]


def main():
    quick = os.environ.get("ZT_TEST_QUICK") == "1"
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-matrix-") as tmp:
        rng = np.random.default_rng(11)
        os.makedirs(f"{tmp}/data")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 1500))
        zu.write_shard(f"{tmp}/data/t_001.bin", rng.integers(0, CFG["V"], 900))
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=5))

        def run(stage, ranks, micro, reuse=None):
            name = f"s{stage}_r{ranks}_m{micro}" + ("" if reuse is None else f"_reuse{reuse}")
            zu.write_job(f"{tmp}/{name}.json", job_for(name, stage, ranks, micro, reuse))
            r = zu.run_zctl(["run", f"{tmp}/{name}.json"], cwd=tmp,
                            env={"OMP_NUM_THREADS": "1", "ZT_PARAM_DIGEST": "1"})
            if r.returncode != 0:
                sys.exit(f"{name}: zctl run failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
            steps = zu.parse_step_lines(r.stdout)
            out = f"{tmp}/{name}.bin"
            e = zu.run_zctl(["ckpt", "export", f"{tmp}/ckpt/{name}", "--format", "llmc", "-o", out])
            if e.returncode != 0:
                sys.exit(f"{name}: export failed: {e.stderr}")
            digests = [zu.log_value(zu.rank_log(f"{tmp}/ckpt/{name}", rk), "param_digest")
                       for rk in range(ranks)]
            return name, steps, zu.read_model(out)[1], digests

        _, base_steps, base_params, _ = run(0, 1, 12)
        base_losses = [float(s["loss"]) for s in base_steps]
        psi = sum(int(np.prod(v.shape)) for v in base_params.values())
        print(f"Psi = {psi} parameters; baseline losses {base_losses}")

        cases = [(st, rk, m) for st in range(4) for rk in (1, 2, 3, 4) for m in SPLITS[rk]]
        if quick:
            cases = [(3, 3, 2), (2, 2, 6), (1, 4, 1)]
        for stage, ranks, micro in cases:
            if (stage, ranks, micro) == (0, 1, 12):
                continue
            name, steps, params, digests = run(stage, ranks, micro)
            worst = max(abs(float(s["loss"]) - b) / b for s, b in zip(steps, base_losses))
            if len(steps) != STEPS or worst > 1e-5:
                failures.append(f"{name}: loss rel diff {worst:.2e} ({len(steps)} steps)")
            perr = max(zu.rel_l2(params[k], base_params[k]) for k in zu.KINDS)
            if perr > 1e-4:
                failures.append(f"{name}: parameter rel L2 {perr:.2e}")
            if len(set(digests)) != 1 or digests[0] is None:
                failures.append(f"{name}: ranks hold different parameters: {digests}")
            # memory: model states per rank vs the ZeRO formula (padding allowed on top)
            last = steps[-1]
            ms = int(last["mem_model_states"])
            exp = expected_model_states(stage, ranks, psi)
            pad_allow = (CFG["L"] + 2) * 16 * ranks * 16  # <= 16N padding elements per unit, 16 B each
            mem_ok = exp * 0.95 <= ms <= exp * 1.05 + pad_allow
            # communication per step, exactly (every step is alike; the last is checked)
            gas = TB // (micro * ranks)
            cb = int(last["comm_bytes"])
            comm_exp = zx.step_bytes(stage, ranks, gas, CFG["L"], CFG["C"], CFG["T"], CFG["Vp"], 4, 4)
            unit = psi * 4 * (ranks - 1) / ranks if ranks > 1 else 1.0
            print(f"{name}: loss rel {worst:.1e}, params rel L2 {perr:.1e}, "
                  f"digest {digests[0]} x{len(digests)}, model states {ms / psi:.3f} Psi "
                  f"(formula {exp / psi:.3f}), comm {cb} B = {cb / unit:.3f} x 4Psi(N-1)/N "
                  f"(expected {comm_exp} B)")
            if not mem_ok:
                failures.append(f"{name}: model states {ms} B, formula {exp:.0f} B")
            if cb != comm_exp:
                failures.append(f"{name}: comm bytes {cb}, expected exactly {comm_exp}")
            if ranks > 1 and stage < 2 and abs(cb - 2 * unit) > 0.05 * 2 * unit:
                failures.append(f"{name}: comm bytes {cb} not within 5% of 2 Psi = {2 * unit:.0f}")
        # stage 3 with release-after-use (stage3_max_reuse_distance 0): every unit is gathered
        # for its forward and again for its backward, so a step sends 3 Psi (ring factor
        # included) up to the small final unit that stays resident across the turn
        for ranks, micro in ((2, 3), (4, 3)):  # 2 and 1 micro-steps
            name, steps, params, digests = run(3, ranks, micro, reuse=0)
            worst = max(abs(float(s["loss"]) - b) / b for s, b in zip(steps, base_losses))
            cb = int(steps[-1]["comm_bytes"])
            gas = TB // (micro * ranks)
            comm_exp = zx.step_bytes(3, ranks, gas, CFG["L"], CFG["C"], CFG["T"], CFG["Vp"], 4, 4,
                                     reuse=0)
            unit = psi * 4 * (ranks - 1) / ranks
            print(f"{name}: loss rel {worst:.1e}, comm {cb} B = {cb / unit / gas:.3f} x "
                  f"4Psi(N-1)/N per micro-step, {gas} micro-steps (expected {comm_exp} B)")
            if worst > 1e-5 or len(set(digests)) != 1:
                failures.append(f"{name}: loss rel {worst:.2e}, digests {digests}")
            if cb != comm_exp:
                failures.append(f"{name}: comm bytes {cb}, expected exactly {comm_exp}")
            if abs(cb - 3 * gas * unit) > 0.05 * 3 * gas * unit:
                failures.append(f"{name}: comm bytes {cb}, not within 5% of 3 Psi per micro-step")
    zu.finish(failures)


if __name__ == "__main__":
    main()
