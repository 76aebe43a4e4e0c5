"""Benchmark helpers shared by bench/*.py.

`figures` collects the numbers a benchmark derives itself (medians, ratios against
its same-run baseline, throughput) and prints them after pytest-benchmark's
table, grouped by section, so one run gives everything a results file needs.

Run: python -m pytest bench/<file>.py --benchmark-only
(--benchmark-only is needed because pyproject's addopts skip benchmarks.)
"""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

_FIGURES: dict[str, list[str]] = defaultdict(list)


class Figures:
    def add(self, section: str, line: str) -> None:
        _FIGURES[section].append(line)


@pytest.fixture(scope="session")
def figures() -> Figures:
    return Figures()


@pytest.fixture(scope="session")
def nvcc() -> str:
    """The toolkit's nvcc (CUDA_HOME, else /usr/local/cuda; else the one on PATH), which
    benchmarks build their CUDA programs with."""
    path = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    return str(path) if path.exists() else "nvcc"


def pytest_terminal_summary(terminalreporter) -> None:
    if not _FIGURES:
        return
    terminalreporter.section("figures")
    for section, lines in _FIGURES.items():
        terminalreporter.write_line(f"{section}:")
        for line in lines:
            terminalreporter.write_line(f"  {line}")
