#!/usr/bin/env bash
# zerotrain: installs every Debian package the build, the demo and the tests need.
# Idempotent: installs only what is missing, and does nothing when all is present.
# Usage: scripts/install-deps.sh            (uses sudo when not root)
set -euo pipefail

pkgs=(
  # build
  build-essential cmake pkg-config git ca-certificates
  # engine: oneDNN sgemm, OpenMP comes with gcc
  libdnnl-dev
  # common / coordinator / agent
  libjansson-dev libsqlite3-dev sqlite3 libuv1-dev libmicrohttpd-dev
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler
  # tests: PyTorch reference (with OpenBLAS, never the reference BLAS), gRPC interop
  python3 python3-torch python3-numpy libopenblas0
  python3-grpcio python3-grpc-tools python3-protobuf
  # fuzzing (libFuzzer) and sanitizers with clang
  clang libclang-rt-14-dev
  # misc tools the tests call
  procps psmisc coreutils openssl
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
