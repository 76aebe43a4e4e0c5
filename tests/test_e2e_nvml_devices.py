"""What a job finds of NVIDIA's driver outside libcuda, under tally-run
(tests/cuda/programs/nvml_probe.c): NVML (tally/lib/libnvidia-ml.so.1, first on
LD_LIBRARY_PATH) answers about the device tally shows, the same count, name, UUID
and CUDA version as the driver API, and refuses out-of-range handles and short
buffers as NVML does; and the device files /dev/nvidiactl and /dev/nvidia0 exist
for it (JAX tries CUDA only if they do), /dev/nvidia1 does not (one device). A
Python job sees the files too (os.path.exists, os.access)."""
from __future__ import annotations

import sys

from e2e_helpers import build_driver_c, run_job, server  # noqa: F401

NVML_INSUFFICIENT_SIZE, NVML_INVALID_ARGUMENT, NVML_NOT_FOUND, NVML_NOT_SUPPORTED = 7, 2, 6, 3


def test_nvml_and_the_device_files_describe_tallys_device(server):
    job = run_job(server.socket, build_driver_c("nvml_probe.c"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("nvml_loaded", "init", "count_rc", "count", "handle_rc") == [1, 0, 0, 1, 0]
    assert job.ints("beyond_rc", "small_rc") == [NVML_INVALID_ARGUMENT, NVML_INSUFFICIENT_SIZE]
    assert job.ints("name_rc", "uuid_rc", "cc_rc", "cuda_rc") == [0, 0, 0, 0]
    assert job.ints("same_count", "same_name", "same_uuid", "same_cuda") == [1, 1, 1, 1]
    status = server.status()["server"]
    assert job.value("nvml_cc") == status["compute_capability"]
    assert job.ints("driver_rc") == [0] and job.value("nvml_driver") == "580.65.06"   # CUDA 13.0's minimum driver
    assert job.ints("nvidiactl", "nvidia0", "nvidia1") == [1, 1, 0]
    # by PCI bus id (what PyTorch's expandable segments look the device up by); no fabric
    assert job.ints("bus_rc", "long_rc", "same_device", "nowhere_rc") == [0, 0, 1, NVML_NOT_FOUND]
    assert job.ints("fabric_rc") == [NVML_NOT_SUPPORTED]


def test_a_python_job_sees_the_device_files(server):
    probe = ("import os; print('exists', os.path.exists('/dev/nvidiactl'), os.path.exists('/dev/nvidia0'), "
             "os.path.exists('/dev/nvidia1'), os.access('/dev/nvidia0', os.F_OK))")
    job = run_job(server.socket, sys.executable, "-c", probe)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "exists True True False True" in job.stdout
