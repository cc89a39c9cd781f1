"""Checkpoint directories that zerotrain does not own, or not alone (the real zworker and zctl,
CPU):
1. keep_checkpoints never follows a symbolic link: a step_* link to a directory that holds
   files with zerotrain's own names (meta.json, rank_00000.zts) and another file, and a step_*
   link to a file, survive pruning with their targets untouched (one warning names them); a
   real old step directory that also holds a foreign file loses only zerotrain's files (and its
   temporary) and is kept; the real old checkpoints are pruned, each reported ckpt_removed. A
   save into a step_* link fails naming it, writing nothing into the target.
2. owner.json: the first run records its job (ZT_JOB_ID, ZT_SUBMIT_KEY, name, ISO-8601 time);
   another job id, and a local run (no id), are refused before anything is written, naming the
   owner; the same job id resumes; ZT_CKPT_TAKEOVER=1 takes the directory over, and so does a
   job whose train.resume_from lies inside it (starting from its newest checkpoint). A
   resume_from outside the job's own directory starts only the first zctl run: the next one
   continues from the job's own newest checkpoint. An owner.json that is not a record is
   refused unless taken over; an empty resume_from is refused.
3. A checkpoint that fails verification on resume (a flipped byte read by one rank, a truncated
   shard, an edited meta.json, a step directory without meta.json) makes every rank exit 5
   after writing exactly one report line `rank=R ckpt_bad step=N dir=/abs/step_N why=...`
   whose why= is the error message; zctl run exits 5 with the message; a missing path exits 2
   with no such line."""
import json
import os
import re
import shutil
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

CFG = dict(L=2, NH=2, C=32, T=16, V=100, Vp=128)
BAD_LINE = re.compile(r"^rank=(\d+) ckpt_bad step=(\d+) dir=(\S+) why=(.*)$")
failures = []
check = zu.checker(failures)


def job_for(name, steps, ckdir=None, every=2, keep=2, ranks=1, resume_from=None):
    j = {"name": name,
         "model": {"arch": "gpt2", "n_layer": CFG["L"], "n_head": CFG["NH"], "n_embd": CFG["C"],
                   "block_size": CFG["T"], "vocab_size": CFG["V"], "init": "init.bin"},
         "data": {"train": "data/t_*.bin"},
         "train": {"steps": steps, "checkpoint_every": every,
                   "checkpoint_dir": ckdir or f"ckpt/{name}", "keep_checkpoints": keep},
         "resources": {"ranks": ranks},
         "deepspeed": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                       "optimizer": {"type": "AdamW", "params": {"lr": 2e-3}},
                       "zero_optimization": {"stage": 1}}}
    if resume_from is not None:
        j["train"]["resume_from"] = resume_from
    return j


