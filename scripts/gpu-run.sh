#!/usr/bin/env bash
# zerotrain: runs the GPU tests and benchmark on a lent GPU machine from what
# scripts/gpu-pack.sh gathered into .gpu/ (call the device tool with carry [".gpu"]). Unpacks
# the carried Debian packages under /tmp (nothing is installed) and uses those of their
# libraries the machine lacks, takes NCCL and cuBLASLt from the PyTorch installed there, and
# writes two files under $OUT (the device tool brings back at most 8): log.txt, the machine and
# every item's whole output, and summary.txt, one line per item.
# A session has 15 minutes of device time in all, the machine's start included, so `all` runs
# everything in one call within TOTAL_SECONDS (default 540): the items in the order of what the
# issue needs proven first, each with its own limit cut to what is left, an item that would
# get under 20 s skipped (SKIP(time) in the summary):
#   probe, test_gpu_ops, test_gpu_fault, test_comm_nccl, gpu_engine (GPU vs CPU engine),
#   bench_kernels_gpu --quick (and again with ZT_CUDA_GEMM_TUNE=1: bench_kernels_gpu_tuned),
#   gpu_train_bf16 (zerotrain vs PyTorch, both attentions, Twin-Flow), gpu_sanitizer,
#   gpu_train_fp32 (fp32 and tf32 rows); and on request only ncu (Nsight Compute on the first
#   launch in bench_kernels_gpu of each kernel named in ZT_NCU_KERNELS, by default zerotrain's
#   three attention kernels).
# Usage: scripts/gpu-run.sh [tests|bench|all|ITEM,ITEM,...] [TOTAL_SECONDS]
# (ZT_PYTHON: the python with PyTorch and numpy, python3 by default)
set -uo pipefail
cd "$(dirname "$0")/.."
R=$(pwd)
WHAT=${1:-all}
TOTAL=${2:-540}
OUT=${OUT:-$R/out}
mkdir -p "$OUT"
[ -f .gpu/progs.tar.gz ] && tar -xzf .gpu/progs.tar.gz -C .gpu
[ -d .gpu/bin ] || { echo "gpu-run: no .gpu/ here: run scripts/gpu-pack.sh first and carry .gpu" >&2; exit 2; }

