"""Build the C core with the package's flags and one C harness from benchmarks/c/ into an executable.

The tile benchmarks (bench_tile_overhead.py, bench_tile_profile.py) link their harness with
``-Wl,--wrap=wavepe_tile_gemm``, so that it sees (and may stand in for) every tile product the kernels
make; bench_plan.py links the core as it is.  Objects carry debug information (``-g``), so that call sites can be named (addr2line).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _load_recipe():
    """python/wavepe/_build/recipe.py by its path (standard library only): the package itself need not be
    built to build a harness."""
    spec = importlib.util.spec_from_file_location("_wavepe_recipe", os.path.join(ROOT, "python", "wavepe", "_build",
                                                                                  "recipe.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


recipe = _load_recipe()


def simde_include() -> str:
    """SIMDe's headers (the cmeel-simde wheel of requirements-dev.txt)."""
    path = os.path.join(sysconfig.get_paths()["purelib"], "cmeel.prefix", "include")
    if not os.path.isfile(os.path.join(path, "simde", "x86", "avx512.h")):
        raise SystemExit(f"SIMDe not found under {path}: pip install -r requirements-dev.txt")
    return path


def build(harness: str, out_dir: str, *, simde: bool = False, source: str = ROOT, wrap_tiles: bool = True) -> str:
    """Compile the core and benchmarks/c/<harness> into out_dir (objects rebuilt every run: a few seconds
    a file); returns the executable's path.  simde: the files with AVX-512 (and AMX) flags built for AVX2
    on SIMDe instead, tiles emulated, as `make ctest-simde` builds them -- for a CPU without AVX-512.
    source: the source tree whose core is built (another revision's, exported; its flags are this tree's).
    wrap_tiles: link with -Wl,--wrap=wavepe_tile_gemm (the harness defines __wrap_wavepe_tile_gemm)."""
    os.makedirs(out_dir, exist_ok=True)
    cc = recipe.c_compiler()
    core = os.path.join(source, "csrc", "core")
    sources = recipe.core_sources(os.path.join(source, "csrc")) + [os.path.join(HERE, "c", harness)]
    procs, objects = [], []
    for src in sources:
        obj = os.path.join(out_dir, os.path.basename(src) + ".o")
        objects.append(obj)
        flags = [f for f in recipe.c_flags(src) if f != "-fvisibility=hidden"]
        if simde and recipe.file_flags(src):
            flags = [f for f in flags if f not in recipe.file_flags(src)]
            flags += ["-mavx2", "-mfma", "-mf16c", "-Wno-psabi", "-isystem", simde_include(), "-DWAVEPE_SIMDE_AVX512"]
        elif simde:
            flags.append("-DWAVEPE_SIMDE_AVX512")
        procs.append(subprocess.Popen([cc, *flags, "-g", f"-I{core}", "-c", src, "-o", obj]))
        if len(procs) >= (os.cpu_count() or 2):
            if procs.pop(0).wait() != 0:
                raise SystemExit("compilation failed")
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("compilation failed")
    exe = os.path.join(out_dir, os.path.splitext(harness)[0])
    wrap = ["-Wl,--wrap=wavepe_tile_gemm"] if wrap_tiles else []
    subprocess.run([cc, "-o", exe, *objects, "-lm", "-lpthread", "-ldl", *wrap], check=True)
    return exe
