"""Moving a running job to another tally-server on this node (`tally-server
migrate --client ID --to SOCKET`), the source's side; the target's is
tally/server/migration_import.py.

The job's process keeps its shared segment and its handshake socket: on one
node the target adopts both (the socket and the segment's shared memory go over
as SCM_RIGHTS
descriptor), so the job's client library changes nothing and notices only a pause.
Its device state moves over the target's socket and is restored at the same
device addresses there.

Steps: (1) offer the job to the target, which refuses up front when it cannot
take it (its backend, its free memory, its device, its admission rules); (2)
stop the job's session between two requests and let every piece of work it
queued finish, so nothing of it runs, waits or is owed an answer; (3) stream
its state: each allocation (read from the device chunk by chunk, LZ4-compressed
where that halves it, raw on the socket: tally/server/migration_bytes.py), its
modules (their images, their globals' addresses and
bytes, the ids of their kernels), its virtual memory, pinned and managed memory
(tally/server/migration_memory.py), its streams and events (with when each was
last reached, so elapsed times across the move work where the clocks allow:
tally/server/client/event_clock.py), its session's deferred error and quota;
(4) hand the socket and segment over with the requests taken off its ring and
not handled yet. Who serves the job after that is decided by the segment's
owner word (tally/server/handover.py), not by the target's answer, which may be
lost: until the target claims the job it is intact here, and any failure (the
target refuses or dies, a copy fails, the answer does not come and the target
had not claimed) releases the session and the job runs on here, the caller
learning why; a target that claimed the job and died before serving it gives
it back the same way. Once the target has it, the source frees the job's
device memory and forgets it without touching the segment the target now
serves.

What cannot move (refused with the reason): memory or events shared with
another job through IPC (the other job holds its addresses on this server), a
link or a module upload under way (its inputs are the session's, not yet a
module), texture and surface objects (the job holds their handles), a suspended or
paused job, and an error the job has not been told yet.
"""
from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack

from tally import protocol
from tally.protocol.errors import DeviceError
from tally.protocol.framing import recv_record, send_record
from tally.protocol.messages_generated import ControlReply, MigrateCommit, MigrateOffer
from tally.scheduler.executor import ClientGone
from tally.server import handover, migration_memory
from tally.server.job import ServedJob
from tally.server.lifecycle import Refused, Request
from tally.server.migration_bytes import ByteSender, send_piece
from tally.server.ports import ExecutorPort
from tally.server.step_clock import StepClock
from tally.server.suspend import HOLD_TIMEOUT_S, IDLE_TIMEOUT_S
from tally.units import format_bytes

log = logging.getLogger("tally.server")

CONNECT_TIMEOUT_S = 5.0
# The target answers an offer at once; a commit after restoring what it received.
REPLY_TIMEOUT_S = 120.0


class MigrationRefused(Exception):
    """The job stays on the source, intact; the message says why."""


@dataclass
class MigrationRecord:
    """What status shows about migrations out of this server."""

    migrations: int = 0
    failed: int = 0
    last_migration_ms: float = 0.0
    last_migration_bytes: int = 0
    last_failure: str = ""
    # The last migration's steps (connect, offer, hold, quiesce, transfer, commit, release), in ms.
    last_steps_ms: dict = field(default_factory=dict)
    # The last migration into this server, the target's steps (tally/server/migration_import.py).
    last_import_steps_ms: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"migrations": self.migrations, "migrations_failed": self.failed,
                "last_migration_ms": round(self.last_migration_ms, 3),
                "last_migration_bytes": self.last_migration_bytes, "last_migration_failure": self.last_failure,
                "last_migration_steps_ms": dict(self.last_steps_ms),
                "last_import_steps_ms": dict(self.last_import_steps_ms)}


def name(session: ServedJob) -> str:
    return f"client {session.client_id} ({session.program}, {protocol.priority_name(session.priority)})"


class MigrationHost(Protocol):
    backend: Any
    description: Any
    executor: ExecutorPort
    ipc: Any                           # IpcRegistry: memory or events shared with another job stay
    levers: Any                        # SmLevers: the job's SM share goes with it
    migrations: MigrationRecord
    saved_memory: Any                  # SavedMemoryStore: the chunk buffers bytes go through


def migrate(server: MigrationHost, session: ServedJob, target: str) -> str:
    record = server.migrations
    try:
        return _migrate(server, session, target)
    except MigrationRefused as e:
        record.failed += 1
        record.last_failure = str(e)
        raise


