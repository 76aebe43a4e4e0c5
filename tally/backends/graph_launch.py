"""Graphs of kernels (and memsets and device-to-device copies) the backend runs as one launch
(DeviceBackend.graph_create, graph_launch, graph_destroy).

The executor hands a backend a job's CUDA graph once (its kernels and memsets, and
which waits for which) and then launches it whole on a stream, as one unit of
work: one call per replay instead of one per node. The cuda backend builds a
real CUgraphExec from it (tally/backends/cuda_graphs.py). `StreamOrderedGraphs`,
for the backends without a graph object of their own (the emulator, null), runs
a replay as its nodes in one topological order on the stream: the same
result CUDA allows (a graph's branches may run in any order and side by side),
each kernel confined to the replay's SM cap as a launch of its own would be.
"""
from __future__ import annotations

from dataclasses import dataclass
from tally.backends.base import Dim3, Function
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError


@dataclass(frozen=True, eq=False)
class GraphKernel:
    """One kernel node of a graph, in the backend's terms."""

    function: Function
    grid: Dim3
    block: Dim3
    shared_bytes: int
    params: bytes
    cluster: Dim3 | None = None


@dataclass(frozen=True, eq=False)
class GraphMemset:
    """One memset node of a graph: `count` elements of `element_size` bytes (1, 2
    or 4) set to `value` from device address `dst` (a 1-D memset)."""

    dst: int
    value: int
    element_size: int
    count: int


@dataclass(frozen=True, eq=False)
class GraphCopy:
    """One memcpy node of a graph: `nbytes` bytes from device address `src` to `dst`."""

    dst: int
    src: int
    nbytes: int


GraphNode = GraphKernel | GraphMemset | GraphCopy


@dataclass(frozen=True, eq=False)
class KernelGraph:
    """A graph as the backends take it: its nodes in a topological order (each edge
    runs forward in the list) and the edges between them, as indices."""

    nodes: tuple[GraphNode, ...]
    edges: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if not self.nodes:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, "a graph launched as one unit needs a node")
        for a, b in self.edges:
            if not 0 <= a < b < len(self.nodes):
                raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                                  f"edge {a} -> {b} does not run forward in a graph of {len(self.nodes)} nodes")


class StreamOrderedGraphs:
    """graph_create/graph_launch/graph_destroy for a backend whose streams run one
    operation at a time: the graph object is the KernelGraph itself, and a replay
    is its nodes in order on the stream (the order already honours every edge)."""

    def graph_create(self, graph: KernelGraph) -> KernelGraph:
        return graph

    def graph_launch(self, graph: KernelGraph, stream, sm_cap: int | None = None) -> None:
        for n in graph.nodes:
            if isinstance(n, GraphMemset):
                self.memset_async(n.dst, n.value, n.element_size, n.count, stream)
                continue
            if isinstance(n, GraphCopy):
                self.memcpy_dtod_async(n.dst, n.src, n.nbytes, stream)
                continue
            asked = {} if n.cluster is None else {"cluster": n.cluster}
            self.launch(n.function, n.grid, n.block, n.shared_bytes, stream, n.params, sm_cap=sm_cap, **asked)

    def graph_destroy(self, graph: KernelGraph) -> None:
        pass

