"""The stream executor's kernel work: starting what the policy picked (whole, the
next slice, a PTB launch that starts or resumes a kernel, a graph replay as one
unit or node by node), asking a PTB launch to stop, and applying how a launch
ended (device time for the profiler, progress, errors, the kernel's completion).

StreamExecutor (tally/scheduler/executor.py) makes one KernelRunner and hands it,
at construction, everything it touches: the device layer, the planner and
profiler, the executor's counters, units in flight and SM activity, the fast
lanes (a preemptible launch revokes them), the histogram of high-priority
queueing delay, how a stream keeps an error (`seen`) and where kernel ids come
from. It keeps no queue and no client record of its own: it is called under the
executor's lock with a task at the head of its stream's queue, and takes the
task off that queue when the task is done with it.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable

from tally.protocol.errors import DeviceError
from tally.scheduler.clock import Clock
from tally.scheduler.delay_histogram import DelayHistogram
from tally.scheduler.device_units import DeviceUnits
from tally.scheduler.executor_state import (ClientState, GraphTask, KernelTask, OpItem, StreamState, Unit,
                                            UnitsInFlight)
from tally.scheduler.fast_lane import FastLanes
from tally.scheduler.graph_units import BackendGraphs
from tally.scheduler.kernel_plan import WHOLE_PLAN, KernelPlanner
from tally.scheduler.ops import Launch
from tally.scheduler.policy import HIGH
from tally.scheduler.profiler import TransparentProfiler
from tally.scheduler.run_mode import PTB, SLICE, WHOLE, RunMode
from tally.scheduler.sm_activity import SmActivity, launch_sms
from tally.scheduler.whole_durations import WholeDurations

log = logging.getLogger("tally.scheduler.executor")

_KERNELS_BY_MODE = {WHOLE: "kernels_whole", SLICE: "kernels_sliced", PTB: "kernels_ptb"}


def sm_cap_of(client: ClientState, op: Launch) -> int | None:
    """The SMs a launch may use: its green context's, within the job's share. A
    cooperative grid may use the whole device: the job sized it for every SM
    (the occupancy calculator times the device's SM count), and fewer SMs could
    not hold all its blocks at once."""
    if op.cooperative:
        return None
    return within_share(client, op.sm_cap)


def within_share(client: ClientState, stream_cap: int | None) -> int | None:
    if stream_cap is None:
        return client.sm_cap
    return stream_cap if client.sm_cap is None else min(stream_cap, client.sm_cap)


class KernelRunner:
    def __init__(self, *, device: DeviceUnits, graphs: BackendGraphs, planner: KernelPlanner,
                 profiler: TransparentProfiler, clock: Clock, counters: dict[str, int], in_flight: UnitsInFlight,
                 activity: SmActivity, fast_lanes: FastLanes, hp_queueing: DelayHistogram,
                 seen: Callable[[StreamState, DeviceError], DeviceError], next_id: Callable[[], int],
                 dispatch: Callable[[StreamState, OpItem], bool], sm_count: int, graph_units: bool,
                 durations: WholeDurations):
        self.device, self.graphs, self.planner, self.profiler = device, graphs, planner, profiler
        self.durations = durations    # whole best-effort kernels' device times (the policy's batches)
        self.clock, self.counters, self.in_flight, self.activity = clock, counters, in_flight, activity
        self.fast_lanes, self.hp_queueing, self.seen, self.next_id = fast_lanes, hp_queueing, seen, next_id
        self.dispatch = dispatch      # the executor's: a stream operation to the backend (a graph's memset)
        self.sm_count = sm_count
        self.graph_units = graph_units
        self._cooperative_logged: set[str] = set()     # kernels whose cooperative launch was explained

    def start(self, task: KernelTask | GraphTask, transform: bool) -> None:
        """Launch the kernel at the head of its queue (whole), or its next piece
        (a slice, or a PTB launch that starts or resumes it); a graph replay, as one
        unit or node by node (_start_graph)."""
        if isinstance(task, GraphTask):
            self._start_graph(task, transform)
            return
        stream, op = task.stream, task.op
        if task.plan is None:
            if stream.client.priority == HIGH:
                self.hp_queueing.observe(self.clock.now() - task.waiting_since)
            stream.client.kernels += 1
            self.counters["kernels"] += 1
            if transform:
                task.plan = self.planner.plan(op, sm_cap_of(stream.client, op))
                if task.plan.untransformable:
                    self.counters["untransformable"] += 1
            else:
                task.plan = WHOLE_PLAN
            if op.cooperative:
                self.counters["kernels_cooperative"] += 1
                self._note_cooperative(stream.client, op)
            # (A cooperative launch runs whole for its own reason: the same kernel launched
            # otherwise may still be transformed, so it settles nothing for the fast lane.)
            if (task.plan.mode is WHOLE and not task.plan.measuring and not task.plan.cooperative
                    and stream.client.priority != HIGH):
                stream.client.whole_keys.add(task.key)
            self.counters[_KERNELS_BY_MODE[task.plan.mode]] += 1
        plan = task.plan
        if plan.mode is WHOLE:
            stream.queue.popleft()
            self._launch(task, WHOLE, op.function, op.grid, op.params, task.total_blocks)
        elif plan.mode is SLICE:
            piece = plan.slices[task.next_slice]
            task.next_slice += 1
            if task.next_slice == len(plan.slices):
                stream.queue.popleft()      # the rest of the stream may follow the last slice
            self.counters["slice_launches"] += 1
            params = plan.sliced.plan.params(op.params, op.grid, piece.block_offset)
            self._launch(task, SLICE, plan.sliced.function, (piece.count, 1, 1), params, piece.count,
                         cluster=plan.slice_cluster)
        else:
            self._launch_ptb(task)

    def _start_graph(self, task: GraphTask, transform: bool) -> None:
        """A replay runs as one unit when the policy starts it whole (a high-priority
        job's; a best-effort job's when nothing needs it preemptible). When the policy
        wants it transformed, or graph units are off, its nodes take its place at the
        head of the queue: each kernel its own unit, planned and started when the
        policy picks it (sliced or PTB like any best-effort kernel), each memset an
        operation of the stream like any other."""
        stream, client = task.stream, task.stream.client
        graph = task.op.graph
        count = graph.kernel_count
        if transform or not self.graph_units:
            stream.queue.popleft()
            now = self.clock.now()
            cap = task.op.sm_cap
            nodes = [KernelTask(self.next_id(), op if cap is None else replace(op, sm_cap=cap), stream,
                                task.submitted_at, waiting_since=task.waiting_since or now)
                     if isinstance(op, Launch) else OpItem(op) for op in graph.nodes]
            stream.queue.extendleft(reversed(nodes))
            self.counters["graph_nodes_replayed"] += count
            client.graph_nodes_replayed += count
            log.debug("client %s: graph %s (%d kernels) runs node by node (%s)", client.client_id, graph.name,
                      count, "the policy keeps it preemptible" if transform else "graph units are off")
            if not transform:                  # all of it now, as its own launches and memsets would go
                for node in nodes:
                    if isinstance(node, KernelTask):
                        self.start(node, False)
                    elif self.dispatch(stream, node):
                        stream.queue.popleft()
                    else:
                        break                  # (a memset never waits; the executor's pump would go on)
            return                             # (transformed: the policy picks each kernel in turn)
        if client.priority == HIGH:
            self.hp_queueing.observe(self.clock.now() - task.waiting_since)
        stream.queue.popleft()
        task.plan = WHOLE_PLAN
        sm_cap = within_share(client, task.op.sm_cap)
        started_at = self.clock.now()
        try:
            device_unit = self.device.launch_graph(stream.lane, self.graphs.executable(graph), sm_cap=sm_cap)
        except DeviceError as e:
            stream.errors.append(self.seen(stream, e))     # reported at the job's next synchronization
            return
        client.kernels += count
        client.graph_launches += 1
        self.counters["kernels"] += count
        self.counters["kernels_whole"] += count
        self.counters["graph_launches"] += 1
        stream.kernels_launched += count
        unit = Unit(device_unit.unit_id, task, WHOLE, client.priority, started_at, device_unit, task.total_blocks)
        unit.sms = launch_sms(task.total_blocks, sm_cap, self.sm_count)
        self.activity.launched(stream, unit.priority, unit.sms, started_at)
        self.in_flight.add(unit)
        stream.inflight += 1

    def _note_cooperative(self, client: ClientState, op: Launch) -> None:
        """Says once per kernel why a cooperative kernel runs as it does."""
        if op.function.name in self._cooperative_logged or len(self._cooperative_logged) >= 1024:
            return
        self._cooperative_logged.add(op.function.name)
        why = "it runs whole, never sliced or preempted, since its blocks may wait for each other (grid.sync())"
        if client.priority != HIGH:
            why += " (so a high-priority kernel arriving meanwhile cannot preempt it)"
        if within_share(client, op.sm_cap) is not None:
            why += "; it may use every SM, beyond the job's SM share, as its grid was sized for the whole device"
        log.info("client %s: cooperative kernel %s: %s", client.client_id, op.function.name, why)

    def _launch_ptb(self, task: KernelTask) -> None:
        stream, op, plan = task.stream, task.op, task.plan
        state = self.device.prepare_ptb(stream.lane, resume=task.ptb_started)
        if state is None:
            # No device memory for the 8-byte state (or no host memory to register for
            # its readback): this kernel runs whole (still correct, only not
            # preemptible) and the job is not handed an error that its own request
            # did not cause.
            self.counters["kernels_ptb"] -= 1
            self.counters["kernels_whole"] += 1
            task.plan = WHOLE_PLAN
            stream.queue.popleft()
            self._launch(task, WHOLE, op.function, op.grid, op.params, task.total_blocks)
            return
        # No best-effort lane may add work behind the scheduler's back while a preemptible
        # unit runs; high-priority lanes go on, their planes stopping this launch themselves
        # (prepare_ptb pinned it). If any lane issued work since the policy looked, the
        # policy looks again first.
        if self.fast_lanes.revoke_all():
            self.device.unpin_ptb(stream.lane)
            return
        task.ptb_started = True
        self.counters["ptb_launches"] += 1
        params = plan.ptb.plan.params(op.params, op.grid, state)
        self._launch(task, PTB, plan.ptb.function, (plan.config.size, 1, 1), params, 0)

    def _launch(self, task: KernelTask, mode: RunMode, fn, grid, params: bytes, blocks: int,
                cluster=None) -> None:
        """`cluster`: of a slice (whole runs take the job's own, op.cluster)."""
        stream, op = task.stream, task.op
        started_at = self.clock.now()
        sm_cap = sm_cap_of(stream.client, op)
        timed, predicted = task.plan.measuring, None
        if mode is WHOLE and stream.client.priority != HIGH and not timed and not task.plan.cooperative:
            predicted = self.durations.predicted(task.key)
            timed = self.durations.wants_sample(task.key, for_plane=self.fast_lanes.batches(stream.client.client_id))
        try:
            device_unit = self.device.launch(stream.lane, mode, fn, grid, op.block, op.shared_bytes, params,
                                             timed=timed, sm_cap=sm_cap,
                                             cluster=op.cluster if mode is WHOLE else cluster,
                                             cooperative=op.cooperative)
        except DeviceError as e:
            stream.errors.append(self.seen(stream, e))     # reported at the job's next synchronization
            if mode is PTB:
                self.device.unpin_ptb(stream.lane)         # no launch for a plane to stop
            if stream.queue and stream.queue[0] is task:
                stream.queue.popleft()
            return
        stream.kernels_launched += 1
        unit = Unit(device_unit.unit_id, task, mode, stream.client.priority, started_at, device_unit,
                    blocks, task.counter)
        unit.sms = launch_sms(grid[0] * grid[1] * grid[2], sm_cap, self.sm_count)
        unit.predicted_s = predicted
        self.activity.launched(stream, unit.priority, unit.sms, started_at)
        if mode is not WHOLE:
            task.unit = unit
        self.in_flight.add(unit)
        stream.inflight += 1

    def preempt(self, unit: Unit) -> None:
        self.in_flight.request_preempt(unit)
        self.device.preempt(unit.device)
        self.counters["preemptions"] += 1

    def complete(self, unit: Unit, now: float) -> None:
        """Apply a completed unit's outcome: release it, account for what it ran,
        feed the profiler, and take a finished kernel off its queue."""
        task, stream, outcome = unit.task, unit.task.stream, unit.device
        self.in_flight.remove(unit)
        stream.inflight -= 1
        self.activity.completed(stream, unit.sms, now)
        if outcome.error is not None:
            stream.errors.append(self.seen(stream, outcome.error))   # reported at the job's next synchronization
        blocks = unit.blocks
        if unit.mode is PTB:
            if outcome.preempted_by_plane and not unit.preempt_requested:
                self.counters["preemptions"] += 1      # a high-priority kernel's plane stopped it
            counter = min(outcome.ptb_tasks_done, task.total_blocks)
            blocks = counter - unit.counter_before
            task.counter = counter
        plan = task.plan
        finished = unit.mode is WHOLE or outcome.error is not None or (
            task.counter >= task.total_blocks if unit.mode is PTB else task.next_slice == len(plan.slices))
        if finished:
            stream.client.kernels_completed += task.kernel_count
        if unit.mode is not WHOLE:
            task.unit = None
            if finished and stream.queue and stream.queue[0] is task:
                stream.queue.popleft()
            elif not finished:
                task.waiting_since = now
        if unit.mode is WHOLE and not plan.measuring and outcome.device_seconds is not None:
            self.durations.observe(task.key, outcome.device_seconds)     # a timed best-effort sample
        if plan.measuring and outcome.device_seconds is not None and plan.config is not None:
            self.profiler.observe(task.key, plan.config, device_seconds=outcome.device_seconds,
                                  cycle_seconds=now - unit.started_at, blocks=blocks,
                                  clean=not unit.contended)
            if unit.mode is SLICE and not finished:
                revised = self.planner.revise(plan, task.op, task.next_slice)
                if revised is not None:
                    task.plan = revised
