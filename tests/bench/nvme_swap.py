"""tests/bench/nvme_swap: the swap files of NVMe offload (engine/nvme/swap.c through
engine/nvme/aio.c) next to fio on the same directory in the same run: fio's O_DIRECT sequential
write and read (libaio-free: io_uring engine, the same block size and queue depth), then
bench_nvme_swap writing, reading and streaming three arrays the way an offloaded optimizer step
does (read ahead, update, write back). Prints both and the swap's share of fio's throughput.
Usage: nvme_swap.py [--dir DIR] [--mib MIB] [--seg-mib N] [--buffers N]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

BIN = os.environ.get("ZT_BIN", "build/bin")


def fio(directory, rw, size_mib, block_kib, depth):
    out = subprocess.run(
        ["fio", "--name=zt", f"--directory={directory}", f"--rw={rw}", f"--size={size_mib}M",
         f"--bs={block_kib}k", f"--iodepth={depth}", "--ioengine=io_uring", "--direct=1",
         "--numjobs=1", "--group_reporting", "--output-format=json"],
        capture_output=True, text=True, check=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    side = job["read" if rw == "read" else "write"]
    return side["bw_bytes"] / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure (default: a "
                    "temporary directory under $TMPDIR or /var/tmp)")
    ap.add_argument("--mib", type=int, default=1024, help="MiB per array (three arrays)")
    ap.add_argument("--seg-mib", type=int, default=16)
    ap.add_argument("--buffers", type=int, default=4)
    ap.add_argument("--block-kib", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=8)
    args = ap.parse_args()
    if not shutil.which("fio"):
        sys.exit("fio is missing: scripts/install-deps.sh installs it")
    base = args.dir or os.environ.get("TMPDIR", "/var/tmp")
    work = tempfile.mkdtemp(prefix="zt-nvme-bench-", dir=base)
    try:
        total = 3 * args.mib
        fio_w = fio(work, "write", total, args.block_kib, args.depth)
        fio_r = fio(work, "read", total, args.block_kib, args.depth)
        for f in os.listdir(work):
            os.unlink(os.path.join(work, f))
        r = subprocess.run([os.path.join(BIN, "bench_nvme_swap"), os.path.join(work, "swap"),
                            str(args.mib), str(args.seg_mib), str(args.buffers),
                            str(args.block_kib), str(args.depth)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"bench_nvme_swap failed:\n{r.stderr}")
        z = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"directory {base}, 3 x {args.mib} MiB, segments of {args.seg_mib} MiB, "
          f"{args.buffers} buffer sets, block {args.block_kib} KiB, queue depth {args.depth}, "
          f"swap backend {z['backend']}")
    print(f"{'':24s}{'fio GB/s':>10s}{'swap GB/s':>11s}{'share':>8s}")
    print(f"{'sequential write':24s}{fio_w:10.2f}{z['write_gbs']:11.2f}{z['write_gbs'] / fio_w:8.0%}")
    print(f"{'sequential read':24s}{fio_r:10.2f}{z['read_gbs']:11.2f}{z['read_gbs'] / fio_r:8.0%}")
    io_only = z["bytes"] / (fio_r * 1e9) + z["bytes"] / (fio_w * 1e9)
    print(f"optimizer stream (read + update + write): {z['step_s']:.2f} s, of which the update "
          f"{z['update_s']:.2f} s; fio's read and write of the same bytes take {io_only:.2f} s")


if __name__ == "__main__":
    main()
