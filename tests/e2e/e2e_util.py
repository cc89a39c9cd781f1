"""zerotrain end-to-end harness: the real zcoord, zagent, zworker and zctl binaries on loopback
in a temporary directory. Everything started here is torn down even when a test fails: the
daemons get a parent-death signal (so a killed test takes them along, and their workers die
with the agents), teardown stops them, and a final sweep kills any process whose command line
points into the test directory. Run with /usr/bin/python3."""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ztutil import free_port, write_job  # noqa: E402  (tests/ztutil.py)

BIN = os.environ.get("ZT_BIN", "./bin")
# sanitizer builds (make test-asan) run workers ~15x slower: fewer steps keep tests short
QUICK = bool(os.environ.get("ZT_TEST_QUICK"))
_libc = ctypes.CDLL("libc.so.6", use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)




def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def check_eq(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, expected {want!r}")


def pid_alive(pid):
    """True while pid runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(fn, timeout, what, interval=0.05):
    """Polls fn() until it returns something truthy; fails with `what` after timeout s."""
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def step_lines(text):
    """{step: loss string} of the `step=N loss=X` lines in text."""
    out = {}
    for line in text.splitlines():
        if line.startswith("step="):
            kv = dict(t.split("=", 1) for t in line.split() if "=" in t)
            out[int(kv["step"])] = kv["loss"]
    return out


def check_resumed_losses(got, want, first, last):
    """A resumed run's step losses (step -> loss text) start at `first`, end at `last` and
    equal the uninterrupted run's (`want`) bit for bit."""
    check_eq(min(got), first, "first step after the resume")
    check_eq(max(got), last, "last step")
    diff = [(s, got[s], want[s]) for s in sorted(got) if got[s] != want[s]]
    check(not diff, f"{len(diff)} losses differ from the uninterrupted run, first: {diff[:3]}")


class Cluster:
    def __init__(self, name, hb_interval="200ms", hb_timeout="3s", backoff="300ms",
                 hang_timeout="60s", coord_env=None):
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix=f"zt_e2e_{name}_")
        # gone at teardown = something else deleted files of this run (said so on failure)
        self.sentinel = os.path.join(self.tmp, ".zt_e2e_sentinel")
        open(self.sentinel, "w").close()
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.coord = None
        self.coord_env = coord_env or {}
        self.coord_args = ["--heartbeat-interval", hb_interval, "--heartbeat-timeout", hb_timeout,
                           "--restart-backoff", backoff, "--hang-timeout", hang_timeout]
        self.agents = {}
        self.logs = []
        # every binary sees the coordinator; one OpenMP thread per worker keeps runs
        # deterministic and the 2-core machine responsive
        self.env = dict(os.environ, ZT_COORDINATOR=self.addr, OMP_NUM_THREADS="1")
        self.env.pop("ZT_TOKEN", None)
        if os.geteuid() == 0:  # a root zagent wants --run-as USER, or this
            self.env["ZT_ALLOW_ROOT"] = "1"

    # ---- processes ----------------------------------------------------------------------

    def _popen(self, args, log, env=None):
        f = open(log, "ab")
        if log not in self.logs:
            self.logs.append(log)
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env or self.env,
                             cwd=self.tmp, preexec_fn=_die_with_parent)
        f.close()
        return p

    def start_coord(self, extra=()):
        ready = os.path.join(self.tmp, "zcoord.ready")
        env = dict(self.env, **self.coord_env)
        for attempt in range(100):
            if os.path.exists(ready):
                os.unlink(ready)
            self.coord = self._popen([os.path.join(BIN, "zcoord"), "--db",
                                      os.path.join(self.tmp, "zt.db"), "--grpc", self.addr,
                                      "--http", "off", "--ready-file", ready]
                                     + self.coord_args + list(extra),
                                     os.path.join(self.tmp, "zcoord.log"), env)
            end = time.time() + 20
            while time.time() < end and not os.path.exists(ready) and self.coord.poll() is None:
                time.sleep(0.02)
            if os.path.exists(ready):
                return self.coord
            if self.coord.poll() is None:
                break
            time.sleep(0.1)  # the port of a killed coordinator may linger a moment
        raise AssertionError("zcoord did not become ready; see " + self.tmp + "/zcoord.log")

    def kill_coord(self):
        self.coord.send_signal(signal.SIGKILL)
        self.coord.wait()

    def agent_args(self, name, slots, extra=()):
        return [os.path.join(BIN, "zagent"), "--coordinator", self.addr, "--slots", slots,
                "--name", name, "--work-dir", self.work_dir(name), "--status-file",
                self.status_path(name), "--stop-grace", "5s"] + list(extra)

    def start_agent(self, name, slots="cpu:2", extra=(), env=None, wait=True):
        if os.path.exists(self.status_path(name)):
            os.unlink(self.status_path(name))
        p = self._popen(self.agent_args(name, slots, extra),
                        os.path.join(self.tmp, f"zagent_{name}.log"), env)
        self.agents[name] = p
        if wait:
            wait_for(lambda: (self.agent_status(name) or {}).get("registered")
                     or p.poll() is not None, 20, f"agent {name} to register")
            check(p.poll() is None, f"agent {name} exited with {p.returncode}")
        return p

    def work_dir(self, name):
        return os.path.join(self.tmp, f"work_{name}")

    def status_path(self, name):
        return os.path.join(self.tmp, f"{name}.status.json")

    def agent_status(self, name):
        try:
            with open(self.status_path(name)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def agent_log(self, name):
        with open(os.path.join(self.tmp, f"zagent_{name}.log"), errors="replace") as f:
            return f.read()

    def coord_log(self):
        with open(os.path.join(self.tmp, "zcoord.log"), errors="replace") as f:
            return f.read()

    def worker_pids(self, name, attempt_id=None):
        """{rank: pid} of the agent's running workers (from its status file)."""
        st = self.agent_status(name) or {}
        return {w["rank"]: w["pid"] for w in st.get("workers", [])
                if w["state"] == "running" and w["pid"] > 0
                and (attempt_id is None or w["attempt_id"] == attempt_id)}

    def stop_agent(self, name, timeout=20):
        p = self.agents[name]
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        return p.wait(timeout)

    def kill_agent(self, name):
        p = self.agents[name]
        p.send_signal(signal.SIGKILL)
        p.wait()

    # ---- zctl ---------------------------------------------------------------------------

    def zctl(self, *args, timeout=120, check_rc=True, env=None):
        r = subprocess.run([os.path.join(BIN, "zctl")] + [str(a) for a in args],
                           capture_output=True, text=True, env=env or self.env, cwd=self.tmp,
                           timeout=timeout)
        if check_rc and r.returncode != 0:
            raise AssertionError(f"zctl {' '.join(map(str, args))} exited {r.returncode}:\n"
                                 f"{r.stdout}\n{r.stderr}")
        return r

    def zctl_json(self, *args, timeout=60):
        r = self.zctl("-o", "json", *args, timeout=timeout)
        return json.loads(r.stdout)

    def job(self, jid):
        return self.zctl_json("job", jid)

    def wait_job(self, jid, states, timeout):
        return wait_for(lambda: (lambda j: j if j["job"]["state"] in states else None)(
            self.job(jid)), timeout, f"job {jid} to reach {states}", interval=0.1)

    def committed(self, jid):
        """Committed checkpoints of a job, newest first."""
        cps = self.zctl_json("ckpt", "list", jid).get("checkpoints", [])
        return [c for c in cps if c["state"] == "COMMITTED"]

    def submit(self, job_path, *extra):
        r = self.zctl("submit", job_path, *extra)
        for tok in r.stdout.split():
            if tok.isdigit():
                return int(tok)
        raise AssertionError("no job id in: " + r.stdout)

    # ---- data and jobs ------------------------------------------------------------------

    def make_data(self):
        self.zctl("data", "synth", "--out", os.path.join(self.tmp, "data"), "--train-tokens",
                  "200k", "--val-tokens", "20k", "--seed", "1")

    def write_job(self, name, steps, ckpt_every=0, ranks=2, ranks_per_node=2, max_restarts=2,
                  ckpt_dir=None, eval_every=0, keep=3):
        job = {
            "name": name,
            "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64,
                      "vocab_size": 256, "init": "random", "seed": 7},
            "data": {"train": "data/synth_train_*.bin", "val": "data/synth_val_*.bin"},
            "train": {"steps": steps, "eval_every": eval_every, "eval_steps": 2,
                      "checkpoint_every": ckpt_every, "checkpoint_dir": ckpt_dir or f"ckpt_{name}",
                      "keep_checkpoints": keep},
            "resources": {"ranks": ranks, "ranks_per_node": ranks_per_node, "device": "cpu"},
            "max_restarts": max_restarts,
            "deepspeed": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
                          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                          "zero_optimization": {"stage": 1}, "steps_per_print": 100},
        }
        path = os.path.join(self.tmp, f"{name}.json")
        write_job(path, job)
        return path

    def run_reference(self, job, steps, nproc=2, timeout=300):
        """Runs job (a file of a job named "ref") locally with zctl run, as the uninterrupted
        run a test compares with: its step losses {step: loss text}, which must be `steps`."""
        self.zctl("run", "--nproc", str(nproc), job, timeout=timeout)
        with open(os.path.join(self.tmp, "ckpt_ref", "logs", "rank_00000.log")) as f:
            want = step_lines(f.read())
        check_eq(len(want), steps, "steps of the reference run")
        return want

    # ---- teardown -----------------------------------------------------------------------

    def dump(self):
        if not os.path.exists(self.sentinel):
            print(f"NOTE: files of {self.tmp} were deleted during the run by another process "
                  f"(something cleaning /tmp/zt_e2e_*?); this failure may not be the code's",
                  file=sys.stderr)
        for log in self.logs:
            try:
                with open(log, errors="replace") as f:
                    lines = f.read().splitlines()
            except OSError:
                continue
            print(f"---- last lines of {log} ----", file=sys.stderr)
            for line in lines[-40:]:
                print(line, file=sys.stderr)

    def _sweep(self):
        """Kills any process whose command line mentions the test directory."""
        me = os.getpid()
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == me:
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if self.tmp.encode() in cmd:
                try:
                    os.kill(int(d), signal.SIGKILL)
                except OSError:
                    pass

    def teardown(self, ok):
        for name, p in self.agents.items():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if self.coord and self.coord.poll() is None:
            self.coord.send_signal(signal.SIGTERM)
            try:
                self.coord.wait(15)
            except subprocess.TimeoutExpired:
                self.coord.kill()
                self.coord.wait()
        self._sweep()
        if ok and not os.environ.get("ZT_KEEP_TMP"):
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            print(f"(test files kept in {self.tmp})", file=sys.stderr)


def run(name, body, **cluster_args):
    """Runs body(cluster) and exits 0 on success; on failure prints the traceback and the
    logs' tails and exits 1. SIGTERM/SIGINT tear down too."""
    c = Cluster(name, **cluster_args)

    def on_signal(sig, frame):
        raise KeyboardInterrupt(f"signal {sig}")

    signal.signal(signal.SIGTERM, on_signal)
    ok = False
    t0 = time.time()
    try:
        body(c)
        ok = True
    except BaseException:
        traceback.print_exc()
        c.dump()
    finally:
        c.teardown(ok)
    print(f"{name}: {'ok' if ok else 'FAILED'} in {time.time() - t0:.1f} s")
    sys.exit(0 if ok else 1)
