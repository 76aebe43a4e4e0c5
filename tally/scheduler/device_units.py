"""Kernel work on the device: launching what the executor asks for (a whole
kernel, one slice, a PTB launch that starts or resumes a kernel), asking a PTB
launch to stop, and learning that each launch completed and how it went.

The executor decides what runs and keeps every queue and record; it hands this
layer a launch and gets back a DeviceUnit, and when a DeviceUnit completes it
gets back the outcomes to apply (device time, a stream error, PTB progress).
This layer keeps only what the device needs: per client stream a Lane (the
notify stream its completions are watched from, the PTB state buffer), the
control stream, pools of events and registered host memory.

Completion comes from the backend itself: after a launch an event is
recorded on the work stream and, on a companion "notify" stream, a host
callback waits for it. The work stream is never blocked by the callback, and
the mechanism is the same on every backend. The callback only hands the unit
to the clock's worker (Clock.call_soon), which passes it to the executor's
`on_done`: handling a completion launches more work, and CUDA forbids driver
calls inside a host function.

Watching every kernel that way costs a callback and a thread hand-off per
launch, which made the executor the bottleneck of jobs that launch many short
kernels. So every launch records its end event, but a whole kernel that needs
no timing, launched while another unit of its stream is being watched, gets no
callback of its own: it "rides" on the stream's watched unit. Stream order
makes that exact: when a watched unit completes, every rider launched before
it has completed too; if riders launched after it are still out, the newest
of them is watched then, through the end event it recorded at its launch (so
its completion is known when it completes, not after work queued behind it).
Slices, PTB launches and timed kernels are always watched themselves.

Transformed kernels follow ptx_passes.launch_plan. The PTB state buffer is
written only with small host-to-device copies on one high-priority control
stream: a copy engine, not an SM, does them, so a preempt flag cannot be stuck
behind the very workers it has to stop, and the writes land in the order they
were issued (a flag set right after a resume is never undone by that resume's
clear). Each launch waits for its state write with an event.

A high-priority kernel that a job's C++ data plane issues stops the PTB
launches on the device itself (docs/data-plane.md, "Preemption from the plane"):
each PTB launch's flag is pinned on the plane's board (`board`, the executor's
fast lanes) once its reset or clear is queued on the control stream, and taken
off when the launch completes, when the executor preempts it, or when its lane
goes. A flag the plane set counts as this layer's preemption.

Everything here runs under the executor's lock, except close_lane.
"""
from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ptx_passes.launch_plan import PTB_FLAG_OFFSET, PTB_STATE_BYTES
from tally.backends.base import DeviceBackend, Dim3, Function
from tally.protocol.errors import DeviceError
from tally.scheduler.clock import Clock
from tally.scheduler.pinned_pool import PinnedPool
from tally.scheduler.policy import HIGH_STREAM_PRIORITY
from tally.scheduler.run_mode import PTB, WHOLE, RunMode

_ZERO_STATE = bytes(PTB_STATE_BYTES)
_FLAG_SET = (1).to_bytes(4, "little")
_FLAG_CLEAR = bytes(4)


def _flag(ptb_state: int) -> int:
    """The device address of a PTB state's preempt flag."""
    return ptb_state + PTB_FLAG_OFFSET


class PreemptBoard(Protocol):
    """Where PTB launches are pinned for the C++ data plane to stop (fast_lane.py)."""

    def pin_preemptible(self, flag_address: int, control_stream: Any) -> None: ...

    def unpin_preemptible(self, flag_address: int) -> bool: ...    # True: the plane set the flag

    def unpin_all_preemptible(self) -> None: ...


@dataclass(eq=False, slots=True)
class Lane:
    """The device side of one client stream."""

    work: Any                           # the backend stream its kernels run on (the executor's)
    notify: Any                         # completion callbacks, off the work stream
    watched: "DeviceUnit | None" = None     # the newest unit with its own completion callback
    riders: collections.deque = field(default_factory=collections.deque)   # units without one
    ptb_state: int | None = None        # device address of the PTB state buffer
    readback: memoryview | None = None  # registered host slot the PTB counter is copied into


@dataclass(eq=False, slots=True)
class DeviceUnit:
    """One launch on the device. The outcome fields are filled in when it completes."""

    unit_id: int
    lane: Lane
    mode: RunMode
    start_event: Any = None             # timing events, for a timed launch
    end_event: Any = None
    # outcomes
    device_seconds: float | None = None     # timed launches whose events could be read
    error: DeviceError | None = None        # what the stream reported after a slice or PTB launch
    ptb_tasks_done: int = 0                 # PTB: the kernel's task counter after this launch
    preempted_by_plane: bool = False        # PTB: a C++ data plane set its flag (a high-priority kernel)


