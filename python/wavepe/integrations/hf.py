"""Hugging Face shim: swap the position encoding of Llama-style attention in one call.

    import wavepe
    handle = wavepe.patch_llama(model, "wavelet")      # or "rope", "alibi", "nope"
    ...                                                 # train, evaluate, generate, save
    handle.remove()                                     # the original model again

What :func:`patch_llama` does to a model instance:

* every ``LlamaAttention`` (also ``MistralAttention``, ``Qwen2Attention``) gets
  per-module settings; the attention class's ``forward`` becomes a dispatcher
  that runs wavepe's forward for modules that carry settings and the original
  forward for every other module (unpatched models are untouched);
* ``model.config.wavepe`` stores the settings (``save_pretrained`` writes them;
  ``patch_llama(reloaded)`` reads them back);
* ``model.config._attn_implementation`` becomes ``"wavepe"``, an
  ``AttentionInterface`` backend registered here together with its mask
  function, so masks arrive in wavepe's compact form (no M x N tensor);
* ``handle.remove()`` undoes all three.

Patching a model *class* (``patch_llama(LlamaForCausalLM, ...)``) patches every
instance constructed while the patch is active, ``from_pretrained`` included.

The forward: q, k, v projections as in transformers; "rope" rotates q and k
with wavepe's RoPE at ``position_ids`` (the model's own ``inv_freq`` and
attention scaling unless a :class:`~wavepe.RopeConfig` is given); "wavelet",
"alibi" and "nope" do not rotate.  The cache is updated as usual, then
attention runs through :func:`wavepe.ops.wavelet_attention` (see
:mod:`wavepe.integrations._hf_attention` for masks and the dense fallback).
"rope" and "nope" honour another attention implementation if the user sets
one after patching (``model.set_attn_implementation("sdpa")``).
"""

from __future__ import annotations

import copy
import functools
import importlib
import sys
import weakref
from typing import Any, Mapping

import torch
from torch import nn

try:
    import transformers
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface, PreTrainedModel
except ImportError as exc:  # pragma: no cover - exercised only without transformers
    raise ImportError("wavepe.integrations.hf needs transformers >= 5 (pip install 'transformers>=5')") from exc

from .._validate import check_choice
from ..config import RopeConfig, WaveletConfig
from . import _hf_attention as _attn

__all__ = ["patch_llama", "unpatch", "get_patch", "WavepePatch", "PosEncSettings", "POS_ENCS", "ATTN_IMPLEMENTATION",
           "wavepe_attention_forward", "register"]

POS_ENCS: tuple[str, ...] = ("wavelet", "rope", "alibi", "nope")
ATTN_IMPLEMENTATION = "wavepe"
CONFIG_KEY = "wavepe"
# (transformers model folder, attention class): the classes whose forward wavepe reproduces
_SUPPORTED = (("llama", "LlamaAttention"), ("mistral", "MistralAttention"), ("qwen2", "Qwen2Attention"))
_NEEDED_ATTRS = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "layer_idx", "scaling", "config",
                 "num_key_value_groups", "attention_dropout")
_UNSUPPORTED_PARTS = ("q_norm", "k_norm")  # Qwen3/OLMo-style q/k norms: a different forward

if int(transformers.__version__.split(".")[0]) < 5:  # pragma: no cover
    raise ImportError(f"wavepe.integrations.hf needs transformers >= 5, found {transformers.__version__}")


# ---- settings ---------------------------------------------------------------------------------------------------

