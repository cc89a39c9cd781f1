#!/usr/bin/env bash
# zerotrain: runs the GPU tests and benchmark on a lent GPU machine from what
# scripts/gpu-pack.sh gathered into .gpu/ (call the device tool with carry [".gpu"]). Unpacks
# the carried Debian packages under /tmp (nothing is installed) and uses those of their
# libraries the machine lacks, takes NCCL and cuBLASLt from the PyTorch installed there, and
# writes two files under $OUT (the device tool brings back at most 8): log.txt, the machine and
# every item's whole output, and summary.txt, one line per item.
# Usage: scripts/gpu-run.sh [tests|bench|all] [SECONDS_PER_ITEM]   (ZT_PYTHON: the python with
# PyTorch and numpy, python3 by default)
set -uo pipefail
cd "$(dirname "$0")/.."
R=$(pwd)
WHAT=${1:-tests}
LIMIT=${2:-420}
OUT=${OUT:-$R/out}
mkdir -p "$OUT"
[ -d .gpu/bin ] || { echo "gpu-run: no .gpu/ here: run scripts/gpu-pack.sh first and carry .gpu" >&2; exit 2; }

# libraries: carried packages for what the system lacks, then NCCL and cuBLASLt from PyTorch
D=/tmp/zt-gpu-deps
rm -rf "$D" && mkdir -p "$D/root" "$D/lib"
for deb in .gpu/debs/*.deb; do dpkg-deb -x "$deb" "$D/root" || dpkg -x "$deb" "$D/root"; done
for f in "$D"/root/usr/lib/x86_64-linux-gnu/*.so.* "$D"/root/lib/x86_64-linux-gnu/*.so.*; do
  [ -e "$f" ] || continue
  b=$(basename "$f")
  ldconfig -p | awk '{print $1}' | grep -qxF "$b" || ln -sf "$f" "$D/lib/$b"
done
find_lib() {
  python3 - "$1" <<'EOF' 2>/dev/null || find / -xdev -name "$1" -not -path '/proc/*' 2>/dev/null | head -1
import glob, os, site, sys
for d in site.getsitepackages():
    for f in glob.glob(os.path.join(d, "nvidia", "**", sys.argv[1]), recursive=True):
        print(f)
        sys.exit(0)
sys.exit(1)
EOF
}
LDP="$D/lib:$R/.gpu/lib"
for so in libnccl.so.2 libcublasLt.so.13 libcublas.so.13; do
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
item() { # name command...: runs with a time limit, its output appended to $OUT/log.txt
  local name=$1
  shift
  local t0=$SECONDS
  local tmp=/tmp/zt-gpu-item.log
  timeout "$LIMIT" "$@" >"$tmp" 2>&1
  local rc=$?
  { echo; echo "======== $name (exit $rc)"; cat "$tmp"; } >>"$OUT/log.txt"
  local verdict=PASS
  case $rc in 0) ;; 77) verdict=SKIP ;; 124) verdict="TIMEOUT(${LIMIT}s)" ;; *) verdict="FAIL($rc)" ;; esac
  SUMMARY+=("$(printf '%-18s %-14s %4ds' "$name" "$verdict" $((SECONDS - t0)))")
  echo "---- $name: $verdict ($((SECONDS - t0)) s); last lines:"
  tail -n 15 "$tmp"
}
PY=(env "LD_LIBRARY_PATH=$PYLD" "${ZT_PYTHON:-python3}")

if [ "$WHAT" = tests ] || [ "$WHAT" = all ]; then
  item probe .gpu/tests/zt_gpu_probe
  item gpu_ops .gpu/tests/test_gpu_ops
  item gpu_fault .gpu/tests/test_gpu_fault
  item comm_nccl .gpu/tests/test_comm_nccl
  item gpu_engine "${PY[@]}" tests/gpu/test_gpu_engine.py
  item gpu_sanitizer "${PY[@]}" tests/gpu/test_gpu_sanitizer.py
fi
if [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
  item bench_kernels_gpu .gpu/tests/bench_kernels_gpu
  item bench_gpu_train "${PY[@]}" tests/bench/gpu_train.py
fi
echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null))"
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
