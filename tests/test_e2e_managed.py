"""Managed memory (cudaMallocManaged / cuMemAllocManaged) through tally-run on the
emulator: one pointer that the job's CPU code and its kernels both use, with no
copies; copies and memsets name it like device memory; prefetch and advice are
accepted and read back; it counts against the quota; another job cannot touch
it; a job that exits without freeing it gets it given back."""
from __future__ import annotations

from e2e_helpers import (
    CUDA_ERROR_INVALID_VALUE,
    build_cuda,
    build_driver_c,
    finish,
    idle,
    run_job,
    server,  # noqa: F401  (fixture)
    start_job,
)

CUDA_MEMORY_TYPE_MANAGED = 3          # cudaMemoryTypeManaged
CUDA_ERROR_MEMORY_ALLOCATION = 2      # cudaErrorMemoryAllocation


def test_cpu_and_kernels_share_one_pointer(nvcc, server):
    # high priority: a best-effort job's kernels get a PTB state buffer from the server,
    # which would show in cudaMemGetInfo's before-and-after comparison
    job = run_job(server.socket, build_cuda(nvcc, "managed.cu"), "basics", priority="high")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("attr_managed", "attr_concurrent", "charged") == [1, 1, 1]
    assert job.value("kernel_wrong") == "0"
    assert job.value("sum") == str(2 * (1 << 16))          # the kernel read what the CPU wrote
    assert job.ints("htod_seen_by_cpu", "memset_seen_by_cpu", "dtod_from_managed") == [1, 1, 1]
    assert job.ints("read_mostly", "preferred", "last_prefetch") == [1, -1, 0]   # CPU preferred, GPU prefetched
    assert job.ints("pointer_type", "same_pointers") == [CUDA_MEMORY_TYPE_MANAGED, 1]
    assert job.value("prefetch_device_memory") == str(CUDA_ERROR_INVALID_VALUE)
    assert job.value("advise_beyond_end") == str(CUDA_ERROR_INVALID_VALUE)
    assert job.value("bad_flags") == str(CUDA_ERROR_INVALID_VALUE)
    assert job.value("given_back") == "1", job.stdout
    assert "not supported" not in job.stderr
    server.wait_for(idle, what="the job's memory to be given back")


def test_managed_memory_counts_against_the_quota(nvcc, server):
    job = run_job(server.socket, build_cuda(nvcc, "managed.cu"), "quota", quota="8M")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("over_quota", "under_quota") == [CUDA_ERROR_MEMORY_ALLOCATION, 0]


def test_a_job_that_exits_without_freeing_gets_it_back(nvcc, server):
    job = run_job(server.socket, build_cuda(nvcc, "managed.cu"), "leak")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.value("leaked") == "1"
    server.wait_for(idle, what="the exited job's managed memory to be given back")


def test_another_job_cannot_touch_managed_memory(nvcc, server):
    owner = start_job(server.socket, build_cuda(nvcc, "managed.cu"), "owner")
    line = owner.stdout.readline().strip()
    assert line.startswith("owner_ptr=0x"), line
    intruder = run_job(server.socket, build_driver_c("driver_api.c"), "intruder", line.split("=")[1])
    assert intruder.returncode == 0, intruder.stdout + intruder.stderr
    for op in ("htod", "dtoh", "memset", "free", "unified", "async_sync"):
        assert intruder.value(f"intruder_{op}") == str(CUDA_ERROR_INVALID_VALUE), op
    owner.stdin.write("check\n")
    owner.stdin.flush()
    result = finish(owner)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("owner_intact") == "1"
