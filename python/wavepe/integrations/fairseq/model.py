"""The ``wavepe_lm`` fairseq model: fairseq's Transformer LM with wavepe attention.

Registered on import (fairseq's ``--user-dir`` imports it):

* model ``wavepe_lm`` with the config :class:`WavepeLanguageModelConfig`
  (fairseq's ``TransformerLanguageModelConfig`` plus the options of
  :mod:`wavepe.integrations.fairseq.options`); its default architecture
  ``wavepe_lm`` has ``transformer_lm``'s defaults;
* architecture ``wavepe_lm_wiki103``: ``transformer_lm_wiki103``'s shape
  (16 layers, width 1024, 8 heads of 128, adaptive input/softmax), the model of
  the ALiBi and wavelet papers on WikiText-103.

The option values are dataclass fields of the model config, so fairseq saves
them in the checkpoint (``cfg.model``) and ``fairseq-eval-lm`` rebuilds the
same model; ``--model-overrides "{'rope_inference_theta': 4096}"`` changes an
inference-time option there.

Position handling: for every ``--pos-enc`` except ``sinusoidal`` the decoder
has no absolute position embedding (fairseq's ``embed_positions`` is off); for
``sinusoidal`` it keeps fairseq's sinusoidal embedding (never the learned one)
and the attention adds no bias.  The model reports no length limit of its own
(relative encodings and the sinusoidal table extend to any length), so
``fairseq-eval-lm --tokens-per-sample`` may exceed the training length;
fairseq would otherwise drop every longer block without a word.
"""

# No "from __future__ import annotations": omegaconf 2.0 reads the config dataclass's
# field types at run time and cannot resolve string annotations.

from dataclasses import dataclass, field
from typing import Optional

from ..._requires import require

require("fairseq", "wavepe's fairseq plugin")

from fairseq import options as fairseq_options  # noqa: E402
from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import Embedding, TransformerConfig, TransformerDecoder
from fairseq.models.transformer_lm import (
    DEFAULT_MAX_TARGET_POSITIONS,
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    transformer_lm_baevski_wiki103,
)
from fairseq.modules import AdaptiveInput, CharacterTokenEmbedder
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq.utils import safe_getattr

from ...config import WAVELET_FAMILIES
from .attention import WavepeSelfAttention
from .options import POS_ENCS, PositionSpec

#: what ``max_positions()`` reports for encodings without a length limit
UNBOUNDED_POSITIONS = 2**31 - 1


@dataclass
class WavepeLanguageModelConfig(TransformerLanguageModelConfig):
    pos_enc: ChoiceEnum(list(POS_ENCS)) = field(  # type: ignore[valid-type]
        default="wavelet",
        metadata={"help": "position encoding: wavelet (Oka et al. 2025), rope, alibi, sinusoidal "
                          "(absolute, fairseq's embedding) or nope (none)"},
    )
    wavelet_family: ChoiceEnum(list(WAVELET_FAMILIES)) = field(  # type: ignore[valid-type]
        default="ricker", metadata={"help": "mother wavelet of --pos-enc wavelet"}
    )
    wavelet_grid: Optional[str] = field(
        default=None,
        metadata={"help": "wavelet grid 'S' or 'SxB': S scales 2^0..2^(S-1) x B shifts 0..B-1, S*B = head dim "
                          "(default: 8 x head_dim/8, the paper's grid)"},
    )
    wavelet_scales: Optional[str] = field(
        default=None, metadata={"help": "comma-separated scale values of the wavelet grid (overrides 2^0..2^(S-1))"}
    )
    wavelet_shifts: Optional[str] = field(
        default=None, metadata={"help": "comma-separated shift values of the wavelet grid (overrides 0..B-1)"}
    )
    wavelet_normalize: bool = field(
        default=False, metadata={"help": "scale each wavelet by 1/sqrt(a) (eq. 1 of the paper; default eq. 8)"}
    )
    rope_theta: Optional[float] = field(
        default=None, metadata={"help": "RoPE base theta (default 10000); e.g. the training length"}
    )
    rope_inference_theta: Optional[float] = field(
        default=None,
        metadata={"help": "RoPE base used whenever the model is not training (validation, eval-lm); "
                          "default --rope-theta"},
    )
    rope_fraction: Optional[float] = field(
        default=None, metadata={"help": "p-RoPE: fraction of rotation pairs that rotate (default 1)"}
    )
    attention_window: Optional[int] = field(
        default=None, metadata={"help": "sliding window W: a token attends to the W-1 tokens before it and itself "
                                        "(default: the whole causal past)"}
    )
    attention_softcap: Optional[float] = field(
        default=None, metadata={"help": "attention-logit soft-cap C (Gemma 2): scores become C*tanh(s/C)"}
    )


class WavepeDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with :class:`WavepeSelfAttention` as its self-attention."""

    def __init__(self, cfg: TransformerConfig, spec: PositionSpec, no_encoder_attn: bool = False) -> None:
        # build_self_attention runs inside the base __init__ and needs the spec
        self._wavepe_spec = spec
        super().__init__(cfg, no_encoder_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if add_bias_kv or add_zero_attn:
            raise ValueError("wavepe_lm does not support add_bias_kv / add_zero_attn in self-attention")
        if cfg.cross_self_attention:
            raise ValueError("wavepe_lm does not support --cross-self-attention")
        if cfg.decoder.xformers_att_config is not None:
            raise ValueError("wavepe_lm runs attention through wavepe; drop --decoder-xformers-att-config")
        return WavepeSelfAttention(embed_dim, cfg.decoder.attention_heads, self._wavepe_spec,
                                   dropout=cfg.attention_dropout, q_noise=self.quant_noise,
                                   qn_block_size=self.quant_noise_block_size)


class WavepeDecoder(TransformerDecoder):
    """fairseq's Transformer decoder with wavepe self-attention in every layer.

    Causality is part of the attention, so fairseq's (T, T) future mask is
    never built; the model reports no length limit except the sinusoidal
    table's.
    """

    def __init__(self, args, dictionary, embed_tokens, spec: PositionSpec, no_encoder_attn: bool = True) -> None:
        self._wavepe_spec = spec  # read by build_decoder_layer during the base __init__
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)

    def build_decoder_layer(self, args, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(args)
        layer = WavepeDecoderLayer(cfg, self._wavepe_spec, no_encoder_attn)
        checkpoint = cfg.checkpoint_activations
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        # as fairseq: a checkpointed layer is always wrapped by FSDP
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)

    def buffered_future_mask(self, tensor):
        return None  # causal inside WavepeSelfAttention; no (T, T) mask

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment=False, alignment_layer=None, alignment_heads=None):
        if full_context_alignment:
            raise ValueError("wavepe_lm attention is always causal; full_context_alignment is not supported")
        return super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                        full_context_alignment, alignment_layer, alignment_heads)

    def max_positions(self):
        if self.embed_positions is not None:
            return self.embed_positions.max_positions
        return UNBOUNDED_POSITIONS


def _check_absolute_position_options(args, spec: PositionSpec) -> None:
    if safe_getattr(args, "decoder_learned_pos", False):
        raise ValueError(f"--decoder-learned-pos conflicts with --pos-enc {spec.pos_enc}: wavepe_lm has no learned "
                         "absolute positions (use --pos-enc sinusoidal for absolute ones)")
    if spec.absolute_embeddings and safe_getattr(args, "no_token_positional_embeddings", False):
        raise ValueError("--no-token-positional-embeddings conflicts with --pos-enc sinusoidal (use --pos-enc nope)")


@register_model("wavepe_lm", dataclass=WavepeLanguageModelConfig)
class WavepeLanguageModel(TransformerLanguageModel):
    """fairseq's Transformer language model with a wavepe position encoding (``--pos-enc``)."""

    @classmethod
    def build_model(cls, args, task):
        heads = args.decoder_attention_heads
        if args.decoder_embed_dim % heads:
            raise ValueError(f"--decoder-embed-dim={args.decoder_embed_dim} is not divisible by "
                             f"--decoder-attention-heads={heads}")
        spec = PositionSpec.from_args(args, args.decoder_embed_dim // heads)
        _check_absolute_position_options(args, spec)
        args.no_token_positional_embeddings = not spec.absolute_embeddings

        if args.decoder_layers_to_keep:
            args.decoder_layers = len(args.decoder_layers_to_keep.split(","))
        if safe_getattr(args, "max_target_positions", None) is None:
            args.max_target_positions = safe_getattr(args, "tokens_per_sample", DEFAULT_MAX_TARGET_POSITIONS)

        dictionary = task.source_dictionary
        if args.character_embeddings:
            embed_tokens = CharacterTokenEmbedder(dictionary, eval(args.character_filters),
                                                  args.character_embedding_dim, args.decoder_embed_dim,
                                                  args.char_embedder_highway_layers)
        elif args.adaptive_input:
            embed_tokens = AdaptiveInput(len(dictionary), dictionary.pad(), args.decoder_input_dim,
                                         args.adaptive_input_factor, args.decoder_embed_dim,
                                         fairseq_options.eval_str_list(args.adaptive_input_cutoff, type=int),
                                         args.quant_noise_pq, args.quant_noise_pq_block_size)
        else:
            embed_tokens = Embedding(len(dictionary), args.decoder_input_dim, dictionary.pad())

        if args.tie_adaptive_weights:
            if not args.adaptive_input:
                raise ValueError("--tie-adaptive-weights needs --adaptive-input")
            if args.adaptive_input_factor != args.adaptive_softmax_factor:
                raise ValueError(f"--tie-adaptive-weights needs --adaptive-input-factor "
                                 f"({args.adaptive_input_factor}) == --adaptive-softmax-factor "
                                 f"({args.adaptive_softmax_factor})")
            if args.adaptive_softmax_cutoff != args.adaptive_input_cutoff:
                raise ValueError(f"--tie-adaptive-weights needs --adaptive-softmax-cutoff "
                                 f"({args.adaptive_softmax_cutoff}) == --adaptive-input-cutoff "
                                 f"({args.adaptive_input_cutoff})")
            if args.decoder_input_dim != args.decoder_output_dim:
                raise ValueError("--tie-adaptive-weights needs --decoder-input-dim == --decoder-output-dim")

        decoder = WavepeDecoder(args, task.target_dictionary, embed_tokens, spec, no_encoder_attn=True)
        return cls(decoder)


@register_model_architecture("wavepe_lm", "wavepe_lm_wiki103")
def wavepe_lm_wiki103(args):
    """transformer_lm_wiki103's shape: 16 layers, 1024 wide, 8 heads (head dim 128), adaptive input/softmax."""
    transformer_lm_baevski_wiki103(args)
