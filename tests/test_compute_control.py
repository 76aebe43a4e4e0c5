"""Compute control on recorded high-priority load traces (step, ramp, oscillating):
the controller settles without oscillating, holds best-effort work back only as
much as the target needs, lets go when the load drops, and never touches
high-priority work (it is a best-effort gate only)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tally.cluster.compute_control import ComputeControl, ControlState, Gains, control_step
from tally.cluster.device_metrics import DeviceSample
from tally.cluster.trace_source import TraceError, TraceSource, read_trace
from tally.scheduler.hooks import BestEffortUnit, Code, Hooks

TRACES = Path(__file__).parent / "data" / "utilization"
TARGET = 0.6
BE_DEMAND = 90.0      # % of SM-time the best-effort jobs would take with nothing held back


def closed_loop(trace: str, gains: Gains = Gains(target=TARGET)):
    """The device as a plant: SM activity is the trace's high-priority load plus what
    best-effort work gets of the rest, which shrinks with the controller's hold.
    Returns (t, high-priority %, U_GPU, hold) per sample."""
    state, rows = ControlState(), []
    for s in read_trace(TRACES / f"{trace}.jsonl"):
        hp = s.hp_sm_active_percent
        be = min(100.0 - hp, BE_DEMAND * (1.0 - state.hold))
        sample = DeviceSample(t=s.t, sm_active_percent=hp + be, hp_sm_active_percent=hp,
                              sm_clock_mhz=s.sm_clock_mhz, sm_clock_max_mhz=s.sm_clock_max_mhz)
        state = control_step(state, sample, gains)
        rows.append((s.t, hp, sample.gpu_utilization, state.hold))
    return rows


def turns(values, tolerance=1e-3) -> int:
    """How often a sequence changes direction (by more than tolerance)."""
    steps = [b - a for a, b in zip(values, values[1:]) if abs(b - a) > tolerance]
    return sum(1 for a, b in zip(steps, steps[1:]) if a * b < 0)


def clock_factor() -> float:
    return 1755.0 / 1980.0


def test_a_step_settles_on_the_target_without_oscillating():
    rows = closed_loop("step")
    before = [u for t, hp, u, h in rows if 2.0 < t < 8.0]          # high-priority at 20%
    assert max(abs(u - TARGET) for u in before) < 0.03
    after = [(u, h) for t, hp, u, h in rows if t > 9.0]             # at 70%: over the target alone
    assert all(h == pytest.approx(Gains().max_hold) for u, h in after)  # holds all it may, no wind-up
    assert turns([h for *_, h in rows]) <= 1


def test_a_ramp_is_followed_without_overshoot_or_oscillation():
    rows = closed_loop("ramp")
    reachable = [u for t, hp, u, h in rows if t > 1.0 and hp / 100 * clock_factor() < TARGET - 0.05]
    assert max(reachable) < TARGET + 0.04
    assert turns([h for *_, h in rows]) <= 1


def test_an_oscillating_load_is_tracked_and_released():
    rows = closed_loop("oscillating")
    reachable = [u for t, hp, u, h in rows if t > 1.0 and hp / 100 * clock_factor() < TARGET - 0.05]
    assert max(reachable) < TARGET + 0.1
    hold = [h for *_, h in rows]
    load = [hp for _, hp, _, _ in rows]
    assert turns(hold) <= turns(load, 0.5) + 2      # follows the load, adds no swings of its own
    # held back much less where the high-priority load is low than where it is high
    low = [h for t, hp, u, h in rows if t > 1.0 and hp < 30]
    high = [h for t, hp, u, h in rows if t > 1.0 and hp > 60]
    assert sum(low) / len(low) < sum(high) / len(high) - 0.3


def test_under_the_target_nothing_is_held_and_the_step_function_is_pure():
    gains = Gains(target=0.9)
    quiet = DeviceSample(t=0.1, sm_active_percent=40.0)
    state = control_step(ControlState(), quiet, gains)
    assert state.hold == 0.0
    assert control_step(ControlState(), quiet, gains) == state        # same inputs, same answer
    assert control_step(state, DeviceSample(t=0.2), gains) == state   # no figure: nothing changes


def test_the_clock_factor_counts_a_throttled_device_as_busier():
    full = DeviceSample(t=0, sm_active_percent=80.0, sm_clock_mhz=1980.0, sm_clock_max_mhz=1980.0)
    throttled = DeviceSample(t=0, sm_active_percent=80.0, sm_clock_mhz=990.0, sm_clock_max_mhz=1980.0)
    assert full.gpu_utilization == pytest.approx(0.8)
    assert throttled.gpu_utilization == pytest.approx(0.4)   # MuxFlow eq. 2: U_SM x a_C
    assert DeviceSample(t=0, gpu_util_percent=50.0).gpu_utilization == pytest.approx(0.5)


def test_the_gate_holds_best_effort_starts_for_the_held_part_of_each_window():
    control = ComputeControl(Gains(target=0.5, window_s=0.01))
    unit = BestEffortUnit(client_id=1, kernel_id=7, blocks=64)
    assert control.gate(unit, 123.4567).code is Code.ALLOW            # nothing held yet
    control.state = ControlState(hold=0.4)
    assert control.gate(unit, 10.003).code is Code.ALLOW               # first 60% of the window
    held = control.gate(unit, 10.008)
    assert held.code is Code.WAIT and held.retry_after_s == pytest.approx(0.002)
    assert "compute control" in held.reason


def test_compute_control_plugs_in_as_a_best_effort_gate_and_sample_reader_only():
    hooks = Hooks()
    control = ComputeControl(Gains(target=0.5))
    hooks.register(control)
    assert hooks.gate == [control] and hooks.on_sample == [control]
    assert hooks.admit == [] and hooks.observe == []
    hooks.device_sample(DeviceSample(t=0.0, sm_active_percent=100.0))
    hooks.device_sample(DeviceSample(t=0.5, sm_active_percent=100.0))
    assert control.state.hold > 0
    # The gate answers for best-effort units; the executor never asks it about others
    # (scheduler hooks contract), so a held window never delays high-priority work.
    statuses = {hooks.gate_best_effort(BestEffortUnit(1, k, 8), 5.0 + k * 0.001).code for k in range(10)}
    assert Code.WAIT in statuses


def test_a_trace_source_replays_in_order_and_bad_files_name_the_line(tmp_path):
    source = TraceSource(TRACES / "step.jsonl")
    first, second = source.sample(), source.sample()
    assert (first.t, second.t) == (0.0, 0.05) and first.hp_sm_active_percent == 20.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 1.0, "sm_active_percent": 5}\n{"t": 0.5}\n')
    with pytest.raises(TraceError, match="bad.jsonl:2: time 0.5 goes back"):
        read_trace(bad)
    bad.write_text('# a comment\n{"sm_active_percent": 5}\n')
    with pytest.raises(TraceError, match="bad.jsonl:2: not a device sample"):
        read_trace(bad)
