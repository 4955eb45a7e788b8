"""Relative-table bias: ``wavelet_bias`` and the general ``rel_bias``.

    bias[..., m, n] = Σ_j q[..., m, j] · T[pos_q(m) - n - r_lo, j]

(docs/DEVELOPING.md, "Relative-table bias").  The public wrappers validate
their arguments and call the compiled ops ``torch.ops.wavepe.rel_bias`` /
``rel_bias_backward`` (fake kernels and autograd registered here) on every
device whose dispatch key has a kernel (:mod:`wavepe.ops._routing`); only a
device without one falls back to the plain-PyTorch rel-shift of
:func:`plain_rel_bias` below (Transformer-XL's rel-shift), with a warning.
"""

from __future__ import annotations

import torch

from .._validate import INT64_MAX, check_flag, check_int, check_position, resolve_positions
from ..config import WaveletConfig
from . import _routing
from ._checks import check_same, check_tensor, compute_dtype
from ._tables import call_table, wavelet_table  # noqa: F401  (wavelet_table: public, wavepe.ops.wavelet_table)
from ._extension import named, ops, register_autograd, register_fake, schema_names

_REL_BIAS, _REL_BIAS_BWD = schema_names("rel_bias"), schema_names("rel_bias_backward")

# ---- fake kernels (shapes only: torch.compile, meta tensors) ------------------------


@register_fake("rel_bias")
def _rel_bias_fake(q, table, k_len, **_):
    torch._check(q.dim() >= 2, lambda: f"rel_bias: q must be (..., M, d), got shape {tuple(q.shape)}")
    torch._check(table.dim() == 2, lambda: f"rel_bias: table must be (R, d), got shape {tuple(table.shape)}")
    torch._check(table.shape[1] == q.shape[-1], lambda: "rel_bias: table.shape[1] must match q.shape[-1]")
    torch._check(k_len >= 0, lambda: f"rel_bias: k_len must be >= 0, got {k_len}")
    return q.new_empty((*q.shape[:-1], k_len))


@register_fake("rel_bias_backward")
def _rel_bias_backward_fake(q, table, output_mask, **_):
    dq = q.new_empty(q.shape) if output_mask[0] else q.new_empty((0,))
    dt = table.new_empty(table.shape) if output_mask[1] else table.new_empty((0,))
    return dq, dt


# ---- autograd -------------------------------------------------------------------------
# The bias is bilinear in (q, T): bias = F(q, T).  Its backward is
#   dq = Dq(grad, T) and dT = Dt(grad, q), both computed by rel_bias_backward,
# and, being linear in each argument, the backward's own backward is again
# made of F, Dq and Dt (so double backward works too).


def _rel_bias_setup(ctx, inputs, output):
    a = named(_REL_BIAS, inputs)
    ctx.save_for_backward(a["q"], a["table"])
    # the scalar arguments rel_bias_backward takes too (r_lo, q_offset, causal, clamp), by name
    ctx.kw = {n: a[n] for n in _REL_BIAS_BWD if n in a and n not in ("q", "table")}


def _rel_bias_backward(ctx, grad):
    q, table = ctx.saved_tensors
    need_q, need_t = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    rest = (None,) * (len(_REL_BIAS) - 2)
    if not (need_q or need_t):
        return (None, None, *rest)
    dq, dt = ops.rel_bias_backward(grad=grad, q=q, table=table, output_mask=[need_q, need_t], **ctx.kw)
    return (dq if need_q else None), (dt if need_t else None), *rest


register_autograd("rel_bias", _rel_bias_backward, setup_context=_rel_bias_setup)


def _rel_bias_backward_setup(ctx, inputs, output):
    a = named(_REL_BIAS_BWD, inputs)
    ctx.save_for_backward(a["grad"], a["q"], a["table"])
    # the scalar arguments shared by rel_bias and rel_bias_backward, by name
    ctx.kw = {n: a[n] for n in _REL_BIAS if n in a and n not in ("q", "table")}
    ctx.k_len = a["grad"].shape[-1]
    ctx.mask = tuple(a["output_mask"])


