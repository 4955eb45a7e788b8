"""Build of wavepe's compiled parts.

Three kinds of object, each compiled with the flags it needs:

* the C core (csrc/core/*.c, C11, warnings as errors); files named *_avx2.c
  get -mavx2 -mfma and *_avx512.c the x86-64-v4 AVX-512 flags on x86-64 (ISA_FLAGS),
  and are chosen at run time by CPU features;
* wavepe._ufuncs, the NumPy extension (csrc/numpy/*.c), always built;
* wavepe._C, the PyTorch extension (csrc/torch/*.cpp, C++20), built when
  torch is importable at build time; with CUDA sources (csrc/cuda/*.cu,
  csrc/torch/*_cuda.cpp) when torch has CUDA and nvcc is found.

torch is deliberately NOT a build requirement: an isolated build would fetch
another, multi-GB torch.  Build against the installed torch with
``pip install --no-build-isolation .`` (the Makefile does this).  Without
torch the package still builds (NumPy API only) and ``wavepe.ops`` explains
how to rebuild.  Environment: WAVEPE_BUILD_TORCH=0 / WAVEPE_BUILD_CUDA=0 skip
those parts; WAVEPE_CUDA_ARCHS (default "80;90") picks GPU architectures.
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
IS_X86_64 = platform.machine().lower() in ("x86_64", "amd64")

C_FLAGS = ["-std=c11", "-O3", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
           "-fno-math-errno", "-fPIC"]
AVX2_FLAGS = ["-mavx2", "-mfma"]
AVX512_FLAGS = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma"]
# per-ISA flags by file suffix (keep in step with the Makefile's ctest rules)
ISA_FLAGS = {"_avx2.c": AVX2_FLAGS, "_avx512.c": AVX512_FLAGS}
CXX_FLAGS = ["-std=c++20", "-O3", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-fPIC"]


def rel(*parts: str) -> list[str]:
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, *parts)))


def core_sources() -> list[str]:
    srcs = rel("csrc", "core", "*.c")
    if not IS_X86_64:
        srcs = [s for s in srcs if not s.endswith(tuple(ISA_FLAGS))]
    return srcs


def want(var: str) -> bool:
    return os.environ.get(var, "1").strip().lower() not in ("0", "false", "no", "off")


def torch_build_info():
    """Include/library flags of the installed torch, or None without torch."""
    if not want("WAVEPE_BUILD_TORCH"):
        return None
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:
        print("wavepe: torch not importable at build time; building the NumPy API only",
              file=sys.stderr)
        return None
    info = {
        # -isystem: warnings inside torch's headers are not ours to fix
        "cflags": [f"-isystem{p}" for p in cpp_extension.include_paths()] + [
            "-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=_C",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"],
        "library_dirs": cpp_extension.library_paths(),
        "libraries": ["c10", "torch", "torch_cpu", "torch_python"],
        "cuda": False,
    }
    nvcc = find_nvcc()
    cuda_home = find_cuda_home(nvcc, cpp_extension) if nvcc else None
    if want("WAVEPE_BUILD_CUDA") and torch.version.cuda and nvcc and rel("csrc", "cuda", "*.cu"):
        if cuda_home is None:
            raise RuntimeError(f"wavepe: nvcc found ({nvcc}) but not the CUDA headers (cuda_runtime_api.h); "
                               "set CUDA_HOME, or WAVEPE_BUILD_CUDA=0 to build without the CUDA kernels")
        info["cuda"] = True
        info["nvcc"] = nvcc
        info["cflags"] += [f"-isystem{os.path.join(cuda_home, 'include')}", "-DWAVEPE_WITH_CUDA=1"]
        info["library_dirs"] += [d for d in (os.path.join(cuda_home, "lib64"), os.path.join(cuda_home, "lib"))
                                 if os.path.isdir(d)]
        info["libraries"] += ["c10_cuda", "torch_cuda", "cudart"]
    return info


def find_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
        return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


def find_cuda_home(nvcc: str, cpp_extension) -> str | None:
    """The CUDA toolkit root holding include/cuda_runtime_api.h (nvcc may be a wrapper script)."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                 os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), getattr(cpp_extension, "CUDA_HOME", None),
                 "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "include", "cuda_runtime_api.h")):
            return home
    return None


