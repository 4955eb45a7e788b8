#!/usr/bin/env bash
# Create (or bring up to date) a Python 3.10 environment with stock fairseq 0.12.2,
# torch 2.13.0 and wavepe built from this checkout, for the fairseq plugin
# (`--user-dir "$(wavepe fairseq-user-dir)"`) and `make test-fairseq`.
#
#   bash scripts/setup_fairseq_env.sh [ENV_DIR]      (default: ./.venv-fairseq)
#
# Environment: PYTHON310=/path/to/python3.10 picks the interpreter (default: pyenv's
# newest 3.10, else python3.10 on PATH).  Re-running is cheap: installed pins are
# kept (stamp file), wavepe is rebuilt only when its C/C++ sources changed.
#
# Why it looks like this (measured on a 2-core x86-64 machine, PyPI at ~30 MB/s):
# * fairseq 0.12.2 does not import on Python >= 3.11 (dataclass mutable defaults): 3.10.
# * PyPI has no CPU-only torch for Linux x86-64; every cp310 wheel is a CUDA build
#   (torch 2.13.0: 527 MB; 2.11.0: 531 MB; 2.9.1: 900 MB; 2.6.0: 767 MB; 2.4.1: 797 MB).
#   `import torch` needs the CUDA libraries its .so files link against even without a
#   GPU, but not all of torch's requirements: triton, nvidia-cusolver (loaded lazily),
#   nvidia-nvtx, cuda-bindings and cuda-toolkit's metadata are left out (-420 MB).
#   Download: 2.2 GB instead of 2.6 GB; torch 2.13.0 is the lightest candidate and the
#   one the main environment builds wavepe's C++ against.
# * fairseq's metadata pins hydra-core 1.0.7 / omegaconf 2.0.6, whose metadata pip >= 24.1
#   rejects: pip 24.0.  NumPy 1.26.4 (wavepe's oldest supported): fairseq 0.12.2's only
#   uses of the aliases NumPy 1.24 removed (np.float, np.int) are in wav2vec's masking
#   and the NAT CRF layer, not in language models.
# * fairseq 0.12.2 has no cp310 wheel, and its sdist lacks the sources of the optional
#   torch extensions (libbase: BASE layers, libnat: NAT edit distance), whose build
#   fails whenever torch is importable.  So the wheel is built in a throwaway
#   environment without torch (its Cython/C++ extensions for data loading and BLEU
#   are built), and installed with --no-deps: its requirement torchaudio (speech
#   tasks only) would pull another multi-GB torch.
# * wavepe: built against the installed torch, --no-build-isolation, without CUDA kernels
#   (WAVEPE_BUILD_CUDA=0), editable so the plugin's Python code is this checkout's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENV_DIR="${1:-$ROOT/.venv-fairseq}"
mkdir -p "$ENV_DIR" && ENV_DIR="$(cd "$ENV_DIR" && pwd)"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1

PIP_PIN="pip==24.0"
BUILD_PINS=("setuptools==84.2.1" "wheel==0.48.0" "cython==0.29.37" "numpy==1.26.4")
FAIRSEQ_PIN="fairseq==0.12.2"
# torch and exactly the CUDA libraries its shared objects link against (installed --no-deps)
TORCH_PINS=(
  "torch==2.13.0"
  "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cupti==13.0.85" "nvidia-cuda-nvrtc==13.0.88"
  "nvidia-cublas==13.1.1.3" "nvidia-cufft==12.0.0.61" "nvidia-curand==10.4.0.35"
  "nvidia-cusparse==12.6.3.3" "nvidia-nvjitlink==13.5.37" "nvidia-cufile==1.15.1.6"
  "nvidia-cudnn-cu13==9.20.0.48" "nvidia-cusparselt-cu13==0.8.1" "nvidia-nccl-cu13==2.29.7"
  "nvidia-nvshmem-cu13==3.4.5"
)
# torch's and fairseq's pure-Python requirements (fairseq's minus torch and torchaudio), and the tests'
RUNTIME_PINS=(
  "filelock==4.1.0" "typing-extensions==4.16.0" "sympy==1.14.0" "networkx==3.4.2" "jinja2==3.1.6"
  "fsspec==2026.9.0" "cffi==2.1.1" "hydra-core==1.0.7" "omegaconf==2.0.6" "antlr4-python3-runtime==4.8"
  "regex==2026.9.29" "sacrebleu==2.6.0" "tqdm==4.70.1" "bitarray==3.12.3" "PyYAML==6.0.3"
  "pytest==9.2.0" "hypothesis==6.168.5"
)

start=$(date +%s)
step() { echo "=== [$(( $(date +%s) - start ))s] $*"; }
die() { echo "setup_fairseq_env: $*" >&2; exit 1; }

find_python310() {
  local cands=()
  [ -n "${PYTHON310:-}" ] && cands+=("$PYTHON310")
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  local p
  for p in $(ls -d "$pyenv_root"/versions/3.10.*/bin/python 2>/dev/null | sort -t. -k3 -n -r); do cands+=("$p"); done
  command -v python3.10 >/dev/null 2>&1 && cands+=("$(command -v python3.10)")
  for p in "${cands[@]}"; do
    if [ -x "$p" ] && "$p" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
  return 1
}

PY310="$(find_python310)" || die "no Python 3.10 found.
fairseq 0.12.2 only imports on Python <= 3.10 (on 3.11 its dataclass configs raise
'mutable default ... is not allowed'), so this environment needs a Python 3.10 with venv.
Install one, e.g. 'pyenv install 3.10.13' (the default place looked at is
\$PYENV_ROOT/versions/3.10.*), or point PYTHON310 at an interpreter:
  PYTHON310=/usr/bin/python3.10 bash scripts/setup_fairseq_env.sh"
