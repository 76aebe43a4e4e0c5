"""`fifo`: no scheduling. Every kernel goes to the device the moment it reaches
the head of its queue, on equal-priority streams: what plain sharing (or MPS
without priorities) does, and the baseline every other policy is measured
against."""
from __future__ import annotations

from tally.scheduler.policy import (NORMAL_STREAM_PRIORITY, ClientView, LaneRule, RunningUnit, Schedule,
                                    SchedulerView, Start, gated_lane_rule)


class FifoPolicy:
    name = "fifo"

    def stream_priority(self, client: ClientView) -> int:
        return NORMAL_STREAM_PRIORITY

    def starts_at_once(self, client: ClientView) -> bool:
        return True

    def lane_rule(self, client: ClientView) -> LaneRule:
        return gated_lane_rule(client, self.starts_at_once(client))

    def releases_at_once(self, client: ClientView, view: SchedulerView) -> bool:
        return True

    def schedule(self, view: SchedulerView) -> Schedule:
        return Schedule(start=[Start(k.kernel_id) for k in view.waiting])

    def on_unit_finished(self, unit: RunningUnit, now: float) -> None:
        pass
