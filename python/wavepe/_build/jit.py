"""Compiling the torch ops at first use, against the torch installed now: the fallback.

A prebuilt wheel holds the ops (``wavepe/libwavepe_ops.so``, torch's ABI-stable API: every torch >=
2.10).  An installation without them (an isolated ``pip install`` of the sdist, a platform without a
wheel) compiles them here from the sources shipped in the package (``wavepe/_csrc``; a source
checkout's ``csrc/``) with the same recipe as setup.py (:mod:`wavepe._build.recipe`), once, and caches
them.  The C core's objects, which that installation's build compiled for the NumPy extension and kept
(``wavepe/_core_objects``: :func:`installed_core`), are linked rather than compiled again where their
record shows the same commands, sources and machine::

    $WAVEPE_CACHE_DIR, else $XDG_CACHE_HOME/wavepe, else ~/.cache/wavepe
        torch-ops/<key>/libwavepe_ops.so   key: wavepe version, torch version, CUDA kernels or not, and a
                                          hash of the sources and of every compile/link command
        torch-ops/<key>/build.json        what it is, and the SHA-256 of the library, verified before
                                          every load: a damaged entry (a truncated file would kill the
                                          process with SIGBUS when mapped) is rebuilt, saying so
        torch-ops/<key>.lock              processes importing at once: one compiles, the others wait

It prints one line saying what it compiles and where it caches it, then a count of the files while
it compiles (on a terminal or in Jupyter; elsewhere one line when done).  When it cannot, it raises
:class:`JitBuildError` naming the cause: the missing compiler or Python headers, an unwritable cache
directory, or the compiler's own error (the whole log is kept beside the cache).

No ninja is needed: the recipe's driver runs the compilers itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Any, TextIO

from . import recipe

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class JitBuildError(RuntimeError):
    """The torch ops could not be compiled at first use; the message names the cause and what to do."""


def cache_root() -> str:
    """Where compiled ops are cached: $WAVEPE_CACHE_DIR, else $XDG_CACHE_HOME/wavepe, else ~/.cache/wavepe."""
    explicit = os.environ.get("WAVEPE_CACHE_DIR", "").strip()
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")  # XDG: relative is invalid
    return os.path.join(base, "wavepe")


def source_root() -> str | None:
    """The sources of the torch ops: the package's _csrc (installed), else the checkout's csrc."""
    for root in (os.path.join(PACKAGE_DIR, "_csrc"), os.path.join(os.path.dirname(os.path.dirname(PACKAGE_DIR)), "csrc")):
        if os.path.isdir(os.path.join(root, "core")) and os.path.isdir(os.path.join(root, "torch")):
            return root
    return None


def installed_core(src_root: str) -> tuple[list[str], str] | None:
    """The C core's objects an installation built without torch keeps (recipe.CORE_OBJECTS_DIR), and a digest of
    their record, where they are what the first-use build would compile -- the same commands, the same sources,
    this machine -- and intact; else None (that build compiles the core itself)."""
    folder = os.path.join(PACKAGE_DIR, recipe.CORE_OBJECTS_DIR)
    try:
        with open(os.path.join(folder, recipe.CORE_OBJECTS_RECORD), encoding="utf-8") as f:
            kept = json.load(f)
        if kept["record"] != recipe.core_objects_record(src_root):
            return None
        objects = [os.path.join(folder, name) for name in sorted(kept["objects"])]
        if any(recipe.file_sha256(path) != kept["objects"][os.path.basename(path)] for path in objects):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return objects, hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def _plan(src_root: str, build_dir: str, tb: recipe.TorchBuild, core_objects: list[str] | None = None) -> recipe.Plan:
    return recipe.torch_plan(src_root, os.path.join(build_dir, "obj"), os.path.join(build_dir, _module_file()), tb,
                             core_objects)


def _module_file() -> str:
    return recipe.TORCH_LIBRARY_FILE


def _intact(final_dir: str) -> tuple[bool, str | None]:
    """(usable, why not) for a cache entry: its library's digest is the one recorded at build time."""
    module_path = os.path.join(final_dir, _module_file())
    if not os.path.exists(module_path):
        return False, None
    try:
        with open(os.path.join(final_dir, "build.json"), encoding="utf-8") as f:
            expected = json.load(f).get("sha256")
        actual = recipe.file_sha256(module_path)
    except (OSError, ValueError) as exc:
        return False, f"its record is unreadable ({exc})"
    if expected != actual:
        return False, f"{module_path} is damaged (SHA-256 {actual[:12]}, built as {str(expected)[:12]})"
    return True, None


