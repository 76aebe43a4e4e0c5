"""What real compilers emit for common device code, and the driver's rules for
choosing a module's code, run end to end: programs built by nvcc at test time
under tally-run on the emulator.

- `warpSize` in device code (the PTX operand WARP_SZ);
- cooperative-groups tiles of 64 and 128 threads (the reserved shared-memory
  registers they synchronize through);
- a failing device `assert`: CUDA's message on the job's stderr, cudaErrorAssert
  (710) from then on for that job, and the next job on the server unaffected;
- PTX for a newer architecture than the device's is never run: the load fails
  with CUDA_ERROR_NO_BINARY_FOR_GPU and says why, and runs under
  `tally-server --emulate-cc` of that architecture.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from server_harness import ServerProcess
from e2e_helpers import PROGRAMS, build_cuda, emulator_server, run_job  # noqa: F401

from tally.cli.server_main import query_status

CUDA_ERROR_ASSERT = 710
CUDA_ERROR_NO_BINARY_FOR_GPU = 209          # cudaErrorNoKernelImageForDevice has the same number
SM80 = ("-gencode", "arch=compute_80,code=compute_80")
COMPUTE_120_ONLY = ("-gencode", "arch=compute_120,code=compute_120")


def test_warp_size_in_device_code(nvcc, emulator_server):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "warp_size.cu", flags=SM80))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("warp_size", "warps", "wrong") == [32, 128, 0]
    assert job.value("first") == str(sum(i % 97 - 13 for i in range(32)))


def test_cooperative_groups_tiles_larger_than_a_warp(nvcc, emulator_server):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "cg_tile_reduce.cu", flags=SM80))
    assert job.returncode == 0, job.stdout + job.stderr
    for size, tiles in ((32, 64), (64, 32), (128, 16)):
        assert job.ints(f"tile{size}_tiles", f"tile{size}_wrong", f"tile{size}_bad_shape") == [tiles, 0, 0]


def test_failing_device_assert(nvcc, emulator_server):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "device_assert.cu", flags=SM80))
    assert job.returncode == 0, job.stdout + job.stderr
    # The launch itself succeeds; the synchronization reports the assert, and the
    # context stays unusable for this job.
    assert job.ints("launch", "sync", "after_malloc", "after_copy") == [0] + [CUDA_ERROR_ASSERT] * 3
    source = PROGRAMS / "device_assert.cu"
    line = next(n for n, text in enumerate(source.read_text().splitlines(), 1) if "assert(in[i] < limit)" in text)
    assert [text for text in job.stderr.splitlines() if "Assertion" in text] == [
        f"{source}:{line}: void check_below(const int *, int, int *): block: [1,0,0], thread: [5,0,0] "
        "Assertion `in[i] < limit` failed."], job.stderr
    assert "Assertion" not in job.stdout
    # Another job on the same server runs as before.
    after = run_job(emulator_server.socket, build_cuda(nvcc, "warp_size.cu", flags=SM80))
    assert after.returncode == 0, after.stdout + after.stderr
    assert after.ints("warp_size", "wrong") == [32, 0]


@pytest.fixture(scope="module")
def compute_120_program(nvcc):
    return build_cuda(nvcc, "vector_add.cu", flags=COMPUTE_120_ONLY)


def test_ptx_newer_than_the_device_is_never_run(compute_120_program, emulator_server):
    job = run_job(emulator_server.socket, compute_120_program, 100)
    assert job.returncode == 1, job.stdout + job.stderr
    assert re.search(rf"error .*: {CUDA_ERROR_NO_BINARY_FOR_GPU} cudaErrorNoKernelImageForDevice", job.stdout), job.stdout
    # The job learns why: what the image holds and what the device is.
    why = next((text for text in job.stderr.splitlines() if "cannot load a module" in text), "")
    assert "PTX for compute_120" in why and "compute capability 9.0" in why and "--emulate-cc" in why, job.stderr
    assert "PTX for compute_120" in emulator_server.process.log()


def test_emulate_cc_runs_ptx_for_that_architecture(compute_120_program):
    workdir = Path(tempfile.mkdtemp(prefix="tally-e2e-cc-"))
    server = ServerProcess(workdir / "server.sock", backend="emulator", extra_args=("--emulate-cc", "12.0"))
    try:
        job = run_job(server.socket_path, compute_120_program, 100)
        assert job.returncode == 0, job.stdout + job.stderr
        assert job.ints("n", "wrong") == [100, 0]
        assert query_status(server.socket_path)["server"]["compute_capability"] == "12.0"
        assert "compute capability 12.0" in server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("args, why", [
    (("--backend", "null", "--emulate-cc", "12.0"), "--emulate-driver and --emulate-sms set what the emulator reports"),
    (("--backend", "null", "--emulate-sms", "32"), "the null backend reports its own device"),
    (("--backend", "emulator", "--emulate-sms", "0"), "'0' is not an SM count from 1 to 1024"),
    (("--backend", "emulator", "--emulate-cc", "twelve"), "'twelve' is not a compute capability like 9.0"),
    (("--backend", "emulator", "--emulate-cc", "12"), "'12' is not a compute capability like 9.0"),
    (("--backend", "emulator", "--emulate-driver", "13.x"), "'13.x' is not a CUDA version like 13.0"),
])
def test_emulate_flags_refuse_what_they_cannot_mean(tmp_path, args, why):
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "--socket", str(tmp_path / "s.sock"), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and why in r.stderr, r.stderr
    assert not (tmp_path / "s.sock").exists()
