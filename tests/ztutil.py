"""zerotrain test utilities without PyTorch: llm.c file formats, job runs through the real
zctl binary or as zworker ranks started directly, step-line parsing, comparisons, loopback
ports, reaping processes, the GPU probe. Run with /usr/bin/python3."""
import hashlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys

import numpy as np

KINDS = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def shapes(L, C, T, Vp):
    return {"wte": (Vp, C), "wpe": (T, C), "ln1w": (L, C), "ln1b": (L, C),
            "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C),
            "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C),
            "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def write_shard(path, tokens):
    tokens = np.asarray(tokens, dtype=np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


def read_shard(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        assert header[0] == 20240520, path
        return np.frombuffer(f.read(), dtype=np.uint16)[: header[2]].astype(np.int64)


def write_model(path, cfg, params):
    """params: dict kind -> float32 numpy array (llm.c shapes)."""
    L, NH, C, T, V, Vp = (cfg[k] for k in ("L", "NH", "C", "T", "V", "Vp"))
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, 3, T, V, L, NH, C, Vp]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for k in KINDS:
            f.write(np.ascontiguousarray(params[k], dtype=np.float32).tobytes())


def read_model(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        assert header[0] == 20240326, path
        assert header[1] in (3, 5), header[1]
        T, V, L, NH, C, Vp = (int(x) for x in header[2:8])
        cfg = dict(L=L, NH=NH, C=C, T=T, V=V, Vp=Vp)
        if header[1] == 3:
            flat = np.frombuffer(f.read(), dtype=np.float32)
        else:
            raw = np.frombuffer(f.read(), dtype=np.uint16).astype(np.uint32) << 16
            flat = raw.view(np.float32)
    out, off = {}, 0
    for k, shp in shapes(L, C, T, Vp).items():
        n = int(np.prod(shp))
        out[k] = flat[off:off + n].reshape(shp).copy()
        off += n
    assert off == len(flat), (off, len(flat))
    return cfg, out


def random_model(cfg, seed):
    rng = np.random.default_rng(seed)
    L, C, T, V, Vp = cfg["L"], cfg["C"], cfg["T"], cfg["V"], cfg["Vp"]
    p = {}
    for k, shp in shapes(L, C, T, Vp).items():
        if k in ("ln1w", "ln2w", "lnfw"):
            p[k] = np.ones(shp, np.float32)
        elif k in DECAY:
            std = 0.02 / math.sqrt(2 * L) if k in ("attprojw", "fcprojw") else 0.02
            p[k] = (rng.standard_normal(shp) * std).astype(np.float32)
        else:  # biases: small random values so that their gradients matter in tests
            p[k] = (rng.standard_normal(shp) * 0.01).astype(np.float32)
    p["wte"][V:] = 0.0
    return p


def parse_step_lines(text):
    out = []
    for line in text.splitlines():
        if line.startswith("step="):
            kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
            out.append(kv)
    return out


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = np.linalg.norm(b)
    return np.linalg.norm(a - b) / (nb if nb > 0 else 1.0)


def fmt_bytes(b):
    """common/alloc.c's zt_fmt_bytes"""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, i = float(b), 0
    while abs(v) >= 1024 and i < 4:
        v, i = v / 1024, i + 1
    return f"{b} B" if i == 0 else f"{v:.1f} {units[i]}"


def zt_bin(name):
    return os.path.join(os.environ.get("ZT_BIN", "build/bin"), name)


def run_zctl(args, cwd=None, env=None, timeout=600):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([zt_bin("zctl")] + list(args), capture_output=True, text=True,
                          cwd=cwd, env=e, timeout=timeout)


def write_job(path, job):
    with open(path, "w") as f:
        json.dump(job, f, indent=1)


class OffloadCase:
    """The small GPT-2 jobs the offload tests train in tmp (data in tmp/data, the model in
    tmp/init.bin, checkpoints in tmp/ckpt/NAME), run through zctl run with the optimizer cut into
    777-element pieces, and their outcome: losses by step and the exported model's SHA-256."""

    def __init__(self, tmp, cfg):
        self.tmp, self.cfg = tmp, cfg

    def job(self, name, zero, prec="fp32", steps=6, every=0, ranks=2):
        cfg, tmp = self.cfg, self.tmp
        ds = {"train_batch_size": 12, "train_micro_batch_size_per_gpu": 3,
              "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
              "gradient_clipping": 0.5, "zero_optimization": zero,
              "aio": {"block_size": 8192, "queue_depth": 4}}
        if prec != "fp32":
            ds[prec] = {"enabled": True}
        train = {"steps": steps, "checkpoint_dir": f"{tmp}/ckpt/{name}"}
        if every:
            train["checkpoint_every"] = every
        return {"name": name,
                "model": {"arch": "gpt2", "n_layer": cfg["L"], "n_head": cfg["NH"],
                          "n_embd": cfg["C"], "block_size": cfg["T"],
                          "vocab_size": cfg["V"], "init": f"{tmp}/init.bin"},
                "data": {"train": f"{tmp}/data/t_*.bin"}, "train": train,
                "resources": {"ranks": ranks}, "deepspeed": ds}

    def run(self, j, resume=None, env=None):
        write_job(f"{self.tmp}/{j['name']}.json", j)
        args = ["run", f"{self.tmp}/{j['name']}.json"] + (["--resume", resume] if resume else [])
        e = {"OMP_NUM_THREADS": "1", "ZT_OFFLOAD_PIECE": "777"}
        e.update(env or {})
        return run_zctl(args, cwd=self.tmp, env=e)

    def outcome(self, j, r):
        """(losses by step, sha256 of the exported model), or None when the run failed"""
        if r.returncode != 0:
            return None
        steps = {int(s["step"]): s["loss"] for s in parse_step_lines(r.stdout)}
        out = f"{self.tmp}/{j['name']}.bin"
        e = run_zctl(["ckpt", "export", f"{self.tmp}/ckpt/{j['name']}", "--format", "llmc",
                      "-o", out])
        if e.returncode != 0:
            return None
        with open(out, "rb") as f:
            return steps, hashlib.sha256(f.read()).hexdigest()


def rank_log(ckpt_dir, rank):
    with open(os.path.join(ckpt_dir, "logs", "rank_%05d.log" % rank)) as f:
        return f.read()


def log_value(text, key):
    """The last `key=value` token in a log text."""
    val = None
    for tok in text.split():
        if tok.startswith(key + "="):
            val = tok.split("=", 1)[1]
    return val


def free_port():
    """A loopback port free now, drawn below the kernel's ephemeral range so that other
    processes' outgoing connections cannot take it before rank 0 binds it (as zctl run and
    zagent pick)."""
    for _ in range(64):
        p = random.randint(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
            return p
        except OSError:
            continue
        finally:
            s.close()
    sys.exit("no free loopback port between 20000 and 32000")


def reap(procs):
    """Ends the processes still running (a stopped one is continued first, so that it dies) and
    collects every one's exit and output."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
        p.communicate()


def checker(failures):
    """A check(cond, msg) that prints msg and adds it to failures when cond is false (the
    test goes on; finish(failures) ends it)."""
    def check(cond, msg):
        if not cond:
            failures.append(msg)
            print("FAIL:", msg)
    return check


def fault_env(**faults):
    """Environment that preloads the fault shim (tests/engine/fault_fs.c) with the given
    ZT_FAULT_* settings: fault_env(rename="meta.json") sets ZT_FAULT_RENAME=meta.json."""
    lib = os.path.join(os.environ.get("ZT_BUILD_DIR", "build"), "tests", "libzt_fault_fs.so")
    if not os.path.exists(lib):
        sys.exit(f"{lib} is missing: build the zt_fault_fs target")
    env = {"LD_PRELOAD": lib,
           "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
    env.update({f"ZT_FAULT_{k.upper()}": v for k, v in faults.items()})
    return env


def run_ranks(tmp, job, nproc, env=None, resume=None, timeout=300):
    """Writes job to tmp/<name>.json and runs each of its nproc ranks as a zworker of its own in
    tmp, met on a free loopback port (zctl run would stop the others at the first failure,
    before they log theirs), each with a report file tmp/<name>.report<rank>; env is added to
    every rank's environment, which holds no ZT_JOB_ID, ZT_SUBMIT_KEY or ZT_CKPT_TAKEOVER of
    this process. Returns (exit codes, stderr texts, stdout texts, report texts), by rank."""
    name = job["name"]
    write_job(f"{tmp}/{name}.json", job)
    port = free_port()
    procs, reports = [], []
    try:
        for rk in range(nproc):
            rep = open(f"{tmp}/{name}.report{rk}", "w+")
            reports.append(rep)
            e = dict(os.environ, ZT_RANK=str(rk), ZT_WORLD_SIZE=str(nproc), OMP_NUM_THREADS="1",
                     ZT_RENDEZVOUS=f"tcp://127.0.0.1:{port}", ZT_REPORT_FD=str(rep.fileno()),
                     ZT_COMM_TIMEOUT_MS="60000")
            for k in ("ZT_JOB_ID", "ZT_SUBMIT_KEY", "ZT_CKPT_TAKEOVER"):
                e.pop(k, None)
            e.update(env or {})
            procs.append(subprocess.Popen(
                [zt_bin("zworker")] + (["--resume", resume] if resume else []) +
                [f"{tmp}/{name}.json"],
                cwd=tmp, env=e, pass_fds=(rep.fileno(),), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=timeout) for p in procs]
        texts = []
        for rep in reports:
            rep.seek(0)
            texts.append(rep.read())
    except BaseException:
        reap(procs)
        raise
    finally:
        for rep in reports:
            rep.close()
    return [p.returncode for p in procs], [o[1] for o in outs], [o[0] for o in outs], texts


def gpu_probe(build_dir, emu=False):
    """Exits 77 (skip) when the GPU probe (tests/zt_gpu_probe, or zt_gpu_probe_emu with emu) is
    not built or finds no usable GPU, and fails when it fails otherwise."""
    exe = os.path.join(build_dir, "tests", "zt_gpu_probe_emu" if emu else "zt_gpu_probe")
    if not os.path.exists(exe):
        print(f"SKIP: {exe} is not built")
        sys.exit(77)
    r = subprocess.run([exe], capture_output=True, text=True)
    if r.returncode == 77:
        print("SKIP:", r.stdout.strip())
        sys.exit(77)
    if r.returncode != 0:
        sys.exit(f"zt_gpu_probe failed ({r.returncode}): {r.stdout}{r.stderr}")


def finish(failures):
    """Ends a test script: lists the failures and exits 1, or prints ok."""
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")
