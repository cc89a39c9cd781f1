#!/usr/bin/env python3
"""Interop: a Python grpcio client built from the same zerotrain.proto (and the standard
health.proto) talks to the real zcoord binary: every user RPC including both streams, the
agent RPCs that move a job to COMPLETED (then delete its checkpoint and leave), the health
service (Check and Watch, open to anyone), bearer-token metadata (the scheme in any case), the
two kinds of credential (a user token for zt.v1.Coordinator; the agent join token for
RegisterAgent, then the key it returns for every other agent call), status codes for bad
input, and string fields that are not UTF-8 (refused, or cleaned for log lines, so that every
read stays decodable by this client). Run with Debian's /usr/bin/python3."""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zt_testlib as T  # noqa: E402

T.need_grpc()
import grpc  # noqa: E402

TOKEN = "interop-token-1234"
AGENT_TOKEN = "interop-agent-join-5678"


def expect_code(fn, code, needle=None):
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == code, f"got {e.code()} ({e.details()}), want {code}"
        assert needle is None or needle in e.details(), f"{e.details()!r} lacks {needle!r}"
        return e.details()
    raise AssertionError(f"expected {code}, the call succeeded")


JOB = json.dumps({
    "name": "interop",
    "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16,
              "vocab_size": 64},
    "data": {"train": "data/*.bin"},
    "train": {"steps": 20, "checkpoint_dir": "/ckpt/interop"},
    "resources": {"ranks": 2, "device": "cpu"},
    "max_restarts": 0,
    "deepspeed": {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1},
})


