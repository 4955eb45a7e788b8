"""Rotary position embedding on q and k in one call (docs/DEVELOPING.md, "RoPE").

The compiled op::

    torch.ops.wavepe.rope(Tensor q, Tensor? k, Tensor? positions, Tensor inv_freq, SymInt offset=0,
                          SymInt rotary_pairs=0, str layout="half", float scale=1., bool inverse=False)
                          -> (Tensor, Tensor)

rotates q (B, Hq, L, d) and k (B, Hk, L, d) with cos/sin computed once per
(position, pair) and shared by every head.  Without k its second output is an
empty (B, 0, L, d) tensor.  ``inverse=True`` rotates by -angle: it is the
backward of the forward op (the same op, so double backward works too).
Outputs are new contiguous tensors; inputs are read through their strides.
"""

from __future__ import annotations

import math
import numbers
import weakref

import torch

from .._validate import _is_symbolic_int, check_choice, check_int
from ..config import ROPE_LAYOUTS, RopeConfig
from . import _routing
from ._checks import cacheable, check_same, check_tensor, compute_dtype, values
from ._extension import autograd_context, named, ops, register_autograd, register_fake, schema_names

_ROPE = schema_names("rope")


@register_fake("rope")
def _rope_fake(q, k, inv_freq, rotary_pairs, **_):
    # the shape rules of the CPU kernel, checked while tracing (symbolic sizes included)
    torch._check_value(q.dim() == 4, lambda: f"rope: q must be (B, H, L, d), got shape {tuple(q.shape)}")
    d = q.shape[3]
    torch._check_value(d % 2 == 0, lambda: f"rope: head_dim (q.shape[-1]) must be even, got {d}")
    if k is not None:
        torch._check_value(k.dim() == 4 and k.shape[0] == q.shape[0] and k.shape[2] == q.shape[2]
                           and k.shape[3] == d, lambda: "rope: k must be (B, H_k, L, d) with q's B, L and d")
    torch._check_value(inv_freq.dim() == 1 and inv_freq.shape[0] == d // 2,
                       lambda: f"rope: inv_freq must have head_dim/2 = {d // 2} entries")
    torch._check_value(0 <= rotary_pairs <= d // 2, lambda: f"rope: rotary_pairs must be in [0, {d // 2}]")
    k_out = k.new_empty(k.shape) if k is not None else q.new_empty((q.shape[0], 0, q.shape[2], q.shape[3]))
    return q.new_empty(q.shape), k_out


def _rope_setup(ctx, inputs, output):
    a = named(_ROPE, inputs)
    q, k = a["q"], a["k"]
    ctx.save_for_backward(a["positions"], a["inv_freq"])
    ctx.has_k = k is not None
    ctx.shapes = (q.shape, None if k is None else k.shape, q.dtype, q.device)
    # the scalar arguments, by name, for the backward's call (which flips `inverse`)
    ctx.kw = {n: v for n, v in a.items() if n not in ("q", "k", "positions", "inv_freq")}


def _rope_backward(ctx, grad_q, grad_k):
    # y = scale * R(angle) x  =>  dx = scale * R(-angle) dy: the op with inverse flipped.
    positions, inv_freq = ctx.saved_tensors
    q_shape, k_shape, dtype, device = ctx.shapes
    if grad_q is None:
        grad_q = torch.zeros(q_shape, dtype=dtype, device=device)
    if ctx.has_k and grad_k is None:
        grad_k = grad_q.new_zeros(k_shape)
    kw = {**ctx.kw, "inverse": not ctx.kw["inverse"]}
    gq, gk = ops.rope(q=grad_q, k=grad_k if ctx.has_k else None, positions=positions, inv_freq=inv_freq, **kw)
    return gq, (gk if ctx.has_k else None), *(None,) * (len(_ROPE) - 2)


register_autograd("rope", _rope_backward, setup_context=_rope_setup)


# ---- argument checks -----------------------------------------------------------

def _resolve_positions(positions: int | torch.Tensor, batch: int, length: int,
                       device: torch.device) -> tuple[int, torch.Tensor | None]:
    """(offset, None) for an int, (0, tensor) for an int64 (L,) / (B, L) / (1, L) tensor."""
    if _is_symbolic_int(positions):  # torch.compile with dynamic shapes: the op checks it
        return positions, None
    if isinstance(positions, numbers.Integral) and not isinstance(positions, bool):
        start = check_int("positions", positions)
        if start + length - 1 > 2**63 - 1:
            raise OverflowError(f"positions: offset {start} + length {length} overflows int64")
        return start, None
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be an int offset or an int64 tensor, got {type(positions).__name__}")
    if positions.dtype != torch.int64:
        raise TypeError(f"positions must be an int64 tensor, got {positions.dtype}")
    if positions.device != device:
        raise ValueError(f"positions must be on {device} like q, got {positions.device}")
    if positions.dim() == 1:
        ok = positions.shape[0] == length
    elif positions.dim() == 2:
        ok = positions.shape[1] == length and positions.shape[0] in (1, batch)
    else:
        ok = False
    if not ok:
        raise ValueError(f"positions must have shape ({length},) or ({batch}, {length}), "
                         f"got {tuple(positions.shape)}")
    return 0, positions


def _check_qk(q: torch.Tensor, k: torch.Tensor | None) -> None:
    check_tensor("q", q, dim=4)
    if k is not None:
        check_tensor("k", k, dim=4)
        check_same("q", q, "k", k)
        if k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2] or k.shape[3] != q.shape[3]:
            raise ValueError(f"k must be (B, H_kv, L, d) with q's B, L and d: q {tuple(q.shape)}, k {tuple(k.shape)}")


