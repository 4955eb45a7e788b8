"""Attention of the Hugging Face shim: masks in wavepe's form, fused or dense.

Hugging Face builds one attention mask per layer type and forward
(``masking_utils``) and hands it to every layer.  What that mask looks like
depends on the model's attention implementation; for ``"wavepe"`` it is made by
:func:`wavepe_mask` here, in the smallest form that says everything:

* ``None``: plain causal attention, no padding, the queries are the last M keys;
* a bool tensor (B, 1, 1, N), True = attend: causal attention of the last M
  keys plus a key padding mask (left or right padding).  Only
  :func:`wavepe_mask` makes it for M > 1, so it cannot be mistaken for a
  bidirectional mask;
* an int64 tensor (B, 1, 1, N) of document indices: packed sequences
  (padding-free training, ``DataCollatorWithFlattening``: position_ids that
  restart), causal attention inside each document.  Hugging Face marks them
  by wrapping the causal mask function with its packed-sequence functions
  (``masking_utils.packed_sequence_compatibility_function``); their document
  indices are read from that wrapper (:class:`PackedSequences`, also under
  torch.compile);
* anything that has no such form (custom mask functions, static caches, whose
  queries are not the last keys): Hugging Face's dense mask as an additive
  float mask (B, 1, M, N) (0 = attend, -inf = not), never mistaken for the
  compact form when M == 1.

A sliding window (Mistral, Qwen2/3, Gemma 2/3, Phi-3: ``sliding_window_causal_mask_function``)
takes the compact forms too -- also a sliding-window cache's, whose kept keys
start at ``kv_offset`` --: the window itself is the layer's ``sliding_window``
keyword, which Hugging Face passes to every attention function (flash-attn
applies it the same way), and the fused kernel skips the key blocks outside it.

:func:`attend` runs the compact forms through :func:`wavepe.ops.wavelet_attention`
(``key_padding_mask`` (B, N) or ``cu_seqlens`` (B, N + 1), ``window``, the
attention-logit ``softcap`` of Gemma 2; no M x N tensor) and everything else
through :func:`dense_attention`, which also carries what the fused kernel does
not: dropout and the attention probabilities (``output_attentions``, the
``eager`` implementation).  Which path a call takes, and why, is logged once
per reason at debug level (logger ``wavepe``).

Relative distances are distances between key indices: with a compact mask
the first query is key ``N - M``; with a dense mask each query's index is the
last key its causal mask lets it see (itself), read from the mask as a tensor
(no host sync, nothing specialised under torch.compile), which also holds for
static caches, whose keys fill a preallocated buffer in order, and for
sliding-window caches, whose kept keys stay in order.  Index distances equal
the distances of ``position_ids`` whenever positions advance by one per token,
which holds for default positions, left/right padding (pads are masked) and
packed sequences (documents are masked from each other).  A padding mask with
holes (pads between real tokens, whose position_ids count real tokens only)
has no index form: such calls take the dense path, whose distances count the
keys a query sees (:func:`key_distances`), which skips the pads.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch

from .. import ops
from ..config import WaveletConfig
from ..ops import _routing
from ..ops.attention import fused_attention
from ..pos_enc import scores_pos_enc


def _compiling() -> bool:
    return torch.compiler.is_compiling()


_LOG = logging.getLogger("wavepe")
_LOGGED: set[str] = set()


def _log_dense(reason: str) -> None:
    """One debug line per reason a call took the dense path (M x N scores per head)."""
    if reason not in _LOGGED and not _compiling():
        _LOGGED.add(reason)
        _LOG.debug("wavepe attention: the dense path (M x N scores per head): %s", reason)


# ---- mask function registered as AttentionMaskInterface["wavepe"] -----------------------------------------------

def wavepe_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: Any = 0,
    kv_offset: int = 0,
    mask_function: Any = None,
    attention_mask: torch.Tensor | None = None,
    allow_is_causal_skip: bool = True,
    local_size: int | None = None,
    device: torch.device | str = "cpu",
    **kwargs: Any,
) -> torch.Tensor | None:
    """Hugging Face mask interface for ``attn_implementation="wavepe"`` (see the module docstring).

    Returns None, a (B, 1, 1, N) bool key mask (True = attend) for causal + padding,
    or Hugging Face's dense (B, 1, M, N) mask, additive float32, when the pattern has no compact form.
    """
    from transformers.masking_utils import causal_mask_function, prepare_padding_mask, sdpa_mask

    if mask_function is None:
        mask_function = causal_mask_function
    # the queries are the last keys (a sliding-window cache's keys start at kv_offset, in order)
    queries_last = (isinstance(q_offset, int) and isinstance(kv_offset, int) and kv_offset >= 0
                    and q_offset - kv_offset == kv_length - q_length)
    plain = _windowed_causal(mask_function)
    # packed sequences of either: their document indices (attention_mask None is what marks packing)
    if isinstance(mask_function, PackedSequences) and _windowed_causal(mask_function.mask_function) \
            and attention_mask is None and queries_last and q_length == kv_length:
        docs = mask_function.documents
        if isinstance(docs, torch.Tensor) and docs.dim() == 2:
            return docs.to(device=device, dtype=torch.int64)[:, None, None, :kv_length]
    if plain and queries_last:
        keep = prepare_padding_mask(attention_mask, kv_length, kv_offset)
        no_lower_right_needed = q_length == 1 or q_length == kv_length
        if keep is None:
            if no_lower_right_needed:
                return None
            return torch.ones((batch_size, 1, 1, kv_length), dtype=torch.bool, device=device)
        keep = keep[:, kv_offset:kv_offset + kv_length].to(device=device, dtype=torch.bool)  # (the whole row: unsliced)
        if no_lower_right_needed and not _compiling() and bool(keep.all()):
            return None
        return keep[:, None, None, :]
    # Every other pattern: Hugging Face's dense mask, as an additive float mask, so that a (B, 1, 1, N) one
    # (M == 1, e.g. decoding into a static cache, whose query is not the last key) is never read as the compact form.
    keep = sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                     kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                     allow_is_causal_skip=False, local_size=local_size, device=device, **kwargs)
    return torch.zeros(keep.shape, dtype=torch.float32, device=keep.device).masked_fill(~keep, float("-inf"))


# ---- Hugging Face's mask functions, made readable ----------------------------------------------------------------
# Hugging Face hands a mask interface the rule it wants as a function (``mask_function``); the two rules wavepe
# compacts besides the plain causal one are made by masking_utils' factories as closures.  A closure's parts can be
# read eagerly but not under torch.compile (dynamo refuses ``__closure__``), and a compiled training step always has
# one of them: with no attention mask and no cache, ``create_causal_mask`` wraps the causal rule in its
# packed-sequence function even where position_ids never restart (tracing, it cannot tell).  So the shim replaces
# the two factories in masking_utils (:func:`install_mask_factories`) by ones whose functions are objects that keep
# what they were made of in sight; called, they are Hugging Face's own functions, for every attention
# implementation.


class SlidingWindowCausal:
    """``masking_utils.sliding_window_causal_mask_function(sliding_window)``, readable: causal, and a key at
    most ``sliding_window - 1`` before the query."""

    def __init__(self, made_by: Any, sliding_window: int) -> None:
        self.sliding_window = sliding_window
        self._rule = made_by(sliding_window)

    def __call__(self, batch_idx: Any, head_idx: Any, q_idx: Any, kv_idx: Any) -> Any:
        return self._rule(batch_idx, head_idx, q_idx, kv_idx)


class PackedSequences:
    """``masking_utils.packed_sequence_compatibility_function(mask_function, position_ids, documents)``,
    readable: ``mask_function`` inside each document (at positions remapped to restart with it), nothing across.

    ``documents`` (B, T): each token's document index (Hugging Face's ``find_packed_sequence_indices``).
    """

    def __init__(self, made_by: Any, mask_function: Any, position_ids: torch.Tensor,
                 documents: torch.Tensor) -> None:
        self.mask_function = mask_function
        self.documents = documents
        self._rule = made_by(mask_function, position_ids, documents)

    def __call__(self, batch_idx: Any, head_idx: Any, q_idx: Any, kv_idx: Any) -> Any:
        return self._rule(batch_idx, head_idx, q_idx, kv_idx)


def install_mask_factories() -> None:
    """Replace masking_utils' two factories by ones that make :class:`SlidingWindowCausal` and
    :class:`PackedSequences` (idempotent; a transformers without them is left as it is)."""
    from transformers import masking_utils as mu

    def readable(name: str, cls: type) -> None:
        original = getattr(mu, name, None)
        if original is None or getattr(original, "__wavepe_readable__", False):
            return

        @functools.wraps(original)
        def factory(*args: Any, **kwargs: Any) -> Any:
            return cls(original, *args, **kwargs)

        factory.__wavepe_readable__ = True  # type: ignore[attr-defined]
        setattr(mu, name, factory)

    readable("sliding_window_causal_mask_function", SlidingWindowCausal)
    readable("packed_sequence_compatibility_function", PackedSequences)


def _windowed_causal(mask_function: Any) -> bool:
    """Whether the rule is plain causal attention, or its sliding window (which the layer's sliding_window
    keyword carries to the kernel)."""
    from transformers.masking_utils import causal_mask_function

    return mask_function is causal_mask_function or isinstance(mask_function, SlidingWindowCausal)


def documents_of(position_ids: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """(B, M) document indices of position_ids (B, M): a new document wherever a position does not follow
    the one before by one (Hugging Face's ``find_packed_sequence_indices``).  With ``real`` (B|1, M) bool,
    only real tokens count (a pad's position breaks nothing; it takes the document before it).  No host sync."""
    b, m = position_ids.shape
    real = torch.ones((1, m), dtype=torch.bool, device=position_ids.device) if real is None else real
    real = real.expand(b, m)
    idx = torch.arange(m, device=position_ids.device).expand(b, m)
    # the index of the last real token before each token (-1: none)
    last = torch.where(real, idx, -1).cummax(-1).values
    prev = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], dim=-1)
    prev_pos = position_ids.gather(-1, prev.clamp_min(0))
    step = real & (prev >= 0) & (position_ids != prev_pos + 1)
    return step.cumsum(-1).to(position_ids.dtype)


