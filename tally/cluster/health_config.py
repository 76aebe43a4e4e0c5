"""SysProbe's thresholds: a TOML file (`--health-config FILE`; the Kubernetes
ConfigMap `tally-health` in deploy/health-config.yaml holds one), every key
optional, every key checked.

    [thresholds]                 # warning levels: over one for window_s -> Unhealthy
    gpu_util_percent = 98        # GPU utilization (DCGM_FI_DEV_GPU_UTIL), above
    memory_used_percent = 95     # memory used / total (DCGM_FI_DEV_FB_USED), above
    temperature_c = 85           # GPU temperature (DCGM_FI_DEV_GPU_TEMP), above
    power_percent_of_limit = 98  # power draw / enforced power limit (DCGM_FI_DEV_POWER_USAGE), above
    sm_clock_min_mhz = 900       # SM clock (DCGM_FI_DEV_SM_CLOCK), below: throttling ...
    sm_clock_busy_util_percent = 50  # ... counted only while GPU utilization is at least this

    [limits]                     # usage limits: over one for overlimit_after_s -> Overlimit
    memory_used_percent = 98
    temperature_c = 90
    power_percent_of_limit = 100

    [timing]                     # seconds, in the metrics source's clock
    sample_interval_s = 1        # how often the server reads a sample
    window_s = 30                # a warning must hold this long (and clear this long)
    overlimit_after_s = 120      # a limit must be exceeded this long
    backoff_s = 60               # first Overlimit entry: best-effort jobs refused this long
    backoff_factor = 2           # each further recent entry multiplies the back-off by this
    backoff_max_s = 960          # ... up to this
    overlimit_history_s = 3600   # entries older than this are forgotten
    overlimit_history_max = 8    # at most this many recent entries count
    evict_interval_s = 10        # in Overlimit, one more best-effort job is evicted this often

    [xid]
    fatal = [46, 48, 61, 62, 64, 74, 79, 95, 119, 120, 140]   # critical XIDs that disable the device

The defaults are the values above; those the ConfigMap sets are the same. A
threshold a deployment does not want is set out of reach (gpu_util_percent =
100: utilization is never above 100; sm_clock_min_mhz = 0).

Why these defaults: the warning levels stop new best-effort work while the
device is merely busy or warm; the limits are where the high-priority job
itself suffers (allocations about to fail, thermal slowdown, power capping
lowering the clock), so best-effort work is evicted. The fatal XIDs are those
NVIDIA's XID catalog says mean the device itself is failing (uncorrectable
memory errors, fallen off the bus, firmware/GSP failure, stopped processing), not
those one faulty application causes (13, 31, 43, 45: an illegal address, an
exception), which tally's device-fault handling deals with job by job.

Every error names the file and the key, says what is wrong and what is allowed.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, fields
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:                               # pragma: no cover - Python 3.10: the backport (pyproject)
    import tomli as tomllib


class HealthConfigError(ValueError):
    """The health config cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Thresholds:
    gpu_util_percent: float = 98.0
    memory_used_percent: float = 95.0
    temperature_c: float = 85.0
    power_percent_of_limit: float = 98.0
    sm_clock_min_mhz: float = 900.0
    sm_clock_busy_util_percent: float = 50.0


@dataclass(frozen=True)
class Limits:
    memory_used_percent: float = 98.0
    temperature_c: float = 90.0
    power_percent_of_limit: float = 100.0


@dataclass(frozen=True)
class Timing:
    sample_interval_s: float = 1.0
    window_s: float = 30.0
    overlimit_after_s: float = 120.0
    backoff_s: float = 60.0
    backoff_factor: float = 2.0
    backoff_max_s: float = 960.0
    overlimit_history_s: float = 3600.0
    overlimit_history_max: int = 8
    evict_interval_s: float = 10.0


DEFAULT_FATAL_XIDS = (46, 48, 61, 62, 64, 74, 79, 95, 119, 120, 140)


@dataclass(frozen=True)
class Xid:
    fatal: tuple[int, ...] = DEFAULT_FATAL_XIDS


@dataclass(frozen=True)
class HealthConfig:
    thresholds: Thresholds = Thresholds()
    limits: Limits = Limits()
    timing: Timing = Timing()
    xid: Xid = Xid()
    source: str = "defaults"            # the file it came from, for messages

    def backoff_for(self, recent_entries: int) -> float:
        """The back-off after an Overlimit entry when `recent_entries` entries (this
        one and those less than overlimit_history_s before it) count:
        min(backoff_max_s, backoff_s x backoff_factor ^ (min(n, overlimit_history_max) - 1))."""
        t = self.timing
        n = max(1, min(recent_entries, t.overlimit_history_max))
        return min(t.backoff_max_s, t.backoff_s * t.backoff_factor ** (n - 1))