# libraries: carried packages for what the system lacks, then NCCL and cuBLASLt from PyTorch
D=/tmp/zt-gpu-deps
rm -rf "$D" && mkdir -p "$D/root" "$D/lib"
for deb in .gpu/debs/*.deb; do dpkg-deb -x "$deb" "$D/root" || dpkg -x "$deb" "$D/root"; done
for f in "$D"/root/usr/lib/x86_64-linux-gnu/*.so.* "$D"/root/lib/x86_64-linux-gnu/*.so.*; do
  [ -e "$f" ] || continue
  b=$(basename "$f")
  grep -qxF "$b" <<<"$(ldconfig -p | awk '{print $1}')" || ln -sf "$f" "$D/lib/$b"
done
find_lib() {
  python3 - "$1" <<'EOF' 2>/dev/null || find / -xdev -name "$1" -not -path '/proc/*' -print -quit 2>/dev/null
import glob, os, site, sys
for d in site.getsitepackages():
    for f in glob.glob(os.path.join(d, "nvidia", "**", sys.argv[1]), recursive=True):
        print(f)
        sys.exit(0)
sys.exit(1)
EOF
}
LDP="$D/lib:$R/.gpu/lib"
for so in libnccl.so.2 libcublasLt.so.13 libcublas.so.13 libcudnn.so.9 libnvrtc.so.13; do
  p=$(find_lib "$so")
  if [ -n "$p" ]; then LDP="$LDP:$(dirname "$p")"; else echo "gpu-run: $so not found"; fi
done
export LD_LIBRARY_PATH="$LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# python (PyTorch) keeps the machine's own libraries: our programs get the path through wrappers
W=$R/.gpu/wrap
mkdir -p "$W"
for b in zctl zworker; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LD_LIBRARY_PATH" "$R/.gpu/bin/$b" >"$W/$b"
  chmod +x "$W/$b"
done
PYLD=${LD_LIBRARY_PATH#"$LDP"}
PYLD=${PYLD#:}
export ZT_SOURCE_DIR=$R ZT_BUILD_DIR=$R/.gpu ZT_BIN=$W PYTHONUNBUFFERED=1

{
  echo "== $(date -u +%FT%TZ) gpu-run $WHAT"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ls -la "$D/lib"
  ldd .gpu/bin/zworker | grep -i "not found" && echo "gpu-run: zworker is missing libraries"
} >"$OUT/log.txt" 2>&1
cat "$OUT/log.txt"

SUMMARY=()
item() { # name cap command...: runs with a limit of min(cap, what is left), output to log.txt
  local name=$1 cap=$2
  shift 2
  local left=$((TOTAL - SECONDS - 5))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 20 ]; then
    SUMMARY+=("$(printf '%-18s %-14s %4ds' "$name" "SKIP(time)" 0)")
    echo "---- $name: skipped, ${left}s left"
    return
  fi
  local t0=$SECONDS
  local tmp=/tmp/zt-gpu-item.log
  timeout "$limit" "$@" >"$tmp" 2>&1
  local rc=$?
  { echo; echo "======== $name (exit $rc, limit ${limit}s)"; cat "$tmp"; } >>"$OUT/log.txt"
  local verdict=PASS
  case $rc in
    0) ;;
    77) verdict=SKIP ;;
    124) verdict="TIMEOUT(${limit}s)" ;;
    *) verdict="FAIL($rc)" ;;
  esac
  SUMMARY+=("$(printf '%-18s %-14s %4ds' "$name" "$verdict" $((SECONDS - t0)))")
  echo "---- $name: $verdict ($((SECONDS - t0)) s); last lines:"
  tail -n 15 "$tmp"
}
PY=(env "LD_LIBRARY_PATH=$PYLD" "${ZT_PYTHON:-python3}")
# ZT_GPU_TRAIN_ARGS: more arguments for gpu_train.py (--skip-twinflow, --batches 128,64, ...)
read -ra TRAIN_EXTRA <<<"${ZT_GPU_TRAIN_ARGS:-}"
TRAIN=(tests/bench/gpu_train.py --steps 8 --warmup 2 "${TRAIN_EXTRA[@]}")

TESTS="probe gpu_ops gpu_fault comm_nccl gpu_engine gpu_sanitizer"
BENCH="bench_kernels_gpu bench_kernels_gpu_tuned gpu_train_bf16 gpu_train_fp32"
case $WHAT in
  tests) WANT=$TESTS ;;
  bench) WANT=$BENCH ;;
  all) WANT="$TESTS $BENCH" ;;
  *) WANT=${WHAT//,/ } ;;
esac
want() { [[ " $WANT " == *" $1 "* ]]; }
want probe && item probe 30 .gpu/tests/zt_gpu_probe
want gpu_ops && item gpu_ops 150 .gpu/tests/test_gpu_ops
want gpu_fault && item gpu_fault 30 .gpu/tests/test_gpu_fault
want comm_nccl && item comm_nccl 60 .gpu/tests/test_comm_nccl
want gpu_engine && item gpu_engine 180 "${PY[@]}" tests/gpu/test_gpu_engine.py
want bench_kernels_gpu && item bench_kernels_gpu 90 .gpu/tests/bench_kernels_gpu --quick
want bench_kernels_gpu_tuned &&
  item bench_kernels_gpu_tuned 90 env ZT_CUDA_GEMM_TUNE=1 .gpu/tests/bench_kernels_gpu --quick
want gpu_train_bf16 &&
  item gpu_train_bf16 330 "${PY[@]}" "${TRAIN[@]}" --zt-precisions bf16 --torch-modes bf16
# the 14 fp32 and bf16 sanitizer runs took ~300 s on an H100 (there are 20 with fp16's and
# cuDNN's): by default those of the kernels a bf16 or fp32 job gets by default, cuDNN's
# attention and zerotrain's (ZT_SANITIZER_CASES=all for
# every one, or a list such as memcheck_fp16,racecheck_fp16_fused_mma:
# tests/gpu/test_gpu_sanitizer.py)
SAN_DEFAULT=memcheck_fp32,memcheck_bf16,memcheck_fp32_fused,memcheck_bf16_fused_mma
SAN_DEFAULT+=,memcheck_bf16_cudnn,racecheck_fp32,racecheck_bf16,racecheck_fp32_fused
SAN_DEFAULT+=,racecheck_bf16_fused_mma,racecheck_bf16_cudnn
SAN_CASES=${ZT_SANITIZER_CASES-$SAN_DEFAULT}
[ "$SAN_CASES" = all ] && SAN_CASES=
want gpu_sanitizer && item gpu_sanitizer 240 env "ZT_SANITIZER_CASES=$SAN_CASES" "${PY[@]}" \
  tests/gpu/test_gpu_sanitizer.py
# Nsight Compute on the first launch of each kernel of ZT_NCU_KERNELS in the op benchmark
# (latency, occupancy, warp stalls, instruction mix; ~15 s a kernel), where ncu is installed
ncu_kernels() {
  local ncu
  ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "ncu: no ncu on this machine"; return 77; }
  local k
  for k in ${ZT_NCU_KERNELS:-tc_fwd_mma_kernel tc_bwd_mma_kv_kernel tc_bwd_mma_q_kernel}; do
    echo "==== ncu: $k"
    "$ncu" -k "regex:$k" -c 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats --section InstructionStats \
      --section MemoryWorkloadAnalysis \
      .gpu/tests/bench_kernels_gpu --quick || return $?
  done
}
export -f ncu_kernels
want ncu && item ncu 150 bash -c ncu_kernels
want gpu_train_fp32 &&
  item gpu_train_fp32 300 "${PY[@]}" "${TRAIN[@]}" --zt-precisions fp32,tf32 --torch-modes tf32 \
    --skip-twinflow
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)
echo "== summary ($GPU, ${SECONDS}s of ${TOTAL}s)"
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
