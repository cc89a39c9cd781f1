"""`zctl plan`'s NVMe I/O per step, the disk's speed and the largest model per configuration
(cli/cmd_plan.c, cli/plan_limits.c):
1. I/O per step: each NVMe row reads and writes 3 arrays x 4 bytes x the rank's host elements
   (the GPT-2 parameter count over the ranks at ratio 1, and the CPU offload row's host arrays,
   which engine_plan checks against real runs, at ratio 0.5), and the swap file a real rank
   creates is that less its segments' padding; rows without NVMe move nothing.
2. --disk-speed READ,WRITE: read back as given, the I/O seconds are read/READ + write/WRITE;
   malformed speeds are refused with a message naming the option and the form.
3. --nvme-path DIR measures the disk with the engine's swap files: positive speeds, DIR kept
   and left empty; a missing directory or one without direct I/O is refused pointing at
   --disk-speed; a job's own nvme_path that does not exist only leaves the seconds out.
4. The largest model of each row, for CPU and cuda jobs, with device memory, host memory and
   disk given: the job rebuilt with that n_layer fits by the plan itself (its row's `fits`
   and its figures), one layer more does not; it grows with the memory given.
5. Bad sizes are refused naming the option.
No speed is asserted beyond being positive (timings belong in tests/bench/)."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

L, NH, C, T, V = 4, 4, 256, 64, 256


def psi(n_layer):
    """GPT-2's parameter count (vocabulary 256 needs no padding)"""
    return V * C + T * C + n_layer * (12 * C * C + 13 * C) + 2 * C


def job(tmp, name, stage=2, offload=None, ratio=1.0, n_layer=L, device="cpu", ranks=2,
        nvme_path=None):
    zero = {"stage": stage}
    if offload:
        zero["offload_optimizer"] = {"device": offload, "ratio": ratio}
        if offload == "nvme":
            zero["offload_optimizer"]["nvme_path"] = nvme_path or f"{tmp}/swap"
    j = {"name": name,
         "model": {"n_layer": n_layer, "n_head": NH, "n_embd": C, "block_size": T,
                   "vocab_size": V, "init": "random"},
         "data": {"train": "data/t_*.bin"}, "train": {"steps": 1},
         "resources": {"ranks": ranks, "device": device},
         "deepspeed": {"train_batch_size": 4 * ranks, "train_micro_batch_size_per_gpu": 4,
                       "zero_optimization": zero}}
    path = f"{tmp}/{name}.json"
    zu.write_job(path, j)
    return path


def plan_json(args, check, env=None):
    p = zu.run_zctl(["plan"] + args + ["-o", "json"], env=env)
    check(p.returncode in (0, 1), f"plan {args}: rc {p.returncode}\n{p.stderr}")
    try:
        return json.loads(p.stdout), p
    except ValueError:
        check(False, f"plan {args}: not JSON:\n{p.stdout}\n{p.stderr}")
        return None, p


def row_of(doc, stage, offload):
    rows = [r for r in doc["rows"] if r["stage"] == stage and r["offload"] == offload]
    assert len(rows) == 1, (stage, offload, doc["rows"])
    return rows[0]


