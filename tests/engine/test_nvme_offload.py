"""NVMe optimizer offload (offload_optimizer.device "nvme", engine/offload_nvme.c) on one and
two CPU ranks through the real zctl run, with gradient accumulation (4 and 2 micro-batches):
1. Equality: fp32 at stages 1, 2 and 3 and bf16 at stages 2 and 3, with offload ratio 1 and 0.5,
   the host part cut into many small segments (ZT_OFFLOAD_PIECE) and 1, 2 or 4 buffer sets:
   per-step losses and the exported model bit-identical to the same run without offload; the
   swap directories are gone afterwards and nvme_path itself is kept. Where no all-gather of
   the parameters follows the step (one rank, or stage 3) the update's host part finishes in
   the background while the next step's forward waits unit by unit: those step lines carry
   opt_bg_ms; stages 1 and 2 on two ranks update synchronously and do not.
2. Checkpoints keep one format: an NVMe run's checkpoint resumes without NVMe, and a run
   without NVMe resumes with it, each bit-identical to an uninterrupted run; a checkpoint saved
   mid-run while an update finishes in the background (one rank, stage 1) resumes bit-identical.
3. Faults, each a clear error before or during training with the last committed checkpoint
   intact and a restart that finishes: a byte of a swap file flipped on disk mid-run (the
   segment's CRC32C names file, offset and segment), a swap file deleted mid-run, a disk that
   fills (ENOSPC from the thread backend's pwrite, through the LD_PRELOAD shim fault_fs.c), on
   two ranks at stage 3 and, for the flipped byte, on one rank at stage 1; a read or write that
   fails in an update finishing in the background says so (a deleted file is found before the
   update starts). Then a disk too small at start
   (posix_fallocate), a filesystem without direct I/O, an nvme_path that does not exist.
ZT_TEST_QUICK=1 runs fewer equality cases."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

CFG = dict(L=2, NH=2, C=32, T=16, V=120, Vp=128)
QUICK = os.environ.get("ZT_TEST_QUICK") == "1"
# pwrites of exp_avg.swp that succeed before the disk "fills": each rank writes its host
# segments of that file (27 and 34 at ZT_OFFLOAD_PIECE=777) at start-up and again in each step,
# so the 201st falls in step 5 on one rank and 7 on the other
FULL_SKIP = 200


def main():
    failures = []
    check = zu.checker(failures)

    with tempfile.TemporaryDirectory(prefix="zt-nvme-") as tmp:
        rng = np.random.default_rng(4)
        os.makedirs(f"{tmp}/data")
        os.makedirs(f"{tmp}/swap")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 2000))
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=3))

        case = zu.OffloadCase(tmp, CFG)
        run, outcome = case.run, case.outcome

        def job(name, stage, nvme, prec="fp32", ratio=1.0, buffers=2, steps=6, every=0,
                path=None, ranks=2):
            zero = {"stage": stage}
            if nvme:
                zero["offload_optimizer"] = {"device": "nvme", "nvme_path": path or f"{tmp}/swap",
                                             "ratio": ratio, "buffer_count": buffers}
            return case.job(name, zero, prec, steps, every, ranks)

        base = {}

        def reference(stage, prec, steps=6, ranks=2):
            key = (stage, prec, steps, ranks)
            if key not in base:
                j = job(f"ref_s{stage}_{prec}_{steps}_w{ranks}", stage, False, prec, steps=steps,
                        ranks=ranks)
                r = run(j)
                check(r.returncode == 0, f"reference {key}: {r.stderr[-800:]}")
                base[key] = outcome(j, r)
            return base[key]

        # 1. equality
        cases = [(2, "fp32", 1.0, 2, 2), (3, "fp32", 0.5, 4, 2), (3, "bf16", 1.0, 1, 2),
                 (1, "fp32", 1.0, 2, 1), (2, "bf16", 0.5, 4, 1), (3, "fp32", 1.0, 1, 1)]
        if not QUICK:
            cases += [(1, "fp32", 1.0, 4, 2), (2, "fp32", 0.5, 1, 2), (3, "fp32", 1.0, 2, 2),
                      (2, "bf16", 0.5, 2, 2), (1, "bf16", 0.5, 1, 1), (2, "fp32", 1.0, 2, 1)]
        for stage, prec, ratio, buffers, ranks in cases:
            name = f"nv_s{stage}_{prec}_r{ratio}_b{buffers}_w{ranks}"
            j = job(name, stage, True, prec, ratio, buffers, ranks=ranks)
            r = run(j)
            check(r.returncode == 0, f"{name}: zctl run failed:\n{r.stderr[-1500:]}")
            got = outcome(j, r)
            want = reference(stage, prec, ranks=ranks)
            check(got == want, f"{name}: not bit-identical to the run without offload "
                               f"({got and got[0]} vs {want and want[0]})")
            # the first step has no earlier update to finish; every later one does
            bg = [s.get("opt_bg_ms") for s in zu.parse_step_lines(r.stdout)]
            overlapped = ranks == 1 or stage == 3
            check(len(bg) == 6 and (all(x is not None for x in bg[1:]) if overlapped
                                    else all(x is None for x in bg)),
                  f"{name}: opt_bg_ms {bg}, expected it {'after' if overlapped else 'on no'} "
                  f"step 1")
            print(f"{name}: {'bit-identical' if got == want else 'DIFFERENT'}"
                  f"{', update overlapped' if overlapped else ''}", flush=True)
        check(os.path.isdir(f"{tmp}/swap") and os.listdir(f"{tmp}/swap") == [],
              f"swap directories left behind: {os.listdir(tmp + '/swap')}")

        # 2. resumes across NVMe and host memory, at stage 3, 6 steps with a checkpoint at 3
        want = reference(3, "fp32", 6)
        for first, second in ((True, False), (False, True)):
            name = f"resume_{'nvme' if first else 'host'}_then_{'nvme' if second else 'host'}"
            a = job(name + "_a", 3, first, steps=3)
            ra = run(a)
            check(ra.returncode == 0, f"{name}: first half failed:\n{ra.stderr[-800:]}")
            b = job(name, 3, second, steps=6)
            rb = run(b, resume=f"{tmp}/ckpt/{name}_a")
            check(rb.returncode == 0, f"{name}: second half failed:\n{rb.stderr[-800:]}")
            got = outcome(b, rb)
            ok = got is not None and want is not None and got[1] == want[1] and all(
                got[0][s] == want[0][s] for s in got[0])
            check(ok, f"{name}: resumed run differs from the uninterrupted one")
            print(f"{name}: {'bit-identical' if ok else 'DIFFERENT'}", flush=True)

        # a checkpoint saved at step 2 while step 2's update finishes in the background, resumed
        want = reference(1, "fp32", 6, ranks=1)
        mid = job("mid_ckpt", 1, True, steps=6, every=2, ranks=1)
        rm = run(mid)
        check(rm.returncode == 0, f"mid_ckpt: zctl run failed:\n{rm.stderr[-800:]}")
        check(outcome(mid, rm) == want, "mid_ckpt: not bit-identical to the run without offload")
        step2 = [d for d in os.listdir(f"{tmp}/ckpt/mid_ckpt") if d.startswith("step_")
                 and int(d.split("_")[1]) == 2]
        check(len(step2) == 1, f"mid_ckpt: no checkpoint of step 2: {os.listdir(tmp + '/ckpt/mid_ckpt')}")
        if step2:
            b = job("mid_ckpt_resumed", 1, True, steps=6, ranks=1)
            rb = run(b, resume=f"{tmp}/ckpt/mid_ckpt/{step2[0]}")
            check(rb.returncode == 0, f"mid_ckpt: the resume failed:\n{rb.stderr[-800:]}")
            got = outcome(b, rb)
            ok = got is not None and want is not None and got[1] == want[1] and all(
                got[0][s] == want[0][s] for s in got[0]) and min(got[0]) == 3
            check(ok, f"mid_ckpt: resumed from step 2, the run differs from the uninterrupted one")
            print(f"mid_ckpt: saved mid-run, resumed bit-identical: {ok}", flush=True)

        # 3. faults during training (8 steps, a checkpoint every 2): an error naming the cause,
        # the last committed checkpoint intact, and a restart from it that finishes bit-identical
        # to an uninterrupted run
        bg = "finishing in the background"
        faults = [("corrupt", 2, 3, {"ZT_INJECT_SWAP_CORRUPT": "1:6"},
                   ["master.swp at offset", "segment", "CRC32C", "step 6", bg]),
                  ("deleted", 2, 3, {"ZT_INJECT_SWAP_UNLINK": "0:6"},
                   ["was deleted while the job ran", "resumes from the last checkpoint"]),
                  # the thread backend's writes go through the shim's pwrite; the first ones
                  # (start-up, steps 1-3) succeed
                  ("full_disk", 2, 3,
                   dict(zu.fault_env(pwrite="exp_avg.swp", pwrite_skip=str(FULL_SKIP)),
                        ZT_AIO_BACKEND="threads"),
                   ["writing", "exp_avg.swp", "No space left on device", bg]),
                  # one rank, stage 1: the failure comes out of step 5's update when step 6's
                  # forward waits for it
                  ("corrupt_w1", 1, 1, {"ZT_INJECT_SWAP_CORRUPT": "0:5"},
                   ["master.swp at offset", "CRC32C", "step 5", bg])]
        for name, ranks, stage, env, words in faults:
            want = reference(stage, "fp32", 8, ranks=ranks)
            j = job(f"fault_{name}", stage, True, steps=8, every=2, ranks=ranks)
            r = run(j, env=env)
            check(r.returncode != 0, f"{name}: the run did not fail")
            text = r.stdout + r.stderr
            for w in words:
                check(w in text, f"{name}: the error does not say {w!r}:\n{text[-1500:]}")
            check("step=4 " in r.stdout and "step=8 " not in r.stdout,
                  f"{name}: the failure did not come between steps 4 and 8")
            v = zu.run_zctl(["ckpt", "inspect", f"{tmp}/ckpt/fault_{name}"])
            check(v.returncode == 0 and " ok" in v.stdout,
                  f"{name}: no intact committed checkpoint: {v.stdout}{v.stderr}")
            r2 = run(j, resume=f"{tmp}/ckpt/fault_{name}")
            check(r2.returncode == 0, f"{name}: the restart failed:\n{r2.stderr[-800:]}")
            got = outcome(j, r2)
            ok = got is not None and want is not None and got[1] == want[1]
            check(ok, f"{name}: the restart's model differs from an uninterrupted run")
            print(f"{name}: clear error, restart bit-identical: {ok}", flush=True)

        # refused before training: each names the cause and what to do
        starts = [("small_disk", job("st_small", 3, True), zu.fault_env(fallocate="master.swp"),
                   ["no space for swap file", "master.swp", "nvme_path"]),
                  ("no_odirect", job("st_odirect", 3, True), zu.fault_env(odirect=".swp"),
                   ["does not support direct I/O", "local disk"]),
                  ("missing_path", job("st_missing", 3, True, path=f"{tmp}/nope"), {},
                   [f"{tmp}/nope is not a directory", "create it"])]
        for name, j, env, words in starts:
            r = run(j, env=env)
            check(r.returncode != 0, f"{name}: the run did not fail")
            text = r.stdout + r.stderr
            for w in words:
                check(w in text, f"{name}: the error does not say {w!r}:\n{text[-1200:]}")
            check("step=1 " not in r.stdout, f"{name}: training started")
            print(f"{name}: refused before training", flush=True)
        check(not os.path.exists(f"{tmp}/nope"), "a missing nvme_path was created")
    zu.finish(failures)


if __name__ == "__main__":
    main()
