"""`zctl run` as a process supervisor: each rank gets its share of the cores
(OMP_NUM_THREADS, unless the user set it), the first failure is reported by its cause
(a rank that lost a peer is replaced by the rank whose own failure started it; a rank that
zctl itself killed is never the cause), lines already shown are not repeated, option values
are checked before anything starts, and on a terminal a progress bar shows step, loss,
tokens/s and ETA while the rank log keeps every step line. Scripted workers (ZT_WORKER)
make the failure cases exact; the progress bar runs the real zworker on a pty."""
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


WORKER = r"""#!/bin/bash
echo "rank=$ZT_RANK omp=${OMP_NUM_THREADS:-unset}"
case "$ZT_SCENARIO" in
ok) exit 0;;
hang)  # rank 1 hangs; rank 0 reports the collective it waits in (report fd 3), times out
  # waiting for rank 1, names it and exits 3 (a lost peer)
  if [ "$ZT_RANK" = 1 ]; then exec sleep 60; fi
  echo "rank=0 step=3 loss=4.1" >&3
  echo "rank=0 wait op=allreduce seq=7 step=4 part=backward prev_op=reduce_scatter prev_seq=6 waited_ms=2000" >&3
  sleep 0.3
  echo "2026-01-01T00:00:00Z ERROR w pid=$$ [comm] allreduce #7: nothing received from rank 1 for 300 ms"
  exit 3;;
cause)  # rank 0 reports a lost peer first; rank 1's own failure comes later and is the cause
  # (rank 1 leaves a process behind that keeps its output pipes open: zctl must not wait for it)
  if [ "$ZT_RANK" = 0 ]; then sleep 0.2; echo "lost rank 1"; exit 3; fi
  trap 'sleep 0.3; printf "rank 1 own failure: cannot read shard"; exit 1' TERM
  sleep 30 & wait;;
esac
"""