# (lowest, highest, lowest allowed itself, highest allowed itself) per key; None: unbounded.
_RANGES: dict[str, dict[str, tuple]] = {
    "thresholds": {
        "gpu_util_percent": (0, 100, False, True),
        "memory_used_percent": (0, 100, False, True),
        "temperature_c": (0, 150, False, True),
        "power_percent_of_limit": (0, 200, False, True),
        "sm_clock_min_mhz": (0, 10000, True, True),
        "sm_clock_busy_util_percent": (0, 100, True, True),
    },
    "limits": {
        "memory_used_percent": (0, 100, False, True),
        "temperature_c": (0, 150, False, True),
        "power_percent_of_limit": (0, 200, False, True),
    },
    "timing": {
        "sample_interval_s": (0, None, False, True),
        "window_s": (0, None, True, True),
        "overlimit_after_s": (0, None, True, True),
        "backoff_s": (0, None, True, True),
        "backoff_factor": (1, None, True, True),
        "backoff_max_s": (0, None, True, True),
        "overlimit_history_s": (0, None, False, True),
        "overlimit_history_max": (1, None, True, True),
        "evict_interval_s": (0, None, False, True),
    },
}
_TABLES = {"thresholds": Thresholds, "limits": Limits, "timing": Timing, "xid": Xid}


def load_health_config(path: str | Path) -> HealthConfig:
    """Read and check a health config file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise HealthConfigError(f"health config {path}: no such file (give an existing TOML file to "
                                f"--health-config, or leave the flag out for the defaults)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise HealthConfigError(f"health config {path}: cannot be read: {e}") from None
    return parse_health_config(text, str(path))


def parse_health_config(text: str, source: str = "<string>") -> HealthConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise HealthConfigError(f"health config {source}: not valid TOML: {e}") from None
    return config_from_dict(data, source)


def config_from_dict(data: dict, source: str = "<dict>") -> HealthConfig:
    """The config a parsed TOML document describes; defaults for what it leaves out."""
    def fail(what: str) -> HealthConfigError:
        return HealthConfigError(f"health config {source}: {what}")

    unknown = sorted(set(data) - set(_TABLES))
    if unknown:
        raise fail(f"unknown table [{unknown[0]}] (tables: {', '.join(f'[{t}]' for t in _TABLES)})")
    parts = {}
    for table, cls in _TABLES.items():
        values = data.get(table, {})
        if not isinstance(values, dict):
            raise fail(f"`{table}` must be a table ([{table}]), not {type(values).__name__}")
        known = [f.name for f in fields(cls)]
        for key in values:
            if key not in known:
                raise fail(f"unknown key [{table}] {key} (keys of [{table}]: {', '.join(known)})")
        if table == "xid":
            parts[table] = Xid(**({"fatal": _fatal_xids(values["fatal"], fail)} if "fatal" in values else {}))
            continue
        checked = {key: _number(table, key, value, cls, fail) for key, value in values.items()}
        parts[table] = cls(**checked)
    config = HealthConfig(**parts, source=source)
    _check_together(config, fail)
    return config


def _number(table: str, key: str, value, cls, fail):
    integer = cls.__dataclass_fields__[key].type in ("int", int)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise fail(f"[{table}] {key} = {value!r}: expected {'an integer' if integer else 'a number'}")
    if not math.isfinite(value):
        raise fail(f"[{table}] {key} = {value!r}: expected a finite number")
    low, high, low_ok, high_ok = _RANGES[table][key]
    too_low = value < low or (value == low and not low_ok)
    too_high = high is not None and (value > high or (value == high and not high_ok))
    if too_low or too_high:
        lo = f"{'>=' if low_ok else '>'} {low}"
        hi = "" if high is None else f" and {'<=' if high_ok else '<'} {high}"
        raise fail(f"[{table}] {key} = {value!r} is out of range: it must be {lo}{hi}")
    return value if integer else float(value)


def _fatal_xids(value, fail) -> tuple[int, ...]:
    if not isinstance(value, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in value):
        raise fail(f"[xid] fatal = {value!r}: expected a list of XID numbers (integers >= 1), e.g. [48, 79]")
    return tuple(sorted(set(value)))


def _check_together(config: HealthConfig, fail) -> None:
    """What no single key shows: a limit below its warning level would put the
    device in Overlimit before it is Unhealthy, and so would a limit time shorter
    than the warning window."""
    for f in fields(Limits):
        limit, warning = getattr(config.limits, f.name), getattr(config.thresholds, f.name)
        if limit < warning:
            raise fail(f"[limits] {f.name} = {limit:g} is below [thresholds] {f.name} = {warning:g}: a limit "
                       f"must be at or above its warning level")
    t = config.timing
    if t.overlimit_after_s < t.window_s:
        raise fail(f"[timing] overlimit_after_s = {t.overlimit_after_s:g} is shorter than window_s = "
                   f"{t.window_s:g}: the device must have been Unhealthy before it is Overlimit")
    if t.backoff_max_s < t.backoff_s:
        raise fail(f"[timing] backoff_max_s = {t.backoff_max_s:g} is below backoff_s = {t.backoff_s:g}")