class PosEncSettings:
    """What a patched attention does: ``pos_enc`` and its configuration.

    ``wavelet`` is set exactly for "wavelet"; ``rope`` is a RopeConfig for "rope" with
    another spectrum, or None for the model's own (its ``inv_freq`` and attention scaling).
    """

    __slots__ = ("pos_enc", "wavelet", "rope")

    def __init__(self, pos_enc: str, wavelet: WaveletConfig | None = None, rope: RopeConfig | None = None) -> None:
        self.pos_enc = check_choice("pos_enc", pos_enc, POS_ENCS)
        if wavelet is not None and pos_enc != "wavelet":
            raise ValueError(f"wavelet= applies to pos_enc='wavelet' only, got pos_enc={pos_enc!r}")
        if rope is not None and pos_enc != "rope":
            raise ValueError(f"rope= applies to pos_enc='rope' only, got pos_enc={pos_enc!r}")
        self.wavelet = wavelet
        self.rope = rope

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form stored as ``config.wavepe``; inverse of :meth:`from_dict`."""
        return {"pos_enc": self.pos_enc,
                "wavelet": self.wavelet.to_dict() if self.wavelet is not None else None,
                "rope": self.rope.to_dict() if self.rope is not None else None}

    @classmethod
    def from_dict(cls, d: Any, where: str = "config.wavepe") -> "PosEncSettings":
        if not isinstance(d, Mapping):
            raise TypeError(f"{where} must be a dict with 'pos_enc', 'wavelet', 'rope', got {d!r}")
        unknown = sorted(set(d) - {"pos_enc", "wavelet", "rope"})
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}; expected 'pos_enc', 'wavelet', 'rope'")
        pos_enc = check_choice(f"{where}['pos_enc']", d.get("pos_enc"), POS_ENCS)
        wavelet = _as_wavelet(d.get("wavelet"), f"{where}['wavelet']")
        rope = _as_rope(d.get("rope"), f"{where}['rope']")
        return cls(pos_enc, wavelet, rope)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PosEncSettings) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.pos_enc, self.wavelet, self.rope))

    def __repr__(self) -> str:
        return f"PosEncSettings(pos_enc={self.pos_enc!r}, wavelet={self.wavelet!r}, rope={self.rope!r})"

    # configs hold locks and caches: copies go through the dict form
    def __reduce__(self) -> tuple:
        return (PosEncSettings.from_dict, (self.to_dict(),))


def _as_wavelet(value: Any, name: str) -> WaveletConfig | None:
    if value is None or isinstance(value, WaveletConfig):
        return value
    if isinstance(value, Mapping):
        return WaveletConfig.from_dict(value)
    raise TypeError(f"{name} must be a WaveletConfig, its to_dict() form or None, got {type(value).__name__}")


def _as_rope(value: Any, name: str) -> RopeConfig | None:
    if value is None or isinstance(value, RopeConfig):
        return value
    if isinstance(value, Mapping):
        return RopeConfig.from_dict(value)
    raise TypeError(f"{name} must be a RopeConfig, its to_dict() form or None, got {type(value).__name__}")


def _choose_settings(pos_enc: str | None, wavelet: Any, rope: Any, stored: Any) -> PosEncSettings:
    """Explicit arguments first, then the settings stored in the config, then "wavelet" on the default grid."""
    wavelet = _as_wavelet(wavelet, "wavelet")
    rope = _as_rope(rope, "rope")
    saved = PosEncSettings.from_dict(stored) if stored is not None else None
    if pos_enc is None:
        if wavelet is not None and rope is not None:
            raise ValueError("pass either wavelet= or rope=, not both (they belong to different pos_enc)")
        if wavelet is not None:
            pos_enc = "wavelet"
        elif rope is not None:
            pos_enc = "rope"
        else:
            pos_enc = saved.pos_enc if saved is not None else "wavelet"
    pos_enc = check_choice("pos_enc", pos_enc, POS_ENCS)
    if saved is not None and saved.pos_enc == pos_enc:
        wavelet = wavelet if wavelet is not None else saved.wavelet
        rope = rope if rope is not None else saved.rope
    return PosEncSettings(pos_enc, wavelet, rope)


def _for_head_dim(settings: PosEncSettings, head_dim: int) -> PosEncSettings:
    """Fill in the default wavelet grid and check the configurations against the model's head_dim."""
    if settings.pos_enc == "wavelet":
        wavelet = settings.wavelet
        if wavelet is None:
            if head_dim % 8:
                raise ValueError(f"pos_enc='wavelet': the default grid has 8 scales and needs head_dim divisible by 8, "
                                 f"got head_dim={head_dim}; pass wavelet=WaveletConfig.grid({head_dim}, n_scales=...) "
                                 "or WaveletConfig(scales=..., shifts=...)")
            wavelet = WaveletConfig.grid(head_dim)
        elif wavelet.head_dim != head_dim:
            raise ValueError(f"wavelet.head_dim={wavelet.head_dim} does not match the model's head_dim={head_dim}")
        return PosEncSettings("wavelet", wavelet)
    if settings.pos_enc == "rope" and head_dim % 2:
        raise ValueError(f"pos_enc='rope' needs an even head_dim (pairs of dimensions), got head_dim={head_dim}")
    return settings


# ---- per-module state and the forward ---------------------------------------------------------------------------

# attention class -> its original forward, while the class carries wavepe's dispatcher
_ORIGINAL_FORWARD: dict[type, Any] = {}
# attention class -> ids of the live states of its modules (the dispatcher goes when none is left)
_LIVE: dict[type, set[int]] = {}


