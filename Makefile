# wavepe developer entry points.  Everything runs inside ./.venv, created on
# first use from requirements-dev.txt (torch pinned to the local CPU wheel).
#
#   make demo    the main job: train-short/test-long experiment on the embedded corpus
#   make test    build, then run the test suite (the README's test command)
#   make build   (re)build the extensions in place: only what changed since the last build
#   make ctest   the C core's test driver under AddressSanitizer + UBSan
#   make ctest-release   the same tests linked with the package's own objects of the core (-O3, no sanitizers)
#   make ctest-aarch64   the same, cross-compiled for AArch64 and run under qemu-user (scalar + NEON)
#   make bench   the benchmark scripts (print tables, write benchmarks/results/*.json)

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.deps-stamp

CC     ?= cc
# Which core files are compiled on this machine, with which extra flags (-mavx2 -mfma -mf16c for *_avx2.c,
# the AVX-512 set for *_avx512.c, ...), is defined once, in python/wavepe/_build/recipe.py
# (SUFFIX_RULES), for setup.py, the runtime builder and this file: ctest asks it (standard library only).
RECIPE     := $(PYTHON) python/wavepe/_build/recipe.py
CTEST_SRCS := $(wildcard csrc/core/tests/*.c)
# The C tests' debug information: line tables only (-g1), which is what the sanitizers' and a crash's backtraces
# read (function, file and line); full -g (locals, for a debugger) made the sanitized builds' compiles ~1.5x longer
# (attention_amx.c against SIMDe 35 s, against 23 s): `make ctest CTEST_DEBUG=-g` when stepping through one.
CTEST_DEBUG ?= -g1
# -fira-region=one: GCC's register allocator over each function whole instead of loop by loop -- the vector kernels
# inlined (SIMDe's AVX-512 most of all) and instrumented by ASan are a few huge functions, on which the regional
# allocator was ~45 % of the compile (-ftime-report: attention_avx512.c against SIMDe 48 -> 29 s, attention_amx.c
# 62 -> 34 s; make ctest-simde ~500 -> ~370 CPU-s on a Zen 3).  It changes where values live, not what the code does
# or what the sanitizers check (their instrumentation is in place before allocation); the tests' run was no slower.
SAN_FLAGS  := -std=c11 -O1 $(CTEST_DEBUG) -fira-region=one -Wall -Wextra -Werror -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
# SIMDe (header-only, from the cmeel-simde wheel in requirements-dev.txt; Debian's
# libsimde-dev 0.7 lacks intrinsics we use) runs the AVX-512 kernels on CPUs
# without AVX-512, for `make ctest-simde`.
SIMDE_ISA_FLAGS := -mavx2 -mfma -mf16c -Wno-psabi
SIMDE_INCLUDE = $(firstword $(wildcard $(VENV)/lib/python3*/site-packages/cmeel.prefix/include))

# Warnings are errors in development builds (a user's pip install never sets this).
export WAVEPE_WERROR ?= 1

