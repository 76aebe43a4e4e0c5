"""One job's life in the server: where it is, what may happen to it next, and why not.

Every change of a job's state goes through its `Lifecycle`: the operator's pause,
resume, suspend, migrate and evict, the time slicer's turns, SysProbe's and the
drain's evictions, a device fault, a migration arriving or leaving, and the job's
own exit. Like tally/cluster/health.py it is a pure state machine: it decides and
remembers, and the modules that do the work (control.py, suspend.py, migration.py,
eviction.py, device_faults.py, session.py) ask it first and tell it how their work
ended. Status and /metrics read the state from here.

States:

    ATTACHING    its session exists; its thread does not serve it yet (handshake)
    RUNNING      served; its work runs as the scheduler decides
    PAUSED       served; the executor holds all of its work (the operator's pause)
    SUSPENDING   its device memory is being saved and freed (suspend.py)
    SUSPENDED    its device memory waits in host memory; its requests wait
    RESUMING     its device memory is coming back at the same addresses
    MIGRATING    its state streams to another tally-server (migration.py)
    HANDED_OVER  another tally-server serves it now; this one only lets go
    EVICTED      told why; every request fails; its state is released at once
    FAULTED      a device fault ended its device state; every request fails
    CLOSING      its session is releasing everything it held
    CLOSED       released

Requests and where each leads (`-` nothing changes, answered as such; a blank is
refused with the reason):

    request     ATTACHING RUNNING PAUSED  SUSPENDED EVICTED FAULTED HANDED_OVER CLOSING
    START       RUNNING   -       -       -         -       -
    PAUSE                 PAUSED  -
    UNPAUSE               -       RUNNING
    SUSPEND               SUSP'ING SUSP'ING -
    RESUME                                RESUMING
    MIGRATE               MIGRATING
    HAND_OVER   HANDED_OV HANDED_OV HANDED_OV HANDED_OV HANDED_OV HANDED_OV -
    EVICT                 EVICTED EVICTED EVICTED   -       EVICTED
    FAULT       FAULTED   FAULTED FAULTED FAULTED   -       -
    CLOSE       CLOSING   CLOSING CLOSING CLOSING   CLOSING CLOSING CLOSING     -

The three transient states (SUSPENDING, RESUMING, MIGRATING) belong to the thread
that began them, which ends them with `finish(ok)`:

    SUSPENDING  ok: SUSPENDED        failed: where it was (RUNNING or PAUSED)
    RESUMING    ok: where it was before the suspend (RUNNING or PAUSED)   failed: SUSPENDED
    MIGRATING   ok: HANDED_OVER      failed: RUNNING

Any other thread's request waits until that thread has finished, and is then
answered against the state the job is in: an eviction during a suspend evicts the
suspended job; a second suspend finds it suspended already; a close waits for a
migration to settle who serves the job. Nothing waits for a transient state
except through here, and only its owner ends it.

Three things never wait, because they come from outside at any moment:
- `leave()`: the job's process went (or the server stops): `leaving` is set at
  once; its session thread then closes it. A leaving job is not suspended,
  migrated or evicted any more.
- `fault(error)`: every request fails with `error` from now on; the state is
  FAULTED now, or once a transient state ends.
- `break_context(error)`: the job was told of an error that leaves its context
  unusable (a device assert): every request fails with it; the state stays.

`failure` is the one error every request of the job fails with (None: requests
run); only this module sets it (an eviction, a device fault, a broken context).
"""
from __future__ import annotations

import enum
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from tally.protocol.errors import DeviceError


class JobState(enum.Enum):
    ATTACHING = "attaching"
    RUNNING = "running"
    PAUSED = "paused"
    SUSPENDING = "suspending"
    SUSPENDED = "suspended"
    RESUMING = "resuming"
    MIGRATING = "migrating"
    HANDED_OVER = "handed over"
    EVICTED = "evicted"
    FAULTED = "faulted"
    CLOSING = "closing"
    CLOSED = "closed"


class Request(enum.Enum):
    START = "start"
    PAUSE = "pause"
    UNPAUSE = "unpause"
    SUSPEND = "suspend"
    RESUME = "resume"
    MIGRATE = "migrate"
    HAND_OVER = "hand over"
    EVICT = "evict"
    FAULT = "fault"
    CLOSE = "close"


S, R = JobState, Request
TRANSIENT = frozenset({S.SUSPENDING, S.RESUMING, S.MIGRATING})
LIVE = frozenset(S) - {S.CLOSING, S.CLOSED}

