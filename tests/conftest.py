"""Shared fixtures: run each kernel test on every ISA variant the CPU has."""

from __future__ import annotations

import os

import pytest

import wavepe

ISAS = ["scalar"] + (["avx2"] if wavepe.cpu_isa() == "avx2" else [])


@pytest.fixture(params=ISAS)
def isa(request, monkeypatch) -> str:
    """Force one kernel variant for the test (the core reads the env per call)."""
    monkeypatch.delenv("WAVEPE_ISA", raising=False)
    if request.param == "scalar":
        monkeypatch.setenv("WAVEPE_FORCE_SCALAR", "1")
    else:
        monkeypatch.delenv("WAVEPE_FORCE_SCALAR", raising=False)
    assert wavepe.active_isa() == request.param
    return request.param


def pytest_report_header(config):
    return f"wavepe: cpu_isa={wavepe.cpu_isa()} WAVEPE_FORCE_SCALAR={os.environ.get('WAVEPE_FORCE_SCALAR', '')}"
