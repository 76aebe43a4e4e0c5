"""CuPy, unmodified, under tally-run against a tally-server on the CPU emulator.
CuPy compiles its kernels with NVRTC to cubins for the device's architecture (no
CUPY_COMPILE_WITH_PTX in the job's environment); the emulator runs them from the PTX
tally's client records for each cubin (JIT capture, client_preload/src/jit_capture/).

Opt-in (`pytest -m cupy`, CuPy's interpreter in TALLY_CUPY_PYTHON when it is not
the current one, e.g. a venv with `pip install -e ".[cupy]"`): the install is about
420 MB (cupy-cuda13x 200 MB, NVRTC 220 MB) and CUB's kernels take minutes on the
emulator.

What must hold: every result is numpy's, or the job was told why it could not be
computed. cupy.sum goes through CUB's precompiled module, whose code is cubins
and PTX for compute_120 in ISA 9.2 only. On the default emulator (compute
capability 9.0, CUDA 13.0) none of it may run: the load fails with
CUDA_ERROR_NO_BINARY_FOR_GPU and tally says so on the job's stderr (running
that PTX once made cupy.sum return a wrong answer silently). CuPy 14.2 itself
discards the error CUB returns (cupy/cuda/cupy_cub.cu ignores
DeviceReduce::Sum's result), so the value it prints there is not a sum (tally
cannot make a non-sticky CUDA error stick without breaking programs that handle
it, PyTorch among them). With
`--emulate-cc 12.0 --emulate-driver 13.2`, matching what CuPy ships, CUB runs
and every result is right."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from server_harness import ServerProcess
from e2e_helpers import PROGRAMS, job_env, python_that_imports

pytestmark = pytest.mark.cupy

NVRTC_CASES = ("elementwise", "reduction_kernel", "raw_kernel")
CUB_CASES = ("max", "sum_1000", "sum_10000")
CUB_REFUSED = "cannot load a module (CUresult 209): no code in the module runs on this device"


def cupy_python() -> str:
    return python_that_imports("TALLY_CUPY_PYTHON", "cupy, cupy_backends", "pip install -e '.[cupy]'")


def run_cupy(*server_args: str) -> tuple[dict, str, str]:
    """Runs the CuPy program on a fresh emulator server; (results, job stderr, server log)."""
    python = cupy_python()
    workdir = Path(tempfile.mkdtemp(prefix="tally-cupy-"))
    server = ServerProcess(workdir / "server.sock", backend="emulator", extra_args=server_args)
    try:
        env = {**job_env(), "CUPY_CACHE_DIR": str(workdir / "cupy-cache")}
        env.pop("CUPY_COMPILE_WITH_PTX", None)      # CuPy's own switch to PTX: not for this test
        job = subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket_path),
                              "--priority", "high", "--", python, str(PROGRAMS / "cupy_on_emulator.py")],
                             capture_output=True, text=True, timeout=900, env=env, check=False)
        assert job.returncode == 0, job.stdout + job.stderr
        return json.loads(job.stdout.strip().splitlines()[-1]), job.stderr, server.log()
    finally:
        server.stop()


def right(result: dict) -> bool:
    return result["error"] is None and result["got"] == pytest.approx(result["expected"], rel=1e-5)


def test_cupy_on_the_default_emulator_is_right_or_told_why():
    results, stderr, log = run_cupy()
    assert set(results) == {*NVRTC_CASES, *CUB_CASES}
    for name in NVRTC_CASES:                                     # NVRTC's cubins for sm_90, and their PTX
        assert right(results[name]), (name, results[name], stderr)
    assert "a cubin's PTX came from JIT capture" in log
    for name in CUB_CASES:                                       # CUB: refused, and the job is told why
        assert right(results[name]) or CUB_REFUSED in stderr, (name, results[name], stderr)
    assert CUB_REFUSED in stderr and "PTX for compute_120 (ISA 9.2)" in stderr, stderr
    assert "compute capability 9.0" in stderr and "PTX for compute_120" in log


def test_cupy_with_the_compute_capability_its_ptx_is_for():
    results, stderr, _ = run_cupy("--emulate-cc", "12.0", "--emulate-driver", "13.2")
    for name in (*NVRTC_CASES, *CUB_CASES):
        assert right(results[name]), (name, results[name], stderr)
    assert "cannot load a module" not in stderr
