"""Mapped pinned host memory (cuMemHostAlloc with DEVICEMAP) used through the device
pointer cuMemHostGetDevicePointer gives, under tally-run on the emulator, as numba's
mapped arrays use it: memsets (synchronous ones complete on return, as CUDA makes
memsets of pinned host memory), copies into and out of it in every direction, a
kernel writing through it, and cuMemGetAddressRange on it. Past its end stays refused."""
from __future__ import annotations

from e2e_helpers import CUDA_ERROR_INVALID_VALUE, build_cuda, emulator_server, run_job  # noqa: F401

from tally import paths


def test_mapped_pinned_memory_through_its_device_pointer(nvcc, emulator_server):
    program = build_cuda(nvcc, "mapped_device_pointer.cu", flags=(f"-L{paths.LIB_DIR}", "-lcuda"))
    job = run_job(emulator_server.socket, program)
    assert job.returncode == 0, job.stdout + job.stderr
    n = 10000
    assert job.ints("memset_host_sees", "dtoh_good") == [n, n]
    assert job.value("memset_offsets") == "100,100"
    assert job.ints("htod_host_sees", "dtod_into_mapped", "dtod_from_mapped", "unified_copy_ok") == [n, n, n, 1]
    assert job.ints("kernel_good") == [n]
    assert job.ints("range_base_ok", "range_size") == [1, n]
    assert job.ints("past_end") == [CUDA_ERROR_INVALID_VALUE]
    assert job.value("done") == "1"
