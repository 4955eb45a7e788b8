"""One vocabulary of position encodings for every layer of wavepe.

=============  ==============================================================
``wavelet``    relative wavelets in the attention scores (Oka et al., 2025)
``relative``   any other relative table in the scores (learned, clipped: Shaw
               et al.; sinusoidal: Transformer-XL-like)
``rope``       rotary embedding of q and k (the scores then see q·k only)
``alibi``      a linear distance penalty in the scores (Press et al., 2022)
``sinusoidal`` absolute sinusoidal embeddings added to the inputs
``nope``       no position encoding at all (NoPE)
=============  ==============================================================

Every layer accepts the names it can run, spelled the same everywhere:

* :func:`wavepe.ops.wavelet_attention` -- wavelet, relative, alibi, nope (RoPE
  rotates q and k before attention: :func:`wavepe.ops.rope`);
* :class:`wavepe.nn.PositionalAttention` and the TinyLM of the experiments --
  wavelet, rope, alibi, nope;
* :func:`wavepe.patch` (``config.wavepe["pos_enc"]``) -- wavelet, rope,
  alibi, nope;
* the fairseq plugin (``--pos-enc``) -- wavelet, rope, alibi, sinusoidal, nope.

``"none"``, the old spelling of ``"nope"`` in ``wavelet_attention``,
``PositionalAttention`` and TinyLM checkpoints, is still read, with a
DeprecationWarning.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable

from ._validate import check_choice

POS_ENCS: tuple[str, ...] = ("wavelet", "relative", "rope", "alibi", "sinusoidal", "nope")

#: old spelling -> name (still accepted, with a DeprecationWarning)
ALIASES: dict[str, str] = {"none": "nope"}

# what the attention scores of each encoding contain, beyond q·k
_SCORES = {"wavelet": "wavelet", "relative": "relative", "alibi": "alibi", "rope": "nope", "sinusoidal": "nope",
           "nope": "nope"}


def canonical_pos_enc(value: Any, allowed: Iterable[str] = POS_ENCS, *, name: str = "pos_enc",
                      stacklevel: int = 3) -> str:
    """``value`` as a name of the vocabulary that ``allowed`` contains.

    Old spellings are translated with a DeprecationWarning; anything else
    outside ``allowed`` raises ValueError naming ``name`` and listing the
    choices (with a pointer to where "rope" goes when the layer runs
    attention on rotated q and k).
    """
    allowed = tuple(allowed)
    if isinstance(value, str) and value in ALIASES:
        new = ALIASES[value]
        warnings.warn(f"{name}={value!r} is the old spelling of {new!r}; use {name}={new!r} (wavepe.pos_enc lists "
                      "the names every layer shares)", DeprecationWarning, stacklevel=stacklevel)
        value = new
    if value == "rope" and "rope" not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got 'rope': RoPE rotates q and k "
                         f"before attention -- apply wavepe.ops.rope(q, k, positions, config) first and pass "
                         f"{name}='nope' here")
    return check_choice(name, value, allowed)


def scores_pos_enc(pos_enc: str) -> str:
    """The ``pos_enc`` of :func:`wavepe.ops.wavelet_attention` for an encoding: what its scores add to q·k."""
    return _SCORES[canonical_pos_enc(pos_enc)]
