"""tests/bench/gpu_train: zerotrain vs PyTorch training GPT-2 124M on one GPU, in the same run.
Model: n_layer 12, n_head 12, n_embd 768, vocab 50257 (padded 50304), block 1024, random init,
random tokens. For each side and precision it finds the largest micro batch that fits (trying
--batches in descending order; zerotrain skips those zctl plan puts past the GPU's memory, and
PyTorch, whose every try costs a compilation, starts at the largest zerotrain ran unless
--torch-batches says otherwise; an out-of-memory attempt is dropped), then times --steps steps
after --warmup and prints tokens/s, achieved TFLOP/s ((6N + 6LCT) x tokens/s, llm.c's count),
MFU against the peak of the precision that ran and against the dense bf16 peak (989 TFLOP/s on
H100 SXM/H200; fp32/tf32/bf16 peaks are looked up from the device name), the framework's peak
memory and the device's peak (nvidia-smi, polled).
  zerotrain: fp32 (ZT_CUDA_MATMUL=fp32, exact fp32 cuBLASLt), tf32 (ZT_CUDA_MATMUL=tf32), bf16
             (the job's bf16 section: bf16 parameters and gradients, fp32 master weights, matmul
             inputs rounded to bf16 as set_matmul_dtype picks for bf16 jobs), and a bf16-tf32 row
             at bf16's micro batch (the same job with ZT_CUDA_MATMUL=tf32: TF32 matmuls, the
             choice before bf16 inputs; chunked attention, which TF32 inputs default to) with
             its ratio to the zt-chunked bf16 row below (the same attention);
             the ops keep fp32 in memory as kernels/ops.h defines them, and a bf16 job keeps
             qkv, attention output and MLP input in bf16 between forward and backward. The bf16
             rows of both are the issue's comparison.
  PyTorch:   fp32, tf32 and bf16 autocast, torch.compile, fused AdamW, scaled-dot-product
             attention (flash/memory-efficient kernels); the model follows tests/torch_gpt2.py.
The attention of the zerotrain rows is the default one: for 16-bit matmul inputs cuDNN's fused
flash attention on the tensors' 16-bit homes (kernels/cuda/attn_cudnn.c) where cuDNN loads, else
the fused tensor-core kernels (kernels/cuda/attn_tc_cuda.cu); for fp32 the chunked one (cuBLASLt
GEMMs over a T x T scratch). A "zt-chunked" (or "zt-fused") row reruns zerotrain's best bf16
(else first) precision at the same micro batch with the other attention (ZT_CUDA_ATTN), and the
ratio of fused (cuDNN's or the kernels) to chunked is printed: the measurement behind that
default. A "zt-unstaged" row reruns
bf16 at its micro batch with ZT_CUDA_GEMM_STAGE=0 (cuBLASLt converting the fp32 operands as it
loads them, instead of multiplying 16-bit copies; kernels/ops.h), with the ratio of the two; a
"zt-kernels" row with ZT_CUDA_ATTN=fused (zerotrain's tensor-core attention kernels instead of
cuDNN's), and beside it, each with its ratio to that row, a "zt-wmma" row with
ZT_CUDA_ATTN_FWD=wmma and ZT_CUDA_ATTN_BWD=wmma (the kernels' earlier versions, on the warp
matrix functions), "zt-dq-atomic" and "zt-dq-gemm" rows with ZT_CUDA_ATTN_DQ=atomic (dQ added up
by the dK dV kernel) and =gemm (dQ by cuBLASLt from dS), a "zt-mma4" row with
ZT_CUDA_ATTN_FWD=mma4 (the forward kernel held to 4 blocks an SM),
a "zt-head-small" row with the classifier in chunks of a quarter of the rows (ZT_HEAD_ROWS,
with the staging cap ZT_CUDA_GEMM_STAGE_MIB to match: the defaults before 2026-11-26), and a
"zt-unfused" row with ZT_CUDA_STAGE_FUSED=0 (every 16-bit copy of a matmul operand made by a
pass of its own: GELU's output written in fp32, the classifier as its ops one by one), a
"zt-cudnn-atomic" row with ZT_CUDA_ATTN_DQ=atomic (cuDNN's backward summing dQ by atomics: other
bits each run, where the default's deterministic graph writes it from its product), a
"zt-ln-grouped" row with ZT_CUDA_LN_BWD=grouped (LayerNorm's backward by the kernel before the
row kernel), a "zt-gemm-tune" row with ZT_CUDA_GEMM_TUNE=1 (cuBLASLt's candidates timed at each
shape's first call, the fastest kept: faster products, but the pick, so the bits, may differ
between runs), and a "zt-optimes" row with ZT_OP_TIMES=1 (the default with each op timed by the engine's marks:
the step split by op is printed under the summary, and the ratio to the default is the
marks' cost), and a "zt-z3-offload" row: ZeRO-3 Offload, stage 3 with offload_param and
offload_optimizer (ratio 1), the 16-bit parameter and gradient shards and the whole optimizer
in pinned host memory, each unit's shard brought up on the copy stream beside the compute, its
gradients sent down the same way, AdamW on the host (the ratio to the default is what keeping
the model states off the GPU costs). --variants picks which of these rows run (VARIANTS).
Then the Twin-Flow curve: zerotrain step time with the optimizer offloaded to the host at
ratio 1, 0.75, 0.5, 0.25, against no offload (ZeRO stage 2, one rank, same micro batch).
Needs a GPU (exits 77 without one: tests/zt_gpu_probe decides) and, for the PyTorch side, a
Python whose torch has CUDA (--torch-python, $ZT_TORCH_PYTHON, else python3 on PATH, else
/usr/bin/python3); without one the PyTorch rows are skipped with a warning.
Every result is printed when measured, then all again as a table with the ratios.
Usage: gpu_train.py [--steps N] [--warmup N] [--batches 128,96,...] [--torch-batches B,...]
                    [--skip-torch] [--skip-twinflow] [--zt-precisions fp32,tf32,bf16]
                    [--torch-modes fp32,tf32,bf16]
--emu: the whole zerotrain side on the CUDA emulation (tests/gpu/emu: zworker_emu, a 60 MiB
GPU) with a small model (L2 NH2 C128 T64 V500), PyTorch's side on the CPU (bf16, eager), 1 + 1
steps: the test that this script works (every row measured, the micro batch search skipping
what zctl plan says cannot fit and falling back past one that does not, the Twin-Flow curve
complete; exits 1 otherwise) before a GPU's time is spent on it."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

SRC = os.environ.get("ZT_SOURCE_DIR",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))

EMU = "--emu" in sys.argv[1:]
L, NH, C, T, V, VP = (2, 2, 128, 64, 500, 512) if EMU else (12, 12, 768, 1024, 50257, 50304)
N_PARAMS = VP * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
FLOP_PER_TOKEN = 6 * N_PARAMS + 6 * L * C * T
MODEL = "a small model on the CUDA emulation" if EMU else "GPT-2 124M"
BUILD = os.environ.get("ZT_BUILD_DIR", "build")
# the emulation's worker and GPU (its size makes --emu's first micro batch not fit)
EMU_ENV = {"ZT_WORKER": os.path.abspath(os.path.join(BUILD, "tests", "zworker_emu")),
           "ZT_CUDA_EMU_DEVICES": "1", "ZT_CUDA_EMU_MEMORY_MIB": "60",
           "OMP_NUM_THREADS": "2"} if EMU else {}

# dense peaks in TFLOP/s: (bf16, tf32, fp32), matched on the device name in this order
PEAKS = [
    ("H200", (989.4, 494.7, 66.9)),
    ("H100 NVL", (835.0, 417.5, 60.0)),
    ("H100 PCIe", (756.5, 378.0, 51.2)),
    ("H100", (989.4, 494.7, 66.9)),  # SXM / HBM3
    ("GH200", (989.4, 494.7, 66.9)),
    ("A100", (312.0, 156.0, 19.5)),
    ("L40S", (362.0, 183.0, 91.6)),
]
DEFAULT_PEAKS = (989.4, 494.7, 66.9)


def peaks_for(name):
    for key, p in PEAKS:
        if key.lower() in name.lower():
            return p, True
    return DEFAULT_PEAKS, False


class GpuMemPoller:
    """Max of nvidia-smi's memory.used for GPU 0 while running (MiB); None without nvidia-smi."""

    def __init__(self):
        self.exe = shutil.which("nvidia-smi")
        self.peak = None
        self._stop = threading.Event()
        self._t = None

    def _sample(self):
        try:
            out = subprocess.run([self.exe, "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                  "-i", "0"], capture_output=True, text=True, timeout=10).stdout
            v = float(out.strip().splitlines()[0])
            self.peak = v if self.peak is None else max(self.peak, v)
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            pass

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.5)

    def __enter__(self):
        if self.exe:
            self._t = threading.Thread(target=self._run, daemon=True)
            self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._t:
            self._t.join()


def gpu_name():
    if EMU:
        return "CUDA emulation"
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                           capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[0]
    return "unknown GPU"


# ---------------------------------------------------------------------------------------------
# PyTorch side (runs in a subprocess with the torch that has CUDA)

# torch.profiler's names grouped as gpu_train's op split reads them: the first pattern that a
# lower-cased kernel (GPU) or operator (CPU) name contains gives its group
PROFILE_GROUPS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("matmul", ("gemm", "xmma", "cutlass", "nvjet", "aten::mm", "aten::addmm", "aten::bmm",
                "aten::linear", "aten::matmul")),
    ("layernorm", ("layer_norm",)),
    ("cross-entropy", ("softmax", "nll", "cross_entropy")),
    ("gelu", ("gelu", "tanh")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "optimizer")),
    ("embedding", ("embedding",)),
    ("copies", ("memcpy", "memset", "copy_", "aten::to", "aten::cat", "clone", "contiguous")),
)


