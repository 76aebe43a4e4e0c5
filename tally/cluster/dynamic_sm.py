"""Dynamic SM allocation (MuxFlow): every sample period the best-effort jobs
together get the SMs the high-priority jobs left idle, 100% minus their SM
activity, never below a floor and never above a job's own share.

Input: DeviceSample.hp_sm_active_percent (tally's accounting of the
high-priority jobs' busy SMs, tally.cluster.executor_source). A sample without
it changes nothing. Output: executor.set_sm_percent for each best-effort job;
the executor passes the new cap on that job's next launches, so a job moves
between shares at kernel boundaries (a running kernel keeps its SMs, as a GPU's
green contexts require).

The high-priority activity is smoothed over the last `window` samples (their
mean): one quiet period between bursts must not hand the whole device to
best-effort kernels that then run into the next burst. The best-effort total is
split evenly between the jobs and rounded down to a multiple of `step_percent`,
so a job's share takes a few values only (the profiler plans PTB workers per
share, and a GPU keeps one partition per share). A job's own share (its
--sm-percent, or the server's --be-sm-percent) bounds what it gets.
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
    floor_percent: float = 10.0       # best-effort jobs together never get less (--be-sm-floor)
    step_percent: float = 10.0        # shares are multiples of this
    window: int = 4                   # samples the high-priority activity is averaged over

    def __post_init__(self):
        if not 0 < self.floor_percent <= 100:
            raise ValueError(f"the best-effort SM floor must be in (0, 100]%, got {self.floor_percent}")
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
        self._recent: collections.deque[float] = collections.deque(maxlen=config.window)
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
            self._recent.append(sample.hp_sm_active_percent)
            hp = sum(self._recent) / len(self._recent)
            self.best_effort_percent = min(100.0, max(self.config.floor_percent, 100.0 - hp))
            shares = self._shares()
        self._apply(shares)

    def describe(self) -> dict:
        return {"best_effort_percent": round(self.best_effort_percent, 1),
                "floor_percent": self.config.floor_percent}

    def _shares(self) -> dict[Hashable, float | None]:
        if not self._ceilings:
            return {}
        each = self.best_effort_percent / len(self._ceilings)
        step = self.config.step_percent
        quantized = max(step, math.floor(each / step + 1e-9) * step) if each >= step else each
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
