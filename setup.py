"""Build of wavepe's compiled parts.

What is compiled from which sources with which flags is defined once, in
python/wavepe/_build/recipe.py, which the runtime builder (wavepe._build.jit) uses too; this file
wires it into setuptools:

* wavepe._ufuncs, the NumPy extension (C core + csrc/numpy): always built, per CPython version;
* wavepe/libwavepe_ops.so, the PyTorch ops (C core + csrc/torch on torch's ABI-stable API, + csrc/cuda
  with WAVEPE_BUILD_CUDA=1, or when torch has CUDA and nvcc is found), built here when torch >= 2.10
  is importable at build time (``make build``, ``pip install --no-build-isolation .``, the wheels of
  ``.ci/build_wheel.sh``).  It holds no Python and calls torch only through its stable C shim, so one
  binary serves every CPython and every torch >= 2.10; a record beside it (libwavepe_ops.json) says
  what it is;
* the sources of the ops are shipped inside the package (wavepe/_csrc), so that an installed
  wavepe compiles them at first use when it was built without torch (an isolated ``pip install .``,
  the sdist, an isolated ``python -m build``); such a build also keeps the C core's objects
  (wavepe/_core_objects), which that first-use build links instead of compiling them again.

torch is deliberately NOT a build requirement: an isolated build would download a multi-GB torch.
Objects are kept under build/obj.* and recompiled only when their source, a header they include or
their command line changed (so ``make test`` after ``make demo`` costs seconds).

Environment: WAVEPE_BUILD_TORCH=0 skips the torch ops; WAVEPE_BUILD_CUDA=1 / 0 forces the CUDA
kernels in / out (unset: when torch has CUDA and nvcc is found); WAVEPE_CUDA_ARCHS (default
"80;90;100;120", PTX of the last) picks GPU architectures; WAVEPE_WERROR=1 makes warnings errors (the Makefile and
CI set it); CC / CXX pick the compilers; WAVEPE_BUILD_JOBS the number of parallel compiles.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(ROOT, "csrc")
PACKAGE_DIR = os.path.join(ROOT, "python", "wavepe")


def load_recipe():
    path = os.path.join(PACKAGE_DIR, "_build", "recipe.py")
    spec = importlib.util.spec_from_file_location("wavepe_build_recipe", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


recipe = load_recipe()


def torch_build():
    """How to build the torch ops against the torch importable now, or None (then they are built at first use)."""
    if not recipe.env_flag("WAVEPE_BUILD_TORCH", True):
        return None
    try:
        import torch  # noqa: F401
    except ImportError:
        print("wavepe: torch is not importable at build time (an isolated build): the PyTorch ops will be "
              "compiled at first use, against the torch installed then", file=sys.stderr)
        return None
    too_old = recipe.torch_too_old(str(torch.__version__))
    if too_old:
        print(f"wavepe: {too_old}; the PyTorch ops are not built", file=sys.stderr)
        return None
    tb = recipe.torch_build()
    if tb.cuda_note:
        print("wavepe: " + tb.cuda_note, file=sys.stderr)
    return tb


TORCH = torch_build()


class BuildExtensions(build_ext):
    """Compile the NumPy extension and the torch ops library through the recipe's incremental driver,
    in one parallel batch."""

    def build_extensions(self) -> None:
        obj_dir = recipe.object_dir(ROOT)
        lib_pkg = os.path.dirname(self.get_ext_fullpath("wavepe._ufuncs"))
        torch_lib = os.path.join(lib_pkg, recipe.TORCH_LIBRARY_FILE)
        plan = recipe.Plan()
        import numpy

        plan += recipe.numpy_plan(CSRC, obj_dir, self.get_ext_fullpath("wavepe._ufuncs"), numpy.get_include())
        if TORCH is not None:
            plan += recipe.torch_plan(CSRC, obj_dir, torch_lib, TORCH)
        start = time.monotonic()
        compiled = recipe.run(plan, progress=lambda done, total, name: print(f"[{done}/{total}] {name}"),
                              log=lambda text: print(text.rstrip()) if self.verbose > 1 else None)
        print(f"wavepe: compiled {len(compiled)} of {len(plan.compiles)} files in {time.monotonic() - start:.0f} s"
              + (f" (objects in {os.path.relpath(obj_dir, ROOT)})" if compiled else ""))
        outputs = [torch_lib, os.path.join(lib_pkg, recipe.TORCH_RECORD_FILE)]
        in_place = bool(self.inplace or getattr(self, "editable_mode", False))
        if TORCH is not None:
            _write_record(outputs[1], in_place)
        else:  # a library of an earlier build with torch must not slip into this one's wheel
            for path in outputs:
                if os.path.exists(path):
                    os.remove(path)
        self._ops_outputs = outputs
        # a build without the torch ops keeps the C core's objects for their first-use build to link; others none
        recipe.keep_core_objects(os.path.join(lib_pkg, recipe.CORE_OBJECTS_DIR), CSRC,
                                 [c.obj for c in recipe.core_compiles(CSRC, obj_dir)]
                                 if TORCH is None and not in_place else None)
        if in_place:
            _copy_into_package(outputs)

    def copy_extensions_to_source(self) -> None:
        """``build_ext --inplace``: setuptools builds into build/lib (with ``self.inplace`` off while
        it does, so build_extensions sees no in-place build) and then copies the extension modules
        into the source tree: the ops library and its record too, or Python would go on loading
        the library of an earlier build beside the new NumPy extension."""
        super().copy_extensions_to_source()
        outputs = getattr(self, "_ops_outputs", [])
        if TORCH is not None and outputs:
            _write_record(outputs[1], True)
        _copy_into_package(outputs)


def _write_record(path: str, in_place: bool) -> None:
    """The record beside the ops library: what it was built against, and whether for a wheel."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**TORCH.build_record(), "package": "in-place build" if in_place else "wheel"}, f)


def _copy_into_package(outputs: list[str]) -> None:
    """setuptools copies extension modules into the source tree, not other files: these too (a file
    the build did not make is removed there, so no library of an earlier build lingers)."""
    for path in outputs:
        dest = os.path.join(PACKAGE_DIR, os.path.basename(path))
        if os.path.abspath(path) == os.path.abspath(dest):
            continue
        if os.path.exists(path):
            shutil.copy2(path, dest)
        elif os.path.exists(dest):
            os.remove(dest)


class BuildPyWithSources(build_py):
    """Also put the sources of the torch ops into the package (wavepe/_csrc) for the first-use build."""

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
    """The one Python extension (the torch ops library is built beside it by BuildExtensions)."""
    rel = lambda paths: [os.path.relpath(p, ROOT) for p in paths]  # noqa: E731
    return [Extension("wavepe._ufuncs", sources=rel(recipe.core_sources(CSRC) + recipe.numpy_sources(CSRC)))]


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildExtensions, "build_py": BuildPyWithSources},
)
