#!/bin/sh
# zerotrain images: the steps of every Dockerfile's build stage, in one script, so that the CPU
# images that tests/deploy builds and the CUDA image that it cannot build run the same commands.
#
#   zt-build.sh deps                      the toolchain and the -dev packages (apt-get)
#   zt-build.sh build ON|OFF SRC OUT      configure SRC with CUDA on or off, build zcoord, zagent,
#                                         zworker and zctl, and put them in OUT/bin
#   zt-build.sh runtime-packages OUT BIN...
#                                         write OUT/runtime-packages: the Debian or Ubuntu packages
#                                         that own the shared libraries BIN... load, for the
#                                         runtime stage to install and nothing more
#   zt-build.sh runtime-setup FILE        in the runtime stage: install the packages FILE names
#                                         that the base lacks, and make the user zerotrain
#                                         (uid and gid 10001) with its home /var/lib/zerotrain
set -eu

# what the build needs from the distribution (scripts/install-deps.sh's build section, without
# the tests' packages); the names are the same on Debian 12 and Ubuntu 24.04
BUILD_PACKAGES="build-essential cmake pkg-config ca-certificates
  libdnnl-dev libjansson-dev libsqlite3-dev libuv1-dev libmicrohttpd-dev libgnutls28-dev
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler libssl-dev"

# every image's binaries, built once per build stage (the CPU images share that stage's cache)
TARGETS="zcoord zagent zworker zctl"

die() {
    echo "zt-build: $*" >&2
    exit 1
}

deps() {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086 # the list is split on purpose
    apt-get install -y -q --no-install-recommends $BUILD_PACKAGES
    rm -rf /var/lib/apt/lists/*
}

build() {
    cuda="$1" src="$2" out="$3"
    case "$cuda" in ON | OFF) ;; *) die "build: CUDA must be ON or OFF, not '$cuda'" ;; esac
    # ZT_NATIVE=OFF: the image runs on any x86-64 (kernels pick AVX-512/AVX2 at load time);
    # ZT_CUDA=ON fails the build when the toolkit is missing instead of leaving CUDA out
    cmake -S "$src" -B /tmp/zt-build -DCMAKE_BUILD_TYPE=Release -DZT_NATIVE=OFF \
        -DZT_CUDA="$cuda" -DBUILD_TESTING=OFF
    # shellcheck disable=SC2086
    cmake --build /tmp/zt-build -j "$(nproc)" --target $TARGETS
    mkdir -p "$out/bin"
    for t in $TARGETS; do
        install -m 0755 "/tmp/zt-build/bin/$t" "$out/bin/$t"
        strip --strip-unneeded "$out/bin/$t"
    done
    rm -rf /tmp/zt-build
}

# the package that owns a library path; ldd prints /lib/... on a merged-/usr system where dpkg
# may have recorded /usr/lib/..., so both spellings and the resolved file are tried
owner() {
    for p in "$1" "/usr$1" "${1#/usr}" "$(readlink -f "$1")"; do
        if pkg=$(dpkg-query -S "$p" 2>/dev/null); then
            echo "${pkg%%: *}" | cut -d, -f1 | sed 's/:.*//'
            return 0
        fi
    done
    return 1
}

runtime_packages() {
    out="$1"
    shift
    [ $# -gt 0 ] || die "runtime-packages: name the binaries"
    mkdir -p "$out"
    list=$(mktemp)
    for bin in "$@"; do
        [ -x "$bin" ] || die "runtime-packages: $bin is not an executable"
        # the CUDA driver (libcuda.so.1) comes from the node at run time, never from the image
        missing=$(ldd "$bin" | grep 'not found' | grep -v 'libcuda\.so' || true)
        [ -z "$missing" ] || die "runtime-packages: $bin needs libraries the build stage lacks: $missing"
        for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'); do
            owner "$lib" >>"$list" || die "runtime-packages: no package owns $lib (needed by $bin)"
        done
    done
    sort -u "$list" >"$out/runtime-packages"
    rm -f "$list"
    echo "zt-build: the runtime stage installs: $(tr '\n' ' ' <"$out/runtime-packages")"
}

runtime_setup() {
    list="$1"
    missing=""
    while read -r p; do
        # a CUDA base holds its CUDA, cuDNN and NCCL packages pinned: keep those, add the rest
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing="$missing $p"
        fi
    done <"$list"
    if [ -n "$missing" ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        # shellcheck disable=SC2086
        apt-get install -y -q --no-install-recommends $missing
        rm -rf /var/lib/apt/lists/*
    fi
    groupadd --gid 10001 zerotrain
    useradd --uid 10001 --gid 10001 --home-dir /var/lib/zerotrain --no-create-home \
        --shell /usr/sbin/nologin zerotrain
    install -d -o 10001 -g 10001 -m 0750 /var/lib/zerotrain
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
deps) deps ;;
build)
    [ $# -eq 3 ] || die "usage: zt-build.sh build ON|OFF SRC OUT"
    build "$@"
    ;;
runtime-packages) runtime_packages "$@" ;;
runtime-setup)
    [ $# -eq 1 ] || die "usage: zt-build.sh runtime-setup FILE"
    runtime_setup "$1"
    ;;
*) die "usage: zt-build.sh deps | build ON|OFF SRC OUT | runtime-packages OUT BIN... | runtime-setup FILE" ;;
esac
