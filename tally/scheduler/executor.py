"""The stream executor: every stream-ordered operation of every client goes
through here on its way to the device backend.

Per (client, stream) the executor keeps a FIFO queue and a backend stream.
Non-kernel operations at the head of a queue go to the backend at once (stream
order on the backend keeps them behind earlier work). A kernel at the head
waits for the policy (tally.scheduler.policy), which starts it whole or
transformed (slices / PTB, configuration from the profiler); everything behind
a held kernel stays queued, so stream order and every synchronization are
exactly those the job asked for.

The executor learns that a launch completed through the backend itself: after
each tracked launch it records an event on the work stream and, on a companion
"notify" stream, waits for that event and runs a host callback. The work
stream is never blocked by the callback, and the mechanism is the same on
every backend. Transformed kernels follow ptx_passes.launch_plan; the PTB
state buffer is written only with small host-to-device copies on one
high-priority control stream: a copy engine, not an SM, does them, so a
preempt flag cannot be stuck behind the very workers it has to stop, and the
writes land in the order they were issued.

Thread-safety: every public method may be called from any thread; the
executor never holds its lock while blocking on the backend. With the sim's
discrete clock, "blocking" means processing simulated events on the caller's
thread (SimClock.wait_for).
"""
from __future__ import annotations

import itertools
import logging
import threading
from typing import Hashable

from ptx_passes.launch_plan import PTB_FLAG_OFFSET, PTB_STATE_BYTES, SliceLaunch
from tally.backends.base import CUDA_ERROR_NOT_READY, DeviceBackend, DeviceError
from tally.scheduler.clock import Cancellable, Clock, WallClock
from tally.scheduler.executor_state import (ClientState, ExecutorEvent, KernelTask, OpItem,
                                            StreamState, Unit)
from tally.scheduler.ops import (EventRecord, HostCallback, Launch, MemcpyDtoD, MemcpyDtoH,
                                 MemcpyHtoD, Memset, Op, StreamWaitEvent, validate_op)
from tally.scheduler.policy import (HIGH, HIGH_STREAM_PRIORITY, PRIORITIES, PolicyError, Schedule,
                                    SchedulerView, SchedulingPolicy, WaitingKernel)
from tally.scheduler.profiler import TransparentProfiler
from tally.scheduler.variants import VariantProvider

log = logging.getLogger(__name__)

BE_TRANSFORMS = ("auto", "slice", "ptb", "none")
_ZERO_STATE = bytes(PTB_STATE_BYTES)
_FLAG_SET = (1).to_bytes(4, "little")
_FLAG_CLEAR = bytes(4)
COUNTER_NAMES = ("ops_submitted", "kernels", "kernels_whole", "kernels_sliced", "kernels_ptb",
                 "slice_launches", "ptb_launches", "preemptions", "untransformable")


