"""A job's C++ data plane has one writer (tally/scheduler/plane_owner.py): no other
module of tally/ makes a ClientPlane or calls one, so every change the plane sees is
a method of the owner (issue: the plane used to be written from fast_path.py and
fast_lane.py, each with its own copy of what the other had told it)."""
from __future__ import annotations

import ast
from pathlib import Path

import tally
from tally import _core

ROOT = Path(tally.__file__).parent
OWNER = ROOT / "scheduler" / "plane_owner.py"
PLANE_METHODS = {m for m in dir(_core.data_plane.ClientPlane) if not m.startswith("_")}


def _receiver_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def offences() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == OWNER:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
            fn = node.func
            if isinstance(fn, ast.Attribute) and fn.attr == "ClientPlane":
                found.append(f"{where} makes a ClientPlane")
            if isinstance(fn, ast.Attribute) and fn.attr in PLANE_METHODS \
                    and _receiver_name(fn.value) in ("plane", "_plane", "client_plane"):
                found.append(f"{where} calls the plane's {fn.attr}")
    return found


def test_only_the_owner_makes_or_calls_a_client_plane():
    assert PLANE_METHODS >= {"grant", "open_lane", "set_lane_rule", "add_whole_shape", "add_allocation", "serve"}
    assert offences() == []


def test_the_owner_covers_every_mutating_method_the_server_uses():
    owner_methods = {n.name for n in ast.walk(ast.parse(OWNER.read_text())) if isinstance(n, ast.FunctionDef)}
    used = {"add_function", "add_emulator_function", "remove_function", "add_whole_shape", "add_allocation",
            "remove_allocation", "clear_allocations", "stream_rules", "set_quiet", "set_enabled", "set_lane_rule",
            "open_lane", "grant", "revoke_all", "close_lane", "serve", "stop", "push_completion", "close"}
    assert used <= owner_methods and used <= PLANE_METHODS
