"""Shared helpers of the coordinator's Python tests: Python stubs built from the project's
.proto files with Debian's grpc_tools, a zcoord process on loopback that is always torn down,
and a simulated agent."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ztutil import free_port  # noqa: E402  (tests/ztutil.py)

SRC = os.environ.get("ZT_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("ZT_BIN", "./bin")


def need_grpc():
    """Imports grpc and grpc_tools, or exits 77 (skip) saying what to install."""
    try:
        import grpc  # noqa: F401
        from grpc_tools import protoc  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e} (install python3-grpcio python3-grpc-tools)")
        sys.exit(77)


def build_stubs(out):
    """Compiles zerotrain.proto and health.proto into out/ and makes them importable."""
    from grpc_tools import protoc
    os.makedirs(out, exist_ok=True)
    args = ["protoc", f"-I{SRC}/proto", f"--python_out={out}", f"--grpc_python_out={out}",
            f"{SRC}/proto/zerotrain.proto", f"{SRC}/proto/health.proto"]
    if protoc.main(args) != 0:
        raise SystemExit("protoc (grpc_tools) failed to compile the .proto files")
    sys.path.insert(0, out)




def write_token(path, token):
    """Writes token (one line) to path readable by its owner only, as zcoord, zctl and zagent
    require of a token file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)


class Zcoord:
    """A zcoord process in directory tmp; use as a context manager (killed on exit). With
    restart_early_exit, a zcoord that exits before it is ready (a fixed port may linger for a
    moment after a kill) is started again; starts counts the processes started."""

    def __init__(self, tmp, args=(), port=0, restart_early_exit=False):
        self.tmp, self.args, self.port, self.proc, self.addr = tmp, list(args), port, None, None
        self.http = None
        self.log = os.path.join(tmp, "zcoord.log")
        self.restart_early_exit = restart_early_exit
        self.starts = 0

    def start(self):
        ready = os.path.join(self.tmp, "ready.json")
        if os.path.exists(ready):
            os.unlink(ready)
        log = open(self.log, "a")
        self.proc = subprocess.Popen([os.path.join(BIN, "zcoord"), "--db", os.path.join(self.tmp, "zt.db"),
                                      "--grpc", f"127.0.0.1:{self.port}", "--http", "off",
                                      "--ready-file", ready, *self.args], stdout=log, stderr=log)
        log.close()
        self.starts += 1
        for _ in range(2000):
            if os.path.exists(ready):
                with open(ready) as f:
                    info = json.load(f)
                self.addr, self.http = info["grpc"], info["http"]
                self.port = int(self.addr.rsplit(":", 1)[1])
                return self
            if self.proc.poll() is not None:
                if self.restart_early_exit:
                    time.sleep(0.05)
                    return self.start()
                raise SystemExit(f"zcoord exited early:\n{self.tail()}")
            time.sleep(0.01)
        self.kill()
        raise SystemExit("zcoord did not become ready")

    def tail(self, n=4000):
        try:
            with open(self.log) as f:
                return f.read()[-n:]
        except OSError:
            return "(no log)"

    def stop(self):
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(30)
        self.proc = None
        return rc

    def kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            sys.stderr.write(f"---- zcoord log ----\n{self.tail()}\n")
        self.kill()
        return False


class CoordTest:
    """The frame of a coordinator test, as a context manager: a temporary directory (tmp) with
    the Python stubs built in tmp/py, and the zcoord started last by zcoord(), which is killed
    on the way out (its log's last log_tail characters printed first when the test failed)
    before the directory is removed."""

    def __init__(self, prefix, log_tail=4000):
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.log_tail, self.zc = log_tail, None

    def __enter__(self):
        build_stubs(os.path.join(self.tmp, "py"))
        return self

    def token_file(self, name, token):
        """tmp/name holding token, as write_token writes it; returns the path."""
        path = os.path.join(self.tmp, name)
        write_token(path, token)
        return path

    def zcoord(self, args=(), tmp=None):
        """Starts a zcoord in tmp (default: this test's directory) and keeps it for teardown."""
        self.zc = Zcoord(tmp or self.tmp, args).start()
        return self.zc

    def __exit__(self, exc_type, exc, tb):
        try:
            if self.zc is not None:
                if exc_type is not None:
                    sys.stderr.write(f"---- zcoord log ----\n{self.zc.tail(self.log_tail)}\n")
                self.zc.kill()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False


