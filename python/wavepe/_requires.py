"""What each optional part of wavepe needs, and the one-line error that names what to install.

The Hugging Face and fairseq integrations are extras (``pip install 'wavepe[hf]'``,
``'wavepe[fairseq]'``); torch is the user's own (CPU, CUDA or ROCm build) and no dependency of the
NumPy API; tqdm and matplotlib are dependencies of the package, checked anyway for installs made
with ``--no-deps``.  Callers check before any work starts, so that a missing package never surfaces
as a bare ModuleNotFoundError after minutes of training.
"""

from __future__ import annotations

import importlib.util

# module -> (what needs it, how to install it)
_NEEDED_BY = {
    "torch": ("wavepe's PyTorch ops", "install torch (any build: CPU, CUDA, ROCm; see pytorch.org), "
              "or pip install 'wavepe[torch]'"),
    "transformers": ("the Hugging Face integration", "pip install 'wavepe[hf]'"),
    "fairseq": ("the fairseq plugin", "pip install 'wavepe[fairseq]' (fairseq 0.12.2 runs on Python <= 3.10; "
                "wavepe's scripts/setup_fairseq_env.sh builds such an environment)"),
    "matplotlib": ("the figures", "pip install 'matplotlib>=3.7' (a dependency of wavepe: was it installed "
                   "with --no-deps?)"),
    "tqdm": ("the progress bars", "pip install 'tqdm>=4.60' (a dependency of wavepe: was it installed with "
             "--no-deps?), or pass --no-progress"),
}


class MissingDependency(ImportError):
    """A package that a part of wavepe needs is not installed; the message says what to install."""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, or a stub without a spec
        return False


def missing_message(module: str, who: str | None = None) -> str:
    """One line: who needs ``module``, and how to install it."""
    what, how = _NEEDED_BY[module]
    return f"{who or what} needs {module}, which is not installed: {how}"


def require(module: str, who: str | None = None) -> None:
    """Raise MissingDependency (see missing_message) unless ``module`` is installed."""
    if not installed(module):
        raise MissingDependency(missing_message(module, who))
