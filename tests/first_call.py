"""Each public entry point, called for the first time in a process in one of the modes users call it in.

Not a test module: ``tests/test_first_call.py`` runs every case in a process of its own, so that
nothing wavepe builds lazily (schema-derived callers, tables, spectra, a patched model's state) has been
built by an earlier eager call.  The case makes its first wavepe call in MODE, then compares with the
eager result (float64, computed afterwards in the same process): ``{"ok": true}`` or what went wrong.

    python -m tests.first_call ENTRY MODE     one case in this fresh interpreter; prints its JSON line
    python -m tests.first_call --serve N      the cases of a JSON list [[ENTRY, MODE], ...] on stdin, each
                                              in a child forked from this process, N at a time; prints
                                              one JSON line a case: {"entry", "mode", "result"}

``--serve`` is how the test runs them: this process imports torch and the libraries the cases use that
are not wavepe (Dynamo, Inductor, transformers: seconds a process), never wavepe, and forks a child per
case -- each child is a process whose first wavepe call is the case's, as in a fresh interpreter, without
paying for those imports again (docs/DEVELOPING.md, "Where the test time goes").

Modes:
  compile          torch.compile(fullgraph=True, dynamic=False): forward, then backward through it
  compile_dynamic  torch.compile(fullgraph=True, dynamic=True), at two lengths (one graph)
  export           torch.export.export, then the exported program run
  aoti             torch.export + AOTInductor packaging, loaded and run (slow: C++ compile)
  inference_mode   eager under torch.inference_mode()
  no_grad          eager under torch.no_grad()
  meta             eager on meta tensors (shapes only)
  fake             eager under a FakeTensorMode (shapes only)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable

import torch

MODES = ("compile", "compile_dynamic", "export", "aoti", "inference_mode", "no_grad", "meta", "fake")


class Case:
    """An entry point: ``module(*inputs(length))`` -> a tensor or a tuple of tensors (float64)."""

    def __init__(self, module: torch.nn.Module, inputs: Callable[[int], tuple[torch.Tensor, ...]],
                 grads: bool = True, lengths: tuple[int, int] = (12, 20), tol: float = 1e-9) -> None:
        self.module, self.inputs, self.grads, self.lengths, self.tol = module, inputs, grads, lengths, tol


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


def _randn(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _qkv(length: int) -> tuple[torch.Tensor, ...]:
    return _randn(1, 4, length, 16, seed=1), _randn(1, 2, length, 16, seed=2), _randn(1, 2, length, 16, seed=3)


def case(name: str) -> Case:
    """The entry point ``name`` (its imports happen here: in the fresh process, after torch)."""
    import wavepe
    import wavepe.nn
    import wavepe.ops as wo

    cfg = wavepe.WaveletConfig.grid(16)
    if name == "wavelet_attention":
        return Case(_Fn(lambda q, k, v: wo.wavelet_attention(q, k, v, cfg)), _qkv)
    if name == "wavelet_attention_default_grid":
        return Case(_Fn(lambda q, k, v: wo.wavelet_attention(q, k, v)), _qkv)
    if name == "alibi_attention":
        return Case(_Fn(lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="alibi")), _qkv)
    if name == "wavelet_bias":
        return Case(_Fn(lambda q: wo.wavelet_bias(q, cfg)), lambda n: (_randn(2, 3, n, 16, seed=4),))
    if name == "rel_bias":
        return Case(_Fn(lambda q, t: wo.rel_bias(q, t, -4, causal=False, clamp=True)),
                    lambda n: (_randn(2, 3, n, 16, seed=5), _randn(9, 16, seed=6)))
    if name == "rope":
        rcfg = wavepe.RopeConfig(theta=500.0, rotary_fraction=0.5)
        return Case(_Fn(lambda q, k: wo.rope(q, k, 3, rcfg)), lambda n: _qkv(n)[:2])
    if name == "alibi_bias":
        return Case(_Fn(lambda s: wo.alibi_bias(s, 9, 12, dtype=torch.float64)),
                    lambda n: (torch.linspace(0.1, 0.5, n, dtype=torch.float64),))
    if name in ("nn_wavelet", "nn_rope"):
        torch.manual_seed(0)
        module = wavepe.nn.PositionalAttention(32, 4, name[3:], num_kv_heads=2).double()
        return Case(module, lambda n: (_randn(2, n, 32, seed=7),))
    if name == "hf_llama":
        return _hf_case()
    if name == "context_parallel":
        return _context_parallel_case()
    raise KeyError(name)


ENTRIES = ("wavelet_attention", "wavelet_attention_default_grid", "alibi_attention", "wavelet_bias", "rel_bias",
           "rope", "alibi_bias", "nn_wavelet", "nn_rope", "hf_llama", "context_parallel", "hf_generate")


def _hf_case() -> Case:
    import transformers as tf
    import wavepe

    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                            pad_token_id=0, bos_token_id=1, eos_token_id=None)
    model = tf.LlamaForCausalLM(config).double().eval()
    wavepe.patch(model, "wavelet")

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, embeds: torch.Tensor) -> torch.Tensor:
            return self.model(inputs_embeds=embeds, use_cache=False).logits

    # Llama's RMSNorm computes in float32 whatever the model's dtype: compiled code rounds it differently
    return Case(Logits(), lambda n: (_randn(1, n, 64, seed=8),), tol=1e-5)


def _context_parallel_case() -> Case:
    import torch.distributed as dist
    from wavepe.distributed import context_parallel_attention

    # one rank, its store in memory: no port to agree on (cases run side by side)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return Case(_Fn(lambda q, k, v: context_parallel_attention(q, k, v)), _qkv)


# ---- the modes ------------------------------------------------------------------------------------

def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out if isinstance(t, torch.Tensor)]


def _loss(out: Any) -> torch.Tensor:
    return sum((t * torch.linspace(-1, 1, t.numel(), dtype=t.dtype).reshape(t.shape)).sum() for t in _tensors(out))


def _close(got: Any, want: Any, what: str, tol: float) -> None:
    for g, w in zip(_tensors(got), _tensors(want), strict=True):  # (unused parameters' None grads dropped)
        if g.shape != w.shape:
            raise AssertionError(f"{what}: shape {tuple(g.shape)}, eager {tuple(w.shape)}")
        if g.device.type != "meta" and not torch.allclose(g, w, rtol=tol, atol=tol, equal_nan=True):
            raise AssertionError(f"{what}: differs from eager by {(g - w).abs().max().item():.3g}")


def _eager(c: Case, inputs: tuple[torch.Tensor, ...]) -> tuple[Any, list[torch.Tensor]]:
    leaves = [t.detach().clone().requires_grad_(c.grads) for t in inputs]
    params = [p for p in c.module.parameters()]
    out = c.module(*leaves)
    grads = list(torch.autograd.grad(_loss(out), leaves + params, allow_unused=True)) if c.grads else []
    return out, grads


def _run_compiled(c: Case, dynamic: bool) -> None:
    compiled = torch.compile(c.module, fullgraph=True, dynamic=dynamic)
    for length in (c.lengths if dynamic else c.lengths[:1]):
        inputs = c.inputs(length)
        leaves = [t.clone().requires_grad_(c.grads) for t in inputs]
        params = [p for p in c.module.parameters()]
        got = compiled(*leaves)
        got_grads = list(torch.autograd.grad(_loss(got), leaves + params, allow_unused=True)) if c.grads else []
        want, want_grads = _eager(c, inputs)
        _close(got, want, f"compiled output (L={length})", c.tol)
        _close(got_grads, want_grads, f"compiled gradients (L={length})", c.tol)


def _run_export(c: Case, aoti: bool) -> None:
    inputs = c.inputs(c.lengths[0])
    with torch.no_grad():
        exported = torch.export.export(c.module, inputs)
        if aoti:
            import tempfile

            from torch import _inductor as inductor

            with tempfile.TemporaryDirectory() as tmp:
                path = inductor.aoti_compile_and_package(exported, package_path=f"{tmp}/case.pt2")
                runner = inductor.aoti_load_package(path)
                got = runner(*inputs)
        else:
            got = exported.module()(*inputs)
        want = c.module(*inputs)
    _close(got, want, "exported program", c.tol)


def _run_eager_under(c: Case, context: Any) -> None:
    inputs = c.inputs(c.lengths[0])
    with context:
        got = c.module(*inputs)
    with torch.no_grad():
        want = c.module(*inputs)
    _close(got, want, f"under {type(context).__name__}", c.tol)


def _run_shapes(c: Case, fake: bool) -> None:
    inputs = c.inputs(c.lengths[0])
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            got = c.module(*(mode.from_tensor(t) for t in inputs))
    else:
        import copy

        got = copy.deepcopy(c.module).to("meta")(*(t.to("meta") for t in inputs))
    with torch.no_grad():
        want = c.module(*inputs)
    for g, w in zip(_tensors(got), _tensors(want), strict=True):
        if tuple(g.shape) != tuple(w.shape):
            raise AssertionError(f"{'fake' if fake else 'meta'} shape {tuple(g.shape)}, eager {tuple(w.shape)}")


def _run_generate(mode: str) -> None:
    """A patched Llama's ``generate`` with a static cache, its first call compiled by transformers' own
    CompileConfig (fullgraph) -- or eager under ``mode``'s context --, then the same eagerly: equal tokens."""
    from transformers import CompileConfig

    model = _hf_case().module.model
    ids = torch.tensor([[1, 5, 9, 13, 17, 21, 25, 29], [0, 0, 0, 1, 7, 8, 9, 10]])
    mask = (ids != 0).long()
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0, cache_implementation="static")
    if mode == "compile":
        config = CompileConfig(fullgraph=True)
        config._compile_all_devices = True  # compile on the CPU too (transformers compiles on GPUs only)
        got = model.generate(ids, compile_config=config, **kw)
    elif mode in ("inference_mode", "no_grad"):
        with torch.inference_mode() if mode == "inference_mode" else torch.no_grad():
            got = model.generate(ids, **kw)
    else:
        raise KeyError(mode)
    want = model.generate(ids, disable_compile=True, **kw)
    if not torch.equal(got, want):
        raise AssertionError(f"generate: {got.tolist()} != eager {want.tolist()}")