def tree(root):
    """Every path under root (links not followed) with its kind and content."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            if os.path.islink(p):
                out[os.path.relpath(p, root)] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[os.path.relpath(p, root)] = ("dir", None)
            else:
                out[os.path.relpath(p, root)] = ("file", open(p, "rb").read())
    return out


def main():
    with tempfile.TemporaryDirectory(prefix="zt-ckpt-safety-") as tmp:
        rng = np.random.default_rng(4)
        os.makedirs(f"{tmp}/data")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 2000))
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=9))

        def zworker(job, env=None, resume=None, nproc=1):
            """Every rank's zworker: exit codes, stderr texts, stdout texts, report lines."""
            codes, errs, outs, texts = zu.run_ranks(tmp, job, nproc, env=env, resume=resume)
            return codes, errs, outs, [t.splitlines() for t in texts]

        def zctl_run(job, resume=None):
            zu.write_job(f"{tmp}/{job['name']}.json", job)
            return zu.run_zctl(["run", f"{tmp}/{job['name']}.json"] +
                               (["--resume", resume] if resume else []),
                               cwd=tmp, env={"OMP_NUM_THREADS": "1"}, timeout=300)

        def steps_of(stdout):
            return [int(s["step"]) for s in zu.parse_step_lines(stdout)]

        # 1. pruning never follows a symbolic link and removes only zerotrain's files
        ck = f"{tmp}/ckpt/prune"
        outside = f"{tmp}/outside"
        os.makedirs(f"{outside}/sub")
        for n, text in (("precious.txt", "keep me"), ("meta.json", "{}"),
                        ("rank_00000.zts", "not a shard"), ("sub/deeper.txt", "deeper")):
            with open(f"{outside}/{n}", "w") as f:
                f.write(text)
        os.makedirs(ck)
        os.symlink(outside, f"{ck}/step_00000001")                  # complete-looking, oldest
        os.symlink(f"{outside}/precious.txt", f"{ck}/step_00000003")
        os.makedirs(f"{ck}/step_00000005")                          # real, complete, old
        for n in ("meta.json", "rank_00000.zts", "rank_00000.zts.tmp.4242", "notes.txt"):
            with open(f"{ck}/step_00000005/{n}", "w") as f:
                f.write(n)
        before = tree(outside)
        rcs, errs, _, reports = zworker(job_for("prune", 10, ckdir="ckpt/prune"))
        check(rcs == [0], f"prune: exit {rcs}: {errs[0][-800:]}")
        left = sorted(os.listdir(ck))
        check(left == ["owner.json", "step_00000001", "step_00000003", "step_00000005",
                       "step_00000008", "step_00000010"], f"prune: {ck} holds {left}")
        check(os.readlink(f"{ck}/step_00000001") == outside and
              os.readlink(f"{ck}/step_00000003") == f"{outside}/precious.txt",
              "prune: the step_* links were changed")
        check(tree(outside) == before, f"prune: the link's target changed: {tree(outside)} vs {before}")
        check(sorted(os.listdir(f"{ck}/step_00000005")) == ["notes.txt"],
              f"prune: step_00000005 holds {sorted(os.listdir(f'{ck}/step_00000005'))}, "
              "not just its foreign notes.txt")
        removed = sorted(int(l.split("step=")[1].split()[0]) for l in reports[0]
                         if " ckpt_removed " in l)
        check(removed == [2, 4, 5, 6], f"prune: ckpt_removed reported for steps {removed}")
        warned = [l for l in errs[0].splitlines() if "left 2 step_* entries alone" in l]
        check(len(warned) == 1 and "symbolic link" in warned[0],
              f"prune: not one warning naming the links: {warned}")
        print(f"prune: kept {left}; the links' targets untouched; removed {removed}")

        # a save into a step_* link fails naming it and writes nothing through it
        ck = f"{tmp}/ckpt/linksave"
        os.makedirs(f"{tmp}/outside2")
        os.makedirs(ck)
        os.symlink(f"{tmp}/outside2", f"{ck}/step_00000002")
        rcs, errs, _, _ = zworker(job_for("linksave", 4, ckdir="ckpt/linksave"))
        check(rcs == [2] and f"checkpoint {ck}/step_00000002 is a symbolic link" in errs[0],
              f"linksave: exit {rcs}: {errs[0][-600:]}")
        check(os.listdir(f"{tmp}/outside2") == [],
              f"linksave: written through the link: {os.listdir(f'{tmp}/outside2')}")
        print("linksave: refused to save into a step_* link")

        # 2. owner.json
        ck = f"{tmp}/ckpt/own"
        own = job_for("own", 4, keep=3)
        rcs, errs, _, _ = zworker(own, env={"ZT_JOB_ID": "12", "ZT_SUBMIT_KEY": "key-12"})
        check(rcs == [0], f"own: exit {rcs}: {errs[0][-600:]}")
        rec = json.load(open(f"{ck}/owner.json"))
        check(set(rec) == {"format", "version", "job_id", "job_name", "submit_key", "created"} and
              rec["format"] == "zerotrain-checkpoint-owner" and rec["version"] == 1 and
              rec["job_id"] == 12 and rec["job_name"] == "own" and rec["submit_key"] == "key-12" and
              re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rec["created"]),
              f"own: owner.json is {rec}")
        check(not [n for n in os.listdir(ck) if ".tmp." in n], f"own: temporaries left in {ck}")
        snap = tree(ck)
        want = (f"checkpoint_dir {ck} belongs to job 12 'own' (created {rec['created']}); give this "
                "job its own train.checkpoint_dir, or set train.resume_from to take it over")
        rcs, errs, outs, _ = zworker(own, env={"ZT_JOB_ID": "13"})
        check(rcs == [2] and want in errs[0] and not outs[0],
              f"other job id: exit {rcs}, no '{want}': {errs[0][-600:]}")
        r = zctl_run(own)
        check(r.returncode == 2 and want in r.stderr, f"zctl run on job 12's dir: {r.returncode} "
              f"{r.stderr[-600:]}")
        # (zctl run itself makes checkpoint_dir/logs before it starts the workers)
        check({k: v for k, v in tree(ck).items() if not k.startswith("logs")} == snap,
              "a refused run changed the directory")
        print(f"refused: {want[:90]}...")

        # the same job (a restart) resumes; ZT_CKPT_TAKEOVER=1 takes over
        rcs, errs, outs, _ = zworker(job_for("own", 6, keep=3), env={"ZT_JOB_ID": "12"},
                                     resume=ck)
        check(rcs == [0] and steps_of(outs[0]) == [5, 6], f"restart of job 12: {rcs} "
              f"{steps_of(outs[0])} {errs[0][-400:]}")
        check(json.load(open(f"{ck}/owner.json")) == rec, "a restart rewrote owner.json")
        rcs, errs, outs, _ = zworker(job_for("own", 8, keep=3), resume=ck,
                                     env={"ZT_JOB_ID": "13", "ZT_CKPT_TAKEOVER": "1"})
        rec13 = json.load(open(f"{ck}/owner.json"))
        check(rcs == [0] and rec13["job_id"] == 13 and rec13["submit_key"] == "" and
              "took over checkpoint_dir" in errs[0], f"takeover: {rcs} {rec13} {errs[0][-400:]}")
        rcs, errs, _, _ = zworker(own, env={"ZT_JOB_ID": "12", "ZT_CKPT_TAKEOVER": "yes"})
        check(rcs == [2] and 'ZT_CKPT_TAKEOVER="yes"' in errs[0], f"takeover yes: {rcs}")
        print("restart of the same job resumes; ZT_CKPT_TAKEOVER=1 takes over")

        # train.resume_from inside the directory: starts from its newest and takes it over
        heir = job_for("heir", 10, ckdir="ckpt/own", keep=3, resume_from="ckpt/own")
        rcs, errs, outs, _ = zworker(heir, env={"ZT_JOB_ID": "14"})
        rec14 = json.load(open(f"{ck}/owner.json"))
        check(rcs == [0] and steps_of(outs[0]) == [9, 10] and rec14["job_id"] == 14 and
              rec14["job_name"] == "heir", f"heir: {rcs} {steps_of(outs[0])} {rec14} "
              f"{errs[0][-400:]}")
        print(f"heir: resumed at step 9 from train.resume_from, owner now {rec14['job_id']}")

        # train.resume_from elsewhere: only the first zctl run starts there
        fork = job_for("fork", 12, ranks=2, resume_from="ckpt/own/step_00000010")
        r = zctl_run(fork)
        check(r.returncode == 0 and steps_of(r.stdout) == [11, 12],
              f"fork: {r.returncode} {steps_of(r.stdout)} {r.stderr[-400:]}")
        fork["train"]["steps"] = 14
        r = zctl_run(fork)
        check(r.returncode == 0 and steps_of(r.stdout) == [13, 14],
              f"fork again: {r.returncode} {steps_of(r.stdout)} {r.stderr[-400:]}")
        recf = json.load(open(f"{tmp}/ckpt/fork/owner.json"))
        check(recf["job_id"] is None and recf["job_name"] == "fork", f"fork: owner.json {recf}")
        check(json.load(open(f"{ck}/owner.json")) == rec14, "fork changed its source's owner")
        rcs, errs, _, _ = zworker(fork, env={"ZT_JOB_ID": "20"})
        check(rcs == [2] and "belongs to a local run (zctl run) of 'fork'" in errs[0],
              f"job 20 on a local run's dir: {rcs} {errs[0][-400:]}")
        print("fork: the first run started from resume_from, the second from its own step 12")

        # an owner.json that is no record; an empty resume_from
        os.makedirs(f"{tmp}/ckpt/junk")
        with open(f"{tmp}/ckpt/junk/owner.json", "w") as f:
            f.write("not json")
        rcs, errs, _, _ = zworker(job_for("junk", 2))
        check(rcs == [2] and f"{tmp}/ckpt/junk/owner.json is not a checkpoint owner record" in errs[0],
              f"junk owner.json: {rcs} {errs[0][-400:]}")
        rcs, errs, _, _ = zworker(job_for("junk", 2), env={"ZT_CKPT_TAKEOVER": "1"})
        check(rcs == [0] and json.load(open(f"{tmp}/ckpt/junk/owner.json"))["job_name"] == "junk",
              f"junk owner.json taken over: {rcs} {errs[0][-400:]}")
        r = zctl_run(job_for("empty", 2, resume_from=""))
        check(r.returncode == 2 and "train.resume_from: is empty" in r.stderr,
              f"empty resume_from: {r.returncode} {r.stderr[-300:]}")
        print("owner.json that is no record refused, taken over with ZT_CKPT_TAKEOVER=1")

        # 3. a checkpoint that fails verification: exit 5 and one ckpt_bad line per rank
        r = zctl_run(job_for("src", 4, ranks=2, keep=3))
        check(r.returncode == 0, f"src: {r.returncode} {r.stderr[-400:]}")

        def damaged(label, mutate, needle, nproc=2, relative=False):
            d = f"bad_{label}"
            shutil.copytree(f"{tmp}/ckpt/src", f"{tmp}/{d}")
            step = f"{d}/step_00000004"
            mutate(f"{tmp}/{step}")
            rcs, errs, _, reports = zworker(job_for(f"victim_{label}", 8, ranks=nproc), nproc=nproc,
                                            resume=step if relative else f"{tmp}/{step}")
            check(rcs == [5] * nproc, f"{label}: exit codes {rcs}: {errs[0][-600:]}")
            for rk in range(nproc):
                bad = [BAD_LINE.match(l) for l in reports[rk] if " ckpt_bad " in l]
                msg = [l.split("[worker] ", 1)[1].split(": ", 1)[1] for l in errs[rk].splitlines()
                       if " ERROR " in l and "[worker]" in l]
                ok = (len(bad) == 1 and bad[0] and bad[0].group(1) == str(rk) and
                      bad[0].group(2) == "4" and bad[0].group(3) == f"{tmp}/{step}" and
                      needle in bad[0].group(4) and msg and bad[0].group(4) == msg[-1])
                check(ok, f"{label}: rank {rk} reported {reports[rk]} (logged {msg[-1:]})")
            print(f"{label}: every rank exited 5 and reported ckpt_bad naming '{needle}'")

        def payload_offset(path):
            with open(path, "rb") as f:
                return struct.unpack_from("<Q", f.read(64), 40)[0]

        def flip_one_reader(step):  # the last exp_avg_sq values of rank 1: only rank 1 reads them
            p = f"{step}/rank_00001.zts"
            with open(p, "r+b") as f:
                f.seek(os.path.getsize(p) - 3)
                b = f.read(1)
                f.seek(os.path.getsize(p) - 3)
                f.write(bytes([b[0] ^ 0x40]))

        def truncate(step):
            p = f"{step}/rank_00000.zts"
            os.truncate(p, os.path.getsize(p) - 100)

        def edit_meta(step):
            m = json.load(open(f"{step}/meta.json"))
            m["applied_steps"] -= 1
            json.dump(m, open(f"{step}/meta.json", "w"), indent=1)

        def no_meta(step):
            os.unlink(f"{step}/meta.json")

        damaged("flip", flip_one_reader, "rank_00001.zts: checksum mismatch")
        damaged("truncate", truncate, "the file is truncated", relative=True)
        damaged("meta", edit_meta, '"applied_steps"', nproc=1)
        damaged("no_meta", no_meta, "is incomplete: it has no meta.json", nproc=1)

        # zctl run passes the exit code and the message on
        r = zctl_run(job_for("victim_zctl", 8, ranks=2), resume=f"{tmp}/bad_flip/step_00000004")
        check(r.returncode == 5 and "rank_00001.zts: checksum mismatch" in r.stderr,
              f"zctl run on a damaged checkpoint: {r.returncode} {r.stderr[-600:]}")
        # a path that is not there is no bad checkpoint
        rcs, errs, _, reports = zworker(job_for("victim_missing", 8),
                                        resume=f"{tmp}/ckpt/src/step_00000099")
        check(rcs == [2] and not [l for l in reports[0] if "ckpt_bad" in l],
              f"missing checkpoint: {rcs} {reports[0]}")
        print("zctl run exits 5; a missing checkpoint exits 2 without ckpt_bad")
    zu.finish(failures)


if __name__ == "__main__":
    main()
