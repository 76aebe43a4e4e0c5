"""Stopping tally-server gracefully (SIGTERM or SIGINT; tally-server --drain-timeout).

1. Stop admitting: a job that connects now is refused, saying the server is
   shutting down. Status and operator requests are still answered.
2. Let the work on the device finish: wait until no job has work queued or
   running, for at most the drain timeout (default 10 s). Work counts from the
   moment the job's call returned: requests still in its ring or in a handler,
   operations in the executor's queues, and what the executor or the C++ data
   plane issued that may still run. Jobs are not stopped from submitting more
   meanwhile; the timeout bounds the wait either way.
3. Tell every job: each is evicted with the reason "tally-server is shutting down
   (SIGTERM) ...", so its next driver call fails with CUDA_ERROR_DEVICE_UNAVAILABLE
   and tally-run exits 75 (an orchestrator runs it again once a server is back).
4. Release everything and exit 0: every session closed, its memory and shared
   memory freed, the socket removed. When work is still on the device at the
   deadline (a kernel that cannot be preempted), the server does not wait for it:
   it removes the shared memory and the socket and exits, and the process's exit
   ends that work and frees the device memory (on a GPU, the driver destroys the
   context).

A second SIGTERM or SIGINT during step 2 ends the wait at once.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from tally.server import eviction
from tally.server.eviction import EvictionHost
from tally.server.job import SessionDirectory
from tally.server.ports import ExecutorPort

log = logging.getLogger("tally.server")

POLL_S = 0.05


class DrainHost(EvictionHost, SessionDirectory, Protocol):
    executor: ExecutorPort

    def stop_admitting(self) -> None: ...
    def stop(self, exit_status: int = ..., abandon_device_work: bool = ...) -> None: ...


class Drain:
    def __init__(self, server: DrainHost, timeout_s: float):
        self.server = server
        self.timeout_s = timeout_s
        self._started = False
        self._hurry = threading.Event()
        self._lock = threading.Lock()

    def begin(self, why: str) -> None:
        """Start draining (safe from a signal handler: the work is on a thread of its own)."""
        with self._lock:
            if self._started:
                log.warning("%s again: not waiting for the jobs' work any longer", why)
                self._hurry.set()
                return
            self._started = True
        threading.Thread(target=self._run, args=(why,), name="tally-drain", daemon=True).start()

    def _run(self, why: str) -> None:
        server = self.server
        server.stop_admitting()
        log.info("%s: shutting down; admitting no more jobs, waiting up to %g s for the work on the device "
                 "to finish", why, self.timeout_s)
        started = time.monotonic()
        deadline = started + self.timeout_s
        while not self._idle() and time.monotonic() < deadline and not self._hurry.is_set():
            self._hurry.wait(POLL_S)
        counters = server.executor.counters()
        idle = self._idle(counters)
        if idle:
            log.info("the work on the device finished in %.1f s", time.monotonic() - started)
        else:
            log.warning("%d operation(s) still queued and %d unit(s) on the device after %.1f s: dropped",
                        counters["ops_queued"] + self._requests_waiting(),
                        counters["units_in_flight"] + counters.get("lanes_busy", 0), time.monotonic() - started)
        reason = f"tally-server is shutting down ({why}); run the job again once a tally-server runs"
        for session in server.attached_sessions():
            eviction.evict(server, session, reason, eviction.SHUTDOWN, wait=False)
        # A kernel that cannot be preempted would hold the release past the deadline:
        # then the process's exit ends it (tally-server's main does that).
        server.stop(abandon_device_work=not idle)

    def _idle(self, counters: dict | None = None) -> bool:
        counters = counters or self.server.executor.counters()
        return (counters["ops_queued"] == 0 and counters["units_in_flight"] == 0
                and counters.get("lanes_busy", 0) == 0 and self._requests_waiting() == 0)

    def _requests_waiting(self) -> int:
        """Jobs with requests not yet handled (in their rings, being handled, or
        waiting on their blocking pools): work they asked for that no executor
        counter shows yet."""
        return sum(1 for s in self.server.attached_sessions() if s.has_requests_waiting())
