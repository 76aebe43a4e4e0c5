"""CUDA graph calls used together with cloned graphs (cudaGraphClone, node lookup in
a clone, node types, roots and edges of captured graphs, cudaGraphExecUpdate,
cudaGraphDebugDotPrint), from a program built by nvcc with static and shared cudart
and run under tally-run against the emulator."""
from __future__ import annotations

import pydot
import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401

CUDARTS = pytest.mark.parametrize("shared", [False, True], ids=["static-cudart", "shared-cudart"])

KERNEL, MEMCPY = 0, 1                                # cudaGraphNodeType
UPDATE_SUCCESS, TOPOLOGY_CHANGED, NODE_TYPE_CHANGED = 0, 2, 3  # cudaGraphExecUpdateResult
cudaErrorGraphExecUpdateFailure = 910
cudaErrorOperatingSystem = 304
cudaErrorInvalidValue = 1


@CUDARTS
def test_clone_update_node_types_and_dot(nvcc, emulator_server, shared, tmp_path):
    dot_path = tmp_path / "captured.dot"
    job = run_job(emulator_server.socket, build_cuda(nvcc, "graph_clone_update.cu", shared_cudart=shared), dot_path)
    assert job.returncode == 0, job.stdout + job.stderr

    # The clone has its own nodes, paired with the original's; each graph runs its
    # own parameters (the original's kernel changed after cloning, the clone's did not).
    assert job.value("clone_nodes") == "5/5"
    assert job.ints("clone_node_differs", "clone_kernel_type") == [1, KERNEL]
    assert job.ints("original_ok", "clone_ok", "host_calls") == [1, 1, 2]
    assert job.ints("find_late", "clone_after_original_destroyed") == [cudaErrorInvalidValue, 1]

    # Capture made nodes and edges as CUDA's does: copy in, a kernel on each of two
    # streams, the kernel that joins them, copy out.
    assert job.ints("captured_nodes", "roots", "edges", "join_deps") == [5, 1, 5, 2]
    assert job.value("types") == ",".join(map(str, [MEMCPY, KERNEL, KERNEL, KERNEL, MEMCPY]))
    assert job.ints("captured_kernel_grid", "captured_factor") == [8, 2]

    # Updates from graphs of the same topology take effect (new parameters, then a new
    # kernel); the others are refused with the documented result, and change nothing.
    results = {line.split("=")[0]: int(line.split("result=")[1].split()[0])
               for line in job.stdout.splitlines() if "result=" in line}
    assert job.ints("before_update_ok", "update", "updated_ok", "function_update", "function_ok") == [1, 0, 1, 0, 1]
    assert results["update"] == results["function_update"] == UPDATE_SUCCESS
    assert job.ints("count_update", "error_node_null") == [cudaErrorGraphExecUpdateFailure, 1]
    assert job.ints("type_update", "error_node_is_memset") == [cudaErrorGraphExecUpdateFailure, 1]
    assert job.ints("edge_update", "error_node") == [cudaErrorGraphExecUpdateFailure, 3]   # the join lost an edge
    assert [results[k] for k in ("count_update", "type_update", "edge_update")] == \
        [TOPOLOGY_CHANGED, NODE_TYPE_CHANGED, TOPOLOGY_CHANGED]
    assert job.value("after_refusals_ok") == "1"

    # The DOT file describes the captured graph: five nodes with their types, kernel
    # names and copy directions, and its five edges.
    assert job.ints("dot_written", "dot_unwritable") == [1, cudaErrorOperatingSystem]
    (graph,) = pydot.graph_from_dot_file(str(dot_path))
    (cluster,) = graph.get_subgraphs()
    labels = [node.get("label").strip('"').split("\\n") for node in cluster.get_nodes()]
    assert [label[:2] for label in labels] == [["0", "MEMCPY"], ["1", "KERNEL"], ["2", "KERNEL"], ["3", "KERNEL"],
                                               ["4", "MEMCPY"]]
    assert [labels[0][2], labels[4][2]] == ["HtoD", "DtoH"]
    assert [label[2] for label in labels[1:4]] == ["_Z9scale_addPKiPiiii"] * 2 + ["_Z8add_intoPiPKii"]
    assert labels[1][3] == "<<<(8,1,1), (256,1,1), 0>>>"
    index = {node.get_name().strip('"'): int(label[0]) for node, label in zip(cluster.get_nodes(), labels)}
    edges = {(index[e.get_source().strip('"')], index[e.get_destination().strip('"')]) for e in cluster.get_edges()}
    assert edges == {(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)}
    assert job.value("done") == "1"
    assert "tally:" not in job.stderr