def _check_scale(scale: float) -> float:
    # comparisons only (no math.isnan): traceable by torch.compile, also with dynamic=True
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number, got {scale!r} of type {type(scale).__name__}")
    if not (0 < scale < math.inf):
        raise ValueError(f"scale must be > 0 and finite, got {scale}")
    return scale


# inv_freq tensors for CUDA found finite: id(tensor) -> (weak reference, data_ptr, version, pairs).
_finite_inv_freq: dict[int, tuple] = {}


def _check_inv_freq_for_device(inv: torch.Tensor, pairs: int, device: torch.device) -> None:
    """inv_freq[:pairs] finite, where wavepe's CUDA kernel will read it (on the CPU the op checks the values
    itself, every call; another backend's kernel -- a tensor subclass, a PrivateUse1 device -- is its own
    business).  ``inv`` is the caller's tensor, before any conversion (a conversion to float64 keeps
    finiteness, and a converted copy is a new tensor every call).

    The op remembers a device buffer it has checked by its address alone (torch's stable ABI shows no
    version counter), so an in-place change of that buffer, or a new tensor the caching allocator put at a
    checked address, would pass unchecked.  Here a check is remembered per tensor object and version: one
    copy to the host (a sync) for each new tensor or in-place change, none for a model's unchanged buffer.
    Under torch.compile the op's own check is what remains.
    """
    if pairs == 0 or device.type != "cuda" or torch.compiler.is_compiling():
        return
    from torch._subclasses.fake_tensor import is_fake

    # fake tensors hold no values; under torch.func (vmap / grad) which dimension of the plain tensor inside is
    # the batch's is not known here: the op's own check (by address) is what remains
    if is_fake(inv) or values(inv) is not inv:
        return
    # an inference tensor has no version counter: its in-place changes (inside inference_mode) go unseen
    key = (inv.data_ptr(), None if inv.is_inference() else inv._version, pairs)
    seen = _finite_inv_freq.get(id(inv))
    if seen is not None and seen[0]() is inv and seen[1:] == key:
        return
    head = inv[:pairs].cpu()
    bad = (~torch.isfinite(head)).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        raise ValueError(f"inv_freq must be finite, got inv_freq[{i}] = {float(head[i])!r}")
    if len(_finite_inv_freq) >= 64:
        _finite_inv_freq.clear()
    _finite_inv_freq[id(inv)] = (weakref.ref(inv), *key)


def _eager_fallback(q, k, offset, pos, inv, layout, pairs, scale, cdt):
    _routing.warn_fallback("rope", q.device, "the plain-PyTorch implementation")
    if not torch.isfinite(inv[:pairs]).all():
        raise ValueError("inv_freq must be finite")
    if pos is None:
        pos = torch.arange(offset, offset + q.shape[2], dtype=torch.int64, device=q.device)
    kw = dict(positions=pos, inv_freq=inv, rotary_pairs=pairs, layout=layout, scale=scale)
    q_rot = plain_rope(q.to(cdt), **kw).to(q.dtype)
    k_rot = None if k is None else plain_rope(k.to(cdt), **kw).to(k.dtype)
    return q_rot, k_rot


