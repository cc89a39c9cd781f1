#!/usr/bin/env python3
"""End to end, mutual TLS: zcoord serves TLS with client roots (--tls-client-ca) and has user
tokens but no agent join token. An agent whose client certificate the roots signed, for its
own name, registers with no token and runs a job; the same certificate under another name is
refused and the agent exits 1 saying so; a certificate from another authority cannot connect;
an agent with neither certificate nor join token is refused."""
import os
import shutil
import subprocess

import e2e_util as e

USER_TOKEN = "mtls-user-token-0123456789"


def openssl(c, *args):
    r = subprocess.run(["openssl", *args], cwd=c.tmp, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)}: {r.stderr}")


def make_ca(c, name):
    openssl(c, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}")


def make_cert(c, ca, name, cn, san=None):
    openssl(c, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", f"/CN={cn}")
    ext = []
    if san:
        with open(os.path.join(c.tmp, f"{name}.ext"), "w") as f:
            f.write(f"subjectAltName={san}\n")
        ext = ["-extfile", f"{name}.ext"]
    openssl(c, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", *ext)
    os.chmod(os.path.join(c.tmp, f"{name}.key"), 0o600)


def body(c):
    if not shutil.which("openssl"):
        print("skipped: openssl is not installed")
        raise SystemExit(77)
    make_ca(c, "ca")
    make_ca(c, "rogue")
    make_cert(c, "ca", "server", "localhost", "DNS:localhost,IP:127.0.0.1")
    make_cert(c, "ca", "m1", "m1")
    make_cert(c, "rogue", "r1", "r1")
    p = lambda n: os.path.join(c.tmp, n)
    c.coord_env = {"ZT_TOKEN": USER_TOKEN}
    c.start_coord(extra=["--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
                         "--tls-client-ca", p("ca.pem")])
    # zctl: the user token over TLS; agents: no token at all
    c.env = dict(c.env, ZT_TLS_CA=p("ca.pem"), ZT_TOKEN=USER_TOKEN)
    agent_env = dict(c.env)
    agent_env.pop("ZT_TOKEN")

    def cert_args(name):
        return ["--tls-cert", p(f"{name}.pem"), "--tls-key", p(f"{name}.key")]

    c.start_agent("m1", "cpu:1", extra=cert_args("m1"), env=agent_env)
    c.make_data()
    jid = c.submit(c.write_job("mtls", steps=8, ranks=1, ranks_per_node=1))
    j = c.wait_job(jid, ("COMPLETED", "FAILED", "CANCELED"), 120)
    e.check_eq(j["job"]["state"], "COMPLETED", "the job run by the certified agent")
    e.check_eq(j["job"]["user"], "admin", "the job's user (the user token's name)")

    # m1's certificate under another name
    q = c.start_agent("m2", "cpu:1", extra=cert_args("m1"), env=agent_env, wait=False)
    e.check_eq(q.wait(20), 1, "exit code of an agent naming itself m2 with m1's certificate")
    e.check("the client certificate is for agent m1, not m2" in c.agent_log("m2"),
            "no clear refusal in:\n" + c.agent_log("m2"))

    # another authority's certificate: the handshake fails, the agent keeps trying
    q = c.start_agent("r1", "cpu:1", extra=cert_args("r1"), env=agent_env, wait=False)
    e.wait_for(lambda: "cannot reach the coordinator" in c.agent_log("r1"), 15,
               "the rogue agent to report that it cannot connect")
    e.check(q.poll() is None, "the rogue agent gave up instead of retrying")
    e.check(not (c.agent_status("r1") or {}).get("registered"), "a rogue certificate registered")
    c.stop_agent("r1")

    # neither a certificate nor a join token: this coordinator takes agents by certificate only
    q = c.start_agent("bare", "cpu:1", env=agent_env, wait=False)
    e.check_eq(q.wait(20), 1, "exit code of an agent without credentials")
    e.check("takes no agents" in c.agent_log("bare"), "no clear refusal in:\n" + c.agent_log("bare"))

    names = [a["name"] for a in c.zctl_json("agents")["agents"]]
    e.check(names == ["m1"], f"agents {names}")
    e.check_eq(c.stop_agent("m1"), 0, "exit code of the certified agent")


if __name__ == "__main__":
    e.run("e2e_mtls", body)
