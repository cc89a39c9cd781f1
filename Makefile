# zerotrain: the two commands of the README, and a few more for developers.
#   make demo   - installs what it needs, builds, runs a coordinator and two agents on loopback
#                 and trains the example job on them (DEMO_KEEP=1 keeps the cluster up)
#   make test   - installs what it needs, builds, runs the whole test suite (ctest)
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build test demo demo-local test-asan bench clean format

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE bench

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DZT_ASAN=ON -DZT_UBSAN=ON -DZT_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ZT_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --output-on-failure -j $(JOBS) -LE "bench|slow"

demo: build
	scripts/demo.sh $(BUILD)

# the same job on this machine alone: `zctl run`, no coordinator
demo-local: build
	scripts/demo-local.sh $(BUILD)

bench: build
	cd $(BUILD) && ctest --output-on-failure -L bench -V

# the container images of deploy/docker, with docker or buildah (whichever works here):
# IMAGES="zcoord zagent-cpu" picks some, IMAGE_REPO and IMAGE_TAG name them (deploy/README.md)
.PHONY: images
images:
	deploy/docker/build-images.sh $(IMAGES)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
