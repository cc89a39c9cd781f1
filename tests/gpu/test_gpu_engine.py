"""The GPU engine against the CPU engine, through the real `zctl run`:
- fp32, 20 steps (2 micro-steps of accumulation, clipping, weight decay) on a learnable
  synthetic corpus: device "cuda" and device "cpu" give per-step losses within 1e-4 relative and
  exported parameters within 1e-4 relative L2 (all tensors as one vector; each tensor within
  5e-3, see TENSOR_RTOL);
- the NCCL single-rank path (device cuda, ranks 1) for ZeRO stages 0-3, each against the CPU run
  with the same tolerances;
- optimizer offload on the GPU (ratio 0.5 and 1, stage 2; and to NVMe at ratio 0.5): bitwise the
  same exported model as no offload, since the CUDA AdamW is bit-exact with the CPU AdamW that
  runs the host part; and at stage 3 with offload_param (the parameter and gradient shards in
  pinned host memory, brought up and sent down on the copy stream; or the parameters on NVMe
  with the optimizer), bitwise the model with them on the device: fp32 and bf16 on one rank (2
  micro-steps) and on two ranks (fp32 with 2 micro-steps), each within zctl plan's device memory;
- bf16 on the GPU follows bf16 on the CPU within 2% (16-bit rounding of different GEMM sums),
  with fp32 matmuls and with the bf16 matmul inputs a bf16 job gets by default;
- the fused attention kernels (ZT_CUDA_ATTN=fused) on a model whose head size is theirs (64),
  against the CPU with the same tolerances, and their tensor-core versions in a bf16 job (each
  set of kernels: wmma, mma.sync, dQ by GEMM or atomics) and an fp16 job against the same
  precision on the CPU within 2%, and cuDNN's fused attention in both (ZT_CUDA_ATTN=cudnn; the
  emulation has no cuDNN: a warning and the kernels; in bf16 a second run of the job exports
  the same model, bit for bit) (--quick leaves them out);
- (--emu) training allocates nothing on the device or pinned host once the first step runs
  (stage 3 with offload_param too);
  launches, matmuls, copies, synchronisations and collectives per step are printed;
- a job whose arenas do not fit the GPU fails before training with an out-of-memory report
  that names the category and zctl plan's figure for it (the emulated GPU: 128 MiB);
- with two GPUs or more (ZT_GPU_COUNT, default 1): two ranks on the NCCL path, stages 1-3,
  against two CPU ranks with the same tolerances, stage 3 with offload_param bitwise as without
  (fp32 and bf16), and a rank killed mid-training: the other
  exits 3 within the collective timeout.
Exits 77 when the build has no CUDA backend or no GPU is usable (tests/zt_gpu_probe decides).

--emu: the same on the CUDA emulation (tests/gpu/emu): zworker_emu runs the engine on
emulated GPUs (their kernels are the .cu files compiled for the CPU) with NCCL emulated
across processes; two GPUs per process, so the two-rank cases run too. The CPU side of each
comparison is the real zworker. --quick (the sanitizer build): 6 steps, stages 0 and 3,
offload 0.5, two ranks at stage 2 only, the step costs of stage 3 from runs of 2 and 4 steps."""
import filecmp
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

