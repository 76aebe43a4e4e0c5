"""`tally-server --emulate-driver` reaches the job: cuDriverGetVersion (asked before
cuInit, when nothing is connected yet, and after) and cudart's cudaDriverGetVersion
answer the server's driver version; without a server the client answers the
version it was built for."""
from __future__ import annotations

import os
import subprocess

import pytest
from e2e_helpers import build_cuda, emulator_server_process, run_job

from tally import paths

DRIVER_FLAGS = (f"-L{paths.LIB_DIR}", "-lcuda")


@pytest.fixture(scope="module")
def program(nvcc):
    return build_cuda(nvcc, "driver_version.cu", flags=DRIVER_FLAGS)


@pytest.mark.parametrize("shared", [False, True], ids=["static-cudart", "shared-cudart"])
def test_emulated_driver_version_reaches_the_job(nvcc, shared):
    program = build_cuda(nvcc, "driver_version.cu", shared_cudart=shared, flags=DRIVER_FLAGS)
    server = emulator_server_process("--emulate-driver", "13.2")
    try:
        assert server.status()["server"]["driver_version"] == 13020
        job = run_job(server.socket, program)
    finally:
        server.stop()
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("driver_before_init", "rc", "runtime_driver", "driver_after_init", "kernel_result") == \
        [13020, 0, 13020, 13020, 7]
    assert job.ints("null_pointer_rc") == [1]  # CUDA_ERROR_INVALID_VALUE


def test_without_a_server_the_built_version_is_reported(program, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(LD_LIBRARY_PATH=str(paths.LIB_DIR), LD_PRELOAD=str(paths.CLIENT_LIBRARY),
               TALLY_SERVER=str(tmp_path / "no-server.sock"))
    r = subprocess.run([str(program), "before-init-only"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "driver_before_init=13000 rc=0" in r.stdout, r.stdout + r.stderr
