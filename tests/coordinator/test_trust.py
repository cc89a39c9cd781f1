#!/usr/bin/env python3
"""Who may say what, against the real zcoord: a user token (--token-file, user "admin"), a named
user (--users-file, "alice"), an agent join token (--agent-token-file) and two simulated agents
that registered with it (A runs the job, B runs nothing of it). Every forged or misdirected call
is refused with its status code, and afterwards the job's metrics, logs, checkpoints, events and
rendezvous are exactly what they were (read back with the user calls):

  (a) a user token making agent calls (Heartbeat, reports)             PERMISSION_DENIED
  (b) the join token (or an agent key) making user calls           PERMISSION_DENIED
  (c) B's key reporting metrics, logs, checkpoint shards, the
      rendezvous or reading the spec of A's ranks                      PERMISSION_DENIED
  (d) B heartbeating as A                                               PERMISSION_DENIED
  (e) reports that name agent "A" sent with B's key                 PERMISSION_DENIED
  (f) checkpoint shards with '..' or '.' in dir, a dir outside the job's checkpoint_dir (or
      not directly in it), file "../x" or another rank's file, bytes 0  refused
  (g) B reporting A's checkpoint removed: refused, it stays COMMITTED
  (h) RegisterAgent with A's name while A is alive: refused (FAILED_PRECONDITION) without A's
      key as previous_agent_key (or with B's), accepted with it; the old key then stops
  (i) a made-up key                                                 UNAUTHENTICATED
  (j) A's own reports are accepted (before and after the attacks)
  (k) jobs record the token's user ("admin", "alice"), not what the client claims, and a
      cancel's events say "(by NAME)"
Then: a coordinator with user tokens but no join token takes no agent; one without any token
(loopback) lets anyone register but still wants each agent's key on every other agent call.
Run with Debian's /usr/bin/python3 (python3-grpcio, python3-grpc-tools)."""
import json
import os
import secrets
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zt_testlib as T  # noqa: E402

T.need_grpc()
import grpc  # noqa: E402

TOKEN = "trust-admin-token-0001"
ALICE_TOKEN = "trust-alice-token-0002"
AGENT_TOKEN = "trust-agent-join-token-0003"
CKPT_DIR = "/ckpt/trust"
JOB = json.dumps({
    "name": "trust",
    "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16,
              "vocab_size": 64},
    "data": {"train": "data/*.bin"},
    "train": {"steps": 100, "checkpoint_dir": CKPT_DIR},
    "resources": {"ranks": 2, "ranks_per_node": 2, "device": "cpu"},
    "max_restarts": 0,
    "deepspeed": {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1},
})

DENIED = grpc.StatusCode.PERMISSION_DENIED
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def refused(fn, code, needle=None, what=""):
    """Calls fn and asserts that it fails with code (one code or a tuple of codes)."""
    codes = code if isinstance(code, tuple) else (code,)
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() in codes, f"{what}: got {e.code()} ({e.details()}), want {codes}"
        assert needle is None or needle in e.details(), f"{what}: {e.details()!r} lacks {needle!r}"
        print(f"refused as it should be: {what}: {e.code().name}: {e.details()}")
        return e.details()
    raise AssertionError(f"{what}: the call succeeded, want {codes}")


