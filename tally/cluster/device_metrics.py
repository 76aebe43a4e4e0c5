"""One sample of the device's state, and the interface every source of samples has.

Sources: NVML on a GPU, the backend's own accounting on the emulator and the
sim, and a recorded trace (a file of timestamped samples) for tests and demos.
Each is a MetricsSource like the others; the consumers (dynamic SM allocation,
compute control, SysProbe, /metrics) never know which one they read.

Fields a source cannot measure are None, never a made-up value.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class DeviceSample:
    t: float                                   # seconds (the source's clock; monotonic or trace time)
    gpu_util_percent: float | None = None      # % of the period any kernel ran (NVML utilization.gpu)
    sm_active_percent: float | None = None     # % of SM-time busy (DCGM SM_ACTIVE; tally's accounting)
    hp_sm_active_percent: float | None = None  # the high-priority jobs' share of it (tally's accounting)
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    xid_errors: tuple[int, ...] = field(default=())   # critical XID events since the last sample
    hp_busy_percent: float | None = None       # % of the period high-priority work was on the device (tally's accounting)

    @property
    def clock_factor(self) -> float | None:
        """a_C of MuxFlow's eq. 2: current SM clock / its maximum (1.0 when unknown)."""
        if self.sm_clock_mhz is None or not self.sm_clock_max_mhz:
            return None
        return min(1.0, self.sm_clock_mhz / self.sm_clock_max_mhz)

    @property
    def gpu_utilization(self) -> float | None:
        """U_GPU = U_SM x a_C in [0, 1] (MuxFlow eq. 2): how much of the device's full-speed
        compute is in use. U_SM is SM activity when a source measures it, else the coarser
        GPU utilization; a_C is 1 when the clock is unknown."""
        u_sm = self.sm_active_percent if self.sm_active_percent is not None else self.gpu_util_percent
        if u_sm is None:
            return None
        factor = self.clock_factor
        return (u_sm / 100.0) * (1.0 if factor is None else factor)

    def to_dict(self) -> dict:
        """The fields that have a value (what a trace file line holds)."""
        d = {k: v for k, v in asdict(self).items() if v is not None}
        d["xid_errors"] = list(self.xid_errors)
        if not d["xid_errors"]:
            del d["xid_errors"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceSample":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        if "t" not in known:
            raise ValueError(f"a device sample needs a time 't': {d!r}")
        known["xid_errors"] = tuple(known.get("xid_errors") or ())
        return cls(**known)


class MetricsSource(Protocol):
    """Where samples come from. `sample()` returns the device's state now (a trace:
    its next sample); None when there is nothing (more) to report."""

    name: str

    def sample(self) -> DeviceSample | None: ...

    def close(self) -> None: ...
