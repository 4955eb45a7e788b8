"""Build of wavepe's compiled parts.

What is compiled from which sources with which flags is defined once, in
python/wavepe/_build/recipe.py, which the runtime builder (wavepe._build.jit) uses too; this file
wires it into setuptools:

* wavepe._ufuncs, the NumPy extension (C core + csrc/numpy): always built;
* wavepe._C, the PyTorch ops (C core + csrc/torch, + csrc/cuda when torch has CUDA and nvcc is
  found), built here when torch is importable at build time (``make build``,
  ``pip install --no-build-isolation .``), against that torch.  A record of that torch is written
  beside it (wavepe/_C.build.json): a wavepe._C built for another torch is never loaded;
* the sources of wavepe._C are shipped inside the package (wavepe/_csrc), so that an installed
  wavepe compiles its ops at first use against the user's torch when it was built without one
  (an isolated ``pip install .``, the sdist, ``python -m build``) or for another torch.

torch is deliberately NOT a build requirement: an isolated build would download a multi-GB torch.
Objects are kept under build/obj.* and recompiled only when their source, a header they include or
their command line changed (so ``make test`` after ``make demo`` costs seconds).

Environment: WAVEPE_BUILD_TORCH=0 / WAVEPE_BUILD_CUDA=0 skip those parts; WAVEPE_CUDA_ARCHS
(default "80;90") picks GPU architectures; WAVEPE_WERROR=1 makes warnings errors (the Makefile and
CI set it); CC / CXX pick the compilers; WAVEPE_BUILD_JOBS the number of parallel compiles.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import time

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(ROOT, "csrc")
PACKAGE_DIR = os.path.join(ROOT, "python", "wavepe")
TORCH_RECORD = "_C.build.json"  # read by wavepe.ops._extension before it loads wavepe._C


def load_recipe():
    path = os.path.join(PACKAGE_DIR, "_build", "recipe.py")
    spec = importlib.util.spec_from_file_location("wavepe_build_recipe", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


recipe = load_recipe()


def torch_build():
    """How to build wavepe._C against the torch importable now, or None (then it is built at first use)."""
    if not recipe.env_flag("WAVEPE_BUILD_TORCH", True):
        return None
    try:
        import torch  # noqa: F401
    except ImportError:
        print("wavepe: torch is not importable at build time (an isolated build): the PyTorch ops will be "
              "compiled at first use, against the torch installed then", file=sys.stderr)
        return None
    tb = recipe.torch_build()
    if tb.cuda_note:
        print("wavepe: " + tb.cuda_note, file=sys.stderr)
    return tb


TORCH = torch_build()


class BuildExtensions(build_ext):
    """Compile both extensions through the recipe's incremental driver, in one parallel batch."""

    def run(self) -> None:
        inplace = self.inplace or getattr(self, "editable_mode", False)
        super().run()
        if inplace and TORCH is not None:  # setuptools copies the modules, not the record beside _C
            write_record(os.path.join(PACKAGE_DIR, TORCH_RECORD))

    def build_extensions(self) -> None:
        obj_dir = os.path.join(ROOT, "build", f"obj.{sysconfig.get_platform()}-{sys.implementation.cache_tag}")
        plan = recipe.Plan()
        for ext in self.extensions:
            output = self.get_ext_fullpath(ext.name)
            if ext.name == "wavepe._ufuncs":
                import numpy

                plan += recipe.numpy_plan(CSRC, obj_dir, output, numpy.get_include())
            elif ext.name == "wavepe._C":
                plan += recipe.torch_plan(CSRC, obj_dir, output, TORCH)
        start = time.monotonic()
        compiled = recipe.run(plan, progress=lambda done, total, name: print(f"[{done}/{total}] {name}"),
                              log=lambda text: print(text.rstrip()) if self.verbose > 1 else None)
        print(f"wavepe: compiled {len(compiled)} of {len(plan.compiles)} files in {time.monotonic() - start:.0f} s"
              + (f" (objects in {os.path.relpath(obj_dir, ROOT)})" if compiled else ""))
        lib_pkg = os.path.dirname(self.get_ext_fullpath("wavepe._ufuncs"))
        if TORCH is not None:
            write_record(os.path.join(lib_pkg, TORCH_RECORD))
        else:  # a _C of an earlier build with torch must not slip into this one's wheel
            for name in os.listdir(lib_pkg):
                if name.startswith("_C.") and (name.endswith(".so") or name == TORCH_RECORD):
                    os.remove(os.path.join(lib_pkg, name))


def write_record(path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(TORCH.build_record(), f)


class BuildPyWithSources(build_py):
    """Also put the sources of wavepe._C into the package (wavepe/_csrc) for the runtime builder."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install compiles from csrc/ itself
        dest = os.path.join(self.build_lib, "wavepe", "_csrc")
        shutil.rmtree(dest, ignore_errors=True)  # no file deleted from csrc/ lingers from an earlier build
        for rel in recipe.shipped_sources(CSRC):
            self.mkpath(os.path.dirname(os.path.join(dest, rel)))
            self.copy_file(os.path.join(CSRC, rel), os.path.join(dest, rel))


def extensions() -> list[Extension]:
    rel = lambda paths: [os.path.relpath(p, ROOT) for p in paths]  # noqa: E731
    exts = [Extension("wavepe._ufuncs", sources=rel(recipe.core_sources(CSRC) + recipe.numpy_sources(CSRC)))]
    if TORCH is not None:
        exts.append(Extension("wavepe._C", sources=rel(recipe.torch_sources(CSRC, TORCH.cuda)), language="c++"))
    return exts


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildExtensions, "build_py": BuildPyWithSources},
)