def cu_seqlens_of(docs: torch.Tensor) -> torch.Tensor:
    """(B, N + 1) int32 boundaries of (B, N) document indices (0, 1, ... non-decreasing by steps of 0 or 1):
    boundary i is the first token of document i (N for the documents a row does not have). No host sync."""
    b, n = docs.shape
    marks = torch.arange(n + 1, device=docs.device, dtype=docs.dtype).expand(b, n + 1).contiguous()
    return torch.searchsorted(docs.contiguous(), marks).to(torch.int32)


# ---- mask resolution ---------------------------------------------------------------------------------------------

class _Plan:
    """How to run one attention call: fused with (q_offset, key_padding_mask | cu_seqlens, window) or dense with a
    mask."""

    __slots__ = ("q_offset", "key_padding_mask", "dense_mask", "documents", "window")

    def __init__(self, q_offset: int, key_padding_mask: torch.Tensor | None = None,
                 dense_mask: torch.Tensor | None = None, documents: torch.Tensor | None = None,
                 window: int | None = None) -> None:
        self.q_offset = q_offset
        self.key_padding_mask = key_padding_mask  # (B, N) bool, True = ignore; fused path
        self.dense_mask = dense_mask  # (B|1, 1|H, M, N) bool keep or float additive; dense path
        self.documents = documents  # (B, N) int64 document index of each token (packed sequences); fused path
        self.window = window  # sliding window of the compact forms (keys at index distance < window); None: none

    @property
    def cu_seqlens(self) -> torch.Tensor | None:
        return None if self.documents is None else cu_seqlens_of(self.documents)

    @property
    def fused(self) -> bool:
        return self.dense_mask is None


