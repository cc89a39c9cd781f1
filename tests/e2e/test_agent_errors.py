#!/usr/bin/env python3
"""End to end, zagent on bad input: bad flags and environment give one clear message and exit
2; with the coordinator unreachable the agent says so and keeps retrying, then registers as
soon as zcoord comes up, and stops with exit 0 on SIGTERM; a wrong or missing token is refused
at registration: the agent says which token to give and exits 1; with a TLS coordinator an
agent given --tls-ca registers, one without it keeps saying it cannot connect; two agents with
one name say so."""
import json
import os
import shutil
import subprocess
import time

import e2e_util as e


def zagent(c, *args, env=None, timeout=20):
    return subprocess.run([os.path.join(e.BIN, "zagent")] + list(args), capture_output=True,
                          text=True, env=env or c.env, cwd=c.tmp, timeout=timeout)


def bad_flags(c):
    wd = ["--work-dir", os.path.join(c.tmp, "w")]
    cases = [
        (["--slots", "gpu:2"], "cpu:N"),
        (["--slots", "cpu:0"], "from 1 to 4096"),
        (["--bogus"], "unknown option '--bogus'"),
        (["--heartbeat-ms", "5"], "--heartbeat-ms"),
        (["--name", "bad name!"], "is not valid"),
        (["--worker", "/nonexistent/zworker"], "is not an executable file"),
        (["--token-file", "/nonexistent/token"], "cannot read the token file"),
        (["--stop-grace", "soon"], "--stop-grace"),
        (["extra-argument"], "unexpected argument"),
    ]
    if not os.path.exists("/dev/nvidia0"):
        cases.append((["--slots", "cuda:auto"], "no usable GPU"))
    for args, want in cases:
        r = zagent(c, *(args + wd))
        e.check_eq(r.returncode, 2, f"exit code of zagent {' '.join(args)}")
        e.check(r.stderr.startswith("zagent: ") and want in r.stderr,
                f"zagent {' '.join(args)}: message {r.stderr!r} lacks {want!r}")
        e.check_eq(len(r.stderr.strip().splitlines()), 1, f"lines of zagent {' '.join(args)}")
    r = zagent(c, *(["--slots", "cpu:1"] + wd), env=dict(c.env, ZT_SLOTS="x", ZT_HEARTBEAT_MS="y"))
    e.check_eq(r.returncode, 2, "exit code with a bad ZT_HEARTBEAT_MS")
    e.check("ZT_HEARTBEAT_MS" in r.stderr, "message names the variable: " + r.stderr)
    r = zagent(c, "--help")
    e.check_eq(r.returncode, 0, "zagent --help")
    for want in ("--coordinator", "ZT_COORDINATOR", "--slots", "cuda:auto", "--token-file"):
        e.check(want in r.stdout, f"--help lacks {want}")


def unreachable(c):
    # nothing listens there yet
    p = c.start_agent("early", "cpu:1", wait=False)
    e.wait_for(lambda: "cannot reach the coordinator at " + c.addr in c.agent_log("early"), 10,
               "the agent to say the coordinator is unreachable")
    time.sleep(1.0)
    e.check(p.poll() is None, "the agent gave up while the coordinator was unreachable")
    warnings = c.agent_log("early").count("cannot reach the coordinator")
    e.check(warnings <= 2, f"{warnings} warnings in about a second: the agent floods its log")
    c.start_coord()
    e.wait_for(lambda: (c.agent_status("early") or {}).get("registered"), 10,
               "the agent to register once zcoord is up")
    names = [a["name"] for a in c.zctl_json("agents")["agents"]]
    e.check("early" in names, f"agents {names}")
    e.check_eq(c.stop_agent("early"), 0, "zagent exit code on SIGTERM")


