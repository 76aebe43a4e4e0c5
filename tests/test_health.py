"""SysProbe's state machine driven by recorded device traces (tests/data/health,
made by make_traces.py there, judged by health.toml there): every transition,
with its time and cause, the evictions and back-offs, and what the plugin
admits meanwhile."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tally.cluster.device_metrics import DeviceSample
from tally.cluster.health import (EvictBestEffort, EvictionOrder, HealthState, RefuseBestEffort, State,
                                  health_step)
from tally.cluster.health_config import load_health_config
from tally.cluster.sysprobe import SysProbe
from tally.cluster.trace_source import TraceSource, read_trace
from tally.scheduler.hooks import AdmissionRequest, Code, Hooks

DATA = Path(__file__).parent / "data" / "health"
CONFIG = load_health_config(DATA / "health.toml")
BEST_EFFORT = AdmissionRequest(pid=100, program="train.py", high_priority=False, memory_quota_bytes=None,
                               sm_percent=None)
HIGH = AdmissionRequest(pid=101, program="serve.py", high_priority=True, memory_quota_bytes=None, sm_percent=None)
I, H, U, O, D = State.INIT, State.HEALTHY, State.UNHEALTHY, State.OVERLIMIT, State.DISABLED


def replay(trace: str, probe: SysProbe | None = None, until: float | None = None):
    """Feed a trace through the plugin as the server would (the trace source, then
    on_sample, then drain the actions); checks the admission rule at every sample.
    Returns the probe and every action, in order."""
    probe = probe or SysProbe(CONFIG)
    source, actions = TraceSource(DATA / f"{trace}.jsonl"), []
    while (sample := source.sample()) is not None:
        if until is not None and sample.t > until:
            break
        probe.on_sample(sample)
        actions += probe.drain_actions()
        assert probe.admit(HIGH).allowed                                  # never refused
        assert probe.admit(BEST_EFFORT).allowed == (probe.state is H)
    return probe, actions


def path(probe: SysProbe):
    return [(tr.t, tr.from_state, tr.to_state) for tr in probe.transitions()]


def test_a_sustained_warning_makes_the_device_unhealthy_and_a_sustained_clear_heals_it():
    probe, actions = replay("warning_recovery")
    # idle down-clocking at t=2-3 and the one-sample spike at t=5 change nothing;
    # 88 C from t=10 (a missing reading at t=15 inside) is 10 s old at t=20; the
    # readings are back under at t=26, and an empty sample at t=30 ends nothing
    assert path(probe) == [(0.0, I, H), (20.0, H, U), (36.0, U, H)]
    first, warm, healed = probe.transitions()
    assert first.cause.kind == "first_reading"
    assert (warm.cause.kind, warm.cause.metric, warm.cause.value, warm.cause.level, warm.cause.since) == \
        ("warning", "temperature_c", 88.0, 85.0, 10.0)
    assert "temperature_c 88 C > 85 C ([thresholds] temperature_c) since t=10 (10 s)" == warm.cause.text
    assert (healed.cause.kind, healed.cause.since) == ("clear", 26.0)
    assert actions == []
    assert probe.describe()["state"] == "healthy"


def test_memory_over_its_limit_evicts_largest_first_until_it_falls_then_recovers_after_the_back_off():
    probe, actions = replay("memory_overlimit")
    assert path(probe) == [(0.0, I, H), (20.0, H, U), (45.0, U, O), (65.0, O, U), (66.0, U, H)]
    unhealthy, overlimit = probe.transitions()[1:3]
    assert (unhealthy.cause.metric, unhealthy.cause.value, unhealthy.cause.since) == \
        ("memory_used_percent", 98.75, 10.0)        # the reading at t=20
    assert (overlimit.cause.kind, overlimit.cause.metric, overlimit.cause.value, overlimit.cause.level,
            overlimit.cause.since) == ("limit", "memory_used_percent", 98.75, 98.0, 15.0)
    refusals = [a for a in actions if isinstance(a, RefuseBestEffort)]
    assert [(a.t, a.until, a.backoff_s, a.recent_entries) for a in refusals] == [(45.0, 65.0, 20.0, 1)]
    evictions = [a for a in actions if isinstance(a, EvictBestEffort)]
    # one at a time, every evict_interval_s while memory is still over the limit (until t=55)
    assert [(a.t, a.count, a.order) for a in evictions] == \
        [(t, 1, EvictionOrder.LARGEST_MEMORY_FIRST) for t in (45.0, 50.0, 55.0)]
    assert "memory_used_percent 98.125% > 98% ([limits] memory_used_percent) since t=15" in evictions[-1].reason
    # back-off over at 65, memory under its warning level only since t=56: unhealthy for one more second
    assert probe.transitions()[3].cause.kind == "backoff_over"
    assert probe.transitions()[4].cause.since == 56.0


def test_the_back_off_grows_with_recent_overlimit_entries_up_to_its_cap_and_forgets_old_ones():
    probe, actions = replay("repeated_overlimit")
    refusals = [(a.t, a.until, a.backoff_s, a.recent_entries) for a in actions if isinstance(a, RefuseBestEffort)]
    assert refusals == [(40.0, 60.0, 20.0, 1),     # backoff_s
                        (110.0, 150.0, 40.0, 2),   # x backoff_factor
                        (190.0, 250.0, 60.0, 3),   # 80 capped at backoff_max_s
                        (490.0, 510.0, 20.0, 1)]   # the others entered overlimit_history_s or more before
    assert path(probe) == [(0.0, I, H),
                           (20.0, H, U), (40.0, U, O), (60.0, O, H),
                           (90.0, H, U), (110.0, U, O), (150.0, O, H),
                           # power stays over its limit past the back-off's end (250): left at 261
                           (170.0, H, U), (190.0, U, O), (261.0, O, U), (272.0, U, H),
                           (470.0, H, U), (490.0, U, O), (510.0, O, H)]
    evictions = [a for a in actions if isinstance(a, EvictBestEffort)]
    assert all(a.order is EvictionOrder.NEWEST_FIRST and a.count == 1 for a in evictions)   # power: newest first
    assert [a.t for a in evictions] == [40.0, 45.0, 110.0, 115.0, *range(190, 261, 5), 490.0, 495.0]
    assert probe.transitions()[2].cause.metric == "power_percent_of_limit"
    assert probe.transitions()[2].cause.value == pytest.approx(100 * 710 / 700)


def test_a_fatal_xid_disables_the_device_until_the_operator_enables_it():
    probe, actions = replay("xid_disable", until=40)
    # XID 31 at t=10 is an application's fault (not in [xid] fatal): no transition
    assert path(probe) == [(0.0, I, H), (20.0, H, D)]
    disabled = probe.transitions()[-1]
    assert (disabled.cause.kind, disabled.cause.xids) == ("xid", (79,))
    assert [(a.t, a.count) for a in actions] == [(20.0, None)]          # every best-effort job
    # samples after it, one over a limit at t=30, change nothing
    assert probe.state is D and "fatal XID 79" in probe.admit(BEST_EFFORT).reason
    assert probe.enable("riser replaced", t=40.5)[0].to_state is I
    replay("xid_disable", probe)     # the rest of the trace: samples older than the enable are ignored
    assert path(probe)[-2:] == [(40.5, D, I), (41.0, I, H)]
    assert probe.transitions()[-2].cause.text == "enabled by the operator: riser replaced"


def test_the_operator_disables_and_enables_without_evicting():
    probe, _ = replay("warning_recovery", until=3)
    assert probe.state is H and probe.admit(BEST_EFFORT).allowed
    assert probe.disable("GPU maintenance at 14:00")[0].t == 3.0         # at the last sample's time
    assert probe.disable("again") == []                                  # already disabled
    refused = probe.admit(BEST_EFFORT)
    assert refused.code is Code.DENY and "GPU maintenance at 14:00" in refused.reason
    assert probe.admit(HIGH).allowed
    assert probe.drain_actions() == []
    probe.on_sample(DeviceSample(t=7.0, temperature_c=99.0))           # ignored while disabled ...
    assert probe.state is D
    assert [(tr.t, tr.to_state) for tr in probe.enable()] == [(7.0, I)]   # ... but its time is the latest
    assert probe.enable() == []                                          # not disabled: nothing
    assert "not known yet" in probe.admit(BEST_EFFORT).reason
    probe.on_sample(DeviceSample(t=10.0, temperature_c=50.0))
    assert probe.state is H


def test_missing_metrics_never_cause_a_transition():
    state = HealthState()
    for t in range(100):
        state, transitions, actions = health_step(state, DeviceSample(t=float(t)), CONFIG)
        assert transitions == () and actions == ()
    assert state.state is I
    assert health_step(state, DeviceSample(t=100.0, temperature_c=float("nan")), CONFIG).state == \
        replace(state, last_t=100.0)
    # unhealthy on temperature; the temperature then goes unmeasured: no recovery from it
    for t in range(100, 112):
        state = health_step(state, DeviceSample(t=float(t), temperature_c=88.0), CONFIG).state
    assert state.state is U
    for t in range(112, 200):
        state = health_step(state, DeviceSample(t=float(t), gpu_util_percent=10.0), CONFIG).state
    assert state.state is U


def test_a_reading_at_its_level_is_within_it():
    state = HealthState()
    at_levels = DeviceSample(t=0.0, gpu_util_percent=98.0, temperature_c=90.0, memory_used_bytes=98,
                             memory_total_bytes=100, power_w=100.0, power_limit_w=100.0, sm_clock_mhz=900.0)
    for t in range(200):
        state = health_step(state, replace(at_levels, t=float(t)), CONFIG).state
    assert state.over_warning == {"temperature_c": 0.0, "memory_used_percent": 0.0,
                                  "power_percent_of_limit": 0.0}        # over 85 C, 95 %, 98 %
    assert state.over_limit == {} and state.state is U                 # at 90 C, 98 %, 100 %: not over


def test_a_throttled_clock_counts_only_while_the_device_is_busy():
    def run(util, clock):
        state = HealthState()
        for t in range(0, 12):
            state = health_step(state, DeviceSample(t=float(t), gpu_util_percent=util, sm_clock_mhz=clock),
                                CONFIG).state
        return state
    busy = run(90.0, 800.0)
    assert busy.state is U and "sm_clock_mhz 800 MHz < 900 MHz" in busy.reason
    assert run(10.0, 300.0).state is H      # idle: a low clock is power saving, not throttling


def test_rules_chain_in_one_step_and_the_step_is_pure():
    config = replace(CONFIG, timing=replace(CONFIG.timing, overlimit_after_s=10.0))
    full = dict(memory_used_bytes=99, memory_total_bytes=100)
    state = HealthState()
    for t in range(0, 10):
        state = health_step(state, DeviceSample(t=float(t), **full), config).state
    assert state.state is I                            # over from the start: not known healthy yet
    step = health_step(state, DeviceSample(t=10.0, **full), config)
    assert [(tr.from_state, tr.to_state) for tr in step.transitions] == [(I, U), (U, O)]
    assert step == health_step(state, DeviceSample(t=10.0, **full), config)
    assert health_step(step.state, DeviceSample(t=5.0), config) == (step.state, (), ())   # older: ignored


def test_the_plugin_registers_for_admissions_and_samples_only_and_keeps_a_bounded_history():
    hooks = Hooks()
    probe = SysProbe(CONFIG, transitions_kept=3)
    hooks.register(probe)
    assert hooks.admit == [probe] and hooks.on_sample == [probe] and hooks.gate == [] and hooks.observe == []
    assert hooks.admit_client(BEST_EFFORT).code is Code.DENY           # init: not known yet
    assert hooks.admit_client(HIGH).allowed
    for s in read_trace(DATA / "repeated_overlimit.jsonl"):
        hooks.device_sample(s)
    assert [tr.t for tr in probe.transitions()] == [470.0, 490.0, 510.0]
    record = probe.describe()
    assert record["state"] == "healthy" and record["recent_overlimit_entries"] == 1
    assert [tr["to"] for tr in record["transitions"]] == ["unhealthy", "overlimit", "healthy"]
    assert len(probe.drain_actions()) == 4 + 2 + 2 + 15 + 2 and probe.drain_actions() == []


def test_reload_keeps_the_state_and_judges_by_the_new_values():
    probe, _ = replay("warning_recovery", until=19)
    assert probe.state is H and probe.health.over_warning == {"temperature_c": 10.0}
    probe.reload(replace(CONFIG, timing=replace(CONFIG.timing, window_s=5.0, overlimit_after_s=30.0)))
    probe.on_sample(DeviceSample(t=19.5, temperature_c=88.0))
    assert path(probe)[-1] == (19.5, H, U)
