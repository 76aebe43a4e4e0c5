"""The job's instantiated CUDA graphs, as the server keeps them (GraphDefine).

The client sends an instantiated graph once; each replay is then one
GraphLaunch. Everything a replay needs is checked here, at instantiate, the way
cuGraphInstantiate would refuse it: a node naming a function the job never
resolved (CUDA_ERROR_INVALID_HANDLE), parameters of the wrong size, an empty
grid or block, a memset or copy outside the job's memory, a memset of a bad
element size, an event node naming an event the job does not have
(CUDA_ERROR_INVALID_HANDLE), an
edge naming no node, a cycle (CUDA_ERROR_INVALID_VALUE). A replay then only
walks `order`, so it cannot fail on the graph's shape.
"""
from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, replace
from typing import Callable

from tally.protocol import GraphNodeType
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, DeviceError
from tally.protocol.spec import GRAPH_EVENT_FORMAT, GRAPH_MEMCPY_FORMAT, GRAPH_MEMSET_FORMAT, GRAPH_NODE_FORMAT
from tally.scheduler import ops
from tally.server.client.graph_steps import Barrier, Step, replay_steps

_NODE = struct.Struct(GRAPH_NODE_FORMAT)
_MEMSET = struct.Struct(GRAPH_MEMSET_FORMAT)
_MEMCPY = struct.Struct(GRAPH_MEMCPY_FORMAT)
_EVENT = struct.Struct(GRAPH_EVENT_FORMAT)
_EVENT_KINDS = {GraphNodeType.EVENT_RECORD: "record", GraphNodeType.EVENT_WAIT: "wait"}
_EDGE = struct.Struct("<II")


@dataclass(frozen=True)
class GraphNode:
    type: int
    enabled: bool
    launch: ops.Launch | None       # a kernel node's launch, checked against its function
    function: int = 0               # the job's function id: a replay finds it again (its module may be gone)
    memset: ops.Memset | None = None    # a memset node's, checked against the job's memory
    copy: ops.MemcpyDtoD | None = None  # a memcpy node's, both sides checked likewise
    barrier: Barrier | None = None      # a host or event node's (graph_steps.py)

    @property
    def work(self) -> ops.Launch | ops.Memset | ops.MemcpyDtoD | Barrier | None:
        """What the node does when it is enabled (None: an empty node)."""
        if self.launch is not None:
            return self.launch
        if self.memset is not None:
            return self.memset
        return self.copy if self.copy is not None else self.barrier


@dataclass(frozen=True)
class JobGraph:
    nodes: tuple[GraphNode, ...]
    order: tuple[int, ...]          # a topological order of the node indices
    edges: tuple[tuple[int, int], ...] = ()

    def work(self) -> list[GraphNode]:
        """The enabled kernel, memset, memcpy, host and event nodes, in an order the edges allow."""
        return [self.nodes[i] for i in self._work_indices()]

    def work_edges(self) -> tuple[tuple[int, int], ...]:
        """The edges between work()'s nodes (indices into it): b waits for a when a
        path of edges leads from a to b through empty or disabled nodes only (a
        disabled node still orders what is around it, as in CUDA). Each runs
        forward, since work() is in a topological order."""
        position = {node: k for k, node in enumerate(self._work_indices())}
        predecessors: list[list[int]] = [[] for _ in self.nodes]
        for a, b in self.edges:
            predecessors[b].append(a)
        nearest: dict[int, frozenset[int]] = {}      # node -> the work nodes it waits for directly
        for node in self.order:
            waits: set[int] = set()
            for p in predecessors[node]:
                if p in position:
                    waits.add(position[p])
                else:
                    waits |= nearest[p]
            nearest[node] = frozenset(waits)
        return tuple(sorted((a, position[n]) for n in position for a in nearest[n]))

    def _work_indices(self) -> list[int]:
        return [i for i in self.order if self.nodes[i].enabled and self.nodes[i].work is not None]


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def parse_node(modules, tail, offset: int, where: str,
               check_range: Callable[[int, int, str], object] | None = None,
               check_event: Callable[[int], object] | None = None) -> tuple[GraphNode, int]:
    """One GraphNode record at `offset` of `tail`; returns it and the next offset.
    `check_range(ptr, nbytes, what)` refuses a memset or copy outside the job's memory,
    `check_event(id)` an event the job does not have. A host node's place among the
    graph's host nodes is parse_graph's to set."""
    if offset + _NODE.size > len(tail):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: the record is cut short")
    type_, enabled, function, g0, g1, g2, b0, b1, b2, shared, nparams = _NODE.unpack_from(tail, offset)
    offset += _NODE.size
    end = offset + _pad8(nparams)
    if end > len(tail):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: {nparams} parameter bytes run past the message")
    if type_ == GraphNodeType.EMPTY:
        return GraphNode(type_, bool(enabled), None), end
    if type_ == GraphNodeType.MEMSET:
        return GraphNode(type_, bool(enabled), None, memset=_memset(tail, offset, nparams, where, check_range)), end
    if type_ == GraphNodeType.MEMCPY:
        return GraphNode(type_, bool(enabled), None, copy=_memcpy(tail, offset, nparams, where, check_range)), end
    if type_ == GraphNodeType.HOST:
        if nparams:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: a host node carries no parameters, not {nparams}")
        return GraphNode(type_, True, None, barrier=Barrier("host")), end
    if type_ in _EVENT_KINDS:
        if nparams != _EVENT.size:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: an event node carries {_EVENT.size} parameter "
                                                        f"bytes, not {nparams}")
        (event,) = _EVENT.unpack_from(tail, offset)
        if check_event is not None:
            check_event(event)            # CUDA_ERROR_INVALID_HANDLE for an event the job does not have
        return GraphNode(type_, True, None, barrier=Barrier(_EVENT_KINDS[type_], event=event)), end
    if type_ != GraphNodeType.KERNEL:
        raise DeviceError(CUDA_ERROR_NOT_SUPPORTED, f"{where}: node type {type_} is not one the server keeps")
    fn = modules.launchable(function)          # CUDA_ERROR_INVALID_HANDLE for a function never resolved
    grid, block = (g0, g1, g2), (b0, b1, b2)
    if 0 in grid or 0 in block:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: kernel {fn.name} with grid {grid} block {block}")
    if nparams != fn.param_bytes:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: kernel {fn.name} carries {nparams} parameter "
                                                    f"bytes; its parameters take {fn.param_bytes}")
    params = bytes(tail[offset:offset + nparams])
    launch = ops.Launch(fn.backend_function, grid, block, shared, params)
    return GraphNode(type_, bool(enabled), launch, function), end


