#!/usr/bin/env bash
# The prebuilt wheel the way a user meets it (after .ci/build_wheel.sh): installed into a brand-new
# environment holding only torch==2.13.0 (the local CPU wheel), the oldest supported NumPy and
# transformers, on a machine where no compiler can be reached (CC / CXX / NVCC point at a stub that
# fails, PATH holds no gcc, g++, cc, c++ or nvcc).  Then:
#   - import wavepe.ops and the first fused op load the library from the wheel and compile nothing
#     (the first-use cache stays empty), timed;
#   - the fused attention forward + backward against plain PyTorch, the NumPy front end, threading;
#   - wavepe.patch on a tiny Llama (transformers' own model class), generate;
#   - the main job (wavepe extrapolate --quick, shortened) and `wavepe info`;
#   - then, with the compilers back (the build tests compile tiny stand-ins), the test suite against the installed
#     package: every test passes on the wheel as it does in place -- where the installation is the checkout that
#     make test ran (.ci/installed_as_checkout.py), the tests whose outcome can depend on where wavepe lives.
set -euo pipefail
cd "$(dirname "$0")/.."
whl=$(ls dist/wheelhouse/wavepe-*.whl)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/env"
# (byte-compiled as a user's pip does: the first import below is timed -- without, torch's modules that wavepe.ops
# imports were compiled inside it, 5.8 s where it took 1.6 on a Zen 3)
"$work/env/bin/python" -m pip install -q "numpy==1.26.4" "torch==2.13.0" "transformers==5.23.0" "$whl" \
  > "$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }

# no compiler anywhere: a PATH of the few tools the checks need, and compiler variables on a stub
mkdir "$work/bin"
printf '#!/bin/sh\necho "compiler stub: no compiler on this machine ($0 $*)" >&2\nexit 1\n' > "$work/bin/no-compiler"
chmod +x "$work/bin/no-compiler"
for tool in sh bash env cat ls rm mkdir uname; do ln -s "$(command -v "$tool")" "$work/bin/$tool"; done
run() {  # run ARGS... in the no-compiler environment, from the work folder (away from the source tree)
  (cd "$work" && env -i HOME="$work/home" PATH="$work/bin" CC="$work/bin/no-compiler" CXX="$work/bin/no-compiler" \
     NVCC="$work/bin/no-compiler" CUDA_HOME="$work/no-cuda" WAVEPE_CACHE_DIR="$work/cache" HF_HUB_OFFLINE=1 \
     MPLBACKEND=Agg "$@")
}
for c in gcc g++ cc c++ nvcc; do
  if run "$work/env/bin/python" -c "import shutil, sys; sys.exit(shutil.which('$c') is None)"; then
    echo "$c is reachable in the no-compiler environment" >&2; exit 1
  fi
done

# The front ends in two processes at a time (each check is one interpreter, mostly one busy core): the ops and the
# NumPy front end, beside wavepe.patch and the main job; each group's output is printed when both have ended.
front_ends_ops() {
run "$work/env/bin/python" - <<'PY'
import os, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import wavepe, wavepe.ops as wo
from wavepe.ops import _extension
q = torch.randn(1, 4, 64, 32)
out = wo.wavelet_attention(q, q, q, wavepe.WaveletConfig.grid(32))
t2 = time.perf_counter()
assert "site-packages" in wavepe.__file__, wavepe.__file__
assert _extension.ORIGIN.startswith("from the wheel ("), _extension.ORIGIN
assert not os.path.exists(os.environ["WAVEPE_CACHE_DIR"]), "the first import compiled (or tried to)"
info = _extension.build_info()
assert info["torch_target"] == "2.10" and "sm_80" in info["cuda_archs"] and "sm_90" in info["cuda_archs"], info
print(f"import torch {t1 - t0:.2f} s; import wavepe.ops + first fused op {t2 - t1:.2f} s (target <= 3 s); "
      f"ops {_extension.ORIGIN}; CUDA kernels {info['cuda_archs']}")
assert t2 - t1 < 10, "loading the prebuilt ops took long enough to be a compile"
PY

run "$work/env/bin/python" "$(pwd)/.ci/installed_attention_check.py" "from the wheel ("
run "$work/env/bin/python" - <<'PY'
import numpy as np, torch, wavepe, wavepe.ufuncs as wu, wavepe.ops as wo
assert np.__version__ == "1.26.4", np.__version__
cfg = wavepe.WaveletConfig.grid(16)
# the NumPy front end with the oldest NumPy, bit for bit against the torch op
x = np.random.default_rng(1).standard_normal((2, 3, 9, 16)).astype(np.float32)
rc = wavepe.RopeConfig(theta=500.0, rotary_fraction=0.5)
np.testing.assert_array_equal(wu.rope(x, 4, rc), wo.rope(torch.from_numpy(x), None, 4, rc)[0].numpy())
qn = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
np.testing.assert_array_equal(wu.wavelet_bias(qn, cfg, k_len=7), wo.wavelet_bias(torch.from_numpy(qn), cfg, k_len=7).numpy())
print("numpy", np.__version__, "front end ok")
torch.set_num_threads(2)
assert torch.ops.wavepe.parallel_threads(64) == 2
print("ops run on torch's 2 threads")
PY
}

