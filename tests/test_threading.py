"""The torch ops really run on several threads.

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
    """wavepe._C uses the libgomp torch loaded, not a second copy."""
    with open("/proc/self/maps") as f:
        gomp = {line.split()[-1] for line in f if "libgomp" in line}
    assert len(gomp) <= 1, gomp
