"""The stream executor: every stream-ordered operation of every client goes
through here on its way to the device backend.

Per (client, stream) the executor keeps a FIFO queue and a backend stream.
Non-kernel operations at the head of a queue go to the backend at once (stream
order on the backend keeps them behind earlier work); a GatedCallback then keeps
the rest of its queue here until its gate opens. A kernel at the head
waits for the policy (tally.scheduler.policy), which starts it whole or
transformed (slices / PTB, configuration from the profiler); everything behind
a held kernel stays queued, so stream order and every synchronization are
exactly those the job asked for. How a transformed kernel runs comes from
tally.scheduler.kernel_plan; tally.scheduler.device_units launches what the
executor decides and reports back how each launch ended: the executor alone
keeps the queues, the client and stream records and the counters, and applies
those outcomes.

The executor is in five files: this one (submission, synchronization, status and
the dispatch of queued work: view -> the policy's schedule -> apply),
executor_kernels.py (KernelRunner, an object of its own with its dependencies
passed in: starting kernels and graph replays, preempting, applying how a launch
ended), and three mixins of StreamExecutor: executor_clients.py (registering,
pausing and removing jobs, their SM shares), executor_events.py (CUDA events) and
executor_faults.py (device faults, below). A new kind of unit of work is a queued
task in executor_state.py and a way to start it in executor_kernels.py.

Thread-safety: every public method may be called from any thread; the
executor never holds its lock while blocking on the backend. With the sim's
discrete clock, "blocking" means processing simulated events on the caller's
thread (SimClock.wait_for).

Device faults (a GPU's context-wide sticky errors): every error the backend
raises for a client's stream passes through `device_errors`, which the server
sets on such backends (tally/server/device_faults.py) and which answers with the
error to keep. For naming the job that caused a fault the executor counts, per
stream, the kernels launched and those a clean synchronization of the stream has
since confirmed (`suspects`). `abandon` ends all work without the device once
the fault is known, and `forget_device` drops what the device layer made in the
dead context.
"""
from __future__ import annotations

import itertools
import logging
import threading
from typing import Callable, Hashable

from tally.backends.base import DeviceBackend
from tally.protocol.errors import DeviceError
from tally.scheduler.clock import Cancellable, Clock, WallClock
from tally.scheduler.delay_histogram import DelayHistogram
from tally.scheduler.device_units import DeviceUnit, DeviceUnits
from tally.scheduler.executor_clients import ClientControl
from tally.scheduler.executor_events import EventControl
from tally.scheduler.executor_faults import FaultControl
from tally.scheduler.executor_state import (QUEUED_KERNELS, ClientState, GraphTask, KernelTask, OpItem, StreamState,
                                            UnitsInFlight)
from tally.scheduler.fast_lane import FastLanes, LaneChange
from tally.scheduler.executor_kernels import KernelRunner, within_share
from tally.scheduler.graph_units import BackendGraphs
from tally.scheduler.hooks import BestEffortUnit, Hooks
from tally.scheduler.kernel_plan import BE_TRANSFORMS, KernelPlanner
from tally.scheduler.ops import (EventRecord, GatedCallback, GraphReplay, HostCallback, HostGate, Launch, MemcpyDtoD,
                                 MemcpyDtoH, MemcpyHtoD, Memset, Op, StreamAccessPolicy, StreamWaitEvent,
                                 StreamWaitValue, StreamWriteValue, validate_op)
from tally.scheduler.policy import (HIGH, PolicyError, Schedule, SchedulerView,
                                    SchedulingPolicy, WaitingKernel)
from tally.scheduler.profiler import TransparentProfiler, kernel_key
from tally.scheduler.run_mode import PTB
from tally.scheduler.sm_activity import ActivityTotals, SmActivity
from tally.scheduler.value_polls import start_polling
from tally.scheduler.variants import VariantProvider
from tally.scheduler.whole_durations import WholeDurations

__all__ = ["BE_TRANSFORMS", "ClientGone", "StreamExecutor"]

log = logging.getLogger(__name__)

# `tally-server status`'s kernel counters, in the order it shows them
COUNTER_NAMES = ("kernels", "kernels_whole", "kernels_sliced", "kernels_ptb",
                 "slice_launches", "ptb_launches", "preemptions", "untransformable", "kernels_cooperative",
                 "graph_launches", "graph_nodes_replayed", "kernels_batched")


