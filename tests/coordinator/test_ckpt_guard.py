#!/usr/bin/env python3
"""zcoord's two checkpoint guards against the real binary and a simulated agent.

A checkpoint directory belongs to one job: a submit whose train.checkpoint_dir is that of any
other job in the database (whatever its state) is refused, naming the owner, and stores
nothing; a train.resume_from inside that directory takes it over (an event says so); other
directories and idempotent resubmits pass.

A checkpoint that fails verification on load (the worker exits 5 and its agent names the
directory) becomes BAD with the worker's reason; the next attempt resumes from the newest
older committed one at once and max_restarts does not count it; with none left the job
fails saying so. An exit 5 without the name (an older zagent) marks the checkpoint the
attempt resumed from; one that is not the job's own (train.resume_from) fails the job.
`zctl ckpt list` and the HTTP API show BAD with its reason. Run with /usr/bin/python3."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zt_testlib as T  # noqa: E402

T.need_grpc()
import grpc  # noqa: E402


def job_text(name, ckpt_dir, resume_from=None, max_restarts=0, ranks=1):
    train = {"steps": 100, "checkpoint_every": 5, "checkpoint_dir": ckpt_dir}
    if resume_from is not None:
        train["resume_from"] = resume_from
    return json.dumps({
        "name": name,
        "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16,
                  "vocab_size": 64},
        "data": {"train": "data/*.bin"},
        "train": train,
        "resources": {"ranks": ranks, "device": "cpu"},
        "max_restarts": max_restarts,
        "deepspeed": {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1},
    })


def refused(fn, code, want):
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == code, f"got {e.code()} ({e.details()}), want {code}"
        assert want in e.details(), f"{want!r} not in {e.details()!r}"
        return e.details()
    raise AssertionError(f"expected {code} ({want}), the call succeeded")


def wait_for(what, fn, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def ownership(pb, user, agent_stub):
    """Part 1: who may use a checkpoint directory."""
    def submit(name, ckpt_dir, who, job_dir="/data", **kw):
        return user.SubmitJob(pb.SubmitJobRequest(job_text=job_text(name, ckpt_dir, **kw),
                                                  job_dir=job_dir, job_path=f"{name}.json",
                                                  user=who))

    own = submit("tiny", "/data/ckpt/tiny", "alice").job_id
    want = (f"train.checkpoint_dir /data/ckpt/tiny belongs to job {own} 'tiny' (QUEUED, "
            "submitted by alice); give this job its own checkpoint_dir, or set "
            "train.resume_from to start from that job's checkpoints")
    # the same directory, written another way (trailing slash; relative, through "..")
    for text_dir, job_dir in (("/data/ckpt/tiny/", "/data"), ("ckpt/tiny", "/data/x/..")):
        d = refused(lambda: submit("copy", text_dir, "bob", job_dir=job_dir),
                    grpc.StatusCode.FAILED_PRECONDITION, want)
        print("refused:", d)
    # a sibling whose name starts the same is another directory; resume_from there is no
    # take-over of this one
    refused(lambda: submit("copy", "/data/ckpt/tiny", "bob",
                           resume_from="/data/ckpt/tiny2/step_00000010"),
            grpc.StatusCode.FAILED_PRECONDITION, want)
    jobs = [j.id for j in user.ListJobs(pb.ListJobsRequest()).jobs]
    assert jobs == [own], f"a refused submit stored a job: {jobs}"
    other = submit("tiny2", "/data/ckpt/tiny2", "bob").job_id
    assert other == own + 1

    # resume_from inside the directory takes it over, with an event on the new job
    taker = submit("tiny-more", "/data/ckpt/tiny", "bob",
                   resume_from="/data/ckpt/tiny/step_00000010").job_id
    g = user.GetJob(pb.GetJobRequest(job_id=taker))
    took = [e.reason for e in g.events if "took over" in e.reason]
    assert took == [f"took over job {own} 'tiny' (QUEUED)'s checkpoint_dir /data/ckpt/tiny: "
                    "train.resume_from /data/ckpt/tiny/step_00000010 lies in it"], \
        [e.reason for e in g.events]
    # now the directory is the taker's (the newest job that uses it)
    refused(lambda: submit("late", "/data/ckpt/tiny", "carol"),
            grpc.StatusCode.FAILED_PRECONDITION,
            f"train.checkpoint_dir /data/ckpt/tiny belongs to job {taker} 'tiny-more' (QUEUED, "
            "submitted by bob)")
    # resume_from equal to the directory takes it over too
    submit("tiny-again", "/data/ckpt/tiny", "carol", resume_from="/data/ckpt/tiny")

    # an idempotent resubmit returns its job: the directory is its own
    req = pb.SubmitJobRequest(job_text=job_text("keyed", "/data/ckpt/keyed"), job_dir="/data",
                              submit_key="key-1", user="dave")
    first = user.SubmitJob(req)
    again = user.SubmitJob(req)
    assert again.existed and again.job_id == first.job_id, (first, again)
    # ended jobs keep their directories (their checkpoints are still there)
    user.CancelJob(pb.CancelJobRequest(job_id=first.job_id))
    refused(lambda: submit("after", "/data/ckpt/keyed", "erin"),
            grpc.StatusCode.FAILED_PRECONDITION,
            f"belongs to job {first.job_id} 'keyed' (CANCELED, submitted by dave)")
    again = user.SubmitJob(req)
    assert again.existed and again.job_id == first.job_id
    for j in user.ListJobs(pb.ListJobsRequest()).jobs:
        if j.state == pb.JOB_STATE_QUEUED:
            user.CancelJob(pb.CancelJobRequest(job_id=j.id))


def make_step(root, step):
    d = os.path.join(root, f"step_{step:08d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "meta.json"), "w") as f:
        f.write("{}\n")
    return d


def fallback(pb, user, agent_stub, tmp, env, http):
    """Part 2: a checkpoint that fails verification on load."""
    root = os.path.join(tmp, "ck_fb")
    d5, d10 = make_step(root, 5), make_step(root, 10)
    job = user.SubmitJob(pb.SubmitJobRequest(
        job_text=job_text("fb", root, max_restarts=1), job_dir=tmp, user="alice")).job_id
    n1 = T.FakeAgent(pb, agent_stub, "n1", slots=2)
    w = n1.wait_desired(1)
    a1 = w[0].attempt_id
    assert w[0].resume_path == ""
    n1.heartbeat(n1.status(w, pb.WORKER_PHASE_TRAINING, 10))
    for step, d in ((5, d5), (10, d10)):
        assert n1.report_checkpoint(a1, 0, step, d).committed
    # a crash: restart 1 of 1, from step 10
    ex = n1.status(w, pb.WORKER_PHASE_EXITED, 11)
    ex[0].exit_signal = 9
    n1.heartbeat(ex)
    w = n1.wait_desired(1, newer_than=a1)
    a2 = w[0].attempt_id
    assert w[0].resume_path == d10, w[0]
    # the worker finds step 10 damaged and exits 5, naming it
    why = f"rank 0: {d10}/rank_00000.zts: chunk 3 checksum mismatch (crc32c 1234abcd, want 0badf00d)"
    ex = n1.status(w, pb.WORKER_PHASE_EXITED, 10, 5)
    ex[0].bad_checkpoint, ex[0].bad_checkpoint_reason = d10, why
    n1.heartbeat(ex)
    # at once (no backoff), not counted: attempt 3 from step 5
    w = n1.wait_desired(1, newer_than=a2, timeout=3)
    a3 = w[0].attempt_id
    assert w[0].resume_path == d5, w[0]
    g = user.GetJob(pb.GetJobRequest(job_id=job))
    assert g.job.restarts == 1 and g.job.max_restarts == 1, g.job
    assert [a.number for a in g.attempts] == [1, 2, 3], [a.number for a in g.attempts]
    assert g.attempts[1].reason == (f"rank 0 on n1 (pid 1000) exited with code 5 (checkpoint "
                                    f"{d10} failed verification)"), g.attempts[1].reason
    bad = [e for e in g.events if e.kind == "checkpoint" and e.to_state == "BAD"]
    assert len(bad) == 1 and bad[0].from_state == "COMMITTED", bad
    assert bad[0].reason == (f"step 10 at {d10} failed verification when attempt 2 resumed "
                             f"from it: {why}"), bad[0].reason
    assert any("not counted against max_restarts: 1 of 1 used" in e.reason for e in g.events)
    ck = user.ListCheckpoints(pb.ListCheckpointsRequest(job_id=job)).checkpoints
    assert [(c.step, c.state, c.bad_reason) for c in ck] == [
        (10, pb.CHECKPOINT_STATE_BAD, why), (5, pb.CHECKPOINT_STATE_COMMITTED, "")], ck
    r = subprocess.run([os.path.join(T.BIN, "zctl"), "ckpt", "list", str(job)], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert f"10         BAD" in r.stdout and d10 in r.stdout, r.stdout
    assert (f"step 10 is BAD (failed verification on load; never resumed from): {why}"
            in r.stdout), r.stdout
    print(r.stdout)
    with urllib.request.urlopen(f"http://{http}/api/v1/jobs/{job}/checkpoints", timeout=10) as f:
        api = json.load(f)["checkpoints"]
    assert [(c["step"], c["state"], c["bad_reason"]) for c in api] == [
        (10, "BAD", why), (5, "COMMITTED", "")], api

    # an older zagent does not forward the name: the checkpoint attempt 3 resumed from is the
    # one; none is left after it, so the job fails rather than start over from step 0
    n1.heartbeat(n1.status(w, pb.WORKER_PHASE_EXITED, 5, 5))
    g = wait_for("job fb to fail", lambda: (lambda g: g if g.job.state == pb.JOB_STATE_FAILED
                                            else None)(user.GetJob(pb.GetJobRequest(job_id=job))))
    want = (f"attempt 3 failed: rank 0 on n1 (pid 1000) exited with code 5 (the checkpoint it "
            f"resumed from failed verification); the newest checkpoint (step 5 at {d5}) is "
            "corrupt and no older committed checkpoint is left, so the job does not start over "
            "from step 0 by itself (resubmit it for that); the worker found: the worker exited "
            "with code 5; its agent does not forward what failed (an older zagent)")
    assert g.job.reason == want, f"{g.job.reason!r}\n!=\n{want!r}"
    assert len(g.attempts) == 3
    ck = user.ListCheckpoints(pb.ListCheckpointsRequest(job_id=job)).checkpoints
    assert [(c.step, c.state) for c in ck] == [(10, pb.CHECKPOINT_STATE_BAD),
                                               (5, pb.CHECKPOINT_STATE_BAD)], ck
    assert "older zagent" in ck[1].bad_reason

    # a checkpoint that is not the job's own (train.resume_from of another directory): no
    # older one can replace it, restarts would repeat it
    ext = make_step(os.path.join(tmp, "elsewhere"), 7)
    job2 = user.SubmitJob(pb.SubmitJobRequest(
        job_text=job_text("rf", os.path.join(tmp, "ck_rf"), resume_from=ext, max_restarts=3),
        job_dir=tmp, user="alice")).job_id
    w = n1.wait_desired(1, newer_than=a3)
    ex = n1.status(w, pb.WORKER_PHASE_EXITED, 0, 5)
    ex[0].bad_checkpoint, ex[0].bad_checkpoint_reason = ext, "meta.json: meta_crc32c mismatch"
    n1.heartbeat(ex)
    g = wait_for("job rf to fail", lambda: (lambda g: g if g.job.state == pb.JOB_STATE_FAILED
                                            else None)(user.GetJob(pb.GetJobRequest(job_id=job2))))
    assert "it is not one of this job's checkpoints (train.resume_from?)" in g.job.reason, g.job
    assert g.job.reason.endswith("the worker found: meta.json: meta_crc32c mismatch"), g.job
    assert g.job.restarts == 0 and len(g.attempts) == 1

    # a worker is believed only about the checkpoint its attempt was given: naming another
    # (here another job's) marks nothing and is an ordinary, counted restart
    root = os.path.join(tmp, "ck_mm")
    m5 = make_step(root, 5)
    job3 = user.SubmitJob(pb.SubmitJobRequest(
        job_text=job_text("mm", root, max_restarts=2), job_dir=tmp, user="alice")).job_id
    w = n1.wait_desired(1, newer_than=w[0].attempt_id)
    m1 = w[0].attempt_id
    n1.heartbeat(n1.status(w, pb.WORKER_PHASE_TRAINING, 6))
    assert n1.report_checkpoint(m1, 0, 5, m5).committed
    n1.heartbeat(n1.status(w, pb.WORKER_PHASE_EXITED, 6, 1))
    w = n1.wait_desired(1, newer_than=m1)
    m2 = w[0].attempt_id
    assert w[0].resume_path == m5, w[0]
    ex = n1.status(w, pb.WORKER_PHASE_EXITED, 5, 5)
    ex[0].bad_checkpoint, ex[0].bad_checkpoint_reason = d10, "not mine to judge"
    n1.heartbeat(ex)
    w = n1.wait_desired(1, newer_than=m2)
    assert w[0].resume_path == m5, w[0]
    g = user.GetJob(pb.GetJobRequest(job_id=job3))
    assert g.job.restarts == 2, g.job
    assert f"but this attempt was given {m5}: nothing is marked BAD" in g.attempts[1].reason, \
        g.attempts[1].reason
    ck = user.ListCheckpoints(pb.ListCheckpointsRequest(job_id=job3)).checkpoints
    assert [(c.step, c.state) for c in ck] == [(5, pb.CHECKPOINT_STATE_COMMITTED)], ck
    ck = user.ListCheckpoints(pb.ListCheckpointsRequest(job_id=job)).checkpoints
    assert ck[0].bad_reason == why, ck
    user.CancelJob(pb.CancelJobRequest(job_id=job3))


def main():
    tmp = tempfile.mkdtemp(prefix="zt_ckguard_")
    ok = False
    try:
        T.build_stubs(os.path.join(tmp, "py"))
        import zerotrain_pb2 as pb
        import zerotrain_pb2_grpc as rpc
        with T.Zcoord(tmp, ["--http", "127.0.0.1:0", "--restart-backoff", "100ms"]) as zc:
            channel = grpc.insecure_channel(zc.addr)
            user = rpc.CoordinatorStub(channel)
            agent_stub = rpc.AgentControlStub(channel)
            env = dict(os.environ, ZT_COORDINATOR=zc.addr)
            env.pop("ZT_TOKEN", None)
            env.pop("ZT_TOKEN_FILE", None)
            ownership(pb, user, agent_stub)
            fallback(pb, user, agent_stub, tmp, env, zc.http)
        ok = True
        print("test_ckpt_guard: ok")
    finally:
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
