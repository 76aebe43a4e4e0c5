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

Best-effort jobs share the idle time fairly: the next unit goes to the job
with the least device time received so far (ties: the job that joined first).
A job that joins late starts at the least service of those already present, so
it cannot monopolize the GPU to "catch up"."""
from __future__ import annotations

from typing import Hashable

from tally.scheduler.policy import (HIGH, HIGH_STREAM_PRIORITY, NORMAL_STREAM_PRIORITY, ClientView, LaneRule,
                                    RunningUnit, Schedule, SchedulerView, Start, gated_lane_rule)

DEFAULT_IDLE_GRACE_MS = 0.05


class PriorityPolicy:
    name = "priority"

    def __init__(self, idle_grace_ms: float = DEFAULT_IDLE_GRACE_MS):
        if idle_grace_ms < 0:
            raise ValueError(f"idle_grace_ms must be >= 0, got {idle_grace_ms}")
        self.idle_grace = idle_grace_ms / 1000.0
        self.service: dict[Hashable, float] = {}    # best-effort client -> device seconds
        self.last_hp_finish = float("-inf")

    def stream_priority(self, client: ClientView) -> int:
        return HIGH_STREAM_PRIORITY if client.priority == HIGH else NORMAL_STREAM_PRIORITY

    def starts_at_once(self, client: ClientView) -> bool:
        return client.priority == HIGH

    def lane_rule(self, client: ClientView) -> LaneRule:
        return gated_lane_rule(client, self.starts_at_once(client))

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
        if any(u.priority != HIGH for u in view.running):
            return Schedule()
        waiting = [k for k in view.waiting if k.priority != HIGH]
        if not waiting:
            return Schedule()
        idle_enough = self.last_hp_finish + self.idle_grace
        if view.now < idle_enough:
            return Schedule(wake_at=idle_enough)
        rank = {c.client_id: i for i, c in enumerate(view.clients)}
        pick = min(waiting, key=lambda k: (self.service[k.client_id], rank[k.client_id],
                                           k.waiting_since, k.kernel_id))
        return Schedule(start=[Start(pick.kernel_id, transform=True)])

    def _track_members(self, view: SchedulerView) -> None:
        present = {c.client_id for c in view.clients if c.priority != HIGH}
        for gone in [c for c in self.service if c not in present]:
            del self.service[gone]
        floor = min(self.service.values(), default=0.0)
        for c in view.clients:
            if c.priority != HIGH and c.client_id not in self.service:
                self.service[c.client_id] = floor

    def on_unit_finished(self, unit: RunningUnit, now: float) -> None:
        if unit.priority == HIGH:
            self.last_hp_finish = now
        elif unit.client_id in self.service:
            self.service[unit.client_id] += now - unit.started_at
