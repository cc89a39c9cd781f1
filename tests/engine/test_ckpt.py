"""Sharded checkpoints (issue: atomic, checksummed, resumable on any rank count, exportable):
1. 20 steps straight vs 10 steps, stop, resume, 10 steps: identical losses at every step and a
   byte-identical export, for stages 0-3 at 2 and 4 ranks, fp32 and bf16.
2. Resume 4 ranks stage 3 -> 2 ranks stage 1, and 2 ranks stage 1 -> 4 ranks stage 3: right
   after loading, the gathered parameters and moments are bitwise those of the checkpoint (read
   here by an independent Python reader of the shard format); 10 more steps stay within 1e-4
   relative L2 per tensor of the straight run.
3. A corrupted byte, a truncated shard, a deleted shard, an edited meta.json: each refused by
   resume, export and inspect with the file named.
4. safetensors read back by a Python reader (header JSON + data) matches the llmc export tensor
   by tensor (Hugging Face names, Conv1D layout); the llmc export reloads as model.init.
5. keep_checkpoints keeps the newest N complete checkpoints; an elastic resume that the new
   rank count cannot form is refused before anything loads.
ZT_TEST_QUICK=1 runs a subset of (1)."""
import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

QUICK = os.environ.get("ZT_TEST_QUICK") == "1"
CFG = dict(L=2, NH=2, C=32, T=16, V=100, Vp=128)
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def job_for(name, ranks, stage, steps, prec="fp32", ckpt_every=10, keep=3, ckdir=None):
    ds = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.1}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 2e-3, "warmup_num_steps": 8}},
          "gradient_clipping": 1.0, "zero_optimization": {"stage": stage}}
    if prec != "fp32":
        ds[prec] = {"enabled": True}
    return {"name": name,
            "model": {"arch": "gpt2", "n_layer": CFG["L"], "n_head": CFG["NH"], "n_embd": CFG["C"],
                      "block_size": CFG["T"], "vocab_size": CFG["V"], "init": "init.bin"},
            "data": {"train": "data/t_*.bin"},
            "train": {"steps": steps, "checkpoint_every": ckpt_every,
                      "checkpoint_dir": ckdir or f"ckpt/{name}", "keep_checkpoints": keep},
            "resources": {"ranks": ranks}, "deepspeed": ds}


def read_checkpoint(step_dir):
    """Independent reader of zerotrain's shard format: full (master, exp_avg, exp_avg_sq) per unit."""
    meta = json.load(open(os.path.join(step_dir, "meta.json")))
    units = [(u["numel"], u["shard"]) for u in meta["units"]]
    world = meta["world"]
    full = [np.zeros((3, s * world), np.float32) for _, s in units]
    for r in range(world):
        with open(os.path.join(step_dir, "rank_%05d.zts" % r), "rb") as f:
            hdr = f.read(64)
            assert hdr[:7] == b"ZTSHARD", step_dir
            version, rank, w = struct.unpack_from("<III", hdr, 8)
            assert (version, rank, w) == (1, r, world)
            payload = np.frombuffer(f.read(), np.float32)
        off = 0
        for ui, (_, s) in enumerate(units):
            for sec in range(3):
                full[ui][sec, r * s:(r + 1) * s] = payload[off:off + s]
                off += s
    return [full[ui][:, :n] for ui, (n, _) in enumerate(units)]


def read_dump(path):
    """zworker's ZT_DUMP_STATE_AFTER_LOAD file: per unit master, exp_avg, exp_avg_sq."""
    return np.fromfile(path, np.float32)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = {"F32": np.float32}[info["dtype"]]
        out[name] = np.frombuffer(data[a:b], dt).reshape(info["shape"])
    return header, out


