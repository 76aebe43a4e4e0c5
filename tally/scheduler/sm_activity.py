"""The executor's own account of how busy the device's SMs are, by priority.

What the dynamic SM share and compute control read where no NVML/DCGM figure
exists (the emulator, the sim) and where one cannot say whose work it was (a
GPU's SM activity is the whole device's). Kept as running totals of SM-seconds,
so a reader takes the difference between two readings for any period.

The estimate: while a stream has launches on the device, one of them is
running (stream order) and it occupies min(its blocks, its SM cap) SMs, the
hardware block scheduler spreading a grid's blocks over SMs before it doubles
any up. Which of a stream's launches is running is not known between
completions (whole kernels complete in batches, see device_units.py), so the
stream counts the mean of its launches in flight. The device's total is
clipped at its SM count in every interval: kernels that overlap share SMs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

from tally.scheduler.policy import HIGH


@dataclass(frozen=True)
class ActivityTotals:
    """Running totals since the executor started, at time `t` (the executor's clock)."""

    t: float
    hp_sm_seconds: float          # SM-seconds of high-priority launches
    sm_seconds: float             # SM-seconds of every launch (<= sm_count x elapsed)
    busy_seconds: float           # seconds with at least one launch on the device
    hp_busy_seconds: float        # seconds with at least one high-priority launch on the device


class _StreamLoad:
    __slots__ = ("high", "sms", "launches")

    def __init__(self, high: bool):
        self.high = high
        self.sms = 0                  # sum over its launches in flight
        self.launches = 0


class SmActivity:
    """Call with the executor's lock held."""

    def __init__(self, sm_count: int, now: float):
        self.sm_count = sm_count
        self._streams: dict[Hashable, _StreamLoad] = {}
        self._t = now
        self._hp = 0.0
        self._all = 0.0
        self._busy = 0.0
        self._hp_busy = 0.0

    def launched(self, stream: Hashable, priority: str, sms: int, now: float) -> None:
        self._advance(now)
        load = self._streams.get(stream)
        if load is None:
            load = self._streams[stream] = _StreamLoad(priority == HIGH)
        load.sms += sms
        load.launches += 1

    def completed(self, stream: Hashable, sms: int, now: float) -> None:
        self._advance(now)
        load = self._streams.get(stream)
        if load is None:
            return
        load.sms -= sms
        load.launches -= 1
        if load.launches <= 0:
            del self._streams[stream]

    def totals(self, now: float) -> ActivityTotals:
        self._advance(now)
        return ActivityTotals(self._t, self._hp, self._all, self._busy, self._hp_busy)

    def _advance(self, now: float) -> None:
        dt = now - self._t
        if dt <= 0:
            return
        self._t = now
        if not self._streams:
            return
        hp = be = 0.0
        high = False
        for load in self._streams.values():
            rate = load.sms / load.launches
            if load.high:
                hp += rate
                high = True
            else:
                be += rate
        hp = min(hp, self.sm_count)
        self._hp += hp * dt
        self._all += min(hp + be, self.sm_count) * dt
        self._busy += dt
        if high:
            self._hp_busy += dt


def launch_sms(blocks: int, sm_cap: int | None, sm_count: int) -> int:
    """SMs a launch of `blocks` blocks (PTB: workers) occupies."""
    return max(1, min(blocks, sm_cap or sm_count, sm_count))
