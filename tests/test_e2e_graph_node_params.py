"""Node parameters set after a graph is made and after it is instantiated
(tests/cuda/programs/graph_node_params.cu): exec updates of memset, memcpy, host and
event-record nodes (the typed calls and cudaGraphExecNodeSetParams) change the next
launch of the instantiated graph and not the graph, which the server keeps and
defines again with them; a copy's direction cannot change; graph-level setters
change the graph, as GetParams and a new instantiation show. At both priorities."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, run_job, server  # noqa: F401

EXPECTED = {"launch1_b": 1, "launch1_first": 1, "direction_change": 1, "launch2_b": 1, "launch2_c": 2,
            "launch2_first": 1, "launch2_second": 1, "ev2_done": 1, "graph_memset_value": 1, "graph_copy_to_b": 1,
            "graph_event_is_ev1": 1, "graph_memset_value_now": 3, "new_exec_b": 3, "generic_c": 4}


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_node_parameters_reach_the_next_launch_and_the_servers_copy(nvcc, server, priority):
    program = build_cuda(nvcc, "graph_node_params.cu")
    job = run_job(server.socket, program, priority=priority)
    assert job.returncode == 0 and "done" in job.stdout, job.stdout + job.stderr
    assert dict(zip(EXPECTED, job.ints(*EXPECTED))) == EXPECTED
    scheduler = server.status()["server"]["scheduler"]
    # four launches of graphs the server keeps: each one unit (its memset and copy) at
    # high priority, node by node at best effort
    if priority == "high":
        assert scheduler["graph_launches"] == 4
    else:
        assert scheduler["graph_launches"] == 0
