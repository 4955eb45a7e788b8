"""A small word-level text corpus that exists on every machine: the Python standard library's sources.

For smoke tests and the commands of docs/fairseq.md (``fairseq-preprocess`` needs text
files); real experiments use WikiText-103.  Every top-level ``*.py`` file of
the running interpreter's standard library, in name order, is split into
tokens (``\\w+`` runs and single punctuation characters), one source line per
text line, empty lines dropped; the first ``train_lines`` lines become
``train.txt``, the next ``valid_lines`` ``valid.txt``.  The result depends only
on the Python version.

    python -m wavepe.integrations.fairseq.corpus OUT_DIR [--train-lines N] [--valid-lines N]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import sysconfig
from typing import Iterator, Sequence

_TOKEN = re.compile(r"\w+|[^\w\s]")


def stdlib_lines() -> Iterator[str]:
    """Tokenised, space-joined non-empty lines of the standard library's top-level modules."""
    stdlib = sysconfig.get_paths()["stdlib"]
    for name in sorted(os.listdir(stdlib)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(stdlib, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                tokens = _TOKEN.findall(line)
                if tokens:
                    yield " ".join(tokens)


def write_stdlib_corpus(out_dir: str, train_lines: int = 20000, valid_lines: int = 3000) -> dict[str, str]:
    """Write ``train.txt`` and ``valid.txt`` under ``out_dir``; returns {split: path}.

    Raises ValueError if the line counts are not positive or the standard
    library has fewer lines than asked for.
    """
    for name, value in (("train_lines", train_lines), ("valid_lines", valid_lines)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    lines: list[str] = []
    for line in stdlib_lines():
        lines.append(line)
        if len(lines) == train_lines + valid_lines:
            break
    if len(lines) < train_lines + valid_lines:
        raise ValueError(f"the standard library has only {len(lines)} non-empty lines; "
                         f"asked for {train_lines} + {valid_lines}")
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for split, chunk in (("train", lines[:train_lines]), ("valid", lines[train_lines:])):
        paths[split] = os.path.join(out_dir, f"{split}.txt")
        with open(paths[split], "w", encoding="utf-8") as f:
            f.write("\n".join(chunk) + "\n")
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wavepe.integrations.fairseq.corpus",
                                     description="Write train.txt / valid.txt made from the Python standard "
                                                 "library's sources (a corpus every machine has).")
    parser.add_argument("out_dir")
    parser.add_argument("--train-lines", type=int, default=20000)
    parser.add_argument("--valid-lines", type=int, default=3000)
    args = parser.parse_args(argv)
    try:
        paths = write_stdlib_corpus(args.out_dir, args.train_lines, args.valid_lines)
    except ValueError as exc:
        parser.error(str(exc))
    for split, path in paths.items():
        print(f"{split}: {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
