"""compute-sanitizer over GPU training steps: `zctl run` starts zworker through a wrapper
(ZT_WORKER) that runs it under compute-sanitizer --tool memcheck, then --tool racecheck, on a
tiny model for two optimizer steps with gradient accumulation (every op of the CUDA table runs:
embeddings, LayerNorm, matmuls, attention, GELU, residual, cross-entropy, norms, AdamW), once in
fp32 and once in bf16 (casts, 16-bit accumulation); then the fused attention kernels
(ZT_CUDA_ATTN=fused, a model of head size 64 and a block of 80 tokens, so their tiles have
tails): fp32 (attn_cuda.cu) and bf16 (the tensor-core kernels of attn_tc_cuda.cu: on wmma,
on mma.sync, with dQ by the kernel, by GEMM and by atomics), bf16 on cuDNN's attention
(bf16_cudnn: its kernels are the library's, the engine's calls and buffers around them ours);
and fp16 (the loss scaler's overflow check and unscaling, the fp16 casts and the tensor-core
kernels on __half) on the small model and on the mma.sync attention.
ZT_SANITIZER_CASES=racecheck_bf16_fused_mma,... runs only the runs named (the names are
checked before the GPU is looked for).
Passes when every run exits 0 and the sanitizer reports 0 errors (CUDA API errors not counted:
see the wrapper). Exits 77 without a usable GPU or without compute-sanitizer
(/usr/local/cuda/bin/compute-sanitizer or on PATH)."""
import os
import re
import shutil
import stat
import sys
import tempfile

import numpy as np

