"""tests/bench/cpu_train: zerotrain vs the same GPT-2 in PyTorch on the CPU, same batch, same
init, same data. Config: n_layer 4, n_embd 256, n_head 4, block 256, batch 8, vocab 256.
On 1 thread (every pool pinned to one: OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, torch's own) and on
2 cores (each side at its fastest setting for two cores: zerotrain tries 1 process x 2 threads
and 2 ranks x 1 thread; PyTorch tries 2 threads everywhere, 2 intra-op threads with a 1-thread
BLAS, 1 intra-op thread with a 2-thread BLAS, and 1 thread), it prints tokens/s of each,
the ratio, and each side's achieved FLOP/s ((6N + 6LCT) x tokens/s, llm.c's count) as a
fraction of the machine's matmul peak (a large dnnl_sgemm timed in the same run), and which
BLAS PyTorch actually loaded. OpenBLAS picks its kernels by the CPU it recognises and falls back
to slow generic ones on a CPU newer than its release: before the runs, PyTorch's products of
this config's shapes are timed on one thread under each kernel set the CPU can run
(OPENBLAS_CORETYPE unset, Haswell, Zen, SkylakeX, Cooperlake) and every PyTorch run uses the
fastest, so that PyTorch is at its best on any machine (an OPENBLAS_CORETYPE already set is
kept as it is). Usage: cpu_train.py [--steps N] [--warmup N]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402

CFG = dict(L=4, NH=4, C=256, T=256, V=256, Vp=256)
B = 8


def thread_env(t):
    return {"OMP_NUM_THREADS": str(t), "OPENBLAS_NUM_THREADS": str(t), "MKL_NUM_THREADS": str(t),
            "GOTO_NUM_THREADS": str(t)}


# OpenBLAS kernel sets to try for PyTorch (with the CPU flag each needs), after its own choice
CORETYPES = [("Haswell", "avx2"), ("Zen", "avx2"), ("SkylakeX", "avx512f"),
             ("Cooperlake", "avx512_bf16")]


def blas_probe():
    """Runs in a subprocess under one OPENBLAS_CORETYPE: GFLOP/s of PyTorch's products of this
    config's shapes (the linear layers' forward and their backward's transposes) on one thread"""
    import time

    import torch
    torch.set_num_threads(1)
    n, c = B * CFG["T"], CFG["C"]
    x, w, g = torch.randn(n, c), torch.randn(4 * c, c), torch.randn(n, 4 * c)
    calls = [lambda: x @ w.t(), lambda: g @ w, lambda: g.t() @ x]
    flop = 3 * 2 * n * c * 4 * c
    best = float("inf")
    for rep in range(8):
        t0 = time.perf_counter()
        for f in calls:
            f()
        if rep >= 2:
            best = min(best, time.perf_counter() - t0)
    print(json.dumps({"gflops": flop / best / 1e9}))


def pick_coretype():
    """The OPENBLAS_CORETYPE under which PyTorch's products run fastest here (None: OpenBLAS's
    own choice), and the GFLOP/s of each candidate, for the printout"""
    if "OPENBLAS_CORETYPE" in os.environ:
        return os.environ["OPENBLAS_CORETYPE"], {}
    with open("/proc/cpuinfo") as f:
        flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    seen = {}
    for ct in [None] + [ct for ct, need in CORETYPES if need in flags]:
        env = dict(os.environ, **thread_env(1))
        if ct:
            env["OPENBLAS_CORETYPE"] = ct
        r = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--blas-probe"],
                           capture_output=True, text=True, env=env)
        if r.returncode == 0:
            seen[ct] = json.loads(r.stdout.strip().splitlines()[-1])["gflops"]
    if not seen:
        return None, seen
    return max(seen, key=seen.get), seen


