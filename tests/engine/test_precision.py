"""Mixed precision, overflow handling, optimizer offload and activation checkpointing across
ranks:
- bf16 and fp16 follow the fp32 loss curve within 2% over 50 steps (ZeRO stage 2, 2 ranks);
- model-state bytes per rank at every stage within 5% (plus padding) of docs/zero.md's formula for
  the gradient dtype in use: bf16 (fp32 gradients by default: 18 Psi column), fp16 (16-bit by
  default: 16 Psi column), and the other way round through data_types.grad_accum_dtype (bf16
  with bf16 gradients: 16 Psi; fp16 with fp32 gradients: 18 Psi);
- bytes sent per step at every stage and gradient dtype exactly what the ring schedule costs
  (zero_expect.step_bytes: gradients reduced in their accumulation dtype, parameters gathered
  in 16 bits), printed as a multiple of the 2 Psi / 3 Psi formula times the element sizes;
- an injected non-finite gradient on one of four ranks skips the step on every rank, is counted
  (skipped=1) and reported, in fp16 (the loss scale halves), fp32 and bf16 (the parameters
  after the skipped step are bitwise those of a run that stopped before it);
- offload_optimizer ratio 0, 0.5 and 1 (and 0.5 with the host pipeline cut into small pieces)
  give bitwise the same model as no offload: fp32 at
  stage 1, bf16 at stages 2 and 3 (the host and device sides run the same CPU AdamW here);
- activation checkpointing gives bitwise the same losses and parameters as keeping every
  block's activations (fp32 stage 3, bf16 stage 1) while reporting less activation memory;
- bf16 and fp16 keep the blocks' qkv, attention output and MLP input in 16 bits between forward
  and backward: on a 4-layer model the activation bytes are exactly the layout's (LayerNorm
  statistics, lse and res2 in fp32 per block, 8 C per token in 2 bytes per block, one fp32
  working set) and less than with ZT_ACTIVATIONS_FP32=1, the losses differ from that run (the
  rounding happens) by less than 1%; ZT_ACTIVATIONS_FP32=yes is named once and ignored.
ZT_TEST_QUICK=1 shortens the curve comparison and runs fewer stages, offload ratios and
checkpointing pairs (sanitizer builds)."""
import filecmp
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402
import zero_expect as zx  # noqa: E402  (tests/engine, this script's directory)

QUICK = os.environ.get("ZT_TEST_QUICK") == "1"
SHAPE = dict(L=2, C=64, T=32, Vp=256)  # the model of base_job (vocab 256 is its own padding)
PSI = zx.psi(**SHAPE)
ESIZE = {"fp32": 4, "bf16": 2, "fp16": 2}
# docs/zero.md's model-state bytes per rank, in Psi, by gradient accumulation dtype
FORMULA = {16: {0: lambda n: 16, 1: lambda n: 4 + 12 / n, 2: lambda n: 2 + 14 / n,
                3: lambda n: 16 / n},
           32: {0: lambda n: 18, 1: lambda n: 6 + 12 / n, 2: lambda n: 2 + 16 / n,
                3: lambda n: 18 / n}}


