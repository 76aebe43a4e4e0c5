"""numba-cuda under tally-run on the emulator: Python kernels (elementwise with
device functions, a shared-memory reduction with syncthreads, atomics) compiled by
NVVM, linked through tally's cuLink* and checked against numpy
(tests/cuda/programs/numba_kernels.py), and a kernel that allocates arrays through
numba's runtime (NRT: device malloc/free, tests/cuda/programs/numba_nrt.py), and a cooperative
kernel that synchronizes its grid (tests/cuda/programs/numba_grid_sync.py). numba-cuda, NVVM and NVRTC come from PyPI
(the `test` extra); numba finds the driver as libcuda.so.1, which tally-run makes
tally's."""
from __future__ import annotations

import sys

import pytest
from e2e_helpers import PROGRAMS, emulator_server, run_job  # noqa: F401


def test_numba_kernels(emulator_server):
    try:
        import numba.cuda  # noqa: F401
    except ImportError as e:
        pytest.fail(f"numba-cuda is a test dependency (pip install -e '.[test]'): {e}")
    job = run_job(emulator_server.socket, sys.executable, PROGRAMS / "numba_kernels.py", timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    assert float(job.value("elementwise_max_error")) < 1e-6
    assert float(job.value("sum_error")) < 1e-9
    assert job.ints("histogram_matches", "histogram_total") == [1, 1000]


def test_numba_runtime_allocates_from_the_device_heap(emulator_server):
    # numba's runtime (NRT): np.empty in a kernel is NRT_MemInfo_alloc -> malloc, its release free
    job = run_job(emulator_server.socket, sys.executable, PROGRAMS / "numba_nrt.py", timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("nrt_matches", "nrt_allocs", "nrt_frees") == [1, 256, 256]


def test_numba_mapped_host_memory(emulator_server):
    # numba-cuda's test_host_alloc_driver and test_host_alloc_mapped, which failed before
    # mapped pinned memory took memsets and copies through its device pointer
    job = run_job(emulator_server.socket, sys.executable, PROGRAMS / "numba_mapped.py", timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("driver_memset_seen", "device_to_host_good") == [1, 1]
    assert job.ints("mapped_size", "mapped_zeroed", "kernel_good") == [40, 1, 1]


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_numba_grid_sync(emulator_server, priority):
    # cuda.cg.this_grid().sync(): libcudadevrt's cudaCGSynchronize, linked by tally's linker,
    # ends in the driver's system calls, which the emulator provides for a cooperative launch
    job = run_job(emulator_server.socket, sys.executable, PROGRAMS / "numba_grid_sync.py", timeout=300,
                  priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("grid_sync_blocks", "grid_sync_matches", "largest_grid_positive") == [24, 1, 1]
