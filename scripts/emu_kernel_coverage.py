"""Which CUDA kernel instances the emulator's deterministic tests run, against every instance compiled.

    python scripts/emu_kernel_coverage.py        runs tests/test_cuda_emu.py and tests/test_cuda_emu_nonfinite.py
                                                 but for their random-shape (hypothesis) tests, under pytest-xdist,
                                                 with WAVEPE_EMU_KERNEL_LOG set; lists each instance the emulator
                                                 library holds that none of them launched (exit 1), else exit 0

An instance is a kernel with its template arguments (``attn_bwd_dtable_tc_kernel<__half, 128, true>``): the dtype, the
head dim and the feature flags each compile a kernel of their own, and an instance that no test launches is code that
no test checks against the oracle.  The random-shape tests are left out because what they reach changes from run to
run (on 2026-12-01 four runs of the two files reached 196-200 of the 204 instances, four of rope's never).  Before
trimming the tests' parameter products, run it before and after (docs/DEVELOPING.md, "Where the test time goes").
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests import cuda_emu as E  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "kernels")
        open(log, "w").close()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto",
                               "--dist", "load", "-m", "not hypothesis", "tests/test_cuda_emu.py",
                               "tests/test_cuda_emu_nonfinite.py"], cwd=ROOT,
                              env=dict(os.environ, WAVEPE_EMU_KERNEL_LOG=log))
        if proc.returncode != 0:
            print(f"the emulator's tests failed (exit {proc.returncode})", file=sys.stderr)
            return proc.returncode
        launched, compiled = E.launched_kernels(log), E.compiled_kernels()
    missing = sorted(compiled - launched)
    print(f"{len(compiled & launched)} of the emulator library's {len(compiled)} kernel instances launched by the "
          "deterministic tests")
    for name in missing:
        print(f"  never launched: {name}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
