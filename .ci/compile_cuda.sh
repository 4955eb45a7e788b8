#!/usr/bin/env bash
# Compile every CUDA source for sm_80 and sm_90 without a GPU, warnings as
# errors in host code, so that a broken kernel never lands unnoticed; check
# with ptxas's report and the SASS that no kernel spills or uses local memory
# and that the tensor-core kernels hold HMMA (.ci/check_cuda_kernels.py); then
# syntax-check the op bindings with their CUDA registrations and launches
# (csrc/torch/*_op.cpp, launch*.cpp, compiled with -DWAVEPE_WITH_CUDA=1)
# against the installed torch's headers (a CPU wheel is enough: the one
# header its build generates for CUDA is stubbed in .ci/torch_cuda_stubs).
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || true)}
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
shopt -s nullglob
srcs=(csrc/cuda/*.cu)
binds=(csrc/torch/*_op.cpp csrc/torch/launch*.cpp)
if [ ${#srcs[@]} -eq 0 ]; then echo "no CUDA sources"; exit 0; fi
if [ -z "$NVCC" ]; then
  if [ "${CI:-}" = "true" ]; then echo "nvcc not found but CUDA sources exist" >&2; exit 1; fi
  echo "nvcc not found; skipping"; exit 0
fi
# nvcc's flags as setup.py and the first-use build use them (python/wavepe/_build/recipe.py), warnings as errors
nvcc_flags=$(WAVEPE_WERROR=1 python3 python/wavepe/_build/recipe.py nvcc-flags)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
jobs_max=$(nproc 2>/dev/null || echo 2)
pids=()
for src in "${srcs[@]}"; do
  for arch in 80 90; do
    echo "nvcc sm_$arch $src"
    obj="$out/$(basename "$src").$arch"
    # ptxas's -v report (registers, spills, stack per kernel) goes to $obj.ptxas;
    # everything else nvcc says is shown
    # shellcheck disable=SC2086
    ( "$NVCC" -c "$src" -o "$obj.o" $nvcc_flags -Xptxas -v \
        -gencode "arch=compute_$arch,code=sm_$arch" -Icsrc 2>"$obj.ptxas"; rc=$?
      grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' "$obj.ptxas" >&2 || true
      exit $rc ) &
    pids+=($!)
    if [ ${#pids[@]} -ge "$jobs_max" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
done
for pid in "${pids[@]}"; do wait "$pid"; done

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  # the venv brings torch's headers and cuobjdump/nvdisasm (requirements-dev.txt)
  if [ ! -x .venv/bin/python ] && [ "${CI:-}" = "true" ]; then make venv; fi
  PY=$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)
fi

# registers, spills, local memory and tensor-core instructions per kernel and arch
set +e
python3 .ci/check_cuda_kernels.py "$out"
rc=$?
set -e
if [ $rc -eq 3 ] && [ "${CI:-}" != "true" ]; then
  echo "cuobjdump/nvdisasm not found; skipping the SASS checks (make venv installs them)"
elif [ $rc -ne 0 ]; then
  exit $rc
fi

[ ${#binds[@]} -eq 0 ] && exit 0
if ! flags=$("$PY" -c "
import torch
from torch.utils import cpp_extension
print(' '.join('-isystem' + p for p in cpp_extension.include_paths()),
      '-D_GLIBCXX_USE_CXX11_ABI=%d' % int(torch._C._GLIBCXX_USE_CXX11_ABI))" 2>/dev/null); then
  if [ "${CI:-}" = "true" ]; then echo "torch not importable: cannot check ${binds[*]}" >&2; exit 1; fi
  echo "torch not importable; skipping the syntax check of ${binds[*]}"; exit 0
fi
cuda_inc=""
for c in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$NVCC")")")" /usr/local/cuda; do
  if [ -n "$c" ] && [ -f "$c/include/cuda_runtime_api.h" ]; then cuda_inc="$c/include"; break; fi
done
if [ -z "$cuda_inc" ]; then echo "CUDA headers (cuda_runtime_api.h) not found; set CUDA_HOME" >&2; exit 1; fi
for f in "${binds[@]}"; do
  echo "g++ -fsyntax-only $f"
  # shellcheck disable=SC2086
  ${CXX:-g++} -std=c++20 -fsyntax-only -Wall -Wextra -Werror $flags -isystem .ci/torch_cuda_stubs \
    -isystem "$cuda_inc" -DWAVEPE_WITH_CUDA=1 -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C "$f"
done
