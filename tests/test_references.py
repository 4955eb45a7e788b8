"""Every repository file that a comment, docstring or document names exists.

What is read: all of every Markdown file, and the comments and docstrings of the code (C, C++,
CUDA, Python, shell, Makefile) -- not the code itself, whose strings name files of test
fixtures and build steps.  Two kinds of names are checked there:

* paths from the repository root (``csrc/core/rope.h``, ``tests/reference.py``, ``docs/CUDA.md``,
  ``python/wavepe/...``, ``benchmarks/...``, ...): the file or folder must exist (or, for
  ``tests/reference.attention``, the module);
* bare file names with a source suffix (``relbias_simd.h``, ``DESIGN.md``): some file of that
  name must exist somewhere in the tree.

Patterns are not names: ``<family>_op.cpp``, ``*_avx2.c``, ``X.h`` (one letter for any family).
Files that are written by the code (outputs) or belong to other projects are listed below with
where they come from.  And nothing may point outside the repository (the parent's ``shared``
folder, a machine's absolute paths).
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF = "tests/test_references.py"  # its examples name missing files on purpose

C_LIKE = (".c", ".h", ".cu", ".cuh", ".cpp")
HASH_COMMENTS = (".sh", ".toml", ".in", ".txt", ".cfg")
HASH_NAMES = ("Makefile", "run")

ROOT_DIRS = ("csrc", "python/wavepe", "tests", "docs", "benchmarks", "scripts", "examples", ".ci", "build_backend")
NOT_BEFORE = r"(?<![\w./*<>{}$-])"
PATH = re.compile(NOT_BEFORE + r"(?:%s)/[\w./<>*{}$-]*" % "|".join(re.escape(d) for d in ROOT_DIRS))
BARE = re.compile(NOT_BEFORE + r"[\w-]+\.(?:c|h|cu|cuh|cpp|py|md|sh)(?![\w/])")
OUTSIDE = re.compile(r"\.\./shared\b|(?<![\w.])/work/|(?<![\w.])/home/\w")

NOT_REPOSITORY_FILES = {
    # outputs: written by the code, never committed
    "results.md",  # the research jobs' tables, in their --out folder
    "python/wavepe/libwavepe_ops.json",  # setup.py: what the torch ops library beside it is
    "python/wavepe/libwavepe_ops.so",  # setup.py: the torch ops library itself
    "report.md",  # benchmarks/gpu_report.sh's report, in its OUT folder
    "benchmarks/results/bench_attention_cuda.json",  # benchmarks/_attention_cuda.py, on a GPU
    # other projects' files
    "Python.h", "cuda_runtime_api.h", "driver_types.h",  # CPython's and the CUDA toolkit's headers
    "passkey.py",  # YaRN's passkey script (research/experiments/retrieval.py cites it)
}


# Stale names in files that other work in progress is rewriting, to be fixed there.  Each must still
# be stale: the test below fails once one is fixed, so that this list only shrinks.
PENDING: set[str] = set()


def repository_files() -> list[str]:
    """The files of the repository: tracked, or new and not ignored (build outputs are ignored)."""
    return subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.splitlines()


def prose(rel: str, text: str) -> list[tuple[int, str]]:
    """(line number, text) of what a file says in words: Markdown whole, code's comments and docstrings."""
    name = os.path.basename(rel)
    if rel.endswith(".md"):
        return list(enumerate(text.splitlines(), 1))
    found: list[tuple[int, str]] = []

    def add(start_line: int, chunk: str) -> None:
        found.extend((start_line + i, line) for i, line in enumerate(chunk.splitlines()))

    if rel.endswith(C_LIKE):
        for m in re.finditer(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"", text, flags=re.S):
            if not m.group(0).startswith('"'):  # string literals are code
                add(text.count("\n", 0, m.start()) + 1, m.group(0))
    elif rel.endswith(".py"):
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                add(tok.start[0], tok.string)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                        and isinstance(first.value.value, str):
                    add(first.lineno, first.value.value)
    elif rel.endswith(HASH_COMMENTS) or name in HASH_NAMES:
        for number, line in enumerate(text.splitlines(), 1):
            if "#" in line:
                add(number, line[line.index("#"):])
    return sorted(found)


def is_pattern(token: str) -> bool:
    stem = os.path.basename(token).split(".")[0]
    return any(c in token for c in "<>*{}$") or re.fullmatch(r"[A-Za-z](_\w+)?", stem) is not None


