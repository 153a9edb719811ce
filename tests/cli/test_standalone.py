"""The repository stands alone: nothing cites the reference notes that live outside it (the
team's pytorch-semantics.md, ../shared), and every citation of docs/semantics.md names a
section that exists there.

- Under src/, include/, tools/, examples/, bench/, docs/, scripts/, cmake/ and the top-level
  files: no mention of pytorch-semantics.md, of "the shared reference", or of a ../shared
  path.
- Under tests/: no mention of pytorch-semantics.md or "the shared reference" either (tests
  may read data from ../shared on purpose, e.g. the seed documents, and say so).
- Anywhere: no absolute path of the machine the project was written on (/work/...).
- Every "docs/semantics.md §N[.M]" (and every "§N[.M]" inside docs/semantics.md itself)
  refers to a heading "## N." or "### N.M" of docs/semantics.md.
The checks run on the tree and, to show that they can fail, on small synthetic trees.
"""
import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("EMB_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))

SELF = os.path.join("tests", "cli", "test_standalone.py")
STRICT = ("src", "include", "tools", "examples", "bench", "docs", "scripts", "cmake",
          "README.md", "CMakeLists.txt", "Makefile")
EXTS = (".c", ".h", ".py", ".md", ".txt", ".cmake", ".in", ".sh")
# (also split over two comment lines: "pytorch-\n * semantics.md")
NOTES = re.compile(r"pytorch-(?:[\s*#/]*)semantics|shared\s+reference", re.I)
SHARED_PATH = re.compile(r"\.\./shared\b")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/work/")
HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", re.M)
# "docs/semantics.md §6.1, §6.3 and §7" or "semantics.md, §2": the § list after the name,
# across comment continuation characters.
CITATION = re.compile(r"(?<![\w-])semantics\.md((?:(?:[\s*#/,;()\]]|and|or)*§\d+(?:\.\d+)?)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)?)")


def _files(root, top):
    path = os.path.join(root, top)
    if os.path.isfile(path):
        yield top
        return
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(EXTS) or f in ("CMakeLists.txt", "Makefile"):
                yield os.path.relpath(os.path.join(dirpath, f), root)


def _read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def _line(text, pos):
    return text.count("\n", 0, pos) + 1


def check_tree(root):
    problems = []
    doc_rel = os.path.join("docs", "semantics.md")
    doc_path = os.path.join(root, doc_rel)
    sections = set()
    if os.path.exists(doc_path):
        sections = set(HEADING.findall(_read(root, doc_rel)))
    else:
        problems.append("docs/semantics.md is missing")

    for top in STRICT + ("tests",):
        for rel in _files(root, top):
            if rel == SELF:  # this file names what it looks for
                continue
            text = _read(root, rel)
            for m in NOTES.finditer(text):
                problems.append(f"{rel}:{_line(text, m.start())}: cites '{m.group(0)}', which is "
                                f"not in the repository (cite docs/semantics.md instead)")
            for m in MACHINE_PATH.finditer(text):
                problems.append(f"{rel}:{_line(text, m.start())}: an absolute path of this "
                                f"machine")
            if top != "tests":
                for m in SHARED_PATH.finditer(text):
                    problems.append(f"{rel}:{_line(text, m.start())}: refers to ../shared, "
                                    f"outside the repository")
            if rel == doc_rel:
                cited = [(m.start(), m.group(1)) for m in SECTION.finditer(text)]
            else:
                cited = []
                for m in CITATION.finditer(text):
                    # the sections listed after the name, and any other on the same line
                    # ("docs/semantics.md §6.1 (dense), §6.3 (sparse)")
                    eol = text.find("\n", m.end())
                    rest = text[m.end():eol if eol >= 0 else len(text)]
                    cited += [(m.start(), s) for s in SECTION.findall(m.group(1) + rest)]
            for pos, s in cited:
                if s not in sections:
                    problems.append(f"{rel}:{_line(text, pos)}: cites docs/semantics.md §{s}, "
                                    f"which has no such section")
    return problems


def test_repository_stands_alone():
    problems = check_tree(SOURCE_DIR)
    assert not problems, "\n  ".join(["references outside the repository:"] + problems)


def test_the_tree_cites_the_semantics_page():
    """The check above is not vacuous: the sources do cite docs/semantics.md sections."""
    n = 0
    for top in ("src", "include"):
        for rel in _files(SOURCE_DIR, top):
            n += sum(len(SECTION.findall(m.group(1)))
                     for m in CITATION.finditer(_read(SOURCE_DIR, rel)))
    assert n >= 10


# ---- the checker on synthetic trees ----

DOC = "# t\n\n## 1. One\n\n### 1.1 Sub\n\n## 2. Two\n\nSee §1.1 and §2.\n"


def _tree(tmp_path, files):
    for rel, text in {"docs/semantics.md": DOC, **files}.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(tmp_path)


def test_checker_accepts_a_clean_tree(tmp_path):
    root = _tree(tmp_path, {
        "src/a.c": "/* x (docs/semantics.md §1.1, §2). */\n",
        "include/emb/a.h": "/* docs/semantics.md\n * §1 and §2 */\n",
        "tests/t.py": "SEEDS = '../shared/seeds'  # read on purpose\n",
    })
    assert check_tree(root) == []


@pytest.mark.parametrize("rel, text, what", [
    ("src/a.c", "/* pytorch-semantics.md §4.1 */\n", "pytorch-semantics"),
    ("include/emb/a.h", "/* (shared reference §7) */\n", "shared reference"),
    ("src/b.c", '#include "../shared/x.h"\n', "../shared"),
    ("bench/b.c", "/* see ../shared/reference */\n", "../shared"),
    ("tests/unit/t.c", "/* pytorch-semantics.md section 7 */\n", "pytorch-semantics"),
    ("bench/b.c", "/* the shapes of (pytorch-\n * semantics.md timings) */\n", "pytorch-"),
    ("tests/cli/t.py", "DIR = '/work/shared/seeds'\n", "absolute path"),
    ("Makefile", "run:\n\tcd ../shared && ls\n", "../shared"),
    ("src/c.c", "/* docs/semantics.md §3 */\n", "§3"),
    ("src/d.c", "/* docs/semantics.md §1.1, §1.2 */\n", "§1.2"),
    ("src/e.c", "/* docs/semantics.md §1 (one), §2.2 (two) */\n", "§2.2"),
    ("src/f.c", "/* see docs/semantics.md\n * §1.1 and §3.1 */\n", "§3.1"),
    ("docs/x.md", "see [semantics](semantics.md) §9\n", "§9"),
    ("docs/semantics.md", DOC + "\nSee §5.\n", "§5"),
])
def test_checker_finds(tmp_path, rel, text, what):
    problems = check_tree(_tree(tmp_path, {rel: text}))
    assert len(problems) == 1 and rel in problems[0] and what in problems[0], problems
