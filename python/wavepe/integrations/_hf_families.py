"""The model families the Hugging Face shim patches: one table entry each.

Every family here computes attention the same way in transformers 5: the
model's rotary module turns ``position_ids`` into ``(cos, sin)``, each
attention layer projects q, k, v (whatever its layout: separate or fused
projections, q/k norms over the head or the whole projection), rotates q and
k with ``(cos, sin)``, updates the cache and calls
``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]`` (or its file's
``eager_attention_forward``) with ``scaling``, ``sliding_window`` and
``softcap`` as keywords.  wavepe patches those two seams only (see
:mod:`wavepe.integrations.hf`), so a family is supported once its attention
class is listed here and its tests pass; nothing of its forward is copied.

What a family adds that the seams must carry:

* per-layer sliding windows (Mistral, Qwen2/3, Gemma 2/3, Phi-3): in the mask
  Hugging Face builds per layer type; the bias is formed from each query's
  index, read from that mask;
* attention-logit softcapping (Gemma 2): the ``softcap`` keyword, applied by
  the dense path to the full logit (``q·k`` and the bias);
* q/k norms (Qwen3, Gemma 3, OLMo-2), fused qkv (Phi-3), partial rotary
  (Phi-3's ``partial_rotary_factor``), per-layer-type RoPE bases (Gemma 3):
  inside the stock forward and rotary module, untouched.

Refused by name at patch time, with a relative encoding (the bias reads each
query's index as the last key its causal mask shows): bidirectional attention
(``use_bidirectional_attention``) and multimodal models (``vision_config``:
image tokens attend to each other both ways).
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple


class Family(NamedTuple):
    """One supported family: where transformers defines it, its attention, config and causal-LM classes."""

    name: str  # the model_type: transformers.models.<name>.modeling_<name>
    attention: str  # the attention class there
    config: str  # its config class (transformers.<config>)
    causal_lm: str  # its causal LM class (transformers.<causal_lm>)


FAMILIES: tuple[Family, ...] = (
    Family("llama", "LlamaAttention", "LlamaConfig", "LlamaForCausalLM"),
    Family("mistral", "MistralAttention", "MistralConfig", "MistralForCausalLM"),
    Family("qwen2", "Qwen2Attention", "Qwen2Config", "Qwen2ForCausalLM"),
    Family("qwen3", "Qwen3Attention", "Qwen3Config", "Qwen3ForCausalLM"),
    Family("gemma2", "Gemma2Attention", "Gemma2Config", "Gemma2ForCausalLM"),
    Family("gemma3", "Gemma3Attention", "Gemma3TextConfig", "Gemma3ForCausalLM"),
    Family("phi3", "Phi3Attention", "Phi3Config", "Phi3ForCausalLM"),
    Family("olmo2", "Olmo2Attention", "Olmo2Config", "Olmo2ForCausalLM"),
)


def modeling_module(family: Family) -> Any | None:
    """transformers.models.<name>.modeling_<name>, or None if this transformers lacks it."""
    try:
        return importlib.import_module(f"transformers.models.{family.name}.modeling_{family.name}")
    except ImportError:  # pragma: no cover - an older transformers
        return None


def attention_classes() -> dict[type, Any]:
    """Supported attention classes of the installed transformers -> their modeling module."""
    found: dict[type, Any] = {}
    for family in FAMILIES:
        module = modeling_module(family)
        cls = getattr(module, family.attention, None) if module is not None else None
        if cls is not None:
            found[cls] = module
    return found


def supported_names() -> str:
    return ", ".join(f.attention for f in FAMILIES)


def defines_a_family(module_name: str) -> bool:
    """Whether a model class defined in ``module_name`` belongs to a supported family."""
    return any(module_name == f"transformers.models.{f.name}.modeling_{f.name}" for f in FAMILIES)


def unsupported_features(config: Any, pos_enc: str) -> list[str]:
    """The features of a model or attention ``config`` that ``pos_enc`` cannot carry, each named with its value."""
    found = []
    if pos_enc not in ("wavelet", "alibi"):
        return found  # no bias: whatever the stock attention does, it still does
    if getattr(config, "use_bidirectional_attention", False):
        found.append("use_bidirectional_attention=True (relative encodings here are causal)")
    if getattr(config, "vision_config", None) is not None:
        found.append(f"a vision tower ({type(config).__name__}.vision_config: image tokens attend to each other "
                     "both ways, and relative encodings here are causal; patch the text model alone)")
    return found
