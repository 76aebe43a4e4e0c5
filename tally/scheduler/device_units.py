"""Kernel work on the device: launching whole kernels, slices and PTB
launches, preempting PTB launches, and learning that each one completed.

Completion comes from the backend itself: after a launch an event is
recorded on the work stream and, on a companion "notify" stream, a host
callback waits for it. The work stream is never blocked by the callback, and
the mechanism is the same on every backend. The callback only hands the unit
to the clock's worker (Clock.call_soon): handling a completion launches more
work, and CUDA forbids driver calls inside a host function.

Watching every kernel that way costs a callback and a thread hand-off per
launch, which made the executor the bottleneck of jobs that launch many short
kernels. So every launch records its end event, but a whole kernel that needs
no timing, launched while another unit of its stream is being watched, gets no
callback of its own: it "rides" on the stream's watched unit. Stream order
makes that exact: when a watched unit completes, every rider launched before
it has completed too; if riders launched after it are still out, the newest
of them is watched then, through the end event it recorded at its launch (so
its completion is known when it completes, not after work queued behind it).
Slices, PTB launches and measured kernels are always watched themselves.

Transformed kernels follow ptx_passes.launch_plan. The PTB state buffer is
written only with small host-to-device copies on one high-priority control
stream: a copy engine, not an SM, does them, so a preempt flag cannot be stuck
behind the very workers it has to stop, and the writes land in the order they
were issued (a flag set right after a resume is never undone by that resume's
clear). Each launch waits for its state write with an event.

Everything here runs under the executor's lock.
"""
from __future__ import annotations

import itertools
from typing import Callable

from ptx_passes.launch_plan import PTB_FLAG_OFFSET, PTB_STATE_BYTES, SliceLaunch, transformable_grid
from tally.backends.base import DeviceBackend
from tally.protocol.errors import DeviceError
from tally.scheduler.clock import Clock
from tally.scheduler.executor_state import KernelTask, Unit
from tally.scheduler.pinned_pool import PinnedPool
from tally.scheduler.policy import HIGH, HIGH_STREAM_PRIORITY
from tally.scheduler.profiler import TransparentProfiler
from tally.scheduler.variants import VariantProvider

BE_TRANSFORMS = ("auto", "slice", "ptb", "none")
COUNTER_NAMES = ("kernels", "kernels_whole", "kernels_sliced", "kernels_ptb",
                 "slice_launches", "ptb_launches", "preemptions", "untransformable")
_ZERO_STATE = bytes(PTB_STATE_BYTES)
_FLAG_SET = (1).to_bytes(4, "little")
_FLAG_CLEAR = bytes(4)


