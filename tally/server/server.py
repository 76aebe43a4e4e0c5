"""tally-server's front door: the unix socket, handshakes, and the session table.

One thread runs a selector over the listening socket and every client's
handshake socket. A connection's first record decides what it is: Hello (a job
attaching: handshake on a short-lived thread (attach.py), then a Session with its own
thread), StatusRequest (`tally-server status`) or an operator's control request
(`tally-server set/pause/resume`: tally/server/control.py). After the handshake a job's
socket carries nothing; its EOF is how the server learns that the job is gone,
however it died (the kernel closes the socket of a SIGKILLed process).
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import selectors
import socket
import stat
import threading
import time
from pathlib import Path

import msgpack

from tally import protocol
from tally.protocol.framing import recv_record, send_record
from tally.cluster.high_priority_jobs import HighPriorityJobs
from tally.cluster.memory_limits import MemoryLimits, MemoryPolicy
from tally.protocol.messages_generated import (ControlReply, DriverVersionQuery, DriverVersionReply, Hello,
                                               MigrateOffer, StatusReply, StatusRequest)
from tally.scheduler.hooks import Hooks
from tally.scheduler.pinned_pool import PinnedPool
from tally.server import control, migration_import
from tally.server.attach import JobAttachment
from tally.server.counters import ServerCounters
from tally.server.data_plane import DATA_PLANES
from tally.server.device_health import DeviceHealth, default_health_config
from tally.server.drain import Drain
from tally.server.device_faults import DeviceFaults
from tally.server.c_allocator import release_free_memory
from tally.server.ipc_registry import IpcRegistry
from tally.server.levers import SmLevers
from tally.server.log_once import OncePerCause
from tally.server.segments import reclaim_stale
from tally.server.server_config import ServerConfig
from tally.server.session import Session
from tally.server.status import ServerStatus, server_status
from tally.server.migration import MigrationRecord
from tally.server.oversubscribe import TimeSlicer
from tally.server.ports import JobServices
from tally.server.saved_memory import SavedMemoryStore
from tally.server.suspend import MobilityRecord
from tally.units import format_bytes

log = logging.getLogger("tally.server")

class ServerError(Exception):
    """The server cannot start (socket in use, bad path...)."""


class TallyServer(JobAttachment):
    def __init__(self, config: ServerConfig, backend):
        self.config = config
        self.backend = backend
        self.description = backend.describe()
        self._retire_lock = threading.Lock()
        self._retired: set[int] = set()
        # Flags are checked against the device before anything starts (ValueError says which).
        self.memory_limits = MemoryLimits(MemoryPolicy.from_flags(
            self.description.total_memory, backend.mem_info()[0], config.be_memory_quota, config.hp_memory_reserve))
        self.high_priority_jobs = HighPriorityJobs(config.max_hp_jobs, self._attached_high_priority)
        self.variants, clock = make_variant_provider(backend)
        self.started_at = time.time()
        self.counters = ServerCounters()   # evictions, device faults...: incremented where they happen
        self.sessions: dict[int, Session] = {}     # before the first device sample (SysProbe may act on it)
        self._sessions_lock = threading.Lock()
        self.health: DeviceHealth | None = None
        self.hooks = make_hooks(self)
        self.levers = SmLevers(config, self.hooks)
        self.executor = make_executor(config, backend, self.description, self.variants, clock, self.hooks)
        self.levers.start(self.executor, backend,
                          self.health.probe.config.timing.sample_interval_s if self.health else None)
        if config.data_plane not in DATA_PLANES:
            raise ServerError(f"unknown data plane {config.data_plane!r}; choose one of {', '.join(DATA_PLANES)}")
        # How the C++ data plane issues work on this device (None: the backend has no way;
        # then its loop still runs in C++, and every driver request goes to Python).
        self.data_plane_device = backend.data_plane() if config.data_plane == "cpp" else None
        # Where one job's fault poisons every job's context (a GPU), the server recovers from it.
        self.device_faults = DeviceFaults(self) if backend.traits.errors_are_context_wide else None
        if self.device_faults is not None:
            self.executor.device_errors = self.device_faults.seen
        self.ipc = IpcRegistry()          # allocations and events jobs exported to each other
        self.mobility = MobilityRecord()  # suspensions and resumes (tally/server/suspend.py)
        self.saved_memory = SavedMemoryStore(config.saved_memory)   # their saved bytes
        self.migrations = MigrationRecord()   # jobs moved to other servers (tally/server/migration.py)
        self.time_slicer = TimeSlicer(self, config.slice_seconds) if config.oversubscribe else None
        self.staging = PinnedPool(backend)   # registered buffers for copies into pageable memory
        # What every job's requests use of the server (tally/server/ports.py).
        self.job_services = JobServices(backend=backend, executor=self.executor, description=self.description,
                                        ipc=self.ipc, variants=self.variants, memory_waits=self.time_slicer,
                                        staging=lambda: self.staging, retire_client=self.retire_client)
        # A session can end (its job died at once) before the handshake thread
        # registers its socket: registering and forgetting take turns, and a closed
        # session is never registered.
        self._registration_lock = threading.Lock()
        # Held while a handshake admits its session (and by shutdown to stop admitting),
        # so no session can start after shutdown has closed the others.
        self._admit_lock = threading.Lock()
        self._admitting = True
        self.drain = Drain(self, config.drain_timeout_s)   # SIGTERM/SIGINT
        self.abandoned = False
        self._client_ids = itertools.count(1)
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._listener: socket.socket | None = None
        self.dropped_connections = OncePerCause(log, "dropped a connection during its handshake")
        self.exit_status = 0               # what tally-server exits with once serve_forever returns
        if self.time_slicer is not None:
            self.time_slicer.start()

    # ---- socket ----------------------------------------------------------------

    def bind(self) -> None:
        path = self.config.socket_path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise ServerError(f"{path} exists and is not a socket; choose another --socket")
            if _socket_answers(path):
                raise ServerError(f"another tally-server is already listening on {path}")
            path.unlink()  # stale socket of a server that died
        reclaim_stale()    # shared memory of servers and jobs that died
        # The socket appears at `path` only once it accepts connections: bound and listening
        # under a temporary name first, then renamed (a job that sees the file and connects
        # between bind and listen would be refused; seen in tests on a loaded machine).
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        staging = path.parent / f".t{os.getpid()}"
        try:
            staging.unlink(missing_ok=True)
            listener.bind(str(staging))
            os.chmod(staging, 0o600)
            listener.listen(128)
            os.replace(staging, path)
        except BaseException:
            listener.close()
            staging.unlink(missing_ok=True)
            raise
        listener.setblocking(False)
        self._listener = listener
        self._selector.register(listener, selectors.EVENT_READ, ("listener", None))
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("wake", None))

    def serve_forever(self) -> None:
        if self._listener is None:
            self.bind()
        if self.device_faults is not None:
            self.device_faults.start_watch()
        try:
            while not self._stop.is_set():
                for key, _ in self._selector.select(timeout=1.0):
                    what, obj = key.data
                    if what == "listener":
                        self._accept()
                    elif what == "client":
                        self._client_socket_readable(key.fileobj, obj)
                    elif what == "wake":
                        self._wake_r.recv(64)
        finally:
            self._shutdown_now()

    def stop(self, exit_status: int = 0, abandon_device_work: bool = False) -> None:
        """Ask serve_forever to return (safe from signal handlers and other threads).
        `abandon_device_work`: do not wait for work still on the device (the drain's
        deadline passed); the caller then ends the process, which ends that work and
        frees its memory (`abandoned` says so)."""
        self.exit_status = exit_status or self.exit_status
        self.abandoned = abandon_device_work
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    @property
    def admitting(self) -> bool:
        return self._admitting

    def stop_admitting(self) -> None:
        """Refuse every handshake from now on (a drain, a shutdown)."""
        with self._admit_lock:
            self._admitting = False

    def _shutdown_now(self) -> None:
        self.stop_admitting()
        with self._sessions_lock:
            sessions = list(self.sessions.values())
        if self.device_faults is not None:
            self.device_faults.stop()
        if self.time_slicer is not None:
            self.time_slicer.stop()
        if self.abandoned:
            for session in sessions:
                session.abandon("server shutting down")
            self._close_listener()
            log.warning("exiting without waiting for the work still on the device: the process's exit ends it "
                        "and frees its memory")
            return
        for session in sessions:
            session.request_close("server shutting down")
            session.close()
        if sessions:
            free, total = self.backend.mem_info()
            log.info("released every job: %s of device memory in use, %d job(s) listed", format_bytes(total - free),
                     len(self.sessions))
        self._close_listener()
        try:
            self.levers.stop()
            self.executor.close()
            self.staging.close()
            self.backend.close()
        except Exception:
            log.exception("closing the executor/backend failed")

    def _close_listener(self) -> None:
        if self._listener is not None:
            try:
                self._selector.unregister(self._listener)
            except (KeyError, ValueError):
                pass
            self._listener.close()
            self._listener = None
            try:
                self.config.socket_path.unlink()
            except FileNotFoundError:
                pass

    # ---- connections ---------------------------------------------------------------

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except BlockingIOError:
            return
        threading.Thread(target=self._first_record, args=(conn,), daemon=True,
                         name="tally-handshake").start()

    def _first_record(self, conn: socket.socket) -> None:
        conn.settimeout(self.config.handshake_timeout_s)
        try:
            kind, tag, payload = recv_record(conn)
            if kind == Hello.KIND:
                self._handshake(conn, payload)
            elif kind == StatusRequest.KIND:
                send_record(conn, StatusReply.KIND, StatusReply(msgpack.packb(self.status().to_json())).encode(), tag)
                conn.close()
            elif kind == DriverVersionQuery.KIND:
                reply = DriverVersionReply(driver_version=self.description.driver_version)
                send_record(conn, DriverVersionReply.KIND, reply.encode(), tag)
                conn.close()
            elif kind in control.REQUESTS:
                send_record(conn, ControlReply.KIND, control.answer(self, kind, payload).encode(), tag)
                conn.close()
            elif kind == MigrateOffer.KIND:
                migration_import.receive(self, conn, payload)
            else:
                raise protocol.ProtocolError(f"first record has kind {kind}; expected Hello, StatusRequest, "
                                             f"DriverVersionQuery or a control request")
        except (OSError, ConnectionError, protocol.ProtocolError) as e:
            # Idle probes and dropped connections come in crowds (a port scan, a
            # crash loop): the first of each cause is a warning, the rest are counted.
            self.dropped_connections.note(_drop_cause(e), str(e))
            conn.close()
        except Exception:
            # A bug answering one connection must not leave its peer waiting, nor end
            # the server: say so, hang up, carry on.
            log.exception("tally-server failed answering a connection's first record")
            conn.close()

    @contextlib.contextmanager
    def admission_held(self):
        """No job is admitted while this is held (a device fault's recovery)."""
        with self._admit_lock:
            yield

    def live_sessions(self) -> list[Session]:
        """Every session not closed yet, attached or leaving."""
        with self._sessions_lock:
            return [s for s in self.sessions.values() if not s.closed]

    def renew_staging(self) -> None:
        """After a device fault: registered buffers of the dead context are replaced."""
        old, self.staging = self.staging, PinnedPool(self.backend)
        old.close()

    def session_of(self, client_id: int) -> Session | None:
        with self._sessions_lock:
            return self.sessions.get(client_id)

    def attached_sessions(self) -> list[Session]:
        """The sessions of jobs attached now (not those whose release is under way)."""
        with self._sessions_lock:
            sessions = list(self.sessions.values())
        return [s for s in sessions if not s.gone()]

    def _client_socket_readable(self, conn: socket.socket, session: Session) -> None:
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._unregister(conn)
            session.request_close("client connection closed")

    def _unregister(self, conn: socket.socket) -> None:
        try:
            self._selector.unregister(conn)
        except (KeyError, ValueError):
            pass

    def retire_client(self, client_id: int) -> None:
        """Take a departing client out of the executor: its queued work is dropped,
        its running work finished or preempted (idempotent: a session's driver state
        does it before freeing modules, the session's own cleanup after)."""
        with self._retire_lock:
            if client_id in self._retired:
                return
            self._retired.add(client_id)
        self.levers.client_removed(client_id)
        self.executor.remove_client(client_id)

    def _watch_connection(self, conn: socket.socket, session: Session) -> None:
        """Have the selector notice when the job's end of `conn` closes."""
        with self._registration_lock:
            if session.closed:
                return
            try:
                self._selector.register(conn, selectors.EVENT_READ, ("client", session))
            except ValueError:
                pass  # the job is gone already: its session closed this socket (and forgets it)

    def forget_session(self, session: Session) -> None:
        """Called by Session.close()."""
        with self._registration_lock:
            self._unregister(session.connection)
        with self._sessions_lock:
            self.sessions.pop(session.client_id, None)
        with self._retire_lock:
            self._retired.discard(session.client_id)
        # The job's threads and buffers are gone: return the pages they freed in the
        # C allocator's arenas, or each arena keeps its high-water mark resident.
        release_free_memory()

    # ---- status --------------------------------------------------------------------

    def status(self) -> ServerStatus:
        with self._sessions_lock:
            everyone = list(self.sessions.values())
        attached = [s for s in everyone if not s.gone()]
        return server_status(self, attached, leaving=len(everyone) - len(attached))


def make_variant_provider(backend):
    """Where the executor gets sliced/PTB kernels (the backend says), and the clock
    it schedules by: the backend's own where it keeps virtual time (the sim), else
    the wall clock (None)."""
    return backend.variant_provider(), backend.clock if backend.traits.virtual_clock else None


def make_hooks(server: TallyServer) -> Hooks:
    """The cluster plugins the server's flags ask for, registered explicitly."""
    hooks = Hooks()
    # memory protection and the high-priority job count (admin14)
    hooks.register(server.memory_limits)
    hooks.register(server.high_priority_jobs)
    # SysProbe: device health, its admissions and evictions (evict15)
    config = server.config
    if config.health:
        server.health = DeviceHealth(server, config.health_config or
                                     default_health_config(server.backend.traits.nvml_metrics),
                                     config.health_config_path)
        hooks.register(server.health)
    return hooks


def make_executor(config: ServerConfig, backend, description, variants, clock, hooks=None):
    """The stream executor every client's stream-ordered work goes through."""
    from tally.scheduler.executor import StreamExecutor
    from tally.scheduler.policies import make_policy
    from tally.scheduler.profile_cache import ProfileCache, default_cache_directory
    from tally.scheduler.profiler import TransparentProfiler

    profiler = TransparentProfiler(description.sm_count, config.turnaround_threshold_ms,
                                   cache=ProfileCache(default_cache_directory(), description.name))
    return StreamExecutor(backend, make_policy(config.policy), variants=variants, profiler=profiler,
                          clock=clock, be_transform=config.be_transform, hooks=hooks,
                          graph_units=config.graph_replay == "units")


def _drop_cause(e: Exception) -> str:
    if isinstance(e, socket.timeout):
        return "sent nothing in time"
    if isinstance(e, protocol.ProtocolError):
        return "malformed first record"
    return "connection lost"


def _socket_answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()