def _migrate(server: MigrationHost, session: ServedJob, target: str) -> str:
    clock = StepClock()
    started = clock.started
    life = session.life
    _check_movable(server, session)
    client = session.client
    footprint = sum(size for _p, size in client.allocations.all()) + sum(
        size for m in client.modules.loaded() for _p, size in server.backend.module_memory(m.backend_module).values())
    footprint += migration_memory.device_bytes(client)
    sock = _connect(target)
    clock.step("connect")
    try:
        _ask(sock, MigrateOffer.KIND, _offer(server, session, footprint), "offer")
        clock.step("offer")
        try:
            life.begin(Request.MIGRATE)     # waits for a suspend or resume under way
        except Refused as e:
            raise MigrationRefused(f"{name(session)} cannot move: {e}") from None
        handed_over = False
        try:
            if not session.hold.hold(HOLD_TIMEOUT_S):
                raise MigrationRefused(f"{name(session)} is still handling a request after {HOLD_TIMEOUT_S:g} s; "
                                       f"try again")
            clock.step("hold")
            try:
                _quiesce(server, session)
                clock.step("quiesce")
                sent = _send_state(server, session, sock)
                clock.step("transfer")
                _commit(session, sock)
                clock.step("commit")
                session.stop_replies()      # the target serves the segment from now on
                handed_over = True
            except BaseException:
                session.hold.release()      # the job runs on here
                raise
        finally:
            life.finish(handed_over)
        # The source frees the job's device memory and forgets it, leaving the
        # segment and the socket (the target's now) alone; done before the answer, so
        # a migration straight back finds its addresses free here.
        session.request_close(f"migrated to {target}")
        session.close()
        clock.step("release")
    except (OSError, ConnectionError, protocol.ProtocolError) as e:
        raise MigrationRefused(f"{name(session)} stays here: the transfer to {target} failed ({e})") from None
    except ClientGone:
        raise MigrationRefused(f"{name(session)} left during its migration") from None
    except DeviceError as e:
        raise MigrationRefused(f"{name(session)} stays here: reading its device state failed ({e})") from None
    finally:
        sock.close()
    elapsed_ms = (time.monotonic() - started) * 1000
    record = server.migrations
    record.migrations += 1
    record.last_migration_ms = elapsed_ms
    record.last_migration_bytes = sent
    record.last_steps_ms = clock.ms
    log.info("%s migrated to %s: %s of device state in %.1f ms", name(session), target, format_bytes(sent),
             elapsed_ms)
    return f"{name(session)} migrated to {target}: {format_bytes(sent)} of device state moved in {elapsed_ms:.0f} ms"


def _check_movable(server: MigrationHost, session: ServedJob) -> None:
    backend = server.backend
    if not backend.traits.migrates_jobs:
        raise MigrationRefused(f"the {backend.kind} backend cannot move a job's state to another server "
                               f"(it cannot place the job's memory and its modules' globals at the same addresses "
                               f"there; the cuda backend can with tally-server --suspendable)")
    client = session.client
    why = []
    try:
        session.life.answer(Request.MIGRATE)
    except Refused as e:
        why.append(str(e))
    if server.ipc.opened_by(session.client_id) or server.ipc.opened_exports_of(session.client_id) or \
            client.events.has_opened():
        why.append("it shares memory or events with another job (IPC)")
    if server.ipc.physical.involves(session.client_id):
        why.append("it shares virtual-memory physical memory with another job (a shareable handle)")
    if client.links or client.staging:
        why.append("a link or a module upload is under way")
    why += _pinned_modules(backend, client)
    if client.device_heap.in_use:
        why.append("its kernels have used their device heap (malloc/free), which does not move")
    if len(client.textures):
        why.append(f"it holds {len(client.textures)} texture or surface objects, whose handles its kernels "
                   f"hold and another server would give other values")
    if why:
        raise MigrationRefused(f"{name(session)} cannot move: {'; '.join(why)}")


def _pinned_modules(backend, client) -> list[str]:
    """Modules whose globals the backend cannot place elsewhere (the cuda backend's
    cubin-only modules with variables, say), each with the backend's reason."""
    return [f"module {m.module_id}'s globals cannot move ({why})" for m in client.modules.loaded()
            if (why := backend.module_unmovable(m.backend_module)) is not None]


