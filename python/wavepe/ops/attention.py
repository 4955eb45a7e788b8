"""Attention with a position bias: ``wavelet_attention`` (docs/DEVELOPING.md, "Fused attention").

Every device whose dispatch key has a kernel -- the CPU (``csrc/core/attention*``),
CUDA (``csrc/cuda/attention*``), ``meta`` / fake tensors (the fake kernel below:
shapes and ``torch.compile``), any other registered backend -- runs the fused
flash-style kernels through ``torch.ops.wavepe.attention_fwd`` / ``attention_bwd``:
the forward saves only the log-sum-exp, the backward recomputes the score
tiles, and nothing of size M x N is ever allocated.  A device without a
kernel uses the plain-PyTorch path :func:`plain_attention` below (bias + SDPA),
which is also the benchmarks' baseline, with a warning.

Contract of the ops: ``out`` has q's dtype; ``lse`` (B, H, M) is in the
accumulator type, float32 for float32 / bfloat16 / float16 inputs and
float64 for float64, on every device and in the fake kernel.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F

from .._validate import check_flag, check_int, check_position, check_real
from ..config import WaveletConfig
from ..pos_enc import canonical_pos_enc
from . import _routing
from ._checks import FLOAT_DTYPES, cacheable, check_finite, check_same, check_tensor, compute_dtype, values
from ._extension import autograd_context, named, ops, register_autograd, register_fake, schema_names, schema_tensors
from .alibi import alibi_bias
from ._tables import call_table, default_wavelet_config  # noqa: F401  (public: wavepe.ops.default_wavelet_config)
from .relbias import rel_bias

_FWD, _FWD_TENSORS = schema_names("attention_fwd"), schema_tensors("attention_fwd")

def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The kernels' accumulator type: lse, slopes and their gradients travel in it."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@register_fake("attention_fwd")
def _attention_fwd_fake(q, k, v, **_):
    torch._check_value(q.dim() == 4 and k.dim() == 4 and v.dim() == 4,
                       lambda: "attention_fwd: q, k, v must be (B, H, M, d), (B, H_kv, N, d), (B, H_kv, N, d)")
    b, h, m, d = q.shape
    return q.new_empty((b, h, m, d)), q.new_empty((b, h, m), dtype=_acc_dtype(q.dtype))


@register_fake("attention_bwd")
def _attention_bwd_fake(q, k, v, table, slopes, table_grad, slopes_grad, **_):
    dtable = q.new_empty(table.shape) if table_grad and table is not None else q.new_empty((0,))
    dslopes = q.new_empty(slopes.shape) if slopes_grad and slopes is not None else q.new_empty((0,))
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dtable, dslopes


def _attention_setup(ctx, inputs, output):
    a = named(_FWD, inputs)
    out, lse = output
    ctx.save_for_backward(*(a[n] for n in _FWD_TENSORS), out, lse)
    # the settings (WAVEPE_ATTENTION_SETTINGS: attention_bwd takes the same), by name
    ctx.kw = {n: v for n, v in a.items() if n not in _FWD_TENSORS}


def _attention_backward(ctx, grad_out, grad_lse):
    *saved, out, lse = ctx.saved_tensors
    t = dict(zip(_FWD_TENSORS, saved))
    need = dict(zip(_FWD, ctx.needs_input_grad))
    table_grad = t["table"] is not None and bool(need["table"])
    slopes_grad = t["slopes"] is not None and bool(need["slopes"])
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv, dtable, dslopes = ops.attention_bwd(grad_out=grad_out, grad_lse=grad_lse, out=out, lse=lse, **t,
                                                    **ctx.kw, table_grad=table_grad, slopes_grad=slopes_grad)
    grads = {"q": dq, "k": dk, "v": dv, "table": dtable if table_grad else None,
             "slopes": dslopes if slopes_grad else None}
    return tuple(grads.get(n) for n in _FWD)


register_autograd("attention_fwd", _attention_backward, setup_context=_attention_setup)



#: the encodings this op runs (wavepe.pos_enc is the vocabulary; "rope" rotates q and k beforehand)
POS_ENCS = ("wavelet", "relative", "alibi", "nope")


def wavelet_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    config: WaveletConfig | None = None,
    *,
    pos_enc: str = "wavelet",
    causal: bool = True,
    scale: float | None = None,
    q_offset: int | None = None,
    alibi_slopes: torch.Tensor | None = None,
    rel_table: tuple[torch.Tensor, int] | None = None,
    clamp: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    window: int | None = None,
    softcap: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention with a position encoding in the scores, fused (no M x N tensor).

    Scores, with r = pos_q - pos_k the relative distance::

        wavelet / relative:  s = scale * (q . k + q . T[r])
        alibi:               s = scale * q . k - slope_h * |r|
        nope:                s = scale * q . k
        with softcap c:      s = c * tanh(s / c)          (Gemma 2's logit soft-capping)

    ``out = softmax(s) v`` over the keys each query may see.  Differentiable in
    q, k, v, in a learned ``rel_table`` and in ``alibi_slopes``; the backward
    recomputes the score tiles from the saved log-sum-exp.

    Args:
        q: (B, H, M, d); k, v: (B, H_kv, N, d), H a multiple of H_kv (GQA).
        config: wavelets for ``pos_enc="wavelet"`` (default: the paper's grid for d).
        pos_enc: "wavelet", "relative" (``rel_table=(T, r_lo)``: T (R, d) holds
            distances r_lo .. r_lo + R - 1, learnable), "alibi" (``alibi_slopes``
            (H,), default the standard slopes) or "nope" (nothing beyond q·k:
            NoPE, or q and k already rotated by :func:`wavepe.ops.rope`).
            The names of :mod:`wavepe.pos_enc`; "none" is an old spelling of "nope".
        causal: mask keys after the query.  scale: default 1/sqrt(d).
        q_offset: first query's position (default N - M: the KV-cache convention).
        clamp: for "relative", distances outside T use its edge rows (Shaw et
            al.) instead of zero.
        key_padding_mask: (B, N) bool, True = ignore that key.  A query that
            sees no key gets a zero output.
        cu_seqlens: packed sequences (padding-free batches, flash-attn's
            ``cu_seqlens``): int32/int64 (n_docs + 1,) for B = 1, or
            (B, n_docs + 1), the document boundaries ``0 = cu[0] <= cu[1] <=
            ... <= cu[-1] = N`` along each row (empty documents allowed).  A
            query sees only the keys of its own document, the bias counts
            distances inside it: each document's output is that of the
            document alone.  Queries and keys share the row (q_offset + M <= N;
            training: M = N).  Boundaries stay on the device (no host sync);
            the CPU checks their values, a GPU kernel clamps them.
        window: sliding window (Mistral, Gemma 2/3, Qwen2/3, Phi-3): a query
            sees only the keys at distances |r| < window -- causal: the
            ``window - 1`` keys before it and itself, Hugging Face's rule.
            Key blocks outside every query's window are never visited: time
            and memory grow with ``L * window``.  None or 0: no window.
        softcap: logit soft-cap c > 0 (Gemma 2's ``attn_logit_softcapping``):
            each scaled score with its bias becomes ``c * tanh(s / c)`` before
            the mask and the softmax.  None or 0: none.
        return_lse: also return each query's log-sum-exp of its scores, for
            schemes that merge partial results (as wavepe.distributed does).

    Returns:
        out (B, H, M, d), dtype of q (bf16 / fp16 are read natively and
        accumulated in fp32, on the CPU and on CUDA; the table of a wavelet or
        relative bias is taken in q's dtype, ALiBi slopes in fp32);
        with ``return_lse``, ``(out, lse)``: lse (B, H, M) in the accumulator
        type (float64 for float64 inputs, else float32), -inf for a query that
        sees no key and NaN for one whose visible scores are all -inf
        (docs/DEVELOPING.md, "Non-finite values"), differentiable like ``out``.
    """
    b, h, _, m, n, d = check_qkv(q, k, v)
    pos_enc = canonical_pos_enc(pos_enc, POS_ENCS)
    causal, clamp = check_flag("causal", causal), check_flag("clamp", clamp)
    return_lse = check_flag("return_lse", return_lse)
    scale = 1.0 / math.sqrt(d) if scale is None else check_real("scale", scale, positive=True)
    off = n - m if q_offset is None else check_int("q_offset", q_offset)
    check_key_padding_mask(key_padding_mask, q, "(B, N)", b, n)
    for name, value in (("q_offset", off), ("q_len", m), ("k_len", n)):
        check_position(name, value)
    check_cu_seqlens(cu_seqlens, q, b, m, n, off)
    window, softcap = check_window(window), check_softcap(softcap)
    if _routing.has_kernel("attention_fwd", q.device):  # every dtype read as it is (bf16 / fp16 too)
        out, lse = fused_attention(q, k, v, config, pos_enc, causal, scale, off, key_padding_mask, cu_seqlens,
                                   rel_table=rel_table, alibi_slopes=alibi_slopes, clamp=clamp, window=window,
                                   softcap=softcap)
        return (out, lse) if return_lse else out
    cdt = compute_dtype(q)
    qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
    table, r_lo, slopes = position_bias(q, pos_enc, cdt, m, n, off, causal, config=config, rel_table=rel_table,
                                        alibi_slopes=alibi_slopes, clamp=clamp)
    _routing.warn_fallback("attention", q.device,
                           "the bias + scaled_dot_product_attention path (materialises M x N scores)")
    if return_lse:
        out, lse = _plain_attention(qc, kc, vc, table, r_lo, clamp, slopes, key_padding_mask, scale, off, causal,
                                    cu_seqlens, return_lse=True, window=window, softcap=softcap)
        return out.to(q.dtype), lse.to(_acc_dtype(q.dtype))
    return _plain_attention(qc, kc, vc, table, r_lo, clamp, slopes, key_padding_mask, scale, off, causal,
                            cu_seqlens, window=window, softcap=softcap).to(q.dtype)


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, config: WaveletConfig | None, pos_enc: str,
                    causal: bool, scale: float, q_offset: int, key_padding_mask: torch.Tensor | None,
                    cu_seqlens: torch.Tensor | None, *, rel_table: tuple[torch.Tensor, int] | None = None,
                    alibi_slopes: torch.Tensor | None = None, clamp: bool = False, window: int = 0,
                    softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of the fused kernel, for arguments of the form :func:`wavelet_attention` checks them to
    (``pos_enc`` one of POS_ENCS, ``q_offset`` and ``scale`` given), on a device with the kernel.

    :func:`wavelet_attention` calls it after its checks; the Hugging Face shim calls it directly
    for the tensors the model made (a one-token decoding step is short enough that the checks
    would cost a tenth of it).  The op checks shapes, dtypes and devices again in C++, so bad
    input still fails with a message naming the argument.
    """
    table, r_lo, slopes = position_bias(q, pos_enc, q.dtype, q.shape[2], k.shape[2], q_offset, causal, config=config,
                                        rel_table=rel_table, alibi_slopes=alibi_slopes, clamp=clamp,
                                        whole_window=True)
    with autograd_context(q, k, v, table, slopes):
        return ops.attention_fwd(q=q, k=k, v=v, table=table, r_lo=r_lo, clamp=clamp, slopes=slopes,
                                 key_padding_mask=key_padding_mask, scale=scale, q_offset=q_offset, causal=causal,
                                 cu_seqlens=cu_seqlens, mark_neg_inf=False, window=window, softcap=softcap)


def _check_optional_setting(name: str, value, convert, upper: float, allowed: str):
    """None -> 0 (off); else convert(name, value) (type checked), in [0, upper] (0: off): the ValueError
    names the argument, what it may be and the value."""
    if value is None:
        return convert(name, 0)
    value = convert(name, value)
    if torch.compiler.is_compiling():  # (a symbolic number: the op's C rule checks it at run time)
        return value
    if not 0 <= value <= upper:
        raise ValueError(f"{name} must be None, 0 (off) or {allowed}, got {value}")
    return value


def check_window(window: int | None) -> int:
    """None or 0: no window; else an int in [1, 2^60] (a window of 1 sees the query's own position only)."""
    return _check_optional_setting("window", window, check_int, 2**60, "in [1, 2^60]")


def check_softcap(softcap: float | None) -> float:
    """None or 0: no soft-cap; else a finite real > 0."""
    return _check_optional_setting("softcap", softcap, check_real, sys.float_info.max, "a finite number > 0")


# ---- argument checks shared with wavepe.distributed.context_parallel_attention ---------------------


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int, int, int]:
    """q (B, H, M, d), k and v (B, H_kv, N, d) with H a multiple of H_kv: returns (B, H, H_kv, M, N, d)."""
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
            and q.dim() == 4 and k.dim() == 4 and v.dim() == 4 and q.dtype in FLOAT_DTYPES
            and k.dtype == q.dtype and v.dtype == q.dtype and k.device == q.device and v.device == q.device):
        # what is wrong, said by the checks one at a time (the test above, together, is what they pass)
        check_tensor("q", q, dim=4)
        check_tensor("k", k, dim=4)
        check_tensor("v", v, dim=4)
        check_same("q", q, "k", k)
        check_same("q", q, "v", v)
    b, h, m, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k must be (B, H_kv, N, d) with q's B={b} and d={d}, got {tuple(k.shape)}")
    h_kv = k.shape[1]
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"q's heads H={h} must be a multiple of k's heads H_kv={h_kv}")
    if d < 1:
        raise ValueError(f"head_dim must be >= 1, got q of shape {tuple(q.shape)}")
    return b, h, h_kv, m, k.shape[2], d


