"""Waits on values that the server evaluates itself, for backends that cannot let
a device stream hold on one (the cuda backend: a stream held on the device
would hold every implicit synchronization of the one context all jobs share,
cuMemFree and module unloads among them, so an unsatisfied wait of one job
would stall them all).

Once the stream reaches the wait (its host callback), a thread reads the value
with the backend's `poll` until it meets the condition, backing off from 20 us to
1 ms, then opens the gate that holds the stream's later work in the executor.
It gives up when `abandoned()` says the stream or its job went.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from tally.protocol.errors import DeviceError

log = logging.getLogger("tally.scheduler")

_FIRST_POLL_S = 20e-6
_LAST_POLL_S = 1e-3


def start_polling(poll: Callable[[], bool], abandoned: Callable[[], bool], satisfied: Callable[[], None],
                  failed: Callable[[DeviceError], None]) -> None:
    def run() -> None:
        pause = _FIRST_POLL_S
        try:
            while not abandoned():
                if poll():
                    satisfied()
                    return
                time.sleep(pause)
                pause = min(pause * 2, _LAST_POLL_S)
        except DeviceError as e:
            failed(e)           # the stream goes on, its error kept for the job's next synchronization
            satisfied()

    threading.Thread(target=run, name="tally-value-wait", daemon=True).start()
