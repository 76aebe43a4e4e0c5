"""The executor's parts keep to their interfaces (tally/scheduler/executor.py's
docstring): each mixin of StreamExecutor uses only its own methods and the members
it lists in EXECUTOR_MEMBERS, each of which StreamExecutor has; KernelRunner uses
only what it was handed at construction and its own methods; and nothing outside
the executor's files reaches a private member of an executor."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import tally
from tally.scheduler.executor import StreamExecutor
from tally.scheduler.executor_clients import ClientControl
from tally.scheduler.executor_events import EventControl
from tally.scheduler.executor_faults import FaultControl

SCHEDULER = Path(tally.__file__).parent / "scheduler"


def _class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _self_members(cls: ast.ClassDef) -> set[str]:
    return {n.attr for n in ast.walk(cls)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}


def _methods(cls: ast.ClassDef) -> set[str]:
    return {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _assigned_in_init(cls: ast.ClassDef) -> set[str]:
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    out = set()
    for n in ast.walk(init):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        for t in targets:
            for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    out.add(e.attr)
    return out


@pytest.mark.parametrize("module, mixin", [("executor_clients", ClientControl), ("executor_events", EventControl),
                                           ("executor_faults", FaultControl)])
def test_each_mixin_uses_only_the_members_it_lists(module, mixin):
    cls = _class(SCHEDULER / f"{module}.py", mixin.__name__)
    listed = set(mixin.EXECUTOR_MEMBERS)
    unlisted = _self_members(cls) - _methods(cls) - listed - {"EXECUTOR_MEMBERS"}
    assert not unlisted, f"{module}.{mixin.__name__} uses {sorted(unlisted)}: list them in EXECUTOR_MEMBERS"
    executor = _class(SCHEDULER / "executor.py", "StreamExecutor")
    has = _assigned_in_init(executor) | _methods(executor)
    for other in (ClientControl, EventControl, FaultControl):
        has |= set(vars(other))
    missing = listed - has
    assert not missing, f"{mixin.__name__} lists {sorted(missing)}, which StreamExecutor does not have"


def test_the_kernel_runner_uses_only_what_it_is_handed():
    cls = _class(SCHEDULER / "executor_kernels.py", "KernelRunner")
    extra = _self_members(cls) - _assigned_in_init(cls) - _methods(cls)
    assert not extra, f"KernelRunner uses {sorted(extra)}, which its constructor was not given"
    tree = ast.parse((SCHEDULER / "executor_kernels.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "tally.scheduler.executor" not in imported, "KernelRunner must not reach back into the executor"


def test_nothing_outside_the_executor_reaches_its_private_members():
    pattern = re.compile(r"\b(?:executor|_executor|ex)\._[a-z]\w*")
    root = Path(tally.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path.parent == SCHEDULER and path.name.startswith("executor"):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_executor_is_the_sum_of_its_parts():
    assert issubclass(StreamExecutor, (ClientControl, EventControl, FaultControl))
