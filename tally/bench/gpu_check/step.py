"""What a step of the GPU kit is: its commands and budgets for a mode (GPU or
rehearsal, full or quick), and how its figures are read back."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Mode:
    """Where and how the steps run."""
    rehearse: bool           # True: on the CPU emulator (no GPU), False: on the GPU
    quick: bool              # the short variant of each step
    repo: Path               # the repository root (tests/ are run from there)
    out: Path                # this step's own folder for its files


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    what: str                                    # what it measures, one line for the plan and the report
    budget_s: int                                # on the GPU, full
    quick_budget_s: int                          # on the GPU, --quick
    commands: Callable[[Mode], list[list[str]]]  # argv of each command, run one after the other
    figures: Callable[[Mode, str], dict]         # its figures, from its files and its output
    env: Callable[[Mode], dict] = field(default=lambda mode: {})   # extra environment of its commands

    def budget(self, quick: bool) -> int:
        return self.quick_budget_s if quick else self.budget_s


def shown_argv(argv: list[str]) -> list[str]:
    """argv as a person would type it: `python -c <runner> module` shown as `python -m module`."""
    if len(argv) >= 4 and argv[1] == "-c" and "runpy" in argv[2]:
        return ["python", "-m", *argv[3:]]
    if len(argv) >= 5 and argv[2] == "-c" and "runpy" in argv[3]:
        return ["python", argv[1], "-m", *argv[4:]]
    return argv


def read_json(path: Path):
    """A step's JSON file, or None where the step wrote none or only part of one (a
    step cut at its limit): its figures are then empty, never an error."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
