"""Time for the executor: what `now` is, timers, and how to wait.

The executor never reads time.monotonic or sleeps itself; it asks its Clock,
so the same code runs on the wall clock (real backends) and on the sim's
virtual clock (tally.backends.sim.loop.SimClock), where waiting means
processing simulated events rather than blocking a thread.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable, Protocol

log = logging.getLogger(__name__)


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic clock."""

    def call_at(self, when: float, fn: Callable[[], None]) -> Cancellable:
        """Run fn (on some other thread, never inside this call) at time `when`."""

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run fn as soon as possible on a thread that may call the backend.
        Backend callbacks hand their work over this way: CUDA forbids driver
        calls inside a host function, and the executor makes them."""

    def wait_for(self, cond: threading.Condition, predicate: Callable[[], bool],
                 timeout: float | None = None) -> bool:
        """Called with cond's lock held: return once predicate() is true (True)
        or the timeout passed (False). Others change the state under the lock
        and notify cond."""


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class WallClock:
    """time.monotonic, with one daemon thread serving every timer and every
    call_soon (completion handling runs there, never on a driver thread)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Timer, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def now(self) -> float:
        return time.monotonic()

    def call_at(self, when: float, fn: Callable[[], None]) -> _Timer:
        timer = _Timer()
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), timer, fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="tally-timers", daemon=True)
                self._thread.start()
            self._cond.notify()
        return timer

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.call_at(float("-inf"), fn)       # ahead of every timer, in submission order

    def wait_for(self, cond: threading.Condition, predicate: Callable[[], bool],
                 timeout: float | None = None) -> bool:
        return cond.wait_for(predicate, timeout=timeout)

    def _serve(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._heap and self._heap[0][2].cancelled:
                        heapq.heappop(self._heap)
                        continue
                    delay = None if not self._heap else self._heap[0][0] - time.monotonic()
                    if delay is not None and delay <= 0:
                        _when, _seq, timer, fn = heapq.heappop(self._heap)
                        break
                    self._cond.wait(timeout=delay)
            try:
                fn()
            except Exception:
                log.exception("timer callback raised")
