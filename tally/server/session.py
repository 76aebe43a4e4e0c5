"""One connected client: its shared segment, its request loop, what it owns.

A session thread drains the client's request ring, decodes each request into
its typed message and runs its handler (tally/server/dispatch.py: what a handler
returns decides the answer). Synchronous requests (tag != 0) always get exactly
one answer on the completion ring: their reply, Done, or an Error record.
Asynchronous requests (tag == 0) are never answered; when one fails, its error
is kept and returned by the client's next synchronizing call, as CUDA does with
its deferred errors. What the job creates lives in `self.client` (ClientState).

A failed device assert (CUDA_ERROR_ASSERT) leaves the job's context unusable, as
on a GPU: once the job has been told, every later driver request fails with it
(other jobs carry on). What the device wrote for the job's stderr with an error
(the assert's message) reaches the job once, right before the error.

An evicted job (tally/server/eviction.py) is told why by an Evicted record, and
every later request fails with CUDA_ERROR_DEVICE_UNAVAILABLE; the session thread
then drops its work and frees what it holds, and the session stays listed (state
"evicted") until the job's process goes.

A device fault on a backend whose errors are context-wide (a GPU) fails every job
(tally/server/device_faults.py): `fail_device` makes every later request fail with
the fault's explanation, and `drop_device_state` lets go of what the job had made
in the dead context without touching the device.

The loop itself is the data plane's (tally/server/data_plane.py): in C++ by
default, which handles launches and other requests the scheduler lets through
without entering Python, and hands everything else to `handle`, in order. A job
that migrated here starts it only at its first request, once the session has
marked the job's segment as served by this server (tally/server/handover.py).

Where the job is in its life (attaching, running, paused, suspended, evicted,
faulted, closing...) is its `life` (tally/server/lifecycle.py), the one place that
state changes; this module carries out what the transitions mean for the session
(its thread, its replies, its release).

Whatever way a client goes (Goodbye, socket EOF, SIGKILL, a corrupt ring),
`close()` runs exactly once and releases everything it owned: its ClientState
(device memory and driver objects), what was registered with `add_cleanup`, and
the shared segment.
"""
from __future__ import annotations

import collections
import logging
import select
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from tally import _core, protocol
from tally.cluster.memory_limits import JobMemory
from tally.protocol.errors import (
    CUDA_ERROR_ASSERT,
    CUDA_ERROR_DEVICE_UNAVAILABLE,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_UNKNOWN,
    DeviceError,
    ProtocolError,
)
from tally.protocol.messages_generated import (Done, Error, Evicted, Goodbye, HostFuncDone, KernelStderr, Notify,
                                               Ping)
from tally.server import handover
from tally.server.client.state import ClientState
from tally.server.data_plane import POLL_INTERVAL_S, make_data_plane
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.failures import FailureLog
from tally.server.handlers import HANDLERS
from tally.server.lifecycle import JobState, Lifecycle, Refused, Request
from tally.server.ports import JobServices
from tally.server.segments import reclaim_job_objects

log = logging.getLogger("tally.server")

DONE = Done()
STDERR_CHUNK = 16 << 10     # well under the completion ring's record limit
# Errors after which the job's context is unusable (a GPU's sticky errors; the emulator
# keeps its other faults to the failing launch).
STICKY_CODES = frozenset({CUDA_ERROR_ASSERT})
# What a job with an unusable context may still send: keep-alives, its goodbye, and the
# completion of host functions the device waits for.
ALLOWED_AFTER_STICKY = frozenset(m.KIND for m in (Ping, Notify, Goodbye, HostFuncDone))
# What every call of an evicted job fails with: cudart's cudaErrorDevicesUnavailable,
# "CUDA-capable device(s) is/are busy or unavailable", which frameworks print as such.
EVICTED_CODE = CUDA_ERROR_DEVICE_UNAVAILABLE
EVICTION_REASON_LIMIT = 1000       # bytes of the reason the job is told
CLOSE_WAIT_S = 30.0               # a second close() waits this long for the first to release everything


@dataclass
class SessionCounters:
    requests: int = 0
    sync_requests: int = 0
    errors: int = 0
    protocol_errors: int = 0
    by_kind: collections.Counter = field(default_factory=collections.Counter)