def base_job(name, ranks, stage, steps, tb=16, micro=None, prec=None, layers=2):
    job = {
        "name": name,
        "model": {"arch": "gpt2", "n_layer": layers, "n_head": 2, "n_embd": 64, "block_size": 32,
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
    if prec and prec != "fp32":
        job["deepspeed"][prec] = {"enabled": True}
    return job


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

        def digests(name, ranks):
            return [zu.log_value(zu.rank_log(f"{tmp}/ckpt/{name}", rk), "param_digest")
                    for rk in range(ranks)]

        def export(name):
            out = f"{tmp}/{name}.bin"
            e = zu.run_zctl(["ckpt", "export", f"{tmp}/ckpt/{name}", "--format", "llmc", "-o", out])
            assert e.returncode == 0, e.stderr
            return out

        def same_model(a, b):
            """Bitwise equal exports, or the worst relative L2 per tensor."""
            if filecmp.cmp(a, b, shallow=False):
                return True, 0.0
            _, pa = zu.read_model(a)
            _, pb = zu.read_model(b)
            return False, max(zu.rel_l2(pb[k], pa[k]) for k in zu.KINDS)

        # 1. loss curves
        steps = 20 if QUICK else 50
        curves = {}
        for prec in ("fp32", "bf16", "fp16"):
            curves[prec] = [float(s["loss"]) for s in run(base_job(f"curve_{prec}", 2, 2, steps,
                                                                   prec=prec))]
        for prec in ("bf16", "fp16"):
            dev = max(abs(a - b) / b for a, b in zip(curves[prec], curves["fp32"]))
            print(f"{prec} vs fp32 over {steps} steps: max rel loss deviation {dev:.4f} "
                  f"(first {curves[prec][0]:.4f}/{curves['fp32'][0]:.4f}, "
                  f"last {curves[prec][-1]:.4f}/{curves['fp32'][-1]:.4f})")
            if dev > 0.02:
                failures.append(f"{prec} deviates {dev:.4f} > 2% from the fp32 curve")
        if curves["fp32"][-1] > curves["fp32"][0] * 0.8:
            failures.append("the fp32 run did not learn; the comparison would be vacuous")

        # 2. model-state bytes and bytes sent per step, for 16-bit training with the default
        # and the other gradient accumulation dtype, on 4 ranks (one micro-step each)
        n = 4
        for prec, gdt in (("bf16", None), ("fp16", None), ("bf16", "bf16"), ("fp16", "fp32")):
            gbits = {None: 32 if prec == "bf16" else 16, "bf16": 16, "fp32": 32}[gdt]
            schedule = ((0, None), (1, None), (2, None), (3, None), (3, 0))
            for stage, reuse in (schedule[1::3] if QUICK else schedule):
                name = f"mem_{prec}_{gdt or 'default'}_{stage}" + ("" if reuse is None else "_reuse0")
                job = base_job(name, n, stage, 1, prec=prec)
                if gdt:
                    job["deepspeed"]["data_types"] = {"grad_accum_dtype": gdt}
                if reuse is not None:
                    job["deepspeed"]["zero_optimization"]["stage3_max_reuse_distance"] = reuse
                last = run(job)[-1]
                if not math.isfinite(float(last["loss"])):
                    failures.append(f"{name}: loss {last['loss']}")
                ms = int(last["mem_model_states"])
                exp = FORMULA[gbits][stage](n) * PSI
                pad = 4 * 16 * n * 18
                mem_ok = exp * 0.95 <= ms <= exp * 1.05 + pad
                gs, ps = gbits // 8, ESIZE[prec]
                cb = int(last["comm_bytes"])
                comm_exp = zx.step_bytes(stage, n, 1, SHAPE["L"], SHAPE["C"], SHAPE["T"],
                                         SHAPE["Vp"], gs, ps, reuse=reuse)
                # docs/zero.md: 2 Psi (stages 0-2) or 3 Psi (stage 3) times the element size: the
                # gradients' for what is reduced, the parameters' for what is gathered. Stage 3
                # at the default reuse gathers each unit once a step (it stays in its slot):
                # 2 Psi; with reuse 0 it gathers for forward and backward: 3 Psi
                ring = (n - 1) / n
                formula = PSI * ring * ({0: 2 * gs, 1: gs + ps, 2: gs + ps,
                                         3: gs + (ps if reuse is None else 2 * ps)}[stage])
                print(f"{prec} with {gbits}-bit gradients, stage {stage}"
                      f"{'' if reuse is None else ' (reuse 0)'} on {n} ranks: model "
                      f"states {ms / PSI:.3f} Psi, formula {exp / PSI:.3f} Psi "
                      f"{'ok' if mem_ok else 'MISMATCH'}; sent {cb} B (expected {comm_exp} B, "
                      f"{cb / formula:.3f} x the Psi formula)")
                if not mem_ok:
                    failures.append(f"{name}: {ms} B vs formula {exp:.0f} B")
                if cb != comm_exp:
                    failures.append(f"{name}: sent {cb} B per step, expected exactly {comm_exp} B")
                if abs(cb - formula) > 0.05 * formula:
                    failures.append(f"{name}: sent {cb} B, not within 5% of the formula's {formula:.0f} B")

        # 3. injected non-finite gradient on rank 2 of 4 at step 3: skipped everywhere, counted
        job = base_job("overflow", 4, 2, 5, prec="fp16")
        job["deepspeed"]["fp16"].update({"initial_scale_power": 12, "hysteresis": 1})
        st = run(job, env={"ZT_INJECT_NONFINITE": "2:3"})
        scales = [float(s["loss_scale"]) for s in st]
        skipped = [int(s["skipped"]) for s in st]
        print(f"fp16 overflow run: loss_scale per step {scales}, skipped counter {skipped}")
        if skipped != [0, 0, 1, 1, 1] or scales[2] != 4096 or scales[3] != 2048:
            failures.append(f"injected overflow: scales {scales}, skipped {skipped}")
        if st[2]["grad_norm"] != "nan":
            failures.append(f"the skipped step reports grad_norm {st[2]['grad_norm']}")
        for rk in range(4):
            if "step 3 skipped on every rank" not in zu.rank_log(f"{tmp}/ckpt/overflow", rk):
                failures.append(f"fp16: rank {rk} did not report skipping step 3")
        if len(set(digests("overflow", 4))) != 1:
            failures.append(f"fp16: ranks diverged after the skipped step: {digests('overflow', 4)}")
        # fp32 and bf16 check for non-finite gradients too: the step is skipped on every rank
        # and never applied, so 3 steps with the third skipped end where 2 steps end
        for prec, stage in (("fp32", 1), ("bf16", 3)):
            name = f"skip_{prec}"
            st = run(base_job(name, 4, stage, 3, prec=prec), env={"ZT_INJECT_NONFINITE": "2:3"})
            ref = f"noskip_{prec}"
            run(base_job(ref, 4, stage, 2, prec=prec))
            skipped = [int(s["skipped"]) for s in st]
            print(f"{prec} stage {stage} with a non-finite gradient at step 3 on rank 2: skipped "
                  f"counter {skipped}, grad_norm {[s['grad_norm'] for s in st]}")
            if skipped != [0, 0, 1] or st[2]["grad_norm"] != "nan" or "loss_scale" in st[2]:
                failures.append(f"{prec}: skipped {skipped}, step 3 {st[2]}")
            for rk in range(4):
                if "step 3 skipped on every rank" not in zu.rank_log(f"{tmp}/ckpt/{name}", rk):
                    failures.append(f"{prec}: rank {rk} did not report skipping step 3")
            d_skip, d_ref = digests(name, 4), digests(ref, 4)
            if len(set(d_skip)) != 1 or d_skip != d_ref:
                failures.append(f"{prec}: digests after the skipped step {d_skip}, after 2 steps {d_ref}")
            same, worst = same_model(export(ref), export(name))
            if not same:
                failures.append(f"{prec}: the skipped step changed the master weights (rel L2 {worst:.2e})")

        # 4. offload ratios: bitwise the same model as no offload; "0.5 piecewise" cuts the
        # host part's pipeline into 777-element segments (ZT_OFFLOAD_PIECE), inside tensors
        ratios = (0.5,) if QUICK else (0.0, 0.5, 1.0)
        cases = [(r, r, None) for r in ratios] + [("0.5 piecewise", 0.5, {"ZT_OFFLOAD_PIECE": "777"})]
        for prec, stage, steps in (("fp32", 1, 10), ("bf16", 2, 6), ("bf16", 3, 6)):
            outs = {}
            for label, ratio, env in [(None, None, None)] + cases:
                name = f"offload_{prec}_{stage}_{label}".replace(" ", "_")
                job = base_job(name, 2, stage, steps, prec=prec)
                if ratio is not None:
                    job["deepspeed"]["zero_optimization"]["offload_optimizer"] = {"device": "cpu",
                                                                                  "ratio": ratio}
                run(job, env)
                outs[label] = export(name)
            for label, _, _ in cases:
                same, worst = same_model(outs[None], outs[label])
                print(f"{prec} stage {stage} offload ratio {label}: "
                      f"{'bitwise equal to' if same else 'DIFFERS from'} no offload")
                if not same:
                    failures.append(f"{prec} stage {stage} offload ratio {label}: not bitwise "
                                    f"equal (rel L2 {worst:.2e})")

        # 5. activation checkpointing: recomputing each block's forward in backward changes
        # nothing but the memory
        for prec, stage in (("fp32", 3),) if QUICK else (("fp32", 3), ("bf16", 1)):
            runs = {}
            for ckpt in (False, True):
                name = f"actckpt_{prec}_{stage}_{'on' if ckpt else 'off'}"
                job = base_job(name, 2, stage, 4, micro=4, prec=prec)  # 2 micro-steps a step
                if ckpt:
                    job["deepspeed"]["activation_checkpointing"] = {}
                runs[ckpt] = (name, run(job))
            (off_name, off), (on_name, on) = runs[False], runs[True]
            losses_off, losses_on = [s["loss"] for s in off], [s["loss"] for s in on]
            act_off, act_on = int(off[-1]["mem_activations"]), int(on[-1]["mem_activations"])
            same, worst = same_model(export(off_name), export(on_name))
            d_off, d_on = digests(off_name, 2), digests(on_name, 2)
            print(f"{prec} stage {stage} activation checkpointing: losses {losses_on} "
                  f"(without: {losses_off}), parameters {'bitwise equal' if same else 'DIFFER'}, "
                  f"digests {d_on}/{d_off}, activations {act_on} B vs {act_off} B")
            if losses_on != losses_off or not same or d_on != d_off or len(set(d_on)) != 1:
                failures.append(f"{prec} stage {stage}: checkpointing changed the result (losses "
                                f"{losses_on} vs {losses_off}, rel L2 {worst:.2e}, digests {d_on} vs {d_off})")
            if not act_on < act_off:
                failures.append(f"{prec} stage {stage}: activations {act_on} B with checkpointing, "
                                f"{act_off} B without")

        # 6. 16-bit activation storage in mixed precision
        L, NH, C, T, micro = 4, 2, 64, 32, 4
        BT = micro * T
        arena = lambda b: (b + 255) // 256 * 256  # noqa: E731  (engine arenas: 256-byte pieces)
        for prec in ("bf16",) if QUICK else ("bf16", "fp16"):
            res = {}
            for a32 in (False, True):
                name = f"act16_{prec}_{'fp32' if a32 else '16'}"
                job = base_job(name, 1, 0, 4, tb=micro, prec=prec, layers=L)
                res[a32] = run(job, {"ZT_ACTIVATIONS_FP32": "1"} if a32 else None)
            f32 = BT * (4 + C) + BT * NH  # floats per block kept in fp32
            lp = BT * 8 * C  # floats per block kept in 16 bits (qkv, atty, fch)
            work = BT * 4 * C  # the one fp32 working set: qkv and atty (fch never in fp32)
            rest = int(res[True][-1]["mem_activations"]) - arena(L * (f32 + lp) * 4)
            want = arena((L * f32 + work) * 4) + arena(L * lp * 2) + rest
            got = int(res[False][-1]["mem_activations"])
            l16 = [float(x["loss"]) for x in res[False]]
            l32 = [float(x["loss"]) for x in res[True]]
            dev = max(abs(a - b) / b for a, b in zip(l16, l32))
            print(f"{prec} activations in 16 bits: {got} B (layout {want} B) vs "
                  f"{int(res[True][-1]['mem_activations'])} B in fp32; losses {l16} vs {l32}, "
                  f"max rel deviation {dev:.2e}")
            if got != want:
                failures.append(f"{prec}: 16-bit activations take {got} B, the layout {want} B")
            if not got < int(res[True][-1]["mem_activations"]):
                failures.append(f"{prec}: 16-bit activations take no less memory")
            if l16 == l32 or not dev < 0.01:
                failures.append(f"{prec}: losses with 16-bit activations {l16} vs fp32 {l32}: "
                                f"identical, or more than 1% apart")
        # a value the switch does not know is named once, and changes nothing
        zu.write_job(f"{tmp}/act16_plan.json", base_job("act16_plan", 1, 0, 4, tb=micro,
                                                         prec="bf16", layers=L))
        # a fixed host memory: by default the largest-model line follows MemAvailable
        plans = {v: zu.run_zctl(["plan", f"{tmp}/act16_plan.json", "--host-memory", "64GiB"],
                                env={"ZT_ACTIVATIONS_FP32": v})
                 for v in ("", "yes")}
        warned = plans["yes"].stderr.count("ignoring ZT_ACTIVATIONS_FP32=yes: expected 0 or 1")
        print(f"ZT_ACTIVATIONS_FP32=yes: warned {warned} time(s), plan "
              f"{'unchanged' if plans['yes'].stdout == plans[''].stdout else 'CHANGED'}")
        if warned != 1 or plans["yes"].stdout != plans[""].stdout or plans[""].returncode != 0:
            failures.append(f"ZT_ACTIVATIONS_FP32=yes: warned {warned} times (want 1), plan "
                            f"changed or failed ({plans[''].returncode})")
    zu.finish(failures)


if __name__ == "__main__":
    main()
