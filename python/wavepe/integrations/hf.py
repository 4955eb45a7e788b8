"""Hugging Face shim: swap the position encoding of a decoder model in one call.

    import wavepe
    handle = wavepe.patch(model, "wavelet")   # or "rope", "alibi", "nope"; patch_llama is the same function
    ...                                        # train, evaluate, generate, compile, save
    handle.remove()                            # the original model again

Families (:mod:`wavepe.integrations._hf_families`): Llama, Mistral, Qwen2,
Qwen3, Gemma 2, Gemma 3, Phi-3, OLMo-2.  One mechanism serves them all, at the
two seams every one of them has in transformers 5 -- nothing of their
forwards is copied:

* **positions**: a forward hook on the model's rotary module
  (:mod:`._hf_rotary`) makes the ``(cos, sin)`` every attention layer
  applies the identity ("wavelet", "alibi", "nope"), the spectrum of a
  :class:`~wavepe.RopeConfig` computed by wavepe's RoPE kernel ("rope" with
  ``rope=``), or leaves the model's own ("rope");
* **attention**: the layer's relative bias is added by the attention
  function (:mod:`._hf_backend`): ``"wavepe"``, an ``AttentionInterface``
  backend registered here with its mask function (fused kernel, no M x N
  tensor for causal + padding masks), or ``"eager"`` (dense, returns the
  probabilities).

The attention implementation a user asked for is kept where it can do the
job: "rope" and "nope" run on any implementation (``eager``, ``sdpa``,
``flex_attention``, ``"wavepe"``...); "wavelet" and "alibi" keep ``"eager"``
and ``"wavepe"``, replace transformers' default ``"sdpa"`` (which cannot add a
bias; an explicit ``sdpa`` cannot be told from the default) by ``"wavepe"``,
and refuse any other by name, at patch time and at every forward (e.g. after
``model.set_attn_implementation("sdpa")``).

``model.config.wavepe`` stores the settings (``save_pretrained`` writes them to
config.json; ``patch(reloaded)`` reads them back).  Patching a model *class*
(``patch(LlamaForCausalLM, ...)``) patches every instance constructed while the
patch is active, ``from_pretrained`` included.  ``handle.remove()`` undoes
everything.
"""

from __future__ import annotations

import copy
import functools
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
from . import _hf_families as _families  # noqa: E402
from ._hf_backend import ATTN_IMPLEMENTATION, LayerState, release_state, wavepe_attention_forward  # noqa: E402
from ._hf_rotary import IdentityForward, RotaryHook, refuse_implementation, rotary_dim  # noqa: E402
from ._hf_settings import CONFIG_KEY, POS_ENCS, PosEncSettings, choose_settings, for_head_dim  # noqa: E402

__all__ = ["patch", "patch_llama", "unpatch", "get_patch", "WavepePatch", "PosEncSettings", "POS_ENCS",
           "ATTN_IMPLEMENTATION", "wavepe_attention_forward", "register", "FAMILIES"]

#: the supported families (model_type, attention class)
FAMILIES = _families.FAMILIES


def register() -> None:
    """Register ``"wavepe"`` with transformers' AttentionInterface and AttentionMaskInterface, and make the
    mask functions it compacts readable under torch.compile (:func:`_hf_attention.install_mask_factories`:
    the same functions for every attention implementation).  Idempotent."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, wavepe_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _attn.wavepe_mask)
    _attn.install_mask_factories()


register()


# ---- the handle -------------------------------------------------------------------------------------------------

class WavepePatch:
    """Handle returned by :func:`patch`: ``remove()`` restores the original behaviour.

    Also a context manager (``with wavepe.patch(model): ...``).
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


def _remove_hook(module: nn.Module, hook_id: int) -> None:
    module._forward_hooks.pop(hook_id, None)
    module._forward_hooks_with_kwargs.pop(hook_id, None)
    if isinstance(module.__dict__.get("forward"), IdentityForward):
        del module.__dict__["forward"]


