"""Sharded checkpoints (issue: atomic, checksummed, resumable on any rank count, exportable):
1. 20 steps straight vs 10 steps, stop, resume, 10 steps: identical losses at every step and a
   byte-identical export, for stages 0-3 at 2 and 4 ranks, fp32 and bf16.
2. A 4-rank stage-3 run's checkpoint resumed on 2 ranks at stage 1, and a 2-rank stage-1 run's
   own checkpoint resumed on 4 ranks at stage 3: right after loading, the gathered parameters
   and both moments are bitwise those of the checkpoint (read here by an independent Python
   reader of the shard format); after 10 more steps the master weights and both moments of the
   step-20 checkpoint are within 1e-4 relative L2 per tensor of the straight run's.
3. A corrupted byte (read by every rank, or by one rank only), a truncated shard, a deleted
   shard, and edits of meta.json (a shard checksum, stage, applied_steps, train_batch_size,
   the loss scale, precision, a deleted key, a field only its checksum covers): each refused by
   resume, export and inspect with the file (and for meta.json the field) named; a resume that
   one rank refuses is refused by every rank with the same message.
4. safetensors read back by a Python reader (header JSON + data) matches the llmc export tensor
   by tensor (Hugging Face names, Conv1D layout); the llmc export reloads as model.init; the
   bf16 exports (llmc and safetensors) hold round-to-nearest-even of the fp32 exports.
5. keep_checkpoints keeps the newest N complete checkpoints, also among more than 4096 step
   directories; an elastic resume that the new rank count cannot form is refused before
   anything loads; re-saving a step with fewer ranks leaves no stale shards.
6. Failures every rank must agree on, forced with an LD_PRELOAD shim (fault_fs.c): rank 0's
   meta.json cannot be renamed into place (no rank reports its shard, every rank fails with the
   same message naming meta.json); fsync of CKPT_DIR after creating step_N fails; fsync of the
   step directory fails; creating step_N finds the disk full (every rank names ENOSPC).
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
check = zu.checker(failures)


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


SECTIONS = ("master", "exp_avg", "exp_avg_sq")


def read_checkpoint(step_dir, expect=None):
    """Independent reader of zerotrain's shard format (v2: 256-byte header, chunk checksum
    table, payload at payload_offset): full (master, exp_avg, exp_avg_sq) per unit."""
    meta = json.load(open(os.path.join(step_dir, "meta.json")))
    units = [(u["numel"], u["shard"]) for u in meta["units"]]
    world = meta["world"]
    full = [np.zeros((3, s * world), np.float32) for _, s in units]
    for r in range(world):
        with open(os.path.join(step_dir, "rank_%05d.zts" % r), "rb") as f:
            data = f.read()
        assert data[:7] == b"ZTSHARD", step_dir
        version, rank, w, stage = struct.unpack_from("<IIII", data, 8)
        assert (version, rank, w, stage) == (2, r, world, meta["stage"]), (step_dir, version, rank, w)
        payload_offset, payload_bytes = struct.unpack_from("<QQ", data, 40)
        payload = np.frombuffer(data[payload_offset:], np.float32)
        assert payload.nbytes == payload_bytes, step_dir
        off = 0
        for ui, (_, s) in enumerate(units):
            for sec in range(3):
                full[ui][sec, r * s:(r + 1) * s] = payload[off:off + s]
                off += s
    return [full[ui][:, :n] for ui, (n, _) in enumerate(units)]


def per_tensor(state):
    """read_checkpoint's units split into llm.c tensors: {(section, tensor): values}."""
    L, C, T, Vp = CFG["L"], CFG["C"], CFG["T"], CFG["Vp"]
    block = [("ln1w", C), ("ln1b", C), ("qkvw", 3 * C * C), ("qkvb", 3 * C), ("attprojw", C * C),
             ("attprojb", C), ("ln2w", C), ("ln2b", C), ("fcw", 4 * C * C), ("fcb", 4 * C),
             ("fcprojw", 4 * C * C), ("fcprojb", C)]
    layout = ([[("wte", Vp * C), ("wpe", T * C)]] +
              [[(f"{k}.{l}", n) for k, n in block] for l in range(L)] + [[("lnfw", C), ("lnfb", C)]])
    out = {}
    for ui, tensors in enumerate(layout):
        off = 0
        for name, n in tensors:
            for sec, sname in enumerate(SECTIONS):
                out[(sname, name)] = state[ui][sec, off:off + n]
            off += n
        assert off == state[ui].shape[1], (ui, off, state[ui].shape)
    return out


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
        dt = {"F32": np.float32, "BF16": np.uint16}[info["dtype"]]
        out[name] = np.frombuffer(data[a:b], dt).reshape(info["shape"])
    return header, out


