"""The attention seam of a patched model: wavepe's AttentionInterface backend and the eager dispatcher.

Patching never replaces an attention module's ``forward``: the stock forward
projects, normalises and rotates q and k (with the (cos, sin) of
:mod:`._hf_rotary`), updates the cache and calls the attention function of
``config._attn_implementation`` with the mask, ``scaling``, ``sliding_window``,
``softcap``, ``position_ids`` and ``output_attentions``.  Two of those functions
are wavepe's:

* ``"wavepe"`` (:func:`wavepe_attention_forward`, registered with transformers'
  AttentionInterface): attention with the layer's position bias through the
  fused kernel, or the dense path where the kernel cannot go (dropout,
  softcapping, masks without a compact form, ``output_attentions=True``, which
  returns the probabilities);
* ``"eager"``: for a relative encoding, the family's module-level
  ``eager_attention_forward`` becomes a dispatcher (installed with the first
  patched layer of that family, removed with the last) that runs the
  attention with the bias for layers carrying a :class:`LayerState` in
  ``module.__dict__["_wavepe"]`` -- the dense path returning the
  probabilities when they are read (``output_attentions``), else what
  "wavepe" runs: fused where the (dense, eager-made) mask is causal, windowed
  and padded (Gemma 2, whose default is eager) -- and the original function
  for every other module (unpatched models are untouched).

With the eager dispatcher comes one for the family's ``apply_rotary_pos_emb``
(same lifetime): where the rotary hook handed out the identity rotation
(``cos = 1, sin = 0``: wavelet, alibi, nope; :mod:`._hf_rotary` marks that
``cos``), it returns q and k as they are instead of computing
``q * 1 + rotate_half(q) * 0`` in every layer (a dozen tensor ops a layer,
more than the fused attention of a one-token decoding step costs); any other
``cos`` goes to the original.  Under torch.compile nothing is marked and the
original runs (the compiler folds nothing away, the result is the same).

The layer state copies by value, so ``deepcopy`` and pickle of a patched model work.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch import nn

from . import _hf_attention as _attn
from ._hf_rotary import IDENTITY_MARK
from ._hf_settings import CONFIG_KEY, PosEncSettings

ATTN_IMPLEMENTATION = "wavepe"

# modeling module -> its original eager_attention_forward, while the module carries wavepe's dispatcher
_ORIGINAL_EAGER: dict[Any, Any] = {}
# modeling module -> its original apply_rotary_pos_emb, likewise (installed and removed with the eager one)
_ORIGINAL_ROTARY: dict[Any, Any] = {}
# modeling module -> ids of the live states that need the dispatcher (it goes when none is left)
_LIVE: dict[Any, set[int]] = {}


class LayerState:
    """What one patched attention module needs: the settings, and whether it checks position_ids."""

    def __init__(self, settings: PosEncSettings, check_positions: bool, modeling: Any) -> None:
        self.settings = settings
        self.check_positions = check_positions  # one layer per model checks position_ids
        self.modeling = modeling  # the family's modeling module (its eager_attention_forward)
        if settings.pos_enc in ("wavelet", "alibi", "nope"):  # the identity rotation (nope: the rotary one only)
            register_state(self)

    # deepcopy / pickle of a patched model: copy the settings by value, re-arm the dispatcher
    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "check_positions": self.check_positions,
                "modeling": self.modeling.__name__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        import importlib

        self.__init__(state["settings"], state["check_positions"], importlib.import_module(state["modeling"]))


def register_state(state: LayerState) -> None:
    """Count a live state of its family, installing the family's eager dispatcher for the first one."""
    modeling = state.modeling
    if modeling not in _ORIGINAL_EAGER:
        _ORIGINAL_EAGER[modeling] = modeling.eager_attention_forward
        modeling.eager_attention_forward = _make_eager_dispatcher(_ORIGINAL_EAGER[modeling])
        original_rotary = getattr(modeling, "apply_rotary_pos_emb", None)
        if original_rotary is not None:
            _ORIGINAL_ROTARY[modeling] = original_rotary
            modeling.apply_rotary_pos_emb = _make_rotary_dispatcher(original_rotary)
    _LIVE.setdefault(modeling, set()).add(id(state))
    # a state that is dropped with its model (never removed) is forgotten by the collector
    state._finalizer = weakref.finalize(state, _forget_state, modeling, id(state))


def _forget_state(modeling: Any, key: int) -> None:
    live = _LIVE.get(modeling)
    if live is None:
        return
    live.discard(key)
    if not live:
        del _LIVE[modeling]
        original = _ORIGINAL_EAGER.pop(modeling, None)
        if original is not None:
            modeling.eager_attention_forward = original
        original = _ORIGINAL_ROTARY.pop(modeling, None)
        if original is not None:
            modeling.apply_rotary_pos_emb = original