def check_key_padding_mask(mask: torch.Tensor | None, q: torch.Tensor, shape_name: str, b: int, n: int) -> None:
    """None, or a bool tensor of shape ``shape_name`` = (b, n) on q's device."""
    if mask is None:
        return
    check_tensor("key_padding_mask", mask, dim=2, floating=False)
    if mask.dtype != torch.bool:
        raise TypeError(f"key_padding_mask must be a bool tensor, got {mask.dtype}")
    if tuple(mask.shape) != (b, n):
        raise ValueError(f"key_padding_mask must be {shape_name} = ({b}, {n}), got {tuple(mask.shape)}")
    check_same("q", q, "key_padding_mask", mask, dtype=False)


def check_cu_seqlens(cu: torch.Tensor | None, q: torch.Tensor, b: int, m: int, n: int, q_offset: int) -> None:
    """None, or document boundaries (n_docs + 1,) for b = 1 / (b, n_docs + 1), int32 or int64, on q's device.

    The values (0 first, N last, non-decreasing) are checked on the CPU (here
    and in the kernels); on other devices reading them would cost a host sync.
    """
    if cu is None:
        return
    check_tensor("cu_seqlens", cu, floating=False)
    if cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens must be an int32 or int64 tensor, got {cu.dtype}")
    if not ((cu.dim() == 1 and b == 1) or (cu.dim() == 2 and cu.shape[0] == b)) or cu.shape[-1] < 2:
        raise ValueError(f"cu_seqlens must be (n_docs + 1,) for B=1 or (B, n_docs + 1) with B={b} and at least 2 "
                         f"boundaries, got shape {tuple(cu.shape)}")
    check_same("q", q, "cu_seqlens", cu, dtype=False)
    if cu.device.type == "cpu" and not torch.compiler.is_compiling():
        rows = values(cu).reshape(-1, cu.shape[-1])  # (a vmap's examples: every one's rows)
        bad = (rows[:, 0] != 0) | (rows[:, -1] != n)
        if bool(bad.any()):
            row = int(torch.nonzero(bad)[0, 0])
            raise ValueError(f"cu_seqlens of batch row {row} must start at 0 and end at k_len={n}, got "
                             f"{int(rows[row, 0])} ... {int(rows[row, -1])}")
    if q_offset + m > n:
        raise ValueError(f"cu_seqlens needs every query inside the packed row: q_offset + q_len = {q_offset} + {m} "
                         f"> k_len = {n}")


