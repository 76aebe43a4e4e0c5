"""Shared fixtures: nvcc/ptxas discovery and the GPU marker's skip logic."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
TESTS_DIR = Path(__file__).resolve().parent
CUDA_SOURCES = TESTS_DIR / "cuda"


def _tool(name: str) -> str | None:
    path = CUDA_HOME / "bin" / name
    return str(path) if path.exists() else shutil.which(name)


@pytest.fixture(scope="session")
def nvcc() -> str:
    path = _tool("nvcc")
    if path is None:
        pytest.fail("nvcc not found: set CUDA_HOME to the CUDA toolkit (expected /usr/local/cuda)")
    return path


@pytest.fixture(scope="session")
def ptxas() -> str:
    path = _tool("ptxas")
    if path is None:
        pytest.fail("ptxas not found: set CUDA_HOME to the CUDA toolkit (expected /usr/local/cuda)")
    return path