def _rel_bias_double_backward(ctx, g_dq, g_dt):
    grad, q, table = ctx.saved_tensors
    kw, n = ctx.kw, ctx.k_len
    g_dq = g_dq if ctx.mask[0] and g_dq is not None and g_dq.numel() else None
    g_dt = g_dt if ctx.mask[1] and g_dt is not None and g_dt.numel() else None
    need_grad, need_q, need_t = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
    d_grad = d_q = d_t = None
    if need_grad:
        # <g_dq, Dq(grad, T)> = <F(g_dq, T), grad>;  <g_dt, Dt(grad, q)> = <F(q, g_dt), grad>
        if g_dq is not None:
            d_grad = ops.rel_bias(q=g_dq, table=table, k_len=n, **kw)
        if g_dt is not None:
            part = ops.rel_bias(q=q, table=g_dt, k_len=n, **kw)
            d_grad = part if d_grad is None else d_grad + part
    if need_q and g_dt is not None:  # Dt is linear in q: adjoint is Dq(grad, g_dt)
        d_q = ops.rel_bias_backward(grad=grad, q=q, table=g_dt, output_mask=[True, False], **kw)[0]
    if need_t and g_dq is not None:  # Dq is linear in T: adjoint is Dt(grad, g_dq)
        d_t = ops.rel_bias_backward(grad=grad, q=g_dq, table=table, output_mask=[False, True], **kw)[1]
    return (d_grad, d_q, d_t, *(None,) * (len(_REL_BIAS_BWD) - 3))


register_autograd("rel_bias_backward", _rel_bias_double_backward,
                                setup_context=_rel_bias_backward_setup)


# ---- public wrappers --------------------------------------------------------------------

def rel_bias(
    q: torch.Tensor,
    table: torch.Tensor,
    r_lo: int,
    *,
    k_len: int | None = None,
    q_offset: int | None = None,
    causal: bool = True,
    clamp: bool = False,
) -> torch.Tensor:
    """Bias from any relative table; differentiable in ``q`` and ``table``.

    ``bias[..., m, n] = q[..., m, :] · table[q_offset + m - n - r_lo]``; keys
    sit at 0 … N-1, queries at ``q_offset`` … ``q_offset + M - 1``.

    Args:
        q: (..., M, d) queries (any strides; bf16/fp16 are read as they are and
            summed in fp32, each output rounded once).
        table: (R, d) rows for distances ``r_lo … r_lo + R - 1``.
        r_lo: distance of the table's first row.
        k_len: N keys (default M); q_offset: first query's position (default N - M).
        causal: zero (and skip) entries whose key is after the query.
        clamp: distances outside the table use its edge rows (Shaw et al.)
            instead of zero.

    Returns:
        (..., M, N) bias, dtype of ``q``.
    """
    check_tensor("q", q, min_dim=2)
    check_tensor("table", table, dim=2)
    check_same("q", q, "table", table)
    if table.shape[1] != q.shape[-1]:
        raise ValueError(f"table.shape[1]={table.shape[1]} does not match q.shape[-1]={q.shape[-1]} (head_dim)")
    if clamp and table.shape[0] == 0:
        raise ValueError("table must have at least one row with clamp=True")
    r_lo = check_int("r_lo", r_lo)
    m = q.shape[-2]
    n, off = resolve_positions("q", m, k_len, q_offset, "rel_bias: ")
    return _rel_bias(q, table, r_lo, table.shape[0], n, off, check_flag("causal", causal), check_flag("clamp", clamp))


def _rel_bias(q: torch.Tensor, table: torch.Tensor, r_lo: int, rows: int, n: int, off: int, causal: bool,
              clamp: bool) -> torch.Tensor:
    """rel_bias after validation; ``table`` (``rows`` rows) may already be in q's compute dtype."""
    _check_sizes(q, n, off, r_lo, rows)
    if _routing.has_kernel("rel_bias", q.device):
        # the CPU and CUDA kernels read and write float32 / float64 / bfloat16 / float16 as they are
        # (half types summed in float32, each output rounded once): no upcast copy there
        cdt = compute_dtype(q, half_on_cpu=True)
        if cdt == q.dtype and table.dtype == q.dtype:
            return ops.rel_bias(q=q, table=table, r_lo=r_lo, q_offset=off, k_len=n, causal=causal, clamp=clamp)
        out = ops.rel_bias(q=q.to(cdt), table=table.to(cdt), r_lo=r_lo, q_offset=off, k_len=n, causal=causal,
                           clamp=clamp)
    else:
        _routing.warn_fallback("rel_bias", q.device, "the plain-PyTorch rel-shift (materialises an M x (M+N) product)")
        cdt = compute_dtype(q)
        out = plain_rel_bias(q.to(cdt), table.to(cdt), r_lo=r_lo, q_offset=off, k_len=n, causal=causal, clamp=clamp)
    return out if out.dtype == q.dtype else out.to(q.dtype)


