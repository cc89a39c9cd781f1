#!/usr/bin/env python3
"""zctl's coordinator commands against the real zcoord (a Python grpcio client plays the
agent): submit (ids, -o json, invalid files with line:column, --follow with its exit code),
jobs, job, cancel, wait (exit codes 0/3/124), logs (-f, --rank, -o json), agents, and the
messages for an unreachable coordinator, a missing or wrong token, and TLS (flags and their
environment variables); text that is not UTF-8 ($USER, job files, directory names); zcoord's
own command-line errors."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zt_testlib as T  # noqa: E402

T.need_grpc()
import grpc  # noqa: E402

TOKEN = "zctl-test-token"
JOB = """{
  "name": "%s",
  "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16,
            "vocab_size": 64},
  "data": {"train": "data/*.bin"},
  "train": {"steps": 20},
  "resources": {"ranks": %d, "device": "cpu"},
  "deepspeed": {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
}
"""


def zctl(*args, env=None, check=None, timeout=60):
    r = subprocess.run([os.path.join(T.BIN, "zctl"), *args], env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check is not None and r.returncode != check:
        raise AssertionError(f"zctl {' '.join(args)}: exit {r.returncode} (want {check})\n"
                             f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def expect_in(text, needle):
    assert needle in text, f"{needle!r} not in:\n{text}"


def main():
    tmp = tempfile.mkdtemp(prefix="zt_zctl_")
    try:
        T.build_stubs(os.path.join(tmp, "py"))
        import zerotrain_pb2 as pb
        import zerotrain_pb2_grpc as rpc

        tokfile = os.path.join(tmp, "token")
        with open(tokfile, "w") as f:
            f.write(TOKEN + "\n")
        jobdir = os.path.join(tmp, "jobs")
        os.makedirs(jobdir)
        for name, ranks in (("alpha", 2), ("beta", 1), ("gamma", 1)):
            with open(os.path.join(jobdir, f"{name}.json"), "w") as f:
                f.write(JOB % (name, ranks))
        with open(os.path.join(jobdir, "typo.json"), "w") as f:
            f.write((JOB % ("typo", 1)).replace('"steps": 20', '"stpes": 20'))

        # zcoord's own command line
        r = subprocess.run([os.path.join(T.BIN, "zcoord"), "--help"], capture_output=True, text=True)
        assert r.returncode == 0 and "--heartbeat-timeout" in r.stdout and "ZT_HANG_TIMEOUT" in r.stdout
        r = subprocess.run([os.path.join(T.BIN, "zcoord"), "--bogus"], capture_output=True, text=True)
        assert r.returncode == 2 and "unknown option" in r.stderr, r.stderr
        r = subprocess.run([os.path.join(T.BIN, "zcoord"), "--heartbeat-timeout", "soon"],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "--heartbeat-timeout" in r.stderr and "duration" in r.stderr, r.stderr
        # without a token only loopback: a name that starts like a loopback address is not one
        r = subprocess.run([os.path.join(T.BIN, "zcoord"), "--db", os.path.join(tmp, "lb.db"),
                            "--grpc", "127.attacker.example:0", "--http", "off"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "refusing to listen on 127.attacker.example:0" in r.stderr, r.stderr
        r = subprocess.run([os.path.join(T.BIN, "zcoord"), "--db", os.path.join(tmp, "x.db"),
                            "--grpc", "0.0.0.0:0", "--http", "off"],
                           capture_output=True, text=True, env=dict(os.environ, ZT_TOKEN=""))
        assert r.returncode == 2 and "refusing to listen on 0.0.0.0:0 without a token" in r.stderr, r.stderr

        with T.Zcoord(tmp, ["--token-file", tokfile, "--restart-backoff", "100ms"]) as zc:
            base = dict(os.environ, ZT_COORDINATOR=zc.addr)
            base.pop("ZT_TOKEN", None)
            env = dict(base, ZT_TOKEN=TOKEN)

            # reachability and tokens
            r = zctl("jobs", env=base, check=1)
            expect_in(r.stderr, "missing token")
            expect_in(r.stderr, "--token-file")
            r = zctl("jobs", env=dict(base, ZT_TOKEN="wrong"), check=1)
            expect_in(r.stderr, "invalid token")
            r = zctl("--coordinator", f"127.0.0.1:{T.free_port()}", "jobs", env=env, check=1)
            expect_in(r.stderr, "cannot reach the coordinator at 127.0.0.1:")
            expect_in(r.stderr, "is zcoord running there?")
            r = zctl("jobs", "--token-file", tokfile, env=base, check=0)
            expect_in(r.stdout, "no jobs yet")

            # submit
            r = zctl("submit", os.path.join(jobdir, "typo.json"), env=env, check=1)
            expect_in(r.stderr, "typo.json:")
            expect_in(r.stderr, "did you mean")
            r = zctl("submit", os.path.join(jobdir, "missing.json"), env=env, check=1)
            expect_in(r.stderr, "cannot read the job file")
            r = zctl("submit", os.path.join(jobdir, "alpha.json"), env=env, check=0)
            expect_in(r.stdout, "submitted job 1 (alpha)")
            expect_in(r.stdout, "zctl wait 1")
            r = zctl("submit", os.path.join(jobdir, "beta.json"), "-o", "json", env=env, check=0)
            assert json.loads(r.stdout)["job_id"] == 2

            # jobs / job / agents
            r = zctl("jobs", env=env, check=0)
            expect_in(r.stdout, "alpha")
            expect_in(r.stdout, "QUEUED")
            expect_in(r.stdout, "no live agent offers cpu slots")
            jobs = json.loads(zctl("jobs", "-o", "json", env=env, check=0).stdout)["jobs"]
            assert [j["id"] for j in jobs] == [2, 1] and jobs[0]["state"] == "QUEUED"
            r = zctl("job", "1", env=env, check=0)
            expect_in(r.stdout, "job 1: alpha")
            expect_in(r.stdout, f"directory:  {jobdir}")
            detail = json.loads(zctl("job", "1", "-o", "json", env=env, check=0).stdout)
            assert detail["spec_text"] == JOB % ("alpha", 2) and detail["spec_dir"] == jobdir
            assert '"train"' in detail["spec_json"]
            zctl("job", "77", env=env, check=1)
            r = zctl("job", "x1", env=env, check=2)
            expect_in(r.stderr, "not a job id")
            r = zctl("agents", env=env, check=0)
            expect_in(r.stdout, "no agents registered")

            # an agent runs job 1; `zctl wait` follows it to COMPLETED
            channel = grpc.insecure_channel(zc.addr)
            md = [("authorization", f"Bearer {TOKEN}")]
            agent_stub = rpc.AgentControlStub(channel)
            n1 = T.Agent(pb, agent_stub, "n1", slots=2, metadata=md)
            desired = n1.wait_desired(2)
            r = zctl("agents", env=env, check=0)
            expect_in(r.stdout, "n1")
            expect_in(r.stdout, "ALIVE")
            expect_in(r.stdout, "0/2 free")
            r = zctl("wait", "1", "--timeout", "500ms", env=env, check=124)
            expect_in(r.stderr, "did not end within")
            waiter = subprocess.Popen([os.path.join(T.BIN, "zctl"), "wait", "1"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            n1.heartbeat(n1.status(desired, pb.WORKER_PHASE_TRAINING, 3))
            att = desired[0].attempt_id
            agent_stub.ReportLogs(pb.ReportLogsRequest(agent="n1", entries=[
                pb.LogEntry(attempt_id=att, rank=0, source=pb.LOG_SOURCE_STDOUT, text="step=3 loss=2.500000"),
                pb.LogEntry(attempt_id=att, rank=1, source=pb.LOG_SOURCE_STDERR, text="rank one speaks")]),
                metadata=md)
            logs_f = subprocess.Popen([os.path.join(T.BIN, "zctl"), "logs", "1", "-f"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.3)
            n1.heartbeat(n1.status(desired, pb.WORKER_PHASE_EXITED, 20, 0))
            out, err = waiter.communicate(timeout=30)
            assert waiter.returncode == 0, (out, err)
            expect_in(out, "job 1 COMPLETED")
            out, err = logs_f.communicate(timeout=30)
            assert logs_f.returncode == 0, err
            expect_in(out, "[rank 0] step=3 loss=2.500000")
            expect_in(out, "[coordinator] [job] RUNNING -> COMPLETED")
            n1.heartbeat()

            r = zctl("logs", "1", "--rank", "1", "--no-events", env=env, check=0)
            assert r.stdout.strip().endswith("[rank 1 err] rank one speaks"), r.stdout
            assert "step=3" not in r.stdout and "[coordinator]" not in r.stdout
            lines = [json.loads(x) for x in zctl("logs", "1", "-o", "json", env=env, check=0).stdout.splitlines()]
            assert any(x["source"] == "EVENT" for x in lines) and any(x["rank"] == 1 for x in lines)
            r = zctl("logs", "1", "--tail", "1", env=env, check=0)
            assert len(r.stdout.strip().splitlines()) == 1, r.stdout

            # job 2 (placed next) is canceled: cancel again fails, wait says CANCELED (3)
            n1.wait_desired(1, newer_than=att)
            r = zctl("cancel", "2", "--reason", "not needed", env=env, check=0)
            expect_in(r.stdout, "job 2 CANCELED: canceled: not needed")
            r = zctl("cancel", "2", env=env, check=1)
            expect_in(r.stderr, "already ended")
            r = zctl("wait", "2", env=env, check=3)
            expect_in(r.stdout, "job 2 CANCELED")
            final = json.loads(zctl("wait", "2", "-o", "json", env=env, check=3).stdout)
            assert final["state"] == "CANCELED" and final["id"] == 2, final
            n1.heartbeat()

            # submit --follow: state lines and progress until the end; exit code of the job
            follow = subprocess.Popen([os.path.join(T.BIN, "zctl"), "submit",
                                       os.path.join(jobdir, "gamma.json"), "--follow"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            g = n1.wait_desired(1, newer_than=att)
            n1.heartbeat(n1.status(g, pb.WORKER_PHASE_TRAINING, 5))
            time.sleep(0.5)
            n1.heartbeat(n1.status(g, pb.WORKER_PHASE_EXITED, 20, 1))
            out, err = follow.communicate(timeout=30)
            assert follow.returncode == 1, (follow.returncode, out, err)
            expect_in(out, "submitted job 3 (gamma)")
            expect_in(out, "SCHEDULED")
            expect_in(out, "job 3: SCHEDULED -> RUNNING: all 1 ranks of attempt 1 are running")
            expect_in(out, "job 3: [rank] RUNNING -> EXITED")
            expect_in(out, "job 3: step 5/20")
            expect_in(out, "job 3 FAILED")
            expect_in(out, "exited with code 1")
            assert zctl("jobs", "--state", "failed,canceled", "-o", "json", env=env,
                        check=0).stdout.count('"id"') == 2
            zctl("jobs", "--state", "sleeping", env=env, check=2)

            # the token file from the environment, as zagent reads it: ZT_TOKEN_FILE wins over
            # ZT_TOKEN; a bad path is named with where it came from
            r = zctl("jobs", env=dict(base, ZT_TOKEN_FILE=tokfile, ZT_TOKEN="wrong"), check=0)
            expect_in(r.stdout, "gamma")
            r = zctl("jobs", env=dict(base, ZT_TOKEN_FILE=os.path.join(tmp, "nope")), check=1)
            expect_in(r.stderr, "cannot read the token file")
            expect_in(r.stderr, "(ZT_TOKEN_FILE)")
            zctl("jobs", f"--token-file={tokfile}", env=base, check=0)

            # text that is not UTF-8: a $USER with other bytes is cleaned, a job file is refused
            # with its line and column, a directory name too; every listing stays printable
            envb = {k.encode(): v.encode() for k, v in env.items()}
            envb[b"USER"] = b"\xff" b"bad"
            r = zctl("submit", os.path.join(jobdir, "beta.json"), "-o", "json", env=envb, check=0)
            bad_user_job = json.loads(r.stdout)["job_id"]
            jobs = json.loads(zctl("jobs", "-o", "json", env=env, check=0).stdout)["jobs"]
            assert [j["user"] for j in jobs if j["id"] == bad_user_job] == ["?bad"], jobs
            with open(os.path.join(jobdir, "latin1.json"), "wb") as f:
                f.write((JOB % ("caf\u00e9", 1)).encode("latin-1"))
            r = zctl("submit", os.path.join(jobdir, "latin1.json"), env=env, check=1)
            expect_in(r.stderr, "latin1.json:2:15: the job file is not valid UTF-8")
            baddir = os.path.join(jobdir.encode(), b"dir\xff")
            os.makedirs(baddir)
            with open(os.path.join(baddir, b"job.json"), "w") as f:
                f.write(JOB % ("odd-dir", 1))
            r = subprocess.run([os.path.join(T.BIN, "zctl").encode(), b"submit",
                                os.path.join(baddir, b"job.json")], env=envb, capture_output=True)
            assert r.returncode == 1, r
            assert b"is not a valid UTF-8 path" in r.stderr, r.stderr
            assert zc.stop() == 0

        # the HTTP health page
        import urllib.request
        import urllib.error
        http_dir = os.path.join(tmp, "http")
        os.makedirs(http_dir)
        with T.Zcoord(http_dir, ["--http", "127.0.0.1:0"]) as zc:
            with urllib.request.urlopen(f"http://{zc.http}/healthz", timeout=10) as r:
                assert r.status == 200 and r.read() == b"ok\n"
            try:
                urllib.request.urlopen(f"http://{zc.http}/nope", timeout=10)
                raise AssertionError("expected 404")
            except urllib.error.HTTPError as e:
                assert e.code == 404
            assert zc.stop() == 0

        # TLS: a certificate for 127.0.0.1; zctl needs --tls-ca
        if shutil.which("openssl"):
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                            os.path.join(tmp, "key.pem"), "-out", os.path.join(tmp, "cert.pem"),
                            "-days", "2", "-subj", "/CN=localhost", "-addext",
                            "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True,
                           capture_output=True)
            tls_dir = os.path.join(tmp, "tls")
            os.makedirs(tls_dir)
            with T.Zcoord(tls_dir, ["--token-file", tokfile, "--tls-cert", os.path.join(tmp, "cert.pem"),
                                    "--tls-key", os.path.join(tmp, "key.pem")]) as zc:
                env = dict(os.environ, ZT_COORDINATOR=zc.addr, ZT_TOKEN=TOKEN)
                r = zctl("--tls-ca", os.path.join(tmp, "cert.pem"), "jobs", env=env, check=0)
                expect_in(r.stdout, "no jobs yet")
                r = zctl("jobs", env=env, check=1)
                expect_in(r.stderr, "cannot reach the coordinator")
                r = zctl("--tls-ca", os.path.join(tmp, "nope.pem"), "jobs", env=env, check=1)
                expect_in(r.stderr, "--tls-ca")
                # --tls-ca=FILE and ZT_TLS_CA, as zagent takes them
                r = zctl(f"--tls-ca={os.path.join(tmp, 'cert.pem')}", "jobs", env=env, check=0)
                expect_in(r.stdout, "no jobs yet")
                r = zctl("jobs", env=dict(env, ZT_TLS_CA=os.path.join(tmp, "cert.pem")), check=0)
                expect_in(r.stdout, "no jobs yet")
                r = zctl("jobs", env=dict(env, ZT_TLS_CA=tokfile), check=1)
                expect_in(r.stderr, "(ZT_TLS_CA) holds no PEM certificate")
        print("test_zctl: ok")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
