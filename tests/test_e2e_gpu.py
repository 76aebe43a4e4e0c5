"""The end-to-end programs on a real GPU (`--backend cuda`), and PyTorch under
tally-run with results equal to running without tally. Run with `pytest -m gpu`
on a machine with an NVIDIA GPU and driver; they are deselected elsewhere."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from e2e_helpers import (
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_INVALID_VALUE,
    PROGRAMS,
    Server,
    build_cuda,
    build_device_code,
    build_driver_c,
    job_env,
    run_job,
)

from tally.backends.registry import real_driver_present

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_server():
    if not real_driver_present():
        pytest.skip("no NVIDIA driver with a GPU on this machine")
    server = Server("cuda")
    yield server
    server.stop()


@pytest.mark.parametrize("shared", [False, True], ids=["static-cudart", "shared-cudart"])
def test_programs_on_the_gpu(nvcc, cuda_server, shared):
    job = run_job(cuda_server.socket, build_cuda(nvcc, "vector_add.cu", shared_cudart=shared), 1 << 20)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("wrong", "roundtrip") == [0, 1 << 20]
    job = run_job(cuda_server.socket, build_cuda(nvcc, "modules_main.cu", "modules_lib.cu", shared_cudart=shared))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("axpy_float", "axpy_double", "second_module", "launches_seen") == [1000, 1000, 1000, 2]
    job = run_job(cuda_server.socket, build_cuda(nvcc, "streams_events.cu", shared_cudart=shared))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("callbacks", "good_a", "good_b", "legacy_good") == [2, 4096, 4096, 4096]
    assert job.ints("destroyed_wait_good", "rounds") == [8, 8]


def test_managed_memory_on_the_gpu(nvcc, cuda_server):
    # the server maps the job's object at the job's address and registers it with the
    # driver; kernels reach it over the bus (tally/backends/cuda.py: managed_alloc)
    job = run_job(cuda_server.socket, build_cuda(nvcc, "managed.cu"), "basics", priority="high")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("kernel_wrong", "sum", "htod_seen_by_cpu", "memset_seen_by_cpu") == [0, 2 << 16, 1, 1]
    assert job.ints("pointer_type", "same_pointers", "given_back") == [3, 1, 1]


def test_kernels_reach_pinned_memory_on_the_gpu(nvcc, cuda_server):
    # the server maps the job's pinned object at the job's address and registers it for
    # the device (tally/backends/cuda.py: host_map)
    job = run_job(cuda_server.socket, build_cuda(nvcc, "mapped_pinned.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("mapped_same_pointer", "mapped_good", "pinned_good") == [1, 4096, 4096]
    assert job.ints("registered_sum", "plain_intact") == [2 * 4096, 1]


def test_driver_api_on_the_gpu(nvcc, cuda_server):
    ptx = build_device_code(nvcc, "driver_kernels.cu", "ptx")
    fatbin = build_device_code(nvcc, "driver_kernels.cu", "fatbin")
    job = run_job(cuda_server.socket, build_driver_c("driver_api.c"), "basics", ptx, fatbin)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "param_offsets=0,8,32,40 sizes=1,24,8,2" in job.stdout
    assert job.value("mixed") == f"{ord('t')},{ord('m')},42,-7,1234"
    for prefix in ("random", "overrun"):
        for op in ("htod", "dtoh", "memset", "free", "async_sync"):
            assert job.value(f"{prefix}_{op}") == str(CUDA_ERROR_INVALID_VALUE), (prefix, op)
    assert job.value("own_intact") == "1"
    assert job.value("sync_memops") == "0,1"


def test_illegal_address_on_the_gpu(nvcc, cuda_server):
    job = run_job(cuda_server.socket, build_cuda(nvcc, "illegal_address.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.value("sync") == str(CUDA_ERROR_ILLEGAL_ADDRESS)
    # On a GPU a fault poisons the whole context (every job of the server shares it):
    # the server fails every job, recreates the context and runs the next job
    # (tally/server/device_faults.py; tests/test_e2e_gpu_faults.py checks the details).
    assert cuda_server.alive()
    after = run_job(cuda_server.socket, build_cuda(nvcc, "vector_add.cu"), 1000)
    assert after.returncode == 0 and after.ints("wrong", "roundtrip") == [0, 1000], after.stdout + after.stderr


def test_pytorch_matches_native(cuda_server):
    pytest.importorskip("torch")
    script = PROGRAMS / "torch_workload.py"
    native = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                            env=job_env(), check=False)
    assert native.returncode == 0, native.stderr
    tallied = subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(cuda_server.socket), "--",
                              sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                             env=job_env(), check=False)
    assert tallied.returncode == 0, tallied.stdout + tallied.stderr
    want = json.loads(native.stdout.strip().splitlines()[-1])
    got = json.loads(tallied.stdout.strip().splitlines()[-1])
    assert got == want


def test_cupti_records_on_the_gpu(nvcc, cuda_server):
    """tally's CUPTI (docs/cupti.md) on the real driver: the records of
    tests/test_e2e_cupti.py, with device times from the GPU's events."""
    from test_e2e_cupti import cupti_library_dir, lines
    folder = cupti_library_dir()
    if folder is None:
        pytest.skip("the toolkit ships no libcupti")
    program = build_cuda(nvcc, "cupti_activity.cu", flags=(f"-L{folder}", "-lcupti", "-Xlinker", f"-rpath={folder}"))
    job = run_job(cuda_server.socket, program)
    assert job.returncode == 0, job.stdout + job.stderr
    [kernel] = lines(job.stdout, "kernel")
    assert kernel["start_le_end"] == "1" and kernel["ext"] == "42"
    assert [c["kind"] for c in lines(job.stdout, "memcpy")] == ["HTOD", "DTOD", "DTOH"]
    assert lines(job.stdout, "summary")[0] == {"contexts_created": "1", "dropped": "0", "popped": "42",
                                              "result": "6000.0"}