def bf16_rne(a):
    """float32 -> bf16 bit patterns, rounding to nearest even (finite values)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)



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

        def export(ck, out, fmt="llmc", dtype=None):
            """dtype "bf16" is passed as --dtype bf16, "=bf16" as --dtype=bf16."""
            r = zu.run_zctl(["ckpt", "export", ck, "--format", fmt, "-o", out] +
                            ([] if not dtype else [f"--dtype{dtype}"] if dtype[0] == "=" else ["--dtype", dtype]))
            check(r.returncode == 0, f"export {ck}: {r.stderr}")
            return out

        def workers(job, nproc, env=None, resume=None):
            """Every rank's zworker started directly (zctl run would stop the others at the first
            failure, before they log theirs): exit codes, stderr texts, report-pipe lines."""
            codes, errs, _, texts = zu.run_ranks(tmp, job, nproc, env=env, resume=resume)
            return codes, errs, texts

        def error_lines(texts, needle):
            """Per rank, its lines from `needle` on (the part every rank should share)."""
            return [[l[l.index(needle):] for l in t.splitlines() if needle in l] for t in texts]

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

        # 2. re-sharding across rank counts and stages, each direction from a checkpoint that
        # its own run wrote: 4 ranks stage 3 -> 2 ranks stage 1, 2 ranks stage 1 -> 4 ranks stage 3
        run(job_for("ref4", 4, 3, 20))  # straight runs, checkpoints at 10 and 20
        run(job_for("ref2", 2, 1, 20))
        for src_name, src_world, src_stage, ranks, stage, name in (("ref4", 4, 3, 2, 1, "to2s1"),
                                                                   ("ref2", 2, 1, 4, 3, "to4s3")):
            src = f"{tmp}/ckpt/{src_name}/step_00000010"
            meta = json.load(open(f"{src}/meta.json"))
            check((meta["world"], meta["stage"]) == (src_world, src_stage),
                  f"{name}: source {src} says world {meta['world']} stage {meta['stage']}, "
                  f"not {src_world} / {src_stage}")
            os.makedirs(f"{tmp}/ckpt/{name}", exist_ok=True)
            shutil.copytree(src, f"{tmp}/ckpt/{name}/step_00000010")
            dump = f"{tmp}/{name}.dump"
            run(job_for(name, ranks, stage, 20), resume=f"{tmp}/ckpt/{name}",
                env={"ZT_DUMP_STATE_AFTER_LOAD": dump})
            got = read_dump(dump)
            want = np.concatenate([t.reshape(-1) for t in read_checkpoint(src)])
            check(got.size == want.size and got.tobytes() == want.tobytes(),
                  f"{name}: parameters and moments right after loading are not bitwise the checkpoint's")
            end = f"{tmp}/ckpt/{name}/step_00000020"
            m20 = json.load(open(f"{end}/meta.json"))
            check((m20["world"], m20["stage"]) == (ranks, stage),
                  f"{name}: step 20 written by world {m20['world']} stage {m20['stage']}")
            a = per_tensor(read_checkpoint(end))
            b = per_tensor(read_checkpoint(f"{tmp}/ckpt/{src_name}/step_00000020"))
            check(set(a) == set(b) and len(a) == 3 * (2 + 12 * CFG["L"] + 2), f"{name}: tensor sets differ")
            errs = {k: zu.rel_l2(a[k], b[k]) for k in b}
            for sec in SECTIONS:
                worst = max((v, k[1]) for k, v in errs.items() if k[0] == sec)
                check(worst[0] <= 1e-4, f"{name}: after 10 more steps {sec} of {worst[1]} is "
                      f"{worst[0]:.2e} > 1e-4 relative L2 from the straight {src_name} run")
                print(f"{name}: {sec} worst tensor after 10 steps {worst[1]} rel L2 {worst[0]:.1e}")
            print(f"{name}: {src_name} (world {src_world} stage {src_stage}) loaded on {ranks} ranks "
                  f"stage {stage} bitwise equal to the checkpoint")

        # 3. damaged checkpoints are refused, naming the file (and for meta.json the field)
        def damaged(label, mutate, needles, resume_ranks=4):
            d = f"{tmp}/bad_{label}"
            shutil.copytree(f"{tmp}/ckpt/ref4", d)
            step = f"{d}/step_00000020"
            mutate(step)
            for args in (["ckpt", "inspect", step], ["ckpt", "export", step, "--format", "llmc",
                                                        "-o", f"{tmp}/x.bin"]):
                r = zu.run_zctl(args)
                check(r.returncode != 0 and all(n in r.stderr for n in needles),
                      f"{label}: '{' '.join(args[:2])}' gave rc {r.returncode}: {r.stderr.strip()}")
            r = run(job_for(f"resume_{label}", resume_ranks, 3, 25), resume=step, expect_ok=False)
            check(r.returncode != 0 and all(n in r.stderr for n in needles),
                  f"{label}: resume gave rc {r.returncode}: {r.stderr.strip()[-300:]}")
            print(f"{label}: refused naming {', '.join(needles)}")
            return r

        def payload_offset(path):
            with open(path, "rb") as f:
                return struct.unpack_from("<Q", f.read(64), 40)[0]

        def flip_at(path, where):
            with open(path, "r+b") as f:
                f.seek(where)
                b = f.read(1)
                f.seek(where)
                f.write(bytes([b[0] ^ 0x40]))

        def flip(step):  # unit 0's master values: every rank reads them
            p = f"{step}/rank_00002.zts"
            flip_at(p, payload_offset(p) + 1000)

        def flip_one_reader(step):  # the last exp_avg_sq values of rank 3: only rank 3 reads them
            p = f"{step}/rank_00003.zts"
            flip_at(p, os.path.getsize(p) - 3)

        def flip_table(step):
            flip_at(f"{step}/rank_00001.zts", 256 + 4)

        def truncate(step):
            p = f"{step}/rank_00001.zts"
            os.truncate(p, os.path.getsize(p) - 100)

        def delete(step):
            os.unlink(f"{step}/rank_00003.zts")

        def edit_meta(fn):
            def mutate(step):
                m = json.load(open(f"{step}/meta.json"))
                fn(m)
                json.dump(m, open(f"{step}/meta.json", "w"), indent=1)
            return mutate

        def shard_crc(m):
            m["shards"][0]["crc32c"] = "%08x" % (int(m["shards"][0]["crc32c"], 16) ^ 1)

        def applied_consistent(m):  # one more skipped step, everything meta.json derives kept
            m["applied_steps"] -= 1
            m["skipped_steps"] += 1
            m["scheduler"]["t"] -= 1

        def batch_consistent(m):  # a doubled batch that meta.json itself still finds consistent
            m["train_batch_size"] *= 2
            m["gradient_accumulation_steps"] *= 2
            m["data"]["samples_consumed"] *= 2

        damaged("flip", flip, ["rank_00002.zts", "checksum mismatch"])
        damaged("flip_one_reader", flip_one_reader, ["rank_00003.zts", "checksum mismatch"])
        rcs, errs, _ = workers(job_for("one_reader", 4, 3, 25), 4,
                               resume=f"{tmp}/bad_flip_one_reader/step_00000020")
        msgs = error_lines(errs, "rank 3: ")
        check(all(rc != 0 for rc in rcs) and all(msgs) and len({m[-1] for m in msgs}) == 1 and
              "rank_00003.zts: checksum mismatch" in msgs[0][-1],
              f"flip_one_reader: not every rank refused with rank 3's message: {rcs} {msgs}")
        print(f"flip_one_reader: all 4 ranks refused with {msgs[0][-1][:60] if all(msgs) else None}...")
        damaged("flip_table", flip_table, ["rank_00001.zts", "table"])
        damaged("truncate", truncate, ["rank_00001.zts"])
        damaged("delete", delete, ["rank_00003.zts"])
        damaged("meta", edit_meta(shard_crc), ["rank_00000.zts", "meta.json"])
        damaged("meta_stage", edit_meta(lambda m: m.update(stage=1)), ["meta.json", '"stage"'])
        damaged("meta_applied", edit_meta(lambda m: m.update(applied_steps=m["applied_steps"] - 1)),
                ["meta.json", '"applied_steps"'])
        damaged("meta_applied_consistent", edit_meta(applied_consistent),
                ["meta.json", '"applied_steps"', "rank_00000.zts"])
        damaged("meta_batch", edit_meta(lambda m: m.update(train_batch_size=16)),
                ["meta.json", '"train_batch_size"'])
        damaged("meta_batch_consistent", edit_meta(batch_consistent),
                ["meta.json", '"train_batch_size"', "rank_00000.zts"], resume_ranks=2)
        damaged("meta_scale", edit_meta(lambda m: m["loss_scaler"].update(scale=1024.0)),
                ["meta.json", '"loss_scaler.scale"'])
        damaged("meta_scale_deleted", edit_meta(lambda m: m["loss_scaler"].pop("scale")),
                ["meta.json", '"loss_scaler.scale"', "missing"])
        damaged("meta_precision", edit_meta(lambda m: m.update(precision="bf16")),
                ["meta.json", '"precision"'])
        damaged("meta_precision_unknown", edit_meta(lambda m: m.update(precision="fp8")),
                ["meta.json", '"precision"', "fp8"])
        damaged("meta_deleted_key", edit_meta(lambda m: m.pop("skipped_steps")),
                ["meta.json", '"skipped_steps"', "missing"])
        damaged("meta_job", edit_meta(lambda m: m["job"].update(name="other")),
                ["meta.json", '"meta_crc32c"'])

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

        # bf16 exports: the fp32 export rounded to nearest even, in both formats
        llmc16 = export(f"{tmp}/ckpt/ref4", f"{tmp}/ref4_bf16.bin", "llmc", "bf16")
        with open(llmc, "rb") as f:
            h32, d32 = np.frombuffer(f.read(1024), np.int32), np.frombuffer(f.read(), np.float32)
        with open(llmc16, "rb") as f:
            h16, d16 = np.frombuffer(f.read(1024), np.int32), np.frombuffer(f.read(), np.uint16)
        check(h16[0] == 20240326 and h16[1] == 5 and np.array_equal(h16[2:], h32[2:]),
              f"llmc bf16 header {h16[:8]} vs fp32 {h32[:8]}")
        rounded = bf16_rne(d32)
        truncated = (d32.view(np.uint32) >> 16).astype(np.uint16)
        check(d16.shape == d32.shape and np.array_equal(d16, rounded),
              f"llmc bf16 export is not round-to-nearest-even of the fp32 export "
              f"({int(np.sum(d16 != rounded)) if d16.shape == d32.shape else 'size'} differ)")
        check(np.sum(rounded != truncated) > d32.size // 10,
              "too few values where rounding and truncation differ for this check to mean anything")
        st16 = export(f"{tmp}/ckpt/ref4", f"{tmp}/ref4_bf16.safetensors", "safetensors", "=bf16")
        header16, t16 = read_safetensors(st16)
        check(sorted(t16) == sorted(t), "bf16 safetensors holds other tensors than fp32")
        for name, v in t.items():
            info = header16.get(name, {})
            check(info.get("dtype") == "BF16" and info.get("shape") == header[name]["shape"] and
                  np.array_equal(t16.get(name), bf16_rne(v)),
                  f"bf16 safetensors {name}: {info.get('dtype')} {info.get('shape')} is not "
                  f"round-to-nearest-even of the fp32 export")
        print(f"bf16 exports: llmc ({d16.size} values) and safetensors ({len(t16)} tensors) are "
              f"round-to-nearest-even of fp32 ({int(np.sum(rounded != truncated))} differ from truncation)")

        # 5. keep_checkpoints and an impossible elastic resume
        run(job_for("keep", 2, 2, 20, ckpt_every=5, keep=2))
        kept = sorted(d for d in os.listdir(f"{tmp}/ckpt/keep") if d.startswith("step_"))
        check(kept == ["step_00000015", "step_00000020"], f"keep_checkpoints 2 kept {kept}")
        r = run(job_for("elastic", 2, 1, 25), resume=f"{tmp}/ckpt/keep", nproc=3, expect_ok=False)
        check(r.returncode == 2 and "train_batch_size 8" in r.stderr and "3 ranks" in r.stderr,
              f"elastic resume on 3 ranks: rc {r.returncode} {r.stderr.strip()}")
        check(not os.path.exists(f"{tmp}/ckpt/elastic/logs"), "workers started for an impossible resume")
        print(f"keep_checkpoints: {kept}; resume of batch 8 on 3 ranks refused")

        # keep_checkpoints among more step directories than one listing buffer held (4096)
        many = f"{tmp}/ckpt/many"
        for s in range(100000, 104200):
            os.makedirs(f"{many}/step_{s:08d}")
            open(f"{many}/step_{s:08d}/meta.json", "w").close()
        run(job_for("many", 2, 1, 20, keep=2, ckdir="ckpt/many"))
        kept = sorted(d for d in os.listdir(many) if d.startswith("step_"))
        check(kept == ["step_00104198", "step_00104199"],
              f"keep_checkpoints 2 among 4202 kept {len(kept)}: {kept[:4]}...")
        print(f"keep_checkpoints 2 among 4202 checkpoints kept {kept}")

        # re-saving a step with fewer ranks: a 4-rank run's step 20 re-saved by 2 ranks
        run(job_for("resave", 4, 3, 20, ckdir="ckpt/resave"))
        run(job_for("resave2", 2, 1, 20, ckdir="ckpt/resave"),
            resume=f"{tmp}/ckpt/resave/step_00000010")
        files = sorted(os.listdir(f"{tmp}/ckpt/resave/step_00000020"))
        check(files == ["meta.json", "rank_00000.zts", "rank_00001.zts"],
              f"step 20 re-saved by 2 ranks holds {files}")
        r = zu.run_zctl(["ckpt", "inspect", "-o", "json", f"{tmp}/ckpt/resave/step_00000020"])
        check(r.returncode == 0 and json.loads(r.stdout)["world"] == 2, f"inspect: {r.stdout} {r.stderr}")
        print(f"step re-saved by fewer ranks holds {files}")

        # 6. failures that every rank must agree on (LD_PRELOAD fault shim)
        def fault_run(name, expect, **faults):
            ck = f"{tmp}/ckpt/{name}"
            faults = {k: v.format(ck=ck) for k, v in faults.items()}
            # the directory already belongs to this (local) job, so that the faults meet the
            # save and not the owner.json written at start-up
            os.makedirs(ck)
            json.dump({"format": "zerotrain-checkpoint-owner", "version": 1, "job_id": None,
                       "job_name": name, "submit_key": "", "created": "2024-01-01T00:00:00Z"},
                      open(f"{ck}/owner.json", "w"))
            rcs, errs, reports = workers(job_for(name, 2, 1, 20), 2, env=zu.fault_env(**faults))
            lines = error_lines(errs, "not saved")
            expect = [e.format(ck=ck) for e in expect]
            check(all(rc != 0 for rc in rcs), f"{name}: exit codes {rcs} although {faults} failed")
            check(all(lines) and len({ls[-1] for ls in lines}) == 1 and
                  all(e in lines[0][-1] for e in expect),
                  f"{name}: ranks did not fail with one message naming {expect}: {lines} "
                  f"{[e[-400:] for e in errs]}")
            reported = [l for t in reports for l in t.splitlines() if " ckpt " in l or "ckpt_commit" in l]
            check(not reported, f"{name}: shards reported for a checkpoint that did not commit: {reported}")
            check(not os.path.exists(f"{ck}/step_00000010/meta.json"),
                  f"{name}: a failed checkpoint left meta.json behind")
            print(f"{name}: no shard reported; every rank failed with: {lines[0][-1] if all(lines) else None}")

        # rank 0 cannot put meta.json in place
        fault_run("meta_fails", ["rank 0: ", "{ck}/step_00000010/meta.json", "Input/output error"],
                  rename="step_00000010/meta.json")
        # CKPT_DIR's entry for the new step directory cannot be made durable
        fault_run("fsync_ckdir", ["cannot fsync the directory {ck}:", "Input/output error"],
                  fsync_dir="{ck}")
        # the shards' entries in the step directory cannot be made durable
        fault_run("fsync_stepdir", ["cannot fsync the directory {ck}/step_00000010", "Input/output error"],
                  fsync_dir="{ck}/step_00000010")
        # the disk is full when rank 0 creates the step directory: every rank says so
        fault_run("mkdir_nospace", ["cannot create the checkpoint directory {ck}/step_00000010",
                                    "No space left on device"], mkdir="/step_00000010")
        # and the same run without faults commits and reports every shard
        rcs, errs, reports = workers(job_for("no_fault", 2, 1, 20), 2)
        reported = sorted(l.split()[0] for t in reports for l in t.splitlines() if " ckpt step=10 " in l)
        check(rcs == [0, 0] and reported == ["rank=0", "rank=1"] and
              any("ckpt_commit step=10" in l for l in reports[0].splitlines()),
              f"no_fault: {rcs} reported {reported} {[e[-300:] for e in errs]}")
        print("no_fault: both shards of step 10 reported and committed")
    zu.finish(failures)


if __name__ == "__main__":
    main()
