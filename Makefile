# wavepe developer entry points.  Everything runs inside ./.venv, created on
# first use from requirements-dev.txt (torch pinned to the local CPU wheel).
#
#   make demo    the main job: train-short/test-long experiment on the embedded corpus
#   make test    build, then run the test suite (the README's test command)
#   make ctest   the C core's test driver under AddressSanitizer + UBSan
#   make bench   the benchmark scripts (print tables, write benchmarks/results/*.json)

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.deps-stamp

CC     ?= cc
# Per-ISA compiler flags by file suffix: keep in step with setup.py (ISA_FLAGS).
CORE_SRCS   := $(filter-out %_avx2.c %_avx512.c,$(wildcard csrc/core/*.c))
AVX2_SRCS   := $(wildcard csrc/core/*_avx2.c)
AVX512_SRCS := $(wildcard csrc/core/*_avx512.c)
AVX2_FLAGS  := -mavx2 -mfma
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma
CTEST_SRCS := $(wildcard csrc/core/tests/*.c)
SAN_FLAGS  := -std=c11 -O1 -g -Wall -Wextra -Werror -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
# SIMDe (header-only, from the cmeel-simde wheel in requirements-dev.txt; Debian's
# libsimde-dev 0.7 lacks intrinsics we use) runs the AVX-512 kernels on CPUs
# without AVX-512, for `make ctest-simde`.
SIMDE_INCLUDE = $(firstword $(wildcard $(VENV)/lib/python3*/site-packages/cmeel.prefix/include))

.PHONY: venv build test demo ctest ctest-simde bench clean

$(STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)

build: $(STAMP)
	$(PIP) install -q --no-build-isolation --no-deps -e .

test: build
	$(PY) -m pytest -q

demo: build
	$(VENV)/bin/wavepe extrapolate

ctest:
	rm -rf build/ctest && mkdir -p build/ctest
	for f in $(CORE_SRCS) $(CTEST_SRCS); do \
	  $(CC) $(SAN_FLAGS) -Icsrc/core -c $$f -o build/ctest/$$(basename $$f .c).o || exit 1; done
	for f in $(AVX2_SRCS); do \
	  $(CC) $(SAN_FLAGS) $(AVX2_FLAGS) -Icsrc/core -c $$f -o build/ctest/$$(basename $$f .c).o || exit 1; done
	for f in $(AVX512_SRCS); do \
	  $(CC) $(SAN_FLAGS) $(AVX512_FLAGS) -Icsrc/core -c $$f -o build/ctest/$$(basename $$f .c).o || exit 1; done
	$(CC) $(SAN_FLAGS) -o build/ctest/test_core build/ctest/*.o -lm
	./build/ctest/test_core

# The same tests with the AVX-512 kernels compiled against SIMDe (for CPUs
# without AVX-512: AVX-512 code must never land untested).
ctest-simde: $(STAMP)
	@test -n "$(SIMDE_INCLUDE)" || { echo "SIMDe not found in $(VENV): $(PIP) install cmeel-simde"; exit 1; }
	rm -rf build/ctest-simde && mkdir -p build/ctest-simde
	for f in $(CORE_SRCS) $(CTEST_SRCS); do \
	  $(CC) $(SAN_FLAGS) -DWAVEPE_SIMDE_AVX512 -Icsrc/core -c $$f -o build/ctest-simde/$$(basename $$f .c).o || exit 1; done
	for f in $(AVX2_SRCS) $(AVX512_SRCS); do \
	  $(CC) $(SAN_FLAGS) $(AVX2_FLAGS) -Wno-psabi -DWAVEPE_SIMDE_AVX512 -isystem $(SIMDE_INCLUDE) -Icsrc/core \
	    -c $$f -o build/ctest-simde/$$(basename $$f .c).o || exit 1; done
	$(CC) $(SAN_FLAGS) -o build/ctest-simde/test_core build/ctest-simde/*.o -lm
	./build/ctest-simde/test_core

bench: build
	$(PY) benchmarks/bench_ops.py

clean:
	rm -rf build dist *.egg-info python/*.egg-info python/wavepe/*.so

# The fairseq plugin end to end (fairseq-preprocess, fairseq-train, fairseq-eval-lm
# at 2x the training length) in a Python 3.10 environment: fairseq 0.12.2 does not
# import on 3.11.  The first run downloads ~2.2 GB (torch's CUDA libraries); see
# scripts/setup_fairseq_env.sh.
FAIRSEQ_ENV ?= .venv-fairseq
.PHONY: test-fairseq
test-fairseq:
	bash scripts/setup_fairseq_env.sh $(FAIRSEQ_ENV)
	$(FAIRSEQ_ENV)/bin/python -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning tests/fairseq_integration