def cuda_arch_flags() -> list[str]:
    archs = os.environ.get("WAVEPE_CUDA_ARCHS", "80;90").replace(",", ";").split(";")
    return [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs if a.strip()]


class BuildWithCore(build_ext):
    """Compile the C core (and CUDA kernels) once, then link them into each extension."""

    def build_extensions(self) -> None:
        tmp = os.path.join(self.build_temp, "wavepe_core")
        jobs = max(1, os.cpu_count() or 1)

        def compile_one(src: str) -> list[str]:
            flags = C_FLAGS + next((f for suffix, f in ISA_FLAGS.items() if src.endswith(suffix)), [])
            return self.compiler.compile([src], output_dir=tmp, extra_postargs=flags)

        with ThreadPoolExecutor(jobs) as pool:
            core_objs = [o for objs in pool.map(compile_one, core_sources()) for o in objs]

        torch_info = getattr(self.distribution, "wavepe_torch_info", None)
        cuda_objs: list[str] = []
        if torch_info and torch_info["cuda"]:
            cuda_objs = self.compile_cuda(torch_info["nvcc"], os.path.join(self.build_temp, "wavepe_cuda"), jobs)

        for ext in self.extensions:
            ext.extra_objects = core_objs + (cuda_objs if ext.name == "wavepe._C" else []) + list(ext.extra_objects)
        # compile each extension's own sources in parallel too
        self.parallel = jobs
        super().build_extensions()

    def compile_cuda(self, nvcc: str, out_dir: str, jobs: int) -> list[str]:
        os.makedirs(out_dir, exist_ok=True)
        srcs = rel("csrc", "cuda", "*.cu")

        def compile_one(src: str) -> str:
            obj = os.path.join(out_dir, os.path.basename(src) + ".o")
            cmd = [nvcc, "-c", src, "-o", obj, "-O3", "-std=c++17", "-Xcompiler", "-fPIC",
                   "-Xcompiler", "-Wall,-Wextra,-Werror", "-Werror", "all-warnings",
                   "--expt-relaxed-constexpr", "-Icsrc"] + cuda_arch_flags()
            print(" ".join(cmd))
            subprocess.check_call(cmd, cwd=ROOT)
            return obj

        with ThreadPoolExecutor(jobs) as pool:
            return list(pool.map(compile_one, srcs))


def extensions(torch_info) -> list[Extension]:
    exts = [
        Extension(
            "wavepe._ufuncs",
            sources=rel("csrc", "numpy", "*.c"),
            include_dirs=[__import__("numpy").get_include()],
            extra_compile_args=C_FLAGS,
        )
    ]
    if torch_info is not None:
        srcs = rel("csrc", "torch", "*.cpp")
        if not torch_info["cuda"]:
            srcs = [s for s in srcs if not s.endswith("_cuda.cpp")]
        exts.append(
            Extension(
                "wavepe._C",
                sources=srcs,
                language="c++",
                # -fopenmp: at::parallel_for is an inline template whose threading is an
                # `#pragma omp parallel` compiled into *this* module; without the flag every
                # op silently runs on one thread.  libgomp.so.1 resolves at run time to the
                # copy torch has already loaded (same soname), so there is one OpenMP runtime.
                extra_compile_args=CXX_FLAGS + ["-fopenmp"] + torch_info["cflags"],
                extra_link_args=["-fopenmp"],
                library_dirs=torch_info["library_dirs"],
                libraries=torch_info["libraries"],
            )
        )
    return exts


class WavepeDistribution(Distribution):
    """Carries what torch_build_info() found to the build_ext step."""

    wavepe_torch_info = None


WavepeDistribution.wavepe_torch_info = torch_build_info()
setup(
    distclass=WavepeDistribution,
    ext_modules=extensions(WavepeDistribution.wavepe_torch_info),
    cmdclass={"build_ext": BuildWithCore},
)
