"""A fixed-bucket histogram of delays, cheap enough for the executor's hot path:
one bisect and two additions per observation, under the executor's own lock (it
has none of its own). /metrics exposes its snapshot as a Prometheus histogram,
`tally-server status --json` shows it with the scheduler's counters.

The default bounds span what a high-priority kernel can wait in the server: tens
of microseconds when it starts at once, up to a second behind a long
non-preemptible best-effort kernel.
"""
from __future__ import annotations

import bisect

# seconds; the last bucket (+Inf) is implicit
QUEUEING_BOUNDS_S = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
                     0.1, 0.25, 0.5, 1.0)


class DelayHistogram:
    def __init__(self, bounds: tuple[float, ...] = QUEUEING_BOUNDS_S):
        if not bounds or any(b >= c for b, c in zip(bounds, bounds[1:])):
            raise ValueError(f"histogram bounds must be increasing and not empty, got {bounds!r}")
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(bounds) + 1)     # per bucket (not cumulative); the last is +Inf
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: a delay equal to a bound belongs to that bound's bucket (le = "less or equal")
        self._counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self._sum += seconds

    def snapshot(self) -> dict:
        """JSON-ready: `buckets` as Prometheus has them, [[upper bound, cumulative count], ...]
        ending with "+Inf" (the total), and the sum of all observations in seconds."""
        cumulative, buckets = 0, []
        for bound, n in zip((*self.bounds, "+Inf"), self._counts):
            cumulative += n
            buckets.append([bound, cumulative])
        return {"buckets": buckets, "count": cumulative, "sum": self._sum}