class ClientGone(ValueError):
    """The call names a client that was removed, or is being removed (its job died or
    left): whatever it waited for was dropped, and nobody is left to answer. Callers
    that wait on a client's behalf end quietly on it; a ValueError, as for any
    unknown client."""


class StreamExecutor(ClientControl, EventControl, FaultControl):
    def __init__(self, backend: DeviceBackend, policy: SchedulingPolicy,
                 variants: VariantProvider | None = None,
                 profiler: TransparentProfiler | None = None, clock: Clock | None = None, *,
                 be_transform: str = "auto", hooks: Hooks | None = None, graph_units: bool = True):
        """graph_units: a graph replay the policy starts whole runs as one backend graph
        launch (False: every replay runs node by node, each kernel its own unit)."""
        self.backend = backend
        self.policy = policy
        self.sm_count = backend.describe().sm_count
        self.profiler = profiler or TransparentProfiler(self.sm_count)
        self.clock: Clock = clock or WallClock()
        # The cluster layer's plugins; the executor asks only `gate_best_effort`.
        self.hooks = hooks or Hooks()
        self.device = DeviceUnits(backend, self.clock, on_done=self._unit_done)
        self.graphs = BackendGraphs(backend)
        self.graph_units = graph_units
        self._in_flight = UnitsInFlight()
        self._counters = dict.fromkeys(COUNTER_NAMES, 0)
        # how long high-priority kernels waited here, from the head of their queue to their launch
        self._hp_queueing = DelayHistogram()
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._clients: dict[Hashable, ClientState] = {}
        self._kernel_ids = itertools.count(1)
        self._wake: Cancellable | None = None
        self._wake_at: float | None = None
        self._pumping = False
        self._repump = False
        self._records_dispatched = False
        self._closed = False
        self._ops_submitted = 0
        self._activity = SmActivity(self.sm_count, self.clock.now())
        # How long whole best-effort kernels take: the policy's batches (whole_durations.py).
        self.durations = WholeDurations()
        # Streams whose operations the C++ data plane may issue itself (fast_lane.py).
        self.fast_lanes = FastLanes(backend, self.clock, self._fast_lane_changed, self._activity, self.sm_count)
        self.device.board = self.fast_lanes      # high-priority planes stop PTB launches themselves
        # Starting kernels and applying how they ended (executor_kernels.py).
        self._kernels = KernelRunner(device=self.device, graphs=self.graphs,
                                     planner=KernelPlanner(self.profiler, variants, be_transform),
                                     profiler=self.profiler, clock=self.clock, counters=self._counters,
                                     in_flight=self._in_flight, activity=self._activity, fast_lanes=self.fast_lanes,
                                     hp_queueing=self._hp_queueing, seen=self._seen,
                                     next_id=lambda: next(self._kernel_ids), dispatch=self._dispatch_op,
                                     sm_count=self.sm_count,
                                     graph_units=graph_units, durations=self.durations)
        self._gate_retry_at: float | None = None     # earliest WAIT a gate answered this pass
        # (error, client id) -> the error to keep: set by the server where a fault is context-wide
        self.device_errors: Callable[[DeviceError, Hashable], DeviceError] | None = None
        self._abandoned: DeviceError | None = None   # the fault that ended all work, until forget_device

    # operations ------------------------------------------------------------------------
    def submit(self, client_id: Hashable, stream_key: Hashable, op: Op) -> None:
        """Queue one operation; never waits for the device."""
        validate_op(op)
        with self._lock:
            client = self._client(client_id)
            if client.removing:
                raise ClientGone(f"client {client_id!r} is being removed")
            stream = client.streams.get(stream_key) or self._create_stream(client, stream_key)
            now = self.clock.now()
            if isinstance(op, Launch):
                item = KernelTask(next(self._kernel_ids), op, stream, now)
            elif isinstance(op, GraphReplay):
                item = GraphTask(next(self._kernel_ids), op, stream, now)
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
            self._ops_submitted += 1
            stream.queue.append(item)
            if len(stream.queue) > 1:
                return                    # behind a held kernel or a blocked wait
            if client.paused:
                return                    # held until resume_client
            if isinstance(item, QUEUED_KERNELS):
                item.waiting_since = now
                if client.priority == HIGH:
                    self.fast_lanes.gate.close()      # no best-effort lane starts a kernel after it
                if (self._in_flight.preemptible == 0 and self.policy.starts_at_once(client.view)
                        and (client.priority == HIGH or not self.hooks.gate)):
                    self._kernels.start(item, transform=False)   # fast path: the policy's answer is known
                    return
                # It waits for the policy: no other job's best-effort lane may overtake it.
                self.fast_lanes.revoke_best_effort(client.client_id)
            elif not isinstance(item.op, EventRecord) and self._dispatch_op(stream, item):
                stream.queue.popleft()    # fast path: nothing else can change
                return
            self._pump()

    def offer_fast_lane(self, client_id: Hashable, stream_key: Hashable, stream_sm_cap: int | None = None) -> None:
        """After a submission: the stream's lane is granted to the data plane while
        the executor would issue its next operation at once, revoked otherwise
        (tally/scheduler/fast_lane.py). `stream_sm_cap`: the stream's own SM cap (a
        green context's), which the lane's launches carry within the job's share."""
        with self._lock:
            client = self._clients.get(client_id)
            stream = client.streams.get(stream_key) if client is not None else None
            if stream is not None:
                sm_cap = within_share(client, stream_sm_cap)
                self.fast_lanes.offer(stream, self._fast_lane_eligible(client, stream, sm_cap), sm_cap)

    def attach_fast_lanes(self, client_id: Hashable, owner, device) -> None:
        """The client's requests go through a C++ data plane that may be given lanes;
        `device`: the backend's DataPlaneDevice."""
        with self._lock:
            self.fast_lanes.attach(client_id, owner, device)
            client = self._clients.get(client_id)
            if client is not None:
                self._fast_lane_roles(client)

    def _fast_lane_roles(self, client: ClientState) -> None:
        # the policy declares what the C++ plane may do with the job's kernels
        self.fast_lanes.set_rule(client.client_id, self.policy.lane_rule(client.view),
                                 batch_budget_s=self.profiler.threshold, timed_every=self.durations.resample_every)

    def whole_expected(self, client_id: Hashable, op: Launch) -> float | None:
        """The expected device time of a best-effort launch the planner runs whole, once
        timed launches of its shape told it (whole_durations.py); None before."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is None:
                return None
            key = kernel_key(op.function.name, op.grid, op.block, op.shared_bytes)
            return self.durations.predicted(key) if key in client.whole_keys else None

    def runs_whole(self, client_id: Hashable, op: Launch) -> bool:
        """Whether the planner settled on running this best-effort launch whole (so a
        best-effort lane may issue it, fast_lane.py)."""
        with self._lock:
            client = self._clients.get(client_id)
            return client is not None and kernel_key(op.function.name, op.grid, op.block,
                                                     op.shared_bytes) in client.whole_keys

    def _fast_lane_eligible(self, client: ClientState, stream: StreamState, sm_cap: int | None) -> bool:
        # submit()'s fast path, held true for every next operation: an empty queue, a
        # client that is not paused, a policy that starts this client's kernels at once
        # (or, for a job whose kernels it holds back, would start one now: fast_lane.py's
        # best-effort release) with no cluster gate to ask, no preemptible unit (a new
        # high-priority kernel would have to preempt it) unless the client's plane
        # preempts it itself, and an issuer that confines launches to the SM cap where
        # there is one.
        if (stream.queue or client.removing or client.paused or stream.released
                or (self._in_flight.preemptible and not self.fast_lanes.preempts_itself(client.client_id))
                or (sm_cap is not None and not self.fast_lanes.carries_sm_cap(client.client_id))):
            return False
        if self.policy.starts_at_once(client.view):
            return client.priority == HIGH or not self.hooks.gate
        if self.hooks.gate:
            return False        # the cluster layer's gates answer for each best-effort unit
        view, _ = self._view(lanes_always=True)
        return self.policy.releases_at_once(client.view, view)

    def _fast_lane_changed(self, change: LaneChange) -> None:
        """A fast lane's watched work completed (the clock's thread)."""
        with self._lock:
            if self._closed:
                return
            change(self.policy, self.clock.now())
            self._pump()

    def open_gate(self, gate: HostGate) -> None:
        """Let the work queued behind a GatedCallback go on (any thread)."""
        with self._lock:
            gate.opened = True
            self._pump()

    def synchronize_stream(self, client_id: Hashable, stream_key: Hashable) -> None:
        """Block until everything submitted to the stream completed; raise its
        first pending DeviceError (once). ClientGone if the client is removed
        meanwhile (once its work left the device)."""
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
            launched = self._kernels_launched(stream)
        try:
            idle = self.backend.stream_query(stream.backend_stream)
        except DeviceError as e:
            raise self._seen(stream, e) from None
        if idle:
            with self._lock:
                stream.confirm(launched)
        return idle

    def take_kernel_output(self, client_id: Hashable, stream_key: Hashable) -> str:
        """What kernels printed on the stream since the last call, for backends that
        keep device printf output per stream (the emulator); "" otherwise."""
        take = self.backend.take_printf if self.backend.traits.printf_per_stream else None
        with self._lock:
            stream = self._client(client_id).streams.get(stream_key)
        if take is None or stream is None:
            return ""
        return take(stream.backend_stream)

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
            if not self._retire(stream):
                return
        self.backend.stream_destroy(stream.backend_stream)
        self.device.close_lane(stream.lane, synchronize=False)

    # status ---------------------------------------------------------------------------------
    def counters(self) -> dict:
        """Totals for `tally-server status`: operations queued now, kernels by how
        they ran, slice and PTB launches, preemptions; and per client."""
        with self._lock:
            out = {"ops_submitted": self._ops_submitted, **self._counters}
            out["ops_queued"] = sum(len(s.queue) for c in self._clients.values() for s in c.streams.values())
            out["units_in_flight"] = len(self._in_flight.units)
            out["hp_queueing_delay_s"] = self._hp_queueing.snapshot()
            out["clients"] = {c.client_id: {"priority": c.priority, "kernels": c.kernels,
                                            "kernels_completed": c.kernels_completed,
                                            "graph_launches": c.graph_launches,
                                            "graph_nodes_replayed": c.graph_nodes_replayed,
                                            "ops_queued": sum(len(s.queue) for s in c.streams.values()),
                                            "sm_percent": c.sm_percent,
                                            "sm_granted": self.sm_count if c.sm_cap is None else c.sm_cap,
                                            "paused": c.paused}
                              for c in self._clients.values()}
            self.fast_lanes.add_counters(out)
            return out

    def activity(self) -> ActivityTotals:
        """Running totals of the device's SM activity by priority (sm_activity.py)."""
        with self._lock:
            now = self.clock.now()
            self.fast_lanes.running(self.policy, now)    # the C++ plane's work counts too
            return self._activity.totals(now)

    def close(self) -> None:
        for client_id in list(self._clients):
            try:
                self.remove_client(client_id)
            except ClientGone:
                pass              # removed meanwhile by its session
        with self._lock:
            self._closed = True
            if self._wake is not None:
                self._wake.cancel()
        self.device.close()
        self.graphs.close()

    # internals: registry ----------------------------------------------------------------------
    def _client(self, client_id: Hashable) -> ClientState:
        client = self._clients.get(client_id)
        if client is None:
            raise ClientGone(f"unknown client {client_id!r}: it was removed, or add_client was never called")
        return client

    def _create_stream(self, client: ClientState, key: Hashable) -> StreamState:
        priority = self.policy.stream_priority(client.view)
        work = self.backend.stream_create(priority)
        stream = StreamState(client, key, work, self.device.open_lane(work, priority))
        client.streams[key] = stream
        return stream

    def _synchronize(self, stream: StreamState) -> DeviceError | None:
        """Wait for the stream; return its first pending error (taken off it). When
        the client is removed meanwhile, its queued work is dropped and the wait
        ends with ClientGone once its running work left the device."""
        with self._lock:
            self.clock.wait_for(self._cond, lambda: stream.drained)
            if stream.client.removing:
                raise ClientGone(f"client {stream.client.client_id!r} was removed while waiting for its stream")
            if stream.released:           # released after its work drained: nothing left on the device
                return stream.errors.popleft() if stream.errors else None
            stream.backend_syncs += 1
            launched = self._kernels_launched(stream)
        backend_error = None
        try:
            self.backend.stream_synchronize(stream.backend_stream)
        except DeviceError as e:
            backend_error = self._seen(stream, e)
        with self._lock:
            self._backend_sync_ended(stream, backend_error)
            if not stream.errors:
                stream.confirm(launched)
            return stream.errors.popleft() if stream.errors else None

    def _backend_sync_ended(self, stream: StreamState, error: DeviceError | None) -> None:
        """Under the lock: a backend call that counted in `stream.backend_syncs`
        returned, with `error` (None: it succeeded), kept for the stream's next
        synchronization; the last one out wakes whoever waits to destroy it (_retire)."""
        if error is not None:
            stream.errors.append(error)
        stream.backend_syncs -= 1
        if stream.backend_syncs == 0:
            self._cond.notify_all()

    def _seen(self, stream: StreamState, error: DeviceError) -> DeviceError:
        """An error the backend raised for the stream, as the stream keeps it."""
        sink = self.device_errors
        return error if sink is None else sink(error, stream.client.client_id)

    def _retire(self, stream: StreamState) -> bool:
        """Mark the stream released (no new backend synchronization of it starts), then
        wait until none is in progress; False if another caller released it first. Call
        with the lock held; its backend streams may be destroyed afterwards."""
        if stream.released:
            return False
        stream.released = True
        self.fast_lanes.close(stream)
        self.clock.wait_for(self._cond, lambda: stream.backend_syncs == 0)
        return True

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
                self._drain_heads()
                view, waiting = self._view()
                if not waiting:
                    break                 # nothing to decide (policies are asked only then)
                schedule = self.policy.schedule(view)
                self._gate_retry_at = None
                changed = self._apply(schedule, waiting)
                wake_at = schedule.wake_at
                if self._gate_retry_at is not None and (wake_at is None or self._gate_retry_at < wake_at):
                    wake_at = self._gate_retry_at
                self._arm_wake(wake_at)
                if not changed and not self._repump:
                    break
        finally:
            self._pumping = False
        self._cond.notify_all()

    def _drain_heads(self) -> None:
        """Dispatch what each queue's head allows. An event record dispatched on one
        stream can unblock a wait at the head of a stream drained before it, so the
        pass repeats until it dispatches no record that a queued wait names."""
        while True:
            self._records_dispatched = False
            for client in list(self._clients.values()):
                if client.paused:
                    continue
                for stream in list(client.streams.values()):
                    self._drain_head(stream)
            if not self._records_dispatched:
                return

    def _drain_head(self, stream: StreamState) -> None:
        if stream.client.paused:
            return
        while stream.queue:
            item = stream.queue[0]
            if isinstance(item, QUEUED_KERNELS):
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
            elif isinstance(op, StreamAccessPolicy):
                b.stream_set_access_policy(bs, op.window)
            elif isinstance(op, GatedCallback):
                if not item.dispatched:
                    item.dispatched = True
                    b.host_callback(bs, op.fn)
                return op.gate.opened     # the rest of the stream waits at the gate
            elif isinstance(op, StreamWaitValue):
                if not item.dispatched:
                    item.dispatched = True
                    poll = b.stream_wait_value(bs, op.address, op.value, op.width, op.condition)
                    # The gate opens from the clock's thread: a backend callback may not call back in.
                    if poll is None:      # the backend's stream holds until the value is met
                        b.host_callback(bs, lambda gate=op.gate: self.clock.call_soon(lambda: self.open_gate(gate)))
                    else:                 # the server polls once the stream reaches the wait
                        b.host_callback(bs, lambda: self.clock.call_soon(lambda: self._poll_value(stream, op, poll)))
                return op.gate.opened     # the rest of the stream waits in the executor
            elif isinstance(op, StreamWriteValue):
                b.stream_write_value(bs, op.address, op.value, op.width)
            elif isinstance(op, EventRecord):
                event = op.event
                if not event.destroyed or event.waiters[item.seq] > 0:   # destroyed: only for queued waits
                    backend_event = b.event_create(event.timing)
                    b.event_record(backend_event, bs)
                    event.records[item.seq] = backend_event
                    if event.waiters[item.seq] > 0:     # a queued wait may be blocked on it
                        self._records_dispatched = True
                    self._prune_records(event)
                    self._cond.notify_all()
            elif isinstance(op, StreamWaitEvent):
                event = op.event
                if item.seq:
                    backend_event = event.records.get(item.seq)
                    if backend_event is None:
                        return False
                    b.stream_wait_event(bs, backend_event)
                    event.waiters[item.seq] -= 1
                    self._prune_records(event)
        except DeviceError as e:
            stream.errors.append(self._seen(stream, e))   # asynchronous error: reported at the next sync
        return True

    def _poll_value(self, stream: StreamState, op: StreamWaitValue, poll: Callable[[], bool]) -> None:
        def failed(error: DeviceError) -> None:
            with self._lock:
                stream.errors.append(self._seen(stream, error))
        start_polling(poll, lambda: stream.released or stream.client.removing or op.gate.opened,
                      lambda: self.open_gate(op.gate), failed)

    def _view(self, lanes_always: bool = False) -> tuple[SchedulerView, dict[int, KernelTask]]:
        waiting: dict[int, KernelTask] = {}
        views = []
        for client in self._clients.values():
            if client.removing or client.paused:
                continue
            for stream in client.streams.values():
                if stream.queue and isinstance(stream.queue[0], QUEUED_KERNELS) and stream.queue[0].unit is None:
                    task = stream.queue[0]
                    waiting[task.kernel_id] = task
                    views.append(WaitingKernel(task.kernel_id, client.client_id, stream.key,
                                               client.priority, task.name,
                                               task.waiting_since, task.partially_done,
                                               stream.inflight > 0, self._predicted(client, task)))
        now = self.clock.now()
        # busy lanes hold others back
        lanes = self.fast_lanes.running(self.policy, now) if waiting or lanes_always else ()
        view = SchedulerView(now, tuple(c.view for c in self._clients.values() if not c.removing),
                             tuple(views), (*self._in_flight.views.values(), *lanes),
                             batch_budget_s=self.profiler.threshold)
        return view, waiting

    def _predicted(self, client: ClientState, task: KernelTask | GraphTask) -> float | None:
        """A waiting best-effort kernel's expected device time, when it will run whole
        (the planner settled its shape on whole for this job) and was timed before."""
        if client.priority == HIGH or not isinstance(task, KernelTask) or task.op.cooperative:
            return None
        key = task.key
        return self.durations.predicted(key) if key in client.whole_keys else None

    def _apply(self, schedule: Schedule, waiting: dict[int, KernelTask]) -> bool:
        changed = False
        for start in schedule.start:
            task = waiting.pop(start.kernel_id, None)
            if task is None:
                raise PolicyError(f"policy {self.policy.name!r} started kernel {start.kernel_id}, "
                                  "which is not waiting (or was started twice)")
            if task.stream.client.priority != HIGH:
                if not self._gate_allows(task):
                    continue
                if task.plan is None and any(s.inflight for s in task.stream.client.streams.values()):
                    self._counters["kernels_batched"] += 1    # behind the job's own work still out
            self._kernels.start(task, start.transform)
            changed = True
        for unit_id in schedule.preempt:
            unit = self._in_flight.units.get(unit_id)
            if unit is None or unit.mode is not PTB or unit.preempt_requested:
                raise PolicyError(f"policy {self.policy.name!r} preempted unit {unit_id}, "
                                  "which is not a running, preemptible PTB launch")
            self._kernels.preempt(unit)
            changed = True
        return changed

    def _gate_allows(self, task: KernelTask) -> bool:
        """Ask the cluster layer's gates before a best-effort unit starts; on WAIT,
        remember when to ask again (the pass arms a wake-up for it)."""
        if not self.hooks.gate:
            return True
        now = self.clock.now()
        status = self.hooks.gate_best_effort(
            BestEffortUnit(task.stream.client.client_id, task.kernel_id, task.total_blocks), now)
        if status.allowed:
            return True
        retry = now + max(status.retry_after_s, 1e-6)
        if self._gate_retry_at is None or retry < self._gate_retry_at:
            self._gate_retry_at = retry
        return False

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

    # internals: completion -------------------------------------------------------------------
    def _unit_done(self, device_unit: DeviceUnit) -> None:
        """From the device layer (the clock's thread): a watched launch completed."""
        with self._lock:
            now = self.clock.now()
            watched = self._in_flight.units.get(device_unit.unit_id)
            if watched is None:
                return            # abandoned after a device fault: its end no longer matters
            client = watched.task.stream.client
            for done in self.device.completed(device_unit, check_stream=not client.removing):
                unit = self._in_flight.units.get(done.unit_id)
                if unit is None:
                    continue
                self._kernels.complete(unit, now)
                self.policy.on_unit_finished(unit.view(), now)
            if not self._closed:
                self._pump()
            self._cond.notify_all()
