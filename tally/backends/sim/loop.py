"""The `sim` backend's virtual clock: a discrete-event loop in integer nanoseconds.

Two ways to drive it:
- discrete (tests, `tally-bench colocate --backend sim`): whoever needs time to
  pass calls `step()` / `run_until()`; callbacks run inline on that thread; no
  sleeping, and the same inputs give the same event order bit for bit (ties are
  broken by scheduling order).
- real time (`tally-server --backend sim`): a driver thread processes each
  event once the wall clock reaches its time; foreign callbacks (host functions,
  the scheduler's notifications, timers) run on a pool of callback threads, so
  a slow or blocking one (a job's host function waits for the job to run it)
  stalls neither the device model nor other streams' callbacks. A stream's own
  callbacks stay in order: the next one cannot start before the previous
  returned.
"""
from __future__ import annotations

import heapq
import itertools
import math
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

log = logging.getLogger(__name__)
CALLBACK_THREADS = 256      # threads are started only as callbacks block (ThreadPoolExecutor reuses idle ones)


class SimDeadlock(RuntimeError):
    """A blocking call waits for something that no pending event can bring."""


class Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SimLoop:
    def __init__(self, realtime: bool = False):
        self.realtime = realtime
        self.now_ns = 0
        # (time, class, seq, timer, fn): at equal times class 0 runs before class 1
        self._heap: list[tuple[int, int, int, Timer, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)   # notified after every event
        self._closed = False
        self._driver: threading.Thread | None = None
        self._callbacks: ThreadPoolExecutor | None = None
        if realtime:
            self._wall_origin = time.monotonic_ns()
            self._callbacks = ThreadPoolExecutor(max_workers=CALLBACK_THREADS, thread_name_prefix="sim-callback")
            self._driver = threading.Thread(target=self._drive, name="sim-clock", daemon=True)
            self._driver.start()

    # scheduling ---------------------------------------------------------------
    def schedule(self, at_ns: int, fn: Callable[[], None], late: bool = False) -> Timer:
        """Run fn (device-model code, under the loop lock) at virtual time at_ns.
        `late` events run after every other event of the same time (the SM model
        hands out freed slots only once everything arriving at that instant is in)."""
        timer = Timer()
        with self.lock:
            heapq.heappush(self._heap, (max(at_ns, self.now_ns), int(late), next(self._seq), timer, fn))
            if self.realtime:
                self.changed.notify_all()
        return timer

    def call_foreign(self, fn: Callable[[], None]) -> None:
        """Run code that is not the device model's (a job's host function, the
        scheduler): inline in discrete mode, on the callback thread in real time."""
        if self._callbacks is None:
            fn()
        else:
            self._callbacks.submit(self._run_callback, fn)

    # discrete driving -----------------------------------------------------------
    def step(self) -> bool:
        """Process the earliest pending event; False when there is none."""
        with self.lock:
            while self._heap:
                at, _cls, _seq, timer, fn = heapq.heappop(self._heap)
                if timer.cancelled:
                    continue
                self.now_ns = at
                fn()
                self.changed.notify_all()
                return True
            return False

    def next_time(self) -> int | None:
        with self.lock:
            while self._heap and self._heap[0][3].cancelled:
                heapq.heappop(self._heap)
            return self._heap[0][0] if self._heap else None

    def run_until(self, t_ns: int) -> None:
        """Process every event up to and including t_ns, then set now to t_ns."""
        if self.realtime:
            raise RuntimeError("run_until drives a discrete sim; this one follows the wall clock")
        with self.lock:
            while True:
                nxt = self.next_time()
                if nxt is None or nxt > t_ns:
                    break
                self.step()
            self.now_ns = max(self.now_ns, t_ns)

    def wait_until(self, predicate: Callable[[], bool], what: str,
                   timeout_s: float | None = None) -> bool:
        """Block until predicate() holds. Discrete: process events until it does
        (SimDeadlock if none are left). Real time: wait for the driver thread.
        Returns False on timeout."""
        if not self.realtime:
            with self.lock:
                deadline = None if timeout_s is None else self.now_ns + int(timeout_s * 1e9)
                while not predicate():
                    nxt = self.next_time()
                    if nxt is None:
                        raise SimDeadlock(f"simulation has nothing left to run while waiting for {what}")
                    if deadline is not None and nxt > deadline:
                        self.now_ns = max(self.now_ns, deadline)
                        return False
                    self.step()
                return True
        with self.lock:
            return self.changed.wait_for(predicate, timeout=timeout_s)

    # real-time driving ------------------------------------------------------------
    def wall_ns(self) -> int:
        return time.monotonic_ns() - self._wall_origin

    def catch_up(self) -> None:
        """Real time: process due events and move now to the wall clock, so an
        operation enqueued now is stamped with the present (keeps time monotonic)."""
        if not self.realtime:
            return
        with self.lock:
            wall = self.wall_ns()
            while True:
                nxt = self.next_time()
                if nxt is None or nxt > wall:
                    break
                self.step()
            self.now_ns = max(self.now_ns, wall)

    def _drive(self) -> None:
        with self.lock:
            while not self._closed:
                nxt = self.next_time()
                wall = self.wall_ns()
                if nxt is not None and nxt <= wall:
                    self.step()
                    continue
                timeout = None if nxt is None else (nxt - wall) / 1e9
                self.changed.wait(timeout=timeout)

    @staticmethod
    def _run_callback(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a job's callback must not take the device down
            log.exception("sim callback raised")

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self.changed.notify_all()
        if self._callbacks is not None:
            self._callbacks.shutdown(wait=False, cancel_futures=True)
        if self._driver is not None and self._driver is not threading.current_thread():
            self._driver.join(timeout=5)


class SimClock:
    """The scheduler's Clock (tally.scheduler.clock) on a SimLoop: virtual
    seconds; timers fire as loop events; waiting drives the loop when discrete."""

    def __init__(self, loop: SimLoop):
        self.loop = loop

    def now(self) -> float:
        self.loop.catch_up()
        return self.loop.now_ns / 1e9

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        # fire at the first nanosecond whose float reading is >= when, so a timer
        # never sees now() < when (a policy re-arming "not yet" would spin)
        at_ns = math.ceil(when * 1e9)
        while at_ns / 1e9 < when:
            at_ns += 1
        return self.loop.schedule(at_ns, lambda: self.loop.call_foreign(fn))

    def call_soon(self, fn: Callable[[], None]) -> None:
        # the sim's callbacks already run where backend calls are allowed
        # (inline in discrete mode, a pool thread in real time)
        fn()

    def wait_for(self, cond: threading.Condition, predicate: Callable[[], bool],
                 timeout: float | None = None) -> bool:
        if self.loop.realtime:
            return cond.wait_for(predicate, timeout=timeout)
        return self.loop.wait_until(predicate, "a scheduler condition", timeout)
