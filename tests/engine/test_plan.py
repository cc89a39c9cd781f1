"""`zctl plan` predicts what a worker really holds. For several stages, rank counts, precisions,
offload ratios, activation checkpointing on and off, and both kinds of init, the plan's total
for the job's configuration (engine buffers, the communicator's staging, the checkpoint
snapshot, the start-up transient and the process's own runtime) is within 10% of the peak
resident memory the kernel measured for the largest rank: ru_maxrss over the waited-for
descendants of a fresh python process that ran only that case's `zctl plan` and `zctl run`
(nothing the engine reports about itself). Two parts of the plan that mirror other modules are
also checked against what those modules really allocated, as the step line reports it: the
checkpoint snapshot (ckpt.c) and the communicator's own buffers (comm_tcp.c). Ranks above 0,
which print no step line under `zctl run`, log their memory. The plan flags a configuration
that does not fit --device-memory and exits non-zero; bad sizes are refused. A job that cannot
be allocated fails with the category, its planned size and what to change. Under a sanitizer
(ZT_TEST_SANITIZED=1) resident memory means nothing and only the plan's own checks run.
ZT_TEST_QUICK=1 runs three of the cases."""
import json
import os
import resource
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

MODEL = dict(L=4, NH=4, C=256, T=128, V=256, Vp=256)
# a wider model whose start-up (the llm.c file read whole, 4 bytes a parameter) outweighs the
# checkpoint snapshot of a quarter shard by more than the runtime grows: its peak is at start-up
WIDE = dict(L=8, NH=4, C=384, T=128, V=256, Vp=256)
# ranks, stage, precision, offload ratio, activation checkpointing, micro batch, accumulation
# steps, init from an llm.c file, checkpoint_every (1: the snapshot buffer exists from start-up
# and shows in the step line; 0: it is allocated for the final save)
CASES = [
    dict(ranks=1, stage=0, prec=None, offload=None, ckpt=False, micro=8, gas=1, file=False, every=0),
    dict(ranks=2, stage=2, prec="bf16", offload=0.5, ckpt=False, micro=4, gas=1, file=False, every=1),
    dict(ranks=4, stage=3, prec="fp16", offload=None, ckpt=True, micro=2, gas=1, file=True, every=0),
    dict(ranks=4, stage=1, prec="bf16", offload=1.0, ckpt=True, micro=2, gas=1, file=False, every=1),
    dict(ranks=2, stage=3, prec=None, offload=None, ckpt=False, micro=2, gas=2, file=False, every=1),
    dict(ranks=3, stage=2, prec="fp16", offload=None, ckpt=True, micro=1, gas=1, file=True, every=1),
    dict(ranks=4, stage=3, prec=None, offload=None, ckpt=True, micro=1, gas=1, file=True, every=0,
         wide=True),
]
QUICK = [0, 2, 3]


