"""Time-slicing best-effort jobs whose memory does not fit together
(`tally-server --oversubscribe [--slice-seconds S]`), Gandiva's suspend-based
time-slicing on tally's suspend (tally/server/suspend.py).

With it, a best-effort job's allocation that finds no room (the device, or the
memory the high-priority reserve leaves best-effort jobs) waits instead of
failing, whichever allocator it came through (cuMemAlloc, cuMemAllocAsync and
pools, cuMemAllocPitch, cuMemCreate, cuMemAllocManaged:
tally/server/handlers/memory_wait.py), unless its own quota is what is in the
way or it could not fit even with every other best-effort job suspended (their
managed memory stays on the device when they are). The slicer then suspends the
best-effort job that has run longest (at least one slice) to make room. Jobs it
suspended come back in turn: each tick the one suspended longest is resumed if
its memory fits, and otherwise, once a running best-effort job has had a whole
slice, that job is suspended to make room for it. So all of them make progress.
The high-priority job is never suspended, and jobs the operator suspended are
left alone.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from tally import protocol
from tally.protocol.errors import CUDA_ERROR_OUT_OF_MEMORY, DeviceError
from tally.scheduler.executor import ClientGone
from tally.server import suspend
from tally.server.job import ServedJob, SessionDirectory
from tally.server.lifecycle import JobState

log = logging.getLogger("tally.server")

DEFAULT_SLICE_SECONDS = 5.0
TICK_S = 0.2               # how often the slicer looks (and a waiting allocation tries again)


class SlicerHost(suspend.SuspendHost, SessionDirectory, Protocol):
    """What the time slicer uses: the jobs, and what suspending them takes."""


class TimeSlicer:
    def __init__(self, server: SlicerHost, slice_seconds: float = DEFAULT_SLICE_SECONDS):
        self.server = server
        self.slice_seconds = slice_seconds
        self._cond = threading.Condition()
        self._waiting: dict[int, int] = {}          # client id -> bytes its allocation waits for
        self._since: dict[int, float] = {}          # client id -> when it last started running
        self._sliced: set[int] = set()              # suspended by the slicer (not by the operator)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tally-time-slicer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    # ---- allocations that wait ------------------------------------------------------------
    def may_wait(self, session: ServedJob, nbytes: int) -> bool:
        """Whether an allocation refused for lack of memory should wait for a time slice."""
        if session.priority != protocol.Priority.BEST_EFFORT:
            return False
        memory = session.client.allocations.memory
        quota = memory.quota_bytes
        return quota is None or memory.used_bytes + nbytes <= quota     # its own quota: waiting will not help

    def wait_for_memory(self, session: ServedJob, nbytes: int, attempt: Callable[[], object]):
        """On a blocking thread: attempt() until it does not run out of memory. Raises
        the refusal when it cannot fit even with every other best-effort job suspended,
        ClientGone when the job leaves meanwhile."""
        cid = session.client_id
        with self._cond:
            self._waiting[cid] = nbytes
            self._cond.notify_all()
        try:
            while True:
                try:
                    return attempt()
                except DeviceError as e:
                    if e.code != CUDA_ERROR_OUT_OF_MEMORY:
                        raise
                    if not self._others_hold_memory(session):
                        raise             # nobody left to suspend: it can never fit
                if session.closed or self._stop.is_set():
                    raise ClientGone(f"client {cid} left while its allocation waited for memory")
                with self._cond:
                    self._cond.wait(TICK_S)
        finally:
            with self._cond:
                self._waiting.pop(cid, None)

    def _others_hold_memory(self, session: ServedJob) -> bool:
        return any(s is not session and s.priority == protocol.Priority.BEST_EFFORT and s.life.suspension is None
                   and _suspendable_bytes(s) > 0 for s in self.server.attached_sessions())

    # ---- the slicer -----------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception:       # the slicer must keep going: the next tick tries again
                log.exception("time slicer: a tick failed")
            with self._cond:
                self._cond.wait(TICK_S)

    def _tick(self) -> None:
        now = time.monotonic()
        jobs = [s for s in self.server.attached_sessions()
                if s.priority == protocol.Priority.BEST_EFFORT and s.life.state is not JobState.EVICTED]  # holds nothing
        alive = {s.client_id for s in jobs}
        self._sliced &= alive
        for cid in list(self._since):
            if cid not in alive:
                del self._since[cid]
        with self._cond:
            waiting = dict(self._waiting)
        running = [s for s in jobs if s.life.suspension is None]
        for s in running:
            self._since.setdefault(s.client_id, now)
        # Jobs that have had a whole slice, longest-running first: the ones to suspend.
        done_slice = sorted((s for s in running if s.client_id not in waiting and s.life.state is not JobState.PAUSED
                             and now - self._since[s.client_id] >= self.slice_seconds
                             and _suspendable_bytes(s) > 0),
                            key=lambda s: self._since[s.client_id])
        if waiting and done_slice:
            self._suspend(done_slice.pop(0))
            return
        queue = sorted((s for s in jobs if s.client_id in self._sliced and s.life.suspension is not None),
                       key=lambda s: s.life.suspension.suspended_at)
        if not queue:
            return
        first = queue[0]
        log.debug("time slicer: waiting %s, queue %s, done %s", waiting, [q.client_id for q in queue],
                  [d.client_id for d in done_slice])
        if self._resume(first):
            return
        if done_slice and not waiting:
            self._suspend(done_slice.pop(0))
            self._resume(first)

    def _suspend(self, session: ServedJob) -> None:
        try:
            done = suspend.suspend(self.server, session, force=False)
        except suspend.SuspendRefused as e:
            log.info("time slicer: %s", e)
            return
        self._sliced.add(session.client_id)
        self._since.pop(session.client_id, None)
        log.info("time slicer: %s", done)
        with self._cond:
            self._cond.notify_all()          # waiting allocations try again

    def _resume(self, session: ServedJob) -> bool:
        try:
            done = suspend.resume(self.server, session)
        except suspend.SuspendRefused:
            return False                    # its memory does not fit yet
        self._sliced.discard(session.client_id)
        self._since[session.client_id] = time.monotonic()
        log.info("time slicer: %s", done)
        return True


def _suspendable_bytes(session: ServedJob) -> int:
    """What suspending the job would free: its memory but its managed memory, which
    stays (its bytes are the job's own shared memory; tally/server/suspend.py)."""
    client = session.client
    allocations = client.allocations
    managed = sum(found[1] for base in client.managed.bases() if (found := allocations.find(base)) is not None)
    return allocations.used_bytes - managed
