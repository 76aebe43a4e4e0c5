"""Triton, unmodified, under tally-run on the CPU emulator: its kernels reach tally as
cubins, and run only because tally-run's JIT capture (tally/jit/) gives the server
their PTX.

Needs PyTorch (a CUDA build) and Triton, which CI does not install (several GB): run
with `pytest -m triton`, naming the interpreter in TALLY_TRITON_PYTHON (or
TALLY_TORCH_PYTHON) when it is not the current one, e.g. a venv made with
`pip install torch==2.14.1` (which brings triton 3.8.0)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e_helpers import PROGRAMS, Server, job_env

pytestmark = pytest.mark.triton


def triton_python() -> str:
    python = os.environ.get("TALLY_TRITON_PYTHON") or os.environ.get("TALLY_TORCH_PYTHON") or sys.executable
    probe = subprocess.run([python, "-c", "import torch, triton; print(torch.version.cuda or '')"],
                           capture_output=True, text=True, timeout=300, check=False)
    if probe.returncode != 0 or not probe.stdout.strip():
        pytest.skip(f"{python} has no CUDA build of PyTorch with Triton; set TALLY_TRITON_PYTHON")
    return python


def _run(server: Server, python: str, env: dict, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket), *flags, "--",
                           python, str(PROGRAMS / "triton_vector_add.py")], capture_output=True, text=True,
                          timeout=900, env={**job_env(), **env}, check=False)


def test_triton_vector_add_runs_on_the_emulator_with_captured_ptx(tmp_path):
    python = triton_python()
    server = Server("emulator", ("--be-transform", "ptb"))
    records = tmp_path / "home" / "tally" / "jit-ptx"
    env = {"XDG_CACHE_HOME": str(tmp_path / "home"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    try:
        job = _run(server, python, env)
        assert job.returncode == 0, job.stdout + job.stderr
        assert "max_error=0.0 n=3000" in job.stdout
        assert len(list(records.glob("*.rec"))) == 1
        assert "a cubin's PTX came from JIT capture" in server.process.log()
        # Triton's cache now has the kernel: ptxas does not run again, the record serves
        again = _run(server, python, env)
        assert again.returncode == 0 and "max_error=0.0" in again.stdout, again.stdout + again.stderr
        assert server.process.log().count("a cubin's PTX came from JIT capture") == 2
        # without capture: a fresh compile leaves no record and the cubin cannot run here
        off_env = {"XDG_CACHE_HOME": str(tmp_path / "home-off"), "TRITON_CACHE_DIR": str(tmp_path / "triton-off")}
        off = _run(server, python, off_env, "--no-jit-capture")
        assert off.returncode != 0 and "CUDA_ERROR_NO_BINARY_FOR_GPU" in off.stderr, off.stdout + off.stderr
        assert not (tmp_path / "home-off" / "tally").exists()
        assert server.alive()
    finally:
        server.stop()


def test_a_kernel_triton_compiled_without_tally_run_keeps_its_ptx_from_tritons_cache(tmp_path):
    """Triton compiles the kernel in a run without capture (its cache keeps PTX and
    cubin; the emulator cannot run the cubin); the next run, under capture, finds the
    kernel in that cache without assembling it, and tally's cache manager records
    its PTX from there."""
    python = triton_python()
    server = Server("emulator")
    home = tmp_path / "home"
    env = {"XDG_CACHE_HOME": str(home), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    try:
        before = _run(server, python, env, "--no-jit-capture")
        assert before.returncode != 0 and "CUDA_ERROR_NO_BINARY_FOR_GPU" in before.stderr, before.stdout + before.stderr
        assert list((tmp_path / "triton").rglob("*.cubin")) and list((tmp_path / "triton").rglob("*.ptx"))
        # a job that names its own cache manager keeps it: Triton's plain one records nothing
        own = _run(server, python, {**env, "TRITON_CACHE_MANAGER": "triton.runtime.cache:FileCacheManager"})
        assert own.returncode != 0 and "CUDA_ERROR_NO_BINARY_FOR_GPU" in own.stderr, own.stdout + own.stderr
        job = _run(server, python, env)
        assert job.returncode == 0 and "max_error=0.0 n=3000" in job.stdout, job.stdout + job.stderr
        (record,) = (home / "tally" / "jit-ptx").glob("*.rec")
        assert b"producer triton-cache" in record.read_bytes()
        assert "a cubin's PTX came from JIT capture" in server.process.log()
    finally:
        server.stop()


def test_pytorch_profiler_sees_the_kernel_and_copies_through_tallys_cupti(tmp_path):
    """torch.profiler with CUDA activity (Kineto on CUPTI), unmodified: the Triton
    kernel and the copies appear with device times, the copies linked to the aten ops
    that made them; the kinds tally refuses are said on stderr."""
    python = triton_python()
    server = Server("emulator")
    env = {"XDG_CACHE_HOME": str(tmp_path / "home"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    try:
        job = subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket), "--",
                              python, str(PROGRAMS / "torch_profiler_triton.py")], capture_output=True, text=True,
                             timeout=900, env={**job_env(), **env}, check=False)
        assert job.returncode == 0, job.stdout + job.stderr
        assert "max_error=0.0 n=3000" in job.stdout
        assert "trace kernels=1 memcpy=3 copies_linked=3" in job.stdout
        [kernel] = [line for line in job.stdout.splitlines() if line.startswith("trace_kernel ")]
        assert "name=add_kernel" in kernel and "grid=[3, 1, 1]" in kernel
        names = [line.split(" us=")[0] for line in job.stdout.splitlines() if line.startswith("device_event ")]
        assert "device_event name=add_kernel" in names
        assert sum("Memcpy HtoD" in n for n in names) == 2 and sum("Memcpy DtoH" in n for n in names) == 1
        assert "cuptiActivityEnable(kind 5) refused" in job.stderr
        assert server.alive()
    finally:
        server.stop()
