"""Device faults on a backend whose errors are context-wide (a GPU): one job's
illegal address poisons the context every job runs in. The server notices, names
the job that caused it when it can, fails every job with that explanation,
recreates the context and goes on admitting jobs.

Noticing. Every error the backend raises passes through `seen`: those of a
client's stream (the executor's `device_errors`), those of a request (Session.fail)
and those of a watch thread that, every WATCH_PERIOD_S, checks the context and
queries the streams of kernels running since the last check. The thread is needed
on a GPU: once its context faulted the driver never calls the host functions that
tell the executor a kernel ended, so every waiting job would wait forever. A
sticky code (CONTEXT_FAULT_CODES) is a fault, unless it is the one being handled
or comes from a job that fault failed already.

Naming. The suspects are the jobs with kernels that no clean synchronization of
their stream has confirmed (StreamExecutor.suspects) when the fault is seen. On a
GPU the kernel that faulted never completes, so it is among them; so is every
kernel other jobs had running at that moment, and the GPU does not say which one
faulted: the message then names each suspect. (Where faults are reported per
stream, as through tally's own driver, the faulting job is the one whose stream
reported it, and it is the only suspect once the others synchronized.)

Recovering, on a thread of its own while admissions wait: the backend's context is
marked lost (no call reaches the dead context from then on), every job is failed
(its next driver call gets the sticky code and the explanation), the executor ends
all work without the device, each job's device state is let go of (its memory is
no longer counted, its streams leave the executor), the device layer's own
objects are dropped, and the backend makes a fresh context and checks it. If
that check fails, the device cannot be used again in this process (NVIDIA
documents these errors as needing a new process): the server refuses jobs with
that reason and stops, to be restarted by its supervisor.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Hashable, Protocol

from tally import protocol
from tally.protocol.errors import CONTEXT_FAULT_CODES, DeviceError
from tally.server.failures import error_name
from tally.server.job import ServedJob, SessionDirectory
from tally.server.ports import ExecutorPort

log = logging.getLogger("tally.server")

WATCH_PERIOD_S = 0.1
# How long the recovery waits for a job's request still being handled (they fail
# at once once the context is marked lost).
QUIET_TIMEOUT_S = 10.0


class DeviceFault(DeviceError):
    """The error every job gets after a device fault: the sticky code, and what
    happened in words."""


@dataclass
class FaultRecord:
    """What `tally-server status` shows of the last fault."""

    at: float                       # unix time it was seen
    code: int
    error: str                      # the code's name
    detail: str                     # the driver's (or the device's) own message
    caused_by: list[int]            # the suspects' client ids (one: the job that caused it)
    jobs_failed: list[int]
    state: str = "recovering"       # recovering | recovered | device lost
    recovery_s: float | None = None

    def to_json(self) -> dict:
        return asdict(self)


class FaultHost(SessionDirectory, Protocol):
    backend: Any
    executor: ExecutorPort
    counters: Any                      # ServerCounters: device_faults

    def admission_held(self) -> Any:
        """A context in which no job is admitted."""

    def renew_staging(self) -> None: ...
    def stop(self, exit_status: int = ..., abandon_device_work: bool = ...) -> None: ...


class DeviceFaults:
    def __init__(self, server: FaultHost):
        self._server = server
        self._lock = threading.Lock()
        self._current: DeviceFault | None = None    # the fault being handled
        self.last: FaultRecord | None = None
        self.device_lost: str | None = None         # why no job can be admitted any more
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None

    # ---- noticing --------------------------------------------------------------------

    def seen(self, error: DeviceError, reporter) -> DeviceError:
        """An error the backend raised, for `reporter` (a Session, a client id, or
        None): the error the caller should keep and pass on. A new fault starts the
        recovery and is answered with its explanation."""
        if error.code not in CONTEXT_FAULT_CODES or isinstance(error, DeviceFault):
            return error
        session = self._session_of(reporter)
        if session is not None and isinstance(session.life.failure, DeviceFault):
            return session.life.failure            # a late error of a job the fault failed already
        suspects = self._server.executor.suspects()  # before our lock: callers may hold the executor's
        with self._lock:
            if self._current is not None:
                return self._current
            fault = self._current = DeviceFault(error.code, self._explain(error, suspects))
            self.last = FaultRecord(at=round(time.time(), 3), code=error.code, error=error_name(error.code),
                                    detail=error.message, caused_by=sorted(suspects), jobs_failed=[])
        self._server.counters.device_faults += 1
        threading.Thread(target=self._recover, args=(fault, error), name="tally-device-fault", daemon=True).start()
        return fault

    def start_watch(self) -> None:
        def watch() -> None:
            backend, executor = self._server.backend, self._server.executor
            while not self._stop.wait(WATCH_PERIOD_S):
                if self._current is not None or self.device_lost is not None:
                    continue
                try:
                    executor.check_running(executor.clock.now() - WATCH_PERIOD_S)
                    backend.check_context()
                except DeviceError as e:
                    self.seen(e, None)
                except Exception:  # noqa: BLE001 - the watch must outlive a surprise
                    log.exception("checking the device context failed")

        self._watch = threading.Thread(target=watch, name="tally-device-watch", daemon=True)
        self._watch.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join(timeout=5)

    # ---- recovering ------------------------------------------------------------------

    def _recover(self, fault: DeviceFault, cause: DeviceError) -> None:
        try:
            self._recover_now(fault, cause)
        except Exception as e:  # noqa: BLE001 - a half-recovered device must not take jobs
            log.exception("recovering from the device fault failed")
            self._device_lost(self.last, DeviceError(fault.code, f"the recovery failed: {e}"))

    def _recover_now(self, fault: DeviceFault, cause: DeviceError) -> None:
        server, record = self._server, self.last
        started = time.monotonic()
        server.backend.context_lost(fault)
        with server.admission_held():
            sessions = server.live_sessions()
            record.jobs_failed = sorted(s.client_id for s in sessions)
            log.error("%s [the driver said: %s]. Failing every job (%s) and recreating the device context",
                      fault.message, cause.message, _ids(record.jobs_failed))
            for session in sessions:
                session.fail_device(fault)
            server.executor.abandon(fault)
            for session in sessions:
                if not session.wait_quiet(QUIET_TIMEOUT_S):
                    log.warning("client %d: a request still runs %.0f s after the device fault; going on",
                                session.client_id, QUIET_TIMEOUT_S)
            for session in sessions:
                if not session.closed:
                    session.drop_device_state()
            server.executor.forget_device()
            server.renew_staging()
            try:
                server.backend.reset_context()
            except DeviceError as e:
                self._device_lost(record, e)
                return
            record.state, record.recovery_s = "recovered", round(time.monotonic() - started, 3)
            with self._lock:
                self._current = None
        log.warning("device context recreated %.3f s after the fault; admitting jobs again", record.recovery_s)

    def _device_lost(self, record: FaultRecord, error: DeviceError) -> None:
        record.state = "device lost"
        self.device_lost = (f"tally-server could not recover its GPU after a device fault ({error.message}); "
                            f"NVIDIA documents such faults as needing a new process: restart tally-server")
        log.critical("%s. Stopping.", self.device_lost)
        self._server.stop(exit_status=1)

    # ---- words -----------------------------------------------------------------------

    def _explain(self, error: DeviceError, suspects: list[Hashable]) -> str:
        who = [self._describe(c) for c in sorted(suspects)]
        if len(who) == 1:
            cause = f"a kernel of {who[0]}"
        elif who:
            cause = (f"a kernel of one of {', '.join(who)} (each had kernels that no synchronization had "
                     f"found done yet, and a GPU does not say whose kernel faulted)")
        else:
            cause = "a kernel of a job tally could not tell"
        return (f"device fault: {cause} failed with {error_name(error.code)}, which poisons the device context "
                f"tally-server runs every job in; the server recreates the context, and every job's device memory, "
                f"modules, streams and events, this job's included, are lost: run the job again")

    def _describe(self, client_id: Hashable) -> str:
        session = self._session_of(client_id)
        if session is None:
            return f"client {client_id}"
        return (f"client {client_id} (pid {session.pid}, {session.program}, "
                f"{protocol.priority_name(session.priority)})")

    def _session_of(self, reporter) -> ServedJob | None:
        if reporter is None or hasattr(reporter, "life"):
            return reporter
        return self._server.session_of(reporter)


def _ids(client_ids: list[int]) -> str:
    return ", ".join(f"client {c}" for c in client_ids) or "none attached"
