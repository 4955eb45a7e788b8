"""The torch ops really run on several threads, and large outputs come out right.

at::parallel_for is an inline template: its threading is the `#pragma omp parallel`
compiled into wavepe._C itself.  A build without -fopenmp still works, on one thread,
which no correctness test notices; this one does.
"""
import pytest

torch = pytest.importorskip("torch")
import wavepe.ops  # noqa: E402,F401  (loads wavepe._C)


def test_parallel_for_uses_every_torch_thread():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert torch.ops.wavepe.parallel_threads(256) == 2
        torch.set_num_threads(1)
        assert torch.ops.wavepe.parallel_threads(256) == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_one_openmp_runtime():
    """wavepe._C uses the OpenMP runtime torch uses, not a second copy.

    Checked on the libraries themselves -- the file holding the omp_get_max_threads each
    one resolves -- not on the whole process, where another package (scikit-learn, say)
    may have loaded a libgomp of its own (issue 20)."""
    import ctypes
    import os

    import wavepe._C

    def runtime_of(path):
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        addr = ctypes.cast(lib.omp_get_max_threads, ctypes.c_void_p).value
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if lo <= addr < hi and len(parts) >= 6:
                    return os.path.realpath(parts[-1])
        return None

    torch_cpu = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    ours = runtime_of(wavepe._C.__file__)
    assert ours is not None and "omp" in os.path.basename(ours), ours
    assert ours == runtime_of(torch_cpu), (ours, runtime_of(torch_cpu))


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
