"""Timing helper shared by the benchmarks that derive their own same-run figures."""
from __future__ import annotations

import statistics
import time


def median_seconds(fn, *args, repeat: int = 9, min_time: float = 0.02) -> float:
    """Median over `repeat` samples of fn(*args), each sample looping until
    min_time has passed (so short calls are not lost in timer resolution)."""
    samples = []
    for _ in range(repeat):
        loops, start = 0, time.perf_counter()
        while True:
            fn(*args)
            loops += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        samples.append(elapsed / loops)
    return statistics.median(samples)
