#!/usr/bin/env python3
"""The torch ops library keeps torch's stable-ABI contract: checked with ``nm -D`` and its ELF header.

    python3 .ci/check_stable_abi.py path/to/libwavepe_ops.so

One binary is to load in every torch >= the one it targets (python/wavepe/_build/recipe.py,
TORCH_TARGET), which holds only while it calls torch through the stable C shim.  So:

* every undefined dynamic symbol without a version is the shim's (``aoti_torch_*``, ``torch_*``: plain C
  names, never a mangled C++ one); every versioned one comes from the C / C++ runtimes (GLIBC_*,
  GLIBCXX_*, CXXABI_*, GCC_*): no libtorch / c10 / ATen C++ symbol (``_ZN3c10``, ``_ZN2at``,
  ``_ZN5torch``), no CUDA runtime symbol (it is linked in statically);
* the libraries it needs (DT_NEEDED) are libtorch_cpu.so (the shim, resolved to the copy torch has
  loaded) and the system's C/C++ runtime: no libc10, libtorch, libtorch_python, libcudart, libgomp.

Exit status 1 with one line per violation.  Standard library only, plus binutils' nm.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

SHIM = re.compile(r"^(aoti_torch_|torch_)[A-Za-z0-9_]+$")
RUNTIME_VERSIONS = re.compile(r"^(GLIBC|GLIBCXX|CXXABI|GCC)_[0-9.]+$")
FORBIDDEN_CXX = ("_ZN3c10", "_ZNK3c10", "_ZN2at", "_ZNK2at", "_ZN5torch", "_ZNK5torch", "_ZN6caffe2")
ALLOWED_NEEDED = re.compile(r"^(libtorch_cpu\.so|libstdc\+\+\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libc\.so\.6|"
                            r"libdl\.so\.2|librt\.so\.1|libpthread\.so\.0|ld-linux[-a-z0-9_.]*\.so\.[0-9])$")


def undefined_symbols(lib: str) -> list[tuple[str, str | None]]:
    out = subprocess.run(["nm", "-D", "--undefined-only", lib], capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] == "w":  # weak: optional (gmon, TM clone tables)
            continue
        name = parts[-1]
        base, _, version = name.partition("@")
        syms.append((base, version.lstrip("@") or None))
    return syms


def needed(lib: str) -> list[str]:
    out = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def violations(lib: str) -> list[str]:
    bad = []
    for name, version in undefined_symbols(lib):
        if name.startswith(FORBIDDEN_CXX):
            bad.append(f"libtorch C++ symbol {name}")
        elif version is None and not SHIM.match(name):
            bad.append(f"unversioned symbol {name} is not torch's stable C shim (aoti_torch_*, torch_*)")
        elif version is not None and not RUNTIME_VERSIONS.match(version):
            bad.append(f"symbol {name}@{version} is not from the C/C++ runtime")
    for lib_name in needed(lib):
        if not ALLOWED_NEEDED.match(lib_name):
            bad.append(f"needs {lib_name} (only libtorch_cpu.so and the C/C++ runtime are allowed)")
    return bad


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not os.path.isfile(argv[1]):
        print("usage: check_stable_abi.py LIBRARY", file=sys.stderr)
        return 2
    lib = argv[1]
    bad = violations(lib)
    syms = undefined_symbols(lib)
    shim = sum(1 for n, v in syms if v is None)
    if bad:
        print(f"{lib}: the stable-ABI contract is broken:", file=sys.stderr)
        for b in bad:
            print("  " + b, file=sys.stderr)
        return 1
    print(f"{os.path.basename(lib)}: {shim} symbols from torch's stable C shim, {len(syms) - shim} from the C/C++ "
          f"runtime, no libtorch C++ symbol; needs {', '.join(needed(lib))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