class _ModelPatch(WavepePatch):
    """A patched model instance: its attention modules, rotary hooks, configs and previous config values."""

    def __init__(self, model: nn.Module, settings: PosEncSettings, modules: list[nn.Module],
                 hooks: list[tuple[nn.Module, int]], restore: list[tuple[Any, Any, Any]]) -> None:
        self.model = model
        self.settings = settings
        self.modules = modules
        self.hooks = hooks  # (rotary module, hook id)
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
        for rotary, hook_id in self.hooks:
            _remove_hook(rotary, hook_id)
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
        new.hooks = [(copy.deepcopy(m, memo), i) for m, i in self.hooks]
        new._restore = [(copy.deepcopy(c, memo), copy.deepcopy(p, memo), i) for c, p, i in self._restore]
        new._active = self._active
        return new


# ---- patching ---------------------------------------------------------------------------------------------------

def _refuse_unsupported(model: nn.Module) -> None:
    others = sorted({type(m).__name__ for m in model.modules() if "Attention" in type(m).__name__})
    raise TypeError(f"wavepe.patch supports models whose attention is one of {_families.supported_names()}; "
                    f"{type(model).__name__} has {', '.join(others) if others else 'no attention module'}")


def _implementation_for(impl: Any, pos_enc: str) -> Any:
    """The attention implementation a patched config runs: the user's ``impl`` where it can carry ``pos_enc``."""
    if pos_enc in ("rope", "nope"):
        return impl
    if impl in (None, "sdpa"):  # transformers' default (an explicit "sdpa" reads the same): cannot add a bias
        return ATTN_IMPLEMENTATION
    refuse_implementation(impl, pos_enc, "wavepe.patch")
    return impl


def _check_rope(settings: PosEncSettings, dims: set[int]) -> None:
    cfg = settings.rope
    if cfg is None:
        return
    if cfg.layout != "half":
        raise ValueError(f"rope=RopeConfig(layout={cfg.layout!r}): Hugging Face models rotate the pairs "
                         "(x[i], x[i + d/2]) (rotate_half); use layout='half'")
    for dim in sorted(dims):
        cfg.check_head_dim(dim)


def _patch_model(model: nn.Module, pos_enc: str | None, wavelet: Any, rope: Any) -> _ModelPatch:
    classes = _families.attention_classes()
    found = [(mod, cls) for mod in model.modules() for cls in classes if isinstance(mod, cls)]
    if not found:
        _refuse_unsupported(model)
    modules = [mod for mod, _ in found]
    head_dims = {int(m.head_dim) for m in modules}
    if len(head_dims) != 1:
        raise ValueError(f"wavepe.patch: the attention layers have different head dims {sorted(head_dims)}")
    head_dim = head_dims.pop()
    configs: list[Any] = []
    for mod in modules:
        if all(mod.config is not c for c in configs):
            configs.append(mod.config)
    stored = getattr(configs[0], CONFIG_KEY, None)
    settings = for_head_dim(choose_settings(pos_enc, wavelet, rope, stored), head_dim)
    rotaries = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    if not rotaries:
        raise TypeError(f"wavepe.patch: {type(model).__name__} has no rotary embedding module (its positions "
                        "enter through one: Llama-style models have model.rotary_emb)")
    _check_rope(settings, {rotary_dim(r) for r in rotaries})
    for config in [getattr(model, "config", None)] + configs:
        problems = _families.unsupported_features(config, settings.pos_enc)
        if problems:
            raise ValueError(f"wavepe.patch: pos_enc={settings.pos_enc!r} cannot run {type(model).__name__} with "
                             + "; ".join(problems))
    # the user's implementation: what an earlier patch of this model (or of a model inside it) replaced
    earlier = [sub.__dict__["_wavepe_patch"] for sub in model.modules() if "_wavepe_patch" in sub.__dict__]
    users = {id(c): impl for handle in earlier for c, _, impl in handle._restore}
    implementations = [_implementation_for(users.get(id(c), c._attn_implementation), settings.pos_enc)
                       for c in configs]

    for previous in earlier:
        previous.remove()
    for mod in modules:  # modules patched through an enclosing model
        state = mod.__dict__.pop("_wavepe", None)
        if state is not None:
            release_state(state)

    first = min(modules, key=lambda m: int(m.layer_idx))
    for mod, cls in found:
        mod.__dict__["_wavepe"] = LayerState(settings, mod is first, classes[cls])
    hooks = []
    for rotary in rotaries:
        hook = RotaryHook(settings, rotary_dim(rotary))
        handle = rotary.register_forward_hook(hook, with_kwargs=True)
        if hook.identity:
            rotary.__dict__["forward"] = IdentityForward(rotary, hook)
        hooks.append((rotary, handle.id))
    restore = []
    for config, impl in zip(configs, implementations):
        restore.append((config, config.__dict__.get(CONFIG_KEY, _MISSING), config._attn_implementation))
        setattr(config, CONFIG_KEY, settings.to_dict())
        config._attn_implementation_internal = impl
    handle = _ModelPatch(model, settings, modules, hooks, restore)
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


