"""A recorded trace as a metrics source: a file of timestamped device samples,
replayed in order (for tests, demos, and replaying what a GPU once did).

The file is JSON lines, one DeviceSample per line with its field names
(`{"t": 0.05, "sm_active_percent": 62.5, "sm_clock_mhz": 1755, ...}`); blank
lines and lines starting with `#` are skipped. Times must not go backwards.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from tally.cluster.device_metrics import DeviceSample


class TraceError(ValueError):
    """The trace file cannot be read; the message names the line."""


def read_trace(path: str | Path) -> list[DeviceSample]:
    samples: list[DeviceSample] = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            sample = DeviceSample.from_dict(json.loads(line))
        except (ValueError, TypeError) as e:
            raise TraceError(f"{path}:{number}: not a device sample: {e}") from None
        if samples and sample.t < samples[-1].t:
            raise TraceError(f"{path}:{number}: time {sample.t} goes back from {samples[-1].t}")
        samples.append(sample)
    return samples


def write_trace(path: str | Path, samples: list[DeviceSample]) -> None:
    Path(path).write_text("".join(json.dumps(s.to_dict(), sort_keys=True) + "\n" for s in samples))


class TraceSource:
    """Replays a trace. `realtime=True` paces sample() to the trace's own times
    (for demos); otherwise each call returns the next sample at once."""

    def __init__(self, path: str | Path, realtime: bool = False, loop: bool = False):
        self.name = f"trace {Path(path).name}"
        self.samples = read_trace(path)
        if not self.samples:
            raise TraceError(f"{path}: no samples")
        self.realtime, self.loop = realtime, loop
        self._next = 0
        self._offset = 0.0                # trace time added by looping
        self._started: float | None = None

    def sample(self) -> DeviceSample | None:
        if self._next >= len(self.samples):
            if not self.loop:
                return None
            self._offset += self.samples[-1].t - self.samples[0].t
            self._next = 0
        s = self.samples[self._next]
        self._next += 1
        t = s.t + self._offset
        if self.realtime:
            if self._started is None:
                self._started = time.monotonic() - t
            delay = self._started + t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        return s if self._offset == 0 else DeviceSample.from_dict({**s.to_dict(), "t": t})

    def close(self) -> None:
        pass
