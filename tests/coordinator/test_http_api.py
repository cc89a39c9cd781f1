#!/usr/bin/env python3
"""zcoord's HTTP side against the real binary: the credential (bearer token, the sign-in form's
sign-in cookie, the CSRF guard), the JSON API under /api/v1/ while a simulated agent runs a job
(jobs, one job with its ranks, metrics downsampled and by `since`, checkpoints, logs by rank,
agents, cluster, cancel, the errors 400/404/405/409), the Server-Sent Events streams fed after
each commit, /metrics read by the Prometheus client library's own parser, and HTTPS with the
gRPC certificate. Run with Debian's /usr/bin/python3 (python3-grpcio, python3-prometheus-client)."""
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zt_testlib as T  # noqa: E402

T.need_grpc()
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:
    print(f"python3-prometheus-client missing: {e} (scripts/install-deps.sh installs it)")
    sys.exit(1 if os.environ.get("CI") else 77)

TOKEN = "http-token-5678-abcd"
AGENT_TOKEN = "http-agent-join-token-9012"
JOB = json.dumps({
    "name": "web-job",
    "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16,
              "vocab_size": 64},
    "data": {"train": "data/*.bin"},
    "train": {"steps": 100, "checkpoint_dir": "/ckpt/web"},
    "resources": {"ranks": 2, "device": "cpu"},
    "max_restarts": 0,
    "deepspeed": {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1},
})


class Http:
    """A tiny client of one zcoord HTTP address (keeps no connection open)."""

    def __init__(self, addr, token=None, tls_ca=None):
        self.host, port = addr.rsplit(":", 1)
        self.port, self.token, self.ca = int(port), token, tls_ca

    def conn(self, timeout=10):
        if self.ca:
            ctx = ssl.create_default_context(cafile=self.ca)
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def req(self, method, path, body=None, headers=None, auth=True, timeout=10):
        h = dict(headers or {})
        if auth and self.token:
            h["Authorization"] = f"Bearer {self.token}"
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data
        finally:
            c.close()

    def json(self, path, status=200, method="GET", **kw):
        st, hd, data = self.req(method, path, **kw)
        assert st == status, f"{method} {path}: {st} {data[:300]!r}, want {status}"
        assert hd["content-type"].startswith("application/json"), hd
        return json.loads(data)


class Sse:
    """Reads one event stream in a thread, keeping (event, data) pairs."""

    def __init__(self, client, path):
        self.events, self.c = [], client.conn(timeout=30)
        h = {"Authorization": f"Bearer {client.token}"} if client.token else {}
        self.c.request("GET", path, headers=h)
        self.r = self.c.getresponse()
        assert self.r.status == 200 and self.r.getheader("Content-Type") == "text/event-stream"
        self.t = threading.Thread(target=self.read, daemon=True)
        self.t.start()

    def read(self):
        ev, data = None, None
        try:
            for raw in self.r:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    ev = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif line == "" and ev:
                    self.events.append((ev, json.loads(data)))
                    ev = data = None
        except Exception:  # the stream ended or was closed under the reader
            pass

    def wait(self, pred, timeout=5.0, what="event"):
        end = time.time() + timeout
        while time.time() < end:
            for e in list(self.events):
                if pred(e):
                    return e
            time.sleep(0.02)
        raise AssertionError(f"no {what} within {timeout}s; got {[e[0] for e in self.events]}")

    def close(self):
        # shut the socket down under the reader thread (closing it would wait for the reader)
        self.c.sock.shutdown(socket.SHUT_RDWR)
        self.t.join(5)


