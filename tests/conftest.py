"""Shared fixtures: every ISA variant the CPU has (isa), one torch thread (one_torch_thread); forced_isa, the
isa fixture's effect as a context manager (for hypothesis tests, which draw many examples per test call)."""

from __future__ import annotations

import contextlib
import os

import pytest

try:
    import wavepe
except ModuleNotFoundError as exc:
    # wavepe not installed: only tests that need no wavepe can run -- the CUDA emulator's two files, which CI
    # runs beside the wheel's build, before `make build` (.ci/run); a test that asks for `isa` fails
    if exc.name != "wavepe":
        raise
    wavepe = None

# The kernel variants this machine runs, from the core's ISA table (csrc/core/isa_table.h):
# scalar first, the CPU's best last.
ISAS = list(wavepe.supported_isas()) if wavepe else None


@contextlib.contextmanager
def forced_isa(isa: str):
    """WAVEPE_ISA=isa for the block (the core reads the env per call); the isa fixture holds it for a whole test."""
    before = {key: os.environ.get(key) for key in ("WAVEPE_ISA", "WAVEPE_FORCE_SCALAR")}
    os.environ.pop("WAVEPE_FORCE_SCALAR", None)
    os.environ["WAVEPE_ISA"] = isa
    try:
        assert wavepe.active_isa() == isa
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(params=ISAS)
def isa(request):
    """Force one kernel variant for the test."""
    if wavepe is None:
        pytest.fail("the isa fixture needs wavepe, which is not installed (make build)")
    with forced_isa(request.param):
        yield request.param


@pytest.fixture
def one_torch_thread():
    """Run the test with one torch thread: tiny models gain nothing from threads, and on a
    loaded machine OpenMP barriers make each small op wait for a descheduled thread."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _cores() -> int:
    return len(os.sched_getaffinity(0))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without xdist (make test-fairseq) it is not called
def pytest_xdist_auto_num_workers(config):
    # `-n auto` (make test, CI): one worker a core, at most 4 -- past that, starting workers (each imports
    # torch) gains little: the largest files (a worker runs a file whole: Makefile, `test`) set the time
    return max(1, min(4, _cores()))


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # (pytest-xdist's files by test count: LONGEST_FIRST instead)
        config.option.loadscopereorder = False
    # Under pytest-xdist (make test) each worker is a process of its own: torch's default of one thread per
    # core in every worker would put 2 x cores spinning OpenMP threads on the cores (measured 1.26x slower on
    # 2 cores).  Each worker gets its share of the cores; tests about threads set their counts themselves.
    # NumPy's OpenBLAS likewise: its threads spin after each product an oracle asks of it (12 % of a worker's
    # samples on the emulator's tests, taken from the other worker's core); it reads its count when NumPy is
    # first imported, before any hook of a worker runs, so the controller sets it for the workers it starts.
    requested = getattr(config.option, "numprocesses", None)
    if requested and not os.environ.get("PYTEST_XDIST_WORKER"):
        count = pytest_xdist_auto_num_workers(config) if isinstance(requested, str) else int(requested)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(max(1, _cores() // max(1, count))))
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        try:
            import torch
        except ImportError:
            return
        torch.set_num_threads(max(1, _cores() // int(workers)))


def pytest_report_header(config):
    if wavepe is None:
        return "wavepe: not installed (only tests that need no wavepe can run)"
    return (f"wavepe: cpu_isa={wavepe.cpu_isa()} isa variants tested={ISAS} "
            f"WAVEPE_ISA={os.environ.get('WAVEPE_ISA', '')} WAVEPE_FORCE_SCALAR={os.environ.get('WAVEPE_FORCE_SCALAR', '')}")


# The files that take longest, longest first (worker seconds of make test on a 2-core Zen 3, 2026-11-30: 290, 127,
# 75, 70, 49, 27, 26, 25, 25; every other file under 15).  pytest-xdist's loadfile scheduler hands a worker the next
# file in the collection's order as it runs short (its own order, by test count, started the first-call matrix -- 86
# tests, the second-longest file -- after files with more tests and less work, and the two workers ended ~40 s apart
# in make test, ~130 s in the installed wheel's run): with the long files first the last ones are short.
LONGEST_FIRST = ("test_cuda_emu.py", "test_first_call.py", "test_distributed.py", "test_hf_compile.py",
                 "test_cuda_emu_nonfinite.py", "test_cli.py", "test_attention.py", "test_relbias.py", "test_build.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # (stable: a file's own order, the rest's, kept)
    # A test parametrized by `isa` runs its variants one after another (the ISA varying fastest, each group
    # where its first variant was): the oracles remember their last answers (tests/reference.py), and asked
    # the same question by each ISA in turn they answer it once -- in pytest's own order (the ISA slowest) a
    # test's other parameters came between, and the memory had forgotten by then.
    first: dict = {}
    order = []
    for i, item in enumerate(items):
        params = getattr(getattr(item, "callspec", None), "params", {})
        key = ("", i)
        if "isa" in params:
            key = (item.nodeid.split("[", 1)[0], tuple(sorted((k, repr(v)) for k, v in params.items() if k != "isa")))
        order.append((first.setdefault(key, i), i))
    items[:] = [items[i] for _, i in sorted(order)]
