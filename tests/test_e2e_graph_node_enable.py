"""cudaGraphNodeSetEnabled / GetEnabled (tests/cuda/programs/graph_node_enable.cu):
disabled kernel and memset nodes of an instantiated graph run as empty nodes from the
next launch, and run again once enabled; an empty node cannot be disabled
(CUDA_ERROR_INVALID_VALUE). Both where the server keeps the graph (its copy is
defined again with the nodes' flags; every replay one graph launch) and where the
client replays it (a copy from pageable host memory keeps it there)."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, run_job, server  # noqa: F401

EXPECTED = {"all_x": 11, "all_y": 7, "b_enabled": 0, "disabled_x": 1, "disabled_y": 0, "memset_back_x": 1,
            "memset_back_y": 7, "enabled_again": 1, "again_x": 11, "again_y": 7, "empty_node": 1,
            "updated_x": 110, "updated_y": 0}


@pytest.mark.parametrize("where", ["server", "client"])
def test_disabled_nodes_run_as_empty_ones(nvcc, server, where):
    program = build_cuda(nvcc, "graph_node_enable.cu")
    args = ("client",) if where == "client" else ()
    job = run_job(server.socket, program, *args, priority="high")
    assert job.returncode == 0 and "done" in job.stdout, job.stdout + job.stderr
    assert dict(zip(EXPECTED, job.ints(*EXPECTED))) == EXPECTED
    launches = server.status()["server"]["scheduler"]["graph_launches"]
    assert launches == (5 if where == "server" else 0)
