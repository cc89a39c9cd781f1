"""NVMe parameter offload at stage 3 (offload_param.device "nvme", engine/param_nvme.c) on two
CPU ranks through the real zctl run:
1. Equality: fp32 and bf16 with the parameters on NVMe and the optimizer on NVMe, in host memory
   or not offloaded; max_in_cpu 0 (every unit swapped), one that keeps the embeddings in host
   memory, and one that keeps everything; 1 to 5 buffers and a read-ahead bounded by
   stage3_prefetch_bucket_size: per-step losses and the exported model bit-identical to the same
   run without offload; the swap directories are gone afterwards. zctl plan counts the swap
   file's bytes.
2. Checkpoints keep one format: an NVMe run's checkpoint resumes without NVMe and a run without
   NVMe resumes with it, each bit-identical to an uninterrupted run.
3. Faults, each a clear error with the last committed checkpoint intact and a restart that
   finishes bit-identical: a byte of params.swp flipped on disk mid-run (the CRC32C names file,
   offset and segment), the swap file deleted mid-run, a disk that fills (ENOSPC through the
   LD_PRELOAD shim fault_fs.c); refused before training: a disk too small, an nvme_path that
   does not exist, a buffer_size below a unit's shard.
ZT_TEST_QUICK=1 runs fewer equality cases."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

CFG = dict(L=4, NH=2, C=32, T=16, V=120, Vp=128)
QUICK = os.environ.get("ZT_TEST_QUICK") == "1"
RANKS = 2
# pwrites of params.swp that succeed before the disk "fills" (8 KiB aio blocks): each rank
# writes its swapped units (16 writes of 8 KiB) at start-up and again in each step's update,
# so the 91st falls in step 5
FULL_SKIP = 90


def shard_sizes():
    """S_u of each unit on each of RANKS ranks: embeddings, blocks, final layer norm."""
    C, L = CFG["C"], CFG["L"]
    numel = [CFG["Vp"] * C + CFG["T"] * C] + [12 * C * C + 13 * C] * L + [2 * C]
    g = RANKS * 16
    return [(n + g - 1) // g * g // RANKS for n in numel]


def main():
    failures = []
    check = zu.checker(failures)

    with tempfile.TemporaryDirectory(prefix="zt-pnvme-") as tmp:
        rng = np.random.default_rng(5)
        os.makedirs(f"{tmp}/data")
        os.makedirs(f"{tmp}/swap")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 2000))
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=6))

        case = zu.OffloadCase(tmp, CFG)
        run, outcome = case.run, case.outcome

        def job(name, param=None, opt=None, prec="fp32", steps=6, every=0, path=None,
                prefetch=None):
            """param: None or (max_in_cpu, buffer_count[, buffer_size]); opt: None, "cpu" or
            "nvme" (ratio 0.5 when given as ("nvme", 0.5))."""
            zero = {"stage": 3}
            if param is not None:
                zero["offload_param"] = {"device": "nvme", "nvme_path": path or f"{tmp}/swap",
                                         "max_in_cpu": param[0], "buffer_count": param[1]}
                if len(param) > 2:
                    zero["offload_param"]["buffer_size"] = param[2]
            if opt is not None:
                dev, ratio = opt if isinstance(opt, tuple) else (opt, 1.0)
                zero["offload_optimizer"] = {"device": dev, "ratio": ratio}
                if dev == "nvme":
                    zero["offload_optimizer"]["nvme_path"] = f"{tmp}/swap"
            if prefetch is not None:
                zero["stage3_prefetch_bucket_size"] = prefetch
            return case.job(name, zero, prec, steps, every, RANKS)

        base = {}

        def reference(prec, steps=6):
            key = (prec, steps)
            if key not in base:
                j = job(f"ref_{prec}_{steps}", prec=prec, steps=steps)
                r = run(j)
                check(r.returncode == 0, f"reference {key}: {r.stderr[-800:]}")
                base[key] = outcome(j, r)
            return base[key]

        S = shard_sizes()
        # 1. equality: (name, param, opt, prec, prefetch)
        cases = [("all_swapped_opt_nvme", (0, 2), "nvme", "fp32", None),
                 ("emb_resident_opt_nvme_half", (S[0], 3), ("nvme", 0.5), "fp32", None),
                 ("all_swapped_opt_none_1buf", (0, 1), None, "fp32", None),
                 ("all_swapped_opt_nvme_bf16", (0, 3), "nvme", "bf16", None)]
        if not QUICK:
            cases += [("all_swapped_opt_cpu_prefetch1", (0, 4), "cpu", "fp32", S[1]),
                      ("all_resident_opt_nvme", (10 ** 9, 5), "nvme", "fp32", None),
                      ("all_swapped_opt_none_bf16", (0, 2), None, "bf16", None)]
        for name, param, opt, prec, prefetch in cases:
            j = job(name, param, opt, prec, prefetch=prefetch)
            r = run(j)
            check(r.returncode == 0, f"{name}: zctl run failed:\n{r.stderr[-1500:]}")
            if param[0] == 0:
                check("parameters of units 0-" in r.stdout + r.stderr,
                      f"{name}: no parameter swap was opened:\n{r.stderr[-1500:]}")
            got = outcome(j, r)
            want = reference(prec)
            check(got == want, f"{name}: not bit-identical to the run without offload "
                               f"({got and got[0]} vs {want and want[0]})")
            print(f"{name}: {'bit-identical' if got == want else 'DIFFERENT'}", flush=True)
        check(os.path.isdir(f"{tmp}/swap") and os.listdir(f"{tmp}/swap") == [],
              f"swap directories left behind: {os.listdir(tmp + '/swap')}")

        # zctl plan: the disk holds every swapped unit's shard, each segment 4 KiB-aligned
        j = job("plan_disk", (S[0], 2), None)
        zu.write_job(f"{tmp}/plan_disk.json", j)
        p = zu.run_zctl(["plan", f"{tmp}/plan_disk.json", "-o", "json"], cwd=tmp)
        rows = [x for x in json.loads(p.stdout)["rows"] if x["job"]] if p.returncode == 0 else []
        want_disk = sum((s * 4 + 4095) // 4096 * 4096 for s in S[1:])
        check(rows and rows[0]["disk_bytes"] == want_disk,
              f"zctl plan: disk_bytes {rows and rows[0]['disk_bytes']}, want {want_disk}")
        print(f"plan: disk_bytes {want_disk}", flush=True)

        # 2. resumes across NVMe and host memory, 6 steps with a checkpoint at 3
        want = reference("fp32", 6)
        for first, second in ((True, False), (False, True)):
            name = f"resume_{'nvme' if first else 'host'}_then_{'nvme' if second else 'host'}"
            a = job(name + "_a", (0, 2) if first else None, "nvme" if first else None, steps=3)
            ra = run(a)
            check(ra.returncode == 0, f"{name}: first half failed:\n{ra.stderr[-800:]}")
            b = job(name, (0, 2) if second else None, "nvme" if second else None, steps=6)
            rb = run(b, resume=f"{tmp}/ckpt/{name}_a")
            check(rb.returncode == 0, f"{name}: second half failed:\n{rb.stderr[-800:]}")
            got = outcome(b, rb)
            ok = got is not None and want is not None and got[1] == want[1] and all(
                got[0][s] == want[0][s] for s in got[0])
            check(ok, f"{name}: resumed run differs from the uninterrupted one")
            print(f"{name}: {'bit-identical' if ok else 'DIFFERENT'}", flush=True)

        # 3. faults during training (8 steps, a checkpoint every 2), parameters and optimizer
        # on NVMe: an error naming the cause, the last committed checkpoint intact, and a
        # restart from it that finishes bit-identical to an uninterrupted run
        want = reference("fp32", 8)
        faults = [("corrupt", {"ZT_INJECT_SWAP_CORRUPT": "1:6"},
                   ["params.swp at offset", "segment", "CRC32C"]),
                  ("deleted", {"ZT_INJECT_SWAP_UNLINK": "0:6"},
                   ["params.swp was deleted while the job ran",
                    "resumes from the last checkpoint"]),
                  ("full_disk", dict(zu.fault_env(pwrite="params.swp",
                                                  pwrite_skip=str(FULL_SKIP)),
                                     ZT_AIO_BACKEND="threads"),
                   ["writing", "params.swp", "No space left on device"])]
        for name, env, words in faults:
            j = job(f"fault_{name}", (0, 2), "nvme", steps=8, every=2)
            r = run(j, env=env)
            check(r.returncode != 0, f"{name}: the run did not fail")
            text = r.stdout + r.stderr
            for w in words:
                check(w in text, f"{name}: the error does not say {w!r}:\n{text[-1500:]}")
            check("step=4 " in r.stdout and "step=8 " not in r.stdout,
                  f"{name}: the failure did not come between steps 4 and 8:\n{r.stdout[-800:]}")
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
        starts = [("small_disk", job("st_small", (0, 2)), zu.fault_env(fallocate="params.swp"),
                   ["no space for swap file", "params.swp", "offload_param.nvme_path"]),
                  ("missing_path", job("st_missing", (0, 2), path=f"{tmp}/nope"), {},
                   [f"offload_param.nvme_path {tmp}/nope is not a directory", "create it"]),
                  ("small_buffer", job("st_buffer", (0, 2, 1000)), {},
                   ["offload_param.buffer_size 1000 is smaller than",
                    f"raise it to at least {max(S)}"])]
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
