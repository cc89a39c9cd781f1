#!/usr/bin/env python3
"""What keeps one zcoord from being disturbed by others: a second zcoord on the same database
stops at once and names the first (its pid and addresses), while a lock file left by a killed
zcoord does not block; and HTTP clients that connect and then send nothing, or half a request,
do not hold up /healthz for anyone else."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zt_testlib as T  # noqa: E402


def second_zcoord(db, *extra):
    return subprocess.run([os.path.join(T.BIN, "zcoord"), "--db", db, "--grpc", "127.0.0.1:0",
                           "--http", "off", *extra], capture_output=True, text=True, timeout=30)


def db_lock(tmp):
    db = os.path.join(tmp, "zt.db")
    with T.Zcoord(tmp, ["--http", "127.0.0.1:0"]) as zc:
        pid = zc.proc.pid
        r = second_zcoord(db)
        assert r.returncode != 0, f"a second zcoord on {db} started: {r.stdout} {r.stderr}"
        want = (f"database {db} is in use by zcoord pid {pid} (grpc {zc.addr}, http {zc.http}); "
                "stop it first or use another --db")
        assert want in r.stderr, f"{want!r} not in:\n{r.stderr}"
        with open(db + ".lock") as f:
            assert f.read() == f"pid={pid} grpc={zc.addr} http={zc.http}\n"
        # the first one was not disturbed
        assert zc.proc.poll() is None
        # a killed zcoord leaves its lock file; the kernel released the lock with the process
        zc.kill()
        assert os.path.exists(db + ".lock")
        zc.start()
        assert zc.proc.pid != pid
        r = second_zcoord(db)
        assert r.returncode != 0 and f"zcoord pid {zc.proc.pid} " in r.stderr, r.stderr
        # a clean stop empties the file and lets the next one in
        assert zc.stop() == 0
        with open(db + ".lock") as f:
            assert f.read() == ""
        zc.start()
        assert zc.stop() == 0
    # another database in the same directory is another lock
    other = os.path.join(tmp, "other")
    os.makedirs(other)
    with T.Zcoord(tmp, ["--http", "off"]) as zc, T.Zcoord(other, ["--http", "off"]) as zc2:
        assert zc.proc.poll() is None and zc2.proc.poll() is None


def healthz_time(addr, source="127.0.0.1"):
    """Seconds GET /healthz takes from the given loopback source address."""
    host, port = addr.rsplit(":", 1)
    t0 = time.monotonic()
    s = socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0))
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        return time.monotonic() - t0
    finally:
        s.close()
    took = time.monotonic() - t0
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"ok\n"), data
    return took


def stall(addr, n):
    """n connections from 127.0.0.1 that send nothing, or stop in the middle of a request."""
    host, port = addr.rsplit(":", 1)
    socks = []
    for i in range(n):
        s = socket.create_connection((host, int(port)), timeout=5)
        socks.append(s)
        try:
            if i % 3 == 1:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            elif i % 3 == 2:
                s.sendall(b"POST /api/v1/jobs/1/cancel HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 100\r\n\r\n{\"re")
        except OSError:  # refused past the per-address limit: that is the point
            pass
    time.sleep(0.2)
    return socks


def slow_clients(tmp):
    with T.Zcoord(tmp, ["--http", "127.0.0.1:0"]) as zc:
        # a few stalled clients do not hold up one another, not even from the same address
        socks = stall(zc.http, 12)
        try:
            for _ in range(3):
                took = healthz_time(zc.http)
                assert took < 1.0, f"/healthz took {took:.2f} s beside 12 stalled connections"
        finally:
            for s in socks:
                s.close()
        # one address that opens more connections than zcoord serves at once (512) takes only
        # its own share: everyone else is still answered at once
        socks = stall(zc.http, 600)
        try:
            for _ in range(3):
                took = healthz_time(zc.http, source="127.0.0.2")
                assert took < 1.0, f"/healthz took {took:.2f} s while 127.0.0.1 held 600 stalled connections"
        finally:
            for s in socks:
                s.close()
        assert zc.stop() == 0


def main():
    tmp = tempfile.mkdtemp(prefix="zt_guards_")
    try:
        os.makedirs(os.path.join(tmp, "lock"))
        db_lock(os.path.join(tmp, "lock"))
        os.makedirs(os.path.join(tmp, "slow"))
        slow_clients(os.path.join(tmp, "slow"))
        print("test_zcoord_guards: ok")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
