"""cuLaunchHostFunc / cuStreamAddCallback: the job's callback runs in the job's
process, in stream order.

The server queues a HostCallback operation on the stream. When the device
reaches it, the backend runs it on one of its threads: it posts HostFuncReady
(a completion with tag 0) to the client, whose callback thread runs the
function and answers HostFuncDone; until then the operation does not return,
so later work on the stream stays behind the callback, as CUDA guarantees.

A backend that runs host callbacks inline while the operation is being queued
(null executes nothing and does so) cannot be held that way: the callback is
posted and the stream goes on at once.
"""
from __future__ import annotations

import logging
import threading

from tally import protocol
from tally.server.driver.stream_table import submitting

log = logging.getLogger("tally.server")

HOST_FUNC_READY = protocol.codec("HostFuncReady")
# How often a waiting callback looks whether its client is gone.
CLIENT_CHECK_S = 0.2


class HostFunctions:
    def __init__(self, session):
        self._session = session
        self._lock = threading.Lock()
        self._pending: dict[int, threading.Event] = {}
        self._released = False
        self._warned_inline = False

    def callback_for(self, callback_id: int):
        """The function the HostCallback operation runs for this callback."""
        done = threading.Event()
        with self._lock:
            if callback_id in self._pending:
                raise ValueError(f"host function callback {callback_id} is already queued")
            self._pending[callback_id] = done
            if self._released:
                done.set()

        def run() -> None:
            session = self._session
            if session.closed:
                return
            try:
                session.push_completion(HOST_FUNC_READY.kind, 0, HOST_FUNC_READY.pack(callback=callback_id))
            except Exception:  # noqa: BLE001
                return   # the client is gone
            if getattr(submitting, "active", False):
                if not self._warned_inline:
                    self._warned_inline = True
                    log.info("client %d: the %s backend runs host callbacks inline; host functions are "
                             "posted without holding their stream", session.client_id, session.backend.kind)
                return
            while not done.wait(CLIENT_CHECK_S):
                if session.closed or self._released:
                    return

        return run

    def finished(self, callback_id: int) -> bool:
        """HostFuncDone: let the stream go on. False for an unknown callback."""
        with self._lock:
            done = self._pending.pop(callback_id, None)
        if done is None:
            return False
        done.set()
        return True

    def release_all(self) -> None:
        """The client is going: no callback will answer; free every held stream."""
        with self._lock:
            self._released = True
            pending = list(self._pending.values())
            self._pending.clear()
        for done in pending:
            done.set()
