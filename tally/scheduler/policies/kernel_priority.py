"""`kernel-priority`: priorities at kernel granularity, no transformations.

High-priority kernels go out at once on high-priority streams. A best-effort
kernel is started only while no high-priority kernel is queued or running, one
at a time per best-effort stream (so few are committed to the device when
high-priority work returns). Once started, a best-effort kernel runs to the
end: a long one delays the high-priority job by its whole remaining time."""
from __future__ import annotations

from tally.scheduler.policy import (HIGH, HIGH_STREAM_PRIORITY, NORMAL_STREAM_PRIORITY, ClientView, LaneRule,
                                    RunningUnit, Schedule, SchedulerView, Start, gated_lane_rule)


class KernelPriorityPolicy:
    name = "kernel-priority"

    def stream_priority(self, client: ClientView) -> int:
        return HIGH_STREAM_PRIORITY if client.priority == HIGH else NORMAL_STREAM_PRIORITY

    def starts_at_once(self, client: ClientView) -> bool:
        return client.priority == HIGH

    def lane_rule(self, client: ClientView) -> LaneRule:
        return gated_lane_rule(client, self.starts_at_once(client))

    def releases_at_once(self, client: ClientView, view: SchedulerView) -> bool:
        return client.priority == HIGH or not (any(k.priority == HIGH for k in view.waiting)
                                               or any(u.priority == HIGH for u in view.running))

    def schedule(self, view: SchedulerView) -> Schedule:
        start = [Start(k.kernel_id) for k in view.waiting if k.priority == HIGH]
        hp_busy = bool(start) or any(u.priority == HIGH for u in view.running)
        if not hp_busy:
            start = [Start(k.kernel_id) for k in view.waiting if not k.stream_busy]
        return Schedule(start=start)

    def on_unit_finished(self, unit: RunningUnit, now: float) -> None:
        pass
