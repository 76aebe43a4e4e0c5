"""The stream-ordered operations a client submits to the executor.

Each is a plain value in driver terms (device pointers are the server's real
addresses). `validate_op` checks the shape of an operation before it is
queued, so a malformed request fails where it was made instead of at the
device; ownership of pointers is the server's check, not this module's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Union

from tally.backends.base import AccessPolicyWindow, Dim3, Function

if TYPE_CHECKING:
    from tally.scheduler.events import ExecutorEvent


@dataclass(frozen=True, eq=False)
class Launch:
    function: Function
    grid: Dim3
    block: Dim3
    shared_bytes: int
    params: bytes
    # At most this many SMs run it: its stream belongs to a green context of the job
    # (None: only the job's SM share, if it has one, limits it).
    sm_cap: int | None = None
    # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (None: none asked; a kernel compiled with a
    # cluster shape has one anyway, which its backend applies).
    cluster: Dim3 | None = None
    # A cooperative launch: its blocks may wait for each other (grid.sync()), so they
    # must all be resident at once; it always runs whole, never sliced or preempted.
    cooperative: bool = False


@dataclass(frozen=True, eq=False)
class MemcpyHtoD:
    dst: int
    data: bytes | memoryview      # must stay valid until the copy ran


@dataclass(frozen=True, eq=False)
class MemcpyDtoH:
    dst: memoryview
    src: int
    nbytes: int


@dataclass(frozen=True, eq=False)
class MemcpyDtoD:
    dst: int
    src: int
    nbytes: int


@dataclass(frozen=True, eq=False)
class Memset:
    dst: int
    value: int
    element_size: int             # 1, 2 or 4 (cuMemsetD8/D16/D32)
    count: int


@dataclass(frozen=True, eq=False)
class EventRecord:
    event: "ExecutorEvent"


@dataclass(frozen=True, eq=False)
class StreamWaitEvent:
    event: "ExecutorEvent"


@dataclass(frozen=True, eq=False)
class HostCallback:
    fn: Callable[[], None]


class HostGate:
    """Opened by StreamExecutor.open_gate (any thread, once)."""

    __slots__ = ("opened",)

    def __init__(self):
        self.opened = False


@dataclass(frozen=True, eq=False)
class GatedCallback:
    """`fn` runs when the stream reaches this point, and must not block; the work
    queued behind it then stays in the executor until `gate` is opened. A job's
    host function is this (fn tells the job to run it, the job's answer opens the
    gate): no device thread waits for a job, so a slow or dead job's callback cannot
    stall the completions of others (CUDA runs every host function of a context on
    one thread)."""
    fn: Callable[[], None]
    gate: HostGate


@dataclass(frozen=True, eq=False)
class StreamWaitValue:
    """cuStreamWaitValue32/64: the stream goes on once the `width`-byte value at
    `address` meets `condition` (backends/stream_memory_ops.py). The work behind
    it stays in the executor until then (as behind a GatedCallback): a stream held
    by a wait holds no device unit, so no other job's work waits for it."""
    address: int
    value: int
    width: int                    # 4 or 8 bytes
    condition: int                # GEQ, EQ, AND or NOR
    gate: HostGate = field(default_factory=HostGate)


@dataclass(frozen=True, eq=False)
class StreamWriteValue:
    """cuStreamWriteValue32/64: stores `value` at `address` in stream order."""
    address: int
    value: int
    width: int


@dataclass(frozen=True, eq=False)
class StreamAccessPolicy:
    """cuStreamSetAttribute's access-policy window: the stream's operations after
    this one run with it (in stream order, as CUDA applies it)."""
    window: AccessPolicyWindow


@dataclass(frozen=True, eq=False)
class ReplayGraph:
    """A job's CUDA graph as the executor replays it: its enabled kernels, memsets and
    device-to-device copies in an order its edges allow, and the edges between them (indices into `nodes`,
    each running forward). Never changed once made: an update of the job's graph
    makes a new one, so a replay queued before the update runs the graph it was
    launched as. Checked once, when made (ValueError), so that a replay costs
    nothing per node."""
    nodes: tuple["Launch | Memset | MemcpyDtoD", ...]
    edges: tuple[tuple[int, int], ...] = ()
    name: str = "graph"
    max_blocks: int = field(init=False)     # the largest grid of its kernels, in blocks
    kernel_count: int = field(init=False)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("a graph replayed as one unit needs at least one node")
        for node in self.nodes:
            if not isinstance(node, (Launch, Memset, MemcpyDtoD)):
                raise ValueError(f"a replayed graph's nodes are kernels, memsets and copies, not "
                                 f"{type(node).__name__}")
            validate_op(node)
        for a, b in self.edges:
            if not 0 <= a < b < len(self.nodes):
                raise ValueError(f"graph edge {a} -> {b} does not run forward among {len(self.nodes)} nodes")
        grids = [op.grid for op in self.nodes if isinstance(op, Launch)]
        object.__setattr__(self, "max_blocks", max((g[0] * g[1] * g[2] for g in grids), default=1))
        object.__setattr__(self, "kernel_count", len(grids))


