"""A dead or hung rank never hangs the others:
1. kill -9 one of four ranks mid-training (after every rank has reported training steps):
   every other rank exits (code 3, a peer failed) within the collective timeout with a last
   line naming the dead rank, after logging its last collectives (kind, sequence, size, state)
   at ERROR, the failed one among them;
2. SIGSTOP one rank (hung, sockets open): the others give up after the timeout, naming it, with
   the same record of their last collectives;
3. `zctl run` with a rank that aborts mid-step: the other workers are stopped and zctl reports
   the first failure (rank, signal, last lines of its output), exiting non-zero."""
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

TIMEOUT_MS = 8000


def job(name, steps=100000, comm_timeout_ms=None):
    train = {"steps": steps, "checkpoint_dir": f"ckpt/{name}"}
    if comm_timeout_ms is not None:
        train["comm_timeout_ms"] = comm_timeout_ms
    return {"name": name,
            "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 32, "vocab_size": 256},
            "data": {"train": "data/synth_train_*.bin"},
            "train": train,
            "resources": {"ranks": 4},
            "deepspeed": {"train_batch_size": 8, "zero_optimization": {"stage": 2}}}



def start_ranks(tmp, name, env_timeout=True):
    """Four zworker ranks, each reporting on a pipe of its own (ZT_REPORT_FD). Returns the
    processes and the read ends of their report pipes. The collective timeout comes from
    ZT_COMM_TIMEOUT_MS, or with env_timeout False from the job file."""
    port = zu.free_port()
    procs, reports = [], []
    for r in range(4):
        rd, wr = os.pipe()
        env = dict(os.environ, ZT_RANK=str(r), ZT_WORLD_SIZE="4", OMP_NUM_THREADS="1",
                   ZT_RENDEZVOUS=f"tcp://127.0.0.1:{port}", ZT_REPORT_FD=str(wr))
        env.pop("ZT_COMM_TIMEOUT_MS", None)
        if env_timeout:
            env["ZT_COMM_TIMEOUT_MS"] = str(TIMEOUT_MS)
        procs.append(subprocess.Popen([zu.zt_bin("zworker"), f"{tmp}/{name}.json"], cwd=tmp, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                      pass_fds=(wr,)))
        os.close(wr)
        reports.append(rd)
    return procs, reports


def wait_training(name, procs, reports, min_steps=3, limit_s=120):
    """Until every rank has reported min_steps step lines on its report pipe: all four are in
    the training loop, so the signal lands mid-training, not during start-up. The pipes are
    closed afterwards (a rank's later reports then fail quietly instead of filling a pipe)."""
    seen = [0] * len(reports)
    bufs = [b""] * len(reports)
    deadline = time.time() + limit_s
    try:
        while min(seen) < min_steps:
            for r, p in enumerate(procs):
                if p.poll() is not None:
                    sys.exit(f"{name}: rank {r} exited ({p.returncode}) before training: "
                             f"{p.stderr.read()[-2000:]}")
            left = deadline - time.time()
            if left <= 0:
                sys.exit(f"{name}: not every rank reported {min_steps} steps within {limit_s} s "
                         f"(steps seen per rank: {seen})")
            ready, _, _ = select.select(reports, [], [], min(left, 1.0))
            for fd in ready:
                r = reports.index(fd)
                chunk = os.read(fd, 65536)
                bufs[r] += chunk
                *lines, bufs[r] = bufs[r].split(b"\n")
                seen[r] += sum(1 for ln in lines if ln.startswith(b"rank=%d step=" % r))
    finally:
        for fd in reports:
            os.close(fd)
    return seen


RECENT_HEADER = re.compile(r"\[comm\] \S+ rank (\d)'s last (\d+) collectives, oldest first")
RECENT_ENTRY = re.compile(r"\[comm\]   (allreduce|reduce_scatter|allgather|broadcast|barrier) "
                          r"#(\d+) \((\d+) x (fp32|bf16|fp16)\): "
                          r"(done in [0-9.]+ ms|running for [0-9.]+ ms|queued for [0-9.]+ ms|"
                          r"failed \((ERR_\w+)\) after [0-9.]+ ms)$")


