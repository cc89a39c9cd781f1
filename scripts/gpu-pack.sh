#!/usr/bin/env bash
# zerotrain: gets a lent GPU machine ready to run the GPU tests and benchmark in one call.
# A GPU machine of this workplace starts bare, with CUDA, PyTorch and CMake but none of our
# Debian libraries (oneDNN, gRPC, ...), and reaches no package registry. So this script runs
# HERE, on a machine with the CUDA toolkit: it builds, then gathers into .gpu/ (ignored by git)
#   progs.tar.gz  bin/ (zctl, zworker, stripped) and tests/ (the GPU test programs, the GPU
#                 probe and the GPU op benchmark)
#   lib/    libcudart of this build
#   debs/   the Debian packages of every other shared library those load that is not part of
#           the C runtime (dpkg -x unpacks them there; nothing is installed)
# scripts/gpu-run.sh unpacks it on the GPU machine and runs everything. NCCL and cuBLASLt are
# not carried (about 700 MiB): gpu-run.sh takes them from the PyTorch installed there.
# The build is portable (ZT_NATIVE=OFF: the GPU machine's processor is not this one; the CPU
# optimizer loops still get AVX2/AVX-512 where present, see kernels/cpu/cpu_int.h).
# Usage: scripts/gpu-pack.sh [BUILD_DIR, default build-gpu]   then the device tool, carry [".gpu"]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "gpu-pack: no nvcc here: the GPU backend would not be built; run this where the CUDA toolkit is" >&2
  exit 1
fi
make build BUILD="$BUILD" CMAKE_FLAGS="-DZT_NATIVE=OFF -DZT_CUDA=ON" >/dev/null

rm -rf .gpu
mkdir -p .gpu/bin .gpu/tests .gpu/lib .gpu/debs
for b in zctl zworker zt_sgemm_peak; do
  cp "$BUILD/bin/$b" .gpu/bin/ && strip .gpu/bin/$b
done
grep -q libcudart <<<"$(ldd .gpu/bin/zworker)" ||
  { echo "gpu-pack: $BUILD was configured without the CUDA backend (ZT_CUDA=OFF?)" >&2; exit 1; }
for t in zt_gpu_probe test_gpu_ops test_gpu_fault test_comm_nccl bench_kernels_gpu; do
  cp "$BUILD/tests/$t" .gpu/tests/ && strip .gpu/tests/$t
done

# the shared libraries they load, less the C runtime, CUDA's own and NCCL
libs=$(for f in .gpu/bin/* .gpu/tests/*; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u)
pkgs=()
for l in $libs; do
  case "$(basename "$l")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) continue ;;
    libnccl.so*|libcuda.so*|libcublas*) continue ;;
    libcudart.so*) cp -L "$l" .gpu/lib/; continue ;;
  esac
  real=$(readlink -f "$l")
  p=$(dpkg -S "$real" 2>/dev/null || dpkg -S "$l" 2>/dev/null || true)
  p=${p%%:*}
  if [ -z "$p" ]; then
    echo "gpu-pack: $l belongs to no Debian package; copying it" >&2
    cp -L "$l" .gpu/lib/
  else
    pkgs+=("$p")
  fi
done
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
(cd .gpu/debs && apt-get download "${pkgs[@]}" >/dev/null)
# the programs travel gzipped (their CUDA code for two architectures compresses about 3:1);
# gpu-run.sh unpacks them
tar -czf .gpu/progs.tar.gz -C .gpu bin tests && rm -rf .gpu/bin .gpu/tests
echo "gpu-pack: .gpu holds $(du -sh .gpu | cut -f1): ${#pkgs[@]} packages (${pkgs[*]})"
du -sk .gpu | awk '{ if ($1 > 60 * 1024) { print "gpu-pack: over the 64 MiB a device call carries" > "/dev/stderr"; exit 1 } }'