def position_bias(q: torch.Tensor, pos_enc: str, cdt: torch.dtype, m, n, q_offset, causal: bool, *,
                  config: WaveletConfig | None, rel_table: tuple[torch.Tensor, int] | None,
                  alibi_slopes: torch.Tensor | None, clamp: bool, whole_window: bool = False
                  ) -> tuple[torch.Tensor | None, int, torch.Tensor | None]:
    """The kernels' (table, r_lo, slopes) for ``pos_enc`` (a canonical name), checked: the table in the compute
    dtype ``cdt``, the slopes in its accumulator type (a slope rounded to bf16 would change the bias).

    ``m`` queries at ``q_offset`` .. and ``n`` keys at 0 ..: the distances a
    wavelet table must cover (only those, within the wavelets' support; with
    ``whole_window``, the cached window that holds them, for the kernels --
    which read only the distances a sliding window lets through: the table
    asked for is the same with or without one, so the layers of a model with
    and without windows share one cached window).
    """
    h, d = q.shape[1], q.shape[3]
    table = slopes = None
    r_lo = 0
    if pos_enc == "wavelet":
        table, r_lo = _wavelet_table_for(config, d, cdt, q.device, m, n, q_offset, causal, whole_window)
    elif pos_enc == "relative":
        if rel_table is None or not isinstance(rel_table, tuple) or len(rel_table) != 2:
            raise ValueError("pos_enc='relative' needs rel_table=(table, r_lo)")
        table, r_lo = rel_table
        check_tensor("rel_table[0]", table, dim=2)
        check_same("q", q, "rel_table[0]", table, dtype=False)
        if table.shape[1] != d:
            raise ValueError(f"rel_table[0].shape[1]={table.shape[1]} does not match q.shape[-1]={d} (head_dim)")
        if clamp and table.shape[0] == 0:
            raise ValueError("rel_table[0] must have at least one row with clamp=True")
        r_lo = check_int("rel_table[1] (r_lo)", r_lo)
        check_position("rel_table[1] (r_lo)", r_lo)
        check_position("rel_table[0] rows", table.shape[0])
        table = table.to(cdt)
    elif pos_enc == "alibi":
        if alibi_slopes is None:
            slopes = _standard_slopes(h, _acc_dtype(cdt), q.device)
        else:
            check_tensor("alibi_slopes", alibi_slopes, dim=1)
            check_same("q", q, "alibi_slopes", alibi_slopes, dtype=False)
            if alibi_slopes.shape[0] != h:
                raise ValueError(f"alibi_slopes must have one slope per head ({h}), got {alibi_slopes.shape[0]}")
            check_finite("alibi_slopes", alibi_slopes)
            slopes = alibi_slopes.to(_acc_dtype(cdt))
    return table, r_lo, slopes