def check_io(tmp, check):
    j = job(tmp, "io", stage=2, offload="nvme", ratio=0.5)  # rows at the job's ratio
    doc, _ = plan_json([j, "--disk-speed", "2.5GB/s,1.8GB/s"], check)
    # a job without NVMe: --disk-speed adds NVMe rows at ratio 1
    doc1, _ = plan_json([job(tmp, "io1", stage=1), "--disk-speed", "2.5GB/s,1.8GB/s"], check)
    if not doc or not doc1:
        return
    check(doc["disk_speed"] == {"read_bps": 2.5e9, "write_bps": 1.8e9, "source": "given"},
          f"--disk-speed read back as {doc['disk_speed']}")
    for stage in range(4):
        full = row_of(doc1, stage, "nvme 1.00")
        shard = psi(L) if stage == 0 else psi(L) // 2  # the host part: the rank's whole shard
        want = 3 * 4 * shard
        print(f"stage {stage} nvme 1.00: read {full['io_read_bytes']} B, write "
              f"{full['io_write_bytes']} B; 3 x 4 x {shard} elements = {want} B")
        check(full["io_read_bytes"] == want and full["io_write_bytes"] == want,
              f"stage {stage}: I/O {full['io_read_bytes']}/{full['io_write_bytes']}, want {want}")
        half = row_of(doc, stage, "nvme 0.50")
        cpu = zu.run_zctl(["plan", job(tmp, f"io_cpu{stage}", stage=stage, offload="cpu",
                                       ratio=0.5), "-o", "json"])
        crow = [r for r in json.loads(cpu.stdout)["rows"] if r["job"]][0]
        host_arrays = crow["bytes"]["host_optim"]  # master, m, v, each rounded to 256 B
        check(host_arrays - 3 * 256 < half["io_read_bytes"] <= host_arrays and
              half["io_write_bytes"] == half["io_read_bytes"],
              f"stage {stage} nvme 0.50: I/O {half['io_read_bytes']} B, the CPU offload's host "
              f"arrays {host_arrays} B")
        secs = half["io_read_bytes"] / 2.5e9 + half["io_write_bytes"] / 1.8e9
        check(abs(half["io_seconds"] - secs) <= 1e-5 * secs,
              f"stage {stage}: io_seconds {half['io_seconds']}, want {secs}")
        none = row_of(doc, stage, "none")
        check(none["io_read_bytes"] == 0 and none["io_write_bytes"] == 0,
              f"stage {stage}: a row without NVMe moves {none['io_read_bytes']} B")
    text = zu.run_zctl(["plan", j, "--disk-speed", "900MiB/s,700MiB/s"])
    check(text.returncode == 0 and "disk speed: read 0.94 GB/s, write 0.73 GB/s (given" in text.stdout
          and "NVMe per step: read " in text.stdout and "s at the disk's speed" in text.stdout,
          f"text form with --disk-speed:\n{text.stdout}{text.stderr}")
    for bad in ("fast", "2.5GB/s", "0,1GB/s", "1GB/s,", ",1GB/s", "1GB/s,2GB/s,3GB/s",
                "1GB/s,-2GB/s", "1XB/s,1GB/s"):
        p = zu.run_zctl(["plan", j, "--disk-speed", bad])
        check(p.returncode == 2 and "--disk-speed" in p.stderr and "READ,WRITE" in p.stderr,
              f"--disk-speed {bad!r}: rc {p.returncode} {p.stderr}")
    print("--disk-speed: read back, I/O seconds = read/READ + write/WRITE, 8 bad forms refused")


