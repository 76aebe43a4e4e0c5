"""docs/architecture.md must not go stale: every path it names exists, the
functions its path tables name are defined in the files of their row, and each
table's "Count: N files" line counts the files the table names.

Pure file reading: nothing of tally is imported or built.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

CODE = re.compile(r"`([^`\n]+)`")
# What a repository path looks like: no spaces or placeholders, a slash.
PATH = re.compile(r"^[A-Za-z0-9_.\-*{},/]+$")
FILE_SUFFIXES = (".py", ".cpp", ".h", ".c", ".cu", ".md", ".toml", ".txt", ".sh")
COUNT = re.compile(r"^Count: (\d+) files")


def _expand(token: str) -> list[str]:
    """`a/b.{h,cpp}` -> a/b.h, a/b.cpp."""
    m = re.search(r"\{([^}]*)\}", token)
    if m is None:
        return [token]
    return [token[:m.start()] + part + token[m.end():] for part in m.group(1).split(",")]


def _is_path(token: str) -> bool:
    if "/" not in token or not PATH.match(token) or token.startswith(("-", "/")):
        return False
    return token.endswith("/") or token.endswith(FILE_SUFFIXES) or "*" in token or "{" in token


def _exists(path: str) -> bool:
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def doc_paths() -> list[str]:
    text = DOC.read_text()
    return sorted({p for token in CODE.findall(text) if _is_path(token) for p in _expand(token)})


def test_the_doc_names_paths():
    assert len(doc_paths()) > 50, "the path check found almost nothing: has the doc's format changed?"


@pytest.mark.parametrize("path", doc_paths())
def test_path_exists(path):
    assert _exists(path), f"docs/architecture.md names `{path}`, which does not exist: update the map"


# ---- the path tables -------------------------------------------------------------------

def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def path_tables() -> list[tuple[str, list[list[str]], int | None]]:
    """(title, rows as [file cell, function cell], the Count line's number) of every
    table whose header has a `file` and a `function(s)` column."""
    lines = DOC.read_text().splitlines()
    tables = []
    title = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            title = line.lstrip("#").strip()
        if line.startswith("|"):
            header = [c.lower() for c in _cells(line)]
            rows = []
            i += 2          # the header and its |---| line
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            if "file" in header and "function(s)" in header:
                f, fn = header.index("file"), header.index("function(s)")
                count = None
                for rest in lines[i:i + 4]:
                    m = COUNT.match(rest)
                    if m:
                        count = int(m.group(1))
                        break
                tables.append((title, [[r[f], r[fn]] for r in rows], count))
            continue
        i += 1
    return tables


@functools.lru_cache(maxsize=None)
def _text(path: Path) -> str:
    return path.read_text(errors="replace")


def _defines(path: Path, name: str) -> bool:
    text = _text(path)
    n = re.escape(name)
    if path.suffix == ".py":
        return re.search(rf"^\s*(async\s+def|def|class)\s+{n}\b|^\s*{n}\s*[:=]", text, re.M) is not None
    # C and C++: a definition, a call, TALLY_ENTRY(name)(...), or a pybind11 .def("name", ...)
    return re.search(rf"\b{n}\b\s*(\(|\)\s*\(|\")", text) is not None


def function_rows():
    out = []
    for title, rows, _count in path_tables():
        for files_cell, functions_cell in rows:
            files = [p for t in CODE.findall(files_cell) if _is_path(t) for p in _expand(t)]
            for fn in CODE.findall(functions_cell):
                out.append((title, fn, tuple(files)))
    return out


def test_there_are_path_tables():
    tables = path_tables()
    assert len(tables) >= 5, [t[0] for t in tables]
    assert all(rows for _t, rows, _c in tables)


@pytest.mark.parametrize("title,function,files", function_rows())
def test_function_is_defined_in_its_row(title, function, files):
    assert files, f"{title}: a row names `{function}` but no file"
    name = re.split(r"::|\.", function)[-1].rstrip("()")
    present = [ROOT / f for f in files if (ROOT / f).is_file()]
    assert any(_defines(p, name) for p in present), (
        f"{title}: `{function}` is defined in none of {', '.join(files)}: update the table")


@pytest.mark.parametrize("title,rows,count", [t for t in path_tables() if t[2] is not None],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_count_matches_the_table(title, rows, count):
    files = {p for files_cell, _fn in rows for t in CODE.findall(files_cell) if _is_path(t) for p in _expand(t)}
    assert count == len(files), (f"{title}: its Count line says {count} files, the table names {len(files)}: "
                                 f"{sorted(files)}")


def test_each_launch_and_sync_table_is_counted():
    counted = [t for t, _rows, c in path_tables() if c is not None]
    assert len(counted) >= 5, counted