class StreamExecutor:
    def __init__(self, backend: DeviceBackend, policy: SchedulingPolicy,
                 variants: VariantProvider | None = None,
                 profiler: TransparentProfiler | None = None, clock: Clock | None = None, *,
                 be_transform: str = "auto"):
        if be_transform not in BE_TRANSFORMS:
            raise ValueError(f"be_transform must be one of {', '.join(BE_TRANSFORMS)}, got {be_transform!r}")
        self.backend = backend
        self.policy = policy
        self.variants = variants
        self.profiler = profiler or TransparentProfiler(backend.describe().sm_count)
        self.clock: Clock = clock or WallClock()
        self.be_transform = be_transform
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._clients: dict[Hashable, ClientState] = {}
        self._units: dict[int, Unit] = {}
        self._running_views: dict = {}       # unit id -> RunningUnit, kept current for cheap views
        self._ids = itertools.count(1)
        self._control_stream = None
        self._event_pool: dict[bool, list] = {True: [], False: []}
        self._hp_inflight = 0
        self._preemptible = 0                # PTB launches running and not yet asked to stop
        self._wake: Cancellable | None = None
        self._wake_at: float | None = None
        self._pumping = False
        self._repump = False
        self._closed = False
        self._counters = dict.fromkeys(COUNTER_NAMES, 0)

    # clients ---------------------------------------------------------------------------
    def add_client(self, client_id: Hashable, priority: str = "best-effort",
                   sm_percent: float | None = None) -> None:
        if priority not in PRIORITIES:
            raise ValueError(f"client priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
        if sm_percent is not None and not 0 < sm_percent <= 100:
            raise ValueError(f"sm_percent must be in (0, 100], got {sm_percent}")
        with self._lock:
            if client_id in self._clients:
                raise ValueError(f"client {client_id!r} is already registered")
            self._clients[client_id] = ClientState(client_id, priority, sm_percent)

    def remove_client(self, client_id: Hashable) -> None:
        """Drop the client's queued operations, stop its running PTB kernels, wait
        for what is already on the device, then release its streams, events and
        PTB state. Its pending errors are discarded. Blocks until done."""
        with self._lock:
            client = self._client(client_id)
            client.removing = True
            for stream in client.streams.values():
                for item in stream.queue:
                    if isinstance(item, OpItem) and isinstance(item.op, StreamWaitEvent):
                        item.op.event.waiters[item.seq] -= 1
                stream.queue.clear()
            for unit in list(self._units.values()):
                if unit.task.stream.client is client and unit.kind == "ptb" and not unit.preempt_requested:
                    self._preempt(unit)
            self._pump()
            self.clock.wait_for(self._cond, lambda: all(s.inflight == 0 for s in client.streams.values()))
            del self._clients[client_id]
            streams = list(client.streams.values())
            events = list(client.events)
        for stream in streams:
            for bstream in (stream.backend_stream, stream.notify_stream):
                try:
                    self.backend.stream_synchronize(bstream)
                except DeviceError:
                    pass          # the client is gone; nobody is left to tell
                self.backend.stream_destroy(bstream)
            if stream.ptb_state is not None:
                self.backend.mem_free(stream.ptb_state)
        with self._lock:
            for event in events:
                self._destroy_event(event)
            self._pump()

    # operations ------------------------------------------------------------------------
    def submit(self, client_id: Hashable, stream_key: Hashable, op: Op) -> None:
        """Queue one operation; never waits for the device."""
        validate_op(op)
        with self._lock:
            client = self._client(client_id)
            if client.removing:
                raise ValueError(f"client {client_id!r} is being removed")
            stream = client.streams.get(stream_key) or self._create_stream(client, stream_key)
            now = self.clock.now()
            if isinstance(op, Launch):
                item = KernelTask(next(self._ids), op, stream, now)
            elif isinstance(op, EventRecord):
                self._check_event(op.event, client)
                op.event.submitted_seq += 1
                item = OpItem(op, op.event.submitted_seq)
            elif isinstance(op, StreamWaitEvent):
                self._check_event(op.event, client)
                item = OpItem(op, op.event.submitted_seq)
                if item.seq:
                    op.event.waiters[item.seq] += 1
            else:
                item = OpItem(op)
            self._counters["ops_submitted"] += 1
            stream.queue.append(item)
            if len(stream.queue) > 1:
                return                    # behind a held kernel or a blocked wait
            if isinstance(item, KernelTask):
                item.waiting_since = now
                if self._preemptible == 0 and self.policy.starts_at_once(client.view):
                    self._start(item, transform=False)    # fast path: the policy's answer is known
                    return
            elif not isinstance(item.op, EventRecord) and self._dispatch_op(stream, item):
                stream.queue.popleft()    # fast path: nothing else can change
                return
            self._pump()

    def synchronize_stream(self, client_id: Hashable, stream_key: Hashable) -> None:
        """Block until everything submitted to the stream completed; raise its
        first pending DeviceError (once)."""
        with self._lock:
            stream = self._client(client_id).streams.get(stream_key)
        if stream is not None:
            error = self._synchronize(stream)
            if error is not None:
                raise error

    def synchronize_client(self, client_id: Hashable) -> None:
        """synchronize_stream for every stream of the client; raises the first
        error found (streams in the order they were first used)."""
        with self._lock:
            streams = list(self._client(client_id).streams.values())
        first = None
        for stream in streams:
            error = self._synchronize(stream)
            if error is not None and first is None:
                first = error
            elif error is not None:
                with self._lock:
                    stream.errors.appendleft(error)   # keep it for a later synchronization
        if first is not None:
            raise first

    def query_stream(self, client_id: Hashable, stream_key: Hashable) -> bool:
        """True when all work submitted to the stream completed; raises (once) a
        pending error like cuStreamQuery."""
        with self._lock:
            stream = self._client(client_id).streams.get(stream_key)
            if stream is None:
                return True
            if stream.errors:
                raise stream.errors.popleft()
            if not stream.drained:
                return False
        return self.backend.stream_query(stream.backend_stream)

    def release_stream(self, client_id: Hashable, stream_key: Hashable) -> None:
        """cuStreamDestroy: waits for the stream's work, then frees its backend
        streams and PTB state. Pending errors of the stream are discarded."""
        with self._lock:
            client = self._client(client_id)
            stream = client.streams.get(stream_key)
        if stream is None:
            return
        self._synchronize(stream)
        with self._lock:
            client.streams.pop(stream_key, None)
        self.backend.stream_destroy(stream.backend_stream)
        self.backend.stream_destroy(stream.notify_stream)
        if stream.ptb_state is not None:
            self.backend.mem_free(stream.ptb_state)

    # events ---------------------------------------------------------------------------------
    def event_create(self, client_id: Hashable, timing: bool = True) -> ExecutorEvent:
        with self._lock:
            client = self._client(client_id)
            event = ExecutorEvent(client_id, timing)
            client.events.append(event)
            return event

    def event_destroy(self, event: ExecutorEvent) -> None:
        with self._lock:
            client = self._clients.get(event.client_id)
            if client is not None and event in client.events:
                client.events.remove(event)
            self._destroy_event(event)

    def event_query(self, event: ExecutorEvent) -> bool:
        with self._lock:
            seq = event.submitted_seq
            if seq == 0:
                return True
            backend_event = event.records.get(seq)
            if backend_event is None:
                return False
        return self.backend.event_query(backend_event)

    def event_synchronize(self, event: ExecutorEvent) -> None:
        with self._lock:
            seq = event.submitted_seq
            if seq == 0:
                return
            self.clock.wait_for(self._cond, lambda: seq in event.records or event.destroyed)
            backend_event = event.records.get(seq)
        if backend_event is not None:
            self.backend.event_synchronize(backend_event)

    def event_elapsed_ms(self, start: ExecutorEvent, end: ExecutorEvent) -> float:
        with self._lock:
            pair = [ev.records.get(ev.submitted_seq) for ev in (start, end)]
        if None in pair:
            raise DeviceError(CUDA_ERROR_NOT_READY, "an event has not been recorded on the device yet")
        return self.backend.event_elapsed_ms(*pair)

    # status ---------------------------------------------------------------------------------
    def counters(self) -> dict:
        """Totals for `tally-server status`: operations queued now, kernels by how
        they ran, slice and PTB launches, preemptions; and per client."""
        with self._lock:
            out = dict(self._counters)
            out["ops_queued"] = sum(len(s.queue) for c in self._clients.values() for s in c.streams.values())
            out["units_in_flight"] = len(self._units)
            out["clients"] = {c.client_id: {"priority": c.priority, "kernels": c.kernels,
                                            "kernels_completed": c.kernels_completed,
                                            "ops_queued": sum(len(s.queue) for s in c.streams.values())}
                              for c in self._clients.values()}
            return out

    def close(self) -> None:
        for client_id in list(self._clients):
            self.remove_client(client_id)
        with self._lock:
            self._closed = True
            if self._wake is not None:
                self._wake.cancel()
            control, self._control_stream = self._control_stream, None
        if control is not None:
            self.backend.stream_synchronize(control)
            self.backend.stream_destroy(control)

    # internals: registry ----------------------------------------------------------------------
    def _client(self, client_id: Hashable) -> ClientState:
        client = self._clients.get(client_id)
        if client is None:
            raise ValueError(f"unknown client {client_id!r}: call add_client first")
        return client

    def _create_stream(self, client: ClientState, key: Hashable) -> StreamState:
        priority = self.policy.stream_priority(client.view)
        stream = StreamState(client, key, self.backend.stream_create(priority),
                             self.backend.stream_create(priority))
        client.streams[key] = stream
        return stream

    def _check_event(self, event: ExecutorEvent, client: ClientState) -> None:
        if not isinstance(event, ExecutorEvent) or event.destroyed:
            raise ValueError("event was destroyed or was not created by this executor")
        if event.client_id != client.client_id:
            raise ValueError(f"event belongs to client {event.client_id!r}, not {client.client_id!r}")

    def _destroy_event(self, event: ExecutorEvent) -> None:
        event.destroyed = True
        for backend_event in event.records.values():
            self.backend.event_destroy(backend_event)
        event.records.clear()
        self._cond.notify_all()

    def _pooled_event(self, timing: bool):
        pool = self._event_pool[timing]
        return pool.pop() if pool else self.backend.event_create(timing)

    def _synchronize(self, stream: StreamState) -> DeviceError | None:
        """Wait for the stream; return its first pending error (taken off it)."""
        with self._lock:
            self.clock.wait_for(self._cond, lambda: stream.drained or stream.client.removing)
        backend_error = None
        try:
            self.backend.stream_synchronize(stream.backend_stream)
        except DeviceError as e:
            backend_error = e
        with self._lock:
            if backend_error is not None:
                stream.errors.append(backend_error)
            return stream.errors.popleft() if stream.errors else None

    # internals: dispatch ------------------------------------------------------------------
    def _pump(self) -> None:
        """Send what may go to the device now. Called with the lock held after
        every change."""
        if self._pumping:
            self._repump = True
            return
        self._pumping = True
        try:
            while True:
                self._repump = False
                for client in list(self._clients.values()):
                    for stream in list(client.streams.values()):
                        self._drain_head(stream)
                view, waiting = self._view()
                if not waiting:
                    break                 # nothing to decide (policies are asked only then)
                schedule = self.policy.schedule(view)
                changed = self._apply(schedule, waiting)
                self._arm_wake(schedule.wake_at)
                if not changed and not self._repump:
                    break
        finally:
            self._pumping = False
        self._cond.notify_all()

    def _drain_head(self, stream: StreamState) -> None:
        while stream.queue:
            item = stream.queue[0]
            if isinstance(item, KernelTask):
                if item.waiting_since is None:
                    item.waiting_since = self.clock.now()
                return
            if not self._dispatch_op(stream, item):
                return
            stream.queue.popleft()

    def _dispatch_op(self, stream: StreamState, item: OpItem) -> bool:
        """Hand a non-kernel operation to the backend; False if it must wait
        (a StreamWaitEvent whose record is still queued elsewhere)."""
        op, b, bs = item.op, self.backend, stream.backend_stream
        try:
            if isinstance(op, MemcpyHtoD):
                b.memcpy_htod_async(op.dst, memoryview(op.data), bs)
            elif isinstance(op, MemcpyDtoH):
                b.memcpy_dtoh_async(op.dst, op.src, bs)
            elif isinstance(op, MemcpyDtoD):
                b.memcpy_dtod_async(op.dst, op.src, op.nbytes, bs)
            elif isinstance(op, Memset):
                b.memset_async(op.dst, op.value, op.element_size, op.count, bs)
            elif isinstance(op, HostCallback):
                b.host_callback(bs, op.fn)
            elif isinstance(op, EventRecord):
                event = op.event
                if not event.destroyed:
                    backend_event = b.event_create(event.timing)
                    b.event_record(backend_event, bs)
                    event.records[item.seq] = backend_event
                    self._prune_records(event)
                    self._cond.notify_all()
            elif isinstance(op, StreamWaitEvent):
                event = op.event
                if item.seq and not event.destroyed:
                    backend_event = event.records.get(item.seq)
                    if backend_event is None:
                        return False
                    b.stream_wait_event(bs, backend_event)
                    event.waiters[item.seq] -= 1
                    self._prune_records(event)
        except DeviceError as e:
            stream.errors.append(e)       # asynchronous error: reported at the next sync
        return True

    def _prune_records(self, event: ExecutorEvent) -> None:
        """Backend events of superseded records that no queued wait needs."""
        for seq in [s for s in event.records if s != event.submitted_seq and event.waiters[s] <= 0]:
            self.backend.event_destroy(event.records.pop(seq))
            del event.waiters[seq]

    def _view(self) -> tuple[SchedulerView, dict[int, KernelTask]]:
        waiting: dict[int, KernelTask] = {}
        views = []
        for client in self._clients.values():
            if client.removing:
                continue
            for stream in client.streams.values():
                if stream.queue and isinstance(stream.queue[0], KernelTask) and stream.queue[0].unit is None:
                    task = stream.queue[0]
                    waiting[task.kernel_id] = task
                    views.append(WaitingKernel(task.kernel_id, client.client_id, stream.key,
                                               client.priority, task.op.function.name,
                                               task.waiting_since, task.partially_done,
                                               stream.inflight > 0))
        view = SchedulerView(self.clock.now(),
                             tuple(c.view for c in self._clients.values() if not c.removing),
                             tuple(views), tuple(self._running_views.values()))
        return view, waiting

    def _apply(self, schedule: Schedule, waiting: dict[int, KernelTask]) -> bool:
        changed = False
        for start in schedule.start:
            task = waiting.pop(start.kernel_id, None)
            if task is None:
                raise PolicyError(f"policy {self.policy.name!r} started kernel {start.kernel_id}, "
                                  "which is not waiting (or was started twice)")
            self._start(task, start.transform)
            changed = True
        for unit_id in schedule.preempt:
            unit = self._units.get(unit_id)
            if unit is None or unit.kind != "ptb" or unit.preempt_requested:
                raise PolicyError(f"policy {self.policy.name!r} preempted unit {unit_id}, "
                                  "which is not a running, preemptible PTB launch")
            self._preempt(unit)
            changed = True
        return changed

    def _arm_wake(self, at: float | None) -> None:
        if at == self._wake_at:
            return
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        self._wake_at = at
        if at is not None:
            self._wake = self.clock.call_at(at, self._on_wake)

    def _on_wake(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._wake = None
            self._wake_at = None
            self._pump()

    # internals: kernels -------------------------------------------------------------------------
    def _start(self, task: KernelTask, transform: bool) -> None:
        if task.mode is None:
            task.stream.client.kernels += 1
            self._counters["kernels"] += 1
            if transform:
                self._plan(task)
            else:
                task.mode = "whole"
            self._counters[{"whole": "kernels_whole", "slice": "kernels_sliced",
                            "ptb": "kernels_ptb"}[task.mode]] += 1
        stream, op = task.stream, task.op
        if task.mode == "whole":
            stream.queue.popleft()
            self._launch(task, "whole", op.function, op.grid, op.params, task.total_blocks)
        elif task.mode == "slice":
            piece = task.slices[task.next_slice]
            task.next_slice += 1
            if task.next_slice == len(task.slices):
                stream.queue.popleft()      # the rest of the stream may follow the last slice
            self._counters["slice_launches"] += 1
            params = task.sliced.plan.params(op.params, op.grid, piece.block_offset)
            self._launch(task, "slice", task.sliced.function, (piece.count, 1, 1), params, piece.count)
        else:
            self._launch_ptb(task)

    def _plan(self, task: KernelTask) -> None:
        fn = task.op.function
        sliced = ptb = None
        if self.variants is not None:
            if self.be_transform in ("auto", "slice"):
                sliced = self.variants.sliced(fn)
            if self.be_transform in ("auto", "ptb"):
                ptb = self.variants.ptb(fn)
        if sliced is None and ptb is None:
            if self.be_transform != "none":
                self._counters["untransformable"] += 1
            task.mode, task.config = "whole", None
            return
        sm_percent = task.stream.client.sm_percent
        max_workers = None
        if sm_percent is not None and sm_percent < 100:
            max_workers = max(1, int(self.profiler.sm_count * sm_percent / 100))
        task.plan_args = dict(can_slice=sliced is not None, can_ptb=ptb is not None, max_workers=max_workers)
        config, task.measuring = self.profiler.plan(task.key, task.total_blocks, **task.plan_args)
        task.config = config
        if config.kind == "slice":
            task.mode, task.sliced = "slice", sliced
            task.slices = sliced.plan.slices(task.op.grid, -(-task.total_blocks // config.size))
        elif config.kind == "ptb":
            task.mode, task.ptb, task.workers = "ptb", ptb, config.size
        else:
            task.mode = "whole"

    def _reslice(self, task: KernelTask) -> None:
        """A slice configuration is measured as soon as it has enough slices,
        not after the whole kernel: the rest of the kernel moves on to the next
        candidate (if that is a slicing too) or to the chosen slicing."""
        if not self.profiler.is_measured(task.key, task.config):
            return
        config, measuring = self.profiler.plan(task.key, task.total_blocks, **task.plan_args)
        if config.kind != "slice":
            task.measuring = False      # finish this kernel as it is; the next one uses the answer
            return
        task.config, task.measuring = config, measuring
        start, total = task.slices[task.next_slice].block_offset, task.total_blocks
        task.slices[task.next_slice:] = [SliceLaunch(b, min(config.size, total - b))
                                         for b in range(start, total, config.size)]

    def _launch_ptb(self, task: KernelTask) -> None:
        """Every write to a PTB state buffer (reset, clear, set) goes through the
        one control stream, so they land in the order the executor issued them:
        a preempt flag set right after a resume can never be overwritten by that
        resume's clear still waiting behind other work on the job's stream. The
        launch waits for its reset / clear with an event."""
        stream, b = task.stream, self.backend
        control = self._control()
        if stream.ptb_state is None:
            stream.ptb_state = b.mem_alloc(PTB_STATE_BYTES)
        if not task.ptb_started:
            b.memcpy_htod_async(stream.ptb_state, memoryview(_ZERO_STATE), control)
            task.ptb_started = True
        else:
            b.memcpy_htod_async(stream.ptb_state + PTB_FLAG_OFFSET, memoryview(_FLAG_CLEAR), control)
        state_ready = self._pooled_event(False)
        b.event_record(state_ready, control)
        b.stream_wait_event(stream.backend_stream, state_ready)
        self._event_pool[False].append(state_ready)      # the wait captured it
        self._counters["ptb_launches"] += 1
        params = task.ptb.plan.params(task.op.params, task.op.grid, stream.ptb_state)
        self._launch(task, "ptb", task.ptb.function, (task.workers, 1, 1), params, 0)

    def _control(self):
        if self._control_stream is None:
            self._control_stream = self.backend.stream_create(HIGH_STREAM_PRIORITY)
        return self._control_stream

    def _launch(self, task: KernelTask, kind: str, fn, grid, params: bytes, blocks: int) -> None:
        stream, b, bs = task.stream, self.backend, task.stream.backend_stream
        priority = stream.client.priority
        measuring = task.measuring and task.config is not None
        unit = Unit(next(self._ids), task, kind, priority, self.clock.now(), blocks=blocks,
                    counter_before=task.counter)
        if measuring:
            unit.start_event = self._pooled_event(True)
            b.event_record(unit.start_event, bs)
        try:
            b.launch(fn, grid, task.op.block, task.op.shared_bytes, bs, params)
        except DeviceError as e:
            stream.errors.append(e)
            if stream.queue and stream.queue[0] is task:
                stream.queue.popleft()
            if unit.start_event is not None:
                self._event_pool[True].append(unit.start_event)
            return
        if kind == "ptb":
            b.memcpy_dtoh_async(memoryview(stream.readback), stream.ptb_state, bs)
        unit.end_event = self._pooled_event(measuring)
        b.event_record(unit.end_event, bs)
        b.stream_wait_event(stream.notify_stream, unit.end_event)
        b.host_callback(stream.notify_stream, lambda: self._unit_done(unit))
        if kind != "whole":
            task.unit = unit
        if priority == HIGH:
            self._hp_inflight += 1
            for other in self._units.values():
                if other.priority != HIGH:
                    other.contended = True
        else:
            unit.contended = self._hp_inflight > 0
        self._units[unit.unit_id] = unit
        self._running_views[unit.unit_id] = unit.view()
        if kind == "ptb":
            self._preemptible += 1
        stream.inflight += 1

    def _preempt(self, unit: Unit) -> None:
        stream = unit.task.stream
        unit.request_preempt()
        self._preemptible -= 1
        self._running_views[unit.unit_id] = unit.view()
        self.backend.memcpy_htod_async(stream.ptb_state + PTB_FLAG_OFFSET, memoryview(_FLAG_SET),
                                       self._control())
        self._counters["preemptions"] += 1

    def _unit_done(self, unit: Unit) -> None:
        """Backend callback: a tracked launch completed on the device."""
        with self._lock:
            now = self.clock.now()
            task, stream = unit.task, unit.task.stream
            del self._units[unit.unit_id]
            del self._running_views[unit.unit_id]
            if unit.kind == "ptb" and not unit.preempt_requested:
                self._preemptible -= 1
            stream.inflight -= 1
            if unit.priority == HIGH:
                self._hp_inflight -= 1
            seconds = None
            if unit.start_event is not None:
                try:
                    seconds = self.backend.event_elapsed_ms(unit.start_event, unit.end_event) / 1000
                except DeviceError:
                    pass
                self._event_pool[True].append(unit.start_event)
            self._event_pool[unit.start_event is not None].append(unit.end_event)
            failed = False
            if unit.kind != "whole" and not stream.client.removing:
                try:
                    self.backend.stream_query(stream.backend_stream)
                except DeviceError as e:
                    stream.errors.append(e)
                    failed = True
            blocks = unit.blocks
            if unit.kind == "ptb":
                counter = min(int.from_bytes(stream.readback[:4], "little"), task.total_blocks)
                blocks = counter - unit.counter_before
                task.counter = counter
            finished = unit.kind == "whole" or failed or (
                task.counter >= task.total_blocks if unit.kind == "ptb" else task.next_slice == len(task.slices))
            if finished:
                stream.client.kernels_completed += 1
            if unit.kind != "whole":
                task.unit = None
                if finished and stream.queue and stream.queue[0] is task:
                    stream.queue.popleft()
                elif not finished:
                    task.waiting_since = now
            if task.measuring and seconds is not None and task.config is not None:
                self.profiler.observe(task.key, task.config, device_seconds=seconds,
                                      cycle_seconds=now - unit.started_at, blocks=blocks,
                                      clean=not unit.contended)
                if unit.kind == "slice" and not finished:
                    self._reslice(task)
            self.policy.on_unit_finished(unit.view(), now)
            if not self._closed:
                self._pump()
            self._cond.notify_all()


def make_executor(backend: DeviceBackend, policy_name: str, **kwargs) -> StreamExecutor:
    """Convenience for the server: a policy by name plus the executor."""
    from tally.scheduler.policies import make_policy
    policy_options = kwargs.pop("policy_options", {})
    return StreamExecutor(backend, make_policy(policy_name, **policy_options), **kwargs)


