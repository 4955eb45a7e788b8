"""Length-extrapolation experiments: train short, test long.

The library behind ``wavepe extrapolate``, reusable piece by piece:

* corpora — :func:`load_corpus` (the embedded standard-library corpus,
  ``DIR/{train,valid,test}.txt`` or one file split 80/10/10), byte-level;
* the model — :class:`TinyLM` / :class:`LMConfig` (only the position encoding
  differs between variants), :func:`save_model` / :func:`load_model`;
* training — :func:`train_lm` / :class:`TrainConfig`;
* evaluation of **any** causal LM (ids -> logits, Hugging Face outputs too) —
  :func:`perplexity`, :func:`evaluate_lengths` (non-overlapping and sliding windows);
* passkey retrieval of **any** causal LM — :func:`passkey` (a key hidden at
  depths 0 … 1 of contexts of any length, exact match under greedy decoding),
  :class:`PasskeyFormat`, :class:`PasskeyMixture` (training rows with passkey
  examples);
* the whole job — :class:`ExtrapolationConfig`, :func:`run_extrapolation`
  (perplexity), :class:`PasskeyJobConfig`, :func:`run_passkey` (retrieval);
* figures — :mod:`wavepe.research.experiments.plots`.

Research code: the library (config, ufuncs, ops, nn, integrations) imports
none of it.  ``wavepe.experiments`` is the same package under its old name.
"""

from .corpus import Corpus, load_corpus, split_text_file, stdlib_corpus, text_dir_corpus
from .evaluate import PerplexityResult, evaluate_lengths, p_rope_sweep, perplexity
from .extrapolate import (DEFAULT_ENCODINGS, ExtrapolationConfig, parse_encoding, quick_config,
                          run_extrapolation)
from .model import LMConfig, TinyLM, load_model, save_model
from .retrieval import PasskeyFormat, PasskeyMixture, PasskeyResult, byte_tokenizer, haystack, passkey
from .passkey_job import PasskeyJobConfig, passkey_quick_config, run_passkey
from .train import TrainConfig, train_lm

__all__ = [
    "Corpus", "load_corpus", "split_text_file", "stdlib_corpus", "text_dir_corpus",
    "PerplexityResult", "evaluate_lengths", "perplexity", "p_rope_sweep",
    "DEFAULT_ENCODINGS", "ExtrapolationConfig", "parse_encoding", "quick_config", "run_extrapolation",
    "LMConfig", "TinyLM", "load_model", "save_model",
    "PasskeyFormat", "PasskeyMixture", "PasskeyResult", "byte_tokenizer", "haystack", "passkey",
    "PasskeyJobConfig", "passkey_quick_config", "run_passkey",
    "TrainConfig", "train_lm",
]
