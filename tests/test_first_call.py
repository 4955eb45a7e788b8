"""Every public entry point works as the first wavepe call of a process, in every mode users call it in.

Each case runs in a process of its own whose first wavepe call is the case's (tests/first_call.py: the
entry points, the modes, the comparison with eager in float64), so that nothing wavepe builds lazily has
been warmed up by an earlier eager call -- the rest of the suite always warms up.  One server process
(``python -m tests.first_call --serve``) imports torch, Dynamo, Inductor and transformers but never wavepe,
and forks a child per case, two at a time (each is mostly one busy core: tracing, Inductor's compile),
when the first case is asked for; each test reads its own case's result.  Inductor compiles in the child
itself (TORCHINDUCTOR_COMPILE_THREADS=1): a compile-worker pool would start another interpreter per case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .first_call import ENTRIES, MODES  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# what makes no sense or cannot exist, with the reason the test reports
NOT_APPLICABLE = {
    ("hf_llama", "meta"): "transformers' own mask code reads values (Tensor.item) on meta tensors: the stock "
                          "model fails there too (test_hf_model_fails_on_meta_like_stock)",
}
# generate is called, not traced: compiled by transformers' CompileConfig, or eager in a grad mode
GENERATE_MODES = ("compile", "inference_mode", "no_grad")
# AOTInductor compiles a C++ wrapper (~20 s a case): the fused attention, the ring (a Python custom op) and
# the HF layer stack cover the three kinds of op the packages hold
AOTI_ENTRIES = ("wavelet_attention", "context_parallel", "hf_llama")

CASES = [(e, m) for e in ENTRIES for m in MODES
         if (m != "aoti" or e in AOTI_ENTRIES) and (e != "hf_generate" or m in GENERATE_MODES)]


def _serve(cases: list[tuple[str, str]], parallel: int = 2) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_COMPILE_THREADS="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "tests.first_call", "--serve", str(parallel)], cwd=ROOT, env=env,
                          input=json.dumps(cases), capture_output=True, text=True, timeout=3600)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or len(lines) != len(cases):
        error = {"ok": False, "error": f"the case server: exit {proc.returncode}, {len(lines)} results of {len(cases)}",
                 "traceback": proc.stderr[-6000:]}
        return {case: error for case in cases}
    return {(r["entry"], r["mode"]): r["result"] for r in lines}


@pytest.fixture(scope="module")
def results(request):
    # the cases of the tests selected (-k, a node id): the server runs those only
    selected = [(item.callspec.params["entry"], item.callspec.params["mode"]) for item in request.session.items
                if item.module is request.module and getattr(item, "originalname", "") == "test_first_call"]
    run = [case for case in selected if case not in NOT_APPLICABLE]
    return {**_serve(run), **{case: {"skip": NOT_APPLICABLE[case]} for case in selected if case in NOT_APPLICABLE}}


@pytest.mark.slow
@pytest.mark.parametrize("entry,mode", CASES)
def test_first_call(results, entry, mode):
    r = results[(entry, mode)]
    if "skip" in r:
        pytest.skip(r["skip"])
    assert r["ok"], f"{entry} first called in mode {mode}: {r['error']}\n{r.get('traceback', '')}"


def test_hf_model_fails_on_meta_like_stock():
    # why (hf_llama, meta) is not a case: the stock model raises the same error there
    import transformers as tf

    config = tf.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2)
    model = tf.LlamaForCausalLM(config).to("meta")
    with pytest.raises(RuntimeError, match="meta"):
        model(inputs_embeds=torch.randn(1, 12, 64, device="meta"), use_cache=False)


def test_cases_that_raise_or_die_are_reported_by_the_server():
    # each case's error comes back as its own result, a child that dies as its signal, the others unaffected
    got = _serve([("no_such_entry", "compile"), ("rope", "no_such_mode"), ("harness_abort", "meta"),
                  ("rope", "meta")], parallel=2)
    assert got[("no_such_entry", "compile")]["ok"] is False and "KeyError" in got[("no_such_entry", "compile")]["error"]
    assert got[("rope", "no_such_mode")]["ok"] is False and "no_such_mode" in got[("rope", "no_such_mode")]["error"]
    assert got[("harness_abort", "meta")]["ok"] is False
    assert got[("harness_abort", "meta")]["error"] == "killed by signal 6, no result"
    assert got[("rope", "meta")]["ok"] is True


def test_a_case_can_fail():
    # the harness reports a wrong result: a case whose eager comparison is given a different tensor fails
    from . import first_call

    with pytest.raises(AssertionError, match="differs from eager"):
        first_call._close(torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), "planted", 1e-9)