def _causal_keep(m: int, n: int, q_offset: int, device: torch.device, window: int | None = None) -> torch.Tensor:
    """(M, N) bool: key n visible to query m (n <= q_offset + m, and within the sliding window)."""
    pos_q = torch.arange(m, device=device)[:, None] + q_offset
    pos_k = torch.arange(n, device=device)[None, :]
    keep = pos_k <= pos_q
    if window is not None:
        keep &= pos_k > pos_q - window
    return keep


def resolve_mask(mask: Any, b: int, h: int, m: int, n: int, sliding_window: int | None, causal: bool,
                 device: torch.device) -> _Plan:
    """Read a Hugging Face attention mask; see the module docstring for the forms."""
    if mask is not None and not isinstance(mask, torch.Tensor):
        raise TypeError(f"attention_mask must be None or a torch.Tensor for wavepe attention, got "
                        f"{type(mask).__name__} (set attn_implementation='wavepe', 'sdpa' or 'eager')")
    if isinstance(mask, torch.Tensor):
        if mask.dim() != 4 or mask.shape[0] not in (1, b) or mask.shape[1] not in (1, h) \
                or mask.shape[2] not in (1, m) or mask.shape[3] != n:
            raise ValueError(f"attention_mask must be a 4-D mask broadcastable to (B, H, M, N) = ({b}, {h}, {m}, {n}), "
                             f"got shape {tuple(mask.shape)}")
    # the layer's sliding window, where it can cut: causal attention of more keys than it spans
    window = sliding_window if causal and sliding_window is not None and n > sliding_window else None
    if mask is None:
        # Hugging Face's meaning of None: lower-right causal for one query, upper-left otherwise
        off = n - 1 if m == 1 else 0
        return _Plan(off, window=window)
    off = n - m
    if not mask.dtype.is_floating_point and mask.dtype != torch.bool:  # document indices (wavepe_mask)
        if mask.shape[1:3] != (1, 1) or m != n or not causal:
            raise ValueError(f"a packed-sequence mask (document indices) must be (B, 1, 1, N) for causal attention "
                             f"with M == N, got shape {tuple(mask.shape)}, M={m}, causal={causal}")
        return _Plan(0, documents=mask[:, 0, 0, :].expand(b, n), window=window)
    if mask.dtype == torch.bool and mask.shape[1] == 1 and mask.shape[2] == 1 and causal:
        keep = mask[:, 0, 0, :].expand(b, n)
        return _Plan(off, key_padding_mask=~keep, window=window)
    if mask.shape[1] == 1 and mask.shape[2] == m and m > 1 and causal and not _compiling():
        # a dense mask built by the sdpa (bool) or eager (additive float) mask functions: fused if it is causal
        # (within the window) + key padding -- decided once per mask object, which every layer of a type shares
        known = getattr(mask, "_wavepe_padding", None)
        if known is None:
            keep_all = mask[:, 0] if mask.dtype == torch.bool else mask[:, 0] > torch.finfo(mask.dtype).min / 2
            keep = keep_all.any(dim=1)  # the keys some query sees: the unpadded ones (a window hides the others)
            compact = torch.equal(keep_all, _causal_keep(m, n, off, mask.device, window)[None] & keep[:, None, :])
            # the key padding mask, True (no padding: the form None) or False (no compact form)
            known = (True if bool(keep.all()) else ~keep.expand(b, n)) if compact else False
            try:
                mask._wavepe_padding = known
            except (AttributeError, TypeError):
                pass
        if known is not False:
            return _Plan(off, key_padding_mask=None if known is True else known, window=window)
    return _Plan(off, dense_mask=mask)


