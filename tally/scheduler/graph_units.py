"""The backend's executables of the graphs the executor launches whole.

A ReplayGraph (ops.py) becomes a backend graph (DeviceBackend.graph_create: a
CUgraphExec on a GPU) the first time a replay of it runs as one unit, and is
reused by every later replay. Replay graphs never change; the server makes a new
one when the job updates its graph or a module is loaded again, and the old
one's executable is destroyed when nothing refers to the old graph any more (the
job's record of it, queued replays, launches in flight): a finalizer on the
ReplayGraph, so no caller has to count its uses.

A device fault's recovery drops every executable without destroying it (the
context that held them is gone, `forget`); the next replay makes a new one.
"""
from __future__ import annotations

import itertools
import logging
import threading
import weakref

from tally.backends.base import DeviceBackend
from tally.backends.graph_launch import GraphCopy, GraphKernel, GraphMemset, GraphNode, KernelGraph
from tally.protocol.errors import DeviceError
from tally.scheduler.ops import Launch, MemcpyDtoD, Memset, ReplayGraph

log = logging.getLogger(__name__)


def kernel_graph(graph: ReplayGraph) -> KernelGraph:
    return KernelGraph(tuple(_backend_node(op) for op in graph.nodes), graph.edges)


def _backend_node(op: Launch | Memset | MemcpyDtoD) -> GraphNode:
    if isinstance(op, Launch):
        return GraphKernel(op.function, op.grid, op.block, op.shared_bytes, op.params, op.cluster)
    if isinstance(op, Memset):
        return GraphMemset(op.dst, op.value, op.element_size, op.count)
    return GraphCopy(op.dst, op.src, op.nbytes)


class BackendGraphs:
    def __init__(self, backend: DeviceBackend):
        self._backend = backend
        self._lock = threading.Lock()
        self._keys = itertools.count(1)
        self._handles: dict[int, object] = {}           # key -> the backend's executable
        self._keyed: "weakref.WeakKeyDictionary[ReplayGraph, int]" = weakref.WeakKeyDictionary()
        self.created = 0

    def executable(self, graph: ReplayGraph) -> object:
        """The backend's executable of `graph`, made on first use; raises the
        backend's DeviceError when it refuses the graph."""
        with self._lock:
            key = self._keyed.get(graph)
            if key is not None and key in self._handles:
                return self._handles[key]
        handle = self._backend.graph_create(kernel_graph(graph))
        with self._lock:
            if key is None:
                key = next(self._keys)
                self._keyed[graph] = key
                weakref.finalize(graph, self._release, key)
            self._handles[key] = handle
            self.created += 1
        return handle

    @property
    def live(self) -> int:
        """Executables made and not yet destroyed."""
        with self._lock:
            return len(self._handles)

    def _release(self, key: int) -> None:
        with self._lock:
            handle = self._handles.pop(key, None)
        if handle is not None:
            try:
                self._backend.graph_destroy(handle)
            except DeviceError as e:          # the device is going or gone: nothing left to free
                log.debug("graph executable %d not destroyed: %s", key, e)

    def forget(self) -> None:
        """The device context they lived in is gone: drop them all, undestroyed."""
        with self._lock:
            self._handles.clear()

    def close(self) -> None:
        with self._lock:
            keys = list(self._handles)
        for key in keys:
            self._release(key)
