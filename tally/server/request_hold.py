"""Stopping a session thread between two requests (a suspended or migrating job's).

While a job is suspended its device memory is gone, so none of its requests may
run: the session thread waits before each one. The job notices nothing but a
pause: its synchronous calls wait for their answers, and its asynchronous ones
wait in its request ring (once the ring is full, in the job's own send). The
operator's thread asks for the hold and learns when no request of the job runs
any more: at once when the session thread is waiting for requests, else once
the request it is handling is done.

The hot path takes no lock: the session thread marks itself busy, then looks at
the hold; `hold` sets the hold, then looks at the mark. Under the GIL one of them
sees the other's write, so a request never starts once `hold` has returned True.
"""
from __future__ import annotations

import threading
import time

# How often `hold` looks again whether the handler it waits for is done.
HOLD_POLL_S = 0.001


class RequestHold:
    def __init__(self):
        self._cond = threading.Condition()
        self._held = False
        self._busy = False           # the session thread is inside a request

    @property
    def held(self) -> bool:
        return self._held

    def hold(self, timeout: float) -> bool:
        """Stop the session thread before its next request and wait until none runs
        (True), or `timeout` seconds passed (False; the hold is then taken back)."""
        self._held = True
        deadline = time.monotonic() + timeout
        while self._busy:
            if time.monotonic() > deadline:
                self.release()
                return False
            time.sleep(HOLD_POLL_S)
        return True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def wake(self) -> None:
        """Make a waiting session thread look again (its session is closing)."""
        with self._cond:
            self._cond.notify_all()

    def wait_released(self, closing: threading.Event, poll_s: float) -> bool:
        """Block while held; False once the session is closing."""
        if self._held:
            with self._cond:
                while self._held and not closing.is_set():
                    self._cond.wait(poll_s)
        return not closing.is_set()

    def enter(self, closing: threading.Event, poll_s: float) -> bool:
        """The session thread is about to handle a request: waits while held; False
        once the session is closing (the request is not handled)."""
        while True:
            self._busy = True
            if not self._held:
                return True
            self._busy = False
            if not self.wait_released(closing, poll_s):
                return False

    def leave(self) -> None:
        self._busy = False
