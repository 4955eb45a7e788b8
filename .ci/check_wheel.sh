#!/usr/bin/env bash
# Build the wheel against the project's .venv (torch present, no isolation:
# see setup.py), then install it into a brand-new environment with the oldest
# supported NumPy and the pinned torch, and use both front ends.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf dist
# the flags of `make test`'s build (warnings as errors): its objects under build/obj.* are reused
WAVEPE_WERROR=1 .venv/bin/python -m pip wheel -q --no-build-isolation --no-deps -w dist .
whl=$(ls dist/wavepe-*.whl)
echo "built $whl ($(du -h "$whl" | cut -f1))"
env_dir=$(mktemp -d)/env
trap 'rm -rf "$(dirname "$env_dir")"' EXIT
python3 -m venv "$env_dir"
"$env_dir/bin/python" -m pip install -q "numpy==1.26.4" "torch==2.13.0" "$whl"
cd "$(dirname "$env_dir")"   # away from the source tree: import the installed copy
"$env_dir/bin/python" - <<'PY'
import numpy as np, torch, wavepe, wavepe.ufuncs as wu, wavepe.ops as wo
from wavepe.ops import _extension
assert np.__version__ == "1.26.4", np.__version__
assert _extension.ORIGIN == "built at install time", _extension.ORIGIN  # no compiling at first use
assert "site-packages" in wavepe.__file__, wavepe.__file__
print("wavepe", wavepe.__version__, "from", wavepe.__file__, "numpy", np.__version__, "torch", torch.__version__)
print("ricker(0) =", wu.ricker(np.float32(0.0)), "| isa:", wavepe.cpu_isa())
print("alibi via torch:", wo.alibi_bias(2, 2, 3).shape)
# the rel_bias gufunc takes its output-only core dimension from out= (NumPy >= 1.26)
q = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
cfg = wavepe.WaveletConfig.grid(16)
b = wu.wavelet_bias(q, cfg, k_len=7)
assert b.shape == (2, 5, 7), b.shape
np.testing.assert_array_equal(b, wo.wavelet_bias(torch.from_numpy(q), cfg, k_len=7).numpy())
print("wavelet_bias gufunc on numpy", np.__version__, "ok")
# the rope gufunc (cos/sin shared by the heads of a broadcast loop) and the torch op agree bit for bit
x = np.random.default_rng(1).standard_normal((2, 3, 9, 16)).astype(np.float32)
rc = wavepe.RopeConfig(theta=500.0, rotary_fraction=0.5)
np.testing.assert_array_equal(wu.rope(x, 4, rc), wo.rope(torch.from_numpy(x), None, 4, rc)[0].numpy())
print("rope gufunc on numpy", np.__version__, "ok")
# the fused attention, and the ops' threading (a wheel built without OpenMP runs on one thread)
qa = torch.randn(1, 4, 33, 16)
out = wo.wavelet_attention(qa, qa[:, :2], qa[:, :2], cfg)
assert out.shape == (1, 4, 33, 16) and torch.isfinite(out).all()
torch.set_num_threads(2)
assert torch.ops.wavepe.parallel_threads(64) == 2
print("wavelet_attention ok, parallel_for threads:", torch.ops.wavepe.parallel_threads(64))
# context parallelism ships too: on a one-process group it is the fused attention
import torch.distributed as dist, wavepe.distributed as wd
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
torch.testing.assert_close(wd.context_parallel_attention(qa, qa[:, :2], qa[:, :2], cfg), out)
dist.barrier()
dist.destroy_process_group()
print("context_parallel_attention ok")
PY
"$env_dir/bin/wavepe" --help >/dev/null
"$env_dir/bin/wavepe" info
echo "console script ok"
