#!/usr/bin/env python3
"""zctl's coordinator commands against the real zcoord (a Python grpcio client plays the
agent): submit (ids, -o json, invalid files with line:column, --follow with its exit code),
jobs, job, cancel, wait (exit codes 0/3/124), logs (-f, --rank, -o json), agents, and the
messages for an unreachable coordinator, a missing or wrong token, and TLS (flags and their
environment variables), the agent join token refused for user commands and the submitter
recorded by the token's name; text that is not UTF-8 ($USER, job files, directory names); zcoord's
own command-line errors."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zt_testlib as T  # noqa: E402

T.need_grpc()
import grpc  # noqa: E402

TOKEN = "zctl-test-token-0042"
AGENT_TOKEN = "zctl-agent-join-token-0077"
# worker output that would clear the screen, retitle the window, ring the bell and turn text red
EVIL = "evil \x1b[2J\x1b]0;title\x07 over\rwrite \u009b31m caf\u00e9 \x7f"
EVIL_SHOWN = "evil \\x1b[2J\\x1b]0;title\\x07 over\\x0dwrite \\u009b31m caf\u00e9 \\x7f"
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
        T.write_token(tokfile, TOKEN)
        agent_tokfile = os.path.join(tmp, "agent-token")
        T.write_token(agent_tokfile, AGENT_TOKEN)
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

        # a token file that others may read, or that holds a mangled token, stops zcoord at once
        loose = os.path.join(tmp, "loose-token")
        T.write_token(loose, TOKEN)
        os.chmod(loose, 0o644)
        r = subprocess.run([os.path.join(T.BIN, "zcoord"), "--db", os.path.join(tmp, "tok.db"),
                            "--http", "off", "--token-file", loose], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2, (r.returncode, r.stderr)
        expect_in(r.stderr, f"the token file (--token-file) {loose} is open to group or others (mode 0644)")
        expect_in(r.stderr, f"chmod 600 {loose}")
        twolines = os.path.join(tmp, "twolines-token")
        T.write_token(twolines, TOKEN + "\n" + TOKEN)
        r = subprocess.run([os.path.join(T.BIN, "zcoord"), "--db", os.path.join(tmp, "tok.db"),
                            "--http", "off"], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, ZT_TOKEN_FILE=twolines))
        assert r.returncode == 2, (r.returncode, r.stderr)
        expect_in(r.stderr, f"the token file (ZT_TOKEN_FILE) {twolines} holds more than one line")
        assert TOKEN not in r.stderr, r.stderr

        with T.Zcoord(tmp, ["--token-file", tokfile, "--agent-token-file", agent_tokfile,
                            "--restart-backoff", "100ms"]) as zc:
            base = dict(os.environ, ZT_COORDINATOR=zc.addr)
            base.pop("ZT_TOKEN", None)
            env = dict(base, ZT_TOKEN=TOKEN)

            # reachability and tokens
            r = zctl("jobs", env=base, check=1)
            expect_in(r.stderr, "missing token")
            expect_in(r.stderr, "--token-file")
            r = zctl("jobs", env=dict(base, ZT_TOKEN="wrong"), check=1)
            expect_in(r.stderr, "invalid token")
            # the agent join token is no user credential
            r = zctl("jobs", "--token-file", agent_tokfile, env=base, check=1)
            expect_in(r.stderr, "an agent credential cannot make user calls")
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
            # files that hold no job: each named, with what is wrong, before anything is sent
            odd = os.path.join(tmp, "odd")
            os.makedirs(os.path.join(odd, "adir.json"))
            for name, text, want in (("empty.json", "", "the job file is empty"),
                                     ("blank.json", " \n\t\r\n", "the job file holds only whitespace"),
                                     ("adir.json", None, "is a directory, not a job file")):
                p = os.path.join(odd, name)
                if text is not None:
                    with open(p, "w") as f:
                        f.write(text)
                r = zctl("submit", p, env=env, check=1)
                expect_in(r.stderr, f"zctl: {p}: {want}")
                assert "job_text" not in r.stderr, r.stderr
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
            agent_stub = rpc.AgentControlStub(channel)
            n1 = T.FakeAgent(pb, agent_stub, "n1", slots=2, join_token=AGENT_TOKEN)
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
                pb.LogEntry(attempt_id=att, rank=1, source=pb.LOG_SOURCE_STDERR, text="rank one speaks"),
                pb.LogEntry(attempt_id=att, rank=0, source=pb.LOG_SOURCE_STDOUT, text=EVIL)]),
                metadata=n1.md)
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

            # worker output cannot steer the terminal: controls come out as visible text
            # (bytes: text mode would turn the carriage return into a newline)
            zctl_bin = os.path.join(T.BIN, "zctl")
            out = subprocess.run([zctl_bin, "logs", "1", "--rank", "0", "--no-events"], env=env,
                                 capture_output=True, timeout=60, check=True).stdout
            assert ("[rank 0] " + EVIL_SHOWN + "\n").encode() in out, out
            assert not any(c in out for c in (b"\x1b", b"\x07", b"\r", b"\x7f", b"\xc2\x9b")), out
            out = subprocess.run([zctl_bin, "logs", "1", "--rank", "0", "--no-events", "--raw"],
                                 env=env, capture_output=True, timeout=60, check=True).stdout
            assert ("[rank 0] " + EVIL + "\n").encode() in out, out
            lines = [json.loads(x) for x in zctl("logs", "1", "--rank", "0", "--no-events", "-o", "json",
                                                 env=env, check=0).stdout.splitlines()]
            assert EVIL in [x["text"] for x in lines], lines
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
            # the coordinator names who canceled: the token's user
            expect_in(r.stdout, "not needed (by admin)")
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
            seen = []
            reader = threading.Thread(target=lambda: seen.extend(follow.stdout), daemon=True)
            reader.start()
            g = n1.wait_desired(1, newer_than=att)
            # the worker starts once the follower has shown the job scheduled (each line reaches
            # the pipe as it is printed): a follower that attaches later shows the state it
            # finds, and a loaded machine may attach it late
            deadline = time.time() + 60
            while not any("SCHEDULED" in line for line in seen) and time.time() < deadline:
                n1.heartbeat()
                time.sleep(0.1)
            assert any("SCHEDULED" in line for line in seen), seen
            n1.heartbeat(n1.status(g, pb.WORKER_PHASE_TRAINING, 5))
            # the rank exits once the follower has shown step 5 (a loaded machine may take a
            # while to deliver it; the exit would overtake it)
            deadline = time.time() + 60
            while not any("step 5/20" in line for line in seen) and time.time() < deadline:
                n1.heartbeat(n1.status(g, pb.WORKER_PHASE_TRAINING, 5))
                time.sleep(0.1)
            n1.heartbeat(n1.status(g, pb.WORKER_PHASE_EXITED, 20, 1))
            follow.wait(timeout=30)
            reader.join(timeout=30)
            out, err = "".join(seen), follow.stderr.read()
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
            # zctl checks the token file as zcoord does
            r = zctl("jobs", "--token-file", loose, env=base, check=1)
            expect_in(r.stderr, f"the token file (--token-file) {loose} is open to group or others")
            expect_in(r.stderr, f"chmod 600 {loose}")
            short = os.path.join(tmp, "short-token")
            T.write_token(short, "tiny")
            r = zctl("jobs", env=dict(base, ZT_TOKEN_FILE=short), check=1)
            expect_in(r.stderr, f"the token file (ZT_TOKEN_FILE) {short} holds a secret of 4 bytes")
            spaced = os.path.join(tmp, "spaced-token")
            T.write_token(spaced, TOKEN + " ")
            r = zctl("jobs", "--token-file", spaced, env=base, check=1)
            expect_in(r.stderr, "has a space at byte")

            # a UTF-8 byte order mark is skipped with a note, here and by the coordinator
            bom = os.path.join(odd, "bom.json")
            with open(bom, "wb") as f:
                f.write(b"\xef\xbb\xbf" + (JOB % ("bommed", 1)).encode())
            r = zctl("submit", bom, "-o", "json", env=env, check=0)
            expect_in(r.stderr, f"{bom}: skipped the UTF-8 byte order mark")
            assert r.stderr.count("byte order mark") == 1, r.stderr
            bom_job = json.loads(r.stdout)["job_id"]
            zctl("cancel", str(bom_job), env=env, check=0)
            # text that is not UTF-8: a job file is refused with its line and column, a directory
            # name too; every listing stays printable. The submitter is the token's user
            # ("admin"), not what $USER says (a $USER with other bytes: below, without a token)
            envb = {k.encode(): v.encode() for k, v in env.items()}
            envb[b"USER"] = b"\xff" b"bad"
            # (a job of its own: beta's checkpoint_dir belongs to job 2)
            with open(os.path.join(jobdir, "delta.json"), "w") as f:
                f.write(JOB % ("delta", 1))
            r = zctl("submit", os.path.join(jobdir, "delta.json"), "-o", "json", env=envb, check=0)
            bad_user_job = json.loads(r.stdout)["job_id"]
            jobs = json.loads(zctl("jobs", "-o", "json", env=env, check=0).stdout)["jobs"]
            assert [j["user"] for j in jobs if j["id"] == bad_user_job] == ["admin"], jobs
            assert all(j["user"] == "admin" for j in jobs), jobs
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
            # without a token the submitter is what the client says: a $USER with bytes that
            # are not UTF-8 is cleaned, and the listing stays printable
            envb = {k.encode(): v.encode() for k, v in os.environ.items() if k != "ZT_TOKEN"}
            envb[b"ZT_COORDINATOR"] = zc.addr.encode()
            envb[b"USER"] = b"\xff" b"bad"
            r = subprocess.run([os.path.join(T.BIN, "zctl").encode(), b"submit",
                                os.path.join(jobdir, "beta.json").encode(), b"-o", b"json"],
                               env=envb, capture_output=True, timeout=60)
            assert r.returncode == 0, r
            bad_user_job = json.loads(r.stdout)["job_id"]
            open_env = dict(os.environ, ZT_COORDINATOR=zc.addr)
            open_env.pop("ZT_TOKEN", None)
            jobs = json.loads(zctl("jobs", "-o", "json", env=open_env, check=0).stdout)["jobs"]
            assert [j["user"] for j in jobs if j["id"] == bad_user_job] == ["?bad"], jobs
            # and a cancel names nobody (no user token)
            r = zctl("cancel", str(bad_user_job), "--reason", "tidy", env=open_env, check=0)
            assert "(by " not in r.stdout, r.stdout
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
                # plain text to a TLS port: zctl says so instead of "is zcoord running there?"
                r = zctl("jobs", env=env, check=1)
                expect_in(r.stderr, f"the coordinator at {zc.addr} speaks TLS; pass --tls-ca FILE")
                assert "is zcoord running there" not in r.stderr, r.stderr
                r = zctl("--tls-ca", os.path.join(tmp, "nope.pem"), "jobs", env=env, check=1)
                expect_in(r.stderr, "--tls-ca")
                # --tls-ca=FILE and ZT_TLS_CA, as zagent takes them
                r = zctl(f"--tls-ca={os.path.join(tmp, 'cert.pem')}", "jobs", env=env, check=0)
                expect_in(r.stdout, "no jobs yet")
                r = zctl("jobs", env=dict(env, ZT_TLS_CA=os.path.join(tmp, "cert.pem")), check=0)
                expect_in(r.stdout, "no jobs yet")
                r = zctl("jobs", env=dict(env, ZT_TLS_CA=tokfile), check=1)
                expect_in(r.stderr, "(ZT_TLS_CA) holds no PEM certificate")
            # TLS to a plain-text port: the reverse
            plain_dir = os.path.join(tmp, "plain")
            os.makedirs(plain_dir)
            with T.Zcoord(plain_dir, ["--token-file", tokfile]) as zc:
                env = dict(os.environ, ZT_COORDINATOR=zc.addr, ZT_TOKEN=TOKEN)
                r = zctl("--tls-ca", os.path.join(tmp, "cert.pem"), "jobs", env=env, check=1)
                expect_in(r.stderr, f"the coordinator at {zc.addr} speaks plain text, not TLS; drop --tls-ca")
                r = zctl("jobs", env=dict(env, ZT_TLS_CA=os.path.join(tmp, "cert.pem")), check=1)
                expect_in(r.stderr, "speaks plain text, not TLS; drop ZT_TLS_CA")
        print("test_zctl: ok")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