def check_auth(api, addr):
    anon = Http(addr)
    # /healthz and /readyz stay open
    for p in ("/healthz", "/readyz"):
        st, _, body = anon.req("GET", p)
        assert st == 200 and body == b"ok\n", (p, st, body)
    # no credential, a wrong one, the agent join token (no user credential): 401 with a JSON
    # error; a browser gets the sign-in form
    for hdrs in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"},
                 {"Authorization": f"Bearer {AGENT_TOKEN}"}):
        st, hd, body = anon.req("GET", "/api/v1/jobs", headers=hdrs)
        assert st == 401 and "error" in json.loads(body), (st, body)
        assert hd.get("www-authenticate", "").startswith("Bearer"), hd
    st, _, body = anon.req("GET", "/metrics")
    assert st == 401, st
    st, hd, body = anon.req("GET", "/", headers={"Accept": "text/html"})
    assert st == 401 and b'action="/login"' in body and b"password" in body, (st, body[:200])
    # the scheme in any case
    st, _, _ = anon.req("GET", "/api/v1/jobs", headers={"Authorization": f"bearer {TOKEN}"})
    assert st == 200, st
    # sign-in: a wrong token, a cross-site form, then the right one
    form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://{addr}",
            "Host": addr}
    st, _, body = anon.req("POST", "/login", body="token=nope", headers=form)
    assert st == 401 and b"Wrong token" in body, (st, body[:200])
    st, _, body = anon.req("POST", "/login", body="token=" + urllib.parse.quote(AGENT_TOKEN),
                           headers=form)
    assert st == 401 and b"Wrong token" in body, (st, body[:200])
    evil = dict(form, Origin="http://evil.example")
    st, _, _ = anon.req("POST", "/login", body=f"token={TOKEN}", headers=evil)
    assert st == 403, st
    st, hd, _ = anon.req("POST", "/login", body="token=" + urllib.parse.quote(TOKEN), headers=form)
    assert st == 303 and hd["location"] == "/", (st, hd)
    cookie = hd["set-cookie"]
    for attr in ("HttpOnly", "SameSite=Strict", "Path=/"):
        assert attr in cookie, cookie
    signin = cookie.split(";")[0]
    st, _, body = anon.req("GET", "/api/v1/jobs", headers={"Cookie": signin})
    assert st == 200, (st, body)
    forged = signin[:-4] + ("0000" if not signin.endswith("0000") else "1111")
    st, _, _ = anon.req("GET", "/api/v1/jobs", headers={"Cookie": forged})
    assert st == 401, st
    # a state-changing call with only the cookie needs the CSRF guard
    st, _, body = anon.req("POST", "/api/v1/jobs/999/cancel", headers={"Cookie": signin})
    assert st == 403 and b"X-Requested-With" in body, (st, body)
    st, _, body = anon.req("POST", "/api/v1/jobs/999/cancel",
                           headers={"Cookie": signin, "X-Requested-With": "fetch"})
    assert st == 404, (st, body)
    return signin


def check_metrics_text(api, job_id):
    st, hd, body = api.req("GET", "/metrics")
    assert st == 200 and hd["content-type"].startswith("text/plain; version=0.0.4"), (st, hd)
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    want = {"zt_jobs": "gauge", "zt_agents": "gauge", "zt_slots": "gauge", "zt_slots_used": "gauge",
            "zt_job_step": "gauge", "zt_job_loss": "gauge", "zt_job_tokens_per_second": "gauge",
            "zt_job_memory_bytes": "gauge", "zt_job_mfu_ratio": "gauge",
            "zt_job_step_phase_seconds": "gauge", "zt_job_memory_category_bytes": "gauge",
            "zt_rpc_requests": "counter", "zt_heartbeats_received": "counter",
            "zt_http_requests": "counter", "zt_store_commit_seconds": "histogram",
            "zt_rpc_duration_seconds": "histogram"}
    for name, typ in want.items():
        assert name in fams, f"{name} missing from /metrics: {sorted(fams)}"
        assert fams[name].type == typ, (name, fams[name].type)

    def value(sample, **labels):
        for f in fams.values():
            for s in f.samples:
                if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        raise AssertionError(f"{sample}{labels} not in /metrics")

    assert value("zt_jobs", state="RUNNING") == 1
    assert value("zt_agents", state="ALIVE") == 1
    assert value("zt_slots", device="cpu") == 2 and value("zt_slots_used", device="cpu") == 2
    jid = str(job_id)
    assert value("zt_job_step", job_id=jid, rank="1") == 30
    assert value("zt_job_memory_bytes", job_id=jid, rank="0") == 1000000
    assert abs(value("zt_job_loss", job_id=jid, job="web-job") - 0.9) < 1e-9
    assert abs(value("zt_job_step_phase_seconds", job_id=jid, phase="backward") - 0.02) < 1e-9
    assert value("zt_job_memory_category_bytes", job_id=jid, category="params") == 4096
    assert value("zt_heartbeats_received_total") >= 2
    assert value("zt_rpc_requests_total", method="/zt.v1.AgentControl/ReportMetrics") >= 1
    assert value("zt_http_requests_total", code="2xx") >= 1
    assert value("zt_store_commit_seconds_count") >= 1
    hb = "/zt.v1.AgentControl/Heartbeat"
    assert value("zt_rpc_duration_seconds_count", method=hb) >= 2
    assert value("zt_rpc_duration_seconds_bucket", method=hb, le="+Inf") == \
        value("zt_rpc_duration_seconds_count", method=hb)
    assert value("zt_rpc_duration_seconds_sum", method=hb) > 0


