"""The forward of a patched attention module and the class-level dispatcher that routes to it.

Patching never replaces a module's ``forward`` attribute: the attention class's
``forward`` becomes a dispatcher (installed with the first patched module of that
class, removed with the last) that runs :func:`wavepe_forward` for modules carrying
a :class:`LayerState` in ``module.__dict__["_wavepe"]`` and the original forward
for every other module.  So unpatched models are untouched, and ``deepcopy`` or
pickle of a patched model work (the state copies by value; a module attribute
holding a bound method would not pickle).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from . import _hf_attention as _attn
from ._hf_settings import PosEncSettings

ATTN_IMPLEMENTATION = "wavepe"

# attention class -> its original forward, while the class carries wavepe's dispatcher
_ORIGINAL_FORWARD: dict[type, Any] = {}
# attention class -> ids of the live states of its modules (the dispatcher goes when none is left)
_LIVE: dict[type, set[int]] = {}


class LayerState:
    """What one patched attention module needs: settings, the model's rotary module, caches."""

    def __init__(self, attn_cls: type, settings: PosEncSettings, rotary: nn.Module | None, check_positions: bool,
                 eager_fn: Any) -> None:
        self.attn_cls = attn_cls
        self.settings = settings
        self.rotary = rotary  # the model's RotaryEmbedding (for its inv_freq), not a submodule
        self.check_positions = check_positions  # one layer per model checks position_ids
        self.eager_fn = eager_fn  # the model file's eager_attention_forward (HF's default interface)
        self._inv_freq: dict[torch.device, torch.Tensor] = {}
        register_state(self)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: Any) -> tuple[torch.Tensor, torch.Tensor]:
        from .. import ops

        cfg = self.settings.rope
        if cfg is None:
            rot = self.rotary
            return ops.rope_inv_freq(q, k, positions, rot.inv_freq, layout="half",
                                     scale=float(getattr(rot, "attention_scaling", 1.0)))
        d = q.shape[-1]
        inv = self._inv_freq.get(q.device)
        if inv is None:
            inv = self._inv_freq.setdefault(q.device, torch.from_numpy(cfg.inv_freq(d)).to(q.device))
        return ops.rope_inv_freq(q, k, positions, inv, layout=cfg.layout, rotary_pairs=cfg.rotary_pairs(d),
                                 scale=cfg.attention_factor)

    # deepcopy / pickle of a patched model: copy the settings by value, re-arm the dispatcher
    def __getstate__(self) -> dict[str, Any]:
        return {"attn_cls": self.attn_cls, "settings": self.settings, "rotary": self.rotary,
                "check_positions": self.check_positions, "eager_fn": self.eager_fn}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._inv_freq = {}
        register_state(self)


def register_state(state: LayerState) -> None:
    """Count a live state of its class, installing the class's dispatcher for the first one."""
    cls = state.attn_cls
    if cls not in _ORIGINAL_FORWARD:
        _ORIGINAL_FORWARD[cls] = cls.__dict__["forward"]
        cls.forward = _make_dispatcher(_ORIGINAL_FORWARD[cls])
    _LIVE.setdefault(cls, set()).add(id(state))
    # a state that is dropped with its model (never removed) is forgotten by the collector
    state._finalizer = weakref.finalize(state, _forget_state, cls, id(state))


def _forget_state(cls: type, key: int) -> None:
    live = _LIVE.get(cls)
    if live is None:
        return
    live.discard(key)
    if not live:
        del _LIVE[cls]
        original = _ORIGINAL_FORWARD.pop(cls, None)
        if original is not None:
            cls.forward = original


def release_state(state: LayerState) -> None:
    state._finalizer()  # runs _forget_state once


def _make_dispatcher(original: Any) -> Any:
    @functools.wraps(original)
    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        state = self.__dict__.get("_wavepe")
        if state is None:
            return original(self, *args, **kwargs)
        return wavepe_forward(self, state, *args, **kwargs)

    forward.__wavepe_dispatcher__ = True  # type: ignore[attr-defined]
    return forward


def _sliding_window(module: nn.Module) -> int | None:
    if "sliding_window" in module.__dict__ or hasattr(type(module), "sliding_window"):
        return getattr(module, "sliding_window", None)  # Qwen2: per layer
    return getattr(module.config, "sliding_window", None)  # Mistral: the whole model


def _static_query_offset(cache: Any, layer_idx: int, pos_enc: str) -> int | None:
    """Index of the first query among the keys when the cache does not end at the queries (StaticCache).

    Dynamic caches return keys that end with the new queries (q_offset = N - M): None.
    """
    layers = getattr(cache, "layers", None) if cache is not None else None
    if layers is None or layer_idx >= len(layers):
        return None
    layer = layers[layer_idx]
    if not getattr(layer, "is_compileable", False):
        return None
    if getattr(layer, "is_sliding", False) or not hasattr(layer, "cumulative_length"):
        if pos_enc in ("rope", "nope"):
            return None  # no bias: the mask alone says which keys count
        raise NotImplementedError(f"pos_enc={pos_enc!r} with a {type(layer).__name__} cache layer: its keys are not "
                                  "stored in sequence order; use DynamicCache (the default) or StaticCache")
    if not getattr(layer, "is_initialized", False):
        return 0
    return int(layer.get_seq_length())


def wavepe_forward(self: nn.Module, state: LayerState, hidden_states: torch.Tensor,
                    position_embeddings: Any = None, attention_mask: Any = None, past_key_values: Any = None,
                    **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """LlamaAttention.forward with wavepe's position encoding.  hidden_states (B, M, hidden)."""
    settings = state.settings
    pos_enc = settings.pos_enc
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    q = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    k = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    static_offset = _static_query_offset(past_key_values, self.layer_idx, pos_enc)
    position_ids = kwargs.get("position_ids")
    if pos_enc == "rope":
        if position_ids is not None:
            positions: Any = position_ids
        elif past_key_values is not None:
            positions = int(past_key_values.get_seq_length(self.layer_idx))
        else:
            positions = 0
        q, k = state.rotate(q, k, positions)
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, self.layer_idx)
    dropout = self.attention_dropout if self.training else 0.0
    window = _sliding_window(self)
    impl = self.config._attn_implementation
    if pos_enc in ("rope", "nope") and impl != ATTN_IMPLEMENTATION:
        # no bias: any attention implementation the user chose does the rest
        interface = ALL_ATTENTION_FUNCTIONS.get_interface(impl, state.eager_fn)
        if window is not None:
            kwargs["sliding_window"] = window
        out, weights = interface(self, q, k, v, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs)
    else:
        relative = pos_enc in ("wavelet", "alibi")
        check_ids = position_ids if (relative and state.check_positions and not torch.compiler.is_compiling()) else None
        out, _ = _attn.attend(q, k, v, attention_mask, pos_enc=pos_enc, wavelet=settings.wavelet, scale=self.scaling,
                              dropout=dropout, q_offset=static_offset if relative else None, sliding_window=window,
                              position_ids=check_ids)
        weights = None
    out = out.reshape(*input_shape, -1).contiguous()
    return self.o_proj(out), weights
