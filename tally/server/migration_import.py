"""The target's side of a migration (the source's: tally/server/migration.py).

One connection on the server's socket carries it: an offer (refused up front
when this server cannot take the job: its backend cannot restore at addresses,
its device cannot run the job's cubin-only modules, it has too little free
memory, or its admission rules say no), the job's state piece by piece
(restored at once: allocations at their addresses, modules with their globals
at theirs and their kernels under the ids the job holds, virtual, pinned and
managed memory as tally/server/migration_memory.py says, the job's pinned and
managed shared-memory objects arriving as descriptors with their pieces), then
the job's handshake socket (SCM_RIGHTS) and the commit: the job's segment is
adopted, a session is made on it with the requests the source had taken off
the ring and not handled, and, last, the job is claimed in the segment's owner
word (tally/server/handover.py). The claim fails when the source kept the job
meanwhile (our answer to an earlier step came too late, or its wait for this
one ended); then, as when anything else fails or the source goes away before
it, everything made here is undone, so a migration that did not happen leaves
nothing behind on this server. After it, the job is this server's: its session
marks the word SERVING at the job's first request here and goes on.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import Any, Protocol

import msgpack

from tally import _core, protocol
from tally.cluster.memory_limits import QuotaBelowUse
from tally.protocol.errors import DeviceError
from tally.protocol.framing import recv_record, send_record
from tally.protocol.messages_generated import ControlReply, MigrateCommit, MigrateOffer, MigrateState
from tally.protocol.spec import PER_THREAD_STREAM_BIT
from tally.scheduler.hooks import AdmissionRequest
from tally.server import handover, lz4_chunks
from tally.server.client.graphs import parse_graph
from tally.server.client.memory import Allocations
from tally.server.client.modules import ModuleRegistry
from tally.server.job import ServedJob
from tally.server.migration_bytes import PayloadReceiver
from tally.server.migration_memory import ImportedMemory
from tally.server.step_clock import StepClock
from tally.units import format_bytes

log = logging.getLogger("tally.server")

# How long the source may take between two records of a migration.
TRANSFER_TIMEOUT_S = 120.0
MAX_FDS_PER_PIECE = 1


class ImportRefused(Exception):
    """This server will not take the job; the message says why."""


class ImportHost(Protocol):
    """What a server taking a job over uses of itself."""

    backend: Any
    config: Any                        # ServerConfig: how long a session thread spins
    description: Any
    hooks: Any                         # the cluster plugins: the job is admitted as at a handshake
    memory_limits: Any
    migrations: Any                    # MigrationRecord: the last import's steps
    saved_memory: Any
    variants: Any

    def attach_migrated(self, conn: socket.socket, segment: Any, pid: int, priority: protocol.Priority,
                        program: str, memory: Any, sm_percent: float | None, setup: Any) -> ServedJob: ...


def receive(server: ImportHost, conn: socket.socket, payload: bytes) -> None:
    """Serve one migration connection whose first record (the offer) was read."""
    conn.settimeout(TRANSFER_TIMEOUT_S)
    job = None
    fds: list[int] = []          # received and not handed to a session: closed at the end
    try:
        try:
            job = JobImport(server, msgpack.unpackb(MigrateOffer.decode(payload).tail))
        except (ImportRefused, ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
            _reply(conn, False, str(e))
            log.warning("refused a migrating job: %s", e)
            return
        _reply(conn, True, "accepted")
        failure = None
        while True:
            kind, _tag, record = recv_record(conn)
            if kind == MigrateState.KIND:
                piece = msgpack.unpackb(MigrateState.decode(record).tail)
                if not isinstance(piece, dict):
                    raise protocol.ProtocolError("a piece of migration state is not a map")
                piece = job.payloads.attach(conn, piece)
                if piece.get("op") == "handover":
                    _msg, fds, _flags, _addr = socket.recv_fds(conn, 1, 2)
                    continue
                # A shared-memory object of the job comes with its piece (migration_memory.py).
                count = piece.get("fds", 0)
                if type(count) is not int or not 0 <= count <= MAX_FDS_PER_PIECE:
                    raise protocol.ProtocolError(f"a piece of migration state names {count!r} descriptors")
                objects = socket.recv_fds(conn, 1, count)[1] if count else []
                try:
                    if failure is None:
                        job.apply(piece, objects)
                except (DeviceError, ImportRefused, KeyError, TypeError, ValueError, OSError) as e:
                    failure = f"restoring its state failed: {e}"
                finally:
                    for fd in objects:      # what apply did not take
                        os.close(fd)
                continue
            if kind != MigrateCommit.KIND:
                raise protocol.ProtocolError(f"unexpected record kind {kind} in a migration")
            if failure is None and len(fds) != 2:
                failure = "its handshake socket and segment did not come with the commit"
            if failure is None:
                try:
                    session = job.commit(fds[0], fds[1], msgpack.unpackb(MigrateCommit.decode(record).tail))
                    fds = fds[1:]          # the socket is the session's now; the segment's fd is closed below
                except (ImportRefused, DeviceError, _core.TransportError, OSError) as e:
                    failure = f"taking the job over failed: {e}"
            if failure is not None:
                _reply(conn, False, failure)
                log.warning("a migrating job was not taken: %s", failure)
                return
            job = None
            _reply(conn, True, f"client {session.client_id}")
            return
    except (OSError, ConnectionError, protocol.ProtocolError, msgpack.UnpackException) as e:
        log.warning("a migration from another server broke off (%s); nothing of it is kept", e)
    finally:
        for fd in fds:
            os.close(fd)
        if job is not None:
            job.undo()
        conn.close()


def _reply(conn, ok: bool, text: str) -> None:
    send_record(conn, ControlReply.KIND, ControlReply(ok=int(ok), tail=text.encode()).encode())


class JobImport:
    """A migrating job's state as it arrives; undone unless committed."""

    def __init__(self, server: ImportHost, offer: dict):
        self.server = server
        backend = self.backend = server.backend
        if not backend.traits.migrates_jobs:
            raise ImportRefused(f"this server's {backend.kind} backend cannot restore a job at its addresses")
        cc = tuple(server.description.compute_capability)
        if offer["cubin_only"] and tuple(offer["compute_capability"]) != cc:
            raise ImportRefused(f"the job has modules with cubins only, for compute capability "
                                f"{'.'.join(map(str, offer['compute_capability']))}; this device is {cc[0]}.{cc[1]}")
        free = backend.mem_info()[0]
        if offer["footprint"] > free:
            raise ImportRefused(f"the job needs {format_bytes(offer['footprint'])} of device memory and this server "
                                f"has {format_bytes(free)} free")
        self.priority = protocol.Priority(offer["priority"])
        self.program, self.pid = offer["program"], offer["pid"]
        self.sm_percent = offer["sm_percent"]
        high = self.priority == protocol.Priority.HIGH
        verdict = server.hooks.admit_client(AdmissionRequest(
            pid=self.pid, program=self.program, high_priority=high, memory_quota_bytes=offer["asked_quota"],
            sm_percent=self.sm_percent))
        if not verdict.allowed:
            raise ImportRefused(verdict.reason)
        self.memory = server.memory_limits.account(high, offer["asked_quota"])
        self.quota = offer["quota"]
        limit = self.quota if self.quota is not None else self.memory.quota_bytes
        if limit is not None and offer["footprint"] > limit:
            raise ImportRefused(f"the job holds {format_bytes(offer['footprint'])} of device memory, more than the "
                                f"{format_bytes(limit)} quota it would have here")
        self.allocations = Allocations(self.memory)
        self.modules = ModuleRegistry(backend, None if high else server.variants)
        self.streams: list = []
        self.events: list = []
        self.graphs: list = []             # [id, node count, edge count, GraphDefine tail]
        self.state: dict = {}
        self._undo = contextlib.ExitStack()
        self._undo.callback(self._forget_all)
        self._stream = backend.stream_create()
        self._undo.callback(backend.stream_destroy, self._stream)
        # Its virtual, pinned and managed memory; undone before its allocations are freed.
        self.memory_beyond = ImportedMemory(backend, self.allocations, server.description.total_memory, self.pid)
        self._undo.callback(self.memory_beyond.undo)
        self._copy_failed: DeviceError | None = None
        self.clock = StepClock()           # where the import's time goes (the log, status)
        self.payloads = PayloadReceiver(self._sync, server.saved_memory)
        self._undo.callback(self._payloads_done)   # copies under way end before any memory is undone

    def apply(self, piece: dict, fds: list[int]) -> None:
        self.clock.step("receive")       # waiting for the piece (and reading a chunk's payload)
        try:
            self._apply(piece, fds)
        finally:
            self.clock.step(str(piece.get("op")))

    def _apply(self, piece: dict, fds: list[int]) -> None:
        op, backend = piece["op"], self.backend
        if op in ImportedMemory.OPS:
            self.memory_beyond.apply(piece, fds)
        elif op == "alloc":
            ptr, size = piece["ptr"], piece["size"]
            with self.allocations.charging(size):
                backend.mem_alloc_at(ptr, size)
            self.allocations.add(ptr, size)
        elif op == "bytes":
            # Not waited for here: the copy runs while the next chunk arrives (PayloadReceiver).
            data = lz4_chunks.decompress(piece["data"]) if piece["lz4"] else piece["data"]
            backend.memcpy_htod_async(piece["ptr"], memoryview(data), self._stream)
        elif op == "module":
            self.modules.load_at(piece["id"], piece["image"], piece["globals"], piece["functions"],
                                 {n: tuple(v) for n, v in piece["resolved"].items()},
                                 piece.get("jit_record", b""))
        elif op == "streams":
            self.streams = piece["list"]
        elif op == "events":
            self.events = piece["list"]
        elif op == "graphs":
            self.graphs = piece["list"]
        elif op == "session":
            self.state = piece
        else:
            raise ImportRefused(f"unknown piece of state {op!r}")

    def _sync(self) -> None:
        """Wait for the chunks' copies so far; a failed one fails the commit."""
        try:
            self.backend.stream_synchronize(self._stream)
        except DeviceError as e:
            self._copy_failed = self._copy_failed or e

    def _payloads_done(self) -> None:
        self._sync()                     # no copy out of a payload buffer runs any more
        self.payloads.close()

    def _forget_all(self) -> None:
        self.modules.clear()
        for ptr, _size in self.allocations.clear():
            try:
                self.backend.mem_free(ptr)
            except DeviceError as e:
                log.warning("freeing 0x%x of a migration that did not happen failed: %s", ptr, e)

    def undo(self) -> None:
        self._undo.close()

    def commit(self, socket_fd: int, segment_fd: int, commit: dict):
        """Take the job over: its session runs here from now on (the source forgets it).
        The session owns `socket_fd` once this returns; `segment_fd` stays the caller's."""
        server = self.server
        self.clock.step("receive")
        self._sync()                     # every byte is on the device before the job runs here
        self.clock.step("bytes")
        if self._copy_failed is not None:
            raise self._copy_failed
        self.payloads.close()
        segment = _core.Segment.adopt(segment_fd, commit["segment"], spin_us=server.config.session_spin_us(
            self.backend.traits, self.priority == protocol.Priority.HIGH))
        conn = socket.socket(fileno=os.dup(socket_fd))
        quota = self.quota

        def setup(session: ServedJob) -> None:
            client = session.client
            client.modules = self.modules
            self.modules.continue_ids(self.state.get("next_module_id", 1))
            self.memory_beyond.install(client)
            for ptr, size in self.allocations.all():
                client.allocations.add(ptr, size)          # counted already: the same JobMemory
            if quota is not None and quota != self.memory.quota_bytes:
                try:
                    self.memory.set_quota(quota)
                except QuotaBelowUse:
                    pass
            for key, flags, priority, sm_cap in self.streams:
                if not key & PER_THREAD_STREAM_BIT:
                    client.streams.create(key, flags, priority, sm_cap)
            for event_id, timing, *recorded in self.events:     # [id, timing, time on the node's clock]
                client.events.create(event_id, timing, recorded[0] if recorded else None)
            for graph_id, node_count, edge_count, tail in self.graphs:   # after the modules they name
                client.graphs.define(graph_id, parse_graph(client.modules, node_count, edge_count, tail,
                                                           client.check_device_range))
            deferred = self.state.get("deferred")
            if deferred:
                session.defer_error(DeviceError(deferred[0], deferred[1]))
            client.kept_output.extend(self.state.get("kept_output", []))
            session.pending_records.extend((k, t, bytes(p)) for k, t, p in commit["pending"])
            # Last, once nothing here can fail: the job is ours from now on, or the
            # source kept it (tally/server/handover.py) and all of this is undone.
            if not handover.claim(segment, commit.get("owner", 0)):
                raise ImportRefused(f"the source kept the job (its segment is {handover.owner(segment)})")

        try:
            session = server.attach_migrated(conn, segment, self.pid, self.priority, self.program, self.memory,
                                             self.sm_percent, setup)
        except BaseException:
            conn.close()
            segment.close()
            raise
        os.close(socket_fd)
        self._stream_done()
        self._undo.pop_all()
        self.clock.step("commit")
        server.migrations.last_import_steps_ms = self.clock.ms
        log.info("client %d (%s) migrated here: %d allocations, %d modules, %d streams, %d events; ms per step: %s",
                 session.client_id, self.program, len(self.allocations), len(self.modules.loaded()),
                 len(self.streams), len(self.events), self.clock.ms)
        return session

    def _stream_done(self) -> None:
        try:
            self.backend.stream_destroy(self._stream)
        except DeviceError:
            pass