def run(entry: str, mode: str) -> None:
    if entry == "harness_abort":  # not an entry point: the harness's own test of a child that dies (SIGABRT)
        os.abort()
    if entry == "hf_generate":
        return _run_generate(mode)
    c = case(entry)
    if mode in ("compile", "compile_dynamic"):
        _run_compiled(c, mode == "compile_dynamic")
    elif mode in ("export", "aoti"):
        _run_export(c, mode == "aoti")
    elif mode == "inference_mode":
        _run_eager_under(c, torch.inference_mode())
    elif mode == "no_grad":
        _run_eager_under(c, torch.no_grad())
    elif mode in ("meta", "fake"):
        _run_shapes(c, mode == "fake")
    else:
        raise KeyError(mode)


def result_of(entry: str, mode: str) -> dict:
    """Run one case here: ``{"ok": True}``, or ``{"ok": False, "error", "traceback"}``."""
    try:
        run(entry, mode)
        return {"ok": True}
    except Exception as exc:  # noqa: BLE001 -- reported to the test, which fails with it
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:4000], "traceback": traceback.format_exc()[-6000:]}


# What a case may take, in a child: past it the child is killed (SIGALRM) and the case fails as hung.
CASE_TIMEOUT_S = 600


def _preimport() -> None:
    """The libraries the cases import that are not wavepe, imported once in the serving process."""
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.export  # noqa: F401

    try:
        import transformers.models.llama.modeling_llama  # noqa: F401
    except ImportError:  # the test skips without transformers; a case that needs it reports the error
        pass


