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

from .._requires import MissingDependency, require

require("transformers", "wavepe.integrations.hf (wavepe.patch_llama)")
import transformers  # noqa: E402

if int(transformers.__version__.split(".")[0]) < 5:  # pragma: no cover
    raise MissingDependency(f"wavepe.integrations.hf needs transformers >= 5 (tested with 5.23), found "
                            f"{transformers.__version__}: pip install -U 'wavepe[hf]'")
from transformers.masking_utils import AttentionMaskInterface  # noqa: E402
from transformers.modeling_utils import AttentionInterface, PreTrainedModel  # noqa: E402

from ..config import RopeConfig, WaveletConfig  # noqa: E402
from . import _hf_attention as _attn  # noqa: E402
from ._hf_forward import ATTN_IMPLEMENTATION, LayerState, release_state  # noqa: E402
from ._hf_settings import CONFIG_KEY, POS_ENCS, PosEncSettings, choose_settings, for_head_dim  # noqa: E402

__all__ = ["patch_llama", "unpatch", "get_patch", "WavepePatch", "PosEncSettings", "POS_ENCS", "ATTN_IMPLEMENTATION",
           "wavepe_attention_forward", "register"]

# (transformers model folder, attention class): the classes whose forward wavepe reproduces
_SUPPORTED = (("llama", "LlamaAttention"), ("mistral", "MistralAttention"), ("qwen2", "Qwen2Attention"))
_NEEDED_ATTRS = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "layer_idx", "scaling", "config",
                 "num_key_value_groups", "attention_dropout")
_UNSUPPORTED_PARTS = ("q_norm", "k_norm")  # Qwen3/OLMo-style q/k norms: a different forward


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
            own = " with its own RoPE spectrum" if saved.pos_enc == "rope" else ""
            raise RuntimeError(
                f"{type(module).__name__}: config.wavepe asks for pos_enc={saved.pos_enc!r}{own}, but this model's "
                "attention is not patched (transformers applied its own RoPE); call wavepe.patch_llama(model), "
                "which reads config.wavepe")
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
                release_state(state)
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
    settings = for_head_dim(choose_settings(pos_enc, wavelet, rope, stored), head_dim)
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
            release_state(state)

    first = min(modules, key=lambda m: int(m.layer_idx))
    for mod in modules:
        cls = _base_attention_class(mod, classes)
        mod.__dict__["_wavepe"] = LayerState(cls, settings, rotary, mod is first,
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
            choose_settings(pos_enc, wavelet, rope, None)
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
        state = "active" if self._active else "removed"
        return f"<wavepe patch of class {self.cls.__name__}: {self.settings!r}, {state}>"


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
