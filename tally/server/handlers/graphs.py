"""CUDA graphs the server keeps (tally/server/client/graphs.py): defined once at
the client's cuGraphInstantiate, replayed by one GraphLaunch each, updated by
the cuGraphExec*SetParams family, forgotten at cuGraphExecDestroy.

A replay is one message and one unit of work for the executor (ops.GraphReplay):
one backend graph launch when the policy starts it whole, its kernels one by
one (each sliced or PTB like any best-effort launch) when it must stay
preemptible; scheduler.graph_launches and graph_nodes_replayed count which. A
graph's host and event nodes are stream operations of their own between its
device parts (tally/server/client/graph_steps.py). After
a high-priority job's first replay of a graph, the C++ data plane launches its
later replays itself where the backend's issuer can (docs/data-plane.md)."""
from __future__ import annotations

import struct

from tally.protocol.messages_generated import GraphDefine, GraphDestroy, GraphLaunch, GraphNodeUpdate
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.scheduler import ops
from tally.scheduler.ops import GraphReplay, ReplayGraph
from tally.server.client.graph_steps import Barrier
from tally.server.client.graphs import parse_graph, parse_node
from tally.server.job import Job


def graph_define(job: Job, msg: GraphDefine, tag: int) -> None:
    client = job.client
    if msg.staged:             # a big graph came ahead in StageBytes chunks
        tail, client.staging = bytes(client.staging), bytearray()
    else:
        tail = msg.tail
    forget_in_data_plane(job, msg.graph)
    client.graphs.define(msg.graph, parse_graph(client.modules, msg.node_count, msg.edge_count, tail,
                                                client.check_device_range, client.events.get))


def graph_node_update(job: Job, msg: GraphNodeUpdate, tag: int) -> None:
    client = job.client
    where = f"update of node {msg.node} of graph {msg.graph}"
    node, end = parse_node(client.modules, msg.tail, 0, where, client.check_device_range, client.events.get)
    if end != len(msg.tail):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: {len(msg.tail) - end} bytes after the node")
    forget_in_data_plane(job, msg.graph)
    client.graphs.update_node(msg.graph, msg.node, node)


def graph_launch(job: Job, msg: GraphLaunch, tag: int) -> None:
    client = job.client

    def resolve(kernels) -> list:
        # Every function is found again before anything is queued: a replay whose module
        # was unloaded fails whole instead of running half the graph. The functions as
        # loaded now: a suspend or migration may have loaded them again.
        functions = [client.modules.launchable(node.function) for node in kernels]
        for fn in {id(fn): fn for fn in functions}.values():
            client.device_heap.prepare_launch(fn.backend_function, fn.module.backend_module)
        return [fn.backend_function for fn in functions]

    steps = client.graphs.replay(msg.graph, client.modules.version, resolve)
    callbacks = _callback_ids(msg, steps)
    submitted = 0
    try:
        # every event found and every host function's gate made before anything is queued
        operations = [_operation(client, step, callbacks) for step in steps]
        for operation in operations:
            client.streams.submit(msg.stream, operation)
            submitted += 1
    except DeviceError:
        for step in steps[submitted:]:     # host functions that will never run are not waited for
            if isinstance(step, Barrier) and step.kind == "host":
                client.host_functions.finished(callbacks[step.host])
        raise
    if client.fast is not None and len(steps) == 1 and isinstance(steps[0], ReplayGraph):
        client.fast.learn_graph(msg.graph, steps[0])


def _callback_ids(msg: GraphLaunch, steps) -> list[int]:
    ids = [value for (value,) in struct.iter_unpack("<Q", msg.tail)] if len(msg.tail) % 8 == 0 else None
    hosts = sum(isinstance(step, Barrier) and step.kind == "host" for step in steps)
    if ids is None or len(ids) != hosts:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"a replay of graph {msg.graph} names {len(msg.tail)} bytes of "
                                                    f"host-function callbacks; its {hosts} host nodes take "
                                                    f"{8 * hosts}")
    return ids


def _operation(client, step, callbacks: list[int]):
    """The stream operation of one step of a replay (graph_steps.py)."""
    if isinstance(step, ReplayGraph):
        return GraphReplay(step)
    if step.kind == "host":
        try:
            return client.host_functions.operation_for(callbacks[step.host])
        except ValueError as e:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, str(e)) from None
    event = client.events.get(step.event)
    return ops.EventRecord(event) if step.kind == "record" else ops.StreamWaitEvent(event)


def graph_destroy(job: Job, msg: GraphDestroy, tag: int) -> None:
    forget_in_data_plane(job, msg.graph)
    job.client.graphs.destroy(msg.graph)


def forget_in_data_plane(job: Job, graph_id: int) -> None:
    """Before the job's graph changes: the C++ plane stops launching the old one."""
    if job.client.fast is not None:
        job.client.fast.forget_graph(graph_id)


HANDLERS = {GraphDefine: graph_define, GraphNodeUpdate: graph_node_update, GraphLaunch: graph_launch,
            GraphDestroy: graph_destroy}
