"""Explicit memory pools (cudaMemPoolCreate, cudaMallocFromPoolAsync, pool
attributes, the device's current pool) through tally-run on the emulator, at
both priorities: the allocations are the job's device memory, charged to its
quota (an allocation over it fails with the reason logged), a suspension and
a migration carry them like any other allocation, and another job can import
one through the pool's exported file descriptor."""
from __future__ import annotations

import pytest

from e2e_helpers import (build_cuda, finish, idle, migrate, run_job, server, start_job,  # noqa: F401
                         tally_server, two_servers)

CUDA_ERROR_INVALID_VALUE = 1          # cudaErrorInvalidValue
CUDA_ERROR_MEMORY_ALLOCATION = 2      # cudaErrorMemoryAllocation
POOL_BYTES = (1 << 18) * 4


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_a_pool_allocates_counts_and_refuses_what_cuda_refuses(nvcc, server, priority):
    job = run_job(server.socket, build_cuda(nvcc, "memory_pools.cu"), "basics", priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("pools_supported", "threshold_read_back", "charged", "pool_wrong") == [1, 1, 1, 0]
    assert job.ints("used_current", "reserved_current", "used_high") == [POOL_BYTES] * 3
    assert job.ints("used_after_free", "high_after_free", "high_after_reset") == [0, POOL_BYTES, 0]
    for refused in ("set_high_nonzero", "set_current", "unknown_attribute", "destroy_default"):
        assert job.value(refused) == str(CUDA_ERROR_INVALID_VALUE), refused
    assert job.ints("current_is_pool", "current_used", "default_current_again") == [1, 4096, 1]
    assert job.value("past_max_size") == str(CUDA_ERROR_MEMORY_ALLOCATION)
    # each refusal says why on the job's stderr
    assert "can only be reset with 0" in job.stderr
    assert "is not a memory pool attribute" in job.stderr
    assert "past its maxSize" in job.stderr
    assert "not supported" not in job.stderr
    server.wait_for(idle, what="the job's pool memory to be given back")


def test_pool_memory_counts_against_the_quota(nvcc, server):
    job = run_job(server.socket, build_cuda(nvcc, "memory_pools.cu"), "quota", quota="8M")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("over_quota", "under_quota") == [CUDA_ERROR_MEMORY_ALLOCATION, 0]
    assert "this job's memory quota is 8.00 MiB" in job.stderr + server.process.log()


def test_a_suspension_carries_pool_memory(nvcc, server):
    job = start_job(server.socket, build_cuda(nvcc, "memory_pools.cu"), "hold")
    assert job.stdout.readline().strip() == "ready=1"
    (client,) = server.status()["clients"]
    r = tally_server(server, "suspend", "--client", str(client["client_id"]))
    assert r.returncode == 0, r.stdout + r.stderr
    (client,) = server.status()["clients"]
    assert client["state"] == "suspended" and client["suspended_bytes"] >= 4 << 20
    r = tally_server(server, "resume", "--client", str(client["client_id"]))
    assert r.returncode == 0, r.stdout + r.stderr
    job.stdin.write("check\n")
    job.stdin.flush()
    result = finish(job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("pool_intact") == "1"
    server.wait_for(idle, what="the job's pool memory to be given back")


def test_a_migration_carries_pool_memory(nvcc, two_servers):
    a, b = two_servers
    job = start_job(a.socket, build_cuda(nvcc, "memory_pools.cu"), "hold")
    assert job.stdout.readline().strip() == "ready=1"
    (on_a,) = a.status()["clients"]
    r = migrate(a, on_a["client_id"], b.socket)
    assert r.returncode == 0 and "migrated to" in r.stdout, r.stdout + r.stderr
    a.wait_for(idle, what="the source to free the migrated job's pool memory")
    (on_b,) = b.status()["clients"]
    assert on_b["memory_used"] == on_a["memory_used"] >= 4 << 20
    job.stdin.write("check\n")
    job.stdin.flush()
    result = finish(job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("pool_intact") == "1"
    b.wait_for(idle, what="the job's pool memory to be given back on the target")


def test_a_pool_allocation_shared_with_another_job(nvcc, server):
    program = build_cuda(nvcc, "pool_sharing.cu")
    owner = start_job(server.socket, program, "owner")
    got = {}
    while len(got) < 4:
        line = owner.stdout.readline().strip()
        assert line, "the owner stopped before exporting: " + owner.stderr.read()
        key, _, value = line.partition("=")
        got[key] = value
    assert got["export_unshared"] == str(CUDA_ERROR_INVALID_VALUE)
    importer = run_job(server.socket, program, "importer", got["pid"], got["fd"], got["data"])
    assert importer.returncode == 0, importer.stdout + importer.stderr
    assert importer.ints("read_owners", "imported_done") == [1, 1]
    assert importer.ints("import_altered", "import_not_a_pool") == [CUDA_ERROR_INVALID_VALUE] * 2
    assert "is not a memory pool exported by a job of tally-server" in importer.stderr
    owner.stdin.write("check\n")
    owner.stdin.flush()
    result = finish(owner)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("written_by_importer") == "1"
    server.wait_for(idle, what="the shared pool memory to be given back")