def run_measured(args, cwd):
    """Runs zctl; returns (returncode, stdout, stderr, peak resident KiB of zctl or any of the
    workers it waited for)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen([zu.zt_bin("zctl")] + args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=600)
    # the largest of this process's waited-for descendants: the case runs in a python child
    # of its own (see main), where only `zctl plan` (small) ran before
    return p.returncode, out, err, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def one_case(tmp, i, c):
    """Runs case i in this process (a fresh python child per case, so that RUSAGE_CHILDREN
    holds only this case's processes) and prints one JSON line."""
    ds = {"train_batch_size": c["micro"] * c["ranks"] * c["gas"],
          "train_micro_batch_size_per_gpu": c["micro"],
          "zero_optimization": {"stage": c["stage"]}}
    if c["prec"]:
        ds[c["prec"]] = {"enabled": True}
    if c["offload"] is not None:
        ds["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "ratio": c["offload"]}
    if c["ckpt"]:
        ds["activation_checkpointing"] = {}
    m = WIDE if c.get("wide") else MODEL
    job = {"name": f"plan{i}",
           "model": {"n_layer": m["L"], "n_head": m["NH"], "n_embd": m["C"],
                     "block_size": m["T"], "vocab_size": m["V"],
                     "init": ("wide.bin" if c.get("wide") else "init.bin") if c["file"] else "random"},
           "data": {"train": "data/synth_train_*.bin"},
           "train": {"steps": 1, "checkpoint_every": c["every"], "checkpoint_dir": f"ckpt/plan{i}"},
           "resources": {"ranks": c["ranks"]}, "deepspeed": ds}
    zu.write_job(f"{tmp}/plan{i}.json", job)
    p = zu.run_zctl(["plan", f"{tmp}/plan{i}.json", "-o", "json"])
    assert p.returncode == 0, p.stderr
    rows = [r for r in json.loads(p.stdout)["rows"] if r["job"]]
    assert len(rows) == 1, rows
    rc, out, err, maxrss_kib = run_measured(["run", f"{tmp}/plan{i}.json"], tmp)
    assert rc == 0, err
    step = zu.parse_step_lines(out)[0]
    # ranks above 0 print no step line under zctl run; their log says what they hold
    last_rank = zu.rank_log(f"{tmp}/ckpt/plan{i}", c["ranks"] - 1) if c["ranks"] > 1 else ""
    mem_lines = [ln for ln in last_rank.splitlines() if "step 1 memory: model states" in ln]
    print(json.dumps({"row": rows[0], "maxrss": maxrss_kib * 1024, "step": step,
                      "rank_log_memory": mem_lines[-1] if mem_lines else None}))


def check_oom(tmp, sanitized):
    """A micro batch whose activations (over 1 TiB) no machine has: the worker fails before
    training with an error that names the category, its size as the plan predicts it, and what
    to change; zctl run exits non-zero. The size is past any RAM (the kernel refuses it under
    overcommit heuristics) and past ASan's largest allocation; outside a sanitizer an address
    space limit makes the refusal certain whatever the machine's overcommit setting. With
    activation checkpointing already on, the advice leaves it out."""
    failures = []
    for ckpt in (False, True):
        name = "oom_ckpt" if ckpt else "oom"
        job = {"name": name,
               "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64,
                         "vocab_size": 256, "init": "random"},
               "data": {"train": "data/synth_train_*.bin"},
               "train": {"steps": 1, "checkpoint_dir": f"ckpt/{name}"},
               "resources": {"ranks": 1},
               "deepspeed": {"train_batch_size": 4000000,
                             "train_micro_batch_size_per_gpu": 4000000}}
        if ckpt:
            job["deepspeed"]["activation_checkpointing"] = {}
        zu.write_job(f"{tmp}/{name}.json", job)
        p = zu.run_zctl(["plan", f"{tmp}/{name}.json", "-o", "json"])
        row = [r for r in json.loads(p.stdout)["rows"] if r["job"]][0]
        # the largest arena is asked for first: the activations, or with checkpointing the buffers
        cat = max(("activations", "buffers"), key=lambda c: row["bytes"][c])
        want = zu.fmt_bytes(row["bytes"][cat])

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (16 << 30, 16 << 30))

        env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
                   ":allocator_may_return_null=1")
        r = subprocess.run([zu.zt_bin("zctl"), "run", f"{tmp}/{name}.json"], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=300,
                           preexec_fn=None if sanitized else limit)
        text = r.stdout + r.stderr
        print(f"out of memory ({name}): rc {r.returncode}: "
              f"{text.strip().splitlines()[0] if text.strip() else ''}")
        need = [f"rank 0 is out of host memory: its {cat} need {want} more",
                f"'zctl plan' predicts {want} of {cat}", "train_micro_batch_size_per_gpu"]
        missing = [n for n in need if n not in text]
        advised = "turn on activation_checkpointing" in text
        if r.returncode == 0 or missing or advised == ckpt:
            failures.append(f"out-of-memory job {name}: rc {r.returncode}, missing {missing}, "
                            f"activation checkpointing {'' if advised else 'not '}advised, in:\n"
                            f"{text}")
    return failures


