"""Feeds the hooks' OnDeviceSample plugins (dynamic SM, compute control) a sample
of the device every period.

On the wall clock the sampler is a thread of its own, so a slow source (NVML
queries take milliseconds) never delays the executor's timers. On a virtual
clock (the sim's) it runs as the clock's timer, so it follows simulated time
and runs deterministically between simulated events.
"""
from __future__ import annotations

import logging
import threading

from tally.cluster.device_metrics import DeviceSample, MetricsSource
from tally.scheduler.hooks import Hooks

log = logging.getLogger("tally.cluster")


class DeviceSampler:
    def __init__(self, source: MetricsSource, hooks: Hooks, period_s: float):
        if not period_s > 0:
            raise ValueError(f"the sample period must be > 0 s, got {period_s}")
        self.source, self.hooks, self.period_s = source, hooks, period_s
        self.latest: DeviceSample | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._timer = None

    def tick(self) -> None:
        """One sample, handed to every OnDeviceSample plugin."""
        try:
            sample = self.source.sample()
        except Exception:                 # noqa: BLE001 - a failing source must not stop the server
            log.exception("device sample from %s failed", self.source.name)
            return
        if sample is None:
            return
        self.latest = sample
        self.samples += 1
        self.hooks.device_sample(sample)

    def start_thread(self) -> None:
        def run() -> None:
            while not self._stop.wait(self.period_s):
                self.tick()

        self._thread = threading.Thread(target=run, name="tally-device-sampler", daemon=True)
        self._thread.start()

    def start_on_clock(self, clock) -> None:
        """Sample every period of `clock` (a tally.scheduler.clock.Clock) by its timers."""
        def run() -> None:
            if self._stop.is_set():
                return
            self.tick()
            self._timer = clock.call_at(clock.now() + self.period_s, run)

        self._timer = clock.call_at(clock.now() + self.period_s, run)

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.source.close()
