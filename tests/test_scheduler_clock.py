"""The wall clock's timer / hand-over thread."""
from __future__ import annotations

import threading
import time

from tally.scheduler.clock import WallClock


def test_call_soon_runs_in_order_on_the_clock_thread():
    clock = WallClock()
    seen, done = [], threading.Event()
    for i in range(50):
        clock.call_soon(lambda i=i: seen.append((i, threading.current_thread().name)))
    clock.call_soon(done.set)
    assert done.wait(5)
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"tally-timers"}


def test_timers_fire_not_before_their_time_and_can_be_cancelled():
    clock = WallClock()
    fired, done = [], threading.Event()
    start = clock.now()
    cancelled = clock.call_at(start + 0.01, lambda: fired.append("cancelled"))
    clock.call_at(start + 0.03, lambda: (fired.append(clock.now() - start), done.set()))
    clock.call_at(start + 0.02, lambda: fired.append("first"))
    cancelled.cancel()
    assert done.wait(5)
    assert fired[0] == "first" and fired[1] >= 0.03 and len(fired) == 2


def test_wait_for_returns_when_the_predicate_holds():
    clock = WallClock()
    cond = threading.Condition()
    state = {"ready": False}

    def make_ready():
        with cond:
            state["ready"] = True
            cond.notify_all()

    clock.call_at(time.monotonic() + 0.01, make_ready)
    with cond:
        assert clock.wait_for(cond, lambda: state["ready"], timeout=5)
        assert not clock.wait_for(cond, lambda: False, timeout=0.01)
