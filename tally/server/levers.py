"""The server's wiring of the SM-share levers: which cluster plugins its flags
register on the hooks, the sampler that feeds them, and what the status shows
of them.

- --be-sm-percent: a best-effort job's share when it asks for none, and the most
  it may ask for (admission applies it; the executor confines its launches).
- --dynamic-sm (--be-sm-floor): tally.cluster.dynamic_sm, fed by tally's own
  accounting (tally.cluster.executor_source) every --sample-period-ms.
- --be-util-target: tally.cluster.compute_control on the same samples; the
  executor asks its gate before every best-effort unit.

The sampler runs whenever a plugin reads samples (SysProbe does unless
--no-health), every --sample-period-ms while dynamic SM or compute control are
on, else every SysProbe sample_interval_s; its source is chosen by
tally/server/metrics_source.py. Its first sample is taken before the server
admits anyone, so SysProbe leaves `init` at once.
"""
from __future__ import annotations

import logging
from typing import Hashable

from tally.cluster.compute_control import ComputeControl, Gains
from tally.cluster.dynamic_sm import DynamicSm, DynamicSmConfig
from tally.cluster.sampler import DeviceSampler
from tally.scheduler.hooks import Hooks
from tally.server.metrics_source import make_metrics_source

log = logging.getLogger("tally.server")


class SmLevers:
    def __init__(self, config, hooks: Hooks):
        self.config = config
        self.hooks = hooks
        self.dynamic_sm: DynamicSm | None = None
        self.compute_control: ComputeControl | None = None
        self.sampler: DeviceSampler | None = None
        self._health_period_s: float | None = None           # SysProbe's sample_interval_s, when it runs
        self._shares: dict[Hashable, float | None] = {}     # each job's own share (admitted)
        if config.be_util_target is not None:
            self.compute_control = ComputeControl(Gains(target=config.be_util_target))
            hooks.register(self.compute_control)

    def start(self, executor, backend, health_period_s: float | None = None) -> None:
        """Once the executor exists: dynamic SM acts on it, the sampler reads it.
        `health_period_s`: SysProbe's sample interval, when it runs."""
        if self.config.dynamic_sm:
            self.dynamic_sm = DynamicSm(executor, DynamicSmConfig(floor_percent=self.config.be_sm_floor))
            self.hooks.register(self.dynamic_sm)
        self._health_period_s = health_period_s
        if self.hooks.on_sample:
            source = make_metrics_source(self.config, backend, executor)
            self.sampler = DeviceSampler(source, self.hooks, self._period_s())
            self.sampler.tick()
            if backend.traits.virtual_clock:
                self.sampler.start_on_clock(executor.clock)
            else:
                self.sampler.start_thread()

    def _period_s(self) -> float:
        periods = [p for p in (self._health_period_s,) if p is not None]
        if self.dynamic_sm is not None or self.compute_control is not None or not periods:
            periods.append(self.config.sample_period_ms / 1000.0)
        return min(periods)

    def health_period_changed(self, period_s: float) -> None:
        """SysProbe's sample interval changed (its config was reloaded)."""
        self._health_period_s = period_s
        if self.sampler is not None:
            self.sampler.period_s = self._period_s()

    def client_added(self, client_id: Hashable, best_effort: bool, sm_percent: float | None) -> None:
        self._shares[client_id] = sm_percent
        if best_effort and self.dynamic_sm is not None:
            self.dynamic_sm.track(client_id, sm_percent)

    def share_set(self, client_id: Hashable, best_effort: bool, sm_percent: float) -> None:
        """The operator gave a job a new share (tally-server set): the status shows
        it, and with --dynamic-sm it is the job's new ceiling."""
        self.client_added(client_id, best_effort, sm_percent)

    def client_removed(self, client_id: Hashable) -> None:
        self._shares.pop(client_id, None)
        if self.dynamic_sm is not None:
            self.dynamic_sm.forget(client_id)

    def share_of(self, client_id: Hashable) -> float | None:
        return self._shares.get(client_id)

    def describe(self) -> dict:
        """The status record's view: the dynamic share and the controller's hold now."""
        out = {}
        if self.dynamic_sm is not None:
            out["dynamic_sm"] = self.dynamic_sm.describe()
        if self.compute_control is not None:
            out["compute_control"] = self.compute_control.describe()
        if self.sampler is not None and self.sampler.latest is not None:
            s = self.sampler.latest
            out["device_sample"] = {"sm_active_percent": s.sm_active_percent,
                                    "hp_sm_active_percent": s.hp_sm_active_percent}
        return out

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
