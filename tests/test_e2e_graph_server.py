"""A captured graph of kernels (fork and join across two streams) under tally-run
on the emulator, at both priorities: the server keeps it, each replay is one
GraphLaunch message, the results are right. The high-priority job's replays run
as one unit each (scheduler.graph_launches); under the priority policy a
best-effort job's must stay preemptible and run node by node
(scheduler.graph_nodes_replayed, in nodes). An exec update
(cudaGraphExecKernelNodeSetParams) reaches the server's copy: the replay after it
also runs from there, with the new parameters."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server, finish, run_job, server, start_job  # noqa: F401

from tally.bench.process_jobs import build_cuda_job

KERNEL_NODES = 4


def counts(server) -> tuple[int, int]:
    s = server.status()["server"]["scheduler"]
    return s["graph_launches"], s["graph_nodes_replayed"]


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_captured_kernel_graph_replays_from_the_servers_copy(nvcc, emulator_server, priority):
    program = build_cuda(nvcc, "graph_server_replay.cu")
    units, nodes = counts(emulator_server)
    job = run_job(emulator_server.socket, program, "6", priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("replays_ok", "update_ok", "nodes") == [1, 1, KERNEL_NODES]
    # Seven replays from the server's copy, the last one after the update.
    units_after, nodes_after = counts(emulator_server)
    if priority == "high":
        assert (units_after - units, nodes_after - nodes) == (7, 0)
    else:
        assert (units_after - units, nodes_after - nodes) == (0, 7 * KERNEL_NODES)


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_a_captured_graph_with_memsets_and_a_copy_replays_from_the_servers_copy(nvcc, emulator_server, priority):
    program = build_cuda(nvcc, "graph_memset_replay.cu")
    units, nodes = counts(emulator_server)
    job = run_job(emulator_server.socket, program, "4", priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("replays_ok", "nodes") == [1, 6]
    units_after, nodes_after = counts(emulator_server)
    # four replays, each one unit (high) or its three kernels one by one (best effort)
    assert (units_after - units, nodes_after - nodes) == ((4, 0) if priority == "high" else (0, 4 * 3))


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_child_graphs_replay_from_the_servers_copy(nvcc, emulator_server, priority):
    # a child graph holding a grandchild, flattened into the server's copy: one unit
    # per replay at high priority, its five kernels one by one at best effort
    program = build_cuda(nvcc, "graph_child_replay.cu")
    units, nodes = counts(emulator_server)
    job = run_job(emulator_server.socket, program, "3", priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    # ... and an exec update gives the child node a new child of the same shape
    assert job.ints("replays_ok", "nodes", "new_child_ok", "other_shape") == [1, 3, 1, 1]
    units_after, nodes_after = counts(emulator_server)
    assert (units_after - units, nodes_after - nodes) == ((4, 0) if priority == "high" else (0, 4 * 5))


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_host_and_event_nodes_are_steps_of_the_servers_replay(nvcc, emulator_server, priority):
    # wait(go) -> add -> host node -> twice -> record(done): each replay two units (or
    # two kernels node by node), the host function run in the job between them
    program = build_cuda(nvcc, "graph_host_event_replay.cu")
    units, nodes = counts(emulator_server)
    job = run_job(emulator_server.socket, program, "3", priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("replays_ok", "host_calls") == [1, 3]
    units_after, nodes_after = counts(emulator_server)
    assert (units_after - units, nodes_after - nodes) == ((6, 0) if priority == "high" else (0, 6))


def test_a_high_priority_replay_is_not_held_behind_a_best_effort_graph(server):  # noqa: F811
    # two jobs replaying graphs on one emulator server: the best-effort job's replays go
    # node by node (each kernel preemptible), the high-priority job's as units, and the
    # high-priority job is done while the best-effort one still replays
    program = build_cuda_job("graph_replay.cu")
    background = start_job(server.socket, program, "--nodes", "32", "--replays", "40", "--rounds", "40",
                           "--warmup", "1", priority="best-effort")
    try:
        server.wait_for(lambda s: s["server"]["scheduler"]["graph_nodes_replayed"] > 0,
                        what="the best-effort job's first replays")
        hp = finish(start_job(server.socket, program, "--nodes", "16", "--replays", "5", "--rounds", "3",
                              "--warmup", "1", priority="high"), timeout=300)
        assert hp.returncode == 0, hp.stdout + hp.stderr
        assert background.poll() is None, "the best-effort job ended first: the test shows nothing"
        scheduler = server.status()["server"]["scheduler"]
        # the high-priority job's (1 + 5 x 3) replays were units; the best-effort job's none
        assert scheduler["graph_launches"] == 16 and scheduler["graph_nodes_replayed"] > 0, scheduler
    finally:
        background.kill()
        background.communicate()