SRC = os.environ.get("ZT_SOURCE_DIR",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
import ztutil as zu  # noqa: E402

EMU = "--emu" in sys.argv[1:]
QUICK = "--quick" in sys.argv[1:]
CFG = dict(L=2, NH=4, C=64, T=32, V=200, Vp=256)
CFG_HS64 = dict(CFG, NH=1)  # the head size of the fused attention kernels
STEPS = 6 if QUICK else 20
TB, MICRO = 8, 4
LOSS_RTOL = 1e-4
PARAM_RTOL = 1e-4  # all parameters as one vector
# Per tensor, looser: the key bias has a zero gradient in exact arithmetic (softmax ignores a
# constant shift), so Adam turns rounding noise into its updates; two CPU runs that only reduce
# in another order (stage 0 vs 2) already differ there by 2e-4. A broken op shows as >1e-2.
TENSOR_RTOL = 5e-3


# the tensor-core attention's kernels, each set named in full (not left to the defaults)
# (name in job names, (forward, backward, dQ))
TC_KERNEL_SETS = [("wmma", ("wmma", "wmma", "kernel")), ("mma", ("mma", "mma", "kernel")),
                  ("mma_dqgemm", ("mma", "mma", "gemm")), ("mma_dqatomic", ("mma", "mma", "atomic"))]
BUILD = os.environ.get("ZT_BUILD_DIR", "build")
# the environment of every GPU run: the emulation's worker and GPU count
GPU_ENV = {"ZT_WORKER": os.path.abspath(os.path.join(BUILD, "tests", "zworker_emu")),
           "ZT_CUDA_EMU_DEVICES": "2"} if EMU else {}
GPUS = 2 if EMU else int(os.environ.get("ZT_GPU_COUNT", "1"))


def job_for(name, device, stage=0, prec="fp32", offload=None, ranks=1, cfg=CFG, init="init.bin",
            nvme_path=None, offload_param=False):
    ds = {
        "train_batch_size": TB, "train_micro_batch_size_per_gpu": MICRO,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": stage},
    }
    if offload is not None:
        ds["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "ratio": offload}
        if nvme_path:
            ds["zero_optimization"]["offload_optimizer"].update(device="nvme", nvme_path=nvme_path)
    if offload_param == "nvme":  # every unit's shard in the swap, two buffers
        ds["zero_optimization"]["offload_param"] = {"device": "nvme", "nvme_path": nvme_path,
                                                    "max_in_cpu": 0, "buffer_count": 2}
    elif offload_param:
        ds["zero_optimization"]["offload_param"] = {"device": "cpu"}
    if prec != "fp32":
        ds[prec] = {"enabled": True}
    return {
        "name": name,
        "model": {"arch": "gpt2", "n_layer": cfg["L"], "n_head": cfg["NH"], "n_embd": cfg["C"],
                  "block_size": cfg["T"], "vocab_size": cfg["V"], "init": init},
        "data": {"train": "data/t_*.bin"},
        "train": {"steps": STEPS, "checkpoint_dir": f"ckpt/{name}"},
        "resources": {"ranks": ranks, "device": device},
        "deepspeed": ds,
    }


def main():
    zu.gpu_probe(BUILD, EMU)
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-gpu-engine-") as tmp:
        # a learnable corpus (Markov chain), so that the runs follow a falling loss curve
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data", "--prefix", "t",
                         "--vocab", str(CFG["V"]), "--train-tokens", "20000", "--val-tokens", "0",
                         "--shards", "2"])
        if r.returncode != 0:
            sys.exit(f"zctl data synth failed: {r.stderr}")
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=9))

        last = {}  # the last run's output (stdout and stderr)

        def run(job, extra_env=None):
            name = job["name"]
            zu.write_job(f"{tmp}/{name}.json", job)
            env = {"OMP_NUM_THREADS": "4", "ZT_CUDA_MATMUL": "fp32", **(extra_env or {})}
            report = None
            if job["resources"]["device"] == "cuda":
                env.update(GPU_ENV)
                if EMU:  # each rank writes its peak of emulated device memory at exit
                    report = f"{tmp}/devmem_{name}"
                    os.makedirs(report)
                    env["ZT_CUDA_EMU_REPORT"] = report
            r = zu.run_zctl(["run", f"{tmp}/{name}.json"], cwd=tmp, env=env)
            last["out"] = r.stdout + r.stderr
            if r.returncode != 0:
                sys.exit(f"{name}: zctl run failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
            if report:
                check_device_memory(tmp, name, report, job["resources"]["ranks"], env, failures)
            steps = zu.parse_step_lines(r.stdout)
            if len(steps) != STEPS:
                sys.exit(f"{name}: {len(steps)} step lines, expected {STEPS}:\n{r.stdout}")
            out = f"{tmp}/{name}.bin"
            e = zu.run_zctl(["ckpt", "export", f"{tmp}/ckpt/{name}", "--format", "llmc", "-o", out])
            if e.returncode != 0:
                sys.exit(f"{name}: export failed: {e.stderr}")
            return [float(s["loss"]) for s in steps], zu.read_model(out)[1], out, steps

        def compare(name, losses, params, ref_losses, ref_params, loss_rtol, param_rtol):
            worst = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
            perr = zu.rel_l2(np.concatenate([params[k].ravel() for k in zu.KINDS]),
                             np.concatenate([ref_params[k].ravel() for k in zu.KINDS]))
            errs = {k: zu.rel_l2(params[k], ref_params[k]) for k in zu.KINDS}
            kmax = max(errs, key=errs.get)
            print(f"{name}: max loss rel diff {worst:.2e}, parameters rel L2 {perr:.2e} "
                  f"(worst tensor {kmax} {errs[kmax]:.2e}; last loss {losses[-1]:.6f} vs "
                  f"{ref_losses[-1]:.6f})")
            if not worst <= loss_rtol:
                failures.append(f"{name}: loss rel diff {worst:.2e} > {loss_rtol}")
            if not perr <= param_rtol:
                failures.append(f"{name}: parameter rel L2 {perr:.2e} > {param_rtol}")
            if not errs[kmax] <= TENSOR_RTOL:
                failures.append(f"{name}: tensor {kmax} rel L2 {errs[kmax]:.2e} > {TENSOR_RTOL}")

        cpu_losses, cpu_params, _, _ = run(job_for("cpu_s0", "cpu"))
        print(f"cpu losses: {cpu_losses[0]:.6f} ... {cpu_losses[-1]:.6f}")
        if not cpu_losses[-1] < cpu_losses[0]:
            failures.append("the CPU run did not learn; the comparison would be vacuous")

        gpu_files = {}
        for stage in (0, 3) if QUICK else range(4):
            losses, params, path, steps = run(job_for(f"cuda_s{stage}", "cuda", stage))
            gpu_files[stage] = path
            compare(f"cuda stage {stage} vs cpu", losses, params, cpu_losses, cpu_params,
                    LOSS_RTOL, PARAM_RTOL)
            if stage == 0:
                print(f"cuda step line: {' '.join(f'{k}={v}' for k, v in steps[-1].items())}")

        # optimizer offload (Twin-Flow) on the GPU: same arithmetic on both sides
        _, _, ref_path, _ = run(job_for("cuda_s2_nooff", "cuda", 2))
        for ratio in (0.5,) if QUICK else (0.5, 1.0):
            _, _, path, _ = run(job_for(f"cuda_s2_off{ratio}", "cuda", 2, offload=ratio))
            same = filecmp.cmp(path, ref_path, shallow=False)
            print(f"cuda stage 2 offload ratio {ratio}: {'bitwise equal' if same else 'DIFFERS'}"
                  " to no offload")
            if not same:
                failures.append(f"offload ratio {ratio} on cuda is not bitwise the no-offload model")
        os.makedirs(f"{tmp}/swap")
        _, _, path, _ = run(job_for("cuda_s2_nvme", "cuda", 2, offload=0.5, nvme_path=f"{tmp}/swap"))
        same = filecmp.cmp(path, ref_path, shallow=False)
        print(f"cuda stage 2 NVMe offload ratio 0.5: {'bitwise equal' if same else 'DIFFERS'} to no offload")
        if not same:
            failures.append("NVMe offload on cuda is not bitwise the no-offload model")
        # ZeRO-3 Offload: the parameter shard in pinned host memory, brought up for each gather,
        # with the optimizer on the host; the same model as the optimizer alone on the host,
        # fp32 and bf16
        refs3 = {}
        for prec in ("fp32",) if QUICK else ("fp32", "bf16"):
            _, _, ref3, _ = run(job_for(f"cuda_s3_{prec}_off1", "cuda", 3, prec, offload=1.0))
            refs3[prec] = ref3
            _, _, path, _ = run(job_for(f"cuda_s3_{prec}_offparam", "cuda", 3, prec, offload=1.0,
                                        offload_param=True))
            same = filecmp.cmp(path, ref3, shallow=False)
            print(f"cuda stage 3 {prec} offload_param: {'bitwise equal' if same else 'DIFFERS'} to "
                  "the parameters on the device")
            if not same:
                failures.append(f"offload_param ({prec}) on cuda is not bitwise the device-parameter model")
        # ZeRO-Infinity: the parameter shard and the optimizer on NVMe, each gather copying a
        # unit up from the buffer it was read into: bitwise the parameters on the device
        _, _, path, _ = run(job_for("cuda_s3_fp32_paramnvme", "cuda", 3, offload=1.0,
                                    nvme_path=f"{tmp}/swap", offload_param="nvme"))
        if "parameters of units 0-" not in last["out"]:
            failures.append("offload_param nvme on cuda: no parameter swap was opened")
        same = filecmp.cmp(path, refs3["fp32"], shallow=False)
        print(f"cuda stage 3 fp32 offload_param nvme: {'bitwise equal' if same else 'DIFFERS'} "
              "to the parameters on the device")
        if not same:
            failures.append("offload_param nvme on cuda is not bitwise the device-parameter model")
        # without the whole optimizer on the host there is nobody to update host parameters
        j = job_for("cuda_s3_offparam_alone", "cuda", 3, offload_param=True)
        zu.write_job(f"{tmp}/{j['name']}.json", j)
        r = zu.run_zctl(["run", f"{tmp}/{j['name']}.json"], cwd=tmp,
                        env={"OMP_NUM_THREADS": "2", **GPU_ENV})
        if r.returncode == 0 or "needs offload_optimizer with ratio 1" not in r.stdout + r.stderr:
            failures.append(f"offload_param without host optimizer: not refused clearly "
                            f"({r.returncode}): {(r.stdout + r.stderr)[-600:]}")

        # bf16: 16-bit parameters and gradients; the matmuls in fp32 (as on the CPU), then
        # with the job's own choice, bf16 inputs (--quick: only that)
        cl, _, _, _ = run(job_for("cpu_bf16", "cpu", 2, "bf16"))
        for mm in ("",) if QUICK else ("fp32", ""):
            gl, _, _, _ = run(job_for(f"cuda_bf16_{mm or 'default'}", "cuda", 2, "bf16"),
                              {"ZT_CUDA_MATMUL": mm})
            dev = max(abs(a - b) / b for a, b in zip(gl, cl))
            what = f"bf16 cuda ({'matmul inputs ' + mm if mm else 'bf16 matmul inputs'}) vs cpu"
            print(f"{what}: max rel loss deviation {dev:.4f} (last loss {gl[-1]:.5f} vs {cl[-1]:.5f})")
            if dev > 0.02:
                failures.append(f"{what} deviates {dev:.4f} > 2%")

        if not QUICK:  # the fused attention, on one head of 64
            zu.write_model(f"{tmp}/init64.bin", CFG_HS64, zu.random_model(CFG_HS64, seed=9))
            cl, cp, _, _ = run(job_for("cpu_hs64", "cpu", cfg=CFG_HS64, init="init64.bin"))
            for attn in ("chunked", "fused"):
                gl, gp, _, _ = run(job_for(f"cuda_hs64_{attn}", "cuda", cfg=CFG_HS64,
                                           init="init64.bin"), {"ZT_CUDA_ATTN": attn})
                compare(f"cuda {attn} attention (head size 64) vs cpu", gl, gp, cl, cp,
                        LOSS_RTOL, PARAM_RTOL)
            # bf16 and fp16 jobs (the latter with dynamic loss scaling) with their own 16-bit
            # matmul inputs: the tensor-core attention kernels in that type
            # (bf16: each set of kernels, TC_KERNEL_SETS; fp16: the defaults)
            for prec in ("bf16", "fp16"):
                cl, _, _, _ = run(job_for(f"cpu_hs64_{prec}", "cpu", prec=prec, cfg=CFG_HS64,
                                          init="init64.bin"))
                for kset, kern in TC_KERNEL_SETS if prec == "bf16" else [("default", None)]:
                    kenv = dict(zip(("ZT_CUDA_ATTN_FWD", "ZT_CUDA_ATTN_BWD", "ZT_CUDA_ATTN_DQ"),
                                    kern or ("", "", "")))
                    gl, _, _, _ = run(job_for(f"cuda_hs64_{prec}_fused_{kset}", "cuda",
                                              prec=prec, cfg=CFG_HS64, init="init64.bin"),
                                      {"ZT_CUDA_ATTN": "fused", "ZT_CUDA_MATMUL": "", **kenv})
                    dev = max(abs(a - b) / b for a, b in zip(gl, cl))
                    what = (f"{prec} cuda fused attention on tensor cores "
                            f"({'/'.join(kern) if kern else 'default kernels'})")
                    print(f"{what} (head size 64) vs cpu: max rel loss deviation {dev:.4f} "
                          f"(last loss {gl[-1]:.5f} vs {cl[-1]:.5f})")
                    if dev > 0.02:
                        failures.append(f"{what} deviates {dev:.4f} > 2%")
                # cuDNN's fused attention (ZT_CUDA_ATTN=cudnn): the same bound where it ran; a
                # build without it (the emulation) warns and runs the kernels; a GPU machine
                # whose cuDNN cannot be loaded says so
                gl, _, dnn_path, _ = run(job_for(f"cuda_hs64_{prec}_cudnn", "cuda", prec=prec,
                                                 cfg=CFG_HS64, init="init64.bin"),
                                         {"ZT_CUDA_ATTN": "cudnn", "ZT_CUDA_MATMUL": ""})
                out = last["out"]
                dev = max(abs(a - b) / b for a, b in zip(gl, cl))
                ran = "attention by cuDNN" in out and "own kernels instead" not in out
                print(f"{prec} cuda attention by cuDNN (head size 64) vs cpu: "
                      f"{'ran' if ran else 'did not run'}, max rel loss deviation {dev:.4f} "
                      f"(last loss {gl[-1]:.5f} vs {cl[-1]:.5f})")
                if dev > 0.02:
                    failures.append(f"{prec} attention by cuDNN deviates {dev:.4f} > 2%")
                if ran and prec == "bf16":
                    # its backward's default graph gives the same bits every run: the job
                    # again exports the same model
                    _, _, again, _ = run(job_for(f"cuda_hs64_{prec}_cudnn_again", "cuda",
                                                 prec=prec, cfg=CFG_HS64, init="init64.bin"),
                                         {"ZT_CUDA_ATTN": "cudnn", "ZT_CUDA_MATMUL": ""})
                    same = filecmp.cmp(again, dnn_path, shallow=False)
                    print(f"{prec} cuda attention by cuDNN, the job run twice: "
                          f"{'bitwise equal' if same else 'DIFFERS'}")
                    if not same:
                        failures.append(f"{prec} attention by cuDNN: two runs of a job export "
                                        "different models")
                if EMU and "ignoring ZT_CUDA_ATTN=cudnn" not in out:
                    failures.append("ZT_CUDA_ATTN=cudnn on the emulation: no warning that the "
                                    "build has no cuDNN")
                if not EMU and not ran:
                    why = [ln for ln in out.splitlines() if "ZT_CUDA_ATTN=cudnn" in ln]
                    if any("cannot load" in ln for ln in why):
                        print(f"  skipped: this machine's cuDNN cannot be loaded: {why[0]}")
                    else:
                        failures.append(f"{prec}: ZT_CUDA_ATTN=cudnn did not run cuDNN: {why}")

        check_gpu_oom(tmp, failures)
        check_gpu_auto_batch(tmp, failures)
        if EMU:
            check_step_costs(tmp, failures)

        if GPUS >= 2:
            multi_rank(tmp, run, compare, failures)
        else:
            print("skipped: two ranks on the NCCL path (one GPU; ZT_GPU_COUNT says how many)")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")


def check_gpu_oom(tmp, failures):
    """A job whose device arenas do not fit the GPU: the worker fails before training, naming
    the GPU, the category whose arena could not be had, its size as zctl plan predicts it, the
    device's free and total memory, what the rank holds already and what to change; zctl run
    exits non-zero. On the emulation the GPU has 128 MiB (ZT_CUDA_EMU_MEMORY_MIB) and a micro
    batch of 1024 needs about 400 MiB; on a real GPU a micro batch of 4,000,000 about 1.6 TB."""
    job = job_for("gpu_oom", "cuda")
    micro = 1024 if EMU else 4_000_000
    job["deepspeed"].update(train_batch_size=micro, train_micro_batch_size_per_gpu=micro)
    job["train"]["steps"] = 1
    zu.write_job(f"{tmp}/gpu_oom.json", job)
    p = zu.run_zctl(["plan", f"{tmp}/gpu_oom.json", "-o", "json"])
    if p.returncode != 0:
        failures.append(f"gpu_oom: zctl plan failed: {p.stderr}")
        return
    planned = [r for r in json.loads(p.stdout)["rows"] if r["job"]][0]["bytes"]
    env = dict(GPU_ENV, ZT_CUDA_EMU_MEMORY_MIB="128") if EMU else {}
    r = zu.run_zctl(["run", f"{tmp}/gpu_oom.json"], cwd=tmp, env=env, timeout=300)
    text = r.stdout + r.stderr
    m = re.search(r"rank 0 is out of GPU memory: its (\w+) need (.+?) more \((.+?) of (.+?) free\)",
                  text)
    print(f"GPU out of memory: rc {r.returncode}: {m.group(0) if m else text.strip()[-300:]}")
    if r.returncode == 0 or not m:
        failures.append(f"gpu_oom: rc {r.returncode}, no GPU out-of-memory report in:\n{text}")
        return
    cat, need, total = m.group(1), m.group(2), m.group(4)
    want = [f"'zctl plan' predicts {need} of {cat}", "of it the CUDA context's buffers",
            "lower train_micro_batch_size_per_gpu"]
    if cat not in planned or need != zu.fmt_bytes(planned[cat]):
        failures.append(f"gpu_oom: {cat} needs {need}, zctl plan says "
                        f"{planned.get(cat)} bytes")
    if EMU and total != "128.0 MiB":
        failures.append(f"gpu_oom: the device's total reads {total}, not 128.0 MiB")
    missing = [w for w in want if w not in text]
    if missing:
        failures.append(f"gpu_oom: missing {missing} in:\n{text}")


def check_gpu_auto_batch(tmp, failures):
    """A micro batch of "auto" on a GPU: the worker reads the GPU's memory (48 MiB on the
    emulation), picks the largest micro batch whose device plan fits it with a 10% margin, says
    so in its log, and trains without running out of device memory."""
    job = job_for("gpu_auto", "cuda")
    job["deepspeed"].pop("train_batch_size")
    job["deepspeed"]["train_micro_batch_size_per_gpu"] = "auto"
    job["train"]["steps"] = 1
    zu.write_job(f"{tmp}/gpu_auto.json", job)
    env = dict(GPU_ENV, ZT_CUDA_EMU_MEMORY_MIB="48") if EMU else {}
    r = zu.run_zctl(["run", f"{tmp}/gpu_auto.json"], cwd=tmp, env=env, timeout=300)
    text = r.stdout + r.stderr
    log = f"{tmp}/ckpt/gpu_auto/logs/rank_00000.log"
    text += open(log).read() if os.path.exists(log) else ""
    m = re.search(r"auto: deepspeed\.train_micro_batch_size_per_gpu = (\d+) \((?:the largest that "
                  r"fits|at most \d+ tokens a micro batch; it fits) the GPU's ([0-9.]+ \w+)", text)
    print(f"GPU auto micro batch: rc {r.returncode}: {m.group(0) if m else text.strip()[-300:]}")
    if r.returncode != 0 or not m:
        failures.append(f"gpu_auto: rc {r.returncode}, no pick in:\n{text[-3000:]}")
    elif EMU and m.group(2) != "48.0 MiB":
        failures.append(f"gpu_auto: the GPU's memory reads {m.group(2)}, not 48.0 MiB")


# What a rank may allocate on the device beyond zctl plan's device total: the small exchange
# buffers of a checkpoint's outcome (one error message, ZT_ERRMSG_MAX = 4096 bytes) and NCCL's
# barrier float.
DEVICE_SLACK = 8192


def check_step_costs(tmp, failures):
    """What a training step asks of the (emulated) GPU, from the difference between a run of 4
    steps and one of 8 (--quick: 2 and 4): no device or pinned host allocation once training
    runs (every buffer lives in the arenas set up before the first step); launches, matmuls,
    copies, synchronisations and collectives per step are printed."""
    cases = [dict(stage=3)] if QUICK else [dict(stage=0), dict(stage=3),
                                           dict(stage=2, offload=0.5), dict(stage=2, prec="bf16"),
                                           dict(stage=3, offload=1.0, offload_param=True)]
    few, more = (2, 4) if QUICK else (4, 8)
    for cfg in cases:
        label = " ".join(f"{k} {v}" for k, v in cfg.items())
        counts = {}
        for steps in (few, more):
            name = f"costs_{steps}_{'_'.join(str(v) for v in cfg.values())}"
            job = job_for(name, "cuda", **cfg)
            job["train"]["steps"] = steps
            zu.write_job(f"{tmp}/{name}.json", job)
            report = f"{tmp}/report_{name}"
            os.makedirs(report)
            r = zu.run_zctl(["run", f"{tmp}/{name}.json"], cwd=tmp,
                            env=dict(GPU_ENV, ZT_CUDA_EMU_REPORT=report, ZT_CUDA_MATMUL="fp32"))
            reports = read_reports(report) if r.returncode == 0 else []
            if len(reports) != 1:
                failures.append(f"step costs ({label}): rc {r.returncode}, {len(reports)} "
                                f"reports:\n{r.stderr[-2000:]}")
                break
            counts[steps] = reports[0]
        if len(counts) != 2:
            continue
        per = {k: (counts[more][k] - counts[few][k]) / (more - few) for k in counts[more]
               if k != "peak_device_bytes"}
        print(f"per step ({label}, {TB // MICRO} micro-steps, {CFG['L']} layers): "
              + ", ".join(f"{k} {v:g}" for k, v in per.items()))
        if per["device_allocs"] or per["host_allocs"]:
            failures.append(f"step costs ({label}): allocations during training: {per}")


def read_reports(report):
    """The emulation's report of each rank (ZT_CUDA_EMU_REPORT): {name: count}"""
    out = []
    for f in sorted(os.listdir(report)):
        with open(os.path.join(report, f)) as fh:
            out.append({k: int(v) for k, v in (ln.split("=", 1) for ln in fh.read().split())})
    return out


def check_device_memory(tmp, name, report, ranks, env, failures):
    """Every device allocation of the run (the emulated runtime counts them all, the kernel
    context's included) stays within what zctl plan predicted for the job's device. The plan
    gets the run's environment: ZT_CUDA_MATMUL and ZT_CUDA_GEMM_STAGE decide whether the
    matmuls' staging buffer exists."""
    p = zu.run_zctl(["plan", f"{tmp}/{name}.json", "-o", "json"], env=env)
    if p.returncode != 0:
        failures.append(f"{name}: zctl plan failed: {p.stderr}")
        return
    plan = [r for r in json.loads(p.stdout)["rows"] if r["job"]][0]["device_bytes"]
    peaks = [r["peak_device_bytes"] for r in read_reports(report)]
    if len(peaks) != ranks:
        failures.append(f"{name}: {len(peaks)} device memory reports for {ranks} ranks")
        return
    worst = max(peaks)
    print(f"{name}: device memory peak {worst} bytes, zctl plan {plan} (+{worst - plan})")
    if not plan <= worst <= plan + DEVICE_SLACK:
        failures.append(f"{name}: device memory peak {worst} bytes outside zctl plan's {plan} "
                        f"+ [0, {DEVICE_SLACK}]")


def multi_rank(tmp, run, compare, failures):
    """Two GPU ranks (one per GPU, NCCL) against two CPU ranks (TCP), then a rank that dies
    mid-step and one that hangs: the other rank gives up with exit code 3 instead of waiting."""
    c_losses, c_params, _, _ = run(job_for("cpu_r2", "cpu", 2, ranks=2))
    for stage in (2,) if QUICK else (1, 2, 3):
        losses, params, _, _ = run(job_for(f"cuda_r2_s{stage}", "cuda", stage, ranks=2))
        compare(f"cuda 2 ranks stage {stage} vs cpu 2 ranks", losses, params, c_losses, c_params,
                LOSS_RTOL, PARAM_RTOL)
    if not QUICK:
        cl, _, _, _ = run(job_for("cpu_r2_bf16", "cpu", 3, "bf16", ranks=2))
        gl, _, _, _ = run(job_for("cuda_r2_bf16", "cuda", 3, "bf16", ranks=2))
        dev = max(abs(a - b) / b for a, b in zip(gl, cl))
        print(f"bf16 stage 3, 2 ranks, cuda vs cpu: max rel loss deviation {dev:.4f}")
        if dev > 0.02:
            failures.append(f"bf16 stage 3 on 2 cuda ranks deviates {dev:.4f} > 2% from cpu")
        # ZeRO-3 Offload on two ranks: each rank's shards in its pinned host memory, the same
        # model as the optimizer alone on the host (fp32 with 2 micro-steps of 2, bf16)
        for prec, micro in (("fp32", 2), ("bf16", MICRO)):
            paths = []
            for tag, oparam in (("off1", False), ("offparam", True)):
                job = job_for(f"cuda_r2_s3_{prec}_{tag}", "cuda", 3, prec, offload=1.0, ranks=2,
                              offload_param=oparam)
                job["deepspeed"]["train_micro_batch_size_per_gpu"] = micro
                paths.append(run(job)[2])
            same = filecmp.cmp(paths[1], paths[0], shallow=False)
            print(f"cuda 2 ranks stage 3 {prec} offload_param ({TB // (2 * micro)} micro-steps): "
                  f"{'bitwise equal' if same else 'DIFFERS'} to the parameters on the device")
            if not same:
                failures.append(f"offload_param ({prec}, 2 ranks) on cuda is not bitwise the "
                                "device-parameter model")

    timeout_ms = 6000
    for case in ("dies", "hangs"):
        job = job_for(f"fail_{case}", "cuda", 2, ranks=2)
        job["train"]["steps"] = 100000
        zu.write_job(f"{tmp}/fail_{case}.json", job)
        worker = GPU_ENV.get("ZT_WORKER", zu.zt_bin("zworker"))
        port = zu.free_port()
        procs = []
        for r in range(2):
            env = dict(os.environ, **GPU_ENV, ZT_RANK=str(r), ZT_WORLD_SIZE="2",
                       ZT_LOCAL_RANK=str(r), ZT_RENDEZVOUS=f"tcp://127.0.0.1:{port}",
                       ZT_COMM_TIMEOUT_MS=str(timeout_ms), OMP_NUM_THREADS="1")
            if case == "dies":
                env["ZT_INJECT_CRASH"] = "1:3"  # rank 1 aborts in the middle of step 3
            procs.append(subprocess.Popen([worker, f"{tmp}/fail_{case}.json"], cwd=tmp, env=env,
                                          stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True))
        try:
            if case == "hangs":  # once rank 0 trains, stop rank 1 (alive, never arriving)
                for line in procs[0].stdout:
                    if line.startswith("step=3 "):
                        break
                procs[1].send_signal(signal.SIGSTOP)
            t0 = time.time()
            try:
                _, err = procs[0].communicate(timeout=timeout_ms / 1000 * 3 + 30)
            except subprocess.TimeoutExpired:
                failures.append(f"{case}: rank 0 still running {time.time() - t0:.0f} s later")
                continue
            took = time.time() - t0
            last = err.strip().splitlines()[-1] if err.strip() else ""
            print(f"rank 1 {case}: rank 0 exited {procs[0].returncode} after {took:.1f} s: "
                  f"{last[-200:]}")
            want = "rank 1" if case == "dies" else f"not complete after {timeout_ms} ms"
            if procs[0].returncode != 3 or want not in last:
                failures.append(f"{case}: rank 0 exit {procs[0].returncode}, expected 3 and "
                                f"'{want}' in: {last}")
            if case == "hangs" and took < timeout_ms / 1000 - 0.5:
                failures.append(f"hangs: rank 0 gave up after {took:.1f} s, before the timeout")
        finally:
            zu.reap(procs)


if __name__ == "__main__":
    main()