def check_swap_files(tmp, check):
    """The plan's I/O per step against the swap files a real rank creates: one rank at stage 1,
    everything on NVMe, so each file holds every tensor, each at a 4 KiB-aligned offset. The
    run is stopped where the rank reserves master.swp (the fault shim's ENOSPC), and its error
    gives the file's size."""
    os.makedirs(f"{tmp}/data", exist_ok=True)
    os.makedirs(f"{tmp}/swap", exist_ok=True)
    zu.write_shard(f"{tmp}/data/t_000.bin", np.random.default_rng(1).integers(0, V, 4000))
    j = job(tmp, "swapsize", stage=1, offload="nvme", ranks=1)
    doc, _ = plan_json([j, "--disk-speed", "1GB/s,1GB/s"], check)
    own = [r for r in doc["rows"] if r["job"]][0] if doc else None
    sizes = [V * C, T * C] + [n for _ in range(L) for n in
                              (C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C,
                               4 * C * C, C)] + [C, C]
    file_bytes = sum((n * 4 + 4095) // 4096 * 4096 for n in sizes)
    r = zu.run_zctl(["run", j], cwd=tmp, env=dict(zu.fault_env(fallocate="master.swp"),
                                                  OMP_NUM_THREADS="1"))
    text = r.stdout + r.stderr
    want = f"master.swp ({zu.fmt_bytes(file_bytes)})"
    check(r.returncode != 0 and want in text,
          f"the rank's swap file: want {want!r} in:\n{text[-1500:]}")
    if own:
        per_array = own["io_read_bytes"] / 3
        print(f"swap file of a real rank: {file_bytes} B ({want}); the plan reads and writes "
              f"{per_array:.0f} B of each array per step (the file less its {len(sizes)} "
              f"segments' padding)")
        check(file_bytes - 4096 * len(sizes) < per_array <= file_bytes and
              own["io_write_bytes"] == own["io_read_bytes"] == own["disk_bytes"],
              f"plan I/O {own['io_read_bytes']} B vs 3 swap files of {file_bytes} B")


def check_measured(tmp, check):
    os.makedirs(f"{tmp}/disk")
    j = job(tmp, "meas", stage=3)  # no NVMe of its own: --nvme-path adds the rows
    doc, p = plan_json([j, "--nvme-path", f"{tmp}/disk"], check)
    if doc:
        sp = doc["disk_speed"]
        check(sp and sp["source"] == "measured" and sp["read_bps"] > 0 and sp["write_bps"] > 0,
              f"measured speeds: {sp}")
        rows = [r for r in doc["rows"] if r["offload"] == "nvme 1.00"]
        check(len(rows) == 4 and all(r["io_seconds"] > 0 for r in rows),
              f"NVMe rows with --nvme-path: {rows}")
        check(doc["limits"]["disk_bytes"] > 0, "the free space of --nvme-path is no limit")
        print(f"measured in a temporary directory: {sp['read_bps'] > 0 and sp['write_bps'] > 0} "
              "(positive read and write speed)")
    check(os.path.isdir(f"{tmp}/disk") and os.listdir(f"{tmp}/disk") == [],
          f"--nvme-path left {os.listdir(f'{tmp}/disk')}")
    p = zu.run_zctl(["plan", j, "--nvme-path", f"{tmp}/nope"])
    check(p.returncode == 2 and f"{tmp}/nope is not a directory" in p.stderr and
          "--disk-speed" in p.stderr, f"missing --nvme-path: rc {p.returncode} {p.stderr}")
    check(not os.path.exists(f"{tmp}/nope"), "a missing --nvme-path was created")
    p = zu.run_zctl(["plan", j, "--nvme-path", f"{tmp}/disk"], env=zu.fault_env(odirect=".swp"))
    check(p.returncode == 2 and "does not support direct I/O" in p.stderr and
          "--disk-speed" in p.stderr, f"--nvme-path without O_DIRECT: rc {p.returncode} {p.stderr}")
    check(os.listdir(f"{tmp}/disk") == [], f"a refused probe left {os.listdir(f'{tmp}/disk')}")
    p = zu.run_zctl(["plan", j, "--nvme-path", f"{tmp}/disk", "--disk-speed", "1GB/s,1GB/s"])
    check(p.returncode == 2 and "use one of them" in p.stderr,
          f"--nvme-path with --disk-speed: rc {p.returncode} {p.stderr}")
    # the job's own nvme_path on another machine: the plan goes on without the seconds
    own = job(tmp, "own", stage=3, offload="nvme", nvme_path=f"{tmp}/elsewhere")
    p = zu.run_zctl(["plan", own])
    check(p.returncode == 0 and "I/O seconds not shown" in p.stdout and
          "NVMe per step: read " in p.stdout,
          f"a job whose nvme_path is missing: rc {p.returncode}\n{p.stdout}{p.stderr}")
    print("--nvme-path: a missing directory and one without direct I/O refused, nothing left")


def check_largest(tmp, check):
    """Every row's largest model fits by the plan's own verdict and one layer more does not."""
    cases = [("cpu", ["--host-memory", "600MiB", "--disk", "60MiB"], None),
             ("cuda", ["--device-memory", "200MiB", "--host-memory", "400MiB", "--disk", "40MiB"],
              None)]
    for device, limits, _ in cases:
        j = job(tmp, f"big_{device}", stage=1, device=device)
        doc, _ = plan_json([j, "--disk-speed", "1GB/s,1GB/s"] + limits, check)
        if not doc:
            continue
        lim, local = doc["limits"], doc["local_ranks"]
        bounds = set()
        for r in doc["rows"]:
            big = r["largest"]
            n = big["n_layer"]
            check(n > 0 and big["bound"], f"{device} {r['stage']} {r['offload']}: largest {big}")
            if n <= 0:
                continue
            bounds.add(big["bound"])
            check(big["params"] == psi(n), f"largest {n} layers: {big['params']} params, "
                  f"want {psi(n)}")
            kind, _, ratio = r["offload"].partition(" ")
            verdicts = []
            for layers in (n, n + 1):
                jj = job(tmp, f"big_{device}_{layers}", stage=r["stage"],
                         offload=None if kind == "none" else kind,
                         ratio=float(ratio) if ratio else 1.0, n_layer=layers, device=device)
                d2, _ = plan_json([jj, "--disk-speed", "1GB/s,1GB/s"] + limits, check)
                own = [x for x in d2["rows"] if x["job"]][0] if d2 else None
                if not own:
                    verdicts.append(None)
                    continue
                host = (own["total_bytes"] if device == "cpu" else
                        own["host_bytes"] + max(0, own["init_bytes"] - own["bytes"]["ckpt"]))
                by_figures = ((lim["device_bytes"] == 0 or own["device_bytes"] <= lim["device_bytes"])
                              and host <= lim["host_bytes"] and own["disk_bytes"] <= lim["disk_bytes"])
                check(own["fits"] == by_figures,
                      f"{device} {jj}: fits {own['fits']} but the figures say {by_figures}")
                verdicts.append(own["fits"])
            check(verdicts == [True, False],
                  f"{device} stage {r['stage']} {r['offload']}: largest {n} layers, the plan of "
                  f"{n} and {n + 1} layers fits: {verdicts}")
        print(f"{device}: every row's largest model fits and one layer more does not "
              f"(bounds seen: {sorted(bounds)}; {local} ranks on a node)")
        check(len(bounds) >= 2, f"{device}: only {bounds} bound the largest models")
    # more memory, never a smaller model
    j = job(tmp, "mono", stage=2, offload="nvme", ratio=0.5)
    prev = None
    for host in ("256MiB", "512MiB", "1GiB", "4GiB"):
        doc, _ = plan_json([j, "--disk-speed", "1GB/s,1GB/s", "--host-memory", host,
                            "--disk", "100GiB"], check)
        got = [r["largest"]["n_layer"] for r in doc["rows"]] if doc else None
        if prev and got:
            check(all(a <= b for a, b in zip(prev, got)),
                  f"host memory {host}: largest {got} after {prev}")
        prev = got or prev
        print(f"host memory {host}: largest n_layer per row {got}")
    check(prev and prev[0] > 24, f"4 GiB of host memory: largest {prev}")


def check_bad_sizes(tmp, check):
    j = job(tmp, "bad", stage=1)
    for opt, v in (("--host-memory", "lots"), ("--host-memory", "0"), ("--disk", "-5GB"),
                   ("--disk", "12QB"), ("--device-memory", "")):
        p = zu.run_zctl(["plan", j, opt, v])
        check(p.returncode == 2 and opt in p.stderr and "80GiB" in p.stderr,
              f"{opt} {v!r}: rc {p.returncode} {p.stderr}")
    p = zu.run_zctl(["plan", j, "--disk"])
    check(p.returncode == 2 and "--disk" in p.stderr, f"--disk without a value: {p.stderr}")
    print("bad sizes refused naming the option")


def main():
    failures = []
    check = zu.checker(failures)
    with tempfile.TemporaryDirectory(prefix="zt-planio-") as tmp:
        check_io(tmp, check)
        check_swap_files(tmp, check)
        check_measured(tmp, check)
        check_largest(tmp, check)
        check_bad_sizes(tmp, check)
    zu.finish(failures)


if __name__ == "__main__":
    main()