# What the compiled parts are made of: when one of these is newer than the last build, `make build`
# runs setup.py again, which recompiles only the objects whose source, headers or flags changed
# (they are kept under build/obj.*); otherwise it does nothing.
BUILD_INPUTS := setup.py pyproject.toml MANIFEST.in $(wildcard python/wavepe/_build/*.py build_backend/*.py) \
                $(shell find csrc -type f -not -path 'csrc/core/tests/*')
BUILT        := $(VENV)/.build-stamp

.PHONY: venv build test demo ctest ctest-release ctest-simde ctest-aarch64 bench clean

# The C test targets compile their objects JOBS at a time (a sanitized build of the vector kernels is
# a few minutes of one core): $(call compile_each,DIR,SOURCES,COMMAND) runs COMMAND once per source,
# with $$f the source and $$o its object in DIR; any failure fails the target.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
define compile_each
printf '%s\n' $(2) | xargs -P $(JOBS) -I{} sh -c 'f={}; o=$(1)/$$(basename {} .c).o; $(3)'
endef

$(STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)

$(BUILT): $(STAMP) $(BUILD_INPUTS)
	$(PIP) install -q --no-build-isolation --no-deps -e .
	touch $@

build: $(BUILT)

# The suite runs in pytest-xdist's workers: TEST_WORKERS of them, "auto" = one a core, at most 4
# (tests/conftest.py), a test file at a time (--dist loadfile): a file's module fixtures -- the spawned
# process groups of test_distributed.py, the first-call case server -- start once, in one worker.
# TEST_ARGS adds pytest options: TEST_ARGS='-m "not slow"' leaves out the slowest end-to-end tests
# while iterating (docs/DEVELOPING.md, "Where the test time goes").
TEST_WORKERS ?= auto
TEST_ARGS ?=
test: build
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(TEST_ARGS)

demo: build
	$(VENV)/bin/wavepe extrapolate

ctest:
	rm -rf build/ctest && mkdir -p build/ctest
	$(call compile_each,build/ctest,$$($(RECIPE) core-sources) $(CTEST_SRCS),$(CC) $(SAN_FLAGS) $$($(RECIPE) flags $$f) -Icsrc/core -c $$f -o $$o)
	$(CC) $(SAN_FLAGS) -o build/ctest/test_core build/ctest/*.o -lm
	./build/ctest/test_core

# The same tests linked with the package's own objects of the core (setup.py's, under build/obj.*: the recipe's
# flags, -O3, no sanitizers -- compiled by `recipe.py core-objects` where missing or stale, else those `make build`
# or the wheel's build left): what users run.  The sanitizers' -O1 build does not see what -O3's optimizations do
# to the code (a GCC 12 loop-distribution miscompile of the amx kernels failed here and passed `make ctest`).
# The objects' folder is per CPython (setup.py's): the project's .venv's where it exists.
OBJ_PY = $(if $(wildcard $(PY)),$(PY),$(PYTHON))
ctest-release:
	rm -rf build/ctest-release && mkdir -p build/ctest-release
	objs=$$(CC='$(CC)' $(OBJ_PY) python/wavepe/_build/recipe.py core-objects) && \
	$(call compile_each,build/ctest-release,$(CTEST_SRCS),$(CC) $$($(RECIPE) c-flags $$f) $(CTEST_DEBUG) -Icsrc/core -c $$f -o $$o) && \
	$(CC) -o build/ctest-release/test_core build/ctest-release/*.o $$objs -lm
	./build/ctest-release/test_core

# The same tests with the AVX-512 kernels compiled against SIMDe (for CPUs
# without AVX-512: AVX-512 code must never land untested).  CI runs it there in
# place of `make ctest`: the scalar and AVX2 kernels it runs too, with the same flags.
ctest-simde: $(STAMP)
	@test -n "$(SIMDE_INCLUDE)" || { echo "SIMDe not found in $(VENV): $(PIP) install cmeel-simde"; exit 1; }
	rm -rf build/ctest-simde && mkdir -p build/ctest-simde
	# files with ISA flags of their own (the recipe's SUFFIX_RULES: *_avx2.c, *_avx512.c) get AVX2's instead
	$(call compile_each,build/ctest-simde,$$($(RECIPE) core-sources) $(CTEST_SRCS),isa=""; \
	  [ -z "$$($(RECIPE) flags $$f)" ] || isa="$(SIMDE_ISA_FLAGS) -isystem $(SIMDE_INCLUDE)"; \
	  $(CC) $(SAN_FLAGS) $$isa -DWAVEPE_SIMDE_AVX512 -Icsrc/core -c $$f -o $$o)
	$(CC) $(SAN_FLAGS) -o build/ctest-simde/test_core build/ctest-simde/*.o -lm
	./build/ctest-simde/test_core

# The same tests cross-compiled for AArch64 (the recipe's aarch64 files: *_neon.c, no x86 kernels)
# and run under qemu-user, so that NEON code never lands untested on x86 machines.  The toolchain
# comes from scripts/install_aarch64_toolchain.sh (Debian's gcc-aarch64-linux-gnu, qemu-user).
# ASan works under qemu-user except LeakSanitizer, which needs ptrace-like access qemu does not give:
# leaks are checked by the native `make ctest`.  Set QEMU_CPU (e.g. neoverse-n1) to pick the model.
AARCH64_CC   ?= aarch64-linux-gnu-gcc
AARCH64_QEMU ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
ctest-aarch64:
	@command -v $(AARCH64_CC) >/dev/null && command -v $(firstword $(AARCH64_QEMU)) >/dev/null || \
	  { echo "no AArch64 cross toolchain: run scripts/install_aarch64_toolchain.sh (as root)"; exit 1; }
	rm -rf build/ctest-aarch64 && mkdir -p build/ctest-aarch64
	$(call compile_each,build/ctest-aarch64,$$($(RECIPE) core-sources aarch64) $(CTEST_SRCS),$(AARCH64_CC) $(SAN_FLAGS) \
	  $$($(RECIPE) flags $$f) -Icsrc/core -c $$f -o $$o)
	$(AARCH64_CC) $(SAN_FLAGS) -o build/ctest-aarch64/test_core build/ctest-aarch64/*.o -lm
	ASAN_OPTIONS=detect_leaks=0 $(AARCH64_QEMU) ./build/ctest-aarch64/test_core

bench: build
	$(PY) benchmarks/bench_ops.py

clean:
	rm -rf build dist *.egg-info python/*.egg-info python/wavepe/*.so python/wavepe/libwavepe_ops.json $(BUILT)

# The fairseq plugin end to end (fairseq-preprocess, fairseq-train, fairseq-eval-lm
# at 2x the training length) in a Python 3.10 environment: fairseq 0.12.2 does not
# import on 3.11.  The first run downloads ~2.2 GB (torch's CUDA libraries); see
# scripts/setup_fairseq_env.sh.
FAIRSEQ_ENV ?= .venv-fairseq
.PHONY: test-fairseq
test-fairseq:
	bash scripts/setup_fairseq_env.sh $(FAIRSEQ_ENV)
	$(FAIRSEQ_ENV)/bin/python -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning tests/fairseq_integration
