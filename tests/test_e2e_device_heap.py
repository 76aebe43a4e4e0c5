"""Device-side malloc/free under tally-run on the emulator (tests/cuda/programs/device_heap.cu):
the job's heap is sized by cudaLimitMallocHeapSize (8 MiB by default, as the driver's), thousands
of threads allocate from it at once, malloc returns NULL when it is exhausted, the size is fixed
once a kernel used it, the heap counts against the job's quota (a heap the quota cannot hold fails
cudaDeviceSetLimit with cudaErrorMemoryAllocation), a free of what malloc never returned fails the
launch, and the server holds none of it once the job is gone. At both priorities: a best-effort
job's kernels run as slices or PTB workers, which allocate from the same heap."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, run_job, server  # noqa: F401

MIB = 1 << 20
SM80 = ("-gencode", "arch=compute_80,code=compute_80")
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_MEMORY_ALLOCATION = 2       # cudaErrorMemoryAllocation (CUDA_ERROR_OUT_OF_MEMORY)
CUDA_ERROR_ILLEGAL_ADDRESS = 700


def _program(nvcc):
    return build_cuda(nvcc, "device_heap.cu", flags=SM80)


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_default_heap_many_threads_and_exhaustion(nvcc, server, priority):
    free_before = server.status()["server"]["memory_free"]
    job = run_job(server.socket, _program(nvcc), 0, priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("limit") == [8 * MIB]
    # 64 x 128 threads each held a block at once: all distinct, none NULL, all in one heap
    assert job.ints("many_wrong", "distinct", "null", "span_ok") == [0, 64 * 128, 0, 1]
    # the default heap is allocated at the first launch that needs it, and counted for the job
    assert job.ints("free_before")[0] - job.ints("free_after")[0] >= 8 * MIB
    # 64 KiB blocks until NULL: the whole heap, and all of it again after freeing
    assert job.ints("chunks", "chunks_again", "too_big") == [128, 128, 0]
    assert job.ints("set_other", "set_same", "done") == [CUDA_ERROR_INVALID_VALUE, 0, 1]
    # the job is gone: its heap went with it (once the server finished releasing it)
    server.wait_for(lambda s: not s["clients"] and s["server"]["memory_free"] == free_before,
                    what="the job to leave and its memory, heap included, to be free")


def test_set_heap_size_is_allocated_and_counted_at_once(nvcc, server):
    job = run_job(server.socket, _program(nvcc), 1)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("set_limit", "limit") == [0, MIB]
    assert job.ints("many_wrong", "distinct", "null") == [0, 64 * 128, 0]
    assert job.ints("chunks", "chunks_again", "too_big") == [16, 16, 0]
    assert job.ints("set_other", "set_same") == [CUDA_ERROR_INVALID_VALUE, 0]


def test_heap_beyond_the_quota_is_refused(nvcc, server):
    job = run_job(server.socket, _program(nvcc), 64, quota="32MiB")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("set_limit") == [CUDA_ERROR_MEMORY_ALLOCATION]
    assert "quota" in job.stderr.lower() or "quota" in server.process.log().lower()


def test_free_of_a_pointer_malloc_never_returned_fails_the_launch(nvcc, server):
    job = run_job(server.socket, _program(nvcc), 1, "badfree")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("bad_free_launch", "bad_free_sync") == [0, CUDA_ERROR_ILLEGAL_ADDRESS]
    assert "not a block that malloc returned" in job.stderr + server.process.log()
    # the server and the next job carry on
    again = run_job(server.socket, _program(nvcc), 1)
    assert again.returncode == 0 and again.ints("chunks") == [16], again.stdout + again.stderr
