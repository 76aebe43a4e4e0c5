"""cuFuncGetAttribute on the emulator, read from the kernel's PTX: static shared
memory, __constant__ and local bytes, a register count, __launch_bounds__ and
compile-time cluster dimensions, for an nvcc-built program under tally-run
(tests/cuda/programs/function_attributes.cu); and a launch over __launch_bounds__
refused by the launch call itself (cudaErrorInvalidValue), as a driver does."""
from __future__ import annotations

import shutil

import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401


@pytest.fixture(scope="module")
def job(emulator_server):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    program = build_cuda(nvcc, "function_attributes.cu", flags=("-arch=sm_90",))
    job = run_job(emulator_server.socket, program, timeout=180)
    assert job.returncode == 0, job.stdout + job.stderr
    return job


def test_sizes_come_from_the_ptx(job):
    # 400-byte float tile + 16-byte double pair; 256 + 24 bytes of __constant__ data
    assert job.ints("shared.shared", "shared.const", "shared.local") == [416, 280, 0]
    assert job.ints("local.shared", "local.const", "local.local") == [0, 0, 1200]


def test_register_count_is_plausible(job):
    for kernel in ("shared", "local", "bounded", "clustered"):
        assert 1 <= int(job.value(f"{kernel}.regs")) <= 64, kernel


def test_launch_bounds_clusters_and_versions(job):
    assert job.ints("bounded.max_threads", "shared.max_threads") == [128, 1024]
    assert job.ints("clustered.cluster_width", "clustered.cluster_must_be_set") == [2, 1]
    assert job.ints("shared.cluster_width", "shared.cluster_must_be_set") == [0, 0]
    assert job.ints("shared.ptx", "shared.binary") == [90, 90]


def test_launch_over_the_bound_fails_at_the_launch(job):
    # cudaErrorInvalidValue from the launch; the next launch and the synchronize are clean
    assert job.ints("over_bound", "within_bound", "sync") == [1, 0, 0]
