"""`priority`: Tally's algorithm.

High-priority kernels go out at once, whole, on high-priority streams.
Best-effort kernels run only while the high-priority job is idle (no
high-priority kernel queued or running), one unit at a time, transformed
(slices or a PTB kernel, as the profiler chose, so the high-priority job waits
at most one slice / one PTB task when it comes back). When high-priority work
arrives, running PTB launches are preempted and no further slices start; the
interrupted kernels resume later from where they stopped.

"Idle" needs a grace period (our addition; `idle_grace_ms`): a job whose CPU
launches kernels a few microseconds apart, or serves queued requests back to
back, leaves the GPU idle for moments that are shorter than a best-effort unit's
turnaround. Starting best-effort work in such a gap costs the high-priority job
up to a turnaround every time; waiting until it has been idle for the grace
period costs the best-effort job only that much per real idle stretch.

One unit at a time costs a job of short kernels a completion round trip per
kernel, which can take far longer than the kernel. So a best-effort batch (our
addition): while one job's best-effort kernels run whole and their device times
are known (tally/scheduler/whole_durations.py), more of its whole kernels may
join them as long as the expected device time of all of them stays within the
batch budget (the profiler's turnaround threshold: what a slice or a PTB task
may make a high-priority kernel wait) and MAX_BATCH units. A high-priority
kernel arriving then waits at most that budget, as behind one slice.

Best-effort jobs share the idle time fairly: the next unit goes to the job
with the least device time received so far (ties: the job that joined first).
A job that joins late starts at the least service of those already present, so
it cannot monopolize the GPU to "catch up"."""
from __future__ import annotations

from typing import Hashable

from tally.scheduler.policy import (HIGH, HIGH_STREAM_PRIORITY, NORMAL_STREAM_PRIORITY, ClientView, LaneRule,
                                    RunningUnit, Schedule, SchedulerView, Start, WaitingKernel, gated_lane_rule)

DEFAULT_IDLE_GRACE_MS = 0.05
MAX_BATCH = 32       # best-effort units on the device at once, whatever their expected times


class PriorityPolicy:
    name = "priority"

    def __init__(self, idle_grace_ms: float = DEFAULT_IDLE_GRACE_MS):
        if idle_grace_ms < 0:
            raise ValueError(f"idle_grace_ms must be >= 0, got {idle_grace_ms}")
        self.idle_grace = idle_grace_ms / 1000.0
        self.service: dict[Hashable, float] = {}    # best-effort client -> device seconds
        self.last_hp_finish = float("-inf")
        # best-effort client -> when its last unit finished: a batch's units overlap, and
        # each is charged only from there (or from its start, if later)
        self._last_be_finish: dict[Hashable, float] = {}

    def stream_priority(self, client: ClientView) -> int:
        return HIGH_STREAM_PRIORITY if client.priority == HIGH else NORMAL_STREAM_PRIORITY

    def starts_at_once(self, client: ClientView) -> bool:
        return client.priority == HIGH

    def lane_rule(self, client: ClientView) -> LaneRule:
        # the plane makes the same best-effort batches as _extend_batch
        return gated_lane_rule(client, self.starts_at_once(client), max_batch=MAX_BATCH)

    def releases_at_once(self, client: ClientView, view: SchedulerView) -> bool:
        # schedule()'s rule for the next best-effort unit, with the client's own work
        # left out (the data plane issues one of its kernels at a time) and no other
        # job's waiting or running (they are owed their share).
        if client.priority == HIGH:
            return True
        if any(k.priority == HIGH or k.client_id != client.client_id for k in view.waiting):
            return False
        if any(u.priority == HIGH or u.client_id != client.client_id for u in view.running):
            return False
        return view.now >= self.last_hp_finish + self.idle_grace

    def schedule(self, view: SchedulerView) -> Schedule:
        self._track_members(view)
        start = [Start(k.kernel_id) for k in view.waiting if k.priority == HIGH]
        if start or any(u.priority == HIGH for u in view.running):
            preempt = [u.unit_id for u in view.running if u.priority != HIGH and u.preemptible]
            return Schedule(start=start, preempt=preempt)
        waiting = [k for k in view.waiting if k.priority != HIGH]
        running = [u for u in view.running if u.priority != HIGH]
        if running:
            return self._extend_batch(view, waiting, running)
        if not waiting:
            return Schedule()
        idle_enough = self.last_hp_finish + self.idle_grace
        if view.now < idle_enough:
            return Schedule(wake_at=idle_enough)
        return Schedule(start=[Start(self._fairest(view, waiting).kernel_id, transform=True)])

    def _fairest(self, view: SchedulerView, waiting: list[WaitingKernel]) -> WaitingKernel:
        rank = {c.client_id: i for i, c in enumerate(view.clients)}
        return min(waiting, key=lambda k: (self.service[k.client_id], rank[k.client_id],
                                           k.waiting_since, k.kernel_id))

    def _extend_batch(self, view: SchedulerView, waiting: list[WaitingKernel],
                      running: list[RunningUnit]) -> Schedule:
        """Best-effort units run (and no high-priority work): start the fairest waiting
        kernel too if it and every running unit are whole kernels of one job with known
        device times that fit the batch budget together."""
        if not waiting or len(running) >= MAX_BATCH:
            return Schedule()
        job = running[0].client_id
        if any(u.client_id != job or u.predicted_s is None for u in running):
            return Schedule()
        pick = self._fairest(view, waiting)
        if pick.client_id != job or pick.predicted_s is None:
            return Schedule()       # another job's turn, or a kernel whose time is not known
        if sum(u.predicted_s for u in running) + pick.predicted_s > view.batch_budget_s:
            return Schedule()
        return Schedule(start=[Start(pick.kernel_id, transform=True)])

    def _track_members(self, view: SchedulerView) -> None:
        present = {c.client_id for c in view.clients if c.priority != HIGH}
        for gone in [c for c in self.service if c not in present]:
            del self.service[gone]
            self._last_be_finish.pop(gone, None)
        floor = min(self.service.values(), default=0.0)
        for c in view.clients:
            if c.priority != HIGH and c.client_id not in self.service:
                self.service[c.client_id] = floor

    def on_unit_finished(self, unit: RunningUnit, now: float) -> None:
        if unit.priority == HIGH:
            self.last_hp_finish = now
        elif unit.client_id in self.service:
            since = max(unit.started_at, self._last_be_finish.get(unit.client_id, unit.started_at))
            self.service[unit.client_id] += max(0.0, now - since)
            self._last_be_finish[unit.client_id] = now