# ---- the attention itself --------------------------------------------------------------------------------------

def query_indices(plan: _Plan, m: int, n: int, device: torch.device) -> torch.Tensor:
    """(B|1, M) int64: the index among the keys of each query.

    A compact plan: ``q_offset + m``.  A dense mask: the last key each query
    sees (under a causal mask, itself), as a tensor; a query that sees no key
    (a pad row, whose output is 0) gets ``N - M + m``.
    """
    default = torch.arange(m, device=device) + plan.q_offset
    mask = plan.dense_mask
    if mask is None:
        return default[None]
    keep = mask[:, 0] if mask.dtype == torch.bool else mask[:, 0] > torch.finfo(mask.dtype).min / 2  # (B|1, M|1, N)
    keep = keep.expand(keep.shape[0], m, n)
    last = torch.where(keep, torch.arange(n, device=device), -1).amax(dim=-1)
    return torch.where(last >= 0, last, default)


def key_distances(plan: _Plan, m: int, n: int, device: torch.device) -> torch.Tensor:
    """(B|1, M, N) int64: r = pos_q - pos_k of every (query, key) pair the mask lets through.

    Counted in keys the query sees: r[m, n] = the number of visible keys after
    n up to the query's own index (:func:`query_indices`; negative for keys
    after it).  Where no pad lies between the two that is their index
    distance; across pads (a padding mask with holes) it skips them, as
    position_ids that count real tokens do.  Pairs the mask hides get
    whatever value (never used).
    """
    last = query_indices(plan, m, n, device)  # (B|1, M)
    mask = plan.dense_mask
    if mask is None:
        return last[:, :, None] - torch.arange(n, device=device)
    keep = mask[:, 0] if mask.dtype == torch.bool else mask[:, 0] > torch.finfo(mask.dtype).min / 2
    seen = keep.expand(keep.shape[0], m, n).to(torch.int64).cumsum(-1)  # visible keys in [0, n]
    return seen.gather(-1, last.expand(seen.shape[0], m)[..., None]) - seen


