#!/usr/bin/env bash
# zerotrain: installs every Debian package the build, the demo and the tests need.
# Idempotent: installs only what is missing, and does nothing when all is present. Then, when
# package.json is there, `npm ci` brings the browser test's playwright-core (pinned in
# package-lock.json) into node_modules/ unless it is already there at the locked version.
# Usage: scripts/install-deps.sh            (uses sudo when not root)
set -euo pipefail

pkgs=(
  # build
  build-essential cmake pkg-config git ca-certificates
  # engine: oneDNN sgemm, OpenMP comes with gcc
  libdnnl-dev
  # common / coordinator / agent
  libjansson-dev libsqlite3-dev sqlite3 libuv1-dev libmicrohttpd-dev libgnutls28-dev
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler libssl-dev
  # engine: NVMe offload through io_uring
  liburing-dev
  # tests: the coordinator load generator's HTTP/2 client
  libnghttp2-dev
  # tests: PyTorch reference (with OpenBLAS, never the reference BLAS), gRPC interop
  python3 python3-torch python3-numpy libopenblas0
  python3-grpcio python3-grpc-tools python3-protobuf
  # tests: /metrics read by the Prometheus client's parser; the dashboard in a real browser
  python3-prometheus-client chromium nodejs npm
  # fuzzing (libFuzzer) and sanitizers with clang
  clang libclang-rt-14-dev
  # misc tools the tests call
  procps psmisc coreutils openssl
  # benchmarks: fio, the disk baseline of the NVMe offload benchmark
  fio
  # tests/deploy: the shell in the Dockerfiles and their scripts
  shellcheck
)

missing=()
for p in "${pkgs[@]}"; do
  # node and npm from another source (e.g. a nodejs package that bundles npm) will do
  if [ "$p" = nodejs ] && command -v node >/dev/null; then continue; fi
  if [ "$p" = npm ] && command -v npm >/dev/null; then continue; fi
  if ! grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm packages of the browser test (tests/web): installed from the lock file, skipped when
# node_modules already holds the locked versions (npm writes its own copy of the lock there)
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -f "$root/package-lock.json" ]; then
  if [ -f "$root/node_modules/.package-lock.json" ] &&
     [ "$root/node_modules/.package-lock.json" -nt "$root/package-lock.json" ] &&
     [ -d "$root/node_modules/playwright-core" ]; then
    echo "install-deps: node_modules up to date"
  else
    echo "install-deps: npm ci (playwright-core for the browser test; no browser download)"
    if ! (cd "$root" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund); then
      # only the browser test needs it: outside CI that test then skips, saying why; CI
      # (CI=true) must run it, so there the failure stops the run
      if [ -n "${CI:-}" ]; then
        echo "install-deps: npm ci failed; CI needs it for the browser test (tests/web)" >&2
        exit 1
      fi
      echo "install-deps: WARNING: npm ci failed (no access to the npm registry?); the browser test (tests/web) will be skipped" >&2
    fi
  fi
fi