def main():
    with T.CoordTest("zt_http_", log_tail=12000) as ct:
        tmp = ct.tmp
        import grpc
        import zerotrain_pb2 as pb
        import zerotrain_pb2_grpc as rpc

        tok = ct.token_file("token", TOKEN)
        agent_tok = ct.token_file("agent-token", AGENT_TOKEN)
        zc = ct.zcoord(["--token-file", tok, "--agent-token-file", agent_tok,
                        "--http", "127.0.0.1:0"])
        api = Http(zc.http, TOKEN)
        check_auth(api, zc.http)

        md = [("authorization", f"Bearer {TOKEN}")]
        channel = grpc.insecure_channel(zc.addr)
        user = rpc.CoordinatorStub(channel)
        agent_stub = rpc.AgentControlStub(channel)
        ag = T.FakeAgent(pb, agent_stub, "web-agent", slots=2, join_token=AGENT_TOKEN)
        job_id = user.SubmitJob(pb.SubmitJobRequest(job_text=JOB, job_dir="/tmp"), metadata=md).job_id
        desired = ag.wait_desired(2)
        att = desired[0].attempt_id

        def workers(step, phase=pb.WORKER_PHASE_TRAINING):
            return [pb.WorkerStatus(job_id=job_id, attempt_id=att, rank=d.rank, pid=4000 + d.rank,
                                    phase=phase, step=step, memory_bytes=1000000 + d.rank,
                                    peak_memory_bytes=2000000, tokens_per_s=500.0)
                    for d in desired]

        # event streams, opened before anything happens
        all_stream = Sse(api, "/api/v1/stream")
        job_stream = Sse(api, f"/api/v1/jobs/{job_id}/stream")
        all_stream.wait(lambda e: e[0] == "hello")
        job_stream.wait(lambda e: e[0] == "hello")

        ag.heartbeat(workers(1))
        line = ("loss={loss} lr=0.0003 grad_norm=0.5 tok_s=1000 step_ms=40 fwd_ms=10 bwd_ms=20 "
                "opt_ms=5 comm_ms=5 mfu=0.25 mem_params=4096 mem_grads=4096")
        steps = [pb.StepMetrics(attempt_id=att, rank=0, step=s, values=[
            pb.Metric(key=k, value=float(v.format(loss=4.0 - s * 0.1)))
            for k, v in (kv.split("=") for kv in line.split())]) for s in range(1, 31)]
        assert agent_stub.ReportMetrics(pb.ReportMetricsRequest(agent="web-agent", steps=steps),
                                        metadata=ag.md).accepted == 30
        ag.heartbeat(workers(30))
        agent_stub.ReportLogs(pb.ReportLogsRequest(agent="web-agent", entries=[
            pb.LogEntry(attempt_id=att, rank=0, source=pb.LOG_SOURCE_STDOUT, text="rank zero says hi"),
            pb.LogEntry(attempt_id=att, rank=1, source=pb.LOG_SOURCE_STDERR, text="<b>rank one</b>"),
        ]), metadata=ag.md)
        for rank in (0, 1):
            agent_stub.ReportCheckpoint(pb.ReportCheckpointRequest(
                agent="web-agent", attempt_id=att, rank=rank, step=30, dir="/ckpt/web/step_00000030",
                file=f"rank_{rank:05d}.zts", bytes=4096, crc32c=1), metadata=ag.md)

        # jobs: filter, paging, errors
        jobs = api.json("/api/v1/jobs?state=running,SCHEDULED")["jobs"]
        assert [j["id"] for j in jobs] == [job_id], jobs
        assert jobs[0]["name"] == "web-job" and jobs[0]["state"] == "RUNNING" and jobs[0]["step"] == 30
        assert abs(jobs[0]["loss"] - 1.0) < 1e-9, jobs[0]
        assert api.json("/api/v1/jobs?state=COMPLETED")["jobs"] == []
        err = api.json("/api/v1/jobs?state=BOGUS", 400)["error"]
        assert "state" in err, err
        assert "limit" in api.json("/api/v1/jobs?limit=x", 400)["error"]
        job2 = user.SubmitJob(pb.SubmitJobRequest(job_text=JOB.replace("web-job", "second")
                                                  .replace("/ckpt/web", "/ckpt/second"),
                                                  job_dir="/tmp"), metadata=md).job_id
        page = api.json("/api/v1/jobs?limit=1")
        assert [j["id"] for j in page["jobs"]] == [job2] and page["next_before"] == job2, page
        page = api.json(f"/api/v1/jobs?limit=1&before={job2}")
        assert [j["id"] for j in page["jobs"]] == [job_id], page

        # one job
        d = api.json(f"/api/v1/jobs/{job_id}")
        assert d["job"]["state"] == "RUNNING" and d["spec"]["name"] == "web-job", d["job"]
        assert d["spec"]["resources"]["ranks"] == 2
        assert len(d["attempts"]) == 1 and d["attempts"][0]["state"] in ("STARTING", "RUNNING")
        ranks = d["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1], ranks
        assert all(r["agent"] == "web-agent" and r["memory_bytes"] >= 1000000 and r["pid"] >= 4000
                   and r["phase"] == "TRAINING" and r["last_report_ms"] > 0 for r in ranks), ranks
        assert any(e["to"] == "RUNNING" for e in d["events"]), d["events"]
        assert d["checkpoints"] == 1 and d["latest"]["step"] == 30, d["latest"]
        assert "not found" in api.json("/api/v1/jobs/999999", 404)["error"]
        assert "job id" in api.json("/api/v1/jobs/abc", 400)["error"]
        assert api.json("/api/v1/nope", 404)["error"]
        api.json(f"/api/v1/jobs/{job_id}", 405, method="DELETE")

        # metrics: downsampled, increments, key filter
        m = api.json(f"/api/v1/jobs/{job_id}/metrics?max_points=5")
        assert 5 <= len(m["steps"]) <= 6 and m["steps"][-1] == 30, m["steps"]
        assert len(m["series"]["loss"]) == len(m["steps"]) and m["stride"] >= 6, m
        m = api.json(f"/api/v1/jobs/{job_id}/metrics?since=27&keys=loss,lr")
        assert m["steps"] == [28, 29, 30] and sorted(m["series"]) == ["loss", "lr"], m
        assert m["last_step"] == 30
        assert "max_points" in api.json(f"/api/v1/jobs/{job_id}/metrics?max_points=0", 400)["error"]
        api.json("/api/v1/jobs/999999/metrics", 404)

        # checkpoints, logs
        ck = api.json(f"/api/v1/jobs/{job_id}/checkpoints")["checkpoints"]
        assert len(ck) == 1 and ck[0]["state"] == "COMMITTED" and ck[0]["step"] == 30, ck
        logs = api.json(f"/api/v1/jobs/{job_id}/logs?rank=1")["logs"]
        assert [(x["rank"], x["text"]) for x in logs] == [(1, "<b>rank one</b>")], logs
        logs = api.json(f"/api/v1/jobs/{job_id}/logs")
        texts = [x["text"] for x in logs["logs"]]
        assert "rank zero says hi" in texts and any("RUNNING" in t for t in texts), texts
        more = api.json(f"/api/v1/jobs/{job_id}/logs?since={logs['next']}")
        assert more["logs"] == [] and more["next"] == logs["next"], more
        assert len(api.json(f"/api/v1/jobs/{job_id}/logs?limit=1")["logs"]) == 1
        assert "rank" in api.json(f"/api/v1/jobs/{job_id}/logs?rank=x", 400)["error"]
        api.json("/api/v1/jobs/999999/logs", 404)

        # agents, cluster
        agents = api.json("/api/v1/agents")["agents"]
        assert agents[0]["name"] == "web-agent" and agents[0]["slots"] == 2, agents
        assert agents[0]["used_slots"] == 2 and len(agents[0]["workers"]) == 2, agents
        cl = api.json("/api/v1/cluster")
        assert cl["slots"]["cpu"] == {"total": 2, "used": 2, "free": 0}, cl
        assert [q["id"] for q in cl["queue"]] == [job2] and cl["queue"][0]["pending_reason"], cl

        # the streams heard the commits: job updates, metrics, ranks, logs
        all_stream.wait(lambda e: e[0] == "job" and e[1]["id"] == job_id and e[1]["step"] == 30)
        job_stream.wait(lambda e: e[0] == "metrics" and e[1]["step"] == 30)
        job_stream.wait(lambda e: e[0] == "ranks" and e[1]["ranks"][1]["memory_bytes"] == 1000001)
        job_stream.wait(lambda e: e[0] == "log" and e[1]["text"] == "<b>rank one</b>")
        t0 = time.time()
        agent_stub.ReportMetrics(pb.ReportMetricsRequest(agent="web-agent", steps=[
            pb.StepMetrics(attempt_id=att, rank=0, step=31, values=[
                pb.Metric(key=k, value=float(v.format(loss=0.9)))
                for k, v in (kv.split("=") for kv in line.split())])]), metadata=ag.md)
        job_stream.wait(lambda e: e[0] == "metrics" and e[1]["step"] == 31, timeout=2.0)
        print(f"a metric point reached the job stream {1000 * (time.time() - t0):.1f} ms after its report")
        # a stream of a missing job is refused
        assert api.req("GET", "/api/v1/jobs/999999/stream")[0] == 404

        check_metrics_text(api, job_id)

        # cancel: by bearer (no CSRF header needed), then again (409)
        c = api.json(f"/api/v1/jobs/{job_id}/cancel", method="POST")
        assert c["job"]["state"] == "CANCELED" and "canceled" in c["job"]["reason"], c
        assert "(by admin)" in c["job"]["reason"], c["job"]["reason"]
        assert "already ended" in api.json(f"/api/v1/jobs/{job_id}/cancel", 409, method="POST")["error"]
        job_stream.wait(lambda e: e[0] == "event" and e[1]["to"] == "CANCELED")
        all_stream.wait(lambda e: e[0] == "job" and e[1]["id"] == job_id and e[1]["state"] == "CANCELED")
        assert api.json(f"/api/v1/jobs/{job_id}")["job"]["state"] == "CANCELED"
        all_stream.close()
        job_stream.close()

        # SIGTERM with streams open ends them and stops quickly
        s = Sse(api, "/api/v1/stream")
        t0 = time.time()
        assert zc.stop() == 0
        s.t.join(5)
        assert not s.t.is_alive() and time.time() - t0 < 10, "stream did not end at shutdown"
        print(f"zcoord stopped {time.time() - t0:.2f} s after SIGTERM with an event stream open")

        # HTTPS with the certificate and key of gRPC
        cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        zc = ct.zcoord(["--token-file", tok, "--http", "127.0.0.1:0", "--tls-cert", cert,
                        "--tls-key", key])
        sec = Http(zc.http, TOKEN, tls_ca=cert)
        st, _, body = sec.req("GET", "/healthz")
        assert st == 200 and body == b"ok\n", (st, body)
        assert sec.json("/api/v1/jobs?limit=5")["jobs"], "the jobs survived the restart"
        st, hd, _ = sec.req("POST", "/login", body=f"token={TOKEN}", auth=False,
                            headers={"Content-Type": "application/x-www-form-urlencoded",
                                     "X-Requested-With": "test"})
        assert st == 200 and "Secure" in hd["set-cookie"], (st, hd)
        plain = Http(zc.http, TOKEN)
        try:
            st = plain.req("GET", "/healthz", timeout=2)[0]
        except (OSError, http.client.HTTPException):
            st = None
        assert st != 200, "plain HTTP answered on the HTTPS port"
        zc.kill()

        # without a token: loopback host names only (DNS rebinding), the CSRF guard still on
        zc = ct.zcoord(["--http", "127.0.0.1:0"])
        open_api = Http(zc.http)
        assert open_api.json("/api/v1/jobs?limit=1")["jobs"], "no jobs without a token"
        port = zc.http.rsplit(":", 1)[1]
        st, _, body = open_api.req("GET", "/api/v1/jobs", headers={"Host": f"evil.example:{port}"})
        assert st == 403 and b"loopback" in body, (st, body)
        st, _, _ = open_api.req("GET", "/api/v1/jobs", headers={"Host": f"localhost:{port}"})
        assert st == 200, st
        # a name that starts like a loopback address is still a name
        for host in (f"127.0.0.1.evil.example:{port}", "127.attacker.example", "127.0.0.1evil"):
            st, _, _ = open_api.req("GET", "/api/v1/jobs", headers={"Host": host})
            assert st == 403, (host, st)
        for host in (f"127.0.0.1:{port}", "127.9.8.7", "[::1]", f"[::1]:{port}"):
            st, _, _ = open_api.req("GET", "/api/v1/jobs", headers={"Host": host})
            assert st == 200, (host, st)
        st, _, _ = open_api.req("POST", f"/api/v1/jobs/{job2}/cancel")
        assert st == 403, st
        st, _, body = open_api.req("POST", f"/api/v1/jobs/{job2}/cancel", headers={"X-Requested-With": "t"})
        assert st == 200 and json.loads(body)["job"]["state"] == "CANCELED", (st, body)
        st, _, _ = open_api.req("GET", "/login")
        assert st == 303, st
        print("test_http_api: ok")


if __name__ == "__main__":
    main()
