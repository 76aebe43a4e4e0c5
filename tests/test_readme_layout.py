"""The README's layout table is the map of tally/: every directory of modules has its
row, every module is named in its directory's row, and the table names nothing that
is gone. A new module without its row fails here, not in a reader's head."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| `(?P<path>[^`]+/)` \| (?P<text>.*) \|$")
NAMED_MODULE = re.compile(r"`([A-Za-z0-9_]+\.py)`")


def layout_rows(readme: str) -> dict[str, str]:
    """The table's rows by their path cell (`tally/server/`...)."""
    return {m["path"]: m["text"] for m in map(ROW.match, readme.splitlines()) if m}


def module_dirs() -> dict[str, set[str]]:
    """Each directory of tally/ that holds modules, and their file names."""
    dirs: dict[str, set[str]] = {}
    for path in (ROOT / "tally").rglob("*.py"):
        if path.name != "__init__.py":
            dirs.setdefault(path.parent.relative_to(ROOT).as_posix() + "/", set()).add(path.name)
    # the gRPC modules setup.py generates beside each .proto are modules too, also in
    # a checkout that was never built
    for proto in (ROOT / "tally").rglob("*.proto"):
        folder = dirs.setdefault(proto.parent.relative_to(ROOT).as_posix() + "/", set())
        folder |= {f"{proto.stem}_pb2.py", f"{proto.stem}_pb2_grpc.py"}
    return dirs


def layout_problems(rows: dict[str, str], dirs: dict[str, set[str]]) -> list[str]:
    problems = []
    for folder, modules in sorted(dirs.items()):
        if folder not in rows:
            problems.append(f"{folder}: no row in the README's layout table")
            continue
        named = set(NAMED_MODULE.findall(rows[folder]))
        problems += [f"{folder}{m}: not named in its row" for m in sorted(modules - named)]
        problems += [f"{folder}{m}: named in the table, but there is no such module"
                     for m in sorted(named - modules - {"__init__.py"})]
    problems += [f"{folder}: a row for a folder of tally/ without modules"
                 for folder in sorted(rows) if folder.startswith("tally/") and folder not in dirs]
    return problems


def test_every_module_of_tally_is_in_the_readme_layout_table():
    rows = layout_rows((ROOT / "README.md").read_text())
    assert layout_problems(rows, module_dirs()) == []


def test_the_check_finds_a_missing_module_a_missing_row_and_a_stale_name():
    rows = {"tally/server/": "`session.py` and `gone.py`", "tally/old/": "`x.py`"}
    dirs = {"tally/server/": {"session.py", "lifecycle.py"}, "tally/cli/": {"run_main.py"}}
    assert layout_problems(rows, dirs) == [
        "tally/cli/: no row in the README's layout table",
        "tally/server/lifecycle.py: not named in its row",
        "tally/server/gone.py: named in the table, but there is no such module",
        "tally/old/: a row for a folder of tally/ without modules",
    ]