def patch(model_or_class: Any, pos_enc: str | None = None, *, wavelet: WaveletConfig | Mapping | None = None,
          rope: RopeConfig | Mapping | None = None) -> WavepePatch:
    """Swap the position encoding of a decoder model (or of a model class).

    Args:
        model_or_class: a model instance of a supported family (Llama, Mistral, Qwen2, Qwen3,
            Gemma 2, Gemma 3 text, Phi-3, OLMo-2: ``...ForCausalLM``, ``...Model`` or any module
            containing their attention layers and rotary module), or a model class such as
            ``LlamaForCausalLM``, in which case every instance constructed while the patch is
            active (``from_pretrained`` included) is patched.
        pos_enc: "wavelet" (wavelet relative position representation), "rope" (RoPE; wavepe's
            kernel computes the spectrum of ``rope=``), "alibi" or "nope".  Default: the settings
            stored in ``model.config.wavepe`` by an earlier patch (e.g. of a saved checkpoint),
            else "rope" if only ``rope=`` is given, else "wavelet".
        wavelet: for "wavelet": the per-dimension wavelets (default: the paper's grid for the
            model's head_dim, 8 scales x head_dim/8 shifts).
        rope: for "rope": a :class:`~wavepe.RopeConfig` (θ, p-RoPE fraction, scaling; layout
            "half") for the model's rotary dimensions; default None keeps the model's own RoPE,
            which reproduces the unpatched model.

    Returns:
        A :class:`WavepePatch`; ``remove()`` (or leaving its ``with`` block) restores the
        original behaviour, config and attention implementation.

    Raises:
        TypeError: the model has no supported attention or no rotary module, or a class that is
            not a transformers model class of a supported family.
        ValueError: bad ``pos_enc``; configuration/head_dim mismatch (e.g. the default wavelet
            grid needs head_dim divisible by 8); an attention implementation that cannot add the
            bias of "wavelet"/"alibi" (anything but "wavepe", "eager" and the default "sdpa"),
            or a model feature the encoding cannot carry (named in the message).
    """
    if isinstance(model_or_class, type):
        cls = model_or_class
        if not issubclass(cls, PreTrainedModel):
            raise TypeError(f"wavepe.patch: a class must be a transformers model class such as LlamaForCausalLM, "
                            f"got {cls.__module__}.{cls.__qualname__}")
        if sys.modules.get(cls.__module__) is None or not _families.defines_a_family(cls.__module__):
            raise TypeError(f"wavepe.patch supports models whose attention is one of {_families.supported_names()}; "
                            f"{cls.__qualname__} is defined in {cls.__module__}, which has none")
        return _ClassPatch(cls, pos_enc, wavelet, rope)
    if not isinstance(model_or_class, nn.Module):
        raise TypeError(f"wavepe.patch: model_or_class must be a torch.nn.Module or a model class, "
                        f"got {type(model_or_class).__name__}")
    return _patch_model(model_or_class, pos_enc, wavelet, rope)


#: the earlier name of :func:`patch` (the same function)
patch_llama = patch


def get_patch(model: nn.Module) -> WavepePatch | None:
    """The active patch of ``model`` (None if it is not patched)."""
    return model.__dict__.get("_wavepe_patch")


def unpatch(model: nn.Module) -> None:
    """Remove wavepe's patch from ``model`` if it has one (same as ``handle.remove()``)."""
    handle = get_patch(model)
    if handle is not None:
        handle.remove()