@dataclass(frozen=True, eq=False)
class GraphReplay:
    """cuGraphLaunch of a graph the server keeps (tally/server/handlers/graphs.py):
    one unit of work, which the executor runs as one backend graph launch when the
    policy starts it whole, or kernel by kernel when it must stay preemptible."""
    graph: ReplayGraph
    sm_cap: int | None = None     # as Launch.sm_cap: its stream's green context's SMs


Op = Union[Launch, GraphReplay, MemcpyHtoD, MemcpyDtoH, MemcpyDtoD, Memset, EventRecord, StreamWaitEvent,
           HostCallback, GatedCallback, StreamWaitValue, StreamWriteValue, StreamAccessPolicy]
OP_TYPES = (Launch, GraphReplay, MemcpyHtoD, MemcpyDtoH, MemcpyDtoD, Memset, EventRecord, StreamWaitEvent,
            HostCallback, GatedCallback, StreamWaitValue, StreamWriteValue, StreamAccessPolicy)


def _dim3(name: str, value) -> None:
    try:
        x, y, z = value
        ok = (type(value) is tuple and isinstance(x, int) and isinstance(y, int) and isinstance(z, int)
              and x >= 1 and y >= 1 and z >= 1)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be a tuple of three positive ints, got {value!r}")


def validate_op(op: object) -> None:
    """Raise ValueError saying what is wrong with a malformed operation."""
    if not isinstance(op, OP_TYPES):
        raise ValueError(f"{type(op).__name__} is not a stream operation; submit one of "
                         + ", ".join(t.__name__ for t in OP_TYPES))
    if isinstance(op, GraphReplay):
        if not isinstance(op.graph, ReplayGraph):       # a ReplayGraph checked itself when it was made
            raise ValueError("GraphReplay.graph must be a ReplayGraph")
        if op.sm_cap is not None and (not isinstance(op.sm_cap, int) or op.sm_cap < 1):
            raise ValueError(f"GraphReplay.sm_cap must be a positive number of SMs or None, got {op.sm_cap!r}")
    elif isinstance(op, Launch):
        _dim3("grid", op.grid)
        _dim3("block", op.block)
        if op.shared_bytes < 0:
            raise ValueError(f"shared_bytes must be >= 0, got {op.shared_bytes}")
        if not isinstance(op.params, (bytes, bytearray)):
            raise ValueError("Launch.params must be the serialized parameter buffer (bytes)")
        if op.sm_cap is not None and (not isinstance(op.sm_cap, int) or op.sm_cap < 1):
            raise ValueError(f"Launch.sm_cap must be a positive number of SMs or None, got {op.sm_cap!r}")
    elif isinstance(op, MemcpyDtoH):
        if op.dst.readonly or op.dst.nbytes != op.nbytes:
            raise ValueError(f"MemcpyDtoH needs a writable destination of exactly {op.nbytes} bytes, "
                             f"got {op.dst.nbytes} bytes{' (read-only)' if op.dst.readonly else ''}")
    elif isinstance(op, (MemcpyDtoD,)):
        if op.nbytes < 0:
            raise ValueError(f"copy size must be >= 0, got {op.nbytes}")
    elif isinstance(op, Memset):
        if op.element_size not in (1, 2, 4):
            raise ValueError(f"memset element size must be 1, 2 or 4, got {op.element_size}")
        if op.count < 0 or not 0 <= op.value < 1 << (8 * op.element_size):
            raise ValueError(f"memset of {op.count} x {op.element_size}-byte value {op.value} is out of range")
    elif isinstance(op, (StreamWaitValue, StreamWriteValue)):
        if op.width not in (4, 8) or op.address % op.width:
            raise ValueError(f"a {8 * op.width}-bit stream memory operation needs an address aligned to "
                             f"{op.width} bytes, got 0x{op.address:x}" if op.width in (4, 8)
                             else f"stream memory operations are 4 or 8 bytes wide, got {op.width}")
        if not 0 <= op.value < 1 << (8 * op.width):
            raise ValueError(f"value {op.value:#x} does not fit {op.width} bytes")
        if isinstance(op, StreamWaitValue) and op.condition not in (0, 1, 2, 3):
            raise ValueError(f"wait condition {op.condition} is none of GEQ (0), EQ (1), AND (2), NOR (3)")
    elif isinstance(op, HostCallback):
        if not callable(op.fn):
            raise ValueError("HostCallback.fn must be callable")