def release_state(state: LayerState) -> None:
    finalizer = getattr(state, "_finalizer", None)
    if finalizer is not None:
        finalizer()  # runs _forget_state once


def _make_eager_dispatcher(original: Any) -> Any:
    @functools.wraps(original)
    def eager_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                attention_mask: Any, *args: Any, **kwargs: Any) -> Any:
        state = module.__dict__.get("_wavepe")
        if state is None or state.settings.pos_enc not in ("wavelet", "alibi"):
            return original(module, query, key, value, attention_mask, *args, **kwargs)
        return _layer_attention(module, state, query, key, value, attention_mask,
                                weights=_attentions_requested(kwargs), **kwargs)

    eager_attention_forward.__wavepe_dispatcher__ = True  # type: ignore[attr-defined]
    return eager_attention_forward


def _collector() -> Any:
    """transformers' collector of the outputs a forward returns (``output_attentions=True`` puts "attentions" in
    it: hooks then record every attention module's probabilities), or None in a transformers without it."""
    try:
        from transformers.utils import output_capturing
    except ImportError:
        return None
    return getattr(output_capturing, "_active_collector", None)


_COLLECTOR = _collector()


def _attentions_requested(kwargs: dict[str, Any]) -> bool:
    """Whether an eager call's probabilities will be read: ``output_attentions`` passed, or transformers'
    collector gathering attentions for this forward (a CompileableContextVar: torch.compile reads it too).
    Else the eager path runs like the "wavepe" one -- fused, where the mask allows -- and returns no
    probabilities, which nothing reads.  Without the collector (another transformers): always."""
    if kwargs.get("output_attentions"):
        return True
    if _COLLECTOR is None:
        return True
    active = _COLLECTOR.get()
    return isinstance(active, dict) and "attentions" in active


def _make_rotary_dispatcher(original: Any) -> Any:
    @functools.wraps(original)
    def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *args: Any,
                             **kwargs: Any) -> Any:
        if not torch.compiler.is_compiling() and getattr(cos, IDENTITY_MARK, False):
            return q, k
        return original(q, k, cos, sin, *args, **kwargs)

    apply_rotary_pos_emb.__wavepe_dispatcher__ = True  # type: ignore[attr-defined]
    return apply_rotary_pos_emb


def _layer_attention(module: nn.Module, state: LayerState | None, query: torch.Tensor, key: torch.Tensor,
                     value: torch.Tensor, attention_mask: Any, *, weights: bool, dropout: float = 0.0,
                     scaling: float | None = None, sliding_window: int | None = None, softcap: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    settings = state.settings if state is not None else PosEncSettings("nope")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else bool(causal)
    relative = settings.pos_enc in ("wavelet", "alibi")
    check = relative and state is not None and state.check_positions and not torch.compiler.is_compiling()
    out, probs, _ = _attn.attend(query, key, value, attention_mask, pos_enc=settings.pos_enc,
                                 wavelet=settings.wavelet, scale=scale, dropout=dropout,
                                 sliding_window=sliding_window, softcap=softcap, causal=causal, weights=weights,
                                 position_ids=kwargs.get("position_ids") if relative else None,
                                 check_positions=check)
    return out, probs


def wavepe_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: Any, dropout: float = 0.0, scaling: float | None = None,
                             **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``attn_implementation="wavepe"``: attention through wavepe's kernel, with the layer's position bias.

    Called by transformers' attention forward with query (B, H, M, d),
    key/value (B, H_kv, N, d) (q, k rotated by the model's rotary module:
    wavepe's, or the identity for relative encodings); returns ((B, M, H, d),
    the probabilities (B, H, M, N) when ``output_attentions=True``, else None).
    A layer that is not patched runs as "nope" (plain attention of q and k as given);
    a model whose ``config.wavepe`` asks for another encoding must be patched first.
    """
    state = module.__dict__.get("_wavepe")
    if state is None:
        stored = getattr(getattr(module, "config", None), CONFIG_KEY, None)
        saved = PosEncSettings.from_dict(stored) if stored is not None else None
        if saved is not None and (saved.pos_enc != "rope" or saved.rope is not None):
            own = " with its own RoPE spectrum" if saved.pos_enc == "rope" else ""
            raise RuntimeError(
                f"{type(module).__name__}: config.wavepe asks for pos_enc={saved.pos_enc!r}{own}, but this model's "
                "attention is not patched (transformers applied its own RoPE); call wavepe.patch(model), "
                "which reads config.wavepe")
    weights = bool(kwargs.pop("output_attentions", False))
    return _layer_attention(module, state, query, key, value, attention_mask, weights=weights, dropout=dropout,
                            scaling=scaling, **kwargs)
