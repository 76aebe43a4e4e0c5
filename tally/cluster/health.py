"""SysProbe's state machine, per device (MuxFlow's mixed error handling):

    init -> healthy <-> unhealthy -> overlimit -> unhealthy | healthy
    any state -> disabled (an operator, or a fatal XID);  disabled -> init (an operator only)

`health_step(state, sample, config)` is the whole machine, a pure function
returning the next state, the transitions it made (time, from, to, cause) and
the actions the server must take. `disable` and `enable` are the operator's.
The thresholds, times and back-off are in tally.cluster.health_config.

Readings. Each sample gives up to five readings, compared with [thresholds]
(the warning levels) and, for the three usage readings, [limits]:
  gpu_util_percent          sample.gpu_util_percent                           over when above
  memory_used_percent       100 x memory_used_bytes / memory_total_bytes      over when above
  temperature_c             sample.temperature_c                              over when above
  power_percent_of_limit    100 x power_w / power_limit_w                     over when above
  sm_clock_min_mhz          sample.sm_clock_mhz, read only while gpu_util_percent
                            >= sm_clock_busy_util_percent (an idle GPU lowers its
                            clock by design; that is not throttling)          over when below
A reading the sample lacks (None, NaN, or a total/limit of 0) is no reading: it
neither starts, extends nor ends anything. Missing metrics never cause a
transition.

"Over" is strict: a reading equal to its level is within it.

Runs. For each reading and level, a run is the time of the first reading over
the level since the last reading within it; the run ends at the first reading
within it again. A run has lasted d seconds at a sample at time t when
t - (its first reading's time) >= d. So a single spike (one reading over, the
next one within) never lasts any d > 0, and a gap without readings neither ends
nor breaks a run.

Rules, evaluated at every sample in this order (several may fire in one step):
- any state but disabled, a fatal XID (config [xid] fatal) in sample.xid_errors:
  -> disabled; action: evict every best-effort job.
- init -> healthy: at the first sample with a reading while no warning run is
  open. init -> unhealthy: a warning run lasts window_s (a device that starts
  over a warning level).
- healthy -> unhealthy: a warning run lasts window_s. The cause is the longest
  such run (ties: the table order above).
- unhealthy -> healthy: no warning run open, and none has been for window_s
  (`clear_since`: the time of the reading that ended the last one).
- unhealthy -> overlimit: a limit run lasts overlimit_after_s. On entry:
  n = Overlimit entries less than overlimit_history_s before this one, plus this one;
  back-off = min(backoff_max_s, backoff_s x backoff_factor^(min(n,
  overlimit_history_max) - 1)); best-effort admissions are refused until entry
  time + back-off (action RefuseBestEffort), and one best-effort job is evicted
  (action EvictBestEffort, count 1).
- in overlimit, while a limit run is open: one more best-effort job evicted every
  evict_interval_s after the last eviction (the server has none left: nothing).
- overlimit -> healthy | unhealthy: at the first sample at or after the
  back-off's end with no limit run open; healthy if unhealthy -> healthy's rule
  holds then, else unhealthy.
- disabled: samples are ignored; only `enable` (the operator) leaves it, to init
  (warning and limit runs forgotten, Overlimit history kept). The operator's
  `disable` evicts nothing (a fatal XID evicts every best-effort job).
Times are the samples' (the metrics source's clock); an operator's command at t
counts as the latest time, so a sample older than it is ignored.

Best-effort admissions are refused in every state but healthy (init: the device's
health is not known yet; unhealthy: the device is over a warning level, more work
makes it worse; overlimit: the back-off; disabled). High-priority jobs are never
refused. The k8s layer reads the same rule (gpu_servers.units_healthy).

Which best-effort jobs are evicted (EvictBestEffort.order), by what is over its limit:
- memory: largest device memory first (ties: newest first). Memory is the
  resource over its limit, so the largest user frees the most with the fewest
  evictions, and the high-priority job's next allocation is what is at stake.
- temperature or power only: newest first. Heat and power follow the work
  running, which the device does not split by job; every best-effort job adds to
  it, so evict the one that loses the least done work when it is rescheduled.
One job at a time, then evict_interval_s to see the reading fall, so no more
jobs are evicted than it takes.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple

from tally.cluster.device_metrics import DeviceSample
from tally.cluster.health_config import HealthConfig, Thresholds


class State(enum.Enum):
    INIT = "init"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    OVERLIMIT = "overlimit"
    DISABLED = "disabled"


class EvictionOrder(enum.Enum):
    LARGEST_MEMORY_FIRST = "largest_memory_first"
    NEWEST_FIRST = "newest_first"


@dataclass(frozen=True)
class Cause:
    """Why a transition happened. kind: warning (a reading over a [thresholds] level
    for window_s), limit (over a [limits] level for overlimit_after_s), clear (no
    warning for window_s), first_reading, backoff_over, xid, operator."""

    kind: str
    text: str
    metric: str | None = None       # the config key of the reading
    value: float | None = None      # the reading at the transition
    level: float | None = None      # the threshold or limit it crossed
    since: float | None = None      # the first reading of the run
    xids: tuple[int, ...] = ()

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Transition:
    t: float
    from_state: State
    to_state: State
    cause: Cause

    def to_dict(self) -> dict:
        d = {"t": self.t, "from": self.from_state.value, "to": self.to_state.value,
             "cause": self.cause.kind, "reason": self.cause.text}
        for key in ("metric", "value", "level", "since"):
            if getattr(self.cause, key) is not None:
                d[key] = getattr(self.cause, key)
        if self.cause.xids:
            d["xids"] = list(self.cause.xids)
        return d


@dataclass(frozen=True)
class EvictBestEffort:
    """Evict `count` best-effort jobs (None: all of them) in `order`; each is told `reason`."""

    t: float
    count: int | None
    order: EvictionOrder
    reason: str


@dataclass(frozen=True)
class RefuseBestEffort:
    """Best-effort admissions are refused until `until` (the back-off)."""

    t: float
    until: float
    backoff_s: float
    recent_entries: int
    reason: str


Action = EvictBestEffort | RefuseBestEffort


@dataclass(frozen=True)
class HealthState:
    state: State = State.INIT
    entered_t: float | None = None                  # when `state` was entered
    last_t: float | None = None                     # the latest sample's time
    over_warning: dict = field(default_factory=dict)   # reading key -> its run's first time
    over_limit: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)         # reading key -> latest reading
    clear_since: float | None = None                # no warning run open since then
    overlimit_entries: tuple[float, ...] = ()       # recent Overlimit entry times, oldest first
    refuse_until: float | None = None               # the back-off's end
    next_eviction_t: float | None = None
    reason: str = "no sample read yet"              # the last transition's cause


class Step(NamedTuple):
    state: HealthState
    transitions: tuple[Transition, ...]
    actions: tuple[Action, ...]


@dataclass(frozen=True)
class _Reading:
    key: str                    # the [thresholds] key (and [limits] key when it has a limit)
    above: bool                 # over when above the level (else below)
    unit: str
    read: Callable[[DeviceSample, Thresholds], float | None]


def _ratio(part, whole) -> float | None:
    return None if part is None or not whole else 100.0 * part / whole


def _busy_clock(s: DeviceSample, th: Thresholds) -> float | None:
    if s.sm_clock_mhz is None or s.gpu_util_percent is None:
        return None
    return s.sm_clock_mhz if s.gpu_util_percent >= th.sm_clock_busy_util_percent else None


READINGS = (
    _Reading("gpu_util_percent", True, "%", lambda s, th: s.gpu_util_percent),
    _Reading("memory_used_percent", True, "%", lambda s, th: _ratio(s.memory_used_bytes, s.memory_total_bytes)),
    _Reading("temperature_c", True, " C", lambda s, th: s.temperature_c),
    _Reading("power_percent_of_limit", True, "%", lambda s, th: _ratio(s.power_w, s.power_limit_w)),
    _Reading("sm_clock_min_mhz", False, " MHz", _busy_clock),
)
_ORDER = {r.key: i for i, r in enumerate(READINGS)}
_BY_KEY = {r.key: r for r in READINGS}


def readings(sample: DeviceSample, thresholds: Thresholds) -> dict[str, float]:
    """The readings a sample gives, by config key (absent: not measured)."""
    out = {}
    for r in READINGS:
        value = r.read(sample, thresholds)
        if value is not None and math.isfinite(value):      # NaN from a broken source: no reading
            out[r.key] = float(value)
    return out


def _over(key: str, value: float, level: float) -> bool:
    return value > level if _BY_KEY[key].above else value < level


def _update_runs(runs: dict, values: dict, levels: dict, t: float) -> dict:
    runs = dict(runs)
    for key, value in values.items():
        if key not in levels:
            continue
        if _over(key, value, levels[key]):
            runs.setdefault(key, t)
        else:
            runs.pop(key, None)
    return runs


def _lasting(runs: dict, t: float, duration: float) -> str | None:
    """The longest run that has lasted `duration` (ties: table order), or None."""
    done = [k for k, since in runs.items() if t - since >= duration]
    return min(done, key=lambda k: (runs[k], _ORDER[k])) if done else None


def _levels(obj) -> dict[str, float]:
    return {k: getattr(obj, k) for k in _BY_KEY if hasattr(obj, k)}


def _describe(key: str, value: float, level: float, since: float, table: str, t: float) -> str:
    r = _BY_KEY[key]
    sign = ">" if r.above else "<"
    name = "sm_clock_mhz" if key == "sm_clock_min_mhz" else key
    return (f"{name} {value:g}{r.unit} {sign} {level:g}{r.unit} ([{table}] {key}) since t={since:g} "
            f"({t - since:g} s)")


def _go(st: HealthState, to: State, t: float, cause: Cause, out: list[Transition]) -> HealthState:
    out.append(Transition(t, st.state, to, cause))
    return replace(st, state=to, entered_t=t, reason=cause.text)


def health_step(state: HealthState, sample: DeviceSample, config: HealthConfig) -> Step:
    """The machine's next state for one sample; the module docstring has the rules.
    A sample older than the last one is ignored (the state is returned as is)."""
    t = sample.t
    if state.last_t is not None and t < state.last_t:
        return Step(state, (), ())
    transitions: list[Transition] = []
    actions: list[Action] = []
    if state.state is State.DISABLED:
        return Step(replace(state, last_t=t), (), ())

    fatal = tuple(x for x in sample.xid_errors if x in config.xid.fatal)
    if fatal:
        text = (f"fatal XID {', '.join(map(str, fatal))} at t={t:g} ([xid] fatal): the device itself is "
                f"failing; an operator must check it and enable it again")
        st = _go(replace(state, last_t=t), State.DISABLED, t, Cause("xid", text, xids=fatal), transitions)
        actions.append(EvictBestEffort(t, None, EvictionOrder.NEWEST_FIRST, f"SysProbe disabled the device: {text}"))
        return Step(st, tuple(transitions), tuple(actions))

    values = readings(sample, config.thresholds)
    warn_levels, limit_levels = _levels(config.thresholds), _levels(config.limits)
    over_warning = _update_runs(state.over_warning, values, warn_levels, t)
    over_limit = _update_runs(state.over_limit, values, limit_levels, t)
    clear_since = state.clear_since
    if over_warning:
        clear_since = None
    elif clear_since is None:
        clear_since = t                      # the last warning run just ended (or the first sample)
    st = replace(state, last_t=t, over_warning=over_warning, over_limit=over_limit,
                 values={**state.values, **values}, clear_since=clear_since)
    timing = config.timing

    def warning_cause(key: str) -> Cause:
        since = st.over_warning[key]
        return Cause("warning", _describe(key, st.values[key], warn_levels[key], since, "thresholds", t),
                     key, st.values[key], warn_levels[key], since)

    def clear() -> Cause | None:
        if st.over_warning or st.clear_since is None or t - st.clear_since < timing.window_s:
            return None
        return Cause("clear", f"every reading within [thresholds] since t={st.clear_since:g} "
                              f"({t - st.clear_since:g} s)", since=st.clear_since)

    for _ in range(len(State)):              # rules may chain (init -> unhealthy -> overlimit); no cycles
        before = st.state
        if st.state is State.INIT:
            key = _lasting(st.over_warning, t, timing.window_s)
            if key is not None:
                st = _go(st, State.UNHEALTHY, t, warning_cause(key), transitions)
            elif values and not st.over_warning:
                st = _go(st, State.HEALTHY, t, Cause("first_reading", f"first readings at t={t:g} within "
                                                     "[thresholds]"), transitions)
        elif st.state is State.HEALTHY:
            key = _lasting(st.over_warning, t, timing.window_s)
            if key is not None:
                st = _go(st, State.UNHEALTHY, t, warning_cause(key), transitions)
        elif st.state is State.UNHEALTHY:
            key = _lasting(st.over_limit, t, timing.overlimit_after_s)
            if key is not None:
                st = _enter_overlimit(st, key, limit_levels[key], t, config, transitions, actions)
            elif (cause := clear()) is not None:
                st = _go(st, State.HEALTHY, t, cause, transitions)
        elif st.state is State.OVERLIMIT:
            if st.over_limit and st.next_eviction_t is not None and t >= st.next_eviction_t:
                actions.append(_eviction(st, limit_levels, t))
                st = replace(st, next_eviction_t=t + timing.evict_interval_s)
            if t >= st.refuse_until and not st.over_limit:
                cause = clear()
                text = f"back-off over at t={st.refuse_until:g} and every reading within [limits]"
                to = State.HEALTHY if cause is not None else State.UNHEALTHY
                st = _go(replace(st, next_eviction_t=None), to, t,
                         Cause("backoff_over", text + (f"; {cause.text}" if cause else "")), transitions)
        if st.state is before:
            break
    return Step(st, tuple(transitions), tuple(actions))


def _eviction(st: HealthState, limit_levels: dict, t: float) -> EvictBestEffort:
    order = (EvictionOrder.LARGEST_MEMORY_FIRST if "memory_used_percent" in st.over_limit
             else EvictionOrder.NEWEST_FIRST)
    over = "; ".join(_describe(k, st.values[k], limit_levels[k], since, "limits", t)
                     for k, since in sorted(st.over_limit.items(), key=lambda kv: _ORDER[kv[0]]))
    return EvictBestEffort(t, 1, order, f"SysProbe: device over its limit: {over}")


def _enter_overlimit(st: HealthState, key: str, level: float, t: float, config: HealthConfig,
                     transitions: list, actions: list) -> HealthState:
    timing = config.timing
    recent = tuple(e for e in st.overlimit_entries if t - e < timing.overlimit_history_s) + (t,)
    recent = recent[-timing.overlimit_history_max:]
    backoff = config.backoff_for(len(recent))
    since = st.over_limit[key]
    cause = Cause("limit", _describe(key, st.values[key], level, since, "limits", t), key, st.values[key],
                  level, since)
    st = _go(replace(st, overlimit_entries=recent, refuse_until=t + backoff), State.OVERLIMIT, t, cause,
             transitions)
    actions.append(RefuseBestEffort(t, t + backoff, backoff, len(recent),
                                    f"back-off {backoff:g} s after {len(recent)} Overlimit entr"
                                    f"{'y' if len(recent) == 1 else 'ies'} within "
                                    f"{timing.overlimit_history_s:g} s"))
    actions.append(_eviction(st, _levels(config.limits), t))
    return replace(st, next_eviction_t=t + timing.evict_interval_s)


def disable(state: HealthState, t: float, reason: str) -> Step:
    """The operator takes the device out of service: -> disabled from any state
    (already disabled: nothing changes). Running jobs are not evicted (the
    operator evicts jobs by name); best-effort admissions are refused."""
    if state.state is State.DISABLED:
        return Step(state, (), ())
    transitions: list[Transition] = []
    st = _go(replace(state, last_t=_later(state.last_t, t)), State.DISABLED, t,
             Cause("operator", f"disabled by the operator: {reason}"), transitions)
    return Step(st, tuple(transitions), ())


def enable(state: HealthState, t: float, reason: str = "") -> Step:
    """The operator puts a disabled device back: disabled -> init, measured afresh
    (the Overlimit history, which sets the next back-off, is kept). A device
    that is not disabled is left as it is."""
    if state.state is not State.DISABLED:
        return Step(state, (), ())
    transitions: list[Transition] = []
    fresh = HealthState(last_t=_later(state.last_t, t), overlimit_entries=state.overlimit_entries)
    text = "enabled by the operator" + (f": {reason}" if reason else "")
    st = _go(replace(fresh, state=State.DISABLED), State.INIT, t, Cause("operator", text), transitions)
    return Step(st, tuple(transitions), ())


def _later(last_t: float | None, t: float) -> float:
    """An operator's command counts as a sample time: samples older than it are then ignored."""
    return t if last_t is None else max(last_t, t)


def admits_best_effort(state: HealthState) -> tuple[bool, str]:
    """(admitted, why not) for a best-effort job; the rule is in the module docstring."""
    s = state.state
    if s is State.HEALTHY:
        return True, ""
    if s is State.INIT:
        return False, ("SysProbe: the device's health is not known yet; best-effort jobs are admitted once it "
                       "reads healthy (retry in a few seconds)")
    if s is State.UNHEALTHY:
        return False, (f"SysProbe: device unhealthy ({state.reason}); best-effort jobs are admitted again once "
                       "it recovers")
    if s is State.OVERLIMIT:
        left = max(0.0, (state.refuse_until or 0.0) - (state.last_t or 0.0))
        return False, (f"SysProbe: device overlimit ({state.reason}); best-effort jobs are refused for at least "
                       f"another {left:g} s (back-off until t={state.refuse_until:g})")
    return False, f"SysProbe: device disabled ({state.reason}); best-effort jobs are admitted once it is enabled"
