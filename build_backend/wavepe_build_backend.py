"""wavepe's build backend: setuptools' own, after a check that the build can start at all.

With ``pip install --no-build-isolation .`` pip installs none of ``[build-system].requires``: the
build runs with whatever the environment has.  A fresh virtual environment holding only torch has
no numpy and no setuptools (Python >= 3.12) or an old one (3.10/3.11 bundle setuptools 65), and the
build would die deep inside setuptools with an unrelated error.  This module checks first and
says, in one message, exactly what to install.  In an isolated build (plain ``pip install .``,
``python -m build``) pip has installed the requirements and the check passes silently.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

# keep in step with [build-system].requires in pyproject.toml
SETUPTOOLS_MIN = (77, 0)
INSTALL_LINE = 'pip install "setuptools>=77" "numpy>=2.0"'


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def missing_requirements(need_numpy: bool) -> list[str]:
    missing = []
    try:
        found = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        missing.append("setuptools>=77 (not installed)")
    else:
        if _version_tuple(found) < SETUPTOOLS_MIN:
            missing.append(f"setuptools>=77 ({found} installed)")
    if need_numpy and importlib.util.find_spec("numpy") is None:
        missing.append("numpy (not installed; its headers build wavepe._ufuncs)")
    return missing


def _check(need_numpy: bool = True) -> None:
    missing = missing_requirements(need_numpy)
    if missing:
        raise SystemExit(
            "wavepe: this build uses the environment's own build tools (pip --no-build-isolation), and the "
            "environment lacks " + ", ".join(missing) + ".\nInstall them, then run the same command again:\n    "
            + INSTALL_LINE + "\n(Without --no-build-isolation pip brings them itself; wavepe's PyTorch ops are then "
            "compiled at first use, against the torch installed then.)")


def _hook(name: str, need_numpy: bool):
    def hook(*args, **kwargs):
        _check(need_numpy)
        from setuptools import build_meta

        return getattr(build_meta, name)(*args, **kwargs)

    hook.__name__ = hook.__qualname__ = name
    hook.__doc__ = f"setuptools.build_meta.{name}, after the check of the build requirements."
    return hook


# The PEP 517 / 660 hooks; an sdist needs no numpy.
get_requires_for_build_wheel = _hook("get_requires_for_build_wheel", True)
get_requires_for_build_editable = _hook("get_requires_for_build_editable", True)
get_requires_for_build_sdist = _hook("get_requires_for_build_sdist", False)
prepare_metadata_for_build_wheel = _hook("prepare_metadata_for_build_wheel", True)
prepare_metadata_for_build_editable = _hook("prepare_metadata_for_build_editable", True)
build_wheel = _hook("build_wheel", True)
build_editable = _hook("build_editable", True)
build_sdist = _hook("build_sdist", False)
