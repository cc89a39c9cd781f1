#!/usr/bin/env bash
# tests/deploy: the CPU images, built and run. Makes a Debian 12 base with debootstrap (no
# image registry is reachable here), builds zerotrain/zcoord and zerotrain/zagent-cpu from it
# with buildah through deploy/docker/build-images.sh (what `make images` runs), then starts
# zcoord from the one and zagent from the other on loopback, configured through the same
# variables as deploy/k8s, submits a tiny two-rank job with zctl and checks that it completes,
# that its checkpoint is on the shared folder, that both images' HEALTHCHECK commands pass,
# and that the runtime images run as uid 10001, find every library, and hold no toolchain.
#
# Slow (minutes: debootstrap, apt-get in the build stage, the build) and outside the default
# suite: it runs only with ZT_IMAGE_TEST=1, as root, with buildah and debootstrap installed:
#   apt-get install buildah debootstrap
#   cd build && ZT_IMAGE_TEST=1 ctest -R deploy_images --output-on-failure
# The base and buildah's storage are kept in BUILD/tests/deploy-images (the next run reuses
# them; remove the folder to start afresh). Exit 77 (skip) when it cannot run here.
set -euo pipefail

src="${ZT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
build="${ZT_BUILD_DIR:-$src/build}"
skip() {
    echo "deploy_images: SKIP: $*"
    exit 77
}
[ "${ZT_IMAGE_TEST:-0}" = 1 ] || skip "slow (minutes); run it with ZT_IMAGE_TEST=1 (cd build && ZT_IMAGE_TEST=1 ctest -R deploy_images)"
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, buildah)"
for tool in buildah debootstrap python3; do
    command -v "$tool" >/dev/null || skip "$tool is not installed (apt-get install buildah debootstrap)"
done

t0=$(date +%s)
phase() { echo "deploy_images: [$(($(date +%s) - t0)) s] $*"; }
fail() {
    echo "deploy_images: FAIL: $*" >&2
    exit 1
}

cache="$build/tests/deploy-images"
mkdir -p "$cache/storage"
cat >"$cache/storage.conf" <<EOF
[storage]
driver = "${ZT_BUILDAH_DRIVER:-overlay}"
graphroot = "$cache/storage/graph"
runroot = "$cache/storage/run"
EOF
export CONTAINERS_STORAGE_CONF="$cache/storage.conf"
export BUILDAH_ISOLATION=chroot
base=localhost/zt-test-debian:12
repo=zt-test
version=$(sed -n 's/^project(zerotrain VERSION \([0-9][0-9.]*\).*/\1/p' "$src/CMakeLists.txt")

# ---- a Debian 12 base, made here --------------------------------------------------------------
if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
    if [ ! -s "$cache/debian-12.tar" ]; then
        phase "debootstrap bookworm (minbase)"
        rm -rf "$cache/rootfs"
        debootstrap --variant=minbase bookworm "$cache/rootfs" >"$cache/debootstrap.log" 2>&1 ||
            fail "debootstrap failed; see $cache/debootstrap.log"
        rm -rf "$cache/rootfs/var/cache/apt/archives/"*.deb "$cache/rootfs/var/lib/apt/lists/"*
        tar -C "$cache/rootfs" -cf "$cache/debian-12.tar" .
        rm -rf "$cache/rootfs"
    fi
    phase "importing the base as $base"
    ctr=$(buildah from scratch)
    buildah add "$ctr" "$cache/debian-12.tar" / >/dev/null
    buildah config --cmd /bin/bash "$ctr"
    buildah commit --rm "$ctr" "$base" >/dev/null
fi

# ---- the images, as `make images` builds them -------------------------------------------------
phase "building $repo/zcoord and $repo/zagent-cpu with buildah"
IMAGE_TOOL=buildah IMAGE_REPO="$repo" BASE_IMAGE="$base" BUILD_FLAGS="--pull=never" \
    "$src/deploy/docker/build-images.sh" zcoord zagent-cpu >"$cache/build.log" 2>&1 ||
    {
        tail -40 "$cache/build.log"
        fail "the image build failed; see $cache/build.log"
    }
grep 'runtime stage installs' "$cache/build.log" || true
coord_img="localhost/$repo/zcoord:$version"
agent_img="localhost/$repo/zagent-cpu:$version"

