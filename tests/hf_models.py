"""Tiny Hugging Face models of every family wavepe.patch supports, and inputs for them (test helpers).

Not a test module: tests/test_hf*.py import it.  Weights are drawn larger than
the default init so that attention is peaked and the position encoding visibly
changes the logits (tests can fail).
"""

from __future__ import annotations

import numpy as np
import torch
import transformers as tf
from wavepe.integrations import hf

from . import reference as ref

POS_ENCS = ["wavelet", "rope", "alibi", "nope"]
RELATIVE = ["wavelet", "alibi"]

# what each family adds to the common tiny config (hidden 64, 4 query heads over 2 KV heads, head_dim 16)
_EXTRA: dict[str, dict] = {
    "qwen2": {},  # q/k/v biases
    "qwen3": {"head_dim": 16},  # q/k norm over the head
    # logit softcapping that bites (scores reach ~10), alternating sliding (6) and global layers
    "gemma2": {"head_dim": 16, "query_pre_attn_scalar": 16, "attn_logit_softcapping": 5.0,
               "final_logit_softcapping": 30.0, "sliding_window": 6},
    # q/k norm, sliding (6, RoPE base 10^4) then global layers (base 10^6)
    "gemma3": {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 6, "sliding_window_pattern": 2},
    "phi3": {"partial_rotary_factor": 0.5},  # fused qkv, half the dims rotate
    "olmo2": {},  # q/k norm over the whole projection
}
#: family -> (config class, causal LM class, what its tiny config adds)
FAMILIES: dict[str, tuple[type, type, dict]] = {
    f.name: (getattr(tf, f.config), getattr(tf, f.causal_lm), _EXTRA.get(f.name, {})) for f in hf.FAMILIES}
# families whose tiny config has layers with a sliding window shorter than the test sequences
SLIDING = {
    "mistral": {"sliding_window": 6},  # every layer slides
    "qwen2": {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1},  # layer 1 slides
    "gemma2": {},
    "gemma3": {},
}


def tiny(family: str = "llama", *, seed: int = 0, **overrides) -> torch.nn.Module:
    """A 2-layer model of ``family`` in eval mode (vocab 100, pad id 0)."""
    cfg_cls, model_cls, extra = FAMILIES[family]
    kw = dict(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.15, pad_token_id=0,
              bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)
    kw.update(extra)
    kw.update(overrides)
    torch.manual_seed(seed)
    return model_cls(cfg_cls(**kw)).eval()


def params64(model) -> dict:
    return {k: v.detach().double().numpy() for k, v in model.state_dict().items()}


def reference_logits(model, ids, encoding, **kw) -> np.ndarray:
    """The float64 formula reference of tests/reference.py (Llama-layout models: Llama, Mistral, Qwen2)."""
    c = model.config
    return ref.llama_logits(params64(model), ids, n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads,
                            eps=c.rms_norm_eps, encoding=encoding, **kw)


def left_pad(ids: torch.Tensor, pads: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mask out the first pads[b] tokens of row b; positions as generate() builds them."""
    mask = torch.ones_like(ids)
    for b, p in enumerate(pads):
        mask[b, :p] = 0
    ids = ids.masked_fill(mask == 0, 0)
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return ids, mask, pos


def right_pad(ids: torch.Tensor, pads: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mask out the last pads[b] tokens of row b; positions 0, 1, ... (pads keep counting)."""
    mask = torch.ones_like(ids)
    for b, p in enumerate(pads):
        if p:
            mask[b, -p:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    pos = torch.arange(ids.shape[1]).expand_as(ids)
    return ids, mask, pos


def ids_for(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 100, (batch, length), generator=g)