def check_head_rows(tmp):
    """The classifier's chunk of rows (ZT_HEAD_ROWS) in the plan: GPT-2's vocabulary at 8 x 1024
    tokens cuts the logits into chunks of 256M floats (5336 rows of 50304); fewer rows take
    that many rows' less activations, all B x T rows (the most) the whole of them, and more rows
    than that count as B x T."""
    failures = []
    job = {"name": "head", "model": {"n_layer": 12, "n_head": 12, "n_embd": 768,
                                     "block_size": 1024, "vocab_size": 50257, "init": "random"},
           "data": {"train": "data/synth_train_*.bin"},
           "train": {"steps": 1, "checkpoint_dir": "ckpt/head"}, "resources": {"ranks": 1},
           "deepspeed": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8}}
    zu.write_job(f"{tmp}/head.json", job)
    vp, n, rows = 50304, 8 * 1024, (256 << 20) // 50304

    def acts(head_rows):
        p = zu.run_zctl(["plan", f"{tmp}/head.json", "-o", "json"],
                        env={"ZT_HEAD_ROWS": head_rows})
        if p.returncode != 0:
            failures.append(f"plan with ZT_HEAD_ROWS={head_rows!r}: rc {p.returncode} {p.stderr}")
            return 0
        return [r for r in json.loads(p.stdout)["rows"] if r["job"]][0]["bytes"]["activations"]

    base = acts("")
    for head_rows, more in ((str(7), 7 - rows), (str(rows // 4), rows // 4 - rows),
                            (str(n), n - rows), (str(10 * n), n - rows)):
        got = acts(head_rows) - base
        print(f"plan with ZT_HEAD_ROWS={head_rows}: activations {got:+} B "
              f"({more:+} rows of {vp} floats: {more * vp * 4:+} B)")
        if got != more * vp * 4:
            failures.append(f"ZT_HEAD_ROWS={head_rows}: activations {got:+} B, expected "
                            f"{more * vp * 4:+}")
    return failures


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--case":
        one_case(sys.argv[2], int(sys.argv[3]), CASES[int(sys.argv[3])])
        return
    quick = os.environ.get("ZT_TEST_QUICK") == "1"
    sanitized = os.environ.get("ZT_TEST_SANITIZED") == "1"
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-plan-") as tmp:
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--train-tokens", "50000",
                         "--val-tokens", "0"])
        assert r.returncode == 0, r.stderr
        zu.write_model(f"{tmp}/init.bin", MODEL, zu.random_model(MODEL, seed=3))
        if not quick:
            zu.write_model(f"{tmp}/wide.bin", WIDE, zu.random_model(WIDE, seed=4))
        print("MiB per rank: plan = zctl plan's total for the job (the larger of start-up and "
              "training); measured = peak resident memory of the largest worker")
        for i in (QUICK if quick else range(len(CASES))):
            c = CASES[i]
            res = subprocess.run([sys.executable, __file__, "--case", tmp, str(i)],
                                 capture_output=True, text=True, timeout=900)
            if res.returncode != 0:
                failures.append(f"case {i} {c}: failed:\n{res.stdout}\n{res.stderr}")
                continue
            got = json.loads(res.stdout.strip().splitlines()[-1])
            row, step, measured = got["row"], got["step"], got["maxrss"]
            mib = 1 / 2**20
            predicted = row["total_bytes"]
            ck = row["bytes"]["ckpt"]
            dev = (predicted - measured) / measured
            training = row["device_bytes"] + row["host_bytes"] + row["runtime_bytes"]
            phase = "training" if predicted == training else "start-up"
            print(f"case {i} {'L8 C384' if c.get('wide') else 'L4 C256'} {c['ranks']} ranks "
                  f"stage {c['stage']} {c['prec'] or 'fp32'} offload {c['offload']} "
                  f"act-ckpt {c['ckpt']} init {'file' if c['file'] else 'random'}: "
                  f"plan {predicted * mib:.1f} at {phase} (device {row['device_bytes'] * mib:.1f} "
                  f"+ host {row['host_bytes'] * mib:.1f} [ckpt {ck * mib:.1f}] + runtime "
                  f"{row['runtime_bytes'] * mib:.1f}; start-up transient "
                  f"{row['init_bytes'] * mib:.1f}), measured {measured * mib:.1f} ({dev:+.1%}"
                  f"{', not compared under a sanitizer' if sanitized else ''})")
            if not sanitized and abs(dev) > 0.10:
                failures.append(f"case {i} {c}: plan {predicted} B vs measured peak resident {measured} B ({dev:+.1%})")
            # the parts the plan mirrors from other modules, against their real allocations
            if int(step["mem_comm"]) != row["bytes"]["comm"]:
                failures.append(f"case {i}: plan comm {row['bytes']['comm']} B, the run holds {step['mem_comm']} B")
            if c["ranks"] > 1 and not got["rank_log_memory"]:
                failures.append(f"case {i}: rank {c['ranks'] - 1} logged no memory line")
            want_ck = ck if c["every"] > 0 else 0  # else allocated at the final save only
            if int(step["mem_ckpt"]) != want_ck:
                failures.append(f"case {i}: plan ckpt snapshot {ck} B, the run holds {step['mem_ckpt']} B")
        # a device too small for the job's configuration
        small = zu.run_zctl(["plan", f"{tmp}/plan0.json", "--device-memory", "1MiB"])
        if small.returncode != 1 or "DOES NOT FIT" not in small.stdout:
            failures.append(f"plan with 1MiB: rc {small.returncode}\n{small.stdout}")
        # a job that cannot be allocated: the worker names the category and the plan's figures
        failures += check_oom(tmp, sanitized)
        failures += check_head_rows(tmp)
        bad = zu.run_zctl(["plan", f"{tmp}/plan0.json", "--device-memory", "eighty"])
        if bad.returncode != 2 or "--device-memory" not in bad.stderr:
            failures.append(f"plan with a bad size: rc {bad.returncode} {bad.stderr}")
    zu.finish(failures)


if __name__ == "__main__":
    main()
