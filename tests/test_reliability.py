"""The reliability suite: every case of tests/reliability_cases.py in a child process of its own.

A forkserver process imports torch and wavepe once; each case runs in a fresh
fork of it (tens of milliseconds), so a crash -- a segfault, an abort, a
sanitizer report -- fails that case with the signal's name instead of taking
the whole run down, and one case's state (thread counts, caches, the
environment) never leaks into another.  Cases whose answer could depend on
the kernels run once per instruction set this CPU has (WAVEPE_ISA).
"""

from __future__ import annotations

import multiprocessing
import signal

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import reliability_cases as cases  # noqa: E402

TIMEOUT_S = 300


@pytest.fixture(scope="module")
def forkserver():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.reliability_cases"])
    return ctx


def test_case_names_are_ids():
    cases.check_case_names()
    assert len(cases.CASES) >= 30


def run_case(ctx, name: str) -> tuple[str, str]:
    """("passed" | "failed" | "crashed" | "hung", detail) of one case run in a fresh child."""
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=cases.run_in_child, args=(name, send), name=f"reliability:{name}")
    child.start()
    send.close()
    child.join(TIMEOUT_S)
    if child.is_alive():
        child.kill()
        child.join()
        return "hung", f"no answer within {TIMEOUT_S} s (killed)"
    try:
        return receive.recv()
    except EOFError:
        code = child.exitcode
        what = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        return "crashed", f"the child process died ({what}) before reporting: a crash, not an exception"


def test_a_crash_is_reported_as_one(forkserver):
    outcome, detail = run_case(forkserver, cases.CANARY.name)
    assert outcome == "crashed" and "SIGSEGV" in detail, (outcome, detail)


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_case(name, forkserver):
    case = cases.CASES[name]
    outcome, detail = run_case(forkserver, name)
    assert outcome == "passed", f"{name} ({case.kind}) {outcome}:\n{detail}"