# (state, request) -> the state it leads to (the same state: nothing changes). Absent: refused.
ALLOWED: dict[tuple[JobState, Request], JobState] = {
    (S.ATTACHING, R.START): S.RUNNING,
    **{(s, R.START): s for s in (S.RUNNING, S.PAUSED, S.SUSPENDED, S.EVICTED, S.FAULTED)},
    (S.RUNNING, R.PAUSE): S.PAUSED,
    (S.PAUSED, R.PAUSE): S.PAUSED,
    (S.RUNNING, R.UNPAUSE): S.RUNNING,
    (S.PAUSED, R.UNPAUSE): S.RUNNING,
    (S.RUNNING, R.SUSPEND): S.SUSPENDING,
    (S.PAUSED, R.SUSPEND): S.SUSPENDING,
    (S.SUSPENDED, R.SUSPEND): S.SUSPENDED,
    (S.SUSPENDED, R.RESUME): S.RESUMING,
    (S.RUNNING, R.MIGRATE): S.MIGRATING,
    **{(s, R.HAND_OVER): S.HANDED_OVER for s in (S.ATTACHING, S.RUNNING, S.PAUSED, S.SUSPENDED, S.EVICTED,
                                                 S.FAULTED)},
    (S.HANDED_OVER, R.HAND_OVER): S.HANDED_OVER,
    **{(s, R.EVICT): S.EVICTED for s in (S.RUNNING, S.PAUSED, S.SUSPENDED, S.FAULTED)},
    (S.EVICTED, R.EVICT): S.EVICTED,
    **{(s, R.FAULT): S.FAULTED for s in (S.ATTACHING, S.RUNNING, S.PAUSED, S.SUSPENDED)},
    (S.EVICTED, R.FAULT): S.EVICTED,
    (S.FAULTED, R.FAULT): S.FAULTED,
    **{(s, R.CLOSE): S.CLOSING for s in LIVE - TRANSIENT},
    (S.CLOSING, R.CLOSE): S.CLOSING,
}
# Requests that a leaving job (its process gone) is refused, whatever its state.
NOT_WHEN_LEAVING = frozenset({R.PAUSE, R.UNPAUSE, R.SUSPEND, R.RESUME, R.MIGRATE, R.EVICT, R.START})


class Refused(Exception):
    """The request does not apply to the job where it is; str() says why, as a
    clause about the job ("it is suspended (resume it first)")."""

    def __init__(self, request: Request, state: JobState, why: str):
        super().__init__(why)
        self.request = request
        self.state = state


@dataclass(frozen=True)
class Change:
    """What a request does: from `before` to `after` (the same: nothing changes)."""

    request: Request
    before: JobState
    after: JobState

    @property
    def changed(self) -> bool:
        return self.after is not self.before