def main():
    with T.CoordTest("zt_trust_", log_tail=12000) as ct:
        tmp = ct.tmp
        import zerotrain_pb2 as pb
        import zerotrain_pb2_grpc as rpc

        tok = ct.token_file("token", TOKEN)
        users = ct.token_file("users", f"# named users\nalice {ALICE_TOKEN}")
        join = ct.token_file("agent-token", AGENT_TOKEN)
        zc = ct.zcoord(["--token-file", tok, "--users-file", users, "--agent-token-file", join,
                        "--heartbeat-timeout", "60s"])
        channel = grpc.insecure_channel(zc.addr)
        user = rpc.CoordinatorStub(channel)
        stub = rpc.AgentControlStub(channel)
        md, alice_md, join_md = T.bearer(TOKEN), T.bearer(ALICE_TOKEN), T.bearer(AGENT_TOKEN)

        # A registers and gets the job (B comes later, with one slot: nothing of it runs there)
        a = T.FakeAgent(pb, stub, "A", slots=2, join_token=AGENT_TOKEN, hostname="host-a")
        sub = user.SubmitJob(pb.SubmitJobRequest(job_text=JOB, job_dir="/tmp", user="mallory"),
                             metadata=md)
        job_id = sub.job_id
        desired = a.wait_desired(2)
        att = desired[0].attempt_id
        assert sorted(d.rank for d in desired) == [0, 1], desired
        b = T.FakeAgent(pb, stub, "B", slots=1, join_token=AGENT_TOKEN, hostname="host-b")
        assert b.key != a.key
        assert not b.heartbeat().workers, "B was given work"

        # (j) A's own reports are accepted: the ranks run, metrics, logs, a checkpoint, rendezvous
        a.heartbeat(a.status(desired, pb.WORKER_PHASE_TRAINING, 5))
        for _ in range(200):
            j = user.GetJob(pb.GetJobRequest(job_id=job_id), metadata=md).job
            if j.state == pb.JOB_STATE_RUNNING:
                break
            time.sleep(0.01)
        assert j.state == pb.JOB_STATE_RUNNING, j

        def steps(first, last, loss0=4.0, rank=0, attempt=att):
            return [pb.StepMetrics(attempt_id=attempt, rank=rank, step=s,
                                   values=[pb.Metric(key="loss", value=loss0 - s * 0.1)])
                    for s in range(first, last + 1)]

        assert a.report_metrics(steps(1, 5)).accepted == 5
        assert a.report_logs([pb.LogEntry(attempt_id=att, rank=r, source=pb.LOG_SOURCE_STDOUT,
                                          text=f"rank {r} of A") for r in (0, 1)]).accepted == 2
        for r in (0, 1):
            ck = a.report_checkpoint(att, r, 10, f"{CKPT_DIR}/step_00000010")
            assert ck.committed == (r == 1), ck
        rz = stub.Rendezvous(pb.RendezvousRequest(attempt_id=att, rank=0, value=b"tcp://host-a:7",
                                                  wait=pb.RendezvousRequest.WAIT_NONE), metadata=a.md)
        assert rz.entries[0].value == b"tcp://host-a:7", rz
        assert '"trust"' in stub.GetAttemptSpec(pb.GetAttemptSpecRequest(attempt_id=att),
                                                metadata=a.md).job_json

        def snapshot():
            """Everything the reports could change, as the user calls show it."""
            g = user.GetJob(pb.GetJobRequest(job_id=job_id), metadata=md)
            m = user.GetMetrics(pb.GetMetricsRequest(job_id=job_id), metadata=md)
            ck = user.ListCheckpoints(pb.ListCheckpointsRequest(job_id=job_id, include_deleted=True),
                                      metadata=md)
            logs = [(e.rank, e.source, e.text) for bt in
                    user.GetLogs(pb.GetLogsRequest(job_id=job_id), metadata=md) for e in bt.entries]
            rz = stub.Rendezvous(pb.RendezvousRequest(attempt_id=att, rank=0,
                                                      wait=pb.RendezvousRequest.WAIT_NONE),
                                 metadata=a.md)
            ranks = [(w.attempt_id, w.rank, w.phase, w.step, w.pid) for ag in
                     user.ListAgents(pb.ListAgentsRequest(), metadata=md).agents
                     if ag.name == "A" for w in ag.workers]
            return {
                "job": (g.job.state, g.job.step, round(g.job.loss, 9), g.job.reason, g.checkpoints),
                "attempts": [(x.id, x.state) for x in g.attempts],
                "events": [(e.kind, e.from_state, e.to_state, e.reason) for e in g.events],
                "metrics": [(p.step, [(v.key, v.value) for v in p.values]) for p in m.points],
                "checkpoints": [(c.id, c.step, c.path, c.state, c.shards, c.bytes,
                                 sorted((s.rank, s.file, s.bytes, s.crc32c) for s in c.shard))
                                for c in ck.checkpoints],
                "logs": logs,
                "rendezvous": [(e.rank, e.value) for e in rz.entries],
                "A's workers": sorted(ranks),
            }

        before = snapshot()
        assert [p[0] for p in before["metrics"]] == [1, 2, 3, 4, 5], before["metrics"]
        assert [(c[1], c[3]) for c in before["checkpoints"]] == \
            [(10, pb.CHECKPOINT_STATE_COMMITTED)], before["checkpoints"]
        assert (0, pb.LOG_SOURCE_STDOUT, "rank 0 of A") in before["logs"], before["logs"]
        assert len(before["A's workers"]) == 2, before

        # (a) a user token cannot make agent calls
        for who, umd in (("admin", md), ("alice", alice_md)):
            refused(lambda: stub.Heartbeat(pb.HeartbeatRequest(
                name="A", incarnation=a.inc,
                workers=a.status(desired, pb.WORKER_PHASE_EXITED, 99, 1)), metadata=umd),
                DENIED, "a user credential cannot make agent calls", f"{who}'s user token: Heartbeat")
            refused(lambda: stub.ReportCheckpoint(pb.ReportCheckpointRequest(
                agent="A", attempt_id=att, rank=0, step=30, dir=f"{CKPT_DIR}/step_00000030",
                file="rank_00000.zts", bytes=1, crc32c=1), metadata=umd),
                DENIED, "a user credential cannot make agent calls", f"{who}'s user token: ReportCheckpoint")
            refused(lambda: stub.ReportMetrics(pb.ReportMetricsRequest(
                agent="A", steps=steps(100, 100, loss0=99.0)), metadata=umd),
                DENIED, None, f"{who}'s user token: ReportMetrics")
            refused(lambda: stub.ReportLogs(pb.ReportLogsRequest(agent="A", entries=[pb.LogEntry(
                attempt_id=att, rank=0, source=pb.LOG_SOURCE_STDOUT, text="forged by a user")]),
                metadata=umd), DENIED, None, f"{who}'s user token: ReportLogs")
            refused(lambda: stub.ReportCheckpointRemoved(pb.ReportCheckpointRemovedRequest(
                agent="A", attempt_id=att, rank=0, step=10, dir=f"{CKPT_DIR}/step_00000010"),
                metadata=umd), DENIED, None, f"{who}'s user token: ReportCheckpointRemoved")
            refused(lambda: stub.RegisterAgent(pb.RegisterAgentRequest(
                name="C", hostname="h", device=pb.DEVICE_CPU, slots=1), metadata=umd),
                DENIED, "a user token cannot register an agent", f"{who}'s user token: RegisterAgent")

        # (b) the join token and an agent's key cannot make user calls
        for what, amd in (("the join token", join_md), ("A's key", a.md)):
            refused(lambda: user.ListJobs(pb.ListJobsRequest(), metadata=amd), DENIED,
                    "an agent credential cannot make user calls", f"{what}: ListJobs")
            refused(lambda: user.GetJob(pb.GetJobRequest(job_id=job_id), metadata=amd), DENIED,
                    None, f"{what}: GetJob")
            refused(lambda: user.SubmitJob(pb.SubmitJobRequest(job_text=JOB, job_dir="/tmp"),
                                           metadata=amd), DENIED, None, f"{what}: SubmitJob")
            refused(lambda: user.CancelJob(pb.CancelJobRequest(job_id=job_id, reason="agent says"),
                                           metadata=amd), DENIED, None, f"{what}: CancelJob")
            refused(lambda: list(user.GetLogs(pb.GetLogsRequest(job_id=job_id), metadata=amd)),
                    DENIED, None, f"{what}: GetLogs")
        # and the join token is no agent key either
        refused(lambda: stub.Heartbeat(pb.HeartbeatRequest(name="A", incarnation=a.inc),
                                       metadata=join_md),
                (grpc.StatusCode.UNAUTHENTICATED, DENIED), None, "the join token: Heartbeat")

        # (c) B's key reports for A's ranks (its own name, or no name, in the agent field)
        for field in ("B", ""):
            refused(lambda: b.report_metrics(steps(100, 101, loss0=99.0), agent=field), DENIED,
                    "was not placed on agent B", f"B ({field!r}): metrics of A's rank 0")
            refused(lambda: b.report_logs([pb.LogEntry(attempt_id=att, rank=1,
                                                       source=pb.LOG_SOURCE_STDERR,
                                                       text="forged by B")], agent=field),
                    DENIED, "was not placed on agent B", f"B ({field!r}): logs of A's rank 1")
            for r in (0, 1):
                refused(lambda: b.report_checkpoint(att, r, 30, f"{CKPT_DIR}/step_00000030",
                                                    agent=field),
                        DENIED, "was not placed on agent B",
                        f"B ({field!r}): checkpoint shard of A's rank {r}")
        refused(lambda: stub.Rendezvous(pb.RendezvousRequest(
            attempt_id=att, rank=0, value=b"tcp://evil:1", wait=pb.RendezvousRequest.WAIT_NONE),
            metadata=b.md), DENIED, None, "B: rendezvous of A's rank 0")
        refused(lambda: stub.GetAttemptSpec(pb.GetAttemptSpecRequest(attempt_id=att), metadata=b.md),
                DENIED, "has no rank on agent B", "B: the spec of A's attempt")
        # a batch with one step of A's among others is refused whole
        refused(lambda: b.report_metrics(steps(100, 100, attempt=att + 1000) + steps(101, 101)),
                DENIED, None, "B: a batch with one of A's steps")
        # B's own heartbeat that claims A's ranks exited changes nothing of A's
        b.heartbeat([pb.WorkerStatus(job_id=job_id, attempt_id=att, rank=r, pid=6666,
                                     phase=pb.WORKER_PHASE_EXITED, step=99, exit_code=1)
                     for r in (0, 1)])

        # (d) B heartbeating as A (A's name and incarnation, B's key)
        refused(lambda: stub.Heartbeat(pb.HeartbeatRequest(
            name="A", incarnation=a.inc, workers=a.status(desired, pb.WORKER_PHASE_EXITED, 99, 1)),
            metadata=b.md), DENIED, "cannot send agent A's heartbeat", "B heartbeating as A")
        refused(lambda: stub.Heartbeat(pb.HeartbeatRequest(name="A", incarnation=a.inc, leaving=True),
                                       metadata=b.md), DENIED, None, "B saying A leaves")

        # (e) reports that name agent A, sent with B's key
        refused(lambda: b.report_metrics(steps(100, 100, loss0=99.0), agent="A"), DENIED,
                "the key of agent B cannot report as agent A", "B as A: metrics")
        refused(lambda: b.report_logs([pb.LogEntry(attempt_id=att, rank=0, source=pb.LOG_SOURCE_STDOUT,
                                                   text="forged by B as A")], agent="A"),
                DENIED, "cannot report as agent A", "B as A: logs")
        refused(lambda: b.report_checkpoint(att, 0, 30, f"{CKPT_DIR}/step_00000030", agent="A"),
                DENIED, "cannot report as agent A", "B as A: checkpoint shard")
        refused(lambda: b.report_checkpoint_removed(att, 0, 10, f"{CKPT_DIR}/step_00000010", agent="A"),
                DENIED, "cannot report as agent A", "B as A: checkpoint removed")
        # and A's key cannot claim to be B either
        refused(lambda: a.report_metrics(steps(6, 6), agent="B"), DENIED,
                "the key of agent A cannot report as agent B", "A as B: metrics")

        # (f) checkpoint shards of A's own ranks that name what they must not
        bad = [
            ("'..' in dir", dict(dir=f"{CKPT_DIR}/../etc/step_00000030"), INVALID),
            ("'..' at the end of the parent", dict(dir=f"{CKPT_DIR}/x/../step_00000030"), INVALID),
            ("'.' in dir", dict(dir=f"{CKPT_DIR}/./step_00000030"), INVALID),
            ("a relative dir", dict(dir="ckpt/trust/step_00000030"), INVALID),
            ("a dir not ending in step_<n>", dict(dir=f"{CKPT_DIR}/evil"), INVALID),
            ("a dir outside checkpoint_dir", dict(dir="/etc/step_00000030"), DENIED),
            ("a dir next to checkpoint_dir", dict(dir="/ckpt/trustx/step_00000030"), DENIED),
            ("the parent of checkpoint_dir", dict(dir="/ckpt/step_00000030"), DENIED),
            ("a dir below checkpoint_dir", dict(dir=f"{CKPT_DIR}/sub/step_00000030"), DENIED),
            ("file ../x", dict(file="../x"), INVALID),
            ("file with a '/'", dict(file="sub/rank_00000.zts"), INVALID),
            ("another rank's file", dict(file="rank_00001.zts"), INVALID),
            ("a file of another name", dict(file="meta.json"), INVALID),
            ("bytes 0", dict(bytes=0), INVALID),
            ("negative bytes", dict(bytes=-5), INVALID),
        ]
        for what, kw, code in bad:
            args = dict(dir=f"{CKPT_DIR}/step_00000030")
            args.update(kw)
            refused(lambda: a.report_checkpoint(att, 0, 30, **args), code, None, f"A's shard: {what}")
        # the removal of a checkpoint elsewhere is refused the same way
        refused(lambda: a.report_checkpoint_removed(att, 0, 10, "/etc/step_00000010"), DENIED, None,
                "A removing a dir outside checkpoint_dir")
        refused(lambda: a.report_checkpoint_removed(att, 0, 10, f"{CKPT_DIR}/../step_00000010"),
                INVALID, None, "A removing a dir with '..'")

        # (g) B reporting A's checkpoint removed
        refused(lambda: b.report_checkpoint_removed(att, 0, 10, f"{CKPT_DIR}/step_00000010"), DENIED,
                "was not placed on agent B", "B removing A's checkpoint")
        refused(lambda: b.report_checkpoint_removed(att, 1, 10, f"{CKPT_DIR}/step_00000010", agent=""),
                DENIED, None, "B removing A's checkpoint (no agent field)")

        # (i) a made-up key, and other garbage in its place
        for what, fake in (("a made-up key", secrets.token_hex(32)),
                           ("A's key with one digit changed",
                            a.key[:-1] + ("0" if a.key[-1] != "0" else "1")),
                           ("a short bearer", "0123456789abcdef")):
            fmd = T.bearer(fake)
            refused(lambda: stub.Heartbeat(pb.HeartbeatRequest(name="A", incarnation=a.inc),
                                           metadata=fmd),
                    grpc.StatusCode.UNAUTHENTICATED, "unknown agent key", f"{what}: Heartbeat")
            refused(lambda: stub.ReportMetrics(pb.ReportMetricsRequest(
                agent="A", steps=steps(100, 100, loss0=99.0)), metadata=fmd),
                grpc.StatusCode.UNAUTHENTICATED, None, f"{what}: ReportMetrics")
            refused(lambda: stub.ReportCheckpoint(pb.ReportCheckpointRequest(
                agent="A", attempt_id=att, rank=0, step=30, dir=f"{CKPT_DIR}/step_00000030",
                file="rank_00000.zts", bytes=1), metadata=fmd),
                grpc.StatusCode.UNAUTHENTICATED, None, f"{what}: ReportCheckpoint")
        refused(lambda: stub.Heartbeat(pb.HeartbeatRequest(name="A", incarnation=a.inc)),
                grpc.StatusCode.UNAUTHENTICATED, None, "no credential: Heartbeat")

        # nothing of all that was stored, changed or ended
        time.sleep(0.2)  # the state thread has seen B's heartbeat
        after = snapshot()
        for key in before:
            assert after[key] == before[key], f"{key} changed:\nbefore {before[key]}\nafter  {after[key]}"
        print("nothing stored: job, attempts, events, metrics, checkpoints, logs, rendezvous, workers unchanged")

        # (j) again: A's reports still count, and show
        assert a.report_metrics(steps(6, 6)).accepted == 1
        assert a.report_logs([pb.LogEntry(attempt_id=att, rank=1, source=pb.LOG_SOURCE_STDERR,
                                          text="A still speaks")], agent="").accepted == 1
        for r in (0, 1):
            ck = a.report_checkpoint(att, r, 20, f"{CKPT_DIR}/step_00000020")
            assert ck.committed == (r == 1), ck
        a.heartbeat(a.status(desired, pb.WORKER_PHASE_TRAINING, 6))
        now = snapshot()
        assert [p[0] for p in now["metrics"]] == [1, 2, 3, 4, 5, 6], now["metrics"]
        assert now["job"][0] == pb.JOB_STATE_RUNNING and now["job"][1] == 6, now["job"]
        assert (1, pb.LOG_SOURCE_STDERR, "A still speaks") in now["logs"], now["logs"]
        assert sorted((c[1], c[3]) for c in now["checkpoints"]) == \
            [(10, pb.CHECKPOINT_STATE_COMMITTED), (20, pb.CHECKPOINT_STATE_COMMITTED)], now["checkpoints"]
        # A may report its own checkpoint removed
        rm = a.report_checkpoint_removed(att, 0, 10, f"{CKPT_DIR}/step_00000010")
        assert rm.changed, rm
        ck = user.ListCheckpoints(pb.ListCheckpointsRequest(job_id=job_id, include_deleted=True),
                                  metadata=md)
        assert sorted((c.step, c.state) for c in ck.checkpoints) == \
            [(10, pb.CHECKPOINT_STATE_DELETED), (20, pb.CHECKPOINT_STATE_COMMITTED)], ck

        # (k) who submitted and who canceled: the token's user, whatever the request says
        g = user.GetJob(pb.GetJobRequest(job_id=job_id), metadata=md)
        assert g.job.user == "admin", g.job
        assert any("submitted by admin" in e.reason for e in g.events), list(g.events)
        job2 = user.SubmitJob(pb.SubmitJobRequest(job_text=JOB.replace("trust", "alices"),
                                                  job_dir="/tmp", user="admin"),
                              metadata=alice_md).job_id
        g2 = user.GetJob(pb.GetJobRequest(job_id=job2), metadata=md)
        assert g2.job.user == "alice" and g2.job.state == pb.JOB_STATE_QUEUED, g2.job
        assert any("submitted by alice" in e.reason for e in g2.events), list(g2.events)
        jobs = {x.id: x.user for x in user.ListJobs(pb.ListJobsRequest(), metadata=alice_md).jobs}
        assert jobs == {job_id: "admin", job2: "alice"}, jobs
        c2 = user.CancelJob(pb.CancelJobRequest(job_id=job2, reason="changed my mind"),
                            metadata=alice_md)
        assert c2.job.state == pb.JOB_STATE_CANCELED, c2.job
        assert "changed my mind (by alice)" in c2.job.reason, c2.job.reason
        g2 = user.GetJob(pb.GetJobRequest(job_id=job2), metadata=md)
        assert any(e.to_state == "CANCELED" and "(by alice)" in e.reason for e in g2.events), \
            list(g2.events)

        # (h) another process takes A's name while A is alive: refused without A's key
        refused(lambda: stub.RegisterAgent(pb.RegisterAgentRequest(
            name="A", hostname="impostor", device=pb.DEVICE_CPU, slots=8), metadata=join_md),
            grpc.StatusCode.FAILED_PRECONDITION, "agent A is alive", "RegisterAgent as A, no key")
        refused(lambda: stub.RegisterAgent(pb.RegisterAgentRequest(
            name="A", hostname="impostor", device=pb.DEVICE_CPU, slots=8,
            previous_agent_key=b.key), metadata=join_md),
            grpc.StatusCode.FAILED_PRECONDITION, "agent A is alive", "RegisterAgent as A with B's key")
        refused(lambda: stub.RegisterAgent(pb.RegisterAgentRequest(
            name="A", hostname="impostor", device=pb.DEVICE_CPU, slots=8,
            previous_agent_key=secrets.token_hex(32)), metadata=join_md),
            grpc.StatusCode.FAILED_PRECONDITION, "agent A is alive", "RegisterAgent as A, made-up key")
        # A is untouched: same incarnation, same key, same slots, same workers
        assert [w.rank for w in a.heartbeat(a.status(desired, pb.WORKER_PHASE_TRAINING, 6)).workers] \
            in ([0, 1], [1, 0])
        ag = {x.name: x for x in user.ListAgents(pb.ListAgentsRequest(), metadata=md).agents}
        assert ag["A"].incarnation == a.inc and ag["A"].slots == 2 and ag["A"].hostname == "host-a", ag["A"]
        assert ag["A"].state == pb.AGENT_STATE_ALIVE, ag["A"]

        # the cancel of A's job names admin (before A re-registers: that ends its workers)
        c1 = user.CancelJob(pb.CancelJobRequest(job_id=job_id), metadata=md)
        assert c1.job.state == pb.JOB_STATE_CANCELED and "(by admin)" in c1.job.reason, c1.job
        g = user.GetJob(pb.GetJobRequest(job_id=job_id), metadata=md)
        assert any(e.to_state == "CANCELED" and "(by admin)" in e.reason for e in g.events), \
            list(g.events)

        # with A's key as previous_agent_key the name is taken: a new incarnation and key
        old_key, old_inc = a.key, a.inc
        a.register(previous_agent_key=old_key)
        assert a.inc > old_inc and a.key != old_key, (a.inc, old_inc)
        a.heartbeat()
        refused(lambda: stub.Heartbeat(pb.HeartbeatRequest(name="A", incarnation=a.inc),
                                       metadata=T.bearer(old_key)),
                grpc.StatusCode.UNAUTHENTICATED, "unknown agent key", "A's replaced key")
        ag = {x.name: x for x in user.ListAgents(pb.ListAgentsRequest(), metadata=md).agents}
        assert ag["A"].incarnation == a.inc and ag["A"].state == pb.AGENT_STATE_ALIVE, ag["A"]
        # B is still B
        b.heartbeat()

        assert zc.stop() == 0

        # user tokens but no join token: no agent may join, whatever it sends
        d2 = os.path.join(tmp, "nojoin")
        os.makedirs(d2)
        zc = ct.zcoord(["--token-file", tok], tmp=d2)
        stub2 = rpc.AgentControlStub(grpc.insecure_channel(zc.addr))
        for what, m in (("no token", []), ("the join token", join_md), ("a user token", md)):
            refused(lambda: stub2.RegisterAgent(pb.RegisterAgentRequest(
                name="A", hostname="h", device=pb.DEVICE_CPU, slots=1), metadata=m),
                DENIED, None, f"a coordinator without a join token: RegisterAgent with {what}")
        assert zc.stop() == 0

        # no token at all (loopback only): anyone may register and the user calls are open,
        # but every other agent call still needs the agent's own key
        d3 = os.path.join(tmp, "open")
        os.makedirs(d3)
        zc = ct.zcoord([], tmp=d3)
        ch3 = grpc.insecure_channel(zc.addr)
        user3, stub3 = rpc.CoordinatorStub(ch3), rpc.AgentControlStub(ch3)
        a3 = T.FakeAgent(pb, stub3, "A", slots=2)
        job3 = user3.SubmitJob(pb.SubmitJobRequest(job_text=JOB, job_dir="/tmp", user="carol")).job_id
        d3w = a3.wait_desired(2)
        b3 = T.FakeAgent(pb, stub3, "B", slots=1)
        refused(lambda: stub3.Heartbeat(pb.HeartbeatRequest(name="A", incarnation=a3.inc)),
                grpc.StatusCode.UNAUTHENTICATED, None, "no-token coordinator: Heartbeat without a key")
        refused(lambda: stub3.ReportMetrics(pb.ReportMetricsRequest(
            agent="A", steps=steps(1, 1, attempt=d3w[0].attempt_id))),
            grpc.StatusCode.UNAUTHENTICATED, None, "no-token coordinator: ReportMetrics without a key")
        refused(lambda: b3.report_metrics(steps(1, 1, attempt=d3w[0].attempt_id)), DENIED,
                "was not placed on agent B", "no-token coordinator: B reporting A's rank")
        refused(lambda: stub3.Heartbeat(pb.HeartbeatRequest(name="A", incarnation=a3.inc),
                                        metadata=b3.md),
                DENIED, None, "no-token coordinator: B heartbeating as A")
        assert a3.report_metrics(steps(1, 1, attempt=d3w[0].attempt_id)).accepted == 1
        g3 = user3.GetJob(pb.GetJobRequest(job_id=job3))
        assert g3.job.user == "carol", g3.job  # no user token: what the client says
        c3 = user3.CancelJob(pb.CancelJobRequest(job_id=job3, reason="done"))
        assert c3.job.state == pb.JOB_STATE_CANCELED and "(by " not in c3.job.reason, c3.job
        assert zc.stop() == 0
        print("test_trust: ok")


if __name__ == "__main__":
    main()