def _child(entry: str, mode: str, out_path: str) -> None:
    """In a forked child: run the case with stdout/stderr to ``out_path + '.log'``, its result to ``out_path``."""
    log = os.open(out_path + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    signal.alarm(CASE_TIMEOUT_S)  # default action: the child ends, the server reports the signal
    t0 = time.perf_counter()
    result = result_of(entry, mode)
    result["seconds"] = round(time.perf_counter() - t0, 2)  # for the table of docs/DEVELOPING.md
    with open(out_path, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # not the parent's atexit handlers: they belong to the serving process


def serve(cases: list[tuple[str, str]], parallel: int) -> list[dict]:
    """Each case in a child forked from this process (which has not imported wavepe), ``parallel`` at a time."""
    _preimport()
    imported = sorted(m for m in sys.modules if m == "wavepe" or m.startswith("wavepe."))
    if imported or threading.active_count() != 1:  # a child must start as a fresh process would
        raise RuntimeError(f"cannot fork the cases: wavepe modules {imported}, threads {threading.active_count()}")
    tmp = tempfile.mkdtemp(prefix="wavepe-first-call-")
    pending = list(enumerate(cases))
    running: dict[int, tuple[int, str]] = {}
    results: list[dict] = [{} for _ in cases]
    while pending or running:
        while pending and len(running) < parallel:
            i, (entry, mode) = pending.pop(0)
            out_path = os.path.join(tmp, f"case{i}.json")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                try:
                    _child(entry, mode, out_path)
                finally:
                    os._exit(70)  # only reached if _child itself failed
            running[pid] = (i, out_path)
        pid, status = os.wait()
        i, out_path = running.pop(pid)
        if os.path.exists(out_path):
            with open(out_path) as f:
                results[i] = json.load(f)
        else:
            how = (f"killed by signal {os.WTERMSIG(status)}" + (f" (past {CASE_TIMEOUT_S} s)" if os.WTERMSIG(status)
                   == signal.SIGALRM else "")) if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            tail = ""
            if os.path.exists(out_path + ".log"):
                with open(out_path + ".log", errors="replace") as f:
                    tail = f.read()[-6000:]
            results[i] = {"ok": False, "error": f"{how}, no result", "traceback": tail}
    for name in os.listdir(tmp):
        os.unlink(os.path.join(tmp, name))
    os.rmdir(tmp)
    return results


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        todo = [tuple(c) for c in json.load(sys.stdin)]
        for (entry_, mode_), r in zip(todo, serve(todo, int(sys.argv[2])), strict=True):
            print(json.dumps({"entry": entry_, "mode": mode_, "result": r}))
    else:
        print(json.dumps(result_of(sys.argv[1], sys.argv[2])))
