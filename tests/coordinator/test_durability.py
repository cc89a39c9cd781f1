#!/usr/bin/env python3
"""Durability: 200 job submissions (zctl submit --retry, four submitters at once) while zcoord
is killed with SIGKILL at random moments and restarted on the same port and database. Every
acknowledged job must be present afterwards with its full spec, and none duplicated (the
submit key makes zctl's retries idempotent)."""
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ztutil import free_port  # noqa: E402  (tests/ztutil.py)
import zt_testlib as T  # noqa: E402

BIN = os.environ.get("ZT_BIN", "./bin")
N_JOBS = int(os.environ.get("ZT_DURABILITY_JOBS", "200"))
SUBMITTERS = 4
# SIGKILLs spread over the submissions: a submitter waits while the share of jobs submitted runs
# ahead of the share of these kills done, so a fast machine cannot finish between two kills
KILLS = 12

JOB = """{
  "name": "%s",
  "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16,
            "vocab_size": 64},
  "data": {"train": "data/*.bin"},
  "train": {"steps": %d},
  "resources": {"ranks": 1, "device": "cpu"},
  "deepspeed": {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
}
"""


def main():
    tmp = tempfile.mkdtemp(prefix="zt_durability_")
    coord = T.Zcoord(tmp, ["--log-level", "warn"], port=free_port(), restart_early_exit=True)
    addr = f"127.0.0.1:{coord.port}"
    acked = {}  # name -> (job id, text)
    failures = []
    lock = threading.Lock()
    done = threading.Event()
    try:
        coord.start()
        env = dict(os.environ, ZT_COORDINATOR=addr)

        submitted = [0]

        def submitter(k):
            for i in range(k, N_JOBS, SUBMITTERS):
                while not done.is_set() and (coord.starts - 1) * N_JOBS < KILLS * submitted[0]:
                    time.sleep(0.01)
                with lock:
                    submitted[0] += 1
                name = f"dur-{i:03d}"
                text = JOB % (name, 1000 + i)
                path = os.path.join(tmp, f"{name}.json")
                with open(path, "w") as f:
                    f.write(text)
                r = subprocess.run([os.path.join(BIN, "zctl"), "submit", path, "--retry", "60s", "-o", "json"],
                                   env=env, capture_output=True, text=True, timeout=120)
                if r.returncode != 0:
                    with lock:
                        failures.append((name, r.returncode, r.stderr))
                    continue
                rep = json.loads(r.stdout)
                with lock:
                    acked[name] = (rep["job_id"], text)

        def killer():
            rnd = random.Random(1234)
            while not done.is_set():
                time.sleep(rnd.uniform(0.05, 0.6))
                if done.is_set():
                    break
                coord.kill()
                coord.start()

        threads = [threading.Thread(target=submitter, args=(k,)) for k in range(SUBMITTERS)]
        kt = threading.Thread(target=killer)
        t0 = time.time()
        for t in threads:
            t.start()
        kt.start()
        for t in threads:
            t.join()
        done.set()
        kt.join()
        elapsed = time.time() - t0
        print(f"{len(acked)} of {N_JOBS} submissions acknowledged in {elapsed:.1f} s "
              f"across {coord.starts} zcoord starts ({coord.starts - 1} SIGKILLs)")
        assert not failures, f"zctl submit failed: {failures[:3]}"
        assert len(acked) == N_JOBS
        assert coord.starts >= 10, "the coordinator was not killed often enough to mean anything"

        # every acknowledged job, through the API
        r = subprocess.run([os.path.join(BIN, "zctl"), "jobs", "--limit", "1000", "-o", "json"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        listed = json.loads(r.stdout)["jobs"]
        names = [j["name"] for j in listed]
        dups = {n for n in names if names.count(n) > 1}
        assert not dups, f"duplicated jobs: {sorted(dups)[:5]}"
        by_name = {j["name"]: j["id"] for j in listed}
        for name, (jid, _) in acked.items():
            assert by_name.get(name) == jid, f"{name}: acknowledged as job {jid}, listed as {by_name.get(name)}"
        assert len(listed) == N_JOBS, f"{len(listed)} jobs stored for {N_JOBS} submissions"
        # spot-check specs through GetJob, then all of them in the database
        for name in sorted(acked)[:10]:
            jid, text = acked[name]
            r = subprocess.run([os.path.join(BIN, "zctl"), "job", str(jid), "-o", "json"],
                               env=env, capture_output=True, text=True, timeout=30)
            assert r.returncode == 0 and json.loads(r.stdout)["spec_text"] == text, name
        assert coord.stop() == 0
        db = sqlite3.connect(os.path.join(tmp, "zt.db"))
        rows = dict(db.execute("SELECT id, spec_text FROM jobs").fetchall())
        for name, (jid, text) in acked.items():
            assert rows.get(jid) == text, f"job {jid} ({name}): stored spec differs"
        (integrity,) = db.execute("PRAGMA integrity_check").fetchone()
        assert integrity == "ok", integrity
        db.close()
        print("test_durability: ok")
    finally:
        done.set()
        coord.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
