"""Graph memory nodes under tally-run (tests/cuda/programs/graph_memory_nodes.cu):
the allocation and free nodes stream capture makes from cudaMallocAsync and
cudaFreeAsync, explicit cudaGraphAddMemAllocNode/MemFreeNode with their parameters
read back, an allocation the graph leaves to the job (usable after the launch;
relaunching before it is freed, freeing it twice and freeing memory a graph frees
itself fail as CUDA says), AUTO_FREE_ON_LAUNCH, the graph-memory attributes, a
free node of memory no graph allocated, an allocation node past the job's quota;
on the emulator at both priorities and through the nested cuda-backend server,
which replays the memory graphs as units (memory nodes are the client's
bookkeeping: they run nothing on the device)."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server, emulator_server_process, run_job  # noqa: F401
from test_cuda_backend_nested import NestedCudaServer

CUDA_SUCCESS, INVALID_VALUE, MEMORY_ALLOCATION = 0, 1, 2
EXPECTED = {
    "captured_alloc_nodes": 1, "captured_free_nodes": 1, "alloc_params_kept": 1, "free_params_kept": 1,
    # used: the three 4000-byte allocations that have run and still exist (CUDA keeps a
    # graph allocation's memory associated with graphs after its free node runs)
    "free_outside_owning_graph": INVALID_VALUE, "graph_mem_used": 12000, "graph_mem_reserved_at_least_used": 1,
    "relaunch_unfreed": INVALID_VALUE, "double_free": INVALID_VALUE, "relaunch_after_free": CUDA_SUCCESS,
    "free_node_of_plain_memory": INVALID_VALUE, "graph_mem_reserved_after_destroy": 0,
}


@pytest.fixture(scope="module")
def program(nvcc):
    return build_cuda(nvcc, "graph_memory_nodes.cu")


def check(job) -> None:
    assert job.returncode == 0 and "all correct" in job.stdout, job.stdout + job.stderr
    assert dict(zip(EXPECTED, job.ints(*EXPECTED))) == EXPECTED
    assert "auto_free_relaunch=ok" in job.stdout
    # each refusal says why in the job's log
    assert "not freed yet" in job.stderr and "is not memory a graph allocated" in job.stderr


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_memory_nodes_on_the_emulator(emulator_server, program, priority):
    check(run_job(emulator_server.socket, program, priority=priority, timeout=300))


def test_an_allocation_node_past_the_quota_is_refused_and_the_rest_runs(emulator_server, program):
    job = run_job(emulator_server.socket, program, str(100 << 20), quota="1M", timeout=300)
    check(job)
    assert job.ints("big_alloc_node") == [MEMORY_ALLOCATION]
    assert "memory quota" in job.stderr


def test_memory_graphs_replay_as_the_drivers_graph_launches(program):
    under = emulator_server_process()
    server = NestedCudaServer(under)
    try:
        job = run_job(server.socket, program, priority="high", timeout=300)
        check(job)
        [nested] = under.status()["clients"]
        # captured x3, explicit x2, unfreed x2 (the refused relaunch sends nothing), auto-free x2
        assert nested["requests_by_kind"].get("GraphLaunch", 0) == 9
        assert server.status()["server"]["scheduler"]["graph_launches"] == 9
    finally:
        server.stop()
        under.stop()