def profile_group(name):
    low = name.lower()
    for group, pats in PROFILE_GROUPS:
        if any(p in low for p in pats):
            return group
    return "other triton" if low.startswith("triton") else "other"


def torch_profile(step, x, y, sync, cuda, nsteps):
    """nsteps more steps under torch.profiler: each GPU kernel's time (on the CPU, each
    operator's self time) in ms per step, [[name, ms], ...] largest first"""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(nsteps):
            step(x, y)
        sync()
    times = {}
    for e in prof.key_averages():
        on_gpu = str(getattr(e, "device_type", "")).endswith("CUDA")
        if cuda != on_gpu:
            continue
        if cuda:  # the attribute's name changed across versions
            us = next((getattr(e, a) for a in ("self_device_time_total", "self_cuda_time_total")
                       if hasattr(e, a)), 0)
        else:
            us = e.self_cpu_time_total
        if us > 0:
            times[e.key] = times.get(e.key, 0.0) + us / 1e3 / nsteps
    return sorted(([k, v] for k, v in times.items()), key=lambda kv: -kv[1])


def torch_worker(args):
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            B_, T_, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(B_, T_, NH, C // NH).transpose(1, 2)
            k = k.view(B_, T_, NH, C // NH).transpose(1, 2)
            v = v.view(B_, T_, NH, C // NH).transpose(1, 2)
            if hasattr(F, "scaled_dot_product_attention"):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # torch < 2.0: the same function, unfused
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
                mask = torch.ones(T_, T_, dtype=torch.bool, device=x.device).tril()
                y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B_, T_, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VP, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            for n, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if n.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif n.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
            for blk in self.h:
                x = blk(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)[..., :V]  # padded logits left out
            return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1))

    mode = args.mode
    torch.backends.cuda.matmul.allow_tf32 = mode in ("tf32", "bf16")
    torch.backends.cudnn.allow_tf32 = mode in ("tf32", "bf16")
    torch.manual_seed(1)
    dev = torch.device(args.torch_device)
    cuda = dev.type == "cuda"  # cpu: --emu's check of this code, eager, with the torch there
    model = GPT().to(dev)
    decay = [p for p in model.parameters() if p.dim() == 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}], lr=3e-4,
                            **({"fused": True} if cuda else {}))
    compiled = cuda and hasattr(torch, "compile")
    cmodel = model
    if compiled:
        try:
            cmodel = torch.compile(model)
        except Exception as e:  # noqa: BLE001 - report and run eagerly
            print(f"torch.compile unavailable ({e}); running eagerly", file=sys.stderr)
            cmodel, compiled = model, False
    oom_error = getattr(torch.cuda, "OutOfMemoryError", None) or MemoryError

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        if mode == "bf16":
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = cmodel(x, y)
        else:
            loss = cmodel(x, y)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    result = None
    batches = [int(b) for b in args.batches.split(",")]
    while batches:
        B = batches[0]
        oom = False
        try:
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            g = torch.Generator(device="cpu").manual_seed(B)
            x = torch.randint(0, V, (B, T), generator=g).to(dev)
            y = torch.randint(0, V, (B, T), generator=g).to(dev)
            for _ in range(args.warmup):
                step(x, y)
            sync()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                loss = step(x, y)
            sync()
            dt = (time.perf_counter() - t0) / args.steps
            result = {"batch": B, "step_s": dt, "tok_s": B * T / dt, "loss": float(loss),
                      "mem_alloc": torch.cuda.max_memory_allocated() if cuda else 0,
                      "mem_reserved": torch.cuda.max_memory_reserved() if cuda else 0,
                      "compiled": compiled, "torch": torch.__version__, "fused_adamw": cuda,
                      "sdpa": hasattr(F, "scaled_dot_product_attention"),
                      "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
            if args.torch_profile > 0 and mode == "bf16":
                try:
                    result["profile"] = torch_profile(step, x, y, sync, cuda, args.torch_profile)
                    result["profile_steps"] = args.torch_profile
                except Exception as e:  # noqa: BLE001 - the measurement stands without it
                    print(f"torch.profiler failed ({e!r}); no split of PyTorch's step",
                          file=sys.stderr)
            break
        except oom_error:
            print(f"pytorch {mode}: micro batch {B} does not fit", file=sys.stderr)
            oom = True
        except Exception as e:  # noqa: BLE001 - compilation failing at the first call
            if not compiled:
                raise
            print(f"torch.compile failed at the first step ({e!r}); running eagerly",
                  file=sys.stderr)
            cmodel, compiled = model, False
        if oom:  # outside the handler, whose traceback holds the failed step's tensors
            x = y = loss = None
            opt.zero_grad(set_to_none=True)
            opt.state.clear()
            import gc
            gc.collect()
            batches.pop(0)
    print(json.dumps(result))


def find_torch_python(explicit, need_cuda=True):
    cands = [explicit, os.environ.get("ZT_TORCH_PYTHON"), shutil.which("python3"), "/usr/bin/python3"]
    for py in cands:
        if not py:
            continue
        r = subprocess.run([py, "-c", "import torch; print(int(torch.cuda.is_available()))"],
                           capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() in (("1",) if need_cuda else ("0", "1")):
            return py
    return None


def torch_run(py, mode, args, poller_cls):
    with poller_cls() as mem:
        r = subprocess.run([py, os.path.abspath(__file__), "--torch-worker", "--mode", mode,
                            "--batches", args.batches, "--steps", str(args.steps),
                            "--warmup", str(args.warmup), "--torch-device", args.torch_device,
                            "--torch-profile", str(args.torch_profile)]
                           + (["--emu"] if EMU else []), capture_output=True, text=True)
    if r.returncode != 0:
        print(f"WARNING: pytorch {mode} failed ({r.returncode}):\n{r.stderr[-3000:]}")
        return None
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if res is None:
        print(f"WARNING: pytorch {mode}: no micro batch of {args.batches} fits")
        return None
    res["dev_peak_mib"] = mem.peak
    return res


# ---------------------------------------------------------------------------------------------
# zerotrain side

def gpu_memory_mib():
    """The GPU's memory in MiB (nvidia-smi; the emulation's ZT_CUDA_EMU_MEMORY_MIB), or None."""
    if EMU:
        return float(EMU_ENV["ZT_CUDA_EMU_MEMORY_MIB"])
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    r = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                        "-i", "0"], capture_output=True, text=True)
    try:
        return float(r.stdout.strip().splitlines()[0])
    except (ValueError, IndexError):
        return None


