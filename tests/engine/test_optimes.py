"""ZT_OP_TIMES=1 through `zctl run` (the real zworker, CPU backend): every step line carries
op_<label>_ms for each op the engine marks (a block's forward and backward ops, the
classifier, the embedding, the optimizer and the engine's own work between them), each a
number >= 0, together most of the step and never more than it (a bf16 job's block has no
residual ops of its own to time: its projections add them); the same job without the
variable (and with ZT_OP_TIMES=0) has none and the same losses (the marks change no result);
at ZeRO stage 3 on two ranks too, where parameter gathers run between the ops; a bad value is
named in a warning and treated as off."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

FWD = ["ln1_qkv_fwd", "attn_fwd", "attproj_fwd", "res_ln2_fwd", "fc_fwd", "gelu_fcproj_fwd",
       "res_fwd"]
# a 16-bit job's attproj and fcproj add the residuals themselves: no residual ops of their own
FWD16 = [x for x in FWD if x not in ("res_ln2_fwd", "res_fwd")]
BWD = ["gelu_fcproj_bwd", "ln2_fc_bwd", "ln2_bwd", "attproj_bwd", "attn_bwd", "ln1_qkv_bwd",
       "ln1_bwd"]
OTHER = ["encoder_fwd", "encoder_bwd", "lnf_fwd", "classifier", "lnf_bwd", "optimizer", "engine"]


def job(name, ranks, stage, prec=None):
    return {"name": name,
            "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 32,
                      "vocab_size": 256, "init": "random", "seed": 7},
            "data": {"train": "data/synth_train_*.bin"},
            "train": {"steps": 4, "checkpoint_dir": f"ckpt/{name}"},
            "resources": {"ranks": ranks},
            "deepspeed": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8 // ranks,
                          "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
                          "zero_optimization": {"stage": stage},
                          **({prec: {"enabled": True}} if prec else {})}}


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-optimes-") as tmp:
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--train-tokens", "50000",
                         "--val-tokens", "0"])
        assert r.returncode == 0, r.stderr

        def run(j, value):
            zu.write_job(f"{tmp}/{j['name']}.json", j)
            env = {"OMP_NUM_THREADS": "1"}
            if value is not None:
                env["ZT_OP_TIMES"] = value
            res = zu.run_zctl(["run", f"{tmp}/{j['name']}.json"], cwd=tmp, env=env)
            if res.returncode != 0:
                sys.exit(f"{j['name']}: zctl run failed ({res.returncode}):\n{res.stderr}")
            return zu.parse_step_lines(res.stdout), res.stderr

        for ranks, stage, prec in [(1, 0, None), (2, 3, "bf16")]:
            what = f"{ranks} rank(s), stage {stage}, {prec or 'fp32'}"
            base = f"t{ranks}_{stage}"
            on, _ = run(job(base + "_on", ranks, stage, prec), "1")
            off, _ = run(job(base + "_off", ranks, stage, prec), None)
            zero, _ = run(job(base + "_zero", ranks, stage, prec), "0")
            if len(on) != 4 or len(off) != 4 or len(zero) != 4:
                failures.append(f"{what}: step lines {len(on)}, {len(off)}, {len(zero)} (want 4)")
                continue
            for i, s in enumerate(on):
                ops = {k[3:-3]: float(v) for k, v in s.items()
                       if k.startswith("op_") and k.endswith("_ms")}
                step = float(s["step_ms"])
                missing = [x for x in (FWD16 if prec else FWD) + BWD + OTHER if x not in ops]
                stray = [x for x in FWD if prec and x not in FWD16 and x in ops]
                bad = {k: v for k, v in ops.items() if not v >= 0}
                total = sum(ops.values())
                print(f"{what} step {i + 1}: {len(ops)} op times, {total:.2f} of {step:.2f} ms; "
                      f"largest {max(ops, key=ops.get) if ops else '-'}")
                if missing or stray or bad or not 0.5 * step <= total <= step + 0.5:
                    failures.append(f"{what} step {i + 1}: missing {missing}, not run but "
                                    f"timed {stray}, negative {bad}, "
                                    f"total {total:.3f} against a {step:.3f} ms step")
            for name, lines in (("unset", off), ("0", zero)):
                extra = [k for s in lines for k in s if k.startswith("op_")]
                if extra:
                    failures.append(f"{what}: ZT_OP_TIMES {name}: op times {sorted(set(extra))}")
            losses = [[s["loss"] for s in lines] for lines in (on, off, zero)]
            if not losses[0] == losses[1] == losses[2]:
                failures.append(f"{what}: losses with and without op times differ: {losses}")
            else:
                print(f"{what}: the same losses with and without op times")

        _, err = run(job("bad", 1, 0), "yes")
        if "ignoring ZT_OP_TIMES=yes" not in err:
            failures.append(f"ZT_OP_TIMES=yes: no warning naming it:\n{err[-1500:]}")
    zu.finish(failures)


if __name__ == "__main__":
    main()
