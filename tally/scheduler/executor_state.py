"""The executor's bookkeeping: clients, their streams and queues, events,
kernels being run in pieces, and the units in flight on the device. The
executor alone reads and writes these; the device layer (device_units.py)
keeps its own records and is handed only what it launches.

Plain data; every field is read and written under the executor's lock.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Hashable

from ptx_passes.launch_plan import total_blocks
from tally.protocol.errors import DeviceError
from tally.scheduler.events import ExecutorEvent
from tally.scheduler.kernel_plan import KernelPlan
from tally.scheduler.ops import GraphReplay, Launch, Op
from tally.scheduler.policy import HIGH, ClientView, RunningUnit
from tally.scheduler.profiler import kernel_key
from tally.scheduler.run_mode import PTB, RunMode

if TYPE_CHECKING:
    from tally.scheduler.device_units import DeviceUnit, Lane


@dataclass(eq=False)
class OpItem:
    """A non-kernel operation waiting in a queue; `seq` is the event record it
    names (EventRecord: its own number; StreamWaitEvent: the record it waits for)."""

    op: Op
    seq: int = 0
    dispatched: bool = False     # GatedCallback: its callback went to the backend


@dataclass(eq=False, slots=True)
class KernelTask:
    """A Launch in a queue. Whole kernels leave the queue when launched;
    transformed ones stay at its head until their last piece is launched
    (slices) or has completed (PTB: a preempted launch must be resumed before
    anything behind it on the stream may run)."""

    kernel_id: int
    op: Launch
    stream: "StreamState"
    submitted_at: float
    waiting_since: float | None = None   # when it reached the head of its queue
    plan: KernelPlan | None = None       # how it runs; None until the policy starts it
    next_slice: int = 0                  # SLICE: index into plan.slices
    ptb_started: bool = False
    counter: int = 0                     # PTB tasks completed so far
    unit: "Unit | None" = None           # its slice or PTB launch on the device
    _key: str | None = field(default=None, repr=False)

    @property
    def total_blocks(self) -> int:
        return total_blocks(self.op.grid)

    @property
    def key(self) -> str:
        # made once: the policy's view asks for it at every scheduling pass
        if self._key is None:
            op = self.op
            self._key = kernel_key(op.function.name, op.grid, op.block, op.shared_bytes)
        return self._key

    @property
    def partially_done(self) -> bool:
        return self.next_slice > 0 or self.ptb_started


    @property
    def name(self) -> str:
        return self.op.function.name

    kernel_count = 1


@dataclass(eq=False, slots=True)
class GraphTask:
    """A GraphReplay in a queue. It leaves the queue when launched as one unit, or
    is replaced at the head of its queue by a KernelTask per kernel when it must
    run node by node (the executor's _start_graph)."""

    kernel_id: int
    op: GraphReplay
    stream: "StreamState"
    submitted_at: float
    waiting_since: float | None = None
    plan: KernelPlan | None = None       # WHOLE_PLAN once launched as one unit
    unit: "Unit | None" = None           # never set: a whole unit is not tracked on its task
    counter: int = 0
    partially_done = False

    @property
    def name(self) -> str:
        return self.op.graph.name

    @property
    def kernel_count(self) -> int:
        return self.op.graph.kernel_count

    @property
    def total_blocks(self) -> int:
        """The largest of its kernels' grids: the SMs it may occupy at once."""
        return self.op.graph.max_blocks

    @property
    def key(self) -> str:
        return f"graph:{self.op.graph.name}"


# What may wait at the head of a queue for the policy.
QUEUED_KERNELS = (KernelTask, GraphTask)


@dataclass(eq=False, slots=True)
class Unit:
    """One launch the executor is tracking: whole kernel, slice, or PTB launch."""

    unit_id: int                        # the device's id of it (DeviceUnit.unit_id)
    task: "KernelTask | GraphTask"
    mode: RunMode
    priority: str
    started_at: float
    device: "DeviceUnit"
    blocks: int = 0                     # slice: its blocks; whole: the grid
    counter_before: int = 0             # PTB: tasks done before this launch
    preempt_requested: bool = False
    contended: bool = False             # high-priority work overlapped it (measurement unusable)
    sms: int = 0                        # SMs it occupies, for the activity account (sm_activity.py)
    predicted_s: float | None = None    # whole best-effort: expected device time (whole_durations.py)
    _view: RunningUnit | None = None

    def view(self) -> RunningUnit:
        """The policy's picture of this unit (rebuilt only when it changes:
        views are taken at every scheduling decision)."""
        if self._view is None:
            stream = self.task.stream
            self._view = RunningUnit(self.unit_id, self.task.kernel_id, stream.client.client_id,
                                     stream.key, self.priority, self.mode,
                                     self.mode is PTB and not self.preempt_requested, self.started_at,
                                     self.predicted_s)
        return self._view

    def request_preempt(self) -> None:
        self.preempt_requested = True
        self._view = None


class UnitsInFlight:
    """The units on the device, with what the policy and the profiler need to
    know of them kept current as units start and end (the policy's views are
    taken at every scheduling decision)."""

    def __init__(self) -> None:
        self.units: dict[int, Unit] = {}
        self.views: dict[int, RunningUnit] = {}
        self.preemptible = 0                # PTB launches running and not yet asked to stop
        self._high = 0                      # high-priority units
        self._best_effort: dict[int, Unit] = {}    # marked contended when high-priority work starts

    def add(self, unit: Unit) -> None:
        if unit.priority == HIGH:
            self._high += 1
            for other in self._best_effort.values():
                other.contended = True
        else:
            unit.contended = self._high > 0
            self._best_effort[unit.unit_id] = unit
        self.units[unit.unit_id] = unit
        self.views[unit.unit_id] = unit.view()
        if unit.mode is PTB:
            self.preemptible += 1

    def request_preempt(self, unit: Unit) -> None:
        unit.request_preempt()
        self.preemptible -= 1
        self.views[unit.unit_id] = unit.view()

    def remove(self, unit: Unit) -> None:
        del self.units[unit.unit_id]
        del self.views[unit.unit_id]
        if unit.mode is PTB and not unit.preempt_requested:
            self.preemptible -= 1
        if unit.priority == HIGH:
            self._high -= 1
        else:
            del self._best_effort[unit.unit_id]


@dataclass(eq=False)
class StreamState:
    client: "ClientState"
    key: Hashable
    backend_stream: Any
    lane: "Lane"                        # the device layer's side of the stream
    queue: collections.deque = field(default_factory=collections.deque)
    inflight: int = 0                   # units launched and not yet completed
    errors: collections.deque[DeviceError] = field(default_factory=collections.deque)
    # Backend streams are destroyed only once no thread is synchronizing them: on a
    # GPU a destroyed CUstream is an invalid handle (seen: a MemFree's drain and a
    # StreamDestroy's release of the same stream, on two threads).
    backend_syncs: int = 0              # threads inside backend.stream_synchronize on it
    released: bool = False              # its backend streams are destroyed, or about to be
    # Kernels launched on it, and how many of them a synchronization that found no
    # error has confirmed ended well: which jobs may have caused a device fault.
    kernels_launched: int = 0
    kernels_confirmed: int = 0

    @property
    def drained(self) -> bool:
        """Everything submitted has gone to the device and every tracked unit ended."""
        return not self.queue and self.inflight == 0

    def confirm(self, launched: int) -> None:
        """A synchronization that began after `launched` kernels found no error."""
        self.kernels_confirmed = max(self.kernels_confirmed, launched)


@dataclass(eq=False)
class ClientState:
    client_id: Hashable
    priority: str
    sm_percent: float | None            # the share it asked for (None: the whole device)
    sm_cap: int | None = None           # SMs granted for its current share, passed on its launches
    streams: dict[Hashable, StreamState] = field(default_factory=dict)
    events: list[ExecutorEvent] = field(default_factory=list)
    removing: bool = False
    paused: bool = False                # its queued work is held (pause_client)
    kernels: int = 0                    # started
    kernels_completed: int = 0
    graph_launches: int = 0             # graph replays that ran as one unit
    graph_nodes_replayed: int = 0       # kernels of graph replays that ran node by node
    # Best-effort kernels (kernel keys) the planner settled on running whole: the
    # C++ data plane may release these itself (tally/scheduler/fast_lane.py).
    whole_keys: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.view = ClientView(self.client_id, self.priority, self.sm_percent)

    def set_share(self, sm_percent: float | None, sm_cap: int | None) -> None:
        self.sm_percent, self.sm_cap = sm_percent, sm_cap
        self.view = ClientView(self.client_id, self.priority, sm_percent)
