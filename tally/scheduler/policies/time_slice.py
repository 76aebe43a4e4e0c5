"""`time-slice`: round-robin quanta between jobs, priority-blind (what
GPU time-slicing between processes does).

One job owns the GPU at a time: only its kernels start, one at a time per
stream. When its quantum is over and another job has work, the owner gets no
new kernels; once its running kernels finish, the next job (in the order jobs
joined) owns the GPU for a fresh quantum. A job with nothing to run gives the
GPU up at once (work-conserving). Running kernels are never interrupted, so a
quantum can overrun by the length of the kernels in flight."""
from __future__ import annotations

from typing import Hashable

from tally.scheduler.policy import (NORMAL_STREAM_PRIORITY, ClientView, LaneRule, RunningUnit, Schedule,
                                    SchedulerView, Start, gated_lane_rule)


class TimeSlicePolicy:
    name = "time-slice"

    def __init__(self, quantum_ms: float = 10.0):
        if not quantum_ms > 0:
            raise ValueError(f"time-slice quantum must be > 0 ms, got {quantum_ms}")
        self.quantum = quantum_ms / 1000.0
        self.owner: Hashable | None = None
        self.quantum_end = 0.0

    def stream_priority(self, client: ClientView) -> int:
        return NORMAL_STREAM_PRIORITY

    def starts_at_once(self, client: ClientView) -> bool:
        return False

    def lane_rule(self, client: ClientView) -> LaneRule:
        return gated_lane_rule(client, self.starts_at_once(client))

    def releases_at_once(self, client: ClientView, view: SchedulerView) -> bool:
        return False      # quanta are the executor's to keep

    def schedule(self, view: SchedulerView) -> Schedule:
        order = [c.client_id for c in view.clients]
        has_work = {k.client_id for k in view.waiting} | {u.client_id for u in view.running}
        busy = [c for c in order if c in has_work]
        if not busy:
            self.owner = None
            return Schedule()
        owner_running = any(u.client_id == self.owner for u in view.running)
        others = [c for c in busy if c != self.owner]
        if self.owner not in has_work:
            self._hand_over(busy, order, view.now)
        elif view.now >= self.quantum_end and others:
            if owner_running:
                return Schedule()          # drain the owner's kernels, then switch
            self._hand_over(others, order, view.now)
        start = [Start(k.kernel_id) for k in view.waiting
                 if k.client_id == self.owner and not k.stream_busy]
        contended = any(c != self.owner for c in busy)
        return Schedule(start=start, wake_at=self.quantum_end if contended else None)

    def _hand_over(self, candidates: list[Hashable], order: list[Hashable], now: float) -> None:
        """Next candidate after the current owner in join order (wrapping)."""
        if self.owner in order:
            pos = order.index(self.owner)
            rotated = order[pos + 1:] + order[:pos + 1]
        else:
            rotated = order
        self.owner = next(c for c in rotated if c in candidates)
        self.quantum_end = now + self.quantum

    def on_unit_finished(self, unit: RunningUnit, now: float) -> None:
        pass
