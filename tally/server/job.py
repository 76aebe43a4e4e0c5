"""A job as the server's parts see it: what a request handler may use (`Job`), what
the subsystems that act on a whole job may use (`ServedJob`), and the jobs a
server serves (`SessionDirectory`).

Session (tally/server/session.py) is the one implementation of both; handlers
(tally/server/handlers/) take a `Job`, the subsystems (control, suspend,
migration, eviction, drain, device faults, SysProbe, the time slicer, status) a
`ServedJob`. Neither reaches the server through it: what a job's requests need
of the server is in `job.services` (ports.JobServices), and what a subsystem
needs of the server is in the Protocol its own module declares.
tests/test_corridors.py checks that every use goes through a declared member.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from tally.protocol.errors import DeviceError
from tally.server.client.job_channel import JobChannel
from tally.server.client.state import ClientState
from tally.server.lifecycle import Lifecycle


class Job(JobChannel, Protocol):
    """What a request handler may use of the job it serves."""

    program: str
    backend: Any                    # the DeviceBackend (the same as services.backend)
    client: ClientState             # what the job created through the driver API

    @property
    def download_arena(self) -> Any:
        """The job's download arena (bytes copied to the host go there)."""

    def take_upload(self, offset: int, nbytes: int) -> bytes: ...
    def request_close(self, reason: str) -> None: ...


class ServedJob(Job, Protocol):
    """What the subsystems that act on a whole job may use: its life, its session's
    thread and replies, its segment and socket, its release."""

    life: Lifecycle
    hold: Any                       # request_hold.RequestHold: its thread stops between two requests
    segment: Any                    # its shared segment (rings, arenas, owner word)
    connection: Any                 # its handshake socket
    pending_records: Any            # requests taken off its ring and not handled yet
    started_at: float
    data_plane: Any
    work_dropped_at_eviction: bool | None

    @property
    def counters(self) -> Any: ...
    @property
    def closing(self) -> bool: ...
    @property
    def closing_event(self) -> threading.Event: ...

    def start(self, arrived_by_migration: bool = ...) -> None: ...
    def add_cleanup(self, fn: Callable[[], None]) -> None: ...
    def has_requests_waiting(self) -> bool: ...
    def handle(self, kind: int, tag: int, payload: bytes) -> None: ...
    def release_if_evicted(self) -> None: ...
    def evict(self, reason: str) -> bool: ...
    def wait_released(self, timeout: float) -> bool: ...
    def stop_replies(self) -> None: ...
    def hand_over(self) -> None: ...
    def close(self) -> None: ...
    def abandon(self, reason: str) -> None: ...
    def gone(self) -> bool: ...
    def fail_device(self, error: DeviceError) -> None: ...
    def wait_quiet(self, timeout_s: float) -> bool: ...
    def drop_device_state(self) -> None: ...


class SessionDirectory(Protocol):
    """The jobs a server serves now."""

    def attached_sessions(self) -> list[ServedJob]:
        """Jobs attached now (not those whose release is under way)."""

    def live_sessions(self) -> list[ServedJob]:
        """Every job not closed yet, attached or leaving."""

    def session_of(self, client_id: int) -> ServedJob | None: ...
