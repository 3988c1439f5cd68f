# The two commands of the README. Each does the whole set-up on a fresh clone: system packages
# (scripts/install-deps.sh), configure, build, run.
#   make test   build everything (CUDA too when nvcc is found) and run the test suite with ctest
#               (make test-env: the bit-sensitive tests under several OpenBLAS environments)
#   make demo   build vitrine-train and vitrine-explain (CPU-only unless a GPU is visible), train
#               the default Fashion-MNIST ViT briefly, evaluate it, explain a dozen test images
#               with every method and say where the reports are
BUILD_TEST ?= build
BUILD_DEMO ?= build-demo
BUILD_SANITIZE ?= build-sanitize
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := safetensors npy idx cifar image train_config model_config serve_request
JOBS ?= $(shell nproc)
DEMO_EPOCHS ?= 3
DEMO_RUN ?= runs/demo
DEMO_EXPLAIN ?= 12
# The default recipe's flips and drop-path pay only in long runs (configs/fashion_mnist.json): the
# short demo goes without. It holds out a validation split (the default trains on all 60000
# images), so that best.safetensors is the checkpoint with the best validation accuracy.
DEMO_SET ?= --set data.transforms.hflip=0 --set model.drop_path=0 --set data.validation_fraction=0.1
GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo ON || echo OFF)

.PHONY: all deps test test-build test-env demo autograd-demo fuzz sanitize sanitize-build format clean

# `make` alone runs nothing: it names the two commands.
all:
	@echo "Vitrine's two commands (each installs the dependencies and builds first):"
	@echo "  make demo   train a ViT on Fashion-MNIST for a few minutes, evaluate it, explain a dozen test images"
	@echo "  make test   build everything and run the whole test suite (ctest)"

deps:
	@scripts/install-deps.sh

test-build: deps
	cmake -S . -B $(BUILD_TEST) -G Ninja -DCMAKE_BUILD_TYPE=Release -DVITRINE_CUDA=AUTO
	cmake --build $(BUILD_TEST) -j $(JOBS)

test: test-build
	cd $(BUILD_TEST) && ctest --output-on-failure -j $(JOBS)

# The tests whose last bits depend on which kernels compute a product (imports, parities,
# determinism, data parallel, resume), under each environment a machine may impose on OpenBLAS
# and on Vitrine's GEMM (scripts/test-env.sh, docs/environment.md): TEST_ENVS names them
# (default all: haswell-l2 skylakex none prescott gemm-openblas gemm-own). CI runs haswell-l2 and
# skylakex after `make test`.
TEST_ENVS ?=
test-env: test-build
	scripts/test-env.sh $(BUILD_TEST) $(TEST_ENVS)

# The demo trains the default Fashion-MNIST ViT for a short budget (DEMO_EPOCHS; the config's
# cosine schedule is fitted to it; no augmentation, DEMO_SET) in runs/demo (replaced each time), then evaluates its best
# checkpoint on the test set as a separate command would, then explains DEMO_EXPLAIN test images
# with every method (runs/demo/explain/index.html).
demo: deps
	cmake -S . -B $(BUILD_DEMO) -G Ninja -DCMAKE_BUILD_TYPE=Release -DVITRINE_CUDA=$(GPU) -DVITRINE_BUILD_TESTS=OFF
	cmake --build $(BUILD_DEMO) -j $(JOBS) --target vitrine-train vitrine-explain
	rm -rf $(DEMO_RUN)
	./$(BUILD_DEMO)/tools/train/vitrine-train --epochs $(DEMO_EPOCHS) --out $(DEMO_RUN) $(DEMO_SET)
	./$(BUILD_DEMO)/tools/train/vitrine-train --eval $(DEMO_RUN)/best.safetensors $(DEMO_SET)
	./$(BUILD_DEMO)/tools/explain/vitrine-explain --checkpoint $(DEMO_RUN)/best.safetensors \
	  --dataset fashion-mnist --count $(DEMO_EXPLAIN) --method all --out $(DEMO_RUN)/explain
	@echo "run folder: $(DEMO_RUN)   training report: $(DEMO_RUN)/report.html   explanations: $(DEMO_RUN)/explain/index.html"

# Hardened input (docs/security.md). One clang build with AddressSanitizer, UndefinedBehaviorSanitizer
# and libFuzzer's coverage (-O1, CUDA off) serves both:
#   make sanitize   the whole test suite under ASan + UBSan (any report fails its test)
#   make fuzz       each reader's fuzz target for FUZZ_SECONDS (60) from its seeds; fails on any
#                   crash, sanitizer report or leak (findings in $(BUILD_SANITIZE)/fuzz-findings)
# A report exits with status 86 (so that no test expecting a failure can take it for its own), and
# `make sanitize` also has every report written to $(BUILD_SANITIZE)/sanitizer-reports/: a report
# from a program a test started (whose output the test may not show) fails the run too.
SANITIZER_FLAGS := abort_on_error=0:exitcode=86
SANITIZE_ENV := ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=0:$(SANITIZER_FLAGS) \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:$(SANITIZER_FLAGS) \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitize/lsan.supp:print_suppressions=0
REPORTS := $(CURDIR)/$(BUILD_SANITIZE)/sanitizer-reports
sanitize-build: deps
	CC=clang CXX=clang++ cmake -S . -B $(BUILD_SANITIZE) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DVITRINE_CUDA=OFF -DVITRINE_FUZZ=ON

sanitize: sanitize-build
	cmake --build $(BUILD_SANITIZE) -j $(JOBS)
	rm -rf $(REPORTS) && mkdir -p $(REPORTS)
	cd $(BUILD_SANITIZE) && $(SANITIZE_ENV) \
	  ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=0:$(SANITIZER_FLAGS):log_path=$(REPORTS)/asan \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:$(SANITIZER_FLAGS):log_path=$(REPORTS)/ubsan \
	  ctest --output-on-failure -j $(JOBS); status=$$?; \
	  if [ -n "$$(ls -A $(REPORTS))" ]; then cat $(REPORTS)/*; \
	    echo "sanitize: the sanitizer reports above (in $(REPORTS))"; exit 1; fi; \
	  [ $$status -eq 0 ] && echo "sanitize: the whole suite under ASan + UBSan: no report"; \
	  exit $$status

fuzz: sanitize-build
	cmake --build $(BUILD_SANITIZE) -j $(JOBS) --target fuzz_make_seeds $(addprefix fuzz_,$(FUZZ_TARGETS))
	$(SANITIZE_ENV) scripts/fuzz.sh $(BUILD_SANITIZE) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The first demo: one neuron's forward, graph, backward and gradcheck, printed (docs/autograd.md).
autograd-demo: deps
	cmake -S . -B $(BUILD_DEMO) -G Ninja -DCMAKE_BUILD_TYPE=Release -DVITRINE_CUDA=$(GPU) -DVITRINE_BUILD_TESTS=OFF
	cmake --build $(BUILD_DEMO) -j $(JOBS) --target vitrine-demo
	./$(BUILD_DEMO)/tools/demo/vitrine-demo

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD_TEST) $(BUILD_DEMO) $(BUILD_SANITIZE)