def _clean_stale_builds(ops_dir: str) -> None:
    """Remove the ``<key>.building-*`` folders of builds that were killed: a folder whose key's lock
    can be taken has no live builder (a builder holds it until it renames its folder)."""
    try:
        names = os.listdir(ops_dir)
    except OSError:
        return
    for name in names:
        key, sep, _ = name.partition(".building-")
        if not sep or not os.path.isdir(os.path.join(ops_dir, name)):
            continue
        try:
            fd = os.open(os.path.join(ops_dir, key + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(os.path.join(ops_dir, name), ignore_errors=True)
        except BlockingIOError:
            pass  # its builder is alive
        finally:
            os.close(fd)


def build_key(src_root: str, tb: recipe.TorchBuild, wavepe_version: str) -> str:
    """Cache key: what the ops are tied to, readable, plus a hash of everything that went into them."""
    h = hashlib.sha256()
    with open(recipe.__file__, "rb") as f:
        h.update(f.read())
    for rel in recipe.shipped_sources(src_root):
        h.update(rel.encode() + b"\0")
        with open(os.path.join(src_root, rel), "rb") as f:
            h.update(f.read())
    core = installed_core(src_root)
    if core is not None:
        h.update(core[1].encode())
    # the commands, the sources' folder a placeholder: flags, compilers, torch paths
    plan = _plan(src_root, "{BUILD}", tb, core[0] if core else None)
    h.update(json.dumps([[recipe.without_root(c.argv, src_root) for c in plan.compiles],
                         [recipe.without_root(link.argv, src_root) for link in plan.links]]).encode())
    name = f"wavepe{wavepe_version}-torch{tb.version}{'-cuda' if tb.cuda else ''}-{recipe.machine()}-{h.hexdigest()[:12]}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


class _Progress:
    """One line on stderr, then a file count, rewritten in place where the output shows that."""

    def __init__(self, stream: TextIO, headline: str):
        self.stream = stream
        self.headline = headline
        self.live = bool(getattr(stream, "isatty", lambda: False)()) or "ipykernel" in sys.modules
        self.start = time.monotonic()
        self._write(headline + (" ..." if self.live else ""), end="" if self.live else "\n")

    def _write(self, text: str, end: str = "\n") -> None:
        try:
            self.stream.write(text + end)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not break the build
            pass

    def update(self, done: int, total: int, name: str) -> None:
        if self.live:
            self._write(f"\r{self.headline}: {done}/{total} files ({name})\x1b[K", end="")

    def finish(self, n_files: int, note: str = "") -> None:
        seconds = time.monotonic() - self.start
        if self.live:
            self._write("\r\x1b[K", end="")
        self._write(f"wavepe: compiled the PyTorch ops ({n_files} files{note}) in {seconds:.0f} s")

    def fail(self) -> None:
        if self.live:
            self._write("")


def _lock(path: str, waiting_note: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(waiting_note, file=sys.stderr, flush=True)
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if the holder dies: never stale
    return fd


def compiled_torch_ops(why: str | None = None, stream: TextIO | None = None) -> str:
    """Path of a torch ops library compiled for the running torch: from the cache, or compiled now.

    ``why`` is appended to the one-line message (e.g. that the packaged build is for another torch)."""
    import torch  # noqa: F401  (torch_build() reads it)

    import wavepe

    src_root = source_root()
    if src_root is None:
        raise JitBuildError(f"this wavepe installation ({PACKAGE_DIR}) has neither torch ops for torch "
                            f"{torch.__version__} nor the sources to compile them (wavepe/_csrc): reinstall wavepe")
    try:
        tb = recipe.torch_build()
    except RuntimeError as exc:
        raise JitBuildError(str(exc)) from None
    key = build_key(src_root, tb, wavepe.__version__)
    ops_dir = os.path.join(cache_root(), "torch-ops")
    final_dir = os.path.join(ops_dir, key)
    module_path = os.path.join(final_dir, _module_file())
    if _intact(final_dir)[0]:
        return module_path
    try:
        os.makedirs(ops_dir, exist_ok=True)
        fd = _lock(os.path.join(ops_dir, key + ".lock"),
                   f"wavepe: waiting for another process that is compiling the PyTorch ops into {final_dir}")
    except OSError as exc:
        raise JitBuildError(f"cannot write wavepe's cache directory {ops_dir} ({exc.strerror}): set WAVEPE_CACHE_DIR "
                            "to a writable directory") from None
    try:
        intact, damage = _intact(final_dir)
        if intact:  # compiled by the process we waited for
            return module_path
        _clean_stale_builds(ops_dir)
        if os.path.exists(final_dir):  # damaged or incomplete: rebuilt below
            print(f"wavepe: the cached PyTorch ops are unusable ({damage or 'incomplete'}); rebuilding them",
                  file=sys.stderr, flush=True)
            shutil.rmtree(final_dir, ignore_errors=True)
        if tb.cuda_note:
            print("wavepe: " + tb.cuda_note, file=sys.stderr)
        problems = recipe.missing_tools()
        if problems:
            raise JitBuildError(f"wavepe's PyTorch ops must be compiled for torch {tb.version} at first use, and this "
                                "machine has " + "; ".join(problems))
        _build(src_root, tb, ops_dir, final_dir, key, why, stream or sys.stderr)
        return module_path
    finally:
        os.close(fd)  # releases the lock


def _build(src_root: str, tb: recipe.TorchBuild, ops_dir: str, final_dir: str, key: str, why: str | None,
           stream: TextIO) -> None:
    build_dir = tempfile.mkdtemp(prefix=key + ".building-", dir=ops_dir)
    log_lines: list[str] = []
    core = installed_core(src_root)
    plan = _plan(src_root, build_dir, tb, core[0] if core else None)
    what = f"for torch {tb.version}" + (" with the CUDA kernels" if tb.cuda else "")
    progress = _Progress(stream, f"wavepe: compiling the PyTorch ops {what} (once; cached in {final_dir})"
                         + (f"; {why}" if why else ""))
    start = time.monotonic()
    try:
        recipe.run(plan, progress=progress.update, log=log_lines.append)
    except recipe.BuildError as exc:
        progress.fail()
        log_path = os.path.join(ops_dir, key + ".failed.log")
        with open(log_path, "w", encoding="utf-8") as f:
            f.write("\n".join(log_lines + [str(exc)]))
        shutil.rmtree(build_dir, ignore_errors=True)
        raise JitBuildError(f"compiling wavepe's PyTorch ops for torch {tb.version} failed; {exc}\n(log: {log_path}; "
                            "compilers: CC / CXX, compiles at once: WAVEPE_BUILD_JOBS)") from None
    except BaseException:
        progress.fail()
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    shutil.rmtree(os.path.join(build_dir, "obj"), ignore_errors=True)  # only the module is kept
    with open(os.path.join(build_dir, "build.log"), "w", encoding="utf-8") as f:
        f.write("\n".join(log_lines))
    with open(os.path.join(build_dir, "build.json"), "w", encoding="utf-8") as f:
        json.dump({**tb.build_record(), "python": sys.version.split()[0], "sources": src_root,
                   "files": len(plan.compiles), "seconds": round(time.monotonic() - start, 1),
                   "sha256": recipe.file_sha256(os.path.join(build_dir, _module_file()))}, f, indent=1)
    os.rename(build_dir, final_dir)  # atomic: another process sees the whole directory or none of it
    progress.finish(len(plan.compiles), f"; the C core's {len(core[0])} objects from the installation" if core else "")


def load(module_path: str) -> dict[str, Any]:
    """Load a compiled library (registers torch.ops.wavepe.*); returns its record (build.json)."""
    import torch

    try:
        torch.ops.load_library(module_path)
    except OSError as exc:
        # a library that does not load would be found again on every import: drop it, the next import rebuilds
        shutil.rmtree(os.path.dirname(module_path), ignore_errors=True)
        raise ImportError(f"the torch ops compiled at {module_path} do not load ({exc.__cause__ or exc}); removed "
                          "them, the next import compiles them again") from exc
    try:
        with open(os.path.join(os.path.dirname(module_path), "build.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
