#!/usr/bin/env bash
# zerotrain: builds the container images of deploy/docker (`make images` runs it).
# Usage: deploy/docker/build-images.sh [zcoord] [zagent] [zagent-cpu]      (default: all three)
#
#   IMAGE_REPO   name prefix of the images (default zerotrain: zerotrain/zcoord, ...); put your
#                registry in front to push there: IMAGE_REPO=REGISTRY/zerotrain
#   IMAGE_TAG    their tag (default: the project's version in CMakeLists.txt); never "latest"
#   IMAGE_TOOL   docker, buildah or podman (default: docker when its daemon answers, else
#                buildah, else podman)
#   BASE_IMAGE   base of the CPU images (default debian:12-slim); CUDA_BUILD_IMAGE and
#   CUDA_BASE_IMAGE the CUDA image's build and runtime bases (Dockerfile.agent has the defaults)
#   BUILD_FLAGS  more flags for the build command (e.g. --pull, or --isolation chroot for buildah)
#
# The build context is a fresh folder holding only the sources the images build from (the
# top CMakeLists.txt, common kernels engine proto cli coordinator agent web, deploy/docker),
# so build folders, node_modules and tokens lying in the work tree never reach a build.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/deploy/docker"

version=$(sed -n 's/^project(zerotrain VERSION \([0-9][0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
tag="${IMAGE_TAG:-$version}"
repo="${IMAGE_REPO:-zerotrain}"
if [ -z "$tag" ] || [ "$tag" = latest ]; then
    echo "build-images: give the images a version tag (IMAGE_TAG), not '${tag:-}'" >&2
    exit 2
fi
revision=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)

tool="${IMAGE_TOOL:-}"
if [ -z "$tool" ]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
        tool=docker
    elif command -v buildah >/dev/null; then
        tool=buildah
    elif command -v podman >/dev/null; then
        tool=podman
    else
        echo "build-images: no docker daemon, buildah or podman here: install one (Debian: apt-get install buildah)" >&2
        exit 2
    fi
fi

images=("$@")
[ ${#images[@]} -gt 0 ] || images=(zcoord zagent zagent-cpu)

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
tar -C "$root" -c CMakeLists.txt common kernels engine proto cli coordinator agent web deploy/docker |
    tar -C "$ctx" -x

# shellcheck disable=SC2206 # BUILD_FLAGS is a list of flags
extra=(${BUILD_FLAGS:-})
for image in "${images[@]}"; do
    args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision")
    case "$image" in
    zcoord) dockerfile=Dockerfile.coordinator ;;
    zagent-cpu) dockerfile=Dockerfile.agent-cpu ;;
    zagent)
        dockerfile=Dockerfile.agent
        [ -z "${CUDA_BUILD_IMAGE:-}" ] || args+=(--build-arg "BUILD_IMAGE=$CUDA_BUILD_IMAGE")
        [ -z "${CUDA_BASE_IMAGE:-}" ] || args+=(--build-arg "BASE_IMAGE=$CUDA_BASE_IMAGE")
        ;;
    *)
        echo "build-images: unknown image '$image' (zcoord, zagent, zagent-cpu)" >&2
        exit 2
        ;;
    esac
    if [ "$image" != zagent ] && [ -n "${BASE_IMAGE:-}" ]; then
        args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
    fi
    [ -f "$here/$dockerfile" ] || { echo "build-images: $here/$dockerfile is missing" >&2; exit 2; }
    name="$repo/$image:$tag"
    echo "build-images: $name from deploy/docker/$dockerfile with $tool"
    case "$tool" in
    docker) docker build "${args[@]}" "${extra[@]}" -f "$ctx/deploy/docker/$dockerfile" -t "$name" "$ctx" ;;
    # docker format: the OCI format has no HEALTHCHECK; --layers shares the build stage's cache
    buildah) buildah bud --layers --format docker "${args[@]}" "${extra[@]}" \
        -f "$ctx/deploy/docker/$dockerfile" -t "$name" "$ctx" ;;
    podman) podman build --layers --format docker "${args[@]}" "${extra[@]}" \
        -f "$ctx/deploy/docker/$dockerfile" -t "$name" "$ctx" ;;
    *)
        echo "build-images: IMAGE_TOOL must be docker, buildah or podman, not '$tool'" >&2
        exit 2
        ;;
    esac
done
echo "build-images: built ${images[*]} as $repo/NAME:$tag; push them with: $tool push $repo/NAME:$tag"
