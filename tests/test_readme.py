"""Every ```python block of README.md runs as written (each in a fresh namespace).

A block may be excluded by preceding it with the line `<!-- not-run -->`, for
examples that need a GPU or a separate environment; everything else must run.
"""

from __future__ import annotations

import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def python_blocks() -> list[tuple[int, str]]:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    blocks = []
    for m in re.finditer(r"(<!-- not-run -->\s*\n)?```python\n(.*?)```", text, flags=re.S):
        if m.group(1):
            continue
        line = text.count("\n", 0, m.start()) + 1
        blocks.append((line, m.group(2)))
    return blocks


@pytest.mark.parametrize("line,code", python_blocks() or [pytest.param(0, "", marks=pytest.mark.skip("no blocks"))],
                         ids=lambda v: f"line{v}" if isinstance(v, int) else None)
def test_readme_example_runs(line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})
