"""The build: the shared recipe (sources, per-suffix flags), its incremental driver, compiling
the torch ops at first use (cache, lock, messages, errors, damaged entries, killed builds), the
loader's choice of library, and the build backend's check of the build requirements.

The real first-use build (about a minute) is exercised by .ci/check_install.sh, which installs the
sdist into a fresh environment; here the same code runs on a tiny library so that every path, the
failing ones included, is tested in seconds.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wavepe._build import jit, recipe

pytestmark = pytest.mark.installation  # (pyproject.toml: CI runs these against the installed wheel too)
ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"


# ---------------------------------------------------------------------------------------------------
# recipe: which files, which flags


def test_suffix_rules_give_each_kernel_file_its_flags():
    assert recipe.file_flags("csrc/core/attention_avx2.c") == ("-mavx2", "-mfma", "-mf16c")
    avx512 = recipe.file_flags("csrc/core/attention_avx512.c")
    assert {"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c"} == set(avx512)
    # avx512bf16 (AVX-512 + vdpbf16ps): the AVX-512 set and -mavx512bf16; the rule of the shorter AVX-512 suffix never matches it
    assert set(recipe.file_flags("csrc/core/attention_avx512bf16.c")) == set(avx512) | {"-mavx512bf16"}
    assert "-mavx512bf16" not in avx512
    assert recipe.file_flags("csrc/core/attention.c") == ()
    assert recipe.builds_on("x_avx512.c", "x86_64") and not recipe.builds_on("x_avx512.c", "aarch64")
    assert recipe.builds_on("x.c", "aarch64")
    # NEON is AArch64's baseline: its files need no flags, build there only, and no x86 flag reaches them
    assert recipe.file_flags("csrc/core/attention_neon.c") == ()
    assert recipe.builds_on("x_neon.c", "aarch64") and recipe.builds_on("x_neon.c", "arm64")
    assert not recipe.builds_on("x_neon.c", "x86_64") and not recipe.builds_on("x_avx2.c", "aarch64")
    aarch64 = [os.path.basename(p) for p in recipe.core_sources(str(CSRC), "aarch64")]
    assert "attention_neon.c" in aarch64 and not any(n.endswith(("_avx2.c", "_avx512.c", "_avx512bf16.c")) for n in aarch64)
    assert "-mavx2" in recipe.c_flags("rope_avx2.c") and "-std=c11" in recipe.c_flags("rope_avx2.c")


def test_werror_only_when_asked(monkeypatch):
    monkeypatch.delenv("WAVEPE_WERROR", raising=False)
    assert "-Werror" not in recipe.c_flags("a.c") and "-Werror" not in recipe.cxx_flags("a.cpp")
    monkeypatch.setenv("WAVEPE_WERROR", "1")
    assert "-Werror" in recipe.c_flags("a.c") and "-Werror" in recipe.cxx_flags("a.cpp")


def _touch(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("/* */\n")


def test_sources_are_found_by_directory_and_suffix(tmp_path):
    _touch(tmp_path, "core/a.c", "core/a_avx2.c", "core/a_avx512.c", "core/a.h", "core/tests/t.c",
           "torch/m.cpp", "torch/m_cuda.cpp", "torch/t.h", "cuda/k.cu", "cuda/k.cuh", "cuda/emu/e.cpp",
           "numpy/n.c")
    names = lambda paths: sorted(os.path.basename(p) for p in paths)  # noqa: E731
    assert names(recipe.core_sources(str(tmp_path), "x86_64")) == ["a.c", "a_avx2.c", "a_avx512.c"]
    assert names(recipe.core_sources(str(tmp_path), "aarch64")) == ["a.c"]
    assert names(recipe.torch_sources(str(tmp_path), cuda=False)) == ["m.cpp"]
    assert names(recipe.torch_sources(str(tmp_path), cuda=True)) == ["m.cpp", "m_cuda.cpp"]
    assert names(recipe.cuda_sources(str(tmp_path))) == ["k.cu"]
    assert recipe.shipped_sources(str(tmp_path)) == [
        "core/a.c", "core/a.h", "core/a_avx2.c", "core/a_avx512.c", "cuda/k.cu", "cuda/k.cuh",
        "torch/m.cpp", "torch/m_cuda.cpp", "torch/t.h"]


def test_shipped_sources_hold_every_file_the_torch_extension_includes():
    """The first-use build compiles from the shipped files only: each quoted #include of a compiled
    file must resolve inside them (the CUDA emulator's, behind WAVEPE_CUDA_EMU, excepted)."""
    shipped = set(recipe.shipped_sources(str(CSRC)))
    assert any(s.startswith("core/") for s in shipped) and any(s.startswith("torch/") for s in shipped)
    unresolved = []
    for rel in shipped:
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', (CSRC / rel).read_text(), flags=re.M):
            target = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            if target not in shipped and not inc.startswith("emu/"):
                unresolved.append(f"{rel} includes {inc}")
    assert not unresolved, unresolved


def test_recipe_command_line_for_the_makefile():
    script = ROOT / "python" / "wavepe" / "_build" / "recipe.py"
    run = lambda *a: subprocess.run([sys.executable, str(script), *a], capture_output=True, text=True,  # noqa: E731
                                    cwd=ROOT, check=True).stdout.split()
    assert run("flags", "csrc/core/foo_avx512.c") == list(recipe.file_flags("foo_avx512.c"))
    assert run("flags", "csrc/core/foo.c") == []
    assert run("c-flags", "csrc/core/foo_avx512.c") == recipe.c_flags("foo_avx512.c")  # what setup.py compiles with
    assert run("core-sources") == [os.path.relpath(p, ROOT) for p in recipe.core_sources(str(CSRC))]
    assert "--expt-relaxed-constexpr" in run("nvcc-flags")


def test_cuda_archs_share_a_front_end_run_only_where_the_sources_do_not_tell_them_apart(monkeypatch):
    """sm_90's SASS from compute_80's PTX (one cicc run fewer a file) is right only while no source of csrc/cuda tests
    __CUDA_ARCH__ at a value between two of CUDA_CODE_LEVELS: every value tested there is a level."""
    tested = {}
    for path in sorted((CSRC / "cuda").glob("*")):  # the kernels and their headers (not emu/: it is host code)
        if path.suffix in (".cu", ".cuh", ".h"):
            for m in re.finditer(r"__CUDA_ARCH__\s*(?:[<>]=?|==|!=)\s*(\d+)", path.read_text()):
                tested.setdefault(int(m.group(1)), path.name)
    assert {800, 1000, 1200} <= set(tested)  # the test reads what it should
    between = {v: f for v, f in tested.items() if v % 10 or v // 10 not in recipe.CUDA_CODE_LEVELS}
    assert not between, f"__CUDA_ARCH__ tested at {between}: add the level to recipe.CUDA_CODE_LEVELS"
    monkeypatch.setattr(recipe.platform, "machine", lambda: "x86_64")  # the wheel's; aarch64 adds compute_100's PTX
    assert recipe.gencode_flags(["80", "90", "100", "120"]) == [
        "-gencode=arch=compute_80,code=[sm_80,sm_90]", "-gencode=arch=compute_100,code=[sm_100]",
        "-gencode=arch=compute_120,code=[sm_120]", "-gencode=arch=compute_120,code=compute_120"]
    assert recipe.describe_archs(["80", "90", "100", "120"]) == "sm_80 sm_90 sm_100 sm_120 +PTX compute_120"
    monkeypatch.setattr(recipe.platform, "machine", lambda: "aarch64")
    assert recipe.gencode_flags(["80", "90", "100", "120"])[3:] == [
        "-gencode=arch=compute_100,code=compute_100", "-gencode=arch=compute_120,code=compute_120"]
    assert recipe.describe_archs(["80", "90", "100", "120"]) == "sm_80 sm_90 sm_100 sm_120 +PTX compute_100 compute_120"
    assert recipe.gencode_flags(["90"]) == ["-gencode=arch=compute_90,code=[sm_90]",
                                           "-gencode=arch=compute_90,code=compute_90"]
    assert recipe.describe_archs(["80", "90"]) == "sm_80 sm_90 +PTX compute_80"  # the PTX it compiles anyway


def test_a_source_runs_the_front_end_at_the_toolchains_levels_and_its_own(monkeypatch):
    """nvcc's front end runs once per code level of a source (code_levels): the toolchain's (80: sm_80's and sm_90's SASS,
    100: sm_100's and sm_120's) and those where the source, or a header of csrc it includes, tests __CUDA_ARCH__ -- 120
    for attention.cu and attention_bwd_dkdv_tc.cu (the backward's arch-dependent part), not for attention_bwd.cu or the
    element-wise kernels.  device.cu's probe runs at every level whatever its code: its images must be the fewest any
    source has."""
    monkeypatch.setattr(recipe.platform, "machine", lambda: "x86_64")
    cu = {p.name: str(p) for p in (CSRC / "cuda").glob("*.cu")}
    levels = {name: recipe.code_levels(path, str(CSRC)) for name, path in cu.items()}
    assert {n for n, lv in levels.items() if lv == recipe.CUDA_CODE_LEVELS} == {
        "attention.cu", "attention_bwd_dkdv_tc.cu", "device.cu"}
    assert set(levels.values()) == {recipe.CUDA_CODE_LEVELS, recipe.TOOLCHAIN_CODE_LEVELS}
    assert {"attention_bwd.cu", "relbias.cu", "rope.cu", "alibi.cu"} <= {
        n for n, lv in levels.items() if lv == recipe.TOOLCHAIN_CODE_LEVELS}
    archs = ["80", "90", "100", "120"]
    assert recipe.gencode_flags(archs, recipe.TOOLCHAIN_CODE_LEVELS) == [
        "-gencode=arch=compute_80,code=[sm_80,sm_90]", "-gencode=arch=compute_100,code=[sm_100,sm_120]",
        "-gencode=arch=compute_100,code=compute_100"]
    assert recipe.gencode_flags(["90"], recipe.TOOLCHAIN_CODE_LEVELS) == recipe.gencode_flags(["90"])
    flags = {os.path.basename(c.obj): [a for a in c.argv if a.startswith("-gencode")]
             for c in recipe.cuda_compiles(str(CSRC), "/obj", "nvcc", archs)}
    assert flags == {name + ".o": recipe.gencode_flags(archs, levels[name]) for name in cu}
    assert recipe.shipped_ptx(archs, str(CSRC)) == ["100", "120"]
    # every GPU that finds an image in the probe's finds one in every source's (SASS of its major, else PTX at or below)
    for cc in [*recipe.gpu_ccs("x86_64"), 130]:
        if recipe.image_for(archs, cc, recipe.ptx_archs(archs)) is not None:
            for lv in set(levels.values()):
                assert recipe.image_for(archs, cc, recipe.ptx_archs(archs, levels=lv)) is not None, (cc, lv)


def test_arch_tests_follow_the_sources_own_includes(tmp_path):
    (tmp_path / "cuda").mkdir()
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "deep.h").write_text("#if __CUDA_ARCH__ >= 1200\n#endif\n")
    (tmp_path / "cuda" / "tile.cuh").write_text('#pragma once\n#include "core/deep.h"\n#include <cuda_fp16.h>\n')
    (tmp_path / "cuda" / "a.cu").write_text('#include "tile.cuh"\n#include "tile.cuh"\n')
    (tmp_path / "cuda" / "b.cu").write_text('#include "missing.cuh"\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n'
                                            '#error\n#endif\n')
    (tmp_path / "cuda" / "device.cu").write_text("")
    assert recipe.arch_tests(str(tmp_path / "cuda" / "a.cu"), str(tmp_path)) == {1200}
    assert recipe.code_levels(str(tmp_path / "cuda" / "a.cu"), str(tmp_path)) == (80, 100, 120)
    assert recipe.arch_tests(str(tmp_path / "cuda" / "b.cu"), str(tmp_path)) == {800}
    assert recipe.code_levels(str(tmp_path / "cuda" / "b.cu"), str(tmp_path)) == recipe.TOOLCHAIN_CODE_LEVELS
    assert recipe.code_levels(str(tmp_path / "cuda" / "device.cu"), str(tmp_path)) == recipe.CUDA_CODE_LEVELS
    assert recipe.shipped_ptx(["80", "90"], str(tmp_path)) == ["80"]
    assert recipe.shipped_ptx(["80", "90", "100", "120"], str(tmp_path)) == ["100", "120"]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_every_gpu_from_sm_80_runs_code_of_the_default_build(machine):
    """Its own SASS where the build has its major, else PTX the driver compiles: on aarch64 Jetson Thor (sm_110,
    between the default's sm_100 and sm_120, another major than either) runs compute_100's PTX, which the x86-64
    wheel does not carry (no such GPU there); a GPU newer than the toolkit compute_120's; below 8.0 nothing (the
    kernels need bf16 mma.sync and cp.async: device.cu says so at the first op)."""
    archs = recipe.DEFAULT_CUDA_ARCHS.split(";")
    ptx = recipe.ptx_archs(archs, machine)
    assert ptx == (["100", "120"] if machine == "aarch64" else ["120"])  # never compute_80: 8.x and 9.x have SASS
    runs = {cc: recipe.image_for(archs, cc, ptx) for cc in recipe.gpu_ccs(machine)}
    want = {80: "sm_80", 86: "sm_80", 87: "sm_80", 89: "sm_80", 90: "sm_90", 100: "sm_100", 103: "sm_100",
            110: "compute_100", 120: "sm_120", 121: "sm_120"}
    assert runs == {cc: want[cc] for cc in runs} and (110 in runs) == (machine == "aarch64")
    assert recipe.image_for(archs, 130, ptx) == "compute_120"  # a future major: the newest PTX
    assert recipe.image_for(archs, 75, ptx) is None and recipe.image_for(archs, 70, ptx) is None
    assert recipe.ptx_archs(["90"], machine) == ["90"] and recipe.ptx_archs(["80", "90"], machine) == ["80"]
    assert recipe.image_for(["90"], 80) is None and recipe.image_for(["90"], 100) == "compute_90"


@pytest.mark.parametrize("text,deps", [
    ("a.o: a.c a.h \\\n  /usr/include/stdio.h\n", ["a.c", "a.h", "/usr/include/stdio.h"]),
    ("k.o : k.cu \\\n    /x/cuda_runtime.h \\\n    common.cuh\n", ["k.cu", "/x/cuda_runtime.h", "common.cuh"]),
    ("a.o: my\\ dir/a.c b.h\n", ["my dir/a.c", "b.h"]),
    ("a.o:\n", []),
])
def test_parse_depfile(text, deps):
    assert recipe.parse_depfile(text) == deps


# ---------------------------------------------------------------------------------------------------
# the driver: parallel, incremental


def _tiny_project(root: Path) -> None:
    (root / "h.h").write_text("#define VALUE 1\n")
    (root / "a.c").write_text('#include "h.h"\nint a(void) { return VALUE; }\n')
    (root / "b.c").write_text("int b(void) { return 2; }\n")


def _tiny_plan(root: Path, extra: tuple[str, ...] = ()) -> recipe.Plan:
    compiles = [recipe.Compile(str(root / s), str(root / "obj" / (s + ".o")),
                               ("cc", "-fPIC", *(extra if s == "b.c" else ()), "-c", str(root / s), "-o",
                                str(root / "obj" / (s + ".o"))))
                for s in ("a.c", "b.c")]
    objs = tuple(c.obj for c in compiles)
    out = str(root / "lib" / "libtiny.so")
    return recipe.Plan(compiles, [recipe.Link(objs, out, ("cc", "-shared", *objs, "-o", out), str(root / "obj" / "link.cmd"))])


def _age(*paths: Path) -> None:
    """Set mtimes into the past, so that a later write is newer even on coarse file systems."""
    old = time.time() - 100
    for p in paths:
        os.utime(p, (old, old))


def test_driver_recompiles_only_what_changed(tmp_path):
    _tiny_project(tmp_path)
    plan = _tiny_plan(tmp_path)
    seen = []
    assert sorted(map(os.path.basename, recipe.run(plan, progress=lambda d, t, n: seen.append((d, t))))) == ["a.c", "b.c"]
    assert sorted(seen) == [(1, 2), (2, 2)]
    lib = tmp_path / "lib" / "libtiny.so"
    assert lib.is_file()
    _age(*tmp_path.glob("*.c"), tmp_path / "h.h")
    made = lib.stat().st_mtime_ns
    assert recipe.run(plan) == []  # nothing changed: nothing compiled, nothing linked
    assert lib.stat().st_mtime_ns == made
    (tmp_path / "h.h").write_text("#define VALUE 3\n")  # a header: only its includer
    assert recipe.run(plan) == [str(tmp_path / "a.c")]
    assert lib.stat().st_mtime_ns > made
    extra = _tiny_plan(tmp_path, ("-DEXTRA=1",))
    assert recipe.run(extra) == [str(tmp_path / "b.c")]  # new flags
    assert recipe.run(extra) == []
    (tmp_path / "obj" / "a.c.o").unlink()  # a missing object
    assert recipe.run(extra) == [str(tmp_path / "a.c")]


def test_driver_gives_nvcc_the_cores_of_a_big_build_without_making_its_objects_stale(tmp_path):
    """One nvcc compiles a file's archs one after another: with more than two cores its --threads shares them (two
    long CUDA sources start first); never on two (CI's), and the flag is not in the object's record."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/argv.log"\n'
                    'while [ $# -gt 0 ]; do [ "$1" = -o ] && : > "$2"; [ "$1" = -MF ] && : > "$2"; shift; done\n')
    nvcc.chmod(0o755)
    (tmp_path / "k.cu").write_text("// a kernel\n")
    obj = str(tmp_path / "obj" / "k.cu.o")
    plan = recipe.Plan([recipe.Compile(str(tmp_path / "k.cu"), obj, (str(nvcc), "-c", str(tmp_path / "k.cu"),
                                                                        "-o", obj))], [])
    assert [recipe.nvcc_threads(j) for j in (1, 2, 3, 4, 16, 64)] == [1, 1, 1, 2, 8, 8]
    assert recipe.run(plan, jobs=16) == [str(tmp_path / "k.cu")]
    assert "--threads 8" in (tmp_path / "argv.log").read_text()
    assert "--threads" not in Path(obj + ".cmd").read_text()
    assert recipe.run(plan, jobs=2) == []  # built with other cores: up to date
    Path(obj).unlink()
    assert recipe.run(plan, jobs=2) == [str(tmp_path / "k.cu")]
    assert "--threads" not in (tmp_path / "argv.log").read_text().splitlines()[-1]


def test_driver_reports_the_failing_command_and_compiler_output(tmp_path):
    _tiny_project(tmp_path)
    (tmp_path / "b.c").write_text("int b(void) { return undeclared_name; }\n")
    with pytest.raises(recipe.BuildError, match=r"(?s)compiling b\.c failed \(exit \d+\):\n\$ cc .*b\.c.*undeclared_name"
                       ) as exc:
        recipe.run(_tiny_plan(tmp_path), jobs=1)
    assert "error" in str(exc.value)
    assert not (tmp_path / "lib" / "libtiny.so").exists()


# ---------------------------------------------------------------------------------------------------
# first-use compilation: cache, lock, messages, errors


def test_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("WAVEPE_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jit.cache_root() == str(tmp_path / "explicit")
    monkeypatch.delenv("WAVEPE_CACHE_DIR")
    assert jit.cache_root() == str(tmp_path / "xdg" / "wavepe")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # invalid per the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert jit.cache_root() == str(tmp_path / "home" / ".cache" / "wavepe")


def _torch_build(version: str = "2.13.0+cpu") -> recipe.TorchBuild:
    return recipe.TorchBuild(version=version, cxx_flags=("-isystem/t/include",), library_dirs=("/t/lib",),
                             libraries=("torch",), cuda=False)


def test_build_key_ties_the_cache_to_torch_the_sources_and_the_commands(monkeypatch, tmp_path):
    _touch(tmp_path, "core/a.c", "torch/m.cpp")
    key = jit.build_key(str(tmp_path), _torch_build(), "0.1.0")
    with monkeypatch.context() as m:
        m.setenv("CC", "cc -DOTHER")  # a compile command alone (the link is C++)
        assert key != jit.build_key(str(tmp_path), _torch_build(), "0.1.0")
    assert key == jit.build_key(str(tmp_path), _torch_build(), "0.1.0")
    assert key == jit.build_key(str(tmp_path), _torch_build(), "0.1.0")
    assert key.startswith("wavepe0.1.0-torch2.13.0_cpu-") and re.fullmatch(r"[A-Za-z0-9._-]+", key)
    assert key != jit.build_key(str(tmp_path), _torch_build("2.12.0+cpu"), "0.1.0")
    assert key != jit.build_key(str(tmp_path), _torch_build(), "0.2.0")
    (tmp_path / "core" / "a.c").write_text("int changed;\n")
    assert key != jit.build_key(str(tmp_path), _torch_build(), "0.1.0")


def _kept_core(monkeypatch, tmp_path: Path, src: Path) -> Path:
    """The C core's objects an installation built without torch keeps, kept as setup.py keeps them
    (recipe.keep_core_objects) for the sources at ``src`` (stand-in bytes: the first-use build links them, never
    reads them); jit's PACKAGE_DIR pointed at that installation."""
    objects = [c.obj for c in recipe.core_compiles(str(src), str(tmp_path / "obj"))]
    for obj in objects:
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        Path(obj).write_bytes(os.path.basename(obj).encode())
    folder = tmp_path / "pkg" / recipe.CORE_OBJECTS_DIR
    recipe.keep_core_objects(str(folder), str(src), objects)
    monkeypatch.setattr(jit, "PACKAGE_DIR", str(tmp_path / "pkg"))
    return folder


def test_the_first_use_build_links_the_core_objects_the_installation_kept(monkeypatch, tmp_path):
    src = tmp_path / "src"
    for folder in ("core", "torch"):
        shutil.copytree(CSRC / folder, src / folder)
    tb = _torch_build()
    monkeypatch.setattr(jit, "PACKAGE_DIR", str(tmp_path / "none"))
    assert jit.installed_core(str(src)) is None
    key_compiling_all = jit.build_key(str(src), tb, "0.1.0")
    folder = _kept_core(monkeypatch, tmp_path, src)
    objects, _ = jit.installed_core(str(src))
    assert sorted(objects) == sorted(str(folder / (os.path.basename(s) + ".o")) for s in recipe.core_sources(str(src)))
    plan = jit._plan(str(src), str(tmp_path / "build"), tb, objects)
    # what is compiled: the torch bindings only; what is linked: the kept objects, then theirs
    assert sorted(c.source for c in plan.compiles) == sorted(recipe.torch_sources(str(src), False))
    assert list(plan.links[0].objects) == objects + [c.obj for c in plan.compiles]
    key = jit.build_key(str(src), tb, "0.1.0")
    assert key != key_compiling_all and key == jit.build_key(str(src), tb, "0.1.0")
    # whatever would compile other objects leaves them unused: another compiler command, a changed core file,
    # another machine, a damaged object
    monkeypatch.setenv("CC", f"{recipe.c_compiler()} -DOTHER")
    assert jit.installed_core(str(src)) is None
    monkeypatch.undo()
    folder = _kept_core(monkeypatch, tmp_path / "again", src)
    assert jit.installed_core(str(src)) is not None
    rope = src / "core" / "rope.c"
    text = rope.read_text()
    rope.write_text(text + "\n")
    assert jit.installed_core(str(src)) is None
    rope.write_text(text)
    monkeypatch.setattr(recipe, "machine", lambda: "aarch64")
    assert jit.installed_core(str(src)) is None
    monkeypatch.setattr(recipe, "machine", lambda: platform.machine().lower())
    assert jit.installed_core(str(src)) is not None
    (folder / os.path.basename(objects[0])).write_bytes(b"damaged")
    assert jit.installed_core(str(src)) is None


TINY_MODULE = "int wavepe_tiny_stand_in(void) { return 1; }\n"

# Runs compiled_torch_ops() with the real cache, lock and messages, on a one-file stand-in for the
# ops library whose compile command first records that it ran (and waits, so that two processes overlap).
TINY_JIT_SCRIPT = textwrap.dedent("""
    import os, sys
    from wavepe._build import jit, recipe
    src, counter = sys.argv[1], sys.argv[2]

    def tiny_plan(src_root, build_dir, tb, core_objects=None):
        obj, out = os.path.join(build_dir, "obj", "m.o"), os.path.join(build_dir, jit._module_file())
        cc = ("sh", "-c", 'echo compiled >> "$0"; sleep 1; exec cc "$@"', counter)
        return recipe.Plan([recipe.Compile(src, obj, (*cc, "-fPIC", "-c", src, "-o", obj))],
                           [recipe.Link((obj,), out, ("cc", "-shared", obj, "-o", out), obj + ".link")])

    jit._plan = tiny_plan
    path = jit.compiled_torch_ops()
    record = jit.load(path)
    import ctypes
    assert ctypes.CDLL(path).wavepe_tiny_stand_in() == 1 and record["sha256"] == recipe.file_sha256(path)
    print(path)
""")


def _tiny_jit(tmp_path: Path, cache: Path, source: str = TINY_MODULE, **env: str) -> subprocess.Popen:
    src = tmp_path / "m.c"
    src.write_text(source)
    script = tmp_path / "tiny_jit.py"
    script.write_text(TINY_JIT_SCRIPT)
    full_env = {**os.environ, "WAVEPE_CACHE_DIR": str(cache), **env}
    return subprocess.Popen([sys.executable, str(script), str(src), str(tmp_path / "compiles.txt")], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_first_use_compiles_once_for_concurrent_processes_then_loads_from_cache(tmp_path):
    cache = tmp_path / "cache"
    procs = [_tiny_jit(tmp_path, cache), _tiny_jit(tmp_path, cache)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1 and Path(paths.pop()).is_file()
    assert (tmp_path / "compiles.txt").read_text().count("compiled") == 1  # one compiled, the other waited
    errs = "".join(err for _, err in results)
    assert errs.count("wavepe: compiling the PyTorch ops for torch") == 1
    assert re.search(r"wavepe: compiled the PyTorch ops \(1 files\) in \d+ s", errs)
    # a later process finds the cached module: no message, no compile
    again = _tiny_jit(tmp_path, cache)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0 and err == "" and (tmp_path / "compiles.txt").read_text().count("compiled") == 1
    entries = sorted(p.name for p in (cache / "torch-ops").iterdir())
    assert len(entries) == 2 and entries[1] == entries[0] + ".lock"  # the module's directory and its lock
    built = json.loads((cache / "torch-ops" / entries[0] / "build.json").read_text())
    assert built["abi"] == "stable" and built["files"] == 1 and not (cache / "torch-ops" / entries[0] / "obj").exists()


def test_a_damaged_cache_entry_is_rebuilt_not_loaded(tmp_path):
    """A cached library damaged after its build (here truncated to 4 KiB, which mapped would kill the
    process with SIGBUS) fails its recorded digest: rebuilt with one line saying so."""
    cache = tmp_path / "cache"
    first = _tiny_jit(tmp_path, cache)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    lib = Path(out.strip())
    with open(lib, "r+b") as f:
        f.truncate(4096)
    again = _tiny_jit(tmp_path, cache)
    out2, err2 = again.communicate(timeout=300)
    assert again.returncode == 0, err2  # not a SIGBUS: the damaged file was never mapped
    assert re.search(r"wavepe: the cached PyTorch ops are unusable \(.*is damaged \(SHA-256 ", err2)
    assert (tmp_path / "compiles.txt").read_text().count("compiled") == 2
    assert jit._intact(str(lib.parent)) == (True, None)


def test_leftovers_of_killed_builds_are_removed(tmp_path):
    """A build killed with SIGKILL leaves its <key>.building-* folder (nothing can clean up after
    SIGKILL); the next build removes every such folder whose key's lock is free."""
    cache = tmp_path / "cache"
    ops = cache / "torch-ops"
    ops.mkdir(parents=True)
    dead = ops / "wavepe0.1.0-torch0.0-killed.building-abc123"
    (dead / "obj").mkdir(parents=True)
    (dead / "obj" / "half.o").write_text("")
    proc = _tiny_jit(tmp_path, cache)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert not dead.exists()
    assert not [p for p in ops.iterdir() if ".building-" in p.name]


def test_first_use_compile_error_names_the_cause_and_keeps_the_log(tmp_path):
    cache = tmp_path / "cache"
    proc = _tiny_jit(tmp_path, cache, source="int broken(void) { return undeclared_name; }\n")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert "JitBuildError: compiling wavepe's PyTorch ops for torch" in err and "undeclared_name" in err
    log = re.search(r"\(log: (\S+\.failed\.log)", err)
    assert log and "undeclared_name" in Path(log.group(1)).read_text()
    assert not [p for p in (cache / "torch-ops").iterdir() if p.is_dir()]  # nothing half-built is left


def test_first_use_without_a_compiler_says_which_and_how_to_get_one(monkeypatch, tmp_path):
    monkeypatch.setenv("WAVEPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "/nonexistent/wavepe-test-c++")
    with pytest.raises(jit.JitBuildError, match=r"no C\+\+ compiler: `/nonexistent/wavepe-test-c\+\+` is not on PATH "
                                                r"\(install one, e\.g\. `apt install g\+\+`.*or set CXX\)"):
        jit.compiled_torch_ops()
    assert not [p for p in (tmp_path / "torch-ops").iterdir() if p.is_dir()]


def test_first_use_with_an_unwritable_cache_names_the_variable(monkeypatch, tmp_path):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("WAVEPE_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    with pytest.raises(jit.JitBuildError, match="cannot write wavepe's cache directory .*set WAVEPE_CACHE_DIR"):
        jit.compiled_torch_ops()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_rewrites_one_line_on_a_terminal_and_prints_two_elsewhere():
    term = _Terminal()
    p = jit._Progress(term, "wavepe: compiling X")
    p.update(1, 2, "a.cpp")
    p.update(2, 2, "b.cpp")
    p.finish(2)
    text = term.getvalue()
    assert "\rwavepe: compiling X: 1/2 files (a.cpp)" in text and "2/2 files (b.cpp)" in text
    assert text.count("\n") == 1 and re.search(r"compiled the PyTorch ops \(2 files\) in \d+ s\n$", text)
    log = io.StringIO()
    p = jit._Progress(log, "wavepe: compiling X")
    p.update(1, 2, "a.cpp")
    p.finish(2)
    assert "\r" not in log.getvalue() and log.getvalue().splitlines()[0] == "wavepe: compiling X"
    assert len(log.getvalue().splitlines()) == 2


# ---------------------------------------------------------------------------------------------------
# the loader: which library


def _fake_packaged(monkeypatch, tmp_path, record: dict | None):
    import wavepe.ops._extension as ext

    (tmp_path / recipe.TORCH_LIBRARY_FILE).write_text("")
    if record is not None:
        (tmp_path / recipe.TORCH_RECORD_FILE).write_text(json.dumps(record))
    monkeypatch.setattr(ext, "PACKAGE_DIR", str(tmp_path))
    return ext


def test_loader_uses_the_packaged_library_for_every_torch_from_its_target_on(monkeypatch, tmp_path):
    ext = _fake_packaged(monkeypatch, tmp_path, {"abi": "stable", "torch_target": "2.10", "machine": recipe.machine()})
    path, record, why = ext._packaged_build()
    assert path == str(tmp_path / recipe.TORCH_LIBRARY_FILE) and record["torch_target"] == "2.10" and why is None
    ext = _fake_packaged(monkeypatch, tmp_path, {"abi": "stable", "torch_target": "99.0"})
    assert ext._packaged_build()[0] is None and "need torch >= 99.0" in ext._packaged_build()[2]
    ext = _fake_packaged(monkeypatch, tmp_path, {"abi": "stable", "torch_target": "2.10", "machine": "not-this-one"})
    assert ext._packaged_build()[0] is None and "not for this machine" in ext._packaged_build()[2]
    (tmp_path / recipe.TORCH_RECORD_FILE).unlink()
    assert ext._packaged_build() == (None, {}, "the packaged torch ops have no record of what they are")


def test_loader_with_compiling_forbidden_says_what_to_do(monkeypatch, tmp_path):
    ext = _fake_packaged(monkeypatch, tmp_path, {"abi": "stable", "torch_target": "99.0"})
    monkeypatch.setenv("WAVEPE_JIT", "0")
    with pytest.raises(ImportError, match=r"not built for this installation \(torch .*; the packaged torch ops need "
                                          r"torch >= 99\.0.*\), and WAVEPE_JIT=0 forbids.*--no-build-isolation"):
        ext._load()


def test_loader_refuses_a_torch_older_than_the_target_by_name(monkeypatch):
    import torch

    import wavepe.ops._extension as ext

    monkeypatch.setattr(torch, "__version__", "2.9.1+cu128")
    with pytest.raises(ImportError, match=r"need torch >= 2\.10 .*this is torch 2\.9\.1\+cu128: upgrade torch"):
        ext._load()


def test_this_checkout_loaded_the_library_built_by_setup_py():
    """make test runs on the in-place build; a silent fallback to compiling at first use would hide a
    broken setup.py (the wheel/sdist checks of .ci/check_wheel.sh / check_install.sh test the others)."""
    import wavepe
    import wavepe.ops._extension as ext

    if not (ROOT / "python" / "wavepe" / recipe.TORCH_RECORD_FILE).exists():
        pytest.skip("no in-place build of the torch ops in this checkout")
    if Path(wavepe.__file__).resolve().parent != ROOT / "python" / "wavepe":
        pytest.skip(f"wavepe is imported from an installation ({wavepe.__file__}), not this checkout")
    assert ext.ORIGIN.startswith("built in place (") and ext.LIBRARY == str(ROOT / "python" / "wavepe" /
                                                                             recipe.TORCH_LIBRARY_FILE)
    info = ext.build_info()
    assert info["torch_target"] == "%d.%d" % recipe.TORCH_TARGET and info["origin"] == ext.ORIGIN


def test_the_ops_library_keeps_the_stable_abi_contract():
    """The nm -D contract of .ci/check_stable_abi.py, on this checkout's library: torch only through
    its stable C shim."""
    import shutil

    import wavepe.ops._extension as ext

    if shutil.which("nm") is None or shutil.which("readelf") is None:
        pytest.skip("binutils (nm, readelf) not installed")
    spec = importlib.util.spec_from_file_location("check_stable_abi", ROOT / ".ci" / "check_stable_abi.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.violations(ext.LIBRARY) == []
    assert "libtorch_cpu.so" in check.needed(ext.LIBRARY)
    assert not [n for n in check.needed(ext.LIBRARY) if n.startswith(("libc10", "libtorch_python", "libgomp"))]


def test_the_kernels_prefetches_reach_the_library():
    """The decoding and RoPE kernels' software prefetches are in the machine code.  GCC deleted every
    call of a function holding only __builtin_prefetch (judged const), so for months the decoding
    kernels ran without them unnoticed (a one-thread bf16 decode: 20.1 ms without, 12.8 ms with);
    wp_prefetch is an asm statement since, and this fails if they go missing again."""
    import platform
    import shutil

    import wavepe.ops._extension as ext

    machine = platform.machine()
    instruction = {"x86_64": "prefetcht0", "AMD64": "prefetcht0", "aarch64": "prfm", "arm64": "prfm"}.get(machine)
    if instruction is None or shutil.which("objdump") is None:
        pytest.skip(f"objdump and a known ISA needed (machine {machine})")
    isa = "avx2" if instruction == "prefetcht0" else "neon"
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", ext.LIBRARY], capture_output=True, text=True,
                          check=True).stdout
    # a function's body under its name without the compiler's clone suffixes (.part.0, .constprop.0)
    bodies: dict[str, str] = {}
    for m in re.finditer(r"^[0-9a-f]+ <([^>]+)>:\n(.*?)(?=\n\n)", text, re.S | re.M):
        name = m.group(1).split(".")[0]
        bodies[name] = bodies.get(name, "") + m.group(2)
    # the decoding kernels' prefetch sits in narrow_dots (the key loop), inlined into rows_over_keys or not
    wanted = {"decoding bf16": [f"rows_over_keys_bf16_{isa}", f"narrow_dots_bf16_{isa}"],
              "decoding f32": [f"rows_over_keys_f32_{isa}", f"narrow_dots_f32_{isa}"],
              "rope bf16": [f"wavepe_rope_bf16_{isa}"]}
    if not all(names[0] in bodies for names in wanted.values()):
        pytest.skip("the library's local symbols are stripped")
    for what, names in wanted.items():
        assert any(instruction in bodies.get(name, "") for name in names), f"{what}: {names} hold no {instruction}"


# ---------------------------------------------------------------------------------------------------
# the build backend's check (pip --no-build-isolation installs no build requirement)


def _backend():
    spec = importlib.util.spec_from_file_location("wavepe_build_backend_under_test",
                                                  ROOT / "build_backend" / "wavepe_build_backend.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_backend_names_every_missing_build_requirement(monkeypatch):
    backend = _backend()
    assert backend.missing_requirements(need_numpy=True) == []  # this environment builds wavepe
    monkeypatch.setattr(backend.metadata, "version", lambda name: "65.5.0")
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit) as exc:
        backend.get_requires_for_build_wheel()
    msg = str(exc.value)
    assert "lacks setuptools>=77 (65.5.0 installed), numpy (not installed" in msg
    assert 'pip install "setuptools>=77" "numpy>=2.0"' in msg
    assert backend.missing_requirements(need_numpy=False) == ["setuptools>=77 (65.5.0 installed)"]


def test_backend_check_matches_the_declared_build_requirements():
    tomllib = pytest.importorskip("tomllib")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    backend = _backend()
    assert sorted(requires) == sorted(re.findall(r'"([^"]+)"', backend.INSTALL_LINE))
    assert f"setuptools>={backend.SETUPTOOLS_MIN[0]}" in requires


@pytest.mark.skipif(sys.platform != "linux", reason="ELF shared objects")
@pytest.mark.parametrize("static", [False, True])
def test_a_cxx_that_links_libstdcxx_statically_is_refused_with_the_way_out(tmp_path, static):
    """Issue 20: on an image whose default g++ links libstdc++ statically, wavepe._C carried a
    second C++ runtime beside torch's and every error message segfaulted; the build now stops
    and says which compilers to use."""
    cxx = os.environ.get("CXX") or "c++"
    src = tmp_path / "probe.cpp"
    src.write_text('#include <sstream>\nextern "C" int probe(int x) { std::ostringstream s; s << x; '
                   'return int(s.str().size()); }\n')
    obj, out = str(tmp_path / "probe.o"), str(tmp_path / "probe.so")
    link = [cxx, "-shared", obj, "-o", out] + (["-static-libstdc++"] if static else [])
    plan = recipe.Plan([recipe.Compile(str(src), obj, (cxx, "-fPIC", "-c", str(src), "-o", obj))],
                       [recipe.Link((obj,), out, tuple(link), str(tmp_path / "link.cmd"), shared_libstdcxx=True)])
    if not static:
        recipe.run(plan)
        assert any(n.startswith("libstdc++.so") for n in recipe.elf_needed(out))
        return
    with pytest.raises(recipe.BuildError, match=r"links it statically.*CXX=/usr/bin/g\+\+ LDSHARED="):
        recipe.run(plan)
    assert not os.path.exists(out)


def _kernel_checks():
    path = Path(__file__).resolve().parent.parent / ".ci" / "check_cuda_kernels.py"
    spec = importlib.util.spec_from_file_location("check_cuda_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PTXAS_REPORT = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3fooP6__half' for 'sm_90'
ptxas info    : Function properties for _Z3fooP6__half
    16 bytes stack frame, 20 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 840 bytes cmem[0]
ptxas info    : Compiling entry function '_Z3barv' for 'sm_80'
ptxas info    : Function properties for _Z3barv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 1024 bytes smem, 840 bytes cmem[0]
"""


def test_cuda_kernel_checks_read_ptxas_and_name_kernel_and_arch():
    """.ci/check_cuda_kernels.py (issue 20, item 5): its reading of ptxas -v and its rules."""
    ck = _kernel_checks()
    a, b = ck.parse_ptxas(PTXAS_REPORT)
    assert (a["arch"], a["regs"], a["stack"], a["spill_st"], a["spill_ld"]) == ("sm_90", 255, 16, 20, 28)
    assert (b["arch"], b["regs"], b["stack"], b["spill_st"], b["smem"]) == ("sm_80", 40, 0, 0, 1024)

    def rec(src, arch="sm_80", hmma=1, stack=0, spill=0):
        return dict(src=src, arch=arch, regs=200, stack=stack, spill_st=spill, spill_ld=spill, smem=0,
                    HMMA=hmma, HGMMA=0)

    fwd_bf16 = "attn_fwd_kernel<__nv_bfloat16, 128, 64, 32>"
    assert ck.failures_of(rec("attention.cu"), fwd_bf16) == []
    (msg,) = ck.failures_of(rec("attention.cu", "sm_90", hmma=0), fwd_bf16)
    assert "attn_fwd_kernel<__nv_bfloat16" in msg and "sm_90" in msg and "no HMMA" in msg
    assert ck.failures_of(rec("attention.cu", hmma=0), "attn_fwd_kernel<float, 128, 32, 32>") == []  # FMA by design
    (msg,) = ck.failures_of(rec("attention_bwd.cu", hmma=0), "attn_bwd_dq_kernel<__half, 64, 64, 1>")
    assert "attn_bwd_dq_kernel" in msg
    spills = ck.failures_of(rec("attention_bwd.cu", stack=8, spill=4), "attn_bwd_dkdv_kernel<float, 64, 32, 1>")
    assert len(spills) == 2 and "spills registers" in spills[0] and "local memory" in spills[1]
    # rope's frame is libdevice's sincos slow path: spills still count there, the frame does not
    assert ck.failures_of(rec("rope.cu", stack=40), "rope_kernel<float, true, true>") == []
    assert len(ck.failures_of(rec("rope.cu", spill=8), "rope_kernel<float, true, true>")) == 1
    # NOT_BUILT: the wide dK/dV at head dim 128 is a stub on sm_120 (no tensor-core instruction, by design); the same
    # instance holding HMMA there -- built after all -- fails, so that the list only shrinks; on sm_80 and sm_100
    # (not listed: built there) a stub fails the tensor-core rule
    wide = "attn_bwd_dkdv_tc_wide_kernel<__half, 128, 1>"
    assert ("attn_bwd_dkdv_tc_wide_kernel", "128", "sm_120") in ck.NOT_BUILT
    assert ck.failures_of(rec("attention_bwd_dkdv_tc.cu", "sm_120", hmma=0), wide) == []
    (msg,) = ck.failures_of(rec("attention_bwd_dkdv_tc.cu", "sm_120", hmma=4), wide)
    assert "NOT_BUILT" in msg
    for arch in ("sm_80", "sm_100"):
        (msg,) = ck.failures_of(rec("attention_bwd_dkdv_tc.cu", arch, hmma=0), wide)
        assert "no HMMA" in msg, arch


# A kernel's SASS as cuobjdump prints it: a prologue, a loop (0x0040-0x00d0) holding two HMMA and an inner
# loop, a cold block jumped over inside it, and an epilogue with one more HMMA outside every loop.
SASS_KERNEL = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
        /*0020*/              @P0 EXIT ;
        /*0030*/                   MOV R2, RZ ;
        /*0040*/                   LDSM.16.M88.4 R4, [R2] ;
        /*0050*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0060*/                   FMUL R9, R9, 0.5 ;
        /*0070*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0080*/              @P1 BRA 0x70 ;
        /*0090*/              @P2 BRA 0xb0 ;
        /*00a0*/                   MUFU.EX2 R9, R9 ;
        /*00b0*/                   HMMA.16816.F32.BF16 R12, R4, R6, R12 ;
        /*00c0*/                   ISETP.GE.AND P3, PT, R3, 0x10, PT ;
        /*00d0*/              @!P3 BRA 0x40 ;
        /*00e0*/                   HMMA.16816.F32.BF16 R16, R4, R6, R16 ;
        /*00f0*/                   EXIT ;
        /*0100*/                   BRA 0x100 ;
"""


# The same kernel as nvdisasm -c prints it from the cubin that cuobjdump -xelf extracts: its section, labels before
# the branch targets, the branches naming them; and a label after the last instruction (the .size's end).
NVDISASM_KERNEL = """
//--------------------- .text._Z1kv               --------------------------
	.section	.text._Z1kv,"ax",@progbits
        .size           _Z1kv,(.L_x_4 - _Z1kv)
_Z1kv:
.text._Z1kv:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
        /*0020*/              @P0 EXIT ;
        /*0030*/                   MOV R2, RZ ;
.L_x_2:
        /*0040*/                   LDSM.16.M88.4 R4, [R2] ;
        /*0050*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0060*/                   FMUL R9, R9, 0.5 ;
.L_x_0:
        /*0070*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0080*/              @P1 BRA `(.L_x_0) ;
        /*0090*/              @P2 BRA `(.L_x_1) ;
        /*00a0*/                   MUFU.EX2 R9, R9 ;
.L_x_1:
        /*00b0*/                   HMMA.16816.F32.BF16 R12, R4, R6, R12 ;
        /*00c0*/                   ISETP.GE.AND P3, PT, R3, 0x10, PT ;
        /*00d0*/              @!P3 BRA `(.L_x_2) ;
        /*00e0*/                   HMMA.16816.F32.BF16 R16, R4, R6, R16 ;
        /*00f0*/                   EXIT ;
.L_x_3:
        /*0100*/                   BRA `(.L_x_3);
.L_x_4:
//--------------------- .nv.shared._Z1kv          --------------------------
	.section	.nv.shared._Z1kv,"aw",@nobits
"""


def test_cuda_static_model_reads_nvdisasm():
    """.ci/check_cuda_kernels.py reads nvdisasm -c's listing as it read cuobjdump -sass's: the kernel's name, its
    instructions, and each branch target's label turned into the address the loop finder reads."""
    ck = _kernel_checks()
    ((name, body),) = ck.nvdisasm_functions(NVDISASM_KERNEL)
    assert name == "_Z1kv"
    ins = lambda text: [(a, " ".join(t.split())) for a, t in ck.SASS_INS.findall(text)]  # noqa: E731
    assert ins(body) == ins(SASS_KERNEL)
    assert ck.main_loop_mix(body) == ck.main_loop_mix(SASS_KERNEL) == (10, 2)
    assert ck.loop_stats(body) == ck.loop_stats(SASS_KERNEL)


def test_cuda_static_model_finds_the_main_loop_and_holds_its_ceiling():
    """.ci/check_cuda_kernels.py's instruction mix (issue 64, item 5): the natural loop with the most
    tensor-core instructions, every instruction of its body once, the cold block inside it included."""
    ck = _kernel_checks()
    assert ck.main_loop_mix(SASS_KERNEL) == (10, 2)  # 0x40 .. 0xd0; not the inner loop, not the epilogue's HMMA
    assert ck.main_loop_mix(SASS_KERNEL.replace("HMMA", "FFMA")) is None
    fwd = "attn_fwd_kernel<__nv_bfloat16, 128, 64, 32>"
    ceiling = ck.MIX_CEILING[("attn_fwd_kernel", "128, 64, 32")]

    def rec(loop_ins, loop_tc, arch="sm_90"):
        return dict(src="attention.cu", arch=arch, regs=168, stack=0, spill_st=0, spill_ld=0, smem=0, HMMA=loop_tc,
                    HGMMA=0, loop_ins=loop_ins, loop_tc=loop_tc)

    assert ck.failures_of(rec(int(100 * (ceiling + 1)), 100), fwd) == []
    (msg,) = ck.failures_of(rec(int(100 * (ceiling + 1)) + 100, 100), fwd)
    assert "above its ceiling" in msg and "sm_90" in msg and "attn_fwd_kernel<__nv_bfloat16" in msg
    assert ck.failures_of(rec(10_000, 100, arch="sm_80"), fwd) == []  # the model reads sm_90 only
    (msg,) = ck.failures_of(rec(500, 100), "attn_fwd_kernel<__nv_bfloat16, 96, 64, 32>")
    assert "no ceiling in MIX_CEILING" in msg
    assert ck.mix_key("attn_fwd_kernel<float, 128, 32, 32>") is None  # FMA kernels: not in the model


def test_cuda_static_model_counts_the_copy_loops():
    """.ci/check_cuda_kernels.py's copy loops (issue 64, item 5): the loops holding cp.async and no tensor-core
    instruction, inner ones included, their instructions per copy summed, and each kernel held to its ceiling."""
    ck = _kernel_checks()
    copy = "LDGSTS.E.BYPASS.LTC128B.128 [R3], desc[UR4][R6.64]"
    assert ck.copy_cost(SASS_KERNEL) == 0
    assert ck.copy_cost(SASS_KERNEL.replace("IADD3 R3, R3, 0x1, RZ", copy)) == 2.0  # the inner loop: 2 instructions
    assert ck.copy_cost(SASS_KERNEL.replace("FMUL R9, R9, 0.5", copy)) == 0  # in the HMMA loop: not a copy loop
    name, key = "attn_fwd_tc_kernel<__nv_bfloat16, 128, false>", ("attn_fwd_tc_kernel", "128, false")
    ceiling = ck.COPY_COST_CEILING[key]

    def copy_failures(cost, arch="sm_90"):
        r = dict(src="attention.cu", arch=arch, regs=200, stack=0, spill_st=0, spill_ld=0, smem=0, HMMA=1, HGMMA=0,
                 loop_ins=3, loop_tc=1, copy_cost=cost)
        return [m for m in ck.failures_of(r, name) if "COPY_COST_CEILING" in m]

    assert copy_failures(ceiling) == []
    (msg,) = copy_failures(ceiling + 35)  # one window copy back on the general loader: ~35 instructions more
    assert "a copy moved to a heavier loader" in msg and "sm_90" in msg
    assert copy_failures(ceiling + 35, arch="sm_80") == []  # the model reads sm_90 only


def test_cuda_occupancy_model(monkeypatch):
    """.ci/check_cuda_kernels.py's occupancy (issue 64, item 5): CTAs and warps per SM from registers
    (per warp, in units of 256), shared memory (1 KiB reserved a CTA) and the SM's limits, on sm_90;
    the tensor-core forward below its 8 warps fails."""
    ck = _kernel_checks()
    assert ck.occupancy(219, 128, 53312, "sm_90") == (2, 8)  # 224 x 32 registers a warp: 9 warps' worth
    assert ck.occupancy(167, 128, 47232, "sm_90") == (3, 12)
    assert ck.occupancy(64, 128, 100 * 1024, "sm_90") == (2, 8)  # shared memory bound
    assert ck.occupancy(32, 32, 0, "sm_90") == (32, 32)  # the CTA limit
    fwd = "attn_fwd_tc_kernel<__half, 128, false>"
    threads, _ = ck.CTA_SHAPE[("attn_fwd_tc_kernel", "128, false")]

    others = [(int(128 * (1 + c)) - 1, 128) for c in ck.OTHER_LOOP_CEILING[("attn_fwd_tc_kernel", "128, false")]]

    def rec(regs):
        return dict(src="attention.cu", arch="sm_90", regs=regs, stack=0, spill_st=0, spill_ld=0, smem=0, HMMA=128,
                    HGMMA=0, loop_ins=128 * 3, loop_tc=128, other_loops=others)

    assert ck.failures_of(rec(219), fwd) == [] and ck.failures_of(rec(255), fwd) == []
    monkeypatch.setitem(ck.CTA_SHAPE, ("attn_fwd_tc_kernel", "128, false"), (threads, 120 * 1024))  # the old 118.8 KB
    (msg,) = ck.failures_of(rec(219), fwd)
    assert "1 CTAs, 4 warps per SM" in msg and "below the 8 warps" in msg
    # on a 100 KiB SM (sm_80's SASS, which sm_86 and sm_89 run; sm_120's): the table-free CTA taken there, 8 warps;
    # the wide instance's 54,304 bytes at 128 would hold one
    monkeypatch.setitem(ck.CTA_SHAPE, ("attn_fwd_tc_kernel", "128, false"), (threads, 88128))
    for arch in ck.SM_100KIB_ARCHS:
        assert ck.failures_of(dict(rec(255), arch=arch), fwd) == []
    assert ck.failures_of(dict(rec(255), arch="sm_100"), fwd) == []  # (sm_100's SMs: 228 KiB)
    monkeypatch.setitem(ck.SM_100KIB_SHAPE, ("attn_fwd_tc_kernel", "128, false"), (threads, 54304))
    (msg,) = ck.failures_of(dict(rec(219), arch="sm_80"), fwd)
    assert "on a 100 KiB SM 1 CTAs, 4 warps" in msg


SASS_TWO_LOOPS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDSM.16.M88.4 R4, [R2] ;
        /*0020*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0030*/                   FMUL R9, R9, 0.5 ;
        /*0040*/                   FMUL R9, R9, 0.5 ;
        /*0050*/                   FMUL R9, R9, 0.5 ;
        /*0060*/              @P1 BRA 0x10 ;
        /*0070*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0080*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0090*/                   MUFU.EX2 R9, R9 ;
        /*00a0*/              @P2 BRA 0x70 ;
        /*00b0*/                   EXIT ;
"""


def test_cuda_static_model_takes_the_lightest_of_sibling_loops():
    """A kernel whose unmasked blocks run a loop of their own (attn_fwd_tc_kernel): the main loop is the
    lightest outermost loop holding tensor-core instructions; the others are held to OTHER_LOOP_CEILING."""
    ck = _kernel_checks()
    assert ck.tensor_loops(SASS_TWO_LOOPS) == [(4, 2), (6, 1)]  # 0x70..0xa0 (1 per HMMA), 0x10..0x60 (5)
    assert ck.main_loop_mix(SASS_TWO_LOOPS) == (4, 2)
    assert ck.tensor_loops(SASS_KERNEL) == [(10, 2)]  # a loop inside another is not a sibling
    fwd = "attn_fwd_tc_kernel<__nv_bfloat16, 128, false>"
    ceilings = ck.OTHER_LOOP_CEILING[("attn_fwd_tc_kernel", "128, false")]  # band, ALiBi, soft-caps, masked

    def rec(*other_ins):
        return dict(src="attention.cu", arch="sm_90", regs=200, stack=0, spill_st=0, spill_ld=0, smem=0, HMMA=300,
                    HGMMA=0, loop_ins=300, loop_tc=100, other_loops=[(i, 100) for i in other_ins])

    ok = tuple(int(100 * (c + 1)) for c in ceilings)
    assert ck.failures_of(rec(*ok), fwd) == []
    (msg,) = ck.failures_of(rec(*ok[:-1], ok[-1] + 100), fwd)
    assert "beside the main one" in msg and "OTHER_LOOP_CEILING" in msg
    (msg,) = ck.failures_of(rec(*ok[1:]), fwd)  # a loop gone (or one more): the table's line is stale
    assert "one ceiling per loop" in msg
    (msg,) = ck.failures_of(rec(500), "attn_fwd_kernel<__nv_bfloat16, 128, 64, 32>")
    assert "one ceiling per loop" in msg


SASS_SMEM_LOOP = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDSM.16.M88.4 R4, [R2] ;
        /*0020*/                   LDSM.16.MT88.2 R6, [R2+0x100] ;
        /*0030*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0040*/              @P0 LDGSTS.E.BYPASS.128 [R3], desc[UR4][R10.64] ;
        /*0050*/                   LDS.U16 R9, [R3] ;
        /*0060*/                   STS.64 [R3+0x8], R12 ;
        /*0070*/                   LDS R9, [R3+0x4] ;
        /*0080*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0090*/              @P1 BRA 0x10 ;
        /*00a0*/                   LDSM.16.M88.4 R4, [R2] ;
        /*00b0*/                   EXIT ;
"""


def test_cuda_static_model_counts_shared_memory_bytes_per_hmma():
    """.ci/check_cuda_kernels.py's shared-memory term: the bytes a warp-wide instruction moves (ldmatrix 128 a
    matrix, the lanes' loads/stores and cp.async's writes 32 x their size), summed over the main loop and held to
    SMEM_CEILING per HMMA; the bound they set on the tensor rate (256 bytes an HMMA on sm_90 is the limit)."""
    ck = _kernel_checks()
    sizes = {"LDSM.16.M88.4 R4, [R2]": 512, "LDSM.16.MT88.2 R4, [R2]": 256, "LDSM.16.M88 R4, [R2]": 128,
             "@!P2 LDS.128 R8, [R2]": 512, "LDS.U8 R8, [R2]": 32, "LDS.S16 R8, [R2]": 64, "LDS R8, [R2]": 128,
             "STS.64 [R2], R4": 256, "LDGSTS.E.BYPASS.LTC128B.128 [R5], desc[UR4][R2.64]": 512,
             "HMMA.16816.F32.BF16 R8, R4, R6, R8": 0, "LDG.E.128 R4, desc[UR4][R2.64]": 0, "LDSTS R4": 0}
    assert {t: ck.smem_bytes(t) for t in sizes} == sizes
    # 512 + 256 + 512 + 64 + 256 + 128 bytes for 2 HMMA in the loop; the LDSM after it is not the loop's
    assert ck.loop_stats(SASS_SMEM_LOOP) == [(9, 2, 1728)] and ck.tensor_loops(SASS_SMEM_LOOP) == [(9, 2)]
    assert ck.smem_bound(256) == 1.0 and abs(ck.smem_bound(320) - 0.8) < 1e-12
    fwd = "attn_fwd_tc_kernel<__nv_bfloat16, 128, false>"
    key = ("attn_fwd_tc_kernel", "128, false")
    others = [(int(128 * (1 + c)) - 1, 128) for c in ck.OTHER_LOOP_CEILING[key]]

    def rec(smem):
        return dict(src="attention.cu", arch="sm_90", regs=219, stack=0, spill_st=0, spill_ld=0, smem=0, HMMA=128,
                    HGMMA=0, loop_ins=128 * 3, loop_tc=128, loop_smem=smem, other_loops=others)

    assert ck.failures_of(rec(128 * ck.SMEM_CEILING[key]), fwd) == []
    (msg,) = ck.failures_of(rec(128 * ck.SMEM_CEILING[key] + 128), fwd)
    assert "bytes of shared memory" in msg and "SMEM_CEILING" in msg and "attn_fwd_tc_kernel<__nv_bfloat16" in msg
    assert ck.failures_of(dict(rec(10**6), arch="sm_80"), fwd) == []  # the model reads sm_90 only
    assert ck.failures_of(dict(rec(10**6), loop_tc=0, loop_ins=0, HMMA=0), "attn_fwd_kernel<float, 128, 32, 32>") == []


def test_cuda_static_model_holds_the_band_loops_shared_memory_bytes(monkeypatch):
    """The loops beside the main one where a table's band runs are held to OTHER_LOOP_SMEM_CEILING, loop by loop in
    OTHER_LOOP_CEILING's order: the forward's band loop moving its bytes of before 2026-11-29 (the bias through a
    skewed scratch: 377 an HMMA at head dim 128) fails; a line of the wrong length is stale."""
    ck = _kernel_checks()
    fwd = "attn_fwd_tc_kernel<__nv_bfloat16, 128, false>"
    key = ("attn_fwd_tc_kernel", "128, false")
    mixes, walls = ck.OTHER_LOOP_CEILING[key], ck.OTHER_LOOP_SMEM_CEILING[key]
    assert len(mixes) == len(walls)

    def rec(*smem):
        return dict(src="attention.cu", arch="sm_90", regs=219, stack=0, spill_st=0, spill_ld=0, smem=0, HMMA=128,
                    HGMMA=0, loop_ins=128 * 3, loop_tc=128, loop_smem=128 * 300,
                    other_loops=[(int(100 * (1 + m)) - 1, 100, 100 * b) for m, b in zip(mixes, smem)])

    assert ck.failures_of(rec(*walls), fwd) == []
    band = 1  # (the band loop: the second lightest at head dim 128, after ALiBi's)
    (msg,) = ck.failures_of(rec(*walls[:band], 377, *walls[band + 1:]), fwd)
    assert "bytes of shared memory" in msg and "OTHER_LOOP_SMEM_CEILING" in msg
    monkeypatch.setitem(ck.OTHER_LOOP_SMEM_CEILING, key, walls[1:])
    (msg,) = ck.failures_of(rec(*walls), fwd)
    assert "one ceiling per loop" in msg and "OTHER_LOOP_SMEM_CEILING" in msg
