"""Passkey retrieval: does a model read a key hidden far back in its context?

The probe of landmark attention / YaRN's ``passkey.py`` and the
"needle in a haystack" plots.  A random key of ``key_digits`` decimal digits
is hidden at some depth of a filler text; the text ends with a question, and
the model must answer with the key.  Perplexity cannot tell a model that
reads far from one that ignores the far past; this can.

Layout of one example of ``n`` tokens (``n`` is the whole sequence the model
reads, answer included, so at ``n = L_train`` no position exceeds training)::

    filler[:a]  needle(key)  filler[a:F]  question  key

``F = n - len(needle) - len(question) - key_digits`` filler tokens (``needle``
with its key) are one
contiguous piece of the filler stream; the needle goes in after
``a = round(depth · F)`` of them: depth 0 puts the key at the start of the
context (the farthest from the question), depth 1 right before the question.

**Scoring.** Exact match of the key's tokens under greedy decoding.  Greedy
decoding reproduces the key exactly iff, with the true key fed after the
question (teacher forcing), the argmax at every answer position is the next
key token: as long as the generated tokens equal the key, the generated
prefix *is* the teacher-forced one.  So ``method="one_pass"`` (the default)
scores a whole batch in one forward pass, and ``method="generate"`` runs the
greedy loop token by token (one full forward per token, no cache: any
callable works) — same answer up to floating-point differences between
forward passes of different lengths; the tests check that they agree.
Digits are uniform and independent, so a guess that does not read the key
is right with probability exactly ``10**-key_digits`` (the chance level).

**Tokens.** ``tokenizer`` turns the fixed strings (needle around the key,
question) and the key into token ids; the default is UTF-8 bytes (ids
0–255), the tokens of :class:`~wavepe.research.experiments.TinyLM`.  The filler is
a stream of ids already in the model's vocabulary (as for
:func:`~wavepe.research.experiments.perplexity`).  With a subword tokenizer the
pieces are tokenized separately and concatenated, and the answer is the
key's own token sequence (Llama's tokenizer splits digits one by one, so it
is the digits).

Every trial is seeded: for each length, trial t uses the same key and the
same piece of filler at every depth, and every model sees the same examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..._validate import check_choice, check_int, check_real
from .evaluate import _as_stream, _logits, _model_device

Tokenizer = Callable[[str], Sequence[int]]
METHODS = ("one_pass", "generate")
DEFAULT_DEPTHS: tuple[float, ...] = tuple(i / 10 for i in range(11))


def byte_tokenizer(text: str) -> list[int]:
    """UTF-8 bytes as token ids (0–255): the tokenizer of the byte-level models."""
    return list(text.encode("utf-8"))


@dataclass(frozen=True)
class PasskeyFormat:
    """The fixed text around the key.

    ``needle`` contains ``{key}`` once; ``question`` ends right where the key
    is to be written.  The default is deliberately plain — ``" ~48213. "``
    hidden in the text, ``" ~"`` as the question — because the models it was
    made for are 3-layer byte-level LMs with a minute or two of training: the
    key follows a fixed marker, ``~``, that is rare in text (the Python
    standard library has about one per 30 kB, WikiText-2 two in 0.9 MB), and
    the question is that marker again.  Retrieval is finding the one earlier
    ``~`` and copying the digits after it: the mechanism of every passkey
    prompt ("The pass key is 48213 … What is the pass key? The pass key is"),
    without the English around it.  Larger models can use the long form:
    ``PasskeyFormat(" The pass key is {key}. Remember it. ",
    " What is the pass key? The pass key is ")``.
    """

    needle: str = " ~{key}. "
    question: str = " ~"

    def __post_init__(self) -> None:
        if not isinstance(self.needle, str) or self.needle.count("{key}") != 1:
            raise ValueError(f"needle must be a string containing '{{key}}' exactly once, got {self.needle!r}")
        if not isinstance(self.question, str):
            raise TypeError(f"question must be a string, got {type(self.question).__name__}")

    def needle_parts(self) -> tuple[str, str]:
        before, after = self.needle.split("{key}")
        return before, after

    def to_dict(self) -> dict[str, str]:
        return {"needle": self.needle, "question": self.question}


@dataclass
class _Pieces:
    """The fixed parts of a format as token ids."""

    before: list[int]
    after: list[int]
    question: list[int]
    digit_ids: list[list[int]]  # tokens of "0".."9" (for building keys fast when each digit is one token)

    @property
    def fixed(self) -> int:
        return len(self.before) + len(self.after) + len(self.question)


def _tokenize(tokenizer: Tokenizer, text: str, what: str) -> list[int]:
    ids = [int(i) for i in tokenizer(text)]
    if any(i < 0 for i in ids):
        raise ValueError(f"tokenizer gave negative ids for the {what} {text!r}: {ids}")
    return ids


def _pieces(fmt: PasskeyFormat, tokenizer: Tokenizer) -> _Pieces:
    before, after = fmt.needle_parts()
    return _Pieces(_tokenize(tokenizer, before, "needle") if before else [],
                   _tokenize(tokenizer, after, "needle") if after else [],
                   _tokenize(tokenizer, fmt.question, "question") if fmt.question else [],
                   [_tokenize(tokenizer, str(d), "digit") for d in range(10)])


def _key_ids(pieces: _Pieces, tokenizer: Tokenizer, digits: np.ndarray) -> list[int]:
    if all(len(d) == 1 for d in pieces.digit_ids):
        return [pieces.digit_ids[int(d)][0] for d in digits]
    return _tokenize(tokenizer, "".join(str(int(d)) for d in digits), "key")


def min_length(key_digits: int = 5, fmt: PasskeyFormat | None = None, tokenizer: Tokenizer | None = None) -> int:
    """The shortest example: the needle (with the key), the question and the answer, no filler."""
    key_digits = check_int("key_digits", key_digits, min_value=1)
    tok = byte_tokenizer if tokenizer is None else tokenizer
    p = _pieces(fmt or PasskeyFormat(), tok)
    return p.fixed + 2 * len(_key_ids(p, tok, np.zeros(key_digits, dtype=np.int64)))


def build_example(filler: np.ndarray, key_ids: Sequence[int], depth: float, pieces: _Pieces,
                  length: int) -> tuple[np.ndarray, int]:
    """One example of ``length`` tokens and the index of the key's first token in it.

    ``filler`` must hold at least ``length - fixed - len(key)`` tokens (its first ones are used).
    """
    k = len(key_ids)
    n_fill = length - pieces.fixed - 2 * k
    if n_fill < 0:
        raise ValueError(f"length {length} is too short for the passkey format: it needs at least "
                         f"{pieces.fixed + 2 * k} tokens (needle, question and twice a {k}-token key)")
    a = int(round(depth * n_fill))
    fill = np.asarray(filler[:n_fill], dtype=np.int64)
    key = np.asarray(key_ids, dtype=np.int64)
    parts = [fill[:a], pieces.before, key, pieces.after, fill[a:], pieces.question, key]
    ex = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
    return ex, a + len(pieces.before)


@dataclass
class PasskeyResult:
    """Retrieval accuracy over lengths × depths.

    Attributes:
        lengths: the context lengths n (tokens, answer included).
        depths: where the needle sits, 0 (start) … 1 (just before the question).
        trials: examples per (length, depth) cell.
        key_digits: digits of each key; ``chance = 10**-key_digits``.
        correct: (lengths, depths, trials) bool — the key reproduced exactly by greedy decoding.
        digit_correct: (lengths, depths, trials, key tokens) bool — each answer token's argmax with
            the true key fed before it (teacher forcing; their conjunction is ``correct``).
        distance: (lengths, depths) tokens from the key's first token to the query that must
            produce it (the last token of the question).
        method: "one_pass" or "generate" (module doc).
    """

    lengths: list[int]
    depths: list[float]
    trials: int
    key_digits: int
    correct: np.ndarray
    digit_correct: np.ndarray
    distance: np.ndarray
    method: str = "one_pass"
    format: dict[str, str] = field(default_factory=dict)

    @property
    def accuracy(self) -> np.ndarray:
        """(lengths, depths) fraction of trials with the key exactly right."""
        return self.correct.mean(axis=-1)

    @property
    def chance(self) -> float:
        return 10.0 ** -self.key_digits

    def accuracy_at(self, length: int) -> float:
        """Mean exact-match accuracy over all depths at one length."""
        return float(self.correct[self.lengths.index(length)].mean())

    def to_dict(self) -> dict[str, Any]:
        return {
            "lengths": list(self.lengths), "depths": list(self.depths), "trials": self.trials,
            "key_digits": self.key_digits, "chance": self.chance, "method": self.method, "format": self.format,
            "accuracy": [[float(v) for v in row] for row in self.accuracy],
            "correct": [[int(v) for v in row] for row in self.correct.sum(axis=-1)],
            "digit_accuracy": [[float(v) for v in row] for row in self.digit_correct.mean(axis=(2, 3))],
            "first_digit_accuracy": [[float(v) for v in row] for row in self.digit_correct[..., 0].mean(axis=2)],
            "distance": [[int(v) for v in row] for row in self.distance],
            "mean_accuracy": {str(n): self.accuracy_at(n) for n in self.lengths},
        }


def _check_depths(depths: Sequence[float]) -> list[float]:
    out = []
    for d in depths:
        v = check_real("depth", d)
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"depths must lie in [0, 1] (0 = start of the context, 1 = just before the "
                             f"question), got {d!r}")
        out.append(v)
    if not out:
        raise ValueError("depths must list at least one depth in [0, 1]")
    return out


@torch.no_grad()
def _greedy_answer(model: Callable[..., Any], prompts: torch.Tensor, k: int) -> torch.Tensor:
    """Greedy decoding of k tokens, one full forward per token (no cache)."""
    ids = prompts
    out = []
    for _ in range(k):
        logits = _logits(model, ids)
        nxt = logits[:, -1].argmax(-1)
        out.append(nxt)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
    return torch.stack(out, dim=1)


@torch.no_grad()
def passkey(
    model: Callable[..., Any],
    filler: Any,
    lengths: Sequence[int],
    depths: Sequence[float] = DEFAULT_DEPTHS,
    *,
    trials: int = 20,
    key_digits: int = 5,
    seed: int = 0,
    fmt: PasskeyFormat | None = None,
    tokenizer: Tokenizer | None = None,
    method: str = "one_pass",
    batch_tokens: int = 16384,
    progress: bool = False,
    desc: str = "passkey",
) -> PasskeyResult:
    """Passkey-retrieval accuracy of a causal LM at every length × depth.

    Args:
        model: ids (B, L) int64 -> logits (B, L, V), or an output with ``.logits``
            (a Hugging Face ``LlamaForCausalLM``, patched by :func:`wavepe.patch_llama` or not).
        filler: 1-D stream of token ids the haystack is cut from (e.g. a test split).
        lengths: context lengths n: every example is exactly n tokens, the answer included.
        depths: needle depths in [0, 1] (default 0, 0.1, …, 1).
        trials: examples per cell (>= 1); the same keys and filler pieces at every depth.
        key_digits: digits of the key (chance level ``10**-key_digits``).
        seed: seeds keys and filler offsets (per length).
        fmt: the needle and question (:class:`PasskeyFormat`).
        tokenizer: str -> ids for the needle, question and key (default: UTF-8 bytes).
        method: "one_pass" (teacher-forced, one forward per batch; exactly greedy's
            exact match) or "generate" (the greedy loop).
        batch_tokens: examples per forward = max(1, batch_tokens // n).

    Returns:
        :class:`PasskeyResult` (``.accuracy`` is (len(lengths), len(depths))).
    """
    fmt = PasskeyFormat() if fmt is None else fmt
    if not isinstance(fmt, PasskeyFormat):
        raise TypeError(f"fmt must be a PasskeyFormat, got {type(fmt).__name__}")
    tok = byte_tokenizer if tokenizer is None else tokenizer
    if not callable(tok):
        raise TypeError(f"tokenizer must be a callable str -> token ids, got {type(tok).__name__}")
    trials = check_int("trials", trials, min_value=1)
    key_digits = check_int("key_digits", key_digits, min_value=1)
    seed = check_int("seed", seed, min_value=0)
    method = check_choice("method", method, METHODS)
    batch_tokens = check_int("batch_tokens", batch_tokens, min_value=1)
    for name, value in (("lengths", lengths), ("depths", depths)):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            what = "context lengths" if name == "lengths" else "depths in [0, 1]"
            raise TypeError(f"{name} must be a sequence of {what}, got {value!r}")
    depth_list = _check_depths(depths)
    length_list = [check_int("length", n, min_value=1) for n in lengths]
    if not length_list:
        raise ValueError("lengths must list at least one context length")
    stream = _as_stream(filler).numpy()
    pieces = _pieces(fmt, tok)
    shortest = min_length(key_digits, fmt, tok)
    for n in length_list:
        if n < shortest:
            raise ValueError(f"length {n} is too short for the passkey format: it needs at least {shortest} "
                             f"tokens (needle, question and a {key_digits}-digit key)")
    longest_fill = max(length_list) - shortest
    if stream.size < max(1, longest_fill):
        raise ValueError(f"the filler stream has {stream.size} tokens; length {max(length_list)} needs at least "
                         f"{longest_fill}")

    vocab = _declared_vocab(model)
    if vocab is not None:  # before any forward: an embedding would fail with a bare IndexError
        top = max([int(stream.max()) if stream.size else 0, *pieces.before, *pieces.after, *pieces.question,
                   *(i for d in pieces.digit_ids for i in d)])
        _check_vocab(vocab, torch.tensor([top]))
    was_training = getattr(model, "training", False)
    if was_training:
        model.eval()  # type: ignore[union-attr]
    device = _model_device(model)
    n_l, n_d = len(length_list), len(depth_list)
    correct = np.zeros((n_l, n_d, trials), dtype=bool)
    digit_correct: np.ndarray | None = None
    distance = np.zeros((n_l, n_d), dtype=np.int64)
    cells = [(i, j) for i in range(n_l) for j in range(n_d)]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(cells), desc=desc, unit="cell", leave=False)
    try:
        for i, n in enumerate(length_list):
            rng = np.random.default_rng([seed, n])
            keys = rng.integers(0, 10, size=(trials, key_digits))
            n_fill = n - shortest
            offsets = rng.integers(0, stream.size - n_fill + 1, size=trials)
            key_ids = [_key_ids(pieces, tok, keys[t]) for t in range(trials)]
            k = len(key_ids[0])
            if any(len(kid) != k for kid in key_ids):
                raise ValueError("the tokenizer splits keys of the same number of digits into different numbers "
                                 "of tokens; use a tokenizer that splits digits one by one")
            if digit_correct is None:
                digit_correct = np.zeros((n_l, n_d, trials, k), dtype=bool)
            per_batch = max(1, batch_tokens // n)
            for j, depth in enumerate(depth_list):
                examples, key_pos = [], 0
                for t in range(trials):
                    ex, key_pos = build_example(stream[offsets[t]: offsets[t] + n_fill], key_ids[t], depth, pieces, n)
                    examples.append(ex)
                batch_all = torch.from_numpy(np.stack(examples))
                answer = batch_all[:, n - k:]
                distance[i, j] = (n - k - 1) - key_pos
                for b0 in range(0, trials, per_batch):
                    ids = batch_all[b0: b0 + per_batch].to(device)
                    want = answer[b0: b0 + per_batch].to(device)
                    # teacher forcing: the true key after the question, argmax at each answer position
                    logits = _logits(model, ids)
                    _check_vocab(logits.shape[-1], ids)
                    hits = (logits[:, n - k - 1: n - 1].argmax(-1) == want).cpu().numpy()
                    digit_correct[i, j, b0: b0 + len(ids)] = hits
                    if method == "one_pass":
                        correct[i, j, b0: b0 + len(ids)] = hits.all(axis=1)
                    else:
                        gen = _greedy_answer(model, ids[:, : n - k], k)
                        correct[i, j, b0: b0 + len(ids)] = (gen == want).all(dim=1).cpu().numpy()
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        if was_training:
            model.train()  # type: ignore[union-attr]
    assert digit_correct is not None
    return PasskeyResult(length_list, depth_list, trials, key_digits, correct, digit_correct, distance, method,
                         fmt.to_dict())


def _declared_vocab(model: Any) -> int | None:
    """The vocabulary size a model declares (HF / TinyLM config, or its input embedding), if any."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(size, int):
        return size
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else None
    return getattr(emb, "num_embeddings", None)


def _check_vocab(vocab: int, ids: torch.Tensor) -> None:
    top = int(ids.max())
    if top >= vocab:
        raise ValueError(f"the passkey examples use token id {top} but the model's vocabulary has {vocab} entries "
                         "(the default tokenizer is UTF-8 bytes, ids 0-255: pass tokenizer= for smaller "
                         "vocabularies, and a filler of ids within the vocabulary)")


class PasskeyMixture:
    """Training batches: random crops of a stream, a fraction of them passkey examples.

    Call with a torch generator and a batch size; returns ``(batch, weights)``:
    batch (B, train_len + 1) int64 (inputs and next-token targets, like the
    crops of :func:`~wavepe.research.experiments.train_lm`), weights (B, train_len) on
    the targets — ``answer_weight`` on the answer tokens of passkey rows, 1
    elsewhere.  Each row is a passkey example with probability ``fraction``:
    the key random, the filler a random crop of ``filler`` (default:
    ``tokens`` itself; e.g. :func:`haystack` of it), the depth uniform in
    [0, 1], the example filling the whole row so that the answer ends it (as
    at evaluation); the other rows are plain crops of ``tokens``.  Only the generator's draws decide
    which rows, keys, depths and crops: models trained from the same seed
    see the same batches.
    """

    def __init__(self, tokens: Any, train_len: int, fraction: float = 0.5, *, key_digits: int = 5,
                 answer_weight: float = 1.0, filler: Any = None, fmt: PasskeyFormat | None = None,
                 tokenizer: Tokenizer | None = None) -> None:
        self.train_len = check_int("train_len", train_len, min_value=2)
        self.fraction = check_real("passkey_fraction", fraction)
        if not 0.0 <= self.fraction <= 1.0:
            raise ValueError(f"passkey_fraction must be in [0, 1], got {fraction}")
        self.key_digits = check_int("key_digits", key_digits, min_value=1)
        self.answer_weight = check_real("answer_weight", answer_weight, positive=True)
        self.fmt = PasskeyFormat() if fmt is None else fmt
        self.tokenizer = byte_tokenizer if tokenizer is None else tokenizer
        self.stream = torch.tensor(np.asarray(tokens), dtype=torch.int64)
        if self.stream.dim() != 1:
            raise ValueError(f"tokens must be a 1-D stream, got shape {tuple(self.stream.shape)}")
        if self.stream.numel() < self.train_len + 2:
            raise ValueError(f"training stream has {self.stream.numel()} tokens; train_len={self.train_len} needs "
                             "more")
        self.filler = self.stream if filler is None else torch.tensor(np.asarray(filler), dtype=torch.int64)
        if self.filler.dim() != 1 or self.filler.numel() < self.train_len + 1:
            raise ValueError(f"filler must be a 1-D stream of at least train_len + 1 = {self.train_len + 1} tokens, "
                             f"got shape {tuple(self.filler.shape)}")
        self.pieces = _pieces(self.fmt, self.tokenizer)
        shortest = min_length(self.key_digits, self.fmt, self.tokenizer)
        if self.fraction > 0 and train_len + 1 < shortest:
            raise ValueError(f"train_len {train_len} is too short for passkey examples: they need at least "
                             f"{shortest} tokens (needle, question and a {self.key_digits}-digit key)")
        self._window = torch.arange(self.train_len + 1)

    def __call__(self, gen: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.train_len + 1
        starts = torch.randint(0, self.stream.numel() - n + 1, (batch_size,), generator=gen)
        batch = self.stream[starts[:, None] + self._window[None, :]]
        is_passkey = torch.rand(batch_size, generator=gen) < self.fraction
        keys = torch.randint(0, 10, (batch_size, self.key_digits), generator=gen)
        depths = torch.rand(batch_size, generator=gen)
        fill_starts = torch.randint(0, self.filler.numel() - n + 1, (batch_size,), generator=gen)
        weights = torch.ones(batch_size, self.train_len)
        for b in torch.nonzero(is_passkey).flatten().tolist():
            key_ids = _key_ids(self.pieces, self.tokenizer, keys[b].numpy())
            fill = self.filler[int(fill_starts[b]): int(fill_starts[b]) + n].numpy()
            ex, _ = build_example(fill, key_ids, float(depths[b]), self.pieces, n)
            batch[b] = torch.from_numpy(ex)
            weights[b, self.train_len - len(key_ids):] = self.answer_weight
        return batch, weights

    def describe(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "key_digits": self.key_digits, "answer_weight": self.answer_weight,
                **self.fmt.to_dict(), "depth": "uniform in [0, 1]", "answer": "ends the row"}


def haystack(tokens: Any, remove: str = "0123456789~") -> np.ndarray:
    """A byte stream without the bytes of ``remove`` (default: the digits and the marker).

    Filler without digits and markers makes the needle the only place in the
    context where the key's digits and the marker occur, so that a miss means
    the model did not read that far, not that another number in the text
    looked like the key.
    """
    t = np.asarray(tokens)
    if t.ndim != 1:
        raise ValueError(f"tokens must be a 1-D stream, got shape {t.shape}")
    return t[~np.isin(t, np.frombuffer(remove.encode("utf-8"), dtype=np.uint8))]


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial proportion (for the error bars of docs/research.md)."""
    if n <= 0:
        return (0.0, 1.0)
    p = hits / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))
