"""Old import paths of the research modules, which moved to :mod:`wavepe.research`.

``wavepe.analysis``, ``wavepe.experiments`` (and its submodules) and
``wavepe.cli`` are resolved on import by a finder, with no file at the old
place: importing ``wavepe`` loads none of the research code, and the modules
under their old names are the very research modules (classes, monkeypatching
and pickled references agree).  ``wavepe.analysis`` also offers
``p_rope_sweep``, which evaluates perplexity and so lives with the experiments
now.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

_MOVED = {"wavepe.experiments": "wavepe.research.experiments", "wavepe.cli": "wavepe.research.cli"}


def _target(name: str) -> str | None:
    for old, new in _MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


def _old_analysis() -> types.ModuleType:
    analysis = importlib.import_module("wavepe.research.analysis")
    evaluate = importlib.import_module("wavepe.research.experiments.evaluate")
    module = types.ModuleType("wavepe.analysis", analysis.__doc__)
    module.__dict__.update({name: getattr(analysis, name) for name in analysis.__all__})
    module.p_rope_sweep = evaluate.p_rope_sweep
    module.__all__ = [*analysis.__all__, "p_rope_sweep"]
    return module


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "wavepe.analysis" or _target(fullname) is not None:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        if spec.name == "wavepe.analysis":
            return _old_analysis()
        return importlib.import_module(_target(spec.name))  # the very module, under its old name too

    def exec_module(self, module):
        pass


def install() -> None:
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())  # before the path finder, which would load the files twice
