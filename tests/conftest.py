"""Shared fixtures: nvcc/ptxas discovery and private caches for the tests' servers.

The `gpu`, `torch` and `cupy` markers are excluded by pyproject's addopts; a run that
selects them skips, with the reason, the tests whose GPU, PyTorch or CuPy is missing
(each test asks for itself), and a skip is not a pass."""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest


def pytest_sessionstart(session):
    # A suite started in the background of a script (`nohup pytest &`) has SIGINT and
    # SIGQUIT ignored, and every benchmark and job the tests start would inherit that
    # and shrug off the Ctrl-C the tests send it (tests/test_colocate_processes.py,
    # tests/test_e2e_graceful_exit.py). Run them as from a terminal, whatever started pytest.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)

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


@pytest.fixture(scope="session")
def nvrtc_home() -> Path:
    """The folder of NVRTC 13 as its wheel (nvidia-cuda-nvrtc, a test requirement) installs
    it: include/nvrtc.h and lib/libnvrtc.so.13 (the CUDA toolkit here has no NVRTC)."""
    return _wheel_home("nvrtc.h", "libnvrtc.so.13", "nvidia-cuda-nvrtc")


@pytest.fixture(scope="session")
def nvjitlink_home() -> Path:
    """The folder of nvJitLink 13 as its wheel (nvidia-nvjitlink, a test requirement) installs
    it: include/nvJitLink.h and lib/libnvJitLink.so.13 (the CUDA toolkit here has neither)."""
    return _wheel_home("nvJitLink.h", "libnvJitLink.so.13", "nvidia-nvjitlink")


def _wheel_home(header: str, library: str, wheel: str) -> Path:
    from e2e_helpers import cuda_wheel_home
    home = cuda_wheel_home(header, library)
    if home is None:
        pytest.fail(f"no cu13/include/{header} with lib/{library} in the nvidia package: "
                    f"pip install -e '.[test]' ({wheel})")
    return home


@pytest.fixture(autouse=True, scope="session")
def _private_caches(tmp_path_factory):
    """Keep tests (and the servers they start) out of the user's caches."""
    root = tmp_path_factory.mktemp("caches")
    saved = {k: os.environ.get(k) for k in ("TALLY_PROFILE_CACHE_DIR", "TALLY_CACHE_DIR")}
    os.environ["TALLY_PROFILE_CACHE_DIR"] = str(root / "profiles")
    os.environ["TALLY_CACHE_DIR"] = str(root / "ptx")
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
