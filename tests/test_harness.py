"""The suite's own machinery: it runs with or without pytest-xdist, each xdist worker takes its share of the
cores, the oracles' memory (tests/reference.py) answers only the question it was asked; and the digests of
scripts/attention_digests.py, by which a restructuring shows it changed no bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from . import reference as ref

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_suite_loads_without_pytest_xdist():
    # tests/conftest.py implements xdist's hook as optional: an environment without xdist (the fairseq one)
    # collects the suite instead of failing on an unknown hook
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "--collect-only",
                           "-q", "tests/test_config.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_an_xdist_worker_takes_its_share_of_the_cores():
    torch = pytest.importorskip("torch")
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        pytest.skip("not an xdist worker (make test runs the suite in workers)")
    assert torch.get_num_threads() == max(1, len(os.sched_getaffinity(0)) // int(workers))


def test_a_remembered_oracle_answers_each_question_and_hands_out_copies():
    calls = []

    @ref._remembered
    def oracle(x, *, shift=0.0):
        calls.append(1)
        return {"y": np.asarray(x, np.float64) + shift}

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = oracle(x)
    first["y"][0, 0] = 99.0  # a caller writing into its answer does not change the next one
    assert oracle(x)["y"][0, 0] == 0.0 and len(calls) == 1
    bumped = x.copy()
    bumped.view(np.uint32)[1, 2] += 1  # one bit: another question
    assert oracle(bumped)["y"][1, 2] != 5.0 and len(calls) == 2
    assert oracle(x.astype(np.float64))["y"].dtype == np.float64 and len(calls) == 3  # another dtype
    assert oracle(x.reshape(3, 2))["y"].shape == (3, 2) and len(calls) == 4           # another shape
    oracle(x, shift=1e-300)                                                           # another keyword value
    assert len(calls) == 5


def _script_module(*path: str):
    """A script of the repository (ROOT/path...) loaded as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(os.path.splitext(path[-1])[0], os.path.join(ROOT, *path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_attention_digests_are_stable_and_name_what_moved(tmp_path):
    # scripts/attention_digests.py (issue 66's bit-identity check): the same tree gives the same digests;
    # --check names a case whose digest differs and fails
    pytest.importorskip("torch")
    ad = _script_module("scripts", "attention_digests.py")
    first = ad.all_digests(isas=["scalar"], limit=6)
    assert len(first) == 6 and len(set(first.values())) == 6  # six cases, six different results
    assert ad.all_digests(isas=["scalar"], limit=6) == first
    path = tmp_path / "digests.json"
    assert ad.main(["--write", str(path)]) == 0
    saved = json.loads(path.read_text())
    assert saved["digests"]["scalar/" + next(ad.cases())[0]] == first["scalar/" + next(ad.cases())[0]]
    assert ad.main(["--check", str(path)]) == 0
    key = sorted(saved["digests"])[0]
    saved["digests"][key] = "0" * 64
    path.write_text(json.dumps(saved))
    assert ad.main(["--check", str(path)]) == 1


def test_the_installed_wheel_is_checked_to_be_the_code_make_test_ran(tmp_path):
    # .ci/check_wheel.sh runs only the `installation` tests against the wheel where .ci/installed_as_checkout.py finds
    # the installation to be the checkout as make test ran it: a copy of python/wavepe passes, and a changed file, a
    # missing one, an extra one, or a library whose code differs (one byte of .text) is named
    import shutil

    check = _script_module(".ci", "installed_as_checkout.py")
    source = os.path.join(ROOT, "python", "wavepe")
    libraries = [name for name in os.listdir(source) if name.endswith(".so")]
    if not libraries:
        pytest.skip("needs the in-place build (make build)")
    package = tmp_path / "wavepe"
    shutil.copytree(source, package, ignore=shutil.ignore_patterns("__pycache__"))
    assert check.differences(str(package))[0] == []
    (package / "config.py").write_text((package / "config.py").read_text() + "#\n")
    (package / "py.typed").unlink()
    (package / "extra.txt").write_text("")
    lib = package / libraries[0]
    data = bytearray(lib.read_bytes())
    text = check.loaded_sections(str(lib))[".text"]
    at = bytes(data).index(text[:4096]) + 4000
    data[at] ^= 0xFF
    lib.write_bytes(bytes(data))
    diffs = sorted(check.differences(str(package))[0])
    assert [d.split(":")[0] for d in diffs] == sorted(["config.py", "extra.txt", "py.typed", libraries[0]]), diffs
    assert f"{libraries[0]}: sections .text differ" in "\n".join(diffs)
