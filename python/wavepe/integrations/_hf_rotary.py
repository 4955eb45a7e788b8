"""The position seam of a patched model: what its rotary module hands to every attention layer.

A forward hook on the model's rotary module (``LlamaRotaryEmbedding``,
``Gemma3RotaryEmbedding``, ...) replaces the ``(cos, sin)`` it returns:

* "wavelet", "alibi", "nope": ``cos = 1, sin = 0`` -- the rotation the stock
  attention applies is the identity, exactly (``q * 1 + rotate_half(q) * 0``);
  positions enter through the attention backend instead.  Eagerly that ``cos``
  carries ``IDENTITY_MARK``, and the family's ``apply_rotary_pos_emb``
  (wavepe's dispatcher while patched, :mod:`._hf_backend`) then skips the
  arithmetic; and the rotary module's own ``forward`` (an
  :class:`IdentityForward` in its ``__dict__`` while patched) returns those
  (cos, sin) without computing the model's angles first (~50 us of tensor
  ops a token, discarded);
* "rope" with a :class:`~wavepe.RopeConfig`: cos and sin of the config's
  spectrum, p-RoPE fraction and attention factor, from wavepe's RoPE kernel
  (angles formed in float64) at the model's ``position_ids``;
* "rope" without a config: the model's own ``(cos, sin)``, untouched (its
  scaling type, dynamic updates and per-layer-type bases included).

The hook is a module-level class so that ``deepcopy``, ``pickle`` and
``torch.save`` of a patched model carry it, and torch.compile traces it like
the rest of the forward (no Python-side data-dependent work).
"""

from __future__ import annotations

from typing import Any

import torch

from ._hf_settings import PosEncSettings

#: attention implementations that can add a relative position bias to the scores
BIAS_IMPLEMENTATIONS = ("wavepe", "eager")
#: the attribute that marks the identity rotation's ``cos`` (eager only: never set while compiling)
IDENTITY_MARK = "_wavepe_identity_rotation"


def refuse_implementation(impl: Any, pos_enc: str, where: str) -> None:
    """Raise if ``impl`` cannot carry the bias of ``pos_enc`` (rope/nope: every implementation can)."""
    if pos_enc in ("wavelet", "alibi") and impl not in BIAS_IMPLEMENTATIONS:
        raise ValueError(f"{where}: attn_implementation={impl!r} cannot add the pos_enc={pos_enc!r} position bias to "
                         f"the attention scores; use 'wavepe' (wavepe's fused kernel) or 'eager' (dense, returns the "
                         "attention probabilities)")


def rotary_dim(rotary: torch.nn.Module) -> int:
    """Width of the (cos, sin) a rotary module returns: twice its inv_freq's length."""
    for name, buffer in rotary.named_buffers(recurse=False):
        if name.endswith("inv_freq") and "original" not in name:
            return 2 * int(buffer.shape[-1])
    raise ValueError(f"{type(rotary).__name__} has no inv_freq buffer")


class RotaryHook:
    """Forward hook (``with_kwargs=True``) of a rotary module: the (cos, sin) of the patch's settings."""

    def __init__(self, settings: PosEncSettings, dim: int) -> None:
        self.settings = settings
        self.dim = dim
        self.identity = settings.pos_enc != "rope"

    def identity_cos_sin(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos = 1, sin = 0 as the model's rotary module shapes them, (B, L, dim) in x's dtype; cos marked
        (eagerly) so that apply_rotary_pos_emb skips the identity rotation."""
        shape = (positions.shape[0] if positions.dim() == 2 else 1, positions.shape[-1], self.dim)
        ones = torch.ones(shape, dtype=x.dtype, device=x.device)
        if not torch.compiler.is_compiling():
            setattr(ones, IDENTITY_MARK, True)
        return ones, torch.zeros(shape, dtype=x.dtype, device=x.device)

    def __call__(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        settings = self.settings
        config = getattr(module, "config", None)
        if config is not None:
            refuse_implementation(config._attn_implementation, settings.pos_enc, type(module).__name__)
        cos, sin = output
        if self.identity:
            if getattr(cos, IDENTITY_MARK, False):  # IdentityForward's own
                return output
            ones = torch.ones_like(cos)
            if not torch.compiler.is_compiling():
                setattr(ones, IDENTITY_MARK, True)
            return ones, torch.zeros_like(sin)
        if settings.rope is None:
            return output
        x = args[0] if args else kwargs["x"]
        positions = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
        return rope_cos_sin(settings.rope, positions, self.dim, cos.dtype, x.device)

    def __repr__(self) -> str:
        return f"RotaryHook({self.settings!r}, dim={self.dim})"


class IdentityForward:
    """A patched rotary module's ``forward`` (in its ``__dict__``) for the identity encodings: eagerly, the
    hook's marked (cos, sin) without the model's angles; under torch.compile, the class's forward (the
    hook then makes the identity of its output, as before).  Copies with the module (deepcopy, pickle:
    its references are the module's and its hook's); the patch's ``remove`` deletes it."""

    def __init__(self, module: torch.nn.Module, hook: RotaryHook) -> None:
        self.module = module
        self.hook = hook

    def __call__(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return type(self.module).forward(self.module, x, *args, **kwargs)
        return self.hook.identity_cos_sin(x, kwargs["position_ids"] if "position_ids" in kwargs else args[0])

    def __repr__(self) -> str:
        return f"IdentityForward({type(self.module).__name__}, dim={self.hook.dim})"


def rope_cos_sin(config: Any, positions: torch.Tensor, dim: int, dtype: torch.dtype,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's (cos, sin) (B, L, dim) for ``rotate_half`` pairs, computed by wavepe's RoPE kernel.

    Rotating the vector ``[1]*dim/2 + [0]*dim/2`` by pair i's angle gives
    ``cos`` in its first half and ``sin`` in its second (times the attention
    factor; pairs past the p-RoPE fraction give 1 and 0).  positions (B, L) int.
    """
    from .. import ops

    if positions.dim() == 1:
        positions = positions[None]
    b, length = positions.shape
    half = dim // 2
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    basis = torch.cat([torch.ones(half, dtype=compute, device=device), torch.zeros(half, dtype=compute, device=device)])
    basis = basis.expand(b, 1, length, dim)
    rotated, _ = ops.rope(basis, None, positions.to(device=device, dtype=torch.int64), config)
    cos, sin = rotated[:, 0, :, :half], rotated[:, 0, :, half:]
    return torch.cat([cos, cos], dim=-1).to(dtype), torch.cat([sin, sin], dim=-1).to(dtype)
