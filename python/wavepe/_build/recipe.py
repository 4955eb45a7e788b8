"""What wavepe's compiled parts are made of, and how each file is compiled.

This is the one definition of the build, shared by everything that compiles wavepe:

* ``setup.py`` (``pip install``, ``make build``) loads this file by path: at build time the package is
  not importable;
* :mod:`wavepe._build.jit` compiles the torch ops library against the user's torch at first use when
  the installed package holds none (an isolated ``pip install`` of the sdist, a platform without a
  prebuilt wheel);
* the Makefile's ``ctest`` target asks it which core files to compile with which flags
  (``python3 python/wavepe/_build/recipe.py core-sources`` / ``flags FILE``), and
  ``.ci/build_wheel.sh`` asks it for the CUDA archs (``cuda-archs``); ``.ci/run`` has it compile the CUDA
  kernels' and the C core's objects (``objects-without-torch``) before the environment with torch exists.

Sources are found by globbing directories, never listed by name; a file's extra flags come from
:data:`SUFFIX_RULES`, matched on the end of its name.  To compile a new kind of kernel file with
its own flags, add a rule there: nothing else needs to change.

The second half is a small build driver (:func:`run`): parallel compiles, each object rebuilt only
when its command line, its source or a header it includes (from the compiler's ``-MD`` dependency
file) changed, so that a second build after an edit costs seconds.  It is used instead of
setuptools' compiler because that one recompiles everything on every build and cannot give one file
of an extension flags that another does not get; and instead of ``torch.utils.cpp_extension.load``
because that needs ninja and would compile the C core as C++.

Standard library only; nothing here imports wavepe, torch or numpy at module level.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

# ---------------------------------------------------------------------------------------------------
# Flags

X86_64 = frozenset({"x86_64", "amd64"})
AARCH64 = frozenset({"aarch64", "arm64"})


@dataclass(frozen=True)
class SuffixRule:
    """Files whose name ends with ``suffix`` get ``flags``; on a machine not in ``machines``
    (``platform.machine()``, lower case) they are left out of the build altogether."""

    suffix: str
    machines: frozenset[str]
    flags: tuple[str, ...]


# First match wins: list a longer, more specific suffix before a shorter one it ends with.
# The Makefile's ctest target reads this table through `recipe.py flags FILE`.
SUFFIX_RULES: tuple[SuffixRule, ...] = (
    # avx512bf16 + AMX tiles (tdpbf16ps): the amx ISA's files and tiles_amx.c, the tile instructions (isa_table.h)
    SuffixRule("_amx.c", X86_64,
               ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mavx2", "-mfma", "-mf16c",
                "-mamx-tile", "-mamx-bf16")),
    # AVX-512 + AVX512_BF16 (vdpbf16ps): the avx512bf16 ISA's files (isa_table.h)
    SuffixRule("_avx512bf16.c", X86_64,
               ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mavx2", "-mfma", "-mf16c")),
    SuffixRule("_avx512.c", X86_64, ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c")),
    SuffixRule("_avx2.c", X86_64, ("-mavx2", "-mfma", "-mf16c")),  # F16C: float16 <-> float32
    SuffixRule("_neon.c", AARCH64, ()),  # Advanced SIMD is part of the AArch64 base: no flags
)

# -fno-math-errno: libm calls may be vectorised/inlined; nothing reads errno.
C_FLAGS = ("-std=c11", "-O3", "-Wall", "-Wextra", "-fvisibility=hidden", "-fno-math-errno", "-fPIC", "-DNDEBUG")
CXX_FLAGS = ("-std=c++17", "-O3", "-Wall", "-Wextra", "-fvisibility=hidden", "-fPIC", "-DNDEBUG")
# The torch ops use torch's ABI-stable API only (csrc/torch/torch_common.h), targeting this torch: the
# library loads in every torch >= TORCH_TARGET (its headers hide anything newer).  C++17 is what the
# stable headers need (CXX_FLAGS).  No OpenMP here: torch::stable::parallel_for runs on torch's own thread pool.
TORCH_TARGET = (2, 10)
TORCH_TARGET_FLAG = "-DTORCH_TARGET_VERSION=0x%02x%02x000000000000" % TORCH_TARGET
# What the library may leave undefined (the `nm -D` contract, checked by .ci/check_stable_abi.py): torch's
# stable C shim (aoti_torch_*, torch_*), the C and C++ runtimes; never a libtorch/c10/ATen C++ symbol.
TORCH_LIBRARY_FILE = "libwavepe_ops.so"  # wavepe/<this>: loaded with torch.ops.load_library, no Python inside
TORCH_RECORD_FILE = "libwavepe_ops.json"  # beside it: what it was built for (build_record)
# -ftz=true: fp32 arithmetic flushes subnormal operands and results to zero, as the CPU kernels do
# under FTZ/DAZ (docs/DEVELOPING.md, "Non-finite values"), so a subnormal input reads as 0 on every
# device (fp64 has no flush on GPUs; its subnormals are full speed there).
# -Xptxas -v: ptxas reports registers, spills and stack per kernel and arch (kept in <object>.log, read by
# .ci/check_cuda_kernels.py).
# -Xfatbin -compress-all: every image of a fatbin compressed (the toolkit's own compression, which the driver undoes
# when it loads a module), not only those its default picks -- which left most of the SASS as it was: the ops
# library's device code 74.0 MB -> 23.3 MB (2026-12-02, CUDA 13.0.88; the same images, instruction for instruction).
NVCC_FLAGS = ("-O3", "-std=c++17", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr", "-ftz=true", "-Xptxas", "-v",
              "-Xfatbin", "-compress-all")
# Warnings are errors in development builds (the Makefile and CI set WAVEPE_WERROR=1) but never on a
# user's machine, whose newer compiler may warn about something ours does not.
WERROR_FLAGS = ("-Werror",)
NVCC_WERROR_FLAGS = ("-Xcompiler", "-Wall,-Wextra,-Werror", "-Werror", "all-warnings")
# SASS for these archs, and PTX where a GPU would otherwise find none (ptx_archs: the last arch's, for GPUs newer
# than the toolkit knows; on aarch64 compute_100's for sm_110); CUDA 13 compiles for sm_75 and newer, the kernels
# need sm_80.  WAVEPE_CUDA_ARCHS overrides (e.g. "90" alone for a quicker build of one GPU's code).
DEFAULT_CUDA_ARCHS = "80;90;100;120"

# What the torch extension is compiled from, by directory and file ending (all of it is shipped
# inside the package as wavepe/_csrc so that the torch ops can be compiled at first use).
SHIPPED_SOURCES: dict[str, tuple[str, ...]] = {
    "core": (".c", ".h"),
    "torch": (".cpp", ".h"),
    "cuda": (".cu", ".cuh", ".h"),
}


def machine() -> str:
    return platform.machine().lower()


def env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def werror() -> bool:
    return env_flag("WAVEPE_WERROR", False)


def suffix_rule(path: str) -> SuffixRule | None:
    name = os.path.basename(path)
    return next((r for r in SUFFIX_RULES if name.endswith(r.suffix)), None)


def builds_on(path: str, arch: str | None = None) -> bool:
    """Whether ``path`` is compiled on this (or ``arch``'s) machine."""
    rule = suffix_rule(path)
    return rule is None or (arch or machine()) in rule.machines


def file_flags(path: str) -> tuple[str, ...]:
    """The flags a C/C++ source gets for what its name says (SUFFIX_RULES)."""
    rule = suffix_rule(path)
    return rule.flags if rule else ()


def c_flags(path: str) -> list[str]:
    return [*C_FLAGS, *(WERROR_FLAGS if werror() else ()), *file_flags(path)]


def cxx_flags(path: str) -> list[str]:
    return [*CXX_FLAGS, *(WERROR_FLAGS if werror() else ()), *file_flags(path)]


def cuda_archs() -> list[str]:
    text = os.environ.get("WAVEPE_CUDA_ARCHS", DEFAULT_CUDA_ARCHS)
    return [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]


def nvcc_flags() -> list[str]:
    return [*NVCC_FLAGS, *(NVCC_WERROR_FLAGS if werror() else ())]


# The compute capabilities (x 10) at which csrc/cuda's own `__CUDA_ARCH__` tests change the device code: below 80 an
# #error (common.cuh), from 100 the dK/dV table instance's chunks and the wide dK/dV's passes, from 120 the wide
# dK/dV's stub at head dim 128 (attention_bwd_dkdv_tc.cu), from 100 to 119 the products' unrolling (arch_tuning.cuh).  Archs
# between two levels compile to the same PTX but for the CUDA headers' own branches (sm_90's bf16-to-float
# `cvt.f32.bf16` where sm_80's PTX has a `mov`; the static checks' figures of the sm_90 SASS within 1 %), so they share
# one front-end (cicc) run: sm_90's SASS comes from compute_80's PTX -- 74 of the 536 CPU seconds of a wheel's CUDA
# compile on a Zen 5.  tests/test_build.py fails when csrc/cuda tests __CUDA_ARCH__ against a value missing here.
CUDA_CODE_LEVELS = (80, 100, 120)
# The levels where nvcc's front end itself makes other code of the same source: sm_100's SASS from compute_80's PTX is
# not compute_100's (other registers and main-loop mixes, a spill in the wide dQ: CUDA 13.0, 2026-12-02), while sm_120's
# from compute_100's PTX is compute_120's instruction for instruction -- every kernel of attention_bwd.cu, relbias.cu and
# rope.cu, checked then.  So a source that tests __CUDA_ARCH__ at no level above 80 (code_levels) runs the front end
# twice, not three times: the backward, two sources since, 419 CPU seconds of nvcc on a Xeon, 544 as one at three levels.
TOOLCHAIN_CODE_LEVELS = (80, 100)


def ptx_groups(archs: Sequence[str], levels: Sequence[int] = CUDA_CODE_LEVELS) -> list[tuple[str, list[str]]]:
    """``archs`` grouped by ``levels`` (a source's: code_levels), in order: (the virtual arch compiled once -- the
    group's oldest --, the archs whose SASS ptxas makes from it)."""
    groups: dict[int, list[str]] = {}
    for a in archs:
        level = max((lv for lv in levels if lv <= int(a)), default=int(a))
        groups.setdefault(level, []).append(a)
    return [(min(g, key=int), g) for g in groups.values()]


# The compute capabilities (x 10) of NVIDIA's GPUs from 8.0 on, which the build's PTX is planned against (ptx_archs);
# Jetson's (integrated: Orin, Thor) come only with aarch64 CPUs.
GPU_CCS = {80: "A100", 86: "RTX 30xx, A10", 87: "Jetson Orin", 89: "L4, RTX 40xx", 90: "H100/H200, GH200",
           100: "B200, GB200", 103: "B300", 110: "Jetson Thor", 120: "RTX 50xx", 121: "DGX Spark (GB10)"}
JETSON_CCS = (87, 110)


def gpu_ccs(machine: str | None = None) -> list[int]:
    """GPU_CCS of the GPUs a machine of this CPU architecture (platform.machine()) can have."""
    arm = (machine or platform.machine()).lower() in ("aarch64", "arm64")
    return [cc for cc in GPU_CCS if arm or cc not in JETSON_CCS]


def sass_for(archs: Sequence[str], cc: int) -> str | None:
    """The arch of ``archs`` whose SASS a GPU of compute capability ``cc`` (x 10: 86 for 8.6) runs, or None: CUDA's
    rule -- machine code for X.Y runs on X.Z for Z >= Y, never on another major."""
    fits = [a for a in archs if int(a) // 10 == cc // 10 and int(a) % 10 <= cc % 10]
    return max(fits, key=int) if fits else None


def ptx_archs(archs: Sequence[str], machine: str | None = None,
              levels: Sequence[int] = CUDA_CODE_LEVELS) -> list[str]:
    """The virtual archs whose PTX the build ships, oldest first: the newest group's (GPUs newer than the toolkit
    compile it when the library loads), and an older group's where a GPU of ``machine`` (gpu_ccs) from its arch to the
    next group's has no SASS in the build -- on aarch64 the default's compute_100, which Jetson Thor (sm_110: between
    sm_100 and sm_120, another major than either) compiles; on x86-64 none (its 8.x to 10.x GPUs all run SASS of the
    default's: each more PTX would be ~7.5 MB of the wheel for no GPU)."""
    groups = [int(v) for v, _ in ptx_groups(archs, levels)]
    ccs = gpu_ccs(machine)
    return [str(v) for v, nxt in zip(groups, groups[1:] + [None])
            if nxt is None or any(sass_for(archs, cc) is None for cc in ccs if v <= cc < nxt)]


def image_for(archs: Sequence[str], cc: int, ptx: Sequence[str] | None = None) -> str | None:
    """What a GPU of compute capability ``cc`` (x 10) runs of a build with SASS for ``archs`` and the PTX of ``ptx``
    (default: ptx_archs(archs) here): 'sm_XY' (its SASS), 'compute_XY' (PTX, which the driver compiles when the
    library loads: the newest at or below cc), or None (no kernel runs)."""
    sass = sass_for(archs, cc)
    if sass is not None:
        return f"sm_{sass}"
    fits = [v for v in (ptx_archs(archs) if ptx is None else ptx) if int(v) <= cc]
    return f"compute_{max(fits, key=int)}" if fits else None


def gencode_flags(archs: Sequence[str], levels: Sequence[int] = CUDA_CODE_LEVELS) -> list[str]:
    """SASS for every arch (one front-end run per group of ptx_groups), and the PTX of ptx_archs -- for a source of
    these code ``levels`` (code_levels)."""
    return ([f"-gencode=arch=compute_{v},code=[{','.join(f'sm_{a}' for a in g)}]" for v, g in ptx_groups(archs, levels)] +
            [f"-gencode=arch=compute_{v},code=compute_{v}" for v in ptx_archs(archs, levels=levels)])


_ARCH_TEST = re.compile(r"__CUDA_ARCH__\s*(?:[<>]=?|==|!=)\s*(\d+)")
_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# The file whose kernel device.cu asks the driver about (whether this library holds code the GPU runs): compiled at
# every level whatever its code, so that its images are those of the sources with the fewest (the PTX of ptx_archs).
PROBE_SOURCE = "device.cu"


def arch_tests(path: str, src_root: str, _seen: set[str] | None = None) -> set[int]:
    """The values ``path`` and the headers under ``src_root`` it includes (``#include "..."``: beside the file, or
    from ``src_root``) compare __CUDA_ARCH__ with."""
    seen = set() if _seen is None else _seen
    path = os.path.realpath(path)
    if path in seen:
        return set()
    seen.add(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    values = {int(v) for v in _ARCH_TEST.findall(text)}
    for name in _LOCAL_INCLUDE.findall(text):
        for base in (os.path.dirname(path), src_root):
            header = os.path.join(base, name)
            if os.path.isfile(header):
                values |= arch_tests(header, src_root, seen)
                break
    return values


def code_levels(path: str, src_root: str) -> tuple[int, ...]:
    """The code levels of the CUDA source ``path``: the toolchain's, and those where its own code (or a header's it
    includes) tests __CUDA_ARCH__ -- all of CUDA_CODE_LEVELS for the probe (PROBE_SOURCE)."""
    if os.path.basename(path) == PROBE_SOURCE:
        return CUDA_CODE_LEVELS
    own = {v // 10 for v in arch_tests(path, src_root) if v // 10 > min(TOOLCHAIN_CODE_LEVELS)}
    return tuple(sorted(set(TOOLCHAIN_CODE_LEVELS) | own))


def shipped_ptx(archs: Sequence[str], src_root: str) -> list[str]:
    """The virtual archs whose PTX the library holds, oldest first: each source's ptx_archs for its code_levels."""
    ptx = {v for s in cuda_sources(src_root) for v in ptx_archs(archs, levels=code_levels(s, src_root))}
    return sorted(ptx, key=int)


# ---------------------------------------------------------------------------------------------------
# Sources


def _glob(src_root: str, folder: str, pattern: str) -> list[str]:
    return sorted(glob.glob(os.path.join(src_root, folder, pattern)))


def core_sources(src_root: str, arch: str | None = None) -> list[str]:
    """csrc/core/*.c that build on this machine (SUFFIX_RULES leave out other machines' kernels)."""
    return [p for p in _glob(src_root, "core", "*.c") if builds_on(p, arch)]


def numpy_sources(src_root: str) -> list[str]:
    return _glob(src_root, "numpy", "*.c")


def torch_sources(src_root: str, cuda: bool) -> list[str]:
    """csrc/torch/*.cpp; the CUDA launches (*_cuda.cpp) only with the CUDA kernels."""
    return [p for p in _glob(src_root, "torch", "*.cpp") if cuda or not p.endswith("_cuda.cpp")]


def cuda_sources(src_root: str) -> list[str]:
    return _glob(src_root, "cuda", "*.cu")


def shipped_sources(src_root: str) -> list[str]:
    """Every file the torch extension is compiled from, relative to ``src_root``."""
    out = []
    for folder, endings in SHIPPED_SOURCES.items():
        for path in _glob(src_root, folder, "*"):
            if os.path.isfile(path) and path.endswith(endings):
                out.append(os.path.relpath(path, src_root))
    return sorted(out)


# ---------------------------------------------------------------------------------------------------
# Toolchain


def c_compiler() -> str:
    return os.environ.get("CC") or "cc"


def cxx_compiler() -> str:
    return os.environ.get("CXX") or "c++"


def python_include_flags() -> list[str]:
    paths = sysconfig.get_paths()
    dirs = dict.fromkeys(p for p in (paths.get("include"), paths.get("platinclude")) if p)
    return [f"-isystem{d}" for d in dirs]


def missing_tools(cuda: bool = False) -> list[str]:
    """What is missing to compile the torch ops here, each as a sentence saying how to get it."""
    problems = []
    for what, cmd, var, pkg in (("C compiler", c_compiler(), "CC", "gcc"), ("C++ compiler", cxx_compiler(), "CXX", "g++")):
        if shutil.which(shlex.split(cmd)[0]) is None:
            problems.append(f"no {what}: `{cmd}` is not on PATH (install one, e.g. `apt install {pkg}` on "
                            f"Debian/Ubuntu or `conda install -c conda-forge compilers`, or set {var})")
    return problems


def find_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
        return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


def find_cuda_home(nvcc: str, torch_cuda_home: str | None = None) -> str | None:
    """The CUDA toolkit root holding include/cuda_runtime_api.h (nvcc may be a wrapper script)."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                 os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), torch_cuda_home, "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "include", "cuda_runtime_api.h")):
            return home
    return None


@dataclass(frozen=True)
class TorchBuild:
    """How to compile the torch ops against one installed torch (its stable headers and C shim)."""

    version: str  # the torch whose headers are used (the binary serves every torch >= TORCH_TARGET)
    cxx_flags: tuple[str, ...]
    library_dirs: tuple[str, ...]
    libraries: tuple[str, ...]
    cuda: bool  # the CUDA kernels are compiled
    nvcc: str | None = None
    cuda_home: str | None = None
    cuda_archs: tuple[str, ...] = ()
    cuda_note: str | None = None  # why the CUDA kernels are not compiled, when a user may expect them

    def build_record(self) -> dict:
        """What a built library is (written beside it as TORCH_RECORD_FILE; read before loading it)."""
        return {"abi": "stable", "torch_target": "%d.%d" % TORCH_TARGET, "built_against": self.version,
                "cuda": self.cuda, "cuda_archs": list(self.cuda_archs), "machine": machine()}


def torch_version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string such as '2.13.0+cpu'."""
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def torch_too_old(version: str) -> str | None:
    """Why torch ``version`` gets no torch ops (older than TORCH_TARGET), or None: the one sentence that
    setup.py prints, the loader raises as ImportError and torch_build() raises."""
    if torch_version_tuple(version) >= TORCH_TARGET:
        return None
    return (f"wavepe's PyTorch ops need torch >= {'%d.%d' % TORCH_TARGET} (they are built on torch's ABI-stable "
            f"API); this is torch {version}: upgrade torch (the NumPy API, wavepe.ufuncs, works without it)")


def cuda_wanted(torch_has_cuda: bool) -> tuple[bool, str | None]:
    """Whether to compile the CUDA kernels, and a note when a CUDA torch gets none.

    WAVEPE_BUILD_CUDA=1: always (a wheel: its kernels serve every CUDA torch, whatever torch builds it);
    0: never; unset: when the running torch has CUDA and nvcc is found."""
    value = os.environ.get("WAVEPE_BUILD_CUDA", "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False, None
    forced = value in ("1", "true", "yes", "on")
    if not forced and not torch_has_cuda:
        return False, None
    if find_nvcc() is None:
        if forced:
            raise RuntimeError("wavepe: WAVEPE_BUILD_CUDA=1 but nvcc was not found (put it on PATH or set CUDA_HOME)")
        return False, ("torch has CUDA but nvcc was not found (put it on PATH or set CUDA_HOME): the CUDA kernels "
                       "are not compiled and ops on CUDA tensors will raise; the prebuilt wheels have them")
    return True, None


def torch_build() -> TorchBuild:
    """Flags for the installed torch (raises ImportError without torch)."""
    import torch

    root = os.path.dirname(os.path.abspath(torch.__file__))
    too_old = torch_too_old(str(torch.__version__))
    if too_old:
        raise RuntimeError(too_old)
    # -isystem: their warnings are not ours
    cxx = [f"-isystem{os.path.join(root, 'include')}", TORCH_TARGET_FLAG]
    lib_dirs = [os.path.join(root, "lib")]
    libs = ["torch_cpu"]  # the stable C shim; resolved to the copy torch has loaded (same soname)
    cuda, note = cuda_wanted(bool(torch.version.cuda))
    nvcc = home = None
    archs: tuple[str, ...] = ()
    if cuda:
        nvcc = find_nvcc()
        assert nvcc is not None
        home = find_cuda_home(nvcc)
        if home is None:
            raise RuntimeError(f"wavepe: nvcc found ({nvcc}) but not the CUDA headers (cuda_runtime_api.h); "
                               "set CUDA_HOME, or WAVEPE_BUILD_CUDA=0 to build without the CUDA kernels")
        archs = tuple(cuda_archs())
        cxx += [f"-isystem{os.path.join(home, 'include')}", "-DWAVEPE_WITH_CUDA=1",
                '-DWAVEPE_CUDA_ARCHS_TEXT="%s"' % describe_archs(archs)]
        lib_dirs += [d for d in (os.path.join(home, "lib64"), os.path.join(home, "lib")) if os.path.isdir(d)]
        libs += ["cudart_static", "rt", "pthread", "dl"]  # the runtime inside: no libcudart.so needed at run time
    return TorchBuild(version=str(torch.__version__), cxx_flags=tuple(cxx), library_dirs=tuple(lib_dirs),
                      libraries=tuple(libs), cuda=cuda, nvcc=nvcc, cuda_home=home, cuda_archs=archs, cuda_note=note)


def describe_archs(archs: Sequence[str]) -> str:
    """'sm_80 sm_90 sm_100 sm_120 +PTX compute_120' (on aarch64 '... +PTX compute_100 compute_120') for the gencode
    of ``archs``."""
    return " ".join(f"sm_{a}" for a in archs) + (" +PTX " + " ".join(f"compute_{v}" for v in ptx_archs(archs))
                                                 if archs else "")


# ---------------------------------------------------------------------------------------------------
# Build plans: which commands make an extension


@dataclass(frozen=True)
class Compile:
    source: str
    obj: str
    argv: tuple[str, ...]  # without the dependency-file flags, which run() adds


@dataclass(frozen=True)
class Link:
    objects: tuple[str, ...]
    output: str
    argv: tuple[str, ...]
    record: str  # where the command that made ``output`` is kept (beside the objects, not the output)
    shared_libstdcxx: bool = False  # C++ that must share the process's libstdc++ (torch's): checked after linking


@dataclass
class Plan:
    compiles: list[Compile] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)

    def __iadd__(self, other: "Plan") -> "Plan":
        seen = {c.obj for c in self.compiles}
        self.compiles += [c for c in other.compiles if c.obj not in seen]
        self.links += other.links
        return self


def _obj(obj_dir: str, group: str, source: str) -> str:
    return os.path.join(obj_dir, group, os.path.basename(source) + ".o")


def core_compiles(src_root: str, obj_dir: str) -> list[Compile]:
    cc = shlex.split(c_compiler())
    return [Compile(s, o, (*cc, *c_flags(s), "-c", s, "-o", o))
            for s in core_sources(src_root) for o in [_obj(obj_dir, "core", s)]]


def cuda_compiles(src_root: str, obj_dir: str, nvcc: str, archs: Sequence[str]) -> list[Compile]:
    """The CUDA kernels' objects of the torch ops library (torch_plan's): nvcc alone, no torch -- so that CI can
    compile them (``recipe.py objects-without-torch``) while the environment with torch is still being made."""
    return [Compile(s, o, (nvcc, *nvcc_flags(), *gencode_flags(archs, code_levels(s, src_root)), "-I" + src_root,
                           "-c", s, "-o", o))
            for s in cuda_sources(src_root) for o in [_obj(obj_dir, "cuda", s)]]


def numpy_plan(src_root: str, obj_dir: str, output: str, numpy_include: str) -> Plan:
    """wavepe._ufuncs: the C core and the NumPy binding."""
    cc = shlex.split(c_compiler())
    core = core_compiles(src_root, obj_dir)
    own = [Compile(s, o, (*cc, *c_flags(s), *python_include_flags(), f"-isystem{numpy_include}", "-c", s, "-o", o))
           for s in numpy_sources(src_root) for o in [_obj(obj_dir, "numpy", s)]]
    objs = tuple(c.obj for c in core + own)
    link = (*cc, "-shared", *objs, "-o", output, "-lm")
    return Plan(core + own, [Link(objs, output, link, os.path.join(obj_dir, "numpy", "link.cmd"))])


# An installation built without torch (an isolated ``pip install``) keeps the C core's objects, which its NumPy
# extension was linked from, in wavepe/<this>/ with a record (CORE_OBJECTS_RECORD: core_objects_record's value, the
# objects' names and SHA-256): the first-use build of the torch ops links them where it would compile the same
# files with the same commands again -- 6 files to compile there, not 37 (the core is ~88 % of that compile).
CORE_OBJECTS_DIR = "_core_objects"
CORE_OBJECTS_RECORD = "record.json"


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def without_root(argv: Iterable[str], src_root: str) -> list[str]:
    """A command with the sources' folder as the placeholder {SRC}: the same for every copy of the sources."""
    return [a.replace(src_root, "{SRC}") for a in argv]


def core_objects_record(src_root: str) -> dict[str, Any]:
    """What the C core's objects are compiled from: the compile commands (the source and object paths as
    placeholders), the machine, and a SHA-256 of the core's shipped files.  Objects kept by one build serve
    another only where this is the same for both."""
    h = hashlib.sha256()
    for rel in shipped_sources(src_root):
        if rel.startswith("core" + os.sep):
            h.update(rel.encode() + b"\0")
            with open(os.path.join(src_root, rel), "rb") as f:
                h.update(f.read())
    return {"machine": machine(), "sources_sha256": h.hexdigest(),
            "compiles": [without_root(c.argv, src_root) for c in core_compiles(src_root, "{OBJ}")]}


def keep_core_objects(dest: str, src_root: str, objects: Sequence[str] | None) -> None:
    """Keep the C core's ``objects`` (core_compiles' for ``src_root``) in ``dest`` with their record -- setup.py's
    for a build without the torch ops (CORE_OBJECTS_DIR); None: keep none (``dest`` removed)."""
    shutil.rmtree(dest, ignore_errors=True)
    if objects is None:
        return
    os.makedirs(dest)
    for obj in objects:
        shutil.copy2(obj, os.path.join(dest, os.path.basename(obj)))
    names = sorted(os.path.basename(obj) for obj in objects)
    with open(os.path.join(dest, CORE_OBJECTS_RECORD), "w", encoding="utf-8") as f:
        json.dump({"record": core_objects_record(src_root),
                   "objects": {n: file_sha256(os.path.join(dest, n)) for n in names}}, f, indent=1)


def torch_plan(src_root: str, obj_dir: str, output: str, tb: TorchBuild,
               core_objects: Sequence[str] | None = None) -> Plan:
    """The torch ops library: the C core, the stable-ABI bindings and (with nvcc) the CUDA kernels.
    ``core_objects``: the C core's objects compiled already (an installation's, CORE_OBJECTS_DIR), linked
    in place of its compiles."""
    cxx = shlex.split(cxx_compiler())
    core = [] if core_objects is not None else core_compiles(src_root, obj_dir)
    own = [Compile(s, o, (*cxx, *cxx_flags(s), *tb.cxx_flags, "-c", s, "-o", o))
           for s in torch_sources(src_root, tb.cuda) for o in [_obj(obj_dir, "torch", s)]]
    cuda = cuda_compiles(src_root, obj_dir, tb.nvcc, tb.cuda_archs) if tb.cuda and tb.nvcc else []
    objs = (*(core_objects or ()), *(c.obj for c in core + own + cuda))
    # --as-needed drops what nothing references; -z now: every symbol resolved when the library loads
    link = (*cxx, "-shared", *objs, "-o", output, "-Wl,--as-needed", "-Wl,-z,now",
            *(f"-L{d}" for d in tb.library_dirs), *(f"-l{lib}" for lib in tb.libraries))
    return Plan(core + own + cuda, [Link(objs, output, link, os.path.join(obj_dir, "torch", "link.cmd"),
                                         shared_libstdcxx=True)])


# ---------------------------------------------------------------------------------------------------
# The driver


class BuildError(RuntimeError):
    """A compile or link command failed; the message holds the command and the compiler's output."""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make-style dependency file (gcc/clang/nvcc -MD)."""
    text = text.replace("\\\n", " ")
    head, sep, rest = text.partition(": ")
    if not sep:  # "target:\n" or "target : deps"
        head, sep, rest = text.partition(":")
    deps, cur, i = [], "", 0
    while i < len(rest):
        ch = rest[i]
        if ch == "\\" and i + 1 < len(rest) and rest[i + 1] in " #":
            cur += rest[i + 1]
            i += 2
            continue
        if ch.isspace():
            if cur:
                deps.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    if cur:
        deps.append(cur)
    return deps


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _argv_record(argv: Sequence[str]) -> str:
    return json.dumps(list(argv))


def compile_is_stale(c: Compile) -> bool:
    """True unless the object exists, was made by the same command, and is newer than its source
    and every header the compiler read (its -MD dependency file)."""
    made = _mtime(c.obj)
    if made is None or _read(c.obj + ".cmd") != _argv_record(c.argv):
        return True
    dep_text = _read(c.obj + ".d")
    deps = parse_depfile(dep_text) if dep_text else [c.source]
    return any((t := _mtime(d)) is None or t > made for d in deps or [c.source])


def link_is_stale(link: Link) -> bool:
    made = _mtime(link.output)
    if made is None or _read(link.record) != _argv_record(link.argv):
        return True
    return any((t := _mtime(o)) is None or t > made for o in link.objects)


def elf_needed(path: str) -> list[str] | None:
    """The DT_NEEDED libraries of a 64-bit little-endian ELF shared object (None: another format)."""
    import struct

    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for _name, sh_type, _fl, _addr, off, size, link, _info, _al, entsize in sections:
        if sh_type != 6:  # SHT_DYNAMIC; its sh_link is the string table of the names
            continue
        stroff = sections[link][4]
        names = []
        for i in range(0, size, entsize or 16):
            tag, val = struct.unpack_from("<qQ", data, off + i)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                end = data.index(b"\0", stroff + val)
                names.append(data[stroff + val:end].decode())
        return names
    return []


def check_shared_libstdcxx(path: str, link_argv: Sequence[str]) -> None:
    """A C++ extension loaded into torch's process must use the shared libstdc++ torch uses: one
    linked statically (some images' default g++ does so) brings a second copy of the C++ runtime,
    and its exceptions and streams crash inside torch (every error message segfaults)."""
    needed = elf_needed(path)
    if needed is None or platform.system() != "Linux" or any(n.startswith("libc++.") for n in needed):
        return
    if not any(n.startswith("libstdc++.so") for n in needed):
        raise BuildError(
            f"{os.path.basename(path)} was linked with libstdc++ inside it (not as the shared "
            f"libstdc++.so.6 that torch uses): the C++ compiler `{link_argv[0]}` links it statically, and "
            "two C++ runtimes in one process crash on the first error message. Build with the system "
            "compilers instead, e.g. CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED=\"/usr/bin/gcc -shared\" "
            "pip install ... (or set CXX to a g++ that links libstdc++ dynamically).")


def _run_command(argv: Sequence[str], what: str) -> str:
    try:
        proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    except FileNotFoundError:
        raise BuildError(f"{what}: `{argv[0]}` not found") from None
    if proc.returncode != 0:
        lines = proc.stdout.rstrip().splitlines()
        shown = "\n".join(lines[-40:]) if len(lines) > 40 else "\n".join(lines)
        raise BuildError(f"{what} failed (exit {proc.returncode}):\n$ {shlex.join(argv)}\n{shown}")
    return proc.stdout


def default_jobs() -> int:
    for var in ("WAVEPE_BUILD_JOBS", "MAX_JOBS"):
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def nvcc_threads(jobs: int) -> int:
    """nvcc's ``--threads`` for a build running ``jobs`` compiles at once: one nvcc compiles a file's archs one after
    another (attention_bwd.cu: ~310 CPU seconds on a Xeon, the build's longest chain), so the cores are shared by the long
    CUDA sources, which start first -- 1 (no flag) on two cores, where the other compiles keep both busy (measured,
    a clean wheel build on a Zen 5's two cores: 339 s wall without, 347 with --threads 2, and 70 CPU seconds more)."""
    return max(1, min(8, jobs // 2))


def _source_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def run(plan: Plan, *, jobs: int | None = None, progress: Callable[[int, int, str], None] | None = None,
        log: Callable[[str], None] | None = None) -> list[str]:
    """Bring every object and output of ``plan`` up to date; returns the sources it compiled.

    ``progress(done, total, name)`` is called after each compile; ``log(text)`` receives each
    command and its output (warnings).  Raises BuildError on the first failure."""
    # the longest compiles first, so that none starts last and finishes alone: CUDA sources (every arch: one,
    # attention_bwd.cu, is several minutes), then by size
    todo = sorted((c for c in plan.compiles if compile_is_stale(c)),
                  key=lambda c: (not c.source.endswith(".cu"), -_source_size(c.source)))
    lock = threading.Lock()
    done = 0
    workers = jobs or default_jobs()
    # (not in the .cmd record, as -MD: how many cores built an object does not make it stale)
    nvcc_flags_for_jobs = ("--threads", str(nvcc_threads(workers))) if nvcc_threads(workers) > 1 else ()

    def compile_one(c: Compile) -> None:
        nonlocal done
        os.makedirs(os.path.dirname(c.obj), exist_ok=True)
        for stale in (c.obj + ".cmd", c.obj + ".d", c.obj + ".log"):
            if os.path.exists(stale):
                os.remove(stale)
        threads = nvcc_flags_for_jobs if c.source.endswith(".cu") else ()
        out = _run_command([*c.argv, *threads, "-MD", "-MF", c.obj + ".d"], f"compiling {os.path.basename(c.source)}")
        with open(c.obj + ".log", "w", encoding="utf-8") as f:  # warnings; ptxas's -v report for CUDA sources
            f.write(out)
        with open(c.obj + ".cmd", "w", encoding="utf-8") as f:
            f.write(_argv_record(c.argv))
        with lock:
            done += 1
            if log:
                log(f"$ {shlex.join(c.argv)}\n{out}")
            if progress:
                progress(done, len(todo), os.path.basename(c.source))

    if todo:
        with ThreadPoolExecutor(max(1, min(workers, len(todo)))) as pool:
            futures = [pool.submit(compile_one, c) for c in todo]
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f.done() and f.exception() is not None]
            if failed:
                for f in futures:
                    f.cancel()
                raise failed[0].exception()  # type: ignore[misc]
    for link in plan.links:
        if link_is_stale(link):
            os.makedirs(os.path.dirname(link.output) or ".", exist_ok=True)
            tmp = f"{link.output}.{os.getpid()}.tmp"
            argv = [tmp if a == link.output else a for a in link.argv]
            try:
                out = _run_command(argv, f"linking {os.path.basename(link.output)}")
                if link.shared_libstdcxx:
                    check_shared_libstdcxx(tmp, argv)
                os.replace(tmp, link.output)  # atomic: a process that has the old one loaded keeps it
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
            os.makedirs(os.path.dirname(link.record), exist_ok=True)
            with open(link.record, "w", encoding="utf-8") as f:
                f.write(_argv_record(link.argv))
            if log:
                log(f"$ {shlex.join(argv)}\n{out}")
    return [c.source for c in todo]


# ---------------------------------------------------------------------------------------------------
# Command line, for the Makefile and the CI scripts


def object_dir(project_root: str) -> str:
    """Where setup.py keeps its objects (per CPython: the NumPy extension's binding is compiled for one); the C
    core's are the same files for every build that compiles them with the same commands."""
    return os.path.join(project_root, "build", f"obj.{sysconfig.get_platform()}-{sys.implementation.cache_tag}")


def _main(argv: Iterable[str]) -> int:
    args = list(argv)
    project = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    root = os.path.join(project, "csrc")
    if args[:1] == ["core-sources"] and len(args) <= 2:  # optional ARCH (e.g. aarch64): a cross build's files
        print(" ".join(os.path.relpath(p) for p in core_sources(os.path.normpath(root), *args[1:])))
    elif args[:1] == ["flags"] and len(args) == 2:
        print(" ".join(file_flags(args[1])))
    elif args[:1] == ["c-flags"] and len(args) == 2:  # all of them, as the package's build compiles FILE
        print(" ".join(c_flags(args[1])))
    elif args[:1] == ["nvcc-flags"]:
        print(" ".join(nvcc_flags()))
    elif args[:1] == ["cuda-archs"]:
        print(" ".join(cuda_archs()))
    elif args[:1] == ["core-objects"] and len(args) == 1:
        # the package's own objects of the C core (setup.py's, compiled here where missing or stale), for
        # the Makefile's ctest-release to link the C tests against what users run
        compiles = core_compiles(root, object_dir(project))
        try:
            run(Plan(compiles), log=lambda text: print(text.rstrip(), file=sys.stderr))
        except BuildError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(" ".join(os.path.relpath(c.obj) for c in compiles))
    elif args[:1] == ["objects-without-torch"] and len(args) == 1:
        # the objects of a build with the CUDA kernels that need no torch -- the CUDA kernels' and the C core's --,
        # compiled as setup.py would (the same commands, under the same folder: a build after this one finds them up
        # to date; the longest first, as there) -- CI's first step, beside making the environment with torch (.ci/run)
        nvcc = find_nvcc()
        if nvcc is None:
            print("recipe.py objects-without-torch: nvcc not found (put it on PATH or set CUDA_HOME)", file=sys.stderr)
            return 1
        compiles = cuda_compiles(root, object_dir(project), nvcc, cuda_archs()) + core_compiles(root, object_dir(project))
        try:
            done = run(Plan(compiles), log=lambda text: print(text.rstrip(), file=sys.stderr))
        except BuildError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"compiled {len(done)} of {len(compiles)} files: the CUDA kernels ({describe_archs(cuda_archs())}) "
              "and the C core")
    else:
        print("usage: recipe.py core-sources [ARCH] | flags FILE | c-flags FILE | nvcc-flags | cuda-archs | core-objects"
              " | objects-without-torch", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