def _check_sizes(q: torch.Tensor, n: int, off: int, r_lo: int, rows: int) -> None:
    """The (..., M, N) result is addressable, and positions and distances stay
    within ±2^60, where the kernels' index arithmetic is exact.  (Plain loops:
    this also runs while torch.compile traces.)"""
    total = q.element_size() * n
    for s in q.shape[:-1]:
        total *= s
    if total > INT64_MAX:
        raise OverflowError(f"rel_bias: a result of shape {(*tuple(q.shape[:-1]), n)} "
                            f"({q.element_size()}-byte elements) does not fit in memory addressing")
    for name, v in (("q_offset", off), ("r_lo", r_lo), ("k_len", n), ("q_len", q.shape[-2]), ("table rows", rows)):
        check_position(name, v, "rel_bias: ")


def wavelet_bias(
    q: torch.Tensor,
    config: WaveletConfig,
    *,
    k_len: int | None = None,
    q_offset: int | None = None,
    causal: bool = True,
) -> torch.Tensor:
    """Wavelet position bias ``q_m · p_{m,n}``; differentiable in ``q``.

    Args:
        q: (..., M, d) queries, d = ``config.head_dim``.
        config: the per-dimension wavelets.
        k_len: N keys (default M); q_offset: first query's position (default N - M).
        causal: zero (and skip) entries whose key is after the query.

    Returns:
        (..., M, N) bias (not yet multiplied by the attention scale).
    """
    if not isinstance(config, WaveletConfig):
        raise TypeError(f"config must be a WaveletConfig, got {type(config).__name__}")
    check_tensor("q", q, min_dim=2)
    if q.shape[-1] != config.head_dim:
        raise ValueError(f"q.shape[-1]={q.shape[-1]} does not match config.head_dim={config.head_dim}")
    n, off = resolve_positions("q", q.shape[-2], k_len, q_offset, "wavelet_bias: ")
    causal = check_flag("causal", causal)
    # the table of the distances this call forms (bounded by its lengths, not by the support)
    # the table in the dtype the kernels take (q's own on the CPU and CUDA: bf16 / fp16 tables rounded once)
    table, r_lo, rows = call_table(config, config.head_dim, compute_dtype(q, half_on_cpu=True), q.device,
                                   q.shape[-2], n, off, causal)
    return _rel_bias(q, table, r_lo, rows, n, off, causal, False)


# ---- the plain-PyTorch formulation (devices without a kernel; the benchmarks' baseline) -------------


def plain_rel_bias(q: torch.Tensor, table: torch.Tensor, *, k_len: int, r_lo: int, q_offset: int,
             causal: bool, clamp: bool) -> torch.Tensor:
    """bias[..., m, n] = q[..., m, :] · T[pos_q(m) - n - r_lo] by rel-shift. (..., M, d) -> (..., M, N)."""
    m, d = q.shape[-2], q.shape[-1]
    n = k_len
    rows = table.shape[0]
    # distances needed: q_offset - (n - 1) ... q_offset + m - 1, i.e. m + n - 1 of them
    r = torch.arange(q_offset - (n - 1), q_offset + m, device=q.device)
    idx = r - r_lo
    inside = (idx >= 0) & (idx < rows)
    window = table[idx.clamp(0, max(rows - 1, 0))] if rows else table.new_zeros((r.numel(), d))
    if not clamp:
        window = window * inside[:, None].to(window.dtype)
    g = q @ window.transpose(0, 1)  # (..., M, M + N - 1): the extra GEMM of rel-shift
    # bias[m, n] = g[m, (q_offset + m - n) - (q_offset - n + 1 ... )] = g[m, m - n + n_last]
    col = torch.arange(m, device=q.device)[:, None] - torch.arange(n, device=q.device)[None, :] + (n - 1)
    bias = torch.gather(g, -1, col.expand(*g.shape[:-2], m, n))
    if causal:
        future = (torch.arange(n, device=q.device)[None, :] > (q_offset + torch.arange(m, device=q.device))[:, None])
        bias = bias.masked_fill(future, 0.0)
    return bias
