#!/usr/bin/env bash
# The ways to install wavepe from source that docs/install.md lists (the prebuilt wheel is checked by
# .ci/check_wheel.sh), each into a brand-new environment holding only torch==2.13.0 (the local CPU
# wheel: never any other torch), each followed by the fused attention forward + backward checked
# against plain PyTorch:
#
#   1. the sdist of `python -m build --sdist`: pip install it (pip builds it in isolation, without
#      torch): the fallback for a platform without a wheel -- the ops are compiled at first use (one
#      message; the C core's objects, kept by the install, linked), then loaded from the cache silently
#   2. pip install --no-build-isolation . (in a copy of the source tree: the sdist, unpacked, so that
#      this checkout's build/ keeps the objects of `make build`): it must first stop with the message
#      that names what to install; after installing exactly that, it builds the ops against the
#      environment's torch
#
# (the clone + make way is `make test`.)  Each environment gets its own cache directory, so each
# first-use build really compiles.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-.venv/bin/python}
t0=$(date +%s)
# Two environments with torch are ~2.3 GB of fresh files; on a file system mounted with `discard`
# deleting them takes minutes (~47 s each here), so they go to RAM (/dev/shm) when it has room.
shm_free_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')
if [ -w /dev/shm ] && [ "${shm_free_kb:-0}" -gt $((6 * 1024 * 1024)) ] \
   && ! findmnt -no OPTIONS /dev/shm 2>/dev/null | grep -qw noexec; then  # torch's libraries are mapped executable
  work=$(mktemp -d -p /dev/shm wavepe-install.XXXXXX)
else
  work=$(mktemp -d)
fi
trap 'rm -rf "$work"; echo "--- removed the test environments [$(( $(date +%s) - t0 ))s]"' EXIT
lap() { echo "--- $* [$(( $(date +%s) - t0 ))s]"; }

quietly() {  # run a command with its output in a log, shown only when it fails
  local log; log=$(mktemp -p "$work")
  "$@" > "$log" 2>&1 || { cat "$log"; echo "failed: $*" >&2; exit 1; }
}

fresh_env() {  # a virtual environment holding torch==2.13.0 and nothing else
  python3 -m venv "$1"
  # (--no-compile: torch's ~2,300 modules left to compile when imported, the few a check imports -- pip's byte-compiling
  # of them all was half of this install's CPU time, ~17 of 36 s on a Zen 3; wavepe's own install below compiles as a user's)
  quietly "$1/bin/python" -m pip install --no-compile "torch==2.13.0"
}

# check_ops ENV ORIGIN: the torch ops of the installed wavepe work, and came from ORIGIN
check_ops() {
  (cd "$work" && "$1/bin/python" "$ROOT/.ci/installed_attention_check.py" "$2")
}

lap "python -m build --sdist (of a copy of the checkout's files)"
# (setuptools writes its egg-info into the tree it builds from; the wheel's build, which CI runs beside this script,
# writes the checkout's: a copy of the files git sees -- tracked and untracked, not ignored -- keeps them apart)
mkdir "$work/src"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$work/src"
"$PY" -m build --sdist --outdir "$work/dist" "$work/src" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
sdist=$(ls "$work"/dist/wavepe-*.tar.gz)
echo "built $(basename "$sdist") ($(du -h "$sdist" | cut -f1))"

lap "1. the sdist into a fresh environment with only torch"
fresh_env "$work/env-sdist"
"$work/env-sdist/bin/python" -m pip install --no-cache-dir "$sdist" > "$work/sdist.log" 2>&1 \
  || { cat "$work/sdist.log"; exit 1; }
grep -q "Building wheel for wavepe" "$work/sdist.log" || { cat "$work/sdist.log"; echo "no build from the sdist" >&2; exit 1; }
export WAVEPE_CACHE_DIR="$work/cache-sdist"
check_ops "$work/env-sdist" "compiled at first use" 2> "$work/first-use.err" || { cat "$work/first-use.err"; exit 1; }
cat "$work/first-use.err"
grep -q "^wavepe: compiling the PyTorch ops for torch 2.13.0+cpu (once; cached in " "$work/first-use.err"
# the C core compiled once: the install kept its objects (built for the NumPy extension), the first use linked them
grep -Eq "^wavepe: compiled the PyTorch ops \([0-9]+ files; the C core's [0-9]+ objects from the installation\) in [0-9]+ s" \
  "$work/first-use.err" || { echo "the first-use build did not link the installation's C core objects" >&2; exit 1; }
lap "   second process: from the cache, silently"
check_ops "$work/env-sdist" "compiled at first use" 2> "$work/second.err"
if [ -s "$work/second.err" ]; then cat "$work/second.err"; echo "the second import was not silent" >&2; exit 1; fi
"$work/env-sdist/bin/wavepe" info

lap "2. pip install --no-build-isolation . into a fresh environment with only torch"
fresh_env "$work/env-own-torch"
mkdir "$work/tree" && tar -xzf "$sdist" -C "$work/tree"
tree=$(ls -d "$work"/tree/wavepe-*)
if (cd "$tree" && "$work/env-own-torch/bin/python" -m pip install --no-build-isolation . > "$work/own.log" 2>&1); then
  if "$work/env-own-torch/bin/python" -c "import numpy" 2>/dev/null; then
    echo "(numpy came with torch here: the build needed nothing more)"
  else
    cat "$work/own.log"; echo "built without numpy?" >&2; exit 1
  fi
else
  grep -A3 "wavepe: this build uses the environment's own build tools" "$work/own.log" \
    || { cat "$work/own.log"; echo "the failure does not say what to install" >&2; exit 1; }
  install_line=$(grep -o 'pip install "setuptools>=77" "numpy>=2.0"' "$work/own.log" | head -1)
  [ -n "$install_line" ] || { cat "$work/own.log"; exit 1; }
  lap "   installing what the message says: $install_line"
  # shellcheck disable=SC2086
  eval "quietly \"$work/env-own-torch/bin/\"$install_line"
  (cd "$tree" && quietly "$work/env-own-torch/bin/python" -m pip install --no-build-isolation .)
fi
WAVEPE_JIT=0 check_ops "$work/env-own-torch" "from the wheel"
# a build with its ops keeps no C core objects (only a build without them has a use for them)
"$work/env-own-torch/bin/python" -c "import os, sys, wavepe
sys.exit(os.path.exists(os.path.join(os.path.dirname(wavepe.__file__), '_core_objects')))" \
  || { echo "the build with the ops kept the C core's objects" >&2; exit 1; }
unset WAVEPE_CACHE_DIR
lap "install checks done"
