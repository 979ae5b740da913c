# Front door: the two commands of the README, over a CMake build in ./build.
#   make run     build, then run the default job (FLUX.2 DiT attention, best backend, parity)
#   make test    build, then run every test; then the same suite under ASan+UBSan and under
#                TSan, and each fuzz harness for FUZZ_SECONDS (cmake/sanitizer_tests.sh; the
#                TSan and fuzz steps skip when clang, libomp's archer or libFuzzer is absent)
#   make test-plain | test-asan | test-tsan | test-fuzz    one step of make test
#   make install PREFIX=/path
#   make format-check | format   check / apply the code style (.clang-format, ruff, rustfmt)
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 20
SANITIZER_TESTS = BUILD=$(BUILD) JOBS=$(JOBS) FUZZ_SECONDS=$(FUZZ_SECONDS) sh cmake/sanitizer_tests.sh

.PHONY: all build run test test-plain test-asan test-tsan test-fuzz install clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/tools/jattn run --check

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) --no-print-directory test-python
	$(MAKE) --no-print-directory test-rust
	$(SANITIZER_TESTS) asan
	$(SANITIZER_TESTS) tsan
	$(SANITIZER_TESTS) fuzz

test-plain: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The Rust crates (rust/test.sh: cargo test, clippy, doc, the feature system; SKIP without cargo).
.PHONY: test-rust
test-rust:
	BUILD=$(BUILD) JOBS=$(JOBS) sh rust/test.sh

test-asan:
	$(SANITIZER_TESTS) asan

test-tsan:
	$(SANITIZER_TESTS) tsan

test-fuzz:
	$(SANITIZER_TESTS) fuzz

# test-python: the Python package (python/): a virtual environment made once in $(VENV) from
# python/requirements-test.txt and reused; pip installs ./python into it (scikit-build-core, its
# CMake build in $(BUILD)-python) with the library $(BUILD) linked for the package
# (JATTN_FROM_BUILD: the same objects, the CUDA runtime inside, as `pip install ./python` builds
# it; the library is not compiled twice), then pytest runs python/tests (JATTN_CLI: the jattn
# command for the bitwise test).
VENV ?= .venv
PYTHON ?= python3
.PHONY: test-python

$(VENV)/.requirements-installed: python/requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r python/requirements-test.txt
	touch $@

test-python: build $(VENV)/.requirements-installed
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	  --no-build-isolation --no-deps --force-reinstall --config-settings=build-dir=$(abspath $(BUILD))-python \
	  --config-settings=cmake.define.JATTN_FROM_BUILD=$(abspath $(BUILD)) ./python
	JATTN_CLI=$(abspath $(BUILD))/tools/jattn $(VENV)/bin/python -m pytest -q python/tests

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz

# The code style: clang-format (.clang-format) over the C / C++ / CUDA sources, ruff (settings in
# python/pyproject.toml) over the Python files, rustfmt (rust/rustfmt.toml) over the crates.
# format-check fails on any difference; format rewrites the files in place. A tool that is not
# installed is reported as skipped. RUFF: ruff on the PATH, else the one in $(VENV).
CLANG_FORMAT ?= clang-format
RUFF ?= $(shell command -v ruff 2>/dev/null || { [ -x $(VENV)/bin/ruff ] && echo $(VENV)/bin/ruff; })
FORMAT_C_FILES = git ls-files -z '*.c' '*.h' '*.cu' '*.cuh' '*.cpp'
FORMAT_PY_FILES = git ls-files -z '*.py'
.PHONY: format-check format

format-check:
	@if command -v $(CLANG_FORMAT) >/dev/null 2>&1; then \
	  echo "format-check: $(CLANG_FORMAT)"; $(FORMAT_C_FILES) | xargs -0 $(CLANG_FORMAT) --dry-run -Werror; \
	else echo "format-check: SKIP clang-format (not installed)"; fi
	@if [ -n "$(RUFF)" ]; then \
	  echo "format-check: ruff"; $(FORMAT_PY_FILES) | xargs -0 $(RUFF) check --config python/pyproject.toml -q && \
	  $(FORMAT_PY_FILES) | xargs -0 $(RUFF) format --config python/pyproject.toml --check -q; \
	else echo "format-check: SKIP ruff (not installed; pip install ruff)"; fi
	@if command -v cargo >/dev/null 2>&1 && cargo fmt --version >/dev/null 2>&1; then \
	  echo "format-check: cargo fmt"; cd rust && cargo fmt --check; \
	else echo "format-check: SKIP cargo fmt (not installed)"; fi

format:
	@if command -v $(CLANG_FORMAT) >/dev/null 2>&1; then $(FORMAT_C_FILES) | xargs -0 $(CLANG_FORMAT) -i; \
	else echo "format: SKIP clang-format (not installed)"; fi
	@if [ -n "$(RUFF)" ]; then $(FORMAT_PY_FILES) | xargs -0 $(RUFF) check --config python/pyproject.toml --fix -q; \
	  $(FORMAT_PY_FILES) | xargs -0 $(RUFF) format --config python/pyproject.toml -q; \
	else echo "format: SKIP ruff (not installed)"; fi
	@if command -v cargo >/dev/null 2>&1 && cargo fmt --version >/dev/null 2>&1; then cd rust && cargo fmt; \
	else echo "format: SKIP cargo fmt (not installed)"; fi
