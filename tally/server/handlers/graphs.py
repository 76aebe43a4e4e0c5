"""CUDA graphs the server keeps (tally/server/client/graphs.py): defined once at
the client's cuGraphInstantiate, replayed by one GraphLaunch each, updated by
the cuGraphExec*SetParams family, forgotten at cuGraphExecDestroy.

A replay is one message; the executor still runs it node by node (each kernel
its own unit, sliced or PTB like any best-effort launch), in a topological order
on the replay's stream, and counts it in scheduler.graph_nodes_replayed."""
from __future__ import annotations

from dataclasses import replace

from tally.protocol.messages_generated import GraphDefine, GraphDestroy, GraphLaunch, GraphNodeUpdate
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.client.graphs import parse_graph, parse_node
from tally.server.job import Job


def graph_define(job: Job, msg: GraphDefine, tag: int) -> None:
    client = job.client
    client.graphs.define(msg.graph, parse_graph(client.modules, msg.node_count, msg.edge_count, msg.tail))


def graph_node_update(job: Job, msg: GraphNodeUpdate, tag: int) -> None:
    client = job.client
    where = f"update of node {msg.node} of graph {msg.graph}"
    node, end = parse_node(client.modules, msg.tail, 0, where)
    if end != len(msg.tail):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: {len(msg.tail) - end} bytes after the node")
    client.graphs.update_node(msg.graph, msg.node, node)


def graph_launch(job: Job, msg: GraphLaunch, tag: int) -> None:
    client = job.client
    kernels = client.graphs.get(msg.graph).kernels()
    # Every function is found again before anything is queued: a replay whose module
    # was unloaded fails whole instead of running half the graph.
    functions = [client.modules.launchable(node.function) for node in kernels]
    for fn, node in zip(functions, kernels):
        client.device_heap.prepare_launch(fn.backend_function, fn.module.backend_module)
        # The function as loaded now (a suspend or migration may have loaded it again).
        client.streams.submit(msg.stream, replace(node.launch, function=fn.backend_function))
    client.executor.note_graph_replay(job.client_id, len(kernels))


def graph_destroy(job: Job, msg: GraphDestroy, tag: int) -> None:
    job.client.graphs.destroy(msg.graph)


HANDLERS = {GraphDefine: graph_define, GraphNodeUpdate: graph_node_update, GraphLaunch: graph_launch,
            GraphDestroy: graph_destroy}
