"""Mixed precision, overflow handling and optimizer offload across ranks:
- bf16 and fp16 follow the fp32 loss curve within 2% over 50 steps (ZeRO stage 2, 2 ranks);
- model-state bytes per rank for bf16 (fp32 gradient accumulation: 18 Psi column) and fp16
  (16-bit gradients: 16 Psi column) at every stage within 5% (plus padding) of the formula;
- an injected non-finite gradient on one of four ranks skips the step on every rank, halves
  the fp16 loss scale and is counted (skipped=1) — parameters stay identical across ranks;
- offload_optimizer ratio 0, 0.5 and 1 give bitwise the same model as no offload (fp32: the
  host and device sides run the same CPU AdamW here).
ZT_TEST_QUICK=1 shortens the curve comparison (sanitizer builds)."""
import filecmp
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

QUICK = os.environ.get("ZT_TEST_QUICK") == "1"


def base_job(name, ranks, stage, steps, tb=16, micro=None):
    return {
        "name": name,
        "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 32,
                  "vocab_size": 256, "init": "random", "seed": 7},
        "data": {"train": "data/synth_train_*.bin"},
        "train": {"steps": steps, "checkpoint_dir": f"ckpt/{name}"},
        "resources": {"ranks": ranks},
        "deepspeed": {
            "train_batch_size": tb, "train_micro_batch_size_per_gpu": micro or tb // ranks,
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
            "gradient_clipping": 1.0,
            "zero_optimization": {"stage": stage},
        },
    }


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-prec-") as tmp:
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--train-tokens", "200000",
                         "--val-tokens", "0"])
        assert r.returncode == 0, r.stderr

        def run(job, env=None):
            zu.write_job(f"{tmp}/{job['name']}.json", job)
            e = {"OMP_NUM_THREADS": "1", "ZT_PARAM_DIGEST": "1"}
            e.update(env or {})
            res = zu.run_zctl(["run", f"{tmp}/{job['name']}.json"], cwd=tmp, env=e)
            if res.returncode != 0:
                sys.exit(f"{job['name']}: zctl run failed ({res.returncode}):\n{res.stderr}")
            return zu.parse_step_lines(res.stdout)

        # 1. loss curves
        steps = 20 if QUICK else 50
        curves = {}
        for prec in ("fp32", "bf16", "fp16"):
            job = base_job(f"curve_{prec}", 2, 2, steps)
            if prec != "fp32":
                job["deepspeed"][prec] = {"enabled": True}
            curves[prec] = [float(s["loss"]) for s in run(job)]
        for prec in ("bf16", "fp16"):
            dev = max(abs(a - b) / b for a, b in zip(curves[prec], curves["fp32"]))
            print(f"{prec} vs fp32 over {steps} steps: max rel loss deviation {dev:.4f} "
                  f"(first {curves[prec][0]:.4f}/{curves['fp32'][0]:.4f}, "
                  f"last {curves[prec][-1]:.4f}/{curves['fp32'][-1]:.4f})")
            if dev > 0.02:
                failures.append(f"{prec} deviates {dev:.4f} > 2% from the fp32 curve")
        if curves["fp32"][-1] > curves["fp32"][0] * 0.8:
            failures.append("the fp32 run did not learn; the comparison would be vacuous")

        # 2. model-state bytes per rank for 16-bit training
        psi = None
        for prec, table in (("bf16", {0: lambda n: 18, 1: lambda n: 6 + 12 / n,
                                      2: lambda n: 2 + 16 / n, 3: lambda n: 18 / n}),
                            ("fp16", {0: lambda n: 16, 1: lambda n: 4 + 12 / n,
                                      2: lambda n: 2 + 14 / n, 3: lambda n: 16 / n})):
            for stage in range(4):
                n = 4
                job = base_job(f"mem_{prec}_{stage}", n, stage, 1)
                job["deepspeed"][prec] = {"enabled": True}
                last = run(job)[-1]
                if psi is None:  # Psi from the fp32-free accounting: params are 2 bytes each
                    psi = 2 * 64 * 64 * 12 + 2 * 13 * 64 + 256 * 64 + 32 * 64 + 2 * 64
                ms = int(last["mem_model_states"])
                exp = table[stage](n) * psi
                pad = 4 * 16 * n * 18
                ok = exp * 0.95 <= ms <= exp * 1.05 + pad
                print(f"{prec} stage {stage} on {n} ranks: model states {ms / psi:.3f} Psi, "
                      f"formula {exp / psi:.3f} Psi {'ok' if ok else 'MISMATCH'}")
                if not ok:
                    failures.append(f"{prec} stage {stage}: {ms} B vs formula {exp:.0f} B")

        # 3. injected overflow on rank 2 of 4 at step 3: skipped everywhere, scale halved
        job = base_job("overflow", 4, 2, 5)
        job["deepspeed"]["fp16"] = {"enabled": True, "initial_scale_power": 12, "hysteresis": 1}
        st = run(job, env={"ZT_INJECT_NONFINITE": "2:3"})
        scales = [float(s["loss_scale"]) for s in st]
        skipped = [int(s["skipped"]) for s in st]
        print(f"overflow run: loss_scale per step {scales}, skipped counter {skipped}")
        if skipped != [0, 0, 1, 1, 1] or scales[2] != 4096 or scales[3] != 2048:
            failures.append(f"injected overflow: scales {scales}, skipped {skipped}")
        if st[2]["grad_norm"] != "nan":
            failures.append(f"the skipped step reports grad_norm {st[2]['grad_norm']}")
        digests = set()
        for rk in range(4):
            log = zu.rank_log(f"{tmp}/ckpt/overflow", rk)
            if "step 3 skipped on every rank" not in log:
                failures.append(f"rank {rk} did not report skipping step 3")
            digests.add(zu.log_value(log, "param_digest"))
        if len(digests) != 1:
            failures.append(f"ranks diverged after the skipped step: {digests}")

        # 4. offload ratios: bitwise the same model as no offload
        outs = {}
        for ratio in (None, 0.0, 0.5, 1.0):
            name = f"offload_{ratio}"
            job = base_job(name, 2, 1, 10)
            if ratio is not None:
                job["deepspeed"]["zero_optimization"]["offload_optimizer"] = {"device": "cpu",
                                                                              "ratio": ratio}
            run(job)
            out = f"{tmp}/{name}.bin"
            e = zu.run_zctl(["ckpt", "export", f"{tmp}/ckpt/{name}", "--format", "llmc", "-o", out])
            assert e.returncode == 0, e.stderr
            outs[ratio] = out
        for ratio in (0.0, 0.5, 1.0):
            same = filecmp.cmp(outs[None], outs[ratio], shallow=False)
            print(f"offload ratio {ratio}: {'bitwise equal to' if same else 'DIFFERS from'} no offload")
            if not same:
                _, a = zu.read_model(outs[None])
                _, b = zu.read_model(outs[ratio])
                worst = max(zu.rel_l2(b[k], a[k]) for k in zu.KINDS)
                failures.append(f"offload ratio {ratio}: not bitwise equal (rel L2 {worst:.2e})")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
