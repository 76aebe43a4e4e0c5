"""A job as the state it creates sees it (tally/server/client/): who it is, how its
requests are answered and failed, and the server-wide services its requests use.

The session that serves the job (tally/server/session.py) is the one
implementation; this Protocol is what the modules below it may call, so none
reaches back into the session or the server (tests/test_corridors.py).
"""
from __future__ import annotations

from typing import Any, Protocol

from tally.protocol import Priority
from tally.protocol.errors import DeviceError
from tally.server.ports import JobServices


class JobChannel(Protocol):
    client_id: int
    pid: int
    priority: Priority
    services: JobServices
    current_request: str                  # the request its session thread is handling (for messages)
    deferred_error: DeviceError | None     # what its next synchronizing call returns

    @property
    def closed(self) -> bool:
        """Its session released everything (or is doing so): nobody to answer."""

    @property
    def fast(self) -> Any:
        """What its C++ data plane must know of its state (client/fast_path.py); None: the Python plane."""

    def reply(self, tag: int, message: Any) -> None: ...
    def answer(self, tag: int, result: Any) -> None: ...
    def reply_error(self, tag: int, error: DeviceError) -> None: ...
    def fail(self, tag: int, request: str, error: DeviceError) -> None: ...
    def push_completion(self, kind: int, tag: int, payload: bytes) -> None: ...
    def defer_error(self, error: DeviceError) -> None: ...
    def take_deferred_error(self) -> DeviceError | None: ...
