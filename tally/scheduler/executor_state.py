"""The executor's bookkeeping: clients, their streams and queues, events,
kernels being run in pieces, and the units in flight on the device.

Plain data; every field is read and written under the executor's lock.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Hashable

from ptx_passes.launch_plan import SliceLaunch, total_blocks
from tally.protocol.errors import DeviceError
from tally.scheduler.ops import Launch, Op
from tally.scheduler.policy import ClientView, RunningUnit
from tally.scheduler.profiler import RunConfig, kernel_key
from tally.scheduler.variants import PTBVariant, SlicedVariant


class ExecutorEvent:
    """A client's event. Each EventRecord gets its own backend event when it
    reaches the device, because a record can sit in a held queue while the
    client records the same event again elsewhere: a StreamWaitEvent must wait
    for the record that preceded it (CUDA semantics), not for a later one."""

    def __init__(self, client_id: Hashable, timing: bool):
        self.client_id = client_id
        self.timing = timing
        self.submitted_seq = 0                   # records submitted so far
        self.records: dict[int, Any] = {}        # seq -> backend event, once dispatched
        self.waiters: collections.Counter = collections.Counter()   # seq -> queued waits
        self.destroyed = False
        self.shared = False      # an interprocess event other clients may record and wait on


@dataclass(eq=False)
class OpItem:
    """A non-kernel operation waiting in a queue; `seq` is the event record it
    names (EventRecord: its own number; StreamWaitEvent: the record it waits for)."""

    op: Op
    seq: int = 0
    dispatched: bool = False     # GatedCallback: its callback went to the backend


@dataclass(eq=False)
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
    mode: str | None = None            # None (undecided) | "whole" | "slice" | "ptb"
    config: RunConfig | None = None
    measuring: bool = False
    plan_args: dict = field(default_factory=dict)   # what the profiler was asked with
    sliced: SlicedVariant | None = None
    slices: list[SliceLaunch] = field(default_factory=list)
    next_slice: int = 0
    ptb: PTBVariant | None = None
    workers: int = 0
    ptb_started: bool = False
    counter: int = 0                   # PTB tasks completed so far
    unit: "Unit | None" = None

    @property
    def total_blocks(self) -> int:
        return total_blocks(self.op.grid)

    @property
    def key(self) -> str:
        op = self.op
        return kernel_key(op.function.name, op.grid, op.block, op.shared_bytes)

    @property
    def partially_done(self) -> bool:
        return self.next_slice > 0 or self.ptb_started


@dataclass(eq=False, slots=True)
class Unit:
    """One launch the executor is tracking: whole kernel, slice, or PTB launch."""

    unit_id: int
    task: KernelTask
    kind: str                           # "whole" | "slice" | "ptb"
    priority: str
    started_at: float
    blocks: int = 0                     # slice: its blocks; whole: the grid
    counter_before: int = 0             # PTB: tasks done before this launch
    start_event: Any = None             # timing events while measuring
    end_event: Any = None
    preempt_requested: bool = False
    contended: bool = False             # high-priority work overlapped it (measurement unusable)
    _view: RunningUnit | None = None

    def view(self) -> RunningUnit:
        """The policy's picture of this unit (rebuilt only when it changes:
        views are taken at every scheduling decision)."""
        if self._view is None:
            stream = self.task.stream
            self._view = RunningUnit(self.unit_id, self.task.kernel_id, stream.client.client_id,
                                     stream.key, self.priority, self.kind,
                                     self.kind == "ptb" and not self.preempt_requested, self.started_at)
        return self._view

    def request_preempt(self) -> None:
        self.preempt_requested = True
        self._view = None


@dataclass(eq=False)
class StreamState:
    client: "ClientState"
    key: Hashable
    backend_stream: Any
    notify_stream: Any                  # completion callbacks, off the work stream
    queue: collections.deque = field(default_factory=collections.deque)
    inflight: int = 0                   # units launched and not yet completed
    # Completion batching (device_units.py): whole kernels launched while another
    # unit's completion is being watched ride on the next watched completion.
    watched: "Unit | None" = None       # the newest unit with its own completion callback
    riders: collections.deque = field(default_factory=collections.deque)   # units without one
    errors: collections.deque[DeviceError] = field(default_factory=collections.deque)
    ptb_state: int | None = None        # device address of the PTB state buffer
    # Backend streams are destroyed only once no thread is synchronizing them: on a
    # GPU a destroyed CUstream is an invalid handle (seen: a MemFree's drain and a
    # StreamDestroy's release of the same stream, on two threads).
    backend_syncs: int = 0              # threads inside backend.stream_synchronize on it
    released: bool = False              # its backend streams are destroyed, or about to be
    readback: memoryview | None = None   # registered host slot the PTB counter is copied into

    @property
    def drained(self) -> bool:
        """Everything submitted has gone to the device and every tracked unit ended."""
        return not self.queue and self.inflight == 0


@dataclass(eq=False)
class ClientState:
    client_id: Hashable
    priority: str
    sm_percent: float | None
    streams: dict[Hashable, StreamState] = field(default_factory=dict)
    events: list[ExecutorEvent] = field(default_factory=list)
    removing: bool = False
    kernels: int = 0                    # started
    kernels_completed: int = 0

    def __post_init__(self) -> None:
        self.view = ClientView(self.client_id, self.priority, self.sm_percent)
