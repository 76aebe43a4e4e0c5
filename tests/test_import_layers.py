"""No two modules of tally/ or ptx_passes/ import each other: every dependency
goes one way, so a reader can follow a module's imports without circling back.

Every import counts, wherever it is written: at the top, inside a function (a
deferred import) or under `if TYPE_CHECKING:`. A module that needs something
from a module that imports it gets it passed in or described by a Protocol.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tally", "ptx_passes")
# Circles still to undo, each with who undoes it; the test fails once one is gone
# so that it leaves this list too.
KNOWN_CIRCLES: dict[tuple[str, str], str] = {}   # (a, b) -> why, while one is tolerated


def module_files() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` imports anywhere in its text."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import submodule` imports the submodule
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            # `import a.b.c` names the deepest module of ours it reaches
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imported_modules(name, path, known) for name, path in files.items()}


def test_the_graph_sees_deferred_and_type_checking_imports():
    graph = import_graph()
    # deferred, inside a function body (tally/backends/registry.py's factories)
    assert "tally.backends.cuda" in graph["tally.backends.registry"]
    # a package's own __init__ re-exporting a submodule
    assert "tally.backends.sim.backend" in graph["tally.backends.sim"]
    # `from . import ir`
    assert "ptx_passes.ir" in graph["ptx_passes.printer"]


def test_no_two_modules_import_each_other():
    graph = import_graph()
    both_ways = {tuple(sorted((a, b))) for a, targets in graph.items() for b in targets if a in graph.get(b, ())}
    new = sorted(both_ways - set(KNOWN_CIRCLES))
    assert new == [], "modules importing each other: " + "; ".join(f"{a} <-> {b}" for a, b in new)
    gone = sorted(set(KNOWN_CIRCLES) - both_ways)
    assert gone == [], f"no longer circles, remove them from KNOWN_CIRCLES: {gone}"