inspect() { buildah inspect --type image "$1"; }
# KEY of an image's Docker config, as JSON
config() { inspect "$1" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["Docker"]["config"].get(sys.argv[1])))' "$2"; }
for img in "$coord_img" "$agent_img"; do
    [ "$(config "$img" User)" = '"10001:10001"' ] || fail "$img runs as $(config "$img" User), not 10001:10001"
    grep -q '"Test"' <<<"$(config "$img" Healthcheck)" || fail "$img has no HEALTHCHECK (built in OCI format?)"
    grep -q "\"org.opencontainers.image.version\": \"$version\"" <<<"$(config "$img" Labels)" || fail "$img lacks its version label"
done
[ "$(config "$coord_img" Entrypoint)" = '["/usr/local/bin/zcoord"]' ] || fail "zcoord's entrypoint is $(config "$coord_img" Entrypoint)"
[ "$(config "$agent_img" Entrypoint)" = '["/usr/local/bin/zagent"]' ] || fail "zagent's entrypoint is $(config "$agent_img" Entrypoint)"

# ---- run them -----------------------------------------------------------------------------------
run="$(mktemp -d "$cache/run.XXXXXX")"
coord_ctr="" agent_ctr="" coord_pid="" agent_pid=""
cleanup() {
    [ -z "$agent_pid" ] || kill "$agent_pid" 2>/dev/null || true
    [ -z "$coord_pid" ] || kill "$coord_pid" 2>/dev/null || true
    sleep 1
    [ -z "$agent_ctr" ] || buildah rm "$agent_ctr" >/dev/null 2>&1 || true
    [ -z "$coord_ctr" ] || buildah rm "$coord_ctr" >/dev/null 2>&1 || true
    rm -rf "$run"
}
trap cleanup EXIT
mkdir -p "$run/shared" "$run/db" "$run/work" "$run/tokens"
(
    umask 077
    for t in user agent; do head -c 32 /dev/urandom | base64 >"$run/tokens/$t.token"; done
)
chown -R 10001:10001 "$run/shared" "$run/db" "$run/work" "$run/tokens"
coord_ctr=$(buildah from --pull=never "$coord_img")
agent_ctr=$(buildah from --pull=never "$agent_img")
# the containers as deploy/k8s mounts them: tokens, the shared folder at /shared, state at
# /var/lib/zerotrain; loopback (host network, no other address is used)
in_coord() { buildah run --network host -v "$run/shared:/shared:ro" -v "$run/db:/var/lib/zerotrain" -v "$run/tokens:/run/zerotrain/tokens:ro" "$@"; }
in_agent() { buildah run --network host -v "$run/shared:/shared" -v "$run/work:/var/lib/zerotrain" -v "$run/tokens:/run/zerotrain/tokens:ro" "$@"; }

phase "checking the runtime images"
for c in "$coord_ctr" "$agent_ctr"; do
    [ "$(buildah run "$c" -- id -u)" = 10001 ] || fail "$c does not run as uid 10001"
    if buildah run "$c" -- sh -c 'command -v cc || command -v gcc || command -v cmake || ls /usr/include/jansson.h' 2>/dev/null; then
        fail "the runtime image $c holds a toolchain or headers"
    fi
    # shellcheck disable=SC2016 # expanded in the container
    out=$(buildah run "$c" -- sh -c 'for b in /usr/local/bin/z*; do ldd "$b"; done')
    ! grep -q 'not found' <<<"$out" || fail "a binary of $c misses libraries: $(echo "$out" | grep 'not found')"
done

phase "writing a corpus with zctl (agent image)"
in_agent "$agent_ctr" -- zctl data synth --out /shared/data --train-tokens 200k --val-tokens 20k >"$run/synth.log" 2>&1 ||
    fail "zctl data synth: $(cat "$run/synth.log")"

phase "starting zcoord (coordinator image's entrypoint)"
in_coord -e ZT_GRPC_ADDR=127.0.0.1:0 -e ZT_HTTP_ADDR=127.0.0.1:0 -e ZT_READY_FILE=/var/lib/zerotrain/ready.json \
    -e ZT_TOKEN_FILE=/run/zerotrain/tokens/user.token -e ZT_AGENT_TOKEN_FILE=/run/zerotrain/tokens/agent.token \
    "$coord_ctr" -- /usr/local/bin/zcoord >"$run/zcoord.log" 2>&1 &
for _ in $(seq 100); do
    [ -s "$run/db/ready.json" ] && break
    sleep 0.2