class Lifecycle:
    """The state of one job (its Session's), with one lock."""

    def __init__(self):
        self._cond = threading.Condition()
        self.state = JobState.ATTACHING
        self.failure: DeviceError | None = None     # every request fails with it (see the module's doc)
        self.evicted_reason: str | None = None
        self.suspension = None                      # the saved device state, while suspended (suspend.py)
        self.handed_over = False                    # another server serves its segment (it stays true)
        self.leaving = threading.Event()            # its process went, or the server stops
        self._resume_to = JobState.RUNNING          # where a resume leads: the state before the suspend
        self._before: JobState | None = None        # where a transient state began
        self._owner: threading.Thread | None = None   # the thread of the transient state
        self._fault_pending = False

    # ---- reading ---------------------------------------------------------------------

    @property
    def shown(self) -> str:
        """The state as `tally-server status` and /metrics name it: running, paused,
        suspended, evicted or faulted (a transient state shows where it began)."""
        state = self.state
        if state in TRANSIENT:
            state = self._before if state is not JobState.RESUMING else JobState.SUSPENDED
        if state is JobState.FAULTED or (self._fault_pending and state is not JobState.EVICTED):
            return "faulted"
        return {JobState.PAUSED: "paused", JobState.SUSPENDED: "suspended",
                JobState.EVICTED: "evicted"}.get(state, "running")

    @property
    def resumes_paused(self) -> bool:
        """A suspended (or suspending) job the operator had paused: a resume leaves it paused."""
        return self._resume_to is JobState.PAUSED

    def answer(self, request: Request) -> Change:
        """What `request` would do now, without doing it (Refused: why not)."""
        with self._cond:
            return self._check(request)

    # ---- requests that complete at once -------------------------------------------------

    @contextmanager
    def change(self, request: Request) -> Iterator[Change]:
        """Carry out a request whose work is short (pause, unpause, start, evict,
        hand over): waits while another thread's transient state lasts, checks
        (Refused), and yields the Change with the lock held, so its work and the new
        state are one step for every other thread; the state changes when the block
        ends without an exception."""
        with self._cond:
            self._settle()
            change = self._check(request)
            yield change
            self._enter(change.after)

    def evict(self, reason: str, failure: DeviceError) -> Change:
        """Mark the job evicted (see `change`; callers that must act in the same step
        use `change(Request.EVICT)` and `record_eviction`)."""
        with self.change(Request.EVICT) as change:
            if change.changed:
                self.record_eviction(reason, failure)
        return change

    def record_eviction(self, reason: str, failure: DeviceError) -> None:
        """Inside `change(Request.EVICT)`: why, and what every request fails with now."""
        self.evicted_reason = reason
        self.failure = failure
        self._fault_pending = False

    # ---- transient states ---------------------------------------------------------------

    def begin(self, request: Request) -> Change:
        """Enter the transient state of SUSPEND, RESUME or MIGRATE, owned by this thread
        until `finish`. A Change that does not change means there is nothing to do
        (suspended already); Refused: why not."""
        with self._cond:
            self._settle()
            change = self._check(request)
            if change.changed:
                self._before = change.before
                self._owner = threading.current_thread()
                if request is Request.SUSPEND:
                    self._resume_to = change.before
                self._enter(change.after)
            return change

    def finish(self, ok: bool, suspension=None) -> JobState:
        """End this thread's transient state: `ok` says the work was done (a suspend
        passes the saved state). Returns the state the job is in now."""
        with self._cond:
            state = self.state
            if state not in TRANSIENT or self._owner is not threading.current_thread():
                raise RuntimeError(f"finish() by a thread that began no transition (the job is {state.value})")
            if state is JobState.SUSPENDING:
                after = JobState.SUSPENDED if ok else self._before
                if ok:
                    self.suspension = suspension
            elif state is JobState.RESUMING:
                after = self._resume_to if ok else JobState.SUSPENDED
                if ok:
                    self.suspension = None
            else:
                after = JobState.HANDED_OVER if ok else JobState.RUNNING
            if self._fault_pending and after is not JobState.HANDED_OVER:
                after = JobState.FAULTED
            self._fault_pending = False
            self._owner = self._before = None
            self._enter(after)
            self._cond.notify_all()
            return after

    # ---- what never waits ---------------------------------------------------------------

    def leave(self) -> None:
        """The job's process went or the server stops (any thread, never waits)."""
        self.leaving.set()
        with self._cond:
            self._cond.notify_all()

    def fault(self, failure: DeviceError) -> bool:
        """A device fault ended the job's device state: every request fails with
        `failure` from now on. False when the job was evicted or gone already."""
        with self._cond:
            state = self.state
            if state in TRANSIENT:
                self.failure = failure
                self._fault_pending = True
                return True
            if state is JobState.EVICTED or state not in LIVE or state is JobState.HANDED_OVER:
                return False
            self.failure = failure
            self._enter(JobState.FAULTED)
            return True

    def break_context(self, failure: DeviceError) -> bool:
        """The job was told of an error after which its context is unusable: every
        later request fails with `failure`. False when one already does."""
        with self._cond:
            if self.failure is not None:
                return False
            self.failure = failure
            return True

    def take_suspension(self):
        """The saved state of a job that will never resume (evicted, faulted or
        closing), handed to the caller to discard; None when there is none."""
        with self._cond:
            if self.state in TRANSIENT:
                raise RuntimeError("take_suspension() during a transition")
            suspension, self.suspension = self.suspension, None
            return suspension

    # ---- closing ------------------------------------------------------------------------

    def begin_close(self) -> bool:
        """CLOSE: waits while another thread's transient state lasts. True for the
        first close, which releases everything and then calls `closed()`."""
        with self._cond:
            self.leaving.set()
            self._settle()
            if self.state in (JobState.CLOSING, JobState.CLOSED):
                return False
            self._enter(JobState.CLOSING)
            return True

    def closed(self) -> None:
        with self._cond:
            self._enter(JobState.CLOSED)
            self._cond.notify_all()

    def wait_closed(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.state is JobState.CLOSED, timeout)

    # ---- the rules ----------------------------------------------------------------------

    def _settle(self) -> None:
        """Under the lock: wait until no other thread's transient state lasts."""
        me = threading.current_thread()
        while self.state in TRANSIENT and self._owner is not me:
            self._cond.wait()

    def _enter(self, state: JobState) -> None:
        self.state = state
        if state is JobState.HANDED_OVER:
            self.handed_over = True

    def _check(self, request: Request) -> Change:
        state = self.state
        if self.leaving.is_set() and request in NOT_WHEN_LEAVING:
            raise Refused(request, state, "it is leaving (its process exited or the server stops)")
        after = ALLOWED.get((state, request))
        if after is None:
            raise Refused(request, state, self._why_not(request, state))
        if request is Request.MIGRATE and self.failure is not None:
            raise Refused(request, state, "its context is unusable after an error")
        return Change(request, state, after)

    def _why_not(self, request: Request, state: JobState) -> str:
        if state is JobState.EVICTED:
            return (f"it was evicted ({self.evicted_reason}); it holds nothing any more and its calls fail until "
                    f"it exits")
        if request is Request.MIGRATE and state is JobState.PAUSED:
            return "it is paused (resume it first: its queued work must finish before it moves)"
        if request is Request.MIGRATE and state is JobState.SUSPENDED:
            return "it is suspended (resume it first)"
        if request is Request.RESUME and state in (JobState.RUNNING, JobState.PAUSED):
            return "it is not suspended"
        if state is JobState.SUSPENDED:
            return "it is suspended (resume it first)"
        if state is JobState.FAULTED:
            return "a device fault ended its device state; its calls fail until it exits"
        if state is JobState.ATTACHING:
            return "it is still attaching; try again in a moment"
        if state in (JobState.HANDED_OVER, JobState.CLOSING, JobState.CLOSED):
            return "it left"
        return f"it is {state.value}"
