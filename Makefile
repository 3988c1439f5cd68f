# The two commands of the README. Each does the whole set-up on a fresh clone: system packages
# (scripts/install-deps.sh), configure, build, run.
#   make test   build everything (CUDA too when nvcc is found) and run the test suite with ctest
#   make demo   build the demo (CPU-only unless a GPU is visible) and run it
BUILD_TEST ?= build
BUILD_DEMO ?= build-demo
JOBS ?= $(shell nproc)
GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo ON || echo OFF)

.PHONY: all deps test demo format clean

all: test

deps:
	@scripts/install-deps.sh

test: deps
	cmake -S . -B $(BUILD_TEST) -G Ninja -DCMAKE_BUILD_TYPE=Release -DVITRINE_CUDA=AUTO
	cmake --build $(BUILD_TEST) -j $(JOBS)
	cd $(BUILD_TEST) && ctest --output-on-failure -j $(JOBS)

demo: deps
	cmake -S . -B $(BUILD_DEMO) -G Ninja -DCMAKE_BUILD_TYPE=Release -DVITRINE_CUDA=$(GPU) -DVITRINE_BUILD_TESTS=OFF
	cmake --build $(BUILD_DEMO) -j $(JOBS) --target vitrine-demo
	./$(BUILD_DEMO)/tools/demo/vitrine-demo

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD_TEST) $(BUILD_DEMO)
