"""tests/bench/ckpt_io: checkpoint write and read throughput next to the disk's own sequential
write speed measured in the same run (dd with fsync), and the training time blocked per
checkpoint (the snapshot to host memory plus any wait for the background write), and what each
rank reads (and checksums) when resuming: all master values below stage 3 plus its own
moments, not every shard.
Model: GPT-2 L6 C512 (about 20M parameters, 12 bytes each in a checkpoint), 2 ranks, a
checkpoint every 2 steps. Usage: ckpt_io.py [--layers L] [--embd C]"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--embd", type=int, default=512)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="zt-bench-ckpt-", dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        mb = 512
        dd = subprocess.run(["dd", "if=/dev/zero", f"of={tmp}/dd.bin", "bs=1M", f"count={mb}",
                             "conv=fsync"], capture_output=True, text=True)
        m = re.search(r"copied, ([0-9.]+) s", dd.stderr)
        dd_gbs = mb * 2**20 / float(m.group(1)) / 1e9 if m else float("nan")
        os.unlink(f"{tmp}/dd.bin")

        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--train-tokens", "100000",
                         "--val-tokens", "0"])
        assert r.returncode == 0, r.stderr
        job = {"name": "io",
               "model": {"n_layer": args.layers, "n_head": 8, "n_embd": args.embd,
                         "block_size": 64, "vocab_size": 256},
               "data": {"train": "data/synth_train_*.bin"},
               "train": {"steps": 6, "checkpoint_every": 2, "checkpoint_dir": "ckpt/io",
                         "keep_checkpoints": 2},
               "resources": {"ranks": 2},
               "deepspeed": {"train_batch_size": 2, "zero_optimization": {"stage": 1}}}
        zu.write_job(f"{tmp}/io.json", job)
        res = zu.run_zctl(["run", f"{tmp}/io.json"], cwd=tmp, env={"OMP_NUM_THREADS": "1"})
        if res.returncode != 0:
            sys.exit(res.stderr)
        log = zu.rank_log(f"{tmp}/ckpt/io", 0)
        saves = re.findall(r"wrote (\d+) bytes in ([0-9.]+) s \(([0-9.]+) GB/s, fsync'd\), training blocked ([0-9.]+) ms", log)
        steps = zu.parse_step_lines(res.stdout)
        step_ms = sum(float(s["step_ms"]) for s in steps[1:]) / max(1, len(steps) - 1)
        step_dir = f"{tmp}/ckpt/io/step_00000006"
        total = sum(os.path.getsize(os.path.join(step_dir, f)) for f in os.listdir(step_dir))
        try:  # cold read where the container allows dropping the page cache
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            cache = "cold (page cache dropped)"
        except OSError:
            cache = "warm (page cache could not be dropped)"
        t0 = time.perf_counter()
        r = zu.run_zctl(["ckpt", "inspect", step_dir])
        read_s = time.perf_counter() - t0
        assert r.returncode == 0, r.stderr
        print(f"ckpt_io: GPT-2 L{args.layers} C{args.embd}, 2 ranks, checkpoint of {total / 1e6:.1f} MB "
              f"({total // 2 / 1e6:.1f} MB per shard)")
        print(f"  disk sequential write (dd bs=1M conv=fsync, {mb} MiB): {dd_gbs:.3f} GB/s")
        # every rank writes its shard at the same time: aggregate = all bytes / slowest rank
        per_rank = [re.findall(r"shard \S+: (\d+) bytes written and fsync'd in ([0-9.]+) s",
                               zu.rank_log(f"{tmp}/ckpt/io", rk)) for rk in range(2)]
        for i, (b, s, gbs, blocked) in enumerate(saves):
            nbytes = sum(int(pr[i][0]) for pr in per_rank)
            slowest = max(float(pr[i][1]) for pr in per_rank)
            agg = nbytes / slowest / 1e9
            print(f"  save {i + 1}: {nbytes / 1e6:.1f} MB (2 shards written at once) durable in {slowest:.3f} s = "
                  f"{agg:.3f} GB/s ({agg / dd_gbs:.2f} x dd); training blocked {float(blocked):.1f} ms "
                  f"(a step takes {step_ms:.0f} ms){' [final save: waits by design]' if i == len(saves) - 1 else ''}")
        print(f"  read + CRC32C verify of all shards (zctl ckpt inspect, {cache}): "
              f"{total / read_s / 1e9:.3f} GB/s ({read_s:.3f} s, includes process start)")
        # resume on the same 2 ranks for one more step: what each rank reads and verifies
        job["name"], job["train"]["steps"], job["train"]["checkpoint_dir"] = "io_resume", 7, "ckpt/io_resume"
        zu.write_job(f"{tmp}/io_resume.json", job)
        res = zu.run_zctl(["run", f"{tmp}/io_resume.json", "--resume", step_dir], cwd=tmp,
                          env={"OMP_NUM_THREADS": "1"})
        if res.returncode != 0:
            sys.exit(res.stderr)
        for rk in range(2):
            m = re.search(r"read ([0-9.]+) MB of \S+ \(every chunk read checksum-verified\) in ([0-9.]+) s",
                          zu.rank_log(f"{tmp}/ckpt/io_resume", rk))
            mb, s = float(m.group(1)), float(m.group(2))
            print(f"  resume, rank {rk}: read and verified {mb:.1f} MB of {total / 1e6:.1f} MB "
                  f"({mb * 1e6 / total:.2f} of the checkpoint) in {s:.3f} s = {mb / 1e3 / max(s, 1e-9):.3f} GB/s")


if __name__ == "__main__":
    main()
