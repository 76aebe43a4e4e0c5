"""Dynamic SM allocation (after MuxFlow): every sample period the best-effort jobs
together get the SMs the high-priority jobs leave, never below a floor and never
above a job's own share.

What the high-priority jobs leave is read from tally's accounting
(tally.cluster.executor_source), over the last `window` samples:
- busy: the share of the time high-priority work was on the device
  (DeviceSample.hp_busy_percent), and
- occupancy: the share of the SMs it held while it was there
  (hp_sm_active_percent / busy).
While the high-priority jobs are busy at least `busy_threshold_percent` of the
time, the best-effort jobs get the SMs they leave while they run, 100% minus their
occupancy (at least the floor). While they are busy less, the best-effort jobs get
the whole device, and the scheduler's priorities keep the high-priority work first.

Why not MuxFlow's 100% minus the time-averaged SM activity throughout: a share
confines whole kernels (a GPU moves a job between partitions only at kernel
boundaries), so a kernel at half the SMs runs twice as long and is twice as likely
to be running when the next high-priority request arrives, which then finds SMs
taken. On the sim (bench/results/sm-share-sim-2026-11-25.md) every static share
between the floor and the whole device gave the high-priority p99 more overhead
than the whole device did, and the time-averaged rule gave both less best-effort
throughput and a worse p99 than no share at all. A source without the busy figure
(NVML) gets the time-averaged rule.

The result is split evenly between the best-effort jobs and rounded down to a
multiple of `step_percent` (a job's share takes a few values only: the profiler
plans PTB workers per share, and a GPU keeps one partition per share). The
executor applies a new share from the job's next kernel on.
"""
from __future__ import annotations

import collections
import math
import threading
from dataclasses import dataclass
from typing import Hashable, Protocol

from tally.cluster.device_metrics import DeviceSample


class ShareSetter(Protocol):
    def set_sm_percent(self, client_id: Hashable, percent: float | None) -> int: ...


@dataclass(frozen=True)
class DynamicSmConfig:
    floor_percent: float = 10.0           # best-effort jobs together never get less (--be-sm-floor)
    busy_threshold_percent: float = 60.0  # high-priority busy at least this much: they get its leftover SMs only
    step_percent: float = 10.0            # shares are multiples of this
    window: int = 5                       # samples averaged

    def __post_init__(self):
        if not 0 < self.floor_percent <= 100:
            raise ValueError(f"the best-effort SM floor must be in (0, 100]%, got {self.floor_percent}")
        if not 0 <= self.busy_threshold_percent <= 100:
            raise ValueError(f"the busy threshold must be in [0, 100]%, got {self.busy_threshold_percent}")
        if not 0 < self.step_percent <= 100:
            raise ValueError(f"the share step must be in (0, 100]%, got {self.step_percent}")
        if self.window < 1:
            raise ValueError(f"the averaging window must be at least 1 sample, got {self.window}")


class DynamicSm:
    """The plugin (OnDeviceSample). `track` / `forget` keep its list of best-effort
    jobs and their own shares current (the server's wiring calls them)."""

    def __init__(self, executor: ShareSetter, config: DynamicSmConfig = DynamicSmConfig()):
        self.executor = executor
        self.config = config
        self._lock = threading.Lock()
        self._ceilings: dict[Hashable, float] = {}      # best-effort job -> its own share (100: none)
        self._recent: collections.deque = collections.deque(maxlen=config.window)
        self.best_effort_percent = 100.0                # what the jobs together get now

    def track(self, client_id: Hashable, own_percent: float | None) -> None:
        with self._lock:
            self._ceilings[client_id] = 100.0 if own_percent is None else float(own_percent)
            shares = self._shares()
        self._apply(shares)

    def forget(self, client_id: Hashable) -> None:
        with self._lock:
            self._ceilings.pop(client_id, None)

    def on_sample(self, sample: DeviceSample) -> None:
        if sample.hp_sm_active_percent is None:
            return
        with self._lock:
            self._recent.append((sample.hp_sm_active_percent, sample.hp_busy_percent))
            self.best_effort_percent = self._best_effort_total()
            shares = self._shares()
        self._apply(shares)

    def describe(self) -> dict:
        return {"best_effort_percent": round(self.best_effort_percent, 1),
                "floor_percent": self.config.floor_percent}

    def _best_effort_total(self) -> float:
        c = self.config
        active = sum(a for a, _ in self._recent) / len(self._recent)
        if any(b is None for _, b in self._recent):
            left = 100.0 - active                       # no busy figure: the time-averaged rule
        else:
            busy = sum(b for _, b in self._recent) / len(self._recent)
            if busy < c.busy_threshold_percent:
                return 100.0
            left = 100.0 - min(100.0, 100.0 * active / busy)
        return min(100.0, max(c.floor_percent, left))

    def _shares(self) -> dict[Hashable, float | None]:
        if not self._ceilings:
            return {}
        each = self.best_effort_percent / len(self._ceilings)
        step = self.config.step_percent
        quantized = math.floor(each / step + 1e-9) * step if each >= step else each
        out = {}
        for client_id, ceiling in self._ceilings.items():
            share = min(quantized, ceiling)
            out[client_id] = None if share >= 100 else share
        return out

    def _apply(self, shares: dict) -> None:
        for client_id, share in shares.items():
            try:
                self.executor.set_sm_percent(client_id, share)
            except ValueError:
                pass          # the job left between the sample and now