class _LayerState:
    """What one patched attention module needs: settings, the model's rotary module, caches."""

    def __init__(self, attn_cls: type, settings: PosEncSettings, rotary: nn.Module | None, check_positions: bool,
                 eager_fn: Any) -> None:
        self.attn_cls = attn_cls
        self.settings = settings
        self.rotary = rotary  # the model's RotaryEmbedding (for its inv_freq), not a submodule
        self.check_positions = check_positions  # one layer per model checks position_ids
        self.eager_fn = eager_fn  # the model file's eager_attention_forward (HF's default interface)
        self._inv_freq: dict[torch.device, torch.Tensor] = {}
        _register_state(self)

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
        _register_state(self)


def _register_state(state: _LayerState) -> None:
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


def _release_state(state: _LayerState) -> None:
    state._finalizer()  # runs _forget_state once


def _make_dispatcher(original: Any) -> Any:
    @functools.wraps(original)
    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        state = self.__dict__.get("_wavepe")
        if state is None:
            return original(self, *args, **kwargs)
        return _wavepe_forward(self, state, *args, **kwargs)

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


def _wavepe_forward(self: nn.Module, state: _LayerState, hidden_states: torch.Tensor,
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
    m = q.shape[2]
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


# ---- the AttentionInterface backend -----------------------------------------------------------------------------

def wavepe_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: Any, dropout: float = 0.0, scaling: float | None = None,
                             sliding_window: int | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """``attn_implementation="wavepe"``: attention through wavepe's kernel for q and k as given.

    Called by transformers' own forward (q, k already rotated by the model's RoPE) with
    query (B, H, M, d), key/value (B, H_kv, N, d); returns ((B, M, H, d), None).
    A model whose ``config.wavepe`` asks for another encoding must be patched first.
    """
    stored = getattr(getattr(module, "config", None), CONFIG_KEY, None)
    if stored is not None and "_wavepe" not in module.__dict__:
        saved = PosEncSettings.from_dict(stored)
        if saved.pos_enc != "rope" or saved.rope is not None:
            raise RuntimeError(
                f"{type(module).__name__}: config.wavepe asks for pos_enc={saved.pos_enc!r}"
                f"{' with its own RoPE spectrum' if saved.pos_enc == 'rope' else ''}, but this model's attention is not "
                "patched (transformers applied its own RoPE); call wavepe.patch_llama(model), which reads config.wavepe")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else bool(causal)
    out, _ = _attn.attend(query, key, value, attention_mask, pos_enc="nope", wavelet=None, scale=scale,
                          dropout=dropout, q_offset=None, sliding_window=sliding_window, causal=causal)
    return out, None


def register() -> None:
    """Register ``"wavepe"`` with transformers' AttentionInterface and AttentionMaskInterface (idempotent)."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, wavepe_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _attn.wavepe_mask)


register()


# ---- patching ---------------------------------------------------------------------------------------------------

def _attention_classes() -> dict[type, Any]:
    """Supported attention classes of the installed transformers -> their modeling module."""
    found: dict[type, Any] = {}
    for folder, name in _SUPPORTED:
        try:
            module = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
        except ImportError:  # pragma: no cover - a transformers without that model
            continue
        cls = getattr(module, name, None)
        if cls is not None:
            found[cls] = module
    return found


def _supported_names() -> str:
    return ", ".join(name for _, name in _SUPPORTED)


def _base_attention_class(module: nn.Module, classes: dict[type, Any]) -> type | None:
    for cls in classes:
        if isinstance(module, cls):
            return cls
    return None


class WavepePatch:
    """Handle returned by :func:`patch_llama`: ``remove()`` restores the original behaviour.

    Also a context manager (``with wavepe.patch_llama(model): ...``).
    """

    settings: PosEncSettings | None

    @property
    def active(self) -> bool:
        raise NotImplementedError

    def remove(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> "WavepePatch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


_MISSING = object()


class _ModelPatch(WavepePatch):
    """A patched model instance: its attention modules, configs and previous config values."""

    def __init__(self, model: nn.Module, settings: PosEncSettings, modules: list[nn.Module],
                 restore: list[tuple[Any, Any, Any]]) -> None:
        self.model = model
        self.settings = settings
        self.modules = modules
        self._restore = restore  # (config, previous config.wavepe or _MISSING, previous attn implementation)
        self._active = True

    @property
    def active(self) -> bool:
        return self._active

    def remove(self) -> None:
        if not self._active:
            return
        self._active = False
        for module in self.modules:
            state = module.__dict__.pop("_wavepe", None)
            if state is not None:
                _release_state(state)
        for config, previous, previous_impl in self._restore:
            if previous is _MISSING:
                if CONFIG_KEY in config.__dict__:
                    delattr(config, CONFIG_KEY)
            else:
                setattr(config, CONFIG_KEY, previous)
            config._attn_implementation_internal = previous_impl
        if self.model.__dict__.get("_wavepe_patch") is self:
            del self.model.__dict__["_wavepe_patch"]

    def __repr__(self) -> str:
        state = "active" if self._active else "removed"
        return f"<wavepe patch of {type(self.model).__name__}: {self.settings!r}, {len(self.modules)} layers, {state}>"

    # copies of a patched model carry a working copy of the handle
    def __deepcopy__(self, memo: dict) -> "_ModelPatch":
        new = _ModelPatch.__new__(_ModelPatch)
        memo[id(self)] = new
        new.model = copy.deepcopy(self.model, memo)
        new.settings = self.settings
        new.modules = copy.deepcopy(self.modules, memo)
        new._restore = [(copy.deepcopy(c, memo), copy.deepcopy(p, memo), i) for c, p, i in self._restore]
        new._active = self._active
        return new


def _find_rotary(model: nn.Module) -> nn.Module | None:
    found = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding") and hasattr(m, "inv_freq")]
    return found[0] if len(found) == 1 else None


def _patch_model(model: nn.Module, pos_enc: str | None, wavelet: Any, rope: Any) -> _ModelPatch:
    classes = _attention_classes()
    modules: list[nn.Module] = []
    for mod in model.modules():
        base = _base_attention_class(mod, classes)
        if base is None:
            continue
        if type(mod).forward is not base.forward and not getattr(type(mod).forward, "__wavepe_dispatcher__", False):
            raise TypeError(f"patch_llama: {type(mod).__name__} subclasses {base.__name__} with its own forward, "
                            "which wavepe would replace; patch the base class's models instead")
        missing = [a for a in _NEEDED_ATTRS if not hasattr(mod, a)]
        extra = [a for a in _UNSUPPORTED_PARTS if hasattr(mod, a)]
        if missing or extra:
            raise TypeError(f"patch_llama: {type(mod).__name__} does not have the layout of {base.__name__} "
                            f"(missing {missing}, unexpected {extra})")
        modules.append(mod)
    if not modules:
        others = sorted({type(m).__name__ for m in model.modules() if "Attention" in type(m).__name__})
        raise TypeError(f"patch_llama supports models whose attention is one of {_supported_names()}; "
                        f"{type(model).__name__} has {', '.join(others) if others else 'no attention module'}")
    head_dims = {int(m.head_dim) for m in modules}
    if len(head_dims) != 1:
        raise ValueError(f"patch_llama: the attention layers have different head dims {sorted(head_dims)}")
    head_dim = head_dims.pop()
    configs: list[Any] = []
    for mod in modules:
        if all(mod.config is not c for c in configs):
            configs.append(mod.config)
    stored = getattr(configs[0], CONFIG_KEY, None)
    settings = _for_head_dim(_choose_settings(pos_enc, wavelet, rope, stored), head_dim)
    rotary = None
    if settings.pos_enc == "rope" and settings.rope is None:
        rotary = _find_rotary(model)
        if rotary is None:
            raise ValueError(f"pos_enc='rope' with the model's own spectrum needs the model's rotary embedding "
                             f"(one module with an inv_freq buffer) and {type(model).__name__} has none or several; "
                             "pass rope=RopeConfig(theta=...)")

    for sub in model.modules():  # an earlier patch of this model or of a model inside it
        previous = sub.__dict__.get("_wavepe_patch")
        if previous is not None:
            previous.remove()
    for mod in modules:  # modules patched through an enclosing model
        state = mod.__dict__.pop("_wavepe", None)
        if state is not None:
            _release_state(state)

    first = min(modules, key=lambda m: int(m.layer_idx))
    for mod in modules:
        cls = _base_attention_class(mod, classes)
        mod.__dict__["_wavepe"] = _LayerState(cls, settings, rotary, mod is first,
                                              getattr(classes[cls], "eager_attention_forward"))
    restore = []
    for config in configs:
        restore.append((config, config.__dict__.get(CONFIG_KEY, _MISSING), config._attn_implementation))
        setattr(config, CONFIG_KEY, settings.to_dict())
        config._attn_implementation_internal = ATTN_IMPLEMENTATION
    handle = _ModelPatch(model, settings, modules, restore)
    model.__dict__["_wavepe_patch"] = handle
    return handle


class _ClassPatch(WavepePatch):
    """A patched model class: every instance constructed while active is patched at the end of ``__init__``."""

    def __init__(self, cls: type, pos_enc: str | None, wavelet: Any, rope: Any) -> None:
        self.cls = cls
        self.settings = None if pos_enc is None and wavelet is None and rope is None else \
            _choose_settings(pos_enc, wavelet, rope, None)
        self._args = (pos_enc, wavelet, rope)
        self._instances: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self._own_init = cls.__dict__.get("__init__", _MISSING)
        resolved_init = cls.__init__
        patch = self

        @functools.wraps(resolved_init)
        def __init__(model: nn.Module, *args: Any, **kwargs: Any) -> None:
            resolved_init(model, *args, **kwargs)
            if patch._active:
                _patch_model(model, *patch._args)
                patch._instances.add(model)

        self._active = True
        cls.__init__ = __init__  # type: ignore[misc]

    @property
    def active(self) -> bool:
        return self._active

    def remove(self) -> None:
        if not self._active:
            return
        self._active = False
        if self._own_init is _MISSING:
            del self.cls.__init__  # type: ignore[misc]
        else:
            self.cls.__init__ = self._own_init  # type: ignore[misc]
        for model in list(self._instances):
            handle = model.__dict__.get("_wavepe_patch")
            if handle is not None:
                handle.remove()

    def __repr__(self) -> str:
        return f"<wavepe patch of class {self.cls.__name__}: {self.settings!r}, {'active' if self._active else 'removed'}>"


def patch_llama(model_or_class: Any, pos_enc: str | None = None, *, wavelet: WaveletConfig | Mapping | None = None,
                rope: RopeConfig | Mapping | None = None) -> WavepePatch:
    """Swap the position encoding of every Llama-style attention of a model (or of a model class).

    Args:
        model_or_class: a model instance (``LlamaForCausalLM``, ``LlamaModel``, Mistral, Qwen2, or
            any module containing their attention layers), or a model class such as
            ``LlamaForCausalLM``, in which case every instance constructed while the patch is
            active (``from_pretrained`` included) is patched.
        pos_enc: "wavelet" (wavelet relative position representation), "rope" (RoPE through
            wavepe's kernel), "alibi" or "nope".  Default: the settings stored in
            ``model.config.wavepe`` by an earlier patch (e.g. of a saved checkpoint), else
            "rope" if only ``rope=`` is given, else "wavelet".
        wavelet: for "wavelet": the per-dimension wavelets (default: the paper's grid for the
            model's head_dim, 8 scales x head_dim/8 shifts).
        rope: for "rope": a :class:`~wavepe.RopeConfig` (θ, p-RoPE fraction, layout, scaling);
            default None uses the model's own ``inv_freq`` and attention scaling, which
            reproduces the unpatched model.

    Returns:
        A :class:`WavepePatch`; ``remove()`` (or leaving its ``with`` block) restores the
        original behaviour, config and attention implementation.

    Raises:
        TypeError: the model has no supported attention (supported: LlamaAttention,
            MistralAttention, Qwen2Attention), or a class that is not a transformers model class.
        ValueError: bad ``pos_enc``, configuration/head_dim mismatch (e.g. the default wavelet grid
            needs head_dim divisible by 8; RoPE needs an even head_dim).
    """
    if isinstance(model_or_class, type):
        cls = model_or_class
        if not issubclass(cls, PreTrainedModel):
            raise TypeError(f"patch_llama: a class must be a transformers model class such as LlamaForCausalLM, "
                            f"got {cls.__module__}.{cls.__qualname__}")
        module = sys.modules.get(cls.__module__)
        names = {name for _, name in _SUPPORTED}
        if module is None or not any(hasattr(module, name) for name in names):
            raise TypeError(f"patch_llama supports models whose attention is one of {_supported_names()}; "
                            f"{cls.__qualname__} is defined in {cls.__module__}, which has none")
        return _ClassPatch(cls, pos_enc, wavelet, rope)
    if not isinstance(model_or_class, nn.Module):
        raise TypeError(f"patch_llama: model_or_class must be a torch.nn.Module or a model class, "
                        f"got {type(model_or_class).__name__}")
    return _patch_model(model_or_class, pos_enc, wavelet, rope)


def get_patch(model: nn.Module) -> WavepePatch | None:
    """The active patch of ``model`` (None if it is not patched)."""
    return model.__dict__.get("_wavepe_patch")


def unpatch(model: nn.Module) -> None:
    """Remove wavepe's patch from ``model`` if it has one (same as ``handle.remove()``)."""
    handle = get_patch(model)
    if handle is not None:
        handle.remove()