def _wavelet_bias_at(q: torch.Tensor, rel: torch.Tensor, wavelet: WaveletConfig) -> torch.Tensor:
    """bias[b, h, m, n] = q[b, h, m] · T[rel[b, m, n]] for causal distances rel (B|1, M, N) >= 0 (else 0).

    The table covers the distances 0 … N-1 a causal call can form (within the
    wavelets' support); one GEMM q·Tᵀ (B, H, M, rows) and a gather: no M x N x d tensor.
    """
    from ..ops._tables import call_table

    b, h, m, d = q.shape
    n = rel.shape[-1]
    table, r_lo, rows = call_table(wavelet, d, q.dtype, q.device, 1, n, n - 1, True)
    if not torch.compiler.is_compiling() and rows == 0:
        return q.new_zeros((b, h, m, n))
    g = q @ table.transpose(0, 1)
    idx = rel - r_lo
    inside = (idx >= 0) & (idx < rows)
    idx = idx.clamp(0, rows - 1)[:, None].expand(b, h, m, n)
    return torch.gather(g, -1, idx).masked_fill(~inside[:, None], 0.0)


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                    distances: torch.Tensor, *, pos_enc: str, wavelet: WaveletConfig | None, scale: float,
                    softcap: float | None = None, dropout: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with every score spelled out: the encoding's bias, softcapping, the mask, dropout.

    q (B, H, M, d), k/v (B, H_kv, N, d); ``mask`` bool (True = attend) or float
    additive, broadcastable to (B, H, M, N), or None (every key);
    ``distances`` (B|1, M, N): r = pos_q - pos_k of each pair (:func:`key_distances`).
    Scores::

        s = scale * (q·k + q·T[r])    wavelet
        s = scale * q·k - slope_h * r  alibi
        s = scale * q·k                rope (q, k rotated) / nope
        s = softcap * tanh(s / softcap)  when softcap is set (Gemma 2)

    A query that sees no key gets 0 (not NaN).  Returns the output (B, H, M, d)
    and the attention probabilities (B, H, M, N), both in q's dtype (computed in
    float32 for half types).  Builds M x N tensors per head, never M x N x d.
    """
    from ..config import alibi_slopes

    b, h, m, _ = q.shape
    n = k.shape[2]
    cdt = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
    if kc.shape[1] != h:  # grouped-query attention: each K/V head serves h / h_kv query heads
        kc = kc.repeat_interleave(h // kc.shape[1], dim=1)
        vc = vc.repeat_interleave(h // vc.shape[1], dim=1)
    scores = (qc @ kc.transpose(-1, -2)) * scale
    if pos_enc in ("wavelet", "alibi"):
        rel = distances  # (B|1, M, N)
        if pos_enc == "wavelet":
            scores = scores + scale * _wavelet_bias_at(qc, rel, wavelet)
        else:
            slopes = torch.as_tensor(alibi_slopes(h), dtype=cdt, device=q.device)
            scores = scores - slopes[:, None, None] * rel.clamp_min(0)[:, None].to(cdt)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(cdt)
    seen = ~torch.isneginf(scores).all(dim=-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(~seen, 0.0), dim=-1).masked_fill(~seen, 0.0)
    if dropout > 0.0:
        probs = torch.nn.functional.dropout(probs, p=dropout, training=True)
    return (probs @ vc).to(q.dtype), probs.to(q.dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, *, pos_enc: str,
           wavelet: WaveletConfig | None, scale: float, dropout: float = 0.0, sliding_window: int | None = None,
           softcap: float | None = None, causal: bool = True, weights: bool = False,
           position_ids: torch.Tensor | None = None, check_positions: bool = True
           ) -> tuple[torch.Tensor, torch.Tensor | None, _Plan]:
    """Attention of one layer: q (B, H, M, d), k/v (B, H_kv, N, d) -> ((B, M, H, d), probabilities, plan).

    ``pos_enc``: the shim's name ("wavelet", "alibi", "rope" (q, k already rotated), "nope").
    The fused kernel runs for compact masks without dropout, softcapping or
    ``weights``; otherwise :func:`dense_attention`.  The probabilities
    (B, H, M, N) are returned when ``weights`` (else None).  ``position_ids``
    (B|1, M), when given: where they do not advance by one, a new document
    starts (Hugging Face's packed sequences, ``find_packed_sequence_indices``)
    when the queries are every key and nothing is padded -- also with a cache
    object, where Hugging Face's own masks would not see the packing; with
    ``check_positions``, they are checked to advance by one per unpadded token
    (:func:`check_positions_follow_indices`) on the fused path otherwise.
    """
    b, h, m, _ = q.shape
    n = k.shape[2]
    plan = resolve_mask(mask, b, h, m, n, sliding_window, causal, q.device)
    kind = scores_pos_enc(pos_enc)  # what the scores add once q and k are (or are not) rotated
    if position_ids is not None and plan.key_padding_mask is None and plan.documents is None and causal \
            and m == n and m > 1 and plan.q_offset == 0 and position_ids.dim() == 2 and position_ids.shape[-1] == m:
        if plan.dense_mask is None:
            # on the CPU (no device sync to pay) positions that advance by one everywhere -- one document a row,
            # every unpacked prefill -- keep the plain causal plan: no per-layer document scan, no cu_seqlens
            if position_ids.device.type != "cpu" or _compiling() or \
                    not bool((position_ids[:, 1:] == position_ids[:, :-1] + 1).all()):
                plan = _Plan(0, documents=documents_of(position_ids.expand(b, m)), window=plan.window)
        else:  # a dense mask (an eager mask, a custom one), maybe made without the packing
            dense = plan.dense_mask
            keep = dense[:, 0] if dense.dtype == torch.bool else dense[:, 0] > torch.finfo(dense.dtype).min / 2
            real = keep.expand(keep.shape[0], m, n).diagonal(dim1=-2, dim2=-1)  # a real token sees itself
            docs = documents_of(position_ids.expand(b, m), real)
            same = (docs[:, :, None] == docs[:, None, :])[:, None]
            window = sliding_window if sliding_window is not None and n > sliding_window else None
            if not _compiling() and dense.shape[1] == 1 and bool(real.all()) and torch.equal(
                    keep.expand(b, m, n), _causal_keep(m, n, 0, q.device, window)[None] & same[:, 0]):
                # causal (within the window) inside each document, e.g. the eager mask of a packed batch
                # (Gemma 2's default implementation): the compact form
                plan = _Plan(0, documents=docs, window=window)
            else:
                plan.dense_mask = dense & same if dense.dtype == torch.bool else \
                    dense.masked_fill(~same, float("-inf"))
    if kind in ("wavelet", "alibi") and plan.key_padding_mask is not None and _has_holes(mask, plan):
        # pads between real tokens: the dense path, whose distances skip them (key_distances)
        _log_dense("a padding mask with holes (pads between real tokens) under a relative encoding")
        plan = _Plan(plan.q_offset, dense_mask=_spelled_out(plan, m, n, causal, q.device))
    fused = plan.fused and dropout == 0.0 and not weights
    if not fused:
        _log_dense("a mask with no compact form" if not plan.fused else
                   "attention dropout" if dropout else "output_attentions (the probabilities are returned)")
    if position_ids is not None and check_positions and fused and m > 1 and plan.documents is None:
        check_positions_follow_indices(position_ids, plan, m, pos_enc)
    if m == 0 or n == 0:  # nothing to attend to: 0, like a query whose keys are all masked
        return q.new_zeros((b, m, h, v.shape[-1])), (q.new_zeros((b, h, m, n)) if weights else None), plan
    if fused:
        config = wavelet if kind == "wavelet" else None
        window, cap = plan.window or 0, softcap or 0.0
        if _routing.has_kernel("attention_fwd", q.device):  # the model's own tensors: the op checks them
            out, _ = fused_attention(q, k, v, config, kind, causal, scale, plan.q_offset, plan.key_padding_mask,
                                     plan.cu_seqlens, window=window, softcap=cap)
        else:
            out = ops.wavelet_attention(q, k, v, config, pos_enc=kind, causal=causal, scale=scale,
                                        q_offset=plan.q_offset, key_padding_mask=plan.key_padding_mask,
                                        cu_seqlens=plan.cu_seqlens, window=window, softcap=cap)
        return out.transpose(1, 2), None, plan
    dense = plan.dense_mask
    if dense is None and (causal or plan.key_padding_mask is not None or plan.documents is not None):
        dense = _spelled_out(plan, m, n, causal, q.device)
    spelled = _Plan(plan.q_offset, dense_mask=dense)
    out, probs = dense_attention(q, k, v, dense, key_distances(spelled, m, n, q.device), pos_enc=kind, wavelet=wavelet,
                                 scale=scale, softcap=softcap, dropout=dropout)
    return out.transpose(1, 2), (probs if weights else None), plan


def _spelled_out(plan: _Plan, m: int, n: int, causal: bool, device: torch.device) -> torch.Tensor:
    """A compact plan's mask as a dense (B|1, 1, M, N) bool keep: causal, key padding, documents."""
    dense = _causal_keep(m, n, plan.q_offset, device, plan.window)[None] if causal else \
        torch.ones((1, m, n), dtype=torch.bool, device=device)
    if plan.key_padding_mask is not None:
        dense = dense & ~plan.key_padding_mask[:, None, :]
    if plan.documents is not None:
        docs = plan.documents
        dense = dense & (docs[:, plan.q_offset:plan.q_offset + m, None] == docs[:, None, :])
    return dense[:, None]


def _has_holes(mask: Any, plan: _Plan) -> bool:
    """Whether some row's real (unpadded) keys are not contiguous.  One host sync per mask object: the
    answer is kept on the mask, which Hugging Face builds once per forward for every layer; never under
    torch.compile (the fused path then measures index distances)."""
    if _compiling():
        return False
    known = getattr(mask, "_wavepe_holes", None)
    if known is not None:
        return known
    real = ~plan.key_padding_mask
    starts = real.clone()
    starts[:, 1:] &= ~real[:, :-1]  # first token of each run of real keys
    holes = bool((starts.sum(-1) > 1).any())
    try:
        mask._wavepe_holes = holes
    except (AttributeError, TypeError):
        pass
    return holes


def check_positions_follow_indices(position_ids: torch.Tensor, plan: _Plan, m: int, pos_enc: str) -> None:
    """Relative encodings measure index distances: the unpadded tokens' positions must advance by one.

    ``position_ids`` (B|1, M).  Raises ValueError naming the first offending batch row.
    Costs one host sync; callers skip it under torch.compile and for dense masks.
    """
    if position_ids.dim() != 2 or position_ids.shape[-1] != m or m < 2:
        return
    delta = position_ids - torch.arange(m, device=position_ids.device)
    if plan.key_padding_mask is not None:
        real = ~plan.key_padding_mask[:, plan.q_offset: plan.q_offset + m]
        delta = delta.expand(real.shape)
        big = torch.iinfo(delta.dtype).max
        hi = delta.masked_fill(~real, -big).amax(dim=-1)
        lo = delta.masked_fill(~real, big).amin(dim=-1)
        bad = (hi != lo) & real.any(dim=-1)
    else:
        bad = delta.amax(dim=-1) != delta.amin(dim=-1)
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0])
        shown = position_ids[min(row, position_ids.shape[0] - 1)].tolist()
        text = ", ".join(map(str, shown[:12])) + (", ..." if len(shown) > 12 else "")
        raise ValueError(
            f"position_ids of batch row {row} do not advance by one per (unpadded) token: [{text}]. "
            f"pos_enc={pos_enc!r} measures distances between tokens' indices in the sequence, which equal "
            "position differences for default positions, left/right padding and packed sequences; use "
            "pos_enc='rope' for arbitrary position_ids")