def main():
    with tempfile.TemporaryDirectory(prefix="zt-ckpt-") as tmp:
        rng = np.random.default_rng(2)
        os.makedirs(f"{tmp}/data")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 2000))
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=9))

        def run(job, resume=None, nproc=None, env=None, expect_ok=True):
            zu.write_job(f"{tmp}/{job['name']}.json", job)
            args = ["run", f"{tmp}/{job['name']}.json"]
            if resume:
                args += ["--resume", resume]
            if nproc:
                args += ["--nproc", str(nproc)]
            e = {"OMP_NUM_THREADS": "1"}
            e.update(env or {})
            r = zu.run_zctl(args, cwd=tmp, env=e)
            if expect_ok and r.returncode != 0:
                sys.exit(f"{job['name']}: zctl run failed ({r.returncode}):\n{r.stderr}")
            return r

        def export(ck, out, fmt="llmc"):
            r = zu.run_zctl(["ckpt", "export", ck, "--format", fmt, "-o", out])
            check(r.returncode == 0, f"export {ck}: {r.stderr}")
            return out

        # 1. straight vs stop-and-resume, bit for bit
        cases = [(st, rk, p) for p in ("fp32", "bf16") for st in range(4) for rk in (2, 4)]
        if QUICK:
            cases = [(3, 4, "bf16"), (1, 2, "fp32")]
        for stage, ranks, prec in cases:
            tag = f"s{stage}_r{ranks}_{prec}"
            straight = zu.parse_step_lines(run(job_for(f"straight_{tag}", ranks, stage, 20, prec)).stdout)
            run(job_for(f"part_{tag}", ranks, stage, 10, prec, ckdir=f"ckpt/resumed_{tag}"))
            r = run(job_for(f"rest_{tag}", ranks, stage, 20, prec, ckdir=f"ckpt/resumed_{tag}"),
                    resume=f"{tmp}/ckpt/resumed_{tag}")
            resumed = zu.parse_step_lines(r.stdout)
            a = [s["loss"] for s in straight[10:]]
            b = [s["loss"] for s in resumed]
            check([s["step"] for s in resumed] == [str(i) for i in range(11, 21)],
                  f"{tag}: resumed run printed steps {[s['step'] for s in resumed]}")
            check(a == b, f"{tag}: losses after resume differ: {a} vs {b}")
            e1 = export(f"{tmp}/ckpt/straight_{tag}", f"{tmp}/{tag}_a.bin")
            e2 = export(f"{tmp}/ckpt/resumed_{tag}", f"{tmp}/{tag}_b.bin")
            same = open(e1, "rb").read() == open(e2, "rb").read()
            check(same, f"{tag}: exports differ after resume")
            print(f"{tag}: resumed losses identical: {a == b}, export byte-identical: {same}")

        # 2. re-sharding across rank counts and stages
        run(job_for("ref4", 4, 3, 20))  # straight reference, checkpoints at 10 and 20
        ck10 = f"{tmp}/ckpt/ref4/step_00000010"
        truth = read_checkpoint(ck10)
        flat_truth = np.concatenate([t.reshape(-1) for t in truth])
        for (ranks, stage, src, name) in ((2, 1, ck10, "to2s1"), (4, 3, None, "back4s3")):
            if src is None:  # 2 -> 4: from the 2-rank stage-1 checkpoint just written
                src = f"{tmp}/ckpt/to2s1/step_00000010"
            os.makedirs(f"{tmp}/ckpt/{name}", exist_ok=True)
            shutil.copytree(src, f"{tmp}/ckpt/{name}/step_00000010")
            dump = f"{tmp}/{name}.dump"
            run(job_for(name, ranks, stage, 20), resume=f"{tmp}/ckpt/{name}",
                env={"ZT_DUMP_STATE_AFTER_LOAD": dump})
            got = read_dump(dump)
            want = np.concatenate([t.reshape(-1) for t in read_checkpoint(src)])
            check(got.tobytes() == want.tobytes(),
                  f"{name}: state right after loading is not bitwise the checkpoint's")
            check(want.tobytes() == flat_truth.tobytes(),
                  f"{name}: the source checkpoint differs from the 4-rank original")
            e1 = export(f"{tmp}/ckpt/ref4", f"{tmp}/ref4.bin")
            e2 = export(f"{tmp}/ckpt/{name}", f"{tmp}/{name}.bin")
            _, pa = zu.read_model(e1)
            _, pb = zu.read_model(e2)
            worst = max(zu.rel_l2(pb[k], pa[k]) for k in zu.KINDS)
            check(worst <= 1e-4, f"{name}: after 10 more steps rel L2 {worst:.2e} > 1e-4")
            print(f"{name}: loaded state bitwise equal to the checkpoint; after 10 steps rel L2 {worst:.1e}")

        # 3. damaged checkpoints are refused, naming the file
        def damaged(label, mutate, needle):
            d = f"{tmp}/bad_{label}"
            shutil.copytree(f"{tmp}/ckpt/ref4", d)
            step = f"{d}/step_00000020"
            mutate(step)
            for args in (["ckpt", "inspect", step], ["ckpt", "export", step, "--format", "llmc",
                                                        "-o", f"{tmp}/x.bin"]):
                r = zu.run_zctl(args)
                check(r.returncode != 0 and needle in r.stderr,
                      f"{label}: '{' '.join(args[:2])}' gave rc {r.returncode}: {r.stderr.strip()}")
            r = run(job_for(f"resume_{label}", 4, 3, 25), resume=step, expect_ok=False)
            check(r.returncode != 0 and needle in r.stderr,
                  f"{label}: resume gave rc {r.returncode}: {r.stderr.strip()[-300:]}")
            print(f"{label}: refused naming {needle}")

        def flip(step):
            with open(f"{step}/rank_00002.zts", "r+b") as f:
                f.seek(64 + 1000)
                b = f.read(1)
                f.seek(64 + 1000)
                f.write(bytes([b[0] ^ 0x40]))

        def truncate(step):
            p = f"{step}/rank_00001.zts"
            os.truncate(p, os.path.getsize(p) - 100)

        def delete(step):
            os.unlink(f"{step}/rank_00003.zts")

        def edit_meta(step):
            m = json.load(open(f"{step}/meta.json"))
            m["shards"][0]["crc32c"] = "%08x" % (int(m["shards"][0]["crc32c"], 16) ^ 1)
            json.dump(m, open(f"{step}/meta.json", "w"))

        damaged("flip", flip, "rank_00002.zts")
        damaged("truncate", truncate, "rank_00001.zts")
        damaged("delete", delete, "rank_00003.zts")
        damaged("meta", edit_meta, "rank_00000.zts")

        # 4. safetensors vs llmc, and the llmc export as model.init
        llmc = export(f"{tmp}/ckpt/ref4", f"{tmp}/ref4.bin")
        st = export(f"{tmp}/ckpt/ref4", f"{tmp}/ref4.safetensors", "safetensors")
        _, p = zu.read_model(llmc)
        header, t = read_safetensors(st)
        V, C = CFG["V"], CFG["C"]
        pairs = [("transformer.wte.weight", p["wte"][:V]), ("transformer.wpe.weight", p["wpe"]),
                 ("transformer.ln_f.weight", p["lnfw"]), ("transformer.ln_f.bias", p["lnfb"])]
        hf = {"ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvw": "attn.c_attn.weight",
              "qkvb": "attn.c_attn.bias", "attprojw": "attn.c_proj.weight",
              "attprojb": "attn.c_proj.bias", "ln2w": "ln_2.weight", "ln2b": "ln_2.bias",
              "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias", "fcprojw": "mlp.c_proj.weight",
              "fcprojb": "mlp.c_proj.bias"}
        for l in range(CFG["L"]):
            for k, n in hf.items():
                v = p[k][l]
                pairs.append((f"transformer.h.{l}.{n}", v.T if v.ndim == 2 else v))  # Conv1D [in, out]
        check(len(t) == len(pairs), f"safetensors holds {len(t)} tensors, expected {len(pairs)}")
        for name, want in pairs:
            check(name in t and t[name].shape == want.shape and np.array_equal(t[name], want),
                  f"safetensors {name} differs from the llmc export")
        check(t["transformer.h.0.attn.c_attn.weight"].shape == (C, 3 * C), "c_attn not [in, out]")
        print(f"safetensors: {len(t)} tensors match the llmc export")
        reload = job_for("reload", 2, 0, 1, ckpt_every=0)
        reload["model"]["init"] = "ref4.bin"
        reload["deepspeed"]["optimizer"]["params"]["lr"] = 0.0
        reload["deepspeed"].pop("scheduler")
        run(reload)
        again = export(f"{tmp}/ckpt/reload", f"{tmp}/reload.bin")
        check(open(again, "rb").read() == open(llmc, "rb").read(),
              "the llmc export did not reload as model.init unchanged")
        print("llmc export reloads as model.init unchanged")

        # 5. keep_checkpoints and an impossible elastic resume
        run(job_for("keep", 2, 2, 20, ckpt_every=5, keep=2))
        kept = sorted(d for d in os.listdir(f"{tmp}/ckpt/keep") if d.startswith("step_"))
        check(kept == ["step_00000015", "step_00000020"], f"keep_checkpoints 2 kept {kept}")
        r = run(job_for("elastic", 2, 1, 25), resume=f"{tmp}/ckpt/keep", nproc=3, expect_ok=False)
        check(r.returncode == 2 and "train_batch_size 8" in r.stderr and "3 ranks" in r.stderr,
              f"elastic resume on 3 ranks: rc {r.returncode} {r.stderr.strip()}")
        check(not os.path.exists(f"{tmp}/ckpt/elastic/logs"), "workers started for an impossible resume")
        print(f"keep_checkpoints: {kept}; resume of batch 8 on 3 ranks refused")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
