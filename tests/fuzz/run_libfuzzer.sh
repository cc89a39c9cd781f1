#!/usr/bin/env bash
# Builds tests/fuzz/fuzz_requests.c as a libFuzzer target with clang (ASan + UBSan) and runs
# it. CI runs it briefly; by hand run it longer:
#   tests/fuzz/run_libfuzzer.sh BUILD_DIR [SECONDS]        (default 10 s)
# BUILD_DIR is a configured build (for the generated protobuf-c code). A crash leaves its
# input in BUILD_DIR/fuzz/crash-*; replay it with BUILD_DIR/tests/fuzz_requests FILE.
# Exits 77 (skip) when clang or libFuzzer is missing.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:?usage: run_libfuzzer.sh BUILD_DIR [SECONDS]}"
seconds="${2:-10}"
CLANG="${CLANG:-$(command -v clang || command -v clang-14 || true)}"
if [ -z "$CLANG" ]; then
  echo "run_libfuzzer: clang not found (apt-get install clang libclang-rt-14-dev); skipped"
  exit 77
fi
gen="$build/proto/gen"
if [ ! -f "$gen/proto/zerotrain.pb-c.c" ]; then
  echo "run_libfuzzer: $gen has no generated code; build the zt_proto target first" >&2
  exit 1
fi
out="$build/fuzz"
mkdir -p "$out/corpus"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$out/probe.c"
if ! "$CLANG" -fsanitize=fuzzer "$out/probe.c" -o "$out/probe" 2>/dev/null; then
  echo "run_libfuzzer: $CLANG cannot link libFuzzer (apt-get install libclang-rt-14-dev); skipped"
  exit 77
fi
flags=(-std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src" -I"$gen" -I"$gen/proto" $(pkg-config --cflags jansson libprotobuf-c))
common=("$src"/common/alloc.c "$src"/common/status.c "$src"/common/log.c "$src"/common/timeutil.c
        "$src"/common/utf8.c)
for f in "$src"/common/jobfile*.c "$src"/common/dsconfig.c "$src"/common/json_locate.c; do
  [ -f "$f" ] && common+=("$f")
done
"$CLANG" "${flags[@]}" -w -o "$out/fuzz_requests_libfuzzer" \
  "$src/tests/fuzz/fuzz_requests.c" "$src/coordinator/validate.c" "$src/proto/pbjson.c" \
  "$src/proto/rpc_common.c" "${common[@]}" "$gen/proto/zerotrain.pb-c.c" "$gen/proto/health.pb-c.c" \
  $(pkg-config --libs jansson libprotobuf-c gpr) -lm -lpthread
cd "$out"
./fuzz_requests_libfuzzer -max_total_time="$seconds" -max_len=8192 -timeout=10 -error_exitcode=1 \
  -print_final_stats=1 corpus 2>&1 | tail -n 12
