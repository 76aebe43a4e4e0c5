"""The executor's own accounting as a metrics source: how busy the SMs were over
each period, in all and for the high-priority jobs (tally.scheduler.sm_activity),
and the device memory in use. The source for the emulator and the sim, and the
only one that knows whose work kept the SMs busy (NVML does not).

Each sample covers the time since the previous one (the first: since the
executor started), on the executor's clock, so on the sim it is virtual time.
"""
from __future__ import annotations

from typing import Protocol

from tally.cluster.device_metrics import DeviceSample
from tally.scheduler.sm_activity import ActivityTotals


class ActivityAccount(Protocol):
    """What the source reads: the executor (StreamExecutor.activity, .sm_count)."""

    sm_count: int

    def activity(self) -> ActivityTotals: ...


class ExecutorActivitySource:
    name = "tally's accounting"

    def __init__(self, account: ActivityAccount, mem_info=None):
        self.account = account
        self.mem_info = mem_info            # backend.mem_info, or None
        self._last = account.activity()

    def sample(self) -> DeviceSample | None:
        now = self.account.activity()
        last, self._last = self._last, now
        elapsed = now.t - last.t
        if elapsed <= 0:
            return DeviceSample(t=now.t)
        capacity = self.account.sm_count * elapsed
        memory_used = memory_total = None
        if self.mem_info is not None:
            free, memory_total = self.mem_info()
            memory_used = memory_total - free
        return DeviceSample(
            t=now.t,
            gpu_util_percent=_percent(now.busy_seconds - last.busy_seconds, elapsed),
            sm_active_percent=_percent(now.sm_seconds - last.sm_seconds, capacity),
            hp_sm_active_percent=_percent(now.hp_sm_seconds - last.hp_sm_seconds, capacity),
            hp_busy_percent=_percent(now.hp_busy_seconds - last.hp_busy_seconds, elapsed),
            memory_used_bytes=memory_used, memory_total_bytes=memory_total)

    def close(self) -> None:
        pass


def _percent(part: float, whole: float) -> float:
    return min(100.0, max(0.0, 100.0 * part / whole))
