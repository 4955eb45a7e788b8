"""The ``wavepe`` command (also ``python -m wavepe``)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def _cmd_info(args: argparse.Namespace) -> int:
    import wavepe

    print(f"wavepe {wavepe.__version__}")
    print(f"cpu isa: {wavepe.cpu_isa()}  active: {wavepe.active_isa()}")
    try:
        import wavepe.ops  # noqa: F401
        import torch

        print(f"torch ops: available (torch {torch.__version__})")
    except ImportError as exc:
        print(f"torch ops: unavailable ({exc})")
    return 0


def _cmd_fairseq_user_dir(args: argparse.Namespace) -> int:
    from .integrations.fairseq import user_dir

    print(user_dir())
    return 0


def _add_fairseq_user_dir(sub) -> None:
    p = sub.add_parser("fairseq-user-dir", help="print the path to pass to fairseq's --user-dir",
                       description="Print the directory of wavepe's fairseq plugin, for "
                                   "fairseq-train/fairseq-eval-lm --user-dir (models wavepe_lm, wavepe_lm_wiki103).")
    p.set_defaults(func=_cmd_fairseq_user_dir)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wavepe", description="Wavelet position encoding and configurable RoPE.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("info", help="version, CPU features and which front ends are built",
                       description="Print the version, the kernel ISA in use and whether the torch ops are built.")
    p.set_defaults(func=_cmd_info)
    _add_fairseq_user_dir(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
