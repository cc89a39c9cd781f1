"""tests/bench/nvme_offload: training with the optimizer on NVMe (offload_optimizer.device "nvme")
next to the same job with the optimizer in host memory (device "cpu"), in the same run on the same
machine: one CPU rank at stage 1, GPT-2 L8 C512 T256 (25.5M parameters), the whole shard offloaded.
Each side first runs under a limit halfway between the two sides' `zctl plan` totals: a memory
cgroup (v1 or v2) where this process may create one, else the engine's host-memory budget
(ZT_HOST_MEMORY_LIMIT, which stops a rank whose plan exceeds it before step 1). The optimizer
states do not fit it in host memory (that run is killed or fails) and do with NVMe. Then both run
without a limit, interleaved, best of two: tokens/s, step and optimizer time, the host memory zctl
plan gives each, the swap's read and write throughput during the optimizer update (12 bytes read
and 12 written per offloaded element), and fio's O_DIRECT sequential read and write on the same
directory. With NVMe the update's host part finishes in the background, overlapping the next step's
forward (its step lines' opt_bg_ms: from the update's start to its last write-back), and the bench
checks the target: the NVMe step takes at most 1.1 x the larger of the host-memory step and that
update.
Usage: nvme_offload.py [--dir DIR] [--steps N] [--no-cgroup] [--limit-only] (--no-cgroup takes
the engine's budget even where a cgroup can be made; --limit-only stops after the limited runs)"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402
from nvme_swap import fio  # noqa: E402  (tests/bench, this script's directory)

CFG = dict(L=8, NH=8, C=512, T=256, V=256, Vp=256)


def job(tmp, name, device, steps):
    off = {"device": device, "ratio": 1.0}
    if device == "nvme":
        off.update(nvme_path=f"{tmp}/swap", buffer_count=4)
    return {"name": name,
            "model": {"arch": "gpt2", "n_layer": CFG["L"], "n_head": CFG["NH"], "n_embd": CFG["C"],
                      "block_size": CFG["T"], "vocab_size": CFG["V"], "init": f"{tmp}/init.bin"},
            "data": {"train": f"{tmp}/data/t_*.bin"},
            "train": {"steps": steps, "checkpoint_dir": f"{tmp}/ckpt/{name}"},
            "resources": {"ranks": 1},
            "deepspeed": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8,
                          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                          "zero_optimization": {"stage": 1, "offload_optimizer": off}}}


def make_cgroup(limit):
    """A memory cgroup capped at limit bytes (swap included where the kernel counts it), or None
    where this process cannot make one."""
    name = f"zt-nvme-bench-{os.getpid()}"
    for base, files in (("/sys/fs/cgroup", ("memory.max", "memory.swap.max")),
                        ("/sys/fs/cgroup/memory", ("memory.limit_in_bytes",
                                                   "memory.memsw.limit_in_bytes"))):
        if not os.path.exists(os.path.join(base, files[0])) and not os.path.exists(
                os.path.join(base, "cgroup.procs")):
            continue
        path = os.path.join(base, name)
        try:
            os.mkdir(path)
            with open(os.path.join(path, files[0]), "w") as f:
                f.write(str(limit))
            if os.path.exists(os.path.join(path, files[1])):
                with open(os.path.join(path, files[1]), "w") as f:
                    f.write(str(limit) if "memsw" in files[1] else "0")
            return path
        except OSError:
            try:
                os.rmdir(path)
            except OSError:
                pass
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure (default: "
                    "a temporary directory under $TMPDIR or /var/tmp)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--no-cgroup", action="store_true",
                    help="limit both sides with the engine's budget, not a cgroup")
    ap.add_argument("--limit-only", action="store_true",
                    help="stop after the runs under the limit")
    args = ap.parse_args()
    os.environ["ZT_BIN"] = os.path.abspath(os.environ.get("ZT_BIN", "build/bin"))
    if not shutil.which("fio"):
        sys.exit("fio is missing: scripts/install-deps.sh installs it")
    base = args.dir or os.environ.get("TMPDIR", "/var/tmp")
    tmp = tempfile.mkdtemp(prefix="zt-nvme-train-", dir=base)
    try:
        import numpy as np
        rng = np.random.default_rng(1)
        os.makedirs(f"{tmp}/data")
        os.makedirs(f"{tmp}/swap")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 200000))
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=1))
        plans = {}
        for device in ("cpu", "nvme"):
            j = job(tmp, f"plan_{device}", device, args.steps)
            zu.write_job(f"{tmp}/{j['name']}.json", j)
            p = zu.run_zctl(["plan", f"{tmp}/{j['name']}.json", "-o", "json"], cwd=tmp)
            plans[device] = [x for x in json.loads(p.stdout)["rows"] if x["job"]][0]["total_bytes"]
        limit = (plans["cpu"] + plans["nvme"]) // 2
        fits, why = {}, {}
        cg = None if args.no_cgroup else make_cgroup(limit)
        limited_by = "a memory cgroup" if cg else "the engine's budget ZT_HOST_MEMORY_LIMIT"
        for device in ("cpu", "nvme"):
            j = job(tmp, f"limited_{device}", device, 3)
            zu.write_job(f"{tmp}/{j['name']}.json", j)
            env = dict(os.environ, OMP_NUM_THREADS="1")
            if not cg:
                env["ZT_HOST_MEMORY_LIMIT"] = str(limit)
            r = subprocess.run([zu.zt_bin("zctl"), "run", f"{tmp}/{j['name']}.json"], cwd=tmp,
                               env=env, capture_output=True, text=True, timeout=1200,
                               preexec_fn=(lambda: open(os.path.join(cg, "cgroup.procs"),
                                                        "w").write(str(os.getpid())))
                               if cg else None)
            fits[device] = r.returncode
            lines = [x for x in r.stderr.splitlines() if "ZT_HOST_MEMORY_LIMIT" in x]
            why[device] = lines[-1].strip() if lines else ""
        if cg:
            os.rmdir(cg)
        rows = {}
        # interleaved, best of two each
        for device in () if args.limit_only else ("cpu", "nvme", "cpu", "nvme"):
            j = job(tmp, f"{device}_{len(rows)}", device, args.steps)
            zu.write_job(f"{tmp}/{j['name']}.json", j)
            r = zu.run_zctl(["run", f"{tmp}/{j['name']}.json"], cwd=tmp,
                            env={"OMP_NUM_THREADS": "1"})
            if r.returncode != 0:
                sys.exit(f"{device}: zctl run failed:\n{r.stderr[-2000:]}")
            steps = zu.parse_step_lines(r.stdout)[3:]  # past the warm-up
            step_ms = min(float(s["step_ms"]) for s in steps)
            opt_ms = min(float(s["opt_ms"]) for s in steps)
            bg = [float(s["opt_bg_ms"]) for s in steps if "opt_bg_ms" in s]
            tok = max(float(s["tok_s"]) for s in steps)
            p = zu.run_zctl(["plan", f"{tmp}/{j['name']}.json", "-o", "json"], cwd=tmp)
            plan = [x for x in json.loads(p.stdout)["rows"] if x["job"]][0]
            old = rows.get(device)
            if not old or step_ms < old["step_ms"]:
                rows[device] = dict(step_ms=step_ms, opt_ms=opt_ms, tok=tok,
                                    bg_ms=min(bg) if bg else None,
                                    host=plan["host_bytes"], disk=plan["disk_bytes"])
        if not args.limit_only:
            elems = rows["nvme"]["disk"] / 12
            fio_w = fio(f"{tmp}/swap", "write", 512, 1024, 8)
            fio_r = fio(f"{tmp}/swap", "read", 512, 1024, 8)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    shard = "" if args.limit_only else f" ({elems / 1e6:.1f}M elements)"
    print(f"GPT-2 L{CFG['L']} C{CFG['C']} T{CFG['T']}, batch 8, 1 CPU rank, stage 1, the whole "
          f"optimizer shard offloaded{shard}, directory {base}")
    print(f"limit: {limited_by}"
          f"{'' if cg or args.no_cgroup else ' (no memory cgroup can be made here)'}, "
          f"{limit / 2**20:.0f} MiB (halfway between the plans' {plans['cpu'] / 2**20:.0f} and "
          f"{plans['nvme'] / 2**20:.0f} MiB): optimizer in host memory "
          f"{'trained' if fits['cpu'] == 0 else 'did not fit (exit %d)' % fits['cpu']}, "
          f"on NVMe {'trained' if fits['nvme'] == 0 else 'did not fit (exit %d)' % fits['nvme']}")
    for device in ("cpu", "nvme"):
        if why[device]:
            print(f"  {device}: {why[device]}")
    if args.limit_only:
        return
    print(f"{'':22s}{'tokens/s':>10s}{'step ms':>9s}{'opt ms':>8s}{'bg ms':>8s}{'host MiB':>10s}"
          f"{'disk MiB':>10s}")
    for d in ("cpu", "nvme"):
        x = rows[d]
        bg = f"{x['bg_ms']:8.1f}" if x["bg_ms"] is not None else f"{'-':>8s}"
        print(f"{'offload to ' + d:22s}{x['tok']:10.0f}{x['step_ms']:9.1f}{x['opt_ms']:8.1f}{bg}"
              f"{x['host'] / 2**20:10.1f}{x['disk'] / 2**20:10.1f}")
    moved = 12 * elems  # bytes read, and again written, per step
    nv = rows["nvme"]
    # the whole update: in the background where it overlaps, else the step's own optimizer time
    upd_ms = nv["bg_ms"] if nv["bg_ms"] is not None else nv["opt_ms"]
    opt_s = upd_ms / 1e3
    print(f"NVMe optimizer update: {moved / 1e9:.3f} GB read and {moved / 1e9:.3f} GB written in "
          f"{opt_s * 1e3:.1f} ms ({2 * moved / opt_s / 1e9:.2f} GB/s both ways together); "
          f"fio on the same directory: write {fio_w:.2f} GB/s, read {fio_r:.2f} GB/s")
    bound = 1.1 * max(rows["cpu"]["step_ms"], upd_ms)
    met = nv["step_ms"] <= bound
    print(f"target, the optimizer's I/O overlaps compute: NVMe step {nv['step_ms']:.1f} ms <= 1.1 x "
          f"max(host-memory step {rows['cpu']['step_ms']:.1f} ms, NVMe update {upd_ms:.1f} ms) = "
          f"{bound:.1f} ms: {'met' if met else 'NOT met'}"
          f"{'' if nv['bg_ms'] is not None else ' (the update did not run in the background)'}")


if __name__ == "__main__":
    main()