done
[ -s "$run/db/ready.json" ] || fail "zcoord did not start: $(tail -20 "$run/zcoord.log")"
ready() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$run/db/ready.json" "$1"; }
grpc=$(ready grpc)
http=$(ready http)
coord_pid=$(ready pid)
[ -f "$run/db/zerotrain.db" ] || fail "zcoord's database is not at ZT_DB (/var/lib/zerotrain/zerotrain.db)"

phase "starting zagent (agent image's entrypoint), coordinator $grpc"
in_agent -e ZT_COORDINATOR="$grpc" -e ZT_TOKEN_FILE=/run/zerotrain/tokens/agent.token -e ZT_SLOTS=cpu:2 \
    -e ZT_ALLOW_PATH=/shared -e ZT_AGENT_NAME=image-test -e ZT_STOP_GRACE=5s \
    "$agent_ctr" -- /usr/local/bin/zagent >"$run/zagent.log" 2>&1 &
for _ in $(seq 100); do
    grep -q '"registered": true' "$run/work/status.json" 2>/dev/null && break
    sleep 0.2
done
grep -q '"registered": true' "$run/work/status.json" 2>/dev/null || fail "zagent did not register: $(tail -20 "$run/zagent.log")"
agent_pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$run/work/status.json")

phase "HEALTHCHECK of both images"
hc() { # IMAGE: its HEALTHCHECK's command, as arguments
    inspect "$1" | python3 -c 'import json,sys; t=json.load(sys.stdin)["Docker"]["config"]["Healthcheck"]["Test"]; assert t[0]=="CMD", t; print("\0".join(t[1:]), end="")'
}
mapfile -d '' coord_hc < <(hc "$coord_img")
mapfile -d '' agent_hc < <(hc "$agent_img")
in_coord -e ZT_HTTP_ADDR="$http" "$coord_ctr" -- "${coord_hc[@]}" || fail "zcoord's HEALTHCHECK fails on a serving zcoord"
if in_coord -e ZT_HTTP_ADDR=127.0.0.1:1 "$coord_ctr" -- "${coord_hc[@]}" 2>/dev/null; then
    fail "zcoord's HEALTHCHECK passes with nothing listening"
fi
in_agent "$agent_ctr" -- "${agent_hc[@]}" || fail "zagent's HEALTHCHECK fails on a heartbeating zagent"

phase "submitting a two-rank job with zctl (coordinator image)"
cat >"$run/shared/job.json" <<'EOF'
{
  "name": "image-test",
  "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 64,
            "block_size": 64, "vocab_size": 256, "init": "random", "seed": 1337},
  "data": {"train": "data/synth_train_*.bin", "val": "data/synth_val_*.bin"},
  "train": {"steps": 20, "eval_every": 10, "eval_steps": 2,
            "checkpoint_every": 10, "checkpoint_dir": "ckpt/image-test", "keep_checkpoints": 2},
  "resources": {"ranks": 2, "ranks_per_node": 2, "device": "cpu"},
  "max_restarts": 0,
  "deepspeed": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
                "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                "zero_optimization": {"stage": 1}}
}
EOF
chown 10001:10001 "$run/shared/job.json"
if ! in_coord -e ZT_COORDINATOR="$grpc" -e ZT_TOKEN_FILE=/run/zerotrain/tokens/user.token "$coord_ctr" -- \
    timeout 300 zctl submit /shared/job.json --follow >"$run/submit.log" 2>&1; then
    tail -30 "$run/submit.log" "$run/zagent.log" "$run/zcoord.log"
    fail "the job did not complete"
fi
tail -3 "$run/submit.log"
grep -q 'COMPLETED' "$run/submit.log" || fail "zctl did not report COMPLETED"
[ -f "$run/shared/ckpt/image-test/step_00000020/meta.json" ] || fail "no checkpoint of step 20 on the shared folder"
state=$(in_coord -e ZT_COORDINATOR="$grpc" -e ZT_TOKEN_FILE=/run/zerotrain/tokens/user.token "$coord_ctr" -- zctl -o json job 1)
grep -q '"COMPLETED"' <<<"$state" || fail "zctl job 1 says: $state"

phase "stopping zagent and zcoord"
kill "$agent_pid"
for _ in $(seq 50); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.2; done
kill -0 "$agent_pid" 2>/dev/null && fail "zagent did not stop on SIGTERM"
agent_pid=""
kill "$coord_pid"
for _ in $(seq 50); do kill -0 "$coord_pid" 2>/dev/null || break; sleep 0.2; done
kill -0 "$coord_pid" 2>/dev/null && fail "zcoord did not stop on SIGTERM"
coord_pid=""
phase "passed"