def main():
    with tempfile.TemporaryDirectory(prefix="zt-runprocs-") as tmp:
        worker = os.path.join(tmp, "worker.sh")
        with open(worker, "w") as f:
            f.write(WORKER)
        os.chmod(worker, 0o755)
        os.makedirs(f"{tmp}/data")
        rng = np.random.default_rng(1)
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, 64, 20000))
        job = {"name": "p",
               "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 16,
                         "vocab_size": 64},
               "data": {"train": "data/t_*.bin"},
               "train": {"steps": 6, "checkpoint_dir": "ckpt/p"},
               "resources": {"ranks": 2},
               "deepspeed": {"train_batch_size": 4}}
        path = f"{tmp}/p.json"
        zu.write_job(path, job)
        logs = f"{tmp}/ckpt/p/logs"

        def scripted(scenario, extra_env=None, args=("--nproc", "2")):
            env = {"ZT_WORKER": worker, "ZT_SCENARIO": scenario}
            env.update(extra_env or {})
            e = dict(os.environ)
            e.pop("OMP_NUM_THREADS", None)
            e.update(env)
            return subprocess.run([zu.zt_bin("zctl"), "run", *args, path], capture_output=True,
                                  text=True, cwd=tmp, env=e, timeout=120)

        def rank_line(r):
            with open(f"{logs}/rank_{r:05d}.log") as f:
                return f.readline().strip()

        # ---- threads: the cores shared among the ranks, or the user's choice ----
        r = scripted("ok")
        check(r.returncode == 0, f"scripted ok run exits 0 (rc {r.returncode}: {r.stderr})")
        want = max(1, (os.cpu_count() or 1) // 2)
        for rank in (0, 1):
            check(rank_line(rank) == f"rank={rank} omp={want}",
                  f"rank {rank} gets OMP_NUM_THREADS={want}: {rank_line(rank)!r}")
        r = scripted("ok", {"OMP_NUM_THREADS": "3"})
        check(rank_line(1) == "rank=1 omp=3", f"the user's OMP_NUM_THREADS kept: {rank_line(1)!r}")
        r = scripted("ok", args=("--nproc", "1"))
        check(rank_line(0) == f"rank=0 omp={os.cpu_count() or 1}",
              f"one rank gets every core: {rank_line(0)!r}")

        # ---- a hung rank: its peer's report is the failure, not zctl's own SIGTERM ----
        t0 = time.time()
        r = scripted("hang")
        took = time.time() - t0
        print(r.stderr)
        check(r.returncode == 3, f"hang: zctl exits with the peer's code 3 (got {r.returncode})")
        check("rank 0 exited with code 3 (it lost a peer" in r.stderr,
              "hang: rank 0's exit is reported as the failure")
        check("killed by signal" not in r.stderr, "hang: the rank zctl stopped is not blamed")
        check(r.stderr.count("nothing received from rank 1") == 1,
              "hang: the line naming rank 1 is shown once, not again in the tail")
        check(took < 20, f"hang: the hung rank is stopped promptly ({took:.1f} s)")
        check("zctl run: hang: rank 1 stopped in backward at step 4 (last collective "
              "reduce_scatter #6); rank 0 waits in allreduce #7 for rank 1" in r.stderr,
              "hang: the diagnosis names rank 1 and the collective rank 0 waits in")

        # ---- a peer report first, the real cause later: the cause is reported ----
        t0 = time.time()
        r = scripted("cause")
        took = time.time() - t0
        print(r.stderr)
        check(took < 20, f"cause: zctl does not wait for what a rank left behind ({took:.1f} s)")
        check(r.returncode == 1, f"cause: zctl exits with the cause's code 1 (got {r.returncode})")
        check("rank 1 exited with code 1;" in r.stderr, "cause: rank 1 is reported")
        check("rank 1 own failure: cannot read shard" in r.stderr,
              "cause: rank 1's last lines are shown")

        # ---- option values checked before anything starts ----
        for args, needle in ((["--nproc=0"], "--nproc takes a whole number from 1 to 4096"),
                             (["--nproc=abc"], "not 'abc'"),
                             (["--nproc"], "--nproc needs a value"),
                             (["--timeout-ms", "banana"], "--timeout-ms takes a whole number"),
                             (["--timeout-ms=0"], "--timeout-ms takes a whole number"),
                             (["--log-dir"], "--log-dir needs a value")):
            if args in (["--nproc"], ["--log-dir"]):
                rr = zu.run_zctl(["run", path] + args, cwd=tmp)
            else:
                rr = zu.run_zctl(["run"] + args + [path], cwd=tmp)
            check(rr.returncode == 2 and needle in rr.stderr,
                  f"{' '.join(args)}: rc {rr.returncode}, {rr.stderr.strip()!r}")

        # ---- a rank frozen with SIGSTOP, with the real worker: the collective times out and
        # the diagnosis names it; the frozen rank is killed, not left behind ----
        e = dict(os.environ, ZT_COMM_STALL_MS="300", OMP_NUM_THREADS="1")
        e.pop("ZT_WORKER", None)
        long_job = dict(job, train={"steps": 100000, "checkpoint_dir": "ckpt/p"})
        zu.write_job(path, long_job)
        p = subprocess.Popen([zu.zt_bin("zctl"), "run", "--nproc", "2", "--timeout-ms", "3000",
                              path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=tmp, env=e)

        def worker_of_rank(rank):
            for kid in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                                      text=True).stdout.split():
                try:
                    with open(f"/proc/{kid}/environ", "rb") as f:
                        if f"ZT_RANK={rank}".encode() in f.read().split(b"\0"):
                            return int(kid)
                except OSError:
                    pass
            return None

        deadline = time.time() + 60
        stopped = None
        while time.time() < deadline and stopped is None:
            time.sleep(0.2)
            if os.path.exists(f"{logs}/rank_00000.log"):
                with open(f"{logs}/rank_00000.log") as f:
                    if f.read().count("step=") >= 3:
                        stopped = worker_of_rank(1)
        check(stopped is not None, "the real run reached step 3 and rank 1 was found")
        if stopped:
            os.kill(stopped, signal.SIGSTOP)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        print(err[-1500:])
        check(p.returncode == 3, f"SIGSTOP: zctl exits 3 (got {p.returncode})")
        check(re.search(r"zctl run: hang: rank 1 stopped in \w+ at step \d+ \(last collective "
                        r"\w+ #\d+\); rank 0 waits in \w+ #\d+ for rank 1", err) is not None,
              "SIGSTOP: the diagnosis names rank 1 and what rank 0 waits in")
        if stopped:
            check(not os.path.exists(f"/proc/{stopped}") or
                  open(f"/proc/{stopped}/stat").read().split()[2] == "Z",
                  "SIGSTOP: the frozen rank was killed")
        zu.write_job(path, job)

        # ---- the progress bar on a terminal, with the real worker ----
        for f in os.listdir(logs):
            os.unlink(os.path.join(logs, f))
        try:
            pid, fd = pty.fork()
        except OSError as ex:  # e.g. a chroot without /dev/pts
            print(f"SKIP the progress bar: no pseudo-terminal can be opened here ({ex})")
            zu.finish(failures)
            return
        if pid == 0:
            os.chdir(tmp)
            os.environ.pop("ZT_WORKER", None)
            os.execv(zu.zt_bin("zctl"), [zu.zt_bin("zctl"), "run", "--nproc", "1", path])
        out = b""
        deadline = time.time() + 120
        while time.time() < deadline:
            rd, _, _ = select.select([fd], [], [], 1.0)
            if fd in rd:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
        _, status = os.waitpid(pid, 0)
        text = out.decode("utf-8", "replace")
        check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
              f"pty run exits 0 (status {status}): {text[-500:]!r}")
        bars = re.findall(r"\rstep (\d+)/6 \[[=> ]+\] +\d+% loss [0-9.]+ \| \d+ tok/s \| "
                          r"[0-9:]+ elapsed \| ETA [0-9:-]+", text.replace("\x1b[K", ""))
        check(len(bars) >= 1 and bars[-1] == "6", f"progress bar redrawn up to 6/6: {bars}")
        check("step=" not in text, "no raw step lines on the terminal")
        with open(f"{logs}/rank_00000.log") as f:
            steps = zu.parse_step_lines(f.read())
        check([int(s["step"]) for s in steps] == list(range(1, 7)),
              f"the rank log keeps every step line: {[s['step'] for s in steps]}")
    zu.finish(failures)


if __name__ == "__main__":
    main()