def stale_names(files: list[str], tree: set[str], root: str = ROOT) -> list[str]:
    """'file:line: name' for every repository path or bare file name said in files that the tree lacks."""
    basenames = {os.path.basename(p) for p in tree}
    folders = {os.path.dirname(p) for p in tree}
    folders |= {f[:i] for f in folders for i in range(len(f)) if f[i] == "/"}
    found = []
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for number, line in prose(rel, text):
            for m in PATH.finditer(line):
                token = m.group(0).rstrip(".,;:)")
                path = token.rstrip("/")
                module = path.rsplit(".", 1)[0] + ".py"  # tests/reference.attention: a module's name
                if is_pattern(token) or path in NOT_REPOSITORY_FILES:
                    continue
                if path not in tree and path not in folders and module not in tree:
                    found.append(f"{rel}:{number}: {token}")
            for m in BARE.finditer(line):
                name = m.group(0)
                if name not in basenames and name not in NOT_REPOSITORY_FILES and not is_pattern(name):
                    found.append(f"{rel}:{number}: {name}")
            for m in OUTSIDE.finditer(line):
                found.append(f"{rel}:{number}: {m.group(0)} (outside the repository)")
    return found


def test_no_comment_or_document_names_a_missing_file():
    tree = set(repository_files())
    files = sorted(p for p in tree if os.path.isfile(os.path.join(ROOT, p)) and p != SELF and not p.startswith("docs/img/")
                   and (p.endswith((".md", ".py") + C_LIKE + HASH_COMMENTS) or os.path.basename(p) in HASH_NAMES))
    assert "README.md" in files and "csrc/core/attention.h" in files and "tests/reference.py" in files
    stale = stale_names(files, tree)
    fixed = sorted(PENDING - set(stale))
    assert not fixed, f"fixed at last: remove them from PENDING: {fixed}"
    new = [s for s in stale if s not in PENDING]
    assert not new, "names of files that do not exist:\n" + "\n".join(new)


def test_the_check_finds_what_it_should(tmp_path):
    tree = {"csrc/core/rope.h", "docs/CUDA.md", "tests/reference.py"}
    pages = {
        "docs/probe.md": "see csrc/core/rope.h and csrc/core/simd.h, `DESIGN.md` and CUDA.md; csrc/core/<family>.h;\n"
                         "the folder csrc/core/, tests/reference.attention, X_avx2.c, ../shared/DESIGN.md\n",
        "csrc/probe.c": '/* from attention_avx2_tmpl.h */\nconst char *s = "a.c";  // rope.h, gone.h\n',
        "tests/probe.py": '"""Oracles (simd.h)."""\nx = "fixture.c"  # see docs/CUDA.md and docs/gone.md\n',
    }
    for rel, text in pages.items():
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    stale = stale_names(sorted(pages), tree, str(tmp_path))
    # not "a.c" (a string of the code), nor rope.h, CUDA.md, the patterns, the module name
    assert stale == ["csrc/probe.c:1: attention_avx2_tmpl.h", "csrc/probe.c:2: gone.h",
                     "docs/probe.md:1: csrc/core/simd.h", "docs/probe.md:1: DESIGN.md",
                     "docs/probe.md:2: ../shared (outside the repository)",
                     "tests/probe.py:1: simd.h", "tests/probe.py:2: docs/gone.md"], stale


# ---- dead files ------------------------------------------------------------------------------------

# Headers no file includes, left for other work in progress to remove.  The test fails once one is gone
# or used, so the entry goes too.
DEAD_PENDING: set[str] = set()


def test_every_header_is_included_somewhere():
    tree = set(repository_files())
    included = set()
    # a computed include (`#include ATTN_ENGINE_FILE`) includes every header a `#define ATTN_ENGINE_FILE "x.h"`
    # names, wherever in the tree that is
    computed, defined = set(), {}
    for rel in tree:
        if rel.endswith(C_LIKE) and os.path.isfile(os.path.join(ROOT, rel)):
            with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
            included |= {os.path.basename(m) for m in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M)}
            computed |= set(re.findall(r'^\s*#\s*include\s+([A-Za-z_]\w*)\s*$', text, re.M))
            for name, header in re.findall(r'^\s*#\s*define\s+([A-Za-z_]\w*)\s+"([^"]+)"', text, re.M):
                defined.setdefault(name, set()).add(os.path.basename(header))
    for name in computed:
        included |= defined.get(name, set())
    headers = {p for p in tree if p.startswith("csrc/") and p.endswith((".h", ".cuh"))}
    dead = {h for h in headers if os.path.basename(h) not in included}
    assert not (DEAD_PENDING - dead), f"gone or used at last: remove from DEAD_PENDING: {DEAD_PENDING - dead}"
    assert dead == DEAD_PENDING, f"headers no file includes: {sorted(dead - DEAD_PENDING)}"