def check_recent(case, rank, errtext, failures):
    """The rank logged its last collectives before the error: a header naming it, one line per
    collective with kind, sequence number, size and state, sequence numbers consecutive, and
    the collective the final error names among them as failed."""
    lines = errtext.strip().splitlines()
    head = [i for i, ln in enumerate(lines) if RECENT_HEADER.search(ln)]
    if not head:
        failures.append(f"{case}: rank {rank} logged no record of its last collectives")
        return
    m = RECENT_HEADER.search(lines[head[-1]])
    n = int(m.group(2))
    entries = [RECENT_ENTRY.search(ln) for ln in lines[head[-1] + 1:head[-1] + 1 + n]]
    last = lines[-1]
    named = re.search(r"zworker\.c:\d+: (\w+) #(\d+)", last)
    if int(m.group(1)) != rank or not 1 <= n <= 16 or not all(entries) or not named:
        failures.append(f"{case}: rank {rank}: malformed record of its last collectives:\n"
                        + "\n".join(lines[head[-1]:]))
        return
    seqs = [int(e.group(2)) for e in entries]
    failed = {(e.group(1), int(e.group(2))) for e in entries if e.group(6)}
    # a collective issued after the failure was noticed is refused before it gets a number:
    # then the record holds the one that failed
    refused = "not started, the communicator failed earlier" in last
    if seqs != list(range(seqs[0], seqs[0] + n)) or not failed or \
            (not refused and (named.group(1), int(named.group(2))) not in failed):
        failures.append(f"{case}: rank {rank}: the failed collective {named.group(0)} is not "
                        f"recorded as failed among {[(e.group(1), e.group(2), e.group(5)) for e in entries]}")


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-fail-") as tmp:
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--train-tokens", "100000",
                         "--val-tokens", "0"])
        assert r.returncode == 0, r.stderr
        # a killed rank's sockets close at once: the others must end within the timeout;
        # a stopped one is only noticed when the timeout expires (its neighbours), then the
        # news reaches the rest at once (5 s of slack for a loaded machine). The killed run
        # takes the timeout from the environment over a job file that says 10 minutes, the
        # hung one from the job file (train.comm_timeout_ms)
        for case, sig, victim, limit_s in (
                ("killed", signal.SIGKILL, 2, TIMEOUT_MS / 1000),
                ("hung", signal.SIGSTOP, 1, TIMEOUT_MS / 1000 + 5)):
            from_env = case == "killed"
            zu.write_job(f"{tmp}/{case}.json",
                         job(case, comm_timeout_ms=600000 if from_env else TIMEOUT_MS))
            procs, reports = start_ranks(tmp, case, env_timeout=from_env)
            try:
                seen = wait_training(case, procs, reports)
                procs[victim].send_signal(sig)
                t0 = time.time()
                print(f"{case}: signalled rank {victim} after steps {seen} were reported")
                for r, p in enumerate(procs):
                    if r == victim:
                        continue
                    try:
                        _, errtext = p.communicate(timeout=TIMEOUT_MS / 1000 * 3 + 10)
                    except subprocess.TimeoutExpired:
                        failures.append(f"{case}: rank {r} still running {time.time() - t0:.0f} s later")
                        continue
                    took = time.time() - t0
                    last = errtext.strip().splitlines()[-1] if errtext.strip() else ""
                    named = f"rank {victim}" in last
                    print(f"{case}: rank {r} exited {p.returncode} after {took:.2f} s: {last[-160:]}")
                    if p.returncode != 3 or not named:
                        failures.append(f"{case}: rank {r} exit {p.returncode}, message: {last}")
                    if took > limit_s:
                        failures.append(f"{case}: rank {r} took {took:.1f} s (limit {limit_s:.0f} s)")
                    check_recent(case, r, errtext, failures)
                    waited = re.findall(r"(?:nothing received from|accepted no data for) .*?(\d+) ms", errtext)
                    if case == "hung" and any(not TIMEOUT_MS <= int(w) < TIMEOUT_MS + 2000 for w in waited):
                        failures.append(f"hung: rank {r} waited {waited} ms, not the job file's {TIMEOUT_MS}")
            finally:
                zu.reap(procs)

        # where the timeout comes from, seen at the rendezvous (rank 1 of 2 never comes): the
        # job file's train.comm_timeout_ms, unless ZT_COMM_TIMEOUT_MS overrides it
        zu.write_job(f"{tmp}/alone.json", job("alone", comm_timeout_ms=1000))
        for env_ms, want in ((None, 1000), (1500, 1500)):
            env = dict(os.environ, ZT_RANK="0", ZT_WORLD_SIZE="2", OMP_NUM_THREADS="1",
                       ZT_RENDEZVOUS=f"tcp://127.0.0.1:{zu.free_port()}")
            env.pop("ZT_COMM_TIMEOUT_MS", None)
            if env_ms:
                env["ZT_COMM_TIMEOUT_MS"] = str(env_ms)
            t0 = time.time()
            p = subprocess.run([zu.zt_bin("zworker"), f"{tmp}/alone.json"], cwd=tmp, env=env,
                               capture_output=True, text=True, timeout=60)
            took = time.time() - t0
            print(f"rendezvous alone, job 1000 ms, environment {env_ms}: exit {p.returncode} "
                  f"after {took:.2f} s: {p.stderr.strip().splitlines()[-1][-160:]}")
            if p.returncode != 3 or f"joined within {want} ms" not in p.stderr or \
                    not want / 1000 - 0.1 <= took <= want / 1000 + 10:
                failures.append(f"timeout {want} ms expected (env {env_ms}): exit {p.returncode} "
                                f"after {took:.1f} s\n{p.stderr}")

        # zctl run stops the rest and reports the first failure
        zu.write_job(f"{tmp}/crash.json", job("crash", steps=20))
        r = zu.run_zctl(["run", f"{tmp}/crash.json"], cwd=tmp,
                        env={"OMP_NUM_THREADS": "1", "ZT_INJECT_CRASH": "3:4"}, timeout=120)
        print("zctl run with a crashing rank:", r.returncode, r.stderr.strip().splitlines()[-12:])
        if r.returncode == 0 or "rank 3 was killed by signal 6" not in r.stderr \
                or "dies in the middle of step 4" not in r.stderr:
            failures.append(f"zctl run crash report: rc {r.returncode}\n{r.stderr}")
    zu.finish(failures)


if __name__ == "__main__":
    main()