def _connect(target: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(target)
    except OSError as e:
        sock.close()
        raise MigrationRefused(f"no tally-server answers on {target} ({e}); nothing changed") from None
    sock.settimeout(REPLY_TIMEOUT_S)
    return sock


def _ask(sock, kind: int, payload: bytes, what: str) -> str:
    send_record(sock, kind, payload)
    reply_kind, _tag, reply = recv_record(sock)
    if reply_kind != ControlReply.KIND:
        raise protocol.ProtocolError(f"the target answered the {what} with kind {reply_kind}")
    answer = ControlReply.decode(reply)
    text = bytes(answer.tail).decode(errors="replace")
    if not answer.ok:
        raise MigrationRefused(f"the target refused the {what}: {text}; the job stays here")
    return text


def _offer(server: MigrationHost, session: ServedJob, footprint: int) -> bytes:
    memory = session.client.allocations.memory
    modules = session.client.modules.loaded()
    description = {
        "program": session.program, "pid": session.pid, "priority": int(session.priority),
        "asked_quota": memory.asked_bytes, "quota": memory.quota_bytes,
        "sm_percent": server.levers.share_of(session.client_id),
        "footprint": footprint, "compute_capability": list(server.description.compute_capability),
        "cubin_only": any(m.source.ptx is None for m in modules),
    }
    return MigrateOffer(tail=msgpack.packb(description)).encode()


def _quiesce(server: MigrationHost, session: ServedJob) -> None:
    """Every request the job handed over so far has run and been answered."""
    cid = session.client_id
    if not server.executor.wait_client_idle(cid, IDLE_TIMEOUT_S, drain=True):
        raise MigrationRefused(f"{name(session)}'s queued work did not finish within {IDLE_TIMEOUT_S:g} s")
    if not session.client.blocking.wait_idle(IDLE_TIMEOUT_S):
        raise MigrationRefused(f"{name(session)} waits on something that did not come within {IDLE_TIMEOUT_S:g} s")
    if server.executor.pending_errors(cid):
        raise MigrationRefused(f"{name(session)} has an error it was not told yet; try again after its next "
                               f"synchronization")


def _send_state(server: MigrationHost, session: ServedJob, sock) -> int:
    """Stream the job's state; the device bytes sent."""
    backend, client = server.backend, session.client
    sender = ByteSender(backend, sock, server.saved_memory)
    send_bytes = sender.send
    try:
        for ptr, size in client.allocations.all():
            if ptr in client.managed:
                continue                # its bytes are the job's shared memory: migration_memory.py
            send_piece(sock, {"op": "alloc", "ptr": ptr, "size": size})
            send_bytes(ptr, size)
        for module in client.modules.loaded():
            globals_ = backend.module_memory(module.backend_module)
            send_piece(sock, {"op": "module", "id": module.module_id, "image": module.source.original,
                          "jit_record": module.jit_record,
                          "globals": {n: ptr for n, (ptr, _s) in globals_.items()},
                          "functions": {fn.name: fn.function_id for fn in module.functions.values()},
                          "resolved": {n: list(v) for n, v in module.globals.items()}})
            for ptr, size in globals_.values():
                send_bytes(ptr, size)
        migration_memory.send(client, sock, sender)
    finally:
        sender.close()
    send_piece(sock, {"op": "streams", "list": client.streams.describe()})
    send_piece(sock, {"op": "events", "list": client.events.describe()})
    send_piece(sock, {"op": "graphs", "list": client.graphs.describe()})
    deferred = session.deferred_error
    send_piece(sock, {"op": "session", "next_module_id": client.modules.next_id(),
                  "deferred": None if deferred is None else [deferred.code, deferred.message],
                  "kept_output": list(client.kept_output), "quota": client.allocations.memory.quota_bytes})
    return sender.sent


def _commit(session: ServedJob, sock) -> str:
    """Hand the job's socket over, then its segment and unhandled requests. Returns
    how it ended when the target serves the job now; raises MigrationRefused when
    the job stays here (released by the caller). Which of the two is decided by the
    segment's owner word (tally/server/handover.py), not by the target's answer,
    which may be lost."""
    segment = session.segment
    try:
        handing = handover.offer(segment)
    except handover.NotOwner as e:
        raise MigrationRefused(f"{name(session)} stays here: {e}") from None
    try:
        # The target reads the next byte with the job's socket and its segment's shared
        # memory attached (the segment's name was unlinked once the job attached).
        send_piece(sock, {"op": "handover"})
        socket.send_fds(sock, [b"F"], [session.connection.fileno(), segment.shm_fd])
        commit = {"segment": segment.name, "owner": handing.word,
                  "pending": [[kind, tag, bytes(payload)] for kind, tag, payload in session.pending_records]}
        return _ask(sock, MigrateCommit.KIND, MigrateCommit(tail=msgpack.packb(commit)).encode(), "commit")
    except BaseException as e:
        settled = handover.settle(segment, handing)
        if settled.here:
            log.info("%s stays here: %s", name(session), settled.why)
            raise
        log.warning("%s: the target's answer to the commit did not come (%s), but %s", name(session),
                    e or type(e).__name__, settled.why)
        return settled.why
