"""Is an installed wavepe the checkout's own, as `make test` ran it?  Usage: installed_as_checkout.py PACKAGE_DIR

PACKAGE_DIR is the installed package (site-packages/wavepe).  It is the checkout's when
  - every file of it but the compiled libraries and the build record is byte for byte the checkout's file of the
    same name: python/wavepe/<path>, or csrc/<path> for wavepe/_csrc/<path> (the sources of the first-use build),
    and every file of the checkout's python/wavepe that git sees (tracked, or untracked and not ignored: what a
    wheel is built from) is installed;
  - each compiled library (*.so) holds the same code and data as the in-place build's of the same name in
    python/wavepe (the one `make build` linked): every loaded section, byte for byte, but those auditwheel's
    patchelf rewrites to set the run path and the needed libraries (the dynamic section, its strings, symbols
    and version tables), which hold no code;
  - the build record (recipe.TORCH_RECORD_FILE) says the same of the build (its "package" names where it came from);
  - the wheel brought no libraries of its own (auditwheel's wavepe.libs: in place the system's are loaded).
.ci/check_wheel.sh asks it after `make test` ran the suite in place on a build with the wheel's CUDA kernels (.ci/run):
then a test's outcome on the installation is its outcome in place unless the test depends on where wavepe lives,
and only those tests need to run again there (the `installation` marker).  Exit 0 and one line when it is the
checkout's; exit 1 and what differs when not.  Standard library only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the build's recipe (standard library only), for the build record's name
_spec = importlib.util.spec_from_file_location("wavepe_build_recipe", os.path.join(ROOT, "python", "wavepe", "_build", "recipe.py"))
recipe = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # (its dataclasses look their module up)
_spec.loader.exec_module(recipe)
# the sections patchelf may rewrite (auditwheel repair: --set-rpath, --replace-needed): no code in them
PATCHED = {".interp", ".dynamic", ".dynstr", ".dynsym", ".gnu.hash", ".hash", ".gnu.version", ".gnu.version_r",
           ".gnu.version_d"}
SHF_ALLOC, SHT_NOBITS = 0x2, 8


def loaded_sections(path: str) -> dict[str, bytes]:
    """The contents of an ELF64 little-endian file's loaded sections (SHF_ALLOC, not NOBITS), by name, but PATCHED."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out: dict[str, bytes] = {}
    for name_off, kind, flags, _addr, offset, size in headers:
        name = data[names_at + name_off:data.index(b"\0", names_at + name_off)].decode()
        if flags & SHF_ALLOC and kind != SHT_NOBITS and name not in PATCHED:
            out[name] = data[offset:offset + size]
    return out


def counterpart(rel: str) -> str:
    parts = rel.split(os.sep)
    if parts[0] == "_csrc":
        return os.path.join(ROOT, "csrc", *parts[1:])
    return os.path.join(ROOT, "python", "wavepe", *parts)


def differences(package: str) -> tuple[list[str], int, int]:
    diffs: list[str] = []
    files = libraries = 0
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, package)
            mine = counterpart(rel)
            seen.add(rel)
            if not os.path.isfile(mine):
                diffs.append(f"{rel}: the checkout has no {os.path.relpath(mine, ROOT)}")
            elif name.endswith(".so"):
                theirs, ours = loaded_sections(path), loaded_sections(mine)
                moved = sorted(s for s in theirs.keys() | ours.keys() if theirs.get(s) != ours.get(s))
                if moved:
                    diffs.append(f"{rel}: sections {', '.join(moved)} differ from {os.path.relpath(mine, ROOT)}'s")
                libraries += 1
            elif name == recipe.TORCH_RECORD_FILE:
                with open(path) as a, open(mine) as b:
                    theirs, ours = json.load(a), json.load(b)
                theirs.pop("package", None), ours.pop("package", None)
                if theirs != ours:
                    diffs.append(f"{rel}: {theirs} where the in-place build's record says {ours}")
            else:
                with open(path, "rb") as a, open(mine, "rb") as b:
                    if a.read() != b.read():
                        diffs.append(f"{rel}: differs from {os.path.relpath(mine, ROOT)}")
                files += 1
    grafted = package.rstrip(os.sep) + ".libs"
    if os.path.isdir(grafted):  # auditwheel's copies of system libraries: in place the system's own are loaded
        diffs.append(f"{os.path.basename(grafted)}: libraries the wheel brings ({', '.join(sorted(os.listdir(grafted)))})")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "python/wavepe"],
                            cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for path in filter(None, listed):
        rel = os.path.relpath(os.path.join(ROOT, path), os.path.join(ROOT, "python", "wavepe"))
        if os.path.isfile(os.path.join(ROOT, path)) and rel not in seen:
            diffs.append(f"{rel}: in the checkout, not installed")
    return diffs, files, libraries


def main() -> int:
    package = sys.argv[1]
    diffs, files, libraries = differences(package)
    if diffs:
        print(f"the installed wavepe ({package}) is not the checkout's as make test ran it:")
        for d in diffs:
            print("  " + d)
        return 1
    print(f"the installed wavepe is the checkout's: {files} files byte for byte, {libraries} libraries' code and data "
          "those of the in-place build")
    return 0


if __name__ == "__main__":
    sys.exit(main())
