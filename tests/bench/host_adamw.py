"""tests/bench/host_adamw: the host half of an offloaded optimizer step, zerotrain's CPU AdamW
(kernels/cpu, what offload_optimizer runs on the host) next to torch.optim.AdamW on the same
machine in the same run, over one flat shard the size of GPT-2 124M (what one rank holds with
offload_optimizer ratio 1), at every thread count from 1 to the cores this process may use
(powers of two and the maximum). Two kinds of work:
  fp32:  fp32 parameters, fp32 gradients, fp32 moments (torch.optim.AdamW's own work);
  mixed: fp32 master, bf16 gradients, fp32 moments, and the bf16 copy of the result
         (zerotrain does it in one pass; PyTorch widens the gradients, steps, and casts back,
         which is how a PyTorch training loop keeps a bf16 model with fp32 master weights).
PyTorch gets GPT-2's own 148 tensors (a flat shard would make its temporaries larger and slower),
runs single-tensor and foreach and keeps its faster; each side at each thread count
gets its best of five steps. Bytes per element: 28 either way (fp32: reads p g m v, writes p m
v; mixed: reads p g16 m v, writes p m v lp16), shown as GB/s next to a memcpy's in the same run.
Usage: host_adamw.py [--n N] [--reps R]"""
import argparse
import json
import os
import subprocess
import sys
import time

GPT2_124M = 124_475_904  # llm.c's padded GPT-2 small: the whole parameter count, one rank


def thread_env(t):
    return {"OMP_NUM_THREADS": str(t), "OPENBLAS_NUM_THREADS": str(t), "MKL_NUM_THREADS": str(t)}


def gpt2_124m_shapes():
    """llm.c's GPT-2 small tensors (vocabulary padded to 50304): 124,475,904 elements."""
    C, L, Vp, T = 768, 12, 50304, 1024
    block = [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,),
             (C, 4 * C), (C,)]
    return [(Vp, C), (T, C)] + block * L + [(C,), (C,)]


def torch_worker(n, threads, reps):
    """Runs in a subprocess so the thread settings apply before torch loads. At GPT-2 124M's
    size PyTorch gets GPT-2's own tensors, as a training loop would hand them over (its
    per-tensor temporaries are smaller than one flat shard's); otherwise one tensor of n."""
    import torch
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(1)
    shapes = gpt2_124m_shapes() if n == GPT2_124M else [(n,)]
    ps = [torch.nn.Parameter(torch.empty(s).uniform_(-0.02, 0.02, generator=gen)) for s in shapes]
    gs = [torch.empty(s).uniform_(-1e-3, 1e-3, generator=gen) for s in shapes]
    g16s = [g.to(torch.bfloat16) for g in gs]
    lps = [torch.empty(s, dtype=torch.bfloat16) for s in shapes]
    assert sum(p.numel() for p in ps) == n
    out = {"threads": torch.get_num_threads(), "torch": torch.__version__, "tensors": len(ps)}
    for kind in ("fp32", "mixed"):
        best = {}
        for foreach in (False, True):
            opt = torch.optim.AdamW(ps, lr=1e-4, weight_decay=0.1, foreach=foreach)
            for p, g in zip(ps, gs):
                p.grad = g.clone()
            times = []
            for r in range(reps + 3):  # the first three create the moments and warm up
                t0 = time.perf_counter()
                if kind == "mixed":
                    for p, g16 in zip(ps, g16s):
                        p.grad.copy_(g16)
                opt.step()
                if kind == "mixed":
                    for p, lp in zip(ps, lps):
                        lp.copy_(p.detach())
                if r >= 3:
                    times.append(time.perf_counter() - t0)
            best["foreach" if foreach else "single-tensor"] = min(times)
            del opt
        k = min(best, key=best.get)
        out[kind] = {"s": best[k], "how": k}
    print(json.dumps(out))


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=GPT2_124M)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--torch-worker", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args.n, args.torch_worker, args.reps)

    bindir = os.environ.get("ZT_BIN", "build/bin")
    cores = cpu_count()
    counts = sorted({t for t in (1, 2, 4, 8, 16, 32, 64, 128) if t <= cores} | {cores})
    mb = 28.0 * args.n / 1e9  # GB moved per step
    print(f"host AdamW over {args.n:,} elements ({mb:.2f} GB moved per step), "
          f"threads {counts}, best of {args.reps}")
    print(f"{'threads':>7} | {'zerotrain fp32':>16} {'PyTorch fp32':>16} {'ratio':>6} | "
          f"{'zerotrain mixed':>16} {'PyTorch mixed':>16} {'ratio':>6} | memcpy")
    best = {"zf": None, "tf": None, "zm": None, "tm": None}
    for t in counts:
        env = dict(os.environ, **thread_env(t))
        z = subprocess.run([os.path.join(bindir, "bench_host_adamw"), str(args.n), str(args.reps)],
                           capture_output=True, text=True, env=env)
        if z.returncode != 0:
            sys.exit("bench_host_adamw failed:\n" + z.stderr)
        zr = json.loads(z.stdout.strip().splitlines()[-1])
        th = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--n", str(args.n),
                             "--reps", str(args.reps), "--torch-worker", str(t)],
                            capture_output=True, text=True, env=env)
        if th.returncode != 0:
            sys.exit("torch worker failed:\n" + th.stderr)
        tr = json.loads(th.stdout.strip().splitlines()[-1])

        def cell(s):
            return f"{s * 1e3:7.1f} ms {mb / s:4.1f}GB/s"

        print(f"{t:>7} | {cell(zr['fp32_s']):>16} {cell(tr['fp32']['s']):>16} "
              f"{tr['fp32']['s'] / zr['fp32_s']:5.2f}x | {cell(zr['mixed_s']):>16} "
              f"{cell(tr['mixed']['s']):>16} {tr['mixed']['s'] / zr['mixed_s']:5.2f}x | "
              f"{zr['copy_gbs']:.1f} GB/s  (PyTorch {tr['fp32']['how']} / {tr['mixed']['how']})")
        for key, s in (("zf", zr["fp32_s"]), ("tf", tr["fp32"]["s"]), ("zm", zr["mixed_s"]),
                       ("tm", tr["mixed"]["s"])):
            if best[key] is None or s < best[key][0]:
                best[key] = (s, t)
    print(f"torch {tr['torch']}, {tr['tensors']} tensors")
    for kind, z, th in (("fp32", "zf", "tf"), ("mixed", "zm", "tm")):
        (zs, zt), (ts, tt) = best[z], best[th]
        print(f"best {kind}: zerotrain {zs * 1e3:.1f} ms ({zt} threads) vs PyTorch "
              f"{ts * 1e3:.1f} ms ({tt} threads): {ts / zs:.2f}x")


if __name__ == "__main__":
    main()
