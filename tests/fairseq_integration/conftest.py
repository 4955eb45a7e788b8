"""Shared helpers of the fairseq plugin tests.

Tests that need fairseq call :func:`require_fairseq` at module level: fairseq
0.12.2 only imports on Python <= 3.10, so in the main (3.11) environment they
are skipped with the command that runs them (``make test-fairseq``, which
builds the Python 3.10 environment of ``scripts/setup_fairseq_env.sh``).
"""

from __future__ import annotations

import pytest

#: figures the end-to-end test measured, printed at the end of the session
RESULTS: list[str] = []


def require_fairseq():
    """Import fairseq or skip the calling test module, saying how to run it."""
    try:
        import fairseq  # noqa: F401
    except Exception as exc:  # ImportError, or the dataclass ValueError of fairseq 0.12.2 on Python >= 3.11
        pytest.skip(f"fairseq is not importable here ({type(exc).__name__}: {str(exc)[:80]}); fairseq 0.12.2 "
                    "needs Python <= 3.10: run `make test-fairseq`", allow_module_level=True)
    return fairseq


def pytest_terminal_summary(terminalreporter):
    if RESULTS:
        terminalreporter.section("fairseq end-to-end figures")
        for line in RESULTS:
            terminalreporter.write_line(line)