class DeviceUnits:
    def __init__(self, backend: DeviceBackend, profiler: TransparentProfiler,
                 variants: VariantProvider | None, be_transform: str, clock: Clock,
                 on_done: Callable[[Unit], None]):
        if be_transform not in BE_TRANSFORMS:
            raise ValueError(f"be_transform must be one of {', '.join(BE_TRANSFORMS)}, got {be_transform!r}")
        self.backend = backend
        self.profiler = profiler
        self.variants = variants
        self.be_transform = be_transform
        self.clock = clock
        self._on_done = on_done             # backend thread -> executor (takes the lock)
        self.units: dict[int, Unit] = {}
        self.running_views: dict = {}       # unit id -> RunningUnit, kept current for cheap views
        self.preemptible = 0                # PTB launches running and not yet asked to stop
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)
        self._ids = itertools.count(1)
        self._control_stream = None
        self._event_pool: dict[bool, list] = {True: [], False: []}
        self._readback = PinnedPool(backend)   # PTB counters read back behind each launch
        self._hp_inflight = 0
        self._be_units: dict[int, Unit] = {}    # in flight; marked contended when high-priority work starts

    def start(self, task: KernelTask, transform: bool) -> None:
        """Launch the kernel at the head of its queue (whole), or its next piece
        (a slice, or a PTB launch that starts or resumes it)."""
        if task.mode is None:
            task.stream.client.kernels += 1
            self.counters["kernels"] += 1
            if transform:
                self._plan(task)
            else:
                task.mode = "whole"
            self.counters[{"whole": "kernels_whole", "slice": "kernels_sliced",
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
            self.counters["slice_launches"] += 1
            params = task.sliced.plan.params(op.params, op.grid, piece.block_offset)
            self._launch(task, "slice", task.sliced.function, (piece.count, 1, 1), params, piece.count)
        else:
            self._launch_ptb(task)

    def _plan(self, task: KernelTask) -> None:
        fn = task.op.function
        sliced = ptb = None
        if self.variants is not None and transformable_grid(task.op.grid):
            if self.be_transform in ("auto", "slice"):
                sliced = self.variants.sliced(fn)
            if self.be_transform in ("auto", "ptb"):
                ptb = self.variants.ptb(fn)
        if sliced is None and ptb is None:
            if self.be_transform != "none":
                self.counters["untransformable"] += 1
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
            try:
                if stream.readback is None:
                    stream.readback = self._readback.take(8)
                stream.ptb_state = b.mem_alloc(PTB_STATE_BYTES)
            except DeviceError:
                # No device memory for the 8-byte state (or no host memory to register for
                # its readback): this kernel runs whole (still correct, only not
                # preemptible) and the job is not handed an error that its own request
                # did not cause.
                self.counters["kernels_ptb"] -= 1
                self.counters["kernels_whole"] += 1
                task.mode, task.config, task.measuring = "whole", None, False
                stream.queue.popleft()
                op = task.op
                self._launch(task, "whole", op.function, op.grid, op.params, task.total_blocks)
                return
        if not task.ptb_started:
            b.memcpy_htod_async(stream.ptb_state, memoryview(_ZERO_STATE), control)
            task.ptb_started = True
        else:
            b.memcpy_htod_async(stream.ptb_state + PTB_FLAG_OFFSET, memoryview(_FLAG_CLEAR), control)
        state_ready = self._pooled_event(False)
        b.event_record(state_ready, control)
        b.stream_wait_event(stream.backend_stream, state_ready)
        self._event_pool[False].append(state_ready)      # the wait captured it
        self.counters["ptb_launches"] += 1
        params = task.ptb.plan.params(task.op.params, task.op.grid, stream.ptb_state)
        self._launch(task, "ptb", task.ptb.function, (task.workers, 1, 1), params, 0)

    def _pooled_event(self, timing: bool):
        pool = self._event_pool[timing]
        return pool.pop() if pool else self.backend.event_create(timing)

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
            b.memcpy_dtoh_async(stream.readback, stream.ptb_state, bs)
        unit.end_event = self._pooled_event(measuring)
        b.event_record(unit.end_event, bs)
        if kind == "whole" and not measuring and stream.watched is not None:
            stream.riders.append(unit)
        else:
            self._watch(unit)
        if kind != "whole":
            task.unit = unit
        if priority == HIGH:
            self._hp_inflight += 1
            for other in self._be_units.values():
                other.contended = True
        else:
            unit.contended = self._hp_inflight > 0
            self._be_units[unit.unit_id] = unit
        self.units[unit.unit_id] = unit
        self.running_views[unit.unit_id] = unit.view()
        if kind == "ptb":
            self.preemptible += 1
        stream.inflight += 1

    def _watch(self, unit: Unit) -> None:
        """Give `unit` its own completion callback (see the module docstring)."""
        b, stream = self.backend, unit.task.stream
        b.stream_wait_event(stream.notify_stream, unit.end_event)
        b.host_callback(stream.notify_stream, lambda: self.clock.call_soon(lambda: self._on_done(unit)))
        stream.watched = unit

    def riders_done_with(self, unit: Unit) -> list[Unit]:
        """The riders of `unit`'s stream that completed no later than `unit` (launched
        before it), oldest first; the caller completes them before `unit`."""
        riders = unit.task.stream.riders
        done = []
        while riders and riders[0].unit_id < unit.unit_id:
            done.append(riders.popleft())
        return done

    def watch_riders(self, unit: Unit) -> None:
        """After `unit` completed: if it was its stream's watched unit and riders
        launched after it are still out, watch the newest of them (the others
        complete with it)."""
        stream = unit.task.stream
        if stream.watched is not unit:
            return
        stream.watched = None
        if stream.riders:
            self._watch(stream.riders.pop())

    def preempt(self, unit: Unit) -> None:
        stream = unit.task.stream
        unit.request_preempt()
        self.preemptible -= 1
        self.running_views[unit.unit_id] = unit.view()
        self.backend.memcpy_htod_async(stream.ptb_state + PTB_FLAG_OFFSET, memoryview(_FLAG_SET),
                                       self._control())
        self.counters["preemptions"] += 1

    def complete(self, unit: Unit, now: float) -> None:
        """The device finished `unit`: release it, account for what it ran,
        feed the profiler, and take a finished kernel off its queue."""
        task, stream = unit.task, unit.task.stream
        del self.units[unit.unit_id]
        del self.running_views[unit.unit_id]
        if unit.kind == "ptb" and not unit.preempt_requested:
            self.preemptible -= 1
        stream.inflight -= 1
        if unit.priority == HIGH:
            self._hp_inflight -= 1
        else:
            del self._be_units[unit.unit_id]
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
                stream.errors.append(e)     # reported at the job's next synchronization
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

    def release_stream_state(self, stream) -> int | None:
        """Forget a drained stream's PTB state; the device address for the caller to
        free once it has let go of the executor's lock (cuMemFree waits for the whole
        device on a GPU: under the lock it would hold every job that long)."""
        ptb_state, stream.ptb_state = stream.ptb_state, None
        if stream.readback is not None:
            self._readback.give(stream.readback)
            stream.readback = None
        return ptb_state

    def close(self) -> None:
        control, self._control_stream = self._control_stream, None
        if control is not None:
            self.backend.stream_synchronize(control)
            self.backend.stream_destroy(control)
        self._readback.close()
