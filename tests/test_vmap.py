"""torch.func over the ops: vmap folds into the ops' batch (no per-example fallback), grad / vjp / jacrev and
per-example gradients (vmap of grad) equal torch.autograd's, and what cannot be supported says so.

torch's per-example fallback is switched off for these tests: an op without a batching rule raises
instead of looping quietly.  Each result is compared with the same op called per example.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import wavepe  # noqa: E402
import wavepe.ops as wo  # noqa: E402
from torch.func import grad, jacrev, jvp, vjp, vmap  # noqa: E402

V = 3  # examples


@pytest.fixture(autouse=True)
def no_fallback():
    torch._C._functorch._set_vmap_fallback_enabled(False)
    yield
    torch._C._functorch._set_vmap_fallback_enabled(True)


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _qkv(b=2, h=4, h_kv=2, m=7, n=9, d=16):
    return _randn(V, b, h, m, d, seed=1), _randn(V, b, h_kv, n, d, seed=2), _randn(V, b, h_kv, n, d, seed=3)


def _per_example(fn, *args, in_dims=0):
    dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
    outs = [fn(*(a if d is None else a.select(d, i) for a, d in zip(args, dims))) for i in range(V)]
    if isinstance(outs[0], torch.Tensor):
        return torch.stack(outs)
    return tuple(torch.stack([o[j] for o in outs]) for j in range(len(outs[0])))


def _close(got, want):
    got = (got,) if isinstance(got, torch.Tensor) else got
    want = (want,) if isinstance(want, torch.Tensor) else want
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, equal_nan=True)


CFG = wavepe.WaveletConfig.grid(16)
TABLE = _randn(11, 16, seed=4)


def _attention_kwargs(kind: str) -> dict:
    if kind == "relative":
        return dict(pos_enc="relative", rel_table=(TABLE, -5))
    if kind == "alibi":
        return dict(pos_enc="alibi")
    return dict(pos_enc=kind)


@pytest.mark.parametrize("kind", ["wavelet", "relative", "alibi", "nope"])
def test_attention_vmap_and_per_example_gradients(kind):
    q, k, v = _qkv()
    kw = _attention_kwargs(kind)

    def f(q, k, v):
        return wo.wavelet_attention(q, k, v, CFG if kind == "wavelet" else None, **kw)

    _close(vmap(f)(q, k, v), _per_example(f, q, k, v))

    def loss(q, k, v):
        return (f(q, k, v) * torch.linspace(-1, 1, f(q, k, v).numel(), dtype=q.dtype).reshape(q.shape)).sum()

    def autograd_grads(q, k, v):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(loss(*leaves), leaves)

    _close(vmap(grad(loss, argnums=(0, 1, 2)))(q, k, v), _per_example(autograd_grads, q, k, v))


def test_attention_vmap_with_masks_documents_and_unbatched_inputs():
    q, k, v = _qkv(b=1, m=9, n=9)
    mask = torch.zeros(V, 1, 9, dtype=torch.bool)
    mask[1, 0, 3] = mask[2, 0, :2] = True
    cu = torch.tensor([0, 4, 9])

    def f(q, k, v, mask):
        return wo.wavelet_attention(q, k, v, CFG, key_padding_mask=mask, cu_seqlens=cu, return_lse=True)

    _close(vmap(f)(q, k, v, mask), _per_example(f, q, k, v, mask))
    # k, v shared by every example (in_dims None), per-example documents
    cus = torch.tensor([[0, 4, 9], [0, 9, 9], [0, 1, 9]])

    def g(q, cu):
        return wo.wavelet_attention(q, k[0], v[0], CFG, cu_seqlens=cu)

    _close(vmap(g)(q, cus), _per_example(g, q, cus))


def test_per_example_table_gradient_and_per_example_tables():
    # a learned table shared by the examples: each example's own dtable (the kernels sum over the batch,
    # so the rule runs per example); a table per example: the same
    q, k, v = _qkv()

    def loss(table, q, k, v):
        return wo.wavelet_attention(q, k, v, pos_enc="relative", rel_table=(table, -5)).square().sum()

    def autograd_grad(table, q, k, v):
        t = table.clone().requires_grad_()
        return torch.autograd.grad(loss(t, q, k, v), t)[0]

    got = vmap(grad(loss), in_dims=(None, 0, 0, 0))(TABLE, q, k, v)
    _close(got, _per_example(autograd_grad, TABLE, q, k, v, in_dims=(None, 0, 0, 0)))
    tables = _randn(V, 11, 16, seed=5)
    _close(vmap(grad(loss))(tables, q, k, v), _per_example(autograd_grad, tables, q, k, v))


def test_rel_bias_vmap_and_gradients():
    q = _randn(V, 2, 3, 6, 16, seed=6)

    def f(q, t):
        return wo.rel_bias(q, t, -5, k_len=8, causal=False, clamp=True)

    _close(vmap(f, in_dims=(0, None))(q, TABLE), _per_example(f, q, TABLE, in_dims=(0, None)))
    tables = _randn(V, 11, 16, seed=7)
    _close(vmap(f)(q, tables), _per_example(f, q, tables))

    def loss(q, t):
        return f(q, t).square().sum()

    def autograd_grads(q, t):
        leaves = [q.clone().requires_grad_(), t.clone().requires_grad_()]
        return torch.autograd.grad(loss(*leaves), leaves)

    got = vmap(grad(loss, argnums=(0, 1)), in_dims=(0, None))(q, TABLE)
    _close(got, _per_example(autograd_grads, q, TABLE, in_dims=(0, None)))
    _close(vmap(wo.wavelet_bias, in_dims=(0, None))(q, CFG), _per_example(lambda x: wo.wavelet_bias(x, CFG), q))


@pytest.mark.parametrize("positions", ["offset", "shared", "per_row", "per_example"])
def test_rope_vmap_and_gradients(positions):
    q, k, _ = _qkv(m=8, n=8)
    cfg = wavepe.RopeConfig(theta=100.0, rotary_fraction=0.75)
    pos = {"offset": 3, "shared": torch.arange(5, 13), "per_row": torch.tensor([[0] * 8, list(range(8))]),
           "per_example": torch.arange(V * 8).reshape(V, 8)}[positions]
    dims = (0, 0, 0 if positions == "per_example" else None)

    def f(q, k, p):
        return wo.rope(q, k, p, cfg)

    _close(vmap(f, in_dims=dims)(q, k, pos), _per_example(f, q, k, pos, in_dims=dims))
    _close(vmap(lambda q, p: wo.rope(q, None, p, cfg)[0], in_dims=dims[1:])(q, pos),
           _per_example(lambda q, p: wo.rope(q, None, p, cfg)[0], q, pos, in_dims=dims[1:]))

    def loss(q, k, p):
        a, b = f(q, k, p)
        return (a * a.flip(-1)).sum() + b.square().sum()

    def autograd_grads(q, k, p):
        leaves = [q.clone().requires_grad_(), k.clone().requires_grad_()]
        return torch.autograd.grad(loss(*leaves, p), leaves)

    got = vmap(grad(loss, argnums=(0, 1)), in_dims=dims)(q, k, pos)
    _close(got, _per_example(autograd_grads, q, k, pos, in_dims=dims))


def test_alibi_vmap_and_slope_gradients():
    slopes = torch.rand(V, 4, dtype=torch.float64)

    def f(s):
        return wo.alibi_bias(s, 5, 7, dtype=torch.float64)

    _close(vmap(f)(slopes), _per_example(f, slopes))
    q, k, v = _qkv(m=5, n=7)

    def loss(s, q, k, v):
        return wo.wavelet_attention(q, k, v, pos_enc="alibi", alibi_slopes=s).square().sum()

    def autograd_grad(s, q, k, v):
        leaf = s.clone().requires_grad_()
        return torch.autograd.grad(loss(leaf, q, k, v), leaf)[0]

    _close(vmap(grad(loss))(slopes, q, k, v), _per_example(autograd_grad, slopes, q, k, v))


def test_vjp_and_jacrev_equal_autograd():
    q, k, v = (t[0] for t in _qkv(m=5, n=5, d=8, h=2, h_kv=1))
    cfg = wavepe.WaveletConfig.grid(8)

    def f(q):
        return wo.wavelet_attention(q, k, v, cfg)

    out, pullback = vjp(f, q)
    cot = torch.ones_like(out)
    leaf = q.clone().requires_grad_()
    want = torch.autograd.grad(f(leaf), leaf, cot)[0]
    _close(pullback(cot)[0], want)
    jac = jacrev(f)(q)
    assert jac.shape == (*out.shape, *q.shape)
    _close(jac.sum(dim=tuple(range(out.dim()))), want)


def test_forward_mode_says_it_is_not_supported():
    q, k, v = (t[0] for t in _qkv())
    with pytest.raises(NotImplementedError, match="forward-mode derivative"):
        jvp(lambda q: wo.wavelet_attention(q, k, v, CFG), (q,), (torch.ones_like(q),))


def test_context_parallel_under_a_transform_says_it_is_not_supported():
    from wavepe.distributed import context_parallel_attention

    q, k, v = _qkv()
    with pytest.raises(NotImplementedError, match="torch.func transforms"):
        vmap(lambda q, k, v: context_parallel_attention(q, k, v))(q, k, v)


def test_without_a_rule_the_fallback_is_refused():
    # the fixture is live: an op with no batching rule raises instead of looping (so the tests above
    # prove the rules run)
    lib = torch.library.Library("wavepe_test_vmap", "FRAGMENT")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    with pytest.raises(RuntimeError, match="fallback"):
        vmap(torch.ops.wavepe_test_vmap.twice)(torch.ones(3, 2))
