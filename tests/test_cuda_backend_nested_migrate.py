"""Migration between two cuda-backend tally-servers (`--suspendable`) without a
GPU: each cuda-backend server runs as a job of its own emulator server
(tests/nested_cuda_server.py), so each has its own device address space, as two
server processes on one GPU have. A job with module globals (__device__
g_round, g_seen), a CUDA graph, two streams and events moves A -> B while it
waits and B -> A in the middle of its loop, through tally/backends/cuda.py's
address-preserving path: allocations and the modules' relocated variables are
reserved at their addresses on the target (cuMemAddressReserve's hint, which
tally's driver honours as CUDA's does), the module is loaded again in its
relocated form, and its table points at the same addresses. Results are exact,
and the server it left holds none of it."""
from __future__ import annotations


import pytest
from e2e_helpers import build_cuda, emulator_server_process, finish, migrate, start_job
from test_cuda_backend_nested_suspend import SuspendableCudaServer

MIB = 1 << 20


@pytest.fixture
def two_cuda_servers():
    under = [emulator_server_process(), emulator_server_process()]
    servers = [SuspendableCudaServer(u) for u in under]
    for server in servers:
        assert server.status()["server"]["backend"] == "cuda"
    yield servers
    for server in servers + under:
        server.stop()


def clients(server) -> list[dict]:
    return server.status()["clients"]


def test_a_job_with_module_globals_moves_a_to_b_and_back_exactly(nvcc, two_cuda_servers):
    a, b = two_cuda_servers
    free_a = a.status()["server"]["memory_free"]
    job = start_job(a.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    (on_a,) = clients(a)
    r = migrate(a, on_a["client_id"], b.socket)
    assert r.returncode == 0 and "migrated to" in r.stdout, r.stdout + r.stderr
    # moved: allocations, and the module's variables (g_round, g_seen) with their bytes
    assert a.status()["server"]["mobility"]["last_migration_bytes"] == 16 * MIB + 2 * 64 * 1024 + 4 + 1024
    a.wait_for(lambda s: not s["clients"] and s["server"]["memory_free"] == free_a,
               what="A to free everything of the job")
    (on_b,) = clients(b)
    assert on_b["pid"] == on_a["pid"] and on_b["memory_used"] == on_a["memory_used"]
    job.stdin.write("go\n")
    job.stdin.flush()                          # its loop goes on, on B; back to A in the middle of it
    r = migrate(b, on_b["client_id"], a.socket)
    assert r.returncode == 0 and "migrated to" in r.stdout, r.stdout + r.stderr
    result = finish(job, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.ints("wrong_a", "wrong_b", "wrong_ballast", "wrong_seen", "rounds") == [0, 0, 0, 0, 400]
    assert not clients(b)
    a.wait_for(lambda s: not s["clients"] and s["server"]["memory_free"] == free_a,
               what="the job to finish on A")


def test_a_cuda_backend_without_suspendable_refuses_up_front(nvcc):
    # The plain cuda backend places nothing at given addresses: the source says so before
    # anything moves, and the job runs on.
    from test_cuda_backend_nested import NestedCudaServer
    under = [emulator_server_process(), emulator_server_process()]
    plain, target = NestedCudaServer(under[0]), SuspendableCudaServer(under[1])
    try:
        job = start_job(plain.socket, build_cuda(nvcc, "suspended_job.cu"))
        assert job.stdout.readline().strip() == "looping"
        (client,) = clients(plain)
        r = migrate(plain, client["client_id"], target.socket)
        assert r.returncode == 2 and "cannot place the job's memory" in r.stderr, r.stdout + r.stderr
        result = finish(job, timeout=600)
        assert result.ints("wrong_a", "wrong_b", "wrong_ballast", "wrong_seen", "rounds") == [0, 0, 0, 0, 400]
    finally:
        for server in (plain, target, *under):
            server.stop()
