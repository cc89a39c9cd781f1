"""Prints one line per engine configuration: the SHA-256 of its per-step losses (as printed)
and of its exported llm.c model, so that a change meant to keep behaviour can be checked bit
for bit: run it before and after and diff the outputs. Covers ZeRO stages 0-3 on 1-4 ranks in
fp32 and bf16, fp16 with loss scaling, host optimizer offload, stage-3 reuse 0 and gradient
accumulation. Usage: /usr/bin/python3 scripts/engine-fingerprint.py [BUILD_BIN_DIR]"""
import hashlib
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
if len(sys.argv) > 1:
    os.environ["ZT_BIN"] = os.path.abspath(sys.argv[1])
import ztutil as zu  # noqa: E402

CFG = dict(L=2, NH=2, C=32, T=16, V=120, Vp=128)


def job(name, stage, ranks, micro, prec, extra):
    ds = {"train_batch_size": 12, "train_micro_batch_size_per_gpu": micro,
          "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
          "gradient_clipping": 0.5, "zero_optimization": {"stage": stage}}
    if prec != "fp32":
        ds[prec] = {"enabled": True}
    ds["zero_optimization"].update(extra)
    return {"name": name,
            "model": {"arch": "gpt2", "n_layer": CFG["L"], "n_head": CFG["NH"],
                      "n_embd": CFG["C"], "block_size": CFG["T"], "vocab_size": CFG["V"],
                      "init": "init.bin"},
            "data": {"train": "data/t_*.bin"},
            "train": {"steps": 5, "checkpoint_dir": f"ckpt/{name}"},
            "resources": {"ranks": ranks}, "deepspeed": ds}


def cases():
    micro = {1: 6, 2: 3, 3: 2, 4: 3}
    for stage in range(4):
        for ranks in range(1, 5):
            for prec in ("fp32", "bf16"):
                yield f"s{stage}_r{ranks}_{prec}", stage, ranks, micro[ranks], prec, {}
    for stage in (1, 2, 3):
        for ranks in (1, 2):
            yield (f"s{stage}_r{ranks}_bf16_offload", stage, ranks, 6 // ranks, "bf16",
                   {"offload_optimizer": {"device": "cpu", "ratio": 0.5}})
    for ranks in (2, 3):
        yield f"s3_r{ranks}_fp32_reuse0", 3, ranks, 2, "fp32", {"stage3_max_reuse_distance": 0}
    yield "s2_r2_fp16", 2, 2, 3, "fp16", {}
    yield "s3_r4_fp16", 3, 4, 1, "fp16", {}


def main():
    with tempfile.TemporaryDirectory(prefix="zt-fp-") as tmp:
        rng = np.random.default_rng(11)
        os.makedirs(f"{tmp}/data")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 1500))
        zu.write_shard(f"{tmp}/data/t_001.bin", rng.integers(0, CFG["V"], 900))
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=5))
        for name, stage, ranks, micro, prec, extra in cases():
            zu.write_job(f"{tmp}/{name}.json", job(name, stage, ranks, micro, prec, extra))
            r = zu.run_zctl(["run", f"{tmp}/{name}.json"], cwd=tmp,
                            env={"OMP_NUM_THREADS": "1"})
            if r.returncode != 0:
                sys.exit(f"{name}: zctl run failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
            losses = " ".join(s["loss"] for s in zu.parse_step_lines(r.stdout))
            out = f"{tmp}/{name}.bin"
            e = zu.run_zctl(["ckpt", "export", f"{tmp}/ckpt/{name}", "--format", "llmc",
                             "-o", out])
            if e.returncode != 0:
                sys.exit(f"{name}: export failed: {e.stderr}")
            with open(out, "rb") as f:
                model = hashlib.sha256(f.read()).hexdigest()[:16]
            print(f"{name:24s} losses {hashlib.sha256(losses.encode()).hexdigest()[:16]} "
                  f"model {model}  [{losses}]", flush=True)


if __name__ == "__main__":
    main()
