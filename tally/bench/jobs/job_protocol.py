"""What every Python job program of the co-location benchmark shares with the
CUDA ones (tally/bench/jobs/job_common.h): the command-line contract, the
arrival-driven serving loop, the train-until-stopped loop and the JSON report.
No torch here, so the loops are tested without it.

High-priority: `--arrivals FILE --duration S --out FILE [--drain S] [--warmup N]`.
Requests are served one at a time in arrival order; latency = completion -
arrival, so waiting behind an earlier request counts. Requests still waiting
`drain` seconds after the trace's end are left unserved.
Best-effort: `--out FILE --stop FILE [--ready FILE] [--max-steps N]`: iterate
until the stop file exists; --ready is created after the first iteration.
Times are time.monotonic() (CLOCK_MONOTONIC), shared by all processes.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path


def high_priority_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arrivals", type=Path, required=True, help="arrival times, seconds, one per line")
    parser.add_argument("--duration", type=float, required=True, help="length of the trace window, seconds")
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON report")
    parser.add_argument("--drain", type=float, default=10.0, help="seconds after the window to finish queued work")
    parser.add_argument("--warmup", type=int, default=3, help="untimed requests before the trace starts")


def best_effort_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON report")
    parser.add_argument("--stop", type=Path, required=True, help="stop once this file exists")
    parser.add_argument("--ready", type=Path, help="created after the first iteration")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many iterations (0: no limit)")


def read_arrivals(path: Path) -> list[float]:
    try:
        times = [float(line) for line in Path(path).read_text().split()]
    except ValueError as e:
        raise SystemExit(f"{path}: expected one arrival time (seconds) per line: {e}") from None
    except OSError as e:
        raise SystemExit(f"cannot read the arrival file {path}: {e.strerror}") from None
    if any(not math.isfinite(t) or t < 0 for t in times) or times != sorted(times):
        raise SystemExit(f"{path}: arrival times must be finite, >= 0 and sorted")
    return times


def serve_trace(arrivals: list[float], duration: float, drain: float,
                serve: Callable[[int], bool], clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> dict:
    """Serve request q (serve(q) -> its output was right) at each arrival.
    Returns the report fields the runner reads (tally/bench/process_results.py)."""
    t0 = clock()
    deadline = t0 + duration + drain
    start, end, wrong = [], [], 0
    for q, arrival in enumerate(arrivals):
        due = t0 + arrival
        wait = due - clock()
        if wait > 0:
            sleep(wait)
        begin = clock()
        if begin > deadline:
            break
        right = serve(q)
        done = clock()
        start.append(begin - t0)
        end.append(done - t0)
        wrong += not right
    return {"t0": t0, "start_s": start, "end_s": end, "stopped_s": clock() - t0,
            "unfinished": len(arrivals) - len(end), "ok": wrong == 0,
            "check": "every output equals the reference" if wrong == 0 else f"{wrong} WRONG outputs"}


def train_until_stopped(step: Callable[[], None], stop: Path, ready: Path | None, max_steps: int = 0,
                        clock: Callable[[], float] = time.monotonic) -> dict:
    """Run step() until `stop` exists (at least once). Returns `started` and `step_end`."""
    started = clock()
    ends = []
    while True:
        step()
        ends.append(clock())
        if len(ends) == 1 and ready is not None:
            Path(ready).touch()
        if Path(stop).exists() or (max_steps and len(ends) >= max_steps):
            break
    return {"started": started, "step_end": ends}


def write_report(path: Path, report: dict) -> None:
    """Write PATH.tmp, then rename: the runner never reads half a report."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(report) + "\n")
    os.replace(tmp, path)
