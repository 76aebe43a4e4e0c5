"""The data plane: how a job's requests get from its request ring to their
handlers, and its answers onto its completion ring (`tally-server --data-plane`).

- `cpp` (the default): the session thread runs tally._core.data_plane's loop. It
  waits on the ring's futex in C++, issues what the job may issue without the
  scheduler's say (launches, memsets and copies on a stream the executor has
  opened to it; a synchronization of a job known to be idle; pings) straight to
  the device, and hands every other request to Session.handle, in order. See
  docs/data-plane.md.
- `python`: the session thread pops records and calls Session.handle for each
  (how every request ran before the C++ plane; kept to compare the two).

`TALLY_DATA_PLANE` sets the default, so a test suite can run every server it
starts with either plane.
"""
from __future__ import annotations

import logging
import os
import threading

from tally import _core
from tally.scheduler.plane_owner import PlaneOwner
from tally.server.client.fast_path import FastPath
from tally.server.job import ServedJob
from tally.server.request_hold import RequestHold

log = logging.getLogger("tally.server")

DATA_PLANES = ("cpp", "python")
DATA_PLANE_ENV = "TALLY_DATA_PLANE"
POP_BATCH = 64
# Bounds how long a session thread sleeps in the ring before noticing a close
# request from another thread; the ring itself wakes it at once for requests.
POLL_INTERVAL_S = 0.25


def default_data_plane() -> str:
    """The plane a server uses unless told otherwise: $TALLY_DATA_PLANE, else cpp."""
    choice = os.environ.get(DATA_PLANE_ENV, "").strip() or "cpp"
    if choice not in DATA_PLANES:
        raise ValueError(f"{DATA_PLANE_ENV}={choice!r} names no data plane; use one of {', '.join(DATA_PLANES)}")
    return choice


class PythonDataPlane:
    """The session thread pops each request and runs its handler."""

    fast: FastPath | None = None

    def __init__(self, session: ServedJob):
        self._session = session

    def serve(self) -> str:
        """Until the session closes or the job is gone; why it ended ("" when asked to)."""
        session = self._session
        ring = session.segment.request_ring
        pending, hold = session.pending_records, session.hold
        while hold.wait_released(session.closing_event, POLL_INTERVAL_S):
            session.release_if_evicted()
            if not pending:
                try:
                    pending.extend(ring.pop_batch(POP_BATCH, POLL_INTERVAL_S))
                except _core.PeerDead:
                    return "client process died"
                except _core.TransportError as e:
                    return f"transport failure: {e}"
                continue
            if not hold.enter(session.closing_event, POLL_INTERVAL_S):
                break
            try:
                session.handle(*pending.popleft())
            finally:
                hold.leave()
        return ""

    def make_hold(self) -> RequestHold:
        return RequestHold()

    def stop(self) -> None:
        pass              # serve() looks at the session's closing event

    def poke(self) -> None:
        pass              # serve() looks for an eviction between requests anyway

    def push(self, kind: int, tag: int, payload: bytes) -> None:
        self._session.segment.completion_ring.push(kind, tag, payload)   # under the session's reply lock

    def close_replies(self) -> None:
        pass              # the session's reply lock and flag are all there is

    def close(self) -> None:
        pass              # the session's Segment is the only reference to the mapping

    def disable_fast(self) -> None:
        pass

    def counts(self) -> tuple[int, int, dict[int, int]]:
        return 0, 0, {}


class PlaneHold:
    """RequestHold's interface (tally/server/request_hold.py) over the C++ loop's
    own hold, which it checks between two records without the GIL."""

    def __init__(self, owner):
        self._owner = owner         # PlaneOwner: the loop's hold, through the plane's one writer

    @property
    def held(self) -> bool:
        return self._owner.held

    def hold(self, timeout: float) -> bool:
        return self._owner.hold(timeout)

    def release(self) -> None:
        self._owner.release()

    def wake(self) -> None:
        pass              # stop() wakes the loop

    def wait_released(self, closing: threading.Event, poll_s: float) -> bool:
        while self._owner.held and not closing.is_set():
            closing.wait(poll_s)
        return not closing.is_set()

    def enter(self, closing: threading.Event, poll_s: float) -> bool:
        while not self._owner.enter():
            if not self.wait_released(closing, poll_s):
                return False
        return True

    def leave(self) -> None:
        self._owner.leave()


class CppDataPlane:
    """The session thread's loop in C++ (tally._core.data_plane.ClientPlane), with
    the fast path for what the executor lets through."""

    def __init__(self, session: ServedJob, device):
        """`device`: the backend's DataPlaneDevice, or None where the backend has
        none (then only pings and idle synchronizations are answered in C++)."""
        self._session = session
        issuer = device.issuer if device is not None else _core.data_plane.NullIssuer()
        self.owner = PlaneOwner(session.segment, issuer)
        self.fast = FastPath(self.owner, device, session)
        if device is not None:
            session.services.executor.attach_fast_lanes(session.client_id, self.owner, device)

    def serve(self) -> str:
        session = self._session
        hold, closing = session.hold, session.closing_event
        while not session.closing:
            session.release_if_evicted()
            # Records another server took off the ring and did not handle (a migration
            # brought them): before anything still in the ring.
            while session.pending_records and hold.enter(closing, POLL_INTERVAL_S):
                try:
                    session.handle(*session.pending_records.popleft())
                finally:
                    hold.leave()
            ended, reason = self.owner.serve(session.handle, POLL_INTERVAL_S)
            if ended:
                return reason
        return ""

    def make_hold(self) -> PlaneHold:
        return PlaneHold(self.owner)

    def stop(self) -> None:
        self.owner.stop()

    def poke(self) -> None:
        self.owner.poke()

    def push(self, kind: int, tag: int, payload: bytes) -> None:
        self.owner.push_completion(kind, tag, payload)

    def close_replies(self) -> None:
        self.owner.close_replies()

    def close(self) -> None:
        """The session closed: the plane's reference to the job's segment goes now,
        not when the garbage collector breaks the session's reference cycles."""
        self.owner.close()

    def disable_fast(self) -> None:
        """Every request to Python from now on; returns once no fast operation is under way."""
        self.fast.disable()

    def counts(self) -> tuple[int, int, dict[int, int]]:
        return self.owner.counts()


def make_data_plane(session: ServedJob, choice: str, device):
    return CppDataPlane(session, device) if choice == "cpp" else PythonDataPlane(session)
