"""Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree) through tally-run on
the emulator: what PyTorch's expandable_segments allocator does. Kernels and
copies see mapped, accessible memory as device memory, across the seams between
chunks; bad requests fail with CUDA_ERROR_INVALID_VALUE and change nothing;
physical memory counts against the quota; another job cannot touch it; a job
that exits without unmapping gets everything given back."""
from __future__ import annotations

from e2e_helpers import (
    CUDA_ERROR_INVALID_VALUE,
    build_device_code,
    build_driver_c,
    finish,
    idle,
    run_job,
    server,  # noqa: F401  (fixture)
    start_job,
)

CUDA_ERROR_OUT_OF_MEMORY = 2
GRANULARITY = 2 << 20


def test_reserve_create_map_access_unmap(nvcc, server):
    ptx = build_device_code(nvcc, "driver_kernels.cu", "ptx")
    job = run_job(server.socket, build_driver_c("virtual_memory.c"), "basics", ptx)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.value("granularity") == str(GRANULARITY)
    assert job.value("copy_before_access") == str(CUDA_ERROR_INVALID_VALUE)
    assert job.value("kernel_over_seam_good") == "4096"
    assert job.value("copy_after_unmap") == str(CUDA_ERROR_INVALID_VALUE)
    # The chunk mapped elsewhere keeps its bytes: element 2048 of the iota from 7.
    assert job.value("remapped_value") == str(7 + 2048)
    for bad in ("map_overlap", "map_outside", "map_unaligned", "free_mapped", "unmap_partial",
                "create_unaligned", "release_unknown", "copy_after_free", "free_twice"):
        assert job.value(bad) == str(CUDA_ERROR_INVALID_VALUE), bad
    # A handle released while mapped stays usable, and its memory returns at the last unmap.
    assert job.value("released_still_mapped") == str(7 + 2047)
    assert job.value("freed_at_last_unmap") == "1"
    assert "not supported" not in job.stderr
    server.wait_for(idle, what="the job's memory to be given back")


def test_physical_memory_counts_against_the_quota(server):
    job = run_job(server.socket, build_driver_c("virtual_memory.c"), "quota", quota=f"{2 * GRANULARITY + 8192}B")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("create_over_quota", "create_after_release") == [CUDA_ERROR_OUT_OF_MEMORY, 0]


def test_another_job_cannot_touch_mapped_memory(server):
    program = build_driver_c("virtual_memory.c")
    owner = start_job(server.socket, program, "owner")
    line = owner.stdout.readline().strip()
    assert line.startswith("address="), line
    intruder = run_job(server.socket, program, "intruder", line.split("=")[1])
    assert intruder.returncode == 0, intruder.stdout + intruder.stderr
    for op in ("htod", "memset", "unmap", "free"):
        assert intruder.value(f"intruder_{op}") == str(CUDA_ERROR_INVALID_VALUE), op
    owner.stdin.write("check\n")
    owner.stdin.flush()
    result = finish(owner)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("intact") == "1"


def test_a_job_that_exits_with_memory_mapped_gets_it_back(server):
    job = run_job(server.socket, build_driver_c("virtual_memory.c"), "leak")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.value("leaking") == "1"
    server.wait_for(idle, what="the leaked mappings, reservation and physical memory to be given back")
    assert server.alive()