SRC = os.environ.get("ZT_SOURCE_DIR",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
import ztutil as zu  # noqa: E402

CFG = dict(L=1, NH=2, C=32, T=16, V=60, Vp=128)
# kernels of other libraries (their names' start): racecheck's findings there are reported, not
# failed, unless ZT_SANITIZER_STRICT=1 (cuDNN's wgmma attention kernels drew 28 on an H200,
# 2026-11-27, which may be racecheck not following wgmma's and TMA's asynchronous proxy, or
# real; neither is zerotrain's code to fix); memcheck's findings fail wherever they are
LIBRARY_KERNELS = ("cudnn_generated_",)
CFG_HS64 = dict(L=1, NH=1, C=64, T=80, V=60, Vp=128)  # the fused attention's head size


def fused_tc(fwd, bwd, dq):
    """the environment of a run on the tensor-core attention with these kernels"""
    return {"ZT_CUDA_ATTN": "fused", "ZT_CUDA_ATTN_FWD": fwd, "ZT_CUDA_ATTN_BWD": bwd,
            "ZT_CUDA_ATTN_DQ": dq}


# (name, precision, model, model file, environment)
VARIANTS = [("fp32", "fp32", CFG, "init.bin", {}),
            ("bf16", "bf16", CFG, "init.bin", {}),
            ("fp32_fused", "fp32", CFG_HS64, "init64.bin", {"ZT_CUDA_ATTN": "fused"}),
            ("bf16_fused", "bf16", CFG_HS64, "init64.bin", fused_tc("wmma", "wmma", "kernel")),
            ("bf16_fused_mma", "bf16", CFG_HS64, "init64.bin", fused_tc("mma", "mma", "kernel")),
            ("bf16_fused_mma_dqgemm", "bf16", CFG_HS64, "init64.bin",
             fused_tc("mma", "mma", "gemm")),
            ("bf16_fused_mma_atomic", "bf16", CFG_HS64, "init64.bin",
             fused_tc("mma", "mma", "atomic")),
            # cuDNN's fused attention (the default where it loads: ZT_CUDA_ATTN=cudnn says so)
            ("bf16_cudnn", "bf16", CFG_HS64, "init64.bin", {"ZT_CUDA_ATTN": "cudnn"}),
            ("fp16", "fp16", CFG, "init.bin", {}),
            ("fp16_fused_mma", "fp16", CFG_HS64, "init64.bin", fused_tc("mma", "mma", "kernel"))]


def find_sanitizer():
    for cand in ("/usr/local/cuda/bin/compute-sanitizer", shutil.which("compute-sanitizer")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def sanitizer_verdict(tool, log):
    """The tool's last summary line in a log, stripped (None without one): memcheck ends with
    "========= ERROR SUMMARY: N errors", racecheck with "========= RACECHECK SUMMARY: N hazards
    displayed (E errors, W warnings)" (as compute-sanitizer printed them on an H200)"""
    key = "RACECHECK SUMMARY:" if tool == "racecheck" else "ERROR SUMMARY:"
    lines = [ln.strip() for ln in log.splitlines() if key in ln]
    return lines[-1] if lines else None


def library_hazards(log):
    """{kernel: hazards} of the races racecheck reported where both accesses are in another
    library's kernels (cuDNN's generated ones), or None where a race touches any other kernel
    (zerotrain's) or none was itemised. racecheck itemises "Race reported between Read access
    at KERNEL+0x.." then "and Write access at KERNEL+0x.. [N hazards]" (an H200, 2026-11-27)."""
    found, side = {}, None
    for ln in log.splitlines():
        if "hazard detected" in ln:  # racecheck's other form (shared memory, by thread): not
            return None              # sorted out here, so it fails as before
        m = re.search(r"Race reported between \w+ access at (\S+?)\+0x", ln)
        if m:
            side = m.group(1)
            continue
        m = re.search(r"and \w+ access at (\S+?)\+0x\S* \[(\d+) hazards?\]", ln)
        if m and side:
            for k in (side, m.group(1)):
                if not k.startswith(LIBRARY_KERNELS):
                    return None
            found[side] = found.get(side, 0) + int(m.group(2))
            side = None
    return found or None


def clean(tool, verdict):
    """Whether a summary line says nothing was found"""
    if not verdict:
        return False
    if tool == "racecheck":
        return verdict.endswith("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)")
    return verdict.endswith("ERROR SUMMARY: 0 errors")


def main():
    # ZT_SANITIZER_CASES: a comma-separated list of the runs to do (TOOL_VARIANT), else all;
    # a misspelt name fails here too, not only where a GPU would have run it
    only = set(os.environ.get("ZT_SANITIZER_CASES", "").split(",")) - {""}
    known = {f"{t}_{v[0]}" for t in ("memcheck", "racecheck") for v in VARIANTS}
    if only - known:
        sys.exit(f"ZT_SANITIZER_CASES: no run named {', '.join(sorted(only - known))}; "
                 f"known: {', '.join(sorted(known))}")
    strict = os.environ.get("ZT_SANITIZER_STRICT") == "1"
    zu.gpu_probe(os.environ.get("ZT_BUILD_DIR", "build"))
    san = find_sanitizer()
    if not san:
        print("SKIP: compute-sanitizer not found (/usr/local/cuda/bin or PATH)")
        sys.exit(77)
    worker = zu.zt_bin("zworker")
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-gpu-san-") as tmp:
        rng = np.random.default_rng(5)
        os.makedirs(f"{tmp}/data")
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, CFG["V"], 2000))
        zu.write_model(f"{tmp}/init.bin", CFG, zu.random_model(CFG, seed=2))
        zu.write_model(f"{tmp}/init64.bin", CFG_HS64, zu.random_model(CFG_HS64, seed=2))
        for tool in ("memcheck", "racecheck"):
            for variant, prec, cfg, init, extra_env in VARIANTS:
                name = f"{tool}_{variant}"
                if only and name not in only:
                    continue
                wrapper = f"{tmp}/{name}.sh"
                # API errors are not the sanitizer's to find: zerotrain checks every CUDA call's
                # status itself, and NCCL's start-up asks for the attributes of kernels it has
                # no image for on this GPU and handles the error (seen on an H200, 2026-11-26:
                # 8 such reports per run, all from ncclInitKernelsForDevice)
                with open(wrapper, "w") as f:
                    f.write("#!/bin/sh\n"
                            f"exec '{san}' --tool {tool} --target-processes all --error-exitcode 99 "
                            "--print-limit 50 --report-api-errors no "
                            f"'{worker}' \"$@\"\n")
                os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
                ds = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
                      "gradient_clipping": 1.0, "zero_optimization": {"stage": 1}}
                if prec != "fp32":
                    ds[prec] = {"enabled": True}
                job = {"name": name,
                       "model": {"arch": "gpt2", "n_layer": cfg["L"], "n_head": cfg["NH"],
                                 "n_embd": cfg["C"], "block_size": cfg["T"],
                                 "vocab_size": cfg["V"], "init": init},
                       "data": {"train": "data/t_*.bin"},
                       "train": {"steps": 2, "checkpoint_dir": f"ckpt/{name}"},
                       "resources": {"ranks": 1, "device": "cuda"},
                       "deepspeed": ds}
                zu.write_job(f"{tmp}/{name}.json", job)
                r = zu.run_zctl(["run", "--timeout-ms", "1200000", f"{tmp}/{name}.json"], cwd=tmp,
                                env={"ZT_WORKER": wrapper, **extra_env}, timeout=1500)
                try:
                    log = zu.rank_log(f"{tmp}/ckpt/{name}", 0)
                except OSError:
                    log = r.stdout + r.stderr
                verdict = sanitizer_verdict(tool, log)
                print(f"{name}: exit {r.returncode}; {verdict or 'no summary'}")
                lib = library_hazards(log) if tool == "racecheck" and r.returncode == 99 else None
                if lib and not strict:
                    print(f"  all in other libraries' kernels (reported, not failed; "
                          f"ZT_SANITIZER_STRICT=1 fails them): "
                          + ", ".join(f"{k} {n}" for k, n in sorted(lib.items())))
                    continue
                if r.returncode != 0 or not clean(tool, verdict):
                    failures.append(f"{name}: exit {r.returncode}")
                    print("---- rank 0 log (tail) ----\n" + "\n".join(log.splitlines()[-80:]))
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