def _wavelet_table_for(config: WaveletConfig | None, head_dim: int, dtype: torch.dtype, device: torch.device,
                       m, n, q_offset, causal: bool, whole_window: bool = False) -> tuple[torch.Tensor, int]:
    """The wavelet table of ``config`` (default: the paper's grid) over the distances the call forms."""
    if config is not None:
        if not isinstance(config, WaveletConfig):
            raise TypeError(f"config must be a WaveletConfig or None, got {type(config).__name__}")
        if config.head_dim != head_dim:
            raise ValueError(f"config.head_dim={config.head_dim} does not match q.shape[-1]={head_dim}")
    elif head_dim % 8:
        raise ValueError(f"the default wavelet grid has 8 scales and needs head_dim divisible by 8, got "
                         f"head_dim={head_dim}; pass config=WaveletConfig.grid({head_dim}, n_scales=...)")
    table, r_lo, _ = call_table(config, head_dim, dtype, device, m, n, q_offset, causal, whole_window=whole_window)
    return table, r_lo


_slopes_cache: dict[tuple, torch.Tensor] = {}


def _standard_slopes(heads: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """ALiBi's standard slopes for ``heads`` heads, cached per (heads, dtype, device)."""
    key = (heads, dtype, str(device))
    hit = _slopes_cache.get(key)
    if hit is None:
        from ..config import alibi_slopes as slopes_of

        hit = torch.as_tensor(slopes_of(heads), dtype=dtype, device=device)
        if cacheable(hit):
            hit = _slopes_cache.setdefault(key, hit)
    return hit


def _plain_attention(q, k, v, table, r_lo, clamp, slopes, key_padding_mask, scale, q_offset, causal,
                     cu_seqlens=None, return_lse=False, window=0, softcap=0.0):
    """The plain-PyTorch path (devices without a compiled kernel)."""
    m, n = q.shape[2], k.shape[2]
    mask = None if cu_seqlens is None else document_mask(cu_seqlens, m, n, q_offset, causal)
    if window:
        near = window_mask(m, n, q_offset, window, q.device)
        mask = near if mask is None else mask & near
        if cu_seqlens is None and causal:
            mask = mask & causal_mask(m, n, q_offset, q.device)
    bias = None
    bias_scaled = False
    if table is not None:
        bias = rel_bias(q, table, r_lo, k_len=n, q_offset=q_offset, causal=causal, clamp=clamp)
    elif slopes is not None:
        bias = alibi_bias(slopes, m, n, q_offset=q_offset, causal=causal, dtype=q.dtype, device=q.device)
        bias_scaled = True
    return plain_attention(q, k, v, bias, causal=causal, scale=scale, q_offset=q_offset, bias_scaled=bias_scaled,
                           key_padding_mask=key_padding_mask, mask=mask, return_lse=return_lse, softcap=softcap)


# ---- the plain-PyTorch formulation (devices without a kernel; the benchmarks' baseline) -------------


def causal_mask(m: int, n: int, q_offset: int, device: torch.device) -> torch.Tensor:
    """(M, N) bool, True = attend: keys at or before each query's position q_offset + i."""
    return torch.arange(n, device=device)[None, :] <= (q_offset + torch.arange(m, device=device))[:, None]


def window_mask(m: int, n: int, q_offset: int, window: int, device: torch.device) -> torch.Tensor:
    """(M, N) bool, True = attend: keys at distances |pos_q - pos_k| < window (csrc/core/attention.h)."""
    r = (q_offset + torch.arange(m, device=device))[:, None] - torch.arange(n, device=device)[None, :]
    return r.abs() < window


def document_mask(cu_seqlens: torch.Tensor, m: int, n: int, q_offset: int, causal: bool) -> torch.Tensor:
    """(B, 1, M, N) bool, True = attend: packed documents (boundaries ``cu_seqlens``, (n_docs + 1,) or
    (B, n_docs + 1), in the keys' coordinate) -- a query at q_offset + i sees the keys of its own document (up
    to itself when causal); a position outside [cu[0], cu[-1]) is in no document (csrc/core/attention.h)."""
    cu = cu_seqlens.reshape(-1, cu_seqlens.shape[-1]).to(torch.int64)
    pos_k = torch.arange(n, device=cu.device)
    pos_q = q_offset + torch.arange(m, device=cu.device)

    def doc(pos: torch.Tensor) -> torch.Tensor:
        """Document index of positions (B, L): the last boundary <= it (a later empty document wins, as in
        the kernels); -1 outside every document."""
        i = torch.searchsorted(cu[:, :-1].contiguous(), pos.contiguous(), right=True)
        return torch.where((pos >= cu[:, :1]) & (pos < cu[:, -1:]), i, -1)

    doc_k = doc(pos_k.expand(cu.shape[0], n))
    doc_q = doc(pos_q.expand(cu.shape[0], m))
    keep = (doc_q[:, :, None] == doc_k[:, None, :]) & (doc_q[:, :, None] >= 0)
    if causal:
        keep = keep & (pos_k[None, None, :] <= pos_q[None, :, None])
    return keep[:, None]


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None, *, causal: bool,
              scale: float, q_offset: int, bias_scaled: bool = False,
              key_padding_mask: torch.Tensor | None = None, mask: torch.Tensor | None = None,
              dropout: float = 0.0, return_lse: bool = False, softcap: float = 0.0
              ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale·q·kᵀ + bias + masks) v with SDPA and an explicit float mask: wavepe's dense attention.

    q (B, H, M, d); k, v (B, Hkv, N, d) with H a multiple of Hkv (GQA); ``bias``
    broadcastable to (B, H, M, N) or None.  ``bias_scaled=False`` multiplies
    the bias by ``scale`` first (the wavelet convention s = scale·(q·k + q·p));
    ALiBi's bias is added as is.  Which keys a query sees: ``mask`` when given
    (bool, True = attend, or float additive; broadcastable to (B, H, M, N)),
    else the causal rule at ``q_offset`` (queries at q_offset … q_offset+M-1,
    keys at 0 … N-1) when ``causal``; and never the keys of
    ``key_padding_mask`` (B, N), True = ignore.  A query that sees no key gets
    0 (not NaN).  ``softcap`` c > 0 caps the scores, bias included, at
    ``c * tanh(s / c)`` before the masks (Gemma 2): the scores are formed
    explicitly then.  ``dropout`` is SDPA's ``dropout_p``.  Returns (B, H, M, d);
    with ``return_lse`` (no dropout), ``(out, lse)``: lse (B, H, M) the scores'
    log-sum-exp, -inf for a query that sees no key -- SDPA does not expose it,
    so the scores are formed explicitly then.
    """
    b, h, m, _ = q.shape
    n = k.shape[-2]
    device = q.device
    keep = None  # (.., M, N) bool: True = the key counts
    additive = None
    if mask is not None and mask.dtype == torch.bool:
        keep = mask
    elif mask is not None:
        additive = mask.to(q.dtype)
    elif causal:
        keep = torch.arange(n, device=device)[None, :] <= (q_offset + torch.arange(m, device=device))[:, None]
    if key_padding_mask is not None:
        pad_keep = ~key_padding_mask.to(torch.bool)[:, None, None, :]
        keep = pad_keep if keep is None else keep & pad_keep
    if bias is not None:
        scaled = bias if bias_scaled else bias * scale
        additive = scaled if additive is None else additive + scaled
    if keep is not None:
        base = additive if additive is not None else torch.zeros((), dtype=q.dtype, device=device)
        additive = torch.where(keep, base, torch.tensor(float("-inf"), dtype=q.dtype, device=device))
    if additive is not None and additive.dim() < 4:
        additive = additive.reshape((1,) * (4 - additive.dim()) + tuple(additive.shape))
    # a query with every key masked makes SDPA's softmax NaN: define it as 0 output
    seen = None
    if additive is not None:
        seen = ~torch.isneginf(additive).all(dim=-1, keepdim=True)
        additive = additive.masked_fill(~seen, 0.0)
    if return_lse or softcap:
        if dropout:
            raise ValueError(f"return_lse=True and softcap need dropout=0, got dropout={dropout}")
        out, lse = _plain_attention_with_lse(q, k, v, additive, seen, scale, softcap, bias, bias_scaled)
        return (out, lse) if return_lse else out
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=additive, dropout_p=dropout, scale=scale,
                                         enable_gqa=k.shape[1] != h)
    return out if seen is None else out.masked_fill(~seen, 0.0)


def _plain_attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, additive: torch.Tensor | None,
                              seen: torch.Tensor | None, scale: float, softcap: float = 0.0,
                              bias: torch.Tensor | None = None, bias_scaled: bool = False
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`plain_attention`'s (out, lse) from explicit scores (``additive``, ``seen`` as it prepared them).
    With ``softcap``, ``additive`` (which holds the bias) is not used: the scores with their bias are
    capped, then the mask (``seen`` and -inf entries of ``additive``) applies."""
    rep = q.shape[1] // k.shape[1]
    if rep != 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if softcap:
        if bias is not None:
            s = s + (bias if bias_scaled else bias * scale)
        s = softcap * torch.tanh(s / softcap)
        if additive is not None:
            s = s.masked_fill(torch.isneginf(additive), float("-inf"))
    elif additive is not None:
        s = s + additive
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    out = torch.matmul(torch.exp(s - lse), v)
    if seen is not None:
        out = out.masked_fill(~seen, 0.0)
        lse = lse.masked_fill(~seen, float("-inf"))
    return out, lse.squeeze(-1)
