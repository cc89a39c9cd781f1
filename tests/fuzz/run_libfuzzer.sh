#!/usr/bin/env bash
# Builds a fuzz target of tests/fuzz as a libFuzzer target with clang (ASan + UBSan) and runs
# it. CI runs each briefly; by hand run one longer:
#   tests/fuzz/run_libfuzzer.sh BUILD_DIR [SECONDS] [TARGET]     (default 10 s, requests)
# TARGET: requests (fuzz_requests.c: the gRPC request messages and their checks) or http
# (fuzz_http.c: the HTTP server's request decision in coordinator/http.c). BUILD_DIR is a
# configured build (for the generated protobuf-c code). A crash leaves its input in
# BUILD_DIR/fuzz/crash-* (BUILD_DIR/fuzz-http/ for http); replay it with
# BUILD_DIR/tests/fuzz_requests FILE (or fuzz_http FILE).
# Exits 77 (skip) when clang or libFuzzer is missing.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:?usage: run_libfuzzer.sh BUILD_DIR [SECONDS] [requests|http]}"
seconds="${2:-10}"
target="${3:-requests}"
CLANG="${CLANG:-$(command -v clang || command -v clang-14 || true)}"
if [ -z "$CLANG" ]; then
  echo "run_libfuzzer: clang not found (apt-get install clang libclang-rt-14-dev); skipped"
  exit 77
fi
case "$target" in
  requests) out="$build/fuzz" ;;
  http) out="$build/fuzz-http" ;;
  *) echo "run_libfuzzer: unknown target '$target'; give requests or http" >&2; exit 2 ;;
esac
mkdir -p "$out/corpus"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$out/probe.c"
if ! "$CLANG" -fsanitize=fuzzer "$out/probe.c" -o "$out/probe" 2>/dev/null; then
  echo "run_libfuzzer: $CLANG cannot link libFuzzer (apt-get install libclang-rt-14-dev); skipped"
  exit 77
fi
flags=(-std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src")
common=("$src"/common/alloc.c "$src"/common/status.c "$src"/common/log.c "$src"/common/settings.c "$src"/common/timeutil.c
        "$src"/common/utf8.c)
if [ "$target" = http ]; then
  "$CLANG" "${flags[@]}" $(pkg-config --cflags libmicrohttpd gnutls) -w \
    -o "$out/fuzz_http_libfuzzer" "$src/tests/fuzz/fuzz_http.c" "$src/coordinator/http.c" \
    "$src/common/netutil.c" "${common[@]}" $(pkg-config --libs libmicrohttpd gnutls) -lm -lpthread
  cd "$out"
  ./fuzz_http_libfuzzer -max_total_time="$seconds" -max_len=4096 -timeout=10 -error_exitcode=1 \
    -print_final_stats=1 corpus 2>&1 | tail -n 12
  exit 0
fi
gen="$build/proto/gen"
if [ ! -f "$gen/proto/zerotrain.pb-c.c" ]; then
  echo "run_libfuzzer: $gen has no generated code; build the zt_proto target first" >&2
  exit 1
fi
flags+=(-I"$gen" -I"$gen/proto" $(pkg-config --cflags jansson libprotobuf-c))
for f in "$src"/common/jobfile*.c "$src"/common/dsconfig*.c "$src"/common/json_locate.c; do
  [ -f "$f" ] && common+=("$f")
done
"$CLANG" "${flags[@]}" -w -o "$out/fuzz_requests_libfuzzer" \
  "$src/tests/fuzz/fuzz_requests.c" "$src/coordinator/validate.c" "$src/coordinator/auth.c" \
  "$src/proto/pbjson.c" "$src/proto/rpc_common.c" "${common[@]}" "$gen/proto/zerotrain.pb-c.c" \
  "$gen/proto/health.pb-c.c" $(pkg-config --libs jansson libprotobuf-c gpr libcrypto) -lm -lpthread
cd "$out"
./fuzz_requests_libfuzzer -max_total_time="$seconds" -max_len=8192 -timeout=10 -error_exitcode=1 \
  -print_final_stats=1 corpus 2>&1 | tail -n 12
