"""Operator control of running jobs: `tally-server set`, `pause`, `suspend`, `resume`,
`migrate` and `evict` (suspending: tally/server/suspend.py; migrating: tally/server/migration.py;
evicting: tally/server/eviction.py).

Each command is one request on the server's socket (ClientSet, ClientPause,
ClientResume, ClientEvict), answered by one ControlReply: `ok` and a sentence
saying what changed, or why nothing did. Every executor call these commands make
is in this file (set_sm_percent, pause_client, resume_client) or, for an
eviction, in the evicted job's session (tally/server/eviction.py).

Decisions:
- A memory quota applies to the job's future allocations. One below what the
  job holds now is refused: tally cannot take memory back from a running job,
  and a job shown a quota it is already over would see negative free memory.
  The operator may give any quota up to the device's memory, above the server's
  --be-memory-quota too (that flag is a default, the operator decides); the
  memory reserved for high-priority jobs still holds.
- Pausing holds all of the job's work (kernels, copies, event records): nothing
  starts and nothing is lost, its running PTB kernels are preempted and resume
  where they stopped, and its synchronizing calls wait until it is resumed.
  Pausing a high-priority job needs `--force`: it is the job tally exists to
  protect. Pausing a paused job, or resuming a running one, changes nothing
  and says so.
- Evicting needs a reason (the job prints it; an orchestrator's log shows it),
  and evicting a high-priority job needs `--force`, as pausing does. Evicting
  an evicted job changes nothing and says so.
"""
from __future__ import annotations

import contextlib
import logging
import math
from typing import Protocol

from tally import protocol
from tally.cluster.memory_limits import QuotaBelowUse, to_bytes
from tally.protocol.messages_generated import (ClientEvict, ClientMigrate, ClientPause, ClientResume, ClientSet,
                                               ClientSuspend, ControlReply)
from tally.scheduler.executor import ClientGone
from tally.server import eviction, migration
from tally.server import suspend as suspension
from tally.server.job import ServedJob, SessionDirectory
from tally.server.lifecycle import JobState, Refused, Request
from tally.units import format_bytes

log = logging.getLogger("tally.server")

REQUESTS = frozenset({ClientSet.KIND, ClientPause.KIND, ClientResume.KIND, ClientSuspend.KIND, ClientMigrate.KIND,
                      ClientEvict.KIND})
REASON_LIMIT = 1000          # characters of an eviction's reason
# What `resume` means a suspend's undoing for (the lifecycle waits while one is under way).
SUSPENDED_STATES = frozenset({JobState.SUSPENDING, JobState.SUSPENDED, JobState.RESUMING})


class Refusal(Exception):
    """The request cannot be carried out; the message says why and what to do."""


class ControlHost(suspension.SuspendHost, migration.MigrationHost, eviction.EvictionHost, SessionDirectory, Protocol):
    """What operator requests use: the jobs, and what each command takes."""


def answer(server: ControlHost, kind: int, payload: bytes) -> ControlReply:
    """The reply to one control request (any failure is a refusal with its reason)."""
    try:
        if kind == ClientSet.KIND:
            done = set_limits(server, ClientSet.decode(payload))
        elif kind == ClientPause.KIND:
            done = pause(server, ClientPause.decode(payload))
        elif kind == ClientSuspend.KIND:
            done = suspend(server, ClientSuspend.decode(payload))
        elif kind == ClientMigrate.KIND:
            msg = ClientMigrate.decode(payload)
            done = migration.migrate(server, _session(server, msg.client_id), bytes(msg.tail).decode())
        elif kind == ClientEvict.KIND:
            done = evict(server, ClientEvict.decode(payload))
        else:
            done = resume(server, ClientResume.decode(payload))
    except (Refusal, suspension.SuspendRefused, migration.MigrationRefused, protocol.ProtocolError) as e:
        log.warning("operator request refused: %s", e)
        return ControlReply(ok=0, tail=str(e).encode())
    except Exception as e:           # the server carries on; the operator learns it failed
        log.exception("operator request %s failed", protocol.BY_KIND[kind].message.name)
        return ControlReply(ok=0, tail=f"tally-server failed to carry it out ({type(e).__name__}: {e}); "
                                       f"see the server's log".encode())
    log.info("operator: %s", done)
    return ControlReply(ok=1, tail=done.encode())


def _session(server: ControlHost, client_id: int):
    attached = server.attached_sessions()
    for session in attached:
        if session.client_id == client_id:
            return session
    listed = ", ".join(str(s.client_id) for s in attached) or "none"
    raise Refusal(f"no client {client_id} is attached (attached now: {listed}); `tally-server status` lists them")


def _name(session: ServedJob) -> str:
    return f"client {session.client_id} ({session.program}, {protocol.priority_name(session.priority)})"


