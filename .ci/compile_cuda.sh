#!/usr/bin/env bash
# Compile every CUDA source for sm_80 and sm_90 without a GPU, warnings as
# errors in host code, so that a broken kernel never lands unnoticed.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || true)}
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
shopt -s nullglob
srcs=(csrc/cuda/*.cu)
if [ ${#srcs[@]} -eq 0 ]; then echo "no CUDA sources"; exit 0; fi
if [ -z "$NVCC" ]; then
  if [ "${CI:-}" = "true" ]; then echo "nvcc not found but CUDA sources exist" >&2; exit 1; fi
  echo "nvcc not found; skipping"; exit 0
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for src in "${srcs[@]}"; do
  for arch in 80 90; do
    echo "nvcc sm_$arch $src"
    "$NVCC" -c "$src" -o "$out/$(basename "$src").$arch.o" -O3 -std=c++17 \
      -gencode "arch=compute_$arch,code=sm_$arch" -Icsrc \
      -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings --expt-relaxed-constexpr
  done
done
