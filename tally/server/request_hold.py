"""Stopping a session thread between two requests (a suspended job's).

While a job is suspended its device memory is gone, so none of its requests may
run: the session thread waits at `checkpoint` before each one. The job notices
nothing but a pause: its synchronous calls wait for their answers, and its
asynchronous ones wait in the request ring (once the ring is full, in the job's
own send). The operator's thread asks for the hold and learns when the session
thread has stopped, i.e. when no handler of the job runs any more.
"""
from __future__ import annotations

import threading


class RequestHold:
    def __init__(self):
        self._cond = threading.Condition()
        self._held = False
        self._parked = False

    @property
    def held(self) -> bool:
        return self._held

    def hold(self, timeout: float) -> bool:
        """Ask the session thread to stop before its next request, and wait until it
        has (True) or `timeout` seconds passed (False; the hold is then taken back)."""
        with self._cond:
            self._held = True
            self._cond.notify_all()
            if self._cond.wait_for(lambda: self._parked, timeout):
                return True
            self._held = False
            self._cond.notify_all()
            return False

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def checkpoint(self, closing: threading.Event, poll_s: float) -> bool:
        """Called by the session thread before each request: returns once no hold is
        asked for (True), or False when the session is closing meanwhile."""
        if not self._held:
            return not closing.is_set()
        with self._cond:
            while self._held and not closing.is_set():
                self._parked = True
                self._cond.notify_all()
                self._cond.wait(poll_s)
            self._parked = False
        return not closing.is_set()