class SessionHost(Protocol):
    """What a session uses of the server that made it (TallyServer)."""

    config: Any                         # ServerConfig: its data plane
    data_plane_device: Any              # the backend's issuer for the C++ data plane (None: Python's)
    job_services: JobServices
    device_faults: Any                  # device_faults.DeviceFaults (None: errors stay with their job)

    def forget_session(self, session: Session) -> None: ...


class Session:
    """One job served: implements job.Job (for handlers) and job.ServedJob (for the
    subsystems that act on a whole job)."""

    def __init__(self, server: SessionHost, client_id: int, pid: int, priority: protocol.Priority,
                 program: str, segment, connection, memory: JobMemory):
        self._host = server
        self.services = server.job_services
        self.backend = self.services.backend
        self.client_id = client_id
        self.pid = pid
        self.priority = priority
        self.program = program
        self.segment = segment
        self.connection = connection          # the handshake socket; its EOF means the client is gone
        self._counters = SessionCounters()    # what Python handled (`counters` adds the data plane's)
        self.failures = FailureLog(client_id)
        self.current_request = ""              # the request the session thread is handling
        self.started_at = time.time()
        self.deferred_error: DeviceError | None = None
        self.life = Lifecycle()                # where the job is (tally/server/lifecycle.py)
        self.handling = False                  # the session thread is inside a handler
        self.close_reason: str | None = None
        self._cleanups: list[Callable[[], None]] = []
        self._reply_lock = threading.Lock()    # the completion ring has one producer at a time
        self._segment_closed = False           # under _reply_lock: later completions go nowhere
        self._closer: threading.Thread | None = None    # the thread of the first close()
        self._thread = threading.Thread(target=self._run, name=f"tally-client-{client_id}", daemon=True)
        self._arrived_by_migration = False     # its segment says CLAIMED until its first request
        self._release_lock = threading.Lock()  # one release of its device state at a time (evicted, closing)
        self._release_asked = threading.Event()   # evicted: the session thread frees what the job holds
        self._released = threading.Event()
        self.work_dropped_at_eviction: bool | None = None   # what its Evicted record said
        self._memory = memory
        self.data_plane = make_data_plane(self, server.config.data_plane, server.data_plane_device)
        self.hold = self.data_plane.make_hold()   # no request runs while it is held (a suspended job)
        # Taken off the request ring and not handled yet (a migration hands them over).
        self.pending_records: collections.deque = collections.deque()
        self.client = ClientState(self, memory)   # what the job creates through the driver API

    # ---- lifecycle (the rules: tally/server/lifecycle.py) ----------------------------

    def start(self, arrived_by_migration: bool = False) -> None:
        """Start serving the job (its thread); nothing starts once it is leaving.
        `arrived_by_migration`: its segment says CLAIMED until the first request."""
        try:
            with self.life.change(Request.START):
                self._arrived_by_migration = arrived_by_migration
                self._thread.start()
        except Refused:
            pass                 # it left during its handshake: request_close closes it

    def request_close(self, reason: str) -> None:
        """Ask the session to end (from any thread); the session thread cleans up."""
        if self.close_reason is None:
            self.close_reason = reason
        self.life.leave()
        self.data_plane.stop()
        self.hold.wake()
        if not self._thread.is_alive():
            self.close()

    def evict(self, reason: str) -> bool:
        """Tell the job it is evicted and have the session thread drop its work and
        free what it holds (wait_released). False when it was evicted already or is
        leaving anyway. A suspend, resume or migration under way finishes first.
        The record says whether the eviction dropped work the job had asked for: a
        job evicted after its work was done (a shutdown's drain found it idle) keeps
        its own exit status (tally-run)."""
        told = reason.encode(errors="replace")[:EVICTION_REASON_LIMIT]
        try:
            with self.life.change(Request.EVICT) as change:
                if not change.changed:
                    return False
                dropped = self.has_requests_waiting() or self.services.executor.client_has_work(self.client_id)
                self.work_dropped_at_eviction = dropped
                # The record first, then the flag: a client that sees the flag finds the record.
                record = Evicted(status=EVICTED_CODE, work_dropped=int(dropped), tail=told)
                self.push_completion(Evicted.KIND, 0, record.encode())
                with self._reply_lock:
                    if not self._segment_closed:
                        self.segment.mark_evicted()
                self.life.record_eviction(reason, DeviceError(EVICTED_CODE,
                                                              f"this job was evicted by tally-server: {reason}"))
                self.data_plane.disable_fast()       # every request to Python, which fails it
                self._release_asked.set()
                self.data_plane.poke()               # the session thread releases what the job holds
                if self.hold.held:             # a suspended job: its requests fail from now on, none waits
                    self.hold.release()
        except Refused:
            return False
        return True

    def wait_released(self, timeout: float) -> bool:
        """Whether the evicted job's work and memory were released within `timeout` s."""
        return self._released.wait(timeout)

    def release_if_evicted(self) -> None:
        """On the session thread, between requests: an evicted job's state goes now."""
        if self._release_asked.is_set() and not self._released.is_set():
            self._release_evicted()      # once: it sets _released

    def _release_evicted(self) -> None:
        """On the session thread: what the evicted job held goes now, not when its process exits."""
        try:
            with self._release_lock:
                self._discard_suspension()
                self.client.close()
        except Exception:       # close() runs again when the session ends; carry on
            log.exception("client %d: releasing the evicted job's state failed", self.client_id)
        finally:
            self._released.set()

    def _discard_suspension(self) -> None:
        """A suspended job that will never resume: its memory is saved on the host, not
        on the device, so only its saved bytes go."""
        suspension = self.life.take_suspension()
        if suspension is not None:
            suspension.discard(self)

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        """Run fn when the session closes (last added runs first)."""
        self._cleanups.append(fn)

    def close(self) -> None:
        """Release everything the session owned, once. A second caller waits for the
        first to finish: the server's exit, say, closes every session and then the
        backend, and must not do so while the job's own thread is still freeing its
        memory (nor leave that thread inside C++ when the interpreter ends, which
        aborts the process). A suspend, resume or migration under way finishes first."""
        if not self.life.begin_close():
            if threading.current_thread() not in (self._thread, self._closer) and \
                    not self.life.wait_closed(CLOSE_WAIT_S):
                log.warning("client %d: still closing after %.0f s; going on without it", self.client_id,
                            CLOSE_WAIT_S)
            return
        self._closer = threading.current_thread()
        try:
            self._release_everything()
        finally:
            self._released.set()
            self.life.closed()

    def _release_everything(self) -> None:
        self.data_plane.stop()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        with self._release_lock:
            self._discard_suspension()
        for fn in (self.client.close, *reversed(self._cleanups)):
            try:
                fn()
            except Exception:  # cleanup must go on: log and continue with the rest
                log.exception("client %d: cleanup step failed", self.client_id)
        with self._reply_lock:    # a reply still being pushed (a waiter of the gone client) finishes first
            self._segment_closed = True
            self.data_plane.close_replies()
            if not self.life.handed_over:    # migrated: the other server's segment now
                try:
                    self.segment.mark_closed()
                except Exception:
                    pass
                self.segment.unlink()
            self.segment.close()
            self.data_plane.close()     # and the C++ plane's hold on the mapping
        try:
            self.connection.close()
        except OSError:
            pass
        if self.close_reason in ("client process died", "client connection closed"):
            reclaim_job_objects(self.pid)
        self.failures.log_repeats()
        fast, counters = self.data_plane.counts()[0], self.counters
        log.info("client %d (pid %d, %s) disconnected: %s (%d requests, %d of them taken by the C++ data plane)",
                 self.client_id, self.pid, self.program, self.close_reason or "closed", counters.requests, fast)
        self._host.forget_session(self)

    def abandon(self, reason: str) -> None:
        """The server exits without waiting for this job's work on the device (its
        exit ends that work and frees its memory): the job's side learns that the
        segment is closed, and the segment's name goes. Nothing here waits."""
        if self.close_reason is None:
            self.close_reason = reason
        self.life.leave()
        with self._reply_lock:
            if not self._segment_closed:
                self._segment_closed = True
                self.data_plane.close_replies()
                try:
                    self.segment.mark_closed()
                    self.segment.unlink()
                except Exception:       # noqa: BLE001 - exiting anyway; the job sees the socket close
                    pass
        try:
            self.connection.close()
        except OSError:
            pass

    @property
    def download_arena(self):
        return self.segment.download

    @property
    def fast(self):
        return self.data_plane.fast

    @property
    def closed(self) -> bool:
        """Its release has begun (or is done)."""
        return self.life.state in (JobState.CLOSING, JobState.CLOSED)

    @property
    def closing(self) -> bool:
        """It is leaving: its process went, or the server stops."""
        return self.life.leaving.is_set()

    @property
    def closing_event(self) -> threading.Event:
        return self.life.leaving

    @property
    def counters(self) -> SessionCounters:
        """Requests handled so far, by Python and by the C++ data plane."""
        requests, sync_requests, by_kind = self.data_plane.counts()
        if not requests:
            return self._counters
        mine = self._counters
        merged = collections.Counter(mine.by_kind)
        for kind, n in by_kind.items():
            entry = HANDLERS.get(kind)
            merged[entry[0].__name__ if entry is not None else f"kind {kind}"] += n
        return SessionCounters(mine.requests + requests, mine.sync_requests + sync_requests, mine.errors,
                               mine.protocol_errors, merged)

    # ---- device faults (tally/server/device_faults.py) ------------------------------

    def fail_device(self, error: DeviceError) -> None:
        """A device fault ended the job's device state: every request from now on
        fails with `error` (a job's keep-alives and goodbye still pass). A suspended
        job's requests fail too instead of waiting for a resume that cannot come."""
        if self.life.fault(error):
            self.data_plane.disable_fast()     # returns once no fast operation is under way
            if self.hold.held and self.life.state is JobState.FAULTED:
                self.hold.release()

    def wait_quiet(self, timeout_s: float) -> bool:
        """Wait until no handler and no blocking request of the job is running
        (after fail_device none starts again); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.handling:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return self.client.blocking.wait_idle(max(0.0, deadline - time.monotonic()))

    def drop_device_state(self) -> None:
        """Let go of everything the job made on the device, which died with the
        context (the backend's releases do nothing then): its memory is no longer
        counted, its streams leave the executor. The job keeps its session, whose
        requests fail with the fault, until it leaves."""
        with self._release_lock:
            self._discard_suspension()
        old, self.client = self.client, ClientState(self, self._memory)
        old.close()

    def has_requests_waiting(self) -> bool:
        """Requests of the job not handled yet: in its ring, taken off it, in a handler,
        or in its blocking pool (a synchronization waiting for the device)."""
        return bool(self.segment.request_ring.used or self.pending_records or self.handling
                    or not self.client.blocking.idle())

    def gone(self) -> bool:
        """Whether the client has left (or is being let go), checked now: a job that
        has exited has a closed socket even if the selector has not noticed yet."""
        if self.life.leaving.is_set():
            return True
        # Polled first: during the handshake the socket still has a timeout, and
        # Python then waits for data up to it whatever MSG_DONTWAIT says.
        try:
            poller = select.poll()
            poller.register(self.connection, select.POLLIN)
            if not poller.poll(0):
                return False
            peeked = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except (OSError, ValueError):     # ValueError: closed already (fileno -1)
            return True
        return peeked == b""

    # ---- replies -----------------------------------------------------------------

    def reply(self, tag: int, message) -> None:
        self.push_completion(message.KIND, tag, message.encode())

    def answer(self, tag: int, result) -> None:
        """Answer a request by what its handler (or its blocking work) returned
        (tally/server/dispatch.py): a reply message, None for Done, or
        ANSWERS_ITSELF (answered elsewhere). Asynchronous requests (tag 0) get nothing."""
        if tag and result is not ANSWERS_ITSELF:
            self.reply(tag, DONE if result is None else result)

    def reply_error(self, tag: int, error: DeviceError) -> None:
        if error.stderr:
            data, error.stderr = error.stderr.encode(), ""     # once, even if the error is raised again
            for start in range(0, len(data), STDERR_CHUNK):
                chunk = data[start:start + STDERR_CHUNK]
                self.push_completion(KernelStderr.KIND, 0, KernelStderr(chunk).encode())
        if error.code in STICKY_CODES and self.life.break_context(
                DeviceError(error.code, f"the context is unusable after an earlier error: {error.message}")):
            self.data_plane.disable_fast()
        self.push_completion(Error.KIND, tag, Error(status=error.code, tail=error.message.encode()[:4000]).encode())

    def hand_over(self) -> None:
        """Another server serves the job's segment after all (a migration here that did
        not stand): this session sends nothing more on it and, closing, leaves it alone."""
        with self.life.change(Request.HAND_OVER):
            self.stop_replies()

    def stop_replies(self) -> None:
        """Nothing more is sent on the job's segment: another server serves it now (a
        migration's source calls this before it ends its MIGRATING state)."""
        with self._reply_lock:
            self._segment_closed = True
            self.data_plane.close_replies()

    def push_completion(self, kind: int, tag: int, payload: bytes) -> None:
        """Send a record to the client; once the session closed (the client is gone)
        it goes nowhere, silently: answers of requests that outlived their job."""
        with self._reply_lock:
            if self._segment_closed:
                return
            self.data_plane.push(kind, tag, payload)   # in turn with the C++ plane's own answers

    def take_upload(self, offset: int, nbytes: int) -> bytes:
        """A copy of an upload-arena chunk, which is released at once (chunks are
        released in the order the client named them, and it names them in order)."""
        arena = self.segment.upload
        if offset + nbytes > arena.capacity:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"upload chunk {offset}+{nbytes} lies outside the arena "
                                                        f"({arena.capacity} bytes)")
        try:
            return bytes(arena.view(offset, nbytes)) if nbytes else b""
        finally:
            try:
                arena.release(offset, nbytes)
            except _core.CorruptSegment as e:   # a chunk the client never reserved: its own arena's loss
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"upload chunk {offset}+{nbytes}: {e}") from None

    def take_deferred_error(self) -> DeviceError | None:
        err, self.deferred_error = self.deferred_error, None
        return err

    def defer_error(self, error: DeviceError) -> None:
        # The first error wins, as with CUDA's sticky errors.
        if self.deferred_error is None:
            self.deferred_error = error
        if self.data_plane.fast is not None:
            self.data_plane.fast.not_idle()

    # ---- request loop --------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self._arrived_by_migration and not handover.serve_from_first_request(self, POLL_INTERVAL_S):
                self.hand_over()        # not ours to serve after all: leave the segment alone
                reason = "its migration here did not stand (the segment names another server)"
                log.error("client %d: %s", self.client_id, reason)
            else:
                reason = self.data_plane.serve()
            if reason:
                self.request_close(reason)
        finally:
            self.close()
            self._released.set()

    def handle(self, kind: int, tag: int, payload: bytes) -> None:
        """Run one request through its Python handler (the data plane calls this for
        every request it does not take itself)."""
        counters = self._counters
        counters.requests += 1
        if tag:
            counters.sync_requests += 1
        entry = HANDLERS.get(kind)
        self.current_request = entry[0].__name__ if entry is not None else f"kind {kind}"
        self.handling = True          # before the check: a fault marked after it waits for this handler
        try:
            failure = self.life.failure
            if failure is not None and kind not in ALLOWED_AFTER_STICKY:
                counters.errors += 1
                self.fail(tag, self.current_request, failure)
                return
            self._dispatch(entry, kind, tag, payload)
        finally:
            self.handling = False

    def _dispatch(self, entry, kind: int, tag: int, payload: bytes) -> None:
        counters = self._counters
        try:
            if entry is None:
                raise ProtocolError(f"unknown message kind {kind}")
            message, fn = entry
            counters.by_kind[self.current_request] += 1
            result = fn(self, message.decode(payload), tag)
            if tag:
                self.answer(tag, result)
        except DeviceError as e:
            counters.errors += 1
            self.fail(tag, self.current_request, e)   # logged at INFO (memory refusals name their limit)
        except ProtocolError as e:
            counters.protocol_errors += 1
            log.warning("client %d sent a bad request: %s", self.client_id, e)
            self.fail(tag, self.current_request, DeviceError(CUDA_ERROR_INVALID_VALUE, f"bad request: {e}"))
        except Exception as e:  # a server bug must not take the client or the server down
            counters.errors += 1
            log.error("client %d: handler for kind %d crashed:\n%s", self.client_id, kind,
                      traceback.format_exc())
            self.fail(tag, self.current_request, DeviceError(CUDA_ERROR_UNKNOWN, f"tally-server internal error: {e}"))

    def fail(self, tag: int, request: str, error: DeviceError) -> None:
        """A request failed: a synchronous one gets the Error record now; an
        asynchronous one's error, saying which request it was, waits for the
        client's next synchronizing call (as CUDA's deferred errors do). Once the
        client is gone its requests' failures (e.g. a wait that outlived it) are
        nobody's concern and are not logged."""
        faults = self._host.device_faults
        if faults is not None:
            error = faults.seen(error, self)
        if not self.closed:
            self.failures.record(request, error)
        if tag:
            self.reply_error(tag, error)
        else:
            self.defer_error(self.failures.logged(
                DeviceError(error.code, f"an earlier asynchronous {request} failed: {error.message}")))