def torch_worker(args):
    """Runs in a subprocess so the thread settings apply before torch and BLAS load."""
    import time

    import torch
    import torch_gpt2 as tg
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    cfg, params = tg.read_model(args.init)
    data = tg.Data(sorted(args.data), CFG["T"])
    model = tg.GPT2(cfg, params)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    times = []
    for step in range(args.warmup + args.steps):
        x, y = data.batch(step, B)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y) / (B * CFG["T"])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    blas = "unknown"
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if ".so" in line}
    for lib in sorted(libs):
        base = os.path.basename(lib)
        if "openblas" in base or base.startswith("libblas") or "mkl" in base:
            blas = os.path.realpath(lib)
            break
    timed = times[args.warmup:]
    print(json.dumps({"tok_s": B * CFG["T"] * len(timed) / sum(timed), "blas": blas,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--torch-worker", action="store_true")
    ap.add_argument("--blas-probe", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init")
    ap.add_argument("--data", nargs="*")
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    if args.blas_probe:
        return blas_probe()

    here = os.path.dirname(os.path.abspath(__file__))
    bindir = os.environ.get("ZT_BIN", "build/bin")
    with tempfile.TemporaryDirectory(prefix="zt-bench-cpu-") as tmp:
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--train-tokens", "400000",
                         "--val-tokens", "0"])
        assert r.returncode == 0, r.stderr
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=1))
        shards = sorted(os.path.join(f"{tmp}/data", f) for f in os.listdir(f"{tmp}/data")
                        if f.startswith("synth_train"))

        def peak(t):
            out = subprocess.run([os.path.join(bindir, "zt_sgemm_peak"), "2048"], capture_output=True,
                                 text=True, env=dict(os.environ, **thread_env(t)), check=True).stdout
            return float(out.split()[0].split("=")[1]) * 1e9

        coretype, probed = pick_coretype()

        def torch_run(t, blas=None):
            env = dict(os.environ, **thread_env(t))
            if coretype:
                env["OPENBLAS_CORETYPE"] = coretype
            if blas is not None:  # BLAS pool sized apart from torch's intra-op pool
                env["OPENBLAS_NUM_THREADS"] = env["GOTO_NUM_THREADS"] = str(blas)
            env["PYTHONPATH"] = os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests")
            out = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker",
                                  "--threads", str(t), "--init", f"{tmp}/init.bin",
                                  "--steps", str(args.steps), "--warmup", str(args.warmup),
                                  "--data", *shards], capture_output=True, text=True, env=env)
            if out.returncode != 0:
                sys.exit("torch worker failed:\n" + out.stderr)
            return json.loads(out.stdout.strip().splitlines()[-1])

        def zt_run(ranks, t):
            name = f"zt_r{ranks}_t{t}"
            job = {"name": name,
                   "model": {"n_layer": CFG["L"], "n_head": CFG["NH"], "n_embd": CFG["C"],
                             "block_size": CFG["T"], "vocab_size": CFG["V"], "init": "init.bin"},
                   "data": {"train": "data/synth_train_*.bin"},
                   "train": {"steps": args.warmup + args.steps, "checkpoint_dir": f"ckpt/{name}"},
                   "resources": {"ranks": ranks},
                   "deepspeed": {"train_batch_size": B,
                                 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}}
            zu.write_job(f"{tmp}/{name}.json", job)
            r = zu.run_zctl(["run", f"{tmp}/{name}.json"], cwd=tmp, env=thread_env(t))
            if r.returncode != 0:
                sys.exit(f"zctl run failed:\n{r.stderr}")
            steps = zu.parse_step_lines(r.stdout)[args.warmup:]
            secs = sum(float(s["step_ms"]) for s in steps) / 1e3
            return B * CFG["T"] * len(steps) / secs

        n_params = sum(v.size for v in zu.read_model(f"{tmp}/init.bin")[1].values())
        fpt = 6 * n_params + 6 * CFG["L"] * CFG["C"] * CFG["T"]
        rows = []
        for cores in (1, 2):
            pk = peak(cores)
            zt_opts = {"1 process x 1 thread": zt_run(1, 1)} if cores == 1 else {
                "1 process x 2 threads": zt_run(1, 2), "2 ranks x 1 thread": zt_run(2, 1)}
            th_opts = {"1 thread": torch_run(1)} if cores == 1 else {
                "2 threads": torch_run(2), "torch 2 threads, BLAS 1": torch_run(2, blas=1),
                "torch 1 thread, BLAS 2": torch_run(1, blas=2), "1 thread": torch_run(1)}
            zt_best = max(zt_opts, key=zt_opts.get)
            th_best = max(th_opts, key=lambda k: th_opts[k]["tok_s"])
            z, t = zt_opts[zt_best], th_opts[th_best]["tok_s"]
            rows.append((cores, pk, zt_best, z, th_best, t, th_opts[th_best]["blas"]))
            for k, v in zt_opts.items():
                print(f"  [{cores} core(s)] zerotrain {k}: {v:.0f} tok/s")
            for k, v in th_opts.items():
                print(f"  [{cores} core(s)] pytorch {k}: {v['tok_s']:.0f} tok/s (BLAS {v['blas']})")
        print()
        print(f"cpu_train: GPT-2 L{CFG['L']} C{CFG['C']} T{CFG['T']} batch {B} vocab {CFG['V']}, "
              f"N = {n_params} parameters, {fpt / 1e6:.1f} MFLOP per token; "
              f"PyTorch {th_opts[th_best]['torch']}")
        print(f"{'cores':>5} {'sgemm GF/s':>10} | {'zerotrain':>10} {'GF/s':>6} {'%peak':>6} | "
              f"{'pytorch':>10} {'GF/s':>6} {'%peak':>6} | {'ratio':>6}  settings")
        for cores, pk, zb, z, tb, t, blas in rows:
            print(f"{cores:>5} {pk / 1e9:>10.1f} | {z:>10.0f} {z * fpt / 1e9:>6.1f} "
                  f"{100 * z * fpt / pk:>5.1f}% | {t:>10.0f} {t * fpt / 1e9:>6.1f} "
                  f"{100 * t * fpt / pk:>5.1f}% | {z / t:>5.2f}x  zerotrain {zb}; pytorch {tb}")
        tried = ", ".join(f"{ct or 'unset'} {g:.1f}" for ct, g in probed.items())
        print(f"PyTorch BLAS: {rows[0][6]} (OPENBLAS_CORETYPE={coretype or 'unset'}"
              + (f"; this config's products on 1 thread, GFLOP/s: {tried}" if tried else "") + ")")
        # issue 2's targets on this config: at least 1.5x PyTorch's tokens/s on 1 and on 2
        # cores, and at least 55% of the sgemm peak on 1 thread (reported, never asserted)
        for cores, pk, zb, z, tb, t, blas in rows:
            print(f"target [{cores} core(s)]: ratio {z / t:.2f}x vs 1.50x: "
                  f"{'met' if z / t >= 1.5 else 'MISSED'}")
        cores, pk, zb, z = rows[0][:4]
        if cores == 1:
            print(f"target [1 core]: {100 * z * fpt / pk:.1f}% of the sgemm peak vs 55%: "
                  f"{'met' if z * fpt / pk >= 0.55 else 'MISSED'}")
        if "openblas" not in rows[0][6]:
            print("WARNING: PyTorch is not using OpenBLAS; install libopenblas0 "
                  "(scripts/install-deps.sh does) or the ratio is meaningless")


if __name__ == "__main__":
    main()
