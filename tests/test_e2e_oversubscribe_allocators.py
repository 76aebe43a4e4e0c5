"""Time-slicing by memory (`tally-server --oversubscribe`) waits in every
allocator (tally/server/handlers/memory_wait.py), not only cuMemAlloc: a
best-effort job holding 16 MiB waits mid-run while a second one takes 16 MiB
through cudaMallocAsync, a memory pool, cudaMallocPitch, cuMemCreate or
cudaMallocManaged, where the best-effort pool leaves room for one of them. The
second one's allocation waits until the slicer suspends the first, and both end
with every word exact; the device memory is all free at the end. Without
--oversubscribe the same allocation fails at once."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server_process, finish, idle, start_job

from tally import paths

DEVICE_MIB = 16 << 10          # the emulator's default device memory
BE_POOL_MIB = 24               # room for one job's 16 MiB, not two

ALLOCATORS = ("async", "pool", "pitch", "vmm", "managed")


def program(nvcc):
    return build_cuda(nvcc, "allocator_job.cu", flags=(f"-L{paths.LIB_DIR}", "-lcuda"))


def server_with(*flags: str):
    return emulator_server_process("--hp-memory-reserve", f"{DEVICE_MIB - BE_POOL_MIB}M", *flags)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_an_allocation_through_any_allocator_waits_for_a_time_slice(nvcc, allocator):
    server = server_with("--oversubscribe", "--slice-seconds", "1")
    try:
        holder = start_job(server.socket, program(nvcc), "malloc", "wait")
        assert holder.stdout.readline().strip() == "holding"
        second = finish(start_job(server.socket, program(nvcc), allocator), timeout=300)
        assert second.returncode == 0, second.stdout + second.stderr
        assert second.value("wrong") == "0"
        mobility = server.status()["server"]["mobility"]
        assert mobility["suspensions"] >= 1          # the holder made room: the allocation waited
        holder.stdin.write("go\n")
        holder.stdin.flush()
        first = finish(holder, timeout=300)
        assert first.returncode == 0 and first.value("wrong") == "0", first.stdout + first.stderr
        status = server.wait_for(idle, what="both jobs to leave")
        # every suspension resumed, but one of a job that left while suspended: the
        # slicer may suspend the second job (its slice over) between its last request
        # and its exit, as seen once on a loaded 2-core machine
        mobility = status["server"]["mobility"]
        assert 1 <= mobility["resumes"] <= mobility["suspensions"] <= mobility["resumes"] + 1
    finally:
        server.stop()


@pytest.mark.parametrize("allocator", ("vmm", "managed"))
def test_without_oversubscribe_the_allocation_fails_at_once(nvcc, allocator):
    server = server_with()
    try:
        holder = start_job(server.socket, program(nvcc), "malloc", "wait")
        assert holder.stdout.readline().strip() == "holding"
        second = finish(start_job(server.socket, program(nvcc), allocator))
        assert second.returncode == 1 and "error" in second.stdout, second.stdout + second.stderr
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert finish(holder).value("wrong") == "0"
        server.wait_for(idle, what="both jobs to leave")
    finally:
        server.stop()