front_ends_models() {
run "$work/env/bin/python" - <<'PY'
import torch, transformers, wavepe
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128)
model = LlamaForCausalLM(cfg).eval()
wavepe.patch(model, pos_enc="wavelet")
ids = torch.randint(0, 64, (1, 12))
logits = model(ids).logits
assert logits.shape == (1, 12, 64) and torch.isfinite(logits).all()
gen = model.generate(ids, max_new_tokens=4, do_sample=False)
assert gen.shape == (1, 16)
print(f"wavepe.patch on a tiny Llama (transformers {transformers.__version__}): forward and generate ok")
PY

run "$work/env/bin/wavepe" extrapolate --quick --steps 3 --train-len 16 --factors 1 2 --eval-tokens 64 \
  --sliding-tokens 32 --hidden 32 --head-dim 16 --wavelet-scales 4 --layers 1 --encodings wavelet,rope \
  --out "$work/run" > "$work/extrapolate.log" 2>&1 || { cat "$work/extrapolate.log"; return 1; }
for f in perplexity.png results.json; do
  [ -s "$work/run/$f" ] || { cat "$work/extrapolate.log"; echo "wavepe extrapolate wrote no $f" >&2; return 1; }
done
echo "wavepe extrapolate --quick ok"
}

front_ends_ops > "$work/front-ends-ops.log" 2>&1 & ops_pid=$!
front_ends_models > "$work/front-ends-models.log" 2>&1 & models_pid=$!
rc_ops=0 rc_models=0
wait "$ops_pid" || rc_ops=$?
wait "$models_pid" || rc_models=$?
cat "$work/front-ends-ops.log" "$work/front-ends-models.log"
[ $rc_ops -eq 0 ] && [ $rc_models -eq 0 ] || { echo "a front end failed (exit $rc_ops, $rc_models)" >&2; exit 1; }
run "$work/env/bin/wavepe" info | tee "$work/info.txt"
grep -q "^torch ops: from the wheel (" "$work/info.txt"
grep -q "cuda kernels: sm_80 sm_90" "$work/info.txt"
[ ! -e "$work/cache" ] || { echo "something compiled into $work/cache" >&2; exit 1; }
echo "the wheel works with no compiler: nothing was compiled"

echo "--- the tests of where wavepe lives, against the installed wheel"
# the suite's own requirements (requirements-dev.txt: NumPy 2, as in place; the oldest NumPy was checked above)
"$work/env/bin/python" -m pip install -q --no-compile "numpy>=2.0" pytest pytest-xdist "hypothesis>=6.100" "PyWavelets>=1.6" "scipy>=1.11" \
  > "$work/pip-test.log" 2>&1 || { cat "$work/pip-test.log"; exit 1; }
# from the checkout's root (the tests read its files), with the installed wavepe: python/ is not on sys.path
package=$("$work/env/bin/python" -c "import os, wavepe; print(os.path.dirname(wavepe.__file__))")
case "$package" in *site-packages*) ;; *) echo "wavepe imported from $package, not the installation" >&2; exit 1 ;; esac
# as make test runs it (Makefile, test): pytest-xdist's workers (tests/conftest.py says how many), a file at a time.
# Which tests: where the installation is the checkout as make test ran it -- its files byte for byte, its libraries'
# code and data the in-place build's, which in CI links the wheel's own objects, CUDA kernels included (.ci/run) --
# a test's outcome here is its outcome in place unless it depends on where wavepe lives: those run (the
# `installation` marker: the loader and the first-use build, the commands, the package's data and layout, the docs'
# examples).  Otherwise (an in-place build of other flags, or none) the whole suite runs against the wheel, but for
# the CUDA emulator's two files, which compile csrc/cuda with g++ and never touch the installed wheel.
if "$work/env/bin/python" .ci/installed_as_checkout.py "$package"; then
  # (the marked files named, so that the workers import only those; -m keeps a file's unmarked tests out)
  # shellcheck disable=SC2046
  WAVEPE_CACHE_DIR="$work/cache-tests" "$work/env/bin/python" -m pytest -q -p no:cacheprovider -n auto --dist loadfile \
    -m installation $(grep -l "^pytestmark = .*pytest.mark.installation" tests/test_*.py)
else
  echo "so the whole suite runs against the installed wheel"
  WAVEPE_CACHE_DIR="$work/cache-tests" "$work/env/bin/python" -m pytest -q -p no:cacheprovider -n auto --dist loadfile \
    tests --ignore=tests/test_cuda_emu.py --ignore=tests/test_cuda_emu_nonfinite.py
fi
