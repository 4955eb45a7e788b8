"""README.md and docs/*.md: every ```python block runs as written, every relative link resolves.

Each ```python block runs in a fresh namespace, in a temporary working directory.  A block that
cannot run here (a GPU, torchrun, a job of many minutes) is preceded by the line
``<!-- not-run: REASON -->``; the reason is required.  Other fenced blocks (```bash) and indented
blocks are commands for a shell, not run by this test.
"""

from __future__ import annotations

import glob
import os
import re

import pytest

pytestmark = pytest.mark.installation  # (pyproject.toml: CI runs these against the installed wheel too)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))

BLOCK = re.compile(r"^(<!-- not-run(?P<reason>[^>]*)-->[ \t]*\n)?```python\n(?P<code>.*?)^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def read(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def python_blocks() -> list[tuple[str, int, str]]:
    blocks = []
    for page in PAGES:
        text = read(page)
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("code"))
            if m.group(1) is not None:
                reason = m.group("reason").strip()
                assert reason.startswith(":") and reason[1:].strip(), \
                    f"{page}:{line}: a not-run block needs a reason: <!-- not-run: why -->"
                continue
            blocks.append((page, line, m.group("code")))
    return blocks


def test_every_page_has_its_blocks_found():
    # a block fence the pattern misses would silently not run: count the fences another way
    for page in PAGES:
        text = read(page)
        fences = len(re.findall(r"^```python\n", text, flags=re.M))
        assert fences == len(list(BLOCK.finditer(text))), page
    assert len(python_blocks()) >= 10


@pytest.mark.parametrize("page,line,code", python_blocks(), ids=lambda v: v if isinstance(v, (str, int)) else None)
def test_example_runs(page, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    exec(compile(code, f"{page}:{line}", "exec"), {"__name__": "__docs__"})


# ---- links ----------------------------------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: str) -> set[str]:
    text = re.sub(r"^```.*?^```", "", read(page), flags=re.S | re.M)  # headings, not code comments
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *$", text, flags=re.M)}


def relative_links(page: str) -> list[str]:
    text = re.sub(r"^```.*?^```", "", read(page), flags=re.S | re.M)
    return [m.group("target") for m in LINK.finditer(text)
            if not re.match(r"[a-z][a-z0-9+.-]*:", m.group("target"))]  # http:, https:, mailto:


def test_slug_follows_github():
    assert slug("Set-up and the two commands") == "set-up-and-the-two-commands"
    assert slug("Training across devices, fairseq") == "training-across-devices-fairseq"
    assert slug("RoPE (`rope`)") == "rope-rope"


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) if path else os.path.join(ROOT, page)
        if not os.path.exists(file):
            broken.append(f"{target}: no file {os.path.relpath(file, ROOT)}")
        elif anchor and file.endswith(".md") and anchor not in anchors(os.path.relpath(file, ROOT)):
            broken.append(f"{target}: no heading #{anchor} in {os.path.relpath(file, ROOT)}")
    assert not broken, broken


def test_links_are_checked():
    links = {page: relative_links(page) for page in PAGES}
    assert "docs/research.md" in PAGES and any(t.startswith("img/") for t in links["docs/research.md"])
    assert any("#" in t for t in links["README.md"] + links["docs/install.md"])


def test_readme_is_short():
    assert len(read("README.md").splitlines()) <= 300