def _memset(tail, offset: int, nparams: int, where: str, check_range) -> ops.Memset:
    if nparams != _MEMSET.size:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: a memset node carries {_MEMSET.size} parameter "
                                                    f"bytes, not {nparams}")
    dst, count, value, element_size = _MEMSET.unpack_from(tail, offset)
    if element_size not in (1, 2, 4) or count < 1 or value >= 1 << (8 * element_size):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: memset of {count} x {element_size}-byte value "
                                                    f"{value:#x}")
    if check_range is not None:
        check_range(dst, count * element_size, f"{where}: memset destination")
    return ops.Memset(dst, value, element_size, count)


def _memcpy(tail, offset: int, nparams: int, where: str, check_range) -> ops.MemcpyDtoD:
    if nparams != _MEMCPY.size:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: a memcpy node carries {_MEMCPY.size} parameter "
                                                    f"bytes, not {nparams}")
    dst, src, nbytes = _MEMCPY.unpack_from(tail, offset)
    if nbytes < 1:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{where}: a copy of {nbytes} bytes")
    if check_range is not None:
        check_range(dst, nbytes, f"{where}: copy destination")
        check_range(src, nbytes, f"{where}: copy source")
    return ops.MemcpyDtoD(dst, src, nbytes)


def topological_order(count: int, edges: list[tuple[int, int]]) -> tuple[int, ...]:
    """Kahn's algorithm, lowest index first among the ready (so a chain keeps its
    capture order); a cycle leaves nodes unplaced and is refused."""
    successors: list[list[int]] = [[] for _ in range(count)]
    indegree = [0] * count
    for a, b in edges:
        successors[a].append(b)
        indegree[b] += 1
    ready = [i for i in range(count) if indegree[i] == 0]
    order: list[int] = []
    while ready:
        ready.sort(reverse=True)
        node = ready.pop()
        order.append(node)
        for s in successors[node]:
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.append(s)
    if len(order) != count:
        stuck = sorted(i for i in range(count) if indegree[i] > 0)
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"the graph has a cycle through nodes {stuck[:8]}")
    return tuple(order)


def parse_graph(modules, node_count: int, edge_count: int, tail,
                check_range: Callable[[int, int, str], object] | None = None,
                check_event: Callable[[int], object] | None = None) -> JobGraph:
    nodes: list[GraphNode] = []
    offset = 0
    hosts = 0
    for i in range(node_count):
        node, offset = parse_node(modules, tail, offset, f"graph node {i}", check_range, check_event)
        if node.type == GraphNodeType.HOST:
            node = replace(node, barrier=Barrier("host", host=hosts))
            hosts += 1
        nodes.append(node)
    if offset + edge_count * _EDGE.size != len(tail):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"the graph's tail holds {len(tail) - offset} bytes of "
                                                    f"edges; {edge_count} edges take {edge_count * _EDGE.size}")
    edges = [_EDGE.unpack_from(tail, offset + k * _EDGE.size) for k in range(edge_count)]
    for a, b in edges:
        if a >= node_count or b >= node_count or a == b:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"edge {a} -> {b} in a graph of {node_count} nodes")
    return JobGraph(tuple(nodes), topological_order(node_count, edges), tuple(edges))


