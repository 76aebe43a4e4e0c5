"""Suspend and resume through the cuda backend's address-preserving path
(tally/backends/cuda_restore.py: allocations backed by reservations whose
physical memory is released and mapped again at the same address), without a
GPU: the cuda-backend server runs as a job of an emulator server
(tests/nested_cuda_server.py), so its driver is tally's own libcuda. A job with
a CUDA graph, two streams, events and __device__ variables is suspended
mid-loop, the device memory the cuda backend holds drops by its allocations and
its module's variables (relocated: tally/backends/cuda_globals.py), and after
resume its results, those variables included, are exact; a job's own virtual
memory comes back intact. (Migration between two such servers:
tests/test_cuda_backend_nested_migrate.py.)"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from server_harness import ServerProcess

from e2e_helpers import (Server, build_cuda, build_driver_c, emulator_server_process, finish, job_command, job_env,
                         run_job, start_job, tally_server)

MIB = 1 << 20
GRANULARITY = 2 << 20
NESTED_SERVER = Path(__file__).with_name("nested_cuda_server.py")


class SuspendableCudaServer(Server):
    """A cuda-backend server started with --suspendable, as a job of `under`."""

    def __init__(self, under: Server):
        self.dir = under.dir
        self.socket = under.dir / "cuda.sock"
        command = job_command(under.socket, sys.executable, NESTED_SERVER, self.socket, "priority", "auto",
                              "suspendable", priority="high")
        self.process = ServerProcess(self.socket, command=command, env=job_env())


@pytest.fixture
def cuda_server():
    under = emulator_server_process()
    server = SuspendableCudaServer(under)
    assert server.status()["server"]["backend"] == "cuda"
    yield server
    server.stop()
    under.stop()


def only_client(server) -> dict:
    (client,) = server.status()["clients"]
    return client


def test_suspend_and_resume_through_the_cuda_backend(nvcc, cuda_server):
    job = start_job(cuda_server.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    cid = only_client(cuda_server)["client_id"]
    before = cuda_server.status()["server"]["memory_free"]
    r = tally_server(cuda_server, "suspend", "--client", str(cid))
    assert r.returncode == 0 and "suspended" in r.stdout, r.stdout + r.stderr
    client = only_client(cuda_server)
    # Its two 64 KiB arrays, its 16 MiB ballast and its module's __device__ variables
    # g_round (4 bytes) and g_seen (1 KiB), which the backend placed in a reservation of
    # its own (tally/backends/cuda_globals.py): each allocation, and the module's
    # variables together, rounded up to the 2 MiB granularity on the device, all freed.
    assert client["state"] == "suspended" and client["suspended_bytes"] == 16 * MIB + 2 * 64 * 1024 + 4 + 1024
    assert cuda_server.status()["server"]["memory_free"] - before == 16 * MIB + 3 * GRANULARITY
    r = tally_server(cuda_server, "resume", "--client", str(cid))
    assert r.returncode == 0 and "restored at the same addresses" in r.stdout, r.stdout + r.stderr
    assert cuda_server.status()["server"]["memory_free"] == before
    job.stdin.write("go\n")
    job.stdin.flush()
    result = finish(job, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.ints("wrong_a", "wrong_b", "wrong_ballast", "wrong_seen", "rounds") == [0, 0, 0, 0, 400]


def test_virtual_memory_through_the_cuda_backend(cuda_server):
    owner = start_job(cuda_server.socket, build_driver_c("virtual_memory.c"), "owner")
    assert owner.stdout.readline().startswith("address=")
    cid = only_client(cuda_server)["client_id"]
    r = tally_server(cuda_server, "suspend", "--client", str(cid))
    assert r.returncode == 0, r.stdout + r.stderr
    assert only_client(cuda_server)["suspended_bytes"] == GRANULARITY
    assert tally_server(cuda_server, "resume", "--client", str(cid)).returncode == 0
    owner.stdin.write("check\n")
    owner.stdin.flush()
    result = finish(owner, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("intact") == "1"


def test_relocated_variables_give_the_plain_backends_results(nvcc):
    # The same program on a plain cuda-backend server (variables where the driver puts them)
    # and a --suspendable one (relocated): __constant__ taps written with cudaMemcpyToSymbol
    # and read by a filter, a __device__ table looked up, an atomic counter; identical sums.
    from test_cuda_backend_nested import NestedCudaServer
    under = [emulator_server_process(), emulator_server_process()]
    servers = [NestedCudaServer(under[0]), SuspendableCudaServer(under[1])]
    program = build_cuda(nvcc, "globals_timing.cu")
    try:
        jobs = [run_job(s.socket, program, 4096, 2, priority="high", timeout=300) for s in servers]
        relocated_log = servers[1].process.log()
    finally:
        for server in servers + under:
            server.stop()
    for job in jobs:
        assert job.returncode == 0, job.stdout + job.stderr
    keys = ("filter_sum", "key_sum", "lookups")
    assert [jobs[0].value(k) for k in keys] == [jobs[1].value(k) for k in keys]
    assert jobs[1].ints("lookups") == [2 * 4]               # two runs of 4096 elements, one per 1024
    assert "stay where the driver put them" not in relocated_log and "as the job shipped it" not in relocated_log


def test_a_module_that_cannot_be_relocated_stays_and_cannot_migrate(nvcc, cuda_server):
    # `op`'s initializer is a function's address: its module loads as the job shipped it, its
    # variables where the driver put them. Suspend saves and frees only the allocation (the
    # variables stay resident); migrate refuses before it asks any target, with the reason.
    job = start_job(cuda_server.socket, build_cuda(nvcc, "pinned_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    cid = only_client(cuda_server)["client_id"]
    r = tally_server(cuda_server, "migrate", "--client", str(cid), "--to", str(cuda_server.dir / "nobody.sock"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "globals cannot move" in r.stderr and "takes the address of _Z5twicei" in r.stderr, r.stderr
    r = tally_server(cuda_server, "suspend", "--client", str(cid))
    assert r.returncode == 0, r.stdout + r.stderr
    assert only_client(cuda_server)["suspended_bytes"] == 4096 * 4
    assert tally_server(cuda_server, "resume", "--client", str(cid)).returncode == 0
    job.stdin.write("go\n")
    job.stdin.flush()
    result = finish(job, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.ints("wrong", "total") == [0, 8 * 4096]
