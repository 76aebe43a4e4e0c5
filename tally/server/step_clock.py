"""How long each step of an operation took (a migration's offer, transfer,
commit...), for status and the benchmark: where the pause of a job goes."""
from __future__ import annotations

import time


class StepClock:
    def __init__(self):
        self.started = self._last = time.monotonic()
        self.ms: dict[str, float] = {}

    def step(self, name: str) -> None:
        """The step `name` ended now (it began when the previous one ended)."""
        now = time.monotonic()
        self.ms[name] = round(self.ms.get(name, 0.0) + (now - self._last) * 1000, 3)
        self._last = now