def main():
    with T.CoordTest("zt_interop_") as ct:
        import zerotrain_pb2 as pb
        import zerotrain_pb2_grpc as rpc
        import health_pb2
        import health_pb2_grpc

        tok = ct.token_file("token", TOKEN)
        agent_tok = ct.token_file("agent-token", AGENT_TOKEN)
        zc = ct.zcoord(["--token-file", tok, "--agent-token-file", agent_tok])
        addr = zc.addr
        channel = grpc.insecure_channel(addr)
        md = T.bearer(TOKEN)
        join_md = T.bearer(AGENT_TOKEN)
        user = rpc.CoordinatorStub(channel)
        agent = rpc.AgentControlStub(channel)
        health = health_pb2_grpc.HealthStub(channel)

        # auth: missing and wrong tokens
        expect_code(lambda: user.Ping(pb.PingRequest()), grpc.StatusCode.UNAUTHENTICATED, "missing token")
        expect_code(lambda: user.ListJobs(pb.ListJobsRequest(), metadata=[("authorization", "Bearer x")]),
                    grpc.StatusCode.UNAUTHENTICATED, "invalid token")
        # the agent join token is no user credential
        expect_code(lambda: user.Ping(pb.PingRequest(), metadata=join_md),
                    grpc.StatusCode.PERMISSION_DENIED, "an agent credential cannot make user calls")

        # health: open to anyone (load balancers, kubelet probes), with or without a token
        r = health.Check(health_pb2.HealthCheckRequest())
        assert r.status == health_pb2.HealthCheckResponse.SERVING, r
        r = health.Check(health_pb2.HealthCheckRequest(service=""), metadata=md)
        assert r.status == health_pb2.HealthCheckResponse.SERVING, r
        r = health.Check(health_pb2.HealthCheckRequest(service="zt.v1.Coordinator"), metadata=md)
        assert r.status == health_pb2.HealthCheckResponse.SERVING
        expect_code(lambda: health.Check(health_pb2.HealthCheckRequest(service="nope"), metadata=md),
                    grpc.StatusCode.NOT_FOUND)
        watch = health.Watch(health_pb2.HealthCheckRequest(), metadata=md)
        first = next(watch)
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()

        assert user.Ping(pb.PingRequest(), metadata=md).version

        # submit: invalid, then valid (idempotent with a key)
        details = expect_code(lambda: user.SubmitJob(pb.SubmitJobRequest(
            job_text='{"name": "x", "train": {"stepz": 3}}', job_dir="/tmp", job_path="bad.json"),
            metadata=md), grpc.StatusCode.INVALID_ARGUMENT, "bad.json:")
        print("invalid job refused:", details)
        # the coordinator opens no file a job names: a DeepSpeed config by path is refused
        # without being read (zctl submit sends it inline)
        leak = json.loads(JOB)
        leak["deepspeed"] = "/etc/shadow"
        details = expect_code(lambda: user.SubmitJob(pb.SubmitJobRequest(
            job_text=json.dumps(leak), job_dir="/tmp", job_path="leak.json"), metadata=md),
            grpc.StatusCode.INVALID_ARGUMENT, "the coordinator opens no file a job names")
        assert "root" not in details and "near" not in details, details
        print("a DeepSpeed path refused unread:", details)
        sub = user.SubmitJob(pb.SubmitJobRequest(job_text=JOB, job_dir="/tmp", job_path="job.json",
                                                 submit_key="py-1", user="python"), metadata=md)
        again = user.SubmitJob(pb.SubmitJobRequest(job_text=JOB, job_dir="/tmp", submit_key="py-1"),
                               metadata=md)
        assert again.existed and again.job_id == sub.job_id
        job_id = sub.job_id
        # the job is the token's user's ("admin" for --token-file), whatever the client claims
        j = user.GetJob(pb.GetJobRequest(job_id=job_id), metadata=md)
        assert j.job.user == "admin", j.job

        # string fields must be UTF-8: a request with other bytes (this client library would
        # not send them: the bytes are patched into the encoded message) is refused, names the
        # field, stores nothing, and every later read stays decodable here
        raw_submit = channel.unary_unary("/zt.v1.Coordinator/SubmitJob",
                                         response_deserializer=pb.SubmitJobReply.FromString)
        enc = pb.SubmitJobRequest(job_text=JOB, job_dir="/tmp", user="XXXX").SerializeToString()
        details = expect_code(lambda: raw_submit(enc.replace(b"XXXX", b"\xff" b"bad"), metadata=md),
                              grpc.StatusCode.INVALID_ARGUMENT, "user is not valid UTF-8")
        print("invalid UTF-8 refused:", details)
        enc = pb.SubmitJobRequest(job_text=JOB, job_dir="/tmp/YYYY").SerializeToString()
        expect_code(lambda: raw_submit(enc.replace(b"YYYY", b"\xc3(ab"), metadata=md),
                    grpc.StatusCode.INVALID_ARGUMENT, "job_dir is not valid UTF-8")
        assert [j.id for j in user.ListJobs(pb.ListJobsRequest(), metadata=md).jobs] == [job_id]

        # the Bearer scheme is case-insensitive (RFC 7235), the token is not
        assert user.Ping(pb.PingRequest(), metadata=[("authorization", f"bearer {TOKEN}")]).version
        assert user.Ping(pb.PingRequest(), metadata=[("authorization", f"BEARER  {TOKEN}")]).version
        expect_code(lambda: user.Ping(pb.PingRequest(),
                                      metadata=[("authorization", f"Bearer {TOKEN.upper()}")]),
                    grpc.StatusCode.UNAUTHENTICATED, "invalid token")
        # another scheme is a credential that matches no token (the message asks for a Bearer one)
        details = expect_code(lambda: user.Ping(pb.PingRequest(),
                                                metadata=[("authorization", f"Basic {TOKEN}")]),
                              grpc.StatusCode.UNAUTHENTICATED, "invalid token")
        assert "bearer" in details.lower(), details

        # WatchJob in the background
        updates = []

        def watcher():
            for u in user.WatchJob(pb.WatchJobRequest(job_id=job_id), metadata=md, timeout=30):
                updates.append(u)

        wt = threading.Thread(target=watcher)
        wt.start()

        # an agent runs it: the user token cannot register it, nor can no token; the join
        # token can, and the key it returns carries every later agent call
        expect_code(lambda: agent.RegisterAgent(pb.RegisterAgentRequest(
            name="py-agent", hostname="h", device=pb.DEVICE_CPU, slots=2), metadata=md),
            grpc.StatusCode.PERMISSION_DENIED, "a user token cannot register an agent")
        expect_code(lambda: agent.RegisterAgent(pb.RegisterAgentRequest(
            name="py-agent", hostname="h", device=pb.DEVICE_CPU, slots=2)),
            grpc.StatusCode.UNAUTHENTICATED, "missing agent join token")
        reg = agent.RegisterAgent(pb.RegisterAgentRequest(name="py-agent", hostname="h",
                                                          device=pb.DEVICE_CPU, slots=2),
                                  metadata=join_md)
        assert len(reg.agent_key) == 64, reg
        smd = T.bearer(reg.agent_key)
        # the join token and the user token are no key
        expect_code(lambda: agent.Heartbeat(pb.HeartbeatRequest(name="py-agent", incarnation=reg.incarnation),
                                            metadata=join_md),
                    grpc.StatusCode.UNAUTHENTICATED, "the agent join token is for RegisterAgent only")
        expect_code(lambda: agent.Heartbeat(pb.HeartbeatRequest(name="py-agent", incarnation=reg.incarnation),
                                            metadata=md),
                    grpc.StatusCode.PERMISSION_DENIED, "a user credential cannot make agent calls")
        # and the key is no user credential
        expect_code(lambda: user.ListJobs(pb.ListJobsRequest(), metadata=smd),
                    grpc.StatusCode.PERMISSION_DENIED, "an agent credential cannot make user calls")
        desired = []
        for _ in range(200):
            hb = agent.Heartbeat(pb.HeartbeatRequest(name="py-agent", incarnation=reg.incarnation),
                                 metadata=smd)
            desired = list(hb.workers)
            if len(desired) == 2:
                break
            time.sleep(0.01)
        assert len(desired) == 2, desired
        att = desired[0].attempt_id
        spec = agent.GetAttemptSpec(pb.GetAttemptSpecRequest(attempt_id=att), metadata=smd)
        assert '"interop"' in spec.job_json
        rz = agent.Rendezvous(pb.RendezvousRequest(attempt_id=att, rank=0, value=b"tcp://127.0.0.1:9",
                                                   wait=pb.RendezvousRequest.WAIT_RANK0, wait_ms=1000),
                              metadata=smd)
        assert rz.complete and rz.entries[0].value == b"tcp://127.0.0.1:9"

        def workers(phase, step, code=0):
            return [pb.WorkerStatus(job_id=job_id, attempt_id=att, rank=d.rank, pid=100 + d.rank,
                                    phase=phase, step=step, exit_code=code) for d in desired]

        agent.Heartbeat(pb.HeartbeatRequest(name="py-agent", incarnation=reg.incarnation,
                                            workers=workers(pb.WORKER_PHASE_TRAINING, 1)), metadata=smd)
        steps = [pb.StepMetrics(attempt_id=att, rank=0, step=s,
                                values=[pb.Metric(key="loss", value=4.0 - s * 0.1),
                                        pb.Metric(key="tok_s", value=1234.0)]) for s in range(1, 11)]
        assert agent.ReportMetrics(pb.ReportMetricsRequest(agent="py-agent", steps=steps),
                                   metadata=smd).accepted == 10
        for rank in (0, 1):
            ck = agent.ReportCheckpoint(pb.ReportCheckpointRequest(
                agent="py-agent", attempt_id=att, rank=rank, step=10, dir="/ckpt/interop/step_00000010",
                file=f"rank_{rank:05d}.zts", bytes=2048, crc32c=7), metadata=smd)
            assert ck.committed == (rank == 1), ck
        agent.ReportLogs(pb.ReportLogsRequest(agent="py-agent", entries=[
            pb.LogEntry(attempt_id=att, rank=0, source=pb.LOG_SOURCE_STDOUT, text="step=10 loss=3.000000"),
            pb.LogEntry(attempt_id=att, rank=1, source=pb.LOG_SOURCE_STDERR, text="warning from rank 1"),
        ]), metadata=smd)
        # a log line that is not UTF-8 is kept, its bad bytes replaced
        raw_logs = channel.unary_unary("/zt.v1.AgentControl/ReportLogs",
                                       response_deserializer=pb.ReportLogsReply.FromString)
        enc = pb.ReportLogsRequest(agent="py-agent", entries=[pb.LogEntry(
            attempt_id=att, rank=0, source=pb.LOG_SOURCE_STDOUT, text="ZZZZ then \u20ac")]).SerializeToString()
        assert raw_logs(enc.replace(b"ZZZZ", b"\xff\xfe\xe2\x82"), metadata=smd).accepted == 1

        # GetLogs stream with follow, read in the background until the job ends
        followed = []

        def follower():
            for batch in user.GetLogs(pb.GetLogsRequest(job_id=job_id, follow=True), metadata=md,
                                      timeout=30):
                followed.extend(e.text for e in batch.entries)

        ft = threading.Thread(target=follower)
        ft.start()

        # user views while it runs
        j = user.GetJob(pb.GetJobRequest(job_id=job_id), metadata=md)
        assert j.job.step == 10 and abs(j.job.loss - 3.0) < 1e-9, j.job
        assert j.spec_text == JOB and j.checkpoints == 1
        lst = user.ListJobs(pb.ListJobsRequest(states=[pb.JOB_STATE_RUNNING, pb.JOB_STATE_SCHEDULED]),
                            metadata=md)
        assert [x.id for x in lst.jobs] == [job_id], lst
        m = user.GetMetrics(pb.GetMetricsRequest(job_id=job_id, keys=["loss"], max_points=5),
                            metadata=md)
        assert 5 <= len(m.points) <= 6 and m.points[-1].step == 10, m
        assert all(len(p.values) == 1 and p.values[0].key == "loss" for p in m.points)
        ck = user.ListCheckpoints(pb.ListCheckpointsRequest(job_id=job_id), metadata=md)
        assert len(ck.checkpoints) == 1 and ck.checkpoints[0].state == pb.CHECKPOINT_STATE_COMMITTED
        ag = user.ListAgents(pb.ListAgentsRequest(), metadata=md)
        assert ag.agents[0].name == "py-agent" and len(ag.agents[0].workers) == 2
        logs = [e.text for b in user.GetLogs(pb.GetLogsRequest(job_id=job_id, ranks=[1]), metadata=md)
                for e in b.entries]
        assert "warning from rank 1" in logs and "step=10 loss=3.000000" not in logs, logs
        logs = [e.text for b in user.GetLogs(pb.GetLogsRequest(job_id=job_id, ranks=[0]), metadata=md)
                for e in b.entries]
        assert "???? then \u20ac" in logs, logs

        # finish: both ranks exit 0
        agent.Heartbeat(pb.HeartbeatRequest(name="py-agent", incarnation=reg.incarnation,
                                            workers=workers(pb.WORKER_PHASE_EXITED, 20)), metadata=smd)
        wt.join(30)
        ft.join(30)
        assert not wt.is_alive() and not ft.is_alive()
        assert updates[-1].final and updates[-1].job.state == pb.JOB_STATE_COMPLETED, updates[-1]
        events = [u.event.to_state for u in updates if u.event.kind == "job"]
        assert events[-1] == "COMPLETED" and "RUNNING" in events, events
        assert any(u.metrics_step == 10 for u in updates) or updates[-1].job.step >= 10
        assert "step=10 loss=3.000000" in followed and any("COMPLETED" in t for t in followed), followed

        # CancelJob on a new job, and the error codes for unknown ids
        sub2 = user.SubmitJob(pb.SubmitJobRequest(job_text=JOB.replace("interop", "cancel-me"),
                                                  job_dir="/tmp"), metadata=md)
        c = user.CancelJob(pb.CancelJobRequest(job_id=sub2.job_id, reason="from python"), metadata=md)
        assert c.job.state == pb.JOB_STATE_CANCELED and "from python" in c.job.reason
        assert "(by admin)" in c.job.reason, c.job.reason
        expect_code(lambda: user.CancelJob(pb.CancelJobRequest(job_id=sub2.job_id), metadata=md),
                    grpc.StatusCode.FAILED_PRECONDITION, "already ended")
        expect_code(lambda: user.GetJob(pb.GetJobRequest(job_id=9999), metadata=md),
                    grpc.StatusCode.NOT_FOUND, "9999")
        expect_code(lambda: list(user.WatchJob(pb.WatchJobRequest(job_id=9999), metadata=md)),
                    grpc.StatusCode.NOT_FOUND)
        expect_code(lambda: list(user.GetLogs(pb.GetLogsRequest(job_id=9999), metadata=md)),
                    grpc.StatusCode.NOT_FOUND)
        expect_code(lambda: user.GetJob(pb.GetJobRequest(), metadata=md), grpc.StatusCode.INVALID_ARGUMENT)
        final = list(user.WatchJob(pb.WatchJobRequest(job_id=sub2.job_id), metadata=md))
        assert len(final) == 1 and final[0].final and final[0].job.state == pb.JOB_STATE_CANCELED

        # keep_checkpoints removed the checkpoint: DELETED, listed only on request
        rm = agent.ReportCheckpointRemoved(pb.ReportCheckpointRemovedRequest(
            agent="py-agent", attempt_id=att, rank=0, step=10, dir="/ckpt/interop/step_00000010"),
            metadata=smd)
        assert rm.changed and rm.checkpoint_id > 0, rm
        ck = user.ListCheckpoints(pb.ListCheckpointsRequest(job_id=job_id), metadata=md)
        assert len(ck.checkpoints) == 0, ck
        ck = user.ListCheckpoints(pb.ListCheckpointsRequest(job_id=job_id, include_deleted=True),
                                  metadata=md)
        assert [c.state for c in ck.checkpoints] == [pb.CHECKPOINT_STATE_DELETED], ck
        assert ck.checkpoints[0].deleted_ms > 0
        expect_code(lambda: agent.ReportCheckpointRemoved(pb.ReportCheckpointRemovedRequest(
            attempt_id=att, step=10, dir="relative"), metadata=smd),
            grpc.StatusCode.INVALID_ARGUMENT, "absolute")

        # the agent stops: its last heartbeat says so, and it is LOST at once
        agent.Heartbeat(pb.HeartbeatRequest(name="py-agent", incarnation=reg.incarnation,
                                            leaving=True), metadata=smd)
        for _ in range(100):
            ag = user.ListAgents(pb.ListAgentsRequest(), metadata=md)
            if ag.agents[0].state == pb.AGENT_STATE_LOST:
                break
            time.sleep(0.01)
        assert ag.agents[0].state == pb.AGENT_STATE_LOST, ag

        # SIGTERM: a clean stop
        rc = zc.stop()
        assert rc == 0, f"zcoord exited {rc}"
        print("test_interop: ok")


if __name__ == "__main__":
    main()
