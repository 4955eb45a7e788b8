"""Byte-level corpora with a deterministic train/valid/test split.

* :func:`stdlib_corpus` — the embedded default: the ``*.py`` sources of the
  running interpreter's standard library (``sysconfig.get_paths()["stdlib"]``),
  present on every machine, no download.  Test suites (``test``/``tests``/
  ``idle_test`` folders) and installed packages (``site-packages``) are left
  out so that the corpus is the library's own code.  Each file goes to a split
  by a hash of its relative path, so the split does not depend on file order,
  the file system or the random seed (it does depend on the Python version:
  another standard library is another corpus; the corpus records its version).
* :func:`text_dir_corpus` — ``--data DIR`` with ``train.txt``, ``valid.txt`` and
  ``test.txt`` (e.g. WikiText), read as bytes.
* :func:`split_text_file` — one text file cut into contiguous train/valid/test
  blocks (e.g. 80/10/10), for data that ships as a single file.

Tokens are bytes (vocabulary 256): every corpus is a ``numpy.uint8`` array.
"""

from __future__ import annotations

import os
import platform
import sysconfig
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

SPLITS = ("train", "valid", "test")
_EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})
# Of every 100 hash buckets: 0-89 train, 90-94 valid, 95-99 test.
_STDLIB_BUCKETS = {"train": range(0, 90), "valid": range(90, 95), "test": range(95, 100)}


@dataclass
class Corpus:
    """Byte streams of the three splits, and where they came from."""

    name: str
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> np.ndarray:
        if name not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {name!r}")
        return getattr(self, name)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **{f"{s}_bytes": int(self.split(s).size) for s in SPLITS}, **self.info}


def _as_bytes_array(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8).copy()


def stdlib_files(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Sorted ``*.py`` files of the standard library (no tests, no site-packages)."""
    base = Path(sysconfig.get_paths()["stdlib"] if root is None else root)
    if not base.is_dir():
        raise FileNotFoundError(f"standard library folder {str(base)!r} does not exist")
    files = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in _EXCLUDED_DIRS)
        files.extend(Path(dirpath) / f for f in filenames if f.endswith(".py"))
    return sorted(files, key=lambda p: p.relative_to(base).as_posix())


def stdlib_split_of(relative_path: str) -> str:
    """Which split a file goes to: by CRC-32 of its relative POSIX path (stable everywhere)."""
    bucket = zlib.crc32(relative_path.encode("utf-8")) % 100
    return next(s for s, r in _STDLIB_BUCKETS.items() if bucket in r)


def stdlib_corpus(root: str | os.PathLike[str] | None = None) -> Corpus:
    """The embedded default corpus: the interpreter's standard-library sources, byte-level.

    Files are concatenated in sorted path order, separated by a blank line.
    """
    base = Path(sysconfig.get_paths()["stdlib"] if root is None else root)
    parts: dict[str, list[bytes]] = {s: [] for s in SPLITS}
    counts = dict.fromkeys(SPLITS, 0)
    for path in stdlib_files(base):
        rel = path.relative_to(base).as_posix()
        split = stdlib_split_of(rel)
        parts[split].append(path.read_bytes())
        counts[split] += 1
    if not all(counts.values()):
        raise ValueError(f"standard library at {str(base)!r} is too small to split: {counts}")
    arrays = {s: _as_bytes_array(b"\n\n".join(parts[s])) for s in SPLITS}
    info = {"source": str(base), "python": platform.python_version(), "files": counts,
            "split": "crc32(relative path) % 100: 0-89 train, 90-94 valid, 95-99 test"}
    return Corpus("stdlib", arrays["train"], arrays["valid"], arrays["test"], info)


def text_dir_corpus(directory: str | os.PathLike[str]) -> Corpus:
    """``DIR/train.txt``, ``DIR/valid.txt``, ``DIR/test.txt`` read as bytes."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"--data {str(d)!r} is not a directory (expected train.txt, valid.txt, test.txt)")
    missing = [f"{s}.txt" for s in SPLITS if not (d / f"{s}.txt").is_file()]
    if missing:
        raise FileNotFoundError(f"--data {str(d)!r} lacks {', '.join(missing)} (needs train.txt, valid.txt, test.txt)")
    arrays = {s: _as_bytes_array((d / f"{s}.txt").read_bytes()) for s in SPLITS}
    for s, a in arrays.items():
        if a.size < 2:
            raise ValueError(f"--data {str(d)!r}: {s}.txt has {a.size} bytes; need at least 2")
    return Corpus(d.name or str(d), arrays["train"], arrays["valid"], arrays["test"], {"source": str(d.resolve())})


def split_text_file(path: str | os.PathLike[str], fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> Corpus:
    """One file cut into contiguous train/valid/test blocks of the given fractions.

    The cuts move forward to the next newline so that no line is split.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{str(p)!r} is not a file")
    if len(fractions) != 3 or any(not f > 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"fractions must be three positive numbers summing to 1, got {tuple(fractions)}")
    data = p.read_bytes()
    cuts = []
    for frac in (fractions[0], fractions[0] + fractions[1]):
        cut = int(len(data) * frac)
        nl = data.find(b"\n", cut)
        cuts.append(len(data) if nl < 0 else nl + 1)
    blocks = (data[: cuts[0]], data[cuts[0]: cuts[1]], data[cuts[1]:])
    if any(len(b) < 2 for b in blocks):
        raise ValueError(f"{str(p)!r} ({len(data)} bytes) is too small to split into {tuple(fractions)}")
    arrays = [_as_bytes_array(b) for b in blocks]
    name = f"{p.parent.name}/{p.name}" if p.parent.name else p.name
    return Corpus(name, *arrays, info={"source": str(p.resolve()), "split": f"contiguous blocks {tuple(fractions)}"})


def load_corpus(data: str | os.PathLike[str] | None) -> Corpus:
    """``None``: the embedded stdlib corpus; a directory: :func:`text_dir_corpus`;
    a single file: :func:`split_text_file` (80/10/10)."""
    if data is None:
        return stdlib_corpus()
    p = Path(data)
    if p.is_file():
        return split_text_file(p)
    return text_dir_corpus(p)
