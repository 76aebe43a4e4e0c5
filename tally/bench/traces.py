"""Request arrival times for the high-priority job.

- `azure`: the bundled per-minute invocation counts
  (tally/data/traces/azure_functions_2021_sample.csv, see make_azure_sample.py
  beside it). A run replays a window of consecutive trace minutes, each minute
  compressed to `seconds_per_minute` of run time and scaled so the window's
  mean rate is the requested one; inside a minute, arrivals are a Poisson
  process at that minute's rate. Bursts keep their shape relative to the mean.
- `poisson`: a Poisson process at the requested rate.
Both are deterministic for a given seed.
"""
from __future__ import annotations

from importlib import resources

import numpy as np

TRACE_KINDS = ("azure", "poisson")
AZURE_SAMPLE = "azure_functions_2021_sample.csv"


def load_azure_counts() -> np.ndarray:
    """Per-minute invocation counts of the bundled sample."""
    path = resources.files("tally") / "data" / "traces" / AZURE_SAMPLE
    with resources.as_file(path) as p:
        table = np.loadtxt(p, delimiter=",", comments="#", ndmin=2)
    return table[:, 1].astype(float)


def poisson_arrivals(rate: float, duration: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate * duration)
    return np.sort(rng.uniform(0.0, duration, n))


def azure_arrivals(rate: float, duration: float, seed: int,
                   seconds_per_minute: float = 0.25) -> np.ndarray:
    counts = load_azure_counts()
    minutes = max(1, int(np.ceil(duration / seconds_per_minute)))
    if minutes > counts.size:
        raise ValueError(f"a {duration} s run at {seconds_per_minute} s per trace minute needs "
                         f"{minutes} minutes; the trace has {counts.size}")
    rng = np.random.default_rng(seed)
    first = int(rng.integers(0, counts.size - minutes + 1))
    window = counts[first:first + minutes]
    rates = window / window.mean() * rate if window.mean() > 0 else np.full(minutes, rate)
    out = []
    for i, r in enumerate(rates):
        start = i * seconds_per_minute
        length = min(seconds_per_minute, duration - start)
        if length <= 0:
            break
        n = rng.poisson(r * length)
        out.append(rng.uniform(start, start + length, n))
    return np.sort(np.concatenate(out)) if out else np.empty(0)


def arrivals(kind: str, rate: float, duration: float, seed: int) -> np.ndarray:
    """Arrival times in seconds from 0, sorted."""
    if not rate > 0 or not duration > 0:
        raise ValueError(f"rate and duration must be > 0, got rate={rate}, duration={duration}")
    if kind == "azure":
        return azure_arrivals(rate, duration, seed)
    if kind == "poisson":
        return poisson_arrivals(rate, duration, seed)
    raise ValueError(f"unknown trace {kind!r}; choose one of {', '.join(TRACE_KINDS)}")