def serialize_graph(graph: JobGraph) -> bytes:
    """The graph as a GraphDefine tail again (what migration carries to the next server)."""
    out = bytearray()
    for n in graph.nodes:
        launch = n.launch
        if n.memset is not None:
            m = n.memset
            out += _NODE.pack(n.type, int(n.enabled), 0, 1, 1, 1, 1, 1, 1, 0, _MEMSET.size)
            out += _MEMSET.pack(m.dst, m.count, m.value, m.element_size)
            continue
        if n.copy is not None:
            c = n.copy
            out += _NODE.pack(n.type, int(n.enabled), 0, 1, 1, 1, 1, 1, 1, 0, _MEMCPY.size)
            out += _MEMCPY.pack(c.dst, c.src, c.nbytes)
            continue
        if n.barrier is not None and n.barrier.kind != "host":
            out += _NODE.pack(n.type, int(n.enabled), 0, 1, 1, 1, 1, 1, 1, 0, _EVENT.size)
            out += _EVENT.pack(n.barrier.event)
            continue
        if launch is None:
            out += _NODE.pack(n.type, int(n.enabled), 0, 1, 1, 1, 1, 1, 1, 0, 0)
            continue
        out += _NODE.pack(n.type, int(n.enabled), n.function, *launch.grid, *launch.block, launch.shared_bytes,
                          len(launch.params))
        out += launch.params + bytes(_pad8(len(launch.params)) - len(launch.params))
    for a, b in graph.edges:
        out += _EDGE.pack(a, b)
    return bytes(out)


class JobGraphs:
    """The job's graphs by the client's id. A session thread defines and updates
    them; replays read a graph whole (a JobGraph never changes once made)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()   # update_node reads through get()
        self._graphs: dict[int, JobGraph] = {}
        # id -> (the JobGraph, the job's function version, the steps made of them)
        self._replays: dict[int, tuple[JobGraph, int, tuple[Step, ...]]] = {}

    def replay(self, graph_id: int, version: int,
               resolve: Callable[[list[GraphNode]], list]) -> tuple[Step, ...]:
        """What one replay of the graph submits (graph_steps.py): its kernels, memsets
        and copies as ReplayGraphs, the kernels with the backend functions
        `resolve(kernel nodes)` gives (raising for one that is gone), with the edges
        between them, cut at its host and event nodes; () for a graph with no enabled
        node that does anything. The same steps as last time while neither the graph
        nor the job's functions (their `version`) changed: a replay then costs no work
        per node, and the backend's executables of it are reused."""
        with self._lock:
            graph = self.get(graph_id)
            cached = self._replays.get(graph_id)
            if cached is not None and cached[0] is graph and cached[1] == version:
                return cached[2]
        work = graph.work()
        if not work:
            return ()
        functions = iter(resolve([node for node in work if node.launch is not None]))
        nodes = tuple(node.work if node.launch is None else replace(node.launch, function=next(functions))
                      for node in work)
        made = replay_steps(nodes, graph.work_edges(), f"graph-{graph_id}")
        with self._lock:
            if self._graphs.get(graph_id) is graph:
                self._replays[graph_id] = (graph, version, made)
        return made

    def define(self, graph_id: int, graph: JobGraph) -> None:
        with self._lock:
            self._graphs[graph_id] = graph

    def get(self, graph_id: int) -> JobGraph:
        with self._lock:
            graph = self._graphs.get(graph_id)
        if graph is None:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"graph {graph_id} was never instantiated or is destroyed")
        return graph

    def update_node(self, graph_id: int, index: int, node: GraphNode) -> None:
        """An exec update: the node keeps its type (CUDA refuses changing it)."""
        with self._lock:
            graph = self.get(graph_id)
            if index >= len(graph.nodes):
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"graph {graph_id} has no node {index}")
            if graph.nodes[index].type != node.type:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"node {index} of graph {graph_id} is of type "
                                                            f"{graph.nodes[index].type}, not {node.type}")
            if node.type == GraphNodeType.HOST:
                node = replace(node, barrier=graph.nodes[index].barrier)    # its place among the host nodes
            nodes = list(graph.nodes)
            nodes[index] = node
            self._graphs[graph_id] = replace(graph, nodes=tuple(nodes))

    def destroy(self, graph_id: int) -> None:
        with self._lock:
            self._replays.pop(graph_id, None)
            if self._graphs.pop(graph_id, None) is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"graph {graph_id} was never instantiated")

    def describe(self) -> list[list]:
        """[id, node count, edge count, GraphDefine tail] of each graph (migration)."""
        with self._lock:
            return [[gid, len(g.nodes), len(g.edges), serialize_graph(g)] for gid, g in self._graphs.items()]

    def clear(self) -> None:
        with self._lock:
            self._graphs.clear()
            self._replays.clear()
