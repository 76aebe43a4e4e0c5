"""Reading the job programs' JSON reports into the benchmark's measurements.

High-priority report: `t0` (CLOCK_MONOTONIC seconds when the trace clock
started), `start_s`/`end_s` (per served request, seconds from t0; requests are
served in arrival order, so the served ones are a prefix of the arrivals),
`stopped_s` (when it gave up on the rest), `ok`, `check`.
Best-effort report: `started` and `step_end` (CLOCK_MONOTONIC seconds: when
the job began and when each iteration ended), `ok`, `check`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class ReportError(ValueError):
    """A job's report is missing or malformed."""


def read_report(path: Path, keys: tuple[str, ...]) -> dict:
    try:
        report = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ReportError(f"the job wrote no report ({path})") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"the job's report {path} is not JSON: {e}") from None
    missing = [k for k in keys if k not in report]
    if missing:
        raise ReportError(f"the job's report {path} lacks {', '.join(missing)}")
    return report


@dataclass
class HighPriorityResult:
    t0: float                      # CLOCK_MONOTONIC seconds
    latencies: np.ndarray          # seconds, served requests then unserved ones (censored at the stop)
    service: np.ndarray            # seconds from start of service to completion, served requests
    unfinished: int
    completed_in_window: int       # served by t0 + duration
    check: str


def high_priority_result(report: dict, arrivals: np.ndarray, duration: float) -> HighPriorityResult:
    start = np.asarray(report["start_s"], dtype=float)
    end = np.asarray(report["end_s"], dtype=float)
    served = end.size
    if start.size != served or served > arrivals.size:
        raise ReportError(f"high-priority report has {start.size} starts and {served} ends for "
                          f"{arrivals.size} arrivals")
    latencies = end - arrivals[:served]
    if served and latencies.min() < -1e-6:
        raise ReportError("high-priority report has a request completed before it arrived")
    left = arrivals[served:]
    censored = np.maximum(float(report["stopped_s"]) - left, 0.0)
    return HighPriorityResult(
        t0=float(report["t0"]), latencies=np.concatenate([latencies, censored]), service=end - start,
        unfinished=int(left.size), completed_in_window=int(np.count_nonzero(end <= duration)),
        check=str(report.get("check", "")))


def iterations_in_window(started: float, step_end, window: tuple[float, float]) -> float:
    """Iterations done inside `window`, counting an iteration cut by the window's
    edge by the share of its duration inside it (iteration i lasts from the end of
    iteration i-1, or `started`, to its own end)."""
    ends = np.asarray(step_end, dtype=float)
    if ends.size == 0:
        return 0.0
    begins = np.concatenate([[started], ends[:-1]])
    lengths = ends - begins
    if np.any(lengths <= 0):
        raise ReportError("best-effort report has iterations that do not move forward in time")
    lo, hi = window
    inside = np.clip(np.minimum(ends, hi) - np.maximum(begins, lo), 0.0, None)
    return float(np.sum(inside / lengths))
