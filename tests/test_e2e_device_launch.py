"""Kernels that launch kernels (CUDA dynamic parallelism) under tally-run on the
emulator: tests/cuda/programs/device_launch.cu, built with nvcc -rdc=true, whose
device runtime (libcudadevrt: cubins and compute_121 PTX) tally links from its PTX
(tally/server/client/linker.py) and whose launches the emulator runs after their
parent grid (tally/backends/emulator/device_launches.py)."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401

CUDA_ERROR_ILLEGAL_ADDRESS = 700


@pytest.mark.parametrize("arch", [(), ("-gencode", "arch=compute_90,code=compute_90")],
                         ids=["default-arch", "ptx-only"])
def test_kernels_launch_kernels(nvcc, emulator_server, arch):
    program = build_cuda(nvcc, "device_launch.cu", flags=("-rdc=true", *arch))
    job = run_job(emulator_server.socket, program)
    assert job.returncode == 0, job.stdout + job.stderr
    # Each of 13 threads launched a child that filled its chunk of 13.
    assert job.value("fill_wrong") == "0"
    # Four levels deep, each block's first thread launching two blocks of the next,
    # a 32-byte struct passed down by value.
    assert job.value("visits") == "4,8,16,32,0"
    assert job.value("weights") == str(1 + 2 * 10 + 4 * 100 + 8 * 1000)
    # The tail launch ran after the NULL-stream child; the device-side last error is clear.
    assert job.ints("tail_seen", "last_error") == [42, 0]
    # Device-side streams: every partition's halves in two streams of its own, sorted;
    # a child in one stream sees the write of a child in another after an event wait.
    assert job.ints("unsorted", "same_sum") == [0, 1]
    assert job.ints("event_seen", "stream_errors", "device", "count") == [42, 0, 0, 1]
    assert "done" in job.stdout


def test_a_child_that_faults_fails_its_parents_launch_and_the_server_carries_on(nvcc, emulator_server):
    program = build_cuda(nvcc, "device_launch.cu", flags=("-rdc=true",))
    job = run_job(emulator_server.socket, program, "fault")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("fault_error") == [CUDA_ERROR_ILLEGAL_ADDRESS]
    # the next job is served as before
    job = run_job(emulator_server.socket, program)
    assert job.returncode == 0 and job.value("fill_wrong") == "0", job.stdout + job.stderr