def set_limits(server: ControlHost, msg: ClientSet) -> str:
    session = _session(server, msg.client_id)
    _refuse_evicted(session)
    quota = _quota(server, msg)
    sm_percent = msg.sm_percent
    if sm_percent and not (math.isfinite(sm_percent) and 0 < sm_percent <= 100):
        raise Refusal(f"SM share {sm_percent!r}% is not a percentage in (0, 100]")
    if quota is None and not sm_percent:
        raise Refusal("nothing to set: give --sm-percent and/or --memory-quota")
    changes = []
    if quota is not None:
        try:
            old = session.client.allocations.memory.set_quota(quota)
        except QuotaBelowUse as e:
            raise Refusal(f"{_name(session)}: memory quota {format_bytes(quota)} refused: {e}") from None
        changes.append(f"memory quota {'none' if old is None else format_bytes(old)} -> {format_bytes(quota)}")
    if sm_percent:
        granted = _executor_call(server.executor.set_sm_percent, session, sm_percent)
        server.levers.share_set(session.client_id, session.priority == protocol.Priority.BEST_EFFORT, sm_percent)
        changes.append(f"SM share {sm_percent:g}% ({granted} SMs granted)")
    return f"{_name(session)}: " + "; ".join(changes)


def _quota(server: ControlHost, msg: ClientSet) -> int | None:
    total = server.description.total_memory
    nbytes, percent = msg.memory_quota, msg.memory_quota_percent
    if nbytes and percent:
        raise Refusal("memory quota given both in bytes and as a percentage; give one")
    if percent:
        if not (math.isfinite(percent) and 0 < percent <= 100):
            raise Refusal(f"memory quota {percent!r}% is not a percentage in (0, 100]")
        return to_bytes(float(percent), total)
    if nbytes > total:
        raise Refusal(f"memory quota {format_bytes(nbytes)} is more than the device has ({format_bytes(total)})")
    return nbytes or None


def pause(server: ControlHost, msg: ClientPause) -> str:
    session = _session(server, msg.client_id)
    if session.priority == protocol.Priority.HIGH and not msg.force:
        raise Refusal(f"{_name(session)} is a high-priority job, the one tally protects; pause it only on "
                      f"purpose, with --force")
    with _changing(session, Request.PAUSE) as change:
        if not change.changed:
            return f"{_name(session)} is paused already; nothing changed"
        _executor_call(server.executor.pause_client, session)
    return f"{_name(session)} paused: none of its work starts until `tally-server resume --client " \
           f"{session.client_id}`"


def suspend(server: ControlHost, msg: ClientSuspend) -> str:
    return suspension.suspend(server, _session(server, msg.client_id), force=bool(msg.force))


def resume(server: ControlHost, msg: ClientResume) -> str:
    """Resume a suspended job (its memory comes back; its work goes on unless the
    operator had paused it before), or a paused one."""
    session = _session(server, msg.client_id)
    if session.life.state in SUSPENDED_STATES or session.life.suspension is not None:
        return suspension.resume(server, session)
    with _changing(session, Request.UNPAUSE) as change:
        if not change.changed:
            return f"{_name(session)} is not paused; nothing changed"
        _executor_call(server.executor.resume_client, session)
    return f"{_name(session)} resumed"


def _refuse_evicted(session: ServedJob) -> None:
    if session.life.state is JobState.EVICTED:
        raise Refusal(f"{_name(session)} was evicted ({session.life.evicted_reason}); it holds nothing any more "
                      f"and its calls fail until it exits")


@contextlib.contextmanager
def _changing(session: ServedJob, request: Request):
    """The job's lifecycle carries out `request` (Refused: the operator learns why)."""
    try:
        with session.life.change(request) as change:
            yield change
    except Refused as e:
        raise Refusal(f"{_name(session)}: {e}") from None


def _executor_call(method, session: ServedJob, *args):
    try:
        return method(session.client_id, *args)
    except ClientGone as e:          # the job left meanwhile
        raise Refusal(f"{_name(session)} left while the request was carried out ({e})") from None


def evict(server: ControlHost, msg: ClientEvict) -> str:
    reason = _reason(bytes(msg.tail))
    session = _session(server, msg.client_id)
    if session.priority == protocol.Priority.HIGH and not msg.force:
        raise Refusal(f"{_name(session)} is a high-priority job, the one tally protects; evict it only on "
                      f"purpose, with --force")
    if session.life.state is JobState.EVICTED:
        return f"{_name(session)} was evicted already ({session.life.evicted_reason}); nothing changed"
    held = session.client.allocations.used_bytes
    if not eviction.evict(server, session, reason, eviction.OPERATOR):
        raise Refusal(f"{_name(session)} left while the request was carried out")
    return (f"{_name(session)} evicted: its queued work dropped, its memory ({format_bytes(held)}) freed; "
            f"it was told: {reason}")


def _reason(raw: bytes) -> str:
    """The reason as one printable line (the job prints it on one line)."""
    text = " ".join(raw.decode(errors="replace").split())
    if not text:
        raise Refusal("give a reason with --reason: the evicted job prints it, so whoever reruns it knows why")
    if len(text) > REASON_LIMIT:
        raise Refusal(f"the reason is {len(text)} characters long; give at most {REASON_LIMIT}")
    return text
