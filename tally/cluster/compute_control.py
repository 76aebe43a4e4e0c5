"""Compute control (MuxFlow's GPU-level protection): hold best-effort work back while
the device is busier than a target, so high-priority kernels find it neither
saturated nor clock-throttled.

The measured quantity is U_GPU = U_SM x a_C (MuxFlow eq. 2; DeviceSample.
gpu_utilization): SM activity scaled by how far the SM clock has dropped below
its maximum, so a hot, throttled device counts as busier than its activity says.
The actuator is a hold fraction h in [0, max_hold]: in every window of
`window_s`, best-effort units may start during the first (1 - h) of it and wait
during the rest. h = 0 leaves best-effort work alone. A fraction, not a delay in
seconds, because best-effort utilization falls about linearly with it whatever
the jobs' kernel lengths are, so one set of gains fits every workload (a delay
between starts moves utilization by an amount that depends on how long each
unit runs, and gains tuned for one kernel length oscillate with another).

`control_step` is the controller, a pure function (state, sample, gains) ->
state: a PI loop with an optional derivative term, its integral clamped to
[0, what the largest hold needs], so it neither winds up while the target is out
of reach (the high-priority job alone over it) nor owes anything once the device
is under target: best-effort work gets the device back within a second of the
load dropping. The default gains settle a step without overshoot and track a
load oscillating over seconds (tests/test_compute_control.py, on recorded traces). `ComputeControl` wraps it as a plugin: OnDeviceSample feeds
it, GateBestEffort applies the hold. High-priority work is never gated
(hooks.GateBestEffort's contract).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from tally.cluster.device_metrics import DeviceSample
from tally.scheduler.hooks import ALLOW, BestEffortUnit, Status, wait


@dataclass(frozen=True)
class Gains:
    target: float = 0.9          # U_GPU the controller holds the device under, in (0, 1]
    kp: float = 0.5              # hold fraction per unit of error
    ki: float = 4.0              # hold fraction per (unit of error x second)
    kd: float = 0.0              # hold fraction per (unit of error / second)
    max_hold: float = 0.95       # never hold best-effort work back for more of a window
    window_s: float = 0.01       # the hold's period

    def __post_init__(self):
        if not 0 < self.target <= 1:
            raise ValueError(f"utilization target {self.target} must be in (0, 1]")
        if min(self.kp, self.ki, self.kd) < 0:
            raise ValueError("controller gains must be >= 0")
        if not 0 < self.max_hold < 1 or self.window_s <= 0:
            raise ValueError("max_hold must be in (0, 1) and window_s > 0")


@dataclass(frozen=True)
class ControlState:
    integral: float = 0.0            # of the error over time (error x seconds), >= 0
    last_error: float | None = None
    last_t: float | None = None
    hold: float = 0.0                # the fraction of each window best-effort work waits


def control_step(state: ControlState, sample: DeviceSample, gains: Gains) -> ControlState:
    """The controller's next state (its `hold` is what the gate applies). A sample
    without a utilization figure leaves the state as it is."""
    u = sample.gpu_utilization
    if u is None:
        return state
    error = u - gains.target
    dt = 0.0 if state.last_t is None else max(0.0, sample.t - state.last_t)
    integral_cap = gains.max_hold / gains.ki if gains.ki > 0 else 0.0
    integral = min(integral_cap, max(0.0, state.integral + error * dt))
    derivative = 0.0 if state.last_error is None or dt == 0 else (error - state.last_error) / dt
    hold = gains.kp * error + gains.ki * integral + gains.kd * derivative
    return ControlState(integral, error, sample.t, min(gains.max_hold, max(0.0, hold)))


class ComputeControl:
    """The plugin: samples in, best-effort starts held for part of every window."""

    def __init__(self, gains: Gains):
        self.gains = gains
        self.state = ControlState()
        self._lock = threading.Lock()

    def on_sample(self, sample: DeviceSample) -> None:
        with self._lock:
            self.state = control_step(self.state, sample, self.gains)

    def gate(self, unit: BestEffortUnit, now: float) -> Status:
        hold, window = self.state.hold, self.gains.window_s    # one read of a frozen state: no lock
        if hold <= 0:
            return ALLOW
        phase = now % window
        if phase < (1.0 - hold) * window:
            return ALLOW
        return wait(window - phase, f"compute control: device over {self.gains.target:.0%} utilization")

    def describe(self) -> dict:
        return {"target": self.gains.target, "hold": round(self.state.hold, 3)}
