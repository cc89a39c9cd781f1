"""zerotrain vs PyTorch on one rank, fp32: from the same llm.c init file and the same data,
12 steps with gradient accumulation, clipping and a warmup schedule give per-step losses
within 1e-5 relative of PyTorch's and final parameters within 1e-4 relative L2 per tensor.
Two optimizer/schedule variants: AdamW + WarmupLR (linear), and DeepSpeed "Adam" with
adam_w_mode false (L2) + WarmupCosineLR; the first again with the classifier cut into chunks of
7 rows (ZT_HEAD_ROWS, as a large vocabulary cuts it), which must not change what is learned."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import torch_gpt2 as tg  # noqa: E402
import ztutil as zu  # noqa: E402

CFG = dict(L=2, NH=4, C=64, T=32, V=200, Vp=256)
STEPS = 12

VARIANTS = {
    "adamw_warmup": {
        "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95],
                                                   "eps": 1e-8, "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 3e-3,
                                                     "warmup_num_steps": 5, "warmup_type": "linear"}},
        "gradient_clipping": 0.5,
    },
    "adam_l2_cosine": {
        "train_batch_size": 8, "gradient_accumulation_steps": 4,
        "optimizer": {"type": "Adam", "params": {"lr": 2e-3, "weight_decay": 0.01,
                                                  "adam_w_mode": False}},
        "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": STEPS,
                                                           "warmup_num_steps": 3,
                                                           "warmup_min_ratio": 0.1}},
        "gradient_clipping": 1.0,
    },
}


def torch_train_l2(cfg, params, data, ds, steps):
    """DeepSpeed Adam with adam_w_mode false: weight decay added to the gradient (L2)."""
    import torch
    model = tg.GPT2(cfg, params)
    op = ds["optimizer"]["params"]
    decay = [model.p[k] for k in tg.KINDS if k in tg.DECAY]
    nodecay = [model.p[k] for k in tg.KINDS if k not in tg.DECAY]
    opt = torch.optim.Adam([{"params": decay, "weight_decay": op["weight_decay"]},
                            {"params": nodecay, "weight_decay": 0.0}], lr=op["lr"])
    tb = ds["train_batch_size"]
    gas = ds["gradient_accumulation_steps"]
    micro = tb // gas
    losses = []
    for step in range(steps):
        x, y = data.batch(step, tb)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(0, tb, micro):
            loss = model(x[m:m + micro], y[m:m + micro]) / (tb * cfg["T"])
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), ds["gradient_clipping"])
        cur = tg.lr_at(ds["scheduler"], op["lr"], step)
        for g in opt.param_groups:
            g["lr"] = cur
        opt.step()
        losses.append(total)
    return losses, {k: v.detach().numpy().copy() for k, v in model.p.items()}


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-torch-") as tmp:
        rng = np.random.default_rng(7)
        os.makedirs(f"{tmp}/data")
        # two shards of different lengths; a skewed token distribution so the loss moves
        probs = rng.dirichlet(np.ones(CFG["V"]) * 0.3)
        tg.write_shard(f"{tmp}/data/t_000.bin", rng.choice(CFG["V"], 3001, p=probs))
        tg.write_shard(f"{tmp}/data/t_001.bin", rng.choice(CFG["V"], 1700, p=probs))
        params = tg.random_model(CFG, seed=3)
        tg.write_model(f"{tmp}/init.bin", CFG, params)
        data = tg.Data([f"{tmp}/data/t_000.bin", f"{tmp}/data/t_001.bin"], CFG["T"])

        runs = [(name, ds, {}) for name, ds in VARIANTS.items()]
        runs.append(("adamw_warmup_head7", VARIANTS["adamw_warmup"], {"ZT_HEAD_ROWS": "7"}))
        for name, ds, extra_env in runs:
            job = {
                "name": name,
                "model": {"arch": "gpt2", "n_layer": CFG["L"], "n_head": CFG["NH"],
                          "n_embd": CFG["C"], "block_size": CFG["T"], "vocab_size": CFG["V"],
                          "init": "init.bin"},
                "data": {"train": "data/t_*.bin"},
                "train": {"steps": STEPS, "checkpoint_dir": f"ckpt/{name}"},
                "resources": {"ranks": 1},
                "deepspeed": ds,
            }
            with open(f"{tmp}/{name}.json", "w") as f:
                json.dump(job, f)
            if ds["optimizer"]["type"] == "Adam":
                ref_losses, ref_params = torch_train_l2(CFG, params, data, ds, STEPS)
            else:
                ref_losses, ref_params = tg.train(CFG, params, data, ds, STEPS)

            env = dict(os.environ, OMP_NUM_THREADS="2", **extra_env)
            r = subprocess.run([tg.zt_bin("zctl"), "run", "--nproc", "1", f"{tmp}/{name}.json"],
                               capture_output=True, text=True, env=env, cwd=tmp)
            if r.returncode != 0:
                print(r.stdout, r.stderr)
                sys.exit(f"{name}: zctl run failed with {r.returncode}")
            steps = tg.parse_step_lines(r.stdout)
            if len(steps) != STEPS:
                sys.exit(f"{name}: expected {STEPS} step lines, got {len(steps)}:\n{r.stdout}")
            worst = 0.0
            for i, (s, ref) in enumerate(zip(steps, ref_losses)):
                got = float(s["loss"])
                rel = abs(got - ref) / abs(ref)
                worst = max(worst, rel)
                print(f"{name} step {i + 1}: zerotrain {got:.6f} torch {ref:.6f} rel {rel:.2e}")
                if rel > 1e-5:
                    failures.append(f"{name} step {i + 1}: loss {got} vs {ref} (rel {rel:.2e})")
            out = f"{tmp}/{name}_final.bin"
            r = subprocess.run([tg.zt_bin("zctl"), "ckpt", "export", f"{tmp}/ckpt/{name}",
                                "--format", "llmc", "-o", out], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{name}: export failed: {r.stderr}")
            cfg2, got = tg.read_model(out)
            assert cfg2 == CFG, (cfg2, CFG)
            for k in tg.KINDS:
                e = tg.rel_l2(got[k], ref_params[k])
                print(f"{name} {k:9s} rel L2 {e:.2e}")
                if e > 1e-4:
                    failures.append(f"{name} {k}: rel L2 {e:.2e} > 1e-4")
            # the padded vocabulary rows stay exactly zero
            if np.any(got["wte"][CFG["V"]:] != 0):
                failures.append(f"{name}: padded wte rows are not zero")
            print(f"{name}: worst loss rel diff {worst:.2e}")
    zu.finish(failures)


if __name__ == "__main__":
    main()
