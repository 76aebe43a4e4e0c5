"""Graph replays through the cuda backend without a GPU: the nested cuda-backend
server (tests/test_cuda_backend_nested.py) runs a high-priority job's replays as
real CUgraphExecs it built through its driver (cuGraphCreate, cuGraphAddKernelNode,
cuGraphInstantiateWithFlags, one cuGraphLaunch per replay, tally/backends/
cuda_graphs.py); that driver is tally's libcuda in front of an emulator server,
which receives the graph once and each replay as one message, and runs it."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, run_job
from test_cuda_backend_nested import cuda_server  # noqa: F401  (one nested cuda-backend server for the module)
from test_e2e_graph_server import KERNEL_NODES


def forwarded(server, kind: str) -> int:
    [nested] = server.under.status()["clients"]
    return nested["requests_by_kind"].get(kind, 0)


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_replays_are_the_drivers_graph_launches(nvcc, cuda_server, priority):
    program = build_cuda(nvcc, "graph_server_replay.cu")
    before = cuda_server.status()["server"]["scheduler"]
    launches_before = forwarded(cuda_server, "GraphLaunch")
    job = run_job(cuda_server.socket, program, "6", priority=priority, timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("replays_ok", "update_ok", "nodes") == [1, 1, KERNEL_NODES]
    after = cuda_server.status()["server"]["scheduler"]
    units = after["graph_launches"] - before["graph_launches"]
    if priority == "high":
        # seven replays (the last after an exec update) as one unit each: seven
        # cuGraphLaunch calls reach the driver, the last of a CUgraphExec made anew
        assert units == 7
        assert forwarded(cuda_server, "GraphLaunch") - launches_before == 7
        assert forwarded(cuda_server, "GraphDefine") >= 1
    else:
        assert units == 0        # the priority policy keeps them preemptible: node by node
        assert after["graph_nodes_replayed"] - before["graph_nodes_replayed"] == 7 * KERNEL_NODES
        assert forwarded(cuda_server, "GraphLaunch") == launches_before


def run_high_priority(nvcc, cuda_server, source: str) -> tuple:
    """A high-priority job of `source` replaying its graph 3 times on the nested server:
    (the job, graph launches the nested server counted, GraphLaunch messages its driver
    forwarded to the emulator server), both counts for this job alone."""
    program = build_cuda(nvcc, source)
    before = cuda_server.status()["server"]["scheduler"]["graph_launches"]
    launches_before = forwarded(cuda_server, "GraphLaunch")
    job = run_job(cuda_server.socket, program, "3", priority="high", timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    return (job, cuda_server.status()["server"]["scheduler"]["graph_launches"] - before,
            forwarded(cuda_server, "GraphLaunch") - launches_before)


def test_memset_and_copy_nodes_are_the_drivers_too(nvcc, cuda_server):
    # the nested server builds its CUgraphExec with cuGraphAddMemsetNode and cuGraphAddMemcpyNode as well
    job, units, launches = run_high_priority(nvcc, cuda_server, "graph_memset_replay.cu")
    assert job.ints("replays_ok", "nodes") == [1, 6]
    assert (units, launches) == (3, 3)


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_conditional_nodes_through_the_cuda_backend(nvcc, cuda_server, priority):
    # the cuda backend JIT-compiles the module with tally's cudaGraphSetConditional
    # (its driver, tally's libcuda, takes the PTX) and the client's conditional
    # replays read the values through it
    from test_e2e_graph_conditional import REPLAYS, check_conditional_job
    program = build_cuda(nvcc, "graph_conditional.cu")
    job = run_job(cuda_server.socket, program, str(REPLAYS), priority=priority, timeout=300)
    check_conditional_job(job)


def test_child_graphs_are_the_drivers_too(nvcc, cuda_server):
    # the flattened child graphs become kernel and empty nodes of one CUgraphExec
    job, units, launches = run_high_priority(nvcc, cuda_server, "graph_child_replay.cu")
    assert job.ints("replays_ok", "nodes", "new_child_ok") == [1, 3, 1]
    assert (units, launches) == (4, 4)


def test_host_and_event_nodes_between_the_drivers_graph_launches(nvcc, cuda_server):
    # each replay: a wait, a CUgraphExec of one kernel, the host function in the job,
    # another CUgraphExec, a record
    job, _units, launches = run_high_priority(nvcc, cuda_server, "graph_host_event_replay.cu")
    assert job.ints("replays_ok", "host_calls") == [1, 3]
    assert launches == 6