# ---- public API ------------------------------------------------------------------

def rope_inv_freq(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: int | torch.Tensor,
    inv_freq: torch.Tensor,
    *,
    layout: str = "half",
    rotary_pairs: int | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RoPE with an explicit spectrum ``inv_freq`` (d/2,), e.g. a model's own buffer.

    Pair i is ``(x[i], x[i + d/2])`` ("half", Hugging Face ``rotate_half``) or
    ``(x[2i], x[2i+1])`` ("interleaved"); it becomes
    ``(a cos - b sin, b cos + a sin) * scale`` with angle ``pos * inv_freq[i]``
    formed in float64.  Pairs ``i >= rotary_pairs`` pass through (times scale).
    Differentiable in q and k (not in inv_freq).

    Args:
        q: (B, Hq, L, d); k: (B, Hk, L, d) or None.  Any strides with the last
            dimension contiguous are read in place, e.g. ``x.view(B, L, H, d).transpose(1, 2)``.
        positions: int offset (positions ``offset … offset+L-1``) or int64 (L,) / (B, L).
        inv_freq: (d/2,) angular frequencies, highest first.
        layout: "half" or "interleaved".
        rotary_pairs: rotate only pairs i < rotary_pairs (default all d/2).
        scale: multiplies the result (YaRN attention factor).

    Returns:
        (q_rot, k_rot): contiguous, with the input shapes and dtypes (k_rot None
        when k is None).  bfloat16 / float16 inputs are read and written as they
        are (no float32 copy) and computed in float32, each output rounded once.
    """
    _check_qk(q, k)
    d = q.shape[-1]
    if d % 2:
        raise ValueError(f"head_dim (q.shape[-1]) must be even for RoPE, got {d}")
    check_tensor("inv_freq", inv_freq, dim=1)
    if inv_freq.shape[0] != d // 2:
        raise ValueError(f"inv_freq must have head_dim/2 = {d // 2} entries, got {inv_freq.shape[0]}")
    if inv_freq.requires_grad and torch.is_grad_enabled():
        raise ValueError("inv_freq requires grad, but RoPE is not differentiable in inv_freq; "
                         "pass inv_freq.detach() (e.g. a model's non-persistent buffer)")
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    pairs = d // 2 if rotary_pairs is None else check_int("rotary_pairs", rotary_pairs, min_value=0)
    if pairs > d // 2:
        raise ValueError(f"rotary_pairs must be <= head_dim/2 = {d // 2}, got {pairs}")
    scale = _check_scale(scale)
    _check_inv_freq_for_device(inv_freq, pairs, q.device)
    if inv_freq.device != q.device or inv_freq.dtype != torch.float64:
        inv_freq = inv_freq.to(device=q.device, dtype=torch.float64)
    return _rope(q, k, positions, inv_freq, layout, pairs, scale)


def _rope(q: torch.Tensor, k: torch.Tensor | None, positions: int | torch.Tensor, inv: torch.Tensor, layout: str,
          pairs: int, scale: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The op on checked arguments: inv is float64 (d/2,) on q's device."""
    offset, pos = _resolve_positions(positions, q.shape[0], q.shape[2], q.device)
    if not _routing.has_kernel("rope", q.device):
        return _eager_fallback(q, k, offset, pos, inv, layout, pairs, scale, compute_dtype(q))
    # the kernels read and write float32 / float64 / bfloat16 / float16 as they are, on the CPU
    # and on CUDA (half types computed in float32, rounded once): no upcast copy
    with autograd_context(q, k):
        q_rot, k_rot = ops.rope(q=q, k=k, positions=pos, offset=offset, inv_freq=inv,
                                rotary_pairs=pairs, layout=layout, scale=scale, inverse=False)
    return q_rot, (None if k is None else k_rot)


# Plain dict: get / setdefault are atomic under the GIL, and torch.compile
# traces them (it cannot enter a lock).
_inv_freq_cache: dict[tuple, torch.Tensor] = {}


def config_inv_freq(config: RopeConfig, head_dim: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``config.inv_freq(head_dim)`` as a float64 tensor on ``device`` (cached per config, d, device)."""
    device = torch.device(device)
    key = (config, head_dim, str(device))
    hit = _inv_freq_cache.get(key)
    if hit is None:
        hit = torch.from_numpy(config.inv_freq(head_dim)).to(device)
        if cacheable(hit):
            hit = _inv_freq_cache.setdefault(key, hit)
    return hit


def _specialized(size: int) -> int:
    """A tensor size as a Python int -- under torch.compile a constant the graph is guarded on, even where
    ``dynamic=True`` made the size symbolic (head_dim is a model constant; the spectrum and the rotated
    pairs are built from it outside the graph).  Dynamo evaluates ``len(range(s))`` of a symbolic ``s`` to
    its value and guards on it, where ``int(s)`` stays symbolic."""
    return len(range(size))


@torch.compiler.assume_constant_result
def _inv_freq_constant(spec: str, head_dim: int, device_type: str, device_index: int) -> torch.Tensor:
    # Under torch.compile the spectrum is built (or fetched) eagerly while
    # tracing and enters the graph as a constant: the config is fixed, and
    # the cache lookup (hashing configs) and NumPy code are not traceable.
    # Its arguments are strings and ints, constants to dynamo on every torch
    # wavepe supports (torch 2.11 refuses a RopeConfig object here).
    device = torch.device(device_type, device_index) if device_index >= 0 else torch.device(device_type)
    return config_inv_freq(RopeConfig.from_spec(spec), head_dim, device)


def rope(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: int | torch.Tensor,
    config: RopeConfig,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RoPE on q and k with the spectrum, p-RoPE fraction and layout of ``config``.

    Args:
        q: (B, Hq, L, d); k: (B, Hk, L, d) or None.
        positions: int offset or int64 tensor (L,) / (B, L).
        config: :class:`wavepe.RopeConfig` (θ, rotary_fraction, layout, scaling).

    Returns:
        (q_rot, k_rot), same shapes and dtypes, contiguous; ``scale`` is the
        config's attention factor (YaRN), 1 otherwise.

    Under ``torch.compile`` the config's spectrum enters the graph as a
    constant built for the head_dim, which the graph is specialised to (also
    with ``dynamic=True``: a new head_dim recompiles, a new length does not).
    """
    if not isinstance(config, RopeConfig):
        raise TypeError(f"config must be a RopeConfig, got {type(config).__name__}")
    _check_qk(q, k)
    d = config.check_head_dim(_specialized(q.shape[-1]))
    if torch.compiler.is_compiling():
        index = q.device.index
        inv = _inv_freq_constant(config._spec, d, q.device.type, -1 if index is None else index)
    else:  # eagerly the cache itself: rebuilding the config from its spec cost ~50 us a call
        inv = config_inv_freq(config, d, q.device)
    return _rope(q, k, positions, inv, config.layout, config.rotary_pairs(d), config.attention_factor)


# ---- the plain-PyTorch formulation (devices without a kernel; the benchmarks' baseline) -------------


def plain_rope(x: torch.Tensor, *, positions: torch.Tensor, inv_freq: torch.Tensor, rotary_pairs: int, layout: str,
         scale: float = 1.0) -> torch.Tensor:
    """Rotate pairs of x (B, H, L, d) by positions (L,) or (B, L) x inv_freq (d/2,), float64 angles."""
    d = x.shape[-1]
    half = d // 2
    pos = positions.to(torch.float64)
    if pos.dim() == 1:
        pos = pos[None, :]
    angle = pos[:, None, :, None] * inv_freq.to(device=x.device, dtype=torch.float64)[:rotary_pairs]  # (B,1,L,P)
    cos = (torch.cos(angle) * scale).to(x.dtype)
    sin = (torch.sin(angle) * scale).to(x.dtype)
    out = x * scale if scale != 1.0 else x.clone()
    p = rotary_pairs
    if layout == "half":
        a, b = x[..., :p], x[..., half: half + p]
        out[..., :p] = a * cos - b * sin
        out[..., half: half + p] = b * cos + a * sin
    else:
        a, b = x[..., 0: 2 * p: 2], x[..., 1: 2 * p: 2]
        out[..., 0: 2 * p: 2] = a * cos - b * sin
        out[..., 1: 2 * p: 2] = b * cos + a * sin
    return out
