"""The levers tally-server's flags pull on best-effort jobs (a static SM share,
dynamic SM allocation, compute control), set up for a simulated run the way the
server's wiring sets them up for real jobs: plugins on the hooks, fed by
tally's own accounting every sample period on the sim's clock."""
from __future__ import annotations

from dataclasses import dataclass, field

from tally.cluster.compute_control import ComputeControl, Gains
from tally.cluster.dynamic_sm import DynamicSm, DynamicSmConfig
from tally.cluster.executor_source import ExecutorActivitySource
from tally.cluster.sampler import DeviceSampler
from tally.scheduler.hooks import Hooks


class _Averages:
    """The device's mean SM activity over the run's samples (for the report)."""

    def __init__(self):
        self.samples = 0
        self.sm_active = 0.0
        self.hp_sm_active = 0.0

    def on_sample(self, sample) -> None:
        if sample.sm_active_percent is None:
            return
        self.samples += 1
        self.sm_active += sample.sm_active_percent
        self.hp_sm_active += sample.hp_sm_active_percent or 0.0

    def describe(self) -> dict:
        n = max(self.samples, 1)
        return {"samples": self.samples, "mean_sm_active_percent": round(self.sm_active / n, 1),
                "mean_hp_sm_active_percent": round(self.hp_sm_active / n, 1)}


@dataclass
class SharingLevers:
    be_sm_percent: float | None = None
    dynamic: DynamicSmConfig | None = None
    compute: Gains | None = None
    sample_period_s: float = 0.05
    hooks: Hooks = field(default_factory=Hooks)
    _dynamic_sm: DynamicSm | None = None
    _compute_control: ComputeControl | None = None
    _sampler: DeviceSampler | None = None
    _averages: _Averages | None = None

    @classmethod
    def from_config(cls, c) -> "SharingLevers":
        """From a ColocateConfig's be_sm_percent, dynamic_sm, be_sm_floor, be_util_target."""
        return cls(be_sm_percent=c.be_sm_percent,
                   dynamic=DynamicSmConfig(floor_percent=c.be_sm_floor) if c.dynamic_sm else None,
                   compute=Gains(target=c.be_util_target) if c.be_util_target is not None else None,
                   sample_period_s=c.sample_period_ms / 1000.0)

    def attach(self, executor, best_effort_clients: list) -> None:
        if self.compute is not None:
            self._compute_control = ComputeControl(self.compute)
            self.hooks.register(self._compute_control)
        if self.dynamic is not None:
            self._dynamic_sm = DynamicSm(executor, self.dynamic)
            self.hooks.register(self._dynamic_sm)
            for client_id in best_effort_clients:
                self._dynamic_sm.track(client_id, self.be_sm_percent)
        if self.hooks.on_sample:
            self._averages = _Averages()
            self.hooks.register(self._averages)
            self._sampler = DeviceSampler(ExecutorActivitySource(executor), self.hooks, self.sample_period_s)
            self._sampler.start_on_clock(executor.clock)

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()

    def describe(self) -> dict:
        out = {}
        if self._dynamic_sm is not None:
            out["dynamic_sm"] = self._dynamic_sm.describe()
        if self._compute_control is not None:
            out["compute_control"] = self._compute_control.describe()
        if self._averages is not None:
            out["device"] = self._averages.describe()
        return out