class DeviceUnits:
    def __init__(self, backend: DeviceBackend, clock: Clock, on_done: Callable[[DeviceUnit], None]):
        self.backend = backend
        self.clock = clock
        self._on_done = on_done             # backend thread -> clock's worker -> executor
        self._ids = itertools.count(1)
        self._control_stream = None
        self._event_pool: dict[bool, list] = {True: [], False: []}
        self._readback = PinnedPool(backend)   # PTB counters read back behind each launch
        self.board: PreemptBoard | None = None     # the executor's fast lanes, once it made them

    # lanes ---------------------------------------------------------------------------
    def open_lane(self, work_stream, priority: int) -> Lane:
        """For a client stream whose kernels run on `work_stream` (created, used for the
        stream's other operations and destroyed by the executor)."""
        return Lane(work_stream, self.backend.stream_create(priority))

    def close_lane(self, lane: Lane, *, synchronize: bool) -> None:
        """Once no unit of the lane is on the device: destroy its notify stream and
        free its PTB state. Called without the executor's lock (cuMemFree waits for
        the whole device on a GPU: under the lock it would hold every job that long)."""
        if synchronize:
            try:
                self.backend.stream_synchronize(lane.notify)
            except DeviceError:
                pass          # nobody is left to tell
        self.backend.stream_destroy(lane.notify)
        ptb_state, lane.ptb_state = lane.ptb_state, None
        if ptb_state is not None and self.board is not None:
            self.board.unpin_preemptible(_flag(ptb_state))   # before the memory goes
        if lane.readback is not None:
            self._readback.give(lane.readback)
            lane.readback = None
        if ptb_state is not None:
            self.backend.mem_free(ptb_state)

    # launches ------------------------------------------------------------------------
    def launch(self, lane: Lane, mode: RunMode, fn: Function, grid: Dim3, block: Dim3, shared_bytes: int,
               params: bytes, *, timed: bool, sm_cap: int | None = None,
               cluster: Dim3 | None = None, cooperative: bool = False) -> DeviceUnit:
        """Launch on the lane's work stream, on at most `sm_cap` SMs (None: all),
        cooperatively (every block resident at once) when asked; raises the
        backend's DeviceError when the launch itself fails (nothing is then left on
        the device)."""
        b, work = self.backend, lane.work
        unit = DeviceUnit(next(self._ids), lane, mode)
        if timed:
            unit.start_event = self._pooled_event(True)
            b.event_record(unit.start_event, work)
        try:
            # Only what the launch asks is passed: a backend is asked for clusters or a
            # cooperative launch only when a launch needs one.
            asked = {}
            if cluster is not None:
                asked["cluster"] = cluster
            if cooperative:
                asked["cooperative"] = True
            b.launch(fn, grid, block, shared_bytes, work, params, sm_cap=sm_cap, **asked)
        except DeviceError:
            if unit.start_event is not None:
                self._event_pool[True].append(unit.start_event)
            raise
        if mode is PTB:
            b.memcpy_dtoh_async(lane.readback, lane.ptb_state, work)
        self._follow(unit, timed)
        return unit

    def launch_graph(self, lane: Lane, graph: object, *, sm_cap: int | None = None) -> DeviceUnit:
        """Launch a backend graph (DeviceBackend.graph_create's) on the lane's work
        stream as one whole unit; watched, or riding, as a whole kernel is."""
        unit = DeviceUnit(next(self._ids), lane, WHOLE)
        self.backend.graph_launch(graph, lane.work, sm_cap=sm_cap)
        self._follow(unit, timed=False)
        return unit

    def _follow(self, unit: DeviceUnit, timed: bool) -> None:
        """After a launch: record its end event and watch it, or let it ride on the
        lane's watched unit (a whole, untimed launch behind one)."""
        lane = unit.lane
        unit.end_event = self._pooled_event(timed)
        self.backend.event_record(unit.end_event, lane.work)
        if unit.mode is WHOLE and not timed and lane.watched is not None:
            lane.riders.append(unit)
        else:
            self._watch(unit)

    def prepare_ptb(self, lane: Lane, *, resume: bool) -> int | None:
        """Before a PTB launch on the lane: reset its state (a kernel's first launch)
        or clear its preempt flag (resume). The state's device address to pass the
        kernel, or None when there is no memory for it (the caller then runs the
        kernel whole: still correct, only not preemptible).

        Every write to a PTB state buffer (reset, clear, set) goes through the
        one control stream, so they land in the order they were issued: a preempt
        flag set right after a resume can never be overwritten by that resume's
        clear still waiting behind other work on the job's stream. The launch
        waits for its reset / clear with an event."""
        b, control = self.backend, self._control()
        if lane.ptb_state is None:
            try:
                if lane.readback is None:
                    lane.readback = self._readback.take(8)
                lane.ptb_state = b.mem_alloc(PTB_STATE_BYTES)
            except DeviceError:
                return None
        if resume:
            b.memcpy_htod_async(_flag(lane.ptb_state), memoryview(_FLAG_CLEAR), control)
        else:
            b.memcpy_htod_async(lane.ptb_state, memoryview(_ZERO_STATE), control)
        state_ready = self._pooled_event(False)
        b.event_record(state_ready, control)
        b.stream_wait_event(lane.work, state_ready)
        self._event_pool[False].append(state_ready)      # the wait captured it
        if self.board is not None:
            # after the reset / clear is queued: a plane's set lands behind it
            self.board.pin_preemptible(_flag(lane.ptb_state), control)
        return lane.ptb_state

    def unpin_ptb(self, lane: Lane) -> None:
        """A PTB launch prepared on the lane will not be made after all."""
        if self.board is not None and lane.ptb_state is not None:
            self.board.unpin_preemptible(_flag(lane.ptb_state))

    def preempt(self, unit: DeviceUnit) -> None:
        """Ask a running PTB launch to stop after its workers' current tasks (unless a
        C++ data plane already did)."""
        flag = _flag(unit.lane.ptb_state)
        if self.board is not None and self.board.unpin_preemptible(flag):
            unit.preempted_by_plane = True
            return
        self.backend.memcpy_htod_async(flag, memoryview(_FLAG_SET), self._control())

    # completion ----------------------------------------------------------------------
    def completed(self, unit: DeviceUnit, *, check_stream: bool) -> list[DeviceUnit]:
        """`unit`'s completion callback arrived: the units of its lane that completed
        with it (riders launched before it, oldest first, then `unit`), their outcomes
        filled in. `check_stream`: ask the stream for an error after a slice or PTB
        launch (whole kernels' errors surface at the job's synchronization)."""
        b, lane, pool = self.backend, unit.lane, self._event_pool
        riders = lane.riders
        done = []
        while riders and riders[0].unit_id < unit.unit_id:
            rider = riders.popleft()            # whole and untimed: only its end event to recycle
            pool[False].append(rider.end_event)
            done.append(rider)
        done.append(unit)
        if unit.start_event is not None:
            try:
                unit.device_seconds = b.event_elapsed_ms(unit.start_event, unit.end_event) / 1000
            except DeviceError:
                pass
            pool[True].append(unit.start_event)
        pool[unit.start_event is not None].append(unit.end_event)
        if unit.mode is not WHOLE and check_stream:
            try:
                b.stream_query(lane.work)
            except DeviceError as e:
                unit.error = e
        if unit.mode is PTB:
            unit.ptb_tasks_done = int.from_bytes(lane.readback[:4], "little")
            if self.board is not None and self.board.unpin_preemptible(_flag(lane.ptb_state)):
                unit.preempted_by_plane = True
        if lane.watched is unit:
            # riders launched after it are still out: watch the newest (the others complete with it)
            lane.watched = None
            if riders:
                self._watch(riders.pop())
        return done

    def _watch(self, unit: DeviceUnit) -> None:
        """Give `unit` its own completion callback (see the module docstring)."""
        b, lane = self.backend, unit.lane
        b.stream_wait_event(lane.notify, unit.end_event)
        b.host_callback(lane.notify, lambda: self.clock.call_soon(lambda: self._on_done(unit)))
        lane.watched = unit

    # internals -----------------------------------------------------------------------
    def _pooled_event(self, timing: bool):
        pool = self._event_pool[timing]
        return pool.pop() if pool else self.backend.event_create(timing)

    def _control(self):
        if self._control_stream is None:
            self._control_stream = self.backend.stream_create(HIGH_STREAM_PRIORITY)
        return self._control_stream

    def forget(self) -> None:
        """The context died (a device fault) with every lane's work: drop the control
        stream, the pooled events and the registered readback memory made in it,
        without asking the device (the backend's releases do nothing then)."""
        self._control_stream = None
        self._event_pool = {True: [], False: []}
        if self.board is not None:
            self.board.unpin_all_preemptible()      # their memory went with the context
        self._readback.close()
        self._readback = PinnedPool(self.backend)

    def close(self) -> None:
        control, self._control_stream = self._control_stream, None
        if control is not None:
            self.backend.stream_synchronize(control)
            self.backend.stream_destroy(control)
        self._readback.close()