step "Python 3.10: $PY310 ($("$PY310" -c 'import platform; print(platform.python_version())'))"

PY="$ENV_DIR/bin/python"
PINS_HASH="$(printf '%s\n' "$PY310" "$PIP_PIN" "${BUILD_PINS[@]}" "$FAIRSEQ_PIN" "${TORCH_PINS[@]}" "${RUNTIME_PINS[@]}" \
  | sha256sum | cut -c1-16)"
STAMP="$ENV_DIR/.wavepe-fairseq-pins"

if [ -x "$PY" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$PINS_HASH" ] \
   && "$PY" -c 'import torch, fairseq' >/dev/null 2>&1; then
  step "environment $ENV_DIR is up to date (pins $PINS_HASH)"
else
  rm -f "$STAMP"
  step "creating $ENV_DIR"
  [ -x "$PY" ] || "$PY310" -m venv "$ENV_DIR"
  "$PY" -m pip install -q "$PIP_PIN"
  "$PY" -m pip install -q "${BUILD_PINS[@]}"

  WHEELS="$ENV_DIR/wheels"
  if ! ls "$WHEELS"/fairseq-0.12.2-*.whl >/dev/null 2>&1; then
    step "building the fairseq 0.12.2 wheel from its sdist, without torch visible"
    BUILD_ENV="$ENV_DIR/.fairseq-build"
    rm -rf "$BUILD_ENV"
    "$PY310" -m venv "$BUILD_ENV"
    "$BUILD_ENV/bin/python" -m pip install -q "$PIP_PIN"
    "$BUILD_ENV/bin/python" -m pip install -q "${BUILD_PINS[@]}"
    "$BUILD_ENV/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is not None)' \
      || die "torch is importable in the build environment; the fairseq sdist cannot build then"
    "$BUILD_ENV/bin/python" -m pip wheel -q --no-build-isolation --no-deps --no-binary fairseq \
      "$FAIRSEQ_PIN" -w "$WHEELS"
    rm -rf "$BUILD_ENV"
  fi

  step "installing torch 2.13.0 and the CUDA libraries 'import torch' links against (--no-deps; ~2.2 GB download)"
  echo "    (pip will list torch's left-out packages and fairseq's torchaudio as missing: expected)"
  "$PY" -m pip install -q --no-deps "${TORCH_PINS[@]}"
  step "installing fairseq 0.12.2 (--no-deps) and the pure-Python requirements"
  "$PY" -m pip install -q --no-deps "$WHEELS"/fairseq-0.12.2-*.whl
  "$PY" -m pip install -q "${RUNTIME_PINS[@]}"
  # every pin must have held: a resolver upgrade here would mean an untested environment
  "$PY" - "${BUILD_PINS[@]}" "${TORCH_PINS[@]}" "${RUNTIME_PINS[@]}" "$FAIRSEQ_PIN" <<'EOF'
import sys
from importlib.metadata import version
bad = [f"{p} (installed {version(p.split('==')[0])})" for p in sys.argv[1:] if version(p.split("==")[0]) != p.split("==")[1]]
sys.exit("pins not honoured: " + ", ".join(bad) if bad else 0)
EOF
  echo "$PINS_HASH" > "$STAMP"
fi

# wavepe: rebuild only when what the compiled parts are made of changed
SRC_HASH="$( (cd "$ROOT" && find csrc setup.py pyproject.toml python/wavepe/_build build_backend -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \
  -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' -o -name '*.toml' \) -print0 | sort -z | xargs -0 sha256sum) \
  | sha256sum | cut -c1-16)"
BUILD_STAMP="$ENV_DIR/.wavepe-build"
if [ "$(cat "$BUILD_STAMP" 2>/dev/null)" = "$SRC_HASH" ] && (cd /tmp && "$PY" -c 'import wavepe.ops' >/dev/null 2>&1) \
   && [ "$(cd /tmp && "$PY" -c 'import os, wavepe; print(os.path.realpath(os.path.dirname(wavepe.__file__)))')" \
        = "$(cd "$ROOT/python/wavepe" && pwd -P)" ]; then
  step "wavepe build is up to date ($SRC_HASH)"
else
  step "building wavepe from $ROOT against torch 2.13.0 (no CUDA kernels; editable)"
  rm -f "$BUILD_STAMP"
  WAVEPE_BUILD_CUDA=0 "$PY" -m pip install -q --no-build-isolation --no-deps -e "$ROOT"
  echo "$SRC_HASH" > "$BUILD_STAMP"
fi

step "checking the environment"
(cd /tmp && "$PY" - <<'EOF'
import fairseq, numpy, torch
import wavepe, wavepe.ops
from wavepe.integrations.fairseq import user_dir
q = torch.randn(1, 2, 5, 16)
assert wavepe.ops.wavelet_attention(q, q, q).shape == q.shape
print(f"python {__import__('platform').python_version()}, torch {torch.__version__}, fairseq {fairseq.__version__}, "
      f"numpy {numpy.__version__}, wavepe {wavepe.__version__} (isa {wavepe.active_isa()})")
print(f"fairseq --user-dir: {user_dir()}")
EOF
)
step "done: $(du -sh "$ENV_DIR" | cut -f1) in $ENV_DIR; activate with: source $ENV_DIR/bin/activate"