def bearer(token):
    """The gRPC metadata that carries token as 'authorization: Bearer <token>'."""
    return [("authorization", f"Bearer {token}")] if token else []


class FakeAgent:
    """A simulated zagent: registers with the agent join token (join_token, or the metadata
    given), then makes every later agent call with the agent key the coordinator
    issued (self.md: 'authorization: Bearer <agent_key>'), as zagent does."""

    def __init__(self, pb, stub, name, slots=2, metadata=(), join_token=None, previous_agent_key="",
                 hostname="testhost"):
        self.pb, self.stub, self.name = pb, stub, name
        self.join_md = list(metadata) or bearer(join_token)
        self.slots, self.hostname = slots, hostname
        self.register(previous_agent_key)

    def register(self, previous_agent_key=""):
        """RegisterAgent (again): a new incarnation and a new agent key."""
        reply = self.stub.RegisterAgent(self.pb.RegisterAgentRequest(
            name=self.name, hostname=self.hostname, device=self.pb.DEVICE_CPU, slots=self.slots,
            previous_agent_key=previous_agent_key), metadata=self.join_md)
        self.reply = reply
        self.inc = reply.incarnation
        self.key = reply.agent_key
        assert len(self.key) == 64 and all(c in "0123456789abcdef" for c in self.key), \
            f"agent {self.name}: agent_key {self.key!r} is not 64 hex digits"
        self.md = bearer(self.key)
        return reply

    def heartbeat(self, workers=(), name=None, leaving=False):
        return self.stub.Heartbeat(self.pb.HeartbeatRequest(
            name=name or self.name, incarnation=self.inc, workers=list(workers), leaving=leaving),
            metadata=self.md)

    def wait_desired(self, n, newer_than=0, timeout=5.0):
        """Heartbeats (without workers) until n workers of an attempt > newer_than are desired."""
        end = time.time() + timeout
        while time.time() < end:
            hb = self.heartbeat()
            ws = [w for w in hb.workers if w.attempt_id > newer_than]
            if len(ws) == n:
                return ws
            time.sleep(0.01)
        raise AssertionError(f"agent {self.name}: {n} desired workers did not come")

    def status(self, desired, phase, step=0, code=0):
        return [self.pb.WorkerStatus(job_id=d.job_id, attempt_id=d.attempt_id, rank=d.rank,
                                     pid=1000 + d.rank, phase=phase, step=step, exit_code=code,
                                     device_index=d.device_index) for d in desired]

    # the reports, each with this agent's key
    def report_metrics(self, steps, agent=None):
        return self.stub.ReportMetrics(self.pb.ReportMetricsRequest(
            agent=self.name if agent is None else agent, steps=list(steps)), metadata=self.md)

    def report_logs(self, entries, agent=None):
        return self.stub.ReportLogs(self.pb.ReportLogsRequest(
            agent=self.name if agent is None else agent, entries=list(entries)), metadata=self.md)

    def report_checkpoint(self, attempt_id, rank, step, dir, file=None, bytes=4096, crc32c=1,
                          agent=None):
        return self.stub.ReportCheckpoint(self.pb.ReportCheckpointRequest(
            agent=self.name if agent is None else agent, attempt_id=attempt_id, rank=rank,
            step=step, dir=dir, file=f"rank_{rank:05d}.zts" if file is None else file,
            bytes=bytes, crc32c=crc32c), metadata=self.md)

    def report_checkpoint_removed(self, attempt_id, rank, step, dir, agent=None):
        return self.stub.ReportCheckpointRemoved(self.pb.ReportCheckpointRemovedRequest(
            agent=self.name if agent is None else agent, attempt_id=attempt_id, rank=rank,
            step=step, dir=dir), metadata=self.md)


Agent = FakeAgent  # the name the older tests use