def bad_token(c):
    c.coord.send_signal(15)
    c.coord.wait()
    # users and agents hold different credentials: the user token cannot register an agent
    c.coord_env = {"ZT_TOKEN": "user-token-0123456789", "ZT_AGENT_TOKEN": "join-token-0123456789"}
    c.start_coord()
    for name, env in (("wrongtok", dict(c.env, ZT_TOKEN="wrong-token-0123456789")),
                      ("notok", c.env), ("usertok", dict(c.env, ZT_TOKEN="user-token-0123456789"))):
        p = c.start_agent(name, "cpu:1", env=env, wait=False)
        rc = p.wait(20)
        e.check_eq(rc, 1, f"exit code of the agent with {name}")
        log = c.agent_log(name)
        e.check("refused our token" in log and "--token-file or ZT_TOKEN" in log,
                f"{name}: no clear message in:\n{log}")
    path = os.path.join(c.tmp, "token")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("join-token-0123456789\n")
    c.start_agent("goodtok", "cpu:1", extra=["--token-file", path])
    e.check_eq(c.stop_agent("goodtok"), 0, "exit code of the agent with the right token")


def tls(c):
    """zcoord serving TLS: an agent with --tls-ca registers; one without cannot connect (and
    says so, retrying)."""
    if not shutil.which("openssl"):
        print("tls: openssl is not installed; skipped")
        return
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       cwd=c.tmp, capture_output=True)
    if r.returncode != 0:
        print("tls: openssl cannot make a certificate here; skipped")
        return
    c.coord.send_signal(15)
    c.coord.wait()
    c.start_coord(extra=["--tls-cert", os.path.join(c.tmp, "cert.pem"), "--tls-key",
                         os.path.join(c.tmp, "key.pem")])
    token = ["--token-file", os.path.join(c.tmp, "token")]
    c.start_agent("tls", "cpu:1", extra=token + ["--tls-ca", os.path.join(c.tmp, "cert.pem")])
    e.check("(TLS)" in c.agent_log("tls"), "the agent does not say it uses TLS")
    p = c.start_agent("plain", "cpu:1", extra=token, wait=False)
    e.wait_for(lambda: "cannot reach the coordinator" in c.agent_log("plain"), 10,
               "the plaintext agent to report that it cannot connect")
    e.check(p.poll() is None, "the plaintext agent gave up")
    e.check(not (c.agent_status("plain") or {}).get("registered"), "a plaintext agent registered")
    e.check_eq(c.stop_agent("plain"), 0, "exit code of the plaintext agent")
    e.check_eq(c.stop_agent("tls"), 0, "exit code of the TLS agent")


def dup_name(c):
    """A second agent under a live agent's name is refused (it does not hold that agent's
    key) and says so; the first keeps its registration."""
    c.start_agent("dup", "cpu:1")
    p2 = c._popen(c.agent_args("dup", "cpu:1", ["--work-dir", os.path.join(c.tmp, "work_dup2"),
                                                 "--status-file", os.path.join(c.tmp, "dup2.json")]),
                  os.path.join(c.tmp, "zagent_dup2.log"))
    want = "another zagent may not take its name"
    def said():
        with open(os.path.join(c.tmp, "zagent_dup2.log")) as f:
            return want in f.read()
    e.wait_for(said, 20, "the second agent to be refused the name")
    e.check((c.agent_status("dup") or {}).get("registered"), "the first agent lost its registration")
    e.check(not e.pid_alive(p2.pid) or not os.path.exists(os.path.join(c.tmp, "dup2.json")) or
            not json.load(open(os.path.join(c.tmp, "dup2.json"))).get("registered"),
            "the second agent registered under the live agent's name")
    p2.send_signal(15)
    e.check_eq(p2.wait(20), 0, "exit code of the second agent")
    e.check_eq(c.stop_agent("dup"), 0, "exit code of the first agent")


def body(c):
    bad_flags(c)
    unreachable(c)
    dup_name(c)
    bad_token(c)
    tls(c)


if __name__ == "__main__":
    e.run("e2e_agent_errors", body)
