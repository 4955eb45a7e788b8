"""The Python -> dispatcher seam, proven without a GPU.

The public wrappers call ``torch.ops.wavepe.*`` for every device whose
dispatch key has a kernel and fall back to plain PyTorch only where none is
registered (wavepe/ops/_routing.py).  Checked here on three kinds of device a
CPU machine can hold:

* ``meta`` tensors (the fake kernels: shape inference, torch.compile): any
  length goes through the registered ops -- no warning, and no tensor of
  M x N elements anywhere in attention, forward or backward;
* a spare backend key (``PrivateUse1``) whose tensors keep their data on the
  CPU: with Python kernels registered for it the wrappers reach them; without,
  they take the fallback with a warning and still give the right answer;
* fake CUDA tensors (FakeTensorMode), as a CUDA build routes them: bf16 / fp16
  reach the ops natively, and the fake kernel's lse dtype is the contract's.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_map  # noqa: E402
from wavepe import RopeConfig, WaveletConfig  # noqa: E402
from wavepe.ops import _routing  # noqa: E402


class OpLog(TorchDispatchMode):
    """Records every op that runs: its name, the dtypes of its tensor inputs, its outputs' element counts."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[torch.dtype], list[int]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [a.dtype for a in args if isinstance(a, torch.Tensor)]
        outs = [t.numel() for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
        self.calls.append((str(func), ins, outs))
        return out

    def wavepe_ops(self) -> list[str]:
        return [name for name, _, _ in self.calls if name.startswith("wavepe.")]

    def largest(self) -> int:
        return max((n for _, _, outs in self.calls for n in outs), default=0)


# ---- meta tensors ----------------------------------------------------------------------------

@pytest.mark.parametrize("pos_enc", ["wavelet", "relative", "alibi", "nope"])
def test_meta_attention_of_any_length_runs_the_op_without_an_mxn_tensor(pos_enc):
    b, h, h_kv, n, d = 1, 4, 2, 2**20, 64  # M = N = 2^20: M x N = 2^40 elements
    q = torch.empty(b, h, n, d, device="meta", requires_grad=True)
    k = torch.empty(b, h_kv, n, d, device="meta", requires_grad=True)
    v = torch.empty(b, h_kv, n, d, device="meta", requires_grad=True)
    kw = {}
    if pos_enc == "relative":
        kw["rel_table"] = (torch.empty(300, d, device="meta", requires_grad=True), -150)
    with warnings.catch_warnings(), OpLog() as log:
        warnings.simplefilter("error")  # a fallback would warn
        out = wo.wavelet_attention(q, k, v, pos_enc=pos_enc, **kw,
                                   key_padding_mask=torch.empty(b, n, dtype=torch.bool, device="meta"))
        out.sum().backward()
    assert out.shape == (b, h, n, d) and out.device.type == "meta"
    assert log.wavepe_ops() == ["wavepe.attention_fwd.default", "wavepe.attention_bwd.default"]
    assert log.largest() < n * n // 1024, f"an op produced {log.largest()} elements (M x N = {n * n})"
    assert q.grad.shape == q.shape and k.grad.shape == k.shape


def test_meta_tensors_take_every_op():
    q = torch.empty(3, 70, 16, device="meta")
    table = torch.empty(9, 16, device="meta")
    cfg = WaveletConfig.grid(16)
    with warnings.catch_warnings(), OpLog() as log:
        warnings.simplefilter("error")
        bias = wo.rel_bias(q, table, -4, k_len=90, q_offset=20)
        wbias = wo.wavelet_bias(q, cfg, k_len=90)
        x = torch.empty(2, 4, 70, 16, device="meta")
        q_rot, k_rot = wo.rope(x, x[:, :2], 5, RopeConfig())
        alibi = wo.alibi_bias(torch.empty(4, device="meta"), 70, 90)
    assert bias.shape == wbias.shape == (3, 70, 90) and bias.device.type == "meta"
    assert q_rot.shape == x.shape and k_rot.shape == (2, 2, 70, 16) and alibi.shape == (4, 70, 90)
    assert log.wavepe_ops() == ["wavepe.rel_bias.default"] * 2 + ["wavepe.rope.default", "wavepe.alibi_bias.default"]


# ---- a spare backend: PrivateUse1 ------------------------------------------------------------

class Remote(torch.Tensor):
    """A tensor on the PrivateUse1 device whose data lives on the CPU: a backend in miniature.

    Ops of the ``wavepe`` namespace go to whatever kernel is registered for
    PrivateUse1 (as a real backend's would); every other op runs on the CPU data.
    """

    @staticmethod
    def __new__(cls, data: torch.Tensor):
        t = torch.Tensor._make_wrapper_subclass(cls, data.shape, strides=data.stride(), dtype=data.dtype,
                                                device=torch.device("privateuseone", 0),
                                                requires_grad=data.requires_grad)
        t.cpu_data = data
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func.namespace == "wavepe":  # the backend's own kernel, below the Python key
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
                return func(*args, **kwargs)
        if "device" in kwargs:
            kwargs["device"] = torch.device("cpu")
        unwrap = lambda x: x.cpu_data if isinstance(x, Remote) else x  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        return tree_map(lambda x: Remote(x) if isinstance(x, torch.Tensor) else x, out)


class RemoteFactories(TorchDispatchMode):
    """While active, tensors created for (or moved to) the PrivateUse1 device become Remote tensors."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        device = kwargs.get("device")
        if device is None or torch.device(device).type != "privateuseone":
            return func(*args, **kwargs)
        kwargs["device"] = torch.device("cpu")
        out = func(*cpu(args), **kwargs)
        return tree_map(lambda x: Remote(x) if isinstance(x, torch.Tensor) else x, out)


def cpu(x):
    return tree_map(lambda t: t.cpu_data if isinstance(t, Remote) else t, x)


def _register_device_module() -> None:
    # what torch asks of a backend before it creates tensors for it (factories with device=...);
    # moving a CPU tensor there (.to) needs C++ hooks, so the tests pass device tensors in instead
    if not hasattr(torch, "privateuseone"):
        import types

        module = types.ModuleType("remote_backend")
        module.is_available = lambda: True
        module.device_count = lambda: 1
        module.current_device = lambda: 0
        module._lazy_init = lambda: None
        module.is_initialized = lambda: True
        torch._register_device_module("privateuseone", module)


@pytest.fixture
def backend():
    """Python kernels of some wavepe ops for PrivateUse1 (removed afterwards), and the calls they got."""
    _register_device_module()
    lib = torch.library.Library("wavepe", "IMPL")
    calls: list[tuple[str, list[torch.dtype]]] = []

    def kernel(name):
        def run(*args):
            calls.append((name, [a.dtype for a in args if isinstance(a, torch.Tensor)]))
            out = getattr(torch.ops.wavepe, name)(*cpu(args))
            return tree_map(lambda t: Remote(t) if isinstance(t, torch.Tensor) else t, out)
        return run

    for name in ("rel_bias", "attention_fwd", "rope"):
        lib.impl(name, kernel(name), "PrivateUse1")
    yield calls
    lib._destroy()


def test_a_backend_kernel_is_what_the_wrappers_reach(backend):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 9, 8, generator=g) for _ in range(3))
    table = torch.randn(6, 8, generator=g)
    slopes = torch.tensor([0.5, 0.25])
    inv = torch.from_numpy(RopeConfig().inv_freq(8))
    calls = {
        "relative": lambda r: wo.wavelet_attention(*r(q, k, v), pos_enc="relative", rel_table=(r(table), -3)),
        "alibi": lambda r: wo.wavelet_attention(*r(q, k, v), pos_enc="alibi", alibi_slopes=r(slopes)),
        "nope": lambda r: wo.wavelet_attention(*r(q, k, v), pos_enc="nope", causal=False),
        "rel_bias": lambda r: wo.rel_bias(r(q), r(table), -2, k_len=11),
        "rope": lambda r: wo.rope_inv_freq(*r(q, k), 3, r(inv), rotary_pairs=3)[1],
    }

    def remote(*ts):
        return Remote(ts[0]) if len(ts) == 1 else tuple(Remote(t) for t in ts)

    def local(*ts):
        return ts[0] if len(ts) == 1 else ts

    for name, call in calls.items():
        with warnings.catch_warnings(), RemoteFactories():
            warnings.simplefilter("error")
            got = call(remote)
        assert isinstance(got, Remote) and got.device.type == "privateuseone", name
        torch.testing.assert_close(got.cpu_data, call(local), rtol=0, atol=0)
    assert [name for name, _ in backend] == ["attention_fwd"] * 3 + ["rel_bias", "rope"]
    # half types: a backend whose kernels are not known to take them natively gets float32
    with RemoteFactories():
        wo.rel_bias(Remote(q.bfloat16()), Remote(table.bfloat16()), 0)
    assert backend[-1] == ("rel_bias", [torch.float32, torch.float32])


def test_a_device_without_kernel_falls_back_with_a_warning(backend, monkeypatch):
    # alibi_bias has no PrivateUse1 kernel in the fixture: the plain-PyTorch formula runs there
    monkeypatch.setattr(_routing, "_warned", set())
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="no compiled alibi_bias kernel for device 'privateuseone'"), \
            RemoteFactories():
        got = wo.alibi_bias(Remote(slopes), 5, 7, q_offset=2)
    assert isinstance(got, Remote) and backend == []
    torch.testing.assert_close(got.cpu_data, wo.alibi_bias(slopes, 5, 7, q_offset=2), rtol=0, atol=0)
    with warnings.catch_warnings(), RemoteFactories():  # once per (op, device type)
        warnings.simplefilter("error")
        wo.alibi_bias(Remote(slopes), 5, 7, q_offset=2)


# ---- fake CUDA tensors, routed as a CUDA build routes them ----------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_cuda_tensors_reach_the_ops_in_their_own_dtype(dtype, monkeypatch):
    # a CUDA build registers the CUDA key; here the registry is made to say so, and FakeTensorMode gives
    # CUDA tensors on a CPU machine (the fake kernels produce the outputs)
    registered = _routing._kernel_registered
    monkeypatch.setattr(_routing, "_found", set())  # kernels remembered so far
    monkeypatch.setattr(_routing, "_kernel_registered",
                        lambda op, device_type: device_type == "cuda" or registered(op, device_type))
    cfg = WaveletConfig.grid(16)
    with FakeTensorMode():
        q = torch.empty(2, 4, 33, 16, device="cuda", dtype=dtype)
        k = torch.empty(2, 2, 33, 16, device="cuda", dtype=dtype)
        with OpLog() as log:
            out = wo.wavelet_attention(q, k, k, cfg)
            bias = wo.wavelet_bias(q, cfg)
            q_rot, _ = wo.rope(q, k, 0, RopeConfig())
            alibi = wo.alibi_bias(torch.ones(4, device="cuda", dtype=dtype), 33, 33)
            _, lse = torch.ops.wavepe.attention_fwd(q, k, k, None, None, None, None, 0.25, 0, True, 0, False, False)
    seen = {name: ins for name, ins, _ in log.calls if name.startswith("wavepe.")}
    assert set(seen) == {"wavepe.attention_fwd.default", "wavepe.rel_bias.default", "wavepe.rope.default",
                         "wavepe.alibi_bias.default"}
    for name, ins in seen.items():
        assert ins[0] == dtype, (name, ins)
    assert out.dtype == bias.dtype == q_rot.dtype == alibi.dtype == dtype
    assert lse.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)  # the op's contract


def test_the_fake_kernel_and_the_cpu_kernel_agree_on_lse():
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        _, lse = torch.ops.wavepe.attention_fwd(q.to(dtype), q.to(dtype), q.to(dtype), None, None, None, None,
                                                0.5, 0, True, 0, False, False)
        _, fake_lse = torch.ops.wavepe.attention_fwd(*(t.to("meta", dtype) for t in (q, q, q)), None, None, None,
                                                     None, 0.5, 0, True, 0, False, False)
        assert lse.dtype == fake_lse.dtype == dtype and lse.shape == fake_lse.shape
    assert np.isfinite(lse.numpy()).all()


# ---- the fast paths of an eager call ---------------------------------------------------------------

def test_calls_without_gradients_skip_the_autograd_layer():
    from wavepe.ops._extension import autograd_context

    x, w = torch.randn(2), torch.randn(2, requires_grad=True)
    below = type(torch._C._AutoDispatchBelowAutograd())
    assert isinstance(autograd_context(x, None, 3), below)
    assert not isinstance(autograd_context(x, w), below)  # a gradient to record: through autograd
    with torch.no_grad():
        assert isinstance(autograd_context(x, w), below)
    # and the results are the same either way, with the graph where one is wanted
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))
    with torch.no_grad():
        plain = wo.wavelet_attention(q, k, v)
    qg = q.clone().requires_grad_(True)
    out = wo.wavelet_attention(qg, k, v)
    assert plain.grad_fn is None and out.grad_fn is not None
    torch.testing.assert_close(out.detach(), plain, rtol=0, atol=0)
    out.sum().backward()
    assert qg.grad is not None and torch.isfinite(qg.grad).all()


def test_only_wavepe_own_kernels_are_remembered(backend):
    q = Remote(torch.randn(1, 2, 3, 4))
    assert _routing.has_kernel("attention_fwd", q.device)  # the fixture's kernel, asked again each time
    assert ("attention_fwd", "privateuseone") not in _routing._found
    assert _routing.has_kernel("attention_fwd", torch.device("cpu"))
    assert ("attention_fwd", "cpu") in _routing._found


def test_a_compiled_call_made_before_any_eager_one_is_not_compiled_again(monkeypatch):
    # a process whose first wavepe call is compiled (the memo of found kernels empty), then an eager call (which
    # fills it), then the compiled function again: the same graph -- dynamo guarded on the memo's contents before,
    # and compiled the whole function a second time
    monkeypatch.setattr(_routing, "_found", set())
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 9, 8, generator=gen) for _ in range(3))
    cfg = WaveletConfig.grid(8)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: wo.wavelet_attention(q, k, v, cfg), backend="eager", fullgraph=True)
    first = compiled(q, k, v)
    eager = wo.wavelet_attention(q, k, v, cfg)
    assert ("attention_fwd", "cpu") in _routing._found
    with torch.compiler.set_stance("fail_on_recompile"):
        again = compiled(q, k, v)
    torch.testing.assert_close(first, eager, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(again, eager, rtol=1e-6, atol=1e-6)
    torch._dynamo.reset()