# What a process holds on the GPU beyond zctl plan's device total (the CUDA context, NCCL's
# buffers), when deciding which micro batches to try: a batch the plan puts within this of the
# GPU's size is still tried. The emulation counts every byte, so there the margin is negative:
# a batch up to 10 MiB past its size is tried (and refused), the out-of-memory path's test.
PLAN_MARGIN_MIB = -10 if EMU else 1536


def fmt_row(who, prec, r, peak_of, pk_bf16):
    tflops = r["tok_s"] * FLOP_PER_TOKEN / 1e12
    alloc = r.get("mem_peak", r.get("mem_alloc", 0)) / 2**30
    dpk = f"{r['dev_peak_mib'] / 1024:.1f}" if r.get("dev_peak_mib") else "n/a"
    return (f"{who:<10} {prec:<9} {r['batch']:>7} {r['tok_s']:>9.0f} {tflops:>8.1f} "
            f"{100 * tflops / peak_of[prec]:>6.1f}% {100 * tflops / pk_bf16:>7.1f}% "
            f"{alloc:>14.2f} {dpk:>15}")


HEADER = (f"{'system':<10} {'precision':<9} {'micro B':>7} {'tok/s':>9} {'TFLOP/s':>8} "
          f"{'MFU':>7} {'MFU bf16':>8} {'peak alloc GiB':>14} {'device peak GiB':>15}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batches", default="128,96,64,48,32,24,16,12,8,4,2,1")
    ap.add_argument("--torch-batches",
                    help="PyTorch's micro batches to try, largest first (default: --batches from "
                         "the largest zerotrain ran down, or all of --batches without one)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-twinflow", action="store_true")
    ap.add_argument("--variants", default="all",
                    help="the rows after zerotrain's and PyTorch's: 'all' or a list of "
                         f"{', '.join(VARIANTS)} (zt-alt: the other attention)")
    ap.add_argument("--zt-precisions", default="fp32,tf32,bf16")
    ap.add_argument("--torch-modes", default="fp32,tf32,bf16")
    ap.add_argument("--twinflow-precision", default="bf16")
    ap.add_argument("--torch-python")
    ap.add_argument("--torch-worker", action="store_true")
    ap.add_argument("--mode")
    ap.add_argument("--emu", action="store_true")
    ap.add_argument("--torch-device", default="cuda")
    ap.add_argument("--torch-profile", type=int, default=3,
                    help="steps of PyTorch's bf16 run profiled after its timing, for the split "
                         "of its step by kernel (0: none)")
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    if EMU:  # PyTorch on the CPU (bf16 only): this script's PyTorch code run, not measured
        args.steps, args.warmup, args.batches = 1, 1, "32,16,4"
        args.torch_device, args.torch_modes = "cpu", "bf16"

    import numpy as np
    import ztutil as zu

    chosen = set(VARIANTS) if args.variants == "all" else set(args.variants.split(",")) - {""}
    if chosen - set(VARIANTS):
        sys.exit(f"gpu_train: --variants: unknown {', '.join(sorted(chosen - set(VARIANTS)))}; "
                 f"known: all, {', '.join(VARIANTS)}")

    def wanted(v):
        return v in chosen

    zu.gpu_probe(BUILD, EMU)
    name = gpu_name()
    (pk_bf16, pk_tf32, pk_fp32), known = peaks_for(name)
    peak_of = {"fp32": pk_fp32, "tf32": pk_tf32, "bf16": pk_bf16, "bf16-tf32": pk_tf32}
    # ZT_CUDA_MATMUL of each zerotrain precision ("": the job's precision decides)
    mm_of = {"fp32": "fp32", "tf32": "tf32", "bf16": "", "bf16-tf32": "tf32"}
    mem_mib = gpu_memory_mib()
    # Each result is printed as soon as it is measured (a run cut short by a time limit still
    # reports what it finished), then all of them again as one table with the ratios.
    print(f"gpu_train: {MODEL} (L{L} NH{NH} C{C} T{T} V{V}/{VP}), N = {N_PARAMS / 1e6:.2f}M "
          f"parameters, {FLOP_PER_TOKEN / 1e9:.3f} GFLOP per token (6N + 6LCT)")
    print(f"GPU: {name}"
          f"{f', {mem_mib / 1024:.1f} GiB' if mem_mib and not EMU else ''}"
          f"{f', {mem_mib:.0f} MiB' if mem_mib and EMU else ''}; dense peaks bf16 "
          f"{pk_bf16:.0f}, tf32 {pk_tf32:.0f}, fp32 {pk_fp32:.1f} TFLOP/s"
          f"{'' if known else ' (unknown model: H100 SXM figures assumed)'}")
    print(HEADER, flush=True)
    rows = []

    def add_row(who, prec, res):
        rows.append((who, prec, res))
        print(fmt_row(who, prec, res, peak_of, pk_bf16), flush=True)

    with tempfile.TemporaryDirectory(prefix="zt-bench-gpu-") as tmp:
        os.makedirs(f"{tmp}/data")
        rng = np.random.default_rng(1)
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, V, 100_000 if EMU else 4_000_000))

        def zt_job(jname, B, prec, stage=0, offload=None, offload_param=False):
            zo = {"stage": stage}
            if offload is not None:
                zo["offload_optimizer"] = {"device": "cpu", "pin_memory": True, "ratio": offload}
            if offload_param:  # stage 3, with offload_optimizer at ratio 1
                zo["offload_param"] = {"device": "cpu", "pin_memory": True}
            return {"name": jname,
                    "model": {"arch": "gpt2", "n_layer": L, "n_head": NH, "n_embd": C,
                              "block_size": T, "vocab_size": V, "init": "random", "seed": 1},
                    "data": {"train": "data/t_*.bin"},
                    "train": {"steps": args.warmup + args.steps, "checkpoint_dir": f"ckpt/{jname}"},
                    "resources": {"ranks": 1, "device": "cuda"},
                    "deepspeed": {"train_batch_size": B, "train_micro_batch_size_per_gpu": B,
                                  "optimizer": {"type": "AdamW",
                                                "params": {"lr": 3e-4, "weight_decay": 0.1}},
                                  "zero_optimization": zo,
                                  **({"bf16": {"enabled": True}} if prec.startswith("bf16")
                                     else {})}}

        def plan_mib(jname, job):
            """zctl plan's device total for the job, MiB (None if the plan fails)"""
            zu.write_job(f"{tmp}/{jname}.json", job)
            p = zu.run_zctl(["plan", f"{tmp}/{jname}.json", "-o", "json"], cwd=tmp)
            if p.returncode != 0:
                return None
            row = [r for r in json.loads(p.stdout)["rows"] if r["job"]][0]
            return row["device_bytes"] / 2**20

        def zt_run(jname, job, prec, attn="", stage="", dq="", fwd="", bwd="", more=None):
            # "": the defaults; more: other variables
            zu.write_job(f"{tmp}/{jname}.json", job)
            env = {"ZT_PEAK_TFLOPS": str(peak_of[prec]), "ZT_CUDA_ATTN": attn,
                   "ZT_CUDA_MATMUL": mm_of[prec], "ZT_CUDA_GEMM_STAGE": stage,
                   "ZT_CUDA_ATTN_DQ": dq, "ZT_CUDA_ATTN_FWD": fwd, "ZT_CUDA_ATTN_BWD": bwd,
                   **EMU_ENV, **(more or {})}
            with GpuMemPoller() as mem:
                r = zu.run_zctl(["run", f"{tmp}/{jname}.json"], cwd=tmp, env=env, timeout=3600)
            steps = zu.parse_step_lines(r.stdout)
            if r.returncode != 0 or len(steps) < args.warmup + args.steps:
                return None, (r.stdout + r.stderr)[-2000:]
            timed = steps[args.warmup:]
            step_s = sorted(float(s["step_ms"]) for s in timed)[len(timed) // 2] / 1e3
            B = job["deepspeed"]["train_micro_batch_size_per_gpu"]
            return {"step_s": step_s, "batch": B, "tok_s": B * T / step_s,
                    "mem_peak": int(timed[-1]["mem_peak"]),
                    "dev_peak_mib": mem.peak, "loss": float(timed[-1]["loss"]), "line": timed[-1]}, ""

        too_big = []  # (precision, micro batch, the rank's out-of-memory report or None)
        skipped = []  # (precision, micro batch, zctl plan's MiB): not tried

        def largest(prec):
            for B in [int(b) for b in args.batches.split(",")]:
                jname = f"zt_{prec}_b{B}"
                job = zt_job(jname, B, prec)
                need = plan_mib(jname, job)
                if mem_mib and need and need > mem_mib - PLAN_MARGIN_MIB:
                    skipped.append((prec, B, need))
                    print(f"  zerotrain {prec}: micro batch {B} not tried: zctl plan says "
                          f"{need:.0f} MiB of the GPU's {mem_mib:.0f}", flush=True)
                    continue
                res, err = zt_run(jname, job, prec)
                if res:
                    return res
                oom = next((ln for ln in err.splitlines() if "out of GPU memory" in ln), None)
                too_big.append((prec, B, oom))
                print(f"  zerotrain {prec}: micro batch {B} failed or does not fit: "
                      f"{(oom or err.strip() or '?').splitlines()[-1][-400:]}", flush=True)
            return None

        zt_best = {}
        for prec in [p for p in args.zt_precisions.split(",") if p]:
            res = largest(prec)
            if res:
                zt_best[prec] = res
                add_row("zerotrain", prec, res)

        # PyTorch right after zerotrain's best: the comparison the benchmark is for, before
        # the variants (a time limit keeps what finished)
        torch_info = ""
        if not args.skip_torch:
            py = find_torch_python(args.torch_python, need_cuda=not EMU)
            if not py:
                print("WARNING: no Python with a CUDA PyTorch found (--torch-python, "
                      "ZT_TORCH_PYTHON, python3, /usr/bin/python3); PyTorch rows skipped")
            else:
                # each batch PyTorch cannot hold costs a compilation: start at zerotrain's
                tb = args.torch_batches
                if not tb:
                    top = max((r["batch"] for r in zt_best.values()), default=None)
                    tb = ",".join(b for b in args.batches.split(",")
                                  if top is None or int(b) <= top)
                for mode in [m for m in args.torch_modes.split(",") if m]:
                    res = torch_run(py, mode, argparse.Namespace(**{**vars(args), "batches": tb}),
                                    GpuMemPoller)
                    if res:
                        add_row("pytorch", mode, res)
                        attn = ("scaled_dot_product_attention" if res["sdpa"]
                                else "unfused attention")
                        torch_info = (
                            f"PyTorch {res['torch']} ({py}) on {res['device']}: "
                            f"{'torch.compile' if res['compiled'] else 'eager'}, "
                            f"{'fused' if res['fused_adamw'] else 'plain'} AdamW, {attn}; "
                            f"micro batches tried from {tb.split(',')[0]}")

        def variant(who, prec, job_prec, suffix, what, job=None, **kw):
            """zerotrain's best `prec` run again at its micro batch as a `job_prec` job (with
            zt_job's keywords job), with zt_run's keywords kw: a row for `who`"""
            B = zt_best[prec]["batch"]
            jname = f"zt_{job_prec}_b{B}{suffix}"
            res, err = zt_run(jname, zt_job(jname, B, job_prec, **(job or {})), job_prec, **kw)
            if res:
                add_row(who, job_prec, res)
            else:
                print(f"  zerotrain {what} failed: {err.strip()[-400:]}")

        if "bf16" in zt_best:
            B = zt_best["bf16"]["batch"]
            # the classifier in chunks of a quarter of the rows (64M floats of logits, and a
            # staging cap of 128 MiB for their 16-bit copy: the defaults before 2026-11-26), so
            # four times the passes over wte
            head_small = {"ZT_HEAD_ROWS": str(min(B * T, (64 << 20) // VP)),
                          "ZT_CUDA_GEMM_STAGE_MIB": "128"}
            for who, suffix, what, kw in [
                    # zerotrain's tensor-core attention kernels in place of cuDNN's
                    ("zt-kernels", "_kernels", "bf16, zerotrain's attention kernels",
                     {"attn": "fused"}),
                    # their earlier versions, on wmma
                    ("zt-wmma", "_wmma", "bf16, wmma attention",
                     {"attn": "fused", "fwd": "wmma", "bwd": "wmma"}),
                    # the forward kernel at 4 blocks an SM (128 registers)
                    ("zt-mma4", "_mma4", "bf16, attention forward at 4 blocks an SM",
                     {"attn": "fused", "fwd": "mma4"}),
                    # its dQ by atomics from the dK dV kernel, or by cuBLASLt from dS
                    ("zt-dq-atomic", "_dqatomic", "bf16, dQ by atomics",
                     {"attn": "fused", "dq": "atomic"}),
                    ("zt-dq-gemm", "_dqgemm", "bf16, dQ by GEMM", {"attn": "fused", "dq": "gemm"}),
                    ("zt-head-small", "_headsmall", "bf16, classifier chunks of 64M floats",
                     {"more": head_small}),
                    # the 16-bit copies by passes of their own
                    ("zt-unfused", "_unfused", "bf16, unfused copies",
                     {"more": {"ZT_CUDA_STAGE_FUSED": "0"}}),
                    # the matmuls reading the fp32 operands
                    ("zt-unstaged", "_unstaged", "bf16 unstaged", {"stage": "0"}),
                    # cuDNN's backward summing dQ by atomics
                    ("zt-cudnn-atomic", "_cudnnatomic", "bf16, cuDNN attention, dQ by atomics",
                     {"dq": "atomic"}),
                    # LayerNorm's backward by the kernel before the row kernel
                    ("zt-ln-grouped", "_lngrouped", "bf16, LayerNorm's backward grouped",
                     {"more": {"ZT_CUDA_LN_BWD": "grouped"}}),
                    # cuBLASLt's candidates timed at each shape's first call
                    ("zt-gemm-tune", "_gemmtune", "bf16, cuBLASLt's candidates timed",
                     {"more": {"ZT_CUDA_GEMM_TUNE": "1"}}),
                    # the default with each op's time (ZT_OP_TIMES=1): where a step goes
                    ("zt-optimes", "_optimes", "bf16 with op times",
                     {"more": {"ZT_OP_TIMES": "1"}})]:
                if wanted(who):
                    variant(who, "bf16", "bf16", suffix, what, **kw)
            # ZeRO-3 Offload: the model states in pinned host memory, each unit up and its
            # gradients down on the copy stream, AdamW on the host
            if wanted("zt-z3-offload"):
                variant("zt-z3-offload", "bf16", "bf16", "_z3offload", "bf16, ZeRO-3 Offload",
                        job={"stage": 3, "offload": 1.0, "offload_param": True})
            # bf16 jobs with TF32 matmuls (no search of its own; the attention TF32 picks)
            if wanted("bf16-tf32"):
                variant("zerotrain", "bf16", "bf16-tf32", "", "bf16 with TF32 matmuls",
                        attn="chunked")

        alt_prec = "bf16" if "bf16" in zt_best else next(iter(zt_best), None)
        if alt_prec and wanted("zt-alt"):  # the attention the default does not pick for it
            alt = "chunked" if alt_prec in ("bf16", "fp16") else "fused"
            variant(f"zt-{alt}", alt_prec, alt_prec, f"_{alt}",
                    f"{alt_prec} with the {alt} attention", attn=alt)

        twin = []
        tp = args.twinflow_precision
        if not args.skip_twinflow and tp in zt_best:
            B = zt_best[tp]["batch"]
            print(f"Twin-Flow (zerotrain {tp}, ZeRO stage 2, micro batch {B}):", flush=True)
            for ratio in (None, 1.0, 0.75, 0.5, 0.25):
                jname = f"twin_{'none' if ratio is None else ratio}"
                res, err = zt_run(jname, zt_job(jname, B, tp, stage=2, offload=ratio), tp)
                if res is None:
                    print(f"  Twin-Flow ratio {ratio}: failed: {err.strip()[-400:]}")
                else:
                    print(f"  {'no offload' if ratio is None else f'ratio {ratio:.2f}'}: step "
                          f"{res['step_s'] * 1e3:.1f} ms", flush=True)
                twin.append((ratio, res))

    print()
    print("== summary")
    if torch_info:
        print(torch_info)
    print(HEADER)
    for who, prec, r in rows:
        print(fmt_row(who, prec, r, peak_of, pk_bf16))
    zt_tf = {p: r for w, p, r in rows if w == "zerotrain"}
    th = {p: r for w, p, r in rows if w == "pytorch"}
    for p in zt_tf:
        if p in th:
            a, b = zt_tf[p], th[p]
            mem = (f", {a['mem_peak'] / b['mem_alloc']:.2f}x peak allocated memory"
                   if b["mem_alloc"] else "")
            print(f"zerotrain/pytorch at {p}: {a['tok_s'] / b['tok_s']:.2f}x tokens/s "
                  f"(micro batch {a['batch']} vs {b['batch']}){mem}")
    chunked = {p: r for w, p, r in rows if w == "zt-chunked"}
    if "bf16" in chunked and "bf16-tf32" in zt_tf:
        a, b = chunked["bf16"], zt_tf["bf16-tf32"]
        print(f"bf16 job, bf16/TF32 matmul inputs at micro batch {a['batch']}, chunked attention: "
              f"{a['tok_s'] / b['tok_s']:.2f}x tokens/s (fwd {a['line'].get('fwd_ms', '?')} vs "
              f"{b['line'].get('fwd_ms', '?')} ms, bwd {a['line'].get('bwd_ms', '?')} vs "
              f"{b['line'].get('bwd_ms', '?')} ms)")
    kern = {p: r for w, p, r in rows if w == "zt-kernels"}
    for w, p, r in rows:
        if w in VARIANT_RATIOS:
            label, default_first, base = VARIANT_RATIOS[w]
            ref = (kern if base == "zt-kernels" else zt_tf).get(p)
            if ref is None:
                continue
            a, b = (ref, r) if default_first else (r, ref)
            print(f"{p}, {label} at micro batch {r['batch']}: "
                  f"{a['tok_s'] / b['tok_s']:.2f}x tokens/s (fwd {a['line'].get('fwd_ms', '?')} "
                  f"vs {b['line'].get('fwd_ms', '?')} ms, bwd {a['line'].get('bwd_ms', '?')} vs "
                  f"{b['line'].get('bwd_ms', '?')} ms, peak alloc {a['mem_peak'] / 2**30:.2f} vs "
                  f"{b['mem_peak'] / 2**30:.2f} GiB)")
        if w in ("zt-fused", "zt-chunked") and p in zt_tf:
            fu, ch = (r, zt_tf[p]) if w == "zt-fused" else (zt_tf[p], r)
            print(f"fused (cuDNN's or the kernels)/chunked attention at {p}, "
                  f"micro batch {r['batch']}: "
                  f"{fu['tok_s'] / ch['tok_s']:.2f}x tokens/s "
                  f"(fwd {fu['line'].get('fwd_ms', '?')} vs {ch['line'].get('fwd_ms', '?')} ms, "
                  f"bwd {fu['line'].get('bwd_ms', '?')} vs {ch['line'].get('bwd_ms', '?')} ms)")
    optimes = next((r for w, p, r in rows if w == "zt-optimes"), None)
    if optimes:
        print_optimes(optimes)
    prof = next((r for w, p, r in rows if w == "pytorch" and r.get("profile")), None)
    if prof:
        print_torch_profile(prof)
    if twin:
        base = next((r for ratio, r in twin if ratio is None and r), None)
        print(f"\nTwin-Flow (zerotrain {tp}, ZeRO stage 2, micro batch {zt_best[tp]['batch']}): "
              "step time with offload_optimizer ratio r (fraction of the optimizer on the host)")
        for ratio, r in twin:
            label = "no offload" if ratio is None else f"ratio {ratio:.2f}"
            if not r:
                print(f"  {label:<11} failed")
                continue
            rel = f" ({r['step_s'] / base['step_s']:.2f}x no offload)" if base else ""
            ln = r["line"]
            print(f"  {label:<11} step {r['step_s'] * 1e3:8.1f} ms{rel}, forward "
                  f"{ln.get('fwd_ms', '?')} ms, backward {ln.get('bwd_ms', '?')} ms, optimizer "
                  f"{ln.get('opt_ms', '?')} ms, peak alloc {r['mem_peak'] / 2**30:.2f} GiB")
    if EMU:
        sys.exit(check_emu(rows, twin, too_big, skipped, args))


def op_times(line):
    """{label: ms per step} of a step line's op_<label>_ms fields (ZT_OP_TIMES=1)"""
    return {k[3:-3]: float(v) for k, v in line.items() if k.startswith("op_") and k.endswith("_ms")}


def print_optimes(r):
    """the zt-optimes row's step split by op (the engine's marks between its ops), largest
    first, as ms per step and as a share of the step"""
    ops, step = op_times(r["line"]), float(r["line"]["step_ms"])
    print(f"\nwhere a step goes (zerotrain bf16, micro batch {r['batch']}, ZT_OP_TIMES=1; the "
          f"marks time {sum(ops.values()):.1f} of its {step:.1f} ms; a layer's ops summed over "
          f"the layers, \"engine\" the engine's own work between them):")
    for name, ms in sorted(ops.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<16} {ms:9.2f} ms {100 * ms / step:6.1f}%")


def print_torch_profile(r, top=20):
    """PyTorch's bf16 step split by group of kernels (PROFILE_GROUPS), then its largest
    kernels, as ms per step and as a share of the timed step"""
    prof, step = r["profile"], r["step_s"] * 1e3
    groups = {}
    for name, ms in prof:
        g = profile_group(name)
        groups[g] = groups.get(g, 0.0) + ms
    total = sum(ms for _, ms in prof)
    print(f"\nwhere PyTorch's step goes (bf16, micro batch {r['batch']}, torch.profiler over "
          f"{r['profile_steps']} steps after the timed ones; {'kernels' if r['device'] != 'cpu' else 'operators'} "
          f"{total:.1f} ms of its {step:.1f} ms step):")
    for g, ms in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {g:<16} {ms:9.2f} ms {100 * ms / step:6.1f}%")
    print(f"  its {min(top, len(prof))} largest:")
    for name, ms in prof[:top]:
        short = name if len(name) <= 90 else name[:87] + "..."
        print(f"    {ms:9.2f} ms {100 * ms / step:6.1f}%  {short}")


# the rows --variants chooses from
VARIANTS = ("zt-kernels", "zt-wmma", "zt-mma4", "zt-dq-atomic", "zt-dq-gemm", "zt-head-small",
            "zt-unfused", "zt-unstaged", "zt-cudnn-atomic", "zt-ln-grouped", "zt-gemm-tune",
            "zt-optimes", "zt-z3-offload", "bf16-tf32", "zt-alt")
# a variant row's ratio to its base row's (the default "zerotrain", or "zt-kernels" for the
# kernels' own variants): what the two sides are (the first over the second), and whether the
# base is the first
VARIANT_RATIOS = {
    "zt-unstaged": ("matmuls on 16-bit copies/on fp32 operands", True, "zerotrain"),
    "zt-kernels": ("attention by cuDNN/by zerotrain's kernels", True, "zerotrain"),
    "zt-dq-gemm": ("attention kernels' dQ by GEMM/by kernel", False, "zt-kernels"),
    "zt-wmma": ("attention kernels on mma.sync/on wmma", True, "zt-kernels"),
    "zt-mma4": ("attention kernels' forward at 3/4 blocks an SM", True, "zt-kernels"),
    "zt-dq-atomic": ("attention kernels' dQ by atomics/by kernel", False, "zt-kernels"),
    "zt-head-small": ("classifier in chunks of 256M/64M floats of logits", True, "zerotrain"),
    "zt-unfused": ("16-bit copies by passes that run anyway/by their own", True, "zerotrain"),
    "zt-cudnn-atomic": ("cuDNN's attention, dQ by atomics/by its product", False, "zerotrain"),
    "zt-ln-grouped": ("LayerNorm's backward by the row kernel/by the grouped one", True,
                      "zerotrain"),
    "zt-gemm-tune": ("cuBLASLt's first candidate/the fastest of those timed", True, "zerotrain"),
    "zt-optimes": ("op times off/on (the marks' cost)", True, "zerotrain"),
    "zt-z3-offload": ("model states on the GPU (stage 0)/ZeRO-3 Offload", True, "zerotrain"),
}


def check_emu(rows, twin, too_big, skipped, args):
    """--emu's verdict: every row and every Twin-Flow point measured; of each precision's micro
    batches the first not tried (zctl plan puts it past the GPU), the second refused for GPU
    memory with the rank's report (the plan puts it within the margin), the third run."""
    want = [("zerotrain", p) for p in args.zt_precisions.split(",") if p]
    if "bf16" in args.zt_precisions.split(","):
        want += [("zerotrain", "bf16-tf32"), ("zt-chunked", "bf16"), ("zt-unstaged", "bf16"),
                 ("zt-dq-gemm", "bf16"), ("zt-wmma", "bf16"), ("zt-mma4", "bf16"),
                 ("zt-dq-atomic", "bf16"),
                 ("zt-head-small", "bf16"), ("zt-unfused", "bf16"), ("zt-kernels", "bf16"),
                 ("zt-cudnn-atomic", "bf16"), ("zt-ln-grouped", "bf16"),
                 ("zt-gemm-tune", "bf16"), ("zt-optimes", "bf16"), ("zt-z3-offload", "bf16")]
    if not args.skip_torch:
        want += [("pytorch", "bf16")]
    have = {(w, p): r for w, p, r in rows}
    problems = [f"no {w} {p} row" for w, p in want if (w, p) not in have]
    first, second, third = (int(b) for b in args.batches.split(",")[:3])
    for w, p in want:
        if (w, p) in have and have[(w, p)]["batch"] != third:
            problems.append(f"{w} {p} ran micro batch {have[(w, p)]['batch']}, not {third}")
    for p in [p for w, p in want if w == "zerotrain" and p in args.zt_precisions.split(",")]:
        if not [b for q, b, _ in skipped if q == p and b == first]:
            problems.append(f"{p}: micro batch {first} was tried: {skipped}")
        rep = [oom for q, b, oom in too_big if q == p and b == second]
        if not rep or not rep[0] or "'zctl plan' predicts" not in rep[0]:
            problems.append(f"{p}: micro batch {second} was not refused with a GPU out-of-memory "
                            f"report: {rep}")
    if not args.skip_twinflow and (len(twin) != 5 or not all(r for _, r in twin)):
        problems.append(f"Twin-Flow curve incomplete: {[(ratio, bool(r)) for ratio, r in twin]}")
    for w, p, r in rows:
        if w == "pytorch" and args.torch_profile > 0:
            prof = r.get("profile") or []
            step_ms = r["step_s"] * 1e3
            if not prof or not 0.2 * step_ms <= sum(ms for _, ms in prof) <= 3 * step_ms:
                problems.append(f"pytorch {p}: profile {prof[:5]}... against a {step_ms:.1f} "
                                f"ms step")
        ops = op_times(r["line"]) if w != "pytorch" else {}
        if w == "zt-optimes":
            # every layer op and the classifier timed, together most of the step and no more
            step = float(r["line"]["step_ms"])
            need = {"ln1_qkv_fwd", "attn_fwd", "attproj_fwd", "fc_fwd", "gelu_fcproj_fwd",
                    "gelu_fcproj_bwd", "ln2_fc_bwd", "attproj_bwd", "attn_bwd", "ln1_qkv_bwd",
                    "classifier", "optimizer", "engine"}
            if need - set(ops) or not 0.5 * step <= sum(ops.values()) <= 1.05 * step + 1:
                problems.append(f"zt-optimes: op times {ops} against a {step} ms step")
        elif ops:
            problems.append(f"{w} {p}: op times without ZT_OP_TIMES: {ops}")
        mem_ok = r["mem_peak"] > 0 if w != "pytorch" else r["mem_alloc"] == 0  # on the CPU
        if not (r["tok_s"] > 0 and mem_ok and 0 < r["loss"] < 20):
            problems.append(f"{w} {p}: implausible figures {r}")
    if problems:
        print("FAILURES:\n  " + "\n  ".join(problems))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    main()
