#!/usr/bin/env bash
# The amx variant's checks on a lent machine whose CPU has AMX (the GPU hosts have had Emerald Rapids),
# in one call: its tests with the tile instructions running, the tile products' time by call site, and
# optionally this tree against other source trees.  Everything goes to $OUT (default ./amx-check).
#
#   bash scripts/amx_device_check.sh [--attention] [BASE_DIR ...]
#
# BASE_DIR: a directory holding another source tree (made beforehand with `git archive REV | tar -x -C
# DIR` and carried along): timed against this tree by benchmarks/bench_revisions.py, bf16 forward and
# forward + backward, wavelet, on the amx ISA, and its plan (build + free) and page faults per call by
# benchmarks/bench_plan.py.  --attention: also benchmarks/bench_attention.py --dtype
# bf16 --lengths 4096 (issue 46's table; a few minutes).  The build uses the system compiler (a lent
# machine's conda compiler may not be usable) and no CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/amx-check}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
t0=$(date +%s)
say() { echo "[+$(( $(date +%s) - t0 ))s] $*"; }
attention=0
bases=()
for a in "$@"; do
  case $a in
    --attention) attention=1 ;;
    -*) echo "unknown option $a"; exit 2 ;;
    *) [ -d "$a" ] || { echo "BASE_DIR $a: not a directory"; exit 2; }; bases+=("$a") ;;
  esac
done
grep -q amx_bf16 /proc/cpuinfo || { say "this CPU has no AMX-BF16: nothing to check here"; exit 3; }
for c in /usr/bin/gcc /usr/bin/g++; do [ -x $c ] && continue; echo "$c missing"; exit 3; done
export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/gcc -shared" WAVEPE_BUILD_CUDA=0 WAVEPE_WERROR=0
export WAVEPE_BUILD_JOBS=${WAVEPE_BUILD_JOBS:-$(nproc)} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
say "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cpus"
say build
$PY setup.py -q build_ext --inplace > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 4; }
export PYTHONPATH=$PWD/python
$PY -m wavepe info 2>&1 | grep -i -E 'isa|tiles|cpu' | head -8
say "amx tests (tile instructions running)"
$PY -m pytest -q -x -p no:cacheprovider -n "$(nproc)" tests/test_attention_half.py tests/test_nonfinite.py \
  tests/test_packed.py tests/test_attention.py -k amx 2>&1 | tail -4
say "tile products by call site (one thread)"
$PY benchmarks/bench_tile_profile.py --length 2048 --heads 2 --repeat 3 2>&1 | grep -v '^$'
for b in "${bases[@]}"; do
  say "this tree against $b"
  $PY benchmarks/bench_revisions.py --base "$b" --isa amx --dtype bf16 2>&1 | tail -12
  $PY benchmarks/bench_revisions.py --base "$b" --isa amx --dtype bf16 --backward 2>&1 | tail -12
  $PY benchmarks/bench_plan.py --base "$b" --repeat 11 2>&1 | tail -16
done
if [ $attention = 1 ]; then
  say "bench_attention bf16 L=4096"
  $PY benchmarks/bench_attention.py --dtype bf16 --lengths 4096 2>&1 | tail -40
fi
cp benchmarks/results/*.json "$OUT/" 2>/dev/null
say done
