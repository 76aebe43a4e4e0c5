"""Runs the C++ test executables built from csrc/tests/test_*.cpp.

CMake puts them in tally/lib/tests/. An executable passes when it exits 0; one
that uses csrc/tests/test_transport_util.h also ends with
"<name>: <n> checks passed", and then n must be positive.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import tally

REPO = Path(__file__).resolve().parent.parent
SOURCES = sorted((REPO / "csrc" / "tests").glob("test_*.cpp"))
BUILT = Path(tally.__file__).resolve().parent / "lib" / "tests"


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_cpp_executable(source: Path) -> None:
    exe = BUILT / source.stem
    if not exe.exists():
        pytest.fail(f"{exe} is missing: build the C++ tests with tools/dev_build.sh "
                    f"(or pip install -e .)")
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{exe.name} failed (exit {result.returncode}):\n{output}"
    if "test_transport_util.h" in source.read_text():
        match = re.search(rf"^{re.escape(source.stem)}: (\d+) checks passed$", result.stdout, re.M)
        assert match, f"{exe.name} did not report its checks:\n{output}"
        assert int(match.group(1)) > 0
