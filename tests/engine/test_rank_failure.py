"""A dead or hung rank never hangs the others:
1. kill -9 one of four ranks mid-training: every other rank exits (code 3, a peer failed)
   within the collective timeout with a message naming the dead rank;
2. SIGSTOP one rank (hung, sockets open): the others give up after the timeout, naming it;
3. `zctl run` with a rank that aborts mid-step: the other workers are stopped and zctl reports
   the first failure (rank, signal, last lines of its output), exiting non-zero."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

TIMEOUT_MS = 8000


def job(name, steps=100000):
    return {"name": name,
            "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 32, "vocab_size": 256},
            "data": {"train": "data/synth_train_*.bin"},
            "train": {"steps": steps, "checkpoint_dir": f"ckpt/{name}"},
            "resources": {"ranks": 4},
            "deepspeed": {"train_batch_size": 8, "zero_optimization": {"stage": 2}}}


def free_port():
    """A free port below the kernel's ephemeral range, so that other processes' outgoing
    connections cannot take it before rank 0 binds it (as zctl run and zagent pick)."""
    import random
    for _ in range(64):
        p = random.randint(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
            return p
        except OSError:
            continue
        finally:
            s.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_ranks(tmp, name):
    port = free_port()
    procs = []
    for r in range(4):
        env = dict(os.environ, ZT_RANK=str(r), ZT_WORLD_SIZE="4", OMP_NUM_THREADS="1",
                   ZT_RENDEZVOUS=f"tcp://127.0.0.1:{port}", ZT_COMM_TIMEOUT_MS=str(TIMEOUT_MS))
        procs.append(subprocess.Popen([zu.zt_bin("zworker"), f"{tmp}/{name}.json"], cwd=tmp, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    return procs


def wait_steps(tmp, name, procs):
    """Until the run is clearly training (its first checkpoint-free steps pass)."""
    deadline = time.time() + 60
    while time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            sys.exit(f"{name}: a rank exited early")
        time.sleep(0.5)
        if time.time() > deadline - 55:  # ~5 s of training
            return


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-fail-") as tmp:
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--train-tokens", "100000",
                         "--val-tokens", "0"])
        assert r.returncode == 0, r.stderr
        for case, sig, victim in (("killed", signal.SIGKILL, 2), ("hung", signal.SIGSTOP, 1)):
            zu.write_job(f"{tmp}/{case}.json", job(case))
            procs = start_ranks(tmp, case)
            try:
                wait_steps(tmp, case, procs)
                procs[victim].send_signal(sig)
                t0 = time.time()
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
                    if took > TIMEOUT_MS / 1000 * 2 + 5:
                        failures.append(f"{case}: rank {r} took {took:.1f} s")
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGCONT)
                        p.kill()
                        p.wait()

        # zctl run stops the rest and reports the first failure
        zu.write_job(f"{tmp}/crash.json", job("crash", steps=20))
        r = zu.run_zctl(["run", f"{tmp}/crash.json"], cwd=tmp,
                        env={"OMP_NUM_THREADS": "1", "ZT_INJECT_CRASH": "3:4"}, timeout=120)
        print("zctl run with a crashing rank:", r.returncode, r.stderr.strip().splitlines()[-12:])
        if r.returncode == 0 or "rank 3 was killed by signal 6" not in r.stderr \
                or "dies in the middle of step 4" not in r.stderr:
            failures.append(f"zctl run crash report: rc {r.returncode}\n{r.stderr}")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
