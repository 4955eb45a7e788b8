"""The torch ops really run on several threads, and large outputs come out right.

The ops library runs its plans through torch::stable::parallel_for, i.e. on torch's own
intra-op pool: torch.set_num_threads decides, and a library that ran everything inline on
one thread would still pass every correctness test; this one does not.
"""
import pytest

torch = pytest.importorskip("torch")
import wavepe.ops  # noqa: E402,F401  (loads the torch ops library)


def test_parallel_for_uses_every_torch_thread():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert torch.ops.wavepe.parallel_threads(256) == 2
        torch.set_num_threads(1)
        assert torch.ops.wavepe.parallel_threads(256) == 1
    finally:
        torch.set_num_threads(before)


def test_no_openmp_runtime_of_its_own():
    """The library brings no OpenMP runtime (a second libgomp beside torch's would fight over the
    threads): its threading is torch's."""
    import os
    import re
    import shutil
    import subprocess

    from wavepe.ops import _extension

    if shutil.which("readelf") is None:
        pytest.skip("binutils (readelf) not installed")
    out = subprocess.run(["readelf", "-d", _extension.LIBRARY], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    assert needed and not [n for n in needed if "omp" in n], needed
    assert os.path.basename(_extension.LIBRARY) == "libwavepe_ops.so"


def test_large_outputs_are_the_same_as_small_ones():
    """Outputs of 16 MiB and more are pre-faulted by the binding (MADV_POPULATE_WRITE, in
    parallel chunks): the same numbers as the same work done into small outputs."""
    import wavepe.ops as wo
    from wavepe import RopeConfig, WaveletConfig

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 4096, 128, generator=g)  # 16 MiB per output
    k = torch.randn(1, 8, 4096, 128, generator=g)
    cfg = RopeConfig(theta=500.0)
    q_rot, k_rot = wo.rope(q, k, 3, cfg)
    for h in (0, 7):
        q_small, k_small = wo.rope(q[:, h:h + 1, :64], k[:, h:h + 1, :64], 3, cfg)
        assert torch.equal(q_rot[:, h:h + 1, :64], q_small) and torch.equal(k_rot[:, h:h + 1, :64], k_small)

    qb = torch.randn(1, 4, 1024, 64, generator=g)  # bias (1, 4, 1024, 1024): 16 MiB
    wc = WaveletConfig.grid(64)
    bias = wo.wavelet_bias(qb, wc)
    small = wo.wavelet_bias(qb[:, :, -8:], wc, k_len=1024)
    assert torch.equal(bias[:, :, -8:], small)
