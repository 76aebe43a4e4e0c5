"""Dynamic SM allocation: from the high-priority jobs' SM activity to each
best-effort job's share, with its floor, the jobs' own shares as ceilings, an even
split, a few share levels only; and the sampler that feeds it on the sim's clock."""
from __future__ import annotations

import pytest

from tally.backends.sim import SimBackend
from tally.cluster.device_metrics import DeviceSample
from tally.cluster.dynamic_sm import DynamicSm, DynamicSmConfig
from tally.cluster.executor_source import ExecutorActivitySource
from tally.cluster.sampler import DeviceSampler
from tally.scheduler import StreamExecutor, make_policy
from tally.scheduler.hooks import Hooks


class Shares:
    """Records what the plugin sets (stands where the executor's set_sm_percent is)."""

    def __init__(self):
        self.now: dict = {}
        self.gone: set = set()

    def set_sm_percent(self, client_id, percent):
        if client_id in self.gone:
            raise ValueError(f"unknown client {client_id!r}")
        self.now[client_id] = percent
        return 0


def sample(hp: float | None, busy: float | None = None, t: float = 0.0) -> DeviceSample:
    return DeviceSample(t=t, hp_sm_active_percent=hp, hp_busy_percent=busy)


def test_a_busy_high_priority_job_leaves_best_effort_jobs_the_sms_it_does_not_hold():
    shares = Shares()
    plugin = DynamicSm(shares, DynamicSmConfig(window=1, busy_threshold_percent=60))
    plugin.track("be", None)
    assert shares.now == {"be": None}                  # nothing measured yet: the whole device
    # (SM activity, busy): busy 80% of the time on 50% of the SMs -> 50% left while it runs
    for hp, busy, expected in [(40.0, 80.0, 50.0), (70.0, 70.0, 10.0), (24.0, 80.0, 70.0),
                               (90.0, 100.0, 10.0), (60.0, 100.0, 40.0)]:
        plugin.on_sample(sample(hp, busy))
        assert shares.now["be"] == expected, (hp, busy)
    # a mostly idle high-priority job: the whole device, the scheduler keeps its work first
    plugin.on_sample(sample(50.0, 59.0))
    assert shares.now["be"] is None and plugin.best_effort_percent == 100.0
    plugin.on_sample(sample(None))                     # no figure: nothing changes
    assert shares.now["be"] is None
    assert plugin.describe() == {"best_effort_percent": 100.0, "floor_percent": 10.0}


def test_without_a_busy_figure_the_share_is_100_minus_the_activity():
    shares = Shares()
    plugin = DynamicSm(shares, DynamicSmConfig(window=1))
    plugin.track("be", None)
    for hp, expected in [(35.0, 60.0), (0.0, None), (72.0, 20.0), (97.0, 10.0)]:
        plugin.on_sample(sample(hp))
        assert shares.now["be"] == expected, hp


def test_shares_are_split_bounded_by_each_jobs_own_and_floored():
    shares = Shares()
    plugin = DynamicSm(shares, DynamicSmConfig(floor_percent=20.0, window=1))
    plugin.track("a", None)
    plugin.track("b", 25.0)                            # asked for 25% (tally-run --sm-percent)
    plugin.on_sample(sample(10.0, 100.0))              # 90% left: 45% each, b at most 25%
    assert shares.now == {"a": 40.0, "b": 25.0}
    plugin.on_sample(sample(95.0, 100.0))              # the floor, together: 10% each
    assert shares.now == {"a": 10.0, "b": 10.0}
    plugin.forget("b")
    shares.gone.add("b")
    plugin.on_sample(sample(95.0, 100.0))
    assert shares.now["a"] == 20.0


def test_the_figures_are_averaged_over_the_window():
    shares = Shares()
    plugin = DynamicSm(shares, DynamicSmConfig(window=4, busy_threshold_percent=60))
    plugin.track("be", None)
    for hp, busy in ((95.0, 100.0), (95.0, 100.0), (95.0, 100.0), (0.0, 0.0)):
        plugin.on_sample(sample(hp, busy))             # busy 75% of the window, on 95% of the SMs
    assert shares.now["be"] == 10.0
    plugin.on_sample(sample(0.0, 0.0))                 # busy 50%: below the threshold
    assert shares.now["be"] is None


def test_a_job_that_left_between_a_sample_and_its_share_is_skipped():
    shares = Shares()
    plugin = DynamicSm(shares, DynamicSmConfig(window=1))
    plugin.track("a", None)
    plugin.track("b", None)
    shares.gone.add("b")                               # the executor removed it already
    plugin.on_sample(sample(50.0, 100.0))
    assert shares.now["a"] == 20.0


@pytest.mark.parametrize("field, value", [("floor_percent", 0.0), ("floor_percent", 120.0),
                                          ("busy_threshold_percent", -1.0), ("busy_threshold_percent", 101.0),
                                          ("step_percent", 0.0), ("window", 0)])
def test_bad_configuration_is_refused(field, value):
    with pytest.raises(ValueError):
        DynamicSmConfig(**{field: value})


def test_the_sampler_feeds_plugins_every_period_of_the_sims_clock():
    sim = SimBackend()
    ex = StreamExecutor(sim, make_policy("priority"), sim.variant_provider(), clock=sim.clock)
    seen: list[DeviceSample] = []

    class Recorder:
        def on_sample(self, s):
            seen.append(s)

    hooks = Hooks()
    hooks.register(Recorder())
    sampler = DeviceSampler(ExecutorActivitySource(ex, sim.mem_info), hooks, period_s=0.01)
    sampler.start_on_clock(ex.clock)
    sim.run_until(0.105)
    assert len(seen) == 10 and sampler.samples == 10
    assert [round(s.t, 6) for s in seen] == [round(0.01 * i, 6) for i in range(1, 11)]
    sampler.stop()
    sim.run_until(0.2)
    assert len(seen) == 10
    with pytest.raises(ValueError, match="sample period"):
        DeviceSampler(ExecutorActivitySource(ex), hooks, period_s=0)
